// The PTX JIT (server/sim/ptx/ptx_jit.h, server/sim/jit/) against the
// interpreter's general code: kernels run compiled and interpreted must leave
// every bit of memory the same and count the same thread-instructions; where
// a unit cannot vouch for an access it stops before it and the interpreter
// goes on, reporting any fault exactly as it would have.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/ptx_cross_check.h"

namespace rgpu::server::ptx {
namespace {

using test::Engine;
using test::kSlots;
using test::launchK;
using test::runOnce;

const std::string kHeader = ".version 9.0\n.target sm_75\n.address_size 64\n";
// %rd3: the address of the thread's own word of `buf` (by block and thread);
// %rd2: its thread index in bytes (a per-block offset, for shared memory).
// Uses %r1, %r13-%r15, %rd1-%rd3, %rd15.
const std::string kThreadWord = R"(ld.param.u64 %rd1, [buf];
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 8;
mov.u32 %r14, %ctaid.x;
mov.u32 %r15, %ntid.x;
mad.lo.s32 %r13, %r14, %r15, %r1;
mul.wide.u32 %rd15, %r13, 8;
add.s64 %rd3, %rd1, %rd15;
)";

// The compiled code of m's kernel k (after an Engine::kJit launch).
std::shared_ptr<const jit::Code> codeOf(const Module& m) {
  const JitSlot& slot = m.functions.at("k").jit;
  std::lock_guard lock(slot.mu);
  return slot.code;
}

TEST(PtxJit, ThePluginLoads) {
  std::string error;
  EXPECT_TRUE(jit::available(&error)) << error;
}

TEST(PtxJit, GivesTheGeneralCodesBitsForEveryFormItCompiles) {
  const std::string ptx = test::crossCheckKernel();
  auto m = parsePtx(ptx);
  ASSERT_TRUE(m) << m.status().message() << "\n" << ptx;
  for (auto [block, grid] : {std::pair<uint32_t, uint32_t>{64, 2}, {48, 1}, {1, 3}}) {
    const auto general = runOnce(*m, block, grid, Engine::kGeneral);
    const auto compiled = runOnce(*m, block, grid, Engine::kJit);
    ASSERT_EQ(general.size(), compiled.size());
    size_t differ = 0;
    for (size_t i = 0; i < general.size(); ++i)
      if (general[i] != compiled[i] && differ++ < 8)
        ADD_FAILURE() << "block " << block << ": thread " << i / kSlots << " result " << i % kSlots << ": general "
                      << std::hex << general[i] << ", compiled " << compiled[i];
    EXPECT_EQ(differ, 0u) << "block " << block;
    EXPECT_NE(general[1], 0xa5a5a5a5a5a5a5a5ull);
  }
  // The kernel really was compiled: most of its instructions are in units.
  auto code = codeOf(*m);
  ASSERT_TRUE(code);
  const size_t total = m->functions.at("k").code.size();
  EXPECT_GT(code->covered() * 10, total * 8) << code->covered() << " of " << total << " instructions compiled";
  EXPECT_GT(code->units().size(), 4u);
  std::printf("cross-check kernel: %zu units, %llu of %zu instructions, compiled in %.1f ms\n", code->units().size(),
              static_cast<unsigned long long>(code->covered()), total, code->compile_ms);
}

TEST(PtxJit, GivesTheGeneralCodesBitsForItsOtherForms) {
  const std::string ptx = test::crossCheckKernel2();
  auto m = parsePtx(ptx);
  ASSERT_TRUE(m) << m.status().message() << "\n" << ptx;
  for (auto [block, grid] : {std::pair<uint32_t, uint32_t>{64, 1}, {40, 1}}) {
    const auto general = runOnce(*m, block, grid, Engine::kGeneral, test::kSlots2, test::edgeValues2());
    const auto compiled = runOnce(*m, block, grid, Engine::kJit, test::kSlots2, test::edgeValues2());
    size_t differ = 0;
    for (size_t i = 0; i < general.size(); ++i)
      if (general[i] != compiled[i] && differ++ < 12)
        ADD_FAILURE() << "block " << block << ": thread " << i / test::kSlots2 << " result " << i % test::kSlots2
                      << ": general " << std::hex << general[i] << ", compiled " << compiled[i];
    EXPECT_EQ(differ, 0u) << "block " << block;
    EXPECT_NE(general[1], 0xa5a5a5a5a5a5a5a5ull);
  }
  auto code = codeOf(*m);
  ASSERT_TRUE(code);
  const size_t total = m->functions.at("k").code.size();
  EXPECT_GT(code->covered() * 10, total * 9) << code->covered() << " of " << total << " instructions compiled";
}

// Runs kernel k of `ptx` over a buffer of `words` u64 (initialised to
// i * 3 + 1), returning the buffer and the launch's result.
struct BufferRun {
  std::vector<uint64_t> out;
  LaunchResult result;
};
BufferRun runBuffer(const Module& m, uint32_t block, uint32_t grid, size_t words, Engine engine, size_t split = 0) {
  BufferRun r;
  r.out.resize(words);
  for (size_t i = 0; i < words; ++i) r.out[i] = i * 3 + 1;
  struct {
    uint64_t buf, n;
  } params{reinterpret_cast<uint64_t>(r.out.data()), words};
  const uint64_t base = params.buf, end = base + words * 8;
  // `split`: the buffer as two allocations that meet at word `split`.
  MemoryRanges mem =
      split ? MemoryRanges{{base, base + split * 8}, {base + split * 8, end}} : MemoryRanges{{base, end}};
  r.result = launchK(m, block, grid, &params, mem, engine);
  return r;
}

void expectSame(const Module& m, uint32_t block, uint32_t grid, size_t words, size_t split = 0) {
  BufferRun general = runBuffer(m, block, grid, words, Engine::kGeneral, split);
  BufferRun compiled = runBuffer(m, block, grid, words, Engine::kJit, split);
  ASSERT_TRUE(general.result.status) << general.result.status.message();
  ASSERT_TRUE(compiled.result.status) << compiled.result.status.message();
  EXPECT_EQ(general.out, compiled.out);
  EXPECT_EQ(general.result.thread_instructions, compiled.result.thread_instructions);
  ASSERT_TRUE(codeOf(m));
  EXPECT_FALSE(codeOf(m)->units().empty());
}

TEST(PtxJit, StopsBeforeGenericAccessesToSharedMemoryAndTheInterpreterGoesOn) {
  // Generic addresses of shared memory (cvta.shared): the unit stops before
  // each access, the interpreter makes it, and the next unit carries on.
  auto m = parsePtx(kHeader + R"(
.visible .entry k(.param .u64 buf, .param .u64 n)
{
.reg .b32 %r<16>;
.reg .b64 %rd<16>;
.shared .align 8 .b8 sh[512];
)" + kThreadWord + R"(ld.global.u64 %rd4, [%rd3];
mov.u64 %rd5, sh;
cvta.shared.u64 %rd6, %rd5;
add.s64 %rd7, %rd6, %rd2;
add.s64 %rd8, %rd4, 100;
st.u64 [%rd7], %rd8;
ld.u64 %rd9, [%rd7];
mul.lo.s64 %rd10, %rd9, 3;
add.s64 %rd11, %rd10, %rd4;
st.global.u64 [%rd3], %rd11;
ret;
}
)");
  ASSERT_TRUE(m) << m.status().message();
  expectSame(*m, 64, 2, 128);  // each block its own words (and shared memory)
  BufferRun compiled = runBuffer(*m, 64, 1, 64, Engine::kJit);
  EXPECT_EQ(compiled.out[5], ((5 * 3 + 1) + 100) * 3 + (5 * 3 + 1));
}

TEST(PtxJit, StopsBeforeAWarpsAccessesThatSpanTwoAllocations) {
  // Lanes 0..19 in one allocation, 20..31 in the next: no one range holds the
  // warp's accesses, each lane's is valid; the general code makes them.
  auto m = parsePtx(kHeader + R"(
.visible .entry k(.param .u64 buf, .param .u64 n)
{
.reg .b32 %r<8>;
.reg .b64 %rd<16>;
ld.param.u64 %rd1, [buf];
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 8;
add.s64 %rd3, %rd1, %rd2;
ld.global.u64 %rd4, [%rd3];
shl.b64 %rd5, %rd4, 1;
xor.b64 %rd6, %rd5, 7;
st.global.u64 [%rd3], %rd6;
ret;
}
)");
  ASSERT_TRUE(m) << m.status().message();
  expectSame(*m, 32, 1, 32, 20);
  BufferRun compiled = runBuffer(*m, 32, 1, 32, Engine::kJit, 20);
  EXPECT_EQ(compiled.out[25], ((25 * 3 + 1) << 1) ^ 7);
}

TEST(PtxJit, RunsLoopsAndDivergentBranchesAsTheInterpreterDoes) {
  // A grid-stride loop whose trip count differs per lane, a guarded store and
  // a branch that splits the warp: units between the branches.
  auto m = parsePtx(kHeader + R"(
.visible .entry k(.param .u64 buf, .param .u64 n)
{
.reg .pred %p<4>;
.reg .b32 %r<16>;
.reg .b64 %rd<16>;
.reg .f32 %f<8>;
ld.param.u64 %rd1, [buf];
ld.param.u64 %rd2, [n];
mov.u32 %r1, %tid.x;
mov.u32 %r2, %ctaid.x;
mov.u32 %r3, %ntid.x;
mad.lo.s32 %r4, %r2, %r3, %r1;
cvt.u64.u32 %rd3, %r4;
LOOP:
setp.ge.u64 %p1, %rd3, %rd2;
@%p1 bra DONE;
shl.b64 %rd4, %rd3, 3;
add.s64 %rd5, %rd1, %rd4;
ld.global.u32 %r5, [%rd5];
cvt.rn.f32.u32 %f1, %r5;
mul.f32 %f2, %f1, 0f3FC00000;
and.b32 %r6, %r5, 1;
setp.eq.u32 %p2, %r6, 0;
@%p2 bra EVEN;
add.f32 %f2, %f2, 0f3F800000;
sqrt.rn.f32 %f3, %f2;
st.global.f32 [%rd5+4], %f3;
bra NEXT;
EVEN:
neg.f32 %f3, %f2;
setp.lt.u32 %p3, %r5, 50;
@%p3 st.global.f32 [%rd5+4], %f3;
NEXT:
mov.u32 %r7, %nctaid.x;
mul.lo.s32 %r8, %r7, %r3;
cvt.u64.u32 %rd6, %r8;
add.s64 %rd3, %rd3, %rd6;
bra LOOP;
DONE:
ret;
}
)");
  ASSERT_TRUE(m) << m.status().message();
  expectSame(*m, 48, 3, 1000);
}

TEST(PtxJit, KeepsValuesTheRegisterFileNeverSeesRight) {
  // Temporaries a unit keeps to itself (their stores left out: nothing reads
  // them from memory), guarded loads whose other lanes keep the value before,
  // and a value that lives past a place the unit may stop (a generic access).
  auto m = parsePtx(kHeader + R"(
.visible .entry k(.param .u64 buf, .param .u64 n)
{
.reg .pred %p<4>;
.reg .b32 %r<16>;
.reg .b64 %rd<16>;
.shared .align 8 .b8 sh[512];
)" + kThreadWord + R"(ld.global.u32 %r2, [%rd3];
add.u32 %r3, %r2, 5;
mul.lo.u32 %r4, %r3, %r3;
mov.u32 %r5, 7;
and.b32 %r6, %r1, 1;
setp.eq.u32 %p1, %r6, 1;
@%p1 ld.global.u32 %r5, [%rd3+4];
add.u32 %r7, %r5, %r4;
mov.u64 %rd4, sh;
cvta.shared.u64 %rd5, %rd4;
add.s64 %rd6, %rd5, %rd2;
st.u32 [%rd6], %r7;
ld.u32 %r8, [%rd6];
add.u32 %r9, %r8, %r3;
st.global.u32 [%rd3], %r9;
st.global.u32 [%rd3+4], %r7;
ret;
}
)");
  ASSERT_TRUE(m) << m.status().message();
  expectSame(*m, 64, 2, 128);  // each block its own words (and shared memory)
  BufferRun compiled = runBuffer(*m, 64, 1, 64, Engine::kJit);
  for (uint64_t t : {4u, 5u}) {
    const uint64_t word = t * 3 + 1, lo = word & 0xffffffffu, hi = word >> 32;
    const uint64_t r3 = lo + 5, r5 = t % 2 ? hi : 7, r7 = (r5 + r3 * r3) & 0xffffffffu;
    EXPECT_EQ(compiled.out[t], (r7 << 32) | ((r7 + r3) & 0xffffffffu)) << "thread " << t;
  }
}

TEST(PtxJit, CompilesTheKernelsOfSeveralThreadsAtOnce) {
  // Each thread its own module (as each device of a session has): their
  // kernels compile at the same time, and each runs right.
  constexpr int kThreads = 4;
  const std::string ptx = kHeader + R"(
.visible .entry k(.param .u64 buf, .param .u64 n)
{
.reg .b32 %r<8>;
.reg .b64 %rd<8>;
.reg .f32 %f<4>;
ld.param.u64 %rd1, [buf];
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 8;
add.s64 %rd3, %rd1, %rd2;
ld.global.u64 %rd4, [%rd3];
cvt.rn.f32.u64 %f1, %rd4;
mul.lo.s64 %rd5, %rd4, 5;
add.s64 %rd6, %rd5, 2;
st.global.u64 [%rd3], %rd6;
ret;
}
)";
  std::vector<Module> modules;
  for (int i = 0; i < kThreads; ++i) {
    auto m = parsePtx(ptx);
    ASSERT_TRUE(m) << m.status().message();
    modules.push_back(std::move(*m));
  }
  jit::configure(jit::Mode::kEager, jit::kDefaultThreshold);
  std::vector<std::vector<uint64_t>> bufs(kThreads, std::vector<uint64_t>(64, 3));
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      struct {
        uint64_t buf, n;
      } params{reinterpret_cast<uint64_t>(bufs[i].data()), 64};
      MemoryRanges mem = {{params.buf, params.buf + 64 * 8}};
      Launch L;
      L.fn = &modules[i].functions.at("k");
      L.block = {64, 1, 1};
      L.params = reinterpret_cast<const uint8_t*>(&params);
      L.memory = &mem;
      Interpreter interp(1);
      auto r = interp.run(L);
      if (!r.status) failures[i] = r.status.message();
    });
  }
  for (auto& t : threads) t.join();
  jit::configure(jit::Mode::kOff, jit::kDefaultThreshold);
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(failures[i], "");
    EXPECT_TRUE(codeOf(modules[i]));
    EXPECT_EQ(bufs[i][9], 17u);
  }
}

TEST(PtxJit, FaultsAreTheGeneralCodes) {
  for (const char* access :
       {"ld.global.u32 %r1, [%rd2+4096];", "ld.global.u32 %r1, [%rd2+2];", "st.global.u32 [%rd2+8192], %r1;"}) {
    auto m = parsePtx(kHeader +
                      ".visible .entry k(.param .u64 in, .param .u64 out)\n{\n"
                      ".reg .b32 %r<4>;\n.reg .b64 %rd<4>;\nld.param.u64 %rd2, [out];\nmov.u32 %r1, %tid.x;\n" +
                      access + "\nadd.u32 %r2, %r1, 1;\nret;\n}\n");
    ASSERT_TRUE(m) << m.status().message();
    std::vector<uint64_t> out(64);
    struct {
      uint64_t in, out;
    } params{0, reinterpret_cast<uint64_t>(out.data())};
    MemoryRanges mem = {{params.out, params.out + out.size() * 8}};
    auto general = launchK(*m, 32, 1, &params, mem, Engine::kGeneral);
    auto compiled = launchK(*m, 32, 1, &params, mem, Engine::kJit);
    ASSERT_FALSE(general.status) << access;
    ASSERT_FALSE(compiled.status) << access;
    EXPECT_EQ(general.status.code(), compiled.status.code()) << access;
    EXPECT_EQ(general.status.message(), compiled.status.message()) << access;
    ASSERT_TRUE(codeOf(*m));
    EXPECT_FALSE(codeOf(*m)->units().empty()) << access;
  }
}

TEST(PtxJit, AutoCompilesAKernelOnlyOnceItRanEnoughInterpreted) {
  auto m = parsePtx(kHeader + R"(
.visible .entry k(.param .u64 buf, .param .u64 n)
{
.reg .b32 %r<8>;
.reg .b64 %rd<8>;
ld.param.u64 %rd1, [buf];
mov.u32 %r1, %tid.x;
mul.wide.u32 %rd2, %r1, 8;
add.s64 %rd3, %rd1, %rd2;
ld.global.u64 %rd4, [%rd3];
add.s64 %rd5, %rd4, 1;
st.global.u64 [%rd3], %rd5;
ret;
}
)");
  ASSERT_TRUE(m) << m.status().message();
  std::vector<uint64_t> buf(64, 0);
  struct {
    uint64_t buf, n;
  } params{reinterpret_cast<uint64_t>(buf.data()), buf.size()};
  MemoryRanges mem = {{params.buf, params.buf + buf.size() * 8}};
  Launch L;
  L.fn = &m->functions.at("k");
  L.grid = {1, 1, 1};
  L.block = {64, 1, 1};
  L.params = reinterpret_cast<const uint8_t*>(&params);
  L.memory = &mem;
  Interpreter interp(1);
  // 64 threads x 8 instructions = 512 per launch; compiled once about 2,000
  // have run (the threshold is per instruction of the kernel's code).
  jit::configure(jit::Mode::kAuto, 2000 / L.fn->code.size());
  int interpreted_only = 0;  // launches after which the kernel still had no code
  for (int i = 0; i < 10; ++i) {
    auto r = interp.run(L);
    ASSERT_TRUE(r.status) << r.status.message();
    EXPECT_EQ(r.thread_instructions, 512u);
    if (!codeOf(*m)) ++interpreted_only;
  }
  jit::configure(jit::Mode::kOff, jit::kDefaultThreshold);
  EXPECT_EQ(interpreted_only, 4);  // 2,048 after the fourth: the fifth launch compiles it first
  EXPECT_TRUE(codeOf(*m));
  EXPECT_EQ(buf[7], 10u);
}

}  // namespace
}  // namespace rgpu::server::ptx
