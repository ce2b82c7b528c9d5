#include "server/cuda/sparse_api.h"

#include <dlfcn.h>

#include <type_traits>

namespace rgpu::server::cuda {

Result<std::unique_ptr<SparseApi>> SparseApi::load(const std::string& cusparse) {
  std::unique_ptr<SparseApi> api(new SparseApi);
  api->lib_ = ::dlopen(cusparse.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->lib_)
    return Status(err::kNotSupported, "cannot load cuSPARSE (" + cusparse + "): " + ::dlerror() +
                                          " (install NVIDIA's CUDA 13 libraries on the server, or set [cuda] "
                                          "cusparse_library)");
  std::string missing;
  auto take = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->lib_, name));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
#define RGPU_TAKE(name) take(#name, api->name);
  RGPU_SPARSE_FUNCTIONS(RGPU_TAKE)
#undef RGPU_TAKE
  if (!missing.empty()) return Status(err::kNotSupported, "cuSPARSE (" + cusparse + ") lacks entry points: " + missing);
  return api;
}

Status SparseApi::check(cusparseStatus_t s, const char* call) {
  if (s == CUSPARSE_STATUS_SUCCESS) return Status::ok();
  const int code = s == CUSPARSE_STATUS_INVALID_VALUE  ? err::kInvalidValue
                   : s == CUSPARSE_STATUS_ALLOC_FAILED ? err::kMemoryAllocation
                   : s == CUSPARSE_STATUS_NOT_SUPPORTED || s == CUSPARSE_STATUS_ARCH_MISMATCH ? err::kNotSupported
                                                                                               : err::kUnknown;
  return Status(code, std::string(call) + " failed: cusparseStatus_t " + std::to_string(static_cast<int>(s)));
}

}  // namespace rgpu::server::cuda
