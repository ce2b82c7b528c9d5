#include "server/backend/allocation_table.h"

#include <gtest/gtest.h>

namespace rgpu::server {
namespace {

TEST(AllocationTable, AcceptsRangesInsideAnAllocation) {
  AllocationTable t(16);
  ASSERT_TRUE(t.add(0x1000, 256, 0));
  int dev = -1;
  EXPECT_TRUE(t.check(0x1000, 256, &dev));
  EXPECT_EQ(dev, 0);
  EXPECT_TRUE(t.check(0x10ff, 1));
  EXPECT_TRUE(t.check(0x1080, 128));
}

TEST(AllocationTable, RejectsRangesPastTheEnd) {
  AllocationTable t(16);
  ASSERT_TRUE(t.add(0x1000, 256, 0));
  EXPECT_FALSE(t.check(0x1000, 257));
  EXPECT_FALSE(t.check(0x10ff, 2));
  EXPECT_FALSE(t.check(0x1100, 1));
  EXPECT_FALSE(t.check(0xfff, 1));
  EXPECT_FALSE(t.check(0x1000, UINT64_MAX));  // huge sizes never wrap into validity
}

TEST(AllocationTable, RejectsForeignAndFreedPointers) {
  AllocationTable t(16);
  ASSERT_TRUE(t.add(0x1000, 256, 0));
  EXPECT_FALSE(t.check(0x9000, 1));
  ASSERT_TRUE(t.remove(0x1000));
  EXPECT_FALSE(t.check(0x1000, 1));
  EXPECT_FALSE(t.remove(0x1000));  // double free
}

TEST(AllocationTable, FreeNeedsTheStartOfAnAllocation) {
  AllocationTable t(16);
  ASSERT_TRUE(t.add(0x1000, 256, 0));
  EXPECT_FALSE(t.remove(0x1010));
  EXPECT_TRUE(t.check(0x1000, 256));
}

TEST(AllocationTable, SymbolsCannotBeFreed) {
  AllocationTable t(16);
  ASSERT_TRUE(t.add(0x2000, 64, 0, /*is_symbol=*/true));
  EXPECT_FALSE(t.remove(0x2000));
  EXPECT_TRUE(t.check(0x2000, 64));
}

TEST(AllocationTable, EnforcesTheAllocationLimit) {
  AllocationTable t(2);
  ASSERT_TRUE(t.add(0x1000, 1, 0));
  ASSERT_TRUE(t.add(0x2000, 1, 0));
  Status s = t.add(0x3000, 1, 0);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("max_allocations"), std::string::npos);
}

TEST(AllocationTable, ChecksPitched2DRegions) {
  AllocationTable t(4);
  ASSERT_TRUE(t.add(0x10000, 512 * 10, 0));
  EXPECT_TRUE(t.check2D(0x10000, 512, 100, 10));
  EXPECT_FALSE(t.check2D(0x10000, 512, 513, 10));       // width > pitch
  EXPECT_FALSE(t.check2D(0x10000, 512, 100, 11));       // one row too many
  EXPECT_FALSE(t.check2D(0x10000, UINT64_MAX, 1, 3));   // overflowing extent
}

}  // namespace
}  // namespace rgpu::server
