// Asynchronous copies into shared memory as programs write them (built for
// sm_90, so the compiler emits what it emits there): cuda::pipeline with
// cuda::memcpy_async (cp.async, commit and wait groups), cooperative groups'
// memcpy_async and wait, and cuda::barrier with an aligned memcpy_async
// (cp.async.bulk completing on an mbarrier, expect_tx, try_wait), plus a
// hand-rolled double-buffered tile loop.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "check.h"

namespace cg = cooperative_groups;

constexpr int kTile = 128;

// Two stages: the copy of tile i+1 overlaps the use of tile i.
__global__ void pipelined(const float* in, float* out, int tiles) {
  __shared__ float buf[2][kTile];
  cuda::pipeline<cuda::thread_scope_thread> p = cuda::make_pipeline();
  int t = threadIdx.x;
  p.producer_acquire();
  cuda::memcpy_async(&buf[0][t], &in[t], sizeof(float), p);
  p.producer_commit();
  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) {
      p.producer_acquire();
      cuda::memcpy_async(&buf[(i + 1) % 2][t], &in[(i + 1) * kTile + t], sizeof(float), p);
      p.producer_commit();
    }
    p.consumer_wait();
    out[i * kTile + t] = buf[i % 2][t] * 2.0f + 1.0f;
    p.consumer_release();
  }
}

__global__ void groupCopy(const float* in, float* out) {
  __shared__ float buf[256];
  auto block = cg::this_thread_block();
  cg::memcpy_async(block, buf, in + blockIdx.x * 256, sizeof(float) * 256);
  cg::wait(block);
  out[blockIdx.x * 256 + threadIdx.x] = buf[255 - threadIdx.x];
}

__global__ void barrierCopy(const float4* in, float4* out) {
  __shared__ alignas(16) float4 buf[128];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0) init(&bar, block.size());
  block.sync();
  cuda::memcpy_async(block, buf, in + blockIdx.x * 128, cuda::aligned_size_t<16>(sizeof(float4) * 128), bar);
  bar.arrive_and_wait();
  float4 v = buf[127 - threadIdx.x];
  out[blockIdx.x * 128 + threadIdx.x] = make_float4(v.w, v.z, v.y, v.x);
}

int main() {
  const int tiles = 6, n = tiles * kTile;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 97) - 40.0f;
  float *din, *dout;
  CHECK(cudaMalloc(&din, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, n * sizeof(float)));
  CHECK(cudaMemcpy(din, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> got(n);

  pipelined<<<1, kTile>>>(din, dout, tiles);
  CHECK(cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(got[i] == h[i] * 2.0f + 1.0f);

  groupCopy<<<n / 256, 256>>>(din, dout);
  CHECK(cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int b = 0; b < n / 256; ++b)
    for (int t = 0; t < 256; ++t) EXPECT(got[b * 256 + t] == h[b * 256 + 255 - t]);

  const int quads = n / 4;  // 192 float4s: one block of 128 (the rest unused)
  barrierCopy<<<quads / 128, 128>>>(reinterpret_cast<const float4*>(din), reinterpret_cast<float4*>(dout));
  CHECK(cudaMemcpy(got.data(), dout, 128 * 4 * sizeof(float), cudaMemcpyDeviceToHost));
  for (int t = 0; t < 128; ++t)
    for (int k = 0; k < 4; ++k) EXPECT(got[t * 4 + k] == h[(127 - t) * 4 + (3 - k)]);
  CHECK(cudaDeviceSynchronize());
  std::printf("async_copy: all checks passed\n");
  return 0;
}
