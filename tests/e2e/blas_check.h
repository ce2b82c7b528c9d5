// What the cuBLAS check programs (cublas_check.cu, cublaslt_check.cu) share:
// counted checks that print what failed, random data, device round trips and
// element values in double precision.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

static int g_checks = 0, g_failed = 0;

#define CHECK(cond, ...)                                 \
  do {                                                   \
    ++g_checks;                                          \
    if (!(cond)) {                                       \
      ++g_failed;                                        \
      std::printf("FAILED %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                          \
      std::printf("\n");                                 \
    }                                                    \
  } while (0)
#define OK(call) CHECK((call) == CUBLAS_STATUS_SUCCESS, "%s", #call)
#define CUDA(call) CHECK((call) == cudaSuccess, "%s", #call)

static std::mt19937 rng(20261203);

template <typename T>
std::vector<T> randoms(size_t n) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

template <typename T>
T* toDevice(const std::vector<T>& h) {
  T* d = nullptr;
  cudaMalloc(&d, h.size() * sizeof(T) + 16);
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

template <typename T>
std::vector<T> toHost(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

inline double val(float x) { return x; }
inline double val(double x) { return x; }
inline double val(__half x) { return __half2float(x); }
inline double val(__nv_bfloat16 x) { return __bfloat162float(x); }
