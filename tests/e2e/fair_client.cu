// A compute-bound client for the fairness and priority tests
// (tests/e2e/pool_e2e_test.cc): launches batches of identical kernels for a
// while and prints how many ran.
//
//   fair_client SECONDS [BATCH] [ITERS]   -> "kernels N seconds S rate R"
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void spin(float* out, int iters) {
  float x = threadIdx.x * 0.001f, y = 1.0f;
  for (int i = 0; i < iters; ++i) y = y * 0.999f + x;
  out[blockIdx.x * blockDim.x + threadIdx.x] = y;
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  int batch = argc > 2 ? std::atoi(argv[2]) : 10;
  int iters = argc > 3 ? std::atoi(argv[3]) : 4000;
  float* out = nullptr;
  if (cudaMalloc(&out, 4 * 128 * sizeof(float)) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  long kernels = 0;
  double elapsed = 0;
  do {
    for (int i = 0; i < batch; ++i) spin<<<4, 128>>>(out, iters);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      std::printf("synchronize: %s\n", cudaGetErrorName(e));
      return 1;
    }
    kernels += batch;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < seconds);
  std::printf("kernels %ld seconds %.3f rate %.1f\n", kernels, elapsed, kernels / elapsed);
  cudaFree(out);
  return 0;
}
