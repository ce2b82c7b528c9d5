// The interpreter's block runner, shared by its translation units
// (ptx_interp.cc: the scheduler, scalar, memory and control instructions;
// ptx_fast.cc: the whole-warp hot paths;
// ptx_matrix.cc: asynchronous copies, mbarriers and warp-matrix
// instructions). Internal: not part of the interpreter's interface.
//
// A block's warps run on one host thread (BlockRunner::step runs one warp
// for a time slice; slice() one round over all of them). A Warp's registers
// are 64-bit slots, 32 lanes each (register r of lane l at regs[r * 32 + l]);
// LANES(mask) visits the lanes of a mask in order. Every global access goes
// through resolve(), which checks it against the launch's memory ranges;
// shared and local addresses are offsets into the block's own buffers.
// Global memory is read and written with relaxed atomics (loadBytes,
// storeBytes): other blocks on other threads may touch the same bytes.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/half.h"
#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_ir.h"
#include "server/sim/ptx/ptx_jit.h"

namespace rgpu::server::ptx::detail {

inline uint64_t widthMask(Type t) {
  if (t == Type::kPred) return 1;
  int b = typeBytes(t);
  return b >= 8 ? ~0ull : (1ull << (b * 8)) - 1;
}
inline uint64_t trunc(uint64_t v, Type t) { return v & widthMask(t); }
inline int64_t sext(uint64_t v, Type t) {
  switch (typeBytes(t)) {
    case 1: return static_cast<int8_t>(v);
    case 2: return static_cast<int16_t>(v);
    case 4: return static_cast<int32_t>(v);
    default: return static_cast<int64_t>(v);
  }
}
inline float f32(uint64_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v)); }
inline uint64_t b32(float f) { return std::bit_cast<uint32_t>(f); }
inline double f64(uint64_t v) { return std::bit_cast<double>(v); }
inline uint64_t b64(double d) { return std::bit_cast<uint64_t>(d); }

// The NaN an f32 add, sub, mul or fma gives when an operand is NaN: the
// first NaN operand, quieted, as x86 gives it in source order. Spelled out
// so that neither the compiler's operand order (which it may swap: the
// operations commute but for the payload) nor vectorisation changes which
// one — the general code and the hot path (ptx_fast.cc) agree bit for bit.
inline float quietF32(float x) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) | 0x00400000u); }
inline float nanFirst(float r, float x, float y) {
  if (r == r) return r;
  return x != x ? quietF32(x) : y != y ? quietF32(y) : r;
}
inline float nanFirst(float r, float x, float y, float z) {
  if (r == r) return r;
  return x != x ? quietF32(x) : y != y ? quietF32(y) : z != z ? quietF32(z) : r;
}

// min and max of PTX floats, spelled out (libm's fmin/fmax leave the sign of
// equal zeros and which of two NaNs to the implementation, and the compiler
// swaps their operands as it likes): a NaN gives way to the other operand,
// two NaNs give the first, quieted; -0 is below +0. The JIT computes the same.
template <typename T, typename Bits>
T minMaxNum(T x, T y, bool max) {
  const bool xn = x != x, yn = y != y;
  if (xn || yn) {
    if (!yn) return y;
    if (!xn) return x;
    Bits b = std::bit_cast<Bits>(x);
    b |= Bits{1} << (sizeof(T) == 4 ? 22 : 51);
    return std::bit_cast<T>(b);
  }
  if (x < y) return max ? y : x;
  if (y < x) return max ? x : y;
  // Equal: the same bits, or zeros of both signs (min takes -0, max +0).
  const Bits bx = std::bit_cast<Bits>(x), by = std::bit_cast<Bits>(y);
  return std::bit_cast<T>(max ? (bx & by) : (bx | by));
}
inline float minNum(float x, float y) { return minMaxNum<float, uint32_t>(x, y, false); }
inline float maxNum(float x, float y) { return minMaxNum<float, uint32_t>(x, y, true); }
inline double minNum(double x, double y) { return minMaxNum<double, uint64_t>(x, y, false); }
inline double maxNum(double x, double y) { return minMaxNum<double, uint64_t>(x, y, true); }
// .sat: NaN to +0, else clamped to [+0, 1].
inline float saturate(float z) { return z != z ? 0.0f : minNum(1.0f, maxNum(0.0f, z)); }
inline double saturate(double z) { return z != z ? 0.0 : minNum(1.0, maxNum(0.0, z)); }

using common::bf16ToFloat;
using common::floatToBf16;
using common::floatToHalf;
using common::halfToFloat;

// Reads a floating value of type t as double (exact for f16/bf16/f32).
inline double readF(uint64_t v, Type t) {
  switch (t) {
    case Type::kF16: return halfToFloat(static_cast<uint16_t>(v));
    case Type::kBF16: return bf16ToFloat(static_cast<uint16_t>(v));
    case Type::kF32: return f32(v);
    default: return f64(v);
  }
}
inline uint64_t writeF(double d, Type t) {
  switch (t) {
    case Type::kF16: return floatToHalf(static_cast<float>(d));
    case Type::kBF16: return floatToBf16(static_cast<float>(d));
    case Type::kF32: return b32(static_cast<float>(d));
    default: return b64(d);
  }
}

inline bool isX2(Type t) { return t == Type::kF16x2 || t == Type::kBF16x2; }
inline Type halfOf(Type t) { return t == Type::kF16x2 ? Type::kF16 : Type::kBF16; }
// Applies f to both 16-bit halves of packed x2 operands.
template <typename F>
uint64_t perHalf(Type t, uint64_t a, uint64_t b, uint64_t c, F f) {
  Type h = halfOf(t);
  uint64_t r = 0;
  for (int k = 0; k < 2; ++k)
    r |= (writeF(f(readF(a >> (16 * k), h), readF(b >> (16 * k), h), readF(c >> (16 * k), h)), h) & 0xffff) << (16 * k);
  return r;
}

// Device memory as kernels see it. Threads of different blocks (on
// different interpreter threads) may store to the same bytes without
// synchronising, which a GPU allows (the value is one of those written): in
// the worker such accesses are relaxed atomics, never a C++ data race. On
// x86-64 and AArch64 they compile to plain loads and stores.
template <typename T>
void storeAs(uint8_t* p, uint64_t v) {
  std::atomic_ref<T>(*reinterpret_cast<T*>(p)).store(static_cast<T>(v), std::memory_order_relaxed);
}
template <typename T>
uint64_t loadAs(const uint8_t* p) {
  return std::atomic_ref<T>(*reinterpret_cast<T*>(const_cast<uint8_t*>(p))).load(std::memory_order_relaxed);
}

inline void storeBytes(uint8_t* p, uint64_t v, int n) {
  if ((reinterpret_cast<uintptr_t>(p) & (static_cast<uintptr_t>(n) - 1)) == 0) {
    switch (n) {
      case 1: return storeAs<uint8_t>(p, v);
      case 2: return storeAs<uint16_t>(p, v);
      case 4: return storeAs<uint32_t>(p, v);
      case 8: return storeAs<uint64_t>(p, v);
    }
  }
  std::memcpy(p, &v, static_cast<size_t>(n));
}
inline uint64_t loadBytes(const uint8_t* p, int n) {
  if ((reinterpret_cast<uintptr_t>(p) & (static_cast<uintptr_t>(n) - 1)) == 0) {
    switch (n) {
      case 1: return loadAs<uint8_t>(p);
      case 2: return loadAs<uint16_t>(p);
      case 4: return loadAs<uint32_t>(p);
      case 8: return loadAs<uint64_t>(p);
    }
  }
  uint64_t v = 0;
  std::memcpy(&v, p, static_cast<size_t>(n));
  return v;
}

// Calls f(lane) for every lane of m, in order; a converged warp (all 32
// lanes) takes a plain loop the compiler can vectorise.
template <typename F>
inline void forLanes(uint32_t m, F&& f) {
  if (m == 0xffffffffu) {
    for (int l = 0; l < 32; ++l) f(l);
  } else {
    for (uint32_t mm = m; mm; mm &= mm - 1) f(__builtin_ctz(mm));
  }
}

#define LANES(mask)                                       \
  for (uint32_t mm_ = (mask); mm_; mm_ &= mm_ - 1) {      \
    const int l = __builtin_ctz(mm_);
#define END_LANES }

struct Fault {
  int code = 0;
  std::string message;
};

struct Warp {
  uint32_t id = 0;
  uint32_t valid = 0;    // lanes that exist (the last warp may be partial)
  uint32_t exited = 0;
  uint32_t active = 0;   // lanes at pc
  uint32_t waiting = 0;  // lanes parked at other program counters (lane_pc)
  uint32_t pc = 0;
  bool at_barrier = false;
  // barrier.cluster: the phase its last arrive was in; waiting for that phase to complete.
  uint64_t cluster_phase = 0;
  bool cluster_wait = false;
  uint32_t barrier = 0;        // id waited at
  uint32_t bar_mask = 0;       // lanes that reached the barrier (for bar.red results)
  int32_t bar_dest = -1;       // bar.red destination register
  bool done = false;
  bool called = false;  // a call ran: frames or saved may hold entries (reset() clears them only then)
  uint32_t lane_pc[32];
  uint32_t tid[3][32] = {};  // per lane: %tid.x, .y, .z (set when the block is made)
  uint32_t carry = 0;  // per lane: the carry (borrow) flag add.cc/sub.cc set
  // Per-lane call stacks: (return pc, call instruction). Deeper lanes run
  // first, so lanes that diverged around a call meet again at its return.
  uint8_t depth[32] = {};
  struct Frame {
    uint32_t ret_pc, call_pc, sp;  // sp: the lane's stack top when it called
  };
  std::vector<Frame> frames[32];
  // Per lane: the top of its stack in its local memory (Function::stack_base
  // up to local_bytes): recursive functions' frames and alloca.
  uint32_t sp[32] = {};
  // Per lane: the registers of recursive callees, saved at their calls (Inst::save_count).
  std::vector<uint64_t> saved[32];
  // Open divergences, innermost last: (where their paths meet, lanes that
  // took part). Lanes wait at the meeting point until all live ones are there.
  std::vector<std::pair<uint32_t, uint32_t>> meet;
  std::vector<uint64_t> regs;

  // A fresh warp's state again, keeping the memory of its vectors (a block
  // reused for the next one). Every member but tid, sp and regs is reset here
  // (the size check below fails when one is added: reset it too); regs keeps
  // its values, and makeBlock zeroes the registers a thread may read before
  // writing them (Function::live_in).
  void reset() {
    id = valid = exited = active = waiting = pc = 0;
    at_barrier = cluster_wait = done = false;
    cluster_phase = 0;
    barrier = bar_mask = 0;
    bar_dest = -1;
    carry = 0;
    std::memset(lane_pc, 0, sizeof lane_pc);
    std::memset(depth, 0, sizeof depth);
    // tid and sp: set by whoever makes the block (ptx_launch.cc's makeBlock).
    if (called) {  // 64 vectors: most kernels never call, and a block's warps are reset each time it is reused
      for (auto& f : frames) f.clear();
      for (auto& s : saved) s.clear();
      called = false;
    }
    meet.clear();
  }
};

#if __SIZEOF_POINTER__ == 8 && !defined(_GLIBCXX_DEBUG)
static_assert(sizeof(Warp) == 2320, "a member was added to Warp: reset it in Warp::reset() and update this size");
#endif

struct Cluster;

struct Block {
  uint32_t cx, cy, cz;
  // Its cluster (null: a cluster of its own), its rank and place in it.
  Cluster* cluster = nullptr;
  uint32_t rank = 0, ccx = 0, ccy = 0, ccz = 0;
  // Per named barrier (0..15): expected threads (0 = all live), arrivals
  // without waiting, and the running bar.red reduction.
  uint32_t bar_expected[16] = {};
  uint32_t bar_arrived[16] = {};
  uint64_t bar_popc[16] = {};
  bool bar_and[16], bar_or[16];
  std::vector<uint8_t> shared;
  std::vector<uint8_t> local;
  std::vector<Warp> warps;
  std::string output;
  uint64_t printf_dropped = 0;
  uint64_t insts = 0;

  // A fresh block's state again, keeping the memory of its buffers and warps.
  void reset() {
    std::vector<uint8_t> s = std::move(shared), lo = std::move(local);
    std::vector<Warp> ws = std::move(warps);
    *this = Block();
    shared = std::move(s);
    local = std::move(lo);
    warps = std::move(ws);
  }
};

// The blocks of one cluster, in rank order, and its split barrier
// (barrier.cluster.arrive / .wait): a phase completes when every live thread
// of the cluster has arrived in it. One thread runs all of them.
struct Cluster {
  std::vector<Block*> blocks;
  uint64_t arrived = 0;  // threads, in the current phase
  uint64_t phase = 0;    // completed phases
  // Live threads of all its blocks.
  uint64_t live() const;
  // Completes the phase when every live thread has arrived.
  void settle();
};

// 8-bit floats (ptx_arith.cc): e4m3 or e5m2 from a value, rounded to nearest
// even (`satfinite`: the largest finite past it), and back (exactly).
uint8_t toFp8(double x, bool e5m2, bool satfinite);
double fromFp8(uint8_t b, bool e5m2);

// Whether the hot paths (fastMemory, fastArith) are on (setFastPaths).
bool fastPathsOn();

class BlockRunner {
 public:
  BlockRunner(const Launch& L, Block& b, std::atomic<bool>& abort);
  // Runs the block to its end; the fault that ended it, if any.
  Fault run() {
    while (slice()) {
    }
    return fault_;
  }
  // One round over the block's warps (each runs a time slice, then barriers
  // release): true while the block has more to run. A cooperative launch
  // interleaves the rounds of all its blocks, so every block is resident.
  bool slice();
  const Fault& faulted() const { return fault_; }
  // The last slice ran nothing: every live warp waits at a barrier that only
  // other blocks of its cluster can complete.
  bool stalled() const { return stalled_; }
  // Ends the block with `what` (a deadlock the cluster's runner found).
  void fail(int code, const std::string& what);

 private:
  // Runs warp w until it blocks, finishes, or `budget` instructions pass.
  bool step(Warp& w, int budget);
  void reschedule(Warp& w);
  const uint64_t* src(const Operand& o, Warp& w, uint64_t* tmp);
  uint64_t specialValue(Special s, const Warp& w, int lane) const;
  void tid(const Warp& w, int lane, uint32_t& x, uint32_t& y, uint32_t& z) const;
  bool resolve(Space space, uint64_t addr, uint32_t size, const Warp& w, int lane, uint8_t*& out);
  // Arithmetic, logic, comparison, conversion and moves (ptx_arith.cc).
  bool execArith(const Inst& in, Warp& w, uint32_t m);
  bool execMemory(const Inst& in, Warp& w, uint32_t m);
  // ld/st of one scalar per lane, every lane's address in one range and
  // aligned, done for the whole warp at once; false (nothing done): the
  // general path's case, which also reports any fault.
  bool fastMemory(const Inst& in, Warp& w, uint32_t m);
  // The hot arithmetic forms for the whole warp (ptx_fast.cc); false
  // (nothing done): execArith's general code.
  bool fastArith(const Inst& in, Warp& w, uint32_t m);
  template <typename Body>
  void withB(const Operand& o, Warp& w, uint64_t* tmp, Body&& body);
  bool execAtomic(const Inst& in, Warp& w, uint32_t m);
  bool execCall(const Inst& in, Warp& w, uint32_t m);
  // cp.async and mbarrier (see ptx_ir.h's modes).
  bool execAsyncCopy(const Inst& in, Warp& w, uint32_t m);
  bool execMbarrier(const Inst& in, Warp& w, uint32_t m);
  // wmma.load / wmma.store / wmma.mma (fragment layout in ptx_ir.h).
  bool execWmma(const Inst& in, Warp& w, uint32_t m);
  // mma.sync with the PTX ISA's fragment layouts; ldmatrix/stmatrix.
  bool execMma(const Inst& in, Warp& w, uint32_t m);
  bool execLdmatrix(const Inst& in, Warp& w, uint32_t m);
  // tex, tld4, txq (ptx_texture.cc) and suld, sust, suq.
  bool execTexture(const Inst& in, Warp& w, uint32_t m);
  bool execSurface(const Inst& in, Warp& w, uint32_t m);
  // The byte address an address operand names for `lane` in `space` (shared
  // and local addresses wrap at 32 bits); resolved and checked, or a fault.
  bool operandAddress(const Inst& in, const Operand& op, Space space, uint32_t size, Warp& w, int lane, uint8_t*& out);
  // An mbarrier's arrival (count arrivals, drop: fewer expected from the next
  // phase on, tx: transaction bytes expected); returns the phase arrived in.
  uint64_t mbarrierArrive(uint8_t* bar, uint32_t count, bool drop, int64_t tx);
  void fault(int code, const std::string& what, const Inst& in, const Warp& w, int lane);
  // A launch past its deadline or cancelled: the fault that ends it, else none.
  Fault watchdog() const;
  std::string formatPrintf(const std::string& fmt, const uint8_t* args, uint32_t args_len);

  // Runs the compiled unit u for w's active lanes (ptx_jit.h): how many of
  // its instructions ran.
  uint32_t runUnit(const jit::Unit& u, Warp& w);

  const Launch& L_;
  const Function& fn_;
  Block& b_;
  std::atomic<bool>& abort_;
  Fault fault_;
  bool stalled_ = false;
  // What compiled units see of the block (filled once; the warp's fields
  // before each unit). Its cache_lo/cache_hi is the global range the last
  // access fell in, for the interpreter's accesses too.
  jit::Frame frame_;
  std::vector<uint64_t> jit_ranges_;  // frame_.ranges
};


}  // namespace rgpu::server::ptx::detail
