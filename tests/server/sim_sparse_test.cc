// The sim's cuSPARSE on host memory: SpMM of a Blocked-ELL matrix (its
// padding blocks skipped, a block column outside the matrix refused before
// anything is written), and SpGEMM's steps (server/sim/sim_spgemm.cc, common/sparse_args.h) on
// host memory: the count, C whole in rgpu's layout (C's index types and base,
// columns sorted), the structure alone, the values on C's pattern with beta;
// and what fails before anything is written: a buffer too small for the
// product, offsets that decrease, an index outside its matrix, a row past
// kMaxRowProducts.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "server/sim/sim_sparse.h"

namespace rgpu::server::simsparse {
namespace {

namespace sp = common::sparse;

template <typename P>
uint64_t at(P* p) {
  return reinterpret_cast<uint64_t>(p);
}

// A = [[1 0 2] [0 3 0]], B = [[4 0] [0 5] [6 7]]: A B = [[16 14] [0 15]], 4 products, 3 entries.
struct Fixture {
  std::vector<int32_t> a_off{0, 2, 3}, a_col{0, 2, 1}, b_off{0, 1, 2, 4}, b_col{0, 1, 0, 1};
  std::vector<float> a_val{1, 2, 3}, b_val{4, 5, 6, 7};
  std::vector<uint8_t> buffer = std::vector<uint8_t>(4096, 0xEE);

  sp::Args args(sp::Op op) {
    sp::Args a;
    a.op = op;
    a.a = sp::SpMat{sp::Format::kCsr, 2, 3, 3, at(a_off.data()), at(a_col.data()), at(a_val.data())};
    a.sb = sp::SpMat{sp::Format::kCsr, 3, 2, 4, at(b_off.data()), at(b_col.data()), at(b_val.data())};
    a.sc.rows = 2, a.sc.cols = 2;
    a.sc.offset_type = a.sc.index_type = sp::kIndex64;
    a.sc.base = 1;
    const float two = 2;
    std::memcpy(a.alpha.bytes, &two, sizeof two);
    a.buffer = at(buffer.data());
    a.buffer_size = buffer.size();
    return a;
  }
  sp::ProductHeader header() const {
    sp::ProductHeader h;
    std::memcpy(&h, buffer.data(), sizeof h);
    return h;
  }
  template <typename T>
  std::vector<T> read(uint64_t offset, size_t n) const {
    std::vector<T> v(n);
    std::memcpy(v.data(), buffer.data() + offset, n * sizeof(T));
    return v;
  }
};

TEST(SimSpGemm, CountsTheProductsAndTheEntries) {
  Fixture f;
  sp::Args a = f.args(sp::Op::kSpGemmCount);
  ASSERT_TRUE(sp::check(a));
  ASSERT_TRUE(runSpGemm(a));
  EXPECT_EQ(f.header().magic, sp::ProductHeader::kMagic);
  EXPECT_EQ(f.header().products, 4);
  EXPECT_EQ(f.header().nnz, 3);
  EXPECT_EQ(f.header().rows, 2);
}

TEST(SimSpGemm, ComputesCInItsIndexTypesAndBaseWithSortedColumns) {
  Fixture f;
  sp::Args a = f.args(sp::Op::kSpGemmCompute);
  ASSERT_TRUE(runSpGemm(a));
  ASSERT_EQ(f.header().nnz, 3);
  const sp::ProductLayout l = sp::productLayout(a.sc, 3, true);
  EXPECT_EQ(l.offsets % 256, 0u);
  EXPECT_EQ(l.indices % 256, 0u);
  EXPECT_EQ(l.values % 256, 0u);
  EXPECT_EQ(f.read<int64_t>(l.offsets, 3), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(f.read<int64_t>(l.indices, 3), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(f.read<float>(l.values, 3), (std::vector<float>{32, 28, 30}));  // alpha = 2
  EXPECT_EQ(f.buffer[l.bytes], 0xEE);  // nothing past the layout
  // The structure alone: no values region.
  Fixture g;
  sp::Args s = g.args(sp::Op::kSpGemmStructure);
  ASSERT_TRUE(runSpGemm(s));
  const sp::ProductLayout ls = sp::productLayout(s.sc, 3, false);
  EXPECT_EQ(ls.bytes, ls.values);
  EXPECT_EQ(g.read<int64_t>(ls.indices, 3), (std::vector<int64_t>{1, 2, 2}));
  EXPECT_EQ(g.buffer[ls.values], 0xEE);
}

TEST(SimSpGemm, ComputesValuesOnCsPatternWithBeta) {
  Fixture f;
  // C's pattern: (0,1), (1,0), (1,1) from 0 -- (1,0) is not in A B (0), (0,0) is dropped.
  std::vector<int32_t> c_off{0, 1, 3}, c_col{1, 0, 1};
  std::vector<float> c_val{1, 1, 1};
  sp::Args a = f.args(sp::Op::kSpGemmValues);
  a.sc = sp::SpMat{sp::Format::kCsr, 2, 2, 3, at(c_off.data()), at(c_col.data()), at(c_val.data())};
  a.buffer = 0, a.buffer_size = 0;
  const float beta = 0.5f;
  std::memcpy(a.beta.bytes, &beta, sizeof beta);
  ASSERT_TRUE(sp::check(a));
  ASSERT_TRUE(runSpGemm(a));
  EXPECT_EQ(c_val, (std::vector<float>{2 * 14 + 0.5f, 0.5f, 2 * 15 + 0.5f}));
}

TEST(SimSpGemm, RefusesBeforeWritingAnything) {
  {  // A buffer a byte short of the product.
    Fixture f;
    sp::Args a = f.args(sp::Op::kSpGemmCompute);
    a.buffer_size = sp::productLayout(a.sc, 3, true).bytes - 1;
    Status s = runSpGemm(a);
    EXPECT_EQ(s.code(), err::kInvalidValue);
    EXPECT_NE(s.message().find("the product has 3 entries"), std::string::npos) << s.message();
    EXPECT_EQ(f.buffer[0], 0xEE);
  }
  {  // Offsets that decrease.
    Fixture f;
    f.b_off = {0, 2, 1, 4};
    Status s = runSpGemm(f.args(sp::Op::kSpGemmCount));
    EXPECT_NE(s.message().find("B's row offset 2 is 1"), std::string::npos) << s.message();
    EXPECT_EQ(f.buffer[0], 0xEE);
  }
  {  // A column index outside A.
    Fixture f;
    f.a_col = {0, 3, 1};
    Status s = runSpGemm(f.args(sp::Op::kSpGemmCompute));
    EXPECT_NE(s.message().find("A's column index 3 of entry 1 lies outside its 3 columns"), std::string::npos)
        << s.message();
    EXPECT_EQ(f.buffer[0], 0xEE);
  }
  {  // A row of more than kMaxRowProducts: refused before its products are gathered.
    Fixture f;
    const int64_t wide = sp::kMaxRowProducts / 2 + 1;
    std::vector<int64_t> b_off{0, wide};
    std::vector<int32_t> a_off{0, 2}, a_col{0, 0};
    sp::Args a = f.args(sp::Op::kSpGemmCount);
    a.a = sp::SpMat{sp::Format::kCsr, 1, 1, 2, at(a_off.data()), at(a_col.data()), 0};
    a.sb = sp::SpMat{sp::Format::kCsr, 1, wide, wide, at(b_off.data()), 0, 0, sp::kIndex64, sp::kIndex32};
    a.sc.rows = 1, a.sc.cols = wide;
    Status s = runSpGemm(a);
    EXPECT_NE(s.message().find("row 0 of A B takes more than 4194304 products (kMaxRowProducts"), std::string::npos)
        << s.message();
    EXPECT_EQ(f.buffer[0], 0xEE);
  }
}

TEST(SimSpGemm, ChecksRefuseWhatCusparseRefuses) {
  Fixture f;
  sp::Args a = f.args(sp::Op::kSpGemmCompute);
  EXPECT_TRUE(sp::check(a));
  a.op_a = sp::kOpT;
  EXPECT_EQ(sp::check(a).code(), err::kNotSupported);
  a.op_a = sp::kOpN;
  a.sb.format = sp::Format::kCoo;
  EXPECT_EQ(sp::check(a).code(), err::kNotSupported);
  a.sb.format = sp::Format::kCsr;
  a.sc.value_type = sp::kR64F;
  EXPECT_EQ(sp::check(a).code(), err::kNotSupported);
  a.sc.value_type = sp::kR32F;
  a.sc.cols = 3;
  EXPECT_EQ(sp::check(a).code(), err::kInvalidValue);
  a.sc.cols = 2;
  a.buffer_size = sp::kHeaderBytes - 1;
  EXPECT_EQ(sp::check(a).code(), err::kInvalidValue);
  // The ranges: A's and B's arrays, the buffer; values only where the step reads them.
  a.buffer_size = 1000;
  std::map<std::string, uint64_t> bytes;
  for (const sp::Range& r : sp::ranges(a)) bytes[r.what] = r.bytes;
  EXPECT_EQ(bytes["A's row offsets"], 3u * 4);
  EXPECT_EQ(bytes["B's column indices"], 4u * 4);
  EXPECT_EQ(bytes["B's values"], 4u * 4);
  EXPECT_EQ(bytes["external buffer"], 1000u);
  a.op = sp::Op::kSpGemmCount;
  bytes.clear();
  for (const sp::Range& r : sp::ranges(a)) bytes[r.what] = r.bytes;
  EXPECT_EQ(bytes.count("A's values"), 0u);
  a.op = sp::Op::kSpGemmValues;
  a.sc.nnz = 5;
  bytes.clear();
  for (const sp::Range& r : sp::ranges(a)) bytes[r.what] = r.bytes;
  EXPECT_EQ(bytes["C's values"], 5u * 4);
  EXPECT_EQ(bytes["C's row offsets"], 3u * 8);
  EXPECT_EQ(bytes.count("external buffer"), 0u);
}

// A = 4 x 4 in blocks of 2, one slot per block-row: block-row 0 at block column 1, block-row 1 none (-1).
TEST(SimSparse, BlockedEllSpMMSkipsPaddingAndRefusesABlockOutside) {
  std::vector<int32_t> colind{1, -1};
  std::vector<float> values{1, 2, 3, 4, 9, 9, 9, 9};  // (the padding block's values are never read)
  std::vector<float> b(4 * 1), c{5, 5, 5, 5};
  for (int i = 0; i < 4; ++i) b[i] = static_cast<float>(i + 1);
  sp::Args a;
  a.op = sp::Op::kSpMM;
  a.a = sp::SpMat{sp::Format::kBlockedEll, 4, 4, 16, 0, at(colind.data()), at(values.data())};
  a.a.block = 2, a.a.ell_cols = 2;
  a.b = sp::DnMat{4, 1, 4, at(b.data()), sp::kR32F, sp::kOrderCol};
  a.c = sp::DnMat{4, 1, 4, at(c.data()), sp::kR32F, sp::kOrderCol};
  const float one = 1;
  std::memcpy(a.alpha.bytes, &one, sizeof one);
  ASSERT_TRUE(sp::check(a));
  ASSERT_TRUE(run(a));
  // Rows 0 and 1 = [[1 2] [3 4]] times b's rows 2 and 3 (3, 4); beta = 0.
  EXPECT_EQ(c, (std::vector<float>{11, 25, 0, 0}));
  colind[1] = 2;  // block column 2 of 2
  c = {5, 5, 5, 5};
  Status s = run(a);
  EXPECT_NE(s.message().find("block column 2 of block 1 lies outside the matrix's 2"), std::string::npos)
      << s.message();
  EXPECT_EQ(c, (std::vector<float>{5, 5, 5, 5}));
}

}  // namespace
}  // namespace rgpu::server::simsparse
