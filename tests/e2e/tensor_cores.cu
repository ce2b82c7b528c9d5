// Tensor-core matrix operations through the WMMA API (nvcuda::wmma) for every
// element type and shape a program may use: f16 (f32 and f16 accumulators),
// bf16, tf32, f64 and 8-bit integers, row- and column-major operands, the
// three f16 shapes, element-wise work on accumulator fragments, and the
// sub-byte types of nvcuda::wmma::experimental (4-bit integers, and single
// bits with XOR or AND and population count). Each product is compared with
// the host's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "check.h"

using namespace nvcuda;

// D = alpha * A x B + C for one M x N tile; A row-major (lda = K), B of the given layout.
template <int M, int N, int K, typename Tin, typename Tacc, typename LayoutB>
__global__ void tile(const Tin* a, const Tin* b, const Tacc* c, Tacc* d, Tacc alpha) {
  wmma::fragment<wmma::matrix_a, M, N, K, Tin, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, Tin, LayoutB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, Tacc> fc;
  wmma::load_matrix_sync(fa, a, K);
  wmma::load_matrix_sync(fb, b, std::is_same<LayoutB, wmma::row_major>::value ? N : K);
  wmma::load_matrix_sync(fc, c, N, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  for (int i = 0; i < fc.num_elements; ++i) fc.x[i] = fc.x[i] * alpha;
  wmma::store_matrix_sync(d, fc, M, wmma::mem_col_major);  // D stored column-major
}

// tf32: the operands are rounded to tf32 first, as programs must.
__global__ void tileTf32(const float* a, const float* b, const float* c, float* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::load_matrix_sync(fa, a, 8);
  wmma::load_matrix_sync(fb, b, 16);
  for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
  for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

// Converts between host values and the kernels' element types.
float toF(float v) { return v; }
float toF(double v) { return static_cast<float>(v); }
float toF(__half v) { return __half2float(v); }
float toF(__nv_bfloat16 v) { return __bfloat162float(v); }
float toF(int v) { return static_cast<float>(v); }
float toF(signed char v) { return v; }
float toF(unsigned char v) { return v; }
template <typename T> T fromF(float v);
template <> float fromF<float>(float v) { return v; }
template <> double fromF<double>(float v) { return v; }
template <> __half fromF<__half>(float v) { return __float2half(v); }
template <> __nv_bfloat16 fromF<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> int fromF<int>(float v) { return static_cast<int>(v); }
template <> signed char fromF<signed char>(float v) { return static_cast<signed char>(v); }
template <> unsigned char fromF<unsigned char>(float v) { return static_cast<unsigned char>(v); }

int failures = 0;

template <int M, int N, int K, typename Tin, typename Tacc, typename LayoutB>
void check(const char* name, float tol) {
  std::vector<Tin> a(M * K), b(K * N);
  std::vector<Tacc> c(M * N), d(M * N);
  bool b_row = std::is_same<LayoutB, wmma::row_major>::value;
  for (int i = 0; i < M * K; ++i) a[i] = fromF<Tin>(static_cast<float>((i * 7) % 9 - 4));
  for (int i = 0; i < K * N; ++i) b[i] = fromF<Tin>(static_cast<float>((i * 5) % 7 - 3));
  for (int i = 0; i < M * N; ++i) c[i] = fromF<Tacc>(static_cast<float>(i % 5));
  Tin *da, *db;
  Tacc *dc, *dd;
  cudaMalloc(&da, a.size() * sizeof(Tin));
  cudaMalloc(&db, b.size() * sizeof(Tin));
  cudaMalloc(&dc, c.size() * sizeof(Tacc));
  cudaMalloc(&dd, d.size() * sizeof(Tacc));
  cudaMemcpy(da, a.data(), a.size() * sizeof(Tin), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * sizeof(Tin), cudaMemcpyHostToDevice);
  cudaMemcpy(dc, c.data(), c.size() * sizeof(Tacc), cudaMemcpyHostToDevice);
  tile<M, N, K, Tin, Tacc, LayoutB><<<1, 32>>>(da, db, dc, dd, fromF<Tacc>(2.0f));
  cudaError_t e = cudaMemcpy(d.data(), dd, d.size() * sizeof(Tacc), cudaMemcpyDeviceToHost);
  int bad = e != cudaSuccess;
  for (int i = 0; i < M && !bad; ++i)
    for (int j = 0; j < N; ++j) {
      float s = toF(c[i * N + j]);
      for (int k = 0; k < K; ++k) s += toF(a[i * K + k]) * toF(b_row ? b[k * N + j] : b[j * K + k]);
      float got = toF(d[j * M + i]);
      if (std::fabs(got - 2 * s) > tol * (1 + std::fabs(2 * s))) {
        if (!bad) std::printf("FAILED %s: D[%d][%d] = %g, expected %g\n", name, i, j, got, 2 * s);
        bad = 1;
      }
    }
  if (e != cudaSuccess) std::printf("FAILED %s: %s\n", name, cudaGetErrorName(e));
  std::printf("%s %s\n", bad ? "FAIL" : "ok  ", name);
  failures += bad;
  cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}

namespace ex = nvcuda::wmma::experimental;

// 8x8x32 4-bit integers: D = A x B + C (A row-major, B column-major, C row-major).
template <typename P>
__global__ void tile4(const void* a, const void* b, const int* c, int* d) {
  wmma::fragment<wmma::matrix_a, 8, 8, 32, P, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 8, 8, 32, P, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 8, 8, 32, int> fc;
  wmma::load_matrix_sync(fa, a, 32);
  wmma::load_matrix_sync(fb, b, 32);
  wmma::load_matrix_sync(fc, c, 8, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, 8, wmma::mem_row_major);
}
// 8x8x128 bits: D = popc(A op B) + C, op XOR or AND.
template <ex::bmmaBitOp Op>
__global__ void tile1(const void* a, const void* b, const int* c, int* d) {
  wmma::fragment<wmma::matrix_a, 8, 8, 128, ex::precision::b1, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 8, 8, 128, ex::precision::b1, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 8, 8, 128, int> fc;
  wmma::load_matrix_sync(fa, a, 128);
  wmma::load_matrix_sync(fb, b, 128);
  wmma::load_matrix_sync(fc, c, 8, wmma::mem_col_major);
  wmma::bmma_sync(fc, fa, fb, fc, Op, ex::bmmaAccumulateOpPOPC);
  wmma::store_matrix_sync(d, fc, 8, wmma::mem_col_major);
}

// Packed little-end first: element i in bits [i*w, i*w + w) of the buffer.
static int element(const std::vector<unsigned char>& v, int i, int w, bool is_signed) {
  int x = (v[i * w / 8] >> (i * w % 8)) & ((1 << w) - 1);
  return is_signed && (x & (1 << (w - 1))) ? x - (1 << w) : x;
}

static int checkSubByte() {
  int failures = 0;
  unsigned char *da, *db;
  int *dc, *dd;
  CHECK(cudaMalloc(&da, 128));
  CHECK(cudaMalloc(&db, 128));
  CHECK(cudaMalloc(&dc, 256));
  CHECK(cudaMalloc(&dd, 256));
  std::vector<unsigned char> a(128), b(128);
  std::vector<int> c(64), d(64);
  for (int i = 0; i < 128; ++i) a[i] = static_cast<unsigned char>(i * 37 + 11), b[i] = static_cast<unsigned char>(i * 91 + 5);
  for (int i = 0; i < 64; ++i) c[i] = i * 3 - 50;
  CHECK(cudaMemcpy(da, a.data(), 128, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), 128, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), 256, cudaMemcpyHostToDevice));
  // 4-bit: A (i, k) is element i*32 + k, B (k, j) element j*32 + k (column-major).
  for (int s = 0; s < 2; ++s) {
    if (s) tile4<ex::precision::s4><<<1, 32>>>(da, db, dc, dd);
    else tile4<ex::precision::u4><<<1, 32>>>(da, db, dc, dd);
    CHECK(cudaMemcpy(d.data(), dd, 256, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) {
        int sum = c[i * 8 + j];
        for (int k = 0; k < 32; ++k) sum += element(a, i * 32 + k, 4, s) * element(b, j * 32 + k, 4, s);
        bad |= d[i * 8 + j] != sum;
      }
    std::printf("%s %s -> s32 m8n8k32\n", bad ? "FAIL" : "ok  ", s ? "s4" : "u4");
    failures += bad;
  }
  // Bits: A row i is bits i*128.., B column j bits j*128..; C and D column-major.
  for (int op = 0; op < 2; ++op) {
    if (op) tile1<ex::bmmaBitOpAND><<<1, 32>>>(da, db, dc, dd);
    else tile1<ex::bmmaBitOpXOR><<<1, 32>>>(da, db, dc, dd);
    CHECK(cudaMemcpy(d.data(), dd, 256, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) {
        int sum = c[j * 8 + i];
        for (int k = 0; k < 128; ++k) {
          int x = element(a, i * 128 + k, 1, false), y = element(b, j * 128 + k, 1, false);
          sum += op ? (x & y) : (x ^ y);
        }
        bad |= d[j * 8 + i] != sum;
      }
    std::printf("%s b1 %s.popc -> s32 m8n8k128\n", bad ? "FAIL" : "ok  ", op ? "and" : "xor");
    failures += bad;
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  CHECK(cudaFree(dd));
  return failures;
}

int main() {
  failures += checkSubByte();
  check<16, 16, 16, __half, float, wmma::row_major>("f16 -> f32 m16n16k16 row x row", 1e-6f);
  check<16, 16, 16, __half, float, wmma::col_major>("f16 -> f32 m16n16k16 row x col", 1e-6f);
  check<32, 8, 16, __half, float, wmma::row_major>("f16 -> f32 m32n8k16", 1e-6f);
  check<8, 32, 16, __half, float, wmma::col_major>("f16 -> f32 m8n32k16", 1e-6f);
  check<16, 16, 16, __half, __half, wmma::row_major>("f16 -> f16 m16n16k16", 1e-3f);
  check<16, 16, 16, __nv_bfloat16, float, wmma::row_major>("bf16 -> f32 m16n16k16", 1e-6f);
  check<8, 8, 4, double, double, wmma::row_major>("f64 m8n8k4", 0);
  check<16, 16, 16, signed char, int, wmma::row_major>("s8 -> s32 m16n16k16", 0);
  check<16, 16, 16, unsigned char, int, wmma::col_major>("u8 -> s32 m16n16k16", 0);
  // tf32 (values exact in tf32).
  std::vector<float> a(16 * 8), b(8 * 16), c(256, 1.0f), d(256);
  for (int i = 0; i < 128; ++i) a[i] = static_cast<float>(i % 6) * 0.5f, b[i] = static_cast<float>(i % 4) - 1.5f;
  float *da, *db, *dc, *dd;
  CHECK(cudaMalloc(&da, 512));
  CHECK(cudaMalloc(&db, 512));
  CHECK(cudaMalloc(&dc, 1024));
  CHECK(cudaMalloc(&dd, 1024));
  CHECK(cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), 512, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), 1024, cudaMemcpyHostToDevice));
  tileTf32<<<1, 32>>>(da, db, dc, dd);
  CHECK(cudaMemcpy(d.data(), dd, 1024, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float s = 1.0f;
      for (int k = 0; k < 8; ++k) s += a[i * 8 + k] * b[k * 16 + j];
      bad |= d[i * 16 + j] != s;
    }
  std::printf("%s tf32 -> f32 m16n16k8\n", bad ? "FAIL" : "ok  ");
  failures += bad;
  if (failures) return 1;
  std::printf("tensor_cores: all checks passed\n");
  return 0;
}
