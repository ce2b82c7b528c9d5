// The server's cuBLAS checks (server/backend/blas.h) and the sim's CPU BLAS
// (server/sim/sim_blas.h) at their edges: what is refused and why, overflow, the
// pointers a gemmBatched array holds, GELU's derivative.
#include "server/backend/blas.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/blas_types.h"
#include "server/sim/sim_blas.h"

namespace rgpu::server {
namespace {

using namespace common::blas;

class BlasChecks : public ::testing::Test {
 protected:
  BlasChecks() : allocs_(16) {
    buf_.resize(4096);
    base_ = reinterpret_cast<uint64_t>(buf_.data());
    EXPECT_TRUE(allocs_.add(base_, buf_.size(), 0));
  }
  BlasArgs gemm(int64_t m, int64_t n, int64_t k, int64_t lda) {
    BlasArgs a;
    a.op = BlasOp::kGemm;
    a.a_type = a.b_type = a.c_type = kR32F;
    a.compute = kCompute32F;
    a.m = m, a.n = n, a.k = k;
    a.a = a.b = a.c = base_;
    a.lda = lda, a.ldb = k, a.ldc = m;
    return a;
  }
  std::vector<uint8_t> buf_;
  uint64_t base_ = 0;
  AllocationTable allocs_;
};

TEST_F(BlasChecks, AGemmInsideItsAllocationPassesAndNamesItsDevice) {
  int dev = -1;
  EXPECT_TRUE(checkBlas(gemm(16, 16, 16, 16), allocs_, &dev));  // 1 KiB each, in 4 KiB
  EXPECT_EQ(dev, 0);
}

TEST_F(BlasChecks, MatricesPastTheEndOrWithAShortLeadingDimensionAreRefused) {
  Status s = checkBlas(gemm(32, 32, 32, 32), allocs_, nullptr);  // 4 KiB per matrix: fits exactly
  EXPECT_TRUE(s) << s.message();
  s = checkBlas(gemm(33, 32, 32, 33), allocs_, nullptr);
  EXPECT_EQ(s.code(), err::kInvalidValue);
  EXPECT_NE(s.message().find("gemm: A:"), std::string::npos) << s.message();
  s = checkBlas(gemm(16, 16, 16, 8), allocs_, nullptr);  // lda below the rows
  EXPECT_EQ(s.code(), err::kInvalidValue);
  EXPECT_NE(s.message().find("leading dimension 8 below its 16 rows"), std::string::npos) << s.message();
}

TEST_F(BlasChecks, SizesThatOverflowSixtyFourBitsAreRefusedNotWrapped) {
  BlasArgs a = gemm(int64_t{1} << 40, int64_t{1} << 40, 1, int64_t{1} << 40);
  EXPECT_EQ(checkBlas(a, allocs_, nullptr).code(), err::kInvalidValue);
  BlasArgs v;
  v.op = BlasOp::kAxpy;
  v.a_type = v.b_type = kR32F;
  v.n = int64_t{1} << 62;
  v.x = v.y = base_;
  v.incx = v.incy = 4;
  EXPECT_EQ(checkBlas(v, allocs_, nullptr).code(), err::kInvalidValue);
  uint64_t e = 0;
  EXPECT_FALSE(vectorExtent(2, INT64_MIN, e));
  EXPECT_FALSE(matrixExtent(INT64_MAX, 3, INT64_MAX, e));
}

TEST_F(BlasChecks, StridedBatchesAreCheckedToTheirLastMatrix) {
  BlasArgs a = gemm(8, 8, 8, 8);  // 256 bytes per matrix
  a.op = BlasOp::kGemmStridedBatched;
  a.batch = 16;
  a.stride_a = a.stride_b = a.stride_c = 64;  // the 16th ends at 15 * 256 + 256 = 4096
  EXPECT_TRUE(checkBlas(a, allocs_, nullptr));
  a.batch = 17;
  EXPECT_EQ(checkBlas(a, allocs_, nullptr).code(), err::kInvalidValue);
  a.batch = 2;
  a.stride_a = -64;
  EXPECT_EQ(checkBlas(a, allocs_, nullptr).code(), err::kInvalidValue);
}

TEST_F(BlasChecks, UnsupportedTypesAreNotSupportedRatherThanInvalid) {
  BlasArgs a = gemm(4, 4, 4, 4);
  a.a_type = a.b_type = 3;  // CUDA_R_8I
  a.c_type = 10;
  EXPECT_EQ(checkBlas(a, allocs_, nullptr).code(), err::kNotSupported);
  BlasArgs d;
  d.op = BlasOp::kDot;
  d.a_type = d.b_type = kR16F;
  d.n = 4;
  d.x = d.y = base_;
  d.incx = d.incy = 1;
  EXPECT_EQ(checkBlas(d, allocs_, nullptr).code(), err::kNotSupported);
}

// Complex types: gemm of C/Z with complex scalars; herk, her2k and hemm of
// complex types only; the operations cuBLAS refuses for a complex rank-k
// update; herk's real scalars in device memory checked at their own size.
TEST_F(BlasChecks, ComplexCallsAreCheckedAtTheirElementSizeAndOperations) {
  BlasArgs g = gemm(16, 16, 16, 16);  // 2 KiB per complex float matrix, in 4 KiB
  g.a_type = g.b_type = g.c_type = kC32F;
  EXPECT_TRUE(checkBlas(g, allocs_, nullptr));
  g.m = g.k = g.lda = g.ldb = g.ldc = 23;  // 23 x 23 x 8 bytes: past 4 KiB
  g.n = 23;
  EXPECT_EQ(checkBlas(g, allocs_, nullptr).code(), err::kInvalidValue);
  BlasArgs h;
  h.op = BlasOp::kHerk;
  h.a_type = h.b_type = kC64F;
  h.uplo = 0;
  h.trans_a = kOpC;
  h.n = h.k = h.lda = h.ldc = 8;  // 8 x 8 x 16 = 1 KiB
  h.a = h.c = base_;
  h.alpha.device = h.beta.device = true;
  h.alpha.ptr = h.beta.ptr = base_ + buf_.size() - 8;  // a real double: fits
  EXPECT_TRUE(checkBlas(h, allocs_, nullptr));
  BlasArgs t = h;
  t.trans_a = kOpT;  // herk takes N or C
  EXPECT_EQ(checkBlas(t, allocs_, nullptr).code(), err::kInvalidValue);
  t = h;
  t.a_type = t.b_type = kR64F;  // herk of a real type
  EXPECT_EQ(checkBlas(t, allocs_, nullptr).code(), err::kNotSupported);
  t = h;
  t.op = BlasOp::kSyrk;  // a complex syrk of the conjugate transpose
  EXPECT_EQ(checkBlas(t, allocs_, nullptr).code(), err::kInvalidValue);
  t.trans_a = kOpT;
  t.alpha.ptr = t.beta.ptr = base_ + buf_.size() - 16;  // syrk's scalars are complex: 16 bytes
  EXPECT_TRUE(checkBlas(t, allocs_, nullptr));
  t.alpha.ptr = base_ + buf_.size() - 8;
  EXPECT_EQ(checkBlas(t, allocs_, nullptr).code(), err::kInvalidValue);
  // Level 1: dotc of a real type; a complex scal's alpha real or complex, nothing else.
  BlasArgs d;
  d.op = BlasOp::kDotc;
  d.a_type = d.b_type = kR32F;
  d.n = 4;
  d.x = d.y = base_;
  d.incx = d.incy = 1;
  EXPECT_EQ(checkBlas(d, allocs_, nullptr).code(), err::kNotSupported);
  d.a_type = d.b_type = kC32F;
  EXPECT_TRUE(checkBlas(d, allocs_, nullptr));
  EXPECT_EQ(blasResultBytes(d), 8u);
  d.op = BlasOp::kNrm2;
  EXPECT_EQ(blasResultBytes(d), 4u);  // (a real result)
  d.op = BlasOp::kScal;
  for (int32_t alpha : {kC32F, kR32F}) {
    d.c_type = alpha;
    EXPECT_TRUE(checkBlas(d, allocs_, nullptr)) << alpha;
  }
  d.c_type = kR64F;
  EXPECT_EQ(checkBlas(d, allocs_, nullptr).code(), err::kInvalidValue);
  // Level 2: a triangular solve's matrix and vector in range, its diagonal type checked; hemv of complex types only.
  BlasArgs v;
  v.op = BlasOp::kTrsv;
  v.a_type = v.b_type = kR64F;
  v.uplo = 1, v.trans_a = kOpC, v.diag = 1;
  v.n = v.lda = 16;  // 2 KiB
  v.a = v.x = base_;
  v.incx = 1;
  EXPECT_TRUE(checkBlas(v, allocs_, nullptr));
  v.diag = 2;
  EXPECT_EQ(checkBlas(v, allocs_, nullptr).code(), err::kInvalidValue);
  v.diag = 0;
  v.incx = 300;  // x runs past the allocation
  EXPECT_EQ(checkBlas(v, allocs_, nullptr).code(), err::kInvalidValue);
  v.incx = 1;
  v.op = BlasOp::kHemv;
  EXPECT_EQ(checkBlas(v, allocs_, nullptr).code(), err::kNotSupported);
}

TEST_F(BlasChecks, MatmulShapesEpiloguesAndAuxiliaryOutputsAreChecked) {
  LtArgs a;
  a.compute = kCompute32F;
  a.scale_type = kR32F;
  for (LtMatrix* x : {&a.a, &a.b, &a.c, &a.d}) {
    x->ptr = base_;
    x->type = kR32F;
    x->rows = x->cols = 8;
    x->ld = 8;
  }
  EXPECT_TRUE(checkLt(a, &allocs_, nullptr));
  a.b.rows = 7;  // op(A) is 8x8, op(B) 7x8
  EXPECT_NE(checkLt(a, &allocs_, nullptr).message().find("do not make a matrix product"), std::string::npos);
  a.b.rows = 8;
  a.epilogue = lt::kBias;
  EXPECT_NE(checkLt(a, &allocs_, nullptr).message().find("needs CUBLASLT_MATMUL_DESC_BIAS_POINTER"), std::string::npos);
  a.bias = base_;
  a.bias_type = kR32F;
  EXPECT_TRUE(checkLt(a, &allocs_, nullptr));
  a.epilogue = lt::kRelu | lt::kAux;
  a.aux = base_;
  a.aux_ld = 64;  // a ReLU mask's leading dimension must be a multiple of 128
  EXPECT_NE(checkLt(a, &allocs_, nullptr).message().find("multiple of 128"), std::string::npos);
  a.aux_ld = 128;
  EXPECT_TRUE(checkLt(a, &allocs_, nullptr));
  a.epilogue = 1024;
  EXPECT_EQ(checkLt(a, &allocs_, nullptr).code(), err::kNotSupported);
  a.epilogue = lt::kDefault;
  a.d.ptr = base_ + 4000;  // D runs past the allocation
  EXPECT_NE(checkLt(a, &allocs_, nullptr).message().find("D:"), std::string::npos);
  EXPECT_TRUE(checkLt(a, nullptr, nullptr));  // a heuristic query names no memory
}

TEST(SimBlas, GemmBatchedRefusesAPointerItsArrayHoldsOutsideTheSessionsMemory) {
  std::vector<float> m(16, 1.0f);
  uint64_t good = reinterpret_cast<uint64_t>(m.data());
  std::vector<uint64_t> as{good, good}, bs{good, 0xdead0000}, cs{good, good};
  BlasArgs a;
  a.op = BlasOp::kGemmBatched;
  a.a_type = a.b_type = a.c_type = kR32F;
  a.compute = kCompute32F;
  a.m = a.n = a.k = 2;
  a.lda = a.ldb = a.ldc = 2;
  a.batch = 2;
  a.a = reinterpret_cast<uint64_t>(as.data());
  a.b = reinterpret_cast<uint64_t>(bs.data());
  a.c = reinterpret_cast<uint64_t>(cs.data());
  float one = 1;
  std::memcpy(a.alpha.bytes, &one, 4);
  auto valid = [&](uint64_t p, uint64_t n) { return p >= good && p + n <= good + m.size() * 4; };
  Status s = simblas::run(a, valid, nullptr);
  EXPECT_EQ(s.code(), err::kInvalidValue);
  EXPECT_NE(s.message().find("B[1]"), std::string::npos) << s.message();
  EXPECT_EQ(m[0], 1.0f);  // nothing ran: the batch is checked before any matrix is written
}

TEST(SimBlas, SizesAndIncrementsPastItsLimitAreNotSupportedAndNothingRuns) {
  std::vector<float> x{2.0f}, y{1.0f};
  BlasArgs a;
  a.op = BlasOp::kAxpy;
  a.a_type = kR32F;
  a.n = 1;  // one element each: a huge increment still names one element
  a.x = reinterpret_cast<uint64_t>(x.data());
  a.y = reinterpret_cast<uint64_t>(y.data());
  a.incx = 1;
  a.incy = kMaxSimBlasDim + 1;
  float one = 1;
  std::memcpy(a.alpha.bytes, &one, 4);
  auto valid = [](uint64_t, uint64_t) { return true; };
  Status s = simblas::run(a, valid, nullptr);
  EXPECT_EQ(s.code(), err::kNotSupported);
  EXPECT_NE(s.message().find("kMaxSimBlasDim"), std::string::npos) << s.message();
  EXPECT_EQ(y[0], 1.0f);
  a.incy = kMaxSimBlasDim;  // at the limit it runs
  EXPECT_TRUE(simblas::run(a, valid, nullptr));
  EXPECT_EQ(y[0], 3.0f);
}

TEST(SimBlas, GeluGradientIsTheDerivativeOfGelu) {
  for (double x : {-3.0, -1.0, -0.1, 0.0, 0.3, 1.0, 2.5}) {
    double h = 1e-6, numeric = (simblas::gelu(x + h) - simblas::gelu(x - h)) / (2 * h);
    EXPECT_NEAR(simblas::geluGrad(x), numeric, 1e-6) << x;
  }
  EXPECT_NEAR(simblas::gelu(1.0), 0.8411919906, 1e-9);  // the tanh approximation cuBLASLt uses
}

}  // namespace
}  // namespace rgpu::server
