// cublas_check's complex gemms (included by cublas_check.cu): cublasCgemm,
// Zgemm, C/Zgemm3m, the strided-batched and batched forms and cublasGemmEx
// on CUDA_C_32F / CUDA_C_64F, every operation N, T and C (conjugate
// transpose) with padded leading dimensions, host and device scalars,
// against a double-precision complex computation of its own.
#pragma once

#include <cublas_v2.h>
#include <cuComplex.h>

#include <complex>
#include <vector>

using cd = std::complex<double>;
inline cd cval(cuComplex z) { return {cuCrealf(z), cuCimagf(z)}; }
inline cd cval(cuDoubleComplex z) { return {cuCreal(z), cuCimag(z)}; }
template <typename T> T cmake(cd z);
template <> inline cuComplex cmake<cuComplex>(cd z) { return make_cuComplex(float(z.real()), float(z.imag())); }
template <> inline cuDoubleComplex cmake<cuDoubleComplex>(cd z) { return make_cuDoubleComplex(z.real(), z.imag()); }

template <typename T>
std::vector<T> complexRandoms(size_t n) {
  auto re = randoms<double>(n), im = randoms<double>(n);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = cmake<T>({re[i], im[i]});
  return v;
}

// op(X)(i, j) of a column-major matrix with leading dimension ld.
template <typename T>
cd opAt(cublasOperation_t op, const std::vector<T>& X, int ld, int i, int j) {
  if (op == CUBLAS_OP_N) return cval(X[i + j * ld]);
  const cd x = cval(X[j + i * ld]);
  return op == CUBLAS_OP_C ? std::conj(x) : x;
}

// Largest error of `got` (C, m x n, leading dimension ldc) against
// alpha op(A) op(B) + beta C0, relative to 1 or the value; elements past m in
// each column must be C0's.
template <typename T>
double complexGemmErr(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, cd alpha, const std::vector<T>& A,
                      int lda, const std::vector<T>& B, int ldb, cd beta, const std::vector<T>& C0, int ldc,
                      const std::vector<T>& got) {
  double worst = 0;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < ldc; ++i) {
      cd want = cval(C0[i + j * ldc]);
      if (i < m) {
        cd s = 0;
        for (int p = 0; p < k; ++p) s += opAt(ta, A, lda, i, p) * opAt(tb, B, ldb, p, j);
        want = alpha * s + beta * want;
      }
      worst = std::max(worst, std::abs(cval(got[i + j * ldc]) - want) / std::max(1.0, std::abs(want)));
    }
  return worst;
}

template <typename T>
void complexGemms(cublasHandle_t h, const char* name,
                  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const T*, const T*, int, const T*, int, const T*, T*, int),
                  cublasStatus_t (*gemm3m)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                           const T*, const T*, int, const T*, int, const T*, T*, int),
                  cudaDataType type, cublasComputeType_t compute) {
  const double tol = sizeof(T) == 16 ? 1e-12 : 2e-5;
  const int m = 13, n = 9, k = 11;
  const cd alpha{0.75, -1.25}, beta{-0.5, 0.25};
  const T ha = cmake<T>(alpha), hb = cmake<T>(beta);
  const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
  for (cublasOperation_t ta : ops)
    for (cublasOperation_t tb : ops) {
      const int lda = (ta == CUBLAS_OP_N ? m : k) + 2, ldb = (tb == CUBLAS_OP_N ? k : n) + 1, ldc = m + 3;
      auto A = complexRandoms<T>(static_cast<size_t>(lda) * (ta == CUBLAS_OP_N ? k : m));
      auto B = complexRandoms<T>(static_cast<size_t>(ldb) * (tb == CUBLAS_OP_N ? n : k));
      auto C = complexRandoms<T>(static_cast<size_t>(ldc) * n);
      T* dA = toDevice(A);
      T* dB = toDevice(B);
      T* dC = toDevice(C);
      OK(gemm(h, ta, tb, m, n, k, &ha, dA, lda, dB, ldb, &hb, dC, ldc));
      double e = complexGemmErr(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, toHost(dC, C.size()));
      CHECK(e < tol, "cublas%sgemm ops %d %d: error %g", name, ta, tb, e);
      cudaMemcpy(dC, C.data(), C.size() * sizeof(T), cudaMemcpyHostToDevice);
      OK(gemm3m(h, ta, tb, m, n, k, &ha, dA, lda, dB, ldb, &hb, dC, ldc));
      e = complexGemmErr(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, toHost(dC, C.size()));
      CHECK(e < tol, "cublas%sgemm3m ops %d %d: error %g", name, ta, tb, e);
      cudaMemcpy(dC, C.data(), C.size() * sizeof(T), cudaMemcpyHostToDevice);
      OK(cublasGemmEx(h, ta, tb, m, n, k, &ha, dA, type, lda, dB, type, ldb, &hb, dC, type, ldc, compute,
                      CUBLAS_GEMM_DEFAULT));
      e = complexGemmErr(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, toHost(dC, C.size()));
      CHECK(e < tol, "cublasGemmEx %s ops %d %d: error %g", name, ta, tb, e);
      cudaFree(dA);
      cudaFree(dB);
      cudaFree(dC);
    }
  {  // device scalars, and beta 0 (C not read: NaNs in it do not leak)
    auto A = complexRandoms<T>(m * k), B = complexRandoms<T>(k * n);
    std::vector<T> C(m * n, cmake<T>({std::nan(""), 0}));
    const T zero = cmake<T>(0);
    T* dA = toDevice(A);
    T* dB = toDevice(B);
    T* dC = toDevice(C);
    T* dAlpha = toDevice(std::vector<T>{ha});
    T* dZero = toDevice(std::vector<T>{zero});
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    OK(gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, dAlpha, dA, m, dB, k, dZero, dC, m));
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    std::vector<T> c0(m * n, zero);
    double e = complexGemmErr(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, A, m, B, k, 0, c0, m, toHost(dC, C.size()));
    CHECK(e < tol, "cublas%sgemm with device scalars and beta 0: error %g", name, e);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dAlpha);
    cudaFree(dZero);
  }
}

// The strided-batched and batched forms: the last matrix of three.
template <typename T>
void complexGemmBatches(cublasHandle_t h, const char* name,
                        cublasStatus_t (*strided)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const T*, const T*, int, long long, const T*, int, long long,
                                                  const T*, T*, int, long long, int),
                        cublasStatus_t (*batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const T*, const T* const[], int, const T* const[], int, const T*,
                                                  T* const[], int, int)) {
  const double tol = sizeof(T) == 16 ? 1e-12 : 2e-5;
  const int m = 6, n = 5, k = 7, batch = 3;
  const cd alpha{1.5, 0.5}, beta{0, 0};
  const T ha = cmake<T>(alpha), hb = cmake<T>(beta);
  auto A = complexRandoms<T>(m * k * batch), B = complexRandoms<T>(k * n * batch);
  std::vector<T> C(m * n * batch, cmake<T>(0));
  T* dA = toDevice(A);
  T* dB = toDevice(B);
  T* dC = toDevice(C);
  OK(strided(h, CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, &ha, dA, k, m * k, dB, k, k * n, &hb, dC, m, m * n, batch));
  auto got = toHost(dC, C.size());
  std::vector<T> a(A.begin() + 2 * m * k, A.end()), b(B.begin() + 2 * k * n, B.end()), c(m * n, cmake<T>(0)),
      g(got.begin() + 2 * m * n, got.end());
  double e = complexGemmErr(CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, alpha, a, k, b, k, beta, c, m, g);
  CHECK(e < tol, "cublas%sgemmStridedBatched, last batch: error %g", name, e);
  std::vector<T*> pa{dA, dA + m * k, dA + 2 * m * k}, pb{dB, dB + k * n, dB + 2 * k * n},
      pc{dC, dC + m * n, dC + 2 * m * n};
  T** da = toDevice(pa);
  T** db = toDevice(pb);
  T** dc = toDevice(pc);
  cudaMemset(dC, 0, C.size() * sizeof(T));
  OK(batched(h, CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, &ha, da, k, db, k, &hb, dc, m, batch));
  auto again = toHost(dC, C.size());
  CHECK(std::memcmp(again.data(), got.data(), got.size() * sizeof(T)) == 0,
        "cublas%sgemmBatched gives what cublas%sgemmStridedBatched gave", name, name);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}
