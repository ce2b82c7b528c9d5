// A fake cuSOLVER (dense) for testing the CUDA backend's cuSOLVER path
// without a GPU: the entry points rgpu's worker takes from NVIDIA's library
// (server/cuda/solver_api.h), computed by the sim's LAPACK executor
// (server/sim/sim_solver.h) on the fake driver's memory (host memory) and
// queued on the fake driver's executor in the handle's stream order
// (rgpu_fake_cuda_enqueue, which records each call in the driver's log).
// Its workspace sizes are kWorkElements (0 for potrs/getrs), and a call
// given a smaller Lwork is refused with CUSOLVER_STATUS_INVALID_VALUE, so
// the client's workspace must travel.
#include <cuda.h>
#include <cusolverDn.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "server/sim/sim_solver.h"
#include "tests/fake_driver/fake_library.h"

struct cusolverDnContext {
  cudaStream_t stream = nullptr;
};

namespace {

namespace sv = rgpu::common::solver;

constexpr int kWorkElements = 64;

cusolverStatus_t submit(cusolverDnHandle_t h, const sv::Args& a, const char* name) {
  const bool needs = a.op != sv::Op::kPotrs && a.op != sv::Op::kGetrs;
  if (needs && (a.lwork < kWorkElements || !a.work)) return CUSOLVER_STATUS_INVALID_VALUE;
  rgpu::fake::record(std::string(name) + (needs ? " with a workspace of " + std::to_string(a.lwork) : std::string()));
  bool queued = rgpu::fake::enqueue(reinterpret_cast<CUstream>(h->stream), name,
                                    [a] { return rgpu::server::simsolver::run(a) ? 0 : 1; });
  return queued ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_EXECUTION_FAILED;
}

sv::Args args(sv::Op op, int32_t type) {
  sv::Args a;
  a.op = op;
  a.type = type;
  return a;
}

uint64_t p(const void* x) { return reinterpret_cast<uint64_t>(x); }

}  // namespace

extern "C" {

#define FAKE_API __attribute__((visibility("default")))

FAKE_API cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t* h) {
  *h = new cusolverDnContext;
  return CUSOLVER_STATUS_SUCCESS;
}
FAKE_API cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h) {
  delete h;
  return CUSOLVER_STATUS_SUCCESS;
}
FAKE_API cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUSOLVER_STATUS_SUCCESS;
}

// Every precision X with element type T and real type R; TYPE its cudaDataType.
#define FAKE_SOLVER(X, T, R, TYPE, ORMQR, EVD)                                                                       \
  FAKE_API cusolverStatus_t cusolverDn##X##potrf_bufferSize(cusolverDnHandle_t, cublasFillMode_t, int, T*, int,     \
                                                            int* lw) {                                              \
    *lw = kWorkElements;                                                                                           \
    return CUSOLVER_STATUS_SUCCESS;                                                                                 \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##potrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, T* A, int lda, \
                                                 T* work, int lwork, int* info) {                                   \
    sv::Args a = args(sv::Op::kPotrf, TYPE);                                                                        \
    a.uplo = uplo, a.n = n, a.a = p(A), a.lda = lda, a.work = p(work), a.lwork = lwork, a.info = p(info);           \
    return submit(h, a, "cusolverDn" #X "potrf");                                                                   \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##potrs(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, int nrhs,      \
                                                 const T* A, int lda, T* B, int ldb, int* info) {                   \
    sv::Args a = args(sv::Op::kPotrs, TYPE);                                                                        \
    a.uplo = uplo, a.n = n, a.nrhs = nrhs, a.a = p(A), a.lda = lda, a.b = p(B), a.ldb = ldb, a.info = p(info);      \
    return submit(h, a, "cusolverDn" #X "potrs");                                                                   \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##getrf_bufferSize(cusolverDnHandle_t, int, int, T*, int, int* lw) {       \
    *lw = kWorkElements;                                                                                           \
    return CUSOLVER_STATUS_SUCCESS;                                                                                 \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##getrf(cusolverDnHandle_t h, int m, int n, T* A, int lda, T* work,        \
                                                 int* ipiv, int* info) {                                            \
    sv::Args a = args(sv::Op::kGetrf, TYPE);                                                                        \
    a.m = m, a.n = n, a.a = p(A), a.lda = lda, a.work = p(work), a.lwork = kWorkElements, a.ipiv = p(ipiv),         \
    a.info = p(info);                                                                                               \
    return submit(h, a, "cusolverDn" #X "getrf");                                                                   \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##getrs(cusolverDnHandle_t h, cublasOperation_t trans, int n, int nrhs,    \
                                                 const T* A, int lda, const int* ipiv, T* B, int ldb, int* info) {  \
    sv::Args a = args(sv::Op::kGetrs, TYPE);                                                                        \
    a.trans = trans, a.n = n, a.nrhs = nrhs, a.a = p(A), a.lda = lda, a.ipiv = p(ipiv), a.b = p(B), a.ldb = ldb,    \
    a.info = p(info);                                                                                               \
    return submit(h, a, "cusolverDn" #X "getrs");                                                                   \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##geqrf_bufferSize(cusolverDnHandle_t, int, int, T*, int, int* lw) {       \
    *lw = kWorkElements;                                                                                           \
    return CUSOLVER_STATUS_SUCCESS;                                                                                 \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##geqrf(cusolverDnHandle_t h, int m, int n, T* A, int lda, T* tau,         \
                                                 T* work, int lwork, int* info) {                                   \
    sv::Args a = args(sv::Op::kGeqrf, TYPE);                                                                        \
    a.m = m, a.n = n, a.a = p(A), a.lda = lda, a.tau = p(tau), a.work = p(work), a.lwork = lwork, a.info = p(info); \
    return submit(h, a, "cusolverDn" #X "geqrf");                                                                   \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##ORMQR##_bufferSize(cusolverDnHandle_t, cublasSideMode_t,                 \
                                                              cublasOperation_t, int, int, int, const T*, int,      \
                                                              const T*, const T*, int, int* lw) {                   \
    *lw = kWorkElements;                                                                                           \
    return CUSOLVER_STATUS_SUCCESS;                                                                                 \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##ORMQR(cusolverDnHandle_t h, cublasSideMode_t side,                       \
                                                 cublasOperation_t trans, int m, int n, int k, const T* A, int lda, \
                                                 const T* tau, T* C, int ldc, T* work, int lwork, int* info) {      \
    sv::Args a = args(sv::Op::kOrmqr, TYPE);                                                                        \
    a.side = side, a.trans = trans, a.m = m, a.n = n, a.k = k, a.a = p(A), a.lda = lda, a.tau = p(tau),             \
    a.b = p(C), a.ldb = ldc, a.work = p(work), a.lwork = lwork, a.info = p(info);                                   \
    return submit(h, a, "cusolverDn" #X #ORMQR);                                                                    \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##EVD##_bufferSize(cusolverDnHandle_t, cusolverEigMode_t,                  \
                                                            cublasFillMode_t, int, const T*, int, const R*,         \
                                                            int* lw) {                                              \
    *lw = kWorkElements;                                                                                           \
    return CUSOLVER_STATUS_SUCCESS;                                                                                 \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##EVD(cusolverDnHandle_t h, cusolverEigMode_t jobz, cublasFillMode_t uplo, \
                                               int n, T* A, int lda, R* W, T* work, int lwork, int* info) {         \
    sv::Args a = args(sv::Op::kSyevd, TYPE);                                                                        \
    a.jobz = jobz, a.uplo = uplo, a.n = n, a.a = p(A), a.lda = lda, a.w = p(W), a.work = p(work),                   \
    a.lwork = lwork, a.info = p(info);                                                                              \
    return submit(h, a, "cusolverDn" #X #EVD);                                                                      \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##gesvd_bufferSize(cusolverDnHandle_t, int, int, int* lw) {                \
    *lw = kWorkElements;                                                                                           \
    return CUSOLVER_STATUS_SUCCESS;                                                                                 \
  }                                                                                                                 \
  FAKE_API cusolverStatus_t cusolverDn##X##gesvd(cusolverDnHandle_t h, signed char jobu, signed char jobvt, int m,  \
                                                 int n, T* A, int lda, R* S, T* U, int ldu, T* VT, int ldvt,        \
                                                 T* work, int lwork, R* rwork, int* info) {                         \
    sv::Args a = args(sv::Op::kGesvd, TYPE);                                                                        \
    a.jobu = static_cast<char>(jobu), a.jobvt = static_cast<char>(jobvt), a.m = m, a.n = n, a.a = p(A),             \
    a.lda = lda, a.w = p(S), a.u = p(U), a.ldu = ldu, a.vt = p(VT), a.ldvt = ldvt, a.work = p(work),                \
    a.lwork = lwork, a.rwork = p(rwork), a.info = p(info);                                                          \
    return submit(h, a, "cusolverDn" #X "gesvd");                                                                   \
  }

FAKE_SOLVER(S, float, float, sv::kR32F, ormqr, syevd)
FAKE_SOLVER(D, double, double, sv::kR64F, ormqr, syevd)
FAKE_SOLVER(C, cuComplex, float, sv::kC32F, unmqr, heevd)
FAKE_SOLVER(Z, cuDoubleComplex, double, sv::kC64F, unmqr, heevd)

}  // extern "C"
