// CudaBackend's cuSOLVER: NVIDIA's library (solver_api.h) in the session's
// primary context, one cusolverDn handle per device, each call on the
// request's stream as the session's kernel (launch gate, GPU time,
// watchdog). devInfo, the workspace and every matrix are the client's
// device memory (checked by the session).
#include "common/log.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {

namespace sv = common::solver;

namespace {

// Each precision's entry points, as members of SolverApi.
template <typename T>
struct Fns;
#define RGPU_SOLVER_TRAITS(T, R, X, ORMQR, EVD)                                  \
  template <>                                                                   \
  struct Fns<T> {                                                               \
    using Real = R;                                                             \
    static constexpr auto potrfSize = &SolverApi::cusolverDn##X##potrf_bufferSize; \
    static constexpr auto potrf = &SolverApi::cusolverDn##X##potrf;             \
    static constexpr auto potrs = &SolverApi::cusolverDn##X##potrs;             \
    static constexpr auto getrfSize = &SolverApi::cusolverDn##X##getrf_bufferSize; \
    static constexpr auto getrf = &SolverApi::cusolverDn##X##getrf;             \
    static constexpr auto getrs = &SolverApi::cusolverDn##X##getrs;             \
    static constexpr auto geqrfSize = &SolverApi::cusolverDn##X##geqrf_bufferSize; \
    static constexpr auto geqrf = &SolverApi::cusolverDn##X##geqrf;             \
    static constexpr auto ormqrSize = &SolverApi::cusolverDn##X##ORMQR##_bufferSize; \
    static constexpr auto ormqr = &SolverApi::cusolverDn##X##ORMQR;             \
    static constexpr auto evdSize = &SolverApi::cusolverDn##X##EVD##_bufferSize; \
    static constexpr auto evd = &SolverApi::cusolverDn##X##EVD;                 \
    static constexpr auto gesvdSize = &SolverApi::cusolverDn##X##gesvd_bufferSize; \
    static constexpr auto gesvd = &SolverApi::cusolverDn##X##gesvd;             \
  };
RGPU_SOLVER_TRAITS(float, float, S, ormqr, syevd)
RGPU_SOLVER_TRAITS(double, double, D, ormqr, syevd)
RGPU_SOLVER_TRAITS(cuComplex, float, C, unmqr, heevd)
RGPU_SOLVER_TRAITS(cuDoubleComplex, double, Z, unmqr, heevd)
#undef RGPU_SOLVER_TRAITS

template <typename T>
T* ptr(uint64_t p) {
  return reinterpret_cast<T*>(p);
}

// The call's arguments in cuSOLVER's types.
struct Cast {
  const sv::Args& a;
  int m() const { return static_cast<int>(a.m); }
  int n() const { return static_cast<int>(a.n); }
  int k() const { return static_cast<int>(a.k); }
  int nrhs() const { return static_cast<int>(a.nrhs); }
  int lda() const { return static_cast<int>(a.lda); }
  int ldb() const { return static_cast<int>(a.ldb); }
  int lwork() const { return static_cast<int>(a.lwork); }
  cublasFillMode_t uplo() const { return static_cast<cublasFillMode_t>(a.uplo); }
  cublasOperation_t trans() const { return static_cast<cublasOperation_t>(a.trans); }
  cublasSideMode_t side() const { return static_cast<cublasSideMode_t>(a.side); }
  cusolverEigMode_t jobz() const { return static_cast<cusolverEigMode_t>(a.jobz); }
  int* info() const { return ptr<int>(a.info); }
};

template <typename T>
cusolverStatus_t runTyped(SolverApi& S, cusolverDnHandle_t h, const sv::Args& a) {
  using F = Fns<T>;
  using R = typename F::Real;
  const Cast c{a};
  T* A = ptr<T>(a.a);
  T* work = ptr<T>(a.work);
  switch (a.op) {
    case sv::Op::kPotrf: return (S.*F::potrf)(h, c.uplo(), c.n(), A, c.lda(), work, c.lwork(), c.info());
    case sv::Op::kPotrs:
      return (S.*F::potrs)(h, c.uplo(), c.n(), c.nrhs(), A, c.lda(), ptr<T>(a.b), c.ldb(), c.info());
    case sv::Op::kGetrf: return (S.*F::getrf)(h, c.m(), c.n(), A, c.lda(), work, ptr<int>(a.ipiv), c.info());
    case sv::Op::kGetrs:
      return (S.*F::getrs)(h, c.trans(), c.n(), c.nrhs(), A, c.lda(), ptr<int>(a.ipiv), ptr<T>(a.b), c.ldb(),
                           c.info());
    case sv::Op::kGeqrf:
      return (S.*F::geqrf)(h, c.m(), c.n(), A, c.lda(), ptr<T>(a.tau), work, c.lwork(), c.info());
    case sv::Op::kOrmqr:
      return (S.*F::ormqr)(h, c.side(), c.trans(), c.m(), c.n(), c.k(), A, c.lda(), ptr<T>(a.tau), ptr<T>(a.b),
                           c.ldb(), work, c.lwork(), c.info());
    case sv::Op::kSyevd:
      return (S.*F::evd)(h, c.jobz(), c.uplo(), c.n(), A, c.lda(), ptr<R>(a.w), work, c.lwork(), c.info());
    case sv::Op::kGesvd:
      return (S.*F::gesvd)(h, static_cast<signed char>(a.jobu), static_cast<signed char>(a.jobvt), c.m(), c.n(), A,
                           c.lda(), ptr<R>(a.w), ptr<T>(a.u), static_cast<int>(a.ldu), ptr<T>(a.vt),
                           static_cast<int>(a.ldvt), work, c.lwork(), ptr<R>(a.rwork), c.info());
  }
  return CUSOLVER_STATUS_INVALID_VALUE;
}

template <typename T>
cusolverStatus_t sizeTyped(SolverApi& S, cusolverDnHandle_t h, const sv::Args& a, int* lwork) {
  using F = Fns<T>;
  using R = typename F::Real;
  const Cast c{a};
  T* A = ptr<T>(a.a);
  *lwork = 0;
  switch (a.op) {
    case sv::Op::kPotrf: return (S.*F::potrfSize)(h, c.uplo(), c.n(), A, c.lda(), lwork);
    case sv::Op::kGetrf: return (S.*F::getrfSize)(h, c.m(), c.n(), A, c.lda(), lwork);
    case sv::Op::kGeqrf: return (S.*F::geqrfSize)(h, c.m(), c.n(), A, c.lda(), lwork);
    case sv::Op::kOrmqr:
      return (S.*F::ormqrSize)(h, c.side(), c.trans(), c.m(), c.n(), c.k(), A, c.lda(), ptr<T>(a.tau), ptr<T>(a.b),
                               c.ldb(), lwork);
    case sv::Op::kSyevd: return (S.*F::evdSize)(h, c.jobz(), c.uplo(), c.n(), A, c.lda(), ptr<R>(a.w), lwork);
    case sv::Op::kGesvd: return (S.*F::gesvdSize)(h, c.m(), c.n(), lwork);
    case sv::Op::kPotrs:
    case sv::Op::kGetrs: return CUSOLVER_STATUS_SUCCESS;  // no workspace
  }
  return CUSOLVER_STATUS_INVALID_VALUE;
}

template <typename Fn>
cusolverStatus_t byType(int32_t type, Fn&& fn) {
  switch (type) {
    case sv::kR32F: return fn(float{});
    case sv::kR64F: return fn(double{});
    case sv::kC32F: return fn(cuComplex{});
    case sv::kC64F: return fn(cuDoubleComplex{});
  }
  return CUSOLVER_STATUS_INVALID_VALUE;
}

}  // namespace

Result<cusolverDnHandle_t> CudaBackend::solverHandle(int dev) {
  if (!solver_tried_) {
    solver_tried_ = true;
    auto a = SolverApi::load(opts_.cusolver_library);
    if (a) {
      solver_api_ = std::move(*a);
      RGPU_LOG_INFO("cuda: cuSOLVER loaded ({})", opts_.cusolver_library);
    } else {
      solver_error_ = a.status();
      RGPU_LOG_WARN("cuda: {}", solver_error_.message());
    }
  }
  if (!solver_api_) return solver_error_;
  RGPU_TRY(use(dev));
  cusolverDnHandle_t& h = solver_handles_[dev];
  if (!h) RGPU_TRY(SolverApi::check(solver_api_->cusolverDnCreate(&h), "cusolverDnCreate"));
  return h;
}

void CudaBackend::releaseSolver() {
  for (auto& [dev, h] : solver_handles_)
    if (h && use(dev)) solver_api_->cusolverDnDestroy(h);
  solver_handles_.clear();
}

Result<int64_t> CudaBackend::solverBufferSize(int device, const sv::Args& a) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Status(err::kInvalidDevice, "invalid device");
  auto h = solverHandle(device);
  if (!h) return h.status();
  int lwork = 0;
  RGPU_TRY(SolverApi::check(
      byType(a.type, [&](auto t) { return sizeTyped<decltype(t)>(*solver_api_, *h, a, &lwork); }),
      (std::string(sv::opName(a.op, a.type)) + "_bufferSize").c_str()));
  return int64_t{lwork};
}

Status CudaBackend::solver(StreamKey key, const sv::Args& a) {
  auto s = streamOf(key);
  if (!s) return s.status();
  const int dev = s->first;
  auto h = solverHandle(dev);
  if (!h) return h.status();
  SolverApi& S = *solver_api_;
  RGPU_TRY(SolverApi::check(S.cusolverDnSetStream(*h, reinterpret_cast<cudaStream_t>(s->second)),
                            "cusolverDnSetStream"));
  const char* name = sv::opName(a.op, a.type);
  return asKernel(dev, s->second, name, [&] {
    return SolverApi::check(byType(a.type, [&](auto t) { return runTyped<decltype(t)>(S, *h, a); }), name);
  });
}

}  // namespace rgpu::server::cuda
