// Built with -ffp-contract=off (common/CMakeLists.txt): a fused multiply-add
// would round differently from NVIDIA's generator.
#include "common/curand_cpu.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <string>

namespace rgpu::common::curand {
namespace {

constexpr uint64_t kPhiloxThreads = 65536;
constexpr float k2Pow32Inv = 2.3283064e-10f;
constexpr float k2Pow32Inv2Pi = 2.3283064e-10f * 6.2831855f;
constexpr double k2Pow53Inv = 1.0 / 9007199254740992.0;
constexpr double k2Pi = 6.283185307179586;

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

inline float uniform(uint32_t x) { return x * k2Pow32Inv + (k2Pow32Inv / 2.0f); }
inline double uniformDouble(uint32_t x, uint32_t y) {
  const uint64_t z = static_cast<uint64_t>(x) ^ (static_cast<uint64_t>(y) << (53 - 32));
  return z * k2Pow53Inv + (k2Pow53Inv / 2.0);
}
// Box-Muller on two words: (sin, cos) times the radius.
inline void boxMuller(uint32_t x, uint32_t y, float* a, float* b) {
  const float u = uniform(x);
  const float v = y * k2Pow32Inv2Pi + (k2Pow32Inv2Pi / 2.0f);
  const float s = sqrtf(-2.0f * logf(u));
  *a = sinf(v) * s;
  *b = cosf(v) * s;
}
inline void boxMullerDouble(const Words& r, double* a, double* b) {
  const double u = uniformDouble(r.w[0], r.w[1]), v = uniformDouble(r.w[2], r.w[3]);
  const double s = std::sqrt(-2.0 * std::log(u));
  *a = std::sin(k2Pi * v) * s;
  *b = std::cos(k2Pi * v) * s;
}

// Value `i` of a 32-bit-wide distribution, from its thread's block.
float floatValue(const Words& r, unsigned k, Dist d, double mean, double stddev) {
  if (d == Dist::kUniform) return uniform(r.w[k]);
  float v[2];
  boxMuller(r.w[k & ~1u], r.w[(k & ~1u) + 1], &v[0], &v[1]);
  const float n = v[k & 1] * static_cast<float>(stddev) + static_cast<float>(mean);
  return d == Dist::kLogNormal ? expf(n) : n;
}

// Values j' < x with (j' / 4) % threads == t (whole groups, and the part of x's own).
uint64_t valuesBelow(uint64_t t, uint64_t x) {
  const uint64_t q = x / 4;
  uint64_t n = 4 * (q / kPhiloxThreads + (q % kPhiloxThreads > t ? 1 : 0));
  if (q % kPhiloxThreads == t) n += x % 4;
  return n;
}

// The word of its thread's sequence value `j` is drawn from (curand_cpu.h).
struct Layout {
  uint64_t g0;     // the offset's group
  uint32_t words;  // per value
  uint64_t word(uint64_t j) const {
    const uint64_t t = (j / 4) % kPhiloxThreads;
    const uint64_t first = g0 + (t + kPhiloxThreads - g0 % kPhiloxThreads) % kPhiloxThreads;
    return 4 * (first / kPhiloxThreads) + words * (valuesBelow(t, j) - valuesBelow(t, 4 * g0));
  }
};

double doubleValue(uint64_t seed, const Layout& layout, uint64_t j, Dist d, double mean, double stddev) {
  const uint64_t word = layout.word(j), thread = (j / 4) % kPhiloxThreads;
  const Words r = philox(seed, word / 4, thread);
  const bool high = (word % 4) != 0;
  if (d == Dist::kUniformDouble) return high ? uniformDouble(r.w[2], r.w[3]) : uniformDouble(r.w[0], r.w[1]);
  double v[2];
  boxMullerDouble(r, &v[0], &v[1]);
  const double x = v[high ? 1 : 0] * stddev + mean;
  return d == Dist::kLogNormalDouble ? std::exp(x) : x;
}

}  // namespace

Status supported(int32_t rng) {
  if (rng == kPhilox4x32_10) return Status::ok();
  return Status(err::kNotSupported, "cuRAND generator type " + std::to_string(rng) +
                                        " is not implemented by rgpu (Philox4x32-10, 161, is)");
}

Status generate(const Fill& f, void* out, uint64_t count) {
  RGPU_TRY(supported(f.rng));
  if (f.position < f.offset) return Status(err::kInvalidValue, "a cuRAND position before the generator's offset");
  const uint32_t words = valueWords(f.dist);
  const Layout layout{f.offset / 4, words};
  auto* bytes = static_cast<uint8_t*>(out);
  // 32-bit values: four a block, each block computed once.
  for (uint64_t j = 0; j < count;) {
    const uint64_t i = f.position + j;
    if (words == 2) {
      const double v = doubleValue(f.seed, layout, i, f.dist, f.mean, f.stddev);
      std::memcpy(bytes + j * 8, &v, 8);
      ++j;
    } else {
      const uint64_t b = i / 4;
      const Words r = philox(f.seed, b / kPhiloxThreads, b % kPhiloxThreads);
      for (unsigned k = static_cast<unsigned>(i % 4); k < 4 && j < count; ++k, ++j) {
        if (f.dist == Dist::kBits32) {
          std::memcpy(bytes + j * 4, &r.w[k], 4);
        } else {
          const float v = floatValue(r, k, f.dist, f.mean, f.stddev);
          std::memcpy(bytes + j * 4, &v, 4);
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace rgpu::common::curand
