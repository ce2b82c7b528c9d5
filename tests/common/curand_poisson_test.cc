// cuRAND's Poisson values (common/curand_poisson.cc) against NVIDIA's own
// host generator in the toolkit's libcurand.so.10, bit for bit: every
// generator type rgpu computes, lambdas on both sides of every change of
// method, calls that go on from each other with a new lambda each, Poisson
// calls between other kinds, each call written in two pieces; and every
// threshold of the square histogram against NVIDIA's, word for word.
#include <curand.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/curand_cpu.h"
#include "tests/support/nvidia_curand.h"

namespace rgpu::common::curand {
namespace {

using Nvidia = test::NvidiaCurand;
Nvidia& nvidia() { return test::nvidiaCurand(); }

// NVIDIA's host generator of `rng`: seed 1234 (Sobol: `dims` dimensions), offset `off` where it takes one.
curandGenerator_t make(int32_t rng, uint64_t off, uint32_t dims) {
  Nvidia& nv = nvidia();
  curandGenerator_t g = nullptr;
  EXPECT_EQ(nv.create(&g, static_cast<curandRngType_t>(rng)), CURAND_STATUS_SUCCESS);
  if (isSobol(rng)) {
    EXPECT_EQ(nv.dimensions(g, dims), CURAND_STATUS_SUCCESS);
  } else {
    EXPECT_EQ(nv.seed(g, 1234), CURAND_STATUS_SUCCESS);
  }
  if (takesOffset(rng)) {
    EXPECT_EQ(nv.offset(g, off), CURAND_STATUS_SUCCESS);
  }
  return g;
}

// One call: its kind, values and lambda.
struct Call {
  Dist d;
  size_t n;
  double lambda;
};

std::vector<uint8_t> nvidias(int32_t rng, uint64_t off, uint32_t dims, const std::vector<Call>& calls) {
  Nvidia& nv = nvidia();
  curandGenerator_t g = make(rng, off, dims);
  std::vector<uint8_t> out;
  for (const Call& c : calls) {
    EXPECT_EQ(valueBytes(c.d), 4u) << "not a kind this test calls";
    std::vector<uint8_t> v(c.n * valueBytes(c.d));
    EXPECT_EQ(nv.generate(g, c.d, v.data(), c.n, 0.25, 1.5, c.lambda), CURAND_STATUS_SUCCESS) << "lambda " << c.lambda;
    out.insert(out.end(), v.begin(), v.end());
  }
  nv.destroy(g);
  return out;
}

// The same calls as rgpu's libcurand makes them (client/rand/curand_api.cc),
// each written in two pieces as a backend may.
std::vector<uint8_t> ours(int32_t rng, uint64_t off, uint32_t dims, const std::vector<Call>& calls) {
  Nvidia& nv = nvidia();
  SlotHistory history;
  uint64_t position = off, sobol_index = off;
  std::vector<uint8_t> out;
  for (const Call& c : calls) {
    Fill f;
    f.rng = rng, f.seed = 1234, f.offset = off, f.position = position, f.dist = c.d, f.lambda = c.lambda;
    f.mean = 0.25, f.stddev = 1.5;
    if (generatorsOf(rng)) history.call(c.d, c.n, off, f);
    if (isSobol(rng)) {
      f.dims = dims, f.call_count = c.n, f.call_start = f.position = off + (sobol_index - off) * dims;
      nv.sobolTables(rng, dims, f);
    }
    std::vector<uint8_t> v(c.n * valueBytes(c.d));
    const size_t first = c.n / 3 & ~size_t{1};  // (whole pairs)
    Status s = generate(f, v.data(), first);
    EXPECT_TRUE(s) << s.message();
    s = generate(callPart(f, first), v.data() + first * valueBytes(c.d), c.n - first);
    EXPECT_TRUE(s) << s.message();
    out.insert(out.end(), v.begin(), v.end());
    position += c.n;
    if (isSobol(rng)) sobol_index += c.n / dims;
  }
  return out;
}

void expectSame(int32_t rng, uint64_t off, uint32_t dims, const std::vector<Call>& calls) {
  const auto a = nvidias(rng, off, dims, calls), b = ours(rng, off, dims, calls);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i += 4) {
    uint32_t x, y;
    std::memcpy(&x, a.data() + i, 4), std::memcpy(&y, b.data() + i, 4);
    if (x != y) {
      size_t k = i / 4, c = 0;
      while (k >= calls[c].n) k -= calls[c++].n;
      FAIL() << "generator " << rng << ", call " << c << " (lambda " << calls[c].lambda << "), value " << k
             << ": NVIDIA's " << x << ", rgpu's " << y;
    }
  }
}

// Lambdas on both sides of every change of method (curand_cpu.h).
const std::vector<double> kLambdas = {0.001, 0.5, 5, 9.99, 10, 31.5, 32, 100, 1000, 1999.5,
                                      2000, 7999.5, 8000, 8000.5, 100000, 400000};

TEST(CurandPoisson, ValuesAreNvidiasBitForBitForEveryGeneratorAndMethod) {
  ASSERT_NE(nvidia().h, nullptr) << RGPU_NVIDIA_CURAND;
  for (int32_t rng : {kXorwow, kMrg32k3a, kMtgp32, kMt19937, kPhilox4x32_10, kSobol32, kScrambledSobol32,
                      kSobol64, kScrambledSobol64}) {
    SCOPED_TRACE("generator " + std::to_string(rng));
    const uint32_t dims = isSobol(rng) ? 3 : 1;
    std::vector<Call> calls;
    size_t n = 1200;
    for (double lambda : kLambdas) {
      calls.push_back({Dist::kPoisson, n, lambda});
      n = n * 7 / 5 / 3 * 3 + 3;  // (counts change; each a multiple of 3)
    }
    expectSame(rng, takesOffset(rng) ? 77 : 0, dims, calls);
  }
}

TEST(CurandPoisson, PoissonCallsBetweenOtherKindsGoOnAsNvidiasDo) {
  for (int32_t rng : {kXorwow, kPhilox4x32_10, kMtgp32}) {
    SCOPED_TRACE("generator " + std::to_string(rng));
    expectSame(rng, takesOffset(rng) ? 5 : 0, 1,
               {{Dist::kPoisson, 1001, 5}, {Dist::kNormal, 2000, 0}, {Dist::kPoisson, 777, 1000},
                {Dist::kUniform, 333, 0}, {Dist::kBits32, 10, 0}, {Dist::kPoisson, 4097, 0.25}});
  }
}

// XORWOW's and MRG32k3a's Poisson values of lambda >= 2000 are each
// generator's next curand_normal: the first of a pair of its draws, the
// second kept and given at the generator's next such value, whatever calls of
// other kinds (which take draws but leave the kept half) come between. Calls
// of odd counts leave some generators with a kept half and others without;
// the offset starts every generator inside a row.
TEST(CurandPoisson, KeptHalvesOfNormalsGoOnFromCallToCallAsNvidiasDo) {
  for (int32_t rng : {kXorwow, kMrg32k3a, kPhilox4x32_10}) {
    SCOPED_TRACE("generator " + std::to_string(rng));
    const uint64_t T = generatorsOf(rng);
    expectSame(rng, 5, 1,
               {{Dist::kPoisson, T + 1, 3000}, {Dist::kNormal, 8192, 0}, {Dist::kPoisson, 5, 2500},
                {Dist::kUniform, 1001, 0}, {Dist::kPoisson, 99, 5}, {Dist::kPoisson, 3 * T + 3, 100000},
                {Dist::kBits32, 7, 0}, {Dist::kPoisson, 2 * T + 1, 2000}});
  }
}

// A Sobol32 word x is index invgray(bitrev(x)) of dimension 1: NVIDIA's
// generator there, at that offset, gives x's value.
uint32_t nvidiasAt(curandGenerator_t g, uint32_t x, double lambda) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= (x >> i & 1u) << (31 - i);
  for (int s = 1; s < 32; s <<= 1) r ^= r >> s;
  EXPECT_EQ(nvidia().offset(g, r), CURAND_STATUS_SUCCESS);
  unsigned v = 0;
  EXPECT_EQ(nvidia().poisson(g, &v, 1, lambda), CURAND_STATUS_SUCCESS);
  return v;
}

TEST(CurandPoisson, EveryThresholdOfTheTableIsNvidiasToTheWord) {
  ASSERT_NE(nvidia().h, nullptr);
  curandGenerator_t g = make(kSobol32, 0, 1);
  for (double lambda : {0.01, 0.5, 2.0, 5.0, 9.9}) {
    SCOPED_TRACE("lambda " + std::to_string(lambda));
    const PoissonDraw draw(kSobol32, lambda);
    auto t = poissonTable(lambda);
    auto bin = [&](uint64_t x) { return static_cast<int64_t>(std::floor(t->length * (x * 0x1p-32 + 0x1p-32))); };
    for (uint32_t j = 0; j < t->length; ++j) {
      // The bin's words [start, end) and the first word past its own value (cut).
      uint64_t start = static_cast<uint64_t>(std::max(0.0, std::floor(j * 0x1p32 / t->length) - 2));
      while (bin(start) < j) ++start;
      uint64_t end = std::min<uint64_t>(uint64_t{1} << 32, static_cast<uint64_t>(std::floor((j + 1) * 0x1p32 / t->length)) + 3);
      while (end > start && bin(end - 1) > j) --end;
      uint64_t lo = start, hi = end;
      while (lo < hi) {
        const uint64_t m = (lo + hi) / 2;
        if (m * 0x1p-32 + 0x1p-32 < t->V[j]) lo = m + 1;
        else hi = m;
      }
      for (uint64_t x : {start, lo - 1, lo, end - 1}) {
        if (x < start || x >= end) continue;
        const auto w = static_cast<uint32_t>(x);
        ASSERT_EQ(draw(w), nvidiasAt(g, w, lambda)) << "bin " << j << " of " << t->length << ", word " << x;
      }
    }
  }
  // Past the last bin (u = 1): as NVIDIA's. Inversion at u = 1 ends (where
  // NVIDIA's ends depends on the last bit of its exp: curand_poisson.cc), at
  // or past the word below's value.
  for (double lambda : {0.5, 9.9, 9000.0})
    EXPECT_EQ(PoissonDraw(kSobol32, lambda)(0xffffffffu), nvidiasAt(g, 0xffffffffu, lambda)) << lambda;
  for (double lambda : {10.0, 50.0, 5000.0, 7999.5})
    EXPECT_GE(PoissonDraw(kSobol32, lambda)(0xffffffffu), nvidiasAt(g, 0xfffffffeu, lambda)) << lambda;
  nvidia().destroy(g);
}

TEST(CurandPoisson, LambdasNvidiaRefusesAreRefused) {
  curandGenerator_t g = make(kXorwow, 0, 1);
  unsigned v[2];
  for (double lambda : {0.0, -1.0, 400000.5, 1e300}) {
    EXPECT_EQ(nvidia().poisson(g, v, 2, lambda), CURAND_STATUS_OUT_OF_RANGE) << lambda;
    EXPECT_EQ(poissonLambdaCheck(lambda).code(), err::kInvalidValue) << lambda;
  }
  // (NVIDIA's takes a NaN lambda and gives whatever its conversions make of
  // it; rgpu's refuses it as out of range.)
  EXPECT_EQ(poissonLambdaCheck(std::numeric_limits<double>::quiet_NaN()).code(), err::kInvalidValue);
  nvidia().destroy(g);
  // Every generator takes every lambda NVIDIA's does (the method for each: poissonMethod).
  EXPECT_TRUE(poissonLambdaCheck(2000));
  EXPECT_TRUE(poissonLambdaCheck(400000));
  Fill f;
  f.rng = kXorwow, f.dist = Dist::kPoisson, f.lambda = 0;
  unsigned out[4];
  EXPECT_EQ(generate(f, out, 4).code(), err::kInvalidValue);
}

}  // namespace
}  // namespace rgpu::common::curand
