// Ordering and error-semantics checks, each a case run in its own process
// (some end the process's context): `ordering CASE`. Prints "ok CASE" and
// exits 0, or prints "FAIL CASE: why" and exits 1. Every case checks what
// NVIDIA's runtime guarantees on a real GPU.
//
//   freehost    cudaFreeHost / cudaHostUnregister while a device-to-host copy
//               into the buffer is still queued: the copy must not land in
//               memory the program got back from malloc afterwards
//   query       8 threads poll cudaStreamQuery / cudaEventQuery after a
//               device-to-host copy into pinned memory: once they say done,
//               the bytes are there
//   hostfn      a host function queued after a device-to-host copy into
//               pinned memory, on the same stream (4 threads, 4 streams),
//               sees the copied bytes when it runs
//   sync        after each way of waiting (cudaStreamSynchronize,
//               cudaEventSynchronize, a second stream made to wait for the
//               first then synchronised, cudaDeviceSynchronize), a
//               device-to-host copy queued before is in the buffer (4 threads)
//   peer        cudaMemcpyPeer (and cudaMemcpy between two devices' memory) is
//               ordered after earlier work, and before later work, on the
//               source and destination devices (2 devices)
//   graphpeer   a graph on device 0 whose copy node writes device 1's memory
//               (2 devices): each launch's copy lands, after the kernel before it
//   destroy     cudaDeviceSynchronize waits for the work of a destroyed
//               non-blocking stream
//   sticky      after an illegal address every call, cudaGetLastError and
//               cudaPeekAtLastError included, on every thread, says so
//   launch      __launch_bounds__ and too much dynamic shared memory fail the
//               launch itself (cudaGetLastError right after <<<>>>); the
//               attributes and occupancy honour the bounds
//   stubs       an unsupported call does not become the thread's last error;
//               cudaProfilerStart/Stop, cudaStreamIsCapturing,
//               cudaDeviceGetLimit, cudaChooseDevice, cudaDeviceGetPCIBusId work
//   ptds        1,100 short-lived threads using cudaStreamPerThread
//   syncfault   a synchronous host-to-device cudaMemcpy returns an earlier
//               kernel fault
//   reset       cudaDeviceReset reinitialises __device__ variables
//   classify    device addresses are unmistakable: no host mapping can be
//               made over a device allocation; unifiedAddressing is truthful
//   printf      device printf output appears at the next synchronisation
//               point, not when the kernel happens to finish
//   pitch       cudaMallocPitch's pitch is the server's, 2D copies between
//               pitched allocations are exact
//   fork        a child that exits leaves the parent's session alone; a child
//               that calls CUDA gets an error instead of hanging
//   attrs       what the device reports is what works: cooperative launches
//               1, cluster launches 0; peer access as the backend can give it
//               (printed: the test compares per backend)
//   noimage     (built with -rdc=true for sm_75 only, as ordering_rdc: no
//               image the server can run) the launch itself fails with
//               cudaErrorNoKernelImageForDevice; nothing surfaces later
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cases.h"

using namespace cases;

// Keeps its stream busy for a while (the interpreter runs ~1e8 thread-instructions/s).
__global__ void spin(int iters, int* sink) {
  int acc = threadIdx.x;
  for (int i = 0; i < iters; ++i) acc = acc * 1664525 + 1013904223;
  if (acc == 42) *sink = acc;
}
__global__ void fillBytes(unsigned char* p, unsigned char v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
__global__ void fillInts(int* p, int v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
// Spins, then writes `v` everywhere: a late writer.
__global__ void slowFill(int* p, int v, int n, int iters) {
  int acc = threadIdx.x;
  for (int i = 0; i < iters; ++i) acc = acc * 1664525 + 1013904223;
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = acc == 42 ? 0 : v;
}
__global__ void illegal(int* p) { p[threadIdx.x + (1 << 26)] = 1; }
__global__ void __launch_bounds__(128) bounded(int* p) { p[threadIdx.x] = 1; }
__global__ void withShared(int* p) {
  extern __shared__ int s[];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  p[threadIdx.x] = s[threadIdx.x];
}
__global__ void say(int v) { printf("kernel says %d\n", v); }

__device__ int g_counter = 5;
__global__ void bump() { g_counter += 1; }

namespace {

// ---- freehost -------------------------------------------------------------------------------

void caseFreeHost() {
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  int* sink;
  check(cudaMalloc(&sink, 4), "cudaMalloc");
  for (size_t n : {size_t{64} << 10, size_t{1} << 20}) {
    unsigned char* dev;
    check(cudaMalloc(&dev, n), "cudaMalloc");
    fillBytes<<<16, 256, 0, s>>>(dev, 0xAB, static_cast<int>(n));
    check(cudaStreamSynchronize(s), "fill");
    for (int round = 0; round < 8; ++round) {
      bool registered = round % 2;
      unsigned char* h = nullptr;
      if (registered) {
        h = static_cast<unsigned char*>(std::malloc(n));
        check(cudaHostRegister(h, n, 0), "cudaHostRegister");
      } else {
        check(cudaMallocHost(&h, n), "cudaMallocHost");
      }
      spin<<<1, 32, 0, s>>>(20000, sink);  // the copy below waits behind this
      check(cudaMemcpyAsync(h, dev, n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
      if (registered) {
        check(cudaHostUnregister(h), "cudaHostUnregister");
        std::free(h);
      } else {
        check(cudaFreeHost(h), "cudaFreeHost");
      }
      // Likely the same memory again: it must not receive the copy.
      auto* m = static_cast<unsigned char*>(std::malloc(n));
      std::memset(m, 0x11, n);
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      for (size_t i = 0; i < n; ++i)
        if (m[i] != 0x11)
          fail("a copy queued before " + std::string(registered ? "cudaHostUnregister" : "cudaFreeHost") +
               " wrote byte " + std::to_string(i) + " of memory malloc returned afterwards (" + std::to_string(n) +
               "-byte buffer, round " + std::to_string(round) + ")");
      std::free(m);
    }
    check(cudaFree(dev), "cudaFree");
  }
}

// ---- query ------------------------------------------------------------------------------------

struct Seen {
  const int* h;
  int n, want;
  std::atomic<int>* stale;
};
void CUDART_CB checkCopied(void* p) {
  auto* s = static_cast<Seen*>(p);
  if (s->h[0] != s->want || s->h[s->n - 1] != s->want) ++*s->stale;
  delete s;
}

void caseHostFn() {
  constexpr int kThreads = 4, kRounds = 100, kInts = 4 << 10;
  std::atomic<int> stale{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t s;
      int *dev, *h;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) || cudaMalloc(&dev, kInts * 4) ||
          cudaMallocHost(&h, kRounds * kInts * 4)) {
        ++errors;
        return;
      }
      for (int r = 0; r < kRounds; ++r) {
        int v = t * 1000 + r + 1;
        fillInts<<<8, 128, 0, s>>>(dev, v, kInts);
        if (cudaMemcpyAsync(h + r * kInts, dev, kInts * 4, cudaMemcpyDeviceToHost, s) ||
            cudaLaunchHostFunc(s, checkCopied, new Seen{h + r * kInts, kInts, v, &stale}))
          ++errors;
      }
      if (cudaStreamSynchronize(s)) ++errors;
      cudaFreeHost(h);
      cudaFree(dev);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  if (errors) fail(std::to_string(errors.load()) + " calls failed");
  if (stale)
    fail(std::to_string(stale.load()) + " of " + std::to_string(kThreads * kRounds) +
         " host functions ran before the copy queued ahead of them had landed");
}

void caseQuery() {
  constexpr int kThreads = 8, kRounds = 75, kInts = 16 << 10;
  std::atomic<int> stale{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t s;
      int *dev, *h;
      cudaEvent_t e;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) || cudaMalloc(&dev, kInts * 4) ||
          cudaMallocHost(&h, kInts * 4) || cudaEventCreateWithFlags(&e, cudaEventDisableTiming)) {
        ++errors;
        return;
      }
      for (int r = 0; r < kRounds; ++r) {
        int v = t * 1000 + r + 1;
        fillInts<<<8, 128, 0, s>>>(dev, v, kInts);
        cudaMemcpyAsync(h, dev, kInts * 4, cudaMemcpyDeviceToHost, s);
        cudaError_t q;
        if (r % 2) {
          cudaEventRecord(e, s);
          while ((q = cudaEventQuery(e)) == cudaErrorNotReady) {
          }
        } else {
          while ((q = cudaStreamQuery(s)) == cudaErrorNotReady) {
          }
        }
        if (q != cudaSuccess) ++errors;
        else if (h[0] != v || h[kInts - 1] != v) ++stale;
      }
      cudaFreeHost(h);
      cudaFree(dev);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  if (errors) fail(std::to_string(errors.load()) + " calls failed");
  if (stale)
    fail(std::to_string(stale.load()) + " of " + std::to_string(kThreads * kRounds) +
         " polls said complete before the copied data was in the buffer");
}

// Every way of waiting vouches for the copies it waited for: the reply that
// ends the wait never overtakes theirs.
void caseSync() {
  constexpr int kThreads = 4, kRounds = 500, kInts = 4 << 10;
  std::atomic<int> stale{0}, errors{0};
  std::atomic<int> stale_by[4] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t s, other;
      int *dev, *h;
      cudaEvent_t e;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) ||
          cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) || cudaMalloc(&dev, kInts * 4) ||
          cudaMallocHost(&h, kInts * 4) || cudaEventCreateWithFlags(&e, cudaEventDisableTiming)) {
        ++errors;
        return;
      }
      for (int r = 0; r < kRounds; ++r) {
        int v = t * 1000 + r + 1;
        fillInts<<<8, 128, 0, s>>>(dev, v, kInts);
        cudaError_t q = cudaMemcpyAsync(h, dev, kInts * 4, cudaMemcpyDeviceToHost, s);
        const int how = r % 4;
        if (!q && how == 0) q = cudaStreamSynchronize(s);
        if (!q && how == 1 && !(q = cudaEventRecord(e, s))) q = cudaEventSynchronize(e);
        if (!q && how == 2 && !(q = cudaEventRecord(e, s)) && !(q = cudaStreamWaitEvent(other, e, 0)))
          q = cudaStreamSynchronize(other);
        if (!q && how == 3) q = cudaDeviceSynchronize();
        if (q) ++errors;
        else if (h[0] != v || h[kInts - 1] != v) ++stale, ++stale_by[how];
      }
      cudaEventDestroy(e);
      cudaFreeHost(h);
      cudaFree(dev);
      cudaStreamDestroy(s);
      cudaStreamDestroy(other);
    });
  for (auto& t : threads) t.join();
  if (errors) fail(std::to_string(errors.load()) + " calls failed");
  if (stale)
    fail(std::to_string(stale.load()) + " of " + std::to_string(kThreads * kRounds) +
         " waits returned before the copy queued ahead of them had landed (stream, event, other stream, device: " +
         std::to_string(stale_by[0].load()) + ", " + std::to_string(stale_by[1].load()) + ", " +
         std::to_string(stale_by[2].load()) + ", " + std::to_string(stale_by[3].load()) + ")");
}

// ---- peer -------------------------------------------------------------------------------------

void caseGraphPeer() {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count < 2) fail("needs 2 devices, the server offers " + std::to_string(count));
  constexpr int n = 4096;
  int *a, *b;
  check(cudaSetDevice(1), "cudaSetDevice");
  check(cudaMalloc(&b, n * 4), "cudaMalloc");
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaMalloc(&a, n * 4), "cudaMalloc");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  // The fill value is a kernel parameter the executable graph is updated with.
  int v = 0;
  cudaGraph_t g;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  fillInts<<<8, 128, 0, s>>>(a, v, n);
  check(cudaMemcpyAsync(b, a, n * 4, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync between devices");
  check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  cudaGraphExec_t e;
  check(cudaGraphInstantiate(&e, g, 0), "cudaGraphInstantiate");
  cudaGraphNode_t nodes[2];
  size_t num = 2;
  check(cudaGraphGetNodes(g, nodes, &num), "cudaGraphGetNodes");
  std::vector<int> h(n);
  for (int round = 1; round <= 5; ++round) {
    cudaKernelNodeParams kp;
    cudaGraphNodeType t;
    check(cudaGraphNodeGetType(nodes[0], &t), "cudaGraphNodeGetType");
    cudaGraphNode_t kernel = t == cudaGraphNodeTypeKernel ? nodes[0] : nodes[1];
    check(cudaGraphKernelNodeGetParams(kernel, &kp), "cudaGraphKernelNodeGetParams");
    int value = round * 11;
    void* args[] = {&a, &value, const_cast<int*>(&n)};
    kp.kernelParams = args;
    check(cudaGraphExecKernelNodeSetParams(e, kernel, &kp), "cudaGraphExecKernelNodeSetParams");
    check(cudaGraphLaunch(e, s), "cudaGraphLaunch");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    check(cudaSetDevice(1), "cudaSetDevice");
    check(cudaMemcpy(h.data(), b, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy from device 1");
    check(cudaSetDevice(0), "cudaSetDevice");
    if (h[0] != value || h[n - 1] != value)
      fail("round " + std::to_string(round) + ": device 1 holds " + std::to_string(h[0]) + ", expected " +
           std::to_string(value));
  }
  check(cudaGraphExecDestroy(e), "cudaGraphExecDestroy");
  check(cudaGraphDestroy(g), "cudaGraphDestroy");
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  check(cudaFree(a), "cudaFree");
  check(cudaFree(b), "cudaFree");
}

void casePeer() {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count < 2) fail("needs 2 devices, the server offers " + std::to_string(count));
  constexpr int n = 4096;
  int *a, *b;
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaMalloc(&a, n * 4), "cudaMalloc");
  check(cudaSetDevice(1), "cudaSetDevice");
  check(cudaMalloc(&b, n * 4), "cudaMalloc");
  check(cudaMemset(b, 0, n * 4), "cudaMemset");
  for (int round = 0; round < 6; ++round) {
    // Earlier work on the source device: the copy must see its result.
    check(cudaSetDevice(0), "cudaSetDevice");
    slowFill<<<1, 128>>>(a, 100 + round, n, 40000);
    check(cudaSetDevice(1), "cudaSetDevice");
    // cudaMemcpyPeer, and a plain cudaMemcpy between the devices' memory (a peer copy as well).
    if (round % 2) check(cudaMemcpy(b, a, n * 4, cudaMemcpyDeviceToDevice), "cudaMemcpy between devices");
    else check(cudaMemcpyPeer(b, 1, a, 0, n * 4), "cudaMemcpyPeer");
    // Later work on the source device must not overtake the copy.
    check(cudaSetDevice(0), "cudaSetDevice");
    fillInts<<<4, 128>>>(a, -1, n);
    check(cudaSetDevice(1), "cudaSetDevice");
    std::vector<int> h(n);
    check(cudaMemcpy(h.data(), b, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (int i = 0; i < n; ++i)
      if (h[i] != 100 + round)
        fail("round " + std::to_string(round) + ": element " + std::to_string(i) + " is " + std::to_string(h[i]) +
             ", expected " + std::to_string(100 + round) + " (the peer copy was not ordered with device 0's work)");
  }
  // Device 0 and 1 agree afterwards.
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// ---- destroy -----------------------------------------------------------------------------------

void caseDestroy() {
  constexpr int n = 1024;
  int* p;
  check(cudaMalloc(&p, n * 4), "cudaMalloc");
  for (int round = 0; round < 4; ++round) {
    check(cudaMemset(p, 0, n * 4), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    slowFill<<<1, 128, 0, s>>>(p, 7 + round, n, 40000);
    check(cudaStreamDestroy(s), "cudaStreamDestroy");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<int> h(n);
    // From another (non-blocking) stream: not implicitly ordered after anything.
    cudaStream_t r;
    check(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMemcpyAsync(h.data(), p, n * 4, cudaMemcpyDeviceToHost, r), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(r), "cudaStreamSynchronize");
    check(cudaStreamDestroy(r), "cudaStreamDestroy");
    for (int i = 0; i < n; ++i)
      if (h[i] != 7 + round)
        fail("cudaDeviceSynchronize returned before the work of a destroyed stream was done (element " +
             std::to_string(i) + " is " + std::to_string(h[i]) + ")");
  }
}

// ---- sticky --------------------------------------------------------------------------------------

void caseSticky() {
  int* p;
  check(cudaMalloc(&p, 64), "cudaMalloc");
  illegal<<<1, 32>>>(p);
  expect(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "cudaDeviceSynchronize after the fault");
  expect(cudaGetLastError(), cudaErrorIllegalAddress, "cudaGetLastError");
  expect(cudaGetLastError(), cudaErrorIllegalAddress, "cudaGetLastError a second time");
  expect(cudaPeekAtLastError(), cudaErrorIllegalAddress, "cudaPeekAtLastError");
  void* q = nullptr;
  expect(cudaMalloc(&q, 16), cudaErrorIllegalAddress, "cudaMalloc after the fault");
  cudaError_t other_last = cudaSuccess, other_peek = cudaSuccess, other_call = cudaSuccess;
  std::thread([&] {
    other_last = cudaGetLastError();
    other_peek = cudaPeekAtLastError();
    other_call = cudaDeviceSynchronize();
  }).join();
  expect(other_last, cudaErrorIllegalAddress, "cudaGetLastError on another thread");
  expect(other_peek, cudaErrorIllegalAddress, "cudaPeekAtLastError on another thread");
  expect(other_call, cudaErrorIllegalAddress, "cudaDeviceSynchronize on another thread");
}

// ---- launch --------------------------------------------------------------------------------------

void caseLaunch() {
  int* p;
  check(cudaMalloc(&p, 4096 * 4), "cudaMalloc");
  cudaFuncAttributes a{};
  check(cudaFuncGetAttributes(&a, bounded), "cudaFuncGetAttributes");
  if (a.maxThreadsPerBlock != 128)
    fail("maxThreadsPerBlock of a __launch_bounds__(128) kernel is " + std::to_string(a.maxThreadsPerBlock));
  int blocks = -1;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bounded, 256, 0), "occupancy");
  if (blocks != 0) fail("occupancy of 256-thread blocks of a 128-bounded kernel is " + std::to_string(blocks));
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bounded, 128, 0), "occupancy");
  if (blocks <= 0) fail("occupancy of 128-thread blocks of a 128-bounded kernel is " + std::to_string(blocks));

  bounded<<<1, 256>>>(p);  // past the bounds
  expect(cudaGetLastError(), cudaErrorLaunchOutOfResources, "cudaGetLastError after a launch past __launch_bounds__");
  bounded<<<1, 128>>>(p);
  check(cudaGetLastError(), "a launch within the bounds");
  withShared<<<1, 32, 64 << 10>>>(p);  // 64 KiB of dynamic shared memory without opting in
  expect(cudaGetLastError(), cudaErrorInvalidValue, "cudaGetLastError after a launch with 64 KiB of dynamic shared memory");
  check(cudaFuncSetAttribute(withShared, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10), "cudaFuncSetAttribute");
  withShared<<<1, 32, 64 << 10>>>(p);
  check(cudaGetLastError(), "the same launch after opting in");
  bounded<<<1, 2048>>>(p);  // past the device's limit
  expect(cudaGetLastError(), cudaErrorInvalidConfiguration, "cudaGetLastError after a 2048-thread block");
  // Nothing of these surfaces later, on this thread or another.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the refused launches");
  cudaError_t other = cudaSuccess;
  std::thread([&] { other = cudaDeviceSynchronize(); }).join();
  check(other, "cudaDeviceSynchronize on another thread");
  check(cudaGetLastError(), "cudaGetLastError at the end");
}

// ---- stubs ---------------------------------------------------------------------------------------

void caseStubs() {
  cudaIpcMemHandle_t ipc;
  void* any = nullptr;
  check(cudaMalloc(&any, 64), "cudaMalloc");
  cudaError_t e = cudaIpcGetMemHandle(&ipc, any);  // not supported by rgpu (handles of another machine)
  if (e != cudaSuccess) expect(cudaGetLastError(), cudaSuccess, "cudaGetLastError after an unsupported call");
  check(cudaFree(any), "cudaFree");
  check(cudaProfilerStart(), "cudaProfilerStart");
  check(cudaProfilerStop(), "cudaProfilerStop");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
  check(cudaStreamIsCapturing(s, &st), "cudaStreamIsCapturing");
  if (st != cudaStreamCaptureStatusNone) fail("a fresh stream reports it is capturing");
  size_t fifo = 0, stack = 0, heap = 0;
  check(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize), "cudaDeviceGetLimit(printf FIFO)");
  check(cudaDeviceGetLimit(&stack, cudaLimitStackSize), "cudaDeviceGetLimit(stack)");
  check(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize), "cudaDeviceGetLimit(heap)");
  if (fifo != (1u << 20)) fail("printf FIFO is " + std::to_string(fifo) + " bytes, CUDA's default is 1 MiB");
  check(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 4 << 20), "cudaDeviceSetLimit");
  check(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize), "cudaDeviceGetLimit");
  if (fifo != (4u << 20)) fail("cudaDeviceSetLimit did not take: " + std::to_string(fifo));
  cudaDeviceProp want{};
  want.major = 1;
  int dev = -1;
  check(cudaChooseDevice(&dev, &want), "cudaChooseDevice");
  if (dev != 0) fail("cudaChooseDevice chose " + std::to_string(dev));
  char bus[32] = {};
  check(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), "cudaDeviceGetPCIBusId");
  unsigned dom = 0, b = 0, d = 0, f = 0;
  if (std::sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &f) != 4) fail(std::string("PCI bus id '") + bus + "'");
  int back = -1;
  check(cudaDeviceGetByPCIBusId(&back, bus), "cudaDeviceGetByPCIBusId");
  if (back != 0) fail("cudaDeviceGetByPCIBusId gave " + std::to_string(back));
  expect(cudaGetLastError(), cudaSuccess, "cudaGetLastError at the end");
}

// ---- ptds ----------------------------------------------------------------------------------------

void casePtds() {
  int* p;
  check(cudaMalloc(&p, 4096), "cudaMalloc");
  for (int i = 0; i < 1100; ++i) {
    cudaError_t e = cudaSuccess;
    std::thread([&] {
      e = cudaMemsetAsync(p, i & 0xff, 4096, cudaStreamPerThread);
      if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamPerThread);
    }).join();
    if (e != cudaSuccess) fail("thread " + std::to_string(i) + ": " + cudaGetErrorName(e));
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate after the threads");
}

// ---- syncfault -----------------------------------------------------------------------------------

void caseSyncFault() {
  int* p;
  check(cudaMalloc(&p, 64), "cudaMalloc");
  int host[16] = {};
  illegal<<<1, 32>>>(p);
  expect(cudaMemcpy(p, host, sizeof host, cudaMemcpyHostToDevice), cudaErrorIllegalAddress,
         "a synchronous host-to-device cudaMemcpy after a faulting kernel");
}

// ---- reset ---------------------------------------------------------------------------------------

void caseReset() {
  bump<<<1, 1>>>();
  int v = 0;
  check(cudaMemcpyFromSymbol(&v, g_counter, sizeof v), "cudaMemcpyFromSymbol");
  if (v != 6) fail("g_counter is " + std::to_string(v) + " after one bump");
  check(cudaDeviceReset(), "cudaDeviceReset");
  check(cudaMemcpyFromSymbol(&v, g_counter, sizeof v), "cudaMemcpyFromSymbol after reset");
  if (v != 5) fail("after cudaDeviceReset g_counter is " + std::to_string(v) + ", its initial value is 5");
  bump<<<1, 1>>>();
  check(cudaMemcpyFromSymbol(&v, g_counter, sizeof v), "cudaMemcpyFromSymbol");
  if (v != 6) fail("g_counter is " + std::to_string(v) + " after a bump following the reset");
}

// ---- classify ------------------------------------------------------------------------------------

void caseClassify() {
  const long page = sysconf(_SC_PAGESIZE);
  for (int round = 0; round < 16; ++round) {
    size_t n = (round % 2 ? 3 * page : 256) + round * 64;
    char* dev;
    check(cudaMalloc(&dev, n), "cudaMalloc");
    // A host mapping over the device range: impossible, or the runtime could
    // not tell the two apart.
    uintptr_t start = reinterpret_cast<uintptr_t>(dev) / page * page;
    void* m = mmap(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != MAP_FAILED) {
      bool there = m == reinterpret_cast<void*>(start);
      char* host = static_cast<char*>(m);
      char src[64];
      std::memset(src, 0x3c, sizeof src);
      char* in_range = host + (reinterpret_cast<uintptr_t>(dev) - start);
      cudaError_t e = there ? cudaMemcpy(in_range, src, 64, cudaMemcpyDefault) : cudaSuccess;
      bool wrote_host = there && in_range[0] == 0x3c;
      munmap(m, page);
      if (there)
        fail("a host page could be mapped over device allocation " + std::to_string(reinterpret_cast<uintptr_t>(dev)) +
             "; cudaMemcpyDefault host-to-host into it " +
             (wrote_host ? std::string("worked") : "went to the device (" + std::string(cudaGetErrorName(e)) + ")"));
    }
    cudaPointerAttributes pa{};
    check(cudaPointerGetAttributes(&pa, dev + n - 1), "cudaPointerGetAttributes");
    if (pa.type != cudaMemoryTypeDevice) fail("the last byte of an allocation is not device memory");
    check(cudaFree(dev), "cudaFree");
  }
  int uva = -1, map = -1;
  check(cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, 0), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&map, cudaDevAttrCanMapHostMemory, 0), "cudaDeviceGetAttribute");
  // A kernel cannot reach this process's pinned memory by its host address
  // over the network: mapped memory has a device alias (cudaHostGetDevicePointer).
  if (uva != 0 || map != 1)
    fail("unifiedAddressing " + std::to_string(uva) + ", canMapHostMemory " + std::to_string(map) +
         ": through rgpu kernels reach mapped host memory by its device alias only");
  // Host memory still classifies as host.
  std::vector<char> a(4096, 1), b(4096, 2);
  check(cudaMemcpy(b.data(), a.data(), 4096, cudaMemcpyDefault), "cudaMemcpyDefault host to host");
  if (b[4095] != 1) fail("cudaMemcpyDefault host to host did not copy");
}

// ---- printf --------------------------------------------------------------------------------------

void casePrintf() {
  say<<<1, 1>>>(1);
  while (cudaStreamQuery(0) == cudaErrorNotReady) {
  }
  // The kernel is done, but its output waits for a synchronisation point.
  std::printf("host after the kernel\n");
  std::fflush(stdout);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::printf("host after synchronising\n");
  std::fflush(stdout);
}

// ---- pitch ---------------------------------------------------------------------------------------

void casePitch() {
  const size_t w = 150 * sizeof(float), h = 37;
  float *a, *b;
  size_t pa = 0, pb = 0;
  check(cudaMallocPitch(reinterpret_cast<void**>(&a), &pa, w, h), "cudaMallocPitch");
  check(cudaMallocPitch(reinterpret_cast<void**>(&b), &pb, w, h), "cudaMallocPitch");
  if (pa < w || pb < w) fail("pitch below the width");
  std::printf("pitch %zu\n", pa);
  std::vector<float> host(w / 4 * h), back(w / 4 * h, 0);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  check(cudaMemcpy2D(a, pa, host.data(), w, w, h, cudaMemcpyHostToDevice), "cudaMemcpy2D HtoD");
  check(cudaMemcpy2D(b, pb, a, pa, w, h, cudaMemcpyDeviceToDevice), "cudaMemcpy2D DtoD");
  check(cudaMemcpy2D(back.data(), w, b, pb, w, h, cudaMemcpyDeviceToHost), "cudaMemcpy2D DtoH");
  for (size_t i = 0; i < host.size(); ++i)
    if (back[i] != host[i]) fail("element " + std::to_string(i) + " differs after the 2D round trip");
  // A pitch the program chose (not the allocator's) works too.
  float* c;
  check(cudaMalloc(&c, w * h), "cudaMalloc");
  check(cudaMemcpy2D(c, w, b, pb, w, h, cudaMemcpyDeviceToDevice), "cudaMemcpy2D DtoD, packed");
  std::fill(back.begin(), back.end(), 0.f);
  check(cudaMemcpy(back.data(), c, w * h, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (size_t i = 0; i < host.size(); ++i)
    if (back[i] != host[i]) fail("element " + std::to_string(i) + " differs after the packed 2D copy");
}

// ---- fork ----------------------------------------------------------------------------------------

void caseFork() {
  constexpr int n = 256;
  int* p;
  check(cudaMalloc(&p, n * 4), "cudaMalloc");
  fillInts<<<1, 128>>>(p, 77, n);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::fflush(stdout);
  // A child that only exits (running its atexit handlers).
  pid_t c = fork();
  if (c == 0) std::exit(0);
  int status = 0;
  waitpid(c, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("the exiting child did not exit cleanly");
  std::vector<int> h(n);
  check(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost), "the parent's cudaMemcpy after a child exited");
  if (h[n - 1] != 77) fail("the parent's memory changed after a child exited");
  // A child that calls CUDA gets an error, quickly.
  c = fork();
  if (c == 0) {
    alarm(20);
    void* q = nullptr;
    cudaError_t e = cudaMalloc(&q, 16);
    cudaError_t s = cudaDeviceSynchronize();
    std::_Exit(e == cudaErrorInitializationError && s == cudaErrorInitializationError ? 0 : 10 + (e ? 1 : 0));
  }
  waitpid(c, &status, 0);
  if (WIFSIGNALED(status)) fail("a child calling CUDA was killed by signal " + std::to_string(WTERMSIG(status)) + " (a hang?)");
  if (WEXITSTATUS(status) != 0) fail("a child calling CUDA did not get cudaErrorInitializationError (" + std::to_string(WEXITSTATUS(status)) + ")");
  check(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost), "the parent's cudaMemcpy after a child called CUDA");
  if (h[0] != 77) fail("the parent's memory changed after a child called CUDA");
  check(cudaFree(p), "cudaFree");
}

// ---- attrs ---------------------------------------------------------------------------------------

void caseAttrs() {
  int coop = -1, cluster = -1, peer = -1, p2p = -1;
  check(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, 0), "cudaDeviceGetAttribute");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (coop != 1 || prop.cooperativeLaunch != 1) fail("cooperative launches work, but are not reported");
  if ((cluster != 0) != (prop.major >= 9) || prop.clusterLaunch != cluster)
    fail("thread-block clusters must be reported exactly where the device (compute capability 9.0+) has them");
  check(cudaDeviceCanAccessPeer(&peer, 0, 1), "cudaDeviceCanAccessPeer");
  check(cudaDeviceGetP2PAttribute(&p2p, cudaDevP2PAttrAccessSupported, 0, 1), "cudaDeviceGetP2PAttribute");
  if (p2p != peer) fail("cudaDeviceGetP2PAttribute and cudaDeviceCanAccessPeer disagree");
  cudaError_t enable = cudaDeviceEnablePeerAccess(1, 0);
  if (peer && enable != cudaSuccess) fail(std::string("peer access reported but enabling it failed: ") + cudaGetErrorName(enable));
  if (!peer) expect(enable, cudaErrorPeerAccessUnsupported, "cudaDeviceEnablePeerAccess without peer access");
  if (peer) expect(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled, "enabling twice");
  std::printf("canAccessPeer %d\n", peer);
  // The refusals are answers, not errors that linger.
  (void)cudaGetLastError();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// ---- noimage -------------------------------------------------------------------------------------

void caseNoImage() {
  int* p;
  check(cudaMalloc(&p, 4096), "cudaMalloc");
  fillInts<<<1, 32>>>(p, 1, 32);
  expect(cudaGetLastError(), cudaErrorNoKernelImageForDevice, "cudaGetLastError after launching a kernel with no usable image");
  cudaFuncAttributes a{};
  expect(cudaFuncGetAttributes(&a, fillInts), cudaErrorNoKernelImageForDevice, "cudaFuncGetAttributes");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the refused launch");
  cudaError_t other = cudaSuccess;
  std::thread([&] { other = cudaDeviceSynchronize(); }).join();
  check(other, "cudaDeviceSynchronize on another thread");
  check(cudaMemset(p, 0, 4096), "cudaMemset");
}

struct Case {
  const char* name;
  void (*run)();
};
const Case kCases[] = {
    {"freehost", caseFreeHost}, {"query", caseQuery},   {"hostfn", caseHostFn}, {"sync", caseSync}, {"graphpeer", caseGraphPeer},   {"peer", casePeer},         {"destroy", caseDestroy},
    {"sticky", caseSticky},     {"launch", caseLaunch}, {"stubs", caseStubs},       {"ptds", casePtds},
    {"syncfault", caseSyncFault}, {"reset", caseReset}, {"classify", caseClassify}, {"printf", casePrintf},
    {"pitch", casePitch},       {"fork", caseFork},       {"noimage", caseNoImage},   {"attrs", caseAttrs},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ordering CASE\n");
    return 2;
  }
  for (const Case& c : kCases)
    if (!std::strcmp(argv[1], c.name)) {
      g_case = c.name;
      c.run();
      std::printf("ok %s\n", c.name);
      return 0;
    }
  std::fprintf(stderr, "unknown case %s\n", argv[1]);
  return 2;
}
