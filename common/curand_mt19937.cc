// cuRAND's MT19937 host-API generator on the CPU, bit for bit
// (common/curand_cpu.h). Built with -ffp-contract=off (common/CMakeLists.txt),
// as curand_cpu.cc.
//
// NVIDIA's layout (found against its host generator; docs/curand.md):
//  - 8192 generators of one MT19937 sequence, generator g started g * 2^2048
//    words in. The sequence is std::mt19937's for the seed's low 32 bits.
//  - Eight threads share a generator. Values come in rows of 65,536: place
//    g * 8 + t of a row is thread t of generator g. A thread gives the
//    generator's words of a block of 624 (one twist) in its own order, 78 per
//    block: first element kFirst[t], then for each of the eleven runs
//    kRuns[i], elements kRuns[i] + 7 t to kRuns[i] + 7 t + 6. So row r takes
//    block r / 78, and each thread its (r % 78)-th element of it.
//  - Every value is one word of its position, whatever its kind (as MTGP32).
//
// Jumping 2^2048 words: MT19937's sequence (each bit of each word) satisfies
// the linear recurrence of its characteristic polynomial phi (degree 19937,
// found by Berlekamp-Massey on the sequence). With J = x^(2^2048) mod phi,
// word N + k = XOR of words i + k over the bits i of J. Generator g's first 624
// words come from generator g - 1's by that sum, computed by Horner's rule
// eight bits of J at a time (about 300 us). phi and J are computed once per
// process (0.4 to 0.8 s); a seed's starting words (8192 generators, 20 MiB,
// 2 to 3 s) once per seed, and only as far as the calls reach.
//
// Reaching block b means twisting each generator b times from its start;
// the words at the block of recent calls are kept (kKeptBlocks, per seed and
// block), so a program that goes on where its last call stopped pays for its
// own values only.
#include <algorithm>
#include <array>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/curand_cpu.h"
#include "common/curand_math.h"

namespace rgpu::common::curand {
namespace {

constexpr unsigned kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
constexpr unsigned kDegree = 19937;         // of phi: the bits of MT19937's state
constexpr unsigned kJumpLog2 = 2048;        // generators are 2^2048 words apart
constexpr uint64_t kGenerators = kMt19937Generators, kThreads = 8, kRowValues = kGenerators * kThreads;
constexpr uint64_t kRowsPerBlock = kN / kThreads;  // 78
constexpr size_t kKeptStarts = 1, kKeptBlocks = 2;  // (20 MiB each at most)

// Element of a block that thread t gives at its k-th value there (k < 78).
constexpr unsigned kFirst[kThreads] = {0, 113, 170, 283, 340, 397, 510, 567};
constexpr unsigned kRuns[11] = {1, 57, 114, 171, 227, 284, 341, 398, 454, 511, 568};
inline unsigned element(unsigned t, unsigned k) { return k == 0 ? kFirst[t] : kRuns[(k - 1) / 7] + 7 * t + (k - 1) % 7; }

inline uint32_t next(uint32_t a, uint32_t b, uint32_t m) {
  const uint32_t y = (a & kUpper) | (b & kLower);
  return m ^ (y >> 1) ^ (-(y & 1u) & kMatrixA);  // (no branch: half of them would be mispredicted)
}
// The next 624 words in place (std::mt19937's twist).
void twist(uint32_t* mt) {
  unsigned k = 0;
  for (; k < kN - kM; ++k) mt[k] = next(mt[k], mt[k + 1], mt[k + kM]);
  for (; k < kN - 1; ++k) mt[k] = next(mt[k], mt[k + 1], mt[k + kM - kN]);
  mt[kN - 1] = next(mt[kN - 1], mt[0], mt[kM - 1]);
}
inline uint32_t temper(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}
// A sequence from 624 words: y[i + 624] from y[i], y[i + 1] and y[i + 397].
inline void extend(uint32_t* y, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) y[i + kN] = next(y[i], y[i + 1], y[i + kM]);
}
// dst ^= src over a block's 624 words (no aliasing: the loop is vectorised).
inline void xorWords(uint32_t* __restrict dst, const uint32_t* __restrict src) {
  for (unsigned k = 0; k < kN; ++k) dst[k] ^= src[k];
}
void seedWords(uint32_t seed, uint32_t* mt) {
  mt[0] = seed;
  for (unsigned i = 1; i < kN; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
}

// ---- polynomials over GF(2) ----------------------------------------------------
// Bit i of byte i / 8 is the coefficient of x^i: XOR and shifts by whole bytes
// do not depend on the machine's byte order.
using Poly = std::vector<uint8_t>;
constexpr size_t kPolyBytes = kDegree / 8 + 1;  // below x^19937

inline int coefficient(const Poly& p, size_t i) { return (p[i / 8] >> (i % 8)) & 1; }
inline void xorInto(uint8_t* dst, const uint8_t* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t a, b;
    std::memcpy(&a, dst + i, 8);
    std::memcpy(&b, src + i, 8);
    a ^= b;
    std::memcpy(dst + i, &a, 8);
  }
  for (; i < n; ++i) dst[i] ^= src[i];
}

// Berlekamp-Massey: the characteristic polynomial of MT19937's sequence, from
// bit 0 of 2 * 19937 of its words (any seed; all share it). Bit sets of 64-bit
// words; the sequence is kept reversed, so the sum over C's terms is one AND.
Poly characteristic() {
  const size_t n = 2 * kDegree + 64, words = n / 64 + 2;
  std::vector<uint32_t> y(n + kN + 1);
  seedWords(5489u, y.data());
  extend(y.data(), 0, n);
  std::vector<uint64_t> R(words + 1, 0);  // bit n - 1 - i: bit 0 of word i
  for (size_t i = 0; i < n; ++i)
    if (y[i + kN] & 1u) R[(n - 1 - i) / 64] |= uint64_t{1} << ((n - 1 - i) % 64);
  // Connection polynomial C (C_0 = 1): s_i = sum over j >= 1 of C_j s_(i - j).
  std::vector<uint64_t> C(words, 0), B(words, 0), T;
  C[0] = B[0] = 1;
  size_t L = 0, m = 1;
  for (size_t i = 0; i < n; ++i) {
    // d = sum over j <= L of C_j s_(i - j) = C_j R_(n - 1 - i + j).
    const size_t off = n - 1 - i, w0 = off / 64, sh = off % 64;
    uint64_t acc = 0;
    for (size_t w = 0; w <= L / 64; ++w) {
      uint64_t r = R[w0 + w] >> sh;
      if (sh) r |= R[w0 + w + 1] << (64 - sh);
      acc ^= C[w] & r;
    }
    if (!__builtin_parityll(acc)) {
      ++m;
      continue;
    }
    const bool grow = 2 * L <= i;
    if (grow) T = C;
    // C ^= B x^m
    const size_t ws = m / 64, bs = m % 64;
    for (size_t w = words; w-- > ws;) {
      uint64_t v = B[w - ws] << bs;
      if (bs && w > ws) v |= B[w - ws - 1] >> (64 - bs);
      C[w] ^= v;
    }
    if (grow) {
      L = i + 1 - L;
      B = std::move(T);
      m = 1;
    } else {
      ++m;
    }
  }
  if (L != kDegree) return {};  // (cannot be: MT19937's polynomial is primitive; mt19937Generate refuses)
  Poly phi(kPolyBytes + 1, 0);
  for (size_t j = 0; j <= L; ++j)
    if ((C[j / 64] >> (j % 64)) & 1u) phi[(L - j) / 8] |= static_cast<uint8_t>(1u << ((L - j) % 8));
  return phi;
}

// Arithmetic mod phi: R[v] = v(x) x^19937 mod phi for each byte v, so the
// byte of a product at x^(19937 + 8 m) is taken away by adding R[v] x^(8m).
class ModPhi {
 public:
  explicit ModPhi(const Poly& phi) : R_(256, Poly(kPolyBytes, 0)) {
    Poly r(phi.begin(), phi.begin() + kPolyBytes);  // x^19937 mod phi: phi's lower terms
    r[kDegree / 8] &= static_cast<uint8_t>((1u << (kDegree % 8)) - 1);
    for (unsigned t = 0; t < 8; ++t) {
      R_[1u << t] = r;
      // r *= x (mod phi)
      const int top = coefficient(r, kDegree - 1);
      for (size_t i = kPolyBytes; i-- > 0;) r[i] = static_cast<uint8_t>((r[i] << 1) | (i ? r[i - 1] >> 7 : 0));
      r[kDegree / 8] &= static_cast<uint8_t>((1u << (kDegree % 8)) - 1);
      if (top) xorInto(r.data(), R_[1].data(), kPolyBytes);
    }
    for (unsigned v = 1; v < 256; ++v)
      if (v & (v - 1)) {
        R_[v] = R_[v & (v - 1)];
        xorInto(R_[v].data(), R_[v & -v].data(), kPolyBytes);
      }
  }
  Poly square(const Poly& a) const {
    static const std::array<uint16_t, 256> spread = [] {
      std::array<uint16_t, 256> s{};
      for (unsigned v = 0; v < 256; ++v)
        for (unsigned b = 0; b < 8; ++b) s[v] |= static_cast<uint16_t>(((v >> b) & 1u) << (2 * b));
      return s;
    }();
    Poly p(2 * kPolyBytes + 8, 0);
    for (size_t i = 0; i < kPolyBytes; ++i) {
      p[2 * i] = static_cast<uint8_t>(spread[a[i]]);
      p[2 * i + 1] = static_cast<uint8_t>(spread[a[i]] >> 8);
    }
    // Degree <= 2 * 19936: bytes at x^(19937 + 8 m) for m = 2492 down to 0.
    for (size_t m = (kDegree - 1) / 8 + 1; m-- > 0;) {
      const size_t at = kDegree + 8 * m;
      const unsigned w = (p[at / 8] | (p[at / 8 + 1] << 8)) >> (at % 8);
      const unsigned v = w & 0xffu;
      if (!v) continue;
      p[at / 8] &= static_cast<uint8_t>((1u << (at % 8)) - 1);
      p[at / 8 + 1] &= static_cast<uint8_t>(~((1u << (at % 8)) - 1));  // (the chunk's bits in the next byte)
      xorInto(p.data() + m, R_[v].data(), kPolyBytes);
    }
    p.resize(kPolyBytes);
    return p;
  }

 private:
  std::vector<Poly> R_;
};

// J = x^(2^2048) mod phi, once per process (empty: no phi was found).
const Poly& jump() {
  static const Poly j = [] {
    const Poly phi = characteristic();
    if (phi.empty()) return Poly{};
    const ModPhi mod(phi);
    Poly x(kPolyBytes, 0);
    x[0] = 2;
    for (unsigned i = 0; i < kJumpLog2; ++i) x = mod.square(x);
    return x;
  }();
  return j;
}

using Words = std::array<uint32_t, kN>;

// The 624 words 2^2048 on from `s` (s: 624 words of the sequence): the sum
// over the bits i of J of s's words i to i + 623, by Horner's rule on digits
// of kDigitBits bits of J: acc = x^kDigitBits acc + (the digit's sum of the
// windows at 0 to kDigitBits - 1), the windows' sums made first (256 of them,
// 624 KiB).
constexpr unsigned kDigitBits = 8, kDigits = (kDegree + kDigitBits - 1) / kDigitBits;
inline unsigned digit(const Poly& J, unsigned a) {
  const unsigned at = a * kDigitBits;
  const unsigned w = J[at / 8] | (at / 8 + 1 < J.size() ? J[at / 8 + 1] << 8 : 0u);
  return (w >> (at % 8)) & ((1u << kDigitBits) - 1);
}
Words jumped(const Words& s, const Poly& J) {
  constexpr unsigned kCombos = 1u << kDigitBits;
  uint32_t seq[kN + kDigitBits];
  std::copy(s.begin(), s.end(), seq);
  extend(seq, 0, kDigitBits);
  std::vector<uint32_t> h(kCombos * kN, 0);
  for (unsigned v = 1; v < kCombos; ++v) {
    uint32_t* dst = &h[v * kN];
    std::copy_n(&h[(v & (v - 1)) * kN], kN, dst);
    xorWords(dst, &seq[__builtin_ctz(v)]);
  }
  // acc as a sequence whose window starts at `at`: x^kDigitBits acc is kDigitBits more words.
  std::vector<uint32_t> acc(kN + kDigitBits * kDigits, 0);
  size_t at = 0;
  for (unsigned a = kDigits; a-- > 0;) {
    if (a + 1 != kDigits) {
      extend(acc.data(), at, at + kDigitBits);
      at += kDigitBits;
    }
    const unsigned v = digit(J, a);
    if (!v) continue;
    xorWords(&acc[at], &h[v * kN]);
  }
  Words r;
  std::copy(acc.begin() + static_cast<std::ptrdiff_t>(at), acc.begin() + static_cast<std::ptrdiff_t>(at + kN), r.begin());
  return r;
}

// A seed's generators' starting words (before their first twist), made as far as asked.
struct Starts {
  uint32_t seed = 0;
  std::mutex mu;
  std::vector<Words> gens;
};

std::shared_ptr<Starts> startsOf(uint32_t seed) {
  static std::mutex mu;
  static std::list<std::shared_ptr<Starts>> kept;
  std::lock_guard lock(mu);
  for (auto it = kept.begin(); it != kept.end(); ++it)
    if ((*it)->seed == seed) {
      kept.splice(kept.begin(), kept, it);
      return kept.front();
    }
  auto s = std::make_shared<Starts>();
  s->seed = seed;
  kept.push_front(s);
  if (kept.size() > kKeptStarts) kept.pop_back();
  return s;
}

// Generators [0, n) of `s`.
void makeStarts(Starts& s, uint64_t n) {
  std::lock_guard lock(s.mu);
  if (s.gens.size() >= n) return;
  if (s.gens.empty()) {
    s.gens.reserve(kGenerators);
    Words w;
    seedWords(s.seed, w.data());
    s.gens.push_back(w);
  }
  const Poly& J = jump();
  while (s.gens.size() < n) s.gens.push_back(jumped(s.gens.back(), J));
}

// Generators [0, n)'s words at the start of `block` (after block + 1 twists:
// the block's words) for a seed.
struct Blocks {
  uint32_t seed = 0;
  uint64_t block = 0;
  std::vector<Words> gens;
};

std::mutex kept_mu;
std::list<std::shared_ptr<const Blocks>>& keptBlocks() {
  static std::list<std::shared_ptr<const Blocks>> k;
  return k;
}

void keep(const Blocks& b) {
  std::lock_guard lock(kept_mu);
  auto& k = keptBlocks();
  for (auto it = k.begin(); it != k.end(); ++it)
    if ((*it)->seed == b.seed && (*it)->block == b.block && (*it)->gens.size() >= b.gens.size()) {
      k.splice(k.begin(), k, it);
      return;
    }
  k.push_front(std::make_shared<const Blocks>(b));
  if (k.size() > kKeptBlocks) k.pop_back();
}

// Block `block` of generators [0, n): from the nearest kept block at or below, or the starts.
Status blocksAt(uint32_t seed, uint64_t block, uint64_t n, Blocks& out) {
  std::shared_ptr<const Blocks> best;
  {
    std::lock_guard lock(kept_mu);
    for (auto& b : keptBlocks())
      if (b->seed == seed && b->block <= block && b->gens.size() >= n && (!best || b->block > best->block)) best = b;
  }
  const uint64_t from = best ? best->block : 0;
  if (block - from > kMaxMt19937SkipBlocks)
    return Status(err::kInvalidValue, "MT19937 block " + std::to_string(block) + " lies " +
                                          std::to_string(block - from) +
                                          " blocks of 5,111,808 values past the nearest state this process keeps "
                                          "for the seed (at most kMaxMt19937SkipBlocks, " +
                                          std::to_string(kMaxMt19937SkipBlocks) +
                                          ", are run to reach a call's first value)");
  out.seed = seed;
  out.block = block;
  if (best) {
    out.gens.assign(best->gens.begin(), best->gens.begin() + static_cast<std::ptrdiff_t>(n));
  } else {
    auto s = startsOf(seed);
    makeStarts(*s, n);
    std::lock_guard lock(s->mu);
    out.gens.assign(s->gens.begin(), s->gens.begin() + static_cast<std::ptrdiff_t>(n));
    for (auto& w : out.gens) twist(w.data());
  }
  for (auto& w : out.gens)
    for (uint64_t b = from; b < block; ++b) twist(w.data());
  return Status::ok();
}

// One value of `f`'s kind from a word, as NVIDIA's host MT19937 makes it.
void value(const Fill& f, uint32_t x, uint8_t* o) {
  constexpr double k = 2.3283064365386963e-10;  // 2^-32
  switch (f.dist) {
    case Dist::kBits32: std::memcpy(o, &x, 4); break;
    case Dist::kBits64: case Dist::kPoisson: break;  // (check() refuses the one, poissonGenerate() takes the other)
    case Dist::kUniform: {  // (in double, rounded once)
      const float v = static_cast<float>(x * k + k / 2);
      std::memcpy(o, &v, 4);
      break;
    }
    case Dist::kUniformDouble: { const double v = x * k + k / 2; std::memcpy(o, &v, 8); break; }
    case Dist::kNormal: case Dist::kLogNormal: {
      const float v = math::shaped(math::normalIcdf(x), f.dist, f.mean, f.stddev);
      std::memcpy(o, &v, 4);
      break;
    }
    case Dist::kNormalDouble: case Dist::kLogNormalDouble: {
      const double v = math::shaped(math::normalIcdfDouble(x), f.dist, f.mean, f.stddev);
      std::memcpy(o, &v, 8);
      break;
    }
  }
}

}  // namespace

Status mt19937Generate(const Fill& f, uint8_t* out, uint64_t count) {
  if (jump().empty()) return Status(err::kUnknown, "MT19937's characteristic polynomial was not found");
  const uint32_t seed = static_cast<uint32_t>(f.seed);
  const uint64_t end = f.position + count;
  const uint64_t first_row = f.position / kRowValues, last_row = (end - 1) / kRowValues;
  // The generators the call touches: all, unless it lies within one row.
  const uint64_t gens = first_row == last_row ? ((end - 1) % kRowValues) / kThreads + 1 : kGenerators;
  Blocks st;
  RGPU_TRY(blocksAt(seed, first_row / kRowsPerBlock, gens, st));
  const uint32_t width = valueBytes(f.dist);
  for (uint64_t block = first_row / kRowsPerBlock;; ++block) {
    const uint64_t r0 = std::max(first_row, block * kRowsPerBlock), r1 = std::min(last_row, block * kRowsPerBlock + kRowsPerBlock - 1);
    for (uint64_t g = 0; g < gens; ++g) {
      const uint32_t* w = st.gens[g].data();
      for (uint64_t r = r0; r <= r1; ++r)
        for (unsigned t = 0; t < kThreads; ++t) {
          const uint64_t pos = r * kRowValues + g * kThreads + t;
          if (pos < f.position || pos >= end) continue;
          value(f, temper(w[element(t, static_cast<unsigned>(r % kRowsPerBlock))]), out + (pos - f.position) * width);
        }
    }
    if (r1 == last_row) {
      // The next call starts in this block, or the one after.
      keep(st);
      if (r1 % kRowsPerBlock == kRowsPerBlock - 1 && end % kRowValues == 0) {
        for (auto& w : st.gens) twist(w.data());
        ++st.block;
        keep(st);
      }
      break;
    }
    for (auto& w : st.gens) twist(w.data());
    ++st.block;
  }
  return Status::ok();
}

}  // namespace rgpu::common::curand
