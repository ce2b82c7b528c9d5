// Large copies each way, checked word by word: what striped bulk transfer
// (common/stripes.h) carries. Each iteration copies a fresh pattern to the
// device (pageable cudaMemcpy, and cudaMemcpyAsync from pinned memory), adds
// the iteration number there, and copies both back (pageable and into pinned
// memory). Usage: stripe_client ITERATIONS MIB [PAUSE_MS]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define CHECK(x)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::printf("stripe_client: %s failed: %s\n", #x, cudaGetErrorString(e_));           \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

__global__ void addTo(unsigned* p, size_t n, unsigned k) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] += k;
}

static unsigned pattern(size_t i, int it, int which) {
  unsigned x = static_cast<unsigned>(i) * 2654435761u ^ static_cast<unsigned>(it * 40503 + which * 977);
  return x ^ (x >> 15);
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 4;
  const size_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 24;
  const int pause_ms = argc > 3 ? std::atoi(argv[3]) : 0;
  const size_t n = mib * (1u << 20) / sizeof(unsigned);
  std::vector<unsigned> host(n), back(n);
  unsigned *pinned = nullptr, *pinned_back = nullptr, *a = nullptr, *b = nullptr;
  CHECK(cudaMallocHost(&pinned, n * sizeof(unsigned)));
  CHECK(cudaMallocHost(&pinned_back, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&a, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&b, n * sizeof(unsigned)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  size_t wrong = 0;
  for (int it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < n; ++i) {
      host[i] = pattern(i, it, 0);
      pinned[i] = pattern(i, it, 1);
    }
    CHECK(cudaMemcpy(a, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyAsync(b, pinned, n * sizeof(unsigned), cudaMemcpyHostToDevice, s));
    addTo<<<64, 256, 0, s>>>(b, n, static_cast<unsigned>(it));
    CHECK(cudaMemcpyAsync(pinned_back, b, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    addTo<<<64, 256>>>(a, n, static_cast<unsigned>(it));
    CHECK(cudaMemcpy(back.data(), a, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; ++i) {
      wrong += back[i] != pattern(i, it, 0) + static_cast<unsigned>(it);
      wrong += pinned_back[i] != pattern(i, it, 1) + static_cast<unsigned>(it);
    }
    if (pause_ms) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFreeHost(pinned_back));
  if (wrong) {
    std::printf("stripe_client: %zu wrong words\n", wrong);
    return 1;
  }
  std::printf("stripe_client: %d iterations of %zu MiB each way, twice: all checks passed\n", iterations, mib);
  return 0;
}
