// The cross-check kernel the interpreter's hot paths (ptx_fast_test.cc) and
// the JIT (ptx_jit_test.cc) are compared with the general code on: every form
// they take, over edge values (0, ±1, extremes, quiet and signalling NaN,
// infinity, shift amounts past the width), in converged warps, a partial warp
// and divergent lanes, through global, shared and local memory.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_jit.h"
#include "server/sim/ptx/ptx_parser.h"

namespace rgpu::server::ptx::test {

// How a launch runs: the general code only, with the hot paths, or with the
// hot paths and every kernel compiled first.
enum class Engine { kGeneral, kFast, kJit };

constexpr int kValues = 24;  // edge values in the input table
constexpr int kSlots = 272;  // results per thread (at most)

inline std::vector<uint64_t> edgeValues() {
  auto f = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return uint64_t{b};
  };
  return {0,
          1,
          2,
          31,
          32,
          33,
          63,
          64,
          0x7fffffffull,
          0x80000000ull,
          0xffffffffull,
          0xffffffffffffffffull,
          0x8000000000000000ull,
          0x7fffffffffffffffull,
          0x123456789abcdef0ull,
          0xfffffffffffffff0ull,
          f(1.5f),
          f(-2.25f),
          f(std::numeric_limits<float>::quiet_NaN()),
          f(std::numeric_limits<float>::infinity()),
          f(-0.0f),
          f(3.0e38f),
          f(1e-40f),       // a subnormal
          0x7fa00001ull};  // a signalling NaN (f32)
}

// Every hot form, the results stored at out[(global thread) * kSlots + k].
inline std::string crossCheckKernel() {
  std::string s =
      ".version 9.0\n.target sm_75\n.address_size 64\n"
      ".visible .entry k(.param .u64 in, .param .u64 out)\n{\n"
      ".reg .pred %p<8>;\n.reg .b16 %h<8>;\n.reg .b32 %r<64>;\n.reg .b64 %rd<64>;\n.reg .f32 %f<16>;\n"
      ".shared .align 8 .b8 sh[4096];\n.local .align 8 .b8 loc[64];\n"
      "ld.param.u64 %rd60, [in];\nld.param.u64 %rd61, [out];\n"
      "cvta.to.global.u64 %rd60, %rd60;\ncvta.to.global.u64 %rd61, %rd61;\n"
      "mov.u32 %r1, %tid.x;\nmov.u32 %r2, %ntid.x;\nmov.u32 %r3, %ctaid.x;\n"
      "mad.lo.s32 %r4, %r3, %r2, %r1;\n"  // g
      "rem.u32 %r5, %r4, " +
      std::to_string(kValues) +
      ";\n"
      "mad.lo.u32 %r6, %r4, 7, 3;\nrem.u32 %r6, %r6, " +
      std::to_string(kValues) +
      ";\n"
      "mul.wide.u32 %rd1, %r5, 8;\nadd.s64 %rd2, %rd60, %rd1;\n"
      "mul.wide.u32 %rd3, %r6, 8;\nadd.s64 %rd4, %rd60, %rd3;\n"
      "ld.global.u64 %rd10, [%rd2];\nld.global.u64 %rd11, [%rd4];\n"  // A, B (64-bit)
      "ld.global.u32 %r10, [%rd2];\nld.global.u32 %r11, [%rd4];\n"    // A, B (32-bit)
      "ld.global.s32 %rd12, [%rd2];\nld.global.s16 %rd13, [%rd4];\nld.global.u8 %rd14, [%rd2+1];\n"
      "ld.global.u16 %h1, [%rd4+2];\nld.global.s8 %r12, [%rd2+3];\n"
      "mov.b32 %f1, %r10;\nmov.b32 %f2, %r11;\n"
      "mul.lo.u32 %r7, %r4, " +
      std::to_string(kSlots * 8) +
      ";\ncvt.u64.u32 %rd5, %r7;\nadd.s64 %rd62, %rd61, %rd5;\n"
      "setp.ne.u32 %p7, %r4, %r4;\n";  // false: the divergent part's guard below
  int slot = 0;
  auto out = [&](const std::string& reg) {
    s += "st.global.b64 [%rd62+" + std::to_string(8 * slot++) + "], " + reg + ";\n";
  };
  // Divergence: odd lanes skip the first half (partial masks), all rejoin.
  s += "and.b32 %r13, %r1, 1;\nsetp.eq.u32 %p6, %r13, 1;\n@%p6 bra SKIP;\n";
  const char* int32[] = {"s32", "u32", "b32"};
  const char* int64[] = {"s64", "u64", "b64"};
  for (int half = 0; half < 2; ++half) {
    if (half == 1) s += "SKIP:\n";
    for (const char* t : int32) {
      s += std::string("add.") + t + " %r20, %r10, %r11;\n";
      out("%r20");
      s += std::string("sub.") + t + " %r21, %r10, %r11;\n";
      out("%r21");
      if (t[0] != 'b') {
        s += std::string("mul.lo.") + t + " %r22, %r10, %r11;\n";
        out("%r22");
        s += std::string("mul.wide.") + t + " %rd20, %r10, %r11;\n";
        out("%rd20");
        s += std::string("mad.lo.") + t + " %r23, %r10, %r11, %r4;\n";
        out("%r23");
        s += std::string("mad.wide.") + t + " %rd21, %r10, %r11, %rd10;\n";
        out("%rd21");
        s += std::string("shr.") + t + " %r24, %r10, %r11;\n";
        out("%r24");
        for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge"}) {
          s += std::string("setp.") + c + "." + t + " %p1|%p2, %r10, %r11;\nselp.u32 %r25, 1, 0, %p1;\n";
          out("%r25");
          s += "selp.u32 %r26, 1, 0, %p2;\n";
          out("%r26");
        }
      }
      s += std::string("and.") + t + " %r27, %r10, %r11;\n";
      out("%r27");
      s += std::string("or.") + t + " %r28, %r10, 5;\n";
      out("%r28");
      s += std::string("xor.") + t + " %r29, %r10, %r11;\n";
      out("%r29");
      s += std::string("shl.") + t + " %r30, %r10, %r11;\n";
      out("%r30");
    }
    for (const char* t : int64) {
      s += std::string("add.") + t + " %rd22, %rd10, %rd11;\n";
      out("%rd22");
      s += std::string("sub.") + t + " %rd23, %rd10, %rd12;\n";
      out("%rd23");
      if (t[0] != 'b') {
        s += std::string("mul.lo.") + t + " %rd24, %rd10, %rd11;\n";
        out("%rd24");
        s += std::string("mad.lo.") + t + " %rd25, %rd10, %rd11, %rd13;\n";
        out("%rd25");
        s += std::string("shr.") + t + " %rd26, %rd10, %r11;\n";
        out("%rd26");
        for (const char* c : {"lt", "ne", "ge"}) {
          s += std::string("setp.") + c + "." + t + " %p1, %rd10, %rd11;\nselp.u64 %rd27, %rd10, %rd11, %p1;\n";
          out("%rd27");
        }
      }
      s += std::string("shl.") + t + " %rd28, %rd10, %r11;\n";
      out("%rd28");
      s += std::string("xor.") + t + " %rd29, %rd10, %rd14;\n";
      out("%rd29");
    }
    s += "setp.lo.u16 %p3, %h1, 7;\nselp.u32 %r31, 1, 0, %p3;\n";
    out("%r31");
    s += "setp.gt.s16 %p3, %h1, 7;\nselp.u32 %r31, 1, 0, %p3;\n";
    out("%r31");
    for (const char* op : {"add", "sub", "mul"}) {
      s += std::string(op) + ".f32 %f3, %f1, %f2;\n";
      out("%f3");
      s += std::string(op) + ".rn.f32 %f4, %f2, %f1;\n";
      out("%f4");
    }
    s += "div.rn.f32 %f7, %f1, %f2;\n";
    out("%f7");
    s += "div.full.f32 %f7, %f2, %f1;\n";
    out("%f7");
    for (const char* u :
         {"abs.f32", "neg.f32", "sqrt.rn.f32", "sqrt.approx.f32", "rsqrt.approx.f32", "rcp.rn.f32", "ex2.approx.f32"}) {
      s += std::string(u) + " %f8, %f1;\n";
      out("%f8");
    }
    for (const char* c :
         {"cvt.u64.u32 %rd40, %r10;", "cvt.s64.s32 %rd40, %r10;", "cvt.u32.u64 %r37, %rd10;",
          "cvt.s32.s64 %r37, %rd11;", "cvt.u16.u32 %h2, %r11;", "cvt.s32.s16 %r37, %h1;", "cvt.s64.s8 %rd40, %r12;",
          "cvt.rn.f32.s32 %f9, %r10;", "cvt.rn.f32.u32 %f9, %r11;", "cvt.rn.f32.u16 %f9, %h1;"}) {
      s += std::string(c) + "\n";
      const std::string d = c;
      out(d.substr(d.find(' ') + 1, d.find(',') - d.find(' ') - 1));
    }
    s += "fma.rn.f32 %f5, %f1, %f2, %f1;\n";
    out("%f5");
    s += "mad.f32 %f6, %f2, %f2, %f1;\n";
    out("%f6");
    for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      s += std::string("setp.") + c + ".f32 %p4, %f1, %f2;\nselp.u32 %r32, 1, 0, %p4;\n";
      out("%r32");
    }
    s += "mov.u32 %r33, %tid.x;\n";
    out("%r33");
    s += "mov.u32 %r34, %ctaid.x;\n";
    out("%r34");
    s += "mov.u64 %rd30, 0x8000000000000001;\n";
    out("%rd30");
    s += "cvta.shared.u64 %rd31, %rd10;\n";
    out("%rd31");
    s += "cvta.to.shared.u64 %rd32, %rd31;\n";
    out("%rd32");
    // Shared and local memory round trips, every width, and sign extension.
    s += "shl.b32 %r35, %r1, 3;\nst.shared.u64 [%r35], %rd10;\nst.shared.u32 [%r35+2048], %r11;\n"
         "bar.sync 0;\nxor.b32 %r36, %r35, 8;\nld.shared.u64 %rd33, [%r36];\nld.shared.s32 %rd34, [%r36+2048];\n"
         "ld.shared.s8 %rd35, [%r36+1];\nld.shared.u16 %rd36, [%r36+2];\nbar.sync 0;\n";
    out("%rd33");
    out("%rd34");
    out("%rd35");
    out("%rd36");
    s += "mov.u64 %rd37, loc;\nst.local.u64 [loc+8], %rd11;\nst.local.u16 [loc+16], %h1;\n"
         "ld.local.u64 %rd38, [loc+8];\nld.local.s16 %rd39, [loc+16];\n";
    out("%rd38");
    out("%rd39");
    s += "st.global.u8 [%rd62+" + std::to_string(8 * slot) + "], %r12;\n";
    ++slot;
    s += "st.global.u16 [%rd62+" + std::to_string(8 * slot) + "], %h1;\n";
    ++slot;
  }
  if (slot > kSlots) return "too many slots: " + std::to_string(slot);
  return s + "ret;\n}\n";
}

// Kernel k of `m` on `block` threads x `grid` blocks, on `engine`.
inline LaunchResult launchK(const Module& m, uint32_t block, uint32_t grid, const void* params, const MemoryRanges& mem,
                            Engine engine) {
  Launch L;
  L.fn = &m.functions.at("k");
  L.grid = {grid, 1, 1};
  L.block = {block, 1, 1};
  L.params = static_cast<const uint8_t*>(params);
  L.memory = &mem;
  setFastPaths(engine != Engine::kGeneral);
  jit::configure(engine == Engine::kJit ? jit::Mode::kEager : jit::Mode::kOff, jit::kDefaultThreshold);
  Interpreter interp(2);
  auto r = interp.run(L);
  setFastPaths(true);
  jit::configure(jit::Mode::kOff, jit::kDefaultThreshold);
  return r;
}

inline std::vector<uint64_t> runOnce(const Module& m, uint32_t block, uint32_t grid, Engine engine, int slots = kSlots,
                                     std::vector<uint64_t> in = edgeValues()) {
  std::vector<uint64_t> out(static_cast<size_t>(block) * grid * static_cast<size_t>(slots), 0xa5a5a5a5a5a5a5a5ull);
  struct {
    uint64_t in, out;
  } params{reinterpret_cast<uint64_t>(in.data()), reinterpret_cast<uint64_t>(out.data())};
  MemoryRanges mem = {{params.in, params.in + in.size() * 8}, {params.out, params.out + out.size() * 8}};
  std::sort(mem.begin(), mem.end());
  auto r = launchK(m, block, grid, &params, mem, engine);
  EXPECT_TRUE(r.status) << r.status.message();
  return out;
}


// The general code's forms the JIT takes beyond the hot paths' (f32 with
// .ftz, .sat and directed rounding, min, max, copysign, math functions,
// every comparison and predicate combination, conversions among integers,
// f32 and f64, integer division, minimum and maximum, predicate logic),
// over the edge values and these doubles and floats besides.
inline std::vector<uint64_t> edgeValues2() {
  auto d = [](double x) {
    uint64_t b;
    std::memcpy(&b, &x, 8);
    return b;
  };
  auto f = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return uint64_t{b};
  };
  std::vector<uint64_t> v = edgeValues();
  for (double x : {1.5, -3.25, 1e300, 5e-324, std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity(), 9223372036854775808.0, -2147483648.5, 4294967296.0, 0.5,
                   2.5, -2.5, 1e-310, 3.0000001})
    v.push_back(d(x));
  for (float x : {2.5f, 0.5f, -1e-45f, 3e9f, -3e9f, 1e20f, 0.1f, -7.75f, 1e-38f, 65504.0f}) v.push_back(f(x));
  return v;
}
constexpr int kSlots2 = 720;

inline std::string crossCheckKernel2() {
  const int values = static_cast<int>(edgeValues2().size());
  std::string s =
      ".version 9.0\n.target sm_75\n.address_size 64\n"
      ".visible .entry k(.param .u64 in, .param .u64 out)\n{\n"
      ".reg .pred %p<8>;\n.reg .b16 %h<8>;\n.reg .b32 %r<64>;\n.reg .b64 %rd<64>;\n.reg .f32 %f<16>;\n.reg .f64 %fd<8>;\n"
      "ld.param.u64 %rd60, [in];\nld.param.u64 %rd61, [out];\n"
      "cvta.to.global.u64 %rd60, %rd60;\ncvta.to.global.u64 %rd61, %rd61;\n"
      "mov.u32 %r1, %tid.x;\nmov.u32 %r2, %ntid.x;\nmov.u32 %r3, %ctaid.x;\n"
      "mad.lo.s32 %r4, %r3, %r2, %r1;\n"
      "rem.u32 %r5, %r4, " + std::to_string(values) + ";\n"
      "mad.lo.u32 %r6, %r4, 7, 3;\nrem.u32 %r6, %r6, " + std::to_string(values) + ";\n"
      "mul.wide.u32 %rd1, %r5, 8;\nadd.s64 %rd2, %rd60, %rd1;\n"
      "mul.wide.u32 %rd3, %r6, 8;\nadd.s64 %rd4, %rd60, %rd3;\n"
      "ld.global.u64 %rd10, [%rd2];\nld.global.u64 %rd11, [%rd4];\n"
      "ld.global.u32 %r10, [%rd2];\nld.global.u32 %r11, [%rd4];\n"
      "mov.b32 %f1, %r10;\nmov.b32 %f2, %r11;\nmov.b64 %fd1, %rd10;\nmov.b64 %fd2, %rd11;\n"
      "ld.global.u16 %h1, [%rd4];\ncvt.u8.u32 %r12, %r10;\n"
      "mul.lo.u32 %r7, %r4, " + std::to_string(kSlots2 * 8) + ";\ncvt.u64.u32 %rd5, %r7;\nadd.s64 %rd62, %rd61, %rd5;\n"
      "and.b32 %r13, %r1, 1;\nsetp.eq.u32 %p6, %r13, 1;\n";
  int slot = 0;
  auto out = [&](const std::string& reg) {
    s += "st.global.b64 [%rd62+" + std::to_string(8 * slot++) + "], " + reg + ";\n";
  };
  auto outPred = [&](const std::string& p) {
    s += "selp.u32 %r40, 1, 0, " + p + ";\n";
    out("%r40");
  };
  for (const char* op : {"add", "sub", "mul"})
    for (const char* q : {".ftz", ".sat", ".rz", ".rm", ".rp", ".rz.ftz", ".rm.sat", ".rn.ftz.sat"}) {
      s += std::string(op) + q + ".f32 %f3, %f1, %f2;\n";
      out("%f3");
    }
  for (const char* q : {".rn.ftz", ".rz", ".rm", ".rp.ftz", ".full.ftz", ".approx.ftz"}) {
    s += std::string("div") + q + ".f32 %f3, %f1, %f2;\n";
    out("%f3");
  }
  for (const char* q : {".rn.ftz.sat", ".rz", ".rm", ".rp.ftz", ".rn.sat"}) {
    s += std::string("fma") + q + ".f32 %f4, %f1, %f2, %f1;\n";
    out("%f4");
  }
  for (const char* q : {"min.f32", "max.f32", "min.ftz.f32", "max.ftz.f32", "copysign.f32"}) {
    s += std::string(q) + " %f5, %f1, %f2;\n";
    out("%f5");
  }
  for (const char* q : {"abs.ftz.f32", "neg.ftz.f32", "sqrt.rz.f32", "sqrt.rm.f32", "sqrt.rp.ftz.f32",
                        "sqrt.approx.ftz.f32", "rcp.rz.f32", "rcp.rn.ftz.f32", "rcp.approx.ftz.f32",
                        "rsqrt.approx.ftz.f32", "ex2.approx.ftz.f32", "lg2.approx.f32", "lg2.approx.ftz.f32",
                        "sin.approx.f32", "cos.approx.ftz.f32", "tanh.approx.f32"}) {
    s += std::string(q) + " %f6, %f1;\n";
    out("%f6");
  }
  for (const char* q : {"cvt.rn.f32.f64 %f7, %fd1;", "cvt.rz.f32.f64 %f7, %fd1;", "cvt.rm.f32.f64 %f7, %fd2;",
                        "cvt.rp.f32.f64 %f7, %fd1;", "cvt.rn.ftz.f32.f64 %f7, %fd2;", "cvt.rni.f32.f32 %f7, %f1;",
                        "cvt.rzi.f32.f32 %f7, %f2;", "cvt.rmi.f32.f32 %f7, %f1;", "cvt.rpi.f32.f32 %f7, %f2;",
                        "cvt.sat.f32.f32 %f7, %f1;", "cvt.ftz.sat.f32.f32 %f7, %f2;", "cvt.rn.sat.f32.f64 %f7, %fd1;",
                        "cvt.f64.f32 %fd3, %f1;", "cvt.rni.f64.f64 %fd3, %fd1;", "cvt.rmi.f64.f64 %fd3, %fd2;",
                        "cvt.sat.f64.f64 %fd3, %fd1;", "cvt.rn.f64.s32 %fd3, %r10;", "cvt.rn.f64.u64 %fd3, %rd10;",
                        "cvt.rn.f64.s64 %fd3, %rd11;", "cvt.rn.f32.s64 %f7, %rd10;", "cvt.rn.f32.u64 %f7, %rd11;",
                        "cvt.rn.f64.u16 %fd3, %h1;", "cvt.rzi.s32.f32 %r41, %f1;", "cvt.rni.s32.f32 %r41, %f2;",
                        "cvt.rmi.u32.f32 %r41, %f1;", "cvt.rpi.s64.f32 %rd41, %f2;", "cvt.rzi.u64.f64 %rd41, %fd1;",
                        "cvt.rzi.s16.f32 %h2, %f1;", "cvt.rni.u16.f64 %h2, %fd2;", "cvt.rz.s32.f32 %r41, %f1;",
                        "cvt.rni.s64.f64 %rd41, %fd2;", "cvt.rzi.s32.f64 %r41, %fd1;", "cvt.rpi.u64.f32 %rd41, %f1;"}) {
    s += std::string(q) + "\n";
    const std::string t = q;
    out(t.substr(t.find(' ') + 1, t.find(',') - t.find(' ') - 1));
  }
  for (const char* t : {"s32", "u32", "s64", "u64", "s16", "u16"}) {
    const bool wide = t[1] == '6';
    const std::string a = wide ? "%rd10" : t[1] == '1' ? "%h1" : "%r10", b = wide ? "%rd11" : t[1] == '1' ? "%h1" : "%r11";
    const std::string d = wide ? "%rd42" : t[1] == '1' ? "%h3" : "%r42";
    for (const char* op : {"div", "rem", "min", "max"}) {
      s += std::string(op) + "." + t + " " + d + ", " + a + ", " + b + ";\n";
      out(d);
    }
  }
  s += "div.s32 %r43, %r10, -1;\n"; out("%r43");
  s += "rem.s32 %r43, %r10, 0;\n"; out("%r43");
  s += "div.u64 %rd43, %rd10, 0;\n"; out("%rd43");
  s += "not.b32 %r44, %r10;\n"; out("%r44");
  s += "not.b16 %h4, %h1;\n"; out("%h4");
  s += "cnot.b32 %r44, %r11;\n"; out("%r44");
  s += "cnot.b64 %rd44, %rd10;\n"; out("%rd44");
  s += "setp.lt.u32 %p1, %r10, %r11;\nsetp.gt.s32 %p2, %r10, %r11;\n";
  s += "and.pred %p3, %p1, %p2;\n"; outPred("%p3");
  s += "or.pred %p3, %p1, %p6;\n"; outPred("%p3");
  s += "xor.pred %p3, %p2, %p6;\n"; outPred("%p3");
  s += "not.pred %p3, %p1;\n"; outPred("%p3");
  for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}) {
    s += std::string("setp.") + c + ".f32 %p4|%p5, %f1, %f2;\n";
    outPred("%p4");
    outPred("%p5");
    s += std::string("setp.") + c + ".f64 %p4, %fd1, %fd2;\n";
    outPred("%p4");
  }
  for (const char* c : {"lt", "ge", "ne", "equ", "nan"}) {
    s += std::string("setp.") + c + ".s32 %p4, %r10, %r11;\n";
    outPred("%p4");
  }
  s += "cvt.u8.u32 %r14, %r11;\n";
  for (const char* t : {"s8", "u8"}) {
    s += std::string("setp.lt.") + t + " %p4, %r12, %r14;\n";
    outPred("%p4");
  }
  for (const char* b : {"and", "or", "xor"}) {
    s += std::string("setp.lt.") + b + ".f32 %p4|%p5, %f1, %f2, %p6;\n";
    outPred("%p4");
    outPred("%p5");
    s += std::string("setp.ne.") + b + ".u32 %p4, %r10, %r11, !%p6;\n";
    outPred("%p4");
  }
  // Guarded forms, the divergent lanes' (odd lanes skip: partial masks).
  s += "mov.f32 %f8, 0f3F800000;\n@%p6 ex2.approx.ftz.f32 %f8, %f1;\n";
  out("%f8");
  s += "mov.u32 %r45, 9;\n@!%p6 div.u32 %r45, %r10, %r11;\n";
  out("%r45");
  if (slot > kSlots2) return "too many slots: " + std::to_string(slot);
  return s + "ret;\n}\n";
}

}  // namespace rgpu::server::ptx::test
