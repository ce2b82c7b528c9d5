// A launch-bound loop as training code writes it: one captured graph of a
// memset, twenty small kernels, a device copy and a cuBLAS call, launched
// many times. On the CUDA backend the server makes it one CUgraphExec
// (cuda_fake_e2e_test checks the driver saw one capture and one cuGraphLaunch
// per launch); on both backends the results must be those of every launch.
// Also: the graph stays right after memory is freed elsewhere (the server
// rebuilds it), and a graph whose node names freed memory fails at the next
// synchronising call instead of touching it. And a graph with host copies and
// a host function between them (on the CUDA backend one CUgraphExec too):
// each launch reads the program's input as it is then and writes its output.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

__global__ void addv(float* p, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}

constexpr int N = 4096;
constexpr int kKernels = 20;
constexpr int kLaunches = 50;

static int check(const float* d_buf, const float* d_copy, const float* d_y, int launches) {
  std::vector<float> buf(N), copy(N), y(N);
  CHECK(cudaMemcpy(buf.data(), d_buf, N * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(copy.data(), d_copy, N * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(y.data(), d_y, N * sizeof(float), cudaMemcpyDeviceToHost));
  const float sum = kKernels * (kKernels + 1) / 2;  // 1 + 2 + ... + 20 on zeroed memory
  for (int i = 0; i < N; ++i) {
    EXPECT(buf[i] == sum);
    EXPECT(copy[i] == sum);
    EXPECT(y[i] == 1.0f + 2.0f * sum * launches);  // y += 2 * copy at every launch
  }
  return 0;
}

// A graph whose memset node names memory freed after instantiation: the
// error surfaces at the next synchronising call; freed memory is never touched.
static int freedMemoryIsRefused(cudaStream_t s, float* buf) {
  float* doomed;
  CHECK(cudaMalloc(&doomed, N * sizeof(float)));
  cudaGraph_t g2;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(doomed, 0, N * sizeof(float), s));
  addv<<<N / 256, 256, 0, s>>>(buf, N, 1000.0f);
  CHECK(cudaStreamEndCapture(s, &g2));
  cudaGraphExec_t e2;
  CHECK(cudaGraphInstantiate(&e2, g2, 0));
  CHECK(cudaGraphLaunch(e2, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(doomed));
  CHECK(cudaGraphLaunch(e2, s));
  cudaError_t e = cudaStreamSynchronize(s);
  if (e != cudaErrorInvalidValue) {
    std::printf("FAILED: a graph naming freed memory: %s, expected cudaErrorInvalidValue\n", cudaGetErrorName(e));
    return 1;
  }
  CHECK(cudaGraphExecDestroy(e2));
  CHECK(cudaGraphDestroy(g2));
  return 0;
}

static int g_calls = 0;
static void CUDART_CB countCall(void*) { ++g_calls; }

// input -> device, a kernel, a host function, device -> output.
static int hostCopiesAndAHostFunction(cudaStream_t s) {
  std::vector<float> in(N), out(N);
  float* d;
  CHECK(cudaMalloc(&d, N * sizeof(float)));
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d, in.data(), N * sizeof(float), cudaMemcpyHostToDevice, s));
  addv<<<N / 256, 256, 0, s>>>(d, N, 0.5f);
  CHECK(cudaLaunchHostFunc(s, countCall, nullptr));
  CHECK(cudaMemcpyAsync(out.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int launch = 0; launch < 10; ++launch) {
    for (int i = 0; i < N; ++i) in[i] = float(i + launch);
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; ++i) EXPECT(out[i] == float(i + launch) + 0.5f);
    EXPECT(g_calls == launch + 1);
  }
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaFree(d));
  return 0;
}

int main(int argc, char** argv) {
  // --native: on NVIDIA's runtime, where a graph naming freed memory is undefined behaviour.
  const bool native = argc > 1 && std::strcmp(argv[1], "--native") == 0;
  float *buf, *copy, *y;
  CHECK(cudaMalloc(&buf, N * sizeof(float)));
  CHECK(cudaMalloc(&copy, N * sizeof(float)));
  CHECK(cudaMalloc(&y, N * sizeof(float)));
  std::vector<float> ones(N, 1.0f);
  CHECK(cudaMemcpy(y, ones.data(), N * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) {
    std::printf("FAILED: cublasCreate\n");
    return 1;
  }
  const float two = 2.0f;

  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(buf, 0, N * sizeof(float), s));
  for (int k = 1; k <= kKernels; ++k) addv<<<N / 256, 256, 0, s>>>(buf, N, float(k));
  CHECK(cudaMemcpyAsync(copy, buf, N * sizeof(float), cudaMemcpyDeviceToDevice, s));
  if (cublasSaxpy(h, N, &two, copy, 1, y, 1) != CUBLAS_STATUS_SUCCESS) {
    std::printf("FAILED: cublasSaxpy in capture\n");
    return 1;
  }
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < kLaunches; ++i) CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  if (check(buf, copy, y, kLaunches)) return 1;

  // Memory freed elsewhere: the graph is checked (and made) again, and stays right.
  float* other;
  CHECK(cudaMalloc(&other, 1024));
  CHECK(cudaFree(other));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  if (check(buf, copy, y, kLaunches + 1)) return 1;

  if (!native && freedMemoryIsRefused(s, buf)) return 1;
  if (hostCopiesAndAHostFunction(s)) return 1;
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  cublasDestroy(h);
  CHECK(cudaFree(buf));
  CHECK(cudaFree(copy));
  CHECK(cudaFree(y));
  std::printf("graph_native: %d launches of a %d-node graph, all checks passed\n", kLaunches + 1, kKernels + 3);
  return 0;
}
