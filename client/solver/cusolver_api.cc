// rgpu's libcusolver.so.12: cuSOLVER's dense core with NVIDIA's names and
// version node (libcusolver.map; all 832 exported, the ones not forwarded as
// generated stubs answering CUSOLVER_STATUS_NOT_SUPPORTED with one log line).
//
// Forwarded (docs/cusolver.md): cusolverDnCreate/Destroy/SetStream/GetStream,
// cusolverGetVersion/GetProperty, and in S, D, C and Z: potrf, potrs, getrf,
// getrs, geqrf, ormqr (unmqr), syevd (heevd), gesvd, with the bufferSize
// calls. A handle is the client's (device, stream); a routine is one
// stream-ordered, asynchronous request carrying all its arguments
// (wire::Solver), checked here as cuSOLVER checks them
// (CUSOLVER_STATUS_INVALID_VALUE) and by the server against the session's
// memory (an error at the next synchronising call); devInfo is written in
// device memory as cuSOLVER's. A bufferSize call asks the server, whose
// device says (NVIDIA's cuSOLVER on the CUDA backend; none on the sim).
#include <cusolverDn.h>

#include <string>

#include "client/blas/blas_client.h"
#include "common/log.h"
#include "common/solver_args.h"

struct cusolverDnContext {
  static constexpr uint32_t kMagic = 0x534f4c56;  // "SOLV"
  uint32_t magic = kMagic;
  int device = 0;
  cudaStream_t stream = nullptr;
};

namespace {

using rgpu::Status;
namespace sv = rgpu::common::solver;
namespace err = rgpu::err;

bool live(cusolverDnHandle_t h) { return h && h->magic == cusolverDnContext::kMagic; }

// rgpu's error as a cuSOLVER status (logged once per text).
cusolverStatus_t toSolverStatus(const Status& s, const char* call, cusolverStatus_t otherwise) {
  if (s) return CUSOLVER_STATUS_SUCCESS;
  rgpu::common::logOnce(std::string("cusolver:") + call + ":" + s.message(), std::string(call) + ": " + s.message());
  switch (s.code()) {
    case err::kInvalidValue: return CUSOLVER_STATUS_INVALID_VALUE;
    case err::kMemoryAllocation: return CUSOLVER_STATUS_ALLOC_FAILED;
    case err::kNotSupported: return CUSOLVER_STATUS_NOT_SUPPORTED;
    default: return otherwise;
  }
}

template <typename F>
cusolverStatus_t guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return CUSOLVER_STATUS_ALLOC_FAILED;
  } catch (...) {
    return toSolverStatus(Status(err::kUnknown, "internal error"), call, CUSOLVER_STATUS_INTERNAL_ERROR);
  }
}

// The request for `a` on `h`'s stream.
cusolverStatus_t build(cusolverDnHandle_t h, const sv::Args& a, const char* call, bool size,
                       const rgpu::client::ExportTable** table, capnp::MallocMessageBuilder& msg) {
  if (!live(h)) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (Status s = sv::check(a); !s) return toSolverStatus(s, call, CUSOLVER_STATUS_INVALID_VALUE);
  const rgpu::client::ExportTable* t = rgpu::client::blas::table();
  if (!t) return CUSOLVER_STATUS_NOT_INITIALIZED;
  auto req = msg.initRoot<rgpu::wire::Request>();
  auto m = size ? req.initSolverBufferSize() : req.initSolver();
  if (Status s = rgpu::client::blas::setStream(m.initStream(), *t, h->stream, h->device); !s)
    return toSolverStatus(s, call, CUSOLVER_STATUS_EXECUTION_FAILED);
  sv::toWire(a, m);
  *table = t;
  return CUSOLVER_STATUS_SUCCESS;
}

// One routine, asynchronous as NVIDIA's.
cusolverStatus_t run(cusolverDnHandle_t h, const sv::Args& a) {
  const char* call = sv::opName(a.op, a.type);
  return guarded(call, [&]() -> cusolverStatus_t {
    capnp::MallocMessageBuilder msg;
    const rgpu::client::ExportTable* t = nullptr;
    if (cusolverStatus_t st = build(h, a, call, false, &t, msg); st != CUSOLVER_STATUS_SUCCESS) return st;
    return toSolverStatus(t->post(msg), call, CUSOLVER_STATUS_EXECUTION_FAILED);
  });
}

// A bufferSize call: the server's answer, in elements.
cusolverStatus_t bufferSize(cusolverDnHandle_t h, const sv::Args& a, int* lwork) {
  const std::string call = std::string(sv::opName(a.op, a.type)) + "_bufferSize";
  return guarded(call.c_str(), [&]() -> cusolverStatus_t {
    if (!lwork) return CUSOLVER_STATUS_INVALID_VALUE;
    capnp::MallocMessageBuilder msg;
    const rgpu::client::ExportTable* t = nullptr;
    if (cusolverStatus_t st = build(h, a, call.c_str(), true, &t, msg); st != CUSOLVER_STATUS_SUCCESS) return st;
    auto r = t->call(msg, nullptr, 0);
    if (!r) return toSolverStatus(r.status(), call.c_str(), CUSOLVER_STATUS_EXECUTION_FAILED);
    *lwork = static_cast<int>(r->reader().getValue());
    return CUSOLVER_STATUS_SUCCESS;
  });
}

sv::Args args(sv::Op op, int32_t type) {
  sv::Args a;
  a.op = op;
  a.type = type;
  return a;
}

uint64_t p(const void* x) { return reinterpret_cast<uint64_t>(x); }

}  // namespace

// A stub's answer (client/solver/cusolver_exports.txt, gen_blas_stubs.cmake).
extern "C" int rgpu_solver_unsupported(const char* name) {
  rgpu::common::logOnce(std::string("cusolver-unsupported:") + name,
                        std::string(name) + " is not supported by rgpu's cuSOLVER (returns "
                                            "CUSOLVER_STATUS_NOT_SUPPORTED; docs/cusolver.md)");
  return CUSOLVER_STATUS_NOT_SUPPORTED;
}

extern "C" {

#define RGPU_SOLVER_API __attribute__((visibility("default")))

RGPU_SOLVER_API cusolverStatus_t cusolverGetVersion(int* version) {
  if (!version) return CUSOLVER_STATUS_INVALID_VALUE;
  *version = CUSOLVER_VERSION;  // the toolkit's cuSOLVER this library stands in for
  return CUSOLVER_STATUS_SUCCESS;
}

RGPU_SOLVER_API cusolverStatus_t cusolverGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUSOLVER_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUSOLVER_VER_MAJOR; return CUSOLVER_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUSOLVER_VER_MINOR; return CUSOLVER_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUSOLVER_VER_PATCH; return CUSOLVER_STATUS_SUCCESS;
    default: return CUSOLVER_STATUS_INVALID_VALUE;
  }
}

// A handle is bound to the calling thread's device, as cuSOLVER's.
RGPU_SOLVER_API cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t* handle) {
  return guarded("cusolverDnCreate", [&]() -> cusolverStatus_t {
    if (!handle) return CUSOLVER_STATUS_INVALID_VALUE;
    int device = 0;
    if (rgpu::client::blas::openSession("cusolverDnCreate", &device) != CUBLAS_STATUS_SUCCESS)
      return CUSOLVER_STATUS_NOT_INITIALIZED;
    auto* h = new cusolverDnContext;
    h->device = device;
    *handle = h;
    return CUSOLVER_STATUS_SUCCESS;
  });
}

RGPU_SOLVER_API cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t handle) {
  if (!live(handle)) return CUSOLVER_STATUS_NOT_INITIALIZED;
  handle->magic = 0;
  delete handle;
  return CUSOLVER_STATUS_SUCCESS;
}

RGPU_SOLVER_API cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t handle, cudaStream_t stream) {
  if (!live(handle)) return CUSOLVER_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUSOLVER_STATUS_SUCCESS;
}

RGPU_SOLVER_API cusolverStatus_t cusolverDnGetStream(cusolverDnHandle_t handle, cudaStream_t* stream) {
  if (!live(handle)) return CUSOLVER_STATUS_NOT_INITIALIZED;
  if (!stream) return CUSOLVER_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUSOLVER_STATUS_SUCCESS;
}

// Every precision X with element type T, real type R and cudaDataType TYPE.
#define RGPU_SOLVER_ROUTINES_FOR(X, T, R, TYPE, ORMQR, EVD)                                                          \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##potrf_bufferSize(cusolverDnHandle_t h, cublasFillMode_t uplo,      \
                                                                   int n, T* A, int lda, int* Lwork) {              \
    sv::Args a = args(sv::Op::kPotrf, TYPE);                                                                        \
    a.uplo = uplo, a.n = n, a.a = p(A), a.lda = lda;                                                                \
    return bufferSize(h, a, Lwork);                                                                                 \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##potrf(cusolverDnHandle_t h, cublasFillMode_t uplo, int n, T* A,    \
                                                        int lda, T* Workspace, int Lwork, int* devInfo) {           \
    sv::Args a = args(sv::Op::kPotrf, TYPE);                                                                        \
    a.uplo = uplo, a.n = n, a.a = p(A), a.lda = lda, a.work = p(Workspace), a.lwork = Lwork, a.info = p(devInfo);   \
    return run(h, a);                                                                                               \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##potrs(cusolverDnHandle_t h, cublasFillMode_t uplo, int n,          \
                                                        int nrhs, const T* A, int lda, T* B, int ldb,               \
                                                        int* devInfo) {                                             \
    sv::Args a = args(sv::Op::kPotrs, TYPE);                                                                        \
    a.uplo = uplo, a.n = n, a.nrhs = nrhs, a.a = p(A), a.lda = lda, a.b = p(B), a.ldb = ldb, a.info = p(devInfo);   \
    return run(h, a);                                                                                               \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##getrf_bufferSize(cusolverDnHandle_t h, int m, int n, T* A,         \
                                                                   int lda, int* Lwork) {                           \
    sv::Args a = args(sv::Op::kGetrf, TYPE);                                                                        \
    a.m = m, a.n = n, a.a = p(A), a.lda = lda;                                                                      \
    return bufferSize(h, a, Lwork);                                                                                 \
  }                                                                                                                 \
  /* (getrf takes no Lwork: its workspace is what getrf_bufferSize said.) */                                        \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##getrf(cusolverDnHandle_t h, int m, int n, T* A, int lda,           \
                                                        T* Workspace, int* devIpiv, int* devInfo) {                 \
    sv::Args a = args(sv::Op::kGetrf, TYPE);                                                                        \
    a.m = m, a.n = n, a.a = p(A), a.lda = lda, a.work = p(Workspace), a.ipiv = p(devIpiv), a.info = p(devInfo);     \
    return run(h, a);                                                                                               \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##getrs(cusolverDnHandle_t h, cublasOperation_t trans, int n,        \
                                                        int nrhs, const T* A, int lda, const int* devIpiv, T* B,    \
                                                        int ldb, int* devInfo) {                                    \
    sv::Args a = args(sv::Op::kGetrs, TYPE);                                                                        \
    a.trans = trans, a.n = n, a.nrhs = nrhs, a.a = p(A), a.lda = lda, a.ipiv = p(devIpiv), a.b = p(B), a.ldb = ldb, \
    a.info = p(devInfo);                                                                                            \
    return run(h, a);                                                                                               \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##geqrf_bufferSize(cusolverDnHandle_t h, int m, int n, T* A,         \
                                                                   int lda, int* Lwork) {                           \
    sv::Args a = args(sv::Op::kGeqrf, TYPE);                                                                        \
    a.m = m, a.n = n, a.a = p(A), a.lda = lda;                                                                      \
    return bufferSize(h, a, Lwork);                                                                                 \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##geqrf(cusolverDnHandle_t h, int m, int n, T* A, int lda, T* TAU,   \
                                                        T* Workspace, int Lwork, int* devInfo) {                    \
    sv::Args a = args(sv::Op::kGeqrf, TYPE);                                                                        \
    a.m = m, a.n = n, a.a = p(A), a.lda = lda, a.tau = p(TAU), a.work = p(Workspace), a.lwork = Lwork,              \
    a.info = p(devInfo);                                                                                            \
    return run(h, a);                                                                                               \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##ORMQR##_bufferSize(                                               \
      cusolverDnHandle_t h, cublasSideMode_t side, cublasOperation_t trans, int m, int n, int k, const T* A,        \
      int lda, const T* tau, const T* C, int ldc, int* lwork) {                                                     \
    sv::Args a = args(sv::Op::kOrmqr, TYPE);                                                                        \
    a.side = side, a.trans = trans, a.m = m, a.n = n, a.k = k, a.a = p(A), a.lda = lda, a.tau = p(tau),             \
    a.b = p(C), a.ldb = ldc;                                                                                        \
    return bufferSize(h, a, lwork);                                                                                 \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##ORMQR(cusolverDnHandle_t h, cublasSideMode_t side,                 \
                                                        cublasOperation_t trans, int m, int n, int k, const T* A,   \
                                                        int lda, const T* tau, T* C, int ldc, T* work, int lwork,   \
                                                        int* devInfo) {                                             \
    sv::Args a = args(sv::Op::kOrmqr, TYPE);                                                                        \
    a.side = side, a.trans = trans, a.m = m, a.n = n, a.k = k, a.a = p(A), a.lda = lda, a.tau = p(tau),             \
    a.b = p(C), a.ldb = ldc, a.work = p(work), a.lwork = lwork, a.info = p(devInfo);                                \
    return run(h, a);                                                                                               \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##EVD##_bufferSize(cusolverDnHandle_t h, cusolverEigMode_t jobz,     \
                                                                   cublasFillMode_t uplo, int n, const T* A,        \
                                                                   int lda, const R* W, int* lwork) {               \
    sv::Args a = args(sv::Op::kSyevd, TYPE);                                                                        \
    a.jobz = jobz, a.uplo = uplo, a.n = n, a.a = p(A), a.lda = lda, a.w = p(W);                                     \
    return bufferSize(h, a, lwork);                                                                                 \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##EVD(cusolverDnHandle_t h, cusolverEigMode_t jobz,                  \
                                                      cublasFillMode_t uplo, int n, T* A, int lda, R* W, T* work,   \
                                                      int lwork, int* devInfo) {                                    \
    sv::Args a = args(sv::Op::kSyevd, TYPE);                                                                        \
    a.jobz = jobz, a.uplo = uplo, a.n = n, a.a = p(A), a.lda = lda, a.w = p(W), a.work = p(work), a.lwork = lwork,  \
    a.info = p(devInfo);                                                                                            \
    return run(h, a);                                                                                               \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##gesvd_bufferSize(cusolverDnHandle_t h, int m, int n, int* lwork) { \
    sv::Args a = args(sv::Op::kGesvd, TYPE);                                                                        \
    a.m = m, a.n = n, a.lda = m > 0 ? m : 1;                                                                        \
    return bufferSize(h, a, lwork);                                                                                 \
  }                                                                                                                 \
  RGPU_SOLVER_API cusolverStatus_t cusolverDn##X##gesvd(                                                            \
      cusolverDnHandle_t h, signed char jobu, signed char jobvt, int m, int n, T* A, int lda, R* S, T* U, int ldu,  \
      T* VT, int ldvt, T* work, int lwork, R* rwork, int* devInfo) {                                                \
    sv::Args a = args(sv::Op::kGesvd, TYPE);                                                                        \
    a.jobu = static_cast<char>(jobu), a.jobvt = static_cast<char>(jobvt), a.m = m, a.n = n, a.a = p(A),             \
    a.lda = lda, a.w = p(S), a.u = p(U), a.ldu = ldu, a.vt = p(VT), a.ldvt = ldvt, a.work = p(work),                \
    a.lwork = lwork, a.rwork = p(rwork), a.info = p(devInfo);                                                       \
    return run(h, a);                                                                                               \
  }

RGPU_SOLVER_ROUTINES_FOR(S, float, float, sv::kR32F, ormqr, syevd)
RGPU_SOLVER_ROUTINES_FOR(D, double, double, sv::kR64F, ormqr, syevd)
RGPU_SOLVER_ROUTINES_FOR(C, cuComplex, float, sv::kC32F, unmqr, heevd)
RGPU_SOLVER_ROUTINES_FOR(Z, cuDoubleComplex, double, sv::kC64F, unmqr, heevd)

}  // extern "C"
