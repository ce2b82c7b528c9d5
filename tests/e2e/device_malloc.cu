// Device-side malloc/free and new/delete on the device heap whose size
// cudaDeviceSetLimit(cudaLimitMallocHeapSize) sets before the first kernel
// that uses it (and not after, as NVIDIA's runtime refuses), and
// __nv_aligned_device_malloc on the same heap.
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

// Each thread asks for 40 bytes at an alignment of 128 << (t % 4) and keeps
// the block; thread 0 also asks with alignments that are not powers of 2.
__global__ void aligned(unsigned long long* got, int* bad) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  size_t align = 128u << (t % 4);
  int* p = static_cast<int*>(__nv_aligned_device_malloc(40, align));
  got[t] = reinterpret_cast<unsigned long long>(p);
  if (p) p[9] = t;
  if (t == 0) *bad = (__nv_aligned_device_malloc(40, 96) != nullptr) + (__nv_aligned_device_malloc(40, 0) != nullptr);
}

__global__ void readAndFree(unsigned long long* got, int* wrong) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int* p = reinterpret_cast<int*>(got[t]);
  if (!p || p[9] != t) atomicAdd(wrong, 1);
  free(p);
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
  {
    unsigned long long* got;
    int* flags;
    CHECK(cudaMalloc(&got, threads * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&flags, 2 * sizeof(int)));
    CHECK(cudaMemset(flags, 0, 2 * sizeof(int)));
    for (int round = 0; round < 2; ++round) {
      aligned<<<threads / 64, 64>>>(got, flags);
      unsigned long long p[threads];
      CHECK(cudaMemcpy(p, got, sizeof p, cudaMemcpyDeviceToHost));
      for (int t = 0; t < threads; ++t)
        if (!p[t] || p[t] % (128u << (t % 4))) {
          std::printf("FAILED: __nv_aligned_device_malloc(40, %u) gave %#llx\n", 128u << (t % 4), p[t]);
          return 1;
        }
      readAndFree<<<threads / 64, 64>>>(got, flags + 1);
    }
    int f[2];
    CHECK(cudaMemcpy(f, flags, sizeof f, cudaMemcpyDeviceToHost));
    if (f[0] || f[1]) {
      std::printf("FAILED: %d aligned allocation(s) at alignments that are not powers of 2, %d block(s) read back wrong\n",
                  f[0], f[1]);
      return 1;
    }
  }
  if (cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32 << 20) != cudaErrorInvalidValue) {
    std::printf("FAILED: the heap size changed after a kernel used it\n");
    return 1;
  }
  cudaGetLastError();
  std::printf("device_malloc: all checks passed\n");
  return 0;
}
