// cuRAND's host-API generators on the CPU (common/curand_cpu.h) against
// NVIDIA's own: the toolkit's libcurand.so.10 generates on the CPU too
// (curandCreateGeneratorHost), without a GPU, so every value is compared
// bit for bit.
#include "common/curand_cpu.h"

#include <curand.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/nvidia_curand.h"

namespace rgpu::common::curand {
namespace {

// A call's Fill: generator, seed, offset, position, distribution, mean and stddev.
Fill fill(int32_t rng, uint64_t seed, uint64_t offset, uint64_t position, Dist d, double mean, double stddev) {
  Fill f;
  f.rng = rng, f.seed = seed, f.offset = offset, f.position = position, f.dist = d, f.mean = mean, f.stddev = stddev;
  return f;
}

using Nvidia = test::NvidiaCurand;
Nvidia& nvidia() { return test::nvidiaCurand(); }

// NVIDIA's values for calls of `counts` values each, after `off`.
std::vector<uint8_t> nvidiasValues(int32_t rng, Dist d, uint64_t s, uint64_t off, const std::vector<size_t>& counts,
                                   double mean, double stddev) {
  Nvidia& n = nvidia();
  curandGenerator_t g = nullptr;
  EXPECT_EQ(n.create(&g, static_cast<curandRngType_t>(rng)), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(n.seed(g, s), CURAND_STATUS_SUCCESS);
  if (off || takesOffset(rng)) {
    EXPECT_EQ(n.offset(g, off), CURAND_STATUS_SUCCESS);
  }
  std::vector<uint8_t> out;
  for (size_t count : counts) {
    std::vector<uint8_t> v(count * valueBytes(d));
    EXPECT_EQ(n.generate(g, d, v.data(), count, mean, stddev), CURAND_STATUS_SUCCESS);
    out.insert(out.end(), v.begin(), v.end());
  }
  n.destroy(g);
  return out;
}

// A generator as rgpu's libcurand keeps one: its offset and position.
struct Ours {
  int32_t rng;
  uint64_t seed, offset, position;
  SlotHistory history;
  std::vector<uint8_t> call(Dist d, size_t n, double mean, double stddev) {
    std::vector<uint8_t> v(n * valueBytes(d));
    Fill f = fill(rng, seed, offset, position, d, mean, stddev);
    if (generatorsOf(rng)) history.call(d, n, offset, f);
    Status s = generate(f, v.data(), n);
    EXPECT_TRUE(s) << s.message();
    position += n;
    return v;
  }
};

std::vector<uint8_t> ours(int32_t rng, Dist d, uint64_t seed, uint64_t off, const std::vector<size_t>& counts,
                          double mean, double stddev) {
  Ours g{rng, seed, off, off, {}};
  std::vector<uint8_t> out;
  for (size_t n : counts) {
    auto v = g.call(d, n, mean, stddev);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

size_t firstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t width) {
  for (size_t i = 0; i < a.size() && i < b.size(); i += width)
    if (std::memcmp(a.data() + i, b.data() + i, width) != 0) return i / width;
  return a.size() == b.size() ? SIZE_MAX : std::min(a.size(), b.size()) / width;
}

// Each distribution of `rng`, bit for bit against NVIDIA's, over these cases
// (`only`: the indices of the cases a distribution gets; empty: all).
void expectNvidias(int32_t rng, const std::vector<size_t>& only_bits, const std::vector<size_t>& only_others) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  struct Case {
    uint64_t seed, offset;
    std::vector<size_t> counts;
  };
  // Past one round of 65536 threads (Philox), of 4096 generators (XORWOW)
  // and of 81920 (MRG32k3a), odd offsets, split calls, and calls that split a pair of normals.
  const std::vector<Case> cases = {{1234, 0, {600000}},
                                   {0, 7, {2, 10, 1000}},
                                   {18446744073709551615ull, 123457, {4096, 262146}},
                                   {42, 1ull << 33, {70002}},
                                   {9, 2, {3, 5, 1001, 8193}}};
  for (uint8_t k = 0; k < kPseudoDistCount; ++k) {
    const Dist d = static_cast<Dist>(k);
    const auto& only = d == Dist::kBits32 ? only_bits : only_others;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      if (pairsOnly(rng, d) && c.counts.front() % 2) continue;  // (refused: below)
      if (!only.empty() && std::find(only.begin(), only.end(), ci) == only.end()) continue;
      SCOPED_TRACE("generator " + std::to_string(rng) + ", distribution " + std::to_string(k) + ", seed " +
                   std::to_string(c.seed) + ", offset " + std::to_string(c.offset));
      const double mean = 0.25, stddev = 1.5;
      auto want = nvidiasValues(rng, d, c.seed, c.offset, c.counts, mean, stddev);
      auto got = ours(rng, d, c.seed, c.offset, c.counts, mean, stddev);
      EXPECT_EQ(firstDifference(got, want, valueBytes(d)), SIZE_MAX);
    }
  }
}

TEST(CurandCpu, ValuesAreNvidiasBitForBitForEveryGeneratorDistributionSeedOffsetAndSplit) {
  for (int32_t rng : {kPhilox4x32_10, kXorwow, kPseudoDefault}) expectNvidias(rng, {}, {});
}

// NVIDIA's MRG32k3a host generator takes about a second to set up its 81920
// generators: every distribution gets the case of a seed, an offset past a
// row and a split; 32-bit values odd splits too.
TEST(CurandCpu, Mrg32k3aValuesAreNvidiasBitForBit) { expectNvidias(kMrg32k3a, {2, 4}, {2}); }

// MTGP32 takes no offset: every distribution from position 0 over calls
// that split its rows of 49152 values, with seeds whose halves fold.
TEST(CurandCpu, Mtgp32ValuesAreNvidiasBitForBit) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  const std::vector<std::pair<uint64_t, std::vector<size_t>>> cases = {
      {1234, {600000}}, {0, {3, 5, 1001, 49152, 8193}}, {18446744073709551615ull, {49151, 2, 100000}}};
  for (uint8_t k = 0; k < kPseudoDistCount; ++k)
    for (const auto& [seed, counts] : cases) {
      const Dist d = static_cast<Dist>(k);
      SCOPED_TRACE("distribution " + std::to_string(k) + ", seed " + std::to_string(seed));
      auto want = nvidiasValues(kMtgp32, d, seed, 0, counts, 0.25, 1.5);
      auto got = ours(kMtgp32, d, seed, 0, counts, 0.25, 1.5);
      EXPECT_EQ(firstDifference(got, want, valueBytes(d)), SIZE_MAX);
    }
  // An offset is a type error for NVIDIA's and a refused call for rgpu's.
  curandGenerator_t g = nullptr;
  ASSERT_EQ(nvidia().create(&g, CURAND_RNG_PSEUDO_MTGP32), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(nvidia().offset(g, 0), CURAND_STATUS_TYPE_ERROR);
  nvidia().destroy(g);
  EXPECT_FALSE(takesOffset(kMtgp32));
  Fill f = fill(kMtgp32, 1, 5, 5, Dist::kUniform, 0, 1);
  EXPECT_EQ(check(f).code(), err::kInvalidValue);
  // A position farther than kMaxMtgpSkipRows rows from any kept state is refused
  // at once, not run to (a fuzzed request once kept a worker busy for hours).
  Fill far;
  far.rng = kMtgp32, far.seed = 0x5eed, far.dist = Dist::kBits32;
  far.position = (kMaxMtgpSkipRows + 2) * 49152;
  uint32_t v = 0;
  Status s = generate(far, &v, 1);
  EXPECT_EQ(s.code(), err::kInvalidValue);
  EXPECT_NE(s.message().find("past the nearest state this process keeps"), std::string::npos) << s.message();
}

// MT19937 takes no offset either. One NVIDIA generator (it takes about 5 s to
// set up its 8192 generators) and one of rgpu's are given the same calls of
// every kind: odd counts, calls inside one row of 65,536 values and across
// rows, and on past row 78, where each generator's second block of 624 words
// begins. The seed's upper half is set: only its low 32 bits count.
TEST(CurandCpu, Mt19937ValuesAreNvidiasBitForBit) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  const uint64_t seed = 0x0123456789abcdefull;
  const std::vector<std::pair<Dist, size_t>> calls = {
      {Dist::kBits32, 5},           {Dist::kUniform, 1001},      {Dist::kNormal, 3},
      {Dist::kUniformDouble, 70001}, {Dist::kNormalDouble, 9},   {Dist::kLogNormal, 65536},
      {Dist::kLogNormalDouble, 7},  {Dist::kBits32, 5000000},    {Dist::kUniform, 200003},
      {Dist::kNormalDouble, 131072}, {Dist::kNormal, 11}};
  Nvidia& n = nvidia();
  curandGenerator_t g = nullptr;
  ASSERT_EQ(n.create(&g, CURAND_RNG_PSEUDO_MT19937), CURAND_STATUS_SUCCESS);
  ASSERT_EQ(n.seed(g, seed), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(n.offset(g, 0), CURAND_STATUS_TYPE_ERROR);
  Ours o{kMt19937, seed, 0, 0, {}};
  for (size_t c = 0; c < calls.size(); ++c) {
    auto [d, count] = calls[c];
    SCOPED_TRACE("call " + std::to_string(c) + " at " + std::to_string(o.position));
    std::vector<uint8_t> want(count * valueBytes(d));
    ASSERT_EQ(n.generate(g, d, want.data(), count, 0.25, 1.5), CURAND_STATUS_SUCCESS);
    EXPECT_EQ(firstDifference(o.call(d, count, 0.25, 1.5), want, valueBytes(d)), SIZE_MAX);
  }
  n.destroy(g);
  EXPECT_GT(o.position, 78u * 65536);
  // An offset is refused; so is a position farther than kMaxMt19937SkipBlocks
  // blocks of 5,111,808 values from any kept state.
  EXPECT_FALSE(takesOffset(kMt19937));
  EXPECT_EQ(check(fill(kMt19937, 1, 5, 5, Dist::kUniform, 0, 1)).code(), err::kInvalidValue);
  Fill far = fill(kMt19937, 0x5eed, 0, (kMaxMt19937SkipBlocks + 2) * 78 * 65536, Dist::kBits32, 0, 1);
  uint32_t v = 0;
  Status s = generate(far, &v, 1);
  EXPECT_EQ(s.code(), err::kInvalidValue);
  EXPECT_NE(s.message().find("past the nearest state this process keeps"), std::string::npos) << s.message();
}

// XORWOW's SEEDED ordering: generator i seeded with seed + i * 3133713 (64
// bits, wrapping), all else as the default ordering. Calls of every kind
// (Poisson values of a table's lambda and of the generators' normals too),
// seeds whose sum wraps, with and without an offset.
TEST(CurandCpu, XorwowSeededOrderingIsNvidiasBitForBit) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  struct Call {
    Dist d;
    size_t count;
    double lambda;
  };
  const std::vector<Call> calls = {{Dist::kUniform, 5, 0},         {Dist::kNormal, 8192, 0},
                                   {Dist::kBits32, 10001, 0},      {Dist::kPoisson, 4097, 3000},
                                   {Dist::kUniformDouble, 3001, 0}, {Dist::kNormalDouble, 4100, 0},
                                   {Dist::kPoisson, 999, 5},       {Dist::kLogNormal, 6, 0},
                                   {Dist::kPoisson, 8193, 100000}, {Dist::kBits32, 300000, 0}};
  Nvidia& n = nvidia();
  for (uint64_t seed : {uint64_t{1234}, uint64_t{0xfffffffffffffff0ull}})
    for (uint64_t off : {uint64_t{0}, uint64_t{100003}}) {
      curandGenerator_t g = nullptr;
      ASSERT_EQ(n.create(&g, CURAND_RNG_PSEUDO_XORWOW), CURAND_STATUS_SUCCESS);
      ASSERT_EQ(n.seed(g, seed), CURAND_STATUS_SUCCESS);
      ASSERT_EQ(n.ordering(g, CURAND_ORDERING_PSEUDO_SEEDED), CURAND_STATUS_SUCCESS);
      ASSERT_EQ(n.offset(g, off), CURAND_STATUS_SUCCESS);
      SlotHistory history;
      uint64_t position = off;
      for (size_t c = 0; c < calls.size(); ++c) {
        const Call& call = calls[c];
        SCOPED_TRACE("seed " + std::to_string(seed) + ", offset " + std::to_string(off) + ", call " + std::to_string(c));
        std::vector<uint8_t> want(call.count * valueBytes(call.d)), got(want.size());
        ASSERT_EQ(n.generate(g, call.d, want.data(), call.count, 0.25, 1.5, call.lambda), CURAND_STATUS_SUCCESS);
        Fill f = fill(kXorwow, seed, off, position, call.d, 0.25, 1.5);
        f.seeded = true, f.lambda = call.lambda;
        history.call(call.d, call.count, off, f);
        ASSERT_TRUE(generate(f, got.data(), call.count));
        EXPECT_EQ(firstDifference(got, want, valueBytes(call.d)), SIZE_MAX);
        position += call.count;
      }
      n.destroy(g);
    }
  // Only XORWOW has it: NVIDIA's says out of range for the others, and a request that carries it for one is refused.
  curandGenerator_t g = nullptr;
  ASSERT_EQ(n.create(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(n.ordering(g, CURAND_ORDERING_PSEUDO_SEEDED), CURAND_STATUS_OUT_OF_RANGE);
  n.destroy(g);
  Fill philox = fill(kPhilox4x32_10, 1, 0, 0, Dist::kUniform, 0, 1);
  philox.seeded = true;
  EXPECT_EQ(check(philox).code(), err::kInvalidValue);
}

// A new seed on a generator that has given values: NVIDIA's XORWOW and
// MRG32k3a go on from the next slot, each generator again at its row of it as
// if every slot had taken one draw (doubles and normals take more), with no
// kept normal; MTGP32 starts over at 0; Philox's offset moves on by the
// groups of four crossed since it (an offset still 0 leaves all as it was). Calls of every kind before and after
// two new seeds, with and without an offset.
TEST(CurandCpu, ANewSeedGoesOnAsNvidiasDoes) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  struct Call {
    Dist d;
    size_t count;
    double lambda;
    uint64_t reseed;  // (before the call; 0: none)
  };
  const std::vector<Call> calls = {{Dist::kUniformDouble, 4101, 0, 0}, {Dist::kNormal, 8192, 0, 0},
                                   {Dist::kPoisson, 5, 3000, 0},       {Dist::kBits32, 5000, 0, 6},
                                   {Dist::kNormal, 4096, 0, 0},        {Dist::kUniformDouble, 3, 0, 0},
                                   {Dist::kPoisson, 4099, 2500, 7},    {Dist::kUniform, 100, 0, 0}};
  // (Philox, small: new seeds inside the first group, where nothing moves, and past it.)
  const std::vector<Call> small = {{Dist::kBits32, 2, 0, 0},
                                   {Dist::kUniform, 1, 0, 6},
                                   {Dist::kNormal, 6, 0, 7},
                                   {Dist::kBits32, 9, 0, 8},
                                   {Dist::kUniformDouble, 3, 0, 9}};
  Nvidia& n = nvidia();
  for (auto [rng, off, these] : std::vector<std::tuple<int32_t, uint64_t, const std::vector<Call>*>>{
           {kXorwow, 0, &calls},
           {kXorwow, 11, &calls},
           {kMrg32k3a, 3, &calls},
           {kMtgp32, 0, &calls},
           {kPhilox4x32_10, 0, &calls},
           {kPhilox4x32_10, 5, &calls},
           {kPhilox4x32_10, 0, &small},
           {kPhilox4x32_10, 3, &small}}) {
    curandGenerator_t g = nullptr;
    ASSERT_EQ(n.create(&g, static_cast<curandRngType_t>(rng)), CURAND_STATUS_SUCCESS);
    ASSERT_EQ(n.seed(g, 5), CURAND_STATUS_SUCCESS);
    if (takesOffset(rng)) {
      ASSERT_EQ(n.offset(g, off), CURAND_STATUS_SUCCESS);
    }
    SlotHistory history;
    uint64_t seed = 5, offset = off, position = off;
    for (size_t c = 0; c < these->size(); ++c) {
      const Call& call = (*these)[c];
      SCOPED_TRACE("generator " + std::to_string(rng) + ", offset " + std::to_string(off) + ", call " + std::to_string(c));
      if (call.reseed) {
        ASSERT_EQ(n.seed(g, call.reseed), CURAND_STATUS_SUCCESS);
        seed = call.reseed;
        newSeed(rng, offset, position, history);
      }
      std::vector<uint8_t> want(call.count * valueBytes(call.d)), got(want.size());
      ASSERT_EQ(n.generate(g, call.d, want.data(), call.count, 0.25, 1.5, call.lambda), CURAND_STATUS_SUCCESS);
      Fill f = fill(rng, seed, offset, position, call.d, 0.25, 1.5);
      f.lambda = call.lambda;
      if (generatorsOf(rng)) history.call(call.d, call.count, offset, f);
      ASSERT_TRUE(generate(f, got.data(), call.count));
      EXPECT_EQ(firstDifference(got, want, valueBytes(call.d)), SIZE_MAX);
      position += call.count;
    }
    n.destroy(g);
  }
}

// One generator, calls of every kind in turn: each of its generators (or
// Philox's threads) goes on from the draws it took, and a run of normals
// pairs its values from where the run began. Philox also gets odd counts
// of every kind, so that calls end inside its groups of four.
TEST(CurandCpu, AGeneratorThatSwitchesKindsGoesOnAsNvidiasDoes) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  const std::vector<std::pair<Dist, size_t>> calls = {
      {Dist::kUniform, 5},         {Dist::kNormal, 8192},       {Dist::kBits32, 10001},
      {Dist::kUniformDouble, 3001}, {Dist::kNormalDouble, 4100}, {Dist::kNormal, 2},
      {Dist::kNormal, 70000},      {Dist::kLogNormalDouble, 6}, {Dist::kBits32, 300000},
      {Dist::kUniformDouble, 1}};
  const std::vector<std::pair<Dist, size_t>> odd = {
      {Dist::kBits32, 5},          {Dist::kUniformDouble, 7},   {Dist::kBits32, 300000},
      {Dist::kNormal, 3},          {Dist::kNormalDouble, 262147}, {Dist::kUniform, 1001},
      {Dist::kLogNormalDouble, 9}, {Dist::kBits32, 270001},     {Dist::kNormal, 11}};
  Nvidia& n = nvidia();
  const std::vector<std::pair<int32_t, const std::vector<std::pair<Dist, size_t>>*>> runs = {
      {kXorwow, &calls}, {kMrg32k3a, &calls}, {kPhilox4x32_10, &calls}, {kPhilox4x32_10, &odd}, {kMtgp32, &odd}};
  for (auto [rng, these] : runs) {
  curandGenerator_t g = nullptr;
  ASSERT_EQ(n.create(&g, static_cast<curandRngType_t>(rng)), CURAND_STATUS_SUCCESS);
  ASSERT_EQ(n.seed(g, 77), CURAND_STATUS_SUCCESS);
  const uint64_t off = takesOffset(rng) ? 100003 : 0;
  if (off) {
    ASSERT_EQ(n.offset(g, off), CURAND_STATUS_SUCCESS);
  }
  Ours o{rng, 77, off, off, {}};
  for (size_t c = 0; c < these->size(); ++c) {
    auto [d, count] = (*these)[c];
    SCOPED_TRACE("generator " + std::to_string(rng) + ", call " + std::to_string(c));
    std::vector<uint8_t> want(count * valueBytes(d));
    ASSERT_EQ(n.generate(g, d, want.data(), count, 0., 1.), CURAND_STATUS_SUCCESS);
    EXPECT_EQ(firstDifference(o.call(d, count, 0., 1.), want, valueBytes(d)), SIZE_MAX);
  }
  n.destroy(g);
  }
}

// A call written in pieces (as the CUDA backend writes one) gives what it gives whole.
TEST(CurandCpu, ACallWrittenInPiecesGivesWhatItGivesWhole) {
  for (int32_t rng : {kPhilox4x32_10, kXorwow, kMrg32k3a, kMtgp32, kMt19937})
    for (uint8_t k = 0; k < kPseudoDistCount; ++k) {
      const Dist d = static_cast<Dist>(k);
      SCOPED_TRACE("generator " + std::to_string(rng) + ", distribution " + std::to_string(k));
      const uint64_t off = takesOffset(rng) ? 11 : 0;
      Ours g{rng, 3, off, off, {}};
      (void)g.call(Dist::kUniform, 6, 0., 1.);  // a history with a switch before the call
      Fill f = fill(rng, 3, off, g.position, d, 0.5, 2.0);
      if (generatorsOf(rng)) g.history.call(d, 20000, off, f);
      std::vector<uint8_t> whole(20000 * valueBytes(d)), pieces(whole.size());
      ASSERT_TRUE(generate(f, whole.data(), 20000));
      for (uint64_t done = 0; done < 20000; done += 4096) {
        const uint64_t n = std::min<uint64_t>(4096, 20000 - done);
        ASSERT_TRUE(generate(callPart(f, done), pieces.data() + done * valueBytes(d), n));
      }
      EXPECT_EQ(firstDifference(pieces, whole, valueBytes(d)), SIZE_MAX);
    }
}

// XORWOW's and MRG32k3a's normals come in pairs: NVIDIA refuses an odd
// count, and rgpu's library does too.
TEST(CurandCpu, NormalsOfGeneratorsOfSlotsComeInPairsAsNvidiasDo) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  for (int32_t rng : {kXorwow, kMrg32k3a}) {
    curandGenerator_t g = nullptr;
    ASSERT_EQ(nvidia().create(&g, static_cast<curandRngType_t>(rng)), CURAND_STATUS_SUCCESS);
    float f[3];
    double d[3];
    EXPECT_EQ(nvidia().normal(g, f, 3, 0.f, 1.f), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_EQ(nvidia().normal_d(g, d, 3, 0., 1.), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_EQ(nvidia().log_normal(g, f, 3, 0.f, 1.f), CURAND_STATUS_LENGTH_NOT_MULTIPLE);
    EXPECT_EQ(nvidia().uniform(g, f, 3), CURAND_STATUS_SUCCESS);
    nvidia().destroy(g);
    for (Dist dist : {Dist::kNormal, Dist::kNormalDouble, Dist::kLogNormal, Dist::kLogNormalDouble}) {
      EXPECT_TRUE(pairsOnly(rng, dist));
      EXPECT_FALSE(pairsOnly(kPhilox4x32_10, dist));
    }
    EXPECT_FALSE(pairsOnly(rng, Dist::kUniform));
  }
}

// A request is input like any other: every field is checked before anything is computed.
TEST(CurandCpu, ACallThatDoesNotHoldTogetherIsRefused) {
  auto refused = [](Fill f) {
    uint32_t v[4];
    EXPECT_EQ(check(f).code(), err::kInvalidValue);
    EXPECT_EQ(generate(f, v, 4).code(), err::kInvalidValue);
  };
  Fill f = fill(kXorwow, 1, 100, 100, Dist::kUniform, 0, 1);
  f.slot = 100;
  f.counted = 100;
  EXPECT_TRUE(check(f));
  Fill bad = f;
  bad.position = 99;  // before the offset
  refused(bad);
  bad = f;
  bad.counted = 101;  // counts taken past the call's slot
  refused(bad);
  bad = f;
  bad.draws = {{3, 4000}};  // counts for 4000 generators, not 4096
  refused(bad);
  bad.draws.assign(generatorsOf(kXorwow) + 1, {3, 1});  // more runs than generators
  refused(bad);
  bad = f;
  bad.dist = static_cast<Dist>(kDistCount);
  refused(bad);
  Fill philox = fill(kPhilox4x32_10, 1, 100, 120, Dist::kUniform, 0, 1);
  philox.counted = 30;  // Philox's slot is the position's group: 30
  EXPECT_TRUE(check(philox));
  philox.counted = 31;
  refused(philox);
  philox.counted = 24;  // before the offset's group
  refused(philox);
  philox.counted = 30;
  philox.draws = {{2, 65535}};  // counts for 65535 threads, not 65536
  refused(philox);
  // Kept halves of normals (XORWOW's Poisson values of lambda >= 2000): each
  // from a pair of draws the generator has taken, for a call that takes them.
  Fill poisson = f;
  poisson.dist = Dist::kPoisson, poisson.lambda = 3000;
  poisson.draws = {{2, 4096}};
  poisson.kept = {{1, 4096}};  // (pairs from draws 0 and 1)
  EXPECT_TRUE(check(poisson));
  bad = poisson;
  bad.kept = {{2, 4096}};  // from draws 1 and 2: 2 is not taken yet
  refused(bad);
  bad.kept = {{1, 4095}};  // for 4095 generators
  refused(bad);
  bad = poisson;
  bad.lambda = 1999;  // a table: takes no normals
  refused(bad);
  bad = f;
  bad.kept = {{1, 4096}};  // uniforms
  refused(bad);
}

TEST(CurandCpu, OtherGeneratorsAreRefusedNamingWhatIs) {
  uint32_t v[4];
  for (int32_t rng : {143, 0, 205}) {
    Fill f;
    f.rng = rng;
    Status s = generate(f, v, 4);
    EXPECT_EQ(s.code(), err::kNotSupported) << rng;
    EXPECT_NE(s.message().find("XORWOW, 100 and 101, MRG32k3a, 121, MTGP32, 141, MT19937, 142, Philox4x32-10, 161, and Sobol, 200 to 204, are"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace rgpu::common::curand
