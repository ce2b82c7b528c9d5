#include "server/sim/sim_blas.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/blas_types.h"
#include "common/half.h"

namespace rgpu::server::simblas {

using namespace common::blas;

namespace {

uint8_t* mem(uint64_t p) { return reinterpret_cast<uint8_t*>(p); }

double loadAs(const uint8_t* base, int32_t type, uint64_t i) {
  switch (type) {
    case kR32F: {
      float f;
      std::memcpy(&f, base + 4 * i, 4);
      return f;
    }
    case kR64F: {
      double d;
      std::memcpy(&d, base + 8 * i, 8);
      return d;
    }
    default: {
      uint16_t h;
      std::memcpy(&h, base + 2 * i, 2);
      return type == kR16F ? common::halfToFloat(h) : common::bf16ToFloat(h);
    }
  }
}

void storeAs(uint8_t* base, int32_t type, uint64_t i, double v) {
  switch (type) {
    case kR32F: {
      float f = static_cast<float>(v);
      std::memcpy(base + 4 * i, &f, 4);
      break;
    }
    case kR64F: std::memcpy(base + 8 * i, &v, 8); break;
    default: {
      uint16_t h = type == kR16F ? common::floatToHalf(static_cast<float>(v)) : common::floatToBf16(static_cast<float>(v));
      std::memcpy(base + 2 * i, &h, 2);
    }
  }
}

// alpha and beta: read when the call runs (device pointer mode reads device
// memory in stream order, as on a GPU).
double scalar(const BlasScalar& s, int32_t type) {
  return loadAs(s.device ? reinterpret_cast<const uint8_t*>(s.ptr) : s.bytes, type, 0);
}

bool fits(int64_t v) { return v >= -kMaxSimBlasDim && v <= kMaxSimBlasDim; }
Status tooLarge(const char* call) {
  return Status(err::kNotSupported, std::string(call) + ": a size or increment beyond " + std::to_string(kMaxSimBlasDim) +
                                        " (kMaxSimBlasDim, the sim backend's BLAS limit)");
}
CBLAS_TRANSPOSE trans(int32_t op) { return op == kOpN ? CblasNoTrans : CblasTrans; }
blasint ld(int64_t v) { return static_cast<blasint>(std::max<int64_t>(v, 1)); }

Status level1(const BlasArgs& a, std::string* result) {
  if (!fits(a.n) || !fits(a.incx) || !fits(a.incy)) return tooLarge(blasOpName(a.op));
  auto n = static_cast<blasint>(a.n), ix = static_cast<blasint>(a.incx), iy = static_cast<blasint>(a.incy);
  bool f = a.a_type == kR32F;
  auto* xs = reinterpret_cast<float*>(a.x);
  auto* ys = reinterpret_cast<float*>(a.y);
  auto* xd = reinterpret_cast<double*>(a.x);
  auto* yd = reinterpret_cast<double*>(a.y);
  double value = 0;
  int64_t index = 0;
  switch (a.op) {
    case BlasOp::kAxpy:
      if (f) cblas_saxpy(n, static_cast<float>(scalar(a.alpha, kR32F)), xs, ix, ys, iy);
      else cblas_daxpy(n, scalar(a.alpha, kR64F), xd, ix, yd, iy);
      break;
    case BlasOp::kScal:
      if (f) cblas_sscal(n, static_cast<float>(scalar(a.alpha, kR32F)), xs, ix);
      else cblas_dscal(n, scalar(a.alpha, kR64F), xd, ix);
      break;
    case BlasOp::kCopy:
      if (f) cblas_scopy(n, xs, ix, ys, iy);
      else cblas_dcopy(n, xd, ix, yd, iy);
      break;
    case BlasOp::kSwap:
      if (f) cblas_sswap(n, xs, ix, ys, iy);
      else cblas_dswap(n, xd, ix, yd, iy);
      break;
    case BlasOp::kDot: value = f ? cblas_sdot(n, xs, ix, ys, iy) : cblas_ddot(n, xd, ix, yd, iy); break;
    case BlasOp::kNrm2: value = n <= 0 || ix <= 0 ? 0 : f ? cblas_snrm2(n, xs, ix) : cblas_dnrm2(n, xd, ix); break;
    case BlasOp::kAsum: value = n <= 0 || ix <= 0 ? 0 : f ? cblas_sasum(n, xs, ix) : cblas_dasum(n, xd, ix); break;
    case BlasOp::kIamax:  // 1-based, 0 for an empty vector (BLAS)
      index = n <= 0 || ix <= 0 ? 0 : 1 + static_cast<int64_t>(f ? cblas_isamax(n, xs, ix) : cblas_idamax(n, xd, ix));
      break;
    case BlasOp::kIamin:
      index = n <= 0 || ix <= 0 ? 0 : 1 + static_cast<int64_t>(f ? cblas_isamin(n, xs, ix) : cblas_idamin(n, xd, ix));
      break;
    default: return Status(err::kUnknown, "not a level-1 call");
  }
  size_t bytes = blasResultBytes(a);
  if (!bytes) return Status::ok();
  uint8_t out[8];
  if (a.op == BlasOp::kIamax || a.op == BlasOp::kIamin) {
    if (a.result64) std::memcpy(out, &index, 8);
    else {
      auto i32 = static_cast<int32_t>(index);
      std::memcpy(out, &i32, 4);
    }
  } else {
    storeAs(out, a.a_type, 0, value);
  }
  if (a.result) std::memcpy(mem(a.result), out, bytes);
  else if (result) result->assign(reinterpret_cast<const char*>(out), bytes);
  return Status::ok();
}

Status level2(const BlasArgs& a) {
  if (!fits(a.m) || !fits(a.n) || !fits(a.lda) || !fits(a.incx) || !fits(a.incy)) return tooLarge(blasOpName(a.op));
  if (a.m == 0 || a.n == 0) return Status::ok();  // BLAS's quick return
  auto m = static_cast<blasint>(a.m), n = static_cast<blasint>(a.n);
  auto ix = static_cast<blasint>(a.incx), iy = static_cast<blasint>(a.incy);
  bool f = a.a_type == kR32F;
  if (a.op == BlasOp::kGemv) {
    if (f)
      cblas_sgemv(CblasColMajor, trans(a.trans_a), m, n, static_cast<float>(scalar(a.alpha, kR32F)),
                  reinterpret_cast<float*>(a.a), ld(a.lda), reinterpret_cast<float*>(a.x), ix,
                  static_cast<float>(scalar(a.beta, kR32F)), reinterpret_cast<float*>(a.y), iy);
    else
      cblas_dgemv(CblasColMajor, trans(a.trans_a), m, n, scalar(a.alpha, kR64F), reinterpret_cast<double*>(a.a),
                  ld(a.lda), reinterpret_cast<double*>(a.x), ix, scalar(a.beta, kR64F), reinterpret_cast<double*>(a.y), iy);
  } else {
    if (f)
      cblas_sger(CblasColMajor, m, n, static_cast<float>(scalar(a.alpha, kR32F)), reinterpret_cast<float*>(a.x), ix,
                 reinterpret_cast<float*>(a.y), iy, reinterpret_cast<float*>(a.a), ld(a.lda));
    else
      cblas_dger(CblasColMajor, m, n, scalar(a.alpha, kR64F), reinterpret_cast<double*>(a.x), ix,
                 reinterpret_cast<double*>(a.y), iy, reinterpret_cast<double*>(a.a), ld(a.lda));
  }
  return Status::ok();
}

// Converts a stored rows x cols column-major matrix (leading dimension ld) of
// `type` into a dense float one.
void toFloat(std::vector<float>& out, uint64_t p, int32_t type, int64_t rows, int64_t cols, int64_t ldp) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t i = 0; i < rows; ++i)
      out[static_cast<size_t>(i + j * rows)] = static_cast<float>(loadAs(mem(p), type, static_cast<uint64_t>(i + j * ldp)));
}

// C = alpha op(A) op(B) + beta C for one matrix of a (possibly batched) gemm.
void gemmOne(const BlasArgs& a, uint64_t A, uint64_t B, uint64_t C, double alpha, double beta) {
  auto m = static_cast<blasint>(a.m), n = static_cast<blasint>(a.n), k = static_cast<blasint>(a.k);
  if (m == 0 || n == 0) return;
  if (a.a_type == kR64F) {
    cblas_dgemm(CblasColMajor, trans(a.trans_a), trans(a.trans_b), m, n, k, alpha, reinterpret_cast<double*>(A),
                ld(a.lda), reinterpret_cast<double*>(B), ld(a.ldb), beta, reinterpret_cast<double*>(C), ld(a.ldc));
    return;
  }
  if (a.a_type == kR32F && a.c_type == kR32F) {
    cblas_sgemm(CblasColMajor, trans(a.trans_a), trans(a.trans_b), m, n, k, static_cast<float>(alpha),
                reinterpret_cast<float*>(A), ld(a.lda), reinterpret_cast<float*>(B), ld(a.ldb), static_cast<float>(beta),
                reinterpret_cast<float*>(C), ld(a.ldc));
    return;
  }
  // f16 and bf16: in f32, rounded once when stored.
  thread_local std::vector<float> af, bf, cf;
  int64_t ra = a.trans_a == kOpN ? a.m : a.k, ca = a.trans_a == kOpN ? a.k : a.m;
  int64_t rb = a.trans_b == kOpN ? a.k : a.n, cb = a.trans_b == kOpN ? a.n : a.k;
  toFloat(af, A, a.a_type, ra, ca, a.lda);
  toFloat(bf, B, a.b_type, rb, cb, a.ldb);
  if (beta != 0) toFloat(cf, C, a.c_type, a.m, a.n, a.ldc);
  else cf.assign(static_cast<size_t>(a.m * a.n), 0.0f);  // C is not read when beta is 0 (BLAS)
  cblas_sgemm(CblasColMajor, trans(a.trans_a), trans(a.trans_b), m, n, k, static_cast<float>(alpha), af.data(), ld(ra),
              bf.data(), ld(rb), static_cast<float>(beta), cf.data(), ld(a.m));
  for (int64_t j = 0; j < a.n; ++j)
    for (int64_t i = 0; i < a.m; ++i)
      storeAs(mem(C), a.c_type, static_cast<uint64_t>(i + j * a.ldc), cf[static_cast<size_t>(i + j * a.m)]);
}

// Complex C = alpha op(A) op(B) + beta C (cgemm, zgemm: OP_C conjugates);
// alpha and beta as the call gave them (two floats or two doubles).
CBLAS_TRANSPOSE complexTrans(int32_t op) { return op == kOpN ? CblasNoTrans : op == kOpT ? CblasTrans : CblasConjTrans; }
void gemmComplex(const BlasArgs& a, uint64_t A, uint64_t B, uint64_t C, const uint8_t* alpha, const uint8_t* beta) {
  auto m = static_cast<blasint>(a.m), n = static_cast<blasint>(a.n), k = static_cast<blasint>(a.k);
  if (m == 0 || n == 0) return;
  if (a.c_type == kC64F)
    cblas_zgemm(CblasColMajor, complexTrans(a.trans_a), complexTrans(a.trans_b), m, n, k, alpha, mem(A), ld(a.lda),
                mem(B), ld(a.ldb), beta, mem(C), ld(a.ldc));
  else
    cblas_cgemm(CblasColMajor, complexTrans(a.trans_a), complexTrans(a.trans_b), m, n, k, alpha, mem(A), ld(a.lda),
                mem(B), ld(a.ldb), beta, mem(C), ld(a.ldc));
}

Status level3(const BlasArgs& a, const Valid& valid) {
  for (int64_t v : {a.m, a.n, a.k, a.lda, a.ldb, a.ldc})
    if (!fits(v)) return tooLarge(blasOpName(a.op));
  int32_t st = scalarType(a.compute);
  const bool complex = isComplex(a.c_type);
  double alpha = complex ? 0 : scalar(a.alpha, st), beta = complex ? 0 : scalar(a.beta, st);
  // Complex scalars, read when the call runs (device pointer mode: from device memory in stream order).
  uint8_t calpha[16] = {}, cbeta[16] = {};
  if (complex) {
    const size_t es = elementSize(a.c_type);
    std::memcpy(calpha, a.alpha.device ? mem(a.alpha.ptr) : a.alpha.bytes, es);
    std::memcpy(cbeta, a.beta.device ? mem(a.beta.ptr) : a.beta.bytes, es);
  }
  auto one = [&](uint64_t A, uint64_t B, uint64_t C) {
    if (complex) gemmComplex(a, A, B, C, calpha, cbeta);
    else gemmOne(a, A, B, C, alpha, beta);
  };
  size_t ea = elementSize(a.a_type), ec = elementSize(a.c_type);
  if (a.op == BlasOp::kGemm) {
    one(a.a, a.b, a.c);
    return Status::ok();
  }
  if (a.op == BlasOp::kGemmStridedBatched) {
    for (int64_t i = 0; i < a.batch; ++i)
      one(a.a + static_cast<uint64_t>(i * a.stride_a) * ea, a.b + static_cast<uint64_t>(i * a.stride_b) * ea,
          a.c + static_cast<uint64_t>(i * a.stride_c) * ec);
    return Status::ok();
  }
  // gemmBatched: the arrays hold device pointers, each checked before use.
  int64_t ra = a.trans_a == kOpN ? a.m : a.k, ca = a.trans_a == kOpN ? a.k : a.m;
  int64_t rb = a.trans_b == kOpN ? a.k : a.n, cb = a.trans_b == kOpN ? a.n : a.k;
  uint64_t xa = 0, xb = 0, xc = 0;
  matrixExtent(ra, ca, a.lda, xa);
  matrixExtent(rb, cb, a.ldb, xb);
  matrixExtent(a.m, a.n, a.ldc, xc);
  for (int64_t i = 0; i < a.batch; ++i) {
    uint64_t A, B, C;
    std::memcpy(&A, mem(a.a) + 8 * i, 8);
    std::memcpy(&B, mem(a.b) + 8 * i, 8);
    std::memcpy(&C, mem(a.c) + 8 * i, 8);
    for (auto [p, bytes, what] : {std::tuple{A, xa * ea, "A"}, {B, xb * ea, "B"}, {C, xc * ec, "C"}})
      if (bytes && !valid(p, bytes))
        return Status(err::kInvalidValue, std::string("gemmBatched: ") + what + "[" + std::to_string(i) +
                                              "] does not point into an allocation of this session");
  }
  for (int64_t i = 0; i < a.batch; ++i) {
    uint64_t A, B, C;
    std::memcpy(&A, mem(a.a) + 8 * i, 8);
    std::memcpy(&B, mem(a.b) + 8 * i, 8);
    std::memcpy(&C, mem(a.c) + 8 * i, 8);
    one(A, B, C);
  }
  return Status::ok();
}

// ---- cuBLASLt ------------------------------------------------------------------

// Element (r, c) of a matrix of batch b in its layout.
uint64_t at(const LtMatrix& x, uint64_t r, uint64_t c) {
  return x.order == 0 ? r + c * static_cast<uint64_t>(x.ld) : r * static_cast<uint64_t>(x.ld) + c;
}
uint64_t batchBase(const LtMatrix& x, int32_t b) {
  return x.ptr + static_cast<uint64_t>(b) * static_cast<uint64_t>(x.batch_stride) * elementSize(x.type);
}

template <typename T>
void gemmDense(uint64_t m, uint64_t n, uint64_t k, const T* A, const T* B, T* C);
template <>
void gemmDense<float>(uint64_t m, uint64_t n, uint64_t k, const float* A, const float* B, float* C) {
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), 1.0f, A, ld(static_cast<int64_t>(m)), B, ld(static_cast<int64_t>(k)), 0.0f, C,
              ld(static_cast<int64_t>(m)));
}
template <>
void gemmDense<double>(uint64_t m, uint64_t n, uint64_t k, const double* A, const double* B, double* C) {
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), 1.0, A, ld(static_cast<int64_t>(m)), B, ld(static_cast<int64_t>(k)), 0.0, C,
              ld(static_cast<int64_t>(m)));
}

// G (m x n, column-major) = op(A) op(B) of f32 matrices in device memory: a
// row-major matrix is the column-major view of its transpose.
void gemmInPlace(uint64_t m, uint64_t n, uint64_t k, const LtMatrix& xa, int32_t trans_a, uint64_t pa,
                 const LtMatrix& xb, int32_t trans_b, uint64_t pb, float* G) {
  const bool ta = (trans_a != kOpN) != (xa.order == 1), tb = (trans_b != kOpN) != (xb.order == 1);
  cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, reinterpret_cast<const float*>(mem(pa)),
              ld(xa.ld), reinterpret_cast<const float*>(mem(pb)), ld(xb.ld), 0.0f, G, ld(static_cast<int64_t>(m)));
}

template <typename T>
Status ltRun(const LtArgs& a) {
  const uint64_t m = a.m(), n = a.n(), k = a.k();
  double alpha = scalar(a.alpha, a.scale_type), beta = scalar(a.beta, a.scale_type);
  const uint32_t e = a.epilogue;
  const bool relu = e & lt::kRelu, gelu_ = e & lt::kGelu, aux_out = (e & lt::kAux) && (relu || gelu_);
  const bool drelu = (e & ~lt::kBgrad) == lt::kDrelu, dgelu = (e & ~lt::kBgrad) == lt::kDgelu;
  const bool add_bias = (e & lt::kBias) != 0, bgrad = (e & lt::kBgrad) != 0;
  // f32 operands are read where they lie (sgemm takes their layouts as
  // transposes and leading dimensions); other types, and the epilogues that
  // sum op(A) or op(B), work on copies in the compute type.
  const bool direct = std::is_same_v<T, float> && a.a.type == kR32F && a.b.type == kR32F && e != lt::kBgradA &&
                      e != lt::kBgradB;
  std::vector<T> A(direct ? 0 : m * k), B(direct ? 0 : k * n);
  // The product, written whole by the gemm before it is read (kept by the
  // thread: zeroing and faulting in a fresh one per call cost as much as the copies).
  thread_local std::vector<T> G;
  if (G.size() < m * n) G.resize(m * n);
  for (int32_t b = 0; b < a.d.batch; ++b) {
    uint64_t pa = batchBase(a.a, b), pb = batchBase(a.b, b), pc = batchBase(a.c, b), pd = batchBase(a.d, b);
    if (direct) {
      if (k) gemmInPlace(m, n, k, a.a, a.trans_a, pa, a.b, a.trans_b, pb, reinterpret_cast<float*>(G.data()));
      else std::fill_n(G.begin(), m * n, T(0));
    } else {
      for (uint64_t p = 0; p < k; ++p)
        for (uint64_t i = 0; i < m; ++i)
          A[i + p * m] = static_cast<T>(loadAs(mem(pa), a.a.type, a.trans_a == kOpN ? at(a.a, i, p) : at(a.a, p, i)));
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t p = 0; p < k; ++p)
          B[p + j * k] = static_cast<T>(loadAs(mem(pb), a.b.type, a.trans_b == kOpN ? at(a.b, p, j) : at(a.b, j, p)));
      if (k) gemmDense<T>(m, n, k, A.data(), B.data(), G.data());
      else std::fill_n(G.begin(), m * n, T(0));
    }
    uint8_t* bias = a.bias ? mem(a.bias + static_cast<uint64_t>(b) * a.bias_batch_stride * elementSize(a.bias_type)) : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      // f32 in and out, column-major, no epilogue but a bias: the loop below
      // without its per-element type dispatch (the same operations in the same order).
      if (a.d.type == kR32F && a.d.order == 0 && (beta == 0 || (a.c.type == kR32F && a.c.order == 0)) &&
          (e == lt::kDefault || (e == lt::kBias && a.bias_type == kR32F))) {
        float* D = reinterpret_cast<float*>(mem(pd));
        const float* C = reinterpret_cast<const float*>(mem(pc));
        const float* bias_f = reinterpret_cast<const float*>(bias);
        const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
        const uint64_t ldd = static_cast<uint64_t>(a.d.ld), ldc = static_cast<uint64_t>(a.c.ld);
        for (uint64_t j = 0; j < n; ++j)
          for (uint64_t i = 0; i < m; ++i) {
            float x = al * G[i + j * m];
            if (beta != 0) x += be * C[i + j * ldc];
            if (add_bias) x += bias_f[i];
            D[i + j * ldd] = x;
          }
        continue;
      }
    }
    uint8_t* aux = nullptr;
    if (a.aux) {
      uint64_t stride = (relu || drelu) ? static_cast<uint64_t>(a.aux_batch_stride) / 8
                                        : static_cast<uint64_t>(a.aux_batch_stride) * elementSize(a.aux_type);
      aux = mem(a.aux + static_cast<uint64_t>(b) * stride);
    }
    std::vector<T> grad_sum(bgrad ? m : 0, T(0));
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        T x = static_cast<T>(alpha) * G[i + j * m];
        if (beta != 0) x += static_cast<T>(beta) * static_cast<T>(loadAs(mem(pc), a.c.type, at(a.c, i, j)));
        uint64_t bit = i + j * static_cast<uint64_t>(a.aux_ld);
        if (add_bias) x += static_cast<T>(loadAs(bias, a.bias_type, i));
        if (relu) {
          if (aux_out) {
            uint8_t mask = static_cast<uint8_t>(1u << (bit % 8));
            aux[bit / 8] = x > 0 ? aux[bit / 8] | mask : aux[bit / 8] & static_cast<uint8_t>(~mask);
          }
          x = x > 0 ? x : T(0);
        } else if (gelu_) {
          if (aux_out) storeAs(aux, a.aux_type, bit, x);
          x = static_cast<T>(gelu(x));
        } else if (drelu) {
          if (!((aux[bit / 8] >> (bit % 8)) & 1)) x = 0;
        } else if (dgelu) {
          x *= static_cast<T>(geluGrad(loadAs(aux, a.aux_type, bit)));
        }
        if (bgrad) grad_sum[i] += x;
        storeAs(mem(pd), a.d.type, at(a.d, i, j), x);
      }
    }
    if (bgrad)
      for (uint64_t i = 0; i < m; ++i) storeAs(bias, a.bias_type, i, grad_sum[i]);
    if (e == lt::kBgradA)  // sums over k of op(A): one per row of D
      for (uint64_t i = 0; i < m; ++i) {
        T s = 0;
        for (uint64_t p = 0; p < k; ++p) s += A[i + p * m];
        storeAs(bias, a.bias_type, i, s);
      }
    if (e == lt::kBgradB)  // sums over k of op(B): one per column of D
      for (uint64_t j = 0; j < n; ++j) {
        T s = 0;
        for (uint64_t p = 0; p < k; ++p) s += B[p + j * k];
        storeAs(bias, a.bias_type, j, s);
      }
  }
  return Status::ok();
}

// geam, dgmm, trsm, syrk, trmm, symm, syr2k (S and D).
Status level3Extra(const BlasArgs& a) {
  for (int64_t v : {a.m, a.n, a.k, a.lda, a.ldb, a.ldc, a.incx})
    if (!fits(v)) return tooLarge(blasOpName(a.op));
  const int32_t t = a.a_type;
  const bool f = t == kR32F;
  const auto m = static_cast<blasint>(a.m), n = static_cast<blasint>(a.n), k = static_cast<blasint>(a.k);
  const auto side = a.side == 0 ? CblasLeft : CblasRight;
  const auto uplo = a.uplo == 0 ? CblasLower : CblasUpper;
  auto at = [](uint64_t, int64_t i, int64_t j, int64_t ldp) { return static_cast<uint64_t>(i + j * ldp); };
  switch (a.op) {
    case BlasOp::kGeam: {  // computed whole before it is stored: C may be A or B
      const double alpha = scalar(a.alpha, t), beta = scalar(a.beta, t);
      std::vector<double> c(static_cast<size_t>(a.m * a.n));
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) {
          const double x = loadAs(mem(a.a), t, a.trans_a == kOpN ? at(a.a, i, j, a.lda) : at(a.a, j, i, a.lda));
          const double y = !a.b ? 0.0 : loadAs(mem(a.b), t, a.trans_b == kOpN ? at(a.b, i, j, a.ldb) : at(a.b, j, i, a.ldb));
          c[static_cast<size_t>(i + j * a.m)] = alpha * x + (beta == 0 ? 0.0 : beta * y);
        }
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) storeAs(mem(a.c), t, at(a.c, i, j, a.ldc), c[static_cast<size_t>(i + j * a.m)]);
      return Status::ok();
    }
    case BlasOp::kDgmm: {  // element by element: C may be A
      const int64_t len = a.side == 0 ? a.m : a.n;
      const int64_t start = a.incx < 0 ? (len - 1) * -a.incx : 0;
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) {
          const double x = loadAs(mem(a.x), t, static_cast<uint64_t>(start + (a.side == 0 ? i : j) * a.incx));
          storeAs(mem(a.c), t, at(a.c, i, j, a.ldc), loadAs(mem(a.a), t, at(a.a, i, j, a.lda)) * x);
        }
      return Status::ok();
    }
    case BlasOp::kTrsm: {
      if (m == 0 || n == 0) return Status::ok();
      const auto diag = a.diag == 0 ? CblasNonUnit : CblasUnit;
      if (f)
        cblas_strsm(CblasColMajor, side, uplo, trans(a.trans_a), diag, m, n, static_cast<float>(scalar(a.alpha, t)),
                    reinterpret_cast<float*>(a.a), ld(a.lda), reinterpret_cast<float*>(a.b), ld(a.ldb));
      else
        cblas_dtrsm(CblasColMajor, side, uplo, trans(a.trans_a), diag, m, n, scalar(a.alpha, t),
                    reinterpret_cast<double*>(a.a), ld(a.lda), reinterpret_cast<double*>(a.b), ld(a.ldb));
      return Status::ok();
    }
    case BlasOp::kSyrk: {
      if (n == 0) return Status::ok();
      if (f)
        cblas_ssyrk(CblasColMajor, uplo, trans(a.trans_a), n, k, static_cast<float>(scalar(a.alpha, t)),
                    reinterpret_cast<float*>(a.a), ld(a.lda), static_cast<float>(scalar(a.beta, t)),
                    reinterpret_cast<float*>(a.c), ld(a.ldc));
      else
        cblas_dsyrk(CblasColMajor, uplo, trans(a.trans_a), n, k, scalar(a.alpha, t), reinterpret_cast<double*>(a.a),
                    ld(a.lda), scalar(a.beta, t), reinterpret_cast<double*>(a.c), ld(a.ldc));
      return Status::ok();
    }
    case BlasOp::kTrmm: {  // on a packed copy of B (C may be B), then stored into C
      if (m == 0 || n == 0) return Status::ok();
      const auto diag = a.diag == 0 ? CblasNonUnit : CblasUnit;
      std::vector<double> wide;
      std::vector<float> narrow;
      if (f) narrow.resize(static_cast<size_t>(a.m * a.n));
      else wide.resize(static_cast<size_t>(a.m * a.n));
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) {
          const double v = loadAs(mem(a.b), t, at(a.b, i, j, a.ldb));
          if (f) narrow[static_cast<size_t>(i + j * a.m)] = static_cast<float>(v);
          else wide[static_cast<size_t>(i + j * a.m)] = v;
        }
      if (f)
        cblas_strmm(CblasColMajor, side, uplo, trans(a.trans_a), diag, m, n, static_cast<float>(scalar(a.alpha, t)),
                    reinterpret_cast<float*>(a.a), ld(a.lda), narrow.data(), m);
      else
        cblas_dtrmm(CblasColMajor, side, uplo, trans(a.trans_a), diag, m, n, scalar(a.alpha, t),
                    reinterpret_cast<double*>(a.a), ld(a.lda), wide.data(), m);
      for (int64_t j = 0; j < a.n; ++j)
        for (int64_t i = 0; i < a.m; ++i) {
          const size_t p = static_cast<size_t>(i + j * a.m);
          storeAs(mem(a.c), t, at(a.c, i, j, a.ldc), f ? static_cast<double>(narrow[p]) : wide[p]);
        }
      return Status::ok();
    }
    case BlasOp::kSymm: {
      if (m == 0 || n == 0) return Status::ok();
      if (f)
        cblas_ssymm(CblasColMajor, side, uplo, m, n, static_cast<float>(scalar(a.alpha, t)),
                    reinterpret_cast<float*>(a.a), ld(a.lda), reinterpret_cast<float*>(a.b), ld(a.ldb),
                    static_cast<float>(scalar(a.beta, t)), reinterpret_cast<float*>(a.c), ld(a.ldc));
      else
        cblas_dsymm(CblasColMajor, side, uplo, m, n, scalar(a.alpha, t), reinterpret_cast<double*>(a.a), ld(a.lda),
                    reinterpret_cast<double*>(a.b), ld(a.ldb), scalar(a.beta, t), reinterpret_cast<double*>(a.c),
                    ld(a.ldc));
      return Status::ok();
    }
    case BlasOp::kSyr2k: {
      if (n == 0) return Status::ok();
      if (f)
        cblas_ssyr2k(CblasColMajor, uplo, trans(a.trans_a), n, k, static_cast<float>(scalar(a.alpha, t)),
                     reinterpret_cast<float*>(a.a), ld(a.lda), reinterpret_cast<float*>(a.b), ld(a.ldb),
                     static_cast<float>(scalar(a.beta, t)), reinterpret_cast<float*>(a.c), ld(a.ldc));
      else
        cblas_dsyr2k(CblasColMajor, uplo, trans(a.trans_a), n, k, scalar(a.alpha, t), reinterpret_cast<double*>(a.a),
                     ld(a.lda), reinterpret_cast<double*>(a.b), ld(a.ldb), scalar(a.beta, t),
                     reinterpret_cast<double*>(a.c), ld(a.ldc));
      return Status::ok();
    }
    default: return Status(err::kUnknown, "not a geam, dgmm, trsm, syrk, trmm, symm or syr2k");
  }
}

}  // namespace

double gelu(double x) {
  constexpr double kC = 0.7978845608028654;  // sqrt(2 / pi)
  return 0.5 * x * (1.0 + std::tanh(kC * (x + 0.044715 * x * x * x)));
}

double geluGrad(double x) {
  constexpr double kC = 0.7978845608028654;
  double t = std::tanh(kC * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kC * (1.0 + 3.0 * 0.044715 * x * x);
}

Status run(const BlasArgs& a, const Valid& valid, std::string* result) {
  switch (a.op) {
    case BlasOp::kGemv: case BlasOp::kGer: return isComplex(a.a_type) ? runComplexLevel12(a, result) : level2(a);
    case BlasOp::kDotc: case BlasOp::kGerc: return runComplexLevel12(a, result);
    case BlasOp::kTrmv: case BlasOp::kTrsv: case BlasOp::kSymv: case BlasOp::kHemv: return runLevel2More(a);
    case BlasOp::kGemm: case BlasOp::kGemmStridedBatched: case BlasOp::kGemmBatched: return level3(a, valid);
    case BlasOp::kGeam: case BlasOp::kDgmm: case BlasOp::kTrsm: case BlasOp::kSyrk: case BlasOp::kTrmm:
    case BlasOp::kSymm: case BlasOp::kSyr2k:
      return isComplex(a.a_type) ? runComplexLevel3(a) : level3Extra(a);
    case BlasOp::kHerk: case BlasOp::kHer2k: case BlasOp::kHemm: return runComplexLevel3(a);
    case BlasOp::kGetrfBatched: case BlasOp::kGetrsBatched: case BlasOp::kGetriBatched:
    case BlasOp::kMatinvBatched: case BlasOp::kGeqrfBatched: return runBatchedFactorization(a, valid);
    default: return isComplex(a.a_type) ? runComplexLevel12(a, result) : level1(a, result);
  }
}

Status runLt(const LtArgs& a) {
  for (uint64_t v : {a.m(), a.n(), a.k()})
    if (v > static_cast<uint64_t>(kMaxSimBlasDim)) return tooLarge("cublasLtMatmul");
  return scalarType(a.compute) == kR64F ? ltRun<double>(a) : ltRun<float>(a);
}

}  // namespace rgpu::server::simblas
