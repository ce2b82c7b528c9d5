// Built with -ffp-contract=off (common/CMakeLists.txt): a fused multiply-add
// would round differently from NVIDIA's generator.
#include "common/curand_cpu.h"

// NVIDIA's XORWOW jump matrices, from the toolkit's header (host copies).
#include <cuda_runtime_api.h>
#include <curand_precalc.h>

#include <cmath>
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>
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

// A standard normal value as `d` asks for it: scaled, shifted, and for log-normal, exp of that.
inline float shaped(float v, Dist d, double mean, double stddev) {
  const float n = v * static_cast<float>(stddev) + static_cast<float>(mean);
  return d == Dist::kLogNormal ? expf(n) : n;
}
inline double shaped(double v, Dist d, double mean, double stddev) {
  const double n = v * stddev + mean;
  return d == Dist::kLogNormalDouble ? std::exp(n) : n;
}

// Value `i` of a 32-bit-wide distribution, from its thread's block.
float floatValue(const Words& r, unsigned k, Dist d, double mean, double stddev) {
  if (d == Dist::kUniform) return uniform(r.w[k]);
  float v[2];
  boxMuller(r.w[k & ~1u], r.w[(k & ~1u) + 1], &v[0], &v[1]);
  return shaped(v[k & 1], d, mean, stddev);
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
  return shaped(v[high ? 1 : 0], d, mean, stddev);
}


// ---- XORWOW ----------------------------------------------------------------
// 4096 generators, generator i started i * 2^67 draws into the seed's
// sequence. A value's slot (one value, or a Box-Muller pair of normals) is
// offset + (j - offset) / values-per-slot; slot s is generator s % 4096's.
// A generator starts the call at the draw of its first slot's row (its
// 32-bit layout) and then takes each of its slots' draws in order.
struct XorwowState {
  uint32_t v[5];
  uint32_t d;
};

XorwowState xorwowInit(uint64_t seed) {
  const uint32_t s0 = static_cast<uint32_t>(seed) ^ 0xaad26b49u, s1 = static_cast<uint32_t>(seed >> 32) ^ 0xf7dcefddu;
  const uint32_t t0 = 1099087573u * s0, t1 = 2591861531u * s1;
  return {{123456789u + t0, 362436069u ^ t0, 521288629u + t1, 88675123u ^ t1, 5783321u + t0}, 6615241u + t1 + t0};
}

// v = M v over GF(2) (M: 160 x 160 bits, a row of five words per input bit).
void matvec(uint32_t* v, const unsigned int* m) {
  uint32_t r[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < 5; ++i)
    for (int b = 0; b < 32; ++b)
      if (v[i] & (1u << b))
        for (int k = 0; k < 5; ++k) r[k] ^= m[5 * (i * 32 + b) + k];
  std::memcpy(v, r, sizeof r);
}

// `x` draws ahead, by the 4^m-step matrices.
void xorwowSkip(XorwowState& s, uint64_t x) {
  // (A 64-bit count has 32 digits in base 4: one matrix each.)
  for (uint64_t p = x, m = 0; p; p >>= PRECALC_BLOCK_SIZE, ++m) {
    for (unsigned t = 0; t < (p & PRECALC_BLOCK_MASK); ++t) matvec(s.v, precalc_xorwow_offset_matrix_host[m]);
  }
  s.d += 362437u * static_cast<uint32_t>(x);
}

inline uint32_t xorwowNext(XorwowState& s) {
  const uint32_t t = s.v[0] ^ (s.v[0] >> 2);
  s.v[0] = s.v[1];
  s.v[1] = s.v[2];
  s.v[2] = s.v[3];
  s.v[3] = s.v[4];
  s.v[4] = (s.v[4] ^ (s.v[4] << 4)) ^ (t ^ (t << 1));
  s.d += 362437;
  return s.v[4] + s.d;
}

// The 4096 generators' starting states of a seed (the last seed's kept: ~4 ms to make).
std::shared_ptr<const std::vector<XorwowState>> xorwowStarts(uint64_t seed) {
  static std::mutex mu;
  static uint64_t cached_seed = 0;
  static std::shared_ptr<const std::vector<XorwowState>> cached;
  std::lock_guard lock(mu);
  if (cached && cached_seed == seed) return cached;
  auto starts = std::make_shared<std::vector<XorwowState>>(kXorwowGenerators);
  (*starts)[0] = xorwowInit(seed);
  for (uint64_t i = 1; i < kXorwowGenerators; ++i) {
    (*starts)[i] = (*starts)[i - 1];
    matvec((*starts)[i].v, precalc_xorwow_matrix_host[0]);  // 2^67 draws on
  }
  cached_seed = seed;
  cached = starts;
  return cached;
}

// Slots s in [a, b) with s % kXorwowGenerators == t.
uint64_t slotsOf(uint64_t t, uint64_t a, uint64_t b) {
  auto below = [t](uint64_t x) { return x / kXorwowGenerators + (x % kXorwowGenerators > t ? 1 : 0); };
  return b > a ? below(b) - below(a) : 0;
}

// Each generator's first draw after the offset: the row of its first slot there.
uint64_t startDraw(uint64_t t, uint64_t offset) {
  return offset / kXorwowGenerators + (t < offset % kXorwowGenerators ? 1 : 0);
}

Status xorwowGenerate(const Fill& f, uint8_t* out, uint64_t count) {
  const Slot slot = xorwowSlot(f.dist);
  const uint64_t per_slot = slot.values, draws_per_slot = slot.draws;
  const uint64_t T = kXorwowGenerators;
  // Each generator's draws at slot `counted` (check() made sure the runs cover all 4096).
  std::vector<uint64_t> counts;
  counts.reserve(T);
  if (f.draws.empty()) {
    for (uint64_t t = 0; t < T; ++t) counts.push_back(startDraw(t, f.offset));
  } else {
    for (auto [n, gens] : f.draws) counts.insert(counts.end(), gens, n);
  }
  auto starts = xorwowStarts(f.seed);
  const uint32_t width = valueBytes(f.dist);
  auto slotOf = [&](uint64_t j) { return f.slot + (j - f.position) / per_slot; };
  const uint64_t first_slot = slotOf(f.position), last_slot = slotOf(f.position + count - 1);
  // Each generator's state at its first slot of this call.
  const uint64_t gens = std::min<uint64_t>(T, last_slot - first_slot + 1);
  std::vector<XorwowState> state(T);
  for (uint64_t k = 0; k < gens; ++k) {
    const uint64_t s = first_slot + k, t = s % T;
    state[t] = (*starts)[t];
    xorwowSkip(state[t], counts[t] + draws_per_slot * slotsOf(t, f.counted, s));
  }
  // Values in order: a slot's draws are taken when its first value (in this call) is.
  std::vector<std::array<uint32_t, 4>> slot_draws(T);
  std::vector<uint64_t> slot_at(T, UINT64_MAX);
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t i = f.position + j, s = slotOf(i), t = s % T;
    if (slot_at[t] != s) {
      for (uint64_t k = 0; k < draws_per_slot; ++k) slot_draws[t][k] = xorwowNext(state[t]);
      slot_at[t] = s;
    }
    const auto& x = slot_draws[t];
    const unsigned k = static_cast<unsigned>((i - f.position) % per_slot);
    uint8_t* o = out + j * width;
    switch (f.dist) {
      case Dist::kBits32: std::memcpy(o, &x[0], 4); break;
      case Dist::kUniform: { const float v = uniform(x[0]); std::memcpy(o, &v, 4); break; }
      case Dist::kUniformDouble: { const double v = uniformDouble(x[0], x[1]); std::memcpy(o, &v, 8); break; }
      case Dist::kNormal: case Dist::kLogNormal: {
        float v[2];
        boxMuller(x[0], x[1], &v[0], &v[1]);
        const float n = shaped(v[k], f.dist, f.mean, f.stddev);
        std::memcpy(o, &n, 4);
        break;
      }
      case Dist::kNormalDouble: case Dist::kLogNormalDouble: {
        double v[2];
        boxMullerDouble(Words{{x[0], x[1], x[2], x[3]}}, &v[0], &v[1]);
        const double n = shaped(v[k], f.dist, f.mean, f.stddev);
        std::memcpy(o, &n, 8);
        break;
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status supported(int32_t rng) {
  if (rng == kPhilox4x32_10 || rng == kXorwow || rng == kPseudoDefault) return Status::ok();
  return Status(err::kNotSupported, "cuRAND generator type " + std::to_string(rng) +
                                        " is not implemented by rgpu (XORWOW, 100 and 101, and Philox4x32-10, 161, are)");
}

Status check(const Fill& f) {
  RGPU_TRY(supported(f.rng));
  if (static_cast<uint8_t>(f.dist) >= kDistCount)
    return Status(err::kInvalidValue, "unknown cuRAND distribution " + std::to_string(static_cast<int>(f.dist)));
  if (f.position < f.offset) return Status(err::kInvalidValue, "a cuRAND position before the generator's offset");
  if (f.rng == kPhilox4x32_10) return Status::ok();
  if (f.counted < f.offset || f.counted > f.slot)
    return Status(err::kInvalidValue, "cuRAND draw counts taken past the call's slot");
  if (f.draws.size() > kMaxDrawRuns) return Status(err::kInvalidValue, "cuRAND draw counts in more than 4096 runs");
  uint64_t gens = 0;
  for (auto& run : f.draws) gens += run.second;
  if (!f.draws.empty() && gens != kXorwowGenerators)
    return Status(err::kInvalidValue, "cuRAND draw counts for " + std::to_string(gens) + " generators, not 4096");
  return Status::ok();
}

Status generate(const Fill& f, void* out, uint64_t count) {
  RGPU_TRY(check(f));
  if (count == 0) return Status::ok();
  if (f.rng != kPhilox4x32_10) return xorwowGenerate(f, static_cast<uint8_t*>(out), count);
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

void XorwowHistory::call(Dist d, uint64_t count, uint64_t offset, Fill& f) {
  const Slot slot = xorwowSlot(d);
  if (!started_) {
    slot_ = counted_ = offset;  // each generator's first slot is its row's at the offset
    draws_ = slot.draws;
    started_ = true;
  } else if (slot.draws != draws_) {
    if (counts_.empty()) {
      counts_.resize(kXorwowGenerators);
      for (uint64_t t = 0; t < kXorwowGenerators; ++t) counts_[t] = startDraw(t, offset);
    }
    for (uint64_t t = 0; t < kXorwowGenerators; ++t) counts_[t] += draws_ * slotsOf(t, counted_, slot_);
    counted_ = slot_;
    draws_ = slot.draws;
  }
  f.slot = slot_;
  f.counted = counted_;
  f.draws.clear();
  for (uint64_t v : counts_) {
    if (!f.draws.empty() && f.draws.back().first == v) ++f.draws.back().second;
    else f.draws.push_back({v, 1});
  }
  slot_ += (count + slot.values - 1) / slot.values;
}

}  // namespace rgpu::common::curand
