// cuRAND's host-API generators on the CPU, bit for bit: what rgpu's
// libcurand.so.10 computes for a host generator (curandCreateGeneratorHost)
// and what the sim backend writes for a device generator.
//
// A host-API generator is its type, seed and position: the n-th value a
// generator gives (counting from its offset, every call continuing where
// the last one stopped, whatever the distribution) depends on nothing else.
// So a generation is one stateless request: fill `count` values of a
// distribution from position `position` (docs/curand.md).
//
// Layouts, found against NVIDIA's own host generator (the unit tests check
// them against it; docs/curand.md):
//  - Generators of slots (common/curand_slots.cc): XORWOW
//    (CURAND_RNG_PSEUDO_XORWOW, and _DEFAULT) has 4096 generators, i started
//    i * 2^67 draws in; MRG32k3a (CURAND_RNG_PSEUDO_MRG32K3A) has 81920,
//    i started at subsequence i (i * 2^76 draws in). Slot s (a value, or a
//    pair of normals) is generator s % T's, which starts at the draw of its
//    first slot's row at the offset and takes its slots' draws in order;
//    slots go on from call to call whatever the calls gave (SlotHistory).
//    Exact for any calls.
//  - Philox4x32-10 (CURAND_RNG_PSEUDO_PHILOX4_32_10; orderings BEST,
//    DEFAULT and LEGACY are one layout): 65536 threads, thread t using the
//    counters {c, t}, key = seed. Its slots are groups of four values: group
//    g is thread g % 65536's, and takes one Philox block (32-bit values,
//    floats, normal floats) or two (doubles, normal doubles) from the
//    thread's next counter. A thread starts at the row of its first group at
//    or after the offset's. A group a call leaves part-done is done again by
//    the next call, with that call's kind (its values before the call's
//    position are not given). Exact for any calls.
//  - MTGP32 (CURAND_RNG_PSEUDO_MTGP32, curand_mtgp.cc): 192 blocks; value p
//    is element (p / 49152) * 256 + p % 256 of block (p / 256) % 192,
//    whatever its kind: a function of its position alone. No offset.
//  - MT19937 (CURAND_RNG_PSEUDO_MT19937, curand_mt19937.cc): 8192 generators
//    g * 2^2048 words into std::mt19937's sequence, eight threads each;
//    value p is thread p % 8 of generator (p / 8) % 8192, and its word a
//    function of its position alone, as MTGP32's. No offset.
//  - Sobol32/64, scrambled or not (curand_sobol.cc): a call of n values over
//    d dimensions is dimension-major (value k is dimension k / (n / d)); value
//    i of a dimension is index offset + i + (what earlier calls gave) / d of its
//    sequence, whose bits are c ^ the XOR of direction vector b over the set
//    bits b of idx ^ (idx >> 1) (c: the dimension's scramble constant, or 0).
//  - uniform: XORWOW's and Philox's are curand_uniform's (x 2^-32 + 2^-33,
//    in (0, 1]); doubles take 53 bits of two words. normal: Box-Muller on
//    each pair of words (floats) or each pair of doubles' worth (doubles),
//    times stddev plus mean; log-normal: exp of that. MRG32k3a's come from
//    its draws in (0, m1] as curand_kernel.h's do (curand_slots.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rgpu::common::curand {

// curandRngType_t values.
inline constexpr int32_t kPseudoDefault = 100;  // XORWOW
inline constexpr int32_t kXorwow = 101;
inline constexpr int32_t kMrg32k3a = 121;
inline constexpr int32_t kMtgp32 = 141;
inline constexpr int32_t kMt19937 = 142;
inline constexpr int32_t kPhilox4x32_10 = 161;
inline constexpr int32_t kQuasiDefault = 200;  // Sobol32
inline constexpr int32_t kSobol32 = 201;
inline constexpr int32_t kScrambledSobol32 = 202;
inline constexpr int32_t kSobol64 = 203;
inline constexpr int32_t kScrambledSobol64 = 204;
inline bool isSobol(int32_t rng) { return rng >= kQuasiDefault && rng <= kScrambledSobol64; }
inline bool isSobol64(int32_t rng) { return rng == kSobol64 || rng == kScrambledSobol64; }
inline bool isScrambled(int32_t rng) { return rng == kScrambledSobol32 || rng == kScrambledSobol64; }
// Sobol: dimensions a generator may have (NVIDIA's tables hold 20,000), and
// the 32-bit words of one dimension's direction vectors and scramble constant.
inline constexpr uint32_t kMaxSobolDimensions = 20000;
inline uint32_t directionWords(int32_t rng) { return isSobol64(rng) ? 128 : 32; }
inline uint32_t scrambleWords(int32_t rng) { return isScrambled(rng) ? (isSobol64(rng) ? 2 : 1) : 0; }
// A device generator's tables travel in its request, whose message is at most
// 1 MiB (protocol::kMaxMessageBytes): they may take this many bytes, which
// bounds its dimensions (7,680 for Sobol32, 1,920 for Sobol64; a host
// generator takes all 20,000).
inline constexpr uint64_t kMaxSobolTableBytes = 960 << 10;
inline uint32_t maxDeviceDimensions(int32_t rng) {
  return static_cast<uint32_t>(kMaxSobolTableBytes / (4 * (directionWords(rng) + scrambleWords(rng))));
}

enum class Dist : uint8_t {
  kBits32,         // curandGenerate
  kUniform,        // curandGenerateUniform
  kUniformDouble,  // curandGenerateUniformDouble
  kNormal,         // curandGenerateNormal
  kNormalDouble,
  kLogNormal,
  kLogNormalDouble,
  kBits64,  // curandGenerateLongLong (64-bit Sobol only)
  kPoisson,  // curandGeneratePoisson (unsigned int; Fill::lambda; curand_poisson.cc)
};
inline constexpr uint8_t kDistCount = 9;
inline constexpr uint8_t kPseudoDistCount = 7;  // the float and word kinds of the pseudo-random generators (not kBits64, kPoisson)

// Bytes of one value of `d`.
inline uint32_t valueBytes(Dist d) {
  return d == Dist::kBits32 || d == Dist::kUniform || d == Dist::kNormal || d == Dist::kLogNormal ||
                 d == Dist::kPoisson
             ? 4
             : 8;
}

// Words per value of `d`.
inline uint32_t valueWords(Dist d) { return valueBytes(d) / 4; }

// XORWOW's SEEDED ordering: generator i is seeded with seed + i * kSeededStride
// (64-bit, wrapping) instead of starting i * 2^67 draws into one sequence;
// all else is the default ordering's (found against NVIDIA's host generator).
inline constexpr uint64_t kSeededStride = 3133713;

// Generators of slots: how many a type has (Philox: its threads).
inline constexpr uint64_t kXorwowGenerators = 4096;
inline constexpr uint64_t kMrg32k3aGenerators = 81920;
inline constexpr uint64_t kPhiloxThreads = 65536;
inline constexpr uint64_t kMaxGenerators = kMrg32k3aGenerators;
inline uint64_t generatorsOf(int32_t rng) {
  switch (rng) {
    case kXorwow: case kPseudoDefault: return kXorwowGenerators;
    case kMrg32k3a: return kMrg32k3aGenerators;
    case kPhilox4x32_10: return kPhiloxThreads;
    default: return 0;
  }
}

// A slot's values and draws for `d` (a value, or a pair of normals).
struct Slot {
  uint64_t values, draws;
};
// Philox's slot is a group of four values, its draws the Philox blocks
// (counters) a group takes: one, or two for 64-bit values.
inline Slot slotOf(int32_t rng, Dist d) {
  if (rng == kPhilox4x32_10) return {4, valueWords(d)};
  const bool mrg = rng == kMrg32k3a;  // (one draw per value of any width)
  switch (d) {
    case Dist::kNormal: case Dist::kLogNormal: return {2, 2};
    case Dist::kNormalDouble: case Dist::kLogNormalDouble: return {2, mrg ? 2u : 4u};
    case Dist::kUniformDouble: return {1, mrg ? 1u : 2u};
    default: return {1, 1};
  }
}

// Slots s in [a, b) with s % T == t (those of generator t).
inline uint64_t slotsOf(uint64_t T, uint64_t t, uint64_t a, uint64_t b) {
  auto below = [T, t](uint64_t x) { return x / T + (x % T > t ? 1 : 0); };
  return b > a ? below(b) - below(a) : 0;
}
// Generator t's first draw at slot `first`: the row of its first slot there.
inline uint64_t startDraw(uint64_t T, uint64_t t, uint64_t first) { return first / T + (t < first % T ? 1 : 0); }
// The slot of the generator's offset (Philox: the offset's group).
inline uint64_t offsetSlot(int32_t rng, uint64_t offset) { return rng == kPhilox4x32_10 ? offset / 4 : offset; }

// What a generator of slots has given, as its generators' draw counts where
// the current run of calls of one slot kind began (SlotHistory keeps them).
// Run-length coded: `draws` holds (count, generators) pairs over the
// generators in order; empty: each generator's start at the offset.
inline constexpr size_t kMaxDrawRuns = kMaxGenerators;

struct Fill {
  int32_t rng = kPhilox4x32_10;  // curandRngType_t
  uint64_t seed = 0;
  bool seeded = false;  // XORWOW's SEEDED ordering (kSeededStride)
  uint64_t offset = 0;    // curandSetGeneratorOffset
  uint64_t position = 0;  // where this call starts: the offset plus every value given before
  Dist dist = Dist::kBits32;
  double mean = 0, stddev = 1;  // normal, log-normal
  double lambda = 0;            // Poisson
  // Generators of slots: the slot this call's first value is in (slots go on from the
  // last call's, whatever it gave), and the draw counts at slot `counted`.
  uint64_t slot = 0;
  uint64_t counted = 0;
  std::vector<std::pair<uint64_t, uint32_t>> draws;
  // XORWOW and MRG32k3a, Poisson of lambda >= 2000 (kGeneratorNormals): each
  // generator's kept half of a pair of normals at slot `counted`, as 1 + the
  // draw its pair began at (0: none), run-length coded as `draws` (empty: none kept).
  std::vector<std::pair<uint64_t, uint32_t>> kept;
  // Sobol (curand_sobol.cc): its dimensions, the whole call this one is (a
  // part of: callPart), and NVIDIA's direction vectors and scramble constants
  // of those dimensions (directionWords and scrambleWords 32-bit words each,
  // 64-bit ones low word first), which the client reads out of NVIDIA's library.
  uint32_t dims = 1;
  uint64_t call_start = 0, call_count = 0;
  std::vector<uint32_t> directions, scramble;
};

// A generator of slots' history as the client keeps it: the next slot, and
// each generator's draws. `call` fills a call's Fill fields and moves on.
// While the draws per slot stay the same, the counts stay where they were
// last taken (the request stays small); a change adds the draws since.
// A Poisson call of XORWOW or MRG32k3a with lambda >= 2000 takes a pair of
// draws or a kept half per value (poissonNormalsSlots): its counts and kept
// halves are made anew after it.
class SlotHistory {
 public:
  // After curandSetGeneratorOffset: nothing given yet.
  void reset() { started_ = false, runs_.clear(), kept_.clear(); }
  // For a call of `count` values of `d` on a generator of type f.rng (f.lambda set for Poisson).
  void call(Dist d, uint64_t count, uint64_t offset, Fill& f);
  // Each generator of `rng` again at its row of the next slot, as if every
  // slot so far had taken one draw, with no kept normal (newSeed()).
  void restart(int32_t rng);

 private:
  static constexpr uint64_t kVaried = UINT64_MAX;  // draws_ after a Poisson call of normals
  bool started_ = false;
  uint64_t draws_ = 0;  // per slot, since counted_
  uint64_t slot_ = 0, counted_ = 0;
  // Each generator's draws at slot counted_, run-length coded as a Fill
  // carries them (empty: the offset's starts); remade only at a switch.
  std::vector<std::pair<uint64_t, uint32_t>> runs_;
  std::vector<std::pair<uint64_t, uint32_t>> kept_;  // (Fill::kept)
};

// What a new seed (curandSetPseudoRandomGeneratorSeed) does to a generator at
// `position` that has `history`, as NVIDIA's host generators do it (found
// against them; docs/curand.md): XORWOW and MRG32k3a go on from the next
// slot, each generator again at its row of it, as if every slot (a value, or a
// pair of normals) had taken one draw; MTGP32 and MT19937 start over at 0;
// Philox's offset moves on by the groups of four crossed since it, and a
// moved offset starts the generator afresh there.
void newSeed(int32_t rng, uint64_t& offset, uint64_t& position, SlotHistory& history);

// Run-length coding of one number per generator (Fill::draws, Fill::kept), and back.
std::vector<std::pair<uint64_t, uint32_t>> runsOf(const std::vector<uint64_t>& v);
std::vector<uint64_t> expand(const std::vector<std::pair<uint64_t, uint32_t>>& runs, uint64_t T, uint64_t none);

// Whether a Poisson call of lambda on `rng` takes each generator's own normals
// with kept halves (XORWOW and MRG32k3a, lambda >= 2000; Philox's are its
// groups' normals, as curandGenerateNormal's).
inline bool poissonNormalsSlots(int32_t rng, Dist d, double lambda);

// The rest of call `f` from its `skip`-th value on (a backend that writes a
// call in pieces); `skip` is a whole number of slots (even for pairs).
inline Fill callPart(const Fill& f, uint64_t skip) {
  Fill part = f;
  part.position = f.position + skip;
  part.slot = f.slot + skip / slotOf(f.rng, f.dist).values;  // (Philox: unused)
  return part;
}

// Whether `count` values of `d` from `rng` must come in whole pairs
// (normals of generators of slots: NVIDIA refuses an odd count, CURAND_STATUS_LENGTH_NOT_MULTIPLE).
inline bool pairsOnly(int32_t rng, Dist d) {
  return rng != kPhilox4x32_10 && generatorsOf(rng) != 0 && (d == Dist::kNormal || d == Dist::kNormalDouble || d == Dist::kLogNormal ||
                                   d == Dist::kLogNormalDouble);
}

// Whether `rng` is a generator this file computes (else: what is missing).
Status supported(int32_t rng);
// Whether `f` is a call this file computes, as it came (from a client: every
// field is checked). kNotSupported for a generator type it does not compute.
Status check(const Fill& f);
// Values [position, position + count) of `f` into `out` (count * valueBytes);
// what check() refuses, refused.
Status generate(const Fill& f, void* out, uint64_t count);

// (curand_slots.cc) generate() for a generator of slots, and check()'s part for one.
Status slotsGenerate(const Fill& f, uint8_t* out, uint64_t count);
// ... Poisson values of lambda >= 2000 of XORWOW and MRG32k3a (poissonNormalsSlots).
Status slotsPoissonGenerate(const Fill& f, uint8_t* out, uint64_t count);
Status slotsCheck(const Fill& f);
// (curand_mtgp.cc) generate() for MTGP32.
Status mtgpGenerate(const Fill& f, uint8_t* out, uint64_t count);
// (curand_mt19937.cc) generate() for MT19937, and its generators.
inline constexpr uint64_t kMt19937Generators = 8192;
Status mt19937Generate(const Fill& f, uint8_t* out, uint64_t count);
// (curand_sobol.cc) generate() and check()'s part for the Sobol generators.
Status sobolGenerate(const Fill& f, uint8_t* out, uint64_t count);
Status sobolCheck(const Fill& f);

// ---- Poisson (curand_poisson.cc) ----
// A Poisson value is one word of the generator (the one curandGenerate, or
// curandGenerateLongLong for Sobol64, gives at its position) made a count by
// the method NVIDIA's host generator takes for its type and lambda (found
// against it; docs/curand.md):
//   XORWOW, MRG32k3a, Philox4x32-10: lambda < 2000 table; else the normal
//     approximation on the generators' own float Box-Muller normals
//     (kGeneratorNormals: XORWOW's and MRG32k3a's each generator's next
//     normal, the second of a pair kept for its next such value whatever
//     calls come between; Philox's its groups' normals);
//   MTGP32: lambda < 32 table, <= 8000 inversion, else normal approximation;
//   Sobol32 (scrambled or not): lambda < 10 table, <= 8000 inversion, else normal;
//   Sobol64 (scrambled or not): lambda < 2000 inversion, else normal;
//   MT19937: lambda < 2000 table, else the normal approximation in float.
// lambda must be in (0, kMaxPoissonLambda], as NVIDIA's (OUT_OF_RANGE).
inline constexpr double kMaxPoissonLambda = 400000;
enum class PoissonMethod : uint8_t { kTable, kInversion, kNormal, kNormalFloat, kGeneratorNormals };
PoissonMethod poissonMethod(int32_t rng, double lambda);
// Whether `lambda` is one NVIDIA's takes (else kInvalidValue); every
// generator computes every lambda it takes.
Status poissonLambdaCheck(double lambda);
// The normal approximation's count of a standard normal z, in double:
// (unsigned)(sqrt(lambda) z + lambda + 0.5), 0 below (`root`: sqrt(lambda)).
inline uint32_t poissonOfNormal(double root, double lambda, double z) {
  const double v = root * z + lambda + 0.5;
  return v <= 0 ? 0 : v >= 4294967295.0 ? UINT32_MAX : static_cast<uint32_t>(v);
}
// NVIDIA's square histogram for lambda (< 2000 in practice: about 3,400 bins
// there): values shift + j, V[j] the threshold of bin j's own value, K[j] its alias.
struct PoissonTable {
  uint32_t shift = 0, length = 0;
  std::vector<double> V;
  std::vector<uint32_t> K;
};
std::shared_ptr<const PoissonTable> poissonTable(double lambda);  // (the last few kept)
// One Poisson value of a word, for one generator type and lambda. Keeps what
// it learns as it goes (inversion's walks): one thread's, not to be shared.
class PoissonDraw {
 public:
  PoissonDraw(int32_t rng, double lambda);
  uint32_t operator()(uint32_t word) const;
  uint32_t operator()(uint64_t word) const;  // (Sobol64)

 private:
  uint32_t inverted(double u) const;
  // Inversion walks sums in chunks of 500 of lambda, scaled down at each
  // chunk's start; where a chunk's walk stops depends on u, and the next
  // chunk goes on from there. A walk is a node: a chunk's sums from where
  // it is entered, until they reach 1 (no u is larger) or the
  // probabilities underflow; and the node each place of it leads to in the
  // next chunk. The answer is the loop's, found by searching each chunk's
  // sums. Past kMaxWalkSums kept sums, the loop itself.
  struct Walk {
    uint32_t chunk, k;
    std::vector<double> p, q;
    std::vector<int32_t> next;  // (-1: not walked yet)
  };
  static constexpr size_t kMaxWalkSums = size_t{1} << 21;
  int32_t walk(uint32_t chunk, uint32_t k, double p, double q) const;

  double lambda_;
  PoissonMethod method_;
  std::shared_ptr<const PoissonTable> table_;
  uint32_t chunks_ = 0;
  mutable std::vector<Walk> walks_;
  mutable size_t kept_ = 0;
};
Status poissonGenerate(const Fill& f, uint8_t* out, uint64_t count);

// MTGP32 has no jump ahead: rows (of 49,152 values) a call may run to reach
// its first value from the nearest kept state (about 6 s on one core); a call
// that starts farther is refused (a client cannot make a worker run forever).
inline constexpr uint64_t kMaxMtgpSkipRows = uint64_t{1} << 16;

// MT19937 has a jump between its generators but none within one: blocks (of
// 5,111,808 values) a call may twist through to reach its first value from the
// nearest kept state (3 ms per block for all 8192 generators here, about 3 s
// in all); a call that starts farther is refused.
inline constexpr uint64_t kMaxMt19937SkipBlocks = 1024;

// A generator's draws and kept half (1 + the draw its pair began at; 0: none)
// after k more of its values of a Poisson call of normals.
inline void afterNormals(uint64_t& draws, uint64_t& kept, uint64_t k) {
  if (!k) return;
  const bool had = kept != 0;
  draws += 2 * (had ? k / 2 : (k + 1) / 2);
  kept = had != (k % 2 == 1) ? draws - 1 : 0;
}

inline bool poissonNormalsSlots(int32_t rng, Dist d, double lambda) {
  return d == Dist::kPoisson && (rng == kXorwow || rng == kPseudoDefault || rng == kMrg32k3a) &&
         poissonMethod(rng, lambda) == PoissonMethod::kGeneratorNormals;
}

// Whether a generator of type `rng` takes an offset (MTGP32 and MT19937 do not: NVIDIA's answers TYPE_ERROR).
inline bool takesOffset(int32_t rng) { return rng != kMtgp32 && rng != kMt19937; }

}  // namespace rgpu::common::curand
