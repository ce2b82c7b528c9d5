// cublas_check's complex calls (included by cublas_check.cu): cublasCgemm,
// Zgemm, C/Zgemm3m, the strided-batched and batched forms and cublasGemmEx
// on CUDA_C_32F / CUDA_C_64F, every operation N, T and C (conjugate
// transpose) with padded leading dimensions, host and device scalars; the
// rest of level 3 (with herk, her2k, hemm), level 1 and 2, and cublasXt's
// C/Z gemm; each against a double-precision complex computation of its own.
#pragma once

#include <cuComplex.h>
#include <cublasXt.h>
#include <cublas_v2.h>

#include <complex>
#include <vector>

using cd = std::complex<double>;
inline cd cval(cuComplex z) { return {cuCrealf(z), cuCimagf(z)}; }
inline cd cval(cuDoubleComplex z) { return {cuCreal(z), cuCimag(z)}; }
template <typename T> T cmake(cd z);
template <> inline cuComplex cmake<cuComplex>(cd z) { return make_cuComplex(float(z.real()), float(z.imag())); }
template <> inline cuDoubleComplex cmake<cuDoubleComplex>(cd z) { return make_cuDoubleComplex(z.real(), z.imag()); }
// (Real values too, for the helpers cublas_check_level2.h shares.)
inline cd cval(float x) { return x; }
inline cd cval(double x) { return x; }
template <> inline float cmake<float>(cd z) { return static_cast<float>(z.real()); }
template <> inline double cmake<double>(cd z) { return z.real(); }

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

// ---- level 3 beyond gemm (C and Z) ---------------------------------------------
// Dense references in std::complex<double>: M(i, j) of an r x c matrix.
struct Dense {
  int r = 0, c = 0;
  std::vector<cd> v;
  Dense(int rows, int cols) : r(rows), c(cols), v(static_cast<size_t>(rows) * cols) {}
  cd& operator()(int i, int j) { return v[i + static_cast<size_t>(j) * r]; }
  cd operator()(int i, int j) const { return v[i + static_cast<size_t>(j) * r]; }
};
template <typename T>
Dense denseOp(cublasOperation_t op, const std::vector<T>& X, int ld, int rows, int cols) {  // op(X): rows x cols
  Dense d(rows, cols);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) d(i, j) = opAt(op, X, ld, i, j);
  return d;
}
inline Dense mul(const Dense& a, const Dense& b) {
  Dense d(a.r, b.c);
  for (int j = 0; j < b.c; ++j)
    for (int p = 0; p < a.c; ++p)
      for (int i = 0; i < a.r; ++i) d(i, j) += a(i, p) * b(p, j);
  return d;
}
// The square matrix a triangle stands for: triangular (zeros, unit diagonal
// when `unit`), symmetric, or Hermitian (real diagonal) from `uplo`'s triangle.
enum class Shape { kTriangular, kSymmetric, kHermitian };
template <typename T>
Dense fromTriangle(const std::vector<T>& X, int ld, int n, cublasFillMode_t uplo, Shape shape, bool unit = false) {
  Dense d(n, n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < n; ++i) {
      const bool in = uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j;
      if (i == j) d(i, j) = unit ? cd(1) : shape == Shape::kHermitian ? cd(cval(X[i + j * ld]).real()) : cval(X[i + j * ld]);
      else if (in) d(i, j) = cval(X[i + j * ld]);
      else if (shape == Shape::kSymmetric) d(i, j) = cval(X[j + i * ld]);
      else if (shape == Shape::kHermitian) d(i, j) = std::conj(cval(X[j + i * ld]));
    }
  return d;
}
// Largest relative error of got (ld) against want, over `uplo`'s triangle
// only (-1: all); outside it got must equal `keep`.
template <typename T>
double denseErr(const std::vector<T>& got, int ld, const Dense& want, int uplo = -1,
                const std::vector<T>* keep = nullptr) {
  double worst = 0;
  for (int j = 0; j < want.c; ++j)
    for (int i = 0; i < want.r; ++i) {
      const bool in = uplo < 0 || (uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j);
      const cd w = in ? want(i, j) : cval((*keep)[i + j * ld]);
      worst = std::max(worst, std::abs(cval(got[i + j * ld]) - w) / std::max(1.0, std::abs(w)));
    }
  return worst;
}

template <typename T, typename R, typename I>
struct ComplexLevel3 {
  cublasStatus_t (*geam)(cublasHandle_t, cublasOperation_t, cublasOperation_t, I, I, const T*, const T*, I,
                         const T*, const T*, I, T*, I);
  cublasStatus_t (*dgmm)(cublasHandle_t, cublasSideMode_t, I, I, const T*, I, const T*, I, T*, I);
  cublasStatus_t (*trsm)(cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, I, I,
                         const T*, const T*, I, T*, I);
  cublasStatus_t (*trmm)(cublasHandle_t, cublasSideMode_t, cublasFillMode_t, cublasOperation_t, cublasDiagType_t, I, I,
                         const T*, const T*, I, const T*, I, T*, I);
  cublasStatus_t (*symm)(cublasHandle_t, cublasSideMode_t, cublasFillMode_t, I, I, const T*, const T*, I, const T*, I,
                         const T*, T*, I);
  cublasStatus_t (*hemm)(cublasHandle_t, cublasSideMode_t, cublasFillMode_t, I, I, const T*, const T*, I, const T*, I,
                         const T*, T*, I);
  cublasStatus_t (*syrk)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, I, I, const T*, const T*, I, const T*,
                         T*, I);
  cublasStatus_t (*herk)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, I, I, const R*, const T*, I, const R*,
                         T*, I);
  cublasStatus_t (*syr2k)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, I, I, const T*, const T*, I, const T*,
                          I, const T*, T*, I);
  cublasStatus_t (*her2k)(cublasHandle_t, cublasFillMode_t, cublasOperation_t, I, I, const T*, const T*, I, const T*,
                          I, const R*, T*, I);
};

template <typename T, typename R, typename I>
void complexLevel3(cublasHandle_t h, const char* P, const ComplexLevel3<T, R, I>& f) {
  const double tol = sizeof(T) == 16 ? 1e-11 : 1e-4;
  const int m = 7, n = 5, k = 6;
  const cd alpha{0.5, -0.75}, beta{-1.25, 0.5};
  const T ha = cmake<T>(alpha), hb = cmake<T>(beta);
  auto run = [&](auto&& body) { body(); };
  run([&] {  // geam: C = alpha op(A) + beta op(B), every pair of N, T, C
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C})
      for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_C}) {
        const int lda = (ta == CUBLAS_OP_N ? m : n) + 1, ldb = (tb == CUBLAS_OP_N ? m : n) + 2, ldc = m + 1;
        auto A = complexRandoms<T>(lda * (ta == CUBLAS_OP_N ? n : m)), B = complexRandoms<T>(ldb * (tb == CUBLAS_OP_N ? n : m));
        std::vector<T> C(ldc * n, cmake<T>(0));
        T *dA = toDevice(A), *dB = toDevice(B), *dC = toDevice(C);
        OK(f.geam(h, ta, tb, m, n, &ha, dA, lda, &hb, dB, ldb, dC, ldc));
        Dense want = denseOp(ta, A, lda, m, n), b = denseOp(tb, B, ldb, m, n);
        for (size_t i = 0; i < want.v.size(); ++i) want.v[i] = alpha * want.v[i] + beta * b.v[i];
        const double e = denseErr(toHost(dC, C.size()), ldc, want);
        CHECK(e < tol, "cublas%sgeam ops %d %d: error %g", P, ta, tb, e);
        cudaFree(dA), cudaFree(dB), cudaFree(dC);
      }
  });
  run([&] {  // dgmm: C = diag(x) A (x every second element) and A diag(x)
    auto A = complexRandoms<T>(m * n), x = complexRandoms<T>(2 * m);
    std::vector<T> C(m * n, cmake<T>(0));
    T *dA = toDevice(A), *dx = toDevice(x), *dC = toDevice(C);
    OK(f.dgmm(h, CUBLAS_SIDE_LEFT, m, n, dA, m, dx, 2, dC, m));
    Dense want = denseOp(CUBLAS_OP_N, A, m, m, n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) want(i, j) *= cval(x[2 * i]);
    double e = denseErr(toHost(dC, C.size()), m, want);
    CHECK(e < tol, "cublas%sdgmm left: error %g", P, e);
    OK(f.dgmm(h, CUBLAS_SIDE_RIGHT, m, n, dA, m, dx, 1, dC, m));
    want = denseOp(CUBLAS_OP_N, A, m, m, n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) want(i, j) *= cval(x[j]);
    e = denseErr(toHost(dC, C.size()), m, want);
    CHECK(e < tol, "cublas%sdgmm right: error %g", P, e);
    cudaFree(dA), cudaFree(dx), cudaFree(dC);
  });
  // trsm and trmm: every side, fill mode and N/T/C, diagonal unit or not;
  // A well conditioned (a strong diagonal).
  for (cublasSideMode_t side : {CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT})
    for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER})
      for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C}) {
        const bool unit = op == CUBLAS_OP_T;
        const int ka = side == CUBLAS_SIDE_LEFT ? m : n, lda = ka + 1;
        auto A = complexRandoms<T>(lda * ka);
        for (int i = 0; i < ka; ++i) A[i + i * lda] = cmake<T>(cval(A[i + i * lda]) + cd(4, 1));
        auto B = complexRandoms<T>(m * n);
        T *dA = toDevice(A), *dB = toDevice(B);
        // op(tri(A)) as a dense matrix
        Dense tri = fromTriangle(A, lda, ka, uplo, Shape::kTriangular, unit), opA(ka, ka);
        for (int j = 0; j < ka; ++j)
          for (int i = 0; i < ka; ++i)
            opA(i, j) = op == CUBLAS_OP_N ? tri(i, j) : op == CUBLAS_OP_T ? tri(j, i) : std::conj(tri(j, i));
        const cublasDiagType_t diag = unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
        std::vector<T> C(m * n, cmake<T>(0));
        T* dC = toDevice(C);
        OK(f.trmm(h, side, uplo, op, diag, m, n, &ha, dA, lda, dB, m, dC, m));
        Dense b = denseOp(CUBLAS_OP_N, B, m, m, n);
        Dense want = side == CUBLAS_SIDE_LEFT ? mul(opA, b) : mul(b, opA);
        for (auto& v : want.v) v *= alpha;
        double e = denseErr(toHost(dC, C.size()), m, want);
        CHECK(e < tol, "cublas%strmm side %d fill %d op %d: error %g", P, side, uplo, op, e);
        OK(f.trsm(h, side, uplo, op, diag, m, n, &ha, dA, lda, dB, m));  // X over B: op(A) X = alpha B
        Dense x = denseOp(CUBLAS_OP_N, toHost(dB, B.size()), m, m, n);
        Dense back = side == CUBLAS_SIDE_LEFT ? mul(opA, x) : mul(x, opA);
        for (size_t i = 0; i < back.v.size(); ++i) back.v[i] -= alpha * b.v[i];
        double worst = 0;
        for (auto& v : back.v) worst = std::max(worst, std::abs(v));
        CHECK(worst < tol * 10, "cublas%strsm side %d fill %d op %d: residual %g", P, side, uplo, op, worst);
        cudaFree(dA), cudaFree(dB), cudaFree(dC);
      }
  // symm and hemm: each side and fill mode.
  for (cublasSideMode_t side : {CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT})
    for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER})
      for (bool herm : {false, true}) {
        const int ka = side == CUBLAS_SIDE_LEFT ? m : n, lda = ka + 2, ldc = m + 1;
        auto A = complexRandoms<T>(lda * ka), B = complexRandoms<T>(m * n), C = complexRandoms<T>(ldc * n);
        T *dA = toDevice(A), *dB = toDevice(B), *dC = toDevice(C);
        OK((herm ? f.hemm : f.symm)(h, side, uplo, m, n, &ha, dA, lda, dB, m, &hb, dC, ldc));
        Dense full = fromTriangle(A, lda, ka, uplo, herm ? Shape::kHermitian : Shape::kSymmetric);
        Dense b = denseOp(CUBLAS_OP_N, B, m, m, n);
        Dense want = side == CUBLAS_SIDE_LEFT ? mul(full, b) : mul(b, full);
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < m; ++i) want(i, j) = alpha * want(i, j) + beta * cval(C[i + j * ldc]);
        const double e = denseErr(toHost(dC, C.size()), ldc, want);
        CHECK(e < tol, "cublas%s%s side %d fill %d: error %g", P, herm ? "hemm" : "symm", side, uplo, e);
        cudaFree(dA), cudaFree(dB), cudaFree(dC);
      }
  // syrk, syr2k (N, T) and herk, her2k (N, C): one triangle of C, the other untouched.
  for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER})
    for (bool herm : {false, true})
      for (cublasOperation_t op : {CUBLAS_OP_N, herm ? CUBLAS_OP_C : CUBLAS_OP_T}) {
        const int rows = op == CUBLAS_OP_N ? n : k, cols = op == CUBLAS_OP_N ? k : n, lda = rows + 1, ldc = n + 2;
        auto A = complexRandoms<T>(lda * cols), B = complexRandoms<T>(lda * cols), C = complexRandoms<T>(ldc * n);
        if (herm)
          for (int i = 0; i < n; ++i) C[i + i * ldc] = cmake<T>(cd(cval(C[i + i * ldc]).real(), 0));
        const R ra = 0.75, rb = -0.5;
        Dense a = denseOp(op, A, lda, n, k), b = denseOp(op, B, lda, n, k), at(k, n), bt(k, n);
        for (int j = 0; j < n; ++j)
          for (int p = 0; p < k; ++p) {
            at(p, j) = herm ? std::conj(a(j, p)) : a(j, p);
            bt(p, j) = herm ? std::conj(b(j, p)) : b(j, p);
          }
        // rank k
        T *dA = toDevice(A), *dB = toDevice(B), *dC = toDevice(C);
        if (herm) OK(f.herk(h, uplo, op, n, k, &ra, dA, lda, &rb, dC, ldc));
        else OK(f.syrk(h, uplo, op, n, k, &ha, dA, lda, &hb, dC, ldc));
        Dense want = mul(a, at);
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < n; ++i)
            want(i, j) = (herm ? cd(ra) : alpha) * want(i, j) + (herm ? cd(rb) : beta) * cval(C[i + j * ldc]);
        double e = denseErr(toHost(dC, C.size()), ldc, want, uplo, &C);
        CHECK(e < tol, "cublas%s%s fill %d op %d: error %g", P, herm ? "herk" : "syrk", uplo, op, e);
        // rank 2k
        cudaMemcpy(dC, C.data(), C.size() * sizeof(T), cudaMemcpyHostToDevice);
        if (herm) OK(f.her2k(h, uplo, op, n, k, &ha, dA, lda, dB, lda, &rb, dC, ldc));
        else OK(f.syr2k(h, uplo, op, n, k, &ha, dA, lda, dB, lda, &hb, dC, ldc));
        Dense ab = mul(a, bt), ba = mul(b, at);
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < n; ++i)
            want(i, j) = alpha * ab(i, j) + (herm ? std::conj(alpha) : alpha) * ba(i, j) +
                         (herm ? cd(rb) : beta) * cval(C[i + j * ldc]);
        e = denseErr(toHost(dC, C.size()), ldc, want, uplo, &C);
        CHECK(e < tol, "cublas%s%s fill %d op %d: error %g", P, herm ? "her2k" : "syr2k", uplo, op, e);
        cudaFree(dA), cudaFree(dB), cudaFree(dC);
      }
  // What cuBLAS refuses: a complex syrk of the conjugate transpose, a herk of the transpose.
  {
    T* d = toDevice(std::vector<T>(64, cmake<T>(0)));
    const R one = 1;
    CHECK(f.syrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_C, 4, 4, &ha, d, 4, &hb, d, 4) == CUBLAS_STATUS_INVALID_VALUE,
          "cublas%ssyrk of OP_C is INVALID_VALUE", P);
    CHECK(f.herk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, 4, 4, &one, d, 4, &one, d, 4) == CUBLAS_STATUS_INVALID_VALUE,
          "cublas%sherk of OP_T is INVALID_VALUE", P);
    cudaFree(d);
  }
}

// ---- complex level 1 and 2 --------------------------------------------------------
template <typename T, typename R, typename I>
struct ComplexLevel12 {
  cublasStatus_t (*axpy)(cublasHandle_t, I, const T*, const T*, I, T*, I);
  cublasStatus_t (*scal)(cublasHandle_t, I, const T*, T*, I);
  cublasStatus_t (*rscal)(cublasHandle_t, I, const R*, T*, I);
  cublasStatus_t (*copy)(cublasHandle_t, I, const T*, I, T*, I);
  cublasStatus_t (*swap)(cublasHandle_t, I, T*, I, T*, I);
  cublasStatus_t (*dotu)(cublasHandle_t, I, const T*, I, const T*, I, T*);
  cublasStatus_t (*dotc)(cublasHandle_t, I, const T*, I, const T*, I, T*);
  cublasStatus_t (*nrm2)(cublasHandle_t, I, const T*, I, R*);
  cublasStatus_t (*asum)(cublasHandle_t, I, const T*, I, R*);
  cublasStatus_t (*amax)(cublasHandle_t, I, const T*, I, I*);
  cublasStatus_t (*amin)(cublasHandle_t, I, const T*, I, I*);
  cublasStatus_t (*gemv)(cublasHandle_t, cublasOperation_t, I, I, const T*, const T*, I, const T*, I, const T*, T*, I);
  cublasStatus_t (*geru)(cublasHandle_t, I, I, const T*, const T*, I, const T*, I, T*, I);
  cublasStatus_t (*gerc)(cublasHandle_t, I, I, const T*, const T*, I, const T*, I, T*, I);
};

template <typename T, typename R, typename I>
void complexLevel12(cublasHandle_t h, const char* P, const ComplexLevel12<T, R, I>& f) {
  const double tol = sizeof(T) == 16 ? 1e-12 : 1e-5;
  const int n = 37, inc = 2;
  const cd alpha{-0.5, 1.5}, beta{0.25, -0.75};
  const T ha = cmake<T>(alpha), hb = cmake<T>(beta);
  auto X = complexRandoms<T>(n * inc), Y = complexRandoms<T>(n * inc);
  auto err = [](cd got, cd want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); };
  T *dx = toDevice(X), *dy = toDevice(Y);
  // reductions to the host
  T du, dc;
  R nrm, asum;
  I imax = 0, imin = 0;
  OK(f.dotu(h, n, dx, inc, dy, inc, &du));
  OK(f.dotc(h, n, dx, inc, dy, inc, &dc));
  OK(f.nrm2(h, n, dx, inc, &nrm));
  OK(f.asum(h, n, dx, inc, &asum));
  OK(f.amax(h, n, dx, inc, &imax));
  OK(f.amin(h, n, dx, inc, &imin));
  cd wu = 0, wc = 0;
  double wn = 0, wa = 0, best = -1, worst = 1e300;
  int wmax = 0, wmin = 0;
  for (int i = 0; i < n; ++i) {
    const cd x = cval(X[i * inc]), y = cval(Y[i * inc]);
    wu += x * y;
    wc += std::conj(x) * y;
    wn += std::norm(x);
    const double m1 = std::fabs(x.real()) + std::fabs(x.imag());
    wa += m1;
    if (m1 > best) best = m1, wmax = i + 1;
    if (m1 < worst) worst = m1, wmin = i + 1;
  }
  CHECK(err(cval(du), wu) < tol, "cublas%sdotu: error %g", P, err(cval(du), wu));
  CHECK(err(cval(dc), wc) < tol, "cublas%sdotc: error %g", P, err(cval(dc), wc));
  CHECK(std::fabs(nrm - std::sqrt(wn)) < tol * std::sqrt(wn), "%s nrm2: %g, want %g", P, double(nrm), std::sqrt(wn));
  CHECK(std::fabs(asum - wa) < tol * wa, "%s asum: %g, want %g", P, double(asum), wa);
  CHECK(imax == wmax && imin == wmin, "%s iamax %d iamin %d, want %d and %d", P, int(imax), int(imin), wmax, wmin);
  // dotc into device memory (device pointer mode)
  {
    T* dr = toDevice(std::vector<T>{cmake<T>(0)});
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    OK(f.dotc(h, n, dx, inc, dy, inc, dr));
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CHECK(err(cval(toHost(dr, 1)[0]), wc) < tol, "cublas%sdotc into device memory", P);
    cudaFree(dr);
  }
  // axpy, scal, the real-alpha scal, copy, swap
  OK(f.axpy(h, n, &ha, dx, inc, dy, inc));
  auto y1 = toHost(dy, Y.size());
  double e = 0;
  for (int i = 0; i < n; ++i) e = std::max(e, err(cval(y1[i * inc]), alpha * cval(X[i * inc]) + cval(Y[i * inc])));
  CHECK(e < tol, "cublas%saxpy: error %g", P, e);
  OK(f.scal(h, n, &hb, dx, inc));
  const R half = R(0.5);
  OK(f.rscal(h, n, &half, dx, inc));
  auto x1 = toHost(dx, X.size());
  e = 0;
  for (int i = 0; i < n; ++i) e = std::max(e, err(cval(x1[i * inc]), 0.5 * beta * cval(X[i * inc])));
  CHECK(e < tol, "cublas%sscal and its real-alpha form: error %g", P, e);
  OK(f.swap(h, n, dx, inc, dy, inc));
  CHECK(std::memcmp(toHost(dy, 1).data(), x1.data(), sizeof(T)) == 0, "cublas%sswap", P);
  OK(f.copy(h, n, dy, inc, dx, inc));
  auto x2 = toHost(dx, X.size());
  CHECK(std::memcmp(&x2[(n - 1) * inc], &x1[(n - 1) * inc], sizeof(T)) == 0, "cublas%scopy", P);
  cudaFree(dx), cudaFree(dy);
  // gemv N, T and C; geru and gerc
  const int m = 9, k = 6, lda = m + 1;
  auto A = complexRandoms<T>(lda * k);
  for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C}) {
    const int xl = op == CUBLAS_OP_N ? k : m, yl = op == CUBLAS_OP_N ? m : k;
    auto x = complexRandoms<T>(xl), y = complexRandoms<T>(yl);
    T *dA = toDevice(A), *dxv = toDevice(x), *dyv = toDevice(y);
    OK(f.gemv(h, op, m, k, &ha, dA, lda, dxv, 1, &hb, dyv, 1));
    auto got = toHost(dyv, yl);
    Dense a = denseOp(op, A, lda, yl, xl);
    e = 0;
    for (int i = 0; i < yl; ++i) {
      cd s = 0;
      for (int j = 0; j < xl; ++j) s += a(i, j) * cval(x[j]);
      e = std::max(e, err(cval(got[i]), alpha * s + beta * cval(y[i])));
    }
    CHECK(e < tol, "cublas%sgemv op %d: error %g", P, op, e);
    cudaFree(dA), cudaFree(dxv), cudaFree(dyv);
  }
  for (bool conj : {false, true}) {
    auto x = complexRandoms<T>(m), y = complexRandoms<T>(k);
    T *dA = toDevice(A), *dxv = toDevice(x), *dyv = toDevice(y);
    OK((conj ? f.gerc : f.geru)(h, m, k, &ha, dxv, 1, dyv, 1, dA, lda));
    auto got = toHost(dA, A.size());
    e = 0;
    for (int j = 0; j < k; ++j)
      for (int i = 0; i < m; ++i) {
        const cd yy = conj ? std::conj(cval(y[j])) : cval(y[j]);
        e = std::max(e, err(cval(got[i + j * lda]), cval(A[i + j * lda]) + alpha * cval(x[i]) * yy));
      }
    CHECK(e < tol, "cublas%s%s: error %g", P, conj ? "gerc" : "geru", e);
    cudaFree(dA), cudaFree(dxv), cudaFree(dyv);
  }
}

// cublasXt's complex gemm on host memory over every device, 64-column tiles, op(A) = A^H.
template <typename T>
void xtComplexGemm(const char* name, cublasStatus_t (*gemm)(cublasXtHandle_t, cublasOperation_t, cublasOperation_t,
                                                            size_t, size_t, size_t, const T*, const T*, size_t,
                                                            const T*, size_t, const T*, T*, size_t)) {
  cublasXtHandle_t xt;
  OK(cublasXtCreate(&xt));
  int devices = 0;
  CUDA(cudaGetDeviceCount(&devices));
  std::vector<int> ids(devices);
  for (int i = 0; i < devices; ++i) ids[i] = i;
  OK(cublasXtDeviceSelect(xt, devices, ids.data()));
  OK(cublasXtSetBlockDim(xt, 64));
  const int m = 70, n = 150, k = 40, lda = 44, ldb = 41, ldc = 75;
  const cd alpha{0.5, 1.0}, beta{-1.0, 0.25};
  const T ha = cmake<T>(alpha), hb = cmake<T>(beta);
  auto A = complexRandoms<T>(lda * m), B = complexRandoms<T>(ldb * n), C = complexRandoms<T>(ldc * n);
  std::vector<T> got = C;
  OK(gemm(xt, CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, &ha, A.data(), lda, B.data(), ldb, &hb, got.data(), ldc));
  const double e = complexGemmErr(CUBLAS_OP_C, CUBLAS_OP_N, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, got);
  CHECK(e < (sizeof(T) == 16 ? 1e-12 : 2e-5), "cublasXt%sgemm C N on %d device(s): error %g", name, devices, e);
  std::printf("cublasXt %sgemm 70x150x40 (A^H) on %d device(s), 64-column tiles: relative error %.1e\n", name, devices, e);
  OK(cublasXtDestroy(xt));
}

// ---- complex batched factorizations ------------------------------------------------
template <typename T>
struct ComplexFactorizations {
  cublasStatus_t (*getrf)(cublasHandle_t, int, T* const[], int, int*, int*, int);
  cublasStatus_t (*getrs)(cublasHandle_t, cublasOperation_t, int, int, const T* const[], int, const int*, T* const[],
                          int, int*, int);
  cublasStatus_t (*getri)(cublasHandle_t, int, const T* const[], int, const int*, T* const[], int, int*, int);
  cublasStatus_t (*matinv)(cublasHandle_t, int, const T* const[], int, T* const[], int, int*, int);
  cublasStatus_t (*geqrf)(cublasHandle_t, int, int, T* const[], int, T* const[], int*, int);
};

// Device copies of `batch` matrices (each `size` elements) and the device array of their pointers.
template <typename T>
struct ComplexBatch {
  std::vector<T*> ptrs;
  T** array = nullptr;
  ComplexBatch(const std::vector<std::vector<T>>& mats) {
    for (auto& m : mats) ptrs.push_back(toDevice(m));
    array = toDevice(ptrs);
  }
  ~ComplexBatch() {
    for (T* p : ptrs) cudaFree(p);
    cudaFree(array);
  }
  std::vector<T> get(int i, size_t n) const { return toHost(ptrs[i], n); }
};

template <typename T>
void complexFactorizations(cublasHandle_t h, const char* P, const ComplexFactorizations<T>& f) {
  const double tol = sizeof(T) == 16 ? 1e-11 : 1e-4;
  const int n = 6, lda = 8, batch = 3, nrhs = 2, ldb = 7;
  std::vector<std::vector<T>> As, Bs, Cs;
  for (int b = 0; b < batch; ++b) {
    auto A = complexRandoms<T>(lda * n);
    for (int i = 0; i < n; ++i) A[i + i * lda] = cmake<T>(cval(A[i + i * lda]) + cd(3, -1));
    As.push_back(A);
    Bs.push_back(complexRandoms<T>(ldb * nrhs));
    Cs.push_back(std::vector<T>(lda * n, cmake<T>(0)));
  }
  auto dense = [&](const std::vector<T>& X, int ld, int r, int c) { return denseOp(CUBLAS_OP_N, X, ld, r, c); };
  // matinv: C = inv(A), A kept
  {
    ComplexBatch<T> a(As), c(Cs);
    int* info = toDevice(std::vector<int>(batch, -1));
    OK(f.matinv(h, n, a.array, lda, c.array, lda, info, batch));
    double worst = 0;
    for (int b = 0; b < batch; ++b) {
      Dense prod = mul(dense(As[b], lda, n, n), dense(c.get(b, lda * n), lda, n, n));
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) worst = std::max(worst, std::abs(prod(i, j) - cd(i == j ? 1 : 0)));
    }
    CHECK(worst < tol && toHost(info, batch) == std::vector<int>(batch, 0), "cublas%smatinvBatched: A inv(A) - I %g", P,
          worst);
    cudaFree(info);
  }
  // getrf (pivoted), then getrs N and C, and getri
  ComplexBatch<T> lu(As);
  int* piv = toDevice(std::vector<int>(n * batch, 0));
  int* info = toDevice(std::vector<int>(batch, -1));
  OK(f.getrf(h, n, lu.array, lda, piv, info, batch));
  CHECK(toHost(info, batch) == std::vector<int>(batch, 0), "cublas%sgetrfBatched info", P);
  for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_C}) {
    ComplexBatch<T> x(Bs);
    int host_info = -1;
    OK(f.getrs(h, op, n, nrhs, lu.array, lda, piv, x.array, ldb, &host_info, batch));
    double worst = 0;
    for (int b = 0; b < batch; ++b) {
      Dense lhs = mul(denseOp(op, As[b], lda, n, n), dense(x.get(b, ldb * nrhs), ldb, n, nrhs));
      Dense rhs = dense(Bs[b], ldb, n, nrhs);
      for (size_t i = 0; i < lhs.v.size(); ++i) worst = std::max(worst, std::abs(lhs.v[i] - rhs.v[i]));
    }
    CHECK(worst < tol && host_info == 0, "cublas%sgetrsBatched op %d: residual %g", P, op, worst);
  }
  {
    ComplexBatch<T> c(Cs);
    OK(f.getri(h, n, lu.array, lda, piv, c.array, lda, info, batch));
    double worst = 0;
    for (int b = 0; b < batch; ++b) {
      Dense prod = mul(dense(As[b], lda, n, n), dense(c.get(b, lda * n), lda, n, n));
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) worst = std::max(worst, std::abs(prod(i, j) - cd(i == j ? 1 : 0)));
    }
    CHECK(worst < tol, "cublas%sgetriBatched: A inv(A) - I %g", P, worst);
  }
  // A singular matrix: getrf's info names its first zero pivot.
  {
    ComplexBatch<T> z({std::vector<T>(lda * n, cmake<T>(0))});
    OK(f.getrf(h, n, z.array, lda, piv, info, 1));
    CHECK(toHost(info, 1)[0] == 1, "cublas%sgetrfBatched of a zero matrix: info %d", P, toHost(info, 1)[0]);
  }
  cudaFree(piv);
  cudaFree(info);
  // geqrf (7 x 5): R^H R = A^H A
  {
    const int m = 7, k = 5, ld = 9;
    std::vector<std::vector<T>> qa, taus;
    for (int b = 0; b < batch; ++b) qa.push_back(complexRandoms<T>(ld * k)), taus.push_back(std::vector<T>(k, cmake<T>(0)));
    ComplexBatch<T> a(qa), tau(taus);
    int host_info = -1;
    OK(f.geqrf(h, m, k, a.array, ld, tau.array, &host_info, batch));
    double worst = 0;
    for (int b = 0; b < batch; ++b) {
      auto out = a.get(b, ld * k);
      Dense R(k, k);
      for (int j = 0; j < k; ++j)
        for (int i = 0; i <= j; ++i) R(i, j) = cval(out[i + j * ld]);
      Dense Rh(k, k), Ah(k, m);
      for (int j = 0; j < k; ++j)
        for (int i = 0; i < k; ++i) Rh(i, j) = std::conj(R(j, i));
      Dense A0 = dense(qa[b], ld, m, k);
      for (int j = 0; j < m; ++j)
        for (int i = 0; i < k; ++i) Ah(i, j) = std::conj(A0(j, i));
      Dense l = mul(Rh, R), r = mul(Ah, A0);
      for (size_t i = 0; i < l.v.size(); ++i) worst = std::max(worst, std::abs(l.v[i] - r.v[i]) / std::max(1.0, std::abs(r.v[i])));
    }
    CHECK(worst < tol && host_info == 0, "cublas%sgeqrfBatched: R^H R - A^H A %g", P, worst);
  }
}
