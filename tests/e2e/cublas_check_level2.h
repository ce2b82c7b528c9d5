// cublas_check's trmv, trsv, symv (S, D, C, Z) and hemv (C, Z), included by
// cublas_check.cu after cublas_check_complex.h (whose dense helpers it
// uses), against a double-precision complex computation of its own.
#pragma once

#include <type_traits>


template <typename T>
std::vector<T> anyRandoms(size_t n) {
  if constexpr (std::is_floating_point_v<T>) return randoms<T>(n);
  else return complexRandoms<T>(n);
}

template <typename T, typename I>
struct Level2More {
  cublasStatus_t (*trmv)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, I, const T*, I, T*, I);
  cublasStatus_t (*trsv)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, I, const T*, I, T*, I);
  cublasStatus_t (*symv)(cublasHandle_t, cublasFillMode_t, I, const T*, const T*, I, const T*, I, const T*, T*, I);
  cublasStatus_t (*hemv)(cublasHandle_t, cublasFillMode_t, I, const T*, const T*, I, const T*, I, const T*, T*, I);
};

template <typename T, typename I>
void level2More(cublasHandle_t h, const char* P, const Level2More<T, I>& f) {
  constexpr bool kComplex = !std::is_floating_point_v<T>;
  const double tol = sizeof(T) == 4 || sizeof(T) == 8 && kComplex ? 1e-4 : 1e-11;
  const int n = 9, lda = 11, inc = 2;
  auto A = anyRandoms<T>(lda * n);
  for (int i = 0; i < n; ++i) A[i + i * lda] = cmake<T>(cval(A[i + i * lda]) + cd(4, kComplex ? 1 : 0));
  T* dA = toDevice(A);
  auto err = [](cd got, cd want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); };
  for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER})
    for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C}) {
      const bool unit = op == CUBLAS_OP_T;
      const cublasDiagType_t diag = unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
      Dense tri = fromTriangle(A, lda, n, uplo, Shape::kTriangular, unit), opA(n, n);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i)
          opA(i, j) = op == CUBLAS_OP_N ? tri(i, j) : op == CUBLAS_OP_T || !kComplex ? tri(j, i) : std::conj(tri(j, i));
      auto x = anyRandoms<T>(n * inc);
      T* dx = toDevice(x);
      OK(f.trmv(h, uplo, op, diag, n, dA, lda, dx, inc));
      auto got = toHost(dx, x.size());
      double e = 0;
      for (int i = 0; i < n; ++i) {
        cd s = 0;
        for (int j = 0; j < n; ++j) s += opA(i, j) * cval(x[j * inc]);
        e = std::max(e, err(cval(got[i * inc]), s));
      }
      CHECK(e < tol, "cublas%strmv fill %d op %d: error %g", P, uplo, op, e);
      cudaMemcpy(dx, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice);
      OK(f.trsv(h, uplo, op, diag, n, dA, lda, dx, inc));  // op(A) got = x
      got = toHost(dx, x.size());
      e = 0;
      for (int i = 0; i < n; ++i) {
        cd s = 0;
        for (int j = 0; j < n; ++j) s += opA(i, j) * cval(got[j * inc]);
        e = std::max(e, std::abs(s - cval(x[i * inc])));
      }
      CHECK(e < tol * 10, "cublas%strsv fill %d op %d: residual %g", P, uplo, op, e);
      cudaFree(dx);
    }
  const cd alpha = kComplex ? cd(0.5, -1.0) : cd(0.75), beta = kComplex ? cd(-0.25, 0.5) : cd(-1.5);
  const T ha = cmake<T>(alpha), hb = cmake<T>(beta);
  for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER})
    for (bool herm : {false, true}) {
      if (herm && !kComplex) continue;
      auto x = anyRandoms<T>(n * inc), y = anyRandoms<T>(n);
      T *dx = toDevice(x), *dy = toDevice(y);
      OK((herm ? f.hemv : f.symv)(h, uplo, n, &ha, dA, lda, dx, inc, &hb, dy, 1));
      auto got = toHost(dy, y.size());
      Dense full = fromTriangle(A, lda, n, uplo, herm ? Shape::kHermitian : Shape::kSymmetric);
      double e = 0;
      for (int i = 0; i < n; ++i) {
        cd s = 0;
        for (int j = 0; j < n; ++j) s += full(i, j) * cval(x[j * inc]);
        e = std::max(e, err(cval(got[i]), alpha * s + beta * cval(y[i])));
      }
      CHECK(e < tol, "cublas%s%s fill %d: error %g", P, herm ? "hemv" : "symv", uplo, e);
      cudaFree(dx), cudaFree(dy);
    }
  cudaFree(dA);
}
