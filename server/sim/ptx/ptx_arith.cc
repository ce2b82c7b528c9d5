// The arithmetic, logic, comparison, conversion and register-move
// instructions of the PTX interpreter: BlockRunner::execArith runs one of
// them for the lanes in `m` of a warp (ptx_interp.cc's step() hands it every
// instruction that is not memory, control flow or synchronisation). They
// read and write registers only, so they never fault but for a bitwise
// operation on a float type, which the parser lets through.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/half.h"
#include "server/sim/ptx/ptx_block.h"
#include "server/sim/ptx/ptx_parser.h"

namespace rgpu::server::ptx::detail {

// ---- value helpers ----------------------------------------------------------------


inline float ftz32(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

// Directed rounding (.rz .rm .rp) without touching the FPU mode (compilers
// move floating-point code across fesetround): `r` is the round-to-nearest
// result and `err` the sign of (exact - r); step one ulp where the mode says.
inline bool directed(Round m) { return m == Round::kRz || m == Round::kRm || m == Round::kRp; }

template <typename T>
T applyDirected(T r, double err, Round m) {
  if (err == 0 || std::isnan(r) || std::isinf(r)) return r;
  const T inf = std::numeric_limits<T>::infinity();
  switch (m) {
    case Round::kRz: return ((r > 0) == (err > 0)) ? r : std::nextafter(r, T(0));
    case Round::kRm: return err < 0 ? std::nextafter(r, -inf) : r;
    case Round::kRp: return err > 0 ? std::nextafter(r, inf) : r;
    default: return r;
  }
}

// A double known (nearly) exactly, rounded to float under mode m.
inline float toFloat(double exact, Round m) {
  float r = static_cast<float>(exact);
  return directed(m) ? applyDirected<float>(r, exact - static_cast<double>(r), m) : r;
}

// f64 add/sub/mul/div/sqrt under a directed mode, with the exact error sign.
double f64Op(Op op, double a, double b, Round m) {
  double r, err;
  switch (op) {
    case Op::kAdd:
    case Op::kSub: {
      if (op == Op::kSub) b = -b;
      r = a + b;
      double bb = r - a;
      err = (a - (r - bb)) + (b - bb);  // TwoSum
      break;
    }
    case Op::kMul:
      r = a * b;
      err = std::fma(a, b, -r);
      break;
    case Op::kDiv: {
      r = a / b;
      double rem = std::fma(-r, b, a);
      err = (rem == 0) ? 0 : ((rem > 0) == (b > 0) ? 1 : -1);
      break;
    }
    default: {  // sqrt of a
      r = std::sqrt(a);
      double rem = std::fma(-r, r, a);
      err = rem;
      break;
    }
  }
  return directed(m) ? applyDirected<double>(r, err, m) : r;
}

double roundInt(double v, Round r) {
  switch (r) {
    case Round::kRzi: return std::trunc(v);
    case Round::kRmi: return std::floor(v);
    case Round::kRpi: return std::ceil(v);
    default: return std::nearbyint(v);  // .rni and default: nearest even
  }
}

// Float -> integer with PTX's saturation: NaN -> 0, out of range -> min/max.
uint64_t floatToInt(double v, Type t, Round r) {
  if (std::isnan(v)) return 0;
  v = roundInt(v, r == Round::kDefault ? Round::kRzi : r);
  int bits = typeBytes(t) * 8;
  if (isSigned(t)) {
    double lo = -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, bits - 1) - 1;
    int64_t x = v <= lo ? static_cast<int64_t>(lo) : v >= hi ? (bits == 64 ? INT64_MAX : static_cast<int64_t>(hi)) : static_cast<int64_t>(v);
    return trunc(static_cast<uint64_t>(x), t);
  }
  double hi = std::ldexp(1.0, bits) - 1;
  uint64_t x = v <= 0 ? 0 : v >= hi ? (bits == 64 ? UINT64_MAX : static_cast<uint64_t>(hi)) : static_cast<uint64_t>(v);
  return x;
}

bool compare(Cmp c, double a, double b) {
  bool un = std::isnan(a) || std::isnan(b);
  switch (c) {
    case Cmp::kEq: return !un && a == b;
    case Cmp::kNe: return !un && a != b;
    case Cmp::kLt: case Cmp::kLo: return !un && a < b;
    case Cmp::kLe: case Cmp::kLs: return !un && a <= b;
    case Cmp::kGt: case Cmp::kHi: return !un && a > b;
    case Cmp::kGe: case Cmp::kHs: return !un && a >= b;
    case Cmp::kEqu: return un || a == b;
    case Cmp::kNeu: return un || a != b;
    case Cmp::kLtu: return un || a < b;
    case Cmp::kLeu: return un || a <= b;
    case Cmp::kGtu: return un || a > b;
    case Cmp::kGeu: return un || a >= b;
    case Cmp::kNum: return !un;
    case Cmp::kNan: return un;
  }
  return false;
}

template <typename T>
bool compareInt(Cmp c, T a, T b) {
  switch (c) {
    case Cmp::kEq: case Cmp::kEqu: return a == b;
    case Cmp::kNe: case Cmp::kNeu: return a != b;
    case Cmp::kLt: case Cmp::kLo: case Cmp::kLtu: return a < b;
    case Cmp::kLe: case Cmp::kLs: case Cmp::kLeu: return a <= b;
    case Cmp::kGt: case Cmp::kHi: case Cmp::kGtu: return a > b;
    case Cmp::kGe: case Cmp::kHs: case Cmp::kGeu: return a >= b;
    default: return false;
  }
}

bool compareTyped(const Inst& in, uint64_t a, uint64_t b) {
  Type t = in.type;
  if (isFloat(t)) return compare(in.cmp, readF(a, t), readF(b, t));
  if (isSigned(t)) return compareInt<int64_t>(in.cmp, sext(a, t), sext(b, t));
  return compareInt<uint64_t>(in.cmp, trunc(a, t), trunc(b, t));
}

// 8-bit floats (PTX e4m3: bias 7, no infinity, 0x7f NaN, 448 the largest;
// e5m2: bias 15, IEEE-like, 57344 the largest finite), rounded to nearest even.
// `satfinite`: past the largest finite value, that value (NaN stays NaN).
uint8_t toFp8(double x, bool e5m2, bool satfinite) {
  const int man = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, emin = 1 - bias;
  const double max_finite = e5m2 ? 57344.0 : 448.0;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return 0x7f;
  double a = std::fabs(x);
  const uint8_t overflow = satfinite ? (e5m2 ? 0x7b : 0x7e) : (e5m2 ? 0x7c : 0x7f);
  if (std::isinf(a)) return sign | overflow;
  // The quantum at a's magnitude (subnormals share the smallest normal's).
  int e = a > 0 ? std::ilogb(a) : emin;
  if (e < emin) e = emin;
  double q = std::ldexp(1.0, e - man);
  double n = std::nearbyint(a / q);  // round to nearest even (the default mode)
  double v = n * q;
  if (v > max_finite) return sign | overflow;
  if (v == 0) return sign;
  int ve = std::ilogb(v);
  if (ve < emin) return sign | static_cast<uint8_t>(v / std::ldexp(1.0, emin - man));  // subnormal
  int mant = static_cast<int>(v / std::ldexp(1.0, ve - man)) - (1 << man);
  return sign | static_cast<uint8_t>(((ve + bias) << man) | mant);
}

double fromFp8(uint8_t b, bool e5m2) {
  const int man = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const int ef = (b & 0x7f) >> man, mf = b & ((1 << man) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e5m2 && ef == 31) return mf ? std::nan("") : sign * INFINITY;
  if (!e5m2 && (b & 0x7f) == 0x7f) return std::nan("");
  if (ef == 0) return sign * std::ldexp(mf, 1 - bias - man);
  return sign * std::ldexp((1 << man) + mf, ef - bias - man);
}

bool BlockRunner::execArith(const Inst& in, Warp& w, uint32_t m) {
  if (fastArith(in, w, m)) return true;
  uint64_t ta[32], tb[32], tc[32];
  uint64_t* D = in.d.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d.reg) * 32] : nullptr;
  const Type t = in.type;
  switch (in.op) {
    case Op::kMov: {
      if (in.d.kind == Operand::kVec) {  // unpack: mov.b64 {a,b}, x
        const uint64_t* A = src(in.a, w, ta);
        int parts = static_cast<int>(in.d.vec.size());
        int bits = typeBytes(t) * 8 / parts;
        uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
        for (int k = 0; k < parts; ++k) {
          const Operand& e = in.d.vec[static_cast<size_t>(k)];
          if (e.kind != Operand::kReg) continue;
          uint64_t* E = &w.regs[static_cast<size_t>(e.reg) * 32];
          LANES(m) E[l] = (A[l] >> (k * bits)) & mask;
          END_LANES
        }
        break;
      }
      if (in.a.kind == Operand::kVec) {  // pack: mov.b32 x, {a,b}
        int parts = static_cast<int>(in.a.vec.size());
        int bits = typeBytes(t) * 8 / parts;
        uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
        LANES(m)
          uint64_t v = 0;
          for (int k = 0; k < parts; ++k) {
            const Operand& e = in.a.vec[static_cast<size_t>(k)];
            uint64_t x = e.kind == Operand::kReg ? w.regs[static_cast<size_t>(e.reg) * 32 + l] : e.imm;
            v |= (x & mask) << (k * bits);
          }
          D[l] = v;
        END_LANES
        break;
      }
      const uint64_t* A = src(in.a, w, ta);
      LANES(m) D[l] = A[l];
      END_LANES
      break;
    }
    case Op::kZero:  // createpolicy: an opaque policy, ignored where it is used
      LANES(m) D[l] = 0;
      END_LANES
      break;
    case Op::kElect: {
      // The lowest lane of the member mask that executes; d (optional, `_`) its lane id, d2 whether it is this lane.
      const uint64_t* A = src(in.a, w, ta);
      uint64_t* D2 = in.d2.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d2.reg) * 32] : nullptr;
      uint64_t res[32], res2[32];
      LANES(m)
        uint32_t mm = static_cast<uint32_t>(A[l]) & m;
        int leader = mm ? __builtin_ctz(mm) : l;
        res[l] = static_cast<uint64_t>(leader);
        res2[l] = leader == l;
      END_LANES
      LANES(m)
        if (in.d.kind == Operand::kReg) D[l] = res[l];
        if (D2) D2[l] = res2[l];
      END_LANES
      break;
    }
    case Op::kIsspacep: {
      // Which state space a generic address falls in (the windows of shared, local and param memory).
      const uint64_t* A = src(in.a, w, ta);
      LANES(m)
        uint64_t window = A[l] & kWindowMask;
        bool in_space = false;
        switch (in.space) {
          case Space::kShared: in_space = window == kSharedWindow; break;
          case Space::kLocal: in_space = window == kLocalWindow; break;
          case Space::kParam: in_space = window == kParamWindow; break;
          case Space::kGlobal: in_space = findRange(*L_.memory, A[l], 1) != nullptr; break;
          default: break;  // constant memory is reached through .const only
        }
        D[l] = in_space;
      END_LANES
      break;
    }
    case Op::kAddCarry: {
      // Extended precision: carry (borrow) out of the type's width, into the next addc/subc.
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const int bits = typeBytes(t) * 8;
      const uint64_t mask = widthMask(t);
      uint32_t carry = w.carry;
      LANES(m)
        using U128 = unsigned __int128;
        uint64_t a = A[l] & mask, b = B[l] & mask, cin = (in.mode & kCarryIn) ? (carry >> l) & 1 : 0, cout;
        if (in.mode & kCarrySub) {
          D[l] = (a - b - cin) & mask;
          cout = U128{a} < U128{b} + cin;  // the borrow
        } else {
          U128 s = U128{a} + b + cin;
          D[l] = static_cast<uint64_t>(s) & mask;
          cout = static_cast<uint64_t>(s >> bits) & 1;
        }
        if (in.mode & kCarryOut) w.carry = (w.carry & ~(1u << l)) | static_cast<uint32_t>(cout << l);
      END_LANES
      break;
    }
    case Op::kDp4a:
    case Op::kDp2a: {
      // Four (two) products of 8-bit parts of a with 8-bit (16-bit) parts of b, added to c.
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      const bool sa = isSigned(in.dtype), sb = isSigned(in.type);
      LANES(m)
        int64_t s = static_cast<int32_t>(C[l]);
        uint32_t a = static_cast<uint32_t>(A[l]), b = static_cast<uint32_t>(B[l]);
        if (in.op == Op::kDp4a) {
          for (int k = 0; k < 4; ++k) {
            int64_t x = sa ? static_cast<int8_t>(a >> (8 * k)) : static_cast<uint8_t>(a >> (8 * k));
            int64_t y = sb ? static_cast<int8_t>(b >> (8 * k)) : static_cast<uint8_t>(b >> (8 * k));
            s += x * y;
          }
        } else {
          for (int k = 0; k < 2; ++k) {
            int64_t x = sa ? static_cast<int16_t>(a >> (16 * k)) : static_cast<uint16_t>(a >> (16 * k));
            int shift = 8 * (k + (in.mode == kModeHi ? 2 : 0));
            int64_t y = sb ? static_cast<int8_t>(b >> shift) : static_cast<uint8_t>(b >> shift);
            s += x * y;
          }
        }
        D[l] = static_cast<uint32_t>(s);
      END_LANES
      break;
    }
    case Op::kSad: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      LANES(m)
        uint64_t a = trunc(A[l], t), b = trunc(B[l], t), d;
        if (isSigned(t)) {
          int64_t x = sext(a, t), y = sext(b, t);
          d = static_cast<uint64_t>(x > y ? x - y : y - x);
        } else {
          d = a > b ? a - b : b - a;
        }
        D[l] = trunc(C[l] + d, t);
      END_LANES
      break;
    }
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kRem:
    case Op::kMin:
    case Op::kMax:
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor:
    case Op::kCopysign: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      if (isFloat(t)) {
        if (t == Type::kF16x2 || t == Type::kBF16x2) {
          Type h = t == Type::kF16x2 ? Type::kF16 : Type::kBF16;
          LANES(m)
            uint64_t r = 0;
            for (int k = 0; k < 2; ++k) {
              double x = readF(A[l] >> (16 * k), h), y = readF(B[l] >> (16 * k), h), z = 0;
              switch (in.op) {
                case Op::kAdd: z = x + y; break;
                case Op::kSub: z = x - y; break;
                case Op::kMul: z = x * y; break;
                case Op::kMin: z = minNum(x, y); break;
                case Op::kMax: z = maxNum(x, y); break;
                default: z = x / y; break;
              }
              r |= (writeF(z, h) & 0xffff) << (16 * k);
            }
            D[l] = r;
          END_LANES
          break;
        }
        if (in.op == Op::kAnd || in.op == Op::kOr || in.op == Op::kXor || in.op == Op::kRem) {
          fault(kErrLaunchFailure, "bitwise operation on a float type", in, w, __builtin_ctz(m ? m : 1));
          return false;
        }
        const Round rm = in.round;
        if (t == Type::kF32) {
          LANES(m)
            float x = f32(A[l]), y = f32(B[l]), z;
            if (in.ftz) x = ftz32(x), y = ftz32(y);
            switch (in.op) {
              // Products and sums of two floats are exact (or nearly) in double.
              // (A NaN result is the first NaN operand, quieted, in every mode: the
              // compiler may order a double sum's operands either way.)
              case Op::kAdd: z = nanFirst(directed(rm) ? toFloat(static_cast<double>(x) + y, rm) : x + y, x, y); break;
              case Op::kSub: z = nanFirst(directed(rm) ? toFloat(static_cast<double>(x) - y, rm) : x - y, x, y); break;
              case Op::kMul: z = nanFirst(directed(rm) ? toFloat(static_cast<double>(x) * y, rm) : x * y, x, y); break;
              case Op::kDiv: z = nanFirst(directed(rm) ? toFloat(static_cast<double>(x) / y, rm) : x / y, x, y); break;
              case Op::kMin: z = minNum(x, y); break;
              case Op::kMax: z = maxNum(x, y); break;
              default: z = std::copysign(y, x); break;  // copysign.f32 d, a, b: |b| with a's sign
            }
            if (in.sat) z = saturate(z);
            if (in.ftz) z = ftz32(z);
            D[l] = b32(z);
          END_LANES
        } else {
          LANES(m)
            double x = readF(A[l], t), y = readF(B[l], t), z;
            switch (in.op) {
              case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv:
                z = t == Type::kF64 ? f64Op(in.op, x, y, rm)
                                    : (in.op == Op::kAdd ? x + y : in.op == Op::kSub ? x - y : in.op == Op::kMul ? x * y : x / y);
                break;
              case Op::kMin: z = minNum(x, y); break;
              case Op::kMax: z = maxNum(x, y); break;
              default: z = std::copysign(y, x); break;
            }
            if (in.sat) z = saturate(z);
            D[l] = writeF(z, t);
          END_LANES
        }
        break;
      }
      if (t == Type::kPred) {
        LANES(m)
          uint64_t x = A[l] & 1, y = B[l] & 1;
          D[l] = in.op == Op::kAnd ? (x & y) : in.op == Op::kOr ? (x | y) : (x ^ y);
        END_LANES
        break;
      }
      bool sgn = isSigned(t);
      int bits = typeBytes(t) * 8;
      switch (in.op) {
        case Op::kAdd:
          if (in.sat && t == Type::kS32) {
            LANES(m) int64_t r = static_cast<int64_t>(static_cast<int32_t>(A[l])) + static_cast<int32_t>(B[l]);
              D[l] = trunc(static_cast<uint64_t>(std::clamp<int64_t>(r, INT32_MIN, INT32_MAX)), t);
            END_LANES
          } else {
            LANES(m) D[l] = trunc(A[l] + B[l], t);
            END_LANES
          }
          break;
        case Op::kSub:
          if (in.sat && t == Type::kS32) {
            LANES(m) int64_t r = static_cast<int64_t>(static_cast<int32_t>(A[l])) - static_cast<int32_t>(B[l]);
              D[l] = trunc(static_cast<uint64_t>(std::clamp<int64_t>(r, INT32_MIN, INT32_MAX)), t);
            END_LANES
          } else {
            LANES(m) D[l] = trunc(A[l] - B[l], t);
            END_LANES
          }
          break;
        case Op::kMul:
          if (in.mode == kModeWide) {
            LANES(m)
              D[l] = sgn ? static_cast<uint64_t>(sext(A[l], t) * sext(B[l], t)) : trunc(A[l], t) * trunc(B[l], t);
            END_LANES
          } else if (in.mode == kModeHi) {
            LANES(m)
              if (bits == 64) {
                D[l] = sgn ? static_cast<uint64_t>((static_cast<__int128>(static_cast<int64_t>(A[l])) * static_cast<int64_t>(B[l])) >> 64)
                           : static_cast<uint64_t>((static_cast<unsigned __int128>(A[l]) * B[l]) >> 64);
              } else {
                uint64_t r = sgn ? static_cast<uint64_t>(sext(A[l], t) * sext(B[l], t)) : trunc(A[l], t) * trunc(B[l], t);
                D[l] = trunc(r >> bits, t);
              }
            END_LANES
          } else {
            LANES(m) D[l] = trunc(A[l] * B[l], t);
            END_LANES
          }
          break;
        case Op::kDiv:
        case Op::kRem:
          LANES(m)
            // Division by zero and INT_MIN / -1 would trap the host: give the
            // GPU's answers instead (all ones / the dividend).
            if (sgn) {
              int64_t x = sext(A[l], t), y = sext(B[l], t);
              int64_t q = y == 0 ? -1 : (y == -1 ? -x : x / y);
              int64_t r = y == 0 ? x : (y == -1 ? 0 : x % y);
              D[l] = trunc(static_cast<uint64_t>(in.op == Op::kDiv ? q : r), t);
            } else {
              uint64_t x = trunc(A[l], t), y = trunc(B[l], t);
              D[l] = in.op == Op::kDiv ? (y == 0 ? widthMask(t) : x / y) : (y == 0 ? x : x % y);
            }
          END_LANES
          break;
        case Op::kMin:
        case Op::kMax:
          LANES(m)
            bool lt = sgn ? sext(A[l], t) < sext(B[l], t) : trunc(A[l], t) < trunc(B[l], t);
            D[l] = trunc((in.op == Op::kMin) == lt ? A[l] : B[l], t);
          END_LANES
          break;
        case Op::kAnd:
          LANES(m) D[l] = trunc(A[l] & B[l], t);
          END_LANES
          break;
        case Op::kOr:
          LANES(m) D[l] = trunc(A[l] | B[l], t);
          END_LANES
          break;
        case Op::kXor:
          LANES(m) D[l] = trunc(A[l] ^ B[l], t);
          END_LANES
          break;
        default: break;
      }
      break;
    }
    case Op::kMul24:
    case Op::kMad24: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = in.op == Op::kMad24 ? src(in.c, w, tc) : nullptr;
      bool sgn = isSigned(t);
      LANES(m)
        int64_t x = sgn ? (static_cast<int64_t>(A[l] << 40) >> 40) : static_cast<int64_t>(A[l] & 0xffffff);
        int64_t y = sgn ? (static_cast<int64_t>(B[l] << 40) >> 40) : static_cast<int64_t>(B[l] & 0xffffff);
        uint64_t p = static_cast<uint64_t>(x * y);
        uint64_t r = in.mode == kModeHi ? (p >> 16) : p;
        D[l] = trunc(r + (C ? C[l] : 0), t);
      END_LANES
      break;
    }
    case Op::kMad:
    case Op::kFma: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      if (t == Type::kF32) {
        const Round rm = in.round;
        LANES(m)
          float x = f32(A[l]), y = f32(B[l]), z = f32(C[l]);
          if (in.ftz) x = ftz32(x), y = ftz32(y), z = ftz32(z);
          // x*y is exact in double; one more rounding to double then float is
          // what a single fused rounding gives in all but vanishing cases.
          float r = nanFirst(directed(rm) ? toFloat(std::fma(static_cast<double>(x), y, static_cast<double>(z)), rm)
                                          : std::fma(x, y, z),
                             x, y, z);
          if (in.sat) r = saturate(r);
          if (in.ftz) r = ftz32(r);
          D[l] = b32(r);
        END_LANES
      } else if (isX2(t)) {
        LANES(m) D[l] = perHalf(t, A[l], B[l], C[l], [](double x, double y, double z) { return std::fma(x, y, z); });
        END_LANES
      } else if (isFloat(t)) {
        LANES(m) D[l] = writeF(std::fma(readF(A[l], t), readF(B[l], t), readF(C[l], t)), t);
        END_LANES
      } else {
        bool sgn = isSigned(t);
        int bits = typeBytes(t) * 8;
        if (in.carry) {
          // mad{c}.{hi,lo}{.cc}: the product's half plus c (plus the carry flag), carry out of the type's width.
          const uint64_t mask = widthMask(t);
          const uint32_t carry = w.carry;
          LANES(m)
            uint64_t p;
            if (in.mode == kModeHi)
              p = bits == 64 ? (sgn ? static_cast<uint64_t>((static_cast<__int128>(static_cast<int64_t>(A[l])) *
                                                              static_cast<int64_t>(B[l])) >> 64)
                                    : static_cast<uint64_t>((static_cast<unsigned __int128>(A[l]) * B[l]) >> 64))
                             : (sgn ? static_cast<uint64_t>(sext(A[l], t) * sext(B[l], t)) : trunc(A[l], t) * trunc(B[l], t)) >> bits;
            else
              p = A[l] * B[l];
            using U128 = unsigned __int128;
            U128 s = U128{p & mask} + (C[l] & mask) + ((in.carry & kCarryIn) ? (carry >> l) & 1 : 0);
            D[l] = static_cast<uint64_t>(s) & mask;
            if (in.carry & kCarryOut)
              w.carry = (w.carry & ~(1u << l)) | (static_cast<uint32_t>(static_cast<uint64_t>(s >> bits) & 1) << l);
          END_LANES
          break;
        }
        LANES(m)
          uint64_t p;
          if (in.mode == kModeWide) {
            p = sgn ? static_cast<uint64_t>(sext(A[l], t) * sext(B[l], t)) : trunc(A[l], t) * trunc(B[l], t);
            D[l] = p + C[l];
          } else if (in.mode == kModeHi) {
            if (bits == 64)
              p = sgn ? static_cast<uint64_t>((static_cast<__int128>(static_cast<int64_t>(A[l])) * static_cast<int64_t>(B[l])) >> 64)
                      : static_cast<uint64_t>((static_cast<unsigned __int128>(A[l]) * B[l]) >> 64);
            else
              p = (sgn ? static_cast<uint64_t>(sext(A[l], t) * sext(B[l], t)) : trunc(A[l], t) * trunc(B[l], t)) >> bits;
            D[l] = trunc(p + C[l], t);
          } else {
            D[l] = trunc(A[l] * B[l] + C[l], t);
          }
        END_LANES
      }
      break;
    }
    case Op::kAbs:
    case Op::kNeg:
    case Op::kNot:
    case Op::kCnot:
    case Op::kRcp:
    case Op::kSqrt:
    case Op::kRsqrt:
    case Op::kEx2:
    case Op::kLg2:
    case Op::kSin:
    case Op::kCos:
    case Op::kTanh:
    case Op::kBrev:
    case Op::kClz:
    case Op::kPopc: {
      const uint64_t* A = src(in.a, w, ta);
      if (isX2(t) && (in.op == Op::kNeg || in.op == Op::kAbs)) {
        bool neg = in.op == Op::kNeg;
        LANES(m) D[l] = perHalf(t, A[l], 0, 0, [neg](double x, double, double) { return neg ? -x : std::fabs(x); });
        END_LANES
        break;
      }
      if (isFloat(t)) {
        LANES(m)
          double x = readF(A[l], t), r = 0;
          if (in.ftz && t == Type::kF32) x = ftz32(static_cast<float>(x));
          switch (in.op) {
            case Op::kAbs: r = std::fabs(x); break;
            case Op::kNeg: r = -x; break;
            case Op::kRcp: r = 1.0 / x; break;
            case Op::kSqrt: r = t == Type::kF64 ? f64Op(Op::kSqrt, x, 0, in.round) : std::sqrt(x); break;
            case Op::kRsqrt: r = 1.0 / std::sqrt(x); break;
            case Op::kEx2: r = std::exp2(x); break;
            case Op::kLg2: r = std::log2(x); break;
            case Op::kSin: r = std::sin(x); break;
            case Op::kCos: r = std::cos(x); break;
            case Op::kTanh: r = std::tanh(x); break;
            default: r = x; break;
          }
          if (t == Type::kF32) {
            float f = (in.op == Op::kSqrt || in.op == Op::kRcp) ? toFloat(r, in.round) : static_cast<float>(r);
            if (in.ftz) f = ftz32(f);
            D[l] = b32(f);
          } else {
            D[l] = writeF(r, t);
          }
        END_LANES
        break;
      }
      LANES(m)
        uint64_t x = trunc(A[l], t), r = 0;
        int bits = typeBytes(t) * 8;
        switch (in.op) {
          case Op::kAbs: r = static_cast<uint64_t>(std::llabs(sext(x, t))); break;
          case Op::kNeg: r = static_cast<uint64_t>(-static_cast<int64_t>(x)); break;
          case Op::kNot: r = t == Type::kPred ? (~x & 1) : ~x; break;
          case Op::kCnot: r = x == 0 ? 1 : 0; break;
          case Op::kBrev: {
            for (int k = 0; k < bits; ++k) r |= ((x >> k) & 1) << (bits - 1 - k);
            break;
          }
          case Op::kClz: r = x == 0 ? static_cast<uint64_t>(bits) : static_cast<uint64_t>(__builtin_clzll(x) - (64 - bits)); break;
          case Op::kPopc: r = static_cast<uint64_t>(__builtin_popcountll(x)); break;
          default: r = x; break;
        }
        D[l] = (in.op == Op::kClz || in.op == Op::kPopc) ? r : trunc(r, t == Type::kPred ? Type::kB8 : t);
      END_LANES
      break;
    }
    case Op::kShl:
    case Op::kShr: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      int bits = typeBytes(t) * 8;
      bool sgn = isSigned(t);
      LANES(m)
        uint64_t s = static_cast<uint32_t>(B[l]);
        uint64_t r;
        if (in.op == Op::kShl) {
          r = s >= static_cast<uint64_t>(bits) ? 0 : A[l] << s;
        } else if (sgn) {
          int64_t x = sext(A[l], t);
          r = static_cast<uint64_t>(s >= static_cast<uint64_t>(bits) ? (x < 0 ? -1 : 0) : x >> s);
        } else {
          r = s >= static_cast<uint64_t>(bits) ? 0 : trunc(A[l], t) >> s;
        }
        D[l] = trunc(r, t);
      END_LANES
      break;
    }
    case Op::kBmsk: {  // PTX ISA 9.7.8.x: a mask of width b from bit a
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      LANES(m)
        uint32_t a = static_cast<uint32_t>(A[l]), b = static_cast<uint32_t>(B[l]);
        uint32_t a1 = a & 31, b1 = b & 31, sum = a1 + b1;
        uint32_t mask0 = ~0u << a1;
        uint32_t mask1 = sum >= 32 ? 0 : ~0u << sum;
        bool overflow = sum >= 32;
        if (in.mode == kBmskClamp) {
          if (a >= 32) mask0 = 0, overflow = true;
          if (b >= 32) overflow = true;
        }
        if (overflow) mask1 = 0;
        else if (b1 == 0) mask1 = ~0u;
        D[l] = mask0 & ~mask1;
      END_LANES
      break;
    }
    case Op::kFns: {  // the offset-th set bit of mask from base (upwards for > 0, downwards for < 0)
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      LANES(m)
        uint32_t mask = static_cast<uint32_t>(A[l]), base = static_cast<uint32_t>(B[l]);
        int32_t offset = static_cast<int32_t>(C[l]);
        uint32_t d = 0xffffffffu;
        if (base < 32) {  // (base > 31 is undefined in PTX: not found)
          if (offset == 0) {
            if ((mask >> base) & 1) d = base;
          } else {
            int64_t count = std::llabs(static_cast<int64_t>(offset)) - 1, inc = offset > 0 ? 1 : -1;
            for (int64_t pos = base; pos >= 0 && pos < 32; pos += inc)
              if ((mask >> pos) & 1) {
                if (count == 0) {
                  d = static_cast<uint32_t>(pos);
                  break;
                }
                --count;
              }
          }
        }
        D[l] = d;
      END_LANES
      break;
    }
    case Op::kBfind: {  // the most significant non-sign bit; .shiftamt: the shift that normalises
      const uint64_t* A = src(in.a, w, ta);
      int msb = typeBytes(t) * 8 - 1;
      LANES(m)
        uint64_t x = trunc(A[l], t);
        if (isSigned(t) && ((x >> msb) & 1)) x = trunc(~x, t);
        uint32_t d = x == 0 ? 0xffffffffu : static_cast<uint32_t>(63 - __builtin_clzll(x));
        if (in.mode == kBfindShiftAmount && d != 0xffffffffu) d = static_cast<uint32_t>(msb) - d;
        D[l] = d;
      END_LANES
      break;
    }
    case Op::kShf: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      LANES(m)
        uint64_t s = static_cast<uint32_t>(C[l]);
        s = (in.mode & kShfWrap) ? (s & 31) : std::min<uint64_t>(s, 32);
        uint64_t both = (static_cast<uint64_t>(static_cast<uint32_t>(B[l])) << 32) | static_cast<uint32_t>(A[l]);
        D[l] = (in.mode & kShfRight) ? static_cast<uint32_t>(both >> s) : static_cast<uint32_t>((both << s) >> 32);
      END_LANES
      break;
    }
    case Op::kBfe: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      int bits = typeBytes(t) * 8;
      LANES(m)
        uint64_t pos = B[l] & 0xff, len = C[l] & 0xff;
        uint64_t x = trunc(A[l], t), r = 0;
        for (uint64_t k = 0; k < len && k < static_cast<uint64_t>(bits); ++k) {
          uint64_t src_bit = pos + k;
          uint64_t bit = src_bit < static_cast<uint64_t>(bits) ? (x >> src_bit) & 1
                                                              : (isSigned(t) ? (x >> (bits - 1)) & 1 : 0);
          r |= bit << k;
        }
        if (isSigned(t) && len > 0 && len < static_cast<uint64_t>(bits) && ((r >> (len - 1)) & 1)) r |= ~0ull << len;
        D[l] = trunc(r, t);
      END_LANES
      break;
    }
    case Op::kBfi: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      uint64_t te[32];
      const uint64_t* E = src(in.e, w, te);
      int bits = typeBytes(t) * 8;
      LANES(m)
        uint64_t pos = C[l] & 0xff, len = E[l] & 0xff, r = B[l];
        for (uint64_t k = 0; k < len && pos + k < static_cast<uint64_t>(bits); ++k)
          r = (r & ~(1ull << (pos + k))) | (((A[l] >> k) & 1) << (pos + k));
        D[l] = trunc(r, t);
      END_LANES
      break;
    }
    case Op::kSzext: {  // the low N = b bits of a, zero- or sign-extended (PTX ISA semantics, word for word)
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      LANES(m)
        uint32_t a = static_cast<uint32_t>(A[l]), b = static_cast<uint32_t>(B[l]), b1 = b & 31;
        bool too_large = b >= 32 && in.mode == kBmskClamp;
        uint32_t mask = too_large ? 0 : ~0u << b1;
        bool sign = !(b1 == 0 || too_large || t != Type::kS32) && ((a >> ((b1 - 1) & 31)) & 1);
        D[l] = (a & ~mask) | (sign ? mask : 0);
      END_LANES
      break;
    }
    case Op::kMovmatrix: {
      // m8n8.trans.b16: lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 (low, high half); after
      // the transpose it holds those of the transposed matrix, element (r, c) being the source's (c, r).
      const uint64_t* A = src(in.a, w, ta);
      uint64_t res[32];
      auto element = [&](int row, int col) { return (A[row * 4 + col / 2] >> (16 * (col % 2))) & 0xffff; };
      LANES(m)
        int r = l / 4, c = 2 * (l % 4);
        res[l] = element(c, r) | (element(c + 1, r) << 16);
      END_LANES
      LANES(m) D[l] = res[l];
      END_LANES
      break;
    }
    case Op::kPrmt: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      // The modes (in.mode 1..6: f4e b4e rc8 ecl ecr rc16) pick one of four
      // fixed selectors by c's two low bits; their bytes are never sign-extended.
      static constexpr uint16_t kModeSelectors[6][4] = {
          {0x3210, 0x4321, 0x5432, 0x6543}, {0x5670, 0x6701, 0x7012, 0x0123}, {0x0000, 0x1111, 0x2222, 0x3333},
          {0x3210, 0x3211, 0x3222, 0x3333}, {0x0000, 0x1110, 0x2210, 0x3210}, {0x1010, 0x3232, 0x1010, 0x3232}};
      LANES(m)
        uint64_t bytes = (static_cast<uint64_t>(static_cast<uint32_t>(B[l])) << 32) | static_cast<uint32_t>(A[l]);
        uint32_t sel = in.mode ? kModeSelectors[in.mode - 1][C[l] & 3] : static_cast<uint32_t>(C[l]), r = 0;
        for (int k = 0; k < 4; ++k) {
          uint32_t s = (sel >> (4 * k)) & 0xf;
          uint32_t byte = static_cast<uint32_t>((bytes >> (8 * (s & 7))) & 0xff);
          if (s & 8) byte = (byte & 0x80) ? 0xff : 0;
          r |= byte << (8 * k);
        }
        D[l] = r;
      END_LANES
      break;
    }
    case Op::kLop3: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      uint64_t te[32];
      const uint64_t* L = src(in.e, w, te);
      LANES(m)
        uint32_t lut = static_cast<uint32_t>(L[l]) & 0xff, r = 0;
        uint32_t x = static_cast<uint32_t>(A[l]), y = static_cast<uint32_t>(B[l]), z = static_cast<uint32_t>(C[l]);
        for (int k = 0; k < 32; ++k) {
          uint32_t idx = (((x >> k) & 1) << 2) | (((y >> k) & 1) << 1) | ((z >> k) & 1);
          r |= ((lut >> idx) & 1) << k;
        }
        D[l] = r;
      END_LANES
      break;
    }
    case Op::kSelp: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      LANES(m) D[l] = (C[l] & 1) ? A[l] : B[l];
      END_LANES
      break;
    }
    case Op::kSlct: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = src(in.c, w, tc);
      LANES(m)
        bool ge = in.type == Type::kF32 ? f32(C[l]) >= 0.0f : sext(C[l], Type::kS32) >= 0;
        D[l] = ge ? A[l] : B[l];
      END_LANES
      break;
    }
    case Op::kSetp:
    case Op::kSet: {
      const uint64_t* A = src(in.a, w, ta);
      const uint64_t* B = src(in.b, w, tb);
      const uint64_t* C = in.bool_op != BoolOp::kNone ? src(in.c, w, tc) : nullptr;
      uint64_t* D2 = in.d2.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d2.reg) * 32] : nullptr;
      LANES(m)
        bool r = compareTyped(in, A[l], B[l]);
        bool r2 = !r;
        if (C) {
          bool c = C[l] & 1;
          auto comb = [&](bool v) {
            return in.bool_op == BoolOp::kAnd ? (v && c) : in.bool_op == BoolOp::kOr ? (v || c) : (v != c);
          };
          r2 = comb(r2);
          r = comb(r);
        }
        if (in.op == Op::kSetp) {
          if (D) D[l] = r;
          if (D2) D2[l] = r2;
        } else if (D) {
          D[l] = in.dtype == Type::kF32 ? (r ? b32(1.0f) : 0) : (r ? widthMask(in.dtype) : 0);
        }
      END_LANES
      break;
    }
    case Op::kTestp: {
      const uint64_t* A = src(in.a, w, ta);
      LANES(m)
        double x = readF(A[l], t);
        int c = std::fpclassify(x);
        bool r = false;
        switch (in.mode) {
          case 0: r = std::isfinite(x); break;
          case 1: r = std::isinf(x); break;
          case 2: r = !std::isnan(x); break;
          case 3: r = std::isnan(x); break;
          case 4: r = c == FP_NORMAL; break;
          default: r = t == Type::kF32 ? std::fpclassify(static_cast<float>(x)) == FP_SUBNORMAL : c == FP_SUBNORMAL; break;
        }
        D[l] = r;
      END_LANES
      break;
    }
    case Op::kCvt: {
      const uint64_t* A = src(in.a, w, ta);
      Type dt = in.dtype, st = t;
      if (in.mode == kCvtToTf32) {
        // f32 to tf32: the low 13 mantissa bits go, rounded as asked (NaN and infinity kept).
        LANES(m)
          uint32_t x = static_cast<uint32_t>(A[l]);
          if ((x & 0x7f800000u) != 0x7f800000u) {
            uint32_t low = x & 0x1fffu;
            if (in.round == Round::kRna) x += 0x1000u;
            else if (in.round != Round::kRz && (low > 0x1000u || (low == 0x1000u && (x & 0x2000u)))) x += 0x2000u;
            x &= ~0x1fffu;
          }
          D[l] = x;
        END_LANES
        break;
      }
      if (in.mode == kCvtToFp8x2) {
        // cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32 d, hi, lo (or .f16x2 d, pair): the high value in the high byte.
        const bool e5m2 = in.layout == 1;
        const bool from_pair = isX2(st);
        const uint64_t* B = from_pair ? nullptr : src(in.b, w, tb);
        LANES(m)
          double hi = from_pair ? readF((A[l] >> 16) & 0xffff, halfOf(st)) : f32(A[l]);
          double lo = from_pair ? readF(A[l] & 0xffff, halfOf(st)) : f32(B[l]);
          if (in.relu) hi = hi < 0 ? 0.0 : hi, lo = lo < 0 ? 0.0 : lo;
          D[l] = static_cast<uint64_t>(toFp8(hi, e5m2, in.sat)) << 8 | toFp8(lo, e5m2, in.sat);
        END_LANES
        break;
      }
      if (in.mode == kCvtFromFp8x2) {  // cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, pair: exact
        const bool e5m2 = in.layout == 1;
        Type h = halfOf(dt);
        LANES(m)
          double hi = fromFp8(static_cast<uint8_t>(A[l] >> 8), e5m2), lo = fromFp8(static_cast<uint8_t>(A[l]), e5m2);
          if (in.relu) hi = hi < 0 ? 0.0 : hi, lo = lo < 0 ? 0.0 : lo;
          D[l] = ((writeF(hi, h) & 0xffff) << 16) | (writeF(lo, h) & 0xffff);
        END_LANES
        break;
      }
      if (isX2(dt)) {  // cvt.rn.f16x2.f32 d, hi, lo: pack two floats
        const uint64_t* B = src(in.b, w, tb);
        Type h = halfOf(dt);
        LANES(m) D[l] = ((writeF(f32(A[l]), h) & 0xffff) << 16) | (writeF(f32(B[l]), h) & 0xffff);
        END_LANES
        break;
      }
      LANES(m)
        uint64_t x = A[l], r;
        if (isFloat(dt) && isFloat(st)) {
          double v = readF(x, st);
          if (in.round >= Round::kRni) v = roundInt(v, in.round);
          if (dt == Type::kF32 && in.ftz) v = ftz32(static_cast<float>(v));
          if (in.sat) v = saturate(v);
          if (dt == Type::kF32 && directed(in.round)) {
            r = b32(toFloat(v, in.round));
          } else {
            r = writeF(v, dt);
          }
        } else if (isFloat(dt)) {  // int -> float
          double v = isSigned(st) ? static_cast<double>(sext(x, st)) : static_cast<double>(trunc(x, st));
          if (typeBytes(st) == 8 && dt != Type::kF64) {
            // 64-bit ints round once, straight to the target precision.
            float f = isSigned(st) ? static_cast<float>(static_cast<int64_t>(x)) : static_cast<float>(x);
            r = writeF(f, dt);
          } else {
            r = writeF(v, dt);
          }
        } else if (isFloat(st)) {  // float -> int
          r = floatToInt(readF(x, st), dt, in.round);
        } else {  // int -> int
          uint64_t v = isSigned(st) ? static_cast<uint64_t>(sext(x, st)) : trunc(x, st);
          if (in.sat) {
            int64_t sv = isSigned(st) ? sext(x, st) : static_cast<int64_t>(std::min<uint64_t>(trunc(x, st), INT64_MAX));
            int bits = typeBytes(dt) * 8;
            if (isSigned(dt)) {
              int64_t lo = bits == 64 ? INT64_MIN : -(1ll << (bits - 1)), hi = bits == 64 ? INT64_MAX : (1ll << (bits - 1)) - 1;
              v = static_cast<uint64_t>(std::clamp(sv, lo, hi));
            } else {
              uint64_t hi = widthMask(dt);
              v = sv < 0 && isSigned(st) ? 0 : std::min<uint64_t>(isSigned(st) ? static_cast<uint64_t>(sv) : trunc(x, st), hi);
            }
          }
          r = isSigned(dt) ? static_cast<uint64_t>(sext(v, dt)) : trunc(v, dt);
        }
        D[l] = r;
      END_LANES
      break;
    }
    case Op::kCvta: {
      const uint64_t* A = src(in.a, w, ta);
      uint64_t window = in.space == Space::kShared  ? kSharedWindow
                        : in.space == Space::kLocal ? kLocalWindow
                        : in.space == Space::kParam ? kParamWindow
                                                    : 0;
      LANES(m)
        uint64_t x = A[l];
        if (in.mode == kCvtaTo) D[l] = window ? x & ~kWindowMask : x;
        else D[l] = window ? (x & ~kWindowMask) | window : x;
        if (t == Type::kU32) D[l] &= 0xffffffffu;
      END_LANES
      break;
    }
    default:
      break;
  }
  return true;
}

}  // namespace rgpu::server::ptx::detail
