// cuBLAS's trmv, trsv, symv (S, D, C, Z) and hemv (C, Z) through NVIDIA's
// library, by their _64 entry points (the sim's: server/sim/sim_blas_level2.cc).
#include <type_traits>

#include "common/blas_types.h"
#include "server/cuda/cuda_blas_complex.h"

namespace rgpu::server::cuda {
namespace {

using namespace common::blas;

template <typename T>
Status run(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta) {
  auto check = [&](cublasStatus_t s) { return BlasApi::check(s, blasOpName(a.op)); };
  const auto uplo = static_cast<cublasFillMode_t>(a.uplo);
  const auto ta = static_cast<cublasOperation_t>(a.trans_a);
  const auto diag = static_cast<cublasDiagType_t>(a.diag);
  T* A = reinterpret_cast<T*>(a.a);
  T* x = reinterpret_cast<T*>(a.x);
  T* y = reinterpret_cast<T*>(a.y);
  const T* al = static_cast<const T*>(alpha);
  const T* be = static_cast<const T*>(beta);
#define RGPU_SDCZ(name, ...)                                                                  \
  if constexpr (std::is_same_v<T, float>) return check(B.cublasS##name(__VA_ARGS__));         \
  else if constexpr (std::is_same_v<T, double>) return check(B.cublasD##name(__VA_ARGS__));   \
  else if constexpr (std::is_same_v<T, cuComplex>) return check(B.cublasC##name(__VA_ARGS__)); \
  else return check(B.cublasZ##name(__VA_ARGS__))
  switch (a.op) {
    case BlasOp::kTrmv: RGPU_SDCZ(trmv_v2_64, h, uplo, ta, diag, a.n, A, a.lda, x, a.incx);
    case BlasOp::kTrsv: RGPU_SDCZ(trsv_v2_64, h, uplo, ta, diag, a.n, A, a.lda, x, a.incx);
    case BlasOp::kSymv: RGPU_SDCZ(symv_v2_64, h, uplo, a.n, al, A, a.lda, x, a.incx, be, y, a.incy);
    case BlasOp::kHemv:
      if constexpr (std::is_same_v<T, cuComplex>)
        return check(B.cublasChemv_v2_64(h, uplo, a.n, al, A, a.lda, x, a.incx, be, y, a.incy));
      else if constexpr (std::is_same_v<T, cuDoubleComplex>)
        return check(B.cublasZhemv_v2_64(h, uplo, a.n, al, A, a.lda, x, a.incx, be, y, a.incy));
      else return Status(err::kNotSupported, "hemv of a real type");
    default: return Status(err::kNotSupported, std::string(blasOpName(a.op)) + ": not a trmv, trsv, symv or hemv");
  }
#undef RGPU_SDCZ
}

}  // namespace

Status runLevel2More(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta) {
  switch (a.a_type) {
    case kR32F: return run<float>(B, h, a, alpha, beta);
    case kR64F: return run<double>(B, h, a, alpha, beta);
    case kC32F: return run<cuComplex>(B, h, a, alpha, beta);
    default: return run<cuDoubleComplex>(B, h, a, alpha, beta);
  }
}

}  // namespace rgpu::server::cuda
