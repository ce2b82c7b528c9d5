// Streams, events and host callbacks through rgpu: ordering across streams,
// event timing, and host functions that run on this machine in stream order.
#include <atomic>
#include <cstdio>
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

static std::vector<int> g_order;
static void CUDART_CB mark(void* p) { g_order.push_back(static_cast<int>(reinterpret_cast<intptr_t>(p))); }

int main() {
  const size_t bytes = 8 << 20;
  std::vector<char> host(bytes, 7), back(bytes);
  char* d;
  CHECK(cudaMalloc(&d, bytes));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreate(&s2));
  cudaEvent_t start, stop, copied;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));

  CHECK(cudaEventRecord(start, s1));
  CHECK(cudaMemcpyAsync(d, host.data(), bytes, cudaMemcpyHostToDevice, s1));
  CHECK(cudaLaunchHostFunc(s1, mark, reinterpret_cast<void*>(1)));
  CHECK(cudaEventRecord(copied, s1));
  // s2 waits for the copy on s1 before overwriting the first megabyte.
  CHECK(cudaStreamWaitEvent(s2, copied, 0));
  CHECK(cudaMemsetAsync(d, 3, 1 << 20, s2));
  CHECK(cudaLaunchHostFunc(s2, mark, reinterpret_cast<void*>(2)));
  CHECK(cudaEventRecord(stop, s2));
  CHECK(cudaEventSynchronize(stop));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
  bool ok = back[0] == 3 && back[(1 << 20) - 1] == 3 && back[1 << 20] == 7 && back[bytes - 1] == 7;
  std::printf("cross-stream ordering with cudaStreamWaitEvent: %s\n", ok ? "correct" : "WRONG");
  bool order = g_order.size() == 2 && g_order[0] == 1 && g_order[1] == 2;
  std::printf("host functions ran in stream order on the client: %s\n", order ? "yes" : "NO");
  std::printf("elapsed between events: %s (%.3f ms)\n", ms >= 0 ? "measured" : "MISSING", ms);
  cudaError_t q = cudaStreamQuery(s2);
  std::printf("cudaStreamQuery after synchronisation: %s\n", cudaGetErrorName(q));
  cudaError_t nt = cudaEventElapsedTime(&ms, start, copied);
  std::printf("elapsed time with a cudaEventDisableTiming event: %s\n", cudaGetErrorName(nt));
  ok = ok && order && ms >= 0 && q == cudaSuccess && nt == cudaErrorInvalidResourceHandle;
  // The special handles: cudaStreamLegacy (0x1) and cudaStreamPerThread (0x2).
  CHECK(cudaMemsetAsync(d, 5, 16, cudaStreamLegacy));
  CHECK(cudaMemsetAsync(d + 16, 6, 16, cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  char special[32];
  CHECK(cudaMemcpy(special, d, sizeof special, cudaMemcpyDeviceToHost));
  bool handles = special[0] == 5 && special[15] == 5 && special[16] == 6 && special[31] == 6;
  std::printf("cudaStreamLegacy and cudaStreamPerThread: %s\n", handles ? "work" : "BROKEN");
  ok = ok && handles;
  cudaGetLastError();
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaEventDestroy(copied));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(d));
  CHECK(cudaDeviceSynchronize());
  std::printf("%s\n", ok ? "streams: all checks passed" : "streams: FAILED");
  return ok ? 0 : 1;
}
