// __managed__ variables: one name for host code and kernels, with its initial
// value, updated by kernels, by the host and by symbol copies. The sim gives
// each variable pages of its own; the driver (CUDA backend) packs them next to
// each other in one managed allocation, which the client pages whole.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "check.h"

__managed__ int counter = 5;
__managed__ float table[2048];  // two pages

__global__ void bump(int n) {
  if (threadIdx.x == 0) counter += n;
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) table[i] = float(i) * 0.5f;
}

__global__ void readBack(int i) { counter = int(table[i]); }

int main() {
  EXPECT(counter == 5);  // the initial value, fetched from the device
  counter = 10;
  bump<<<1, 256>>>(3);
  CHECK(cudaDeviceSynchronize());
  EXPECT(counter == 13);
  EXPECT(table[0] == 0.0f && table[2047] == 1023.5f);
  int v = 0;
  CHECK(cudaMemcpyFromSymbol(&v, counter, sizeof v));
  EXPECT(v == 13);
  v = 20;
  CHECK(cudaMemcpyToSymbol(counter, &v, sizeof v));
  CHECK(cudaDeviceSynchronize());
  EXPECT(counter == 20);
  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, &counter));
  EXPECT(pa.type == cudaMemoryTypeManaged);
  // Host writes on the last page of the table travel before the next kernel.
  table[2040] = 77.0f;
  readBack<<<1, 1>>>(2040);
  CHECK(cudaDeviceSynchronize());
  EXPECT(counter == 77);
  std::printf("managed_var: table at page offset %u\n", unsigned(reinterpret_cast<uintptr_t>(&table[0]) % 4096));
  std::printf("managed_var: initial value, kernel, host and symbol updates, all checks passed\n");
  return 0;
}
