// cuBLAS's trmv, trsv, symv and hemv on the CPU (server/sim/sim_blas.h), in
// S, D, C and Z (hemv: C and Z) with OpenBLAS. Scalars are read when the
// call runs (device pointer mode: from device memory in stream order).
#include <cblas.h>

#include <algorithm>
#include <complex>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/blas_types.h"
#include "server/sim/sim_blas.h"

namespace rgpu::server::simblas {
namespace {

using namespace common::blas;

uint8_t* mem(uint64_t p) { return reinterpret_cast<uint8_t*>(p); }
blasint ld(int64_t v) { return static_cast<blasint>(std::max<int64_t>(v, 1)); }

template <typename T>
T scalarOf(const BlasScalar& s) {
  T v;
  std::memcpy(&v, s.device ? mem(s.ptr) : s.bytes, sizeof v);
  return v;
}

// OpenBLAS's routine of T's precision: s, d, c or z.
#define RGPU_L2(T, name, ...)                                                         \
  do {                                                                                \
    if constexpr (std::is_same_v<T, float>) cblas_s##name(__VA_ARGS__);               \
    else if constexpr (std::is_same_v<T, double>) cblas_d##name(__VA_ARGS__);         \
    else if constexpr (std::is_same_v<T, std::complex<float>>) cblas_c##name(__VA_ARGS__); \
    else cblas_z##name(__VA_ARGS__);                                                  \
  } while (0)

template <typename T>
Status run(const BlasArgs& a) {
  constexpr bool kComplex = !std::is_floating_point_v<T>;
  const auto n = static_cast<blasint>(a.n), ix = static_cast<blasint>(a.incx), iy = static_cast<blasint>(a.incy);
  if (n == 0) return Status::ok();
  const auto uplo = a.uplo == 0 ? CblasLower : CblasUpper;
  const auto diag = a.diag == 0 ? CblasNonUnit : CblasUnit;
  const auto trans = a.trans_a == kOpN ? CblasNoTrans : a.trans_a == kOpT || !kComplex ? CblasTrans : CblasConjTrans;
  T* A = reinterpret_cast<T*>(mem(a.a));
  T* x = reinterpret_cast<T*>(mem(a.x));
  T* y = reinterpret_cast<T*>(mem(a.y));
  switch (a.op) {
    case BlasOp::kTrmv: RGPU_L2(T, trmv, CblasColMajor, uplo, trans, diag, n, A, ld(a.lda), x, ix); break;
    case BlasOp::kTrsv: RGPU_L2(T, trsv, CblasColMajor, uplo, trans, diag, n, A, ld(a.lda), x, ix); break;
    case BlasOp::kSymv: case BlasOp::kHemv: {
      const T alpha = scalarOf<T>(a.alpha), beta = scalarOf<T>(a.beta);
      if constexpr (kComplex) {
        if (a.op == BlasOp::kHemv) {
          if constexpr (std::is_same_v<T, std::complex<float>>)
            cblas_chemv(CblasColMajor, uplo, n, &alpha, A, ld(a.lda), x, ix, &beta, y, iy);
          else
            cblas_zhemv(CblasColMajor, uplo, n, &alpha, A, ld(a.lda), x, ix, &beta, y, iy);
        } else {
          // (BLAS has no complex symv: y = alpha A x + beta y with A symmetric, one triangle read.)
          const int64_t sx = ix < 0 ? (a.n - 1) * -a.incx : 0, sy = iy < 0 ? (a.n - 1) * -a.incy : 0;
          std::vector<T> out(static_cast<size_t>(a.n), T(0));
          for (int64_t i = 0; i < a.n; ++i) {
            T s = 0;
            for (int64_t j = 0; j < a.n; ++j) {
              const bool in = a.uplo == 0 ? i >= j : i <= j;
              s += (in ? A[i + j * a.lda] : A[j + i * a.lda]) * x[sx + j * a.incx];
            }
            out[static_cast<size_t>(i)] = alpha * s + (beta == T(0) ? T(0) : beta * y[sy + i * a.incy]);
          }
          for (int64_t i = 0; i < a.n; ++i) y[sy + i * a.incy] = out[static_cast<size_t>(i)];
        }
      } else {
        RGPU_L2(T, symv, CblasColMajor, uplo, n, alpha, A, ld(a.lda), x, ix, beta, y, iy);
      }
      break;
    }
    default: return Status(err::kUnknown, "not a trmv, trsv, symv or hemv");
  }
  return Status::ok();
}

}  // namespace

Status runLevel2More(const BlasArgs& a) {
  for (int64_t v : {a.n, a.lda, a.incx, a.incy})
    if (v < -kMaxSimBlasDim || v > kMaxSimBlasDim)
      return Status(err::kNotSupported, std::string(blasOpName(a.op)) + ": a size or increment beyond " +
                                            std::to_string(kMaxSimBlasDim) + " (kMaxSimBlasDim, the sim backend's BLAS limit)");
  switch (a.a_type) {
    case kR32F: return run<float>(a);
    case kR64F: return run<double>(a);
    case kC32F: return run<std::complex<float>>(a);
    default: return run<std::complex<double>>(a);
  }
}

}  // namespace rgpu::server::simblas
