// Device printf through rgpu: formats with '*' widths and precisions (taken
// from the kernel's argument buffer, never from the worker's own stack), and
// the printf FIFO bound of cudaDeviceSetLimit(cudaLimitPrintfFifoSize).
// One case per process: device_printf CASE; prints "ok CASE" on success.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "cases.h"

using cases::check;
using cases::expect;
using cases::fail;

__global__ void k_star() {
  printf("[%*d][%-*d][%.*f][%.*s][%*.*f][%*d]\n", 5, 7, 4, 3, 2, 3.14159, 3, "abcdef", 8, 1, 2.75, -4, 9);
}

__global__ void k_lines(int per_thread) {
  for (int i = 0; i < per_thread; ++i) printf("line %05d\n", threadIdx.x * per_thread + i);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s star|fifo\n", argv[0]);
    return 2;
  }
  cases::g_case = argv[1];
  std::string c = argv[1];
  if (c == "star") {
    k_star<<<1, 1>>>();
    check(cudaDeviceSynchronize(), "synchronize");
  } else if (c == "fifo") {
    expect(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, size_t{1} << 40), cudaErrorMemoryAllocation,
           "a 1 TiB FIFO");
    check(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 4096), "set a 4 KiB FIFO");
    size_t v = 0;
    check(cudaDeviceGetLimit(&v, cudaLimitPrintfFifoSize), "get");
    if (v != 4096) fail("the limit reads " + std::to_string(v));
    k_lines<<<1, 64>>>(100);  // 6,400 lines of 11 bytes: 70,400 bytes
    check(cudaDeviceSynchronize(), "synchronize");
    std::fflush(stdout);
    expect(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 8192), cudaErrorInvalidValue,
           "setting the FIFO after a printf kernel ran");
  } else {
    fail("unknown case");
  }
  std::printf("ok %s\n", argv[1]);
  return 0;
}
