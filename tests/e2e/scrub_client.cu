// Device memory left behind by one session, looked for by the next
// (docs/security.md, "Device memory between sessions").
//   scrub_client fill BYTES free|leave|hold   cudaMemset BYTES to 0xA5; then free it, exit
//                                             without freeing, or print "holding" and wait
//                                             until a call fails
//   scrub_client scan BYTES                   allocate BYTES and count the bytes that are 0xA5
//   scrub_client race BYTES N                 N times: allocate BYTES, copy a pattern in on a stream
//                                             at once, read it back; count the rounds that lost bytes
//   scrub_client fillarray W H free|leave     a W x H array of bytes filled with 0xA5; then free it or exit
//   scrub_client scanarray W H                a W x H array: count the bytes that are 0xA5
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
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

// The array forms: the same, with a CUDA array (its memory is the GPU's too).
int arrays(int argc, char** argv) {
  if (argc < 4) return 2;
  const size_t w = std::strtoull(argv[2], nullptr, 10), h = std::strtoull(argv[3], nullptr, 10);
  cudaChannelFormatDesc desc = cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
  cudaArray_t a = nullptr;
  CHECK(cudaMallocArray(&a, &desc, w, h));
  std::vector<unsigned char> host(w * h, 0xA5);
  if (std::strcmp(argv[1], "fillarray") == 0 && argc >= 5) {
    CHECK(cudaMemcpy2DToArray(a, 0, 0, host.data(), w, w, h, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
    std::printf("filled an array of %zu bytes\n", w * h);
    if (std::strcmp(argv[4], "free") == 0) CHECK(cudaFreeArray(a));
    return 0;
  }
  std::fill(host.begin(), host.end(), 0);
  CHECK(cudaMemcpy2DFromArray(host.data(), w, a, 0, 0, w, h, cudaMemcpyDeviceToHost));
  size_t found = 0;
  for (unsigned char c : host) found += c == 0xA5;
  std::printf("scan: %zu of %zu array bytes hold another session's pattern\n", found, w * h);
  return 0;
}

// The scrub of fresh memory must come before the program's first use of it,
// whichever stream that is on (and never after, zeroing what it wrote).
int race(int argc, char** argv) {
  if (argc < 4) return 2;
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const int rounds = std::atoi(argv[3]);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<unsigned char> in(bytes), out(bytes);
  int lost = 0;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(1 + (i + r) % 251);
    unsigned char* d = nullptr;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpyAsync(d, in.data(), bytes, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(out.data(), d, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    lost += std::memcmp(in.data(), out.data(), bytes) != 0;
    CHECK(cudaFree(d));
  }
  std::printf("race: %d of %d rounds lost bytes\n", lost, rounds);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  if (std::strstr(argv[1], "array")) return arrays(argc, argv);
  if (std::strcmp(argv[1], "race") == 0) return race(argc, argv);
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
