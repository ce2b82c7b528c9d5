// cuBLAS's complex level 3 beyond gemm through NVIDIA's library (the sim's
// counterpart: server/sim/sim_blas_complex.cc): geam, dgmm, trsm, trmm, symm,
// syrk, syr2k, herk, her2k and hemm in C and Z, by their _64 entry points.
// The session has checked every range; alpha and beta are host bytes or
// device addresses as the call's pointer mode says (herk's both real,
// her2k's beta real).
#include <type_traits>

#include "common/blas_types.h"
#include "server/cuda/cuda_blas_complex.h"

namespace rgpu::server::cuda {
namespace {

using namespace common::blas;

template <typename T, typename R>
Status run(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta) {
  constexpr bool kZ = std::is_same_v<T, cuDoubleComplex>;
  auto check = [&](cublasStatus_t s) { return BlasApi::check(s, blasOpName(a.op)); };
  auto P = [](uint64_t p) { return reinterpret_cast<T*>(p); };
  const T* ca = static_cast<const T*>(alpha);
  const T* cb = static_cast<const T*>(beta);
  const R* ra = static_cast<const R*>(alpha);
  const R* rb = static_cast<const R*>(beta);
  const auto ta = static_cast<cublasOperation_t>(a.trans_a), tb = static_cast<cublasOperation_t>(a.trans_b);
  const auto side = static_cast<cublasSideMode_t>(a.side);
  const auto uplo = static_cast<cublasFillMode_t>(a.uplo);
  const auto diag = static_cast<cublasDiagType_t>(a.diag);
#define RGPU_BOTH(name, ...)                                  \
  if constexpr (kZ) return check(B.cublasZ##name(__VA_ARGS__)); \
  else return check(B.cublasC##name(__VA_ARGS__))
  switch (a.op) {
    case BlasOp::kGeam: RGPU_BOTH(geam_64, h, ta, tb, a.m, a.n, ca, P(a.a), a.lda, cb, P(a.b), a.ldb, P(a.c), a.ldc);
    case BlasOp::kDgmm: RGPU_BOTH(dgmm_64, h, side, a.m, a.n, P(a.a), a.lda, P(a.x), a.incx, P(a.c), a.ldc);
    case BlasOp::kTrsm: RGPU_BOTH(trsm_v2_64, h, side, uplo, ta, diag, a.m, a.n, ca, P(a.a), a.lda, P(a.b), a.ldb);
    case BlasOp::kTrmm:
      RGPU_BOTH(trmm_v2_64, h, side, uplo, ta, diag, a.m, a.n, ca, P(a.a), a.lda, P(a.b), a.ldb, P(a.c), a.ldc);
    case BlasOp::kSymm:
      RGPU_BOTH(symm_v2_64, h, side, uplo, a.m, a.n, ca, P(a.a), a.lda, P(a.b), a.ldb, cb, P(a.c), a.ldc);
    case BlasOp::kHemm:
      RGPU_BOTH(hemm_v2_64, h, side, uplo, a.m, a.n, ca, P(a.a), a.lda, P(a.b), a.ldb, cb, P(a.c), a.ldc);
    case BlasOp::kSyrk: RGPU_BOTH(syrk_v2_64, h, uplo, ta, a.n, a.k, ca, P(a.a), a.lda, cb, P(a.c), a.ldc);
    case BlasOp::kHerk: RGPU_BOTH(herk_v2_64, h, uplo, ta, a.n, a.k, ra, P(a.a), a.lda, rb, P(a.c), a.ldc);
    case BlasOp::kSyr2k:
      RGPU_BOTH(syr2k_v2_64, h, uplo, ta, a.n, a.k, ca, P(a.a), a.lda, P(a.b), a.ldb, cb, P(a.c), a.ldc);
    case BlasOp::kHer2k:
      RGPU_BOTH(her2k_v2_64, h, uplo, ta, a.n, a.k, ca, P(a.a), a.lda, P(a.b), a.ldb, rb, P(a.c), a.ldc);
    default: return Status(err::kNotSupported, std::string(blasOpName(a.op)) + " of a complex type");
  }
#undef RGPU_BOTH
}

}  // namespace

Status runComplexBlas(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta) {
  return a.a_type == kC64F ? run<cuDoubleComplex, double>(B, h, a, alpha, beta)
                           : run<cuComplex, float>(B, h, a, alpha, beta);
}

}  // namespace rgpu::server::cuda
