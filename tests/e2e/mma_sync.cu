// Warp-level mma.sync as hand-tuned kernels (CUTLASS-style) write it, in
// inline PTX: ldmatrix.x4 and ldmatrix.x2.trans feeding m16n8k16 f16 -> f32,
// the result written back through the accumulator layout, and m8n8k4 f64.
// The products are compared with the host's.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "check.h"

// A: 16 x 16 row-major, B: 16 x 8 row-major (K x N), C/D: 16 x 8 row-major f32.
__global__ void mma16816(const __half* a, const __half* b, const float* c, float* d) {
  __shared__ alignas(16) __half sa[16 * 16];
  __shared__ alignas(16) __half sb[16 * 8];
  int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) sa[i] = a[i];
  for (int i = lane; i < 128; i += 32) sb[i] = b[i];
  __syncwarp();
  unsigned a_frag[4], b_frag[2];
  // Lane l names row (l % 16) at column 8 * (l / 16) of A; rows 0..15 of B.
  unsigned a_addr = static_cast<unsigned>(__cvta_generic_to_shared(&sa[(lane % 16) * 16 + 8 * (lane / 16)]));
  unsigned b_addr = static_cast<unsigned>(__cvta_generic_to_shared(&sb[(lane % 16) * 8]));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a_frag[0]), "=r"(a_frag[1]), "=r"(a_frag[2]), "=r"(a_frag[3]) : "r"(a_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(b_frag[0]), "=r"(b_frag[1]) : "r"(b_addr));
  int gid = lane / 4, tig = lane % 4;
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[(gid + 8 * (i / 2)) * 8 + tig * 2 + (i % 2)];
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
               : "r"(a_frag[0]), "r"(a_frag[1]), "r"(a_frag[2]), "r"(a_frag[3]), "r"(b_frag[0]), "r"(b_frag[1]));
  for (int i = 0; i < 4; ++i) d[(gid + 8 * (i / 2)) * 8 + tig * 2 + (i % 2)] = acc[i];
}

// 8 x 4 by 4 x 8 in f64: a lane holds A(gid, tig), B(tig, gid), C(gid, 2 tig + i).
__global__ void mma884(const double* a, const double* b, const double* c, double* d) {
  int lane = threadIdx.x, gid = lane / 4, tig = lane % 4;
  double fa = a[gid * 4 + tig], fb = b[tig * 8 + gid];
  double acc0 = c[gid * 8 + tig * 2], acc1 = c[gid * 8 + tig * 2 + 1];
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
               : "+d"(acc0), "+d"(acc1) : "d"(fa), "d"(fb));
  d[gid * 8 + tig * 2] = acc0;
  d[gid * 8 + tig * 2 + 1] = acc1;
}

int main() {
  std::vector<__half> a(256), b(128);
  std::vector<float> c(128), d(128);
  for (int i = 0; i < 256; ++i) a[i] = __float2half(static_cast<float>((i * 7) % 11 - 5));
  for (int i = 0; i < 128; ++i) b[i] = __float2half(static_cast<float>((i * 3) % 7 - 3)), c[i] = static_cast<float>(i % 4);
  __half *da, *db;
  float *dc, *dd;
  CHECK(cudaMalloc(&da, 512));
  CHECK(cudaMalloc(&db, 256));
  CHECK(cudaMalloc(&dc, 512));
  CHECK(cudaMalloc(&dd, 512));
  CHECK(cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), 256, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), 512, cudaMemcpyHostToDevice));
  mma16816<<<1, 32>>>(da, db, dc, dd);
  CHECK(cudaMemcpy(d.data(), dd, 512, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float s = c[i * 8 + j];
      for (int k = 0; k < 16; ++k) s += __half2float(a[i * 16 + k]) * __half2float(b[k * 8 + j]);
      if (d[i * 8 + j] != s) {
        std::printf("FAILED m16n8k16: D[%d][%d] = %g, expected %g\n", i, j, d[i * 8 + j], s);
        return 1;
      }
    }
  std::vector<double> a64(32), b64(32), c64(64), d64(64);
  for (int i = 0; i < 32; ++i) a64[i] = i * 0.25 - 3, b64[i] = (i % 5) - 2.5;
  for (int i = 0; i < 64; ++i) c64[i] = i;
  double *ea, *eb, *ec, *ed;
  CHECK(cudaMalloc(&ea, 256));
  CHECK(cudaMalloc(&eb, 256));
  CHECK(cudaMalloc(&ec, 512));
  CHECK(cudaMalloc(&ed, 512));
  CHECK(cudaMemcpy(ea, a64.data(), 256, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(eb, b64.data(), 256, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(ec, c64.data(), 512, cudaMemcpyHostToDevice));
  mma884<<<1, 32>>>(ea, eb, ec, ed);
  CHECK(cudaMemcpy(d64.data(), ed, 512, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = c64[i * 8 + j];
      for (int k = 0; k < 4; ++k) s += a64[i * 4 + k] * b64[k * 8 + j];
      if (std::fabs(d64[i * 8 + j] - s) > 1e-12) {
        std::printf("FAILED m8n8k4: D[%d][%d] = %g, expected %g\n", i, j, d64[i * 8 + j], s);
        return 1;
      }
    }
  std::printf("mma_sync: all checks passed\n");
  return 0;
}
