// cuRAND's Sobol generators (common/curand_sobol.cc) against NVIDIA's own
// host generator in the toolkit's libcurand.so.10, bit for bit: Sobol32,
// scrambled Sobol32, Sobol64 and scrambled Sobol64, every distribution, one
// to several dimensions, offsets, calls that go on from each other, and a
// call written in pieces -- with NVIDIA's direction vectors and scramble
// constants read out of that library, as rgpu's client reads them.
#include <curand.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/curand_cpu.h"
#include "tests/support/nvidia_curand.h"

namespace rgpu::common::curand {
namespace {

using Nvidia = test::NvidiaCurand;
Nvidia& nvidia() { return test::nvidiaCurand(); }

// NVIDIA's values of calls of `counts` values each, `dims` dimensions, after `off`.
std::vector<uint8_t> nvidiasValues(int32_t rng, Dist d, uint32_t dims, uint64_t off, const std::vector<size_t>& counts) {
  Nvidia& nv = nvidia();
  curandGenerator_t g = nullptr;
  EXPECT_EQ(nv.create(&g, static_cast<curandRngType_t>(rng)), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(nv.dimensions(g, dims), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(nv.offset(g, off), CURAND_STATUS_SUCCESS);
  std::vector<uint8_t> out;
  for (size_t n : counts) {
    std::vector<uint8_t> v(n * valueBytes(d));
    EXPECT_EQ(nv.generate(g, d, v.data(), n, 0.25, 1.5), CURAND_STATUS_SUCCESS);
    out.insert(out.end(), v.begin(), v.end());
  }
  nv.destroy(g);
  return out;
}

// rgpu's values for the same calls (each written in two pieces, as a backend may).
std::vector<uint8_t> ours(int32_t rng, Dist d, uint32_t dims, uint64_t off, const std::vector<size_t>& counts) {
  Fill f;
  f.rng = rng, f.dist = d, f.dims = dims, f.offset = off, f.position = off, f.mean = 0.25, f.stddev = 1.5;
  nvidia().sobolTables(rng, dims, f);
  std::vector<uint8_t> out;
  for (size_t n : counts) {
    f.call_start = f.position, f.call_count = n;
    std::vector<uint8_t> v(n * valueBytes(d));
    const size_t half = n / 3;
    Status s = generate(f, v.data(), half);
    EXPECT_TRUE(s) << s.message();
    s = generate(callPart(f, half), v.data() + half * valueBytes(d), n - half);
    EXPECT_TRUE(s) << s.message();
    out.insert(out.end(), v.begin(), v.end());
    f.position += n;
  }
  return out;
}

TEST(CurandSobol, ValuesAreNvidiasBitForBit) {
  ASSERT_TRUE(nvidia().h) << "the toolkit's libcurand.so.10: " << ::dlerror();
  struct Case {
    uint32_t dims;
    uint64_t offset;
    std::vector<size_t> counts;
  };
  const std::vector<Case> cases = {{1, 0, {1000, 7, 4096}}, {3, 5, {300, 3, 999}}, {7, 1000, {7000, 70}},
                                   {20000, 2, {40000}}};
  for (int32_t rng : {kSobol32, kScrambledSobol32, kSobol64, kScrambledSobol64})
    for (Dist d : {Dist::kBits32, Dist::kBits64, Dist::kUniform, Dist::kUniformDouble, Dist::kNormal,
                   Dist::kNormalDouble, Dist::kLogNormal, Dist::kLogNormalDouble}) {
      if ((d == Dist::kBits32 && isSobol64(rng)) || (d == Dist::kBits64 && !isSobol64(rng))) continue;
      for (const Case& c : cases) {
        const auto want = nvidiasValues(rng, d, c.dims, c.offset, c.counts);
        const auto got = ours(rng, d, c.dims, c.offset, c.counts);
        ASSERT_EQ(got.size(), want.size());
        size_t first = SIZE_MAX;
        for (size_t i = 0; i < got.size(); i += valueBytes(d))
          if (std::memcmp(got.data() + i, want.data() + i, valueBytes(d)) != 0) {
            first = i / valueBytes(d);
            break;
          }
        EXPECT_EQ(first, SIZE_MAX) << "rng " << rng << " dist " << int(d) << " dims " << c.dims << " offset "
                                   << c.offset;
      }
    }
}

TEST(CurandSobol, ACallThatDoesNotHoldTogetherIsRefused) {
  Fill f;
  f.rng = kSobol32, f.dims = 3, f.call_count = 9;
  nvidia().sobolTables(kSobol32, 3, f);
  EXPECT_TRUE(check(f));
  Fill g = f;
  g.call_count = 10;  // not a multiple of the dimensions
  EXPECT_EQ(check(g).code(), err::kInvalidValue);
  g = f;
  g.directions.pop_back();
  EXPECT_EQ(check(g).code(), err::kInvalidValue);
  g = f;
  g.dist = Dist::kBits64;
  EXPECT_EQ(check(g).code(), err::kInvalidValue);
  g = f;
  g.dims = kMaxSobolDimensions + 1;
  EXPECT_EQ(check(g).code(), err::kInvalidValue);
  uint32_t v[9];
  g = callPart(f, 8);
  EXPECT_EQ(generate(g, v, 2).code(), err::kInvalidValue);  // past the end of its call
}

}  // namespace
}  // namespace rgpu::common::curand
