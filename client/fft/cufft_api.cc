// rgpu's libcufft.so.12: cuFFT's API with NVIDIA's names and version node
// (libcufft.map), all 58 defined here (docs/cufft.md).
//
// A plan is the client's, as a cuRAND generator is: its description
// (common/fft_plan.h), device, stream and work area. Making it asks the
// server once for the work area the device needs (fftPlan: the CUDA
// backend's NVIDIA plan says; the sim needs none), which the plan allocates
// in the session as cuFFT's auto-allocation does, unless the program gives
// its own. A transform is one stream-ordered, asynchronous request carrying
// the plan whole (fftExec); a bad range surfaces at the next synchronising
// call. Destroying a plan tells the server (fftRelease) and frees the work
// area cuFFT allocated.
//
// Not supported (CUFFT_NOT_SUPPORTED, one log line each): multi-GPU plans
// and descriptors (cufftXtSetGPUs, cufftXtMalloc, ...), callbacks, half and
// bfloat16 transforms, cufftXtQueryPlan, and the two names NVIDIA's headers do not
// declare (cufftDebug, cufftXtMakePlanGuru64).
#include <cuda_runtime_api.h>
#include <cufftXt.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "client/blas/blas_client.h"
#include "common/fft_plan.h"
#include "common/log.h"

namespace {

using rgpu::Status;
namespace fft = rgpu::common::fft;
namespace err = rgpu::err;

struct Plan {
  bool made = false;
  int device = 0;
  fft::Plan desc;
  cudaStream_t stream = nullptr;
  bool auto_allocate = true;
  uint64_t work_size = 0;
  void* work = nullptr;
  bool own_work = false;  // allocated here (cuFFT's auto-allocation)
  int64_t patient_jit = 0, max_host_threads = 0;
};

std::mutex& plansMu() {
  static std::mutex mu;
  return mu;
}
std::map<cufftHandle, Plan>& plans() {
  static std::map<cufftHandle, Plan> p;
  return p;
}
std::atomic<int> g_next_handle{1};  // never reused: the server keys NVIDIA's plans by it

cufftResult unsupported(const std::string& what) {
  rgpu::common::logOnce("cufft-unsupported:" + what,
                        what + " is not supported by rgpu's cuFFT (returns CUFFT_NOT_SUPPORTED; docs/cufft.md)");
  return CUFFT_NOT_SUPPORTED;
}

// rgpu's error as a cuFFT result (logged once per text).
cufftResult toFftResult(const Status& s, const char* call, cufftResult otherwise) {
  cufftResult r;
  switch (s.code()) {
    case err::kSuccess: return CUFFT_SUCCESS;
    case err::kInvalidValue: r = CUFFT_INVALID_VALUE; break;
    case err::kMemoryAllocation: r = CUFFT_ALLOC_FAILED; break;
    case err::kNotSupported: r = CUFFT_NOT_SUPPORTED; break;
    default: r = otherwise; break;
  }
  rgpu::common::logOnce(std::string("cufft:") + call + ":" + s.message(), std::string(call) + ": " + s.message());
  return r;
}

template <typename F>
cufftResult guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return CUFFT_ALLOC_FAILED;
  } catch (...) {
    return toFftResult(Status(err::kUnknown, "internal error"), call, CUFFT_INTERNAL_ERROR);
  }
}

// `f(plan)` under the table's lock for a live plan, else INVALID_PLAN.
template <typename F>
cufftResult withPlan(cufftHandle h, F&& f) {
  std::lock_guard lock(plansMu());
  auto it = plans().find(h);
  return it == plans().end() ? CUFFT_INVALID_PLAN : f(it->second);
}

const rgpu::client::ExportTable* session(const char* call, cufftResult* r) {
  const rgpu::client::ExportTable* t = rgpu::client::blas::table();
  *r = CUFFT_SETUP_FAILED;
  if (!t) return nullptr;
  if (Status s = t->ready(); !s) {
    toFftResult(s, call, CUFFT_SETUP_FAILED);
    return nullptr;
  }
  *r = CUFFT_SUCCESS;
  return t;
}

void setDesc(rgpu::wire::FftDesc::Builder d, const fft::Plan& p) {
  d.setType(p.type);
  d.setRank(p.rank);
  auto n = d.initN(static_cast<unsigned>(p.rank));
  for (int k = 0; k < p.rank; ++k) n.set(static_cast<unsigned>(k), p.n[k]);
  d.setAdvanced(p.advanced);
  if (p.advanced) {
    auto in = d.initInembed(static_cast<unsigned>(p.rank)), on = d.initOnembed(static_cast<unsigned>(p.rank));
    for (int k = 0; k < p.rank; ++k) {
      in.set(static_cast<unsigned>(k), p.inembed[k]);
      on.set(static_cast<unsigned>(k), p.onembed[k]);
    }
    d.setIstride(p.istride);
    d.setIdist(p.idist);
    d.setOstride(p.ostride);
    d.setOdist(p.odist);
  }
  d.setBatch(p.batch);
}

cufftResult verdictResult(const fft::Verdict& v, const char* call) {
  if (v) return CUFFT_SUCCESS;
  rgpu::common::logOnce(std::string("cufft:") + call + ":" + v.why, std::string(call) + ": " + v.why);
  return v.problem == fft::Problem::kInvalidType ? CUFFT_INVALID_TYPE
         : v.problem == fft::Problem::kInvalidSize ? CUFFT_INVALID_SIZE
                                                   : CUFFT_INVALID_VALUE;
}

// The work area the server says `p` needs on the calling thread's device
// (`handle` 0: an estimate, no plan).
cufftResult askWorkSize(const char* call, cufftHandle handle, const fft::Plan& p, int* device, uint64_t* size) {
  if (cufftResult r = verdictResult(fft::check(p), call); r != CUFFT_SUCCESS) return r;
  cufftResult r;
  const rgpu::client::ExportTable* t = session(call, &r);
  if (!t) return r;
  *device = t->currentDevice();
  capnp::MallocMessageBuilder msg;
  auto m = msg.initRoot<rgpu::wire::Request>().initFftPlan();
  m.setDevice(*device);
  m.setPlan(static_cast<uint64_t>(handle));
  setDesc(m.initDesc(), p);
  auto reply = t->call(msg, nullptr, 0);
  if (!reply) return toFftResult(reply.status(), call, CUFFT_SETUP_FAILED);
  *size = static_cast<uint64_t>(reply->reader().getValue());
  return CUFFT_SUCCESS;
}

// The server may drop what it made for plan `h` (asynchronous, in order).
void postRelease(cufftHandle h, int device) {
  const rgpu::client::ExportTable* t = rgpu::client::blas::table();
  if (!t || !t->ready()) return;
  capnp::MallocMessageBuilder msg;
  auto m = msg.initRoot<rgpu::wire::Request>().initFftRelease();
  m.setPlan(static_cast<uint64_t>(h));
  m.setDevice(device);
  (void)t->post(msg);
}

// cufftMakePlan*: the plan made from `p` on the calling thread's device.
cufftResult make(const char* call, cufftHandle h, const fft::Plan& p, size_t* work_size) {
  {
    std::lock_guard lock(plansMu());
    auto it = plans().find(h);
    if (it == plans().end()) return CUFFT_INVALID_PLAN;
    if (it->second.made) return toFftResult(Status(err::kInvalidValue, "the plan is made already"), call, CUFFT_INVALID_VALUE);
  }
  int device = 0;
  uint64_t size = 0;
  if (cufftResult r = askWorkSize(call, h, p, &device, &size); r != CUFFT_SUCCESS) return r;
  std::lock_guard lock(plansMu());
  auto it = plans().find(h);
  if (it == plans().end()) return CUFFT_INVALID_PLAN;
  Plan& plan = it->second;
  if (plan.auto_allocate && size > 0) {
    // As cuFFT's auto-allocation: on the plan's device (the current one), in the session.
    if (cudaMalloc(&plan.work, size) != cudaSuccess) {
      plan.work = nullptr;
      postRelease(h, device);  // the server made its plan of it (the plan stays unmade)
      return CUFFT_ALLOC_FAILED;
    }
    plan.own_work = true;
  }
  plan.made = true;
  plan.device = device;
  plan.desc = p;
  plan.work_size = size;
  if (work_size) *work_size = size;
  return CUFFT_SUCCESS;
}

// A plan description from cuFFT's arguments (`embed`: whether both were given).
template <typename I>
fft::Plan describe(int rank, const I* n, const I* inembed, long long istride, long long idist, const I* onembed,
                   long long ostride, long long odist, int32_t type, long long batch) {
  fft::Plan p;
  p.type = type;
  p.rank = rank;
  p.batch = batch;
  p.advanced = inembed && onembed;
  for (int k = 0; k < rank && k < fft::kMaxRank && n; ++k) {
    p.n[k] = n[k];
    if (p.advanced) {
      p.inembed[k] = inembed[k];
      p.onembed[k] = onembed[k];
    }
  }
  if (!n) p.rank = 0;  // (refused by check())
  if (p.advanced) {
    p.istride = istride;
    p.idist = idist;
    p.ostride = ostride;
    p.odist = odist;
  }
  return p;
}
fft::Plan describe1(long long nx, int32_t type, long long batch) {
  const long long n[1] = {nx};
  return describe<long long>(1, n, nullptr, 1, 0, nullptr, 1, 0, type, batch);
}
fft::Plan describe2(long long nx, long long ny, int32_t type) {
  const long long n[2] = {nx, ny};
  return describe<long long>(2, n, nullptr, 1, 0, nullptr, 1, 0, type, 1);
}
fft::Plan describe3(long long nx, long long ny, long long nz, int32_t type) {
  const long long n[3] = {nx, ny, nz};
  return describe<long long>(3, n, nullptr, 1, 0, nullptr, 1, 0, type, 1);
}

cufftResult create(cufftHandle* h) {
  if (!h) return CUFFT_INVALID_VALUE;
  std::lock_guard lock(plansMu());
  *h = g_next_handle.fetch_add(1);
  plans().emplace(*h, Plan{});
  return CUFFT_SUCCESS;
}

// cufftPlan*: create and make.
cufftResult createAndMake(const char* call, cufftHandle* h, const fft::Plan& p) {
  if (cufftResult r = create(h); r != CUFFT_SUCCESS) return r;
  cufftResult r = make(call, *h, p, nullptr);
  if (r != CUFFT_SUCCESS) {
    std::lock_guard lock(plansMu());
    plans().erase(*h);
  }
  return r;
}

// cufftGetSize*: the size a plan of `p` would need, without making it.
cufftResult sizeOf(const char* call, cufftHandle h, const fft::Plan& p, size_t* work_size) {
  if (!work_size) return CUFFT_INVALID_VALUE;
  if (h != 0 && withPlan(h, [](Plan&) { return CUFFT_SUCCESS; }) != CUFFT_SUCCESS) return CUFFT_INVALID_PLAN;
  int device = 0;
  uint64_t size = 0;
  cufftResult r = askWorkSize(call, 0, p, &device, &size);
  if (r == CUFFT_SUCCESS) *work_size = size;
  return r;
}

// One transform of plan `h`, which must be of type `type`.
cufftResult exec(const char* call, cufftHandle h, int32_t type, const void* in, void* out, int direction) {
  return guarded(call, [&]() -> cufftResult {
    Plan plan;
    cufftResult found = withPlan(h, [&](Plan& p) {
      plan = p;
      return CUFFT_SUCCESS;
    });
    if (found != CUFFT_SUCCESS) return found;
    if (!plan.made) return CUFFT_INVALID_PLAN;
    if (type != plan.desc.type)
      return toFftResult(Status(err::kInvalidValue, "a plan of type " + std::to_string(plan.desc.type) +
                                                        " run as type " + std::to_string(type)),
                         call, CUFFT_INVALID_VALUE);
    if (fft::isComplexToComplex(type) && direction != CUFFT_FORWARD && direction != CUFFT_INVERSE)
      return CUFFT_INVALID_VALUE;
    if (!in || !out) return CUFFT_INVALID_VALUE;
    if (plan.work_size > 0 && !plan.work)
      return toFftResult(Status(err::kInvalidValue, "the plan has no work area (cufftSetAutoAllocation(0) wants "
                                                    "cufftSetWorkArea)"),
                         call, CUFFT_INVALID_VALUE);
    cufftResult r;
    const rgpu::client::ExportTable* t = session(call, &r);
    if (!t) return CUFFT_EXEC_FAILED;
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<rgpu::wire::Request>().initFftExec();
    if (Status s = rgpu::client::blas::setStream(m.initStream(), *t, plan.stream, plan.device); !s)
      return toFftResult(s, call, CUFFT_EXEC_FAILED);
    m.setPlan(static_cast<uint64_t>(h));
    setDesc(m.initDesc(), plan.desc);
    m.setInput(reinterpret_cast<uint64_t>(in));
    m.setOutput(reinterpret_cast<uint64_t>(out));
    m.setDirection(fft::isComplexToComplex(type) ? direction : 0);
    if (plan.work_size > 0) {
      m.setWork(reinterpret_cast<uint64_t>(plan.work));
      m.setWorkSize(plan.work_size);
    }
    // Asynchronous, as NVIDIA's kernels: a bad range surfaces at the next synchronising call.
    if (Status s = t->post(msg); !s) return toFftResult(s, call, CUFFT_EXEC_FAILED);
    return CUFFT_SUCCESS;
  });
}

// cufftXt's data types as a transform type (f32 and f64 only).
int32_t typeOf(cudaDataType in, cudaDataType out, cudaDataType exec) {
  if (in == CUDA_C_32F && out == CUDA_C_32F && exec == CUDA_C_32F) return fft::kC2C;
  if (in == CUDA_R_32F && out == CUDA_C_32F && exec == CUDA_C_32F) return fft::kR2C;
  if (in == CUDA_C_32F && out == CUDA_R_32F && exec == CUDA_C_32F) return fft::kC2R;
  if (in == CUDA_C_64F && out == CUDA_C_64F && exec == CUDA_C_64F) return fft::kZ2Z;
  if (in == CUDA_R_64F && out == CUDA_C_64F && exec == CUDA_C_64F) return fft::kD2Z;
  if (in == CUDA_C_64F && out == CUDA_R_64F && exec == CUDA_C_64F) return fft::kZ2D;
  return 0;
}

}  // namespace

extern "C" {

#define RGPU_CUFFT_API __attribute__((visibility("default")))

RGPU_CUFFT_API cufftResult cufftCreate(cufftHandle* handle) {
  return guarded("cufftCreate", [&] { return create(handle); });
}

RGPU_CUFFT_API cufftResult cufftDestroy(cufftHandle handle) {
  return guarded("cufftDestroy", [&]() -> cufftResult {
    Plan plan;
    {
      std::lock_guard lock(plansMu());
      auto it = plans().find(handle);
      if (it == plans().end()) return CUFFT_INVALID_PLAN;
      plan = it->second;
      plans().erase(it);
    }
    if (!plan.made) return CUFFT_SUCCESS;
    postRelease(handle, plan.device);
    // (cudaFree waits for the work queued with it, as cuFFT's own free does.)
    if (plan.own_work && plan.work) (void)cudaFree(plan.work);
    return CUFFT_SUCCESS;
  });
}

RGPU_CUFFT_API cufftResult cufftPlan1d(cufftHandle* plan, int nx, cufftType type, int batch) {
  return guarded("cufftPlan1d", [&] { return createAndMake("cufftPlan1d", plan, describe1(nx, type, batch)); });
}
RGPU_CUFFT_API cufftResult cufftPlan2d(cufftHandle* plan, int nx, int ny, cufftType type) {
  return guarded("cufftPlan2d", [&] { return createAndMake("cufftPlan2d", plan, describe2(nx, ny, type)); });
}
RGPU_CUFFT_API cufftResult cufftPlan3d(cufftHandle* plan, int nx, int ny, int nz, cufftType type) {
  return guarded("cufftPlan3d", [&] { return createAndMake("cufftPlan3d", plan, describe3(nx, ny, nz, type)); });
}
RGPU_CUFFT_API cufftResult cufftPlanMany(cufftHandle* plan, int rank, int* n, int* inembed, int istride, int idist,
                                         int* onembed, int ostride, int odist, cufftType type, int batch) {
  return guarded("cufftPlanMany", [&] {
    return createAndMake("cufftPlanMany", plan,
                         describe<int>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch));
  });
}

RGPU_CUFFT_API cufftResult cufftMakePlan1d(cufftHandle plan, int nx, cufftType type, int batch, size_t* workSize) {
  return guarded("cufftMakePlan1d", [&] { return make("cufftMakePlan1d", plan, describe1(nx, type, batch), workSize); });
}
RGPU_CUFFT_API cufftResult cufftMakePlan2d(cufftHandle plan, int nx, int ny, cufftType type, size_t* workSize) {
  return guarded("cufftMakePlan2d", [&] { return make("cufftMakePlan2d", plan, describe2(nx, ny, type), workSize); });
}
RGPU_CUFFT_API cufftResult cufftMakePlan3d(cufftHandle plan, int nx, int ny, int nz, cufftType type, size_t* workSize) {
  return guarded("cufftMakePlan3d",
                 [&] { return make("cufftMakePlan3d", plan, describe3(nx, ny, nz, type), workSize); });
}
RGPU_CUFFT_API cufftResult cufftMakePlanMany(cufftHandle plan, int rank, int* n, int* inembed, int istride, int idist,
                                             int* onembed, int ostride, int odist, cufftType type, int batch,
                                             size_t* workSize) {
  return guarded("cufftMakePlanMany", [&] {
    return make("cufftMakePlanMany", plan,
                describe<int>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), workSize);
  });
}
RGPU_CUFFT_API cufftResult cufftMakePlanMany64(cufftHandle plan, int rank, long long* n, long long* inembed,
                                               long long istride, long long idist, long long* onembed,
                                               long long ostride, long long odist, cufftType type, long long batch,
                                               size_t* workSize) {
  return guarded("cufftMakePlanMany64", [&] {
    return make("cufftMakePlanMany64", plan,
                describe<long long>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), workSize);
  });
}

RGPU_CUFFT_API cufftResult cufftGetSize1d(cufftHandle plan, int nx, cufftType type, int batch, size_t* workSize) {
  return guarded("cufftGetSize1d", [&] { return sizeOf("cufftGetSize1d", plan, describe1(nx, type, batch), workSize); });
}
RGPU_CUFFT_API cufftResult cufftGetSize2d(cufftHandle plan, int nx, int ny, cufftType type, size_t* workSize) {
  return guarded("cufftGetSize2d", [&] { return sizeOf("cufftGetSize2d", plan, describe2(nx, ny, type), workSize); });
}
RGPU_CUFFT_API cufftResult cufftGetSize3d(cufftHandle plan, int nx, int ny, int nz, cufftType type, size_t* workSize) {
  return guarded("cufftGetSize3d",
                 [&] { return sizeOf("cufftGetSize3d", plan, describe3(nx, ny, nz, type), workSize); });
}
RGPU_CUFFT_API cufftResult cufftGetSizeMany(cufftHandle plan, int rank, int* n, int* inembed, int istride, int idist,
                                            int* onembed, int ostride, int odist, cufftType type, int batch,
                                            size_t* workArea) {
  return guarded("cufftGetSizeMany", [&] {
    return sizeOf("cufftGetSizeMany", plan,
                  describe<int>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), workArea);
  });
}
RGPU_CUFFT_API cufftResult cufftGetSizeMany64(cufftHandle plan, int rank, long long* n, long long* inembed,
                                              long long istride, long long idist, long long* onembed,
                                              long long ostride, long long odist, cufftType type, long long batch,
                                              size_t* workSize) {
  return guarded("cufftGetSizeMany64", [&] {
    return sizeOf("cufftGetSizeMany64", plan,
                  describe<long long>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), workSize);
  });
}
RGPU_CUFFT_API cufftResult cufftGetSize(cufftHandle handle, size_t* workSize) {
  if (!workSize) return CUFFT_INVALID_VALUE;
  return withPlan(handle, [&](Plan& p) {
    *workSize = p.work_size;
    return CUFFT_SUCCESS;
  });
}

// Estimates: the same answer as the device gives for the plan (no plan made).
RGPU_CUFFT_API cufftResult cufftEstimate1d(int nx, cufftType type, int batch, size_t* workSize) {
  return guarded("cufftEstimate1d", [&] { return sizeOf("cufftEstimate1d", 0, describe1(nx, type, batch), workSize); });
}
RGPU_CUFFT_API cufftResult cufftEstimate2d(int nx, int ny, cufftType type, size_t* workSize) {
  return guarded("cufftEstimate2d", [&] { return sizeOf("cufftEstimate2d", 0, describe2(nx, ny, type), workSize); });
}
RGPU_CUFFT_API cufftResult cufftEstimate3d(int nx, int ny, int nz, cufftType type, size_t* workSize) {
  return guarded("cufftEstimate3d", [&] { return sizeOf("cufftEstimate3d", 0, describe3(nx, ny, nz, type), workSize); });
}
RGPU_CUFFT_API cufftResult cufftEstimateMany(int rank, int* n, int* inembed, int istride, int idist, int* onembed,
                                             int ostride, int odist, cufftType type, int batch, size_t* workSize) {
  return guarded("cufftEstimateMany", [&] {
    return sizeOf("cufftEstimateMany", 0,
                  describe<int>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), workSize);
  });
}

RGPU_CUFFT_API cufftResult cufftSetWorkArea(cufftHandle plan, void* workArea) {
  void* freed = nullptr;
  cufftResult r = withPlan(plan, [&](Plan& p) {
    if (p.own_work) freed = p.work;  // as cuFFT: the auto-allocated area goes
    p.own_work = false;
    p.work = workArea;
    return CUFFT_SUCCESS;
  });
  if (freed) (void)cudaFree(freed);
  return r;
}

RGPU_CUFFT_API cufftResult cufftSetAutoAllocation(cufftHandle plan, int autoAllocate) {
  return withPlan(plan, [&](Plan& p) {
    p.auto_allocate = autoAllocate != 0;
    return CUFFT_SUCCESS;
  });
}

RGPU_CUFFT_API cufftResult cufftSetStream(cufftHandle plan, cudaStream_t stream) {
  return withPlan(plan, [&](Plan& p) {
    p.stream = stream;
    return CUFFT_SUCCESS;
  });
}

RGPU_CUFFT_API cufftResult cufftExecC2C(cufftHandle plan, cufftComplex* idata, cufftComplex* odata, int direction) {
  return exec("cufftExecC2C", plan, fft::kC2C, idata, odata, direction);
}
RGPU_CUFFT_API cufftResult cufftExecR2C(cufftHandle plan, cufftReal* idata, cufftComplex* odata) {
  return exec("cufftExecR2C", plan, fft::kR2C, idata, odata, 0);
}
RGPU_CUFFT_API cufftResult cufftExecC2R(cufftHandle plan, cufftComplex* idata, cufftReal* odata) {
  return exec("cufftExecC2R", plan, fft::kC2R, idata, odata, 0);
}
RGPU_CUFFT_API cufftResult cufftExecZ2Z(cufftHandle plan, cufftDoubleComplex* idata, cufftDoubleComplex* odata,
                                        int direction) {
  return exec("cufftExecZ2Z", plan, fft::kZ2Z, idata, odata, direction);
}
RGPU_CUFFT_API cufftResult cufftExecD2Z(cufftHandle plan, cufftDoubleReal* idata, cufftDoubleComplex* odata) {
  return exec("cufftExecD2Z", plan, fft::kD2Z, idata, odata, 0);
}
RGPU_CUFFT_API cufftResult cufftExecZ2D(cufftHandle plan, cufftDoubleComplex* idata, cufftDoubleReal* odata) {
  return exec("cufftExecZ2D", plan, fft::kZ2D, idata, odata, 0);
}

RGPU_CUFFT_API cufftResult cufftGetVersion(int* version) {
  if (!version) return CUFFT_INVALID_VALUE;
  *version = CUFFT_VERSION;  // the toolkit's cuFFT this library stands in for
  return CUFFT_SUCCESS;
}

RGPU_CUFFT_API cufftResult cufftGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUFFT_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUFFT_VER_MAJOR; return CUFFT_SUCCESS;
    case MINOR_VERSION: *value = CUFFT_VER_MINOR; return CUFFT_SUCCESS;
    case PATCH_LEVEL: *value = CUFFT_VER_PATCH; return CUFFT_SUCCESS;
    default: return CUFFT_INVALID_TYPE;
  }
}

// Plan properties are hints to NVIDIA's planner (JIT patience, host
// threads): kept and given back, as its own are.
RGPU_CUFFT_API cufftResult cufftSetPlanPropertyInt64(cufftHandle plan, cufftProperty property,
                                                     const long long int inputValueInt) {
  return withPlan(plan, [&](Plan& p) {
    switch (property) {
      case NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT: p.patient_jit = inputValueInt; return CUFFT_SUCCESS;
      case NVFFT_PLAN_PROPERTY_INT64_MAX_NUM_HOST_THREADS: p.max_host_threads = inputValueInt; return CUFFT_SUCCESS;
    }
    return CUFFT_INVALID_VALUE;
  });
}
RGPU_CUFFT_API cufftResult cufftGetPlanPropertyInt64(cufftHandle plan, cufftProperty property,
                                                     long long int* returnPtrValue) {
  if (!returnPtrValue) return CUFFT_INVALID_VALUE;
  return withPlan(plan, [&](Plan& p) {
    switch (property) {
      case NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT: *returnPtrValue = p.patient_jit; return CUFFT_SUCCESS;
      case NVFFT_PLAN_PROPERTY_INT64_MAX_NUM_HOST_THREADS: *returnPtrValue = p.max_host_threads; return CUFFT_SUCCESS;
    }
    return CUFFT_INVALID_VALUE;
  });
}
RGPU_CUFFT_API cufftResult cufftResetPlanProperty(cufftHandle plan, cufftProperty property) {
  return cufftSetPlanPropertyInt64(plan, property, 0);
}

// cufftXt: plans by data type (f32 and f64: what cufftMakePlanMany64 makes), their transforms, the work area policy.
RGPU_CUFFT_API cufftResult cufftXtMakePlanMany(cufftHandle plan, int rank, long long int* n, long long int* inembed,
                                               long long int istride, long long int idist, cudaDataType inputtype,
                                               long long int* onembed, long long int ostride, long long int odist,
                                               cudaDataType outputtype, long long int batch, size_t* workSize,
                                               cudaDataType executiontype) {
  int32_t type = typeOf(inputtype, outputtype, executiontype);
  if (!type) return unsupported("cufftXtMakePlanMany with data types other than 32- and 64-bit floats");
  return guarded("cufftXtMakePlanMany", [&] {
    return make("cufftXtMakePlanMany", plan,
                describe<long long>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), workSize);
  });
}
RGPU_CUFFT_API cufftResult cufftXtGetSizeMany(cufftHandle plan, int rank, long long int* n, long long int* inembed,
                                              long long int istride, long long int idist, cudaDataType inputtype,
                                              long long int* onembed, long long int ostride, long long int odist,
                                              cudaDataType outputtype, long long int batch, size_t* workSize,
                                              cudaDataType executiontype) {
  int32_t type = typeOf(inputtype, outputtype, executiontype);
  if (!type) return unsupported("cufftXtGetSizeMany with data types other than 32- and 64-bit floats");
  return guarded("cufftXtGetSizeMany", [&] {
    return sizeOf("cufftXtGetSizeMany", plan,
                  describe<long long>(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch), workSize);
  });
}
RGPU_CUFFT_API cufftResult cufftXtExec(cufftHandle plan, void* input, void* output, int direction) {
  int32_t type = 0;
  if (cufftResult r = withPlan(plan, [&](Plan& p) {
        type = p.desc.type;
        return p.made ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
      });
      r != CUFFT_SUCCESS)
    return r;
  return exec("cufftXtExec", plan, type, input, output, direction);
}
// A policy is a hint about the work area's size: accepted, and the area stays what the plan needs.
RGPU_CUFFT_API cufftResult cufftXtSetWorkAreaPolicy(cufftHandle plan, cufftXtWorkAreaPolicy policy, size_t*) {
  if (policy != CUFFT_WORKAREA_MINIMAL && policy != CUFFT_WORKAREA_USER && policy != CUFFT_WORKAREA_PERFORMANCE)
    return CUFFT_INVALID_VALUE;
  return withPlan(plan, [](Plan&) { return CUFFT_SUCCESS; });
}

// Multi-GPU plans and descriptors, callbacks, plan queries.
RGPU_CUFFT_API cufftResult cufftXtSetGPUs(cufftHandle, int, int*) { return unsupported("cufftXtSetGPUs"); }
RGPU_CUFFT_API cufftResult cufftXtMalloc(cufftHandle, cudaLibXtDesc**, cufftXtSubFormat) {
  return unsupported("cufftXtMalloc");
}
RGPU_CUFFT_API cufftResult cufftXtMemcpy(cufftHandle, void*, void*, cufftXtCopyType) {
  return unsupported("cufftXtMemcpy");
}
RGPU_CUFFT_API cufftResult cufftXtFree(cudaLibXtDesc*) { return unsupported("cufftXtFree"); }
RGPU_CUFFT_API cufftResult cufftXtSetWorkArea(cufftHandle, void**) { return unsupported("cufftXtSetWorkArea"); }
RGPU_CUFFT_API cufftResult cufftXtExecDescriptorC2C(cufftHandle, cudaLibXtDesc*, cudaLibXtDesc*, int) {
  return unsupported("cufftXtExecDescriptorC2C");
}
RGPU_CUFFT_API cufftResult cufftXtExecDescriptorR2C(cufftHandle, cudaLibXtDesc*, cudaLibXtDesc*) {
  return unsupported("cufftXtExecDescriptorR2C");
}
RGPU_CUFFT_API cufftResult cufftXtExecDescriptorC2R(cufftHandle, cudaLibXtDesc*, cudaLibXtDesc*) {
  return unsupported("cufftXtExecDescriptorC2R");
}
RGPU_CUFFT_API cufftResult cufftXtExecDescriptorZ2Z(cufftHandle, cudaLibXtDesc*, cudaLibXtDesc*, int) {
  return unsupported("cufftXtExecDescriptorZ2Z");
}
RGPU_CUFFT_API cufftResult cufftXtExecDescriptorD2Z(cufftHandle, cudaLibXtDesc*, cudaLibXtDesc*) {
  return unsupported("cufftXtExecDescriptorD2Z");
}
RGPU_CUFFT_API cufftResult cufftXtExecDescriptorZ2D(cufftHandle, cudaLibXtDesc*, cudaLibXtDesc*) {
  return unsupported("cufftXtExecDescriptorZ2D");
}
RGPU_CUFFT_API cufftResult cufftXtExecDescriptor(cufftHandle, cudaLibXtDesc*, cudaLibXtDesc*, int) {
  return unsupported("cufftXtExecDescriptor");
}
RGPU_CUFFT_API cufftResult cufftXtQueryPlan(cufftHandle, void*, cufftXtQueryType) {
  return unsupported("cufftXtQueryPlan");
}
RGPU_CUFFT_API cufftResult cufftXtSetCallback(cufftHandle, void**, cufftXtCallbackType, void**) {
  return unsupported("cufftXtSetCallback (callbacks run on the server's GPU)");
}
RGPU_CUFFT_API cufftResult cufftXtClearCallback(cufftHandle, cufftXtCallbackType) {
  return unsupported("cufftXtClearCallback");
}
RGPU_CUFFT_API cufftResult cufftXtSetCallbackSharedSize(cufftHandle, cufftXtCallbackType, size_t) {
  return unsupported("cufftXtSetCallbackSharedSize");
}
RGPU_CUFFT_API cufftResult cufftXtSetJITCallback(cufftHandle, const char*, const void*, size_t, cufftXtCallbackType,
                                                 void**) {
  return unsupported("cufftXtSetJITCallback");
}
// (Not in NVIDIA's headers, so not called by programs built with them: exported, refused.)
RGPU_CUFFT_API cufftResult cufftDebug() { return unsupported("cufftDebug"); }
RGPU_CUFFT_API cufftResult cufftXtMakePlanGuru64() { return unsupported("cufftXtMakePlanGuru64"); }

}  // extern "C"
