// Launches kernels of several shapes through every launch path; the test
// compares what reached the server's backend (its launch log) with what this
// program asked for. Prints where libcudart came from.
#include <dlfcn.h>
#include <cstdio>
#include <cuda_runtime.h>

__global__ void k_params(char c, int i, double d, float4 v, int* p) {
  if (c == 'x' && i == -7 && d == 2.5 && v.w == 4 && threadIdx.x == 0 && blockIdx.x == 0) *p = 1;
}
__global__ void k_shmem(float* out) {
  extern __shared__ float s[];
  s[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = s[threadIdx.x];
}
template <typename T>
__global__ void k_tmpl(T* p, T v) { *p = v; }

int main() {
  Dl_info info;
  cudaError_t (*malloc_fn)(void**, size_t) = cudaMalloc;
  dladdr(reinterpret_cast<void*>(malloc_fn), &info);
  std::printf("libcudart: %s\n", info.dli_fname);
  int* dp = nullptr;
  if (cudaMalloc(&dp, 4096) != cudaSuccess) return 1;
  std::printf("pointer: %p\n", static_cast<void*>(dp));
  cudaStream_t s;
  cudaStreamCreate(&s);

  k_params<<<dim3(3, 2, 1), dim3(32, 4, 2)>>>('x', -7, 2.5, make_float4(1, 2, 3, 4), dp);
  std::printf("launch 1: %s\n", cudaGetErrorName(cudaGetLastError()));
  k_shmem<<<5, 128, 4096, s>>>(reinterpret_cast<float*>(dp) + 256);
  std::printf("launch 2: %s\n", cudaGetErrorName(cudaGetLastError()));
  k_tmpl<double><<<1, 1>>>(reinterpret_cast<double*>(dp) + 100, 0.125);
  std::printf("launch 3: %s\n", cudaGetErrorName(cudaGetLastError()));
  char c = 'x';
  int i = -7;
  double d = 2.5;
  float4 v = make_float4(1, 2, 3, 4);
  void* args[] = {&c, &i, &d, &v, &dp};
  cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(k_params), dim3(7), dim3(64), args, 0, s);
  std::printf("launch 4 (cudaLaunchKernel): %s\n", cudaGetErrorName(e));

  // A launch configuration past the device limits fails at once, as in CUDA.
  k_shmem<<<1, 2048>>>(reinterpret_cast<float*>(dp));
  std::printf("oversized block: %s\n", cudaGetErrorName(cudaGetLastError()));

  e = cudaDeviceSynchronize();
  std::printf("synchronize after launches: %s\n", cudaGetErrorName(e));
  int wrote = 0;
  cudaMemcpy(&wrote, dp, sizeof wrote, cudaMemcpyDeviceToHost);
  std::printf("kernel wrote: %d\n", wrote);
  cudaStreamDestroy(s);
  cudaFree(dp);
  return 0;
}
