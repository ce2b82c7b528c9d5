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
//  - XORWOW (CURAND_RNG_PSEUDO_XORWOW, and _DEFAULT): 4096 generators, i
//    started i * 2^67 draws in; slot s (a value, or a pair of normals) is
//    generator s % 4096's, which starts at the draw of its first slot's row
//    at the offset and takes its slots' draws in order; slots go on from call
//    to call whatever the calls gave (XorwowHistory). Exact for any calls.
//  - Philox (below): exact while a generator's calls keep one kind of value
//    (32-bit and uniform floats; doubles; normal pairs).
//  - Philox4x32-10 (CURAND_RNG_PSEUDO_PHILOX4_32_10; orderings BEST,
//    DEFAULT and LEGACY are one layout): 65536 threads, thread t using the
//    counters {c, t}, key = seed. 32-bit values and floats: value i is word
//    i % 4 of the block of thread (i / 4) % 65536, counter (i / 4) / 65536.
//    That layout is one of words: each thread goes through its counters'
//    words in order, and a value takes one word (32-bit values, floats) or
//    two (doubles). A thread starts (after the generator's offset) at word
//    4 r, r the row of its first group at or after the offset's; value j's
//    word is that plus the words of the thread's values since the offset's
//    group, each at the width of the call (so 32-bit values lie as above for
//    any split into calls). Checked for generators that give one width all
//    along; one that changes between 32-bit and 64-bit values is not yet
//    reproduced (docs/curand.md).
//  - uniform: curand_uniform's (x 2^-32 + 2^-33, in (0, 1]); doubles take
//    53 bits of two words. normal: Box-Muller on each pair of words (floats)
//    or each pair of doubles' worth (doubles), times stddev plus mean;
//    log-normal: exp of that.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rgpu::common::curand {

// curandRngType_t values.
inline constexpr int32_t kPseudoDefault = 100;  // XORWOW
inline constexpr int32_t kXorwow = 101;
inline constexpr int32_t kPhilox4x32_10 = 161;

enum class Dist : uint8_t {
  kBits32,         // curandGenerate
  kUniform,        // curandGenerateUniform
  kUniformDouble,  // curandGenerateUniformDouble
  kNormal,         // curandGenerateNormal
  kNormalDouble,
  kLogNormal,
  kLogNormalDouble,
};
inline constexpr uint8_t kDistCount = 7;

// Bytes of one value of `d`.
inline uint32_t valueBytes(Dist d) {
  return d == Dist::kBits32 || d == Dist::kUniform || d == Dist::kNormal || d == Dist::kLogNormal ? 4 : 8;
}

// Words per value of `d`.
inline uint32_t valueWords(Dist d) { return valueBytes(d) / 4; }

// XORWOW's generators, and a slot's values and draws for `d` (a value, or a pair of normals).
inline constexpr uint64_t kXorwowGenerators = 4096;
struct Slot {
  uint64_t values, draws;
};
inline Slot xorwowSlot(Dist d) {
  switch (d) {
    case Dist::kNormal: case Dist::kLogNormal: return {2, 2};
    case Dist::kNormalDouble: case Dist::kLogNormalDouble: return {2, 4};
    case Dist::kUniformDouble: return {1, 2};
    default: return {1, 1};
  }
}

// What a XORWOW generator has given, as its generators' draw counts where the
// current run of calls of one slot kind began (XorwowHistory keeps them).
// Run-length coded: `draws` holds (count, generators) pairs over the 4096
// generators in order; empty: each generator's start at the offset.
inline constexpr size_t kMaxDrawRuns = kXorwowGenerators;

struct Fill {
  int32_t rng = kPhilox4x32_10;  // curandRngType_t
  uint64_t seed = 0;
  uint64_t offset = 0;    // curandSetGeneratorOffset
  uint64_t position = 0;  // where this call starts: the offset plus every value given before
  Dist dist = Dist::kBits32;
  double mean = 0, stddev = 1;  // normal, log-normal
  // XORWOW: the slot this call's first value is in (slots go on from the
  // last call's, whatever it gave), and the draw counts at slot `counted`.
  uint64_t slot = 0;
  uint64_t counted = 0;
  std::vector<std::pair<uint64_t, uint32_t>> draws;
};

// A XORWOW generator's history as the client keeps it: the next slot, and
// each generator's draws. `call` fills a call's Fill fields and moves on.
// While the draws per slot stay the same, the counts stay where they were
// last taken (the request stays small); a change adds the draws since.
class XorwowHistory {
 public:
  // After curandSetGeneratorOffset: nothing given yet.
  void reset() { started_ = false, counts_.clear(); }
  // For a call of `count` values of `d`.
  void call(Dist d, uint64_t count, uint64_t offset, Fill& f);

 private:
  bool started_ = false;
  uint64_t draws_ = 0;  // per slot, since counted_
  uint64_t slot_ = 0, counted_ = 0;
  std::vector<uint64_t> counts_;  // by generator, at slot counted_ (empty: the offset's starts)
};

// The rest of call `f` from its `skip`-th value on (a backend that writes a
// call in pieces); `skip` is a whole number of slots (even for pairs).
inline Fill callPart(const Fill& f, uint64_t skip) {
  Fill part = f;
  part.position = f.position + skip;
  part.slot = f.slot + skip / xorwowSlot(f.dist).values;  // (Philox: unused)
  return part;
}

// Whether `count` values of `d` from `rng` must come in whole pairs
// (XORWOW's normals: NVIDIA refuses an odd count, CURAND_STATUS_LENGTH_NOT_MULTIPLE).
inline bool pairsOnly(int32_t rng, Dist d) {
  return rng != kPhilox4x32_10 && (d == Dist::kNormal || d == Dist::kNormalDouble || d == Dist::kLogNormal ||
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

}  // namespace rgpu::common::curand
