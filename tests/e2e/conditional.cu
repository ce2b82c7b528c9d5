// Conditional graph nodes as NVIDIA's graphConditionalNodes sample and
// training loops use them: kernels set the node's value with
// cudaGraphSetConditional, and the node runs an if/else body, a while loop
// or a switch case when the stream reaches it. Built explicitly
// (cudaGraphAddNode), by capture into a body (cudaStreamBeginCaptureToGraph),
// and added to a stream capture in progress; with cudaGraphCondAssignDefault
// each launch starts from the default value. CUDA's rules are checked too:
// bodies hold device work only, such a graph is never cloned, never a child
// graph, and has one executable graph at a time.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "check.h"

__global__ void fill(int* p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
__global__ void add(int* p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}
// One thread: counts one more round and continues while the count is below `limit`.
__global__ void loopStep(cudaGraphConditionalHandle h, int* counter, int limit) {
  int c = ++*counter;
  cudaGraphSetConditional(h, c < limit ? 1 : 0);
}
// Sets the handle from device memory: the value a kernel computed.
__global__ void setFrom(cudaGraphConditionalHandle h, const int* v) { cudaGraphSetConditional(h, *v); }
__global__ void setOdd(cudaGraphConditionalHandle h, const int* v) { cudaGraphSetConditional(h, *v & 1); }

constexpr int N = 256;

static int hostValue(const int* d) {
  int v = -1;
  if (cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  return v;
}

static cudaGraphNode_t addKernel(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, void* fn, void** args,
                                 unsigned threads) {
  cudaKernelNodeParams k = {};
  k.func = fn;
  k.gridDim = dim3(1);
  k.blockDim = dim3(threads);
  k.kernelParams = args;
  cudaGraphNode_t node = nullptr;
  if (cudaGraphAddKernelNode(&node, g, deps, n, &k) != cudaSuccess) return nullptr;
  return node;
}

static cudaGraphNode_t addConditional(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                      cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type, unsigned size,
                                      cudaGraph_t* bodies) {
  cudaGraphNodeParams p = {};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
  cudaGraphNode_t node = nullptr;
  if (cudaGraphAddNode(&node, g, deps, nullptr, n, &p) != cudaSuccess) return nullptr;
  for (unsigned i = 0; i < size; ++i) bodies[i] = p.conditional.phGraph_out[i];
  return node;
}

// while (counter < 5) { x += 1 }: the loop's own kernel decides; each launch
// starts again (the counter is reset by a memset node, the value by the default).
static int whileLoop(cudaStream_t s, int* x, int* counter) {
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle h;
  CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
  cudaMemsetParams ms = {};
  ms.dst = counter, ms.value = 0, ms.elementSize = 4, ms.width = 1, ms.height = 1;
  cudaGraphNode_t reset;
  CHECK(cudaGraphAddMemsetNode(&reset, g, nullptr, 0, &ms));
  cudaGraph_t body;
  cudaGraphNode_t loop = addConditional(g, &reset, 1, h, cudaGraphCondTypeWhile, 1, &body);
  EXPECT(loop != nullptr);
  int one = 1, limit = 5, n = N;
  void* add_args[] = {&x, &one, &n};
  cudaGraphNode_t a = addKernel(body, nullptr, 0, (void*)add, add_args, N);
  void* step_args[] = {&h, &counter, &limit};
  EXPECT(addKernel(body, &a, 1, (void*)loopStep, step_args, 1) != nullptr);
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  CHECK(cudaMemsetAsync(x, 0, N * sizeof(int), s));  // in s's order (a non-blocking stream)
  for (int launch = 1; launch <= 3; ++launch) {
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<int> hx(N);
    CHECK(cudaMemcpy(hx.data(), x, N * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; ++i)
      if (hx[i] != 5 * launch) {  // five rounds per launch
        std::printf("FAILED: while: launch %d: x[%d] = %d, counter %d\n", launch, i, hx[i], hostValue(counter));
        return 1;
      }
    EXPECT(hostValue(counter) == 5);
  }
  // CUDA's rules for a graph with conditional nodes.
  cudaGraph_t clone;
  EXPECT_ERR(cudaGraphClone(&clone, g), cudaErrorNotSupported);
  cudaGraphExec_t second;
  EXPECT_ERR(cudaGraphInstantiate(&second, g, 0), cudaErrorNotSupported);
  cudaGraph_t parent;
  CHECK(cudaGraphCreate(&parent, 0));
  cudaGraphNode_t child;
  EXPECT_ERR(cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, g), cudaErrorInvalidValue);
  CHECK(cudaGraphDestroy(parent));
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphInstantiate(&e, g, 0));  // the one executable graph is gone: another may be made
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  return 0;
}

// if (flag) out = 1 else out = 2, the flag computed on the device; then a
// switch over a value with three cases (a value past them runs none).
static int ifElseAndSwitch(cudaStream_t s, int* out, int* flag) {
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle hif, hsw;
  CHECK(cudaGraphConditionalHandleCreate(&hif, g, 0, 0));
  CHECK(cudaGraphConditionalHandleCreate(&hsw, g, 0, 0));
  void* set_if[] = {&hif, &flag};
  cudaGraphNode_t setIf = addKernel(g, nullptr, 0, (void*)setFrom, set_if, 1);
  EXPECT(setIf != nullptr);
  cudaGraph_t branches[2];
  cudaGraphNode_t cond = addConditional(g, &setIf, 1, hif, cudaGraphCondTypeIf, 2, branches);
  EXPECT(cond != nullptr);
  int n = N, v1 = 1, v2 = 2;
  void* then_args[] = {&out, &v1, &n};
  void* else_args[] = {&out, &v2, &n};
  EXPECT(addKernel(branches[0], nullptr, 0, (void*)fill, then_args, N) != nullptr);
  EXPECT(addKernel(branches[1], nullptr, 0, (void*)fill, else_args, N) != nullptr);
  void* set_sw[] = {&hsw, &flag};
  cudaGraphNode_t setSw = addKernel(g, &cond, 1, (void*)setFrom, set_sw, 1);
  EXPECT(setSw != nullptr);
  cudaGraph_t cases[3];
  EXPECT(addConditional(g, &setSw, 1, hsw, cudaGraphCondTypeSwitch, 3, cases) != nullptr);
  int add10 = 10, add20 = 20, add30 = 30;
  void* c0[] = {&out, &add10, &n};
  void* c1[] = {&out, &add20, &n};
  void* c2[] = {&out, &add30, &n};
  EXPECT(addKernel(cases[0], nullptr, 0, (void*)add, c0, N) != nullptr);
  EXPECT(addKernel(cases[1], nullptr, 0, (void*)add, c1, N) != nullptr);
  // Case 2: a memset and a device copy (out[0..3] = 7 through a scratch word of `flag`'s neighbour).
  cudaMemsetParams ms = {};
  ms.dst = flag + 1, ms.value = 7, ms.elementSize = 4, ms.width = 1, ms.height = 1;
  cudaGraphNode_t m;
  CHECK(cudaGraphAddMemsetNode(&m, cases[2], nullptr, 0, &ms));
  cudaGraphNode_t cp;
  CHECK(cudaGraphAddMemcpyNode1D(&cp, cases[2], &m, 1, out, flag + 1, sizeof(int), cudaMemcpyDeviceToDevice));
  EXPECT(addKernel(cases[2], &cp, 1, (void*)add, c2, N) != nullptr);
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  // flag: if picks then (1) or else (2); switch adds 10 / 20 / 30, or nothing.
  const int flags[] = {1, 0, 2, 5};
  const int want0[] = {21, 12, 37, 1}, want1[] = {21, 12, 31, 1};
  for (int k = 0; k < 4; ++k) {
    CHECK(cudaMemcpyAsync(flag, &flags[k], sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<int> h(N);
    CHECK(cudaMemcpy(h.data(), out, N * sizeof(int), cudaMemcpyDeviceToHost));
    if (h[0] != want0[k] || h[1] != want1[k] || h[N - 1] != want1[k]) {
      std::printf("FAILED: flag %d: out = %d %d %d, expected %d %d %d\n", flags[k], h[0], h[1], h[N - 1], want0[k],
                  want1[k], want1[k]);
      return 1;
    }
  }
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  return 0;
}

// The sample's way: a conditional node added to a stream capture in progress,
// its body captured with cudaStreamBeginCaptureToGraph; nested, a while node
// whose body holds an if node.
static int captured(cudaStream_t s, int* x, int* counter) {
  int n = N, limit = 4, one = 1, hundred = 100;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(counter, 0, sizeof(int), s));
  fill<<<1, N, 0, s>>>(x, 0, n);
  cudaStreamCaptureStatus st;
  cudaGraph_t g;
  const cudaGraphNode_t* deps;
  size_t ndeps;
  CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, &g, &deps, nullptr, &ndeps));
  EXPECT(st == cudaStreamCaptureStatusActive);
  cudaGraphConditionalHandle h, hin;
  CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
  cudaGraph_t body;
  cudaGraphNode_t loop = addConditional(g, deps, ndeps, h, cudaGraphCondTypeWhile, 1, &body);
  EXPECT(loop != nullptr);
  CHECK(cudaStreamUpdateCaptureDependencies(s, &loop, nullptr, 1, cudaStreamSetCaptureDependencies));
  add<<<1, N, 0, s>>>(x, 1000, n);  // after the loop
  cudaGraph_t whole;
  CHECK(cudaStreamEndCapture(s, &whole));
  EXPECT(whole == g);

  // The body, captured: x += 1; step; if (the count is odd) x += 100.
  cudaStream_t b;
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CHECK(cudaGraphConditionalHandleCreate(&hin, body, 0, cudaGraphCondAssignDefault));
  CHECK(cudaStreamBeginCaptureToGraph(b, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  add<<<1, N, 0, b>>>(x, one, n);
  loopStep<<<1, 1, 0, b>>>(h, counter, limit);
  setOdd<<<1, 1, 0, b>>>(hin, counter);
  cudaGraph_t cur;
  CHECK(cudaStreamGetCaptureInfo(b, &st, nullptr, &cur, &deps, nullptr, &ndeps));
  cudaGraph_t inner[1];
  cudaGraphNode_t ifn = addConditional(body, deps, ndeps, hin, cudaGraphCondTypeIf, 1, inner);
  EXPECT(ifn != nullptr);
  CHECK(cudaStreamUpdateCaptureDependencies(b, &ifn, nullptr, 1, cudaStreamSetCaptureDependencies));
  CHECK(cudaStreamEndCapture(b, &cur));
  void* args[] = {&x, &hundred, &n};
  EXPECT(addKernel(inner[0], nullptr, 0, (void*)add, args, N) != nullptr);
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int launch = 0; launch < 2; ++launch) {
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<int> hx(N);
    CHECK(cudaMemcpy(hx.data(), x, N * sizeof(int), cudaMemcpyDeviceToHost));
    // four rounds of +1, two of them (counts 1 and 3) +100, then +1000
    for (int i = 0; i < N; ++i) EXPECT(hx[i] == 4 + 200 + 1000);
  }
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(b));
  return 0;
}

// Bodies hold device work only; handles and node parameters are checked.
static int refused(int* x) {
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle h;
  EXPECT_ERR(cudaGraphConditionalHandleCreate(&h, g, 0, 2), cudaErrorInvalidValue);
  CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
  cudaGraph_t bodies[3];
  EXPECT(addConditional(g, nullptr, 0, h, cudaGraphCondTypeIf, 3, bodies) == nullptr);
  EXPECT(addConditional(g, nullptr, 0, h, cudaGraphCondTypeWhile, 2, bodies) == nullptr);
  EXPECT(addConditional(g, nullptr, 0, 12345, cudaGraphCondTypeIf, 1, bodies) == nullptr);
  EXPECT(addConditional(g, nullptr, 0, h, cudaGraphCondTypeSwitch, 65537, bodies) == nullptr);  // kMaxSwitchBodies
  cudaGraphNode_t c = addConditional(g, nullptr, 0, h, cudaGraphCondTypeIf, 1, bodies);
  EXPECT(c != nullptr);
  // A host-to-device copy in the body: instantiation names the node.
  static int host[4];
  cudaGraphNode_t copy;
  CHECK(cudaGraphAddMemcpyNode1D(&copy, bodies[0], nullptr, 0, x, host, sizeof host, cudaMemcpyHostToDevice));
  cudaGraphExec_t e;
  cudaGraphInstantiateParams ip = {};
  EXPECT_ERR(cudaGraphInstantiateWithParams(&e, g, &ip), cudaErrorInvalidValue);
  EXPECT(ip.errNode_out == c);
  CHECK(cudaGraphDestroy(g));
  return 0;
}

int main() {
  // A backend without conditional nodes says so at the first handle, as NVIDIA's runtime does for a missing feature.
  {
    cudaGraph_t probe;
    CHECK(cudaGraphCreate(&probe, 0));
    cudaGraphConditionalHandle h;
    cudaError_t e = cudaGraphConditionalHandleCreate(&h, probe, 0, 0);
    CHECK(cudaGraphDestroy(probe));
    if (e == cudaErrorNotSupported) {
      std::printf("conditional: cudaGraphConditionalHandleCreate -> cudaErrorNotSupported\n");
      return 2;
    }
    CHECK(e);
  }
  int *x, *counter, *flag;
  CHECK(cudaMalloc(&x, N * sizeof(int)));
  CHECK(cudaMalloc(&counter, sizeof(int)));
  CHECK(cudaMalloc(&flag, 2 * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (whileLoop(s, x, counter)) return 1;
  if (ifElseAndSwitch(s, x, flag)) return 1;
  if (captured(s, x, counter)) return 1;
  if (refused(x)) return 1;
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(x));
  CHECK(cudaFree(counter));
  CHECK(cudaFree(flag));
  std::printf("conditional: if/else, while, switch, nested and captured conditional nodes, all checks passed\n");
  return 0;
}
