// cuBLASLt as rgpu implements it, compared with a CPU reference: descriptors,
// layouts and preferences with their attributes (and the stack-allocated Init
// forms), the heuristic, and cublasLtMatmul for f32, f64, f16 and bf16 with
// transposes, padded and row-major layouts, batches, scalars in device memory,
// and every epilogue: bias, ReLU and GELU (with their auxiliary outputs) and
// the gradient forms DRELU, DGELU, their BGRAD variants, BGRADA, BGRADB.
// Exit status 0 only if every check passed.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "blas_check.h"

double gelu(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double geluGrad(double x) {
  double t = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

// A column- or row-major matrix in host memory.
template <typename T>
struct Mat {
  int rows, cols, ld;
  bool row_major;
  std::vector<T> data;
  double at(int r, int c) const { return val(data[row_major ? r * ld + c : r + c * ld]); }
};

template <typename T>
Mat<T> mat(int rows, int cols, int pad, bool row_major = false) {
  int ld = (row_major ? cols : rows) + pad;
  return {rows, cols, ld, row_major, randoms<T>(static_cast<size_t>(ld) * (row_major ? rows : cols))};
}

cublasLtMatrixLayout_t layoutOf(cudaDataType t, int rows, int cols, int ld, bool row_major) {
  cublasLtMatrixLayout_t l = nullptr;
  OK(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
  if (row_major) {
    cublasLtOrder_t o = CUBLASLT_ORDER_ROW;
    OK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &o, sizeof o));
  }
  return l;
}

// D = alpha op(A) op(B) + beta C for f32/f64/f16/bf16 with one setting each.
template <typename T>
void plainMatmul(cublasLtHandle_t lt, const char* name, cudaDataType type, cublasComputeType_t compute,
                 cudaDataType scale, cublasOperation_t ta, cublasOperation_t tb, bool row_major, double tol) {
  const int m = 24, n = 17, k = 31;
  auto A = ta == CUBLAS_OP_N ? mat<T>(m, k, 3, row_major) : mat<T>(k, m, 3, row_major);
  auto B = tb == CUBLAS_OP_N ? mat<T>(k, n, 1, row_major) : mat<T>(n, k, 1, row_major);
  auto C = mat<T>(m, n, 2, row_major);
  cublasLtMatmulDesc_t desc;
  OK(cublasLtMatmulDescCreate(&desc, compute, scale));
  OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  auto la = layoutOf(type, A.rows, A.cols, A.ld, row_major), lb = layoutOf(type, B.rows, B.cols, B.ld, row_major),
       lc = layoutOf(type, m, n, C.ld, row_major);
  T* dA = toDevice(A.data);
  T* dB = toDevice(B.data);
  T* dC = toDevice(C.data);
  float a32 = 1.5f, b32 = -0.5f;
  double a64 = 1.5, b64 = -0.5;
  const void* alpha = scale == CUDA_R_64F ? static_cast<const void*>(&a64) : &a32;
  const void* beta = scale == CUDA_R_64F ? static_cast<const void*>(&b64) : &b32;
  OK(cublasLtMatmul(lt, desc, alpha, dA, la, dB, lb, beta, dC, lc, dC, lc, nullptr, nullptr, 0, 0));
  auto got = toHost(dC, C.data.size());
  Mat<T> G{m, n, C.ld, row_major, got};
  double worst = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p)
        s += (ta == CUBLAS_OP_N ? A.at(i, p) : A.at(p, i)) * (tb == CUBLAS_OP_N ? B.at(p, j) : B.at(j, p));
      double want = 1.5 * s - 0.5 * C.at(i, j);
      worst = std::max(worst, std::fabs(G.at(i, j) - want) / std::max(1.0, std::fabs(want)));
    }
  CHECK(worst < tol, "%s %c%c%s: error %g", name, ta == CUBLAS_OP_N ? 'N' : 'T', tb == CUBLAS_OP_N ? 'N' : 'T',
        row_major ? " row-major" : "", worst);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
}

// f32 epilogues: D = epi(A B (+ bias)), with aux outputs or inputs.
struct Epi {
  cublasLtHandle_t lt;
  int m = 20, n = 12, k = 9;
  std::vector<float> A = randoms<float>(m * k), B = randoms<float>(k * n), bias = randoms<float>(m);
  float *dA = toDevice(A), *dB = toDevice(B);
  std::vector<double> G;  // A B in double
  Epi(cublasLtHandle_t h) : lt(h), G(m * n) {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += A[i + p * m] * double(B[p + j * k]);
        G[i + j * m] = s;
      }
  }
  // Runs the matmul with epilogue `e`; bias, aux (with ld) as given. Returns D.
  std::vector<float> run(cublasLtEpilogue_t e, float* dbias, void* daux, int64_t aux_ld) {
    cublasLtMatmulDesc_t desc;
    OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (dbias) OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
    if (daux) {
      OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &daux, sizeof daux));
      OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    auto la = layoutOf(CUDA_R_32F, m, k, m, false), lb = layoutOf(CUDA_R_32F, k, n, k, false),
         ld = layoutOf(CUDA_R_32F, m, n, m, false);
    float* dD = toDevice(std::vector<float>(m * n, 7.0f));
    float one = 1, zero = 0;
    OK(cublasLtMatmul(lt, desc, &one, dA, la, dB, lb, &zero, dD, ld, dD, ld, nullptr, nullptr, 0, 0));
    auto out = toHost(dD, m * n);
    cudaFree(dD);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return out;
  }
};

double maxDiff(const std::vector<float>& got, const std::vector<double>& want) {
  double w = 0;
  for (size_t i = 0; i < want.size(); ++i) w = std::max(w, std::fabs(got[i] - want[i]));
  return w;
}

void epilogues(cublasLtHandle_t lt) {
  Epi e(lt);
  const int m = e.m, n = e.n;
  float* dbias = toDevice(e.bias);
  std::vector<double> want(m * n);
  auto expect = [&](const char* name, const std::vector<float>& got, auto f) {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) want[i + j * m] = f(e.G[i + j * m], i);
    CHECK(maxDiff(got, want) < 1e-5, "epilogue %s: error %g", name, maxDiff(got, want));
  };
  expect("DEFAULT", e.run(CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0), [](double g, int) { return g; });
  expect("BIAS", e.run(CUBLASLT_EPILOGUE_BIAS, dbias, nullptr, 0), [&](double g, int i) { return g + e.bias[i]; });
  expect("RELU", e.run(CUBLASLT_EPILOGUE_RELU, nullptr, nullptr, 0), [](double g, int) { return g > 0 ? g : 0; });
  expect("RELU_BIAS", e.run(CUBLASLT_EPILOGUE_RELU_BIAS, dbias, nullptr, 0),
         [&](double g, int i) { return g + e.bias[i] > 0 ? g + e.bias[i] : 0; });
  expect("GELU", e.run(CUBLASLT_EPILOGUE_GELU, nullptr, nullptr, 0), [](double g, int) { return gelu(g); });
  expect("GELU_BIAS", e.run(CUBLASLT_EPILOGUE_GELU_BIAS, dbias, nullptr, 0),
         [&](double g, int i) { return gelu(g + e.bias[i]); });
  // RELU_AUX_BIAS: the mask (a bit per element, leading dimension 128 bits).
  const int64_t mask_ld = 128;
  uint8_t* dmask = nullptr;
  cudaMalloc(&dmask, mask_ld / 8 * n);
  cudaMemset(dmask, 0xaa, mask_ld / 8 * n);
  expect("RELU_AUX_BIAS", e.run(CUBLASLT_EPILOGUE_RELU_AUX_BIAS, dbias, dmask, mask_ld),
         [&](double g, int i) { return g + e.bias[i] > 0 ? g + e.bias[i] : 0; });
  auto mask = toHost(dmask, mask_ld / 8 * n);
  bool mask_ok = true;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      int64_t bit = i + j * mask_ld;
      mask_ok &= ((mask[bit / 8] >> (bit % 8)) & 1) == (e.G[i + j * m] + e.bias[i] > 0 ? 1 : 0);
    }
  CHECK(mask_ok, "RELU_AUX_BIAS mask");
  // GELU_AUX_BIAS: the aux holds GELU's input.
  float* dpre = toDevice(std::vector<float>(m * n, 0));
  expect("GELU_AUX_BIAS", e.run(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dbias, dpre, m),
         [&](double g, int i) { return gelu(g + e.bias[i]); });
  auto pre = toHost(dpre, m * n);
  std::vector<double> want_pre(m * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) want_pre[i + j * m] = e.G[i + j * m] + e.bias[i];
  CHECK(maxDiff(pre, want_pre) < 1e-5, "GELU_AUX_BIAS pre-activations");
  // Gradients: DRELU uses the forward mask, DGELU the forward pre-activation.
  auto relu_bit = [&](int i, int j) {
    int64_t bit = i + static_cast<int64_t>(j) * mask_ld;
    return (mask[bit / 8] >> (bit % 8)) & 1;
  };
  {
    auto got = e.run(CUBLASLT_EPILOGUE_DRELU, nullptr, dmask, mask_ld);
    std::vector<double> w(m * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) w[i + j * m] = relu_bit(i, j) ? e.G[i + j * m] : 0;
    CHECK(maxDiff(got, w) < 1e-5, "DRELU: error %g", maxDiff(got, w));
  }
  {
    auto got = e.run(CUBLASLT_EPILOGUE_DRELU_BGRAD, dbias, dmask, mask_ld);
    std::vector<double> w(m * n), bgrad(m, 0);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        w[i + j * m] = relu_bit(i, j) ? e.G[i + j * m] : 0;
        bgrad[i] += w[i + j * m];
      }
    CHECK(maxDiff(got, w) < 1e-5, "DRELU_BGRAD: error %g", maxDiff(got, w));
    auto gb = toHost(dbias, m);
    CHECK(maxDiff(gb, bgrad) < 1e-4, "DRELU_BGRAD bias gradient: error %g", maxDiff(gb, bgrad));
  }
  {
    auto got = e.run(CUBLASLT_EPILOGUE_DGELU_BGRAD, dbias, dpre, m);
    std::vector<double> w(m * n), bgrad(m, 0);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        w[i + j * m] = e.G[i + j * m] * geluGrad(pre[i + j * m]);
        bgrad[i] += w[i + j * m];
      }
    CHECK(maxDiff(got, w) < 1e-5, "DGELU_BGRAD: error %g", maxDiff(got, w));
    auto gb = toHost(dbias, m);
    CHECK(maxDiff(gb, bgrad) < 1e-4, "DGELU_BGRAD bias gradient: error %g", maxDiff(gb, bgrad));
    auto got2 = e.run(CUBLASLT_EPILOGUE_DGELU, nullptr, dpre, m);
    CHECK(maxDiff(got2, w) < 1e-5, "DGELU: error %g", maxDiff(got2, w));
  }
  {  // BGRADA: row sums of A (over k); BGRADB: column sums of B.
    float* dg = toDevice(std::vector<float>(std::max(m, e.n), 0));
    auto got = e.run(CUBLASLT_EPILOGUE_BGRADA, dg, nullptr, 0);
    std::vector<double> sa(m, 0), sb(e.n, 0);
    for (int i = 0; i < m; ++i)
      for (int p = 0; p < e.k; ++p) sa[i] += e.A[i + p * m];
    for (int j = 0; j < e.n; ++j)
      for (int p = 0; p < e.k; ++p) sb[j] += e.B[p + j * e.k];
    CHECK(maxDiff(toHost(dg, m), sa) < 1e-5, "BGRADA");
    CHECK(maxDiff(got, e.G) < 1e-5, "BGRADA leaves D = A B");
    e.run(CUBLASLT_EPILOGUE_BGRADB, dg, nullptr, 0);
    CHECK(maxDiff(toHost(dg, e.n), sb) < 1e-5, "BGRADB");
    cudaFree(dg);
  }
  cudaFree(dbias);
  cudaFree(dmask);
  cudaFree(dpre);
}

void batchedAndDeviceScalars(cublasLtHandle_t lt) {
  const int m = 10, n = 6, k = 4, batch = 3;
  const int64_t sa = m * k + 2, sb = k * n + 5, sd = m * n + 1;
  auto A = randoms<float>(sa * batch), B = randoms<float>(sb * batch);
  float* dA = toDevice(A);
  float* dB = toDevice(B);
  float* dD = toDevice(std::vector<float>(sd * batch, 0));
  float* dab = toDevice(std::vector<float>{2.0f, 0.0f});
  cublasLtMatmulDescOpaque_t storage;  // the Init form, on the stack
  cublasLtMatmulDesc_t desc = &storage;
  CHECK(cublasLtMatmulDescInit_internal(desc, sizeof storage - 1, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
            CUBLAS_STATUS_INVALID_VALUE,
        "Init into storage smaller than the descriptor");
  OK(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
  OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
  cublasLtMatrixLayout_t l[3];
  int64_t strides[3] = {sa, sb, sd};
  int rows[3] = {m, k, m}, cols[3] = {k, n, n};
  for (int i = 0; i < 3; ++i) {
    l[i] = layoutOf(CUDA_R_32F, rows[i], cols[i], rows[i], false);
    int32_t b = batch;
    OK(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
    OK(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof strides[i]));
  }
  OK(cublasLtMatmul(lt, desc, dab, dA, l[0], dB, l[1], dab + 1, dD, l[2], dD, l[2], nullptr, nullptr, 0, 0));
  auto got = toHost(dD, sd * batch);
  double worst = 0;
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += A[b * sa + i + p * m] * double(B[b * sb + p + j * k]);
        worst = std::max(worst, std::fabs(got[b * sd + i + j * m] - 2 * s));
      }
  CHECK(worst < 1e-5, "batched, alpha and beta in device memory: error %g", worst);
  for (auto x : l) cublasLtMatrixLayoutDestroy(x);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dD);
  cudaFree(dab);
}

int main() {
  cublasLtHandle_t lt = nullptr;
  OK(cublasLtCreate(&lt));
  if (!lt) return 1;
  CHECK(cublasLtGetVersion() > 0, "version");
  CHECK(std::strcmp(cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS") == 0, "status name");

  // Attributes round trip; the size query; a wrong size is refused.
  cublasLtMatmulDesc_t desc;
  OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_BIAS, back = CUBLASLT_EPILOGUE_DEFAULT;
  OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  size_t written = 0;
  OK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &back, sizeof back, &written));
  CHECK(back == epi && written == sizeof epi, "epilogue round trip");
  OK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, nullptr, 0, &written));
  CHECK(written == sizeof(void*), "size query");
  int64_t wrong = 0;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &wrong, sizeof wrong) ==
            CUBLAS_STATUS_INVALID_VALUE, "a wrong attribute size is refused");
  OK(cublasLtMatmulDescDestroy(desc));

  // The heuristic.
  {
    cublasLtMatmulDesc_t d;
    OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    auto la = layoutOf(CUDA_R_32F, 64, 32, 64, false), lb = layoutOf(CUDA_R_32F, 32, 16, 32, false),
         lc = layoutOf(CUDA_R_32F, 64, 16, 64, false);
    cublasLtMatmulPreference_t pref;
    OK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = 1 << 22;
    OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t results[4] = {};
    int found = 0;
    OK(cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 4, results, &found));
    CHECK(found >= 1 && results[0].state == CUBLAS_STATUS_SUCCESS && results[0].workspaceSize <= ws,
          "heuristic: %d algorithms", found);
    // The algorithm it gave is accepted by cublasLtMatmul.
    float* dA = toDevice(randoms<float>(64 * 32));
    float* dB = toDevice(randoms<float>(32 * 16));
    float* dC = toDevice(std::vector<float>(64 * 16, 0));
    void* dws = nullptr;
    cudaMalloc(&dws, ws);
    float one = 1, zero = 0;
    OK(cublasLtMatmul(lt, d, &one, dA, la, dB, lb, &zero, dC, lc, dC, lc, &results[0].algo, dws, ws, 0));
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "matmul with the heuristic's algorithm");
    // Shapes that do not multiply are refused before anything runs.
    CHECK(cublasLtMatmul(lt, d, &one, dA, la, dA, la, &zero, dC, lc, dC, lc, nullptr, nullptr, 0, 0) ==
              CUBLAS_STATUS_INVALID_VALUE, "mismatched shapes");
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dws);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
  }

  for (auto ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (auto tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      plainMatmul<float>(lt, "f32", CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, ta, tb, false, 1e-5);
      plainMatmul<float>(lt, "f32", CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F, ta, tb, true, 1e-5);
    }
  plainMatmul<double>(lt, "f64", CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F, CUBLAS_OP_T, CUBLAS_OP_N, false, 1e-12);
  plainMatmul<__half>(lt, "f16", CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, false, 2e-2);
  plainMatmul<__nv_bfloat16>(lt, "bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, true,
                             5e-2);
  epilogues(lt);
  batchedAndDeviceScalars(lt);
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "no asynchronous error");
  OK(cublasLtDestroy(lt));
  std::printf("cublaslt_check: %d checks, %d failed\n", g_checks, g_failed);
  return g_failed ? 1 : 0;
}
