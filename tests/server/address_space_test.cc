// Address windows and RangeAllocator (server/backend/address_space.h).
#include "server/backend/address_space.h"

#include <gtest/gtest.h>

#include <vector>

namespace rgpu::server {
namespace {

TEST(RangeAllocator, TakesTheSmallestFittingBlockAtTheAlignmentAsked) {
  RangeAllocator r(0x10000, 0x10000);
  auto a = r.allocate(0x100, 0x100);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, 0x10000u);
  // 0x1000-aligned: the block after `a` starts at 0x10100, so the first fit is 0x11000
  // and the gap before it stays free for smaller requests.
  auto b = r.allocate(0x1000, 0x1000);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, 0x11000u);
  auto c = r.allocate(0x200, 0x100);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, 0x10100u) << "the gap left by the alignment is used";
  EXPECT_FALSE(r.allocate(0, 0x100));
  EXPECT_FALSE(r.allocate(0x100, 3)) << "not a power of two";
}

TEST(RangeAllocator, FreedBlocksMergeAndExhaustionIsNoAllocation) {
  RangeAllocator r(0, 0x4000);
  std::vector<uint64_t> got;
  for (int i = 0; i < 4; ++i) {
    auto p = r.allocate(0x1000, 0x1000);
    ASSERT_TRUE(p);
    got.push_back(*p);
  }
  EXPECT_FALSE(r.allocate(1, 1)) << "full";
  EXPECT_EQ(r.free(got[1]), 0x1000u);
  EXPECT_EQ(r.free(got[1]), 0u) << "freed twice";
  EXPECT_EQ(r.free(got[2] + 8), 0u) << "not an allocation";
  EXPECT_EQ(r.free(got[2]), 0x1000u);
  auto two = r.allocate(0x2000, 0x1000);
  ASSERT_TRUE(two) << "the two freed neighbours merged";
  EXPECT_EQ(*two, got[1]);
  EXPECT_FALSE(r.empty());
  for (uint64_t p : {got[0], got[3], *two}) EXPECT_NE(r.free(p), 0u);
  EXPECT_TRUE(r.empty());
  auto whole = r.allocate(0x4000, 0x4000);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, 0u);
}

TEST(RangeAllocator, PlacesAnAllocationExactlyWhereAskedOrNotAtAll) {
  RangeAllocator r(0x10000, 0x10000);
  EXPECT_TRUE(r.allocateAt(0x18000, 0x1000));
  EXPECT_FALSE(r.allocateAt(0x18800, 0x100)) << "inside the first";
  EXPECT_FALSE(r.allocateAt(0x17f00, 0x200)) << "overlaps its start";
  EXPECT_FALSE(r.allocateAt(0x1ff00, 0x200)) << "past the range";
  EXPECT_FALSE(r.allocateAt(0xff00, 0x200)) << "before the range";
  EXPECT_FALSE(r.allocateAt(0x10000, 0));
  EXPECT_TRUE(r.allocateAt(0x10000, 0x100)) << "at the very start";
  EXPECT_TRUE(r.allocateAt(0x19000, 0x7000)) << "up to the very end";
  // What is left around them is still free, and best fit still works there.
  auto a = r.allocate(0x7f00, 0x100);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, 0x10100u);
  EXPECT_FALSE(r.allocate(0x100, 0x100));
  // Freed like any other, and the space merges back.
  EXPECT_EQ(r.free(0x18000), 0x1000u);
  EXPECT_EQ(r.free(0x19000), 0x7000u);
  EXPECT_TRUE(r.allocateAt(0x18000, 0x8000));
}

TEST(SpanWindows, EachPartOfASpreadProgramHasAWindowOfItsOwn) {
  auto [w0, n0] = spanWindow(0);
  EXPECT_EQ(w0, kSimDeviceWindow);  // a program on one server: as always
  EXPECT_EQ(n0, 16u);
  uint64_t last_end = kSimDeviceWindow + kSpanWindowSlots * kDeviceWindowSlot;
  for (uint32_t k = 1; k < kSpanWindows; ++k) {
    auto [w, n] = spanWindow(k);
    EXPECT_EQ(n, kSpanWindowSlots);
    EXPECT_EQ(w, last_end) << "part " << k << "'s window starts where part " << k - 1 << "'s ends";
    last_end = w + n * kDeviceWindowSlot;
  }
  EXPECT_LE(last_end, 1ull << 47) << "every window is user address space";
  EXPECT_EQ(spanWindow(kSpanWindows).second, 0u);  // beyond: where the system puts it
}

}  // namespace
}  // namespace rgpu::server
