#include "server/sim/sim_solver.h"

#include <algorithm>
#include <complex>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "server/sim/lapack.h"

namespace rgpu::server::simsolver {

namespace sv = common::solver;

namespace {

using lapack::cdouble;
using lapack::cfloat;
using lapack::L;

}  // namespace


namespace {

// Each precision's LAPACK routines.
template <typename T>
struct Lapack;
#define RGPU_LAPACK_TRAITS(T, R, X, ORMQR, EVD, SVD)                                    \
  template <>                                                                            \
  struct Lapack<T> {                                                                     \
    using Real = R;                                                                      \
    static constexpr auto potrf = X##potrf_;                                             \
    static constexpr auto potrs = X##potrs_;                                             \
    static constexpr auto getrf = X##getrf_;                                             \
    static constexpr auto getrs = X##getrs_;                                             \
    static constexpr auto geqrf = X##geqrf_;                                             \
    static constexpr auto ormqr = ORMQR;                                                 \
    static constexpr auto evd = EVD;                                                     \
    static constexpr auto svd = SVD;                                                     \
  };
RGPU_LAPACK_TRAITS(float, float, s, sormqr_, ssyevd_, sgesvd_)
RGPU_LAPACK_TRAITS(double, double, d, dormqr_, dsyevd_, dgesvd_)
RGPU_LAPACK_TRAITS(cfloat, float, c, cunmqr_, cheevd_, cgesvd_)
RGPU_LAPACK_TRAITS(cdouble, double, z, zunmqr_, zheevd_, zgesvd_)
#undef RGPU_LAPACK_TRAITS

template <typename T>
T* at(uint64_t p) {
  return reinterpret_cast<T*>(p);
}

template <typename T>
constexpr bool isComplexT = !std::is_floating_point_v<T>;

// LAPACK's optimal workspace from a query's answer.
template <typename T>
int lworkOf(T w) {
  return std::max(1, static_cast<int>(std::real(w)));
}

// getrf without pivoting (cuSOLVER's with a null devIpiv): Doolittle in place.
template <typename T>
int luNoPivot(int m, int n, T* a, int lda) {
  int info = 0;
  for (int j = 0; j < std::min(m, n); ++j) {
    T pivot = a[j + static_cast<size_t>(j) * lda];
    if (pivot == T(0)) {
      if (!info) info = j + 1;
      continue;
    }
    for (int i = j + 1; i < m; ++i) a[i + static_cast<size_t>(j) * lda] /= pivot;
    for (int c = j + 1; c < n; ++c) {
      T f = a[j + static_cast<size_t>(c) * lda];
      for (int i = j + 1; i < m; ++i) a[i + static_cast<size_t>(c) * lda] -= a[i + static_cast<size_t>(j) * lda] * f;
    }
  }
  return info;
}

template <typename T>
int runTyped(const sv::Args& a) {
  using F = Lapack<T>;
  using R = typename F::Real;
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const int nrhs = static_cast<int>(a.nrhs), lda = static_cast<int>(a.lda), ldb = static_cast<int>(a.ldb);
  const int ldu = static_cast<int>(a.ldu), ldvt = static_cast<int>(a.ldvt);
  const char uplo = a.uplo == 0 ? 'L' : 'U';
  const char trans = a.trans == 0 ? 'N' : a.trans == 1 ? 'T' : 'C';
  int info = 0, query = -1;
  switch (a.op) {
    case sv::Op::kPotrf: F::potrf(&uplo, &n, at<T>(a.a), &lda, &info, 1); break;
    case sv::Op::kPotrs: F::potrs(&uplo, &n, &nrhs, at<T>(a.a), &lda, at<T>(a.b), &ldb, &info, 1); break;
    case sv::Op::kGetrf:
      if (a.ipiv) F::getrf(&m, &n, at<T>(a.a), &lda, at<int>(a.ipiv), &info);
      else info = luNoPivot(m, n, at<T>(a.a), lda);
      break;
    case sv::Op::kGetrs: {
      std::vector<int> identity;
      const int* ipiv = at<int>(a.ipiv);
      if (!ipiv) {
        identity.resize(static_cast<size_t>(std::max(n, 1)));
        for (int i = 0; i < n; ++i) identity[i] = i + 1;
        ipiv = identity.data();
      }
      F::getrs(&trans, &n, &nrhs, at<T>(a.a), &lda, ipiv, at<T>(a.b), &ldb, &info, 1);
      break;
    }
    case sv::Op::kGeqrf: {
      T w{};
      F::geqrf(&m, &n, at<T>(a.a), &lda, at<T>(a.tau), &w, &query, &info);
      std::vector<T> work(lworkOf(w));
      int lw = static_cast<int>(work.size());
      F::geqrf(&m, &n, at<T>(a.a), &lda, at<T>(a.tau), work.data(), &lw, &info);
      break;
    }
    case sv::Op::kOrmqr: {
      const char side = a.side == 0 ? 'L' : 'R';
      T w{};
      F::ormqr(&side, &trans, &m, &n, &k, at<T>(a.a), &lda, at<T>(a.tau), at<T>(a.b), &ldb, &w, &query, &info, 1, 1);
      std::vector<T> work(lworkOf(w));
      int lw = static_cast<int>(work.size());
      F::ormqr(&side, &trans, &m, &n, &k, at<T>(a.a), &lda, at<T>(a.tau), at<T>(a.b), &ldb, work.data(), &lw, &info,
               1, 1);
      break;
    }
    case sv::Op::kSyevd: {
      const char jobz = a.jobz ? 'V' : 'N';
      T w{};
      int iw = 0;
      if constexpr (isComplexT<T>) {
        R rw{};
        F::evd(&jobz, &uplo, &n, at<T>(a.a), &lda, at<R>(a.w), &w, &query, &rw, &query, &iw, &query, &info, 1, 1);
        std::vector<T> work(lworkOf(w));
        std::vector<R> rwork(lworkOf(rw));
        std::vector<int> iwork(std::max(1, iw));
        int lw = static_cast<int>(work.size()), lrw = static_cast<int>(rwork.size()), liw = static_cast<int>(iwork.size());
        F::evd(&jobz, &uplo, &n, at<T>(a.a), &lda, at<R>(a.w), work.data(), &lw, rwork.data(), &lrw, iwork.data(),
               &liw, &info, 1, 1);
      } else {
        F::evd(&jobz, &uplo, &n, at<T>(a.a), &lda, at<R>(a.w), &w, &query, &iw, &query, &info, 1, 1);
        std::vector<T> work(lworkOf(w));
        std::vector<int> iwork(std::max(1, iw));
        int lw = static_cast<int>(work.size()), liw = static_cast<int>(iwork.size());
        F::evd(&jobz, &uplo, &n, at<T>(a.a), &lda, at<R>(a.w), work.data(), &lw, iwork.data(), &liw, &info, 1, 1);
      }
      break;
    }
    case sv::Op::kGesvd: {
      const int mn = std::min(m, n);
      // LAPACK wants a U and VT it can address even when it writes none.
      T dummy[1];
      T* u = a.u && (a.jobu == 'A' || a.jobu == 'S') ? at<T>(a.u) : dummy;
      T* vt = a.vt && (a.jobvt == 'A' || a.jobvt == 'S') ? at<T>(a.vt) : dummy;
      const int lu = u == dummy ? 1 : ldu, lvt = vt == dummy ? 1 : ldvt;
      T w{};
      std::vector<R> rwork;
      if constexpr (isComplexT<T>) rwork.resize(static_cast<size_t>(std::max(1, 5 * mn)));
      auto svd = [&](T* work, const int* lw) {
        if constexpr (isComplexT<T>)
          F::svd(&a.jobu, &a.jobvt, &m, &n, at<T>(a.a), &lda, at<R>(a.w), u, &lu, vt, &lvt, work, lw, rwork.data(),
                 &info, 1, 1);
        else
          F::svd(&a.jobu, &a.jobvt, &m, &n, at<T>(a.a), &lda, at<R>(a.w), u, &lu, vt, &lvt, work, lw, &info, 1, 1);
      };
      svd(&w, &query);
      std::vector<T> work(lworkOf(w));
      int lw = static_cast<int>(work.size());
      svd(work.data(), &lw);
      // cuSOLVER's rwork: the superdiagonal left unconverged (info > 0).
      if (a.rwork && mn > 1)
        for (int i = 0; i < mn - 1; ++i) {
          if constexpr (isComplexT<T>) at<R>(a.rwork)[i] = rwork[static_cast<size_t>(i)];
          else at<R>(a.rwork)[i] = std::real(work[static_cast<size_t>(i) + 1]);
        }
      break;
    }
  }
  return info;
}

}  // namespace

Status run(const sv::Args& a) {
  if (a.op == sv::Op::kGetrs && a.ipiv && a.n > 0 && a.n <= INT32_MAX) {
    const int* ipiv = at<int>(a.ipiv);
    if (const int i = lapack::badPivot(ipiv, static_cast<int>(a.n)); i >= 0)
      return Status(err::kInvalidValue, "cusolverDn getrs: devIpiv[" + std::to_string(i) + "] is " +
                                            std::to_string(ipiv[i]) + ", not a row of the " + std::to_string(a.n) +
                                            "-row matrix (1 to n)");
  }
  int info = 0;
  switch (a.type) {
    case sv::kR32F: info = runTyped<float>(a); break;
    case sv::kR64F: info = runTyped<double>(a); break;
    case sv::kC32F: info = runTyped<cfloat>(a); break;
    case sv::kC64F: info = runTyped<cdouble>(a); break;
    default: return Status(err::kInvalidValue, "cuSOLVER data type " + std::to_string(a.type));
  }
  std::memcpy(at<int>(a.info), &info, sizeof info);
  return Status::ok();
}

}  // namespace rgpu::server::simsolver

// The sim backend's side (sim_backend.h).
#include "server/sim/sim_backend.h"

namespace rgpu::server {

Result<int64_t> SimBackend::solverBufferSize(int, const common::solver::Args&) { return int64_t{0}; }

Status SimBackend::solver(StreamKey key, const common::solver::Args& a) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (gate_) gate_->queued(key.device);
  Status queued = enqueueLocked(*s, [this, key, a] {
    Status st;
    runAsKernel(key.device, [&] { st = simsolver::run(a); });
    if (!st) reportAsync(Status(st.code(), std::string(common::solver::opName(a.op, a.type)) + ": " + st.message()));
  });
  if (!queued && gate_) gate_->done(key.device, 0, false);
  return queued;
}

}  // namespace rgpu::server
