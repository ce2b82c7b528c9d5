// DeviceArena: simulated device memory at addresses of its own.
#include "server/sim/device_arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace rgpu::server {
namespace {

TEST(DeviceArena, LivesInItsWindowApartFromTheHeap) {
  auto a = DeviceArena::create(64 << 20, kSimDeviceWindow);
  ASSERT_TRUE(a) << a.status().message();
  // Under TSan the window is not app memory, and the system places it.
#if !defined(__SANITIZE_THREAD__)
  EXPECT_GE((*a)->base(), kSimDeviceWindow);
  EXPECT_LT((*a)->base(), kSimDeviceWindow + 16 * kDeviceWindowSlot);
#endif
  // A second arena (another session in this process) takes another slot.
  auto b = DeviceArena::create(64 << 20, kSimDeviceWindow);
  ASSERT_TRUE(b);
  EXPECT_NE((*a)->base(), (*b)->base());
}

TEST(DeviceArena, LivesInASpanPartsWindowWhenAsked) {
#if !defined(__SANITIZE_THREAD__)
  auto [w3, n3] = spanWindow(3);
  auto a = DeviceArena::create(64 << 20, w3, n3);
  ASSERT_TRUE(a) << a.status().message();
  EXPECT_GE((*a)->base(), w3);
  EXPECT_LT((*a)->base(), w3 + n3 * kDeviceWindowSlot);
#endif
}

TEST(DeviceArena, AllocationsAreAlignedDisjointAndWritable) {
  auto a = DeviceArena::create(1 << 20, kSimDeviceWindow);
  ASSERT_TRUE(a);
  std::set<std::pair<uint64_t, uint64_t>> ranges;
  for (uint64_t size : {1ull, 255ull, 256ull, 257ull, 4096ull, 10000ull}) {
    auto p = (*a)->allocate(size);
    ASSERT_TRUE(p) << p.status().message();
    EXPECT_EQ(*p % 512, 0u);
    EXPECT_GE(*p, (*a)->base());
    EXPECT_LE(*p + size, (*a)->base() + (*a)->size());
    std::memset(reinterpret_cast<void*>(*p), 0x5a, size);
    for (auto [b, e] : ranges) EXPECT_TRUE(*p >= e || *p + size <= b) << "overlap";
    ranges.insert({*p, *p + (size + 511) / 512 * 512});
  }
}

TEST(DeviceArena, FreedBlocksAreReusedAndMergedAndExhaustionIsAnError) {
  auto a = DeviceArena::create(1 << 20, kSimDeviceWindow);
  ASSERT_TRUE(a);
  uint64_t total = (*a)->size();
  auto x = (*a)->allocate(total / 2);
  auto y = (*a)->allocate(total / 2);
  ASSERT_TRUE(x && y);
  EXPECT_FALSE((*a)->allocate(256)) << "the arena is full";
  EXPECT_TRUE((*a)->free(*x));
  EXPECT_FALSE((*a)->free(*x)) << "freed twice";
  EXPECT_TRUE((*a)->free(*y));
  // The two halves merged back into one block that fits the whole arena.
  auto whole = (*a)->allocate(total);
  ASSERT_TRUE(whole) << whole.status().message();
  EXPECT_EQ(*whole, (*a)->base());
  EXPECT_FALSE((*a)->free(*whole + 256)) << "not an allocation";
}

TEST(DeviceArena, PlacesARestoredAllocationAtItsAddress) {
  auto a = DeviceArena::create(1 << 20, kSimDeviceWindow);
  ASSERT_TRUE(a);
  const uint64_t at = (*a)->base() + 4096;
  EXPECT_TRUE((*a)->allocateAt(at, 1000));  // rounded up to 1024
  Status taken = (*a)->allocateAt(at + 512, 512);
  EXPECT_EQ(taken.code(), err::kMemoryAllocation);
  EXPECT_NE(taken.message().find("is taken or outside this arena"), std::string::npos) << taken.message();
  EXPECT_EQ((*a)->allocateAt(at + 1024 + 8, 512).code(), err::kInvalidValue) << "not 512-byte aligned";
  EXPECT_EQ((*a)->allocateAt((*a)->base() + (*a)->size(), 512).code(), err::kMemoryAllocation);
  EXPECT_TRUE((*a)->allocateAt(at + 1024, 512)) << "right after the first, which took 1024 bytes";
  auto next = (*a)->allocate(512);
  ASSERT_TRUE(next);
  EXPECT_TRUE(*next + 512 <= at || *next >= at + 1536);
  EXPECT_TRUE((*a)->free(at));
}

}  // namespace
}  // namespace rgpu::server
