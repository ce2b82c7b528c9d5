// cublas_check's batched factorizations and cublasXt, each against a
// double-precision computation of its own (included by cublas_check.cu after
// its helpers).
#pragma once

#include <cublasXt.h>

// ---- batched factorizations ------------------------------------------------------------

template <typename T>
struct Factor;
template <>
struct Factor<float> {
  static constexpr auto getrf = cublasSgetrfBatched;
  static constexpr auto getrs = cublasSgetrsBatched;
  static constexpr auto getri = cublasSgetriBatched;
  static constexpr auto matinv = cublasSmatinvBatched;
  static constexpr auto geqrf = cublasSgeqrfBatched;
};
template <>
struct Factor<double> {
  static constexpr auto getrf = cublasDgetrfBatched;
  static constexpr auto getrs = cublasDgetrsBatched;
  static constexpr auto getri = cublasDgetriBatched;
  static constexpr auto matinv = cublasDmatinvBatched;
  static constexpr auto geqrf = cublasDgeqrfBatched;
};

// `count` matrices of rows x cols (ld = rows) in device memory and the device array of their pointers.
template <typename T>
struct Batch {
  std::vector<std::vector<T>> host;
  std::vector<T*> ptrs;
  T** array = nullptr;
  Batch(int count, int rows, int cols, bool dominant) {
    for (int i = 0; i < count; ++i) {
      auto m = randoms<T>(rows * cols);
      if (dominant)
        for (int d = 0; d < std::min(rows, cols); ++d) m[d + d * rows] = static_cast<T>(val(m[d + d * rows]) + 6.0);
      host.push_back(m);
      ptrs.push_back(toDevice(m));
    }
    cudaMalloc(&array, count * sizeof(T*));
    cudaMemcpy(array, ptrs.data(), count * sizeof(T*), cudaMemcpyHostToDevice);
  }
  ~Batch() {
    for (T* p : ptrs) cudaFree(p);
    cudaFree(array);
  }
  std::vector<T> get(int i) const { return toHost(ptrs[i], host[i].size()); }
};

template <typename T>
void batchedFactorizations(cublasHandle_t h, const char* name) {
  using F = Factor<T>;
  const int n = 8, count = 3, nrhs = 2;
  int *piv, *info;
  CUDA(cudaMalloc(&piv, n * count * sizeof(int)));
  CUDA(cudaMalloc(&info, count * sizeof(int)));
  auto infos = [&] {
    std::vector<int> v(count);
    cudaMemcpy(v.data(), info, count * sizeof(int), cudaMemcpyDeviceToHost);
    return v;
  };
  // A x = b: getrf (pivoted, then without pivots) and getrs, checked by A x - b.
  for (bool pivoted : {true, false}) {
    Batch<T> A(count, n, n, true), B(count, n, nrhs, false);
    OK(F::getrf(h, n, A.array, n, pivoted ? piv : nullptr, info, count));
    int host_info = -1;
    OK(F::getrs(h, CUBLAS_OP_N, n, nrhs, A.array, n, pivoted ? piv : nullptr, B.array, n, &host_info, count));
    CHECK(host_info == 0, "%s getrsBatched host info %d", name, host_info);
    double err = 0;
    for (int b = 0; b < count; ++b) {
      auto X = B.get(b);
      for (int r = 0; r < nrhs; ++r)
        for (int i = 0; i < n; ++i) {
          double s = 0;
          for (int p = 0; p < n; ++p) s += val(A.host[b][i + p * n]) * val(X[p + r * n]);
          err = std::max(err, std::fabs(s - val(B.host[b][i + r * n])));
        }
    }
    auto iv = infos();
    CHECK(err < tolerance<T>() * 50 && iv[0] == 0 && iv[2] == 0, "%s getrf/getrsBatched %s: residual %g, info %d",
          name, pivoted ? "pivoted" : "unpivoted", err, iv[0]);
  }
  // inverses: getri from getrf's LU, and matinv; A C = I
  for (bool matinv : {false, true}) {
    Batch<T> A(count, n, n, true), C(count, n, n, false);
    if (matinv) {
      OK(F::matinv(h, n, A.array, n, C.array, n, info, count));
    } else {
      Batch<T> LU(count, n, n, true);
      for (int b = 0; b < count; ++b) CUDA(cudaMemcpy(LU.ptrs[b], A.ptrs[b], n * n * sizeof(T), cudaMemcpyDeviceToDevice));
      OK(F::getrf(h, n, LU.array, n, piv, info, count));
      OK(F::getri(h, n, LU.array, n, piv, C.array, n, info, count));
      CUDA(cudaDeviceSynchronize());
    }
    double err = 0;
    for (int b = 0; b < count; ++b) {
      auto Ci = C.get(b);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) {
          double s = 0;
          for (int p = 0; p < n; ++p) s += val(A.host[b][i + p * n]) * val(Ci[p + j * n]);
          err = std::max(err, std::fabs(s - (i == j ? 1.0 : 0.0)));
        }
    }
    CHECK(err < tolerance<T>() * 50 && infos()[1] == 0, "%s %s: |A inv(A) - I| %g", name,
          matinv ? "matinvBatched" : "getriBatched", err);
  }
  // a singular matrix: getrf's info names the zero pivot
  {
    Batch<T> A(count, n, n, true);
    std::vector<T> z(n * n, T(0));
    CUDA(cudaMemcpy(A.ptrs[1], z.data(), z.size() * sizeof(T), cudaMemcpyHostToDevice));
    OK(F::getrf(h, n, A.array, n, piv, info, count));
    auto iv = infos();
    CHECK(iv[0] == 0 && iv[1] == 1 && iv[2] == 0, "%s getrfBatched on a zero matrix: info %d %d %d", name, iv[0], iv[1],
          iv[2]);
  }
  // geqrf: A = QR, so R^T R = A^T A
  {
    const int m = 10, c = 6;
    Batch<T> A(count, m, c, false), tau(count, c, 1, false);
    int host_info = -1;
    OK(F::geqrf(h, m, c, A.array, m, tau.array, &host_info, count));
    double err = 0, peak = 0;
    for (int b = 0; b < count; ++b) {
      auto R = A.get(b);
      for (int j = 0; j < c; ++j)
        for (int i = 0; i < c; ++i) {
          double rr = 0, aa = 0;
          for (int p = 0; p <= std::min(i, j); ++p) rr += val(R[p + i * m]) * val(R[p + j * m]);
          for (int p = 0; p < m; ++p) aa += val(A.host[b][p + i * m]) * val(A.host[b][p + j * m]);
          err = std::max(err, std::fabs(rr - aa));
          peak = std::max(peak, std::fabs(aa));
        }
    }
    CHECK(host_info == 0 && err / peak < tolerance<T>() * 20, "%s geqrfBatched: |R^T R - A^T A| %g", name, err / peak);
  }
  // what cuBLAS refuses: getrs's host info names the argument
  {
    int host_info = 0;
    CHECK(F::getrs(h, CUBLAS_OP_N, n, nrhs, nullptr, n - 1, piv, nullptr, n, &host_info, count) ==
              CUBLAS_STATUS_INVALID_VALUE && host_info == -6,
          "%s getrsBatched with lda < n: info %d", name, host_info);
    CHECK(F::matinv(h, 33, nullptr, 33, nullptr, 33, info, 1) == CUBLAS_STATUS_INVALID_VALUE,
          "%s matinvBatched n = 33", name);
  }
  cudaFree(piv);
  cudaFree(info);
}

// cublasXt: gemm on host memory over every device the program has, tiles of 64 columns.
template <typename T>
void xtGemm(const char* name, cublasStatus_t (*gemm)(cublasXtHandle_t, cublasOperation_t, cublasOperation_t, size_t,
                                                     size_t, size_t, const T*, const T*, size_t, const T*, size_t,
                                                     const T*, T*, size_t)) {
  cublasXtHandle_t xt;
  OK(cublasXtCreate(&xt));
  int devices = 0, boards = 0;
  CUDA(cudaGetDeviceCount(&devices));
  OK(cublasXtMaxBoards(&boards));
  CHECK(boards == devices, "cublasXtMaxBoards %d, devices %d", boards, devices);
  std::vector<int> ids(devices);
  for (int i = 0; i < devices; ++i) ids[i] = i;
  const size_t m = 150, n = 200, k = 90, lda = 96, ldb = 210, ldc = 160;  // op(A) = A^T (k x m), op(B) = B (k x n)
  auto A = randoms<T>(lda * m), B = randoms<T>(ldb * n), C = randoms<T>(ldc * n);
  const T alpha = static_cast<T>(0.75), beta = static_cast<T>(-1.25);
  std::vector<T> C0 = C;
  CHECK(gemm(xt, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, A.data(), lda, B.data(), ldb, &beta, C.data(), ldc) ==
            CUBLAS_STATUS_NOT_INITIALIZED,
        "%s cublasXt gemm before cublasXtDeviceSelect", name);
  OK(cublasXtDeviceSelect(xt, devices, ids.data()));
  OK(cublasXtSetBlockDim(xt, 64));
  int block = 0;
  OK(cublasXtGetBlockDim(xt, &block));
  CHECK(block == 64, "cublasXtGetBlockDim %d", block);
  OK(gemm(xt, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, A.data(), lda, B.data(), ldb, &beta, C.data(), ldc));
  double err = 0, peak = 0;
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < m; ++i) {
      double s = 0;
      for (size_t p = 0; p < k; ++p) s += val(A[p + i * lda]) * val(B[p + j * ldb]);
      const double want = val(alpha) * s + val(beta) * val(C0[i + j * ldc]);
      err = std::max(err, std::fabs(want - val(C[i + j * ldc])));
      peak = std::max(peak, std::fabs(want));
    }
  bool padding_kept = true;  // rows m..ldc of C are not C's
  for (size_t j = 0; j < n; ++j)
    for (size_t i = m; i < ldc; ++i) padding_kept &= C[i + j * ldc] == C0[i + j * ldc];
  CHECK(err / peak < tolerance<T>() * 4 && padding_kept, "%s cublasXt gemm T N on %d device(s): error %g%s", name,
        devices, err / peak, padding_kept ? "" : ", padding written");
  std::printf("cublasXt %sgemm 150x200x90 on %d device(s), 64-column tiles: relative error %.1e\n", name, devices,
              err / peak);
  OK(cublasXtDestroy(xt));
}
