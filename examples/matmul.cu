// A shared-memory tiled matrix multiply, checked against the CPU.
#include <cmath>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

constexpr int kTile = 16;

__global__ void matmul(const float* A, const float* B, float* C, int n) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0;
  for (int k = 0; k < n; k += kTile) {
    As[threadIdx.y][threadIdx.x] = A[row * n + k + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(k + threadIdx.y) * n + col];
    __syncthreads();
    for (int j = 0; j < kTile; ++j) acc += As[threadIdx.y][j] * Bs[j][threadIdx.x];
    __syncthreads();
  }
  C[row * n + col] = acc;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 128;
  n = (n + kTile - 1) / kTile * kTile;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) - 6.0f;
    b[i] = static_cast<float>((i * 5) % 11) * 0.25f;
  }
  float *da, *db, *dc;
  size_t bytes = sizeof(float) * n * n;
  cudaMalloc(&da, bytes);
  cudaMalloc(&db, bytes);
  cudaMalloc(&dc, bytes);
  cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  matmul<<<dim3(n / kTile, n / kTile), dim3(kTile, kTile)>>>(da, db, dc, n);
  cudaEventRecord(stop);
  cudaError_t e = cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  double worst = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int k = 0; k < n; ++k) ref += static_cast<double>(a[i * n + k]) * b[k * n + j];
      worst = std::max(worst, std::fabs(ref - c[i * n + j]) / std::max(1.0, std::fabs(ref)));
    }
  bool ok = e == cudaSuccess && worst < 1e-4;
  std::printf("tiled matmul %dx%d (%dx%d tiles, shared memory + __syncthreads): max relative error %.2e, %.1f ms\n", n, n,
              kTile, kTile, worst, ms);
  std::printf("%s\n", ok ? "matmul: all checks passed" : "matmul: FAILED");
  return ok ? 0 : 1;
}
