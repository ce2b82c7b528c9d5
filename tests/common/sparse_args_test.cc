// cuSPARSE's SpMV and SpMM (common/sparse_args.h): what cuSPARSE refuses,
// and the device memory each call reads and writes -- the ranges the server
// checks every call against.
#include "common/sparse_args.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace rgpu::common::sparse {
namespace {

Args spmv(int64_t rows, int64_t cols, int64_t nnz) {
  Args a;
  a.a.rows = rows, a.a.cols = cols, a.a.nnz = nnz;
  a.a.offsets = 0x1000, a.a.indices = 0x2000, a.a.values = 0x3000;
  a.b = DnMat{cols, 1, cols, 0x4000, kR32F, kOrderCol};
  a.c = DnMat{rows, 1, rows, 0x5000, kR32F, kOrderCol};
  return a;
}

std::map<std::string, uint64_t> bytes(const Args& a) {
  std::map<std::string, uint64_t> out;
  for (const Range& r : ranges(a)) out[r.what] = r.bytes;
  return out;
}

TEST(SparseArgs, RefusesWhatCusparseRefuses) {
  Args a = spmv(10, 8, 20);
  EXPECT_TRUE(check(a));
  a.op_a = kOpT;  // op(A) is 8 x 10: x must have 10 elements
  EXPECT_EQ(check(a).code(), err::kInvalidValue);
  a.op_a = kOpN;
  a.b.value_type = 2;  // CUDA_R_16F
  EXPECT_EQ(check(a).code(), err::kNotSupported);
  a.b.value_type = kR64F;  // mixed
  EXPECT_EQ(check(a).code(), err::kNotSupported);
  a.b.value_type = kR32F;
  a.a.index_type = 1;  // CUSPARSE_INDEX_16U
  EXPECT_EQ(check(a).code(), err::kNotSupported);
  a.a.index_type = kIndex32;
  a.a.base = 2;
  EXPECT_FALSE(check(a));
  a.a.base = 1;
  a.a.nnz = -1;
  EXPECT_FALSE(check(a));
  a.a.nnz = 20;
  a.c.ld = 0;
  EXPECT_FALSE(check(a));
  Args m = spmv(10, 8, 20);
  m.op = Op::kSpMM;
  m.b = DnMat{8, 4, 8, 0x4000, kR32F, kOrderCol};
  m.c = DnMat{10, 4, 10, 0x5000, kR32F, kOrderCol};
  EXPECT_TRUE(check(m));
  m.op_b = kOpT;  // op(B) is 4 x 8
  EXPECT_FALSE(check(m));
  m.op_b = kOpC;  // not for B
  EXPECT_FALSE(check(m));
  m.op_b = kOpN;
  m.c.order = kOrderRow;  // row-major: ld >= columns
  m.c.ld = 3;
  EXPECT_FALSE(check(m));
}

TEST(SparseArgs, EachFormatSpansItsArraysAndTheDenseOperands) {
  Args a = spmv(10, 8, 20);
  a.a.offset_type = kIndex64;
  auto b = bytes(a);
  EXPECT_EQ(b["row offsets"], 11u * 8);
  EXPECT_EQ(b["indices"], 20u * 4);
  EXPECT_EQ(b["values"], 20u * 4);
  EXPECT_EQ(b["X"], 8u * 4);
  EXPECT_EQ(b["Y"], 10u * 4);
  a.a.format = Format::kCsc;
  EXPECT_EQ(bytes(a)["column offsets"], 9u * 8);
  a.a.format = Format::kCoo;
  a.a.index_type = kIndex64;
  b = bytes(a);
  EXPECT_EQ(b["row indices"], 20u * 8);
  EXPECT_EQ(b["indices"], 20u * 8);
  // Device scalars and the external buffer.
  a.alpha.device = a.beta.device = true;
  a.alpha.ptr = 0x6000, a.beta.ptr = 0x6008;
  a.buffer = 0x7000, a.buffer_size = 1;
  b = bytes(a);
  EXPECT_EQ(b["alpha"], 4u);
  EXPECT_EQ(b["external buffer"], 1u);
  // A row-major dense matrix spans ld (rows - 1) + cols.
  Args m = spmv(10, 8, 20);
  m.op = Op::kSpMM;
  m.b = DnMat{8, 4, 6, 0x4000, kR32F, kOrderRow};
  m.c = DnMat{10, 4, 12, 0x5000, kR32F, kOrderCol};
  ASSERT_TRUE(check(m));
  b = bytes(m);
  EXPECT_EQ(b["B"], (6u * 7 + 4) * 4);
  EXPECT_EQ(b["C"], (12u * 3 + 10) * 4);
}

TEST(SparseArgs, ABlockedEllMatrixIsSpMMsWithItsBlocksInside) {
  Args m = spmv(64, 48, 64 * 24);
  m.op = Op::kSpMM;
  m.a.format = Format::kBlockedEll;
  m.a.block = 8, m.a.ell_cols = 24;
  m.a.index_type = kIndex64;
  m.b = DnMat{48, 4, 48, 0x4000, kR32F, kOrderCol};
  m.c = DnMat{64, 4, 64, 0x5000, kR32F, kOrderCol};
  ASSERT_TRUE(check(m));
  auto b = bytes(m);
  EXPECT_EQ(b["block columns"], 8u * 3 * 8);
  EXPECT_EQ(b["values"], 64u * 24 * 4);
  EXPECT_EQ(b.count("row offsets"), 0u);
  Args v = m;
  v.op = Op::kSpMV;
  v.b = DnMat{48, 1, 48, 0x4000, kR32F, kOrderCol};
  v.c = DnMat{64, 1, 64, 0x5000, kR32F, kOrderCol};
  EXPECT_EQ(check(v).code(), err::kNotSupported);  // SpMV takes no Blocked-ELL matrix
  m.op_a = kOpT;
  m.b.rows = 64, m.b.ld = 64, m.c.rows = 48, m.c.ld = 48;
  EXPECT_EQ(check(m).code(), err::kNotSupported);
  m = spmv(64, 48, 0);
  m.op = Op::kSpMM;
  m.a.format = Format::kBlockedEll;
  m.b = DnMat{48, 4, 48, 0x4000, kR32F, kOrderCol};
  m.c = DnMat{64, 4, 64, 0x5000, kR32F, kOrderCol};
  for (auto [block, ell_cols] : {std::pair<int64_t, int64_t>{0, 24}, {5, 24}, {8, 20}, {8, 56}}) {
    m.a.block = block, m.a.ell_cols = ell_cols;
    EXPECT_EQ(check(m).code(), err::kInvalidValue) << block << " " << ell_cols;
  }
  // rows x ell_cols past kMaxDim (never a wrapped span).
  m.a.rows = m.c.rows = m.c.ld = kMaxDim / 8;
  m.a.cols = m.b.rows = m.b.ld = 1024;
  m.a.block = 8, m.a.ell_cols = 1024;
  EXPECT_EQ(check(m).code(), err::kInvalidValue);
}

TEST(SparseArgs, AnSpGemmStepTravelsWithItsThreeMatrices) {
  Args a;
  a.op = Op::kSpGemmValues;
  a.a = SpMat{Format::kCsr, 4, 5, 6, 0x1000, 0x2000, 0x3000};
  a.sb = SpMat{Format::kCsr, 5, 7, 8, 0x4000, 0x5000, 0x6000, kIndex64, kIndex64, 1, kC64F};
  a.sc = SpMat{Format::kCsr, 4, 7, 9, 0x7000, 0x8000, 0x9000, kIndex32, kIndex64, 0, kR64F};
  capnp::MallocMessageBuilder msg;
  toWire(a, msg.initRoot<wire::Sparse>());
  const Args b = fromWire(msg.getRoot<wire::Sparse>().asReader());
  EXPECT_EQ(b.op, Op::kSpGemmValues);
  EXPECT_EQ(b.sb.cols, 7);
  EXPECT_EQ(b.sb.offset_type, kIndex64);
  EXPECT_EQ(b.sb.base, 1);
  EXPECT_EQ(b.sb.value_type, kC64F);
  EXPECT_EQ(b.sc.nnz, 9);
  EXPECT_EQ(b.sc.indices, 0x8000u);
  EXPECT_EQ(b.sc.index_type, kIndex64);
  EXPECT_EQ(b.sc.value_type, kR64F);
  EXPECT_STREQ(opName(b.op), "cusparseSpGEMMreuse_compute");
}

}  // namespace
}  // namespace rgpu::common::sparse
