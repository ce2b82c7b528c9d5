// rgpu's libcublas.so.13: the cuBLAS API forwarded to the session's server.
// Implemented here: handles and their settings, status strings, the
// vector/matrix helpers (cublasSet/GetVector/Matrix), level 1 (axpy, dot,
// dotc, nrm2, scal, asum, iamax, iamin, copy, swap) and level 2 (gemv, ger,
// gerc) in S, D, C and Z, and gemm (S, D, H, C, Z, GemmEx; C/Z gemm3m; strided-batched
// and batched) in their _v2 and _64 forms; the rest of level 3 and the batched factorizations are in
// cublas_level3.cc, cublasXt in cublasxt_api.cc. Every other exported name is
// a stub (generated from cublas_exports.txt) returning
// CUBLAS_STATUS_NOT_SUPPORTED with one log line.
//
// Parameter checks mirror cuBLAS's (CUBLAS_STATUS_INVALID_VALUE before anything
// is sent); the server checks every pointer against the session's memory.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <type_traits>

#include "client/blas/blas_client.h"
#include "client/blas/cublas_call.h"
#include "common/blas_types.h"

namespace cb = rgpu::common::blas;
using rgpu::Status;
using rgpu::client::blas::addr;
using rgpu::client::blas::guarded;
using rgpu::client::blas::setScalar;
using rgpu::client::blas::table;
using rgpu::client::blas::toBlasStatus;
namespace wire = rgpu::wire;
using namespace rgpu::client::blas::call;

static_assert(CUDA_R_32F == cb::kR32F && CUDA_R_64F == cb::kR64F && CUDA_R_16F == cb::kR16F && CUDA_R_16BF == cb::kR16BF &&
              CUDA_C_32F == cb::kC32F && CUDA_C_64F == cb::kC64F);
static_assert(CUBLAS_COMPUTE_32F == cb::kCompute32F && CUBLAS_COMPUTE_64F == cb::kCompute64F &&
              CUBLAS_COMPUTE_16F == cb::kCompute16F && CUBLAS_COMPUTE_32F_FAST_TF32 == cb::kCompute32FFastTF32 &&
              CUBLAS_COMPUTE_32F_FAST_16F == cb::kCompute32FFast16F && CUBLAS_COMPUTE_32F_FAST_16BF == cb::kCompute32FFast16BF &&
              CUBLAS_COMPUTE_32F_PEDANTIC == cb::kCompute32FPedantic && CUBLAS_COMPUTE_64F_PEDANTIC == cb::kCompute64FPedantic &&
              CUBLAS_COMPUTE_16F_PEDANTIC == cb::kCompute16FPedantic);
static_assert(CUBLAS_OP_N == cb::kOpN && CUBLAS_OP_T == cb::kOpT && CUBLAS_OP_C == cb::kOpC);

namespace {

// ---- level 1 -----------------------------------------------------------------

// (S: alpha's type, real for Csscal and Zdscal; sent as cType.)
template <typename T, typename I, typename S = T>
cublasStatus_t vectorOp(const char* name, wire::BlasOp op, cublasHandle_t h, I n, const std::type_identity_t<S>* alpha,
                        const T* x, I incx,
                        T* y, I incy) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;  // nothing to do (BLAS)
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setCType(typeOf<S>());
    c.setN(n);
    setVectors(c, x, incx, y, incy);
    if (alpha) setScalar(c.initAlpha(), alpha, sizeof(S), device);
  });
}

// dot, nrm2, asum, iamax, iamin: the result goes to host memory (a round
// trip) or stays in device memory (queued), as the pointer mode says.
template <typename T, typename I, typename R>
cublasStatus_t reduction(const char* name, wire::BlasOp op, cublasHandle_t h, I n, const T* x, I incx, const T* y,
                         I incy, R* result) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!result) return CUBLAS_STATUS_INVALID_VALUE;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(
      name, h,
      [&](wire::BlasCall::Builder c) {
        c.setOp(op);
        c.setAType(typeOf<T>());
        c.setBType(typeOf<T>());
        c.setN(n < 0 ? 0 : n);
        setVectors(c, x, incx, y, incy);
        c.setResult(device ? addr(result) : 0);
        c.setResult64(sizeof(R) == 8 && (op == wire::BlasOp::IAMAX || op == wire::BlasOp::IAMIN));
      },
      device ? nullptr : result, sizeof(R));
}

// ---- level 2 -----------------------------------------------------------------

template <typename T, typename I>
cublasStatus_t gemv(const char* name, cublasHandle_t h, cublasOperation_t trans, I m, I n, const T* alpha, const T* A,
                    I lda, const T* x, I incx, const T* beta, T* y, I incy) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || incx == 0 || incy == 0 || !opValid(trans) || lda < std::max<I>(1, m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(wire::BlasOp::GEMV);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setTransA(trans);
    c.setM(m);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    setVectors(c, x, incx, y, incy);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
    setScalar(c.initBeta(), beta, sizeof(T), device);
  });
}

// (gerc: A += alpha x y^H.)
template <typename T, typename I>
cublasStatus_t ger(const char* name, cublasHandle_t h, I m, I n, const T* alpha, const T* x, I incx, const T* y, I incy,
                   T* A, I lda, wire::BlasOp op = wire::BlasOp::GER) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || incx == 0 || incy == 0 || lda < std::max<I>(1, m) || !alpha) return CUBLAS_STATUS_INVALID_VALUE;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setM(m);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    setVectors(c, x, incx, y, incy);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
  });
}

// ---- level 3 -----------------------------------------------------------------

// One description of every gemm form.
struct Gemm {
  wire::BlasOp op = wire::BlasOp::GEMM;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  const void* alpha = nullptr;
  const void* beta = nullptr;
  const void *A = nullptr, *B = nullptr;
  const void* C = nullptr;  // (gemmBatched: the array of pointers)
  int32_t at = 0, bt = 0, ct = 0, compute = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t sa = 0, sb = 0, sc = 0, batch = 1;
};

cublasStatus_t gemm(const char* name, cublasHandle_t h, const Gemm& g) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 || !opValid(g.ta) || !opValid(g.tb) || !g.alpha || !g.beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  int64_t rows_a = g.ta == CUBLAS_OP_N ? g.m : g.k, rows_b = g.tb == CUBLAS_OP_N ? g.k : g.n;
  if (g.lda < std::max<int64_t>(1, rows_a) || g.ldb < std::max<int64_t>(1, rows_b) || g.ldc < std::max<int64_t>(1, g.m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!cb::gemmSupported(g.at, g.bt, g.ct, g.compute))
    return rgpu::client::blas::unsupported(name, "this combination of data and compute types");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  size_t scalar = cb::elementSize(cb::scalarTypeOf(g.compute, g.ct));
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(g.op);
    c.setAType(g.at);
    c.setBType(g.bt);
    c.setCType(g.ct);
    c.setComputeType(g.compute);
    c.setTransA(g.ta);
    c.setTransB(g.tb);
    c.setM(g.m);
    c.setN(g.n);
    c.setK(g.k);
    setScalar(c.initAlpha(), g.alpha, scalar, device);
    setScalar(c.initBeta(), g.beta, scalar, device);
    c.setA(addr(g.A));
    c.setLda(g.lda);
    c.setStrideA(g.sa);
    c.setB(addr(g.B));
    c.setLdb(g.ldb);
    c.setStrideB(g.sb);
    c.setC(addr(g.C));
    c.setLdc(g.ldc);
    c.setStrideC(g.sc);
    c.setBatchCount(g.batch);
  });
}

// The compute type of the typed gemms (cublasSgemm & co.), as the handle's
// math mode sets it.
template <typename T>
int32_t computeOf(cublasHandle_t h) {
  if (typeOf<T>() == cb::kR64F || typeOf<T>() == cb::kC64F) return cb::kCompute64F;
  if (typeOf<T>() == cb::kR16F) return cb::kCompute16F;
  return valid(h) && (h->math_mode & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH ? cb::kCompute32FFastTF32 : cb::kCompute32F;
}

// cublasGemmEx & co.: types and compute type as the caller gives them. (With the handle in
// TF32 mode cuBLAS may use TF32 for CUBLAS_COMPUTE_32F; rgpu keeps it exact, which is allowed.)
Gemm exGemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const void* alpha,
            const void* A, cudaDataType at, int64_t lda, const void* B, cudaDataType bt, int64_t ldb, const void* beta,
            const void* C, cudaDataType ct, int64_t ldc, cublasComputeType_t compute) {
  Gemm g;
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.beta = beta;
  g.A = A;
  g.B = B;
  g.C = C;
  g.at = at;
  g.bt = bt;
  g.ct = ct;
  g.compute = compute;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  return g;
}

template <typename T>
Gemm typedGemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
               const T* alpha, const void* A, int64_t lda, const void* B, int64_t ldb, const T* beta, const void* C,
               int64_t ldc) {
  auto t = static_cast<cudaDataType>(typeOf<T>());
  return exGemm(ta, tb, m, n, k, alpha, A, t, lda, B, t, ldb, beta, C, t, ldc,
                static_cast<cublasComputeType_t>(computeOf<T>(h)));
}

Gemm strided(Gemm g, int64_t sa, int64_t sb, int64_t sc, int64_t batch) {
  g.op = wire::BlasOp::GEMM_STRIDED_BATCHED;
  g.sa = sa;
  g.sb = sb;
  g.sc = sc;
  g.batch = batch;
  return g;
}

Gemm batched(Gemm g, int64_t batch) {
  g.op = wire::BlasOp::GEMM_BATCHED;
  g.batch = batch;
  return g;
}

// A handle setting: stored (set) or read back (get); the handle is checked.
template <typename V>
cublasStatus_t setField(cublasHandle_t h, V cublasContext::*field, V v) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->*field = v;
  return CUBLAS_STATUS_SUCCESS;
}
template <typename V>
cublasStatus_t getField(cublasHandle_t h, V cublasContext::*field, V* out) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  *out = h->*field;
  return CUBLAS_STATUS_SUCCESS;
}

// Thread-local: the legacy API's cublasGetError.
thread_local cublasStatus_t t_legacy_error = CUBLAS_STATUS_SUCCESS;

// cublasSet/GetVector and Matrix: strided copies through the runtime (cudaMemcpy2D).
cublasStatus_t copy2D(const char* name, int64_t rows, int64_t cols, int64_t elem, const void* src, int64_t lds,
                      void* dst, int64_t ldd, bool async, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || elem <= 0 || lds < std::max<int64_t>(1, rows) || ldd < std::max<int64_t>(1, rows))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
  auto e = static_cast<size_t>(elem);
  cudaError_t r = async ? cudaMemcpy2DAsync(dst, static_cast<size_t>(ldd) * e, src, static_cast<size_t>(lds) * e,
                                            static_cast<size_t>(rows) * e, static_cast<size_t>(cols), cudaMemcpyDefault, stream)
                        : cudaMemcpy2D(dst, static_cast<size_t>(ldd) * e, src, static_cast<size_t>(lds) * e,
                                       static_cast<size_t>(rows) * e, static_cast<size_t>(cols), cudaMemcpyDefault);
  if (r == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
  return toBlasStatus(Status(r == cudaErrorInvalidValue ? rgpu::err::kInvalidValue : rgpu::err::kUnknown,
                             std::string("copy failed: ") + cudaGetErrorName(r)),
                      name);
}

// A vector of n elements `inc` apart is a matrix of one-element rows.
cublasStatus_t copyVector(const char* name, int64_t n, int64_t elem, const void* x, int64_t incx, void* y, int64_t incy,
                          bool async, cudaStream_t stream) {
  if (n < 0 || elem <= 0 || incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (incx == 1 && incy == 1) return copy2D(name, n, 1, elem, x, n, y, n, async, stream);
  return copy2D(name, 1, n, elem, x, incx, y, incy, async, stream);
}

}  // namespace

#define API RGPU_BLAS_API
#define RUN RGPU_BLAS_RUN

// ---- handles and settings ----------------------------------------------------------

API(cublasCreate_v2, cublasHandle_t* handle) {
  RUN(cublasCreate, return rgpu::client::blas::createHandle("cublasCreate", handle));
}

API(cublasDestroy_v2, cublasHandle_t handle) { RUN(cublasDestroy, return rgpu::client::blas::destroyHandle(handle)); }

API(cublasGetVersion_v2, cublasHandle_t handle, int* version) {
  if (!version) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

API(cublasGetProperty, libraryPropertyType type, int* value) {
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

RGPU_BLAS_EXPORT size_t cublasGetCudartVersion(void) { return CUDART_VERSION; }
RGPU_BLAS_EXPORT const char* cublasGetStatusName(cublasStatus_t status) { return rgpu::client::blas::statusName(status); }
RGPU_BLAS_EXPORT const char* cublasGetStatusString(cublasStatus_t status) { return rgpu::client::blas::statusString(status); }

API(cublasSetStream_v2, cublasHandle_t handle, cudaStream_t stream) { return setField(handle, &cublasContext::stream, stream); }
API(cublasGetStream_v2, cublasHandle_t handle, cudaStream_t* stream) { return getField(handle, &cublasContext::stream, stream); }

API(cublasSetPointerMode_v2, cublasHandle_t handle, cublasPointerMode_t mode) {
  if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  return setField(handle, &cublasContext::pointer_mode, mode);
}
API(cublasGetPointerMode_v2, cublasHandle_t handle, cublasPointerMode_t* mode) {
  return getField(handle, &cublasContext::pointer_mode, mode);
}

API(cublasSetMathMode, cublasHandle_t handle, cublasMath_t mode) { return setField(handle, &cublasContext::math_mode, mode); }
API(cublasGetMathMode, cublasHandle_t handle, cublasMath_t* mode) { return getField(handle, &cublasContext::math_mode, mode); }

// Hints: the results are the same either way here.
API(cublasSetAtomicsMode, cublasHandle_t handle, cublasAtomicsMode_t mode) {
  return setField(handle, &cublasContext::atomics, mode);
}
API(cublasGetAtomicsMode, cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  return getField(handle, &cublasContext::atomics, mode);
}
API(cublasSetEmulationStrategy, cublasHandle_t handle, cublasEmulationStrategy_t strategy) {
  return setField(handle, &cublasContext::emulation, strategy);
}
API(cublasGetEmulationStrategy, cublasHandle_t handle, cublasEmulationStrategy_t* strategy) {
  return getField(handle, &cublasContext::emulation, strategy);
}

API(cublasSetWorkspace_v2, cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!workspace && workspaceSizeInBytes) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_size = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

API(cublasSetSmCountTarget, cublasHandle_t handle, int smCountTarget) {
  if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (smCountTarget < 0) return CUBLAS_STATUS_INVALID_VALUE;
  return setField(handle, &cublasContext::sm_count_target, smCountTarget);
}
API(cublasGetSmCountTarget, cublasHandle_t handle, int* smCountTarget) {
  return getField(handle, &cublasContext::sm_count_target, smCountTarget);
}

namespace {
std::atomic<cublasLogCallback> g_log_callback{nullptr};
}

API(cublasLoggerConfigure, int logIsOn, int logToStdOut, int logToStdErr, const char* logFileName) {
  // cuBLAS's own API log: rgpu logs through RGPU_LOG_LEVEL / client.toml instead.
  return CUBLAS_STATUS_SUCCESS;
}

API(cublasSetLoggerCallback, cublasLogCallback userCallback) {
  g_log_callback.store(userCallback);
  return CUBLAS_STATUS_SUCCESS;
}

API(cublasGetLoggerCallback, cublasLogCallback* userCallback) {
  if (!userCallback) return CUBLAS_STATUS_INVALID_VALUE;
  *userCallback = g_log_callback.load();
  return CUBLAS_STATUS_SUCCESS;
}

// The legacy API's error state (its calls are not implemented: each records NOT_SUPPORTED).
RGPU_BLAS_EXPORT cublasStatus_t cublasGetError(void) {  // cublas.h: cublasStatus, the same enum
  cublasStatus_t s = t_legacy_error;
  t_legacy_error = CUBLAS_STATUS_SUCCESS;
  return s;
}

extern "C" void rgpu_blas_legacy_unsupported(const char* name) {
  t_legacy_error = rgpu::client::blas::unsupported(name, "the legacy cuBLAS API");
}

// ---- vector and matrix helpers ------------------------------------------------------

#define SET_GET_VECTOR(NAME, I, SRC, DST)                                                                      \
  API(NAME, I n, I elemSize, const void* x, I incx, void* y, I incy) {                                     \
    RUN(NAME, return copyVector(#NAME, n, elemSize, x, incx, y, incy, false, nullptr));                     \
  }                                                                                                         \
  API(NAME##Async, I n, I elemSize, const void* x, I incx, void* y, I incy, cudaStream_t stream) {         \
    RUN(NAME##Async, return copyVector(#NAME "Async", n, elemSize, x, incx, y, incy, true, stream));        \
  }
SET_GET_VECTOR(cublasSetVector, int, x, y)
SET_GET_VECTOR(cublasGetVector, int, x, y)

#define SET_GET_VECTOR_64(NAME)                                                                                  \
  API(NAME##_64, int64_t n, int64_t elemSize, const void* x, int64_t incx, void* y, int64_t incy) {           \
    RUN(NAME, return copyVector(#NAME "_64", n, elemSize, x, incx, y, incy, false, nullptr));                 \
  }                                                                                                           \
  API(NAME##Async_64, int64_t n, int64_t elemSize, const void* x, int64_t incx, void* y, int64_t incy,        \
      cudaStream_t stream) {                                                                                  \
    RUN(NAME, return copyVector(#NAME "Async_64", n, elemSize, x, incx, y, incy, true, stream));              \
  }
SET_GET_VECTOR_64(cublasSetVector)
SET_GET_VECTOR_64(cublasGetVector)

#define SET_GET_MATRIX(NAME, I)                                                                                  \
  API(NAME, I rows, I cols, I elemSize, const void* A, I lda, void* B, I ldb) {                               \
    RUN(NAME, return copy2D(#NAME, rows, cols, elemSize, A, lda, B, ldb, false, nullptr));                    \
  }                                                                                                           \
  API(NAME##Async, I rows, I cols, I elemSize, const void* A, I lda, void* B, I ldb, cudaStream_t stream) {   \
    RUN(NAME, return copy2D(#NAME "Async", rows, cols, elemSize, A, lda, B, ldb, true, stream));              \
  }
SET_GET_MATRIX(cublasSetMatrix, int)
SET_GET_MATRIX(cublasGetMatrix, int)

#define SET_GET_MATRIX_64(NAME)                                                                                   \
  API(NAME##_64, int64_t rows, int64_t cols, int64_t elemSize, const void* A, int64_t lda, void* B, int64_t ldb) { \
    RUN(NAME, return copy2D(#NAME "_64", rows, cols, elemSize, A, lda, B, ldb, false, nullptr));                \
  }                                                                                                             \
  API(NAME##Async_64, int64_t rows, int64_t cols, int64_t elemSize, const void* A, int64_t lda, void* B,        \
      int64_t ldb, cudaStream_t stream) {                                                                       \
    RUN(NAME, return copy2D(#NAME "Async_64", rows, cols, elemSize, A, lda, B, ldb, true, stream));             \
  }
SET_GET_MATRIX_64(cublasSetMatrix)
SET_GET_MATRIX_64(cublasGetMatrix)

// ---- level 1: the _v2 (int) and _v2_64 (int64_t) forms of S and D -----------------

// axpy, scal, copy and swap of P (S, D, C, Z).
#define VECTOR_OPS(P, T, I, SUFFIX)                                                                                     \
  API(cublas##P##axpy##SUFFIX, cublasHandle_t h, I n, const T* alpha, const T* x, I incx, T* y, I incy) {             \
    RUN(cublas##P##axpy, if (!alpha) return CUBLAS_STATUS_INVALID_VALUE;                                                \
        return vectorOp<T, I>("cublas" #P "axpy" #SUFFIX, wire::BlasOp::AXPY, h, n, alpha, x, incx, y, incy));         \
  }                                                                                                                     \
  API(cublas##P##scal##SUFFIX, cublasHandle_t h, I n, const T* alpha, T* x, I incx) {                                 \
    RUN(cublas##P##scal, if (!alpha) return CUBLAS_STATUS_INVALID_VALUE;                                                \
        return vectorOp<T, I>("cublas" #P "scal" #SUFFIX, wire::BlasOp::SCAL, h, n, alpha, x, incx, nullptr, 1));      \
  }                                                                                                                     \
  API(cublas##P##copy##SUFFIX, cublasHandle_t h, I n, const T* x, I incx, T* y, I incy) {                             \
    RUN(cublas##P##copy,                                                                                                \
        return vectorOp<T, I>("cublas" #P "copy" #SUFFIX, wire::BlasOp::COPY, h, n, nullptr, x, incx, y, incy));       \
  }                                                                                                                     \
  API(cublas##P##swap##SUFFIX, cublasHandle_t h, I n, T* x, I incx, T* y, I incy) {                                   \
    RUN(cublas##P##swap,                                                                                                \
        return vectorOp<T, I>("cublas" #P "swap" #SUFFIX, wire::BlasOp::SWAP, h, n, nullptr, x, incx, y, incy));       \
  }
// A reduction NAME of x and y (dot) or of x alone (result R), as OP.
#define REDUCE_XY(NAME, T, I, OP)                                                                                       \
  API(NAME, cublasHandle_t h, I n, const T* x, I incx, const T* y, I incy, T* result) {                               \
    RUN(NAME, return reduction<T, I>(#NAME, wire::BlasOp::OP, h, n, x, incx, y, incy, result));                         \
  }
#define REDUCE_X(NAME, T, R, I, OP)                                                                                     \
  API(NAME, cublasHandle_t h, I n, const T* x, I incx, R* result) {                                                   \
    RUN(NAME, return reduction<T, I>(#NAME, wire::BlasOp::OP, h, n, x, incx, x, 1, result));                            \
  }

#define LEVEL1(P, p, T, I, SUFFIX)                         \
  VECTOR_OPS(P, T, I, SUFFIX)                              \
  REDUCE_XY(cublas##P##dot##SUFFIX, T, I, DOT)             \
  REDUCE_X(cublas##P##nrm2##SUFFIX, T, T, I, NRM2)         \
  REDUCE_X(cublas##P##asum##SUFFIX, T, T, I, ASUM)         \
  REDUCE_X(cublasI##p##amax##SUFFIX, T, I, I, IAMAX)       \
  REDUCE_X(cublasI##p##amin##SUFFIX, T, I, I, IAMIN)
LEVEL1(S, s, float, int, _v2)
LEVEL1(D, d, double, int, _v2)
LEVEL1(S, s, float, int64_t, _v2_64)
LEVEL1(D, d, double, int64_t, _v2_64)

// Complex level 1: P (C, Z), R its real type, RP the real results' prefix
// (Sc, Dz), SS the real-alpha scal (Csscal, Zdscal), p the index calls' letter.
#define CLEVEL1(P, T, R, RP, SS, p, I, SUFFIX)                                                                          \
  VECTOR_OPS(P, T, I, SUFFIX)                                                                                           \
  API(cublas##SS##scal##SUFFIX, cublasHandle_t h, I n, const R* alpha, T* x, I incx) {                                \
    RUN(cublas##SS##scal, if (!alpha) return CUBLAS_STATUS_INVALID_VALUE;                                               \
        return vectorOp<T, I, R>("cublas" #SS "scal" #SUFFIX, wire::BlasOp::SCAL, h, n, alpha, x, incx, nullptr, 1));  \
  }                                                                                                                     \
  REDUCE_XY(cublas##P##dotu##SUFFIX, T, I, DOT)                                                                         \
  REDUCE_XY(cublas##P##dotc##SUFFIX, T, I, DOTC)                                                                        \
  REDUCE_X(cublas##RP##nrm2##SUFFIX, T, R, I, NRM2)                                                                     \
  REDUCE_X(cublas##RP##asum##SUFFIX, T, R, I, ASUM)                                                                     \
  REDUCE_X(cublasI##p##amax##SUFFIX, T, I, I, IAMAX)                                                                    \
  REDUCE_X(cublasI##p##amin##SUFFIX, T, I, I, IAMIN)
CLEVEL1(C, cuComplex, float, Sc, Cs, c, int, _v2)
CLEVEL1(Z, cuDoubleComplex, double, Dz, Zd, z, int, _v2)
CLEVEL1(C, cuComplex, float, Sc, Cs, c, int64_t, _v2_64)
CLEVEL1(Z, cuDoubleComplex, double, Dz, Zd, z, int64_t, _v2_64)
#undef CLEVEL1
#undef LEVEL1
#undef REDUCE_X
#undef REDUCE_XY
#undef VECTOR_OPS

// ---- level 2 ----------------------------------------------------------------------

#define LEVEL2(P, T, I, SUFFIX)                                                                                        \
  API(cublas##P##gemv##SUFFIX, cublasHandle_t h, cublasOperation_t trans, I m, I n, const T* alpha, const T* A, I lda, \
      const T* x, I incx, const T* beta, T* y, I incy) {                                                               \
    RUN(cublas##P##gemv,                                                                                               \
        return gemv<T, I>("cublas" #P "gemv" #SUFFIX, h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy));        \
  }                                                                                                                    \
  API(cublas##P##ger##SUFFIX, cublasHandle_t h, I m, I n, const T* alpha, const T* x, I incx, const T* y, I incy,      \
      T* A, I lda) {                                                                                                   \
    RUN(cublas##P##ger, return ger<T, I>("cublas" #P "ger" #SUFFIX, h, m, n, alpha, x, incx, y, incy, A, lda));        \
  }
LEVEL2(S, float, int, _v2)
LEVEL2(D, double, int, _v2)
LEVEL2(S, float, int64_t, _v2_64)
LEVEL2(D, double, int64_t, _v2_64)

#define CLEVEL2(P, T, I, SUFFIX)                                                                                       \
  API(cublas##P##gemv##SUFFIX, cublasHandle_t h, cublasOperation_t trans, I m, I n, const T* alpha, const T* A, I lda, \
      const T* x, I incx, const T* beta, T* y, I incy) {                                                               \
    RUN(cublas##P##gemv,                                                                                               \
        return gemv<T, I>("cublas" #P "gemv" #SUFFIX, h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy));        \
  }                                                                                                                    \
  API(cublas##P##geru##SUFFIX, cublasHandle_t h, I m, I n, const T* alpha, const T* x, I incx, const T* y, I incy,     \
      T* A, I lda) {                                                                                                   \
    RUN(cublas##P##geru, return ger<T, I>("cublas" #P "geru" #SUFFIX, h, m, n, alpha, x, incx, y, incy, A, lda));      \
  }                                                                                                                    \
  API(cublas##P##gerc##SUFFIX, cublasHandle_t h, I m, I n, const T* alpha, const T* x, I incx, const T* y, I incy,     \
      T* A, I lda) {                                                                                                   \
    RUN(cublas##P##gerc, return ger<T, I>("cublas" #P "gerc" #SUFFIX, h, m, n, alpha, x, incx, y, incy, A, lda,        \
                                          wire::BlasOp::GERC));                                                        \
  }
CLEVEL2(C, cuComplex, int, _v2)
CLEVEL2(Z, cuDoubleComplex, int, _v2)
CLEVEL2(C, cuComplex, int64_t, _v2_64)
CLEVEL2(Z, cuDoubleComplex, int64_t, _v2_64)
#undef CLEVEL2

// ---- level 3 ----------------------------------------------------------------------

#define GEMM(NAME, T, I)                                                                                               \
  API(NAME, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n, I k, const T* alpha, const T* A,  \
      I lda, const T* B, I ldb, const T* beta, T* C, I ldc) {                                                          \
    RUN(NAME, return gemm(#NAME, h, typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)));           \
  }                                                                                                                    \
  API(NAME##StridedBatched, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n, I k,               \
      const T* alpha, const T* A, I lda, long long strideA, const T* B, I ldb, long long strideB, const T* beta, T* C, \
      I ldc, long long strideC, I batchCount) {                                                                        \
    RUN(NAME, return gemm(#NAME "StridedBatched",                                                                      \
                          h, strided(typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), strideA,   \
                                     strideB, strideC, batchCount)));                                                   \
  }                                                                                                                    \
  API(NAME##Batched, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n, I k, const T* alpha,      \
      const T* const Aarray[], I lda, const T* const Barray[], I ldb, const T* beta, T* const Carray[], I ldc,         \
      I batchCount) {                                                                                                  \
    RUN(NAME, return gemm(#NAME "Batched", h,                                                                          \
                          batched(typedGemm<T>(h, ta, tb, m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray, ldc), \
                                  batchCount)));                                                                       \
  }

// cuBLAS names them cublasSgemm_v2 but cublasSgemmStridedBatched (no _v2).
#define GEMMS(P, T)                                                                                                    \
  API(cublas##P##gemm_v2, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,           \
      const T* alpha, const T* A, int lda, const T* B, int ldb, const T* beta, T* C, int ldc) {                        \
    RUN(cublas##P##gemm, return gemm("cublas" #P "gemm_v2", h,                                                          \
                                     typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)));           \
  }                                                                                                                    \
  API(cublas##P##gemm_v2_64, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,       \
      int64_t k, const T* alpha, const T* A, int64_t lda, const T* B, int64_t ldb, const T* beta, T* C, int64_t ldc) { \
    RUN(cublas##P##gemm, return gemm("cublas" #P "gemm_v2_64", h,                                                       \
                                     typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)));           \
  }
GEMMS(S, float)
GEMMS(D, double)
GEMMS(C, cuComplex)
GEMMS(Z, cuDoubleComplex)

// gemm3m (Gauss's three-multiplication complex product): the same product.
#define GEMM3M(P, T)                                                                                                   \
  API(cublas##P##gemm3m, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,            \
      const T* alpha, const T* A, int lda, const T* B, int ldb, const T* beta, T* C, int ldc) {                        \
    RUN(cublas##P##gemm3m, return gemm("cublas" #P "gemm3m", h,                                                         \
                                       typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)));         \
  }                                                                                                                    \
  API(cublas##P##gemm3m_64, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,        \
      int64_t k, const T* alpha, const T* A, int64_t lda, const T* B, int64_t ldb, const T* beta, T* C, int64_t ldc) { \
    RUN(cublas##P##gemm3m, return gemm("cublas" #P "gemm3m_64", h,                                                      \
                                       typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)));         \
  }
GEMM3M(C, cuComplex)
GEMM3M(Z, cuDoubleComplex)

#define GEMM_BATCHES(P, T)                                                                                              \
  API(cublas##P##gemmStridedBatched, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, \
      const T* alpha, const T* A, int lda, long long strideA, const T* B, int ldb, long long strideB, const T* beta,    \
      T* C, int ldc, long long strideC, int batchCount) {                                                               \
    RUN(cublas##P##gemmStridedBatched,                                                                                  \
        return gemm("cublas" #P "gemmStridedBatched", h,                                                                \
                    strided(typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), strideA, strideB,    \
                            strideC, batchCount)));                                                                     \
  }                                                                                                                     \
  API(cublas##P##gemmStridedBatched_64, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m,        \
      int64_t n, int64_t k, const T* alpha, const T* A, int64_t lda, long long strideA, const T* B, int64_t ldb,        \
      long long strideB, const T* beta, T* C, int64_t ldc, long long strideC, int64_t batchCount) {                     \
    RUN(cublas##P##gemmStridedBatched,                                                                                  \
        return gemm("cublas" #P "gemmStridedBatched_64", h,                                                             \
                    strided(typedGemm<T>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), strideA, strideB,    \
                            strideC, batchCount)));                                                                     \
  }                                                                                                                     \
  API(cublas##P##gemmBatched, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,        \
      const T* alpha, const T* const Aarray[], int lda, const T* const Barray[], int ldb, const T* beta,                \
      T* const Carray[], int ldc, int batchCount) {                                                                     \
    RUN(cublas##P##gemmBatched,                                                                                         \
        return gemm("cublas" #P "gemmBatched", h,                                                                       \
                    batched(typedGemm<T>(h, ta, tb, m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray, ldc),       \
                            batchCount)));                                                                              \
  }                                                                                                                     \
  API(cublas##P##gemmBatched_64, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,    \
      int64_t k, const T* alpha, const T* const Aarray[], int64_t lda, const T* const Barray[], int64_t ldb,            \
      const T* beta, T* const Carray[], int64_t ldc, int64_t batchCount) {                                              \
    RUN(cublas##P##gemmBatched,                                                                                         \
        return gemm("cublas" #P "gemmBatched_64", h,                                                                    \
                    batched(typedGemm<T>(h, ta, tb, m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray, ldc),       \
                            batchCount)));                                                                              \
  }
GEMM_BATCHES(S, float)
GEMM_BATCHES(D, double)
GEMM_BATCHES(H, __half)
GEMM_BATCHES(C, cuComplex)
GEMM_BATCHES(Z, cuDoubleComplex)

API(cublasHgemm, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const __half* alpha,
    const __half* A, int lda, const __half* B, int ldb, const __half* beta, __half* C, int ldc) {
  RUN(cublasHgemm, return gemm("cublasHgemm", h, typedGemm<__half>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)));
}

API(cublasHgemm_64, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
    const __half* alpha, const __half* A, int64_t lda, const __half* B, int64_t ldb, const __half* beta, __half* C,
    int64_t ldc) {
  RUN(cublasHgemm_64,
      return gemm("cublasHgemm_64", h, typedGemm<__half>(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)));
}

#define GEMM_EX(SUFFIX, I)                                                                                              \
  API(cublasGemmEx##SUFFIX, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n, I k,                \
      const void* alpha, const void* A, cudaDataType at, I lda, const void* B, cudaDataType bt, I ldb, const void* beta, \
      void* C, cudaDataType ct, I ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {                            \
    RUN(cublasGemmEx, return gemm("cublasGemmEx" #SUFFIX, h,                                                             \
                                  exGemm(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute)));   \
  }                                                                                                                     \
  API(cublasGemmStridedBatchedEx##SUFFIX, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n, I k,  \
      const void* alpha, const void* A, cudaDataType at, I lda, long long strideA, const void* B, cudaDataType bt,      \
      I ldb, long long strideB, const void* beta, void* C, cudaDataType ct, I ldc, long long strideC, I batchCount,     \
      cublasComputeType_t compute, cublasGemmAlgo_t algo) {                                                             \
    RUN(cublasGemmStridedBatchedEx,                                                                                     \
        return gemm("cublasGemmStridedBatchedEx" #SUFFIX, h,                                                            \
                    strided(exGemm(ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute), strideA, \
                            strideB, strideC, batchCount)));                                                            \
  }                                                                                                                     \
  API(cublasGemmBatchedEx##SUFFIX, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n, I k,         \
      const void* alpha, const void* const Aarray[], cudaDataType at, I lda, const void* const Barray[],                \
      cudaDataType bt, I ldb, const void* beta, void* const Carray[], cudaDataType ct, I ldc, I batchCount,             \
      cublasComputeType_t compute, cublasGemmAlgo_t algo) {                                                             \
    RUN(cublasGemmBatchedEx,                                                                                            \
        return gemm("cublasGemmBatchedEx" #SUFFIX, h,                                                                   \
                    batched(exGemm(ta, tb, m, n, k, alpha, Aarray, at, lda, Barray, bt, ldb, beta, Carray, ct, ldc,     \
                                   compute),                                                                            \
                            batchCount)));                                                                              \
  }
GEMM_EX(, int)
GEMM_EX(_64, int64_t)
