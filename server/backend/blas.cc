#include "server/backend/blas.h"

#include "common/blas_types.h"

namespace rgpu::server {

using namespace common::blas;

const char* blasOpName(BlasOp op) {
  static const char* const kNames[] = {"axpy", "dot",  "nrm2", "scal", "asum", "iamax", "iamin",
                                       "copy", "swap", "gemv", "ger",  "gemm", "gemmStridedBatched",
                                       "gemmBatched", "geam", "dgmm", "trsm", "syrk", "trmm", "symm", "syr2k",
                                       "getrfBatched", "getrsBatched", "getriBatched", "matinvBatched", "geqrfBatched",
                                       "herk", "her2k", "hemm", "dotc", "gerc", "trmv", "trsv", "symv", "hemv"};
  auto i = static_cast<size_t>(op);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "?";
}

size_t blasResultBytes(const BlasArgs& a) {
  switch (a.op) {
    case BlasOp::kDot: case BlasOp::kDotc: return elementSize(a.a_type);
    case BlasOp::kNrm2: case BlasOp::kAsum: return elementSize(a.a_type) / (isComplex(a.a_type) ? 2 : 1);  // (real)
    case BlasOp::kIamax: case BlasOp::kIamin: return a.result64 ? 8 : 4;
    default: return 0;
  }
}

namespace lt {
bool epilogueSupported(uint32_t e) {
  switch (e) {
    case kDefault: case kRelu: case kRelu | kAux: case kBias: case kRelu | kBias: case kRelu | kAux | kBias:
    case kDrelu: case kDrelu | kBgrad: case kGelu: case kGelu | kAux: case kGelu | kBias: case kGelu | kAux | kBias:
    case kDgelu: case kDgelu | kBgrad: case kBgradA: case kBgradB:
      return true;
    default: return false;
  }
}

const char* epilogueName(uint32_t e) {
  switch (e) {
    case kDefault: return "DEFAULT";
    case kRelu: return "RELU";
    case kRelu | kAux: return "RELU_AUX";
    case kBias: return "BIAS";
    case kRelu | kBias: return "RELU_BIAS";
    case kRelu | kAux | kBias: return "RELU_AUX_BIAS";
    case kDrelu: return "DRELU";
    case kDrelu | kBgrad: return "DRELU_BGRAD";
    case kGelu: return "GELU";
    case kGelu | kAux: return "GELU_AUX";
    case kGelu | kBias: return "GELU_BIAS";
    case kGelu | kAux | kBias: return "GELU_AUX_BIAS";
    case kDgelu: return "DGELU";
    case kDgelu | kBgrad: return "DGELU_BGRAD";
    case kBgradA: return "BGRADA";
    case kBgradB: return "BGRADB";
    default: return "an unsupported epilogue";
  }
}
}  // namespace lt

uint64_t LtArgs::k() const { return trans_a == kOpN ? a.cols : a.rows; }

namespace {

Status bad(const std::string& what) { return Status(err::kInvalidValue, what); }

// Collects the ranges of one call: each must lie in an allocation, all on one device.
class RangeCheck {
 public:
  RangeCheck(const AllocationTable& allocs, const char* call) : allocs_(allocs), call_(call) {}

  Status range(uint64_t ptr, uint64_t elements, size_t esize, const char* what) {
    if (elements == 0) return Status::ok();
    uint64_t bytes;
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(esize), &bytes))
      return bad(std::string(call_) + ": " + what + " is larger than memory");
    int d = -1;
    if (Status s = allocs_.check(ptr, bytes, &d); !s) return Status(s.code(), std::string(call_) + ": " + what + ": " + s.message());
    if (device_ >= 0 && d != device_) return bad(std::string(call_) + ": " + what + " is on another device than the rest");
    device_ = d;
    return Status::ok();
  }

  Status vector(uint64_t ptr, int64_t n, int64_t inc, size_t esize, const char* what) {
    uint64_t e;
    if (!vectorExtent(n, inc, e)) return bad(std::string(call_) + ": " + what + ": bad length or increment");
    return range(ptr, e, esize, what);
  }

  // A column-major rows x cols matrix, `batch` of them `stride` elements apart.
  Status matrix(uint64_t ptr, int64_t rows, int64_t cols, int64_t ld, size_t esize, int64_t batch, int64_t stride,
                const char* what) {
    uint64_t e;
    if (!matrixExtent(rows, cols, ld, e))
      return bad(std::string(call_) + ": " + what + ": leading dimension " + std::to_string(ld) + " below its " +
                 std::to_string(rows) + " rows, or a negative or overflowing size");
    if (e == 0 || batch <= 1) return range(ptr, e, esize, what);
    if (stride < 0) return bad(std::string(call_) + ": " + what + ": negative batch stride");
    uint64_t span;
    if (__builtin_mul_overflow(static_cast<uint64_t>(batch - 1), static_cast<uint64_t>(stride), &span) ||
        __builtin_add_overflow(span, e, &e))
      return bad(std::string(call_) + ": " + what + ": batches larger than memory");
    return range(ptr, e, esize, what);
  }

  Status scalar(const BlasScalar& s, size_t esize, const char* what) {
    return s.device ? range(s.ptr, 1, esize, what) : Status::ok();
  }

  int device() const { return device_; }

 private:
  const AllocationTable& allocs_;
  const char* call_;
  int device_ = -1;
};

bool realType(int32_t t) { return t == kR32F || t == kR64F; }

// The GEMM shape of a matmul: rows and columns of op(A), op(B), C and D must agree.
Status checkLtShape(const LtArgs& a) {
  auto op = [](const LtMatrix& x, int32_t t) { return t == kOpN ? std::pair{x.rows, x.cols} : std::pair{x.cols, x.rows}; };
  auto [am, ak] = op(a.a, a.trans_a);
  auto [bk, bn] = op(a.b, a.trans_b);
  if (a.trans_a < kOpN || a.trans_a > kOpC || a.trans_b < kOpN || a.trans_b > kOpC)
    return bad("cublasLtMatmul: bad operation");
  if (am != a.d.rows || bn != a.d.cols || ak != bk || a.c.rows != a.d.rows || a.c.cols != a.d.cols)
    return bad("cublasLtMatmul: op(A) is " + std::to_string(am) + "x" + std::to_string(ak) + ", op(B) " +
               std::to_string(bk) + "x" + std::to_string(bn) + ", C " + std::to_string(a.c.rows) + "x" +
               std::to_string(a.c.cols) + ", D " + std::to_string(a.d.rows) + "x" + std::to_string(a.d.cols) +
               ": the shapes do not make a matrix product");
  return Status::ok();
}

}  // namespace

Status checkBlas(const BlasArgs& a, const AllocationTable& allocs, int* device) {
  RangeCheck r(allocs, blasOpName(a.op));
  std::string call = blasOpName(a.op);
  switch (a.op) {
    case BlasOp::kAxpy: case BlasOp::kDot: case BlasOp::kNrm2: case BlasOp::kScal: case BlasOp::kAsum:
    case BlasOp::kIamax: case BlasOp::kIamin: case BlasOp::kCopy: case BlasOp::kSwap: case BlasOp::kGemv:
    case BlasOp::kGer: case BlasOp::kDotc: case BlasOp::kGerc: {
      const bool conj = a.op == BlasOp::kDotc || a.op == BlasOp::kGerc;
      if (a.b_type != a.a_type || !(isComplex(a.a_type) || (realType(a.a_type) && !conj)))
        return Status(err::kNotSupported, call + " of " + typeName(a.a_type) + ": rgpu runs " +
                                              (conj ? "C and Z" : "S, D, C and Z"));
      size_t es = elementSize(a.a_type);
      // A complex scal's alpha: complex (Cscal) or real (Csscal).
      size_t alpha_size = es;
      if (a.op == BlasOp::kScal && isComplex(a.a_type)) {
        if (a.c_type != a.a_type && a.c_type != (a.a_type == kC32F ? kR32F : kR64F))
          return bad(call + ": alpha of " + typeName(a.c_type) + " for a vector of " + typeName(a.a_type));
        alpha_size = elementSize(a.c_type);
      }
      bool two = a.op == BlasOp::kAxpy || a.op == BlasOp::kDot || a.op == BlasOp::kDotc || a.op == BlasOp::kCopy ||
                 a.op == BlasOp::kSwap;
      if (a.op == BlasOp::kGemv) {
        if (a.trans_a < kOpN || a.trans_a > kOpC) return bad(call + ": bad operation");
        bool t = a.trans_a != kOpN;
        RGPU_TRY(r.matrix(a.a, a.m, a.n, a.lda, es, 1, 0, "A"));
        RGPU_TRY(r.vector(a.x, t ? a.m : a.n, a.incx, es, "x"));
        RGPU_TRY(r.vector(a.y, t ? a.n : a.m, a.incy, es, "y"));
        RGPU_TRY(r.scalar(a.alpha, es, "alpha"));
        RGPU_TRY(r.scalar(a.beta, es, "beta"));
      } else if (a.op == BlasOp::kGer || a.op == BlasOp::kGerc) {
        RGPU_TRY(r.matrix(a.a, a.m, a.n, a.lda, es, 1, 0, "A"));
        RGPU_TRY(r.vector(a.x, a.m, a.incx, es, "x"));
        RGPU_TRY(r.vector(a.y, a.n, a.incy, es, "y"));
        RGPU_TRY(r.scalar(a.alpha, es, "alpha"));
      } else {
        RGPU_TRY(r.vector(a.x, a.n, a.incx, es, "x"));
        if (two) RGPU_TRY(r.vector(a.y, a.n, a.incy, es, "y"));
        if (a.op == BlasOp::kAxpy || a.op == BlasOp::kScal) RGPU_TRY(r.scalar(a.alpha, alpha_size, "alpha"));
        if (size_t rb = blasResultBytes(a); rb && a.result) RGPU_TRY(r.range(a.result, 1, rb, "result"));
      }
      break;
    }
    case BlasOp::kTrmv: case BlasOp::kTrsv: case BlasOp::kSymv: case BlasOp::kHemv: {
      if (a.b_type != a.a_type || !(isComplex(a.a_type) || (realType(a.a_type) && a.op != BlasOp::kHemv)))
        return Status(err::kNotSupported, call + " of " + typeName(a.a_type) + ": rgpu runs " +
                                              (a.op == BlasOp::kHemv ? "C and Z" : "S, D, C and Z"));
      if (a.n < 0) return bad(call + ": negative size");
      const bool tri = a.op == BlasOp::kTrmv || a.op == BlasOp::kTrsv;
      if ((a.uplo != 0 && a.uplo != 1) || (tri && (a.trans_a < kOpN || a.trans_a > kOpC || (a.diag != 0 && a.diag != 1))))
        return bad(call + ": bad fill mode, operation or diagonal type");
      const size_t es = elementSize(a.a_type);
      RGPU_TRY(r.matrix(a.a, a.n, a.n, a.lda, es, 1, 0, "A"));
      RGPU_TRY(r.vector(a.x, a.n, a.incx, es, "x"));
      if (!tri) {
        RGPU_TRY(r.vector(a.y, a.n, a.incy, es, "y"));
        RGPU_TRY(r.scalar(a.alpha, es, "alpha"));
        RGPU_TRY(r.scalar(a.beta, es, "beta"));
      }
      break;
    }
    case BlasOp::kGemm: case BlasOp::kGemmStridedBatched: case BlasOp::kGemmBatched: {
      if (!gemmSupported(a.a_type, a.b_type, a.c_type, a.compute))
        return Status(err::kNotSupported, call + ": A " + typeName(a.a_type) + ", B " + typeName(a.b_type) + ", C " +
                                              typeName(a.c_type) + " with compute type " + std::to_string(a.compute) +
                                              " is not a combination rgpu runs");
      if (a.trans_a < kOpN || a.trans_a > kOpC || a.trans_b < kOpN || a.trans_b > kOpC) return bad(call + ": bad operation");
      if (a.m < 0 || a.n < 0 || a.k < 0 || a.batch < 0) return bad(call + ": negative size");
      size_t ea = elementSize(a.a_type), ec = elementSize(a.c_type), sc = elementSize(scalarTypeOf(a.compute, a.c_type));
      int64_t ra = a.trans_a == kOpN ? a.m : a.k, ca = a.trans_a == kOpN ? a.k : a.m;
      int64_t rb = a.trans_b == kOpN ? a.k : a.n, cb = a.trans_b == kOpN ? a.n : a.k;
      RGPU_TRY(r.scalar(a.alpha, sc, "alpha"));
      RGPU_TRY(r.scalar(a.beta, sc, "beta"));
      if (a.op == BlasOp::kGemmBatched) {
        // The arrays of pointers; the matrices they name are checked when the call runs.
        for (auto [p, what] : {std::pair{a.a, "the array of A"}, {a.b, "the array of B"}, {a.c, "the array of C"}})
          RGPU_TRY(r.range(p, static_cast<uint64_t>(a.batch), 8, what));
        uint64_t e;
        if (!matrixExtent(ra, ca, a.lda, e) || !matrixExtent(rb, cb, a.ldb, e) || !matrixExtent(a.m, a.n, a.ldc, e))
          return bad(call + ": a leading dimension below its matrix's rows, or a negative or overflowing size");
      } else {
        int64_t batch = a.op == BlasOp::kGemm ? 1 : a.batch;
        RGPU_TRY(r.matrix(a.a, ra, ca, a.lda, ea, batch, a.stride_a, "A"));
        RGPU_TRY(r.matrix(a.b, rb, cb, a.ldb, ea, batch, a.stride_b, "B"));
        RGPU_TRY(r.matrix(a.c, a.m, a.n, a.ldc, ec, batch, a.stride_c, "C"));
      }
      break;
    }
    case BlasOp::kGetrfBatched: case BlasOp::kGetrsBatched: case BlasOp::kGetriBatched:
    case BlasOp::kMatinvBatched: case BlasOp::kGeqrfBatched: {
      // The arrays of pointers, pivots and infos; the matrices the arrays name are checked when the call runs.
      if (!realType(a.a_type) && !isComplex(a.a_type))
        return Status(err::kNotSupported, call + " of " + typeName(a.a_type) + ": rgpu runs S, D, C and Z");
      if (a.m < 0 || a.n < 0 || a.k < 0 || a.batch < 0) return bad(call + ": negative size");
      if (a.op == BlasOp::kMatinvBatched && a.n > 32) return bad(call + ": n above 32");
      if (a.op == BlasOp::kGetrsBatched && a.trans_a != kOpN && a.trans_a != kOpT && a.trans_a != kOpC)
        return bad(call + ": bad operation");
      uint64_t e;
      const bool second = a.op == BlasOp::kGetrsBatched || a.op == BlasOp::kGetriBatched || a.op == BlasOp::kMatinvBatched;
      if (!matrixExtent(a.m, a.n, a.lda, e) ||
          (second && !matrixExtent(a.n, a.op == BlasOp::kGetrsBatched ? a.k : a.n, a.ldb, e)))
        return bad(call + ": a leading dimension below its matrix's rows, or a negative or overflowing size");
      RGPU_TRY(r.range(a.a, static_cast<uint64_t>(a.batch), 8, "the array of A"));
      if (a.op != BlasOp::kGetrfBatched) RGPU_TRY(r.range(a.b, static_cast<uint64_t>(a.batch), 8, "the second array"));
      if (a.x) RGPU_TRY(r.range(a.x, static_cast<uint64_t>(a.n * a.batch), 4, "the pivots"));
      if (a.c) RGPU_TRY(r.range(a.c, static_cast<uint64_t>(a.batch), 4, "info"));
      break;
    }
    case BlasOp::kGeam: case BlasOp::kDgmm: case BlasOp::kTrsm: case BlasOp::kSyrk: case BlasOp::kTrmm:
    case BlasOp::kSymm: case BlasOp::kSyr2k: case BlasOp::kHerk: case BlasOp::kHer2k: case BlasOp::kHemm: {
      const bool hermitian = a.op == BlasOp::kHerk || a.op == BlasOp::kHer2k || a.op == BlasOp::kHemm;
      if (a.b_type != a.a_type || !(isComplex(a.a_type) || (realType(a.a_type) && !hermitian)))
        return Status(err::kNotSupported, call + " of " + typeName(a.a_type) + ": rgpu runs " +
                                              (hermitian ? "C and Z" : "S, D, C and Z"));
      if (a.m < 0 || a.n < 0 || a.k < 0) return bad(call + ": negative size");
      const size_t es = elementSize(a.a_type);
      // (cuBLAS's complex syrk and syr2k take N or T, herk and her2k N or C.)
      if (isComplex(a.a_type) && (a.op == BlasOp::kSyrk || a.op == BlasOp::kSyr2k) && a.trans_a == kOpC)
        return bad(call + ": a complex " + call + " of the conjugate transpose (herk's)");
      if ((a.op == BlasOp::kHerk || a.op == BlasOp::kHer2k) && a.trans_a == kOpT)
        return bad(call + ": the transpose (" + call + " takes N or C)");
      auto op = [](int32_t t) { return t >= kOpN && t <= kOpC; };
      auto side = [](int32_t s) { return s == 0 || s == 1; };  // CUBLAS_SIDE_LEFT, _RIGHT
      if (a.op == BlasOp::kGeam) {  // C (m x n) = alpha op(A) + beta op(B)
        if (!op(a.trans_a) || !op(a.trans_b)) return bad(call + ": bad operation");
        const bool ta = a.trans_a != kOpN, tb = a.trans_b != kOpN;
        RGPU_TRY(r.matrix(a.a, ta ? a.n : a.m, ta ? a.m : a.n, a.lda, es, 1, 0, "A"));
        if (a.b) RGPU_TRY(r.matrix(a.b, tb ? a.n : a.m, tb ? a.m : a.n, a.ldb, es, 1, 0, "B"));
        RGPU_TRY(r.matrix(a.c, a.m, a.n, a.ldc, es, 1, 0, "C"));
        RGPU_TRY(r.scalar(a.alpha, es, "alpha"));
        RGPU_TRY(r.scalar(a.beta, es, "beta"));
      } else if (a.op == BlasOp::kDgmm) {  // C (m x n) = A diag(x), or diag(x) A
        if (!side(a.side)) return bad(call + ": bad side");
        RGPU_TRY(r.matrix(a.a, a.m, a.n, a.lda, es, 1, 0, "A"));
        RGPU_TRY(r.vector(a.x, a.side == 0 ? a.m : a.n, a.incx, es, "x"));
        RGPU_TRY(r.matrix(a.c, a.m, a.n, a.ldc, es, 1, 0, "C"));
      } else if (a.op == BlasOp::kTrsm) {  // op(A) X = alpha B, or X op(A) = alpha B; X over B (m x n)
        if (!side(a.side) || !op(a.trans_a) || (a.uplo != 0 && a.uplo != 1) || (a.diag != 0 && a.diag != 1))
          return bad(call + ": bad side, fill mode, operation or diagonal type");
        const int64_t k = a.side == 0 ? a.m : a.n;
        RGPU_TRY(r.matrix(a.a, k, k, a.lda, es, 1, 0, "A"));
        RGPU_TRY(r.matrix(a.b, a.m, a.n, a.ldb, es, 1, 0, "B"));
        RGPU_TRY(r.scalar(a.alpha, es, "alpha"));
      } else if (a.op == BlasOp::kTrmm || a.op == BlasOp::kSymm || a.op == BlasOp::kHemm) {
        // trmm: C = alpha op(A) B or alpha B op(A) (A triangular); symm: C = alpha A B + beta C or alpha B A + beta C
        const bool tr = a.op == BlasOp::kTrmm;
        if (!side(a.side) || (a.uplo != 0 && a.uplo != 1) || (tr && (!op(a.trans_a) || (a.diag != 0 && a.diag != 1))))
          return bad(call + ": bad side, fill mode, operation or diagonal type");
        const int64_t k = a.side == 0 ? a.m : a.n;
        RGPU_TRY(r.matrix(a.a, k, k, a.lda, es, 1, 0, "A"));
        RGPU_TRY(r.matrix(a.b, a.m, a.n, a.ldb, es, 1, 0, "B"));
        RGPU_TRY(r.matrix(a.c, a.m, a.n, a.ldc, es, 1, 0, "C"));
        RGPU_TRY(r.scalar(a.alpha, es, "alpha"));
        if (!tr) RGPU_TRY(r.scalar(a.beta, es, "beta"));
      } else if (a.op == BlasOp::kSyr2k || a.op == BlasOp::kHer2k) {
        // C (n x n, one triangle) = alpha op(A) op(B)^T + alpha op(B) op(A)^T + beta C (her2k: ^H, conj(alpha), real beta)
        if (!op(a.trans_a) || (a.uplo != 0 && a.uplo != 1)) return bad(call + ": bad fill mode or operation");
        const bool t = a.trans_a != kOpN;
        RGPU_TRY(r.matrix(a.a, t ? a.k : a.n, t ? a.n : a.k, a.lda, es, 1, 0, "A"));
        RGPU_TRY(r.matrix(a.b, t ? a.k : a.n, t ? a.n : a.k, a.ldb, es, 1, 0, "B"));
        RGPU_TRY(r.matrix(a.c, a.n, a.n, a.ldc, es, 1, 0, "C"));
        RGPU_TRY(r.scalar(a.alpha, es, "alpha"));
        RGPU_TRY(r.scalar(a.beta, a.op == BlasOp::kHer2k ? es / 2 : es, "beta"));
      } else {  // syrk: C (n x n, one triangle) = alpha op(A) op(A)^T + beta C (herk: ^H, real alpha and beta)
        if (!op(a.trans_a) || (a.uplo != 0 && a.uplo != 1)) return bad(call + ": bad fill mode or operation");
        const bool t = a.trans_a != kOpN;
        const size_t scalar = a.op == BlasOp::kHerk ? es / 2 : es;
        RGPU_TRY(r.matrix(a.a, t ? a.k : a.n, t ? a.n : a.k, a.lda, es, 1, 0, "A"));
        RGPU_TRY(r.matrix(a.c, a.n, a.n, a.ldc, es, 1, 0, "C"));
        RGPU_TRY(r.scalar(a.alpha, scalar, "alpha"));
        RGPU_TRY(r.scalar(a.beta, scalar, "beta"));
      }
      break;
    }
  }
  if (a.workspace_size) RGPU_TRY(r.range(a.workspace, a.workspace_size, 1, "workspace"));
  if (device) *device = r.device();
  return Status::ok();
}

Status checkLt(const LtArgs& a, const AllocationTable* allocs, int* device) {
  const char* call = "cublasLtMatmul";
  if (!gemmSupported(a.a.type, a.b.type, a.c.type, a.compute, /*complex_ok=*/false) || a.d.type != a.c.type ||
      a.scale_type != scalarType(a.compute))
    return Status(err::kNotSupported, std::string(call) + ": A " + typeName(a.a.type) + ", B " + typeName(a.b.type) +
                                          ", C " + typeName(a.c.type) + ", D " + typeName(a.d.type) +
                                          " with compute type " + std::to_string(a.compute) + " and scale type " +
                                          typeName(a.scale_type) + " is not a combination rgpu runs");
  if (!lt::epilogueSupported(a.epilogue))
    return Status(err::kNotSupported, std::string(call) + ": epilogue " + std::to_string(a.epilogue) + " is not one rgpu runs");
  if (a.pointer_mode != 0 && a.pointer_mode != 1)
    return Status(err::kNotSupported, std::string(call) + ": only host and device pointer modes are run");
  RGPU_TRY(checkLtShape(a));
  int32_t batch = a.d.batch;
  for (const LtMatrix* x : {&a.a, &a.b, &a.c})
    if (x->batch != batch) return bad(std::string(call) + ": the layouts' batch counts differ");
  if (batch < 1) return bad(std::string(call) + ": batch count below 1");
  for (const LtMatrix* x : {&a.a, &a.b, &a.c, &a.d})
    if (x->order != 0 && x->order != 1)
      return Status(err::kNotSupported, std::string(call) + ": only column- and row-major orders are run");
  if (!allocs) return Status::ok();
  RangeCheck r(*allocs, call);
  auto matrix = [&](const LtMatrix& x, const char* what) -> Status {
    if (x.rows > static_cast<uint64_t>(INT64_MAX) || x.cols > static_cast<uint64_t>(INT64_MAX)) return bad(std::string(call) + ": " + what + ": too large");
    int64_t rows = static_cast<int64_t>(x.order == 0 ? x.rows : x.cols), cols = static_cast<int64_t>(x.order == 0 ? x.cols : x.rows);
    return r.matrix(x.ptr, rows, cols, x.ld, elementSize(x.type), batch, x.batch_stride, what);
  };
  RGPU_TRY(matrix(a.a, "A"));
  RGPU_TRY(matrix(a.b, "B"));
  if (a.c.ptr != a.d.ptr || a.c.ld != a.d.ld || a.c.order != a.d.order) RGPU_TRY(matrix(a.c, "C"));
  RGPU_TRY(matrix(a.d, "D"));
  size_t sc = elementSize(a.scale_type);
  RGPU_TRY(r.scalar(a.alpha, sc, "alpha"));
  RGPU_TRY(r.scalar(a.beta, sc, "beta"));
  uint32_t e = a.epilogue;
  bool uses_bias = (e & lt::kBias) || (e & lt::kBgrad) || e == lt::kBgradA || e == lt::kBgradB;
  if (uses_bias) {
    if (!a.bias) return bad(std::string(call) + ": epilogue " + lt::epilogueName(e) + " needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if (!elementSize(a.bias_type)) return Status(err::kNotSupported, std::string(call) + ": bias of " + typeName(a.bias_type));
    int64_t len = static_cast<int64_t>(e == lt::kBgradB ? a.n() : a.m());
    RGPU_TRY(r.matrix(a.bias, len, 1, len, elementSize(a.bias_type), batch, a.bias_batch_stride, "bias"));
  }
  if (e & lt::kAux) {
    if (!a.aux) return bad(std::string(call) + ": epilogue " + lt::epilogueName(e) + " needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    int64_t m = static_cast<int64_t>(a.m()), n = static_cast<int64_t>(a.n());
    if (e & (lt::kRelu | 8)) {  // a bit mask: one bit per element of D
      if (a.aux_ld < m || a.aux_ld % 128) return bad(std::string(call) + ": the ReLU mask's leading dimension must be at least the rows of D and a multiple of 128");
      uint64_t bits;
      if (!matrixExtent(m, n, a.aux_ld, bits)) return bad(std::string(call) + ": aux: bad size");
      int64_t bytes_ld = a.aux_ld / 8;
      RGPU_TRY(r.matrix(a.aux, (m + 7) / 8, n, bytes_ld, 1, batch, a.aux_batch_stride / 8, "aux"));
    } else {
      if (!elementSize(a.aux_type)) return Status(err::kNotSupported, std::string(call) + ": aux of " + typeName(a.aux_type));
      RGPU_TRY(r.matrix(a.aux, m, n, a.aux_ld, elementSize(a.aux_type), batch, a.aux_batch_stride, "aux"));
    }
  }
  if (a.workspace_size) RGPU_TRY(r.range(a.workspace, a.workspace_size, 1, "workspace"));
  if (device) *device = r.device();
  return Status::ok();
}

}  // namespace rgpu::server
