// Device-side malloc/free and new/delete on the device heap whose size
// cudaDeviceSetLimit(cudaLimitMallocHeapSize) sets before the first kernel
// that uses it (and not after, as NVIDIA's runtime refuses).
#include <cuda_runtime.h>

#include <cstdio>

#include "check.h"

__global__ void build(int** lists, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int* p = new int[n];  // (malloc underneath)
  for (int i = 0; i < n; ++i) p[i] = t + i;
  lists[t] = p;
}

__global__ void sumAndFree(int** lists, int n, long long* sums) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  long long s = 0;
  for (int i = 0; i < n; ++i) s += lists[t][i];
  sums[t] = s;
  delete[] lists[t];
}

__global__ void tooBig(unsigned long long bytes, int* got_null) {
  void* p = malloc(bytes);
  *got_null = p == nullptr;
  free(p);  // free(NULL) does nothing
}

int main() {
  const int threads = 256, n = 100;
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 16 << 20));
  size_t heap = 0;
  CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
  if (heap != (16u << 20)) {
    std::printf("FAILED: heap limit reads %zu\n", heap);
    return 1;
  }
  int** lists;
  long long* sums;
  int* null_flag;
  CHECK(cudaMalloc(&lists, threads * sizeof(int*)));
  CHECK(cudaMalloc(&sums, threads * sizeof(long long)));
  CHECK(cudaMalloc(&null_flag, sizeof(int)));
  for (int round = 0; round < 3; ++round) {  // freed memory is reused
    build<<<threads / 64, 64>>>(lists, n);
    sumAndFree<<<threads / 64, 64>>>(lists, n, sums);
    CHECK(cudaGetLastError());
  }
  long long h[threads];
  CHECK(cudaMemcpy(h, sums, sizeof h, cudaMemcpyDeviceToHost));
  for (int t = 0; t < threads; ++t)
    if (h[t] != static_cast<long long>(n) * t + n * (n - 1) / 2) {
      std::printf("FAILED: sum %d = %lld\n", t, h[t]);
      return 1;
    }
  tooBig<<<1, 1>>>(32ull << 20, null_flag);
  int got_null = 0;
  CHECK(cudaMemcpy(&got_null, null_flag, sizeof got_null, cudaMemcpyDeviceToHost));
  if (!got_null) {
    std::printf("FAILED: malloc past the heap did not return NULL\n");
    return 1;
  }
  if (cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32 << 20) != cudaErrorInvalidValue) {
    std::printf("FAILED: the heap size changed after a kernel used it\n");
    return 1;
  }
  cudaGetLastError();
  std::printf("device_malloc: all checks passed\n");
  return 0;
}
