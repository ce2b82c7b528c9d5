// rgpu's libcublas.so.13, level 3 beyond gemm (docs/cublas.md): geam, dgmm,
// trsm, syrk, trmm, symm and syr2k in S, D, C and Z, herk, her2k and hemm in
// C and Z, with their _64 forms, and the
// batched factorizations (getrf, getrs, getri, matinv, geqrf). Each is
// checked as cuBLAS checks its arguments and sent in the handle's stream
// order; the server checks every range (the matrices a pointer array names
// where the call runs).
#include <algorithm>

#include "client/blas/cublas_call.h"

namespace wire = rgpu::wire;
using rgpu::client::blas::addr;
using rgpu::client::blas::setScalar;
using namespace rgpu::client::blas::call;

namespace {

// C = alpha op(A) + beta op(B). C may be A (or B) only untransposed with its
// leading dimension, as cuBLAS allows.
template <typename T, typename I>
cublasStatus_t geam(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n,
                    const T* alpha, const T* A, I lda, const T* beta, const T* B, I ldb, T* C, I ldc) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || !opValid(ta) || !opValid(tb) || !alpha || !beta || ldc < std::max<I>(1, m) ||
      lda < std::max<I>(1, ta == CUBLAS_OP_N ? m : n) || ldb < std::max<I>(1, tb == CUBLAS_OP_N ? m : n) ||
      (C == A && (ta != CUBLAS_OP_N || lda != ldc)) || (C == B && (tb != CUBLAS_OP_N || ldb != ldc)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(wire::BlasOp::GEAM);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setTransA(ta);
    c.setTransB(tb);
    c.setM(m);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    c.setB(addr(B));
    c.setLdb(ldb);
    c.setC(addr(C));
    c.setLdc(ldc);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
    setScalar(c.initBeta(), beta, sizeof(T), device);
  });
}

// C = A diag(x) (right) or diag(x) A (left).
template <typename T, typename I>
cublasStatus_t dgmm(const char* name, cublasHandle_t h, cublasSideMode_t side, I m, I n, const T* A, I lda, const T* x,
                    I incx, T* C, I ldc) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || !sideValid(side) || lda < std::max<I>(1, m) ||
      ldc < std::max<I>(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(wire::BlasOp::DGMM);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setSide(side);
    c.setM(m);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    c.setX(addr(x));
    c.setIncx(incx);
    c.setC(addr(C));
    c.setLdc(ldc);
  });
}

// op(A) X = alpha B (left) or X op(A) = alpha B (right); X over B.
template <typename T, typename I>
cublasStatus_t trsm(const char* name, cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                    cublasOperation_t trans, cublasDiagType_t diag, I m, I n, const T* alpha, const T* A, I lda, T* B,
                    I ldb) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || !sideValid(side) ||
      !fillValid(uplo) || !opValid(trans) ||
      !diagValid(diag) || !alpha ||
      lda < std::max<I>(1, side == CUBLAS_SIDE_LEFT ? m : n) || ldb < std::max<I>(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(wire::BlasOp::TRSM);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setSide(side);
    c.setUplo(uplo);
    c.setTransA(trans);
    c.setDiag(diag);
    c.setM(m);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    c.setB(addr(B));
    c.setLdb(ldb);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
  });
}

// Whether `trans` is an operation a rank-k update of T takes: any for real
// types (C is T), N or T for complex syrk and syr2k, N or C for herk and her2k.
template <typename T>
bool rankTransValid(cublasOperation_t trans, bool hermitian) {
  if (!opValid(trans)) return false;
  if (!cb::isComplex(typeOf<T>())) return true;
  return trans == CUBLAS_OP_N || trans == (hermitian ? CUBLAS_OP_C : CUBLAS_OP_T);
}

// C (one triangle) = alpha op(A) op(A)^T + beta C (herk: op(A)^H, alpha and beta real: S).
template <typename T, typename I, typename S = T>
cublasStatus_t syrk(const char* name, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, I n, I k,
                    const S* alpha, const T* A, I lda, const S* beta, T* C, I ldc,
                    wire::BlasOp op = wire::BlasOp::SYRK) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n < 0 || k < 0 || !fillValid(uplo) ||
      !rankTransValid<T>(trans, op == wire::BlasOp::HERK) || !alpha || !beta ||
      lda < std::max<I>(1, trans == CUBLAS_OP_N ? n : k) || ldc < std::max<I>(1, n))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0) return CUBLAS_STATUS_SUCCESS;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setUplo(uplo);
    c.setTransA(trans);
    c.setN(n);
    c.setK(k);
    c.setA(addr(A));
    c.setLda(lda);
    c.setC(addr(C));
    c.setLdc(ldc);
    setScalar(c.initAlpha(), alpha, sizeof(S), device);
    setScalar(c.initBeta(), beta, sizeof(S), device);
  });
}

// C = alpha op(A) B (left) or alpha B op(A) (right), A triangular; C may be B (in place).
template <typename T, typename I>
cublasStatus_t trmm(const char* name, cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                    cublasOperation_t trans, cublasDiagType_t diag, I m, I n, const T* alpha, const T* A, I lda,
                    const T* B, I ldb, T* C, I ldc) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || !sideValid(side) ||
      !fillValid(uplo) || !opValid(trans) ||
      !diagValid(diag) || !alpha ||
      lda < std::max<I>(1, side == CUBLAS_SIDE_LEFT ? m : n) || ldb < std::max<I>(1, m) || ldc < std::max<I>(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(wire::BlasOp::TRMM);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setSide(side);
    c.setUplo(uplo);
    c.setTransA(trans);
    c.setDiag(diag);
    c.setM(m);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    c.setB(addr(B));
    c.setLdb(ldb);
    c.setC(addr(C));
    c.setLdc(ldc);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
  });
}

// C = alpha A B + beta C (left) or alpha B A + beta C (right), A symmetric (one triangle read).
// (hemm: A Hermitian.)
template <typename T, typename I>
cublasStatus_t symm(const char* name, cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, I m, I n,
                    const T* alpha, const T* A, I lda, const T* B, I ldb, const T* beta, T* C, I ldc,
                    wire::BlasOp op = wire::BlasOp::SYMM) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || !sideValid(side) ||
      !fillValid(uplo) || !alpha || !beta ||
      lda < std::max<I>(1, side == CUBLAS_SIDE_LEFT ? m : n) || ldb < std::max<I>(1, m) || ldc < std::max<I>(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setSide(side);
    c.setUplo(uplo);
    c.setM(m);
    c.setN(n);
    c.setA(addr(A));
    c.setLda(lda);
    c.setB(addr(B));
    c.setLdb(ldb);
    c.setC(addr(C));
    c.setLdc(ldc);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
    setScalar(c.initBeta(), beta, sizeof(T), device);
  });
}

// C (one triangle) = alpha (op(A) op(B)^T + op(B) op(A)^T) + beta C (her2k:
// alpha op(A) op(B)^H + conj(alpha) op(B) op(A)^H + beta C, beta real: SB).
template <typename T, typename I, typename SB = T>
cublasStatus_t syr2k(const char* name, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, I n, I k,
                     const T* alpha, const T* A, I lda, const T* B, I ldb, const SB* beta, T* C, I ldc,
                     wire::BlasOp op = wire::BlasOp::SYR2K) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const I rows = trans == CUBLAS_OP_N ? n : k;
  if (n < 0 || k < 0 || !fillValid(uplo) ||
      !rankTransValid<T>(trans, op == wire::BlasOp::HER2K) ||
      !alpha || !beta || lda < std::max<I>(1, rows) || ldb < std::max<I>(1, rows) || ldc < std::max<I>(1, n))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0) return CUBLAS_STATUS_SUCCESS;
  bool device = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setUplo(uplo);
    c.setTransA(trans);
    c.setN(n);
    c.setK(k);
    c.setA(addr(A));
    c.setLda(lda);
    c.setB(addr(B));
    c.setLdb(ldb);
    c.setC(addr(C));
    c.setLdc(ldc);
    setScalar(c.initAlpha(), alpha, sizeof(T), device);
    setScalar(c.initBeta(), beta, sizeof(SB), device);
  });
}

// ---- batched factorizations (S, D, C, Z) --------------------------------------------------

// One batched factorization: the arrays of pointers, pivots and infos are device memory.
template <typename T>
cublasStatus_t factorization(const char* name, cublasHandle_t h, wire::BlasOp op, int m, int n, int k,
                             const void* A, int lda, const void* B, int ldb, const int* pivots, int* info,
                             int batch, cublasOperation_t trans = CUBLAS_OP_N) {
  return submit(name, h, [&](wire::BlasCall::Builder c) {
    c.setOp(op);
    c.setAType(typeOf<T>());
    c.setBType(typeOf<T>());
    c.setTransA(trans);
    c.setM(m);
    c.setN(n);
    c.setK(k);
    c.setA(addr(A));
    c.setLda(lda);
    c.setB(addr(B));
    c.setLdb(ldb);
    c.setX(addr(pivots));
    c.setC(addr(info));
    c.setBatchCount(batch);
  });
}

template <typename T>
cublasStatus_t getrfBatched(const char* name, cublasHandle_t h, int n, T* const A[], int lda, int* P, int* info,
                            int batch) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n < 0 || lda < std::max(1, n) || batch < 0 || !info) return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  return factorization<T>(name, h, wire::BlasOp::GETRF_BATCHED, n, n, 0, A, lda, nullptr, 0, P, info, batch);
}

// info is the host's: the position of the first bad argument, negated (0: all valid).
template <typename T>
cublasStatus_t getrsBatched(const char* name, cublasHandle_t h, cublasOperation_t trans, int n, int nrhs,
                            const T* const A[], int lda, const int* P, T* const B[], int ldb, int* info, int batch) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!info) return CUBLAS_STATUS_INVALID_VALUE;
  *info = !opValid(trans) ? -2 : n < 0 ? -3 : nrhs < 0 ? -4 : lda < std::max(1, n) ? -6 : ldb < std::max(1, n) ? -9
          : batch < 0 ? -11 : 0;
  if (*info) return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0 || nrhs == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  return factorization<T>(name, h, wire::BlasOp::GETRS_BATCHED, n, n, nrhs, A, lda, B, ldb, P, nullptr, batch, trans);
}

template <typename T>
cublasStatus_t getriBatched(const char* name, cublasHandle_t h, wire::BlasOp op, int n, const T* const A[], int lda,
                            const int* P, T* const C[], int ldc, int* info, int batch) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n < 0 || lda < std::max(1, n) || ldc < std::max(1, n) || batch < 0 || !info ||
      (op == wire::BlasOp::MATINV_BATCHED && n > 32))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  return factorization<T>(name, h, op, n, n, 0, A, lda, C, ldc, P, info, batch);
}

template <typename T>
cublasStatus_t geqrfBatched(const char* name, cublasHandle_t h, int m, int n, T* const A[], int lda, T* const tau[],
                            int* info, int batch) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!info) return CUBLAS_STATUS_INVALID_VALUE;
  *info = m < 0 ? -2 : n < 0 ? -3 : lda < std::max(1, m) ? -5 : batch < 0 ? -8 : 0;
  if (*info) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  return factorization<T>(name, h, wire::BlasOp::GEQRF_BATCHED, m, n, 0, A, lda, tau, 1, nullptr, nullptr, batch);
}

}  // namespace

extern "C" {

#define API RGPU_BLAS_API
#define RUN RGPU_BLAS_RUN

// geam and dgmm (no _v2 forms: they came after it), trsm, syrk, trmm, symm and syr2k, in S and D.
#define LEVEL3X(P, T, I, SUFFIX, V2)                                                                                   \
  API(cublas##P##geam##SUFFIX, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, I m, I n,                \
      const T* alpha, const T* A, I lda, const T* beta, const T* B, I ldb, T* C, I ldc) {                              \
    RUN(cublas##P##geam,                                                                                               \
        return geam<T, I>("cublas" #P "geam" #SUFFIX, h, ta, tb, m, n, alpha, A, lda, beta, B, ldb, C, ldc));         \
  }                                                                                                                    \
  API(cublas##P##dgmm##SUFFIX, cublasHandle_t h, cublasSideMode_t side, I m, I n, const T* A, I lda, const T* x,       \
      I incx, T* C, I ldc) {                                                                                           \
    RUN(cublas##P##dgmm, return dgmm<T, I>("cublas" #P "dgmm" #SUFFIX, h, side, m, n, A, lda, x, incx, C, ldc));      \
  }                                                                                                                    \
  API(cublas##P##trsm##V2##SUFFIX, cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,                     \
      cublasOperation_t trans, cublasDiagType_t diag, I m, I n, const T* alpha, const T* A, I lda, T* B, I ldb) {      \
    RUN(cublas##P##trsm, return trsm<T, I>("cublas" #P "trsm" #V2 #SUFFIX, h, side, uplo, trans, diag, m, n, alpha, A, \
                                           lda, B, ldb));                                                              \
  }                                                                                                                    \
  API(cublas##P##syrk##V2##SUFFIX, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, I n, I k,         \
      const T* alpha, const T* A, I lda, const T* beta, T* C, I ldc) {                                                 \
    RUN(cublas##P##syrk,                                                                                               \
        return syrk<T, I>("cublas" #P "syrk" #V2 #SUFFIX, h, uplo, trans, n, k, alpha, A, lda, beta, C, ldc));        \
  }                                                                                                                    \
  API(cublas##P##trmm##V2##SUFFIX, cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,                     \
      cublasOperation_t trans, cublasDiagType_t diag, I m, I n, const T* alpha, const T* A, I lda, const T* B, I ldb,  \
      T* C, I ldc) {                                                                                                   \
    RUN(cublas##P##trmm, return trmm<T, I>("cublas" #P "trmm" #V2 #SUFFIX, h, side, uplo, trans, diag, m, n, alpha, A, \
                                           lda, B, ldb, C, ldc));                                                      \
  }                                                                                                                    \
  API(cublas##P##symm##V2##SUFFIX, cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, I m, I n,           \
      const T* alpha, const T* A, I lda, const T* B, I ldb, const T* beta, T* C, I ldc) {                              \
    RUN(cublas##P##symm, return symm<T, I>("cublas" #P "symm" #V2 #SUFFIX, h, side, uplo, m, n, alpha, A, lda, B, ldb, \
                                           beta, C, ldc));                                                             \
  }                                                                                                                    \
  API(cublas##P##syr2k##V2##SUFFIX, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, I n, I k,        \
      const T* alpha, const T* A, I lda, const T* B, I ldb, const T* beta, T* C, I ldc) {                              \
    RUN(cublas##P##syr2k, return syr2k<T, I>("cublas" #P "syr2k" #V2 #SUFFIX, h, uplo, trans, n, k, alpha, A, lda, B,  \
                                             ldb, beta, C, ldc));                                                      \
  }
LEVEL3X(S, float, int, , _v2)

LEVEL3X(D, double, int, , _v2)
LEVEL3X(S, float, int64_t, _64, _v2)
LEVEL3X(D, double, int64_t, _64, _v2)
LEVEL3X(C, cuComplex, int, , _v2)
LEVEL3X(Z, cuDoubleComplex, int, , _v2)
LEVEL3X(C, cuComplex, int64_t, _64, _v2)
LEVEL3X(Z, cuDoubleComplex, int64_t, _64, _v2)
#undef LEVEL3X

// herk (real alpha and beta: R), her2k (real beta), hemm, in C and Z.
#define HERMITIAN(P, T, R, I, SUFFIX)                                                                                  \
  API(cublas##P##herk_v2##SUFFIX, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, I n, I k,          \
      const R* alpha, const T* A, I lda, const R* beta, T* C, I ldc) {                                                 \
    RUN(cublas##P##herk, return syrk<T, I, R>("cublas" #P "herk_v2" #SUFFIX, h, uplo, trans, n, k, alpha, A, lda,      \
                                              beta, C, ldc, wire::BlasOp::HERK));                                      \
  }                                                                                                                    \
  API(cublas##P##her2k_v2##SUFFIX, cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, I n, I k,         \
      const T* alpha, const T* A, I lda, const T* B, I ldb, const R* beta, T* C, I ldc) {                              \
    RUN(cublas##P##her2k, return syr2k<T, I, R>("cublas" #P "her2k_v2" #SUFFIX, h, uplo, trans, n, k, alpha, A, lda,   \
                                                B, ldb, beta, C, ldc, wire::BlasOp::HER2K));                           \
  }                                                                                                                    \
  API(cublas##P##hemm_v2##SUFFIX, cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, I m, I n,            \
      const T* alpha, const T* A, I lda, const T* B, I ldb, const T* beta, T* C, I ldc) {                              \
    RUN(cublas##P##hemm, return symm<T, I>("cublas" #P "hemm_v2" #SUFFIX, h, side, uplo, m, n, alpha, A, lda, B, ldb, \
                                           beta, C, ldc, wire::BlasOp::HEMM));                                         \
  }
HERMITIAN(C, cuComplex, float, int, )
HERMITIAN(Z, cuDoubleComplex, double, int, )
HERMITIAN(C, cuComplex, float, int64_t, _64)
HERMITIAN(Z, cuDoubleComplex, double, int64_t, _64)
#undef HERMITIAN

#define FACTORIZATIONS(P, T)                                                                                         \
  API(cublas##P##getrfBatched, cublasHandle_t h, int n, T* const A[], int lda, int* P_, int* info, int batch) {        \
    RUN(cublas##P##getrfBatched, return getrfBatched<T>("cublas" #P "getrfBatched", h, n, A, lda, P_, info, batch));  \
  }                                                                                                                    \
  API(cublas##P##getrsBatched, cublasHandle_t h, cublasOperation_t trans, int n, int nrhs, const T* const A[],         \
      int lda, const int* P_, T* const B[], int ldb, int* info, int batch) {                                           \
    RUN(cublas##P##getrsBatched, return getrsBatched<T>("cublas" #P "getrsBatched", h, trans, n, nrhs, A, lda, P_, B,  \
                                                        ldb, info, batch));                                            \
  }                                                                                                                    \
  API(cublas##P##getriBatched, cublasHandle_t h, int n, const T* const A[], int lda, const int* P_, T* const C[],      \
      int ldc, int* info, int batch) {                                                                                 \
    RUN(cublas##P##getriBatched, return getriBatched<T>("cublas" #P "getriBatched", h, wire::BlasOp::GETRI_BATCHED,    \
                                                        n, A, lda, P_, C, ldc, info, batch));                          \
  }                                                                                                                    \
  API(cublas##P##matinvBatched, cublasHandle_t h, int n, const T* const A[], int lda, T* const Ainv[], int lda_inv,    \
      int* info, int batch) {                                                                                          \
    RUN(cublas##P##matinvBatched, return getriBatched<T>("cublas" #P "matinvBatched", h,                               \
                                                         wire::BlasOp::MATINV_BATCHED, n, A, lda, nullptr, Ainv,       \
                                                         lda_inv, info, batch));                                       \
  }                                                                                                                    \
  API(cublas##P##geqrfBatched, cublasHandle_t h, int m, int n, T* const A[], int lda, T* const tau[], int* info,       \
      int batch) {                                                                                                     \
    RUN(cublas##P##geqrfBatched, return geqrfBatched<T>("cublas" #P "geqrfBatched", h, m, n, A, lda, tau, info,        \
                                                        batch));                                                       \
  }
FACTORIZATIONS(S, float)
FACTORIZATIONS(D, double)
FACTORIZATIONS(C, cuComplex)
FACTORIZATIONS(Z, cuDoubleComplex)
#undef FACTORIZATIONS

}  // extern "C"
