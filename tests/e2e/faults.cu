// Faulting kernels: each mode runs in its own process, since a fault is sticky.
//   assert   - a failing device assert: cudaErrorAssert, message on stdout
//   illegal  - a store far outside every allocation: cudaErrorIllegalAddress
//   trap     - asm("trap;"): cudaErrorLaunchFailure
//   spin     - a kernel that never ends (it waits for a flag nobody sets):
//              cudaErrorLaunchTimeout under [limits] kernel_timeout_ms
//   ok       - a tiny kernel that does end: cudaSuccess
#include <cassert>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void asserting(int n) { assert(n > 100); }
__global__ void illegal(int* p) { p[threadIdx.x + (1 << 26)] = 1; }
__global__ void trapping() { asm volatile("trap;"); }
__global__ void tiny(int* p) { p[threadIdx.x] = static_cast<int>(threadIdx.x); }
__global__ void spinning(volatile int* flag) {
  while (*flag == 0) {
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "assert";
  int* p = nullptr;
  cudaMalloc(&p, 64);
  if (!std::strcmp(mode, "assert")) asserting<<<1, 2>>>(5);
  else if (!std::strcmp(mode, "illegal")) illegal<<<1, 32>>>(p);
  else if (!std::strcmp(mode, "ok")) tiny<<<1, 16>>>(p);
  else if (!std::strcmp(mode, "spin")) {
    cudaMemset(p, 0, 64);
    spinning<<<4, 32>>>(p);
    std::printf("spinning\n");
    std::fflush(stdout);
  } else trapping<<<1, 1>>>();
  cudaError_t sync = cudaDeviceSynchronize();
  std::printf("synchronize: %s\n", cudaGetErrorName(sync));
  // Sticky: later calls fail with the same error.
  void* q = nullptr;
  cudaError_t later = cudaMalloc(&q, 16);
  std::printf("later call: %s\n", cudaGetErrorName(later));
  return 0;
}
