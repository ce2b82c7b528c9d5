// A steady mix of CUDA calls whose every result is checked, for the session
// resume tests: the test cuts the connection to the server in the middle (even
// mid-frame) and this program must still finish with every result right —
// nothing lost, nothing done twice:
//  - synchronous host-to-device and device-to-host copies of a fresh pattern,
//  - an asynchronous copy from pinned memory and kernels that transform it,
//  - a kernel that counts its own launches with an atomic (a replayed launch
//    would count twice, a lost one not at all),
//  - host functions in stream order (counted the same way),
//  - device printf lines ("tick N"), which the test counts: exactly once each.
//
//   resume_client [iterations]   run and check; exit 0 when all checks pass
//   resume_client hold           allocate, print "holding", then call until a call fails; print it and exit 3
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    cudaError_t e_ = (call);                                                                          \
    if (e_ != cudaSuccess) {                                                                          \
      std::printf("resume_client: %s failed: %s (%s)\n", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)

__global__ void countLaunch(unsigned long long* counter) { atomicAdd(counter, 1ull); }

__global__ void addOne(unsigned* p, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) p[i] += 1u;
}

__global__ void mix(unsigned* dst, const unsigned* src, size_t n, unsigned k) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = src[i] * 3u + k;
}

__global__ void tick(int n) { printf("tick %d\n", n); }

static unsigned pattern(int it, size_t i) { return static_cast<unsigned>(it) * 2654435761u + static_cast<unsigned>(i); }

static void hostCount(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc > 1 && std::strcmp(argv[1], "hold") == 0) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 1 << 20));
    std::printf("holding\n");
    for (;;) {
      cudaError_t e = cudaMemset(p, 1, 1 << 20);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      if (e != cudaSuccess) {
        std::printf("resume_client: a call failed: %s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
        return 3;
      }
    }
  }
  int iters = argc > 1 ? std::atoi(argv[1]) : 120;
  const size_t n = 64 * 1024;
  const size_t bytes = n * sizeof(unsigned);
  unsigned *d_a = nullptr, *d_b = nullptr;
  unsigned long long* d_count = nullptr;
  CHECK(cudaMalloc(&d_a, bytes));
  CHECK(cudaMalloc(&d_b, bytes));
  CHECK(cudaMalloc(&d_count, sizeof *d_count));
  CHECK(cudaMemset(d_count, 0, sizeof *d_count));
  unsigned* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, bytes));
  std::vector<unsigned> in(n), out(n);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::atomic<int> host_calls{0};
  unsigned long long launches = 0;
  const unsigned threads = 256, blocks = static_cast<unsigned>((n + threads - 1) / threads);
  for (int it = 0; it < iters; ++it) {
    for (size_t i = 0; i < n; ++i) in[i] = pattern(it, i);
    CHECK(cudaMemcpy(d_a, in.data(), bytes, cudaMemcpyHostToDevice));
    addOne<<<blocks, threads>>>(d_a, n);
    for (int k = 0; k < 3; ++k) countLaunch<<<1, 1>>>(d_count);
    launches += 3;
    CHECK(cudaMemcpy(out.data(), d_a, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i)
      if (out[i] != pattern(it, i) + 1u) {
        std::printf("resume_client: iteration %d: element %zu is %u, want %u\n", it, i, out[i], pattern(it, i) + 1u);
        return 1;
      }
    // Stream work from pinned memory, with a host function after it.
    for (size_t i = 0; i < n; ++i) pinned[i] = pattern(it + 7, i);
    CHECK(cudaMemcpyAsync(d_b, pinned, bytes, cudaMemcpyHostToDevice, s));
    mix<<<blocks, threads, 0, s>>>(d_b, d_b, n, static_cast<unsigned>(it));
    CHECK(cudaLaunchHostFunc(s, hostCount, &host_calls));
    CHECK(cudaStreamSynchronize(s));
    if (host_calls.load() != it + 1) {
      std::printf("resume_client: iteration %d: %d host functions ran, want %d\n", it, host_calls.load(), it + 1);
      return 1;
    }
    CHECK(cudaMemcpy(out.data(), d_b, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 97)
      if (out[i] != pattern(it + 7, i) * 3u + static_cast<unsigned>(it)) {
        std::printf("resume_client: iteration %d: mixed element %zu is wrong\n", it, i);
        return 1;
      }
    if (it % 10 == 0) tick<<<1, 1>>>(it);
    if (it % 8 == 7) {
      unsigned long long counted = 0;
      CHECK(cudaMemcpy(&counted, d_count, sizeof counted, cudaMemcpyDeviceToHost));
      if (counted != launches) {
        std::printf("resume_client: iteration %d: %llu launches counted, %llu made\n", it, counted, launches);
        return 1;
      }
    }
  }
  CHECK(cudaDeviceSynchronize());
  unsigned long long counted = 0;
  CHECK(cudaMemcpy(&counted, d_count, sizeof counted, cudaMemcpyDeviceToHost));
  if (counted != launches) {
    std::printf("resume_client: %llu launches counted, %llu made\n", counted, launches);
    return 1;
  }
  // Pinned memory freed right after an asynchronous copy from it: the copy is
  // sent from the buffer itself (and replayed from it), so cudaFreeHost waits
  // until the server has it.
  for (size_t i = 0; i < n; ++i) pinned[i] = pattern(iters + 11, i);
  CHECK(cudaMemcpyAsync(d_b, pinned, bytes, cudaMemcpyHostToDevice, s));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(out.data(), d_b, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i)
    if (out[i] != pattern(iters + 11, i)) {
      std::printf("resume_client: the copy from freed pinned memory: element %zu is wrong\n", i);
      return 1;
    }
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_count));
  std::printf("resume_client: %d iterations, %llu launches counted, %d host functions: all checks passed\n", iters,
              counted, host_calls.load());
  return 0;
}
