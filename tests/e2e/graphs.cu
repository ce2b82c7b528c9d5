// CUDA graphs as programs use them: stream capture (fork and join over two
// streams, host copies read and written at each launch, host callbacks),
// explicit construction with every node kind rgpu supports, queries of the
// structure, executable-graph updates, enabling and disabling nodes, cloning,
// a graph launched inside another capture, and NVIDIA's capture rules
// (invalidation, implicit synchronisation, unjoined forks, capture modes).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"

__global__ void addv(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}
__global__ void scale(int* p, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= k;
}
__global__ void sum2(const int* a, const int* b, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__device__ int dev_symbol[4];

// Reads, dawdles, writes: two of these at once lose an increment.
__global__ void bumpSlowly(int* x) {
  int v = *x;
  for (volatile int i = 0; i < 3000; i = i + 1) {
  }
  *x = v + 1;
}

static int g_host_calls = 0;
static std::atomic<int> g_destroyed{0};
static void CUDART_CB destroyObject(void* p) { g_destroyed += *static_cast<int*>(p); }
static void CUDART_CB countCall(void* user) { g_host_calls += *static_cast<int*>(user); }

constexpr int N = 1024;

static int captureForkJoin() {
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  int *a, *b, *c;
  CHECK(cudaMalloc(&a, N * sizeof(int)));
  CHECK(cudaMalloc(&b, N * sizeof(int)));
  CHECK(cudaMalloc(&c, N * sizeof(int)));
  int *in, *out;
  CHECK(cudaMallocHost(&in, N * sizeof(int)));
  CHECK(cudaMallocHost(&out, N * sizeof(int)));
  int one = 1;

  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(s1, &st));
  EXPECT(st == cudaStreamCaptureStatusNone);
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamIsCapturing(s1, &st));
  EXPECT(st == cudaStreamCaptureStatusActive);
  CHECK(cudaMemcpyAsync(a, in, N * sizeof(int), cudaMemcpyHostToDevice, s1));
  CHECK(cudaMemsetAsync(c, 0, N * sizeof(int), s1));
  CHECK(cudaMemcpyAsync(b, a, N * sizeof(int), cudaMemcpyDeviceToDevice, s1));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));  // s2 joins the capture
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusActive);
  addv<<<N / 256, 256, 0, s1>>>(a, N, 10);  // branch 1
  scale<<<N / 256, 256, 0, s2>>>(b, N, 3);  // branch 2
  CHECK(cudaEventRecord(join, s2));
  CHECK(cudaStreamWaitEvent(s1, join, 0));
  sum2<<<N / 256, 256, 0, s1>>>(a, b, c, N);
  CHECK(cudaMemcpyAsync(out, c, N * sizeof(int), cudaMemcpyDeviceToHost, s1));
  CHECK(cudaLaunchHostFunc(s1, countCall, &one));
  unsigned long long id = 0;
  cudaGraph_t during = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  CHECK(cudaStreamGetCaptureInfo(s1, &st, &id, &during, &deps, nullptr, &ndeps));
  EXPECT(st == cudaStreamCaptureStatusActive && id != 0 && during != nullptr && ndeps == 1);
  cudaGraph_t g;
  CHECK(cudaStreamEndCapture(s1, &g));
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusNone);
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT(nodes == 8);  // h2d, memset, d2d, addv, scale, sum2, d2h, host
  size_t roots = 0;
  CHECK(cudaGraphGetRootNodes(g, nullptr, &roots));
  EXPECT(roots == 1);

  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  // Each launch reads `in` as it is then and writes `out` before the stream passes.
  for (int iter = 0; iter < 5; ++iter) {
    for (int i = 0; i < N; ++i) in[i] = i + iter;
    std::memset(out, 0, N * sizeof(int));
    CHECK(cudaGraphLaunch(ge, s1));
    CHECK(cudaStreamSynchronize(s1));
    for (int i = 0; i < N; ++i) EXPECT(out[i] == (i + iter + 10) + 3 * (i + iter));
  }
  EXPECT(g_host_calls == 5);
  // Launches queue like any other work: many in a row, one synchronisation.
  for (int iter = 0; iter < 50; ++iter) CHECK(cudaGraphLaunch(ge, s1));
  CHECK(cudaStreamSynchronize(s1));
  EXPECT(g_host_calls == 55);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  CHECK(cudaFreeHost(in));
  CHECK(cudaFreeHost(out));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  return 0;
}

static int explicitGraph() {
  int* d;
  CHECK(cudaMalloc(&d, N * sizeof(int)));
  float* f;
  CHECK(cudaMalloc(&f, N * sizeof(float)));
  std::vector<int> host(N), back(N);
  for (int i = 0; i < N; ++i) host[i] = i;
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));

  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t h2d, k1, k2, ms, host_node, rec, wait, empty, child_node, d2h;
  CHECK(cudaGraphAddMemcpyNode1D(&h2d, g, nullptr, 0, d, host.data(), N * sizeof(int), cudaMemcpyHostToDevice));
  int add = 5, n = N;
  void* args1[] = {&d, &n, &add};
  cudaKernelNodeParams kp = {};
  kp.func = reinterpret_cast<void*>(addv);
  kp.gridDim = dim3(N / 128);
  kp.blockDim = dim3(128);
  kp.kernelParams = args1;
  CHECK(cudaGraphAddKernelNode(&k1, g, &h2d, 1, &kp));
  add = 1000;  // packed at add time: the node keeps 5
  cudaMemsetParams mp = {};
  float onef = 1.5f;
  std::memcpy(&mp.value, &onef, 4);
  mp.dst = f;
  mp.elementSize = 4;
  mp.width = N;
  mp.height = 1;
  CHECK(cudaGraphAddMemsetNode(&ms, g, nullptr, 0, &mp));
  int by = 2;
  void* args2[] = {&d, &n, &by};
  kp.func = reinterpret_cast<void*>(scale);
  kp.kernelParams = args2;
  cudaGraphNode_t k2deps[] = {k1, ms};
  CHECK(cudaGraphAddKernelNode(&k2, g, k2deps, 2, &kp));
  int inc = 100;
  cudaHostNodeParams hp = {countCall, &inc};
  CHECK(cudaGraphAddHostNode(&host_node, g, &k2, 1, &hp));
  CHECK(cudaGraphAddEventRecordNode(&rec, g, &host_node, 1, ev));
  CHECK(cudaGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
  CHECK(cudaGraphAddEmptyNode(&empty, g, &wait, 1));
  // A child graph that adds 7.
  cudaGraph_t child;
  CHECK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t ck;
  int seven = 7;
  void* args3[] = {&d, &n, &seven};
  kp.func = reinterpret_cast<void*>(addv);
  kp.kernelParams = args3;
  CHECK(cudaGraphAddKernelNode(&ck, child, nullptr, 0, &kp));
  CHECK(cudaGraphAddChildGraphNode(&child_node, g, &empty, 1, child));
  CHECK(cudaGraphAddMemcpyNode1D(&d2h, g, &child_node, 1, back.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));

  // Structure queries.
  size_t count = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT(count == 10);
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &count));
  EXPECT(count == 9);
  cudaGraphNodeType t;
  CHECK(cudaGraphNodeGetType(ms, &t));
  EXPECT(t == cudaGraphNodeTypeMemset);
  CHECK(cudaGraphNodeGetType(child_node, &t));
  EXPECT(t == cudaGraphNodeTypeGraph);
  cudaKernelNodeParams got = {};
  CHECK(cudaGraphKernelNodeGetParams(k1, &got));
  EXPECT(got.func == reinterpret_cast<void*>(addv) && got.gridDim.x == N / 128 && *static_cast<int*>(got.kernelParams[2]) == 5);
  cudaGraphNode_t dep[2];
  size_t ndep = 2;
  CHECK(cudaGraphNodeGetDependencies(k2, dep, nullptr, &ndep));
  EXPECT(ndep == 2 && ((dep[0] == k1 && dep[1] == ms) || (dep[0] == ms && dep[1] == k1)));
  cudaGraph_t inner;
  CHECK(cudaGraphChildGraphNodeGetGraph(child_node, &inner));
  CHECK(cudaGraphGetNodes(inner, nullptr, &count));
  EXPECT(count == 1);
  EXPECT_ERR(cudaGraphAddDependencies(g, &d2h, &d2h, nullptr, 1), cudaErrorInvalidValue);

  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  g_host_calls = 0;
  CHECK(cudaGraphLaunch(ge, 0));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i) EXPECT(back[i] == (i + 5) * 2 + 7);
  EXPECT(g_host_calls == 100);
  std::vector<float> fb(N);
  CHECK(cudaMemcpy(fb.data(), f, N * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < N; ++i) EXPECT(fb[i] == 1.5f);

  // Parameters of the executable graph change without touching the graph.
  int add2 = 50;
  void* args4[] = {&d, &n, &add2};
  kp.func = reinterpret_cast<void*>(addv);
  kp.kernelParams = args4;
  kp.gridDim = dim3(N / 128);
  kp.blockDim = dim3(128);
  CHECK(cudaGraphExecKernelNodeSetParams(ge, k1, &kp));
  CHECK(cudaGraphLaunch(ge, 0));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i) EXPECT(back[i] == (i + 50) * 2 + 7);
  // A disabled kernel node is skipped.
  CHECK(cudaGraphNodeSetEnabled(ge, k2, 0));
  unsigned enabled = 1;
  CHECK(cudaGraphNodeGetEnabled(ge, k2, &enabled));
  EXPECT(enabled == 0);
  CHECK(cudaGraphLaunch(ge, 0));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i) EXPECT(back[i] == (i + 50) + 7);
  CHECK(cudaGraphNodeSetEnabled(ge, k2, 1));
  // The original graph still has its own parameters: cudaGraphExecUpdate takes them.
  cudaGraphExecUpdateResultInfo info;
  CHECK(cudaGraphExecUpdate(ge, g, &info));
  EXPECT(info.result == cudaGraphExecUpdateSuccess);
  CHECK(cudaGraphLaunch(ge, 0));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i) EXPECT(back[i] == (i + 5) * 2 + 7);
  // A graph of another shape cannot update it.
  cudaGraph_t other;
  CHECK(cudaGraphCreate(&other, 0));
  cudaGraphNode_t lone;
  CHECK(cudaGraphAddEmptyNode(&lone, other, nullptr, 0));
  EXPECT_ERR(cudaGraphExecUpdate(ge, other, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);

  // Clones are independent graphs whose nodes map back.
  cudaGraph_t copy;
  CHECK(cudaGraphClone(&copy, g));
  cudaGraphNode_t k1c;
  CHECK(cudaGraphNodeFindInClone(&k1c, k1, copy));
  EXPECT(k1c != k1);
  CHECK(cudaGraphDestroy(g));  // the executable graph and the clone live on
  CHECK(cudaGraphLaunch(ge, 0));
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < N; ++i) EXPECT(back[i] == (i + 5) * 2 + 7);
  EXPECT_ERR(cudaGraphKernelNodeGetParams(k1, &got), cudaErrorInvalidValue);  // a destroyed graph's node
  CHECK(cudaGraphKernelNodeGetParams(k1c, &got));
  EXPECT(*static_cast<int*>(got.kernelParams[2]) == 5);

  // A symbol copy node.
  cudaGraph_t sg;
  CHECK(cudaGraphCreate(&sg, 0));
  int vals[4] = {4, 3, 2, 1}, vback[4] = {};
  cudaGraphNode_t to_sym, from_sym;
  CHECK(cudaGraphAddMemcpyNodeToSymbol(&to_sym, sg, nullptr, 0, dev_symbol, vals, sizeof vals, 0, cudaMemcpyHostToDevice));
  CHECK(cudaGraphAddMemcpyNodeFromSymbol(&from_sym, sg, &to_sym, 1, vback, dev_symbol, sizeof vback, 0,
                                         cudaMemcpyDeviceToHost));
  cudaGraphExec_t sge;
  CHECK(cudaGraphInstantiate(&sge, sg, 0));
  CHECK(cudaGraphLaunch(sge, 0));
  CHECK(cudaStreamSynchronize(0));
  EXPECT(vback[0] == 4 && vback[3] == 1);

  CHECK(cudaGraphExecDestroy(sge));
  CHECK(cudaGraphDestroy(sg));
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(copy));
  CHECK(cudaGraphDestroy(other));
  CHECK(cudaGraphDestroy(child));
  CHECK(cudaFree(d));
  CHECK(cudaFree(f));
  return 0;
}

static int captureRules() {
  cudaStream_t s, nb;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  int* d;
  CHECK(cudaMalloc(&d, N * sizeof(int)));
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(1);

  // The legacy stream cannot capture.
  EXPECT_ERR(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  // Synchronising a capturing stream invalidates the capture.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  addv<<<N / 256, 256, 0, s>>>(d, N, 1);
  EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusInvalidated);
  addv<<<N / 256, 256, 0, s>>>(d, N, 1);
  EXPECT_ERR(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
  EXPECT_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT(g == nullptr);
  // The legacy stream, used while a blocking stream captures: implicit synchronisation.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  addv<<<N / 256, 256>>>(d, N, 1);
  EXPECT_ERR(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
  EXPECT_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();  // a failed call is also the thread's last error, as in CUDA
  // ... but not while only a non-blocking stream captures.
  CHECK(cudaStreamBeginCapture(nb, cudaStreamCaptureModeThreadLocal));
  addv<<<N / 256, 256>>>(d, N, 1);
  CHECK(cudaGetLastError());
  // Thread-local mode forbids this thread cudaMalloc; relaxed allows it.
  int* extra = nullptr;
  EXPECT_ERR(cudaMalloc(&extra, 256), cudaErrorStreamCaptureUnsupported);
  EXPECT_ERR(cudaStreamEndCapture(nb, &g), cudaErrorStreamCaptureInvalidated);
  CHECK(cudaStreamBeginCapture(nb, cudaStreamCaptureModeRelaxed));
  CHECK(cudaMalloc(&extra, 256));
  addv<<<1, 64, 0, nb>>>(extra, 64, 1);
  CHECK(cudaStreamEndCapture(nb, &g));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(extra));
  // A fork that is never joined back.
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaEventRecord(ev, s));
  CHECK(cudaStreamWaitEvent(nb, ev, 0));
  addv<<<N / 256, 256, 0, nb>>>(d, N, 1);
  EXPECT_ERR(cudaEventQuery(ev), cudaErrorCapturedEvent);
  EXPECT_ERR(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  CHECK(cudaStreamIsCapturing(nb, &st));
  EXPECT(st == cudaStreamCaptureStatusNone);
  // Ending on a stream that did not begin the capture.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_ERR(cudaStreamEndCapture(nb, &g), cudaErrorIllegalState);
  CHECK(cudaStreamEndCapture(s, &g));
  size_t count = 1;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT(count == 0);
  cudaGraphExec_t empty_exec;
  CHECK(cudaGraphInstantiate(&empty_exec, g, 0));  // an empty graph instantiates and launches
  CHECK(cudaGraphLaunch(empty_exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGraphExecDestroy(empty_exec));
  CHECK(cudaGraphDestroy(g));

  // A graph launched inside a capture becomes a child graph node.
  CHECK(cudaMemset(d, 0, N * sizeof(int)));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  addv<<<N / 256, 256, 0, s>>>(d, N, 3);
  cudaGraph_t inner;
  CHECK(cudaStreamEndCapture(s, &inner));
  cudaGraphExec_t inner_exec;
  CHECK(cudaGraphInstantiate(&inner_exec, inner, 0));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaGraphLaunch(inner_exec, s));
  CHECK(cudaGraphLaunch(inner_exec, s));
  scale<<<N / 256, 256, 0, s>>>(d, N, 2);
  cudaGraph_t outer;
  CHECK(cudaStreamEndCapture(s, &outer));
  cudaGraphNode_t first;
  count = 1;
  CHECK(cudaGraphGetRootNodes(outer, &first, &count));
  cudaGraphNodeType t;
  CHECK(cudaGraphNodeGetType(first, &t));
  EXPECT(t == cudaGraphNodeTypeGraph);
  cudaGraphExec_t outer_exec;
  CHECK(cudaGraphInstantiate(&outer_exec, outer, 0));
  CHECK(cudaGraphLaunch(outer_exec, s));
  std::vector<int> h(N);
  CHECK(cudaMemcpyAsync(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; ++i) EXPECT(h[i] == 12);
  CHECK(cudaGraphExecDestroy(outer_exec));
  CHECK(cudaGraphExecDestroy(inner_exec));
  CHECK(cudaGraphDestroy(outer));
  CHECK(cudaGraphDestroy(inner));
  // Capturing into an existing graph after a node of it, and moving the
  // capture's dependencies by hand.
  cudaGraph_t into;
  CHECK(cudaGraphCreate(&into, 0));
  cudaGraphNode_t first_set;
  cudaMemsetParams ms = {};
  ms.dst = d, ms.value = 1, ms.elementSize = 4, ms.width = N, ms.height = 1;
  CHECK(cudaGraphAddMemsetNode(&first_set, into, nullptr, 0, &ms));
  CHECK(cudaStreamBeginCaptureToGraph(s, into, &first_set, nullptr, 1, cudaStreamCaptureModeGlobal));
  addv<<<N / 256, 256, 0, s>>>(d, N, 4);  // after the memset: 5
  const cudaGraphNode_t* tips = nullptr;
  size_t ntips = 0;
  CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &tips, nullptr, &ntips));
  EXPECT(ntips == 1);
  cudaGraphNode_t after_add = tips[0];
  scale<<<N / 256, 256, 0, s>>>(d, N, 3);  // 15
  // The next kernel depends only on the add (beside the scale): set, then add the scale back.
  CHECK(cudaStreamUpdateCaptureDependencies(s, &after_add, nullptr, 1, cudaStreamSetCaptureDependencies));
  CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &tips, nullptr, &ntips));
  EXPECT(ntips == 1 && tips[0] == after_add);
  cudaGraphNode_t all_nodes[8];
  count = 8;
  CHECK(cudaGraphGetNodes(into, all_nodes, &count));
  EXPECT(count == 3);
  CHECK(cudaStreamUpdateCaptureDependencies(s, &all_nodes[2], nullptr, 1, cudaStreamAddCaptureDependencies));
  addv<<<N / 256, 256, 0, s>>>(d, N, 1);  // 16
  cudaGraph_t same;
  CHECK(cudaStreamEndCapture(s, &same));
  EXPECT(same == into);
  size_t ndep = 0;
  CHECK(cudaGraphGetNodes(into, nullptr, &count));
  EXPECT(count == 4);
  CHECK(cudaGraphGetNodes(into, all_nodes, &count));
  CHECK(cudaGraphNodeGetDependencies(all_nodes[3], nullptr, nullptr, &ndep));
  EXPECT(ndep == 2);
  cudaGraphExec_t into_exec;
  CHECK(cudaGraphInstantiate(&into_exec, into, 0));
  CHECK(cudaGraphLaunch(into_exec, s));
  CHECK(cudaMemcpyAsync(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; ++i) EXPECT(h[i] == 16);
  CHECK(cudaGraphExecDestroy(into_exec));
  CHECK(cudaGraphDestroy(into));
  // Stream-ordered allocation inside a capture: memory nodes, memory of the graph's.
  uint64_t used = 0, high = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  EXPECT(used == 0);
  int* out = d;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int* tmp = nullptr;
  CHECK(cudaMallocAsync(&tmp, N * sizeof(int), s));
  EXPECT(tmp != nullptr);
  CHECK(cudaMemsetAsync(tmp, 0, N * sizeof(int), s));
  addv<<<N / 256, 256, 0, s>>>(tmp, N, 21);
  scale<<<N / 256, 256, 0, s>>>(tmp, N, 2);
  CHECK(cudaMemcpyAsync(out, tmp, N * sizeof(int), cudaMemcpyDeviceToDevice, s));
  CHECK(cudaFreeAsync(tmp, s));
  cudaGraph_t mg;
  CHECK(cudaStreamEndCapture(s, &mg));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  EXPECT(used == N * sizeof(int));
  cudaGraphNode_t mnodes[8];
  count = 8;
  CHECK(cudaGraphGetNodes(mg, mnodes, &count));
  EXPECT(count == 6);
  CHECK(cudaGraphNodeGetType(mnodes[0], &t));
  EXPECT(t == cudaGraphNodeTypeMemAlloc);
  cudaMemAllocNodeParams ap;
  CHECK(cudaGraphMemAllocNodeGetParams(mnodes[0], &ap));
  EXPECT(ap.dptr == tmp && ap.bytesize == N * sizeof(int));
  void* freed = nullptr;
  CHECK(cudaGraphMemFreeNodeGetParams(mnodes[5], &freed));
  EXPECT(freed == tmp);
  cudaGraphExec_t mexec;
  CHECK(cudaGraphInstantiate(&mexec, mg, 0));
  cudaGraphExec_t second;
  EXPECT_ERR(cudaGraphInstantiate(&second, mg, 0), cudaErrorNotSupported);  // one at a time, as CUDA
  for (int iter = 0; iter < 3; ++iter) {
    CHECK(cudaMemset(out, 0, N * sizeof(int)));
    CHECK(cudaGraphLaunch(mexec, s));
    CHECK(cudaMemcpyAsync(h.data(), out, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; ++i) EXPECT(h[i] == 42);
  }
  // An explicit allocation node; a free node only of a graph's own allocation.
  cudaGraph_t eg;
  CHECK(cudaGraphCreate(&eg, 0));
  cudaMemAllocNodeParams alloc = {};
  alloc.poolProps.allocType = cudaMemAllocationTypePinned;
  alloc.poolProps.location.type = cudaMemLocationTypeDevice;
  alloc.poolProps.location.id = 0;
  alloc.bytesize = 4096;
  cudaGraphNode_t an, fn;
  CHECK(cudaGraphAddMemAllocNode(&an, eg, nullptr, 0, &alloc));
  EXPECT(alloc.dptr != nullptr);
  EXPECT_ERR(cudaGraphAddMemFreeNode(&fn, eg, &an, 1, d), cudaErrorInvalidValue);
  CHECK(cudaGraphAddMemFreeNode(&fn, eg, &an, 1, alloc.dptr));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
  EXPECT(high == N * sizeof(int) + 4096);
  CHECK(cudaGraphDestroy(eg));
  CHECK(cudaGraphExecDestroy(mexec));
  CHECK(cudaGraphDestroy(mg));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  EXPECT(used == 0);
  uint64_t zero = 0;
  CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
  EXPECT(high == 0);
  // User objects live while the program, a graph or an executable graph holds them.
  static int weight = 7;
  cudaUserObject_t obj;
  CHECK(cudaUserObjectCreate(&obj, &weight, destroyObject, 1, cudaUserObjectNoDestructorSync));
  cudaGraph_t ug;
  CHECK(cudaGraphCreate(&ug, 0));
  cudaGraphNode_t un;
  CHECK(cudaGraphAddEmptyNode(&un, ug, nullptr, 0));
  CHECK(cudaGraphRetainUserObject(ug, obj, 1, cudaGraphUserObjectMove));  // the program's reference moves
  cudaGraphExec_t uexec;
  CHECK(cudaGraphInstantiate(&uexec, ug, 0));
  CHECK(cudaGraphDestroy(ug));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT(g_destroyed == 0);  // the executable graph still holds it
  CHECK(cudaGraphExecDestroy(uexec));
  for (int i = 0; i < 200 && g_destroyed == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT(g_destroyed == 7);
  EXPECT_ERR(cudaUserObjectRelease(obj, 1), cudaErrorInvalidValue);  // gone
  // Handles that are not graphs are refused, never followed.
  EXPECT_ERR(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(&h), s), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(&h)), cudaErrorInvalidValue);
  CHECK(cudaFree(d));
  return 0;
}

// "Each launch is ordered behind both any previous work in stream and any
// previous launches of graphExec": launches of one executable graph on two
// streams that otherwise run concurrently never overlap.
static int launchesOfOneGraphAreOrdered() {
  cudaStream_t s[2];
  for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  int* x;
  CHECK(cudaMalloc(&x, sizeof(int)));
  CHECK(cudaMemset(x, 0, sizeof(int)));
  CHECK(cudaDeviceSynchronize());  // the streams are non-blocking: not ordered after the memset
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s[0], cudaStreamCaptureModeGlobal));
  bumpSlowly<<<1, 1, 0, s[0]>>>(x);
  CHECK(cudaStreamEndCapture(s[0], &g));
  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 40; ++i) CHECK(cudaGraphLaunch(ge, s[i % 2]));
  CHECK(cudaDeviceSynchronize());
  int got = 0;
  CHECK(cudaMemcpy(&got, x, sizeof got, cudaMemcpyDeviceToHost));
  EXPECT(got == 40);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(x));
  for (auto& y : s) CHECK(cudaStreamDestroy(y));
  return 0;
}

// Programmatic edges (programmatic dependent launch inside a graph): kept,
// reported back, checked as NVIDIA's runtime checks them, and run as full
// dependencies (a schedule they permit).
static int programmaticEdges() {
  int* d;
  CHECK(cudaMalloc(&d, N * sizeof(int)));
  int n = N, one = 1, two = 2;
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t ms, k1, k2, k3;
  cudaMemsetParams m = {};
  m.dst = d, m.value = 0, m.elementSize = 4, m.width = N, m.height = 1;
  CHECK(cudaGraphAddMemsetNode(&ms, g, nullptr, 0, &m));
  auto kernel = [&](void* fn, void** args) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = fn;
    p.kernel.gridDim = dim3(N / 256);
    p.kernel.blockDim = dim3(256);
    p.kernel.kernelParams = args;
    return p;
  };
  void* a1[] = {&d, &n, &one};
  void* a2[] = {&d, &n, &two};
  cudaGraphNodeParams p1 = kernel(reinterpret_cast<void*>(addv), a1);
  CHECK(cudaGraphAddNode(&k1, g, &ms, nullptr, 1, &p1));
  cudaGraphEdgeData prog = {};
  prog.from_port = cudaGraphKernelNodePortProgrammatic;
  prog.type = cudaGraphDependencyTypeProgrammatic;
  cudaGraphNodeParams p2 = kernel(reinterpret_cast<void*>(scale), a2);
  CHECK(cudaGraphAddNode(&k2, g, &k1, &prog, 1, &p2));  // (0 + 1) * 2
  cudaGraphNodeParams p3 = kernel(reinterpret_cast<void*>(addv), a1);
  CHECK(cudaGraphAddNode(&k3, g, nullptr, nullptr, 0, &p3));
  cudaGraphEdgeData launched = {};
  launched.from_port = cudaGraphKernelNodePortLaunchCompletion;
  launched.type = cudaGraphDependencyTypeProgrammatic;
  CHECK(cudaGraphAddDependencies(g, &k2, &k3, &launched, 1));  // + 1

  // Refused as NVIDIA's runtime refuses them.
  cudaGraphNode_t bad;
  EXPECT_ERR(cudaGraphAddNode(&bad, g, &ms, &prog, 1, &p1), cudaErrorInvalidValue);  // from a memset node
  cudaGraphEdgeData e = prog;
  e.to_port = 1;
  EXPECT_ERR(cudaGraphAddNode(&bad, g, &k1, &e, 1, &p1), cudaErrorInvalidValue);
  e = prog;
  e.from_port = cudaGraphKernelNodePortDefault;
  EXPECT_ERR(cudaGraphAddNode(&bad, g, &k1, &e, 1, &p1), cudaErrorInvalidValue);
  e = {};
  e.type = 7;
  EXPECT_ERR(cudaGraphAddNode(&bad, g, &k1, &e, 1, &p1), cudaErrorInvalidValue);
  e = {};
  e.reserved[2] = 1;
  EXPECT_ERR(cudaGraphAddDependencies(g, &ms, &k3, &e, 1), cudaErrorInvalidValue);

  // Reported back.
  cudaGraphNode_t from[3], to[3];
  cudaGraphEdgeData data[3];
  size_t count = 3;
  CHECK(cudaGraphGetEdges(g, from, to, data, &count));
  EXPECT(count == 3);
  int programmatic = 0;
  for (size_t i = 0; i < count; ++i) {
    if (from[i] == ms) EXPECT(to[i] == k1 && data[i].type == cudaGraphDependencyTypeDefault && data[i].from_port == 0);
    if (from[i] == k1) EXPECT(to[i] == k2 && data[i].type == cudaGraphDependencyTypeProgrammatic &&
                              data[i].from_port == cudaGraphKernelNodePortProgrammatic);
    if (from[i] == k2) EXPECT(to[i] == k3 && data[i].from_port == cudaGraphKernelNodePortLaunchCompletion);
    programmatic += data[i].type == cudaGraphDependencyTypeProgrammatic;
  }
  EXPECT(programmatic == 2);
  cudaGraphNode_t dep;
  cudaGraphEdgeData dep_data;
  count = 1;
  CHECK(cudaGraphNodeGetDependencies(k2, &dep, &dep_data, &count));
  EXPECT(count == 1 && dep == k1 && dep_data.type == cudaGraphDependencyTypeProgrammatic);
  count = 1;
  CHECK(cudaGraphNodeGetDependentNodes(k2, &dep, &dep_data, &count));
  EXPECT(count == 1 && dep == k3 && dep_data.from_port == cudaGraphKernelNodePortLaunchCompletion);
  // A clone keeps them; an update with different edge data is a topology change.
  cudaGraph_t c;
  CHECK(cudaGraphClone(&c, g));
  count = 3;
  CHECK(cudaGraphGetEdges(c, from, to, data, &count));
  programmatic = 0;
  for (size_t i = 0; i < count; ++i) programmatic += data[i].type == cudaGraphDependencyTypeProgrammatic;
  EXPECT(programmatic == 2);

  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(ge, 0));
  std::vector<int> h(N);
  CHECK(cudaMemcpy(h.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < N; ++i) EXPECT(h[i] == 3);
  CHECK(cudaGraphRemoveDependencies(c, &k2, &k3, nullptr, 0));
  cudaGraphNode_t ck2 = nullptr, ck3 = nullptr;
  CHECK(cudaGraphNodeFindInClone(&ck2, k2, c));
  CHECK(cudaGraphNodeFindInClone(&ck3, k3, c));
  CHECK(cudaGraphRemoveDependencies(c, &ck2, &ck3, nullptr, 1));
  CHECK(cudaGraphAddDependencies(c, &ck2, &ck3, nullptr, 1));  // the same edge, default data
  cudaGraphExecUpdateResultInfo info;
  EXPECT_ERR(cudaGraphExecUpdate(ge, c, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged);
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(c));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(d));
  return 0;
}

// Host-to-host copies in graphs, built and captured: they run when the stream
// reaches them, after the device-to-host copy before them has landed.
static int hostToHostCopies() {
  std::vector<int> a(N), b(N, -1), c(N, -1), rows(4 * 8, -1);
  int* d;
  CHECK(cudaMalloc(&d, N * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d, a.data(), N * sizeof(int), cudaMemcpyHostToDevice, s));
  addv<<<N / 256, 256, 0, s>>>(d, N, 100);
  CHECK(cudaMemcpyAsync(b.data(), d, N * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(c.data(), b.data(), N * sizeof(int), cudaMemcpyHostToHost, s));
  // Rows 0..3, 8 ints each, of c (pitch 16 ints) into rows (pitch 8 ints).
  CHECK(cudaMemcpy2DAsync(rows.data(), 8 * sizeof(int), c.data(), 16 * sizeof(int), 8 * sizeof(int), 4,
                          cudaMemcpyDefault, s));
  CHECK(cudaStreamEndCapture(s, &g));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT(nodes == 5);
  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int iter = 0; iter < 3; ++iter) {
    for (int i = 0; i < N; ++i) a[i] = i * iter;
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; ++i) EXPECT(c[i] == i * iter + 100);
    for (int r = 0; r < 4; ++r)
      for (int x = 0; x < 8; ++x) EXPECT(rows[r * 8 + x] == (r * 16 + x) * iter + 100);
  }
  // Built explicitly, with cudaMemcpyDefault.
  cudaGraph_t e;
  CHECK(cudaGraphCreate(&e, 0));
  cudaGraphNode_t n;
  std::vector<int> x(N), y(N, 0);
  CHECK(cudaGraphAddMemcpyNode1D(&n, e, nullptr, 0, y.data(), x.data(), N * sizeof(int), cudaMemcpyDefault));
  cudaGraphExec_t ee;
  CHECK(cudaGraphInstantiate(&ee, e, 0));
  for (int i = 0; i < N; ++i) x[i] = 7 * i;
  CHECK(cudaGraphLaunch(ee, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; ++i) EXPECT(y[i] == 7 * i);
  CHECK(cudaGraphExecDestroy(ee));
  CHECK(cudaGraphDestroy(e));
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  return 0;
}

int main() {
  if (int r = hostToHostCopies()) return r;
  if (int r = programmaticEdges()) return r;
  if (int r = launchesOfOneGraphAreOrdered()) return r;
  if (int r = captureForkJoin()) return r;
  if (int r = explicitGraph()) return r;
  if (int r = captureRules()) return r;
  std::printf("graphs: all checks passed\n");
  return 0;
}
