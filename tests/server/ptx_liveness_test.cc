// Which registers a kernel's thread may read before writing them
// (server/sim/ptx/ptx_liveness.h), and that a reused register file shows such
// a register as 0, as a fresh one does.
#include "server/sim/ptx/ptx_liveness.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_parser.h"

namespace rgpu::server::ptx {
namespace {

// The live-in registers of kernel k of `body` (registers %r0..%r7 are 0..7,
// %p0..%p3 8..11, %rd0..%rd3 12..15, declared in that order).
std::vector<uint32_t> liveIn(const std::string& body) {
  auto m = parsePtx(
      ".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry k(.param .u64 out)\n{\n"
      ".reg .b32 %r<8>;\n.reg .pred %p<4>;\n.reg .b64 %rd<4>;\n" +
      body + "ret;\n}\n");
  EXPECT_TRUE(m) << m.status().message();
  if (!m) return {};
  EXPECT_EQ(m->functions.at("k").live_in, liveInRegisters(m->functions.at("k")));
  return m->functions.at("k").live_in;
}

TEST(PtxLiveness, RegistersWrittenBeforeEveryReadAreNotLive) {
  EXPECT_EQ(
      liveIn("mov.u32 %r1, %tid.x;\nadd.u32 %r2, %r1, 1;\nld.param.u64 %rd1, [out];\nst.global.u32 [%rd1], %r2;\n"),
      std::vector<uint32_t>{});
}

TEST(PtxLiveness, ARegisterReadFirstIsLive) {
  EXPECT_EQ(liveIn("add.u32 %r2, %r3, 1;\nmov.u32 %r3, 5;\n"), std::vector<uint32_t>{3});
}

TEST(PtxLiveness, AGuardedWriteDefinesNothing) {
  // %r1 is written only where %p1 holds: the read after may see its initial value.
  EXPECT_EQ(liveIn("mov.u32 %r0, %tid.x;\nsetp.eq.u32 %p1, %r0, 0;\n@%p1 mov.u32 %r1, 7;\nadd.u32 %r2, %r1, 1;\n"),
            std::vector<uint32_t>{1});
}

TEST(PtxLiveness, FollowsBranchesAndLoops) {
  // %r4 is read on the path that skips its write; %r5 is written before the
  // loop and read in it; %r6 is read in the loop before its write inside it.
  EXPECT_EQ(liveIn("mov.u32 %r0, %tid.x;\nsetp.eq.u32 %p1, %r0, 0;\n@%p1 bra SKIP;\nmov.u32 %r4, 1;\nSKIP:\n"
                   "add.u32 %r3, %r4, 1;\nmov.u32 %r5, 0;\nLOOP:\nadd.u32 %r5, %r5, %r6;\nmov.u32 %r6, 2;\n"
                   "setp.lt.u32 %p2, %r5, 10;\n@%p2 bra LOOP;\n"),
            (std::vector<uint32_t>{4, 6}));
}

TEST(PtxLiveness, InstructionsThatReadOtherLanesMakeEveryRegisterLive) {
  auto live = liveIn("mov.u32 %r1, %tid.x;\nshfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;\n");
  EXPECT_EQ(live.size(), 16u);
}

TEST(PtxLiveness, AReusedRegisterFileShowsAnUnwrittenRegisterAsZero) {
  // `fill` writes 7 to every register; `probe` (as many registers) stores one
  // it never writes. One interpreter thread: probe's block reuses fill's file.
  const std::string head = ".version 9.0\n.target sm_75\n.address_size 64\n";
  auto m = parsePtx(head +
                    ".visible .entry fill(.param .u64 out)\n{\n.reg .b32 %r<6>;\n.reg .b64 %rd<2>;\n"
                    "mov.u32 %r0, 7;\nmov.u32 %r1, 7;\nmov.u32 %r2, 7;\nmov.u32 %r3, 7;\nmov.u32 %r4, 7;\n"
                    "mov.u32 %r5, 7;\nmov.u64 %rd0, 7;\nmov.u64 %rd1, 7;\nret;\n}\n"
                    ".visible .entry probe(.param .u64 out)\n{\n.reg .b32 %r<6>;\n.reg .b64 %rd<2>;\n"
                    "ld.param.u64 %rd0, [out];\nmov.u32 %r0, %tid.x;\nmul.wide.u32 %rd1, %r0, 4;\n"
                    "add.s64 %rd0, %rd0, %rd1;\nadd.u32 %r2, %r3, 0;\nst.global.u32 [%rd0], %r2;\nret;\n}\n");
  ASSERT_TRUE(m) << m.status().message();
  std::vector<uint32_t> out(64, 0xffffffffu);
  uint64_t param = reinterpret_cast<uint64_t>(out.data());
  MemoryRanges mem = {{param, param + out.size() * 4}};
  Interpreter interp(1);
  for (const char* name : {"fill", "probe"}) {
    Launch L;
    L.fn = &m->functions.at(name);
    L.grid = {2, 1, 1};
    L.block = {32, 1, 1};
    L.params = reinterpret_cast<const uint8_t*>(&param);
    L.memory = &mem;
    auto r = interp.run(L);
    ASSERT_TRUE(r.status) << r.status.message();
  }
  EXPECT_EQ(m->functions.at("probe").live_in, std::vector<uint32_t>{3});
  for (uint32_t v : std::vector<uint32_t>(out.begin(), out.begin() + 32)) EXPECT_EQ(v, 0u);
}

}  // namespace
}  // namespace rgpu::server::ptx
