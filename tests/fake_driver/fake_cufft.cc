// A fake cuFFT for testing the CUDA backend's cuFFT path without a GPU: the
// entry points rgpu's worker takes from NVIDIA's library
// (server/cuda/fft_api.h), computed by the sim's FFTW executor
// (server/sim/sim_fft.h) on the fake driver's memory (host memory) and
// queued on the fake driver's executor in stream order
// (rgpu_fake_cuda_enqueue, which also records each call in the driver's log).
//
// Like NVIDIA's, a plan made without auto-allocation needs a work area
// before a transform: this one asks for kWorkBytes and fails a transform
// without one (CUFFT_INVALID_VALUE), so the client's work area travels.
// Plan creation and destruction are recorded in the driver's log.
#include <cuda.h>
#include <cufft.h>
#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "server/sim/sim_fft.h"
#include "tests/fake_driver/fake_library.h"

namespace {

namespace fft = rgpu::common::fft;

constexpr size_t kWorkBytes = 4096;

struct FakePlan {
  fft::Plan desc;
  bool auto_allocate = true;
  bool made = false;
  cudaStream_t stream = nullptr;
  void* work = nullptr;
};

std::mutex g_mu;
std::map<cufftHandle, FakePlan> g_plans;
int g_next = 1;

using rgpu::fake::record;

cufftResult exec(cufftHandle h, int32_t type, void* in, void* out, int direction, const char* name) {
  FakePlan p;
  {
    std::lock_guard lock(g_mu);
    auto it = g_plans.find(h);
    if (it == g_plans.end() || !it->second.made) return CUFFT_INVALID_PLAN;
    p = it->second;
  }
  if (p.desc.type != type) return CUFFT_INVALID_TYPE;
  if (!p.auto_allocate && !p.work) return CUFFT_INVALID_VALUE;
  record(std::string(name) + " plan " + std::to_string(h) + (in == out ? " in place" : " out of place") +
         (p.work ? " with a work area" : ""));
  const fft::Layout l = fft::layoutOf(p.desc, in == out);
  bool queued = rgpu::fake::enqueue(reinterpret_cast<CUstream>(p.stream), name, [l, direction, in, out] {
    return rgpu::server::simfft::execute(l, direction, in, out) ? 0 : 1;
  });
  return queued ? CUFFT_SUCCESS : CUFFT_EXEC_FAILED;
}

}  // namespace

extern "C" {

#define FAKE_API __attribute__((visibility("default")))

FAKE_API cufftResult cufftCreate(cufftHandle* h) {
  std::lock_guard lock(g_mu);
  *h = g_next++;
  g_plans[*h] = FakePlan{};
  return CUFFT_SUCCESS;
}

FAKE_API cufftResult cufftDestroy(cufftHandle h) {
  std::lock_guard lock(g_mu);
  if (!g_plans.erase(h)) return CUFFT_INVALID_PLAN;
  record("cufftDestroy plan " + std::to_string(h));
  return CUFFT_SUCCESS;
}

FAKE_API cufftResult cufftSetAutoAllocation(cufftHandle h, int a) {
  std::lock_guard lock(g_mu);
  auto it = g_plans.find(h);
  if (it == g_plans.end()) return CUFFT_INVALID_PLAN;
  it->second.auto_allocate = a != 0;
  return CUFFT_SUCCESS;
}

FAKE_API cufftResult cufftMakePlanMany64(cufftHandle h, int rank, long long* n, long long* inembed, long long istride,
                                         long long idist, long long* onembed, long long ostride, long long odist,
                                         cufftType type, long long batch, size_t* work) {
  fft::Plan p;
  p.type = type;
  p.rank = rank;
  p.batch = batch;
  p.advanced = inembed && onembed;
  for (int k = 0; k < rank && k < fft::kMaxRank; ++k) {
    p.n[k] = n[k];
    if (p.advanced) {
      p.inembed[k] = inembed[k];
      p.onembed[k] = onembed[k];
    }
  }
  if (p.advanced) {
    p.istride = istride;
    p.idist = idist;
    p.ostride = ostride;
    p.odist = odist;
  }
  if (!fft::check(p)) return CUFFT_INVALID_SIZE;
  std::lock_guard lock(g_mu);
  auto it = g_plans.find(h);
  if (it == g_plans.end()) return CUFFT_INVALID_PLAN;
  it->second.desc = p;
  it->second.made = true;
  *work = kWorkBytes;
  record("cufftMakePlanMany64 plan " + std::to_string(h) + " type " + std::to_string(type) + " rank " +
         std::to_string(rank) + (it->second.auto_allocate ? " auto-allocated" : " without auto-allocation"));
  return CUFFT_SUCCESS;
}

FAKE_API cufftResult cufftSetStream(cufftHandle h, cudaStream_t s) {
  std::lock_guard lock(g_mu);
  auto it = g_plans.find(h);
  if (it == g_plans.end()) return CUFFT_INVALID_PLAN;
  it->second.stream = s;
  return CUFFT_SUCCESS;
}

FAKE_API cufftResult cufftSetWorkArea(cufftHandle h, void* w) {
  std::lock_guard lock(g_mu);
  auto it = g_plans.find(h);
  if (it == g_plans.end()) return CUFFT_INVALID_PLAN;
  it->second.work = w;
  return CUFFT_SUCCESS;
}

FAKE_API cufftResult cufftExecC2C(cufftHandle h, cufftComplex* i, cufftComplex* o, int d) {
  return exec(h, CUFFT_C2C, i, o, d, "cufftExecC2C");
}
FAKE_API cufftResult cufftExecR2C(cufftHandle h, cufftReal* i, cufftComplex* o) {
  return exec(h, CUFFT_R2C, i, o, 0, "cufftExecR2C");
}
FAKE_API cufftResult cufftExecC2R(cufftHandle h, cufftComplex* i, cufftReal* o) {
  return exec(h, CUFFT_C2R, i, o, 0, "cufftExecC2R");
}
FAKE_API cufftResult cufftExecZ2Z(cufftHandle h, cufftDoubleComplex* i, cufftDoubleComplex* o, int d) {
  return exec(h, CUFFT_Z2Z, i, o, d, "cufftExecZ2Z");
}
FAKE_API cufftResult cufftExecD2Z(cufftHandle h, cufftDoubleReal* i, cufftDoubleComplex* o) {
  return exec(h, CUFFT_D2Z, i, o, 0, "cufftExecD2Z");
}
FAKE_API cufftResult cufftExecZ2D(cufftHandle h, cufftDoubleComplex* i, cufftDoubleReal* o) {
  return exec(h, CUFFT_Z2D, i, o, 0, "cufftExecZ2D");
}

}  // extern "C"
