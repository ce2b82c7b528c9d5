// Calls the runtime does not implement must fail with cudaErrorNotSupported
// (logged once per name), never crash or pretend to succeed.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
  cudaIpcMemHandle_t h;
  void* d = nullptr;
  if (cudaMalloc(&d, 64) != cudaSuccess) return 1;
  cudaError_t a = cudaIpcGetMemHandle(&h, d);
  cudaError_t b = cudaIpcGetMemHandle(&h, d);
  std::printf("cudaIpcGetMemHandle: %s, again: %s\n", cudaGetErrorName(a), cudaGetErrorName(b));
  std::printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));
  void* p = nullptr;
  cudaArray_t arr = nullptr;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaError_t m = cudaMallocArray(&arr, &desc, 16, 16, cudaArraySparse);  // sparse arrays: not offered
  std::printf("cudaMallocArray(sparse): %s\n", cudaGetErrorName(m));
  (void)cudaGetLastError();
  // Names and strings for error codes, as NVIDIA's runtime gives them.
  std::printf("names: %s %s %s %s\n", cudaGetErrorName(cudaSuccess), cudaGetErrorName(cudaErrorMemoryAllocation),
              cudaGetErrorName(cudaErrorIllegalAddress), cudaGetErrorName(cudaErrorStreamCaptureUnsupported));
  std::printf("strings: %s | %s | %s\n", cudaGetErrorString(cudaErrorMemoryAllocation),
              cudaGetErrorString(cudaErrorInvalidValue), cudaGetErrorString(cudaErrorNotSupported));
  std::printf("unknown code: %s | %s\n", cudaGetErrorName(static_cast<cudaError_t>(12345)),
              cudaGetErrorString(static_cast<cudaError_t>(12345)));
  // Ordinary calls keep working afterwards.
  cudaError_t ok = cudaMalloc(&p, 64);
  std::printf("cudaMalloc: %s\n", cudaGetErrorName(ok));
  return ok == cudaSuccess ? 0 : 1;
}
