// NVIDIA's libcurand.so.10 from the toolkit, loaded by its path
// (RGPU_NVIDIA_CURAND: rgpu's own library has the same name). Its host
// generators (curandCreateGeneratorHost) compute on the CPU without a GPU,
// so the cuRAND tests compare rgpu's values with them bit for bit. One per
// process: nvidiaCurand(); `h` is null where the toolkit's library is missing
// (the tests then fail, naming it).
#pragma once

#include <curand.h>
#include <dlfcn.h>

#include <type_traits>

#include "common/curand_cpu.h"

namespace rgpu::test {

struct NvidiaCurand {
  NvidiaCurand() {
    h = ::dlopen(RGPU_NVIDIA_CURAND, RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    auto take = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::decay_t<decltype(fn)>>(::dlsym(h, name)); };
    take(create, "curandCreateGeneratorHost");
    take(destroy, "curandDestroyGenerator");
    take(seed, "curandSetPseudoRandomGeneratorSeed");
    take(offset, "curandSetGeneratorOffset");
    take(ordering, "curandSetGeneratorOrdering");
    take(dimensions, "curandSetQuasiRandomGeneratorDimensions");
    take(bits, "curandGenerate");
    take(bits64, "curandGenerateLongLong");
    take(uniform, "curandGenerateUniform");
    take(uniform_d, "curandGenerateUniformDouble");
    take(normal, "curandGenerateNormal");
    take(normal_d, "curandGenerateNormalDouble");
    take(log_normal, "curandGenerateLogNormal");
    take(log_normal_d, "curandGenerateLogNormalDouble");
    take(poisson, "curandGeneratePoisson");
    take(dv32, "curandGetDirectionVectors32");
    take(dv64, "curandGetDirectionVectors64");
    take(sc32, "curandGetScrambleConstants32");
    take(sc64, "curandGetScrambleConstants64");
  }

  // One call of `n` values of `d` into `out`: mean and stddev for the normal
  // and log-normal kinds (as floats for the float ones), lambda for Poisson.
  curandStatus_t generate(curandGenerator_t g, common::curand::Dist d, void* out, size_t n, double mean,
                          double stddev, double lambda = 0) const {
    using common::curand::Dist;
    const float fm = static_cast<float>(mean), fs = static_cast<float>(stddev);
    switch (d) {
      case Dist::kBits32: return bits(g, static_cast<unsigned*>(out), n);
      case Dist::kBits64: return bits64(g, static_cast<unsigned long long*>(out), n);
      case Dist::kUniform: return uniform(g, static_cast<float*>(out), n);
      case Dist::kUniformDouble: return uniform_d(g, static_cast<double*>(out), n);
      case Dist::kNormal: return normal(g, static_cast<float*>(out), n, fm, fs);
      case Dist::kNormalDouble: return normal_d(g, static_cast<double*>(out), n, mean, stddev);
      case Dist::kLogNormal: return log_normal(g, static_cast<float*>(out), n, fm, fs);
      case Dist::kLogNormalDouble: return log_normal_d(g, static_cast<double*>(out), n, mean, stddev);
      case Dist::kPoisson: return poisson(g, static_cast<unsigned*>(out), n, lambda);
    }
    return CURAND_STATUS_INTERNAL_ERROR;
  }

  // NVIDIA's direction vectors and scramble constants of the first `dims`
  // dimensions of a Sobol generator, as a Fill carries them (64-bit words low half first).
  void sobolTables(int32_t rng, uint32_t dims, common::curand::Fill& f) const {
    using namespace common::curand;
    f.directions.clear();
    f.scramble.clear();
    const bool scrambled = isScrambled(rng);
    for (uint32_t d = 0; d < dims; ++d) {
      if (isSobol64(rng)) {
        curandDirectionVectors64_t* v = nullptr;
        dv64(&v, scrambled ? CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6 : CURAND_DIRECTION_VECTORS_64_JOEKUO6);
        for (unsigned long long w : v[d]) f.directions.push_back(uint32_t(w)), f.directions.push_back(uint32_t(w >> 32));
        unsigned long long* c64 = nullptr;
        if (scrambled && sc64(&c64) == CURAND_STATUS_SUCCESS)
          f.scramble.push_back(uint32_t(c64[d])), f.scramble.push_back(uint32_t(c64[d] >> 32));
      } else {
        curandDirectionVectors32_t* v = nullptr;
        dv32(&v, scrambled ? CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6 : CURAND_DIRECTION_VECTORS_32_JOEKUO6);
        for (unsigned w : v[d]) f.directions.push_back(w);
        unsigned* c32 = nullptr;
        if (scrambled && sc32(&c32) == CURAND_STATUS_SUCCESS) f.scramble.push_back(c32[d]);
      }
    }
  }

  void* h = nullptr;
  curandStatus_t (*create)(curandGenerator_t*, curandRngType_t) = nullptr;
  curandStatus_t (*destroy)(curandGenerator_t) = nullptr;
  curandStatus_t (*seed)(curandGenerator_t, unsigned long long) = nullptr;
  curandStatus_t (*offset)(curandGenerator_t, unsigned long long) = nullptr;
  curandStatus_t (*ordering)(curandGenerator_t, curandOrdering_t) = nullptr;
  curandStatus_t (*dimensions)(curandGenerator_t, unsigned) = nullptr;
  curandStatus_t (*bits)(curandGenerator_t, unsigned*, size_t) = nullptr;
  curandStatus_t (*bits64)(curandGenerator_t, unsigned long long*, size_t) = nullptr;
  curandStatus_t (*uniform)(curandGenerator_t, float*, size_t) = nullptr;
  curandStatus_t (*uniform_d)(curandGenerator_t, double*, size_t) = nullptr;
  curandStatus_t (*normal)(curandGenerator_t, float*, size_t, float, float) = nullptr;
  curandStatus_t (*normal_d)(curandGenerator_t, double*, size_t, double, double) = nullptr;
  curandStatus_t (*log_normal)(curandGenerator_t, float*, size_t, float, float) = nullptr;
  curandStatus_t (*log_normal_d)(curandGenerator_t, double*, size_t, double, double) = nullptr;
  curandStatus_t (*poisson)(curandGenerator_t, unsigned*, size_t, double) = nullptr;
  curandStatus_t (*dv32)(curandDirectionVectors32_t**, curandDirectionVectorSet_t) = nullptr;
  curandStatus_t (*dv64)(curandDirectionVectors64_t**, curandDirectionVectorSet_t) = nullptr;
  curandStatus_t (*sc32)(unsigned**) = nullptr;
  curandStatus_t (*sc64)(unsigned long long**) = nullptr;
};

inline NvidiaCurand& nvidiaCurand() {
  static NvidiaCurand n;
  return n;
}

}  // namespace rgpu::test
