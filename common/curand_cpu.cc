// Built with -ffp-contract=off (common/CMakeLists.txt): a fused multiply-add
// would round differently from NVIDIA's generator.
#include "common/curand_cpu.h"

#include <cmath>
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>
#include <string>

#include "common/curand_math.h"

namespace rgpu::common::curand {
namespace {

using namespace math;

struct Words {
  uint32_t w[4];
};

inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Philox4x32-10 of counter {counter, thread} under `seed`.
Words philox(uint64_t seed, uint64_t counter, uint64_t thread) {
  uint32_t c[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                   static_cast<uint32_t>(thread), static_cast<uint32_t>(thread >> 32)};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(0xD2511F53u, c[0], &hi0), lo1 = mulhilo(0xCD9E8D57u, c[2], &hi1);
    const uint32_t n[4] = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    std::memcpy(c, n, sizeof c);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c[0], c[1], c[2], c[3]}};
}

// Philox (curand_cpu.h): group g of four values is thread g % 65536's and
// takes `blocks` blocks from the thread's counter at g: its count at group
// `counted` plus `blocks` for each of its groups since.
Status philoxGenerate(const Fill& f, uint8_t* out, uint64_t count) {
  const uint64_t T = kPhiloxThreads, blocks = valueWords(f.dist);
  std::vector<uint64_t> counts;
  if (!f.draws.empty()) {
    counts.reserve(T);
    for (auto [n, gens] : f.draws) counts.insert(counts.end(), gens, n);
  }
  const uint64_t first = f.offset / 4;
  const uint32_t width = valueBytes(f.dist);
  for (uint64_t j = 0; j < count;) {
    const uint64_t i = f.position + j, g = i / 4, t = g % T;
    const uint64_t c = (counts.empty() ? startDraw(T, t, first) : counts[t]) + blocks * slotsOf(T, t, f.counted, g);
    const Words r[2] = {philox(f.seed, c, t), blocks == 2 ? philox(f.seed, c + 1, t) : Words{}};
    for (unsigned q = static_cast<unsigned>(i % 4); q < 4 && j < count; ++q, ++j) {
      uint8_t* o = out + j * width;
      switch (f.dist) {
        case Dist::kBits32: std::memcpy(o, &r[0].w[q], 4); break;
        case Dist::kBits64: case Dist::kPoisson: break;  // (check() refuses the one, poissonGenerate() takes the other)
        case Dist::kUniform: { const float v = uniform(r[0].w[q]); std::memcpy(o, &v, 4); break; }
        case Dist::kNormal: case Dist::kLogNormal: {
          float v[2];
          boxMuller(r[0].w[q & ~1u], r[0].w[(q & ~1u) + 1], &v[0], &v[1]);
          const float n = shaped(v[q & 1], f.dist, f.mean, f.stddev);
          std::memcpy(o, &n, 4);
          break;
        }
        case Dist::kUniformDouble: {
          const Words& b = r[q / 2];
          const double v = q % 2 ? uniformDouble(b.w[2], b.w[3]) : uniformDouble(b.w[0], b.w[1]);
          std::memcpy(o, &v, 8);
          break;
        }
        case Dist::kNormalDouble: case Dist::kLogNormalDouble: {
          const Words& b = r[q / 2];
          double v[2];
          boxMullerDouble(b.w[0], b.w[1], b.w[2], b.w[3], &v[0], &v[1]);
          const double n = shaped(v[q % 2], f.dist, f.mean, f.stddev);
          std::memcpy(o, &n, 8);
          break;
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status supported(int32_t rng) {
  if (generatorsOf(rng) || rng == kMtgp32 || rng == kMt19937 || isSobol(rng)) return Status::ok();
  return Status(err::kNotSupported, "cuRAND generator type " + std::to_string(rng) +
                                        " is not implemented by rgpu (XORWOW, 100 and 101, MRG32k3a, 121, MTGP32, "
                                        "141, MT19937, 142, Philox4x32-10, 161, and Sobol, 200 to 204, are)");
}

Status check(const Fill& f) {
  RGPU_TRY(supported(f.rng));
  if (static_cast<uint8_t>(f.dist) >= kDistCount)
    return Status(err::kInvalidValue, "unknown cuRAND distribution " + std::to_string(static_cast<int>(f.dist)));
  if (f.position < f.offset) return Status(err::kInvalidValue, "a cuRAND position before the generator's offset");
  if (!takesOffset(f.rng) && f.offset)
    return Status(err::kInvalidValue, "an offset for a cuRAND MTGP32 or MT19937 generator");
  if (f.seeded && f.rng != kXorwow && f.rng != kPseudoDefault)
    return Status(err::kInvalidValue, "the SEEDED ordering for a cuRAND generator other than XORWOW");
  if (f.dist == Dist::kPoisson) RGPU_TRY(poissonLambdaCheck(f.lambda));
  if (isSobol(f.rng)) return sobolCheck(f);
  if (f.dist == Dist::kBits64) return Status(err::kInvalidValue, "64-bit values of a pseudo-random generator");
  if (f.rng == kMtgp32 || f.rng == kMt19937) return Status::ok();
  return slotsCheck(f);
}

Status generate(const Fill& f, void* out, uint64_t count) {
  RGPU_TRY(check(f));
  if (count == 0) return Status::ok();
  if (f.dist == Dist::kPoisson) return poissonGenerate(f, static_cast<uint8_t*>(out), count);
  if (f.rng == kPhilox4x32_10) return philoxGenerate(f, static_cast<uint8_t*>(out), count);
  if (f.rng == kMtgp32) return mtgpGenerate(f, static_cast<uint8_t*>(out), count);
  if (f.rng == kMt19937) return mt19937Generate(f, static_cast<uint8_t*>(out), count);
  if (isSobol(f.rng)) return sobolGenerate(f, static_cast<uint8_t*>(out), count);
  return slotsGenerate(f, static_cast<uint8_t*>(out), count);
}

}  // namespace rgpu::common::curand
