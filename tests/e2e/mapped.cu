// Mapped (zero-copy) host memory as NVIDIA's simpleZeroCopy sample uses it:
// cudaSetDeviceFlags(cudaDeviceMapHost), cudaHostAlloc(..., cudaHostAllocMapped),
// kernels reading and writing through cudaHostGetDevicePointer's pointers,
// the host reading the results after cudaDeviceSynchronize without a copy.
// Also cudaHostRegister(..., cudaHostRegisterMapped) of page-aligned memory
// the program already filled, copies naming mapped memory, pointer attributes.
//
//   mapped               through rgpu (the sim, or the CUDA backend)
//   mapped --native      on NVIDIA's runtime, which registers memory off page boundaries too
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
__global__ void twice(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= 2;
}

constexpr int N = 100000;

int main(int argc, char** argv) {
  const bool native = argc > 1 && std::strcmp(argv[1], "--native") == 0;
  int can = -1, uva = -1;
  CHECK(cudaDeviceGetAttribute(&can, cudaDevAttrCanMapHostMemory, 0));
  CHECK(cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, 0));
  EXPECT(can == 1);
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));

  float *a, *b, *c, *da, *db, *dc;
  CHECK(cudaHostAlloc(&a, N * sizeof(float), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&b, N * sizeof(float), cudaHostAllocMapped | cudaHostAllocPortable));
  CHECK(cudaHostAlloc(&c, N * sizeof(float), cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&da, a, 0));
  CHECK(cudaHostGetDevicePointer(&db, b, 0));
  CHECK(cudaHostGetDevicePointer(&dc, c, 0));
  if (!uva) EXPECT(da != a);  // without unified addressing the alias is another address
  unsigned flags = 0;
  CHECK(cudaHostGetFlags(&flags, b));
  EXPECT(flags == (cudaHostAllocMapped | cudaHostAllocPortable));
  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, a + 10));
  EXPECT(pa.type == cudaMemoryTypeHost && pa.hostPointer == a + 10 && pa.devicePointer == da + 10);
  CHECK(cudaPointerGetAttributes(&pa, db + 3));
  EXPECT(pa.type == cudaMemoryTypeHost && pa.hostPointer == b + 3 && pa.devicePointer == db + 3);
  void* none;
  std::vector<float> plain(16);
  EXPECT_ERR(cudaHostGetDevicePointer(&none, plain.data(), 0), cudaErrorInvalidValue);
  (void)cudaGetLastError();

  for (int i = 0; i < N; ++i) {
    a[i] = float(i);
    b[i] = 0.5f;
  }
  add<<<(N + 255) / 256, 256>>>(da, db, dc, N);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i)
    if (c[i] != float(i) + 0.5f) {
      std::printf("FAILED: c[%d] = %f\n", i, c[i]);
      return 1;
    }

  // Copies naming mapped memory by its host address, any kind: done on the device.
  float* d;
  CHECK(cudaMalloc(&d, N * sizeof(float)));
  CHECK(cudaMemcpy(d, a, N * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, d, N * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy2D(c, 8, a + 1, 8, 4, 3, cudaMemcpyDefault));  // c[0], c[2], c[4] = a[1], a[3], a[5]
  CHECK(cudaDeviceSynchronize());
  EXPECT(b[N - 1] == float(N - 1));
  EXPECT(c[0] == 1.0f && c[2] == 3.0f && c[4] == 5.0f);
  // Host to host between mapped buffers (a copy on the device here): done when cudaMemcpy returns.
  for (int k = 0; k < 20; ++k) {
    CHECK(cudaMemcpy(c, a, N * sizeof(float), cudaMemcpyHostToHost));
    EXPECT(c[N - 1] == float(N - 1) && c[7] == 7.0f);
    c[7] = -1.0f;
  }

  // Registered with cudaHostRegisterMapped: whole pages the program filled first.
  const size_t bytes = 16 * 4096;
  int* r = nullptr;
  if (posix_memalign(reinterpret_cast<void**>(&r), 4096, bytes) != 0) return 1;
  const int n = int(bytes / sizeof(int));
  for (int i = 0; i < n; ++i) r[i] = i;
  CHECK(cudaHostRegister(r, bytes, cudaHostRegisterMapped));
  int* dr;
  CHECK(cudaHostGetDevicePointer(&dr, r, 0));
  twice<<<(n + 255) / 256, 256>>>(dr, n);
  CHECK(cudaDeviceSynchronize());
  EXPECT(r[5] == 10);
  CHECK(cudaHostUnregister(r));
  // The program's memory again, with the device's bytes in it.
  EXPECT(r[n - 1] == 2 * (n - 1));
  EXPECT(r[0] == 0);
  r[0] = 77;
  std::free(r);
  // Not on page boundaries: refused, as rgpu would have to protect its neighbours.
  std::vector<char> odd(10000);
  if (!native) {
    EXPECT_ERR(cudaHostRegister(odd.data() + 1, 5000, cudaHostRegisterMapped), cudaErrorNotSupported);
    (void)cudaGetLastError();
  }

  CHECK(cudaFreeHost(a));
  CHECK(cudaFreeHost(b));
  CHECK(cudaFreeHost(c));
  CHECK(cudaFree(d));
  std::printf("mapped: zero-copy kernels, registered pages, copies and attributes, all checks passed\n");
  return 0;
}
