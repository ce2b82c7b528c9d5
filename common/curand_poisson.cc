// cuRAND's Poisson values (curandGeneratePoisson) as NVIDIA's host generator
// computes them, bit for bit (curand_cpu.h says which method a generator and
// lambda take). Each value is a function of one word of the generator, the
// word curandGenerate (curandGenerateLongLong for Sobol64) gives at the same
// position, so every generator's layout is its 32-bit (64-bit) words' layout.
//
// The square histogram (Marsaglia, Tsang and Wang, J. Stat. Softw. 11(3),
// 2004), built as NVIDIA's library builds it — found against its generator
// (docs/curand.md), where the thresholds of every bin of lambda 0.01 to 9.9
// equal NVIDIA's to the last of the 2^32 words:
//  - bins shift .. shift + length - 1: the k whose probability
//    exp(-lambda + k log(lambda) - lgamma(k + 1)) is not 0 in double;
//  - q[k] = p[k] * length / (the sum of p); a bin with q < 1 is poor;
//  - the richest index first: r is the highest k with q >= 1. Passes over
//    the bins in increasing order give each poor bin not yet given (K[k] = r,
//    q[r] -= 1 - q[k]); a donor that falls below 1 becomes poor (its own
//    turn comes when a pass reaches it) and r moves down to the next k with
//    q >= 1. Passes repeat until one gives nothing or no donor is left;
//  - V[k] = (k + q[k]) / length for a bin given a donor, else (k + 1) / length.
// A word x draws u = x 2^-32 + 2^-32, j = floor(length u): shift + j if
// u < V[j], else shift + K[j]. u = 1 (x = 2^32 - 1) is past the last bin:
// NVIDIA's reads past its arrays there (its host generator gave 0 for every
// lambda tried, all with shift 0); rgpu's gives shift.
//
// Inversion is curand_poisson.h's _curand_poisson_ITR_double on
// curand_uniform.h's _curand_uniform_double of the word; the normal
// approximation is (unsigned)(sqrt(lambda) z + lambda + 0.5) in double, with
// z the float _curand_normal_icdf of the 32-bit word (Sobol64: its high
// word; the double icdf differs from NVIDIA's in about 1 value of 100,000).
// MT19937's normal approximation is the same sum in float.
//
// Built with -ffp-contract=off (common/CMakeLists.txt), as curand_cpu.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "common/curand_cpu.h"
#include "common/curand_math.h"

namespace rgpu::common::curand {

namespace {

constexpr double k2Pow32InvDouble = 2.3283064365386963e-10;  // CURAND_2POW32_INV_DOUBLE

double logProbability(double lambda, uint64_t k) {
  int sign = 0;
  return -lambda + static_cast<double>(k) * std::log(lambda) - ::lgamma_r(static_cast<double>(k) + 1.0, &sign);
}

std::shared_ptr<const PoissonTable> buildTable(double lambda) {
  auto t = std::make_shared<PoissonTable>();
  uint64_t lo = 0;
  while (std::exp(logProbability(lambda, lo)) == 0) ++lo;
  uint64_t hi = lo;
  while (std::exp(logProbability(lambda, hi)) > 0) ++hi;
  const size_t n = hi - lo;
  t->shift = static_cast<uint32_t>(lo);
  t->length = static_cast<uint32_t>(n);
  std::vector<double> q(n);
  double sum = 0;
  for (size_t k = 0; k < n; ++k) sum += q[k] = std::exp(logProbability(lambda, lo + k));
  for (size_t k = 0; k < n; ++k) q[k] = q[k] * static_cast<double>(n) / sum;
  t->K.resize(n);
  for (size_t k = 0; k < n; ++k) t->K[k] = static_cast<uint32_t>(k);
  std::vector<char> given(n, 0);
  auto donorBelow = [&](int64_t from) {
    while (from >= 0 && q[static_cast<size_t>(from)] < 1) --from;
    return from;
  };
  int64_t r = donorBelow(static_cast<int64_t>(n) - 1);
  for (bool gave = true; gave && r >= 0;) {
    gave = false;
    for (size_t i = 0; i < n && r >= 0; ++i) {
      if (given[i] || q[i] >= 1) continue;
      gave = true;
      given[i] = 1;
      t->K[i] = static_cast<uint32_t>(r);
      q[static_cast<size_t>(r)] -= 1 - q[i];
      if (q[static_cast<size_t>(r)] < 1) r = donorBelow(r - 1);
    }
  }
  t->V.resize(n);
  for (size_t k = 0; k < n; ++k) t->V[k] = (static_cast<double>(k) + (given[k] ? q[k] : 1.0)) / static_cast<double>(n);
  return t;
}

// curand_poisson.h's _curand_poisson_ITR_double on a uniform u in (0, 1]. At
// u = 1 (the one 32-bit word 2^32 - 1) the loop ends where the sum of the
// probabilities rounds to 1, which depends on the last bits of every step:
// NVIDIA's gives 44, 118 and 5578 for lambda 10, 50 and 5000 there, rgpu's
// 304, 116 and 5556 (the last k before the probabilities underflow, where
// NVIDIA's own loop would run on for ever: rgpu's stops).
// The scale inversion's loop applies where chunk `chunk` (of 500 of lambda,
// MAGIC_DOUBLE_CONST) begins.
double chunkScale(uint32_t chunk, double lambda) {
  const int pow = static_cast<int>(500 * chunk);
  if (lambda > static_cast<double>(pow + 500.0)) return std::exp(-500.0);
  return std::exp(static_cast<double>(pow - lambda));
}

uint32_t inversion(double u, double lambda) {
  double p = 1.0, q = 1.0;
  uint32_t k = 0;
  uint32_t chunk = 0;
  do {
    const double L = chunkScale(chunk++, lambda);
    p *= L;
    q *= L;
    while (u > q) {
      if (p == 0) return k;  // (NVIDIA's would run on for ever)
      ++k;
      p *= lambda / static_cast<double>(k);
      q += p;
    }
  } while (static_cast<double>(500 * chunk) < lambda);
  return k;
}

uint32_t normalApproximation(double lambda, uint32_t x) {
  return poissonOfNormal(std::sqrt(lambda), lambda, math::normalIcdf(x));
}
// (MT19937's: the same in float.)
uint32_t normalApproximationFloat(double lambda, uint32_t x) {
  const float l = static_cast<float>(lambda);
  const float v = sqrtf(l) * math::normalIcdf(x) + l + 0.5f;
  return v <= 0 ? 0 : static_cast<uint32_t>(v);
}

uint32_t table(const PoissonTable& t, double u) {
  const auto j = static_cast<int64_t>(std::floor(t.length * u));
  if (j < 0 || j >= static_cast<int64_t>(t.length)) return t.shift;
  if (u < t.V[static_cast<size_t>(j)]) return t.shift + static_cast<uint32_t>(j);
  return t.shift + t.K[static_cast<size_t>(j)];
}

}  // namespace

PoissonMethod poissonMethod(int32_t rng, double lambda) {
  if (isSobol64(rng)) return lambda < 2000 ? PoissonMethod::kInversion : PoissonMethod::kNormal;
  if (rng == kMt19937) return lambda < 2000 ? PoissonMethod::kTable : PoissonMethod::kNormalFloat;
  if (isSobol(rng) || rng == kMtgp32) {
    if (lambda < (rng == kMtgp32 ? 32 : 10)) return PoissonMethod::kTable;
    return lambda <= 8000 ? PoissonMethod::kInversion : PoissonMethod::kNormal;
  }
  return lambda < 2000 ? PoissonMethod::kTable : PoissonMethod::kGeneratorNormals;
}

Status poissonLambdaCheck(double lambda) {
  if (!(lambda > 0 && lambda <= kMaxPoissonLambda)) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", lambda);
    return Status(err::kInvalidValue, std::string("a Poisson lambda of ") + text + " (0 < lambda <= 400000)");
  }
  return Status::ok();
}

std::shared_ptr<const PoissonTable> poissonTable(double lambda) {
  // The last few tables, by lambda (a program draws from a few).
  static std::mutex mu;
  static std::list<std::pair<double, std::shared_ptr<const PoissonTable>>> kept;
  {
    std::lock_guard lock(mu);
    for (auto& [l, t] : kept)
      if (l == lambda) return t;
  }
  auto t = buildTable(lambda);
  std::lock_guard lock(mu);
  kept.emplace_front(lambda, t);
  if (kept.size() > 4) kept.pop_back();
  return t;
}

PoissonDraw::PoissonDraw(int32_t rng, double lambda) : lambda_(lambda), method_(poissonMethod(rng, lambda)) {
  if (method_ == PoissonMethod::kTable) table_ = poissonTable(lambda);
  if (method_ == PoissonMethod::kInversion) {
    // (inversion(): chunk c scales by exp(-500), the last by exp(500 c - lambda).)
    chunks_ = 1;
    while (!(static_cast<double>(500 * chunks_) >= lambda)) ++chunks_;
    walk(0, 0, 1.0, 1.0);
  }
}

int32_t PoissonDraw::walk(uint32_t chunk, uint32_t k, double p, double q) const {
  if (kept_ >= kMaxWalkSums) return -1;
  const double L = chunkScale(chunk, lambda_);
  p *= L;
  q *= L;
  Walk w{chunk, k, {p}, {q}, {}};
  while (q < 1.0 && p != 0) {
    ++k;
    p *= lambda_ / static_cast<double>(k);
    q += p;
    w.p.push_back(p);
    w.q.push_back(q);
  }
  w.next.assign(w.q.size(), -1);
  kept_ += w.q.size();
  walks_.push_back(std::move(w));
  return static_cast<int32_t>(walks_.size() - 1);
}

uint32_t PoissonDraw::inverted(double u) const {
  if (walks_.empty()) return inversion(u, lambda_);
  for (size_t at = 0;;) {
    const Walk& w = walks_[at];
    // The first place whose sum is not below u; none: the probabilities
    // underflowed first, and the loop stops where they did.
    const auto it = std::lower_bound(w.q.begin(), w.q.end(), u);
    if (it == w.q.end()) return w.k + static_cast<uint32_t>(w.q.size() - 1);
    const size_t i = static_cast<size_t>(it - w.q.begin());
    if (w.chunk + 1 == chunks_) return w.k + static_cast<uint32_t>(i);
    if (w.next[i] < 0) {
      const int32_t n = walk(w.chunk + 1, w.k + static_cast<uint32_t>(i), w.p[i], w.q[i]);
      if (n < 0) return inversion(u, lambda_);  // (past kMaxWalkSums)
      walks_[at].next[i] = n;  // (walks_ may have moved: indices, not references)
    }
    at = static_cast<size_t>(walks_[at].next[i]);
  }
}

uint32_t PoissonDraw::operator()(uint32_t x) const {
  const double u = x * k2Pow32InvDouble + k2Pow32InvDouble;  // _curand_uniform_double
  switch (method_) {
    case PoissonMethod::kTable: return table(*table_, u);
    case PoissonMethod::kInversion: return inverted(u);
    case PoissonMethod::kNormalFloat: return normalApproximationFloat(lambda_, x);
    default: return normalApproximation(lambda_, x);
  }
}

uint32_t PoissonDraw::operator()(uint64_t x) const {
  if (method_ == PoissonMethod::kInversion)
    return inverted((x >> 11) * math::k2Pow53Inv + (math::k2Pow53Inv / 2.0));
  return normalApproximation(lambda_, static_cast<uint32_t>(x >> 32));
}

Status poissonGenerate(const Fill& f, uint8_t* out, uint64_t count) {
  if (poissonMethod(f.rng, f.lambda) == PoissonMethod::kGeneratorNormals) {
    if (f.rng != kPhilox4x32_10) return slotsPoissonGenerate(f, out, count);
    // Philox: its normal floats, as curandGenerateNormal's, in place.
    Fill normals = f;
    normals.dist = Dist::kNormal, normals.mean = 0, normals.stddev = 1;
    RGPU_TRY(generate(normals, out, count));
    const double root = std::sqrt(f.lambda);
    for (uint64_t j = 0; j < count; ++j) {
      float z;
      std::memcpy(&z, out + 4 * j, 4);
      const uint32_t r = poissonOfNormal(root, f.lambda, z);
      std::memcpy(out + 4 * j, &r, 4);
    }
    return Status::ok();
  }
  const PoissonDraw draw(f.rng, f.lambda);
  Fill words = f;
  if (!isSobol64(f.rng)) {
    // The generator's 32-bit words in place, then each made a value.
    words.dist = Dist::kBits32;
    RGPU_TRY(generate(words, out, count));
    for (uint64_t j = 0; j < count; ++j) {
      uint32_t x;
      std::memcpy(&x, out + 4 * j, 4);
      x = draw(x);
      std::memcpy(out + 4 * j, &x, 4);
    }
    return Status::ok();
  }
  // Sobol64: its 64-bit words a piece at a time.
  words.dist = Dist::kBits64;
  constexpr uint64_t kPiece = 1 << 16;
  std::vector<uint64_t> x(static_cast<size_t>(std::min(count, kPiece)));
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(kPiece, count - done);
    RGPU_TRY(generate(callPart(words, done), x.data(), n));
    for (uint64_t j = 0; j < n; ++j) {
      const uint32_t v = draw(x[j]);
      std::memcpy(out + 4 * (done + j), &v, 4);
    }
    done += n;
  }
  return Status::ok();
}

}  // namespace rgpu::common::curand
