// The interpreter's hot paths (server/sim/ptx/ptx_fast.cc, fastMemory)
// against its general code: the same kernels run with the hot paths on and
// off must leave every bit of memory the same (the kernel:
// ptx_cross_check.h).
#include <gtest/gtest.h>

#include <bit>

#include "server/sim/ptx/ptx_block.h"
#include "tests/server/ptx_cross_check.h"

namespace rgpu::server::ptx {
namespace {

using test::Engine;
using test::kSlots;
using test::launchK;
using test::runOnce;

TEST(PtxFastPath, GivesTheGeneralCodesBitsForEveryFormItTakes) {
  const std::string ptx = test::crossCheckKernel();
  auto m = parsePtx(ptx);
  ASSERT_TRUE(m) << m.status().message() << "\n" << ptx;
  for (auto [block, grid] : {std::pair<uint32_t, uint32_t>{64, 2}, {48, 1}, {1, 3}}) {
    const auto general = runOnce(*m, block, grid, Engine::kGeneral);
    const auto fast = runOnce(*m, block, grid, Engine::kFast);
    ASSERT_EQ(general.size(), fast.size());
    size_t differ = 0;
    for (size_t i = 0; i < general.size(); ++i)
      if (general[i] != fast[i] && differ++ < 8)
        ADD_FAILURE() << "block " << block << ": thread " << i / kSlots << " result " << i % kSlots << ": general "
                      << std::hex << general[i] << ", fast " << fast[i];
    EXPECT_EQ(differ, 0u) << "block " << block;
    // The kernel wrote its results (the check is not of two untouched buffers).
    EXPECT_NE(general[1], 0xa5a5a5a5a5a5a5a5ull);
  }
}

TEST(PtxFastPath, FaultsAreTheGeneralCodesToo) {
  // An out-of-range and a misaligned global access, in a converged warp: the
  // hot path declines, the general code reports the same fault as without it.
  for (const char* access : {"ld.global.u32 %r1, [%rd2+4096];", "ld.global.u32 %r1, [%rd2+2];"}) {
    const std::string ptx = std::string(".version 9.0\n.target sm_75\n.address_size 64\n"
                                        ".visible .entry k(.param .u64 in, .param .u64 out)\n{\n"
                                        ".reg .b32 %r<4>;\n.reg .b64 %rd<4>;\nld.param.u64 %rd2, [out];\n") +
                            access + "\nret;\n}\n";
    auto m = parsePtx(ptx);
    ASSERT_TRUE(m) << m.status().message();
    std::vector<uint64_t> out(64);
    struct {
      uint64_t in, out;
    } params{0, reinterpret_cast<uint64_t>(out.data())};
    MemoryRanges mem = {{params.out, params.out + out.size() * 8}};
    std::string messages[2];
    for (bool fast : {false, true}) {
      auto r = launchK(*m, 32, 1, &params, mem, fast ? Engine::kFast : Engine::kGeneral);
      ASSERT_FALSE(r.status) << access;
      messages[fast] = r.status.message();
    }
    EXPECT_EQ(messages[0], messages[1]);
  }
}

TEST(PtxFloat, MinMaxAndSaturationAreSpelledOut) {
  // (detail::minNum, maxNum, saturate: what min, max and .sat give in the
  // general code and the JIT, whatever libm and the compiler do with fmin.)
  using detail::maxNum;
  using detail::minNum;
  using detail::saturate;
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  const float qnan = std::bit_cast<float>(0x7fc00001u), snan = std::bit_cast<float>(0x7fa00001u);
  EXPECT_EQ(bits(minNum(-0.0f, 0.0f)), 0x80000000u);
  EXPECT_EQ(bits(minNum(0.0f, -0.0f)), 0x80000000u);
  EXPECT_EQ(bits(maxNum(-0.0f, 0.0f)), 0u);
  EXPECT_EQ(bits(maxNum(0.0f, -0.0f)), 0u);
  EXPECT_EQ(minNum(qnan, 2.0f), 2.0f);
  EXPECT_EQ(maxNum(-3.0f, snan), -3.0f);
  EXPECT_EQ(bits(minNum(snan, qnan)), 0x7fe00001u);  // the first, quieted
  EXPECT_EQ(bits(maxNum(qnan, snan)), 0x7fc00001u);
  EXPECT_EQ(minNum(1.5f, -2.0f), -2.0f);
  EXPECT_EQ(maxNum(1.5, -2.0), 1.5);
  EXPECT_EQ(bits(saturate(-0.0f)), 0u);
  EXPECT_EQ(bits(saturate(qnan)), 0u);
  EXPECT_EQ(saturate(1.5f), 1.0f);
  EXPECT_EQ(saturate(0.25), 0.25);
}

}  // namespace
}  // namespace rgpu::server::ptx
