#include "server/cuda/dnn_api.h"

#include <dlfcn.h>

#include <type_traits>

namespace rgpu::server::cuda {

Result<std::unique_ptr<DnnApi>> DnnApi::load(const std::string& cudnn) {
  std::unique_ptr<DnnApi> api(new DnnApi);
  api->lib_ = ::dlopen(cudnn.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->lib_)
    return Status(err::kNotSupported, "cannot load cuDNN (" + cudnn + "): " + ::dlerror() +
                                          " (install NVIDIA's cuDNN 9 on the server, or set [cuda] cudnn_library)");
  std::string missing;
  auto take = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->lib_, name));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
#define RGPU_TAKE(name) take(#name, api->name);
  RGPU_DNN_FUNCTIONS(RGPU_TAKE)
#undef RGPU_TAKE
  if (!missing.empty()) return Status(err::kNotSupported, "cuDNN (" + cudnn + ") lacks entry points: " + missing);
  return api;
}

Status DnnApi::check(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::ok();
  const int v = static_cast<int>(s);
  const int code = v >= 2000 && v < 3000   ? err::kInvalidValue
                   : v >= 3000 && v < 4000 ? err::kNotSupported
                   : s == CUDNN_STATUS_ALLOC_FAILED ? err::kMemoryAllocation
                                                    : err::kUnknown;
  return Status(code, std::string(call) + " failed: cudnnStatus_t " + std::to_string(v));
}

}  // namespace rgpu::server::cuda
