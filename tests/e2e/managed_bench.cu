// The cost of managed memory against explicit copies of the same bytes, in
// one run (the machine is shared: ratios, not absolutes, are the figures):
//   rgpu-run --local -- build/tests/e2e/managed_bench [MiB]   (default 64)
// Run with RGPU_MANAGED_STATS=1 to see the bytes, faults and fetches.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const size_t n = mib << 18, bytes = n * sizeof(float);
  float *m, *d;
  if (cudaMallocManaged(&m, bytes) || cudaMalloc(&d, bytes)) {
    std::printf("managed_bench: allocation failed\n");
    return 1;
  }
  std::vector<float> h(n, 1.0f);
  double t0 = now();
  for (size_t i = 0; i < n; ++i) m[i] = 1.0f;  // first touch: a fault per page, no bytes fetched
  double t1 = now();
  cudaMemset(d, 0, 4);  // device work: the dirty pages go up
  cudaDeviceSynchronize();
  double t2 = now();
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += m[i];  // fetched, with read-ahead
  double t3 = now();
  cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice);
  double t4 = now();
  cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
  double t5 = now();
  std::printf("managed_bench: %zu MiB: host first writes %.3f s; managed upload %.3f s vs cudaMemcpy H2D %.3f s (%.2fx); "
              "managed host reads %.3f s vs cudaMemcpy D2H %.3f s (%.2fx)%s\n",
              mib, t1 - t0, t2 - t1, t4 - t3, (t2 - t1) / (t4 - t3), t3 - t2, t5 - t4, (t3 - t2) / (t5 - t4),
              sum == double(n) ? "" : " WRONG SUM");
  cudaFree(m);
  cudaFree(d);
  return sum == double(n) ? 0 : 1;
}
