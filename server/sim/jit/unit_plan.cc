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

bool plainF32(const Inst& in) {
  return in.type == Type::kF32 && !in.ftz && !in.sat && (in.round == Round::kDefault || in.round == Round::kRn);
}

bool setpCmp(Cmp c) {
  switch (c) {
    case Cmp::kEq:
    case Cmp::kNe:
    case Cmp::kLt:
    case Cmp::kLo:
    case Cmp::kLe:
    case Cmp::kLs:
    case Cmp::kGt:
    case Cmp::kHi:
    case Cmp::kGe:
    case Cmp::kHs:
      return true;
    default:
      return false;
  }
}

// The arithmetic forms of BlockRunner::fastArith, operand kinds included.
bool arithmetic(const Inst& in) {
  if (in.d.kind != Operand::kReg) return false;
  const Type t = in.type;
  switch (in.op) {
    case Op::kMov:
      return readable(in.a);
    case Op::kDiv:
      return plainF32(in) && readable(in.a) && readable(in.b);
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
      if (!readable(in.a) || !readable(in.b)) return false;
      if (t == Type::kF32) return plainF32(in);
      return isInt(t) && !(in.sat && t == Type::kS32) && !(in.op == Op::kMul && in.mode == kModeHi);
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor:
    case Op::kShl:
    case Op::kShr:
      return isInt(t) && readable(in.a) && readable(in.b);
    case Op::kMad:
    case Op::kFma:
      if (!readable(in.a) || !readable(in.b) || !readable(in.c)) return false;
      if (t == Type::kF32) return plainF32(in);
      return in.op == Op::kMad && isInt(t) && !in.carry && (in.mode == kModeLo || in.mode == kModeWide);
    case Op::kSelp:
      return readable(in.a) && readable(in.b) && readable(in.c);
    case Op::kSetp:
      if (in.bool_op != BoolOp::kNone || !readable(in.a) || !readable(in.b) || !setpCmp(in.cmp)) return false;
      if (in.d2.kind != Operand::kReg && in.d2.kind != Operand::kNone && in.d2.kind != Operand::kSink) return false;
      if (t == Type::kF32) return true;
      switch (t) {
        case Type::kS16:
        case Type::kU16:
        case Type::kB16:
        case Type::kS32:
        case Type::kU32:
        case Type::kB32:
        case Type::kS64:
        case Type::kU64:
        case Type::kB64:
          return true;
        default:
          return false;
      }
    case Op::kAbs:
    case Op::kNeg:
    case Op::kSqrt:
    case Op::kRsqrt:
    case Op::kRcp:
    case Op::kEx2: {
      if (t != Type::kF32 || in.ftz || !readable(in.a)) return false;
      const bool directed = in.round == Round::kRz || in.round == Round::kRm || in.round == Round::kRp;
      return !((in.op == Op::kSqrt || in.op == Op::kRcp) && directed);
    }
    case Op::kCvt: {
      const Type dt = in.dtype;
      if (in.mode || in.sat || in.relu || !isInt(t) || (dt != Type::kF32 && !isInt(dt)) ||
          (dt == Type::kF32 && typeBytes(t) == 8))
        return false;
      return readable(in.a);
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
