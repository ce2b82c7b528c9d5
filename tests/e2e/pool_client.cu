// A client of the pool tests (tests/e2e/pool_e2e_test.cc): runs one scenario
// against whatever server its client.toml names and prints what happened.
//
//   pool_client quota BYTES       allocate BYTES, then 1 byte more, free, again
//   pool_client hold BYTES MS     allocate BYTES, print "holding", sleep MS, free
//   pool_client info              device count, names and cudaMemGetInfo
//   pool_client heap BYTES ALLOC  set cudaLimitMallocHeapSize to BYTES, then cudaMalloc ALLOC
//   pool_client steps MS BYTES... allocate each size in turn (saying how each went), print
//                                 "holding", sleep MS, free them
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

static void say(const char* what, cudaError_t e) {
  std::printf("%s: %s\n", what, cudaGetErrorName(e));
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* mode = argv[1];
  if (std::strcmp(mode, "info") == 0) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    say("cudaGetDeviceCount", e);
    if (e != cudaSuccess) return 1;
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp p;
      cudaGetDeviceProperties(&p, i);
      size_t free = 0, total = 0;
      cudaSetDevice(i);
      cudaMemGetInfo(&free, &total);
      std::printf("device %d: %s, total %zu, free %zu\n", i, p.name, total, free);
    }
    return 0;
  }
  if (std::strcmp(mode, "quota") == 0 && argc >= 3) {
    size_t bytes = std::strtoull(argv[2], nullptr, 10);
    void *a = nullptr, *b = nullptr;
    say("allocate the quota", cudaMalloc(&a, bytes));
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    std::printf("meminfo: free %zu total %zu\n", free, total);
    say("one byte more", cudaMalloc(&b, 1));
    say("free", cudaFree(a));
    say("allocate again", cudaMalloc(&a, bytes));
    say("last error after a refused cudaMalloc", cudaGetLastError());
    cudaFree(a);
    return 0;
  }
  if (std::strcmp(mode, "heap") == 0 && argc >= 4) {
    void* a = nullptr;
    say("set the malloc heap", cudaDeviceSetLimit(cudaLimitMallocHeapSize, std::strtoull(argv[2], nullptr, 10)));
    cudaGetLastError();
    say("allocate beside it", cudaMalloc(&a, std::strtoull(argv[3], nullptr, 10)));
    cudaFree(a);
    return 0;
  }
  if (std::strcmp(mode, "hold") == 0 && argc >= 4) {
    size_t bytes = std::strtoull(argv[2], nullptr, 10);
    int ms = std::atoi(argv[3]);
    void* a = nullptr;
    cudaError_t e = cudaMalloc(&a, bytes);
    say("allocate", e);
    if (e != cudaSuccess) return 1;
    std::printf("holding\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    say("free", cudaFree(a));
    return 0;
  }
  if (std::strcmp(mode, "steps") == 0 && argc >= 4) {
    int ms = std::atoi(argv[2]);
    void* held[64];
    int n = 0;
    for (int i = 3; i < argc && n < 64; ++i) {
      size_t bytes = std::strtoull(argv[i], nullptr, 10);
      void* p = nullptr;
      cudaError_t e = cudaMalloc(&p, bytes);
      std::printf("allocate %zu: %s\n", bytes, cudaGetErrorName(e));
      if (e == cudaSuccess) held[n++] = p;
      cudaGetLastError();
    }
    std::printf("holding\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (int i = 0; i < n; ++i) cudaFree(held[i]);
    return 0;
  }
  return 2;
}
