// rgpu-gpu-bench: the figures a user of a remote GPU feels, measured by an
// ordinary CUDA program (nvcc -cudart shared). Run it against NVIDIA's runtime
// and through rgpu on the same GPU (scripts/gpu-check.sh does both and prints
// the ratios), or through the sim backend anywhere.
//
//   gpu_bench [--quick]      --quick: small sizes, few repetitions (tests)
//
// Output: one "figure <name> <value> <unit>" line per measurement.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

__global__ void k_empty() {}

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("%s: %s\n", what, cudaGetErrorName(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int rounds = quick ? 50 : 2000;
  const int launches = quick ? 200 : 20000;
  const size_t big = quick ? (1u << 20) : (64u << 20);
  const int big_reps = quick ? 2 : 10;

  int* d = nullptr;
  int h = 0;
  if (!check(cudaMalloc(&d, sizeof(int)), "cudaMalloc")) return 1;
  if (!check(cudaMemset(d, 0, sizeof(int)), "cudaMemset")) return 1;

  // Synchronous round trip: a 4-byte device-to-host copy (median of rounds).
  std::vector<double> t(rounds);
  for (int i = 0; i < rounds; ++i) {
    double t0 = now();
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    t[i] = now() - t0;
  }
  std::sort(t.begin(), t.end());
  std::printf("figure sync_roundtrip_us %.2f us\n", t[rounds / 2] * 1e6);

  // Launch rate: empty kernels, asynchronous, one synchronisation at the end.
  k_empty<<<1, 1>>>();
  cudaDeviceSynchronize();
  double t0 = now();
  for (int i = 0; i < launches; ++i) k_empty<<<1, 32>>>();
  if (!check(cudaDeviceSynchronize(), "launches")) return 1;
  std::printf("figure launch_rate %.0f launches/s\n", launches / (now() - t0));

  // Bandwidth, from and to page-locked host memory (cudaMallocHost).
  void* host = nullptr;
  void* dev = nullptr;
  if (!check(cudaMallocHost(&host, big), "cudaMallocHost") || !check(cudaMalloc(&dev, big), "cudaMalloc")) return 1;
  std::memset(host, 1, big);
  cudaMemcpy(dev, host, big, cudaMemcpyHostToDevice);
  t0 = now();
  for (int i = 0; i < big_reps; ++i) cudaMemcpy(dev, host, big, cudaMemcpyHostToDevice);
  if (!check(cudaDeviceSynchronize(), "h2d")) return 1;
  std::printf("figure h2d_bandwidth %.3f GB/s\n", double(big) * big_reps / (now() - t0) / 1e9);
  t0 = now();
  for (int i = 0; i < big_reps; ++i) cudaMemcpy(host, dev, big, cudaMemcpyDeviceToHost);
  std::printf("figure d2h_bandwidth %.3f GB/s\n", double(big) * big_reps / (now() - t0) / 1e9);
  if (!check(cudaGetLastError(), "copies")) return 1;
  cudaFreeHost(host);
  cudaFree(dev);
  cudaFree(d);
  std::printf("gpu_bench: done\n");
  return 0;
}
