#include "server/cuda/solver_api.h"

#include <dlfcn.h>

#include <type_traits>

namespace rgpu::server::cuda {

Result<std::unique_ptr<SolverApi>> SolverApi::load(const std::string& cusolver) {
  std::unique_ptr<SolverApi> api(new SolverApi);
  api->lib_ = ::dlopen(cusolver.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->lib_)
    return Status(err::kNotSupported, "cannot load cuSOLVER (" + cusolver + "): " + ::dlerror() +
                                          " (install NVIDIA's CUDA 13 libraries on the server, or set [cuda] "
                                          "cusolver_library)");
  std::string missing;
  auto take = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->lib_, name));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
#define RGPU_TAKE(name) take(#name, api->name);
  RGPU_TAKE(cusolverDnCreate)
  RGPU_TAKE(cusolverDnDestroy)
  RGPU_TAKE(cusolverDnSetStream)
  RGPU_SOLVER_ROUTINES(RGPU_TAKE)
#undef RGPU_TAKE
  if (!missing.empty()) return Status(err::kNotSupported, "cuSOLVER (" + cusolver + ") lacks entry points: " + missing);
  return api;
}

Status SolverApi::check(cusolverStatus_t s, const char* call) {
  if (s == CUSOLVER_STATUS_SUCCESS) return Status::ok();
  const int code = s == CUSOLVER_STATUS_INVALID_VALUE  ? err::kInvalidValue
                   : s == CUSOLVER_STATUS_ALLOC_FAILED ? err::kMemoryAllocation
                   : s == CUSOLVER_STATUS_NOT_SUPPORTED || s == CUSOLVER_STATUS_ARCH_MISMATCH ? err::kNotSupported
                                                                                               : err::kUnknown;
  return Status(code, std::string(call) + " failed: cusolverStatus_t " + std::to_string(static_cast<int>(s)));
}

}  // namespace rgpu::server::cuda
