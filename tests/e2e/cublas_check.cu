// Every cuBLAS call rgpu implements, compared with a CPU reference computed
// here in double precision: handles and settings, the vector/matrix helpers,
// level 1 and 2 in S and D (host and device pointer modes, increments of 1
// and 2), and gemm in S, D, H, C, Z and GemmEx (f16, bf16, mixed, complex;
// every transpose combination, padded leading dimensions, strided-batched and batched with
// device arrays of pointers, the _64 API). Then the error paths (as rgpu
// reports them; `--native` skips those that only rgpu reports, for the same
// program against NVIDIA's library). Prints one line per failed check and a
// summary; exit status 0 only if all passed.
//
// Built with nvcc -cudart shared -lcublas; run against rgpu's libraries.
#include <cublasXt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "blas_check.h"

// Largest relative error of `got` against `want`.
template <typename T>
double maxErr(const std::vector<T>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(val(got[i]) - want[i]) / std::max(1.0, std::fabs(want[i])));
  return worst;
}

// Reference gemm, column-major: C = alpha op(A) op(B) + beta C (real types).
template <typename T>
std::vector<double> refGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha,
                            const std::vector<T>& A, int lda, const std::vector<T>& B, int ldb, double beta,
                            const std::vector<T>& C, int ldc) {
  std::vector<double> out(C.size());
  for (size_t i = 0; i < C.size(); ++i) out[i] = val(C[i]);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        double a = ta == CUBLAS_OP_N ? val(A[i + p * lda]) : val(A[p + i * lda]);
        double b = tb == CUBLAS_OP_N ? val(B[p + j * ldb]) : val(B[j + p * ldb]);
        s += a * b;
      }
      out[i + j * ldc] = alpha * s + beta * val(C[i + j * ldc]);
    }
  return out;
}

template <typename T>
double tolerance() {
  return sizeof(T) == 8 ? 1e-12 : sizeof(T) == 4 ? 1e-5 : 2e-2;
}

// ---- level 1 -------------------------------------------------------------------

template <typename T>
struct L1 {
  cublasStatus_t (*axpy)(cublasHandle_t, int, const T*, const T*, int, T*, int);
  cublasStatus_t (*dot)(cublasHandle_t, int, const T*, int, const T*, int, T*);
  cublasStatus_t (*nrm2)(cublasHandle_t, int, const T*, int, T*);
  cublasStatus_t (*scal)(cublasHandle_t, int, const T*, T*, int);
  cublasStatus_t (*asum)(cublasHandle_t, int, const T*, int, T*);
  cublasStatus_t (*iamax)(cublasHandle_t, int, const T*, int, int*);
  cublasStatus_t (*iamin)(cublasHandle_t, int, const T*, int, int*);
  cublasStatus_t (*copy)(cublasHandle_t, int, const T*, int, T*, int);
  cublasStatus_t (*swap)(cublasHandle_t, int, T*, int, T*, int);
};

template <typename T>
void level1(cublasHandle_t h, const L1<T>& f, const char* name) {
  const int n = 1000;
  for (int inc : {1, 2}) {
    auto x = randoms<T>(n * inc), y = randoms<T>(n * inc);
    x[7 * inc] = 5;   // the largest magnitude
    x[11 * inc] = 0;  // the smallest
    T* dx = toDevice(x);
    T* dy = toDevice(y);
    double tol = tolerance<T>() * n;
    // axpy: y = 3x + y
    T alpha = 3;
    OK(f.axpy(h, n, &alpha, dx, inc, dy, inc));
    auto gy = toHost(dy, y.size());
    std::vector<double> want(y.size());
    for (size_t i = 0; i < y.size(); ++i) want[i] = (i % inc == 0) ? 3 * val(x[i]) + val(y[i]) : val(y[i]);
    CHECK(maxErr(gy, want) < tolerance<T>() * 4, "%s axpy inc %d: error %g", name, inc, maxErr(gy, want));
    // dot and nrm2, asum with the result in host memory
    double dot = 0, nrm = 0, asum = 0;
    for (int i = 0; i < n; ++i) {
      dot += val(x[i * inc]) * val(gy[i * inc]);
      nrm += val(x[i * inc]) * val(x[i * inc]);
      asum += std::fabs(val(x[i * inc]));
    }
    T r = 0;
    OK(f.dot(h, n, dx, inc, dy, inc, &r));
    CHECK(std::fabs(val(r) - dot) < tol * std::max(1.0, std::fabs(dot)), "%s dot inc %d: %g want %g", name, inc, val(r), dot);
    OK(f.nrm2(h, n, dx, inc, &r));
    CHECK(std::fabs(val(r) - std::sqrt(nrm)) < tol, "%s nrm2: %g want %g", name, val(r), std::sqrt(nrm));
    OK(f.asum(h, n, dx, inc, &r));
    CHECK(std::fabs(val(r) - asum) < tol * asum, "%s asum: %g want %g", name, val(r), asum);
    int idx = 0;
    OK(f.iamax(h, n, dx, inc, &idx));
    CHECK(idx == 8, "%s iamax inc %d: %d want 8 (1-based)", name, inc, idx);
    OK(f.iamin(h, n, dx, inc, &idx));
    CHECK(idx == 12, "%s iamin inc %d: %d want 12 (1-based)", name, inc, idx);
    // The same with the result in device memory.
    T* dr = nullptr;
    int* di = nullptr;
    cudaMalloc(&dr, sizeof(T));
    cudaMalloc(&di, sizeof(int));
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    OK(f.dot(h, n, dx, inc, dy, inc, dr));
    OK(f.iamax(h, n, dx, inc, di));
    T* dalpha = toDevice(std::vector<T>{static_cast<T>(0.5)});
    OK(f.scal(h, n, dalpha, dx, inc));  // x = x / 2, alpha in device memory
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    auto rr = toHost(dr, 1);
    auto ri = toHost(di, 1);
    CHECK(std::fabs(val(rr[0]) - dot) < tol * std::max(1.0, std::fabs(dot)), "%s dot to device memory: %g want %g", name,
          val(rr[0]), dot);
    CHECK(ri[0] == 8, "%s iamax to device memory: %d", name, ri[0]);
    auto gx = toHost(dx, x.size());
    CHECK(val(gx[7 * inc]) == 2.5, "%s scal with alpha in device memory: %g", name, val(gx[7 * inc]));
    // copy and swap
    T* dz = toDevice(std::vector<T>(n * inc, 0));
    OK(f.copy(h, n, dx, inc, dz, inc));
    auto gz = toHost(dz, x.size());
    bool same = true;
    for (int i = 0; i < n; ++i) same &= gz[i * inc] == gx[i * inc];
    CHECK(same, "%s copy inc %d", name, inc);
    OK(f.swap(h, n, dx, inc, dy, inc));
    auto sx = toHost(dx, x.size()), sy = toHost(dy, y.size());
    CHECK(sx[3 * inc] == gy[3 * inc] && sy[3 * inc] == gx[3 * inc], "%s swap inc %d", name, inc);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dz);
    cudaFree(dr);
    cudaFree(di);
    cudaFree(dalpha);
  }
}

// ---- level 2 -------------------------------------------------------------------

template <typename T>
void level2(cublasHandle_t h,
            cublasStatus_t (*gemv)(cublasHandle_t, cublasOperation_t, int, int, const T*, const T*, int, const T*, int,
                                   const T*, T*, int),
            cublasStatus_t (*ger)(cublasHandle_t, int, int, const T*, const T*, int, const T*, int, T*, int),
            const char* name) {
  const int m = 37, n = 23, lda = 40;
  auto A = randoms<T>(lda * n);
  for (cublasOperation_t t : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    int xl = t == CUBLAS_OP_N ? n : m, yl = t == CUBLAS_OP_N ? m : n;
    auto x = randoms<T>(xl * 2), y = randoms<T>(yl);
    T* dA = toDevice(A);
    T* dx = toDevice(x);
    T* dy = toDevice(y);
    T alpha = 1.5, beta = -0.5;
    OK(gemv(h, t, m, n, &alpha, dA, lda, dx, 2, &beta, dy, 1));  // x with increment 2
    std::vector<double> want(yl);
    for (int i = 0; i < yl; ++i) {
      double s = 0;
      for (int p = 0; p < xl; ++p) s += (t == CUBLAS_OP_N ? val(A[i + p * lda]) : val(A[p + i * lda])) * val(x[2 * p]);
      want[i] = alpha * s + beta * val(y[i]);
    }
    auto got = toHost(dy, yl);
    CHECK(maxErr(got, want) < tolerance<T>() * 10, "%s gemv %c: error %g", name, t == CUBLAS_OP_N ? 'N' : 'T',
          maxErr(got, want));
    cudaFree(dA);
    cudaFree(dx);
    cudaFree(dy);
  }
  auto x = randoms<T>(m), y = randoms<T>(n);
  T* dA = toDevice(A);
  T* dx = toDevice(x);
  T* dy = toDevice(y);
  T alpha = 2;
  OK(ger(h, m, n, &alpha, dx, 1, dy, 1, dA, lda));
  std::vector<double> want(A.size());
  for (size_t i = 0; i < A.size(); ++i) want[i] = val(A[i]);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) want[i + j * lda] += 2 * val(x[i]) * val(y[j]);
  auto got = toHost(dA, A.size());
  CHECK(maxErr(got, want) < tolerance<T>() * 4, "%s ger: error %g", name, maxErr(got, want));
  cudaFree(dA);
  cudaFree(dx);
  cudaFree(dy);
}

// ---- level 3 -------------------------------------------------------------------

// One gemm of each transpose combination through `call`, checked against the reference.
template <typename T, typename Call>
void gemmCase(const char* name, Call call, double tol) {
  const int m = 33, n = 29, k = 41;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      int lda = (ta == CUBLAS_OP_N ? m : k) + 3, ldb = (tb == CUBLAS_OP_N ? k : n) + 2, ldc = m + 5;
      auto A = randoms<T>(lda * (ta == CUBLAS_OP_N ? k : m));
      auto B = randoms<T>(ldb * (tb == CUBLAS_OP_N ? n : k));
      auto C = randoms<T>(ldc * n);
      T* dA = toDevice(A);
      T* dB = toDevice(B);
      T* dC = toDevice(C);
      OK(call(ta, tb, m, n, k, dA, lda, dB, ldb, dC, ldc));
      auto want = refGemm(ta, tb, m, n, k, 0.75, A, lda, B, ldb, -1.25, C, ldc);
      auto got = toHost(dC, C.size());
      CHECK(maxErr(got, want) < tol, "%s %c%c: error %g", name, ta == CUBLAS_OP_N ? 'N' : 'T',
            tb == CUBLAS_OP_N ? 'N' : 'T', maxErr(got, want));
      cudaFree(dA);
      cudaFree(dB);
      cudaFree(dC);
    }
}

template <typename T>
void stridedAndBatched(cublasHandle_t h, const char* name, cudaDataType type, cublasComputeType_t compute) {
  const int m = 16, n = 12, k = 8, batch = 5;
  const long long sa = m * k + 7, sb = k * n + 3, sc = m * n + 1;
  auto A = randoms<T>(sa * batch), B = randoms<T>(sb * batch), C = randoms<T>(sc * batch);
  T* dA = toDevice(A);
  T* dB = toDevice(B);
  T* dC = toDevice(C);
  float alpha32 = 2, beta32 = 0.5;
  double alpha64 = 2, beta64 = 0.5;
  const void* alpha = type == CUDA_R_64F ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = type == CUDA_R_64F ? static_cast<const void*>(&beta64) : &beta32;
  OK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, dA, type, m, sa, dB, type, k, sb, beta, dC,
                                type, m, sc, batch, compute, CUBLAS_GEMM_DEFAULT));
  auto got = toHost(dC, C.size());
  double worst = 0;
  for (int b = 0; b < batch; ++b) {
    std::vector<T> a(A.begin() + b * sa, A.begin() + b * sa + m * k), bb(B.begin() + b * sb, B.begin() + b * sb + k * n),
        c(C.begin() + b * sc, C.begin() + b * sc + m * n), g(got.begin() + b * sc, got.begin() + b * sc + m * n);
    worst = std::max(worst, maxErr(g, refGemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 2, a, m, bb, k, 0.5, c, m)));
  }
  CHECK(worst < tolerance<T>() * 10, "%s strided-batched: error %g", name, worst);
  // Batched: device arrays of pointers to the same matrices.
  std::vector<const void*> pa(batch), pb(batch);
  std::vector<void*> pc(batch);
  for (int b = 0; b < batch; ++b) {
    pa[b] = dA + b * sa;
    pb[b] = dB + b * sb;
    pc[b] = dC + b * sc;
  }
  cudaMemcpy(dC, C.data(), C.size() * sizeof(T), cudaMemcpyHostToDevice);
  auto* da = toDevice(pa);
  auto* db = toDevice(pb);
  auto* dc = toDevice(pc);
  OK(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, da, type, m, db, type, k, beta, dc, type, m, batch,
                         compute, CUBLAS_GEMM_DEFAULT));
  auto got2 = toHost(dC, C.size());
  CHECK(got2 == got, "%s batched gives what strided-batched gave", name);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

// ---- geam, dgmm, trsm, syrk ---------------------------------------------------------

template <typename T>
struct Level3X;
template <>
struct Level3X<float> {
  static constexpr auto geam = cublasSgeam;
  static constexpr auto dgmm = cublasSdgmm;
  static constexpr auto trsm = cublasStrsm_v2_64;
  static constexpr auto syrk = cublasSsyrk_v2;
  static constexpr auto trmm = cublasStrmm_v2;
  static constexpr auto symm = cublasSsymm_v2_64;
  static constexpr auto syr2k = cublasSsyr2k_v2;
};
template <>
struct Level3X<double> {
  static constexpr auto geam = cublasDgeam;
  static constexpr auto dgmm = cublasDdgmm;
  static constexpr auto trsm = cublasDtrsm_v2_64;
  static constexpr auto syrk = cublasDsyrk_v2;
  static constexpr auto trmm = cublasDtrmm_v2_64;
  static constexpr auto symm = cublasDsymm_v2;
  static constexpr auto syr2k = cublasDsyr2k_v2_64;
};

template <typename T>
void level3Extra(cublasHandle_t h, const char* name) {
  using F = Level3X<T>;
  const int m = 24, n = 17;
  const T alpha = static_cast<T>(1.5), beta = static_cast<T>(-0.5);
  for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {  // geam: C = alpha A + beta op(B), C over A
    auto A = randoms<T>(m * n), B = randoms<T>(m * n);
    T* dA = toDevice(A);
    T* dB = toDevice(B);
    const int ldb = tb == CUBLAS_OP_N ? m : n;
    OK(F::geam(h, CUBLAS_OP_N, tb, m, n, &alpha, dA, m, &beta, dB, ldb, dA, m));
    std::vector<double> want(m * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i)
        want[i + j * m] = val(alpha) * val(A[i + j * m]) + val(beta) * val(tb == CUBLAS_OP_N ? B[i + j * m] : B[j + i * n]);
    auto got = toHost(dA, A.size());
    CHECK(maxErr(got, want) < tolerance<T>() * 4, "%s geam %c in place: error %g", name,
          tb == CUBLAS_OP_N ? 'N' : 'T', maxErr(got, want));
    cudaFree(dA);
    cudaFree(dB);
  }
  for (cublasSideMode_t side : {CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT}) {  // dgmm: C = diag(x) A or A diag(x)
    const int len = side == CUBLAS_SIDE_LEFT ? m : n;
    auto A = randoms<T>(m * n), x = randoms<T>(2 * len);
    std::vector<T> C(m * n, T(0));
    T* dA = toDevice(A);
    T* dx = toDevice(x);
    T* dC = toDevice(C);
    OK(F::dgmm(h, side, m, n, dA, m, dx, 2, dC, m));
    std::vector<double> want(m * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) want[i + j * m] = val(A[i + j * m]) * val(x[2 * (side == CUBLAS_SIDE_LEFT ? i : j)]);
    auto got = toHost(dC, C.size());
    CHECK(maxErr(got, want) < tolerance<T>(), "%s dgmm %s: error %g", name, side == CUBLAS_SIDE_LEFT ? "left" : "right",
          maxErr(got, want));
    cudaFree(dA);
    cudaFree(dx);
    cudaFree(dC);
  }
  for (int form = 0; form < 2; ++form) {  // trsm: left lower N non-unit, right upper T unit; A X = alpha B checked back
    const cublasSideMode_t side = form ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
    const cublasFillMode_t uplo = form ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    const cublasOperation_t t = form ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasDiagType_t diag = form ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
    const int k = form ? n : m;
    auto A = randoms<T>(k * k), B = randoms<T>(m * n);
    for (int i = 0; i < k; ++i) A[i + i * k] = static_cast<T>(val(A[i + i * k]) + 4.0);  // well conditioned
    T* dA = toDevice(A);
    T* dB = toDevice(B);
    OK(F::trsm(h, side, uplo, t, diag, m, n, &alpha, dA, k, dB, m));
    auto X = toHost(dB, B.size());
    // op(A) as used: its triangle, with a unit diagonal when asked.
    auto a = [&](int i, int j) {
      int r = t == CUBLAS_OP_N ? i : j, c = t == CUBLAS_OP_N ? j : i;
      bool in = uplo == CUBLAS_FILL_MODE_LOWER ? r >= c : r <= c;
      if (r == c && diag == CUBLAS_DIAG_UNIT) return 1.0;
      return in ? val(A[r + c * k]) : 0.0;
    };
    std::vector<double> back(m * n), want(m * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += side == CUBLAS_SIDE_LEFT ? a(i, p) * val(X[p + j * m]) : val(X[i + p * m]) * a(p, j);
        back[i + j * m] = s;
        want[i + j * m] = val(alpha) * val(B[i + j * m]);
      }
    std::vector<T> backT(back.size());
    for (size_t i = 0; i < back.size(); ++i) backT[i] = static_cast<T>(back[i]);
    CHECK(maxErr(backT, want) < tolerance<T>() * 20, "%s trsm %s: op(A) X != alpha B: error %g", name,
          form ? "right upper T unit" : "left lower N", maxErr(backT, want));
    cudaFree(dA);
    cudaFree(dB);
  }
  for (int form = 0; form < 2; ++form) {  // syrk: lower N, upper T; only its triangle is written
    const cublasFillMode_t uplo = form ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    const cublasOperation_t t = form ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int k = 9, lda = form ? k : n;
    auto A = randoms<T>(n * k), C = randoms<T>(n * n);
    T* dA = toDevice(A);
    T* dC = toDevice(C);
    OK(F::syrk(h, uplo, t, n, k, &alpha, dA, lda, &beta, dC, n));
    auto got = toHost(dC, C.size());
    std::vector<double> want(n * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) {
        bool in = uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j;
        double s = 0;
        for (int p = 0; p < k; ++p)
          s += (t == CUBLAS_OP_N ? val(A[i + p * n]) * val(A[j + p * n]) : val(A[p + i * k]) * val(A[p + j * k]));
        want[i + j * n] = in ? val(alpha) * s + val(beta) * val(C[i + j * n]) : val(C[i + j * n]);
      }
    CHECK(maxErr(got, want) < tolerance<T>() * 10, "%s syrk %s: error %g", name, form ? "upper T" : "lower N",
          maxErr(got, want));
    cudaFree(dA);
    cudaFree(dC);
  }
  for (int form = 0; form < 2; ++form) {  // trmm: left lower N non-unit in place (C = B), right upper T unit into C
    const cublasSideMode_t side = form ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
    const cublasFillMode_t uplo = form ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    const cublasOperation_t t = form ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasDiagType_t diag = form ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
    const int k = form ? n : m;
    auto A = randoms<T>(k * k), B = randoms<T>(m * n);
    std::vector<T> C(m * n, T(0));
    T* dA = toDevice(A);
    T* dB = toDevice(B);
    T* dC = form ? toDevice(C) : dB;
    OK(F::trmm(h, side, uplo, t, diag, m, n, &alpha, dA, k, dB, m, dC, m));
    auto a = [&](int i, int j) {  // op(A) as used
      int r = t == CUBLAS_OP_N ? i : j, c = t == CUBLAS_OP_N ? j : i;
      bool in = uplo == CUBLAS_FILL_MODE_LOWER ? r >= c : r <= c;
      if (r == c && diag == CUBLAS_DIAG_UNIT) return 1.0;
      return in ? val(A[r + c * k]) : 0.0;
    };
    std::vector<double> want(m * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += side == CUBLAS_SIDE_LEFT ? a(i, p) * val(B[p + j * m]) : val(B[i + p * m]) * a(p, j);
        want[i + j * m] = val(alpha) * s;
      }
    auto got = toHost(dC, C.size());
    CHECK(maxErr(got, want) < tolerance<T>() * 10, "%s trmm %s: error %g", name,
          form ? "right upper T unit" : "left lower N in place", maxErr(got, want));
    cudaFree(dA);
    cudaFree(dB);
    if (form) cudaFree(dC);
  }
  for (int form = 0; form < 2; ++form) {  // symm: left lower, right upper; only A's triangle is read
    const cublasSideMode_t side = form ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
    const cublasFillMode_t uplo = form ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    const int k = form ? n : m;
    auto A = randoms<T>(k * k), B = randoms<T>(m * n), C = randoms<T>(m * n);
    T* dA = toDevice(A);
    T* dB = toDevice(B);
    T* dC = toDevice(C);
    OK(F::symm(h, side, uplo, m, n, &alpha, dA, k, dB, m, &beta, dC, m));
    auto a = [&](int i, int j) {  // the symmetric matrix from its stored triangle
      const bool in = uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j;
      return in ? val(A[i + j * k]) : val(A[j + i * k]);
    };
    std::vector<double> want(m * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double s = 0;
        for (int p = 0; p < k; ++p) s += side == CUBLAS_SIDE_LEFT ? a(i, p) * val(B[p + j * m]) : val(B[i + p * m]) * a(p, j);
        want[i + j * m] = val(alpha) * s + val(beta) * val(C[i + j * m]);
      }
    auto got = toHost(dC, C.size());
    CHECK(maxErr(got, want) < tolerance<T>() * 10, "%s symm %s: error %g", name, form ? "right upper" : "left lower",
          maxErr(got, want));
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
  }
  for (int form = 0; form < 2; ++form) {  // syr2k: lower N, upper T; only its triangle is written
    const cublasFillMode_t uplo = form ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    const cublasOperation_t t = form ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int k = 9, ld = form ? k : n;
    auto A = randoms<T>(n * k), B = randoms<T>(n * k), C = randoms<T>(n * n);
    T* dA = toDevice(A);
    T* dB = toDevice(B);
    T* dC = toDevice(C);
    OK(F::syr2k(h, uplo, t, n, k, &alpha, dA, ld, dB, ld, &beta, dC, n));
    auto op = [&](const std::vector<T>& M, int i, int p) {  // op(M)(i, p), n x k
      return t == CUBLAS_OP_N ? val(M[i + p * n]) : val(M[p + i * k]);
    };
    std::vector<double> want(n * n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) {
        const bool in = uplo == CUBLAS_FILL_MODE_LOWER ? i >= j : i <= j;
        double s = 0;
        for (int p = 0; p < k; ++p) s += op(A, i, p) * op(B, j, p) + op(B, i, p) * op(A, j, p);
        want[i + j * n] = in ? val(alpha) * s + val(beta) * val(C[i + j * n]) : val(C[i + j * n]);
      }
    auto got = toHost(dC, C.size());
    CHECK(maxErr(got, want) < tolerance<T>() * 10, "%s syr2k %s: error %g", name, form ? "upper T" : "lower N",
          maxErr(got, want));
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
  }
}

#include "cublas_check_more.h"
#include "cublas_check_complex.h"
#include "cublas_check_level2.h"

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (whole lines between the libraries' log lines on stderr)
  const bool native = argc > 1 && std::strcmp(argv[1], "--native") == 0;
  cublasHandle_t h = nullptr;
  OK(cublasCreate(&h));
  if (!h) {
    std::printf("cublasCreate failed: is rgpu's libcublas.so.13 on the library path?\n");
    return 1;
  }
  int version = 0;
  OK(cublasGetVersion(h, &version));
  CHECK(version == CUBLAS_VERSION, "version %d", version);
  CHECK(std::strcmp(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED") == 0, "status name");
  CHECK(std::strlen(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)) > 5, "status string");
  cudaStream_t s;
  CUDA(cudaStreamCreate(&s));
  OK(cublasSetStream(h, s));
  cudaStream_t got_stream = nullptr;
  OK(cublasGetStream(h, &got_stream));
  CHECK(got_stream == s, "stream round trip");
  OK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
  cublasMath_t mode;
  OK(cublasGetMathMode(h, &mode));
  CHECK(mode == CUBLAS_TF32_TENSOR_OP_MATH, "math mode round trip");
  OK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  void* ws = nullptr;
  cudaMalloc(&ws, 1 << 20);
  OK(cublasSetWorkspace(h, ws, 1 << 20));

  // The vector and matrix helpers.
  {
    std::vector<float> a = randoms<float>(64), b(64, 0);
    float* d = nullptr;
    cudaMalloc(&d, 64 * sizeof(float));
    OK(cublasSetVector(32, sizeof(float), a.data(), 2, d, 1));  // every other element
    OK(cublasGetVector(32, sizeof(float), d, 1, b.data(), 1));
    CHECK(b[5] == a[10] && b[31] == a[62], "cublasSet/GetVector with increments");
    OK(cublasSetMatrix(6, 8, sizeof(float), a.data(), 8, d, 6));  // 6 rows of each 8-row column
    std::vector<float> c(48);
    OK(cublasGetMatrixAsync(6, 8, sizeof(float), d, 6, c.data(), 6, s));
    cudaStreamSynchronize(s);
    CHECK(c[6 * 3 + 4] == a[8 * 3 + 4], "cublasSet/GetMatrix with leading dimensions");
    cudaFree(d);
  }

  level1<float>(h, {cublasSaxpy, cublasSdot, cublasSnrm2, cublasSscal, cublasSasum, cublasIsamax, cublasIsamin,
                    cublasScopy, cublasSswap},
                "S");
  level1<double>(h, {cublasDaxpy, cublasDdot, cublasDnrm2, cublasDscal, cublasDasum, cublasIdamax, cublasIdamin,
                     cublasDcopy, cublasDswap},
                 "D");
  {  // the _64 API
    auto x = randoms<float>(100);
    x[42] = -9;
    float* dx = toDevice(x);
    int64_t i64 = 0;
    OK(cublasIsamax_64(h, 100, dx, 1, &i64));
    CHECK(i64 == 43, "cublasIsamax_64: %lld", static_cast<long long>(i64));
    float r = 0;
    OK(cublasSasum_64(h, 100, dx, 1, &r));
    double asum = 0;
    for (float v : x) asum += std::fabs(v);
    CHECK(std::fabs(r - asum) < 1e-3, "cublasSasum_64");
    cudaFree(dx);
  }
  level2<float>(h, cublasSgemv, cublasSger, "S");
  level2<double>(h, cublasDgemv, cublasDger, "D");

  float a32 = 0.75f, b32 = -1.25f;
  double a64 = 0.75, b64 = -1.25;
  __half a16 = __float2half(0.75f), b16 = __float2half(-1.25f);
  gemmCase<float>("Sgemm", [&](auto ta, auto tb, int m, int n, int k, float* A, int lda, float* B, int ldb, float* C, int ldc) {
    return cublasSgemm(h, ta, tb, m, n, k, &a32, A, lda, B, ldb, &b32, C, ldc);
  }, 1e-5);
  gemmCase<float>("Sgemm_64", [&](auto ta, auto tb, int m, int n, int k, float* A, int lda, float* B, int ldb, float* C, int ldc) {
    return cublasSgemm_64(h, ta, tb, m, n, k, &a32, A, lda, B, ldb, &b32, C, ldc);
  }, 1e-5);
  gemmCase<double>("Dgemm", [&](auto ta, auto tb, int m, int n, int k, double* A, int lda, double* B, int ldb, double* C, int ldc) {
    return cublasDgemm(h, ta, tb, m, n, k, &a64, A, lda, B, ldb, &b64, C, ldc);
  }, 1e-12);
  gemmCase<__half>("Hgemm", [&](auto ta, auto tb, int m, int n, int k, __half* A, int lda, __half* B, int ldb, __half* C, int ldc) {
    return cublasHgemm(h, ta, tb, m, n, k, &a16, A, lda, B, ldb, &b16, C, ldc);
  }, 2e-2);
  gemmCase<__half>("GemmEx f16, f32 compute", [&](auto ta, auto tb, int m, int n, int k, __half* A, int lda, __half* B, int ldb, __half* C, int ldc) {
    return cublasGemmEx(h, ta, tb, m, n, k, &a32, A, CUDA_R_16F, lda, B, CUDA_R_16F, ldb, &b32, C, CUDA_R_16F, ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }, 2e-2);
  gemmCase<__nv_bfloat16>("GemmEx bf16, f32 compute", [&](auto ta, auto tb, int m, int n, int k, __nv_bfloat16* A, int lda, __nv_bfloat16* B, int ldb, __nv_bfloat16* C, int ldc) {
    return cublasGemmEx(h, ta, tb, m, n, k, &a32, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &b32, C, CUDA_R_16BF, ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }, 5e-2);
  gemmCase<float>("GemmEx_64 f32, TF32 compute", [&](auto ta, auto tb, int m, int n, int k, float* A, int lda, float* B, int ldb, float* C, int ldc) {
    return cublasGemmEx_64(h, ta, tb, m, n, k, &a32, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, &b32, C, CUDA_R_32F, ldc,
                           CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
  }, 1e-2);
  {  // alpha and beta in device memory
    float* dab = toDevice(std::vector<float>{0.75f, -1.25f});
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    gemmCase<float>("Sgemm, scalars in device memory", [&](auto ta, auto tb, int m, int n, int k, float* A, int lda, float* B, int ldb, float* C, int ldc) {
      return cublasSgemm(h, ta, tb, m, n, k, dab, A, lda, B, ldb, dab + 1, C, ldc);
    }, 1e-5);
    OK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    cudaFree(dab);
  }
  {  // f16 inputs, f32 output (mixed precision)
    const int m = 20, n = 18, k = 24;
    auto A = randoms<__half>(m * k), B = randoms<__half>(k * n);
    std::vector<float> C(m * n, 0);
    auto* dA = toDevice(A);
    auto* dB = toDevice(B);
    auto* dC = toDevice(C);
    float one = 1, zero = 0;
    OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_16F, m, dB, CUDA_R_16F, k, &zero, dC,
                    CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    std::vector<__half> Ch(m * n, __float2half(0.f));
    auto want = refGemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1, A, m, B, k, 0, Ch, m);
    auto got = toHost(dC, C.size());
    CHECK(maxErr(got, want) < 1e-5, "GemmEx f16 in, f32 out: error %g", maxErr(got, want));
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
  }
  stridedAndBatched<float>(h, "f32", CUDA_R_32F, CUBLAS_COMPUTE_32F);
  stridedAndBatched<double>(h, "f64", CUDA_R_64F, CUBLAS_COMPUTE_64F);
  level3Extra<float>(h, "S");
  level3Extra<double>(h, "D");
  batchedFactorizations<float>(h, "S");
  batchedFactorizations<double>(h, "D");
  xtGemm<float>("S", cublasXtSgemm);
  xtGemm<double>("D", cublasXtDgemm);
  complexGemms<cuComplex>(h, "C", cublasCgemm, cublasCgemm3m, CUDA_C_32F, CUBLAS_COMPUTE_32F);
  complexGemms<cuDoubleComplex>(h, "Z", cublasZgemm, cublasZgemm3m, CUDA_C_64F, CUBLAS_COMPUTE_64F);
  complexGemmBatches<cuComplex>(h, "C", cublasCgemmStridedBatched, cublasCgemmBatched);
  complexGemmBatches<cuDoubleComplex>(h, "Z", cublasZgemmStridedBatched, cublasZgemmBatched);
  complexFactorizations<cuComplex>(h, "C", {cublasCgetrfBatched, cublasCgetrsBatched, cublasCgetriBatched,
                                            cublasCmatinvBatched, cublasCgeqrfBatched});
  complexFactorizations<cuDoubleComplex>(h, "Z", {cublasZgetrfBatched, cublasZgetrsBatched, cublasZgetriBatched,
                                                  cublasZmatinvBatched, cublasZgeqrfBatched});
  level2More<float, int>(h, "S", {cublasStrmv, cublasStrsv, cublasSsymv, nullptr});
  level2More<double, int64_t>(h, "D", {cublasDtrmv_64, cublasDtrsv_64, cublasDsymv_64, nullptr});
  level2More<cuComplex, int>(h, "C", {cublasCtrmv, cublasCtrsv, cublasCsymv, cublasChemv});
  level2More<cuDoubleComplex, int64_t>(h, "Z", {cublasZtrmv_64, cublasZtrsv_64, cublasZsymv_64, cublasZhemv_64});
  xtComplexGemm<cuComplex>("C", cublasXtCgemm);
  xtComplexGemm<cuDoubleComplex>("Z", cublasXtZgemm);
  complexLevel12<cuComplex, float, int>(h, "C", {cublasCaxpy, cublasCscal, cublasCsscal, cublasCcopy, cublasCswap,
                                                  cublasCdotu, cublasCdotc, cublasScnrm2, cublasScasum, cublasIcamax,
                                                  cublasIcamin, cublasCgemv, cublasCgeru, cublasCgerc});
  complexLevel12<cuDoubleComplex, double, int64_t>(
      h, "Z", {cublasZaxpy_64, cublasZscal_64, cublasZdscal_64, cublasZcopy_64, cublasZswap_64, cublasZdotu_64,
               cublasZdotc_64, cublasDznrm2_64, cublasDzasum_64, cublasIzamax_64, cublasIzamin_64, cublasZgemv_64,
               cublasZgeru_64, cublasZgerc_64});
  complexLevel3<cuComplex, float, int>(h, "C", {cublasCgeam, cublasCdgmm, cublasCtrsm, cublasCtrmm, cublasCsymm,
                                                 cublasChemm, cublasCsyrk, cublasCherk, cublasCsyr2k, cublasCher2k});
  complexLevel3<cuDoubleComplex, double, int64_t>(
      h, "Z", {cublasZgeam_64, cublasZdgmm_64, cublasZtrsm_v2_64, cublasZtrmm_v2_64, cublasZsymm_v2_64, cublasZhemm_v2_64,
               cublasZsyrk_v2_64, cublasZherk_v2_64, cublasZsyr2k_v2_64, cublasZher2k_v2_64});
  {  // the typed strided-batched and batched forms
    const int m = 8, n = 8, k = 8, batch = 3;
    auto A = randoms<float>(m * k * batch), B = randoms<float>(k * n * batch);
    std::vector<float> C(m * n * batch, 0);
    float* dA = toDevice(A);
    float* dB = toDevice(B);
    float* dC = toDevice(C);
    float one = 1, zero = 0;
    OK(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dA, k, m * k, dB, k, k * n, &zero, dC, m,
                                 m * n, batch));
    auto got = toHost(dC, C.size());
    std::vector<float> a(A.begin() + 2 * m * k, A.end()), b(B.begin() + 2 * k * n, B.end()), c(m * n, 0),
        g(got.begin() + 2 * m * n, got.end());
    CHECK(maxErr(g, refGemm(CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, 1, a, k, b, k, 0, c, m)) < 1e-5,
          "cublasSgemmStridedBatched, last batch");
    std::vector<float*> pa{dA, dA + m * k, dA + 2 * m * k}, pb{dB, dB + k * n, dB + 2 * k * n},
        pc{dC, dC + m * n, dC + 2 * m * n};
    float** da = toDevice(pa);
    float** db = toDevice(pb);
    float** dc = toDevice(pc);
    cudaMemset(dC, 0, C.size() * sizeof(float));
    OK(cublasSgemmBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, da, k, db, k, &zero, dc, m, batch));
    CHECK(toHost(dC, C.size()) == got, "cublasSgemmBatched gives what cublasSgemmStridedBatched gave");
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  }
  CUDA(cudaStreamSynchronize(s));

  // Errors: as cuBLAS reports them.
  float one = 1;
  float* dbad = nullptr;
  cudaMalloc(&dbad, 64 * sizeof(float));
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, dbad, 4, dbad, 4, &one, dbad, 4) ==
            CUBLAS_STATUS_INVALID_VALUE, "negative m");
  CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 4, 4, &one, dbad, 4, dbad, 4, &one, dbad, 8) ==
            CUBLAS_STATUS_INVALID_VALUE, "lda below m");
  CHECK(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, dbad, 4, dbad, 4, &one, dbad, 4) ==
            CUBLAS_STATUS_NOT_INITIALIZED, "a null handle");
  if (!native) {
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, dbad, CUDA_R_8I, 4, dbad, CUDA_R_8I, 4, &one, dbad,
                       CUDA_R_32I, 4, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "int8 GemmEx is not supported");
    CHECK(cublasStbmv(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, 4, 1, dbad, 4, dbad, 1) ==
              CUBLAS_STATUS_NOT_SUPPORTED,
          "an unimplemented call returns NOT_SUPPORTED");
    // A matrix that runs past its allocation: refused by the server, reported
    // at the next synchronising call as a kernel fault would be on a GPU.
    OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &one, dbad, 16, dbad, 16, &one, dbad, 16));
    cudaError_t late = cudaStreamSynchronize(s);
    CHECK(late == cudaErrorInvalidValue, "an out-of-bounds matrix surfaces at the next synchronisation: %s",
          cudaGetErrorName(late));
    CUDA(cudaStreamSynchronize(s));  // reported once
  }

  OK(cublasDestroy(h));
  cudaFree(dbad);
  cudaFree(ws);
  cudaStreamDestroy(s);
  std::printf("cublas_check: %d checks, %d failed\n", g_checks, g_failed);
  return g_failed ? 1 : 0;
}
