// Managed memory as NVIDIA's "easy introduction" uses it: arrays made with
// cudaMallocManaged, initialised on the host, used by kernels, read on the
// host after cudaDeviceSynchronize — no cudaMemcpy. Also: copies and memsets
// with managed pointers (any cudaMemcpyKind), attributes, prefetch, advice
// and range queries, stream attachment, and what moved: run with
// RGPU_MANAGED_STATS=1, rgpu prints the bytes each way at exit; the e2e test
// checks that only the pages the host touched travelled.
//
//   managed               through rgpu (the sim, or the CUDA backend)
//   managed --native      on NVIDIA's runtime, which may report concurrent managed access
#include <cuda_runtime.h>

#include <cstdio>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"

__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void fill(int n, float v, float* p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

constexpr int N = 1 << 18;  // 1 MiB of floats per array
constexpr size_t kBytes = N * sizeof(float);

int main(int argc, char** argv) {
  const bool native = argc > 1 && std::strcmp(argv[1], "--native") == 0;
  int managed = -1, concurrent = -1;
  CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
  CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
  EXPECT(managed == 1);
  if (!native) EXPECT(concurrent == 0);  // rgpu's coherence: the host may touch managed memory while the device is idle

  float *x, *y, *z;
  size_t free0, free1, total;
  CHECK(cudaMemGetInfo(&free0, &total));
  CHECK(cudaMallocManaged(&x, kBytes));
  CHECK(cudaMemGetInfo(&free1, &total));
  EXPECT(free0 - free1 >= kBytes);  // device memory, counted as cudaMalloc's is (quotas too)
  CHECK(cudaMallocManaged(&y, kBytes));
  CHECK(cudaMallocManaged(&z, kBytes, cudaMemAttachGlobal));
  void* bad;
  EXPECT_ERR(cudaMallocManaged(&bad, 0), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMallocManaged(&bad, 64, 7), cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);  // (and reset)
  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, y + 5));
  EXPECT(pa.type == cudaMemoryTypeManaged);
  EXPECT(pa.devicePointer == y + 5 && pa.hostPointer == y + 5);

  // 1. Initialised on the host (2 MiB dirty), a kernel, read back on the host (1 MiB fetched).
  for (int i = 0; i < N; ++i) {
    x[i] = 1.0f;
    y[i] = 2.0f;
  }
  saxpy<<<(N + 255) / 256, 256>>>(N, 2.0f, x, y);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i)
    if (y[i] != 4.0f) {
      std::printf("FAILED: y[%d] = %f after saxpy, expected 4\n", i, y[i]);
      return 1;
    }

  // 2. Written on the device only (z): nothing travels for it. Copies with a
  // managed pointer on a host side are device-side copies, whatever the kind.
  float* d;
  CHECK(cudaMalloc(&d, kBytes));
  fill<<<(N + 255) / 256, 256>>>(N, 7.0f, z);
  CHECK(cudaMemcpy(d, z, kBytes, cudaMemcpyHostToDevice));
  std::vector<float> h(N);
  CHECK(cudaMemcpy(h.data(), d, kBytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < N; ++i) EXPECT(h[i] == 7.0f);
  CHECK(cudaMemcpy(z, h.data(), 16, cudaMemcpyHostToHost));  // a managed destination: still no host pages of z
  CHECK(cudaMemcpyAsync(h.data(), z, 16, cudaMemcpyDefault, 0));
  CHECK(cudaStreamSynchronize(0));
  EXPECT(h[3] == 7.0f);

  // 3. A memset of managed memory, then one host read: one 64 KiB block fetched.
  CHECK(cudaMemset(x, 0, kBytes));
  CHECK(cudaDeviceSynchronize());
  EXPECT(x[0] == 0.0f);

  // 4. Four threads read z at once after the device wrote it: faults in parallel, each block fetched once (1 MiB).
  const float want = 9.0f;
  fill<<<(N + 255) / 256, 256>>>(N, want, z);
  CHECK(cudaDeviceSynchronize());
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&, t] {
      for (int i = t; i < N; i += 4)
        if (z[i] != want) ++wrong;
    });
  for (auto& r : readers) r.join();
  EXPECT(wrong.load() == 0);

  // 5. Hints and queries.
  cudaMemLocation dev0{cudaMemLocationTypeDevice, 0}, host{cudaMemLocationTypeHost, 0};
  CHECK(cudaMemAdvise(y, kBytes, cudaMemAdviseSetReadMostly, dev0));
  CHECK(cudaMemAdvise(y, kBytes, cudaMemAdviseSetPreferredLocation, dev0));
  CHECK(cudaMemAdvise(y, kBytes, cudaMemAdviseSetAccessedBy, dev0));
  CHECK(cudaMemPrefetchAsync(y, kBytes, dev0, 0, 0));
  int v = -5;
  CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, y, kBytes));
  EXPECT(v == 1);
  CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, y, kBytes));
  EXPECT(v == 0);
  CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeLastPrefetchLocation, y, kBytes));
  EXPECT(v == 0);
  int by[2] = {-5, -5};
  CHECK(cudaMemRangeGetAttribute(by, sizeof by, cudaMemRangeAttributeAccessedBy, y, kBytes));
  EXPECT(by[0] == 0 && by[1] == cudaInvalidDeviceId);
  EXPECT_ERR(cudaMemAdvise(d, 16, cudaMemAdviseSetReadMostly, dev0), cudaErrorInvalidValue);  // not managed
  EXPECT_ERR(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, y, kBytes + 4096), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamAttachMemAsync(s, y, 0, cudaMemAttachSingle));
  CHECK(cudaStreamDestroy(s));
  // To the host: fetched by the call (y was unchanged on the device since: 1 MiB more).
  CHECK(cudaMemPrefetchAsync(y, kBytes, host, 0, 0));
  CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeLastPrefetchLocation, y, kBytes));
  EXPECT(v == cudaCpuDeviceId);
  EXPECT(y[N - 1] == 4.0f);  // no fault: prefetched

  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(z));
  CHECK(cudaFree(d));
  std::printf("managed: host-initialised arrays, kernels, host reads, copies, hints and queries, all checks passed\n");
  return 0;
}
