// What cudnn_check's parts share (cudnn_check.cu, cudnn_check_layers.h):
// host values in double, tensors uploaded in a layout and type and read
// back, descriptors, and the report lines.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#define CHECK(call)                                                              \
  do {                                                                           \
    auto e_ = (call);                                                            \
    if (static_cast<int>(e_) != 0) {                                             \
      std::printf("cudnn_check: line %d: %s failed: %d\n", __LINE__, #call,      \
                  static_cast<int>(e_));                                         \
      return 2;                                                                  \
    }                                                                            \
  } while (0)

using V = std::vector<double>;
inline int g_failures = 0;

static void report(const std::string& what, double err, double tol) {
  const bool ok = err <= tol;
  std::printf("%s: relative error %.2e %s\n", what.c_str(), err, ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}
static void expectStatus(const char* what, cudnnStatus_t got, cudnnStatus_t want) {
  std::printf("%s: %s\n", what, cudnnGetErrorString(got));
  if (got != want) {
    std::printf("  FAIL: expected %s\n", cudnnGetErrorString(want));
    ++g_failures;
  }
}
static double relErr(const V& got, const V& want) {
  double peak = 0, err = 0;
  for (double v : want) peak = std::max(peak, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  return peak > 0 ? err / peak : err;
}
static V randomV(size_t n, int salt) {
  std::mt19937 gen(static_cast<unsigned>(salt));
  std::uniform_real_distribution<double> u(-1, 1);
  V v(n);
  for (double& x : v) x = u(gen);
  return v;
}

// A 4-D tensor's logical shape; its data live in NCHW (logical) order here.
struct Shape {
  int n, c, h, w;
  size_t size() const { return static_cast<size_t>(n) * c * h * w; }
  size_t at(int i, int j, int y, int x) const { return ((static_cast<size_t>(i) * c + j) * h + y) * w + x; }
};

static size_t elemBytes(cudnnDataType_t t) {
  return t == CUDNN_DATA_DOUBLE ? 8 : t == CUDNN_DATA_FLOAT ? 4 : 2;
}
static void put(void* p, size_t i, cudnnDataType_t t, double v) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: static_cast<double*>(p)[i] = v; break;
    case CUDNN_DATA_FLOAT: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case CUDNN_DATA_HALF: static_cast<__half*>(p)[i] = __float2half(static_cast<float>(v)); break;
    default: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(static_cast<float>(v));
  }
}
static double get(const void* p, size_t i, cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: return static_cast<const double*>(p)[i];
    case CUDNN_DATA_FLOAT: return static_cast<const float*>(p)[i];
    case CUDNN_DATA_HALF: return __half2float(static_cast<const __half*>(p)[i]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
}
// Where logical element (i, j, y, x) lives in memory in `nhwc` order or not.
static size_t place(const Shape& s, bool nhwc, int i, int j, int y, int x) {
  return nhwc ? ((static_cast<size_t>(i) * s.h + y) * s.w + x) * s.c + j : s.at(i, j, y, x);
}
// The logical values in device memory of type t in the layout.
static void* upload(const V& v, const Shape& s, bool nhwc, cudnnDataType_t t) {
  std::vector<unsigned char> host(s.size() * elemBytes(t));
  for (int i = 0; i < s.n; ++i)
    for (int j = 0; j < s.c; ++j)
      for (int y = 0; y < s.h; ++y)
        for (int x = 0; x < s.w; ++x) put(host.data(), place(s, nhwc, i, j, y, x), t, v[s.at(i, j, y, x)]);
  void* d = nullptr;
  cudaMalloc(&d, host.size());
  cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice);
  return d;
}
static V download(const void* d, const Shape& s, bool nhwc, cudnnDataType_t t) {
  std::vector<unsigned char> host(s.size() * elemBytes(t));
  if (cudaError_t e = cudaMemcpy(host.data(), d, host.size(), cudaMemcpyDeviceToHost); e != cudaSuccess) {
    std::printf("reading a result back: %s FAIL\n", cudaGetErrorName(e));
    ++g_failures;
  }
  V v(s.size());
  for (int i = 0; i < s.n; ++i)
    for (int j = 0; j < s.c; ++j)
      for (int y = 0; y < s.h; ++y)
        for (int x = 0; x < s.w; ++x) v[s.at(i, j, y, x)] = get(host.data(), place(s, nhwc, i, j, y, x), t);
  return v;
}
// The values as they are after rounding to t (the reference computes on what the device holds).
static V rounded(V v, cudnnDataType_t t) {
  for (double& x : v) {
    unsigned char b[8];
    put(b, 0, t, x);
    x = get(b, 0, t);
  }
  return v;
}

static cudnnTensorDescriptor_t tensor(const Shape& s, bool nhwc, cudnnDataType_t t) {
  cudnnTensorDescriptor_t d;
  cudnnCreateTensorDescriptor(&d);
  cudnnSetTensor4dDescriptor(d, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, t, s.n, s.c, s.h, s.w);
  return d;
}
static cudnnFilterDescriptor_t filter(const Shape& s, bool nhwc, cudnnDataType_t t) {
  cudnnFilterDescriptor_t d;
  cudnnCreateFilterDescriptor(&d);
  cudnnSetFilter4dDescriptor(d, t, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, s.n, s.c, s.h, s.w);
  return d;
}

