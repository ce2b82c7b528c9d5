#include "server/cuda/fft_api.h"

#include <dlfcn.h>

#include <type_traits>

namespace rgpu::server::cuda {

Result<std::unique_ptr<FftApi>> FftApi::load(const std::string& cufft) {
  std::unique_ptr<FftApi> api(new FftApi);
  api->lib_ = ::dlopen(cufft.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->lib_)
    return Status(err::kNotSupported, "cannot load cuFFT (" + cufft + "): " + ::dlerror() +
                                          " (install NVIDIA's CUDA 13 libraries on the server, or set [cuda] "
                                          "cufft_library)");
  std::string missing;
  auto take = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(api->lib_, name));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
#define RGPU_TAKE(name) take(#name, api->name);
  RGPU_TAKE(cufftCreate)
  RGPU_TAKE(cufftDestroy)
  RGPU_TAKE(cufftSetAutoAllocation)
  RGPU_TAKE(cufftMakePlanMany64)
  RGPU_TAKE(cufftSetStream)
  RGPU_TAKE(cufftSetWorkArea)
  RGPU_TAKE(cufftExecC2C)
  RGPU_TAKE(cufftExecR2C)
  RGPU_TAKE(cufftExecC2R)
  RGPU_TAKE(cufftExecZ2Z)
  RGPU_TAKE(cufftExecD2Z)
  RGPU_TAKE(cufftExecZ2D)
#undef RGPU_TAKE
  if (!missing.empty()) return Status(err::kNotSupported, "cuFFT (" + cufft + ") lacks entry points: " + missing);
  return api;
}

FftApi::~FftApi() {
  if (lib_) ::dlclose(lib_);
}

Status FftApi::check(cufftResult r, const char* call) {
  if (r == CUFFT_SUCCESS) return Status::ok();
  // (err::kInvalidValue for the caller's mistakes; the rest as the library's failure.)
  const int code = r == CUFFT_INVALID_VALUE || r == CUFFT_INVALID_SIZE || r == CUFFT_INVALID_TYPE ? err::kInvalidValue
                   : r == CUFFT_ALLOC_FAILED                                                    ? err::kMemoryAllocation
                   : r == CUFFT_NOT_SUPPORTED                                                   ? err::kNotSupported
                                                                                                : err::kUnknown;
  return Status(code, std::string(call) + " failed: cufftResult " + std::to_string(static_cast<int>(r)));
}

}  // namespace rgpu::server::cuda
