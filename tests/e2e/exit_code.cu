// Exits with status 3 after one CUDA call: rgpu-run must pass the status through.
#include <cuda_runtime.h>
int main() {
  void* p;
  if (cudaMalloc(&p, 16) != cudaSuccess) return 1;
  cudaFree(p);
  return 3;
}
