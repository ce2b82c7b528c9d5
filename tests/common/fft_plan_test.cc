// cuFFT plans (common/fft_plan.h): what cuFFT refuses, and where a transform
// reads and writes -- the ranges the server checks every transform against.
#include "common/fft_plan.h"

#include <gtest/gtest.h>

namespace rgpu::common::fft {
namespace {

Plan basic(int32_t type, std::initializer_list<int64_t> n, int64_t batch = 1) {
  Plan p;
  p.type = type;
  p.rank = static_cast<int32_t>(n.size());
  int k = 0;
  for (int64_t v : n) p.n[k++] = v;
  p.batch = batch;
  return p;
}

TEST(FftPlan, RefusesWhatCufftRefuses) {
  EXPECT_EQ(check(basic(kC2C, {0})).problem, Problem::kInvalidSize);
  EXPECT_EQ(check(basic(kC2C, {8}, 0)).problem, Problem::kInvalidSize);
  EXPECT_EQ(check(basic(7, {8})).problem, Problem::kInvalidType);
  Plan four = basic(kC2C, {2, 2, 2});
  four.rank = 4;
  EXPECT_EQ(check(four).problem, Problem::kInvalidSize);
  // Sizes whose product passes 2^40 elements, however each is bounded.
  EXPECT_EQ(check(basic(kZ2Z, {1 << 20, 1 << 20, 2})).problem, Problem::kInvalidSize);
  EXPECT_TRUE(check(basic(kZ2Z, {1 << 20, 1 << 20})));
  Plan adv = basic(kC2C, {16, 16});
  adv.advanced = true;
  adv.inembed[1] = adv.onembed[1] = 16;
  adv.istride = 0;
  EXPECT_EQ(check(adv).problem, Problem::kInvalidValue);  // a stride of 0
  adv.istride = 1;
  adv.idist = -1;
  EXPECT_EQ(check(adv).problem, Problem::kInvalidValue);
  adv.idist = 256;
  adv.onembed[1] = 0;
  EXPECT_EQ(check(adv).problem, Problem::kInvalidValue);  // an embedding of 0
  adv.onembed[1] = 16;
  adv.ostride = int64_t{1} << 37;  // times the embedding: past 2^40 elements
  EXPECT_EQ(check(adv).problem, Problem::kInvalidValue);
  adv.ostride = 1;
  EXPECT_TRUE(check(adv));
}

TEST(FftPlan, BasicLayoutsAreRowMajorAndPadTheRealSideInPlace) {
  // C2C 2D, batch 3: 8 x 6 complex each, one after another.
  Layout c = layoutOf(basic(kC2C, {8, 6}, 3), false);
  EXPECT_EQ(c.is[0], 6);
  EXPECT_EQ(c.is[1], 1);
  EXPECT_EQ(c.idist, 48);
  EXPECT_EQ(inputBytes(c), 3u * 48 * 8);
  EXPECT_EQ(outputBytes(c), 3u * 48 * 8);
  // R2C 2D 24 x 20 out of place: 20 reals a row in, 11 complex a row out.
  Layout r = layoutOf(basic(kR2C, {24, 20}), false);
  EXPECT_EQ(r.is[0], 20);
  EXPECT_EQ(r.os[0], 11);
  EXPECT_EQ(inputBytes(r), 24u * 20 * 4);
  EXPECT_EQ(outputBytes(r), 24u * 11 * 8);
  // In place: the real rows padded to 22 reals (the complex rows' bytes).
  Layout rin = layoutOf(basic(kR2C, {24, 20}), true);
  EXPECT_EQ(rin.is[0], 22);
  EXPECT_EQ(rin.idist, 24 * 22);
  EXPECT_EQ(inputBytes(rin), 23u * 22 * 4 + 20 * 4);  // the last row's padding is not read
  EXPECT_EQ(outputBytes(rin), 24u * 11 * 8);
  // Z2D 1D 15, batch 2, in place: 8 complex in, reals padded to 16 a batch.
  Layout z = layoutOf(basic(kZ2D, {15}, 2), true);
  EXPECT_EQ(z.idist, 8);
  EXPECT_EQ(z.odist, 16);
  EXPECT_EQ(inputBytes(z), 16u * 16);
  EXPECT_EQ(outputBytes(z), (16u + 15) * 8);
}

TEST(FftPlan, AdvancedLayoutsSpanWhatTheirStridesAndDistancesSay) {
  // 5 interleaved signals of 64 into contiguous rows (cufft_check's case).
  Plan p = basic(kC2C, {64}, 5);
  p.advanced = true;
  p.inembed[0] = p.onembed[0] = 64;
  p.istride = 5;
  p.idist = 1;
  p.ostride = 1;
  p.odist = 64;
  Layout l = layoutOf(p, false);
  EXPECT_EQ(l.is[0], 5);
  EXPECT_EQ(inputBytes(l), (63u * 5 + 4 + 1) * 8);
  EXPECT_EQ(outputBytes(l), 5u * 64 * 8);
  // 2D with a padded input embedding and a stride of 2: element (i, j) at 2 (j + 10 i).
  Plan q = basic(kD2Z, {4, 8}, 2);
  q.advanced = true;
  q.inembed[1] = 10;
  q.onembed[1] = 5;
  q.istride = 2;
  q.idist = 100;
  q.ostride = 1;
  q.odist = 20;
  Layout m = layoutOf(q, false);
  EXPECT_EQ(m.is[0], 20);
  EXPECT_EQ(m.is[1], 2);
  EXPECT_EQ(m.os[0], 5);
  EXPECT_EQ(inputBytes(m), (100u + 3 * 20 + 7 * 2 + 1) * 8);
  EXPECT_EQ(outputBytes(m), (20u + 3 * 5 + 4 + 1) * 16);
  // The largest layout check() accepts: no overflow, each side within 2^46 bytes
  // (what the session allows) or reported as more.
  Plan big = basic(kZ2Z, {1 << 20, 1 << 20});
  big.advanced = true;
  big.inembed[1] = big.onembed[1] = 1 << 20;
  big.batch = kMaxExtent;
  big.idist = big.odist = kMaxExtent;
  ASSERT_TRUE(check(big));
  EXPECT_GT(inputBytes(layoutOf(big, false)), kMaxSpanBytes);
}

}  // namespace
}  // namespace rgpu::common::fft
