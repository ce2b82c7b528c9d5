// cuRAND's discrete distributions for the device API (curand_discrete.h,
// curand_discrete2.h): curandCreatePoissonDistribution puts NVIDIA's Poisson
// table in the session's device memory, where a kernel's curand_discrete()
// and curand_discrete4() read it; curandDestroyDistribution frees it.
//
// One allocation holds it all, laid out as curand_discrete.h declares it and
// pointing into itself by device addresses: the curandDiscreteDistribution_st
// (the handle is its address), its curandDistributionM2Shift_st, the
// curandHistogramM2_st, then V (doubles) and K (unsigned ints). The host_*
// fields are null: rgpu keeps no host copy.
//
// For lambda < 2000 the table is the one NVIDIA's host generator draws
// Poisson values with (common/curand_poisson.cc, its values NVIDIA's bit for
// bit), method CURAND_M2. For larger lambda the distribution is curand_discrete's
// normal form (method CURAND_DISCRETE_GAUSS, mean lambda, stddev sqrt(lambda)),
// as NVIDIA's host generator approximates there. Neither is compared with
// the table NVIDIA's own call builds on a GPU (docs/curand.md).
#include <cuda_runtime.h>
#include <curand.h>
#include <curand_discrete.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/curand_cpu.h"
#include "common/log.h"

namespace {

namespace cr = rgpu::common::curand;

struct Header {
  curandDiscreteDistribution_st dist;
  curandDistributionM2Shift_st m2;
  curandHistogramM2_st histogram;
};

// The distributions this process made and has not destroyed (device addresses).
std::mutex mu;
std::set<const void*>& live() {
  static std::set<const void*> s;
  return s;
}

curandStatus_t refused(const std::string& what, curandStatus_t st) {
  rgpu::common::logOnce("curand-discrete:" + what, what);
  return st;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) curandStatus_t curandCreatePoissonDistribution(
    double lambda, curandDiscreteDistribution_t* out) {
  try {
    if (!out) return CURAND_STATUS_OUT_OF_RANGE;
    if (rgpu::Status s = cr::poissonLambdaCheck(lambda); !s)
      return refused("curandCreatePoissonDistribution: " + s.message(), CURAND_STATUS_OUT_OF_RANGE);
    const bool table = lambda < 2000;
    std::shared_ptr<const cr::PoissonTable> t = table ? cr::poissonTable(lambda) : nullptr;
    const size_t n = t ? t->length : 0;
    const size_t v_at = (sizeof(Header) + 7) / 8 * 8, k_at = v_at + 8 * n, bytes = k_at + 4 * n;
    void* dev = nullptr;
    if (cudaMalloc(&dev, bytes) != cudaSuccess) return CURAND_STATUS_ALLOCATION_FAILED;
    auto* base = static_cast<uint8_t*>(dev);
    Header h;
    std::memset(&h, 0, sizeof h);
    h.dist.M2 = reinterpret_cast<curandDistributionM2Shift_t>(base + offsetof(Header, m2));
    h.dist.stddev = std::sqrt(lambda);
    h.dist.mean = lambda;
    h.dist.method = table ? CURAND_M2 : CURAND_DISCRETE_GAUSS;
    h.m2.histogram = reinterpret_cast<curandHistogramM2_t>(base + offsetof(Header, histogram));
    h.m2.shift = t ? t->shift : 0;
    h.m2.length = static_cast<unsigned>(n);
    h.histogram.V = reinterpret_cast<curandHistogramM2V_t>(base + v_at);
    h.histogram.K = reinterpret_cast<curandHistogramM2K_t>(base + k_at);
    std::vector<uint8_t> host(bytes);
    std::memcpy(host.data(), &h, sizeof h);
    if (t) {
      std::memcpy(host.data() + v_at, t->V.data(), 8 * n);
      std::memcpy(host.data() + k_at, t->K.data(), 4 * n);
    }
    if (cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
      (void)cudaFree(dev);
      return CURAND_STATUS_INITIALIZATION_FAILED;
    }
    {
      std::lock_guard lock(mu);
      live().insert(dev);
    }
    *out = static_cast<curandDiscreteDistribution_t>(dev);
    return CURAND_STATUS_SUCCESS;
  } catch (...) {
    return CURAND_STATUS_ALLOCATION_FAILED;
  }
}

__attribute__((visibility("default"))) curandStatus_t curandDestroyDistribution(
    curandDiscreteDistribution_t distribution) {
  {
    std::lock_guard lock(mu);
    if (!live().erase(distribution))
      return refused("curandDestroyDistribution of a distribution curandCreatePoissonDistribution did not make",
                     CURAND_STATUS_OUT_OF_RANGE);
  }
  // (cudaFree waits for the work queued before it, which may still read the table.)
  return cudaFree(distribution) == cudaSuccess ? CURAND_STATUS_SUCCESS : CURAND_STATUS_OUT_OF_RANGE;
}

}  // extern "C"
