// Thrust and CUB as shipped with the CUDA toolkit, through rgpu: each check
// compares with the host and prints PASS/FAIL with its name.
#include <cub/cub.cuh>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>
#include <thrust/unique.h>
#include <thrust/execution_policy.h>
#include <thrust/universal_vector.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

static int failures = 0;
static void report(const char* name, bool ok) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", name);
  failures += !ok;
}

template <typename T>
std::vector<T> randomKeys(size_t n, unsigned seed) {
  std::vector<T> v(n);
  unsigned x = seed;
  for (auto& k : v) {
    x = x * 1664525u + 1013904223u;
    k = static_cast<T>(x >> 3);
  }
  return v;
}

struct IsOdd {
  __host__ __device__ bool operator()(int x) const { return x & 1; }
};
struct Square {
  __host__ __device__ long long operator()(int x) const { return static_cast<long long>(x) * x; }
};

__global__ void blockWarpReduce(const int* in, int* block_out, int* warp_out) {
  using BR = cub::BlockReduce<int, 128>;
  using WR = cub::WarpReduce<int>;
  __shared__ typename BR::TempStorage bt;
  __shared__ typename WR::TempStorage wt[4];
  int v = in[blockIdx.x * 128 + threadIdx.x];
  int b = BR(bt).Sum(v);
  int w = WR(wt[threadIdx.x / 32]).Sum(v);
  if (threadIdx.x == 0) block_out[blockIdx.x] = b;
  if (threadIdx.x % 32 == 0) warp_out[blockIdx.x * 4 + threadIdx.x / 32] = w;
}

int main(int argc, char** argv) {
  size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000;
  {  // thrust::sort, 32-bit keys
    auto h = randomKeys<unsigned>(n, 1);
    thrust::device_vector<unsigned> d(h.begin(), h.end());
    thrust::sort(d.begin(), d.end());
    std::sort(h.begin(), h.end());
    thrust::host_vector<unsigned> got = d;
    report("thrust::sort u32", std::equal(h.begin(), h.end(), got.begin()));
  }
  {  // 64-bit keys, descending
    auto h = randomKeys<unsigned long long>(n, 2);
    for (auto& k : h) k = (k << 20) ^ k;
    thrust::device_vector<unsigned long long> d(h.begin(), h.end());
    thrust::sort(d.begin(), d.end(), thrust::greater<unsigned long long>());
    std::sort(h.begin(), h.end(), std::greater<unsigned long long>());
    thrust::host_vector<unsigned long long> got = d;
    report("thrust::sort u64 descending", std::equal(h.begin(), h.end(), got.begin()));
  }
  {  // floats
    auto k = randomKeys<unsigned>(n, 3);
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(static_cast<int>(k[i])) / 1000.0f - 5e5f;
    thrust::device_vector<float> d(h.begin(), h.end());
    thrust::sort(d.begin(), d.end());
    std::sort(h.begin(), h.end());
    thrust::host_vector<float> got = d;
    report("thrust::sort f32", std::equal(h.begin(), h.end(), got.begin()));
  }
  {  // sort_by_key
    auto k = randomKeys<int>(n, 4);
    std::vector<int> v(n);
    std::iota(v.begin(), v.end(), 0);
    thrust::device_vector<int> dk(k.begin(), k.end()), dv(v.begin(), v.end());
    thrust::sort_by_key(dk.begin(), dk.end(), dv.begin());
    std::vector<std::pair<int, int>> ref(n);
    for (size_t i = 0; i < n; ++i) ref[i] = {k[i], v[i]};
    std::stable_sort(ref.begin(), ref.end(), [](auto& a, auto& b) { return a.first < b.first; });
    thrust::host_vector<int> gk = dk, gv = dv;
    bool ok = true;
    for (size_t i = 0; i < n && ok; ++i) ok = gk[i] == ref[i].first && gv[i] == ref[i].second;
    report("thrust::sort_by_key", ok);
  }
  {  // reduce, scans, transform_reduce
    auto k = randomKeys<int>(n, 5);
    for (auto& x : k) x %= 1000;
    thrust::device_vector<int> d(k.begin(), k.end());
    long long sum = thrust::reduce(d.begin(), d.end(), 0ll);
    report("thrust::reduce", sum == std::accumulate(k.begin(), k.end(), 0ll));
    thrust::device_vector<int> out(n);
    thrust::inclusive_scan(d.begin(), d.end(), out.begin());
    std::vector<int> ref(n);
    std::partial_sum(k.begin(), k.end(), ref.begin());
    thrust::host_vector<int> got = out;
    report("thrust::inclusive_scan", std::equal(ref.begin(), ref.end(), got.begin()));
    thrust::exclusive_scan(d.begin(), d.end(), out.begin());
    std::exclusive_scan(k.begin(), k.end(), ref.begin(), 0);
    got = out;
    report("thrust::exclusive_scan", std::equal(ref.begin(), ref.end(), got.begin()));
    long long sq = thrust::transform_reduce(d.begin(), d.end(), Square(), 0ll, thrust::plus<long long>());
    long long sqr = 0;
    for (int x : k) sqr += static_cast<long long>(x) * x;
    report("thrust::transform_reduce", sq == sqr);
    thrust::device_vector<int> odd(n);
    auto end = thrust::copy_if(d.begin(), d.end(), odd.begin(), IsOdd());
    std::vector<int> oref;
    std::copy_if(k.begin(), k.end(), std::back_inserter(oref), [](int x) { return x & 1; });
    thrust::host_vector<int> og(odd.begin(), end);
    report("thrust::copy_if", og.size() == oref.size() && std::equal(oref.begin(), oref.end(), og.begin()));
    thrust::sort(d.begin(), d.end());
    auto uend = thrust::unique(d.begin(), d.end());
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
    thrust::host_vector<int> ug(d.begin(), uend);
    report("thrust::unique", ug.size() == k.size() && std::equal(k.begin(), k.end(), ug.begin()));
  }
  {  // CUB device algorithms
    auto h = randomKeys<unsigned>(n, 6);
    unsigned *din, *dout;
    cudaMalloc(&din, n * sizeof(unsigned));
    cudaMalloc(&dout, n * sizeof(unsigned));
    cudaMemcpy(din, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice);
    void* tmp = nullptr;
    size_t tmp_bytes = 0;
    cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, din, dout, static_cast<int>(n));
    cudaMalloc(&tmp, tmp_bytes);
    cub::DeviceRadixSort::SortKeys(tmp, tmp_bytes, din, dout, static_cast<int>(n));
    std::vector<unsigned> got(n), ref = h;
    cudaMemcpy(got.data(), dout, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    std::sort(ref.begin(), ref.end());
    report("cub::DeviceRadixSort::SortKeys", got == ref);
    cudaFree(tmp);
    unsigned long long* dsum;
    cudaMalloc(&dsum, sizeof(unsigned long long));
    std::vector<unsigned long long> wide(h.begin(), h.end());
    unsigned long long* dwide;
    cudaMalloc(&dwide, n * sizeof(unsigned long long));
    cudaMemcpy(dwide, wide.data(), n * sizeof(unsigned long long), cudaMemcpyHostToDevice);
    tmp = nullptr;
    tmp_bytes = 0;
    cub::DeviceReduce::Sum(tmp, tmp_bytes, dwide, dsum, static_cast<int>(n));
    cudaMalloc(&tmp, tmp_bytes);
    cub::DeviceReduce::Sum(tmp, tmp_bytes, dwide, dsum, static_cast<int>(n));
    unsigned long long s = 0;
    cudaMemcpy(&s, dsum, sizeof s, cudaMemcpyDeviceToHost);
    report("cub::DeviceReduce::Sum", s == std::accumulate(wide.begin(), wide.end(), 0ull));
    cudaFree(tmp);
    tmp = nullptr;
    tmp_bytes = 0;
    cub::DeviceScan::InclusiveSum(tmp, tmp_bytes, din, dout, static_cast<int>(n));
    cudaMalloc(&tmp, tmp_bytes);
    cub::DeviceScan::InclusiveSum(tmp, tmp_bytes, din, dout, static_cast<int>(n));
    cudaMemcpy(got.data(), dout, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    std::partial_sum(h.begin(), h.end(), ref.begin());
    report("cub::DeviceScan::InclusiveSum", got == ref);
    cudaFree(tmp);
    int* dcount;
    cudaMalloc(&dcount, sizeof(int));
    tmp = nullptr;
    tmp_bytes = 0;
    cub::DeviceSelect::If(tmp, tmp_bytes, din, dout, dcount, static_cast<int>(n), IsOdd());
    cudaMalloc(&tmp, tmp_bytes);
    cub::DeviceSelect::If(tmp, tmp_bytes, din, dout, dcount, static_cast<int>(n), IsOdd());
    int count = 0;
    cudaMemcpy(&count, dcount, sizeof count, cudaMemcpyDeviceToHost);
    std::vector<unsigned> sel;
    std::copy_if(h.begin(), h.end(), std::back_inserter(sel), [](unsigned x) { return x & 1; });
    got.assign(static_cast<size_t>(count), 0);
    cudaMemcpy(got.data(), dout, count * sizeof(unsigned), cudaMemcpyDeviceToHost);
    report("cub::DeviceSelect::If", got == sel);
    cudaFree(tmp);
    int* dhist;
    const int bins = 64;
    cudaMalloc(&dhist, bins * sizeof(int));
    std::vector<unsigned> small(n);
    for (size_t i = 0; i < n; ++i) small[i] = h[i] % 1024;
    cudaMemcpy(din, small.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice);
    tmp = nullptr;
    tmp_bytes = 0;
    cub::DeviceHistogram::HistogramEven(tmp, tmp_bytes, din, dhist, bins + 1, 0u, 1024u, static_cast<int>(n));
    cudaMalloc(&tmp, tmp_bytes);
    cub::DeviceHistogram::HistogramEven(tmp, tmp_bytes, din, dhist, bins + 1, 0u, 1024u, static_cast<int>(n));
    std::vector<int> hist(bins), href(bins, 0);
    cudaMemcpy(hist.data(), dhist, bins * sizeof(int), cudaMemcpyDeviceToHost);
    for (unsigned x : small) ++href[x / 16];
    report("cub::DeviceHistogram::HistogramEven", hist == href);
    // BlockReduce and WarpReduce
    std::vector<int> vals(8 * 128);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<int>(i % 97);
    int *dv, *db, *dw;
    cudaMalloc(&dv, vals.size() * sizeof(int));
    cudaMalloc(&db, 8 * sizeof(int));
    cudaMalloc(&dw, 32 * sizeof(int));
    cudaMemcpy(dv, vals.data(), vals.size() * sizeof(int), cudaMemcpyHostToDevice);
    blockWarpReduce<<<8, 128>>>(dv, db, dw);
    std::vector<int> gb(8), gw(32);
    cudaMemcpy(gb.data(), db, 8 * sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(gw.data(), dw, 32 * sizeof(int), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int b = 0; b < 8; ++b) ok &= gb[b] == std::accumulate(vals.begin() + b * 128, vals.begin() + (b + 1) * 128, 0);
    for (int w = 0; w < 32; ++w) ok &= gw[w] == std::accumulate(vals.begin() + w * 32, vals.begin() + (w + 1) * 32, 0);
    report("cub::BlockReduce and cub::WarpReduce", ok);
  }
  {
    // Managed memory as Thrust offers it: written on the host, sorted and
    // reduced on the device, read back on the host.
    const int n = 100000;
    thrust::universal_vector<int> u(n);
    for (int i = 0; i < n; ++i) u[i] = static_cast<int>((i * 7919L) % n);
    thrust::sort(thrust::device, u.begin(), u.end());
    long sum = thrust::reduce(thrust::device, u.begin(), u.end(), 0L);
    bool ok = sum == long(n) * (n - 1) / 2;
    for (int i = 0; i < n && ok; ++i) ok = u[i] == i;
    report("thrust::universal_vector sort and reduce", ok);
  }
  cudaError_t e = cudaDeviceSynchronize();
  report("no CUDA error", e == cudaSuccess);
  std::printf("thrust_cub: %d failed\n", failures);
  return failures ? 1 : 0;
}
