// cuBLAS semantics the CUDA backend must keep (tests/e2e/ordering_e2e_test.cc
// runs each case in its own process): `blas_threads CASE`, "ok CASE" or
// "FAIL CASE: why".
//   dots       4 threads, each with its own stream and handle, take dot
//              products into host memory at once: each gets its own result
//   heuristic  cublasLtMatmulAlgoGetHeuristic's status is printed; whatever it
//              is, the session goes on working (a cuBLAS failure is the
//              call's, never a sticky fault)
//   workspace  GEMMs without and with cublasSetWorkspace give right results
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cases.h"

using namespace cases;

namespace {

using cases::check;
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

void caseDots() {
  constexpr int kThreads = 4, kRounds = 100, n = 1000;
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cudaStream_t s;
      cublasHandle_t h;
      float *x, *y;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) || cublasCreate(&h) || cublasSetStream(h, s) ||
          cudaMalloc(&x, n * 4) || cudaMalloc(&y, n * 4)) {
        ++errors;
        return;
      }
      // x = t + 1 everywhere, y = 1: the dot product is n * (t + 1).
      std::vector<float> hx(n, static_cast<float>(t + 1)), hy(n, 1.0f);
      cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice);
      for (int r = 0; r < kRounds; ++r) {
        float result = -1;
        if (cublasSdot(h, n, x, 1, y, 1, &result) != CUBLAS_STATUS_SUCCESS) ++errors;
        else if (result != static_cast<float>(n * (t + 1))) ++wrong;
      }
      cublasDestroy(h);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  if (errors) fail(std::to_string(errors.load()) + " calls failed");
  if (wrong) fail(std::to_string(wrong.load()) + " of " + std::to_string(kThreads * kRounds) + " dot products returned another thread's result");
}

// C = A * B for 4x4 matrices through cublasSgemm; checks C.
void gemmAndCheck(cublasHandle_t h, const char* what) {
  constexpr int n = 4;
  float *a, *b, *c;
  check(cudaMalloc(&a, n * n * 4), "cudaMalloc");
  check(cudaMalloc(&b, n * n * 4), "cudaMalloc");
  check(cudaMalloc(&c, n * n * 4), "cudaMalloc");
  std::vector<float> ha(n * n), hb(n * n), hc(n * n, 0);
  for (int i = 0; i < n * n; ++i) ha[i] = static_cast<float>(i % 5), hb[i] = static_cast<float>((i * 3) % 7);
  check(cudaMemcpy(a, ha.data(), n * n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(b, hb.data(), n * n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  float one = 1, zero = 0;
  check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n), what);
  check(cudaMemcpy(hc.data(), c, n * n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (int col = 0; col < n; ++col)
    for (int row = 0; row < n; ++row) {
      float want = 0;
      for (int k = 0; k < n; ++k) want += ha[k * n + row] * hb[col * n + k];
      if (std::fabs(hc[col * n + row] - want) > 1e-4f) fail(std::string(what) + ": wrong result");
    }
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

void caseHeuristic() {
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  check(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 4, 4), "layout");
  check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 4, 4, 4), "layout");
  check(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 4, 4, 4), "layout");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  cublasLtMatmulHeuristicResult_t results[4];
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 4, results, &found);
  std::printf("heuristic status %d\n", static_cast<int>(st));
  // Whatever the heuristic said, nothing else is poisoned.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the heuristic");
  check(cudaGetLastError(), "cudaGetLastError after the heuristic");
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  gemmAndCheck(h, "cublasSgemm after the heuristic");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize at the end");
}

void caseWorkspace() {
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  gemmAndCheck(h, "cublasSgemm with cuBLAS's own workspace");
  void* ws;
  check(cudaMalloc(&ws, 1 << 20), "cudaMalloc");
  check(cublasSetWorkspace(h, ws, 1 << 20), "cublasSetWorkspace");
  gemmAndCheck(h, "cublasSgemm with the program's workspace");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  g_case = argv[1];
  if (!std::strcmp(g_case, "dots")) caseDots();
  else if (!std::strcmp(g_case, "heuristic")) caseHeuristic();
  else if (!std::strcmp(g_case, "workspace")) caseWorkspace();
  else return 2;
  std::printf("ok %s\n", g_case);
  return 0;
}
