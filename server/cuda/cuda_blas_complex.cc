// cuBLAS's complex calls beyond gemm through NVIDIA's library (the sim's
// counterpart: server/sim/sim_blas_complex.cc): level 1 and 2, and geam,
// dgmm, trsm, trmm, symm, syrk, syr2k, herk, her2k and hemm in C and Z, by
// their _64 entry points (the index calls' int results by the _v2 ones).
// The session has checked every range; alpha and beta are host bytes or
// device addresses as the call's pointer mode says (herk's both real,
// her2k's beta real).
#include <climits>
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

// Level 1 and 2; `result` is where a reduction writes (host or device memory,
// as the handle's pointer mode says).
template <typename T, typename R>
Status run12(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta, uint64_t result) {
  constexpr bool kZ = std::is_same_v<T, cuDoubleComplex>;
  auto check = [&](cublasStatus_t s) { return BlasApi::check(s, blasOpName(a.op)); };
  T* x = reinterpret_cast<T*>(a.x);
  T* y = reinterpret_cast<T*>(a.y);
  const T* ca = static_cast<const T*>(alpha);
  const T* cb = static_cast<const T*>(beta);
  const auto ta = static_cast<cublasOperation_t>(a.trans_a);
  T* rc = reinterpret_cast<T*>(result);
  R* rr = reinterpret_cast<R*>(result);
#define RGPU_BOTH2(cn, zn, ...)                          \
  if constexpr (kZ) return check(B.zn(__VA_ARGS__));   \
  else return check(B.cn(__VA_ARGS__))
  switch (a.op) {
    case BlasOp::kAxpy: RGPU_BOTH2(cublasCaxpy_v2_64, cublasZaxpy_v2_64, h, a.n, ca, x, a.incx, y, a.incy);
    case BlasOp::kScal:
      if (a.c_type != a.a_type) {
        RGPU_BOTH2(cublasCsscal_v2_64, cublasZdscal_v2_64, h, a.n, static_cast<const R*>(alpha), x, a.incx);
      }
      RGPU_BOTH2(cublasCscal_v2_64, cublasZscal_v2_64, h, a.n, ca, x, a.incx);
    case BlasOp::kCopy: RGPU_BOTH2(cublasCcopy_v2_64, cublasZcopy_v2_64, h, a.n, x, a.incx, y, a.incy);
    case BlasOp::kSwap: RGPU_BOTH2(cublasCswap_v2_64, cublasZswap_v2_64, h, a.n, x, a.incx, y, a.incy);
    case BlasOp::kDot: RGPU_BOTH2(cublasCdotu_v2_64, cublasZdotu_v2_64, h, a.n, x, a.incx, y, a.incy, rc);
    case BlasOp::kDotc: RGPU_BOTH2(cublasCdotc_v2_64, cublasZdotc_v2_64, h, a.n, x, a.incx, y, a.incy, rc);
    case BlasOp::kNrm2: RGPU_BOTH2(cublasScnrm2_v2_64, cublasDznrm2_v2_64, h, a.n, x, a.incx, rr);
    case BlasOp::kAsum: RGPU_BOTH2(cublasScasum_v2_64, cublasDzasum_v2_64, h, a.n, x, a.incx, rr);
    case BlasOp::kIamax: case BlasOp::kIamin: {
      const bool max = a.op == BlasOp::kIamax;
      if (a.result64) {
        auto r = reinterpret_cast<int64_t*>(result);
        if constexpr (kZ) return check((max ? B.cublasIzamax_v2_64 : B.cublasIzamin_v2_64)(h, a.n, x, a.incx, r));
        else return check((max ? B.cublasIcamax_v2_64 : B.cublasIcamin_v2_64)(h, a.n, x, a.incx, r));
      }
      if (a.n > INT_MAX || a.incx > INT_MAX || a.incx < INT_MIN)
        return Status(err::kInvalidValue, std::string(blasOpName(a.op)) + ": n or incx beyond int (use the _64 call)");
      auto r = reinterpret_cast<int*>(result);
      const int n = static_cast<int>(a.n), inc = static_cast<int>(a.incx);
      if constexpr (kZ) return check((max ? B.cublasIzamax_v2 : B.cublasIzamin_v2)(h, n, x, inc, r));
      else return check((max ? B.cublasIcamax_v2 : B.cublasIcamin_v2)(h, n, x, inc, r));
    }
    case BlasOp::kGemv:
      RGPU_BOTH2(cublasCgemv_v2_64, cublasZgemv_v2_64, h, ta, a.m, a.n, ca, reinterpret_cast<T*>(a.a), a.lda, x, a.incx,
                 cb, y, a.incy);
    case BlasOp::kGer:
      RGPU_BOTH2(cublasCgeru_v2_64, cublasZgeru_v2_64, h, a.m, a.n, ca, x, a.incx, y, a.incy, reinterpret_cast<T*>(a.a),
                 a.lda);
    case BlasOp::kGerc:
      RGPU_BOTH2(cublasCgerc_v2_64, cublasZgerc_v2_64, h, a.m, a.n, ca, x, a.incx, y, a.incy, reinterpret_cast<T*>(a.a),
                 a.lda);
    default: return Status(err::kNotSupported, std::string(blasOpName(a.op)) + " of a complex type");
  }
#undef RGPU_BOTH2
}

// The batched factorizations (NVIDIA's 32-bit calls; the host info of getrs
// and geqrf is the arguments', checked by the client).
template <typename T>
Status factorization(BlasApi& B, cublasHandle_t h, const BlasArgs& a) {
  const char* name = blasOpName(a.op);
  auto check = [&](cublasStatus_t s) { return BlasApi::check(s, name); };
  for (int64_t v : {a.m, a.n, a.k, a.lda, a.ldb, a.batch})
    if (v > INT_MAX) return Status(err::kInvalidValue, std::string(name) + ": a size beyond int");
  const int m = static_cast<int>(a.m), n = static_cast<int>(a.n), k = static_cast<int>(a.k);
  const int lda = static_cast<int>(a.lda), ldb = static_cast<int>(a.ldb), batch = static_cast<int>(a.batch);
  int* piv = reinterpret_cast<int*>(a.x);
  int* info = reinterpret_cast<int*>(a.c);
  int host_info = 0;
  auto A = reinterpret_cast<T* const*>(a.a);
  auto Bm = reinterpret_cast<T* const*>(a.b);
  const auto ta = static_cast<cublasOperation_t>(a.trans_a);
#define RGPU_CZ(name, ...)                                                                    \
  if constexpr (std::is_same_v<T, float>) RGPU_TRY(check(B.cublasS##name(__VA_ARGS__)));          \
  else if constexpr (std::is_same_v<T, double>) RGPU_TRY(check(B.cublasD##name(__VA_ARGS__)));    \
  else if constexpr (std::is_same_v<T, cuComplex>) RGPU_TRY(check(B.cublasC##name(__VA_ARGS__))); \
  else RGPU_TRY(check(B.cublasZ##name(__VA_ARGS__)))
  switch (a.op) {
    case BlasOp::kGetrfBatched: RGPU_CZ(getrfBatched, h, n, A, lda, piv, info, batch); break;
    case BlasOp::kGetrsBatched: RGPU_CZ(getrsBatched, h, ta, n, k, A, lda, piv, Bm, ldb, &host_info, batch); break;
    case BlasOp::kGetriBatched: RGPU_CZ(getriBatched, h, n, A, lda, piv, Bm, ldb, info, batch); break;
    case BlasOp::kMatinvBatched: RGPU_CZ(matinvBatched, h, n, A, lda, Bm, ldb, info, batch); break;
    default: RGPU_CZ(geqrfBatched, h, m, n, A, lda, Bm, &host_info, batch); break;
  }
#undef RGPU_CZ
  if (host_info) return Status(err::kInvalidValue, std::string(name) + ": argument " + std::to_string(-host_info));
  return Status::ok();
}

}  // namespace

Status runFactorization(BlasApi& B, cublasHandle_t h, const BlasArgs& a) {
  switch (a.a_type) {
    case kR32F: return factorization<float>(B, h, a);
    case kR64F: return factorization<double>(B, h, a);
    case kC32F: return factorization<cuComplex>(B, h, a);
    default: return factorization<cuDoubleComplex>(B, h, a);
  }
}

Status runComplexBlas12(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta,
                        uint64_t result) {
  return a.a_type == kC64F ? run12<cuDoubleComplex, double>(B, h, a, alpha, beta, result)
                           : run12<cuComplex, float>(B, h, a, alpha, beta, result);
}

Status runComplexBlas(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta) {
  return a.a_type == kC64F ? run<cuDoubleComplex, double>(B, h, a, alpha, beta)
                           : run<cuComplex, float>(B, h, a, alpha, beta);
}

}  // namespace rgpu::server::cuda
