// The JIT's arithmetic, comparison and conversion forms: each computes the
// bits its interpreter form computes (the hot paths of ptx_fast.cc, the
// general code of ptx_arith.cc), spelled out the same way.
#include <llvm/IR/Intrinsics.h>

#include "server/sim/jit/emitter.h"
#include "server/sim/ptx/ptx_interp.h"

namespace rgpu::server::ptx::jit {

void Emitter::arithmetic(const Inst& in, Value* em) {
  const Type t = in.type;
  const int bytes = typeBytes(t);
  const uint32_t d = in.d.reg;
  switch (in.op) {
    case Op::kMov:
      return setReg(d, operand(in.a), em);
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv: {
      if (t == Type::kF32) {
        Value* x = asF32(operand(in.a));
        Value* y = asF32(operand(in.b));
        Value* r = in.op == Op::kAdd   ? b_.CreateFAdd(x, y)
                   : in.op == Op::kSub ? b_.CreateFSub(x, y)
                   : in.op == Op::kMul ? b_.CreateFMul(x, y)
                                       : b_.CreateFDiv(x, y);
        return setReg(d, fromF32(nanFirst(r, {x, y})), em);
      }
      Value* a = operand(in.a);
      Value* bv = operand(in.b);
      if (in.op == Op::kAdd) return setReg(d, zext64(b_.CreateAdd(low(a, bytes), low(bv, bytes))), em);
      if (in.op == Op::kSub) return setReg(d, zext64(b_.CreateSub(low(a, bytes), low(bv, bytes))), em);
      if (in.mode == kModeLo) return setReg(d, zext64(b_.CreateMul(low(a, bytes), low(bv, bytes))), em);
      // mul.wide: the product of the operands read at their type, in 64 bits.
      if (isSigned(t)) return setReg(d, b_.CreateMul(sextT(a, t), sextT(bv, t)), em);
      return setReg(d, b_.CreateMul(truncT(a, t), truncT(bv, t)), em);
    }
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor: {
      Value* a = low(operand(in.a), bytes);
      Value* bv = low(operand(in.b), bytes);
      Value* r = in.op == Op::kAnd ? b_.CreateAnd(a, bv) : in.op == Op::kOr ? b_.CreateOr(a, bv) : b_.CreateXor(a, bv);
      return setReg(d, zext64(r), em);
    }
    case Op::kMad:
    case Op::kFma: {
      if (t == Type::kF32) {
        Value* x = asF32(operand(in.a));
        Value* y = asF32(operand(in.b));
        Value* z = asF32(operand(in.c));
        Value* r = b_.CreateIntrinsic(llvm::Intrinsic::fma, {vf_}, {x, y, z});
        return setReg(d, fromF32(nanFirst(r, {x, y, z})), em);
      }
      Value* a = operand(in.a);
      Value* bv = operand(in.b);
      Value* cv = operand(in.c);
      if (in.mode == kModeLo)
        return setReg(d, zext64(b_.CreateAdd(b_.CreateMul(low(a, bytes), low(bv, bytes)), low(cv, bytes))), em);
      Value* product =
          isSigned(t) ? b_.CreateMul(sextT(a, t), sextT(bv, t)) : b_.CreateMul(truncT(a, t), truncT(bv, t));
      return setReg(d, b_.CreateAdd(product, cv), em);
    }
    case Op::kShl:
    case Op::kShr: {
      Value* a = operand(in.a);
      // The amount is the low 32 bits of b; at or past the width the result is all sign or zero.
      Value* s = b_.CreateZExt(b_.CreateTrunc(operand(in.b), v32_), v64_);
      const uint64_t bits = static_cast<uint64_t>(bytes) * 8;
      Value* past = b_.CreateICmpUGE(s, splat64(bits));
      Value* amount = b_.CreateSelect(past, splat64(0), s);  // in range whatever is chosen below
      Value* r;
      if (in.op == Op::kShl) {
        r = b_.CreateSelect(past, splat64(0), b_.CreateShl(a, amount));
        r = zext64(low(r, bytes));
      } else if (isSigned(t)) {
        Value* x = sextT(a, t);
        Value* sign = b_.CreateAShr(x, splat64(63));
        r = zext64(low(b_.CreateSelect(past, sign, b_.CreateAShr(x, amount)), bytes));
      } else {
        r = b_.CreateSelect(past, splat64(0), b_.CreateLShr(truncT(a, t), amount));
      }
      return setReg(d, r, em);
    }
    case Op::kSelp: {
      Value* c = b_.CreateTrunc(operand(in.c), vm_);
      return setReg(d, b_.CreateSelect(c, operand(in.a), operand(in.b)), em);
    }
    case Op::kSetp:
      return setp(in, em);
    case Op::kAbs:
    case Op::kNeg: {
      // What f32 -> double -> f32 around fabs/negation does: the sign bit,
      // and a NaN comes back quiet.
      Value* x = b_.CreateTrunc(operand(in.a), v32_);
      Value* nan = isNan(b_.CreateBitCast(x, vf_));
      Value* q = b_.CreateSelect(nan, b_.CreateOr(x, splat32(0x00400000u)), x);
      Value* r = in.op == Op::kAbs ? b_.CreateAnd(q, splat32(0x7fffffffu)) : b_.CreateXor(q, splat32(0x80000000u));
      return setReg(d, b_.CreateZExt(r, v64_), em);
    }
    case Op::kSqrt:
    case Op::kRsqrt:
    case Op::kRcp:
    case Op::kEx2: {
      // Computed in double and rounded once to f32, as the hot path does.
      Value* x = b_.CreateFPExt(asF32(operand(in.a)), vd_);
      Value* r;
      if (in.op == Op::kSqrt) {
        r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
      } else if (in.op == Op::kRsqrt) {
        r = b_.CreateFDiv(llvm::ConstantFP::get(vd_, 1.0), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
      } else if (in.op == Op::kRcp) {
        r = b_.CreateFDiv(llvm::ConstantFP::get(vd_, 1.0), x);
      } else {
        r = perLane(x, libm("exp2"));
      }
      return setReg(d, fromF32(b_.CreateFPTrunc(r, vf_)), em);
    }
    case Op::kCvt: {
      Value* a = operand(in.a);
      const Type dt = in.dtype;
      if (dt == Type::kF32) {
        Value* v = isSigned(t) ? b_.CreateSIToFP(sextT(a, t), vd_) : b_.CreateUIToFP(truncT(a, t), vd_);
        return setReg(d, fromF32(b_.CreateFPTrunc(v, vf_)), em);
      }
      Value* v = isSigned(t) ? sextT(a, t) : truncT(a, t);
      return setReg(d, isSigned(dt) ? sextT(v, dt) : truncT(v, dt), em);
    }
    case Op::kCvta: {
      Value* a = operand(in.a);
      const uint64_t window = in.space == Space::kShared  ? kSharedWindow
                              : in.space == Space::kLocal ? kLocalWindow
                              : in.space == Space::kParam ? kParamWindow
                                                          : 0;
      const uint64_t keep = t == Type::kU32 ? 0xffffffffull : ~0ull;
      Value* r;
      if (!window)
        r = b_.CreateAnd(a, splat64(keep));
      else if (in.mode == kCvtaTo)
        r = b_.CreateAnd(a, splat64(~kWindowMask & keep));
      else
        r = b_.CreateAnd(b_.CreateOr(b_.CreateAnd(a, splat64(~kWindowMask)), splat64(window)), splat64(keep));
      return setReg(d, r, em);
    }
    default:
      return;  // (unit_plan admits nothing else)
  }
}

void Emitter::setp(const Inst& in, Value* em) {
  const Type t = in.type;
  Value* a = operand(in.a);
  Value* bv = operand(in.b);
  Value* r;
  if (t == Type::kF32) {
    Value* x = asF32(a);
    Value* y = asF32(bv);
    switch (in.cmp) {
      case Cmp::kEq:
        r = b_.CreateFCmpOEQ(x, y);
        break;
      case Cmp::kNe:
        r = b_.CreateFCmpONE(x, y);
        break;
      case Cmp::kLt:
      case Cmp::kLo:
        r = b_.CreateFCmpOLT(x, y);
        break;
      case Cmp::kLe:
      case Cmp::kLs:
        r = b_.CreateFCmpOLE(x, y);
        break;
      case Cmp::kGt:
      case Cmp::kHi:
        r = b_.CreateFCmpOGT(x, y);
        break;
      default:
        r = b_.CreateFCmpOGE(x, y);
        break;
    }
  } else {
    // Read at the type (signed or not), then compared as such whatever the comparison's name.
    const bool sgn = isSigned(t);
    Value* x = sgn ? sextT(a, t) : truncT(a, t);
    Value* y = sgn ? sextT(bv, t) : truncT(bv, t);
    switch (in.cmp) {
      case Cmp::kEq:
        r = b_.CreateICmpEQ(x, y);
        break;
      case Cmp::kNe:
        r = b_.CreateICmpNE(x, y);
        break;
      case Cmp::kLt:
      case Cmp::kLo:
        r = sgn ? b_.CreateICmpSLT(x, y) : b_.CreateICmpULT(x, y);
        break;
      case Cmp::kLe:
      case Cmp::kLs:
        r = sgn ? b_.CreateICmpSLE(x, y) : b_.CreateICmpULE(x, y);
        break;
      case Cmp::kGt:
      case Cmp::kHi:
        r = sgn ? b_.CreateICmpSGT(x, y) : b_.CreateICmpUGT(x, y);
        break;
      default:
        r = sgn ? b_.CreateICmpSGE(x, y) : b_.CreateICmpUGE(x, y);
        break;
    }
  }
  setReg(in.d.reg, b_.CreateZExt(r, v64_), em);
  if (in.d2.kind == Operand::kReg) setReg(in.d2.reg, b_.CreateZExt(b_.CreateNot(r), v64_), em);
}

llvm::FunctionCallee Emitter::libm(const char* name) {
  return m_.getOrInsertFunction(name, llvm::FunctionType::get(f64_, {f64_}, false));
}
Value* Emitter::perLane(Value* x, llvm::FunctionCallee f) {
  Value* r = llvm::UndefValue::get(vd_);
  for (unsigned l = 0; l < kLanes; ++l) {
    Value* v = b_.CreateCall(f, {b_.CreateExtractElement(x, l)});
    r = b_.CreateInsertElement(r, v, l);
  }
  return r;
}

}  // namespace rgpu::server::ptx::jit
