// cuBLAS's complex calls beyond gemm on the CPU (server/sim/sim_blas.h):
// level 1 (axpy, scal with a complex or real alpha, copy, swap, dotu, dotc,
// nrm2, asum, iamax, iamin), level 2 (gemv, geru, gerc), and geam, dgmm,
// trsm, trmm, symm, syrk, syr2k, herk, her2k and hemm in C and Z,
// with OpenBLAS's complex routines where BLAS has one and loops in
// std::complex where cuBLAS goes beyond BLAS (geam, dgmm, trmm into C).
// Scalars are read when the call runs (device pointer mode: from device
// memory in stream order); herk's alpha and beta and her2k's beta are real.
#include <cblas.h>

#include <algorithm>
#include <complex>
#include <type_traits>
#include <cstring>
#include <vector>

#include "common/blas_types.h"
#include "server/sim/sim_blas.h"

namespace rgpu::server::simblas {
namespace {

using namespace common::blas;

uint8_t* mem(uint64_t p) { return reinterpret_cast<uint8_t*>(p); }
blasint ld(int64_t v) { return static_cast<blasint>(std::max<int64_t>(v, 1)); }
CBLAS_TRANSPOSE op(int32_t t) { return t == kOpN ? CblasNoTrans : t == kOpT ? CblasTrans : CblasConjTrans; }

template <typename R>
struct Complex {
  using C = std::complex<R>;
  static C scalar(const BlasScalar& s) {
    C v;
    std::memcpy(&v, s.device ? mem(s.ptr) : s.bytes, sizeof v);
    return v;
  }
  static R real(const BlasScalar& s) {
    R v;
    std::memcpy(&v, s.device ? mem(s.ptr) : s.bytes, sizeof v);
    return v;
  }
  static C* at(uint64_t p, int64_t i, int64_t j, int64_t ldp) { return reinterpret_cast<C*>(mem(p)) + i + j * ldp; }
  static C get(uint64_t p, int32_t t, int64_t i, int64_t j, int64_t ldp) {
    if (t == kOpN) return *at(p, i, j, ldp);
    const C x = *at(p, j, i, ldp);
    return t == kOpC ? std::conj(x) : x;
  }
};

// OpenBLAS's C or Z routine for R = float or double.
#define RGPU_PICK(R, name, ...)                                          \
  do {                                                                   \
    if constexpr (std::is_same_v<R, float>) cblas_c##name(__VA_ARGS__); \
    else cblas_z##name(__VA_ARGS__);                                     \
  } while (0)

template <typename R>
Status run(const BlasArgs& a) {
  using X = Complex<R>;
  using C = typename X::C;
  const auto m = static_cast<blasint>(a.m), n = static_cast<blasint>(a.n), k = static_cast<blasint>(a.k);
  const auto side = a.side == 0 ? CblasLeft : CblasRight;
  const auto uplo = a.uplo == 0 ? CblasLower : CblasUpper;
  const auto diag = a.diag == 0 ? CblasNonUnit : CblasUnit;
  void* A = mem(a.a);
  void* B = mem(a.b);
  void* Cm = mem(a.c);
  switch (a.op) {
    case BlasOp::kGeam: {  // computed whole before it is stored: C may be A or B
      const C alpha = X::scalar(a.alpha), beta = X::scalar(a.beta);
      std::vector<C> c(static_cast<size_t>(a.m * a.n));
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) {
          const C y = !a.b || beta == C(0) ? C(0) : beta * X::get(a.b, a.trans_b, i, j, a.ldb);
          c[static_cast<size_t>(i + j * a.m)] = alpha * X::get(a.a, a.trans_a, i, j, a.lda) + y;
        }
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) *X::at(a.c, i, j, a.ldc) = c[static_cast<size_t>(i + j * a.m)];
      return Status::ok();
    }
    case BlasOp::kDgmm: {  // element by element: C may be A
      const int64_t len = a.side == 0 ? a.m : a.n, start = a.incx < 0 ? (len - 1) * -a.incx : 0;
      const C* x = reinterpret_cast<const C*>(mem(a.x));
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i)
          *X::at(a.c, i, j, a.ldc) = *X::at(a.a, i, j, a.lda) * x[start + (a.side == 0 ? i : j) * a.incx];
      return Status::ok();
    }
    case BlasOp::kTrsm: {
      if (m == 0 || n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha);
      RGPU_PICK(R, trsm, CblasColMajor, side, uplo, op(a.trans_a), diag, m, n, &alpha, A, ld(a.lda), B, ld(a.ldb));
      return Status::ok();
    }
    case BlasOp::kTrmm: {  // on a packed copy of B (C may be B), then stored into C
      if (m == 0 || n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha);
      std::vector<C> b(static_cast<size_t>(a.m * a.n));
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) b[static_cast<size_t>(i + j * a.m)] = *X::at(a.b, i, j, a.ldb);
      RGPU_PICK(R, trmm, CblasColMajor, side, uplo, op(a.trans_a), diag, m, n, &alpha, A, ld(a.lda), b.data(), m);
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) *X::at(a.c, i, j, a.ldc) = b[static_cast<size_t>(i + j * a.m)];
      return Status::ok();
    }
    case BlasOp::kSymm: case BlasOp::kHemm: {
      if (m == 0 || n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha), beta = X::scalar(a.beta);
      if (a.op == BlasOp::kSymm)
        RGPU_PICK(R, symm, CblasColMajor, side, uplo, m, n, &alpha, A, ld(a.lda), B, ld(a.ldb), &beta, Cm, ld(a.ldc));
      else
        RGPU_PICK(R, hemm, CblasColMajor, side, uplo, m, n, &alpha, A, ld(a.lda), B, ld(a.ldb), &beta, Cm, ld(a.ldc));
      return Status::ok();
    }
    case BlasOp::kSyrk: {
      if (n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha), beta = X::scalar(a.beta);
      RGPU_PICK(R, syrk, CblasColMajor, uplo, op(a.trans_a), n, k, &alpha, A, ld(a.lda), &beta, Cm, ld(a.ldc));
      return Status::ok();
    }
    case BlasOp::kHerk: {
      if (n == 0) return Status::ok();
      const R alpha = X::real(a.alpha), beta = X::real(a.beta);
      RGPU_PICK(R, herk, CblasColMajor, uplo, op(a.trans_a), n, k, alpha, A, ld(a.lda), beta, Cm, ld(a.ldc));
      return Status::ok();
    }
    case BlasOp::kSyr2k: {
      if (n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha), beta = X::scalar(a.beta);
      RGPU_PICK(R, syr2k, CblasColMajor, uplo, op(a.trans_a), n, k, &alpha, A, ld(a.lda), B, ld(a.ldb), &beta, Cm,
                          ld(a.ldc));
      return Status::ok();
    }
    case BlasOp::kHer2k: {
      if (n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha);
      const R beta = X::real(a.beta);
      RGPU_PICK(R, her2k, CblasColMajor, uplo, op(a.trans_a), n, k, &alpha, A, ld(a.lda), B, ld(a.ldb), beta, Cm,
                          ld(a.ldc));
      return Status::ok();
    }
    default: return Status(err::kUnknown, "not a complex level-3 call");
  }
}

template <typename R>
Status run12(const BlasArgs& a, std::string* result) {
  using X = Complex<R>;
  using C = typename X::C;
  const auto n = static_cast<blasint>(a.n), ix = static_cast<blasint>(a.incx), iy = static_cast<blasint>(a.incy);
  void* x = mem(a.x);
  void* y = mem(a.y);
  C dot = 0;
  R real = 0;
  int64_t index = 0;
  switch (a.op) {
    case BlasOp::kAxpy: {
      const C alpha = X::scalar(a.alpha);
      RGPU_PICK(R, axpy, n, &alpha, x, ix, y, iy);
      return Status::ok();
    }
    case BlasOp::kScal:
      if (a.c_type == a.a_type) {
        const C alpha = X::scalar(a.alpha);
        RGPU_PICK(R, scal, n, &alpha, x, ix);
      } else if constexpr (std::is_same_v<R, float>) {
        cblas_csscal(n, X::real(a.alpha), x, ix);
      } else {
        cblas_zdscal(n, X::real(a.alpha), x, ix);
      }
      return Status::ok();
    case BlasOp::kCopy: RGPU_PICK(R, copy, n, x, ix, y, iy); return Status::ok();
    case BlasOp::kSwap: RGPU_PICK(R, swap, n, x, ix, y, iy); return Status::ok();
    case BlasOp::kDot: RGPU_PICK(R, dotu_sub, n, x, ix, y, iy, &dot); break;
    case BlasOp::kDotc: RGPU_PICK(R, dotc_sub, n, x, ix, y, iy, &dot); break;
    case BlasOp::kNrm2: case BlasOp::kAsum:
      if (n > 0 && ix > 0) {
        if constexpr (std::is_same_v<R, float>) real = a.op == BlasOp::kNrm2 ? cblas_scnrm2(n, x, ix) : cblas_scasum(n, x, ix);
        else real = a.op == BlasOp::kNrm2 ? cblas_dznrm2(n, x, ix) : cblas_dzasum(n, x, ix);
      }
      break;
    case BlasOp::kIamax: case BlasOp::kIamin: {  // 1-based, 0 for an empty vector (BLAS); |re| + |im|
      if (n <= 0 || ix <= 0) break;
      const bool max = a.op == BlasOp::kIamax;
      if constexpr (std::is_same_v<R, float>) index = 1 + static_cast<int64_t>(max ? cblas_icamax(n, x, ix) : cblas_icamin(n, x, ix));
      else index = 1 + static_cast<int64_t>(max ? cblas_izamax(n, x, ix) : cblas_izamin(n, x, ix));
      break;
    }
    case BlasOp::kGemv: {
      if (a.m == 0 || a.n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha), beta = X::scalar(a.beta);
      RGPU_PICK(R, gemv, CblasColMajor, op(a.trans_a), static_cast<blasint>(a.m), n, &alpha, mem(a.a), ld(a.lda), x, ix,
                &beta, y, iy);
      return Status::ok();
    }
    case BlasOp::kGer: case BlasOp::kGerc: {
      if (a.m == 0 || a.n == 0) return Status::ok();
      const C alpha = X::scalar(a.alpha);
      if (a.op == BlasOp::kGer)
        RGPU_PICK(R, geru, CblasColMajor, static_cast<blasint>(a.m), n, &alpha, x, ix, y, iy, mem(a.a), ld(a.lda));
      else
        RGPU_PICK(R, gerc, CblasColMajor, static_cast<blasint>(a.m), n, &alpha, x, ix, y, iy, mem(a.a), ld(a.lda));
      return Status::ok();
    }
    default: return Status(err::kUnknown, "not a complex level-1 or level-2 call");
  }
  // A reduction: into device memory, or back to the client.
  const size_t bytes = blasResultBytes(a);
  uint8_t out[16];
  if (a.op == BlasOp::kIamax || a.op == BlasOp::kIamin) {
    if (a.result64) std::memcpy(out, &index, 8);
    else {
      const auto i32 = static_cast<int32_t>(index);
      std::memcpy(out, &i32, 4);
    }
  } else if (a.op == BlasOp::kDot || a.op == BlasOp::kDotc) {
    std::memcpy(out, &dot, sizeof dot);
  } else {
    std::memcpy(out, &real, sizeof real);
  }
  if (a.result) std::memcpy(mem(a.result), out, bytes);
  else if (result) result->assign(reinterpret_cast<const char*>(out), bytes);
  return Status::ok();
}

Status limits(const BlasArgs& a) {
  for (int64_t v : {a.m, a.n, a.k, a.lda, a.ldb, a.ldc, a.incx, a.incy})
    if (v < -kMaxSimBlasDim || v > kMaxSimBlasDim)
      return Status(err::kNotSupported, std::string(blasOpName(a.op)) + ": a size or increment beyond " +
                                            std::to_string(kMaxSimBlasDim) + " (kMaxSimBlasDim, the sim backend's BLAS limit)");
  return Status::ok();
}

}  // namespace

Status runComplexLevel12(const BlasArgs& a, std::string* result) {
  RGPU_TRY(limits(a));
  return a.a_type == kC64F ? run12<double>(a, result) : run12<float>(a, result);
}

Status runComplexLevel3(const BlasArgs& a) {
  RGPU_TRY(limits(a));
  return a.a_type == kC64F ? run<double>(a) : run<float>(a);
}

}  // namespace rgpu::server::simblas
