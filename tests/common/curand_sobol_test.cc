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

namespace rgpu::common::curand {
namespace {

struct Nvidia {
  Nvidia() {
    h = ::dlopen(RGPU_NVIDIA_CURAND, RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    auto take = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::decay_t<decltype(fn)>>(::dlsym(h, name)); };
    take(create, "curandCreateGeneratorHost");
    take(destroy, "curandDestroyGenerator");
    take(offset, "curandSetGeneratorOffset");
    take(dimensions, "curandSetQuasiRandomGeneratorDimensions");
    take(bits, "curandGenerate");
    take(bits64, "curandGenerateLongLong");
    take(uniform, "curandGenerateUniform");
    take(uniform_d, "curandGenerateUniformDouble");
    take(normal, "curandGenerateNormal");
    take(normal_d, "curandGenerateNormalDouble");
    take(log_normal, "curandGenerateLogNormal");
    take(log_normal_d, "curandGenerateLogNormalDouble");
    curandStatus_t (*dv32)(curandDirectionVectors32_t**, curandDirectionVectorSet_t) = nullptr;
    curandStatus_t (*dv64)(curandDirectionVectors64_t**, curandDirectionVectorSet_t) = nullptr;
    curandStatus_t (*sc32)(unsigned**) = nullptr;
    curandStatus_t (*sc64)(unsigned long long**) = nullptr;
    take(dv32, "curandGetDirectionVectors32");
    take(dv64, "curandGetDirectionVectors64");
    take(sc32, "curandGetScrambleConstants32");
    take(sc64, "curandGetScrambleConstants64");
    dv32(&v32, CURAND_DIRECTION_VECTORS_32_JOEKUO6);
    dv32(&sv32, CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6);
    dv64(&v64, CURAND_DIRECTION_VECTORS_64_JOEKUO6);
    dv64(&sv64, CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6);
    sc32(&c32);
    sc64(&c64);
  }
  void* h = nullptr;
  curandStatus_t (*create)(curandGenerator_t*, curandRngType_t) = nullptr;
  curandStatus_t (*destroy)(curandGenerator_t) = nullptr;
  curandStatus_t (*offset)(curandGenerator_t, unsigned long long) = nullptr;
  curandStatus_t (*dimensions)(curandGenerator_t, unsigned) = nullptr;
  curandStatus_t (*bits)(curandGenerator_t, unsigned*, size_t) = nullptr;
  curandStatus_t (*bits64)(curandGenerator_t, unsigned long long*, size_t) = nullptr;
  curandStatus_t (*uniform)(curandGenerator_t, float*, size_t) = nullptr;
  curandStatus_t (*uniform_d)(curandGenerator_t, double*, size_t) = nullptr;
  curandStatus_t (*normal)(curandGenerator_t, float*, size_t, float, float) = nullptr;
  curandStatus_t (*normal_d)(curandGenerator_t, double*, size_t, double, double) = nullptr;
  curandStatus_t (*log_normal)(curandGenerator_t, float*, size_t, float, float) = nullptr;
  curandStatus_t (*log_normal_d)(curandGenerator_t, double*, size_t, double, double) = nullptr;
  curandDirectionVectors32_t *v32 = nullptr, *sv32 = nullptr;
  curandDirectionVectors64_t *v64 = nullptr, *sv64 = nullptr;
  unsigned* c32 = nullptr;
  unsigned long long* c64 = nullptr;

  std::vector<uint8_t> values(int32_t rng, Dist d, uint32_t dims, uint64_t off, const std::vector<size_t>& counts) {
    curandGenerator_t g = nullptr;
    EXPECT_EQ(create(&g, static_cast<curandRngType_t>(rng)), CURAND_STATUS_SUCCESS);
    EXPECT_EQ(dimensions(g, dims), CURAND_STATUS_SUCCESS);
    EXPECT_EQ(offset(g, off), CURAND_STATUS_SUCCESS);
    std::vector<uint8_t> out;
    for (size_t n : counts) {
      std::vector<uint8_t> v(n * valueBytes(d));
      curandStatus_t st = CURAND_STATUS_INTERNAL_ERROR;
      switch (d) {
        case Dist::kBits32: st = bits(g, reinterpret_cast<unsigned*>(v.data()), n); break;
        case Dist::kBits64: st = bits64(g, reinterpret_cast<unsigned long long*>(v.data()), n); break;
        case Dist::kUniform: st = uniform(g, reinterpret_cast<float*>(v.data()), n); break;
        case Dist::kUniformDouble: st = uniform_d(g, reinterpret_cast<double*>(v.data()), n); break;
        case Dist::kNormal: st = normal(g, reinterpret_cast<float*>(v.data()), n, 0.25f, 1.5f); break;
        case Dist::kNormalDouble: st = normal_d(g, reinterpret_cast<double*>(v.data()), n, 0.25, 1.5); break;
        case Dist::kLogNormal: st = log_normal(g, reinterpret_cast<float*>(v.data()), n, 0.25f, 1.5f); break;
        case Dist::kLogNormalDouble:
          st = log_normal_d(g, reinterpret_cast<double*>(v.data()), n, 0.25, 1.5);
          break;
        case Dist::kPoisson: break;  // (curand_poisson_test.cc)
      }
      EXPECT_EQ(st, CURAND_STATUS_SUCCESS);
      out.insert(out.end(), v.begin(), v.end());
    }
    destroy(g);
    return out;
  }

  // The tables of `dims` dimensions as a Fill carries them.
  void tables(int32_t rng, uint32_t dims, Fill& f) const {
    f.directions.clear();
    f.scramble.clear();
    const bool scrambled = isScrambled(rng);
    for (uint32_t d = 0; d < dims; ++d) {
      if (isSobol64(rng)) {
        for (unsigned long long v : (scrambled ? sv64 : v64)[d]) f.directions.push_back(uint32_t(v)), f.directions.push_back(uint32_t(v >> 32));
        if (scrambled) f.scramble.push_back(uint32_t(c64[d])), f.scramble.push_back(uint32_t(c64[d] >> 32));
      } else {
        for (unsigned v : (scrambled ? sv32 : v32)[d]) f.directions.push_back(v);
        if (scrambled) f.scramble.push_back(c32[d]);
      }
    }
  }
};

Nvidia& nvidia() {
  static Nvidia n;
  return n;
}

// rgpu's values for the same calls (each written in two pieces, as a backend may).
std::vector<uint8_t> ours(int32_t rng, Dist d, uint32_t dims, uint64_t off, const std::vector<size_t>& counts) {
  Fill f;
  f.rng = rng, f.dist = d, f.dims = dims, f.offset = off, f.position = off, f.mean = 0.25, f.stddev = 1.5;
  nvidia().tables(rng, dims, f);
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
        const auto want = nvidia().values(rng, d, c.dims, c.offset, c.counts);
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
  nvidia().tables(kSobol32, 3, f);
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
