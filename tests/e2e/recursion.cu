// Recursive device functions as nvcc compiles them (each also runs on the
// host, where it is the reference the device's results are checked against):
// self-recursion with
// divergent depths inside a warp (each lane its own n), two results per
// activation, mutual recursion, and recursion over a tree laid out in an array.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "check.h"

__host__ __device__ __noinline__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__host__ __device__ __noinline__ bool isOdd(unsigned n);
__host__ __device__ __noinline__ bool isEven(unsigned n) { return n == 0 ? true : isOdd(n - 1); }
__host__ __device__ __noinline__ bool isOdd(unsigned n) { return n == 0 ? false : isEven(n - 1); }

// Sum and depth of the subtree at `node` of a complete binary tree stored in an array.
__host__ __device__ __noinline__ long long subtree(const int* tree, int n, int node, int depth, int* deepest) {
  if (node >= n) return 0;
  if (depth > *deepest) *deepest = depth;
  return tree[node] + subtree(tree, n, 2 * node + 1, depth + 1, deepest) +
         subtree(tree, n, 2 * node + 2, depth + 1, deepest);
}

__host__ __device__ __noinline__ unsigned long long ackermann(unsigned m, unsigned long long n) {
  if (m == 0) return n + 1;
  if (n == 0) return ackermann(m - 1, 1);
  return ackermann(m - 1, ackermann(m, n - 1));
}

// A recursive function with a stack frame (a local array whose address is
// taken): each activation's frame is its own, the callee reads its caller's
// through a pointer, and the caller's is intact when the callee returns.
__host__ __device__ __noinline__ int pathSum(const int* vals, int depth, const int* parent, int tid) {
  int buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = vals[(depth * 8 + i) % 64] + (parent ? parent[7 - i] : 0);
  if (depth == 5) {
    int s = 0;
    for (int i = 0; i < 8; ++i) s += buf[i] * (i + 1);
    return s;
  }
  int below = pathSum(vals, depth + 1, buf, tid);
  return below + buf[(depth + tid) % 8];
}

// alloca: a buffer sized by the data on the thread's stack.
__global__ void scratch(int* out, const int* vals, int n) {
  int* p = static_cast<int*>(alloca(n * sizeof(int)));
  for (int i = 0; i < n; ++i) p[i] = vals[i] * (int(threadIdx.x) + 1);
  int s = 0;
  for (int i = 0; i < n; ++i) s += p[n - 1 - i] * (i + 1);
  out[threadIdx.x] = s + pathSum(vals, 0, nullptr, int(threadIdx.x));
}

__global__ void kernel(int* fibs, int* parity, long long* sums, int* depths, unsigned long long* ack, const int* tree,
                       int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  fibs[t] = fib(t % 20);  // lanes at different depths at once
  parity[t] = isEven(t) ? 1 : 0;
  int deepest = 0;
  sums[t] = subtree(tree, n, t % n, 0, &deepest);
  depths[t] = deepest;
  ack[t] = ackermann(t % 3, t % 4);
}

int main() {
  constexpr int kThreads = 64, kTree = 100;
  std::vector<int> tree(kTree);
  for (int i = 0; i < kTree; ++i) tree[i] = i * 7 % 13 - 5;
  int *fibs, *parity, *depths, *d_tree;
  long long* sums;
  unsigned long long* ack;
  CHECK(cudaMalloc(&fibs, kThreads * sizeof(int)));
  CHECK(cudaMalloc(&parity, kThreads * sizeof(int)));
  CHECK(cudaMalloc(&depths, kThreads * sizeof(int)));
  CHECK(cudaMalloc(&sums, kThreads * sizeof(long long)));
  CHECK(cudaMalloc(&ack, kThreads * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&d_tree, kTree * sizeof(int)));
  CHECK(cudaMemcpy(d_tree, tree.data(), kTree * sizeof(int), cudaMemcpyHostToDevice));
  kernel<<<2, kThreads / 2>>>(fibs, parity, sums, depths, ack, d_tree, kTree);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> f(kThreads), p(kThreads), d(kThreads);
  std::vector<long long> s(kThreads);
  std::vector<unsigned long long> a(kThreads);
  CHECK(cudaMemcpy(f.data(), fibs, kThreads * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(p.data(), parity, kThreads * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(s.data(), sums, kThreads * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(d.data(), depths, kThreads * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(a.data(), ack, kThreads * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  for (int t = 0; t < kThreads; ++t) {
    EXPECT(f[t] == fib(t % 20));
    EXPECT(p[t] == (isEven(t) ? 1 : 0));
    int deepest = 0;
    EXPECT(s[t] == subtree(tree.data(), kTree, t % kTree, 0, &deepest));
    EXPECT(d[t] == deepest);
    EXPECT(a[t] == ackermann(t % 3, t % 4));
  }
  // Frames and alloca.
  std::vector<int> vals(64);
  for (int i = 0; i < 64; ++i) vals[i] = (i * 37) % 11 - 3;
  int *d_vals, *d_out;
  CHECK(cudaMalloc(&d_vals, 64 * sizeof(int)));
  CHECK(cudaMalloc(&d_out, 32 * sizeof(int)));
  CHECK(cudaMemcpy(d_vals, vals.data(), 64 * sizeof(int), cudaMemcpyHostToDevice));
  scratch<<<1, 32>>>(d_out, d_vals, 40);
  CHECK(cudaGetLastError());
  std::vector<int> out(32);
  CHECK(cudaMemcpy(out.data(), d_out, 32 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int t = 0; t < 32; ++t) {
    int s = 0;
    for (int i = 0; i < 40; ++i) s += vals[40 - 1 - i] * (t + 1) * (i + 1);
    EXPECT(out[t] == s + pathSum(vals.data(), 0, nullptr, t));
  }
  std::printf("recursion: fib, mutual recursion, tree sums, ackermann, frames, alloca: all checks passed\n");
  return 0;
}
