// Device memory through rgpu: copies of every direction, memset, 2D copies,
// __device__ and __constant__ variables, pinned memory and cudaMemcpyDefault.
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::printf("%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

__device__ int gTable[256];
__constant__ float cCoeffs[16];

int main() {
  const size_t n = 1 << 20;
  std::vector<unsigned> host(n), back(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned>(i * 2654435761u);

  unsigned *a, *b;
  CHECK(cudaMalloc(&a, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&b, n * sizeof(unsigned)));
  CHECK(cudaMemcpy(a, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, a, n * sizeof(unsigned), cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back.data(), b, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  bool ok = back == host;
  std::printf("H2D -> D2D -> D2H of %zu bytes: %s\n", n * sizeof(unsigned), ok ? "match" : "MISMATCH");

  CHECK(cudaMemset(a, 0xab, 4096));
  unsigned char bytes[4096];
  CHECK(cudaMemcpy(bytes, a, sizeof bytes, cudaMemcpyDefault));
  bool ms = true;
  for (unsigned char c : bytes) ms &= c == 0xab;
  std::printf("memset 4096 bytes: %s\n", ms ? "match" : "MISMATCH");
  ok &= ms;

  // 2D: a 100x37 sub-rectangle through a pitched allocation.
  size_t pitch = 0;
  char* img;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&img), &pitch, 100, 37));
  std::vector<char> src(120 * 37), dst(100 * 37);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i % 251);
  CHECK(cudaMemcpy2D(img, pitch, src.data(), 120, 100, 37, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(dst.data(), 100, img, pitch, 100, 37, cudaMemcpyDeviceToHost));
  bool twod = true;
  for (size_t r = 0; r < 37; ++r) twod &= std::memcmp(&dst[r * 100], &src[r * 120], 100) == 0;
  std::printf("2D copy 100x37 (pitch %zu): %s\n", pitch, twod ? "match" : "MISMATCH");
  ok &= twod;

  // Symbols.
  int table[256];
  for (int i = 0; i < 256; ++i) table[i] = i * i;
  CHECK(cudaMemcpyToSymbol(gTable, table, sizeof table));
  int table_back[256] = {0};
  CHECK(cudaMemcpyFromSymbol(table_back, gTable, sizeof table_back));
  float coeffs[16];
  for (int i = 0; i < 16; ++i) coeffs[i] = 0.5f * i;
  CHECK(cudaMemcpyToSymbol(cCoeffs, coeffs, sizeof coeffs));
  float coeffs_back[16] = {0};
  CHECK(cudaMemcpyFromSymbol(coeffs_back, cCoeffs, sizeof coeffs_back));
  size_t sym_size = 0;
  CHECK(cudaGetSymbolSize(&sym_size, gTable));
  bool syms = std::memcmp(table, table_back, sizeof table) == 0 && std::memcmp(coeffs, coeffs_back, sizeof coeffs) == 0 &&
              sym_size == sizeof table;
  std::printf("__device__ / __constant__ round trip (%zu bytes): %s\n", sym_size, syms ? "match" : "MISMATCH");
  ok &= syms;

  // Pinned memory and an asynchronous device-to-host copy.
  unsigned* pinned;
  CHECK(cudaMallocHost(&pinned, n * sizeof(unsigned)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMemcpyAsync(pinned, a + 1024, (n - 1024) * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bool async = std::memcmp(pinned, host.data() + 1024, (n - 1024) * sizeof(unsigned)) == 0;
  std::printf("async D2H into pinned memory: %s\n", async ? "match" : "MISMATCH");
  ok &= async;
  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, a));
  std::printf("pointer attributes: device pointer on device %d: %s\n", attr.device,
              attr.type == cudaMemoryTypeDevice ? "yes" : "NO");
  ok &= attr.type == cudaMemoryTypeDevice;

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(img));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  // An invalid pointer is refused with a clear error, and the session goes on.
  cudaError_t bad = cudaMemcpy(back.data(), reinterpret_cast<void*>(0x1234), 16, cudaMemcpyDeviceToHost);
  std::printf("copy from a pointer never allocated: %s\n", cudaGetErrorName(bad));
  cudaGetLastError();
  std::printf("%s\n", ok ? "memory: all checks passed" : "memory: FAILED");
  return ok ? 0 : 1;
}
