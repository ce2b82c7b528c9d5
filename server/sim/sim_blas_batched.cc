// cuBLAS's batched factorizations on the CPU (sim_blas.h): getrfBatched,
// getrsBatched, getriBatched, matinvBatched and geqrfBatched in S, D, C and Z, one
// LAPACK call (OpenBLAS) per matrix. Every matrix a pointer array names is
// checked before anything is written; infos are LAPACK's (0, or i when
// U(i, i) is exactly zero). getrf without pivots (P null) is an LU of its
// own, as LAPACK has none; getrs and getri then use the identity pivots.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "server/sim/lapack.h"
#include "server/sim/sim_blas.h"

namespace rgpu::server::simblas {

namespace {

template <typename T>
struct Lapack;
template <>
struct Lapack<float> {
  static constexpr auto getrf = sgetrf_;
  static constexpr auto getrs = sgetrs_;
  static constexpr auto getri = sgetri_;
  static constexpr auto geqrf = sgeqrf_;
};
template <>
struct Lapack<double> {
  static constexpr auto getrf = dgetrf_;
  static constexpr auto getrs = dgetrs_;
  static constexpr auto getri = dgetri_;
  static constexpr auto geqrf = dgeqrf_;
};
template <>
struct Lapack<lapack::cfloat> {
  static constexpr auto getrf = cgetrf_;
  static constexpr auto getrs = cgetrs_;
  static constexpr auto getri = cgetri_;
  static constexpr auto geqrf = cgeqrf_;
};
template <>
struct Lapack<lapack::cdouble> {
  static constexpr auto getrf = zgetrf_;
  static constexpr auto getrs = zgetrs_;
  static constexpr auto getri = zgetri_;
  static constexpr auto geqrf = zgeqrf_;
};

template <typename T>
T* at(uint64_t p) {
  return reinterpret_cast<T*>(p);
}

uint64_t pointerAt(uint64_t array, int64_t i) {
  uint64_t p;
  std::memcpy(&p, reinterpret_cast<const uint8_t*>(array) + 8 * i, 8);
  return p;
}

// LU without pivoting, in place: LAPACK's info (the first exactly zero pivot, 1-based), the rest not factored.
template <typename T>
int luNoPivot(T* A, int n, int lda) {
  for (int j = 0; j < n; ++j) {
    const T pivot = A[j + j * lda];
    if (pivot == T(0)) return j + 1;
    for (int i = j + 1; i < n; ++i) A[i + j * lda] /= pivot;
    for (int c = j + 1; c < n; ++c)
      for (int i = j + 1; i < n; ++i) A[i + c * lda] -= A[i + j * lda] * A[j + c * lda];
  }
  return 0;
}

// getri needs LAPACK's info for a singular U first (it does not check every case itself).
template <typename T>
int singularAt(const T* LU, int n, int lda) {
  for (int i = 0; i < n; ++i)
    if (LU[i + i * lda] == T(0)) return i + 1;
  return 0;
}

template <typename T>
Status batched(const BlasArgs& a, const Valid& valid) {
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const int lda = static_cast<int>(a.lda), ldb = static_cast<int>(a.ldb);
  const char* name = blasOpName(a.op);
  const uint64_t es = sizeof(T);
  auto extent = [](int64_t rows, int64_t cols, int64_t ld) -> uint64_t {
    return rows == 0 || cols == 0 ? 0 : static_cast<uint64_t>(ld * (cols - 1) + rows);
  };
  // Every matrix named, checked first.
  for (int64_t i = 0; i < a.batch; ++i) {
    const uint64_t A = pointerAt(a.a, i);
    if (!valid(A, extent(a.m, a.n, a.lda) * es))
      return Status(err::kInvalidValue, std::string(name) + ": A[" + std::to_string(i) +
                                            "] does not point into an allocation of this session");
    if (a.op == BlasOp::kGetrfBatched) continue;
    const uint64_t B = pointerAt(a.b, i);
    const uint64_t bytes = a.op == BlasOp::kGeqrfBatched ? static_cast<uint64_t>(std::min(a.m, a.n)) * es
                           : a.op == BlasOp::kGetrsBatched ? extent(a.n, a.k, a.ldb) * es
                                                           : extent(a.n, a.n, a.ldb) * es;
    if (!valid(B, bytes))
      return Status(err::kInvalidValue, std::string(name) + ": the second array's [" + std::to_string(i) +
                                            "] does not point into an allocation of this session");
  }
  std::vector<int> identity(static_cast<size_t>(std::max(n, 1)));
  for (int i = 0; i < n; ++i) identity[static_cast<size_t>(i)] = i + 1;
  int* pivots = a.x ? at<int>(a.x) : nullptr;
  // The pivots getrs and getri swap by are the program's: each within 1..n, checked first too.
  if ((a.op == BlasOp::kGetrsBatched || a.op == BlasOp::kGetriBatched) && pivots && n > 0)
    for (int64_t i = 0; i < a.batch; ++i)
      if (const int bad = lapack::badPivot(pivots + i * n, n); bad >= 0)
        return Status(err::kInvalidValue, std::string(name) + ": pivot [" + std::to_string(i) + "][" +
                                              std::to_string(bad) + "] is " + std::to_string(pivots[i * n + bad]) +
                                              ", not a row of the " + std::to_string(n) + "-row matrix (1 to n)");
  int* info = a.c ? at<int>(a.c) : nullptr;
  // LAPACK's getri and geqrf need n elements of workspace, run faster with 64 n; never more than a matrix's size
  // plus that (the matrices were checked to lie in the session's memory).
  std::vector<T> work(static_cast<size_t>(std::max(1, n < 4096 ? 64 * n : n)));
  const int lwork = static_cast<int>(work.size());
  for (int64_t i = 0; i < a.batch; ++i) {
    T* A = at<T>(pointerAt(a.a, i));
    int* piv = pivots ? pivots + i * n : nullptr;
    int result = 0;
    switch (a.op) {
      case BlasOp::kGetrfBatched:
        if (n == 0) break;
        if (piv) Lapack<T>::getrf(&n, &n, A, &lda, piv, &result);
        else result = luNoPivot(A, n, lda);
        break;
      case BlasOp::kGetrsBatched: {
        if (n == 0 || k == 0) break;
        const char t = a.trans_a == 0 ? 'N' : a.trans_a == 2 && a.a_type >= 4 ? 'C' : 'T';  // (C: complex only)
        Lapack<T>::getrs(&t, &n, &k, A, &lda, piv ? piv : identity.data(), at<T>(pointerAt(a.b, i)), &ldb, &result,
                         1);
        break;
      }
      case BlasOp::kGetriBatched:
      case BlasOp::kMatinvBatched: {
        if (n == 0) break;
        T* C = at<T>(pointerAt(a.b, i));
        for (int c = 0; c < n; ++c) std::memcpy(C + c * ldb, A + c * lda, static_cast<size_t>(n) * sizeof(T));
        std::vector<int> own(static_cast<size_t>(n));
        const int* p = piv ? piv : identity.data();
        if (a.op == BlasOp::kMatinvBatched) {  // A itself is kept: C = inv(A) from C's own LU
          Lapack<T>::getrf(&n, &n, C, &ldb, own.data(), &result);
          p = own.data();
        } else {
          result = singularAt(C, n, ldb);
        }
        if (result == 0) Lapack<T>::getri(&n, C, &ldb, p, work.data(), &lwork, &result);
        break;
      }
      default:  // geqrf
        if (m == 0 || n == 0) break;
        Lapack<T>::geqrf(&m, &n, A, &lda, at<T>(pointerAt(a.b, i)), work.data(), &lwork, &result);
        break;
    }
    if (info) info[i] = result;
  }
  return Status::ok();
}

}  // namespace

Status runBatchedFactorization(const BlasArgs& a, const Valid& valid) {
  for (int64_t v : {a.m, a.n, a.k, a.lda, a.ldb})
    if (v > INT32_MAX) return Status(err::kInvalidValue, std::string(blasOpName(a.op)) + ": a size beyond int");
  switch (a.a_type) {  // CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F
    case 0: return batched<float>(a, valid);
    case 1: return batched<double>(a, valid);
    case 4: return batched<lapack::cfloat>(a, valid);
    default: return batched<lapack::cdouble>(a, valid);
  }
}

}  // namespace rgpu::server::simblas
