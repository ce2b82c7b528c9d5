// Prints its arguments, one per line as hex bytes (so empty words, spaces and
// bytes that are not UTF-8 show exactly), after one CUDA call through rgpu.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return 1;
  for (int i = 1; i < argc; ++i) {
    std::printf("arg%d:", i);
    for (size_t j = 0; j < std::strlen(argv[i]); ++j) std::printf("%02x", static_cast<unsigned char>(argv[i][j]));
    std::printf("\n");
  }
  std::printf("argc=%d\n", argc);
  return 0;
}
