// A span part's device memory on the CUDA backend, in the part's address
// window (server/cuda/windowed_memory.h), against the fake driver's virtual
// memory management calls.
#include "server/cuda/windowed_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "server/cuda/cuda_backend.h"
#include "tests/server/fake_cuda_hooks.h"
#include "tests/support/test_env.h"

namespace rgpu::server::cuda {
namespace {

std::unique_ptr<CudaBackend> spanPart(uint32_t window) {
  CudaOptions o;
  o.driver_library = RGPU_FAKE_CUDA_LIB;
  o.address_window = window;
  auto b = CudaBackend::create(o);
  EXPECT_TRUE(b) << b.status().message();
  return b ? std::move(*b) : nullptr;
}

bool inWindow(uint64_t p, uint32_t window) {
  auto [base, slots] = spanWindow(window);
  return p >= base && p < base + slots * kDeviceWindowSlot;
}

uint64_t freeMemory(Backend& b) {
  uint64_t free = 0, total = 0;
  EXPECT_TRUE(b.memInfo(0, free, total));
  return free;
}

TEST(WindowedMemory, ASpanPartsMemoryLiesInItsAddressWindowAndWorksAsAnyOther) {
  constexpr uint64_t G = 2ull << 20;  // the fake's granularity
  hooks().clear();
  auto b = spanPart(2);
  ASSERT_TRUE(b);
  const uint64_t free0 = freeMemory(*b);
  auto small = b->allocate(0, 1000);
  auto small2 = b->allocate(0, 3000);
  auto big = b->allocate(0, 5 << 20);
  auto pitched = b->allocatePitch(0, 100, 4);
  ASSERT_TRUE(small && small2 && big && pitched) << small.status().message();
  for (uint64_t p : {*small, *small2, *big, pitched->first}) {
    EXPECT_TRUE(inWindow(p, 2)) << std::hex << p;
    EXPECT_EQ(p % 512, 0u);
  }
  EXPECT_EQ(*big % G, 0u);
  EXPECT_EQ(pitched->second, 512u);
  // Small allocations share one chunk; the big one has 6 MiB of its own.
  EXPECT_LT(*small2 > *small ? *small2 - *small : *small - *small2, G);
  EXPECT_EQ(free0 - freeMemory(*b), G + 6 * (1ull << 20));
  std::string log = hooks().log();
  EXPECT_NE(log.find("cuMemAddressReserve"), std::string::npos) << log;
  EXPECT_NE(log.find("at the address asked"), std::string::npos) << log;
  EXPECT_EQ(log.find("\ncuMemAlloc "), std::string::npos) << "no session memory from cuMemAlloc: " << log;

  // Copies, fills and device copies see the bytes at those addresses.
  std::vector<uint8_t> data(5 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 13 + 1);
  ASSERT_TRUE(b->copyToDevice({0, 0}, *big, std::make_shared<std::vector<uint8_t>>(data), data.size()));
  EXPECT_EQ(readBack(*b, {0, 0}, *big, data.size()), data);
  ASSERT_TRUE(b->copyOnDevice({0, 0}, *small, *big + 4096, 1000));
  ASSERT_TRUE(b->fill({0, 0}, *small2, 0x5a, 3000));
  auto s = readBack(*b, {0, 0}, *small, 1000);
  EXPECT_TRUE(std::equal(s.begin(), s.end(), data.begin() + 4096));
  auto s2 = readBack(*b, {0, 0}, *small2, 3000);
  EXPECT_EQ(s2.front(), 0x5a);
  EXPECT_EQ(s2.back(), 0x5a);
  std::vector<uint8_t> rows(400, 7);
  ASSERT_TRUE(b->copy2DToDevice({0, 0}, pitched->first, pitched->second,
                                std::make_shared<std::vector<uint8_t>>(rows), 100, 4));
  std::promise<std::vector<uint8_t>> got;
  ASSERT_TRUE(b->copy2DFromDevice({0, 0}, pitched->first, pitched->second, 100, 4,
                                  [&](Status, const uint8_t* d, uint64_t n, const server::OnWire&) {
                                    got.set_value(std::vector<uint8_t>(d, d + n));
                                  }));
  EXPECT_EQ(got.get_future().get(), rows);

  // A kernel writes there.
  ASSERT_TRUE(b->loadModule(1, 0, test::readFile(std::string(RGPU_TEST_DATA_DIR) + "/kernels_default.fatbin")));
  ASSERT_TRUE(b->registerFunction(10, 1, "_Z6k_fillIfEvPT_S0_i"));
  std::string params(16, '\0');
  DevPtr ptr = *big;
  float v = 2.5f;
  int n = 1024;
  std::memcpy(params.data(), &ptr, 8);
  std::memcpy(params.data() + 8, &v, 4);
  std::memcpy(params.data() + 12, &n, 4);
  LaunchConfig cfg;
  cfg.grid = {8, 1, 1};
  cfg.block = {128, 1, 1};
  ASSERT_TRUE(b->launch({0, 0}, 10, cfg, params));
  auto out = readBack(*b, {0, 0}, *big, 1024 * sizeof(float));
  float f[1024];
  std::memcpy(f, out.data(), sizeof f);
  EXPECT_EQ(f[0], 2.5f);
  EXPECT_EQ(f[1023], 2.5f);

  // Freed, the memory goes back (one empty chunk is kept for the next small allocation).
  for (uint64_t p : {*small, *small2, *big, pitched->first}) EXPECT_TRUE(b->release(p));
  EXPECT_EQ(b->release(*big).code(), err::kInvalidDevicePointer);
  EXPECT_EQ(free0 - freeMemory(*b), G);
  auto again = b->allocate(0, 100);
  ASSERT_TRUE(again);
  EXPECT_EQ(free0 - freeMemory(*b), G) << "the kept chunk is reused";
  ASSERT_TRUE(b->unloadModule(1));
  b.reset();
  // The session's end unmapped and released everything, and freed the reservation.
  auto fresh = spanPart(0);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(freeMemory(*fresh), free0);
  log = hooks().log();
  EXPECT_NE(log.find("cuMemAddressFree"), std::string::npos) << log;
}

TEST(WindowedMemory, ManySmallAllocationsShareChunksAndExhaustionIsOutOfMemory) {
  auto b = spanPart(1);
  ASSERT_TRUE(b);
  const uint64_t free0 = freeMemory(*b);
  std::vector<DevPtr> ptrs;
  for (int i = 0; i < 6000; ++i) {  // 6000 x 1 KiB: 3 chunks of 2 MiB
    auto p = b->allocate(0, 1024);
    ASSERT_TRUE(p) << p.status().message();
    EXPECT_TRUE(inWindow(*p, 1));
    ptrs.push_back(*p);
  }
  EXPECT_EQ(free0 - freeMemory(*b), 3 * (2ull << 20));
  for (DevPtr p : ptrs) ASSERT_TRUE(b->release(p));
  EXPECT_EQ(free0 - freeMemory(*b), 2ull << 20) << "emptied chunks unmapped but one";
  // More than the device has: out of memory, as cuMemAlloc's.
  auto huge = b->allocate(0, 2ull << 30);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.status().code(), err::kMemoryAllocation);
  // Memory freed is there to allocate again.
  for (int i = 0; i < 3; ++i) {
    auto p = b->allocate(0, 600ull << 20);
    ASSERT_TRUE(p) << "round " << i << ": " << p.status().message();
    ASSERT_TRUE(b->release(*p));
  }
}

TEST(WindowedMemory, WithoutItsWindowAPartsMemoryIsWhereTheDriverPutsIt) {
  // Not a span part (or part 0): cuMemAlloc, as always.
  hooks().clear();
  {
    auto b = spanPart(0);
    ASSERT_TRUE(b);
    auto p = b->allocate(0, 1000);
    ASSERT_TRUE(p);
    EXPECT_FALSE(inWindow(*p, 1));
    EXPECT_NE(std::string(hooks().log()).find("cuMemAlloc 1000"), std::string::npos);
    EXPECT_TRUE(b->release(*p));
  }
  // The window's addresses cannot be reserved, or the part is past the last
  // window: the driver's addresses (the client still refuses an overlap).
  for (uint32_t window : {3u, kSpanWindows}) {
    if (window == 3) hooks().fail("cuMemAddressReserve", CUDA_ERROR_OUT_OF_MEMORY);
    hooks().clear();
    auto b = spanPart(window);
    ASSERT_TRUE(b);
    auto p = b->allocate(0, 1000);
    ASSERT_TRUE(p) << p.status().message();
    EXPECT_FALSE(inWindow(*p, 3));
    EXPECT_NE(std::string(hooks().log()).find("cuMemAlloc 1000"), std::string::npos) << hooks().log();
    EXPECT_TRUE(b->release(*p));
  }
}

}  // namespace
}  // namespace rgpu::server::cuda
