// cuRAND's generators of slots on the CPU, bit for bit (common/curand_cpu.h):
// XORWOW (4096 generators) and MRG32k3a (81920). Built with
// -ffp-contract=off (common/CMakeLists.txt), as curand_cpu.cc.
//
// A generator of slots is T generators of one sequence, generator i started
// i subsequences in. A value's slot (one value, or a Box-Muller pair of
// normals) is slot + (j - position) / values-per-slot; slot s is generator
// s % T's. A generator starts a call at the draw of its first slot's row (the
// offset's row, or the next) plus the draws its earlier slots took, and then
// takes each of its slots' draws in order. The starting states of the last
// seed are kept per engine (making 81920 MRG32k3a states takes a few ms).
#include <cuda_runtime_api.h>
#include <curand_mrg32k3a.h>
#include <curand_precalc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/curand_cpu.h"
#include "common/curand_math.h"

namespace rgpu::common::curand {
namespace {

// ---- XORWOW ------------------------------------------------------------------
struct Xorwow {
  static constexpr uint64_t kGenerators = kXorwowGenerators;
  using Draw = uint32_t;
  struct State {
    uint32_t v[5];
    uint32_t d;
  };
  using Jump = uint64_t;  // the draws: applied by the toolkit's base-4 jump matrices

  static State init(uint64_t seed) {
    const uint32_t s0 = static_cast<uint32_t>(seed) ^ 0xaad26b49u, s1 = static_cast<uint32_t>(seed >> 32) ^ 0xf7dcefddu;
    const uint32_t t0 = 1099087573u * s0, t1 = 2591861531u * s1;
    return {{123456789u + t0, 362436069u ^ t0, 521288629u + t1, 88675123u ^ t1, 5783321u + t0}, 6615241u + t1 + t0};
  }
  // v = M v over GF(2) (M: 160 x 160 bits, a row of five words per input bit).
  static void matvec(uint32_t* v, const unsigned int* m) {
    uint32_t r[5] = {0, 0, 0, 0, 0};
    for (int i = 0; i < 5; ++i)
      for (int b = 0; b < 32; ++b)
        if (v[i] & (1u << b))
          for (int k = 0; k < 5; ++k) r[k] ^= m[5 * (i * 32 + b) + k];
    std::memcpy(v, r, sizeof r);
  }
  static void nextGenerator(State& s) { matvec(s.v, precalc_xorwow_matrix_host[0]); }  // 2^67 draws on
  static Jump jump(uint64_t x) { return x; }
  static void apply(const Jump& x, State& s) {
    // (A 64-bit count has 32 digits in base 4: one matrix each.)
    for (uint64_t p = x, m = 0; p; p >>= PRECALC_BLOCK_SIZE, ++m) {
      for (unsigned t = 0; t < (p & PRECALC_BLOCK_MASK); ++t) matvec(s.v, precalc_xorwow_offset_matrix_host[m]);
    }
    s.d += 362437u * static_cast<uint32_t>(x);
  }
  static Draw next(State& s) {
    const uint32_t t = s.v[0] ^ (s.v[0] >> 2);
    s.v[0] = s.v[1];
    s.v[1] = s.v[2];
    s.v[2] = s.v[3];
    s.v[3] = s.v[4];
    s.v[4] = (s.v[4] ^ (s.v[4] << 4)) ^ (t ^ (t << 1));
    s.d += 362437;
    return s.v[4] + s.d;
  }
  // curand_normal's pair of floats from two draws (sin, cos), as _curand_box_muller.
  static void normalPair(const Draw* x, float* a, float* b) { math::boxMuller(x[0], x[1], a, b); }
  // Value k of a slot of draws `x`, as curand_kernel.h computes it for XORWOW.
  static void value(Dist d, const Draw* x, unsigned k, double mean, double stddev, uint8_t* o) {
    switch (d) {
      case Dist::kBits32: std::memcpy(o, &x[0], 4); break;
      case Dist::kBits64: case Dist::kPoisson: break;  // (check() refuses the one, poissonGenerate() takes the other)
      case Dist::kUniform: { const float v = math::uniform(x[0]); std::memcpy(o, &v, 4); break; }
      case Dist::kUniformDouble: { const double v = math::uniformDouble(x[0], x[1]); std::memcpy(o, &v, 8); break; }
      case Dist::kNormal: case Dist::kLogNormal: {
        float v[2];
        normalPair(x, &v[0], &v[1]);
        const float n = math::shaped(v[k], d, mean, stddev);
        std::memcpy(o, &n, 4);
        break;
      }
      case Dist::kNormalDouble: case Dist::kLogNormalDouble: {
        double v[2];
        math::boxMullerDouble(x[0], x[1], x[2], x[3], &v[0], &v[1]);
        const double n = math::shaped(v[k], d, mean, stddev);
        std::memcpy(o, &n, 8);
        break;
      }
    }
  }
};

// ---- MRG32k3a --------------------------------------------------------------
// L'Ecuyer's combined generator in exact integer arithmetic (curand_kernel.h's
// curand_MRG32k3a computes the same in doubles); jumps by the toolkit's
// 2^n-step matrices (curand_mrg32k3a.h).
struct Mrg32k3a {
  static constexpr uint64_t kGenerators = kMrg32k3aGenerators;
  static constexpr uint64_t kM1 = 4294967087ull, kM2 = 4294944443ull;
  static constexpr double kNorm = 2.3283065498378288e-10;     // MRG32K3A_NORM
  static constexpr double kBitsNorm = 1.000000048662;         // MRG32K3A_BITS_NORM
  using Draw = double;  // in (0, m1]
  struct State {
    uint64_t s1[3], s2[3];
  };
  using Matrix = std::array<uint64_t, 9>;
  struct Jump {
    Matrix a, b;  // mod m1, mod m2
  };

  static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
  }
  static void matvec(const Matrix& a, uint64_t* v, uint64_t m) {
    uint64_t r[3];
    for (int k = 0; k < 3; ++k)
      r[k] = (mulmod(a[3 * k], v[0], m) + mulmod(a[3 * k + 1], v[1], m) + mulmod(a[3 * k + 2], v[2], m)) % m;
    std::memcpy(v, r, sizeof r);
  }
  static Matrix of(const unsigned int (&a)[3][3]) {
    Matrix r;
    for (int i = 0; i < 9; ++i) r[i] = a[i / 3][i % 3];
    return r;
  }
  static Matrix matmul(const Matrix& a, const Matrix& b, uint64_t m) {
    Matrix r{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        r[3 * i + j] =
            (mulmod(a[3 * i], b[j], m) + mulmod(a[3 * i + 1], b[3 + j], m) + mulmod(a[3 * i + 2], b[6 + j], m)) % m;
    return r;
  }
  static State init(uint64_t seed) {
    State s{{12345, 12345, 12345}, {12345, 12345, 12345}};
    if (seed) {
      const uint64_t x1 = static_cast<uint32_t>(seed) ^ 0x55555555u, x2 = static_cast<uint32_t>(seed >> 32) ^ 0xAAAAAAAAu;
      s.s1[0] = mulmod(x1, 12345, kM1), s.s1[1] = mulmod(x2, 12345, kM1), s.s1[2] = mulmod(x1, 12345, kM1);
      s.s2[0] = mulmod(x2, 12345, kM2), s.s2[1] = mulmod(x1, 12345, kM2), s.s2[2] = mulmod(x2, 12345, kM2);
    }
    return s;
  }
  static void nextGenerator(State& s) {  // one subsequence (2^76 draws) on
    matvec(of(mrg32k3aM1SubSeqHost[0]), s.s1, kM1);
    matvec(of(mrg32k3aM2SubSeqHost[0]), s.s2, kM2);
  }
  static Jump jump(uint64_t n) {
    Jump j{{1, 0, 0, 0, 1, 0, 0, 0, 1}, {1, 0, 0, 0, 1, 0, 0, 0, 1}};
    for (int i = 0; n; ++i, n >>= 1)
      if (n & 1) {
        j.a = matmul(of(mrg32k3aM1Host[i]), j.a, kM1);
        j.b = matmul(of(mrg32k3aM2Host[i]), j.b, kM2);
      }
    return j;
  }
  static void apply(const Jump& j, State& s) {
    matvec(j.a, s.s1, kM1);
    matvec(j.b, s.s2, kM2);
  }
  static Draw next(State& s) {
    int64_t p1 = static_cast<int64_t>(1403580 * s.s1[1]) - static_cast<int64_t>(810728 * s.s1[0]);
    p1 %= static_cast<int64_t>(kM1);
    if (p1 < 0) p1 += kM1;
    s.s1[0] = s.s1[1], s.s1[1] = s.s1[2], s.s1[2] = static_cast<uint64_t>(p1);
    int64_t p2 = static_cast<int64_t>(527612 * s.s2[2]) - static_cast<int64_t>(1370589 * s.s2[0]);
    p2 %= static_cast<int64_t>(kM2);
    if (p2 < 0) p2 += kM2;
    s.s2[0] = s.s2[1], s.s2[1] = s.s2[2], s.s2[2] = static_cast<uint64_t>(p2);
    double r = static_cast<double>(p1) - static_cast<double>(p2);
    if (r <= 0) r += static_cast<double>(kM1);
    return r;
  }
  // curand_box_muller_mrg's pair of floats from two draws (sin, cos).
  static void normalPair(const Draw* x, float* a, float* b) {
    const float u = static_cast<float>(x[0] * kNorm), w = static_cast<float>(x[1] * kNorm) * math::k2PiFloat;
    const float s = sqrtf(-2.0f * logf(u));
    *a = sinf(w) * s;
    *b = cosf(w) * s;
  }
  // As curand_kernel.h: curand(), curand_uniform(), curand_uniform_double(), curand_box_muller_mrg(_double).
  static void value(Dist d, const Draw* x, unsigned k, double mean, double stddev, uint8_t* o) {
    switch (d) {
      case Dist::kBits32: { const auto v = static_cast<uint32_t>(x[0] * kBitsNorm); std::memcpy(o, &v, 4); break; }
      case Dist::kBits64: case Dist::kPoisson: break;  // (check() refuses the one, poissonGenerate() takes the other)
      case Dist::kUniform: { const auto v = static_cast<float>(x[0] * kNorm); std::memcpy(o, &v, 4); break; }
      case Dist::kUniformDouble: { const double v = x[0] * kNorm; std::memcpy(o, &v, 8); break; }
      case Dist::kNormal: case Dist::kLogNormal: {
        float v[2];
        normalPair(x, &v[0], &v[1]);
        const float n = math::shaped(v[k], d, mean, stddev);
        std::memcpy(o, &n, 4);
        break;
      }
      case Dist::kNormalDouble: case Dist::kLogNormalDouble: {
        const double u = x[0] * kNorm, w = x[1] * kNorm * 2.0;
        const double s = std::sqrt(-2.0 * std::log(u));
        const double v = (k ? std::cos(w * math::kPi) : std::sin(w * math::kPi)) * s;
        const double n = math::shaped(v, d, mean, stddev);
        std::memcpy(o, &n, 8);
        break;
      }
    }
  }
};

// The generators' starting states of a seed (the last seed's kept per engine
// and ordering). SEEDED (XORWOW's): each generator its own seed, seed + i * kSeededStride.
template <class E>
std::shared_ptr<const std::vector<typename E::State>> starts(uint64_t seed, bool seeded) {
  static std::mutex mu;
  static uint64_t cached_seed = 0;
  static bool cached_seeded = false;
  static std::shared_ptr<const std::vector<typename E::State>> cached;
  std::lock_guard lock(mu);
  if (cached && cached_seed == seed && cached_seeded == seeded) return cached;
  auto s = std::make_shared<std::vector<typename E::State>>(E::kGenerators);
  (*s)[0] = E::init(seed);
  for (uint64_t i = 1; i < E::kGenerators; ++i) {
    if (seeded) {
      (*s)[i] = E::init(seed + i * kSeededStride);
      continue;
    }
    (*s)[i] = (*s)[i - 1];
    E::nextGenerator((*s)[i]);
  }
  cached_seed = seed;
  cached_seeded = seeded;
  cached = s;
  return cached;
}

// Generator t's state after n draws from its start; each distinct jump is
// made once (the last few kept: generators mostly share a count).
template <class E>
class Positioner {
 public:
  explicit Positioner(const Fill& f) : first_(starts<E>(f.seed, f.seeded)) {}
  typename E::State at(uint64_t t, uint64_t n) {
    auto it = std::find_if(jumps_.begin(), jumps_.end(), [n](const auto& j) { return j.first == n; });
    if (it == jumps_.end()) {
      if (jumps_.size() == 8) jumps_.erase(jumps_.begin());
      jumps_.push_back({n, E::jump(n)});
      it = jumps_.end() - 1;
    }
    typename E::State s = (*first_)[t];
    E::apply(it->second, s);
    return s;
  }

 private:
  std::shared_ptr<const std::vector<typename E::State>> first_;
  std::vector<std::pair<uint64_t, typename E::Jump>> jumps_;
};

template <class E>
Status generateWith(const Fill& f, uint8_t* out, uint64_t count) {
  const Slot slot = slotOf(f.rng, f.dist);
  const uint64_t T = E::kGenerators;
  // Each generator's draws at slot `counted`: the offset's starts, or the
  // runs the call carries (slotsCheck() made sure they cover all T).
  std::vector<uint64_t> counts;
  if (!f.draws.empty()) {
    counts.reserve(T);
    for (auto [n, gens] : f.draws) counts.insert(counts.end(), gens, n);
  }
  Positioner<E> positioner(f);
  const uint32_t width = valueBytes(f.dist);
  auto slotAt = [&](uint64_t j) { return f.slot + (j - f.position) / slot.values; };
  const uint64_t first_slot = slotAt(f.position), last_slot = slotAt(f.position + count - 1);
  // The generators this call touches, by their first slot's place k in the
  // call: slot s is generator s % T's, at k = (s - first_slot) % gens.
  const uint64_t gens = std::min<uint64_t>(T, last_slot - first_slot + 1);
  std::vector<typename E::State> state(gens);
  for (uint64_t k = 0; k < gens; ++k) {
    const uint64_t s = first_slot + k, t = s % T;
    state[k] = positioner.at(
        t, (counts.empty() ? startDraw(T, t, f.offset) : counts[t]) + slot.draws * slotsOf(T, t, f.counted, s));
  }
  // Values in order: a slot's draws are taken when its first value (in this call) is.
  std::vector<std::array<typename E::Draw, 4>> slot_draws(gens);
  std::vector<uint64_t> slot_at(gens, UINT64_MAX);
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t i = f.position + j, s = slotAt(i), k = (s - first_slot) % gens;
    auto& x = slot_draws[k];
    if (slot_at[k] != s) {
      for (uint64_t d = 0; d < slot.draws; ++d) x[d] = E::next(state[k]);
      slot_at[k] = s;
    }
    E::value(f.dist, x.data(), static_cast<unsigned>((i - f.position) % slot.values), f.mean, f.stddev,
             out + j * width);
  }
  return Status::ok();
}

// Poisson values of lambda >= 2000 (poissonNormalsSlots): slot s (one value)
// is generator s % T's next curand_normal: its kept half, or the first of a
// pair made of its next two draws, the second kept. Counts and kept halves
// come at slot `counted` (the call's first); a piece goes on from there.
template <class E>
Status poissonNormalsWith(const Fill& f, uint8_t* out, uint64_t count) {
  const uint64_t T = E::kGenerators;
  std::vector<uint64_t> counts = expand(f.draws, T, 0), kept = expand(f.kept, T, 0);
  if (f.draws.empty())
    for (uint64_t t = 0; t < T; ++t) counts[t] = startDraw(T, t, f.offset);
  if (f.slot > f.counted)
    for (uint64_t t = 0; t < T; ++t) afterNormals(counts[t], kept[t], slotsOf(T, t, f.counted, f.slot));
  const uint64_t gens = std::min<uint64_t>(T, count);
  Positioner<E> positioner(f);
  std::vector<typename E::State> state(gens);
  std::vector<float> half(gens);
  std::vector<uint8_t> has(gens, 0);
  for (uint64_t k = 0; k < gens; ++k) {
    const uint64_t t = (f.slot + k) % T;
    state[k] = positioner.at(t, counts[t]);
    if (kept[t]) {  // (made again from the draws its pair came from)
      typename E::State at = positioner.at(t, kept[t] - 1);
      const typename E::Draw x[2] = {E::next(at), E::next(at)};
      float first;
      E::normalPair(x, &first, &half[k]);
      has[k] = 1;
    }
  }
  const double root = std::sqrt(f.lambda);
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t k = j % gens;
    float z = half[k];
    if (!has[k]) {
      typename E::Draw x[2];
      x[0] = E::next(state[k]);
      x[1] = E::next(state[k]);
      E::normalPair(x, &z, &half[k]);
    }
    has[k] ^= 1;
    const uint32_t r = poissonOfNormal(root, f.lambda, z);
    std::memcpy(out + 4 * j, &r, 4);
  }
  return Status::ok();
}

}  // namespace

std::vector<std::pair<uint64_t, uint32_t>> runsOf(const std::vector<uint64_t>& v) {
  std::vector<std::pair<uint64_t, uint32_t>> runs;
  for (uint64_t x : v) {
    if (!runs.empty() && runs.back().first == x) ++runs.back().second;
    else runs.push_back({x, 1});
  }
  return runs;
}

std::vector<uint64_t> expand(const std::vector<std::pair<uint64_t, uint32_t>>& runs, uint64_t T, uint64_t none) {
  if (runs.empty()) return std::vector<uint64_t>(T, none);
  std::vector<uint64_t> v;
  v.reserve(T);
  for (auto [n, gens] : runs) v.insert(v.end(), std::min<uint64_t>(gens, T - v.size()), n);
  v.resize(T, none);
  return v;
}

Status slotsPoissonGenerate(const Fill& f, uint8_t* out, uint64_t count) {
  if (f.rng == kMrg32k3a) return poissonNormalsWith<Mrg32k3a>(f, out, count);
  return poissonNormalsWith<Xorwow>(f, out, count);
}

Status slotsCheck(const Fill& f) {
  const uint64_t T = generatorsOf(f.rng);
  // (Philox's slot is its position's group.)
  const uint64_t at = f.rng == kPhilox4x32_10 ? f.position / 4 : f.slot;
  if (f.counted < offsetSlot(f.rng, f.offset) || f.counted > at)
    return Status(err::kInvalidValue, "cuRAND draw counts taken past the call's slot");
  if (f.draws.size() > T)
    return Status(err::kInvalidValue, "cuRAND draw counts in more than " + std::to_string(T) + " runs");
  uint64_t gens = 0;
  for (auto& run : f.draws) gens += run.second;
  if (!f.draws.empty() && gens != T)
    return Status(err::kInvalidValue,
                  "cuRAND draw counts for " + std::to_string(gens) + " generators, not " + std::to_string(T));
  if (f.kept.empty()) return Status::ok();
  // Kept halves: a Poisson call of normals only, one per generator, each from draws already taken.
  if (!poissonNormalsSlots(f.rng, f.dist, f.lambda))
    return Status(err::kInvalidValue, "cuRAND kept normals for a call that takes none");
  if (f.kept.size() > T) return Status(err::kInvalidValue, "cuRAND kept normals in more than " + std::to_string(T) + " runs");
  gens = 0;
  for (auto& run : f.kept) gens += run.second;
  if (gens != T)
    return Status(err::kInvalidValue,
                  "cuRAND kept normals for " + std::to_string(gens) + " generators, not " + std::to_string(T));
  const std::vector<uint64_t> kept = expand(f.kept, T, 0), counts = expand(f.draws, T, 0);
  for (uint64_t t = 0; t < T; ++t) {
    const uint64_t n = f.draws.empty() ? startDraw(T, t, offsetSlot(f.rng, f.offset)) : counts[t];
    if (kept[t] && (kept[t] > UINT64_MAX - 1 || kept[t] + 1 > n))
      return Status(err::kInvalidValue, "a cuRAND kept normal of generator " + std::to_string(t) +
                                            " from draws it has not taken");
  }
  return Status::ok();
}

Status slotsGenerate(const Fill& f, uint8_t* out, uint64_t count) {
  if (f.rng == kMrg32k3a) return generateWith<Mrg32k3a>(f, out, count);
  return generateWith<Xorwow>(f, out, count);
}

void SlotHistory::restart(int32_t rng) {
  if (!started_) return;  // (nothing given: each starts at the offset's row anyway)
  const uint64_t T = generatorsOf(rng);
  std::vector<uint64_t> counts(T);
  for (uint64_t t = 0; t < T; ++t) counts[t] = startDraw(T, t, slot_);
  runs_ = runsOf(counts);
  kept_.clear();
  counted_ = slot_;
  draws_ = kVaried;  // (the next call's counts are runs_, at its slot)
}

void newSeed(int32_t rng, uint64_t& offset, uint64_t& position, SlotHistory& history) {
  if (rng == kMtgp32 || rng == kMt19937) {
    position = 0;
  } else if (rng == kPhilox4x32_10) {
    // The offset moves on by the groups of four the position has crossed
    // since it; from a moved offset the generator starts afresh (values of a
    // group part-done are given again). An offset still 0: nothing moves.
    const uint64_t moved = offset + (position / 4 - offset / 4);
    if (moved) {
      offset = position = moved;
      history.reset();
    }
  } else if (generatorsOf(rng)) {
    history.restart(rng);
  }
}

void SlotHistory::call(Dist d, uint64_t count, uint64_t offset, Fill& f) {
  const Slot slot = slotOf(f.rng, d);
  const uint64_t T = generatorsOf(f.rng);
  const bool philox = f.rng == kPhilox4x32_10, normals = poissonNormalsSlots(f.rng, d, f.lambda);
  if (!started_) {
    slot_ = counted_ = offsetSlot(f.rng, offset);  // each generator's first slot is its row's at the offset
    draws_ = slot.draws;
    started_ = true;
  }
  // Philox's call starts at its position's group, even one the last call
  // left part-done: that group is the new call's kind.
  if (philox) slot_ = f.position / 4;
  if (slot.draws != draws_ || normals) {  // a switch: the counts move on to this call's slot
    std::vector<uint64_t> counts = expand(runs_, T, 0);
    if (runs_.empty())
      for (uint64_t t = 0; t < T; ++t) counts[t] = startDraw(T, t, offsetSlot(f.rng, offset));
    if (draws_ != kVaried)
      for (uint64_t t = 0; t < T; ++t) counts[t] += draws_ * slotsOf(T, t, counted_, slot_);
    runs_ = runsOf(counts);
    counted_ = slot_;
    draws_ = slot.draws;
    if (normals) {
      // The call from its first slot, with the kept halves; after it, each
      // generator's counts and kept half as its slots left them.
      f.slot = f.counted = slot_;
      f.draws = runs_;
      f.kept = kept_;
      std::vector<uint64_t> kept = expand(kept_, T, 0);
      for (uint64_t t = 0; t < T; ++t) afterNormals(counts[t], kept[t], slotsOf(T, t, slot_, slot_ + count));
      runs_ = runsOf(counts);
      kept_ = std::all_of(kept.begin(), kept.end(), [](uint64_t k) { return k == 0; }) ? decltype(kept_){} : runsOf(kept);
      slot_ = counted_ = slot_ + count;
      draws_ = kVaried;
      return;
    }
  }
  f.slot = slot_;
  f.counted = counted_;
  f.draws = runs_;
  if (!philox) slot_ += (count + slot.values - 1) / slot.values;
}

}  // namespace rgpu::common::curand
