// Device memory left behind by one session, looked for by the next
// (docs/security.md, "Device memory between sessions").
//   scrub_client fill BYTES free|leave|hold   cudaMemset BYTES to 0xA5; then free it, exit
//                                             without freeing, or print "holding" and wait
//                                             until a call fails
//   scrub_client scan BYTES                   allocate BYTES and count the bytes that are 0xA5
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    cudaError_t e_ = (call);                                                                        \
    if (e_ != cudaSuccess) {                                                                        \
      std::printf("scrub_client: %s failed: %s\n", #call, cudaGetErrorName(e_));                   \
      return 2;                                                                                     \
    }                                                                                               \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  unsigned char* d = nullptr;
  CHECK(cudaMalloc(&d, bytes));
  if (std::strcmp(argv[1], "fill") == 0 && argc >= 4) {
    CHECK(cudaMemset(d, 0xA5, bytes));
    CHECK(cudaDeviceSynchronize());
    std::printf("filled %zu bytes\n", bytes);
    if (std::strcmp(argv[3], "free") == 0) CHECK(cudaFree(d));
    if (std::strcmp(argv[3], "hold") == 0) {
      std::printf("holding\n");
      std::fflush(stdout);
      for (int i = 0; i < 600; ++i) {  // until its session ends (at most a minute)
        usleep(100000);
        if (cudaDeviceSynchronize() != cudaSuccess) return 3;
      }
    }
    return 0;
  }
  std::vector<unsigned char> h(bytes);
  CHECK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  size_t found = 0;
  for (unsigned char c : h) found += c == 0xA5;
  std::printf("scan: %zu of %zu bytes hold another session's pattern\n", found, bytes);
  return 0;
}
