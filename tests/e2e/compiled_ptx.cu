// Code shapes nvcc really emits that the interpreter once refused or got
// wrong: warpSize (WARP_SZ) and __syncwarp (bar.warp.sync), bit intrinsics
// (__ffs -> bfind.shiftamt, __fns -> fns), and a 16x16 tiled
// dynamic-programming kernel with two __shared__ arrays in its body and a
// wavefront over anti-diagonals, whose shared addresses are formed from
// registers that go "below zero" (32-bit, modulo 2^32 on the hardware).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr int kTile = 16;

// Edit distance of a[0..n) and b[0..n) inside one 16x16 tile per block, with
// the tile's first row and column given: the classic wavefront.
__global__ void tileEditDistance(const char* a, const char* b, const int* top, const int* left, int* out) {
  __shared__ int d[kTile + 1][kTile + 1];
  __shared__ char sa[kTile], sb[kTile];
  int t = threadIdx.x;
  int tile = blockIdx.x;
  sa[t] = a[tile * kTile + t];
  sb[t] = b[tile * kTile + t];
  d[0][t + 1] = top[tile * (kTile + 1) + t + 1];
  d[t + 1][0] = left[tile * (kTile + 1) + t + 1];
  if (t == 0) d[0][0] = top[tile * (kTile + 1)];
  __syncthreads();
  for (int diag = 0; diag < 2 * kTile - 1; ++diag) {
    int i = t + 1, j = diag - t + 1;
    if (j >= 1 && j <= kTile) {
      int cost = sa[i - 1] == sb[j - 1] ? 0 : 1;
      d[i][j] = min(min(d[i - 1][j] + 1, d[i][j - 1] + 1), d[i - 1][j - 1] + cost);
    }
    __syncthreads();
  }
  out[tile] = d[kTile][kTile];
}

__global__ void bits(unsigned* out, unsigned x) {
  int lane = threadIdx.x % warpSize;
  __syncwarp();
  if (lane == 0) {
    out[0] = warpSize;
    out[1] = __ffs(x);
    out[2] = __fns(x, 3, 2);
    out[3] = __clz(x);
    out[4] = __popc(x);
    out[5] = __brev(x);
  }
}

int main() {
  const int tiles = 8;
  std::vector<char> a(tiles * kTile), b(tiles * kTile);
  std::vector<int> top(tiles * (kTile + 1)), left(tiles * (kTile + 1));
  srand(7);
  for (auto& c : a) c = "ACGT"[rand() % 4];
  for (auto& c : b) c = "ACGT"[rand() % 4];
  for (int t = 0; t < tiles; ++t)
    for (int k = 0; k <= kTile; ++k) top[t * (kTile + 1) + k] = left[t * (kTile + 1) + k] = k + t;
  char *da, *db;
  int *dt, *dl, *dout;
  CHECK(cudaMalloc(&da, a.size()));
  CHECK(cudaMalloc(&db, b.size()));
  CHECK(cudaMalloc(&dt, top.size() * sizeof(int)));
  CHECK(cudaMalloc(&dl, left.size() * sizeof(int)));
  CHECK(cudaMalloc(&dout, tiles * sizeof(int)));
  CHECK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dt, top.data(), top.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dl, left.data(), left.size() * sizeof(int), cudaMemcpyHostToDevice));
  tileEditDistance<<<tiles, kTile>>>(da, db, dt, dl, dout);
  CHECK(cudaGetLastError());
  std::vector<int> got(tiles);
  CHECK(cudaMemcpy(got.data(), dout, tiles * sizeof(int), cudaMemcpyDeviceToHost));
  for (int t = 0; t < tiles; ++t) {
    int d[kTile + 1][kTile + 1];
    for (int k = 0; k <= kTile; ++k) d[0][k] = d[k][0] = k + t;
    for (int i = 1; i <= kTile; ++i)
      for (int j = 1; j <= kTile; ++j)
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                            d[i - 1][j - 1] + (a[t * kTile + i - 1] == b[t * kTile + j - 1] ? 0 : 1)});
    if (got[t] != d[kTile][kTile]) {
      std::printf("FAILED: tile %d: %d, want %d\n", t, got[t], d[kTile][kTile]);
      return 1;
    }
  }
  unsigned* dbits;
  CHECK(cudaMalloc(&dbits, 8 * sizeof(unsigned)));
  const unsigned x = 0x00f0a000u;
  bits<<<1, 64>>>(dbits, x);
  unsigned hb[8];
  CHECK(cudaMemcpy(hb, dbits, sizeof hb, cudaMemcpyDeviceToHost));
  unsigned rev = 0;
  for (int k = 0; k < 32; ++k) rev |= ((x >> k) & 1u) << (31 - k);
  const unsigned want[6] = {32, 14, 15, 8, 6, rev};  // ffs is 1-based; fns: 2nd set bit from bit 3 is 15
  for (int k = 0; k < 6; ++k)
    if (hb[k] != want[k]) {
      std::printf("FAILED: bits[%d] = %u, want %u\n", k, hb[k], want[k]);
      return 1;
    }
  std::printf("compiled_ptx: all checks passed\n");
  return 0;
}
