// A sum with warp shuffles and atomics, and a shared-memory histogram,
// checked against the CPU.
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void sum(const int* in, unsigned long long* out, int n) {
  long long v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += in[i];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, static_cast<unsigned long long>(v));
}

__global__ void histogram(const unsigned char* in, int n, unsigned* bins) {
  __shared__ unsigned local[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) local[i] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) atomicAdd(&local[in[i]], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}

int main() {
  const int n = 1 << 20;
  std::vector<int> data(n);
  std::vector<unsigned char> bytes(n);
  long long expect = 0;
  std::vector<unsigned> expect_bins(256, 0);
  for (int i = 0; i < n; ++i) {
    data[i] = (i * 2654435761u) % 1000 - 500;
    expect += data[i];
    bytes[i] = static_cast<unsigned char>((i * 31 + (i >> 7)) & 0xff);
    ++expect_bins[bytes[i]];
  }
  int* din;
  unsigned long long* dsum;
  unsigned char* dbytes;
  unsigned* dbins;
  cudaMalloc(&din, n * sizeof(int));
  cudaMalloc(&dsum, sizeof(unsigned long long));
  cudaMalloc(&dbytes, n);
  cudaMalloc(&dbins, 256 * sizeof(unsigned));
  cudaMemcpy(din, data.data(), n * sizeof(int), cudaMemcpyHostToDevice);
  cudaMemcpy(dbytes, bytes.data(), n, cudaMemcpyHostToDevice);
  cudaMemset(dsum, 0, sizeof(unsigned long long));
  cudaMemset(dbins, 0, 256 * sizeof(unsigned));
  sum<<<32, 256>>>(din, dsum, n);
  histogram<<<16, 256>>>(dbytes, n, dbins);
  unsigned long long got = 0;
  std::vector<unsigned> bins(256);
  cudaMemcpy(&got, dsum, sizeof got, cudaMemcpyDeviceToHost);
  cudaError_t e = cudaMemcpy(bins.data(), dbins, 256 * sizeof(unsigned), cudaMemcpyDeviceToHost);
  bool sum_ok = static_cast<long long>(got) == expect;
  bool hist_ok = bins == expect_bins;
  std::printf("sum of %d ints (warp shuffles + atomicAdd): %lld, CPU %lld: %s\n", n, static_cast<long long>(got), expect,
              sum_ok ? "match" : "MISMATCH");
  std::printf("256-bin histogram (shared-memory atomics): %s\n", hist_ok ? "matches the CPU" : "MISMATCH");
  bool ok = sum_ok && hist_ok && e == cudaSuccess;
  std::printf("%s\n", ok ? "reduction: all checks passed" : "reduction: FAILED");
  return ok ? 0 : 1;
}
