// Stream-ordered allocation with memory pools, as NVIDIA's programming guide
// uses it: the default and an explicit pool, the device's current pool,
// attributes and their figures, cudaMallocFromPoolAsync, trimming.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "check.h"

__global__ void fill(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

int main() {
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  EXPECT(supported == 1);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaMemPool_t def, cur;
  CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
  CHECK(cudaDeviceGetMemPool(&cur, 0));
  EXPECT(def == cur);
  uint64_t threshold = ~0ull;
  CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &threshold));
  uint64_t back = 0;
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrReleaseThreshold, &back));
  EXPECT(back == threshold);
  // Allocations of the default pool, used in stream order.
  const int n = 1 << 14;
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMallocAsync(&a, n * sizeof(int), s));
  CHECK(cudaMallocAsync(&b, n * sizeof(int), s));
  fill<<<n / 256, 256, 0, s>>>(a, n, 1);
  CHECK(cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
  uint64_t used = 0, high = 0;
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used == 2 * n * sizeof(int));
  CHECK(cudaFreeAsync(a, s));
  int h[n];
  CHECK(cudaMemcpyAsync(h, b, sizeof h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 1 + i);
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &used));
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemHigh, &high));
  EXPECT(used == n * sizeof(int) && high == 2 * n * sizeof(int));
  uint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &zero));
  CHECK(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemHigh, &high));
  EXPECT(high == used);
  // An explicit pool, made the device's current one.
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t mine;
  CHECK(cudaMemPoolCreate(&mine, &props));
  CHECK(cudaDeviceSetMemPool(0, mine));
  CHECK(cudaDeviceGetMemPool(&cur, 0));
  EXPECT(cur == mine);
  int* c = nullptr;
  CHECK(cudaMallocAsync(&c, 4096, s));  // from `mine` now
  int* d = nullptr;
  CHECK(cudaMallocFromPoolAsync(&d, 8192, def, s));
  CHECK(cudaMemPoolGetAttribute(mine, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used == 4096);
  cudaMemLocation here = {cudaMemLocationTypeDevice, 0};
  cudaMemAccessFlags flags;
  CHECK(cudaMemPoolGetAccess(&flags, mine, &here));
  EXPECT(flags == cudaMemAccessFlagsProtReadWrite);
  CHECK(cudaMemPoolTrimTo(mine, 0));
  CHECK(cudaFreeAsync(c, s));
  CHECK(cudaFreeAsync(d, s));
  CHECK(cudaFreeAsync(b, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemPoolDestroy(mine));
  CHECK(cudaDeviceGetMemPool(&cur, 0));
  EXPECT(cur == def);  // the device's current pool is its default again
  EXPECT(cudaMemPoolDestroy(def) == cudaErrorInvalidValue);
  cudaGetLastError();
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  EXPECT(cudaMemPoolCreate(&mine, &props) == cudaErrorNotSupported);  // IPC pools
  cudaGetLastError();
  CHECK(cudaStreamDestroy(s));
  std::printf("mempool: all checks passed\n");
  return 0;
}
