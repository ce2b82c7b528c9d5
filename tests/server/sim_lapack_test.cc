// The sim's LAPACK calls (server/sim/sim_solver.cc, sim_blas_batched.cc) on
// pivots the program gives: LAPACK's getrs and getri swap rows and columns by
// them without checking, so a pivot outside 1..n would read and write outside
// the matrix (a fuzzed cusolverDnZgetrs did, in OpenBLAS's zlaswp). Each is
// checked first: the call is refused, naming the pivot, and nothing is written.
#include <gtest/gtest.h>

#include <complex>
#include <cstdint>
#include <string>
#include <vector>

#include "server/backend/blas.h"
#include "server/sim/sim_blas.h"
#include "server/sim/sim_solver.h"

namespace rgpu::server {
namespace {

using cdouble = std::complex<double>;

template <typename P>
uint64_t at(P* p) {
  return reinterpret_cast<uint64_t>(p);
}

namespace sv = common::solver;

// getrs of the identity (complex double, 3 by 3, one right-hand side) with these pivots.
Status getrs(std::vector<int> ipiv, std::vector<cdouble>& b) {
  std::vector<cdouble> a{1, 0, 0, 0, 1, 0, 0, 0, 1};
  int info = -7;
  sv::Args s;
  s.op = sv::Op::kGetrs, s.type = sv::kC64F;
  s.n = 3, s.nrhs = 1, s.a = at(a.data()), s.lda = 3, s.ipiv = at(ipiv.data()), s.b = at(b.data()), s.ldb = 3;
  s.info = at(&info);
  return simsolver::run(s);
}

TEST(SimLapack, GetrsRefusesAPivotOutsideTheMatrixBeforeItSwaps) {
  std::vector<cdouble> b{1, 2, 3};
  EXPECT_TRUE(getrs({1, 3, 3}, b));  // (rows 2 and 3 swapped)
  EXPECT_EQ(b, (std::vector<cdouble>{1, 3, 2}));
  for (std::vector<int> bad : {std::vector<int>{1, 0, 3}, {1, 2, 4}, {-5, 2, 3}, {1, 2, 1 << 30}}) {
    std::vector<cdouble> c{1, 2, 3};
    Status s = getrs(bad, c);
    EXPECT_EQ(s.code(), err::kInvalidValue);
    EXPECT_NE(s.message().find("not a row of the 3-row matrix"), std::string::npos) << s.message();
    EXPECT_EQ(c, (std::vector<cdouble>{1, 2, 3}));  // nothing written
  }
}

TEST(SimLapack, BatchedGetrsAndGetriRefuseAPivotOutsideTheMatrixBeforeAnyIsRun) {
  for (BlasOp op : {BlasOp::kGetrsBatched, BlasOp::kGetriBatched}) {
    SCOPED_TRACE(blasOpName(op));
    // Two identities; the second's pivots name row 9 of 2.
    std::vector<cdouble> m0{1, 0, 0, 1}, m1{1, 0, 0, 1}, r0{5, 6, 7, 8}, r1{5, 6, 7, 8};
    std::vector<uint64_t> as{at(m0.data()), at(m1.data())}, bs{at(r0.data()), at(r1.data())};
    std::vector<int> piv{1, 2, 9, 2}, info{-1, -1};
    BlasArgs a;
    a.op = op;
    a.a_type = a.b_type = 5;  // CUDA_C_64F
    a.n = 2, a.k = 2, a.lda = a.ldb = 2, a.batch = 2;
    a.a = at(as.data()), a.b = at(bs.data()), a.x = at(piv.data()), a.c = at(info.data());
    const simblas::Valid valid = [](uint64_t, uint64_t) { return true; };
    Status s = simblas::runBatchedFactorization(a, valid);
    EXPECT_EQ(s.code(), err::kInvalidValue);
    EXPECT_NE(s.message().find("pivot [1][0] is 9, not a row of the 2-row matrix"), std::string::npos)
        << s.message();
    EXPECT_EQ(r0, (std::vector<cdouble>{5, 6, 7, 8}));  // not even the first was run
    EXPECT_EQ(info, (std::vector<int>{-1, -1}));
    piv = {1, 2, 2, 2};
    EXPECT_TRUE(simblas::runBatchedFactorization(a, valid));
    EXPECT_EQ(info, (std::vector<int>{0, 0}));
  }
}

}  // namespace
}  // namespace rgpu::server
