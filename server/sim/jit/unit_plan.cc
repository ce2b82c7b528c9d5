#include "server/sim/jit/unit_plan.h"

#include "server/sim/ptx/ptx_reconverge.h"

namespace rgpu::server::ptx::jit {
namespace {

bool isInt(Type t) {
  return t != Type::kPred && typeBytes(t) > 0 && !isFloat(t) && t != Type::kE4M3 && t != Type::kE5M2;
}

// A source operand the compiled code can read: a register (a predicate one
// possibly negated), an immediate, or a special register it is given.
bool readable(const Operand& o) {
  switch (o.kind) {
    case Operand::kReg:
    case Operand::kParamReg:
    case Operand::kImm:
      return true;
    case Operand::kSpecial:
      switch (o.special) {
        case Special::kTidX:
        case Special::kTidY:
        case Special::kTidZ:
        case Special::kNtidX:
        case Special::kNtidY:
        case Special::kNtidZ:
        case Special::kCtaidX:
        case Special::kCtaidY:
        case Special::kCtaidZ:
        case Special::kNctaidX:
        case Special::kNctaidY:
        case Special::kNctaidZ:
        case Special::kLaneid:
        case Special::kWarpid:
          return true;
        default:
          return false;
      }
    default:
      return false;
  }
}

bool roundable(Round r) {  // an f32 result's rounding: to nearest or directed
  return r == Round::kDefault || r == Round::kRn || r == Round::kRz || r == Round::kRm || r == Round::kRp;
}

bool floatType(Type t) { return t == Type::kF32 || t == Type::kF64; }

// The arithmetic forms unit_arith.cc emits: those of BlockRunner::fastArith,
// and of the general code (ptx_arith.cc) for integer division, minimum and
// maximum, predicate logic, f32 arithmetic with .ftz, .sat and directed
// rounding, f32 min, max, copysign and math functions, comparisons of every
// kind, conversions among integers, f32 and f64.
bool arithmetic(const Inst& in) {
  if (in.d.kind != Operand::kReg) return false;
  const Type t = in.type;
  auto operands = [&](std::initializer_list<const Operand*> ops) {
    for (const Operand* o : ops)
      if (!readable(*o)) return false;
    return true;
  };
  switch (in.op) {
    case Op::kMov:
      return readable(in.a);
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      if (!operands({&in.a, &in.b})) return false;
      if (t == Type::kF32) return roundable(in.round);
      if (!isInt(t) || in.sat || (in.op == Op::kMul && in.mode == kModeHi)) return false;
      return in.op != Op::kMul || in.mode == kModeLo || in.mode == kModeWide;
    case Op::kRem:
      return isInt(t) && operands({&in.a, &in.b});
    case Op::kMin:
    case Op::kMax:
      return (isInt(t) || t == Type::kF32) && operands({&in.a, &in.b});
    case Op::kCopysign:
      return t == Type::kF32 && operands({&in.a, &in.b});
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor:
      return (isInt(t) || t == Type::kPred) && operands({&in.a, &in.b});
    case Op::kNot:
    case Op::kCnot:
      return (isInt(t) || t == Type::kPred) && readable(in.a);
    case Op::kShl:
    case Op::kShr:
      return isInt(t) && operands({&in.a, &in.b});
    case Op::kMad:
    case Op::kFma:
      if (!operands({&in.a, &in.b, &in.c})) return false;
      if (t == Type::kF32) return roundable(in.round);
      return in.op == Op::kMad && isInt(t) && !in.carry && !in.sat && (in.mode == kModeLo || in.mode == kModeWide);
    case Op::kSelp:
      return operands({&in.a, &in.b, &in.c});
    case Op::kSetp:
      if (!operands({&in.a, &in.b}) || (in.bool_op != BoolOp::kNone && !readable(in.c))) return false;
      if (in.d2.kind != Operand::kReg && in.d2.kind != Operand::kNone && in.d2.kind != Operand::kSink) return false;
      return floatType(t) || isInt(t);
    case Op::kAbs:
    case Op::kNeg:
      return t == Type::kF32 && readable(in.a);
    case Op::kSqrt:
    case Op::kRcp:
      return t == Type::kF32 && roundable(in.round) && readable(in.a);
    case Op::kRsqrt:
    case Op::kEx2:
    case Op::kLg2:
    case Op::kSin:
    case Op::kCos:
    case Op::kTanh:
      return t == Type::kF32 && readable(in.a);
    case Op::kCvt: {
      const Type dt = in.dtype;
      if (in.mode || in.relu || !readable(in.a)) return false;
      if (isInt(t) && isInt(dt)) return !in.sat;                // int -> int (without .sat)
      if (isInt(t) && floatType(dt)) return !in.sat;            // int -> f32, f64
      if (floatType(t) && isInt(dt)) return !in.sat;            // f32, f64 -> int (saturating anyway)
      if (floatType(t) && floatType(dt)) return in.round != Round::kRna;  // f32, f64 -> f32, f64
      return false;
    }
    case Op::kCvta:
      return readable(in.a);
    default:
      return false;
  }
}

// The memory forms of BlockRunner::fastMemory that do not depend on values.
bool memory(const Function& fn, const Inst& in) {
  if (in.op != Op::kLd && in.op != Op::kSt) return false;
  const bool load = in.op == Op::kLd;
  const Operand& addr = load ? in.a : in.d;
  const Operand& val = load ? in.d : in.a;
  if (val.kind != Operand::kReg || addr.kind != Operand::kAddr || typeBytes(in.type) == 0) return false;
  Space space = in.space;
  if (!addr.has_base && addr.sym_space != Space::kGeneric) space = addr.sym_space;
  switch (space) {
    case Space::kParam: {
      const uint64_t n = static_cast<uint64_t>(typeBytes(in.type));
      return load && !addr.has_base && addr.imm <= fn.param_bytes && n <= fn.param_bytes - addr.imm;
    }
    case Space::kGlobal:
    case Space::kConst:
    case Space::kGeneric:
    case Space::kShared:
    case Space::kLocal:
      return true;
  }
  return false;
}

}  // namespace

bool compilable(const Function& fn, const Inst& in) { return arithmetic(in) || memory(fn, in); }

std::vector<Span> planUnits(const Function& fn, uint32_t min_count) {
  const auto& code = fn.code;
  const size_t n = code.size();
  std::vector<bool> leader(n + 1, false);
  if (n) leader[0] = true;
  for (size_t i = 0; i < n; ++i) {
    const Inst& in = code[i];
    if (in.op == Op::kBra || in.op == Op::kCall) {
      if (in.target < n) leader[in.target] = true;
      leader[i + 1] = true;
    }
    if (i < fn.reconverge.size() && fn.reconverge[i] != kNoReconvergence && fn.reconverge[i] < n)
      leader[fn.reconverge[i]] = true;
  }
  std::vector<Span> units;
  size_t i = 0;
  while (i < n) {
    if (!compilable(fn, code[i])) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && !leader[j] && compilable(fn, code[j])) ++j;
    if (j - i >= min_count) units.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(j - i)});
    i = j;
  }
  return units;
}

}  // namespace rgpu::server::ptx::jit
