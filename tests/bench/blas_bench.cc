// rgpu-blas-bench: sgemm through rgpu (cublasSgemm on rgpu's libcublas.so.13,
// the sim backend's worker running OpenBLAS) against OpenBLAS called directly
// in this process, side by side in one run: the cost of forwarding a BLAS
// call. Square matrices of 256, 1024 and 2048, data already in (device)
// memory, a median over interleaved rounds. Prints GFLOP/s and the ratio.
//
// It starts its own rgpu-server (sim backend) on loopback with throwaway
// certificates. --quick: a smoke test with tiny sizes (figures meaningless).
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/bench_server.h"

using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "rgpu-blas-bench: %s failed\n", what);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const std::vector<int> sizes = quick ? std::vector<int>{64, 128} : std::vector<int>{256, 1024, 2048};
  const int rounds = quick ? 1 : 5;
  rgpu::bench::startBenchServer("rgpu-blas-bench");  // before any CUDA call (see bench_server.h)

  cublasHandle_t h;
  check(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
  std::printf("rgpu-blas-bench: sgemm C = A B, n x n, f32; rgpu: cublasSgemm through the sim backend (OpenBLAS in "
              "the worker); direct: cblas_sgemm here; %u cores, median of %d interleaved rounds%s\n",
              std::thread::hardware_concurrency(), rounds, quick ? " (--quick: smoke test, figures meaningless)" : "");
  std::printf("%8s %16s %16s %8s %12s\n", "n", "rgpu GFLOP/s", "direct GFLOP/s", "ratio", "max rel err");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int n : sizes) {
    size_t count = static_cast<size_t>(n) * n;
    std::vector<float> A(count), B(count), C(count), back(count);
    for (auto* v : {&A, &B})
      for (float& x : *v) x = d(rng);
    float *dA = nullptr, *dB = nullptr, *dC = nullptr;
    for (float** p : {&dA, &dB, &dC}) check(cudaMalloc(reinterpret_cast<void**>(p), count * 4) == cudaSuccess, "cudaMalloc");
    check(cudaMemcpy(dA, A.data(), count * 4, cudaMemcpyHostToDevice) == cudaSuccess, "copy A");
    check(cudaMemcpy(dB, B.data(), count * 4, cudaMemcpyHostToDevice) == cudaSuccess, "copy B");
    const double flops = 2.0 * n * n * n;
    // Repetitions per measurement: about 0.3 s of work at 50 GFLOP/s, at least one.
    const int reps = quick ? 1 : std::max(1, static_cast<int>(15e9 / flops));
    const float one = 1, zero = 0;
    // Warm-up: first touch of memory, thread pools, the server's code paths.
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, A.data(), n, B.data(), n, 0, C.data(), n);
    check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &zero, dC, n) == CUBLAS_STATUS_SUCCESS,
          "cublasSgemm");
    check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
    std::vector<double> rgpu, direct;
    for (int r = 0; r < rounds; ++r) {
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i)
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, A.data(), n, B.data(), n, 0, C.data(), n);
      auto t1 = Clock::now();
      direct.push_back(flops * reps / std::chrono::duration<double>(t1 - t0).count() / 1e9);
      t0 = Clock::now();
      for (int i = 0; i < reps; ++i)
        check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &zero, dC, n) ==
                  CUBLAS_STATUS_SUCCESS,
              "cublasSgemm");
      check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
      t1 = Clock::now();
      rgpu.push_back(flops * reps / std::chrono::duration<double>(t1 - t0).count() / 1e9);
    }
    check(cudaMemcpy(back.data(), dC, count * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "copy C");
    double err = 0;
    for (size_t i = 0; i < count; ++i)
      err = std::max(err, std::fabs(double(back[i]) - C[i]) / std::max(1.0, std::fabs(double(C[i]))));
    double g = median(rgpu), gd = median(direct);
    std::printf("%8d %16.1f %16.1f %8.2f %12.1e\n", n, g, gd, g / gd, err);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
  }
  cublasDestroy(h);
  return 0;
}
