// Cooperative launches and cooperative groups as programs use them: grid-wide
// synchronisation (cudaLaunchCooperativeKernel, cudaLaunchKernelEx with the
// cooperative attribute, a captured graph), the co-residency rule, and the
// groups inside a block: tiles, coalesced and labeled groups, cg::reduce and
// cg scans.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "check.h"

namespace cg = cooperative_groups;

// Each thread writes its index, the grid synchronises, and each reads its
// neighbour's — written by another block — `rounds` times over.
__global__ void neighbours(int* p, int n, int rounds) {
  cg::grid_group grid = cg::this_grid();
  int i = static_cast<int>(grid.thread_rank());
  if (i < n) p[i] = i;
  for (int r = 0; r < rounds; ++r) {
    grid.sync();
    int next = i < n ? p[(i + 1) % n] : 0;
    grid.sync();
    if (i < n) p[i] += next;
  }
}

// A grid-wide sum in one launch: block partials, a grid sync, block 0 adds them.
__global__ void gridSum(const int* in, int n, int* partial, int* out) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int v = 0;
  for (int i = static_cast<int>(grid.thread_rank()); i < n; i += static_cast<int>(grid.size())) v += in[i];
  v = cg::reduce(warp, v, cg::plus<int>());
  __shared__ int warps[32];
  if (warp.thread_rank() == 0) warps[warp.meta_group_rank()] = v;
  block.sync();
  if (block.thread_rank() == 0) {
    int s = 0;
    for (unsigned w = 0; w < warp.meta_group_size(); ++w) s += warps[w];
    partial[blockIdx.x] = s;
  }
  grid.sync();
  if (grid.block_rank() == 0 && block.thread_rank() == 0) {
    int s = 0;
    for (unsigned b = 0; b < grid.num_blocks(); ++b) s += partial[b];
    *out = s;
  }
}

// Groups inside one block; results per thread in `out` (8 ints each).
__global__ void groups(int* out) {
  cg::thread_block block = cg::this_thread_block();
  int t = static_cast<int>(block.thread_rank());
  int* o = out + 8 * t;
  auto tile16 = cg::tiled_partition<16>(block);
  o[0] = cg::reduce(tile16, t, cg::plus<int>());                       // sum over the 16-thread tile
  o[1] = tile16.shfl_down(t, 1);                                       // neighbour in the tile (last: itself)
  o[2] = cg::inclusive_scan(cg::tiled_partition<8>(block), 1);        // 1..8
  cg::thread_group tile4 = cg::tiled_partition(block, 4);              // dynamic tile
  o[3] = static_cast<int>(tile4.thread_rank()) + 10 * (t / static_cast<int>(tile4.size()));
  o[4] = tile16.any(t == 5) + 2 * tile16.all(t < 1000) + 4 * static_cast<int>(__popc(tile16.ballot(t % 2)));
  if (t % 3 == 0) {  // divergent: the active threads form a coalesced group
    cg::coalesced_group active = cg::coalesced_threads();
    o[5] = static_cast<int>(active.size()) * 100 + static_cast<int>(active.thread_rank());
  } else {
    o[5] = -1;
  }
  auto label = cg::labeled_partition(cg::tiled_partition<32>(block), t % 4);  // match.any underneath
  o[6] = static_cast<int>(label.size());
  o[7] = cg::reduce(label, 1, cg::plus<int>());
}

int main() {
  int coop = 0, sms = 0;
  CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  EXPECT(coop == 1);
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, neighbours, 128, 0));
  EXPECT(per_sm > 0);

  // The largest grid that fits, as NVIDIA's samples size it.
  const int blocks = per_sm * sms, threads = 128, n = blocks * threads - 5, rounds = 3;
  int* p;
  CHECK(cudaMalloc(&p, n * sizeof(int)));
  void* args[] = {&p, const_cast<int*>(&n), const_cast<int*>(&rounds)};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(neighbours), dim3(blocks), dim3(threads), args, 0, 0));
  std::vector<long long> host(n), ref(n);
  std::vector<int> got(n);
  CHECK(cudaMemcpy(got.data(), p, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) host[i] = i;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) ref[i] = host[i] + host[(i + 1) % n];
    host = ref;
  }
  for (int i = 0; i < n; ++i) EXPECT(got[i] == static_cast<int>(host[i]));

  // One block more than fits: refused at once, nothing sticky.
  EXPECT(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(neighbours), dim3(blocks + 1), dim3(threads), args, 0, 0) ==
         cudaErrorCooperativeLaunchTooLarge);
  EXPECT(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge);
  CHECK(cudaGetLastError());

  // cudaLaunchKernelEx with the attribute, on a stream.
  const int m = 100000;
  std::vector<int> in(m);
  long long expect = 0;
  for (int i = 0; i < m; ++i) in[i] = (i * 7) % 13 - 6, expect += in[i];
  int *din, *partial, *out;
  CHECK(cudaMalloc(&din, m * sizeof(int)));
  CHECK(cudaMalloc(&partial, blocks * sizeof(int)));
  CHECK(cudaMalloc(&out, sizeof(int)));
  CHECK(cudaMemcpy(din, in.data(), m * sizeof(int), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks / 2);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, gridSum, static_cast<const int*>(din), m, partial, out));
  int sum = 0;
  CHECK(cudaMemcpyAsync(&sum, out, sizeof sum, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(sum == expect);

  // Captured into a graph, the launch stays cooperative.
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaMemset(out, 0, sizeof(int)));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* sargs[] = {&din, const_cast<int*>(&m), &partial, &out};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(gridSum), dim3(blocks / 4), dim3(256), sargs, 0, s));
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));
  sum = 0;
  CHECK(cudaMemcpyAsync(&sum, out, sizeof sum, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(sum == expect);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));

  // Groups inside a block.
  const int bt = 64;
  int* dout;
  CHECK(cudaMalloc(&dout, 8 * bt * sizeof(int)));
  groups<<<1, bt>>>(dout);
  std::vector<int> o(8 * bt);
  CHECK(cudaMemcpy(o.data(), dout, o.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int coalesced = (bt + 2) / 3;  // threads 0, 3, 6, ... — all of them in one group
  for (int t = 0; t < bt; ++t) {
    const int* r = &o[8 * t];
    int base16 = t / 16 * 16, sum16 = 0;
    for (int j = 0; j < 16; ++j) sum16 += base16 + j;
    EXPECT(r[0] == sum16);
    EXPECT(r[1] == (t % 16 == 15 ? t : t + 1));
    EXPECT(r[2] == t % 8 + 1);
    EXPECT(r[3] == t % 4 + 10 * (t / 4));
    int any5 = (t / 16 == 0) ? 1 : 0;
    EXPECT(r[4] == any5 + 2 + 4 * 8);
    if (t % 3 == 0) {
      // Within each warp the active lanes form the group.
      int warp = t / 32, lo = warp * 32, in_warp = 0, rank = 0;
      for (int u = lo; u < lo + 32 && u < bt; ++u)
        if (u % 3 == 0) {
          if (u < t) ++rank;
          ++in_warp;
        }
      EXPECT(r[5] == in_warp * 100 + rank);
    } else {
      EXPECT(r[5] == -1);
    }
    EXPECT(r[6] == 8 && r[7] == 8);
  }
  (void)coalesced;
  std::printf("cooperative: all checks passed (%d blocks of %d threads co-resident)\n", blocks, threads);
  return 0;
}
