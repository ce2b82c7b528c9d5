#include "server/sim/ptx/ptx_interp.h"

#include "common/sanitizers.h"
#include "server/sim/ptx/ptx_reconverge.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "common/half.h"
#include "server/sim/ptx/ptx_block.h"
#include "server/sim/ptx/ptx_parser.h"

namespace rgpu::server::ptx {

namespace detail {

uint64_t nowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

void BlockRunner::tid(const Warp& w, int lane, uint32_t& x, uint32_t& y, uint32_t& z) const {
  x = w.tid[0][lane];
  y = w.tid[1][lane];
  z = w.tid[2][lane];
}

uint64_t BlockRunner::specialValue(Special s, const Warp& w, int lane) const {
  uint32_t x, y, z;
  switch (s) {
    case Special::kTidX: tid(w, lane, x, y, z); return x;
    case Special::kTidY: tid(w, lane, x, y, z); return y;
    case Special::kTidZ: tid(w, lane, x, y, z); return z;
    case Special::kNtidX: return L_.block.x;
    case Special::kNtidY: return L_.block.y;
    case Special::kNtidZ: return L_.block.z;
    case Special::kCtaidX: return b_.cx;
    case Special::kCtaidY: return b_.cy;
    case Special::kCtaidZ: return b_.cz;
    case Special::kNctaidX: return L_.grid.x;
    case Special::kNctaidY: return L_.grid.y;
    case Special::kNctaidZ: return L_.grid.z;
    case Special::kLaneid: return static_cast<uint64_t>(lane);
    case Special::kWarpid: return w.id;
    case Special::kNwarpid: return b_.warps.size();
    case Special::kLanemaskEq: return 1u << lane;
    case Special::kLanemaskLe: return lane == 31 ? 0xffffffffu : (2u << lane) - 1;
    case Special::kLanemaskLt: return (1u << lane) - 1;
    case Special::kLanemaskGe: return ~((1u << lane) - 1) & 0xffffffffu;
    case Special::kLanemaskGt: return lane == 31 ? 0 : ~((2u << lane) - 1) & 0xffffffffu;
    case Special::kClock: return static_cast<uint32_t>(nowNs());
    case Special::kClock64: case Special::kGlobaltimer: return nowNs();
    case Special::kSmid: return (b_.cx + b_.cy * L_.grid.x) % static_cast<uint32_t>(std::max(1, L_.sm_count));
    case Special::kNsmid: return static_cast<uint64_t>(L_.sm_count);
    case Special::kGridid: return 1;
    case Special::kDynamicSmem: return L_.dynamic_shared;
    case Special::kTotalSmem: return b_.shared.size();
    // The grid-synchronisation workspace of a cooperative launch (cooperative
    // groups read its address from %envreg1:%envreg2 and trap on 0).
    case Special::kEnvregHi: return L_.grid_workspace >> 32;
    case Special::kEnvregLo: return L_.grid_workspace & 0xffffffffu;
    case Special::kEnvregOther: return 0;
    case Special::kClusterCtaidX: return b_.ccx;
    case Special::kClusterCtaidY: return b_.ccy;
    case Special::kClusterCtaidZ: return b_.ccz;
    case Special::kClusterNctaidX: return L_.cluster.x;
    case Special::kClusterNctaidY: return L_.cluster.y;
    case Special::kClusterNctaidZ: return L_.cluster.z;
    case Special::kClusteridX: return b_.cx / L_.cluster.x;
    case Special::kClusteridY: return b_.cy / L_.cluster.y;
    case Special::kClusteridZ: return b_.cz / L_.cluster.z;
    case Special::kNclusteridX: return L_.grid.x / L_.cluster.x;
    case Special::kNclusteridY: return L_.grid.y / L_.cluster.y;
    case Special::kNclusteridZ: return L_.grid.z / L_.cluster.z;
    case Special::kClusterCtarank: return b_.rank;
    case Special::kClusterNctarank: return uint64_t{L_.cluster.x} * L_.cluster.y * L_.cluster.z;
    case Special::kIsExplicitCluster: return L_.explicit_cluster;
  }
  return 0;
}

uint64_t Cluster::live() const {
  uint64_t n = 0;
  for (const Block* b : blocks)
    for (const Warp& w : b->warps) n += static_cast<uint64_t>(__builtin_popcount(w.valid & ~w.exited));
  return n;
}

void Cluster::settle() {
  if (arrived && arrived >= live()) {
    ++phase;
    arrived = 0;
  }
}

namespace {
// jit::Frame::lookup: the launch's memory range holding [lo, lo + bytes).
bool lookupRange(jit::Frame* f, uint64_t lo, uint64_t bytes, uint64_t* slot) {
  const auto* range = findRange(*static_cast<const MemoryRanges*>(f->memory), lo, bytes);
  if (!range) return false;
  slot[0] = range->first;
  slot[1] = range->second;
  return true;
}
}  // namespace

BlockRunner::BlockRunner(const Launch& L, Block& b, std::atomic<bool>& abort)
    : L_(L), fn_(*L.fn), b_(b), abort_(abort) {
  frame_.params = L.params;
  frame_.shared = b.shared.data();
  frame_.shared_size = b.shared.size();
  frame_.local_frame = fn_.local_bytes;
  frame_.ntid[0] = L.block.x, frame_.ntid[1] = L.block.y, frame_.ntid[2] = L.block.z;
  frame_.ctaid[0] = b.cx, frame_.ctaid[1] = b.cy, frame_.ctaid[2] = b.cz;
  frame_.nctaid[0] = L.grid.x, frame_.nctaid[1] = L.grid.y, frame_.nctaid[2] = L.grid.z;
  frame_.lookup = lookupRange;
  frame_.memory = L.memory;
  if (L.jit) {
    jit_ranges_.assign(2 * static_cast<size_t>(L.jit->rangeSlots()), 0);
    frame_.ranges = jit_ranges_.data();
  }
}

uint32_t BlockRunner::runUnit(const jit::Unit& u, Warp& w) {
  frame_.regs = w.regs.data();
  frame_.local = b_.local.data() + static_cast<size_t>(w.id) * 32 * fn_.local_bytes;
  frame_.tid[0] = w.tid[0], frame_.tid[1] = w.tid[1], frame_.tid[2] = w.tid[2];
  frame_.warpid = w.id;
  frame_.insts = 0;
  const uint32_t done = u.fn(&frame_, w.active);
  b_.insts += frame_.insts;
  return done;
}

void BlockRunner::fail(int code, const std::string& what) {
  if (fault_.code) return;
  fault_ = {code, what};
  abort_.store(true);
}

const uint64_t* BlockRunner::src(const Operand& o, Warp& w, uint64_t* tmp) {
  switch (o.kind) {
    case Operand::kReg:
    case Operand::kParamReg:
      if (o.neg) {  // !%p
        const uint64_t* r = &w.regs[static_cast<size_t>(o.reg) * 32];
        for (int l = 0; l < 32; ++l) tmp[l] = !(r[l] & 1);
        return tmp;
      }
      return &w.regs[static_cast<size_t>(o.reg) * 32];
    case Operand::kImm:
      for (int l = 0; l < 32; ++l) tmp[l] = o.imm;
      return tmp;
    case Operand::kSpecial:
      switch (o.special) {
        case Special::kTidX: return std::copy_n(w.tid[0], 32, tmp) - 32;
        case Special::kTidY: return std::copy_n(w.tid[1], 32, tmp) - 32;
        case Special::kTidZ: return std::copy_n(w.tid[2], 32, tmp) - 32;
        case Special::kNtidX: case Special::kNtidY: case Special::kNtidZ: case Special::kCtaidX:
        case Special::kCtaidY: case Special::kCtaidZ: case Special::kNctaidX: case Special::kNctaidY:
        case Special::kNctaidZ: {  // the same for every lane
          const uint64_t v = specialValue(o.special, w, 0);
          for (int l = 0; l < 32; ++l) tmp[l] = v;
          return tmp;
        }
        default:
          LANES(w.active) tmp[l] = specialValue(o.special, w, l);
          END_LANES
          return tmp;
      }
    default:
      for (int l = 0; l < 32; ++l) tmp[l] = 0;
      return tmp;
  }
}

void BlockRunner::fault(int code, const std::string& what, const Inst& in, const Warp& w, int lane) {
  if (fault_.code) return;
  uint32_t x, y, z;
  tid(w, lane, x, y, z);
  fault_.code = code;
  fault_.message = what + " (PTX line " + std::to_string(in.line) + ", block (" + std::to_string(b_.cx) + "," +
                   std::to_string(b_.cy) + "," + std::to_string(b_.cz) + "), thread (" + std::to_string(x) + "," +
                   std::to_string(y) + "," + std::to_string(z) + "))";
  abort_.store(true);
}

Fault BlockRunner::watchdog() const {
  if (L_.cancel && L_.cancel->load(std::memory_order_relaxed))
    return {kErrLaunchFailure, "stopped: the session ended while the kernel ran"};
  if (L_.deadline != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() > L_.deadline)
    return {kErrLaunchTimeout, "ran longer than [limits] kernel_timeout_ms = " + std::to_string(L_.timeout_ms) +
                                   " ms and was stopped (block (" + std::to_string(b_.cx) + "," + std::to_string(b_.cy) +
                                   "," + std::to_string(b_.cz) + ") was still running)"};
  return {};
}

bool BlockRunner::resolve(Space space, uint64_t addr, uint32_t size, const Warp& w, int lane, uint8_t*& out) {
  if (space == Space::kGeneric) {
    uint64_t window = addr & kWindowMask;
    if (window == kSharedWindow) {
      space = Space::kShared;
      addr -= kSharedWindow;
    } else if (window == kLocalWindow) {
      space = Space::kLocal;
      addr -= kLocalWindow;
    } else if (window == kParamWindow) {
      space = Space::kParam;
      addr -= kParamWindow;
    } else {
      space = Space::kGlobal;
    }
  }
  switch (space) {
    case Space::kShared: {
      // Bits 24..31 of a shared address name a block of the cluster (rank + 1,
      // as mapa makes them): its shared memory. 0: this block's own.
      Block* target = &b_;
      if (uint64_t r = (addr >> 24) & 0xff) {
        const size_t n = b_.cluster ? b_.cluster->blocks.size() : 1;
        if (r - 1 >= n || addr >> 32) return false;
        target = b_.cluster ? b_.cluster->blocks[r - 1] : &b_;
        addr &= 0xffffff;
      }
      if (addr > target->shared.size() || size > target->shared.size() - addr) return false;
      out = target->shared.data() + addr;
      return true;
    }
    case Space::kLocal: {
      if (addr > fn_.local_bytes || size > fn_.local_bytes - addr) return false;
      out = b_.local.data() + static_cast<size_t>(w.id * 32 + static_cast<uint32_t>(lane)) * fn_.local_bytes + addr;
      return true;
    }
    case Space::kParam:
      if (addr > fn_.param_bytes || size > fn_.param_bytes - addr) return false;
      out = const_cast<uint8_t*>(L_.params) + addr;
      return true;
    default: {  // global, const
      if (addr >= frame_.cache_lo && addr + size <= frame_.cache_hi && addr + size >= addr) {
        out = reinterpret_cast<uint8_t*>(addr);
        return true;
      }
      const auto* range = findRange(*L_.memory, addr, size);
      if (!range) return false;
      frame_.cache_lo = range->first;
      frame_.cache_hi = range->second;
      out = reinterpret_cast<uint8_t*>(addr);
      return true;
    }
  }
}

// A whole aligned 8- or 16-byte vector access in one memory operation, as the
// hardware makes it (single-copy atomic): CUB's decoupled look-back publishes
// a tile's status and value together in one v2/v4 store, and a reader that
// saw them from two separate accesses could pair a new status with an old
// value. 16 bytes: one SSE access on x86-64 (atomic on the CPUs that have
// AVX); elsewhere (and under ThreadSanitizer, which sees atomics only) as two
// 8-byte halves.
#if defined(__x86_64__) && !RGPU_TSAN
#define RGPU_SSE_WIDE 1
#endif
void loadWide(const uint8_t* p, uint32_t total, uint8_t* out) {
  if (total == 8) {
    uint64_t v = loadAs<uint64_t>(p);
    std::memcpy(out, &v, 8);
    return;
  }
#if defined(RGPU_SSE_WIDE)
  __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
#else
  uint64_t lo = loadAs<uint64_t>(p), hi = loadAs<uint64_t>(p + 8);
  std::memcpy(out, &lo, 8);
  std::memcpy(out + 8, &hi, 8);
#endif
}
void storeWide(uint8_t* p, uint32_t total, const uint8_t* in) {
  if (total == 8) {
    uint64_t v;
    std::memcpy(&v, in, 8);
    storeAs<uint64_t>(p, v);
    return;
  }
#if defined(RGPU_SSE_WIDE)
  _mm_store_si128(reinterpret_cast<__m128i*>(p), _mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
#else
  uint64_t lo, hi;
  std::memcpy(&lo, in, 8);
  std::memcpy(&hi, in + 8, 8);
  storeAs<uint64_t>(p, lo);
  storeAs<uint64_t>(p + 8, hi);
#endif
}

bool BlockRunner::execMemory(const Inst& in, Warp& w, uint32_t m) {
  if (fastMemory(in, w, m)) return true;
  const Operand& addr_op = in.op == Op::kLd ? in.a : in.d;
  const Operand& val_op = in.op == Op::kLd ? in.d : in.a;
  int n = typeBytes(in.type);
  int count = val_op.kind == Operand::kVec ? static_cast<int>(val_op.vec.size()) : 1;
  uint32_t total = static_cast<uint32_t>(n * count);
  // Call-sequence params live in registers.
  if (addr_op.kind == Operand::kParamReg) {
    uint64_t* slot = &w.regs[static_cast<size_t>(addr_op.reg) * 32];
    if (addr_op.imm + total > 8) {
      fault(kErrLaunchFailure, "call parameter access out of range", in, w, __builtin_ctz(m));
      return false;
    }
    int shift = static_cast<int>(addr_op.imm) * 8;
    uint64_t tmp[32];
    if (in.op == Op::kLd) {
      uint64_t* D = &w.regs[static_cast<size_t>(val_op.reg) * 32];
      LANES(m) D[l] = (slot[l] >> shift) & widthMask(in.type);
      END_LANES
    } else {
      const uint64_t* V = src(val_op, w, tmp);
      uint64_t mask = widthMask(in.type) << shift;
      LANES(m) slot[l] = (slot[l] & ~mask) | ((V[l] << shift) & mask);
      END_LANES
    }
    return true;
  }
  uint64_t tmp[32];
  const uint64_t* base = addr_op.has_base ? &w.regs[static_cast<size_t>(addr_op.reg) * 32] : nullptr;
  Space space = in.space;
  if (!addr_op.has_base && addr_op.sym_space != Space::kGeneric) space = addr_op.sym_space;
  LANES(m)
    uint64_t a = (base ? base[l] : 0) + addr_op.imm;
    if (space == Space::kShared || space == Space::kLocal || space == Space::kParam) {
      // Window addresses may arrive in generic form through registers.
      if ((a & kWindowMask) == kSharedWindow || (a & kWindowMask) == kLocalWindow || (a & kWindowMask) == kParamWindow)
        a &= ~kWindowMask;
      // Shared and local addresses are 32-bit: the hardware computes them
      // modulo 2^32 ([%r + imm] from a register that went "below zero").
      if (space != Space::kParam) a = static_cast<uint32_t>(a);
    }
    if (in.op == Op::kSt && (space == Space::kParam || (space == Space::kGeneric && (a & kWindowMask) == kParamWindow))) {
      fault(kErrIllegalAddress, "store to kernel parameter space", in, w, l);
      return false;
    }
    uint8_t* p = nullptr;
    if (!resolve(space, a, total, w, l, p)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
      fault(kErrIllegalAddress, std::string("illegal address ") + buf + " (" + std::to_string(total) + " bytes)", in, w, l);
      return false;
    }
    if (n > 1 && (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(std::min<uint32_t>(total, 16))) != 0 &&
        space != Space::kParam) {
      fault(kErrMisaligned, "misaligned address", in, w, l);
      return false;
    }
    bool wide = count > 1 && (total == 8 || total == 16) && reinterpret_cast<uintptr_t>(p) % total == 0;
    if (wide && in.op == Op::kLd) {
      alignas(16) uint8_t bytes[16];
      loadWide(p, total, bytes);
      for (int k = 0; k < count; ++k) {
        const Operand& e = val_op.vec[static_cast<size_t>(k)];
        if (e.kind != Operand::kReg) continue;
        uint64_t v = 0;
        std::memcpy(&v, bytes + k * n, static_cast<size_t>(n));
        if (isSigned(in.type)) v = static_cast<uint64_t>(sext(v, in.type));
        w.regs[static_cast<size_t>(e.reg) * 32 + l] = v;
      }
    } else if (wide) {
      alignas(16) uint8_t bytes[16];
      for (int k = 0; k < count; ++k) {
        const Operand& e = val_op.vec[static_cast<size_t>(k)];
        uint64_t v = e.kind == Operand::kReg ? w.regs[static_cast<size_t>(e.reg) * 32 + l] : e.imm;
        std::memcpy(bytes + k * n, &v, static_cast<size_t>(n));
      }
      storeWide(p, total, bytes);
    } else if (in.op == Op::kLd) {
      if (count == 1) {
        uint64_t v = loadBytes(p, n);
        if (isSigned(in.type)) v = static_cast<uint64_t>(sext(v, in.type));
        if (val_op.kind == Operand::kReg) w.regs[static_cast<size_t>(val_op.reg) * 32 + l] = v;
      } else {
        for (int k = 0; k < count; ++k) {
          const Operand& e = val_op.vec[static_cast<size_t>(k)];
          if (e.kind != Operand::kReg) continue;
          uint64_t v = loadBytes(p + k * n, n);
          if (isSigned(in.type)) v = static_cast<uint64_t>(sext(v, in.type));
          w.regs[static_cast<size_t>(e.reg) * 32 + l] = v;
        }
      }
    } else {
      if (count == 1) {
        uint64_t v = val_op.kind == Operand::kReg ? w.regs[static_cast<size_t>(val_op.reg) * 32 + l]
                                                  : src(val_op, w, tmp)[l];
        storeBytes(p, v, n);
      } else {
        for (int k = 0; k < count; ++k) {
          const Operand& e = val_op.vec[static_cast<size_t>(k)];
          uint64_t v = e.kind == Operand::kReg ? w.regs[static_cast<size_t>(e.reg) * 32 + l] : e.imm;
          storeBytes(p + k * n, v, n);
        }
      }
    }
  END_LANES
  return true;
}

template <typename T>
T atomicApply(AtomOp op, Type t, T old, T v, T cmpv) {
  switch (op) {
    case AtomOp::kAdd:
      if (t == Type::kF32) return static_cast<T>(b32(f32(old) + f32(v)));
      if (t == Type::kF64) return static_cast<T>(b64(f64(old) + f64(v)));
      return old + v;
    case AtomOp::kMin:
      if (isSigned(t)) return sext(old, t) < sext(v, t) ? old : v;
      if (t == Type::kF32) return f32(old) < f32(v) ? old : v;
      return old < v ? old : v;
    case AtomOp::kMax:
      if (isSigned(t)) return sext(old, t) > sext(v, t) ? old : v;
      if (t == Type::kF32) return f32(old) > f32(v) ? old : v;
      return old > v ? old : v;
    case AtomOp::kExch: return v;
    case AtomOp::kCas: return old == cmpv ? v : old;
    case AtomOp::kAnd: return old & v;
    case AtomOp::kOr: return old | v;
    case AtomOp::kXor: return old ^ v;
    case AtomOp::kInc: return old >= v ? 0 : old + 1;
    case AtomOp::kDec: return (old == 0 || old > v) ? v : old - 1;
  }
  return old;
}

bool BlockRunner::execAtomic(const Inst& in, Warp& w, uint32_t m) {
  bool red = in.op == Op::kRed;
  const Operand& addr_op = red ? in.d : in.a;
  uint64_t tb[32], tc[32];
  // atom.cas d, [a], b, c: compare with b, store c.
  const uint64_t* V = in.atom == AtomOp::kCas ? src(in.c, w, tc) : src(red ? in.a : in.b, w, tb);
  const uint64_t* C = in.atom == AtomOp::kCas ? src(in.b, w, tb) : nullptr;
  int n = typeBytes(in.type);
  if (n != 4 && n != 8) {
    fault(kErrLaunchFailure, "atomic of unsupported width", in, w, __builtin_ctz(m));
    return false;
  }
  const uint64_t* base = addr_op.has_base ? &w.regs[static_cast<size_t>(addr_op.reg) * 32] : nullptr;
  Space space = in.space;
  if (!addr_op.has_base && addr_op.sym_space != Space::kGeneric) space = addr_op.sym_space;
  uint64_t* D = (!red && in.d.kind == Operand::kReg) ? &w.regs[static_cast<size_t>(in.d.reg) * 32] : nullptr;
  LANES(m)
    uint64_t a = (base ? base[l] : 0) + addr_op.imm;
    if (space == Space::kShared && (a & kWindowMask) == kSharedWindow) a &= ~kWindowMask;
    if (space == Space::kShared) a = static_cast<uint32_t>(a);  // 32-bit, as above
    uint8_t* p = nullptr;
    if (!resolve(space, a, static_cast<uint32_t>(n), w, l, p) || reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(n)) {
      fault(kErrIllegalAddress, "illegal atomic address", in, w, l);
      return false;
    }
    uint64_t old;
    if (n == 4) {
      std::atomic_ref<uint32_t> ref(*reinterpret_cast<uint32_t*>(p));
      uint32_t cur = ref.load(std::memory_order_relaxed), next;
      do {
        next = atomicApply<uint32_t>(in.atom, in.type, cur, static_cast<uint32_t>(V[l]), C ? static_cast<uint32_t>(C[l]) : 0);
      } while (!ref.compare_exchange_weak(cur, next, std::memory_order_relaxed));
      old = isSigned(in.type) ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(cur))) : cur;
    } else {
      std::atomic_ref<uint64_t> ref(*reinterpret_cast<uint64_t*>(p));
      uint64_t cur = ref.load(std::memory_order_relaxed), next;
      do {
        next = atomicApply<uint64_t>(in.atom, in.type, cur, V[l], C ? C[l] : 0);
      } while (!ref.compare_exchange_weak(cur, next, std::memory_order_relaxed));
      old = cur;
    }
    if (D) D[l] = old;
  END_LANES
  return true;
}

std::string BlockRunner::formatPrintf(const std::string& fmt, const uint8_t* args, uint32_t args_len) {
  std::string out;
  uint32_t off = 0;
  auto take = [&](uint32_t size, uint64_t& v) {
    off = (off + size - 1) & ~(size - 1);
    if (!args || off + size > args_len) return false;
    v = loadBytes(args + off, static_cast<int>(size));
    off += size;
    return true;
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    // %[flags][width][.precision][length]conversion, parsed in full: the
    // spec handed to snprintf holds flags and numbers only, never a '*'
    // (whose argument snprintf would take from its own, absent, varargs).
    // A '*' takes its int from the kernel's argument buffer, as CUDA's does.
    size_t j = i + 1;
    std::string spec = "%";
    while (j < fmt.size() && std::strchr("-+ #0", fmt[j])) spec += fmt[j++];
    auto number = [&](int64_t& n, bool& given) {
      given = false;
      if (j < fmt.size() && fmt[j] == '*') {
        uint64_t raw = 0;
        ++j;
        given = true;
        if (!take(4, raw)) return false;
        n = static_cast<int32_t>(raw);
        return true;
      }
      n = 0;
      while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9') {
        n = std::min<int64_t>(n * 10 + (fmt[j++] - '0'), 1 << 30);
        given = true;
      }
      return true;
    };
    int64_t width = 0, precision = -1;
    bool has_width = false, has_precision = false;
    if (!number(width, has_width)) break;
    if (width < 0) {  // a negative '*' width: left-justified, as C's printf
      spec += '-';
      width = -width;
    }
    if (j < fmt.size() && fmt[j] == '.') {
      ++j;
      if (!number(precision, has_precision)) break;
      if (!has_precision) precision = 0, has_precision = true;  // "%.f": precision 0
      if (precision < 0) has_precision = false;                // a negative '*' precision: as if omitted
    }
    if (has_width) spec += std::to_string(std::min<int64_t>(width, kMaxPrintfField));
    if (has_precision) spec += "." + std::to_string(std::min<int64_t>(precision, kMaxPrintfField));
    int longs = 0;
    while (j < fmt.size() && std::strchr("hlLzjt", fmt[j])) longs += fmt[j++] == 'l' || fmt[j - 1] == 'z' || fmt[j - 1] == 'j';
    if (j >= fmt.size()) {
      out += fmt.substr(i);
      break;
    }
    char conv = fmt[j];
    char buf[2 * kMaxPrintfField + 512];
    uint64_t v = 0;
    if (std::strchr("diuxXoc", conv)) {
      bool wide = longs > 0;
      if (!take(wide ? 8 : 4, v)) break;
      if (conv == 'd' || conv == 'i') {
        long long s = wide ? static_cast<long long>(v) : static_cast<int32_t>(v);
        std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), s);
      } else if (conv == 'c') {
        std::snprintf(buf, sizeof buf, (spec + "c").c_str(), static_cast<int>(v));
      } else {
        unsigned long long u = wide ? v : static_cast<uint32_t>(v);
        std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(), u);
      }
    } else if (std::strchr("feEgGaA", conv)) {
      if (!take(8, v)) break;
      std::snprintf(buf, sizeof buf, (spec + conv).c_str(), f64(v));
    } else if (conv == 'p') {
      if (!take(8, v)) break;
      std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    } else if (conv == 's') {
      if (!take(8, v)) break;
      std::string str;
      for (uint64_t k = 0; k < 4096; ++k) {
        uint8_t* p = nullptr;
        if (!resolve(Space::kGeneric, v + k, 1, b_.warps[0], 0, p) || *p == 0) break;
        str += static_cast<char>(*p);
      }
      std::snprintf(buf, sizeof buf, (spec + "s").c_str(), str.c_str());
    } else {
      // Not a conversion CUDA's printf knows (%n among them): the text as written.
      out += fmt.substr(i, j + 1 - i);
      i = j;
      continue;
    }
    out += buf;
    i = j;
  }
  return out;
}

bool BlockRunner::execCall(const Inst& in, Warp& w, uint32_t m) {
  auto readString = [&](uint64_t addr, const Warp& ww, int lane) {
    std::string s;
    for (uint64_t k = 0; k < 4096; ++k) {
      uint8_t* p = nullptr;
      if (!resolve(Space::kGeneric, addr + k, 1, ww, lane, p) || *p == 0) break;
      s += static_cast<char>(*p);
    }
    return s;
  };
  const uint64_t* A = &w.regs[static_cast<size_t>(in.a.reg) * 32];
  if (in.op == Op::kCallMalloc || in.op == Op::kCallFree) {
    uint64_t* D = in.op == Op::kCallMalloc ? &w.regs[static_cast<size_t>(in.d.reg) * 32] : nullptr;
    // __nv_aligned_device_malloc's alignment (b), else malloc's 16 bytes.
    const uint64_t* align = D && in.b.kind != Operand::kNone ? &w.regs[static_cast<size_t>(in.b.reg) * 32] : nullptr;
    LANES(m)
      if (D) D[l] = L_.heap ? L_.heap->allocate(A[l], align ? align[l] : 16) : 0;
      else if (L_.heap) L_.heap->release(A[l]);
    END_LANES
    return true;
  }
  const uint64_t* B = &w.regs[static_cast<size_t>(in.b.reg) * 32];
  if (in.op == Op::kCallSetConditional) {
    // The handle is the address of its value's word in device memory.
    LANES(m)
      uint8_t* p = nullptr;
      if (!resolve(Space::kGlobal, A[l], 4, w, l, p)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(A[l]));
        fault(kErrIllegalAddress, std::string("cudaGraphSetConditional with an unknown handle ") + buf, in, w, l);
        return false;
      }
      uint32_t v = static_cast<uint32_t>(B[l]);
      std::memcpy(p, &v, 4);
    END_LANES
    return true;
  }
  if (in.op == Op::kCallPrintf) {
    uint64_t* D = in.d.kind == Operand::kParamReg || in.d.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d.reg) * 32] : nullptr;
    LANES(m)
      std::string fmt = readString(A[l], w, l);
      uint8_t* args = nullptr;
      uint32_t len = 0;
      if (B[l] != 0) {
        // The argument buffer is in local memory: everything up to its end.
        uint64_t a = B[l];
        if ((a & kWindowMask) == kLocalWindow) {
          a -= kLocalWindow;
          if (a <= fn_.local_bytes && resolve(Space::kLocal, a, 0, w, l, args)) len = fn_.local_bytes - static_cast<uint32_t>(a);
        } else {
          uint8_t* p = nullptr;
          if (resolve(Space::kGeneric, a, 8, w, l, p)) {
            args = p;
            len = 8;
            while (len < 1024) {
              uint8_t* q = nullptr;
              if (!resolve(Space::kGeneric, a + len, 8, w, l, q)) break;
              len += 8;
            }
          }
        }
      }
      std::string s = formatPrintf(fmt, args, len);
      b_.output += s;
      boundOutput(b_.output, L_.printf_fifo, b_.printf_dropped);
      if (D) D[l] = s.size();
    END_LANES
    return true;
  }
  // __assertfail(message, file, line, function, char size)
  const uint64_t* C = &w.regs[static_cast<size_t>(in.c.reg) * 32];
  const uint64_t* E = &w.regs[static_cast<size_t>(in.e.reg) * 32];
  LANES(m)
    uint32_t x, y, z;
    tid(w, l, x, y, z);
    std::string msg = readString(A[l], w, l), file = readString(B[l], w, l), func = readString(E[l], w, l);
    char buf[1024];
    std::snprintf(buf, sizeof buf, "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.\n",
                  file.c_str(), static_cast<uint32_t>(C[l]), func.c_str(), b_.cx, b_.cy, b_.cz, x, y, z, msg.c_str());
    b_.output += buf;
  END_LANES
  fault(kErrAssert, "device-side assertion failed", in, w, __builtin_ctz(m));
  return false;
}

void BlockRunner::reschedule(Warp& w) {
  // Park the active lanes at w.pc, then continue with the lowest pc.
  LANES(w.active) w.lane_pc[l] = w.pc;
  END_LANES
  uint32_t live = (w.active | w.waiting) & ~w.exited;
  if (!live) {
    w.active = w.waiting = 0;
    w.done = true;
    return;
  }
  // Only the lanes of the innermost open divergence run, and only those not
  // yet at its meeting point; when all are there it closes (ptx_reconverge.h).
  uint32_t pool = live;
  while (!w.meet.empty()) {
    auto [at, lanes] = w.meet.back();
    uint32_t away = 0;
    LANES(lanes & live) if (w.lane_pc[l] != at) away |= 1u << l;
    END_LANES
    if (away) {
      pool = away;
      break;
    }
    w.meet.pop_back();
  }
  uint32_t best = UINT32_MAX;
  int deepest = 0;
  LANES(pool) deepest = std::max(deepest, static_cast<int>(w.depth[l]));
  END_LANES
  LANES(pool) if (w.depth[l] == deepest) best = std::min(best, w.lane_pc[l]);
  END_LANES
  uint32_t act = 0;
  LANES(pool) if (w.lane_pc[l] == best && w.depth[l] == deepest) act |= 1u << l;
  END_LANES
  w.pc = best;
  w.active = act;
  w.waiting = live & ~act;
}

bool BlockRunner::step(Warp& w, int budget) {
  const std::vector<Inst>& code = fn_.code;
  uint64_t ta[32], tb[32], tc[32];
  while (budget-- > 0) {
    if (w.pc >= code.size()) {
      fault(kErrLaunchFailure, "ran past the end of the kernel", code.back(), w, 0);
      return false;
    }
    if (const jit::Unit* u = L_.jit ? L_.jit->unitAt(w.pc) : nullptr) {
      // A compiled unit: its instructions at once (ptx_jit.h: no lane can be
      // parked inside it, so rescheduling waits until its end). Where it
      // stopped early, the general code runs that instruction below.
      const uint32_t done = runUnit(*u, w);
      w.pc += done;
      budget -= static_cast<int>(done);
      if (done == u->count) {
        ++budget;  // (the loop counted one)
        if (w.waiting) reschedule(w);
        if (w.done) return true;
        continue;
      }
    }
    const Inst& in = code[w.pc];
    uint32_t m = w.active;
    if (in.guard >= 0) {
      const uint64_t* P = &w.regs[static_cast<size_t>(in.guard) * 32];
      uint32_t pm = 0;
      for (int l = 0; l < 32; ++l) pm |= static_cast<uint32_t>(P[l] & 1) << l;  // (inactive lanes: masked below)
      m = in.guard_neg ? (m & ~pm) : (m & pm);
    }
    b_.insts += m == 0xffffffffu ? 32 : static_cast<uint64_t>(__builtin_popcount(m));
    uint64_t* D = in.d.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d.reg) * 32] : nullptr;
    const Type t = in.type;
    bool advance = true;

    switch (in.op) {
      default:  // arithmetic, logic, comparison, conversion, moves (ptx_arith.cc)
        if (m && !execArith(in, w, m)) return false;
        break;
      case Op::kLd:
      case Op::kSt:
        if (m && !execMemory(in, w, m)) return false;
        break;
      case Op::kAtom:
      case Op::kRed:
        if (m && !execAtomic(in, w, m)) return false;
        break;
      case Op::kCpAsync:
        if (m && !execAsyncCopy(in, w, m)) return false;
        break;
      case Op::kAsyncRemote: {
        // st.async / red.async: the access as st / red (into the cluster's
        // shared memory), then the mbarrier beside it completes its bytes.
        if (!m) break;
        Inst access = in;
        access.op = in.carry ? Op::kRed : Op::kSt;
        access.b = Operand();
        if (!(in.carry ? execAtomic(access, w, m) : execMemory(access, w, m))) return false;
        const int count = in.a.kind == Operand::kVec ? static_cast<int>(in.a.vec.size()) : 1;
        const int64_t bytes = static_cast<int64_t>(typeBytes(in.type)) * count;
        LANES(m)
          uint8_t* bar;
          if (!operandAddress(in, in.b, Space::kShared, 8, w, l, bar)) return false;
          mbarrierArrive(bar, 0, false, -bytes);
        END_LANES
        break;
      }
      case Op::kMbarrier:
        if (m && !execMbarrier(in, w, m)) return false;
        break;
      case Op::kWmma:
        if (m && !execWmma(in, w, m)) return false;
        break;
      case Op::kMma:
        if (m && !execMma(in, w, m)) return false;
        break;
      case Op::kLdmatrix:
        if (m && !execLdmatrix(in, w, m)) return false;
        break;
      case Op::kTex:
      case Op::kTld4:
      case Op::kTxq:
        if (m && !execTexture(in, w, m)) return false;
        break;
      case Op::kSuld:
      case Op::kSust:
      case Op::kSuq:
        if (m && !execSurface(in, w, m)) return false;
        break;
      case Op::kCallPrintf:
      case Op::kCallAssert:
      case Op::kCallMalloc:
      case Op::kCallFree:
      case Op::kCallSetConditional:
        if (m && !execCall(in, w, m)) return false;
        break;
      case Op::kBra: {
        advance = false;
        uint32_t taken = m, not_taken = w.active & ~m;
        if (!not_taken) {
          w.pc = in.target;
        } else if (!taken) {
          w.pc += 1;
        } else {
          uint32_t at = w.pc < fn_.reconverge.size() ? fn_.reconverge[w.pc] : kNoReconvergence;
          if (at != kNoReconvergence && (w.meet.empty() || w.meet.back().first != at)) w.meet.emplace_back(at, w.active);
          LANES(taken) w.lane_pc[l] = in.target;
          END_LANES
          LANES(not_taken) w.lane_pc[l] = w.pc + 1;
          END_LANES
          w.waiting |= w.active;
          w.active = 0;
          reschedule(w);
          break;
        }
        if (w.waiting) reschedule(w);
        break;
      }
      case Op::kCall: {
        if (!m) break;
        bool too_deep = false;
        LANES(m) too_deep |= w.depth[l] >= kMaxCallDepth;
        END_LANES
        if (too_deep) {
          fault(kErrLaunchFailure, "device call stack deeper than " + std::to_string(kMaxCallDepth), in, w, __builtin_ctz(m));
          return false;
        }
        // A recursive callee's registers (this lane may be inside it already)
        // are saved first; then the arguments, all read before any parameter
        // register is written, go into the callee's parameter registers.
        const size_t nargs = std::min(in.a.vec.size(), in.b.vec.size());
        uint64_t few[8 * 32];
        std::vector<uint64_t> many(nargs > 8 ? nargs * 32 : 0);
        uint64_t* args = nargs > 8 ? many.data() : few;
        uint32_t sp_at_call[32];
        std::memcpy(sp_at_call, w.sp, sizeof sp_at_call);
        for (size_t k = 0; k < nargs; ++k) {
          const uint64_t* S = &w.regs[static_cast<size_t>(in.a.vec[k].reg) * 32];
          LANES(m) args[k * 32 + static_cast<size_t>(l)] = S[l];
          END_LANES
        }
        w.called = true;  // frames and saved registers to clear when the warp is reused
        if (in.save_count) {
          LANES(m)
            for (uint32_t r = 0; r < in.save_count; ++r)
              w.saved[l].push_back(w.regs[static_cast<size_t>(in.save_base + r) * 32 + static_cast<size_t>(l)]);
          END_LANES
        }
        for (size_t k = 0; k < nargs; ++k) {
          uint64_t* P = &w.regs[static_cast<size_t>(in.b.vec[k].reg) * 32];
          LANES(m) P[l] = args[k * 32 + static_cast<size_t>(l)];
          END_LANES
        }
        if (in.frame_bytes) {  // a recursive callee's local memory: a frame of its own on the lane's stack
          bool overflow = false;
          LANES(m)
            uint32_t frame = (w.sp[l] + 15) & ~15u;
            if (uint64_t{frame} + in.frame_bytes > fn_.local_bytes) {
              overflow = true;
            } else {
              w.regs[static_cast<size_t>(in.frame_reg) * 32 + static_cast<size_t>(l)] = frame;
              w.sp[l] = frame + in.frame_bytes;
            }
          END_LANES
          if (overflow) {
            fault(kErrLaunchFailure, "device stack overflow (" + std::to_string(fn_.local_bytes - fn_.stack_base) +
                                         " bytes per thread)", in, w, __builtin_ctz(m));
            return false;
          }
        }
        LANES(m)
          w.frames[l].push_back({w.pc + 1, w.pc, sp_at_call[l]});
          ++w.depth[l];
          w.lane_pc[l] = in.target;
        END_LANES
        uint32_t stay = w.active & ~m;
        LANES(stay) w.lane_pc[l] = w.pc + 1;
        END_LANES
        w.waiting |= w.active;
        w.active = 0;
        advance = false;
        reschedule(w);
        break;
      }
      case Op::kRetFunc: {
        if (!m) break;
        LANES(m)
          auto [ret_pc, call_pc, sp] = w.frames[l].back();
          w.frames[l].pop_back();
          w.sp[l] = sp;  // what the callee took (its frame, its allocas) goes back
          --w.depth[l];
          const Inst& call = code[call_pc];
          const bool returns = call.c.kind == Operand::kParamReg && call.d.kind == Operand::kParamReg;
          const uint64_t value = returns ? w.regs[static_cast<size_t>(call.c.reg) * 32 + l] : 0;
          if (call.save_count) {  // the outer activation's registers back, then the result
            auto& saved = w.saved[l];
            for (uint32_t r = call.save_count; r-- > 0;) {
              w.regs[static_cast<size_t>(call.save_base + r) * 32 + static_cast<size_t>(l)] = saved.back();
              saved.pop_back();
            }
          }
          if (returns) w.regs[static_cast<size_t>(call.d.reg) * 32 + l] = value;
          w.lane_pc[l] = ret_pc;
        END_LANES
        uint32_t stay = w.active & ~m;
        LANES(stay) w.lane_pc[l] = w.pc + 1;
        END_LANES
        w.waiting |= w.active;
        w.active = 0;
        advance = false;
        reschedule(w);
        break;
      }
      case Op::kAlloca: {  // alloca.type d, size{, align}: from the lane's stack, given back when its function returns
        const uint64_t* A = src(in.a, w, ta);
        uint64_t align = in.b.kind == Operand::kImm && in.b.imm ? in.b.imm : 8;
        if (align & (align - 1)) align = 8;
        bool overflow = false;
        LANES(m)
          uint64_t at = (uint64_t{w.sp[l]} + align - 1) & ~(align - 1);
          if (at + A[l] > fn_.local_bytes || A[l] > fn_.local_bytes) {
            overflow = true;
          } else {
            D[l] = at;
            w.sp[l] = static_cast<uint32_t>(at + A[l]);
          }
        END_LANES
        if (overflow) {
          fault(kErrLaunchFailure, "alloca beyond the device stack (" + std::to_string(fn_.local_bytes - fn_.stack_base) +
                                       " bytes per thread)", in, w, __builtin_ctz(m));
          return false;
        }
        break;
      }
      case Op::kStackSave:
        LANES(m) D[l] = w.sp[l];
        END_LANES
        break;
      case Op::kStackRestore: {  // stackrestore.type a (the parser's first operand)
        const uint64_t* A = src(in.d, w, ta);
        bool bad = false;
        LANES(m)
          if (A[l] < fn_.stack_base || A[l] > fn_.local_bytes) bad = true;
          else w.sp[l] = static_cast<uint32_t>(A[l]);
        END_LANES
        if (bad) {
          fault(kErrLaunchFailure, "stackrestore to an address that stacksave did not give", in, w, __builtin_ctz(m));
          return false;
        }
        break;
      }
      case Op::kRet:
      case Op::kExit: {
        w.exited |= m;
        w.active &= ~m;
        if (!w.active) {
          advance = false;
          reschedule(w);
          if (w.done) return true;
        }
        break;
      }
      case Op::kTrap:
        if (m) {
          fault(kErrLaunchFailure, "trap instruction", in, w, __builtin_ctz(m));
          return false;
        }
        break;
      case Op::kBar: {
        if (!m) break;
        // Operands: bar.sync|arrive id{, count};  bar.red.op d, id{, count}, {!}pred.
        // A count, when given, is in threads.
        bool red = in.mode >= kBarRedPopc;
        const Operand& id_op = red ? in.a : in.d;
        const Operand* count_op = red ? (in.c.kind != Operand::kNone ? &in.b : nullptr)
                                      : (in.a.kind != Operand::kNone ? &in.a : nullptr);
        const Operand* pred_op = red ? (in.c.kind != Operand::kNone ? &in.c : &in.b) : nullptr;
        int first_lane = __builtin_ctz(m);
        uint32_t id = static_cast<uint32_t>(src(id_op, w, ta)[first_lane]) & 15;
        if (count_op) b_.bar_expected[id] = static_cast<uint32_t>(src(*count_op, w, tb)[first_lane]);
        if (in.mode == kBarArrive) {
          ++b_.bar_arrived[id];
          break;
        }
        if (red) {
          const uint64_t* P = src(*pred_op, w, tc);
          bool first = true;
          for (const Warp& o : b_.warps) first &= !(o.at_barrier && o.barrier == id && o.bar_dest >= 0);
          if (first) {
            b_.bar_popc[id] = 0;
            b_.bar_and[id] = true;
            b_.bar_or[id] = false;
          }
          LANES(m)
            bool v = P[l] & 1;
            b_.bar_popc[id] += v;
            b_.bar_and[id] = b_.bar_and[id] && v;
            b_.bar_or[id] = b_.bar_or[id] || v;
          END_LANES
          w.bar_dest = static_cast<int32_t>(in.d.reg);
        } else {
          w.bar_dest = -1;
        }
        // The warp waits at the barrier; the block scheduler releases it.
        w.barrier = id;
        w.bar_mask = m;
        w.pc += 1;
        w.at_barrier = true;
        return true;
      }
      case Op::kClusterArrive: {  // barrier.cluster.arrive: this warp's lanes arrive in the current phase
        if (!m) break;
        Cluster& c = *b_.cluster;
        c.arrived += static_cast<uint64_t>(__builtin_popcount(m));
        w.cluster_phase = c.phase;
        c.settle();
        break;
      }
      case Op::kClusterWait: {  // barrier.cluster.wait: until the phase of the last arrive completes
        if (!m || b_.cluster->phase > w.cluster_phase) break;
        w.pc += 1;
        w.cluster_wait = true;
        return true;
      }
      case Op::kMapa:
      case Op::kGetctarank: {
        // A shared address of this block as the cluster sees it: bits 24..31
        // hold the owning block's rank + 1 (see resolve()).
        const uint64_t* A = src(in.a, w, ta);
        const uint64_t* B = in.op == Op::kMapa ? src(in.b, w, tb) : nullptr;
        const bool generic = in.space != Space::kShared;
        bool bad = false;
        LANES(m)
          uint64_t a = A[l];
          if (generic) {
            if ((a & kWindowMask) != kSharedWindow) {
              bad = true;
              continue;
            }
            a -= kSharedWindow;
          }
          a = static_cast<uint32_t>(a);
          uint64_t field = (a >> 24) & 0xff;
          if (in.op == Op::kGetctarank) {
            D[l] = field ? field - 1 : b_.rank;
          } else {
            uint64_t mapped = ((static_cast<uint64_t>(static_cast<uint32_t>(B[l])) + 1) << 24 | (a & 0xffffff)) & 0xffffffffu;
            D[l] = generic ? (kSharedWindow | mapped) : mapped;
          }
        END_LANES
        if (bad) {
          fault(kErrIllegalAddress, std::string(in.op == Op::kMapa ? "mapa" : "getctarank") + " of an address outside shared memory", in, w, __builtin_ctz(m));
          return false;
        }
        break;
      }
      case Op::kBarWarp:
      case Op::kMembar:
      case Op::kNanosleep:
      case Op::kNop:
        break;
      case Op::kActivemask:
        LANES(m) D[l] = w.active;
        END_LANES
        break;
      case Op::kShfl: {
        // shfl.sync.mode.b32 d[|p], a, b, c, membermask
        const uint64_t* A = src(in.a, w, ta);
        const uint64_t* B = src(in.b, w, tb);
        const uint64_t* C = src(in.c, w, tc);
        uint64_t out[32];
        bool valid[32];
        LANES(m)
          uint32_t bval = static_cast<uint32_t>(B[l]) & 31, cval = static_cast<uint32_t>(C[l]);
          uint32_t clamp = cval & 31, seg = (cval >> 8) & 31;
          uint32_t min_lane = static_cast<uint32_t>(l) & seg, max_lane = min_lane | (clamp & ~seg);
          int j;
          bool ok;
          switch (in.mode) {
            case kShflUp: j = l - static_cast<int>(bval); ok = j >= static_cast<int>(max_lane); break;
            case kShflDown: j = l + static_cast<int>(bval); ok = j <= static_cast<int>(max_lane); break;
            case kShflBfly: j = l ^ static_cast<int>(bval); ok = j <= static_cast<int>(max_lane); break;
            default: j = static_cast<int>(min_lane | (bval & ~seg)); ok = j <= static_cast<int>(max_lane); break;
          }
          if (!ok || j < 0 || j > 31) j = l;
          out[l] = A[j];
          valid[l] = ok;
        END_LANES
        uint64_t* D2 = in.d2.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d2.reg) * 32] : nullptr;
        LANES(m) D[l] = out[l];
          if (D2) D2[l] = valid[l];
        END_LANES
        break;
      }
      // The .sync collectives: each lane's result is over the lanes of its
      // own membermask (tiles of a warp name disjoint masks and run here in
      // one step); without a mask operand, over the active lanes.
      case Op::kVote: {
        // vote.sync.mode d, {p}, membermask
        const uint64_t* A = src(in.a, w, ta);
        const uint64_t* B = in.b.kind == Operand::kNone ? nullptr : src(in.b, w, tb);
        uint32_t ballot = 0;
        LANES(m) if (A[l] & 1) ballot |= 1u << l;
        END_LANES
        LANES(m)
          uint32_t mm = B ? static_cast<uint32_t>(B[l]) & m : m, bal = ballot & mm;
          switch (in.mode) {
            case kVoteAll: D[l] = bal == mm; break;
            case kVoteAny: D[l] = bal != 0; break;
            case kVoteUni: D[l] = bal == 0 || bal == mm; break;
            default: D[l] = bal; break;
          }
        END_LANES
        break;
      }
      case Op::kRedux: {
        const uint64_t* A = src(in.a, w, ta);
        const uint64_t* B = in.b.kind == Operand::kNone ? nullptr : src(in.b, w, tb);
        uint64_t res[32];
        uint32_t last = 0;
        uint64_t acc = 0;
        bool have = false;
        LANES(m)
          uint32_t mm = B ? static_cast<uint32_t>(B[l]) & m : m;
          if (!have || mm != last) {  // lanes of one group are neighbours: reduce once per group
            acc = 0;
            bool first = true;
            for (uint32_t k = mm; k; k &= k - 1) {
              uint64_t x = trunc(A[__builtin_ctz(k)], t);
              acc = first ? x : trunc(atomicApply<uint64_t>(in.atom, t, acc, x, 0), t);
              first = false;
            }
            last = mm, have = true;
          }
          res[l] = acc;
        END_LANES
        LANES(m) D[l] = res[l];
        END_LANES
        break;
      }
      case Op::kMatch: {
        // match.any: lanes holding the same value; match.all: everyone or nobody.
        const uint64_t* A = src(in.a, w, ta);
        const uint64_t* B = in.b.kind == Operand::kNone ? nullptr : src(in.b, w, tb);
        uint64_t* D2 = in.d2.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d2.reg) * 32] : nullptr;
        uint64_t res[32], res2[32];
        LANES(m)
          uint32_t mm = B ? static_cast<uint32_t>(B[l]) & m : m;
          uint32_t same = 0;
          for (uint32_t k = mm; k; k &= k - 1) {
            int j = __builtin_ctz(k);
            if (trunc(A[j], t) == trunc(A[l], t)) same |= 1u << j;
          }
          if (in.mode == 1) {
            res[l] = same == mm ? mm : 0;
            res2[l] = same == mm;
          } else {
            res[l] = same;
          }
        END_LANES
        LANES(m)
          D[l] = res[l];
          if (in.mode == 1 && D2) D2[l] = res2[l];
        END_LANES
        break;
      }
    }
    if (advance) {
      w.pc += 1;
      if (w.waiting) reschedule(w);
    }
    if (w.done) return true;
  }
  return true;
}

bool BlockRunner::slice() {
  {
    if (abort_.load(std::memory_order_relaxed)) return false;
    if (Fault f = watchdog(); f.code) {
      if (!fault_.code) fault_ = std::move(f);
      abort_.store(true);
      return false;
    }
    bool all_done = true, progressed = false, cluster_waiting = false;
    stalled_ = false;
    for (Warp& w : b_.warps) {
      if (w.done) continue;
      all_done = false;
      if (w.at_barrier) continue;
      if (w.cluster_wait) {
        if (b_.cluster->phase <= w.cluster_phase) {
          cluster_waiting = true;
          continue;
        }
        w.cluster_wait = false;
      }
      progressed = true;
      if (!step(w, 4096)) return false;
    }
    if (all_done) {
      b_.cluster->settle();  // its threads no longer count at the cluster's barrier
      return false;
    }
    // Barriers: release a named barrier once its expected threads (default:
    // every live thread of the block) have arrived or wait there.
    bool released = false;
    uint32_t live = 0;
    for (Warp& w : b_.warps)
      if (!w.done) ++live;
    for (uint32_t id = 0; id < 16; ++id) {
      uint32_t waiting = 0;
      for (Warp& w : b_.warps)
        if (!w.done && w.at_barrier && w.barrier == id) ++waiting;
      if (!waiting) continue;
      uint32_t need = b_.bar_expected[id] ? (b_.bar_expected[id] + 31) / 32 : live;
      if (waiting + b_.bar_arrived[id] < need) continue;
      for (Warp& w : b_.warps) {
        if (w.done || !w.at_barrier || w.barrier != id) continue;
        if (w.bar_dest >= 0) {
          const Inst& in = fn_.code[w.pc - 1];
          uint64_t v = in.mode == kBarRedPopc ? b_.bar_popc[id] : in.mode == kBarRedAnd ? b_.bar_and[id] : b_.bar_or[id];
          uint64_t* D = &w.regs[static_cast<size_t>(w.bar_dest) * 32];
          LANES(w.bar_mask) D[l] = v;
          END_LANES
          w.bar_dest = -1;
        }
        w.at_barrier = false;
      }
      b_.bar_arrived[id] = 0;
      b_.bar_expected[id] = 0;
      released = true;
    }
    if (!released && !progressed && cluster_waiting) {
      // Waiting for the cluster: other blocks of it may complete the phase.
      b_.cluster->settle();
      bool freed = false;
      for (Warp& w : b_.warps) freed |= w.cluster_wait && b_.cluster->phase > w.cluster_phase;
      if (freed) return true;
      if (b_.cluster->blocks.size() > 1) {
        stalled_ = true;
        return true;
      }
    }
    if (!released && !progressed) {
      // Every live warp waits at a barrier that can never fill.
      for (Warp& w : b_.warps)
        if (!w.done) {
          fault(kErrLaunchFailure, "barrier deadlock: warps wait at barriers that cannot complete", fn_.code[w.pc ? w.pc - 1 : 0], w, 0);
          break;
        }
      return false;
    }
  }
  return true;
}

}  // namespace detail

}  // namespace rgpu::server::ptx
