// Vector add and SAXPY, checked against the CPU.
#include <cmath>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void vecAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void saxpy(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}

int main() {
  const int n = 1 << 20;
  std::vector<float> a(n), b(n), c(n), y(n), ref(n);
  for (int i = 0; i < n; ++i) {
    a[i] = std::sin(i * 0.001f);
    b[i] = std::cos(i * 0.002f);
  }
  float *da, *db, *dc;
  cudaMalloc(&da, n * sizeof(float));
  cudaMalloc(&db, n * sizeof(float));
  cudaMalloc(&dc, n * sizeof(float));
  cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  vecAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += c[i] != a[i] + b[i];
  std::printf("vector add of %d floats: %s\n", n, bad ? "MISMATCH" : "matches the CPU");

  // y = 2.5 x + y, with a grid-stride loop over fewer threads than elements.
  saxpy<<<64, 128>>>(n, 2.5f, da, db);
  cudaError_t e = cudaMemcpy(y.data(), db, n * sizeof(float), cudaMemcpyDeviceToHost);
  int bad2 = 0;
  for (int i = 0; i < n; ++i) bad2 += y[i] != std::fma(2.5f, a[i], b[i]) && std::fabs(y[i] - (2.5f * a[i] + b[i])) > 1e-6f;
  std::printf("saxpy (grid-stride loop): %s\n", bad2 ? "MISMATCH" : "matches the CPU");
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  bool ok = !bad && !bad2 && e == cudaSuccess;
  std::printf("%s\n", ok ? "vector_add: all checks passed" : "vector_add: FAILED");
  return ok ? 0 : 1;
}
