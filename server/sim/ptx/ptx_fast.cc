// The interpreter's hot paths: the instruction forms that dominate real
// kernels, run for the lanes of a warp with loops the compiler can vectorise
// (a converged warp, all 32 lanes, takes a plain loop):
// - fastArith: integer and f32 arithmetic in round-to-nearest, moves, shifts,
//   comparisons, selects, conversions, address conversions;
// - fastMemory: ld/st of one scalar per lane in global, shared, local or
//   kernel-parameter memory; every lane's address is checked first (one
//   range for all of them), and only then is memory touched.
// Any other form, or a flag these do not handle (.sat, .ftz, directed
// rounding, carries, packed halves, vectors, an address they cannot vouch
// for), returns false before touching anything and goes to the general code
// (ptx_arith.cc, execMemory in ptx_interp.cc), which also reports any fault.
//
// Each form computes exactly what the general code computes, bit for bit:
// PtxFastPath.* runs kernels with the hot paths on and off and compares every
// bit of their results.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "common/sanitizers.h"
#include "server/sim/ptx/ptx_block.h"

namespace rgpu::server::ptx::detail {
namespace {

std::atomic<bool> g_fast{true};

// fma.rn.f32 over the lanes: one rounding, which the FMA instruction gives
// where the CPU has it (the same bits as libm's fmaf elsewhere). Not cloned
// under ThreadSanitizer: the clones' resolver is instrumented, and the dynamic
// loader runs it before the sanitizer's runtime is set up (a crash at start).
#if RGPU_TSAN
#define RGPU_FMA_CLONES
#else
#define RGPU_FMA_CLONES __attribute__((target_clones("fma", "default")))
#endif
RGPU_FMA_CLONES void fmaLanes(uint64_t* D, const uint64_t* A, const uint64_t* B, const uint64_t* C, uint32_t m) {
  forLanes(m, [&](int l) {
    const float x = f32(A[l]), y = f32(B[l]), z = f32(C[l]);
    D[l] = b32(nanFirst(__builtin_fmaf(x, y, z), x, y, z));
  });
}

template <typename Read, typename Cmp>
void setpLanes(uint64_t* D, uint64_t* D2, const uint64_t* A, const uint64_t* B, uint32_t m, Read read, Cmp cmp) {
  forLanes(m, [&](int l) {
    const bool r = cmp(read(A[l]), read(B[l]));
    D[l] = r;
    if (D2) D2[l] = !r;
  });
}

// setp with the comparison `c` on values read by `read` (ordered for floats:
// false when either is NaN, as the general code's compare()).
template <typename Read>
bool setpTyped(Cmp c, uint64_t* D, uint64_t* D2, const uint64_t* A, const uint64_t* B, uint32_t m, Read read) {
  switch (c) {
    case Cmp::kEq: setpLanes(D, D2, A, B, m, read, [](auto x, auto y) { return x == y; }); return true;
    case Cmp::kNe: setpLanes(D, D2, A, B, m, read, [](auto x, auto y) { return x != y && x == x && y == y; }); return true;
    case Cmp::kLt: case Cmp::kLo: setpLanes(D, D2, A, B, m, read, [](auto x, auto y) { return x < y; }); return true;
    case Cmp::kLe: case Cmp::kLs: setpLanes(D, D2, A, B, m, read, [](auto x, auto y) { return x <= y; }); return true;
    case Cmp::kGt: case Cmp::kHi: setpLanes(D, D2, A, B, m, read, [](auto x, auto y) { return x > y; }); return true;
    case Cmp::kGe: case Cmp::kHs: setpLanes(D, D2, A, B, m, read, [](auto x, auto y) { return x >= y; }); return true;
    default: return false;
  }
}

template <Type t>
struct ReadU {
  uint64_t operator()(uint64_t v) const { return trunc(v, t); }
};
template <Type t>
struct ReadS {
  int64_t operator()(uint64_t v) const { return sext(v, t); }
};
struct ReadF32 {
  float operator()(uint64_t v) const { return f32(v); }
};

bool setpInt(Cmp c, Type t, uint64_t* D, uint64_t* D2, const uint64_t* A, const uint64_t* B, uint32_t m) {
  switch (t) {
    case Type::kS32: return setpTyped(c, D, D2, A, B, m, ReadS<Type::kS32>());
    case Type::kS64: return setpTyped(c, D, D2, A, B, m, ReadS<Type::kS64>());
    case Type::kU32: case Type::kB32: return setpTyped(c, D, D2, A, B, m, ReadU<Type::kU32>());
    case Type::kU64: case Type::kB64: return setpTyped(c, D, D2, A, B, m, ReadU<Type::kU64>());
    case Type::kS16: return setpTyped(c, D, D2, A, B, m, ReadS<Type::kS16>());
    case Type::kU16: case Type::kB16: return setpTyped(c, D, D2, A, B, m, ReadU<Type::kU16>());
    default: return false;
  }
}

bool isInt(Type t) { return t != Type::kPred && typeBytes(t) > 0 && !isFloat(t) && t != Type::kE4M3 && t != Type::kE5M2; }

}  // namespace

// Calls body(b) with b(lane) = operand `o`'s value in that lane: one
// immediate for every lane (no per-lane copy), or src()'s lanes.
template <typename Body>
void BlockRunner::withB(const Operand& o, Warp& w, uint64_t* tmp, Body&& body) {
  if (o.kind == Operand::kImm) {
    const uint64_t v = o.imm;
    body([v](int) { return v; });
  } else {
    const uint64_t* B = src(o, w, tmp);
    body([B](int l) { return B[l]; });
  }
}

bool fastPathsOn() { return g_fast.load(std::memory_order_relaxed); }

}  // namespace rgpu::server::ptx::detail

namespace rgpu::server::ptx {
void setFastPaths(bool on) { detail::g_fast.store(on, std::memory_order_relaxed); }
}  // namespace rgpu::server::ptx

namespace rgpu::server::ptx::detail {

bool BlockRunner::fastArith(const Inst& in, Warp& w, uint32_t m) {
  if (in.d.kind != Operand::kReg || !fastPathsOn()) return false;
  uint64_t* D = &w.regs[static_cast<size_t>(in.d.reg) * 32];
  const Type t = in.type;
  const uint64_t mask = widthMask(t);
  uint64_t ta[32], tb[32], tc[32];
  const bool plain_f32 = t == Type::kF32 && !in.ftz && !in.sat && (in.round == Round::kDefault || in.round == Round::kRn);
  switch (in.op) {
    case Op::kMov: {
      if (in.a.kind == Operand::kVec) return false;
      const uint64_t* A = src(in.a, w, ta);
      forLanes(m, [&](int l) { D[l] = A[l]; });
      return true;
    }
    case Op::kDiv:
      if (t != Type::kF32) return false;
      [[fallthrough]];
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul: {
      if (t == Type::kF32) {
        if (!plain_f32) return false;
        const uint64_t* A = src(in.a, w, ta);
        const uint64_t* B = src(in.b, w, tb);
        auto each = [&](auto op) {
          forLanes(m, [&](int l) {
            const float x = f32(A[l]), y = f32(B[l]);
            D[l] = b32(nanFirst(op(x, y), x, y));
          });
        };
        if (in.op == Op::kAdd) each([](float x, float y) { return x + y; });
        else if (in.op == Op::kSub) each([](float x, float y) { return x - y; });
        else if (in.op == Op::kMul) each([](float x, float y) { return x * y; });
        else each([](float x, float y) { return x / y; });
        return true;
      }
      if (!isInt(t) || (in.sat && t == Type::kS32) || (in.op == Op::kMul && in.mode == kModeHi)) return false;
      const uint64_t* A = src(in.a, w, ta);
      withB(in.b, w, tb, [&](auto b) {
        if (in.op == Op::kAdd) {
          forLanes(m, [&](int l) { D[l] = (A[l] + b(l)) & mask; });
        } else if (in.op == Op::kSub) {
          forLanes(m, [&](int l) { D[l] = (A[l] - b(l)) & mask; });
        } else if (in.mode == kModeLo) {
          forLanes(m, [&](int l) { D[l] = (A[l] * b(l)) & mask; });
        } else if (t == Type::kS32) {  // mul.wide.s32: the commonest address arithmetic
          forLanes(m, [&](int l) {
            D[l] = static_cast<uint64_t>(int64_t{static_cast<int32_t>(A[l])} * static_cast<int32_t>(b(l)));
          });
        } else if (isSigned(t)) {
          forLanes(m, [&](int l) { D[l] = static_cast<uint64_t>(sext(A[l], t) * sext(b(l), t)); });
        } else {
          forLanes(m, [&](int l) { D[l] = (A[l] & mask) * (b(l) & mask); });
        }
      });
      return true;
    }
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor: {
      if (!isInt(t)) return false;
      const uint64_t* A = src(in.a, w, ta);
      withB(in.b, w, tb, [&](auto b) {
        if (in.op == Op::kAnd) forLanes(m, [&](int l) { D[l] = (A[l] & b(l)) & mask; });
        else if (in.op == Op::kOr) forLanes(m, [&](int l) { D[l] = (A[l] | b(l)) & mask; });
        else forLanes(m, [&](int l) { D[l] = (A[l] ^ b(l)) & mask; });
      });
      return true;
    }
    case Op::kMad:
    case Op::kFma: {
      if (t == Type::kF32) {
        if (!plain_f32) return false;
        fmaLanes(D, src(in.a, w, ta), src(in.b, w, tb), src(in.c, w, tc), m);
        return true;
      }
      if (in.op != Op::kMad || !isInt(t) || in.carry) return false;
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      if (in.mode == kModeLo) {
        forLanes(m, [&](int l) { D[l] = (A[l] * B[l] + C[l]) & mask; });
      } else if (in.mode == kModeWide) {
        if (isSigned(t)) forLanes(m, [&](int l) { D[l] = static_cast<uint64_t>(sext(A[l], t) * sext(B[l], t)) + C[l]; });
        else forLanes(m, [&](int l) { D[l] = (A[l] & mask) * (B[l] & mask) + C[l]; });
      } else {
        return false;
      }
      return true;
    }
    case Op::kShl:
    case Op::kShr: {
      if (!isInt(t)) return false;
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t bits = static_cast<uint64_t>(typeBytes(t)) * 8;
      withB(in.b, w, tb, [&](auto b) {
        if (in.op == Op::kShl) {
          forLanes(m, [&](int l) {
            const uint64_t s = static_cast<uint32_t>(b(l));
            D[l] = (s >= bits ? 0 : A[l] << s) & mask;
          });
        } else if (isSigned(t)) {
          forLanes(m, [&](int l) {
            const uint64_t s = static_cast<uint32_t>(b(l));
            const int64_t x = sext(A[l], t);
            D[l] = static_cast<uint64_t>(s >= bits ? (x < 0 ? -1 : 0) : x >> s) & mask;
          });
        } else {
          forLanes(m, [&](int l) {
            const uint64_t s = static_cast<uint32_t>(b(l));
            D[l] = s >= bits ? 0 : (A[l] & mask) >> s;
          });
        }
      });
      return true;
    }
    case Op::kSelp: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      forLanes(m, [&](int l) { D[l] = (C[l] & 1) ? A[l] : B[l]; });
      return true;
    }
    case Op::kSetp: {
      if (in.bool_op != BoolOp::kNone || (in.d2.kind != Operand::kReg && in.d2.kind != Operand::kNone &&
                                          in.d2.kind != Operand::kSink))
        return false;
      uint64_t* D2 = in.d2.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d2.reg) * 32] : nullptr;
      if (t == Type::kF32) {
        const uint64_t* A = src(in.a, w, ta);
        const uint64_t* B = src(in.b, w, tb);
        return setpTyped(in.cmp, D, D2, A, B, m, ReadF32());
      }
      if (!isInt(t) || typeBytes(t) < 2) return false;
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      return setpInt(in.cmp, t, D, D2, A, B, m);
    }
    case Op::kAbs:
    case Op::kNeg:
    case Op::kSqrt:
    case Op::kRsqrt:
    case Op::kRcp:
    case Op::kEx2: {
      // f32, computed in double and rounded once, as the general code does.
      if (t != Type::kF32 || in.ftz) return false;
      const bool directed = in.round == Round::kRz || in.round == Round::kRm || in.round == Round::kRp;
      if ((in.op == Op::kSqrt || in.op == Op::kRcp) && directed) return false;
      const uint64_t* A = src(in.a, w, ta);
      auto each = [&](auto op) { forLanes(m, [&](int l) { D[l] = b32(static_cast<float>(op(double{f32(A[l])}))); }); };
      switch (in.op) {
        case Op::kAbs: each([](double x) { return std::fabs(x); }); break;
        case Op::kNeg: each([](double x) { return -x; }); break;
        case Op::kSqrt: each([](double x) { return std::sqrt(x); }); break;
        case Op::kRsqrt: each([](double x) { return 1.0 / std::sqrt(x); }); break;
        case Op::kRcp: each([](double x) { return 1.0 / x; }); break;
        default: each([](double x) { return std::exp2(x); }); break;
      }
      return true;
    }
    case Op::kCvt: {
      // Integer widening and narrowing, and 32-bit-or-narrower integers to f32.
      const Type dt = in.dtype;
      if (in.mode || in.sat || in.relu || !isInt(t) || (dt != Type::kF32 && !isInt(dt)) ||
          (dt == Type::kF32 && typeBytes(t) == 8))
        return false;
      const uint64_t* A = src(in.a, w, ta);
      const bool ss = isSigned(t), ds = isSigned(dt);
      if (dt == Type::kF32) {
        if (ss) forLanes(m, [&](int l) { D[l] = b32(static_cast<float>(static_cast<double>(sext(A[l], t)))); });
        else forLanes(m, [&](int l) { D[l] = b32(static_cast<float>(static_cast<double>(trunc(A[l], t)))); });
        return true;
      }
      forLanes(m, [&](int l) {
        const uint64_t v = ss ? static_cast<uint64_t>(sext(A[l], t)) : trunc(A[l], t);
        D[l] = ds ? static_cast<uint64_t>(sext(v, dt)) : trunc(v, dt);
      });
      return true;
    }
    case Op::kCvta: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t window = in.space == Space::kShared  ? kSharedWindow
                              : in.space == Space::kLocal ? kLocalWindow
                              : in.space == Space::kParam ? kParamWindow
                                                          : 0;
      const uint64_t keep = t == Type::kU32 ? 0xffffffffu : ~0ull;
      if (!window) forLanes(m, [&](int l) { D[l] = A[l] & keep; });
      else if (in.mode == kCvtaTo) forLanes(m, [&](int l) { D[l] = (A[l] & ~kWindowMask) & keep; });
      else forLanes(m, [&](int l) { D[l] = ((A[l] & ~kWindowMask) | window) & keep; });
      return true;
    }
    default:
      return false;
  }
}

// ---- memory ----------------------------------------------------------------------------

namespace {
// The accesses of fastMemory once checked: lane l's bytes are at at(l).
template <typename T, bool Signed, typename At>
void loadLanes(uint64_t* D, At at, uint32_t m, Type t) {
  forLanes(m, [&](int l) {
    const uint64_t v = loadAs<T>(at(l));
    D[l] = Signed ? static_cast<uint64_t>(sext(v, t)) : v;
  });
}
template <typename T, typename At>
void storeLanes(const uint64_t* V, At at, uint32_t m) {
  forLanes(m, [&](int l) { storeAs<T>(at(l), V[l]); });
}
template <typename At>
void accessLanes(int n, bool load, uint64_t* R, At at, uint32_t m, Type t) {
  const bool sgn = isSigned(t);
  switch (n) {
    case 1:
      if (!load) storeLanes<uint8_t>(R, at, m);
      else if (sgn) loadLanes<uint8_t, true>(R, at, m, t);
      else loadLanes<uint8_t, false>(R, at, m, t);
      break;
    case 2:
      if (!load) storeLanes<uint16_t>(R, at, m);
      else if (sgn) loadLanes<uint16_t, true>(R, at, m, t);
      else loadLanes<uint16_t, false>(R, at, m, t);
      break;
    case 4:
      if (!load) storeLanes<uint32_t>(R, at, m);
      else if (sgn) loadLanes<uint32_t, true>(R, at, m, t);
      else loadLanes<uint32_t, false>(R, at, m, t);
      break;
    default:
      if (!load) storeLanes<uint64_t>(R, at, m);
      else loadLanes<uint64_t, false>(R, at, m, t);
      break;
  }
}
}  // namespace

bool BlockRunner::fastMemory(const Inst& in, Warp& w, uint32_t m) {
  const bool load = in.op == Op::kLd;
  const Operand& addr_op = load ? in.a : in.d;
  const Operand& val_op = load ? in.d : in.a;
  if (val_op.kind != Operand::kReg || addr_op.kind != Operand::kAddr || !fastPathsOn()) return false;
  const int n = typeBytes(in.type);
  if (n == 0) return false;
  Space space = in.space;
  if (!addr_op.has_base && addr_op.sym_space != Space::kGeneric) space = addr_op.sym_space;
  uint64_t* R = &w.regs[static_cast<size_t>(val_op.reg) * 32];
  if (space == Space::kParam) {
    // A kernel parameter: one value for every lane.
    if (!load || addr_op.has_base || addr_op.imm > fn_.param_bytes || static_cast<uint64_t>(n) > fn_.param_bytes - addr_op.imm)
      return false;
    uint64_t v = loadBytes(L_.params + addr_op.imm, n);
    if (isSigned(in.type)) v = static_cast<uint64_t>(sext(v, in.type));
    forLanes(m, [&](int l) { R[l] = v; });
    return true;
  }
  static const uint64_t kZeros[32] = {};
  const uint64_t* base = addr_op.has_base ? &w.regs[static_cast<size_t>(addr_op.reg) * 32] : kZeros;
  const uint64_t imm = addr_op.imm;
  // First every lane's address is checked (nothing is touched), then the
  // accesses run, each lane's address computed again.
  uint64_t bits = 0;
  if (space == Space::kGlobal || space == Space::kConst || space == Space::kGeneric) {
    uint64_t lo = UINT64_MAX, hi = 0, windows = 0;
    forLanes(m, [&](int l) {
      const uint64_t a = base[l] + imm;
      lo = std::min(lo, a);
      hi = std::max(hi, a);
      bits |= a;
      windows |= a >= kParamWindow ? 1 : 0;  // the shared, local and param windows lie above it
    });
    if ((windows && space == Space::kGeneric) || hi + n < hi || (bits & static_cast<uint64_t>(n - 1))) return false;
    if (lo < frame_.cache_lo || hi + n > frame_.cache_hi) {
      const auto* range = findRange(*L_.memory, lo, hi + n - lo);
      if (!range) return false;
      frame_.cache_lo = range->first;
      frame_.cache_hi = range->second;
    }
    accessLanes(n, load, R, [&](int l) { return reinterpret_cast<uint8_t*>(base[l] + imm); }, m, in.type);
    return true;
  }
  if (space != Space::kShared && space != Space::kLocal) return false;
  // 32-bit addresses (a window's bits, 56..63, go with the upper half).
  const bool shared = space == Space::kShared;
  uint32_t hi = 0;
  forLanes(m, [&](int l) {
    const uint32_t a = static_cast<uint32_t>(base[l] + imm);
    hi = std::max(hi, a);
    bits |= a;
  });
  // Shared addresses naming another block of the cluster (bits 24..31): the general path.
  if (shared) {
    uint8_t* const origin = b_.shared.data();
    if (hi >> 24 || uint64_t{hi} + n > b_.shared.size() ||
        ((bits | reinterpret_cast<uintptr_t>(origin)) & static_cast<uint64_t>(n - 1)))
      return false;
    accessLanes(n, load, R, [&](int l) { return origin + static_cast<uint32_t>(base[l] + imm); }, m, in.type);
    return true;
  }
  const uint64_t frame = fn_.local_bytes;
  uint8_t* const origin = b_.local.data() + static_cast<size_t>(w.id) * 32 * frame;
  if (uint64_t{hi} + n > frame || ((bits | reinterpret_cast<uintptr_t>(origin) | frame) & static_cast<uint64_t>(n - 1)))
    return false;
  accessLanes(n, load, R, [&](int l) { return origin + static_cast<size_t>(l) * frame + static_cast<uint32_t>(base[l] + imm); },
              m, in.type);
  return true;
}

}  // namespace rgpu::server::ptx::detail
