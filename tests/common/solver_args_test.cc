// cuSOLVER's dense calls (common/solver_args.h): what cuSOLVER refuses, and
// the device memory each routine reads and writes -- the ranges the server
// checks every call against.
#include "common/solver_args.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace rgpu::common::solver {
namespace {

Args call(Op op, int32_t type) {
  Args a;
  a.op = op;
  a.type = type;
  a.info = 0x1000;
  return a;
}

std::map<std::string, uint64_t> bytes(const Args& a) {
  std::map<std::string, uint64_t> out;
  for (const Range& r : ranges(a)) out[r.what] = r.bytes;
  return out;
}

TEST(SolverArgs, RefusesWhatCusolverRefuses) {
  Args potrf = call(Op::kPotrf, kR64F);
  potrf.n = 8;
  potrf.lda = 4;
  EXPECT_EQ(check(potrf).code(), err::kInvalidValue);  // lda < n
  potrf.lda = 8;
  EXPECT_TRUE(check(potrf));
  potrf.uplo = 2;
  EXPECT_FALSE(check(potrf));
  potrf.uplo = 0;
  potrf.n = -1;
  EXPECT_FALSE(check(potrf));
  potrf.n = int64_t{1} << 31;  // past int
  potrf.lda = potrf.n;
  EXPECT_FALSE(check(potrf));
  Args svd = call(Op::kGesvd, kC32F);
  svd.m = 4;
  svd.n = 8;
  svd.lda = 4;
  EXPECT_FALSE(check(svd));  // m < n
  svd.m = 8;
  svd.lda = 8;
  svd.jobu = svd.jobvt = 'O';
  EXPECT_FALSE(check(svd));  // both overwrite A
  svd.jobu = 'S';
  svd.ldu = 8;
  svd.jobvt = 'X';
  EXPECT_FALSE(check(svd));
  svd.jobvt = 'A';
  svd.ldvt = 7;
  EXPECT_FALSE(check(svd));  // ldvt < n
  svd.ldvt = 8;
  EXPECT_TRUE(check(svd));
  Args q = call(Op::kOrmqr, kR32F);
  q.m = 10;
  q.n = 4;
  q.k = 11;
  q.lda = q.ldb = 10;
  EXPECT_FALSE(check(q));  // k > m
  q.k = 4;
  q.trans = 2;
  EXPECT_FALSE(check(q));  // a real Q is not conjugated
  q.type = kC32F;
  EXPECT_TRUE(check(q));
  Args unknown = call(Op::kPotrf, 2);
  EXPECT_FALSE(check(unknown));
}

TEST(SolverArgs, EachRoutineSpansItsMatricesWithTheirLeadingDimensions) {
  Args getrf = call(Op::kGetrf, kC64F);
  getrf.m = 10;
  getrf.n = 6;
  getrf.lda = 12;
  getrf.a = 0x2000;
  getrf.ipiv = 0x3000;
  getrf.work = 0x4000;
  getrf.lwork = 5;
  auto b = bytes(getrf);
  EXPECT_EQ(b["A"], (12u * 5 + 10) * 16);
  EXPECT_EQ(b["devIpiv"], 6u * 4);
  EXPECT_EQ(b["workspace"], 5u * 16);
  EXPECT_EQ(b["devInfo"], 4u);
  getrf.ipiv = 0;  // no pivoting: no pivot array
  EXPECT_EQ(bytes(getrf).count("devIpiv"), 0u);
  Args svd = call(Op::kGesvd, kR32F);
  svd.m = 9;
  svd.n = 5;
  svd.lda = svd.ldu = 9;
  svd.ldvt = 5;
  svd.jobu = 'S';
  svd.jobvt = 'A';
  svd.a = svd.w = svd.u = svd.vt = svd.rwork = 0x2000;
  b = bytes(svd);
  EXPECT_EQ(b["U"], (9u * 4 + 9) * 4);  // 9 x min(m, n)
  EXPECT_EQ(b["VT"], (5u * 4 + 5) * 4);  // n x n
  EXPECT_EQ(b["S"], 5u * 4);
  EXPECT_EQ(b["rwork"], 4u * 4);
  svd.jobu = 'N';
  EXPECT_EQ(bytes(svd).count("U"), 0u);
  Args q = call(Op::kOrmqr, kR64F);
  q.side = 1;  // Q from the right: A is n x k
  q.m = 7;
  q.n = 5;
  q.k = 3;
  q.lda = 5;
  q.ldb = 7;
  b = bytes(q);
  EXPECT_EQ(b["A"], (5u * 2 + 5) * 8);
  EXPECT_EQ(b["tau"], 3u * 8);
  EXPECT_EQ(b["C"], (7u * 4 + 7) * 8);
  Args evd = call(Op::kSyevd, kC32F);
  evd.n = 4;
  evd.lda = 4;
  b = bytes(evd);
  EXPECT_EQ(b["W"], 4u * 4);  // real eigenvalues of a complex matrix
  // The largest dimensions check() accepts span more than 2^64 bytes: clamped, never wrapped.
  Args big = call(Op::kPotrs, kC64F);
  big.n = big.nrhs = big.lda = big.ldb = kMaxDim;
  ASSERT_TRUE(check(big));
  EXPECT_EQ(bytes(big)["B"], UINT64_MAX);
}

}  // namespace
}  // namespace rgpu::common::solver
