// DeviceRanges: the client keeps its own memory out of device ranges.
#include "client/device_ranges.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

namespace rgpu::client {
namespace {

uint64_t page() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

// A free, page-aligned address range of `pages` pages (mapped, then unmapped).
uint64_t freeRange(uint64_t pages) {
  void* p = mmap(nullptr, pages * page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  munmap(p, pages * page());
  return reinterpret_cast<uint64_t>(p);
}

bool canMap(uint64_t at) {
  void* p = mmap(reinterpret_cast<void*>(at), page(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return false;
  munmap(p, page());
  return p == reinterpret_cast<void*>(at);
}

TEST(DeviceRanges, AReservedRangeKeepsHostMappingsOutUntilReleased) {
  DeviceRanges r;
  uint64_t base = freeRange(4);
  ASSERT_EQ(r.reserve(base + 100, 2 * page()), DeviceRanges::Result::kReserved);
  EXPECT_FALSE(canMap(base));
  EXPECT_FALSE(canMap(base + 2 * page()));  // the range's last byte is on the third page
  EXPECT_TRUE(canMap(base + 3 * page()));
  r.release(base + 100, 2 * page());
  EXPECT_TRUE(canMap(base));
}

TEST(DeviceRanges, PagesSharedByTwoRangesStayReservedUntilBothAreReleased) {
  DeviceRanges r;
  uint64_t base = freeRange(2);
  ASSERT_EQ(r.reserve(base, 256), DeviceRanges::Result::kReserved);
  ASSERT_EQ(r.reserve(base + 256, page()), DeviceRanges::Result::kReserved);  // first page shared, second new
  r.release(base, 256);
  EXPECT_FALSE(canMap(base)) << "still held by the second range";
  r.release(base + 256, page());
  EXPECT_TRUE(canMap(base));
  EXPECT_TRUE(canMap(base + page()));
}

TEST(DeviceRanges, ARangeOverThisProcesssMemoryCollidesAndReservesNothing) {
  DeviceRanges r;
  uint64_t base = freeRange(3);
  void* mine = mmap(reinterpret_cast<void*>(base + page()), page(), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(mine, reinterpret_cast<void*>(base + page()));
  EXPECT_EQ(r.reserve(base, 3 * page()), DeviceRanges::Result::kCollides);
  EXPECT_TRUE(canMap(base)) << "nothing stays reserved after a collision";
  EXPECT_TRUE(canMap(base + 2 * page()));
  munmap(mine, page());
}

}  // namespace
}  // namespace rgpu::client
