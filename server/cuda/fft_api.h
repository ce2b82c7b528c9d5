// NVIDIA's cuFFT, loaded by a worker at run time like cuBLAS (blas_api.h):
// dlopen of libcufft.so.12 ([cuda] cufft_library; tests point it at a fake)
// on the session's first cuFFT plan, and dlsym of each entry point, typed by
// NVIDIA's own header. Its static runtime works in the context current on
// the calling thread: the worker's primary context.
#pragma once

#include <cufft.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace rgpu::server::cuda {

class FftApi {
 public:
  static Result<std::unique_ptr<FftApi>> load(const std::string& cufft);
  ~FftApi();
  FftApi(const FftApi&) = delete;
  FftApi& operator=(const FftApi&) = delete;

  // A cufftResult as a Status naming the call.
  static Status check(cufftResult r, const char* call);

#define RGPU_FFT_FN(name) decltype(&::name) name = nullptr;
  RGPU_FFT_FN(cufftCreate)
  RGPU_FFT_FN(cufftDestroy)
  RGPU_FFT_FN(cufftSetAutoAllocation)
  RGPU_FFT_FN(cufftMakePlanMany64)
  RGPU_FFT_FN(cufftSetStream)
  RGPU_FFT_FN(cufftSetWorkArea)
  RGPU_FFT_FN(cufftExecC2C)
  RGPU_FFT_FN(cufftExecR2C)
  RGPU_FFT_FN(cufftExecC2R)
  RGPU_FFT_FN(cufftExecZ2Z)
  RGPU_FFT_FN(cufftExecD2Z)
  RGPU_FFT_FN(cufftExecZ2D)
#undef RGPU_FFT_FN

 private:
  FftApi() = default;
  void* lib_ = nullptr;
};

}  // namespace rgpu::server::cuda
