// rgpu's libcublas.so.13, level 2 beyond gemv and ger (docs/cublas.md): trmv,
// trsv and symv in S, D, C and Z, hemv in C and Z, with their _v2 and _64
// forms. Each is checked as cuBLAS checks its arguments and sent in the
// handle's stream order; the server checks every range.
#include <algorithm>

#include "client/blas/cublas_call.h"

namespace wire = rgpu::wire;
using rgpu::client::blas::addr;
using rgpu::client::blas::setScalar;
using namespace rgpu::client::blas::call;

namespace {

// x = op(A) x (trmv) or x = op(A)^-1 x (trsv), A triangular n x n.
template <typename T, typename I>
cublasStatus_t triangular(const char* name, wire::BlasOp op, cublasHandle_t h, cublasFillMode_t uplo,
                          cublasOperation_t trans, cublasDiagType_t diag, I n, const T* A, I lda, T* x, I incx) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n < 0 || !fillValid(uplo) || !opValid(trans) || !diagValid(diag) ||
      lda < std::max<I>(1, n) || incx == 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0) return CUBLAS_STATUS_SUCCESS;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setUplo(uplo);
    c.setTransA(trans);
    c.setDiag(diag);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    c.setX(addr(x));
    c.setIncx(incx);
  });
}

// y = alpha A x + beta y, A symmetric (symv) or Hermitian (hemv), one triangle read.
template <typename T, typename I>
cublasStatus_t symmetric(const char* name, wire::BlasOp op, cublasHandle_t h, cublasFillMode_t uplo, I n,
                         const T* alpha, const T* A, I lda, const T* x, I incx, const T* beta, T* y, I incy) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n < 0 || !fillValid(uplo) || lda < std::max<I>(1, n) || incx == 0 || incy == 0 || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0) return CUBLAS_STATUS_SUCCESS;
  const bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setUplo(uplo);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    setVectors(c, x, incx, y, incy);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
    setScalar(c.initBeta(), beta, sizeof(T), device);
  });
}

}  // namespace

extern "C" {

#define API RGPU_BLAS_API
#define RUN RGPU_BLAS_RUN

// y = alpha A x + beta y of a symmetric (symv) or Hermitian (hemv) A.
#define SYMMETRIC_MV(P, T, I, SUFFIX, NAME, OP)                                                                        \
  API(cublas##P##NAME##SUFFIX, cublasHandle_t h, cublasFillMode_t uplo, I n, const T* alpha, const T* A, I lda,        \
      const T* x, I incx, const T* beta, T* y, I incy) {                                                               \
    RUN(cublas##P##NAME, return symmetric<T, I>("cublas" #P #NAME #SUFFIX, wire::BlasOp::OP, h, uplo, n, alpha, A,     \
                                                lda, x, incx, beta, y, incy));                                         \
  }
#define LEVEL2MORE(P, T, I, SUFFIX)                                                                                    \
  API(cublas##P##trmv##SUFFIX, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,                       \
      cublasDiagType_t diag, I n, const T* A, I lda, T* x, I incx) {                                                   \
    RUN(cublas##P##trmv, return triangular<T, I>("cublas" #P "trmv" #SUFFIX, wire::BlasOp::TRMV, h, uplo, trans, diag, \
                                                 n, A, lda, x, incx));                                                 \
  }                                                                                                                    \
  API(cublas##P##trsv##SUFFIX, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,                       \
      cublasDiagType_t diag, I n, const T* A, I lda, T* x, I incx) {                                                   \
    RUN(cublas##P##trsv, return triangular<T, I>("cublas" #P "trsv" #SUFFIX, wire::BlasOp::TRSV, h, uplo, trans, diag, \
                                                 n, A, lda, x, incx));                                                 \
  }                                                                                                                    \
  SYMMETRIC_MV(P, T, I, SUFFIX, symv, SYMV)
LEVEL2MORE(S, float, int, _v2)
LEVEL2MORE(D, double, int, _v2)
LEVEL2MORE(C, cuComplex, int, _v2)
LEVEL2MORE(Z, cuDoubleComplex, int, _v2)
LEVEL2MORE(S, float, int64_t, _v2_64)
LEVEL2MORE(D, double, int64_t, _v2_64)
LEVEL2MORE(C, cuComplex, int64_t, _v2_64)
LEVEL2MORE(Z, cuDoubleComplex, int64_t, _v2_64)
SYMMETRIC_MV(C, cuComplex, int, _v2, hemv, HEMV)
SYMMETRIC_MV(Z, cuDoubleComplex, int, _v2, hemv, HEMV)
SYMMETRIC_MV(C, cuComplex, int64_t, _v2_64, hemv, HEMV)
SYMMETRIC_MV(Z, cuDoubleComplex, int64_t, _v2_64, hemv, HEMV)
#undef LEVEL2MORE
#undef SYMMETRIC_MV

}  // extern "C"
