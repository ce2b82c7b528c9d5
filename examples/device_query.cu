// Lists the devices the rgpu server offers, like deviceQuery.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::printf("cudaGetDeviceCount: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
    return 1;
  }
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  std::printf("%d device(s), runtime %d, driver %d\n", count, rt, drv);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, d);
    int clock = 0;
    cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, d);
    std::printf("device %d: %s, compute capability %d.%d, %d SMs, %.1f GiB, warp %d, max threads/block %d, clock %d kHz\n",
                d, p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, p.warpSize,
                p.maxThreadsPerBlock, clock);
    cudaSetDevice(d);
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    std::printf("  memory: %zu MiB free of %zu MiB\n", free >> 20, total >> 20);
  }
  return 0;
}
