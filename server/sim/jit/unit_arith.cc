// The JIT's arithmetic, comparison and conversion forms: each computes the
// bits its interpreter form computes (the hot paths of ptx_fast.cc, the
// general code of ptx_arith.cc), spelled out the same way: f32 results of
// add, sub, mul, div and fma as the first NaN operand quieted where they are
// NaN, directed rounding as the correctly rounded result stepped one ulp by
// the sign of the error (toFloat), flush-to-zero before and after, .sat
// as ptx_block.h spells it out, libm's own functions (exp2, log2, sin, cos,
// tanh) called lane by lane.
#include <llvm/IR/Intrinsics.h>

#include "server/sim/jit/emitter.h"
#include "server/sim/ptx/ptx_interp.h"

namespace rgpu::server::ptx::jit {
namespace {

bool directed(Round r) { return r == Round::kRz || r == Round::kRm || r == Round::kRp; }

}  // namespace

// ---- helpers --------------------------------------------------------------------------

llvm::FunctionCallee Emitter::libm(const char* name) {
  return m_.getOrInsertFunction(name, llvm::FunctionType::get(f64_, {f64_}, false));
}

Value* Emitter::libmCall(llvm::FunctionCallee f, llvm::ArrayRef<Value*> args) {
  // The very function the interpreter calls: not the optimiser's idea of it
  // (it would make fminf a minnum, which treats a signalling NaN as glibc does not).
  llvm::CallInst* call = b_.CreateCall(f, args);
  call->addFnAttr(llvm::Attribute::NoBuiltin);
  return call;
}

Value* Emitter::perLane(Value* x, llvm::FunctionCallee f) {
  auto* type = llvm::cast<llvm::VectorType>(x->getType());
  Value* r = llvm::UndefValue::get(type);
  for (unsigned l = 0; l < kLanes; ++l) r = b_.CreateInsertElement(r, libmCall(f, {b_.CreateExtractElement(x, l)}), l);
  return r;
}

Value* Emitter::ftz(Value* f) {
  // ftz32: a subnormal becomes a zero of its sign.
  Value* bits = b_.CreateBitCast(f, v32_);
  Value* exponent = b_.CreateAnd(bits, splat32(0x7f800000u));
  Value* mantissa = b_.CreateAnd(bits, splat32(0x007fffffu));
  Value* subnormal = b_.CreateAnd(b_.CreateICmpEQ(exponent, splat32(0)), b_.CreateICmpNE(mantissa, splat32(0)));
  return b_.CreateBitCast(b_.CreateSelect(subnormal, b_.CreateAnd(bits, splat32(0x80000000u)), bits), vf_);
}

Value* Emitter::minMax(Value* x, Value* y, bool max) {
  // minMaxNum (ptx_block.h): a NaN gives way, two NaNs give the first quieted, -0 below +0.
  const bool f32 = x->getType() == vf_;
  llvm::Type* bits_type = f32 ? static_cast<llvm::Type*>(v32_) : v64_;
  Value* quiet_bit = llvm::ConstantInt::get(bits_type, f32 ? (1ull << 22) : (1ull << 51));
  Value* bx = b_.CreateBitCast(x, bits_type);
  Value* by = b_.CreateBitCast(y, bits_type);
  Value* xn = isNan(x);
  Value* yn = isNan(y);
  Value* equal = max ? b_.CreateAnd(bx, by) : b_.CreateOr(bx, by);
  Value* ordered = b_.CreateSelect(b_.CreateFCmpOLT(x, y), max ? by : bx,
                                   b_.CreateSelect(b_.CreateFCmpOLT(y, x), max ? bx : by, equal));
  Value* nan = b_.CreateSelect(b_.CreateAnd(xn, yn), b_.CreateOr(bx, quiet_bit), b_.CreateSelect(xn, by, bx));
  return b_.CreateBitCast(b_.CreateSelect(b_.CreateOr(xn, yn), nan, ordered), x->getType());
}

Value* Emitter::saturate(Value* z) {
  // NaN to +0, else clamped to [+0, 1] (ptx_block.h).
  Value* zero = llvm::ConstantFP::get(z->getType(), 0.0);
  Value* one = llvm::ConstantFP::get(z->getType(), 1.0);
  return b_.CreateSelect(isNan(z), zero, minMax(one, minMax(zero, z, true), false));
}

Value* Emitter::nextAfter(Value* r, Value* toward) {
  // std::nextafter(float r, toward) for a finite r: toward itself when
  // equal, the least subnormal of toward's sign from zero, else one ulp.
  Value* bits = b_.CreateBitCast(r, v32_);
  Value* up = b_.CreateICmpEQ(b_.CreateFCmpOLT(r, toward), b_.CreateFCmpOGT(r, llvm::ConstantFP::get(vf_, 0.0)));
  Value* stepped = b_.CreateSelect(up, b_.CreateAdd(bits, splat32(1)), b_.CreateSub(bits, splat32(1)));
  Value* least = b_.CreateOr(b_.CreateAnd(b_.CreateBitCast(toward, v32_), splat32(0x80000000u)), splat32(1));
  Value* from_zero = b_.CreateSelect(b_.CreateFCmpOEQ(r, llvm::ConstantFP::get(vf_, 0.0)), least, stepped);
  return b_.CreateSelect(b_.CreateFCmpOEQ(r, toward), toward, b_.CreateBitCast(from_zero, vf_));
}

Value* Emitter::toFloat(Value* exact, Round mode) {
  Value* r = b_.CreateFPTrunc(exact, vf_);
  if (!directed(mode)) return r;
  // applyDirected: r where exact, NaN or infinite; else a step by the error's sign.
  Value* err = b_.CreateFSub(exact, b_.CreateFPExt(r, vd_));
  Value* zero = llvm::ConstantFP::get(vd_, 0.0);
  Value* inf = llvm::ConstantFP::getInfinity(vf_);
  Value* keep = b_.CreateOr(b_.CreateFCmpOEQ(err, zero),
                            b_.CreateOr(isNan(r), b_.CreateFCmpOEQ(b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, r), inf)));
  Value* stepped;
  if (mode == Round::kRz) {
    Value* same = b_.CreateICmpEQ(b_.CreateFCmpOGT(r, llvm::ConstantFP::get(vf_, 0.0)), b_.CreateFCmpOGT(err, zero));
    stepped = b_.CreateSelect(same, r, nextAfter(r, llvm::ConstantFP::get(vf_, 0.0)));
  } else if (mode == Round::kRm) {
    stepped = b_.CreateSelect(b_.CreateFCmpOLT(err, zero), nextAfter(r, llvm::ConstantFP::getInfinity(vf_, true)), r);
  } else {
    stepped = b_.CreateSelect(b_.CreateFCmpOGT(err, zero), nextAfter(r, inf), r);
  }
  return b_.CreateSelect(keep, r, stepped);
}

Value* Emitter::readFloat(const Operand& o, Type t) {
  Value* v = operand(o);
  if (t == Type::kF32) return asF32(v);
  return b_.CreateBitCast(v, vd_);
}

// ---- instructions ---------------------------------------------------------------------

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
    case Op::kDiv:
    case Op::kRem:
    case Op::kMin:
    case Op::kMax:
    case Op::kCopysign:
      if (t == Type::kF32) return setReg(d, fromF32(f32Binary(in)), em);
      if (t == Type::kPred) {
        Value* x = b_.CreateAnd(operand(in.a), splat64(1));
        Value* y = b_.CreateAnd(operand(in.b), splat64(1));
        return setReg(d, in.op == Op::kAnd ? b_.CreateAnd(x, y) : in.op == Op::kOr ? b_.CreateOr(x, y) : b_.CreateXor(x, y),
                      em);
      }
      return setReg(d, intBinary(in), em);
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor: {
      if (t == Type::kPred) {
        Value* x = b_.CreateAnd(operand(in.a), splat64(1));
        Value* y = b_.CreateAnd(operand(in.b), splat64(1));
        return setReg(d, in.op == Op::kAnd ? b_.CreateAnd(x, y) : in.op == Op::kOr ? b_.CreateOr(x, y) : b_.CreateXor(x, y),
                      em);
      }
      Value* a = low(operand(in.a), bytes);
      Value* bv = low(operand(in.b), bytes);
      Value* r = in.op == Op::kAnd ? b_.CreateAnd(a, bv) : in.op == Op::kOr ? b_.CreateOr(a, bv) : b_.CreateXor(a, bv);
      return setReg(d, zext64(r), em);
    }
    case Op::kNot:
    case Op::kCnot: {
      Value* x = t == Type::kPred ? b_.CreateAnd(operand(in.a), splat64(1)) : truncT(operand(in.a), t);
      if (in.op == Op::kCnot) return setReg(d, b_.CreateZExt(b_.CreateICmpEQ(x, splat64(0)), v64_), em);
      if (t == Type::kPred) return setReg(d, b_.CreateAnd(b_.CreateNot(x), splat64(1)), em);
      return setReg(d, truncT(b_.CreateNot(x), t), em);
    }
    case Op::kMad:
    case Op::kFma: {
      if (t == Type::kF32) return setReg(d, fromF32(f32Fma(in)), em);
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
    case Op::kNeg:
    case Op::kSqrt:
    case Op::kRsqrt:
    case Op::kRcp:
    case Op::kEx2:
    case Op::kLg2:
    case Op::kSin:
    case Op::kCos:
    case Op::kTanh:
      return setReg(d, fromF32(f32Unary(in)), em);
    case Op::kCvt:
      return setReg(d, convert(in), em);
    case Op::kCvta: {
      Value* a = operand(in.a);
      const uint64_t window = in.space == Space::kShared  ? kSharedWindow
                              : in.space == Space::kLocal ? kLocalWindow
                              : in.space == Space::kParam ? kParamWindow
                                                          : 0;
      const uint64_t keep = t == Type::kU32 ? 0xffffffffull : ~0ull;
      Value* r;
      if (!window) r = b_.CreateAnd(a, splat64(keep));
      else if (in.mode == kCvtaTo) r = b_.CreateAnd(a, splat64(~kWindowMask & keep));
      else r = b_.CreateAnd(b_.CreateOr(b_.CreateAnd(a, splat64(~kWindowMask)), splat64(window)), splat64(keep));
      return setReg(d, r, em);
    }
    default:
      return;  // (unit_plan admits nothing else)
  }
}

// Integer add, sub, mul (lo, wide), div, rem, min, max.
Value* Emitter::intBinary(const Inst& in) {
  const Type t = in.type;
  const int bytes = typeBytes(t);
  Value* a = operand(in.a);
  Value* bv = operand(in.b);
  switch (in.op) {
    case Op::kAdd:
      return zext64(b_.CreateAdd(low(a, bytes), low(bv, bytes)));
    case Op::kSub:
      return zext64(b_.CreateSub(low(a, bytes), low(bv, bytes)));
    case Op::kMul:
      if (in.mode == kModeLo) return zext64(b_.CreateMul(low(a, bytes), low(bv, bytes)));
      // mul.wide: the product of the operands read at their type, in 64 bits.
      if (isSigned(t)) return b_.CreateMul(sextT(a, t), sextT(bv, t));
      return b_.CreateMul(truncT(a, t), truncT(bv, t));
    case Op::kMin:
    case Op::kMax: {
      Value* lt = isSigned(t) ? b_.CreateICmpSLT(sextT(a, t), sextT(bv, t)) : b_.CreateICmpULT(truncT(a, t), truncT(bv, t));
      return truncT(in.op == Op::kMin ? b_.CreateSelect(lt, a, bv) : b_.CreateSelect(lt, bv, a), t);
    }
    default: {  // div, rem: by zero and INT_MIN / -1 give the GPU's answers (all ones / the dividend)
      if (isSigned(t)) {
        Value* x = sextT(a, t);
        Value* y = sextT(bv, t);
        Value* zero = b_.CreateICmpEQ(y, splat64(0));
        Value* minus_one = b_.CreateICmpEQ(y, splat64(~0ull));
        Value* safe = b_.CreateSelect(b_.CreateOr(zero, minus_one), splat64(1), y);
        if (in.op == Op::kDiv) {
          Value* q = b_.CreateSDiv(x, safe);
          q = b_.CreateSelect(minus_one, b_.CreateSub(splat64(0), x), q);
          return truncT(b_.CreateSelect(zero, splat64(~0ull), q), t);
        }
        Value* r = b_.CreateSRem(x, safe);
        r = b_.CreateSelect(minus_one, splat64(0), r);
        return truncT(b_.CreateSelect(zero, x, r), t);
      }
      Value* x = truncT(a, t);
      Value* y = truncT(bv, t);
      Value* zero = b_.CreateICmpEQ(y, splat64(0));
      Value* safe = b_.CreateSelect(zero, splat64(1), y);
      if (in.op == Op::kDiv) {
        const uint64_t all = bytes >= 8 ? ~0ull : (1ull << (8 * bytes)) - 1;
        return b_.CreateSelect(zero, splat64(all), b_.CreateUDiv(x, safe));
      }
      return b_.CreateSelect(zero, x, b_.CreateURem(x, safe));
    }
  }
}

// f32 add, sub, mul, div, min, max, copysign (ptx_arith.cc's f32 binary forms).
Value* Emitter::f32Binary(const Inst& in) {
  Value* x = asF32(operand(in.a));
  Value* y = asF32(operand(in.b));
  if (in.ftz) x = ftz(x), y = ftz(y);
  Value* z;
  switch (in.op) {
    case Op::kMin:
      z = minMax(x, y, false);
      break;
    case Op::kMax:
      z = minMax(x, y, true);
      break;
    case Op::kCopysign: {  // copysign.f32 d, a, b: |b| with a's sign
      Value* magnitude = b_.CreateAnd(b_.CreateBitCast(y, v32_), splat32(0x7fffffffu));
      Value* sign = b_.CreateAnd(b_.CreateBitCast(x, v32_), splat32(0x80000000u));
      z = b_.CreateBitCast(b_.CreateOr(magnitude, sign), vf_);
      break;
    }
    default:
      if (directed(in.round)) {
        // In double (a sum or product of two floats is exact there), then rounded as the mode says.
        Value* xd = b_.CreateFPExt(x, vd_);
        Value* yd = b_.CreateFPExt(y, vd_);
        Value* exact = in.op == Op::kAdd   ? b_.CreateFAdd(xd, yd)
                       : in.op == Op::kSub ? b_.CreateFSub(xd, yd)
                       : in.op == Op::kMul ? b_.CreateFMul(xd, yd)
                                           : b_.CreateFDiv(xd, yd);
        z = nanFirst(toFloat(exact, in.round), {x, y});
      } else {
        Value* r = in.op == Op::kAdd   ? b_.CreateFAdd(x, y)
                   : in.op == Op::kSub ? b_.CreateFSub(x, y)
                   : in.op == Op::kMul ? b_.CreateFMul(x, y)
                                       : b_.CreateFDiv(x, y);
        z = nanFirst(r, {x, y});
      }
      break;
  }
  if (in.sat) z = saturate(z);
  if (in.ftz) z = ftz(z);
  return z;
}

Value* Emitter::f32Fma(const Inst& in) {
  Value* x = asF32(operand(in.a));
  Value* y = asF32(operand(in.b));
  Value* z = asF32(operand(in.c));
  if (in.ftz) x = ftz(x), y = ftz(y), z = ftz(z);
  Value* r;
  if (directed(in.round)) {
    Value* exact = b_.CreateIntrinsic(llvm::Intrinsic::fma, {vd_},
                                      {b_.CreateFPExt(x, vd_), b_.CreateFPExt(y, vd_), b_.CreateFPExt(z, vd_)});
    r = nanFirst(toFloat(exact, in.round), {x, y, z});
  } else {
    r = nanFirst(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vf_}, {x, y, z}), {x, y, z});
  }
  if (in.sat) r = saturate(r);
  if (in.ftz) r = ftz(r);
  return r;
}

// f32 abs, neg, sqrt, rsqrt, rcp, ex2, lg2, sin, cos, tanh: in double, rounded
// once to f32 (sqrt and rcp as their rounding mode says).
Value* Emitter::f32Unary(const Inst& in) {
  Value* f = asF32(operand(in.a));
  if (in.ftz) f = ftz(f);
  Value* result;
  if (in.op == Op::kAbs || in.op == Op::kNeg) {
    // What f32 -> double -> f32 around fabs/negation does: the sign bit,
    // and a NaN comes back quiet.
    Value* x = b_.CreateBitCast(f, v32_);
    Value* q = b_.CreateSelect(isNan(f), b_.CreateOr(x, splat32(0x00400000u)), x);
    Value* r = in.op == Op::kAbs ? b_.CreateAnd(q, splat32(0x7fffffffu)) : b_.CreateXor(q, splat32(0x80000000u));
    result = b_.CreateBitCast(r, vf_);
  } else {
    Value* x = b_.CreateFPExt(f, vd_);
    Value* one = llvm::ConstantFP::get(vd_, 1.0);
    Value* r;
    switch (in.op) {
      case Op::kSqrt: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x); break;
      case Op::kRsqrt: r = b_.CreateFDiv(one, b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x)); break;
      case Op::kRcp: r = b_.CreateFDiv(one, x); break;
      case Op::kEx2: r = perLane(x, libm("exp2")); break;
      case Op::kLg2: r = perLane(x, libm("log2")); break;
      case Op::kSin: r = perLane(x, libm("sin")); break;
      case Op::kCos: r = perLane(x, libm("cos")); break;
      default: r = perLane(x, libm("tanh")); break;
    }
    result = (in.op == Op::kSqrt || in.op == Op::kRcp) ? toFloat(r, in.round) : b_.CreateFPTrunc(r, vf_);
  }
  return in.ftz ? ftz(result) : result;
}

// cvt between integers, from integers to f32/f64, between f32 and f64, and
// from f32/f64 to integers (ptx_arith.cc's kCvt without packed or 8-bit floats).
Value* Emitter::convert(const Inst& in) {
  const Type st = in.type, dt = in.dtype;
  Value* a = operand(in.a);
  if (!isFloat(st) && !isFloat(dt)) {  // int -> int (the hot path's: no .sat)
    Value* v = isSigned(st) ? sextT(a, st) : truncT(a, st);
    return isSigned(dt) ? sextT(v, dt) : truncT(v, dt);
  }
  if (!isFloat(st)) {  // int -> float
    if (typeBytes(st) == 8 && dt == Type::kF32) {  // 64-bit ints round once, straight to f32
      Value* f = isSigned(st) ? b_.CreateSIToFP(a, vf_) : b_.CreateUIToFP(a, vf_);
      return fromF32(f);
    }
    Value* v = isSigned(st) ? b_.CreateSIToFP(sextT(a, st), vd_) : b_.CreateUIToFP(truncT(a, st), vd_);
    if (dt == Type::kF64) return b_.CreateBitCast(v, v64_);
    return fromF32(b_.CreateFPTrunc(v, vf_));
  }
  Value* v = b_.CreateBitCast(a, vd_);
  if (st == Type::kF32) v = b_.CreateFPExt(asF32(a), vd_);
  if (!isFloat(dt)) return floatToInt(v, dt, in.round);
  // float -> float: rounded to an integer (.rni ...), flushed, saturated, then to the type.
  switch (in.round) {
    case Round::kRzi: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, v); break;
    case Round::kRmi: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, v); break;
    case Round::kRpi: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, v); break;
    case Round::kRni: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::nearbyint, v); break;
    default: break;
  }
  if (dt == Type::kF32 && in.ftz) v = b_.CreateFPExt(ftz(b_.CreateFPTrunc(v, vf_)), vd_);
  if (in.sat) v = saturate(v);
  if (dt == Type::kF64) return b_.CreateBitCast(v, v64_);
  return fromF32(toFloat(v, in.round));
}

// floatToInt: NaN -> 0, rounded as asked (toward zero by default), saturated
// at the type's bounds.
Value* Emitter::floatToInt(Value* v, Type t, Round r) {
  // roundInt: toward zero by default and for .rzi, down for .rmi, up for
  // .rpi, to nearest even for any other mode.
  switch (r) {
    case Round::kDefault: case Round::kRzi: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, v); break;
    case Round::kRmi: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, v); break;
    case Round::kRpi: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, v); break;
    default: v = b_.CreateUnaryIntrinsic(llvm::Intrinsic::nearbyint, v); break;
  }
  const int bits = typeBytes(t) * 8;
  Value* result;
  if (isSigned(t)) {
    const double lo = -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, bits - 1) - 1;
    const int64_t lo_i = static_cast<int64_t>(lo), hi_i = bits == 64 ? INT64_MAX : static_cast<int64_t>(hi);
    Value* lo_v = llvm::ConstantFP::get(vd_, lo);
    Value* hi_v = llvm::ConstantFP::get(vd_, hi);
    // (The conversion sees only in-range values: the others are chosen away.)
    Value* inside = b_.CreateSelect(b_.CreateFCmpULT(v, hi_v), b_.CreateSelect(b_.CreateFCmpUGT(v, lo_v), v, lo_v), lo_v);
    inside = b_.CreateSelect(isNan(v), llvm::ConstantFP::get(vd_, 0.0), inside);
    result = b_.CreateFPToSI(inside, v64_);
    result = b_.CreateSelect(b_.CreateFCmpOGE(v, hi_v), splat64(static_cast<uint64_t>(hi_i)), result);
    result = b_.CreateSelect(b_.CreateFCmpOLE(v, lo_v), splat64(static_cast<uint64_t>(lo_i)), result);
    result = truncT(result, t);
  } else {
    const double hi = std::ldexp(1.0, bits) - 1;
    const uint64_t hi_i = bits == 64 ? UINT64_MAX : static_cast<uint64_t>(hi);
    Value* zero = llvm::ConstantFP::get(vd_, 0.0);
    Value* hi_v = llvm::ConstantFP::get(vd_, hi);
    Value* inside = b_.CreateSelect(b_.CreateOr(b_.CreateFCmpULE(v, zero), b_.CreateFCmpOGE(v, hi_v)), zero, v);
    result = b_.CreateFPToUI(inside, v64_);
    result = b_.CreateSelect(b_.CreateFCmpOGE(v, hi_v), splat64(hi_i), result);
    result = b_.CreateSelect(b_.CreateFCmpOLE(v, zero), splat64(0), result);
  }
  return b_.CreateSelect(isNan(v), splat64(0), result);
}

void Emitter::setp(const Inst& in, Value* em) {
  const Type t = in.type;
  Value* r;
  if (t == Type::kF32 || t == Type::kF64) {
    // compare(): ordered comparisons are false with a NaN, unordered ones true.
    // (As the interpreter, without flushing: .ftz changes no comparison's answer there.)
    Value* x = readFloat(in.a, t);
    Value* y = readFloat(in.b, t);
    switch (in.cmp) {
      case Cmp::kEq: r = b_.CreateFCmpOEQ(x, y); break;
      case Cmp::kNe: r = b_.CreateFCmpONE(x, y); break;
      case Cmp::kLt: case Cmp::kLo: r = b_.CreateFCmpOLT(x, y); break;
      case Cmp::kLe: case Cmp::kLs: r = b_.CreateFCmpOLE(x, y); break;
      case Cmp::kGt: case Cmp::kHi: r = b_.CreateFCmpOGT(x, y); break;
      case Cmp::kGe: case Cmp::kHs: r = b_.CreateFCmpOGE(x, y); break;
      case Cmp::kEqu: r = b_.CreateFCmpUEQ(x, y); break;
      case Cmp::kNeu: r = b_.CreateFCmpUNE(x, y); break;
      case Cmp::kLtu: r = b_.CreateFCmpULT(x, y); break;
      case Cmp::kLeu: r = b_.CreateFCmpULE(x, y); break;
      case Cmp::kGtu: r = b_.CreateFCmpUGT(x, y); break;
      case Cmp::kGeu: r = b_.CreateFCmpUGE(x, y); break;
      case Cmp::kNum: r = b_.CreateFCmpORD(x, y); break;
      default: r = b_.CreateFCmpUNO(x, y); break;
    }
  } else {
    // Read at the type (signed or not), then compared as such whatever the comparison's name.
    const bool sgn = isSigned(t);
    Value* x = sgn ? sextT(operand(in.a), t) : truncT(operand(in.a), t);
    Value* y = sgn ? sextT(operand(in.b), t) : truncT(operand(in.b), t);
    switch (in.cmp) {
      case Cmp::kEq: case Cmp::kEqu: r = b_.CreateICmpEQ(x, y); break;
      case Cmp::kNe: case Cmp::kNeu: r = b_.CreateICmpNE(x, y); break;
      case Cmp::kLt: case Cmp::kLo: case Cmp::kLtu: r = sgn ? b_.CreateICmpSLT(x, y) : b_.CreateICmpULT(x, y); break;
      case Cmp::kLe: case Cmp::kLs: case Cmp::kLeu: r = sgn ? b_.CreateICmpSLE(x, y) : b_.CreateICmpULE(x, y); break;
      case Cmp::kGt: case Cmp::kHi: case Cmp::kGtu: r = sgn ? b_.CreateICmpSGT(x, y) : b_.CreateICmpUGT(x, y); break;
      case Cmp::kGe: case Cmp::kHs: case Cmp::kGeu: r = sgn ? b_.CreateICmpSGE(x, y) : b_.CreateICmpUGE(x, y); break;
      default: r = llvm::ConstantInt::getFalse(vm_); break;  // num, nan: never for integers
    }
  }
  Value* r2 = b_.CreateNot(r);
  if (in.bool_op != BoolOp::kNone) {  // combined with the predicate c
    Value* c = b_.CreateTrunc(operand(in.c), vm_);
    auto comb = [&](Value* v) {
      return in.bool_op == BoolOp::kAnd ? b_.CreateAnd(v, c) : in.bool_op == BoolOp::kOr ? b_.CreateOr(v, c) : b_.CreateXor(v, c);
    };
    r = comb(r);
    r2 = comb(r2);
  }
  setReg(in.d.reg, b_.CreateZExt(r, v64_), em);
  if (in.d2.kind == Operand::kReg) setReg(in.d2.reg, b_.CreateZExt(r2, v64_), em);
}

}  // namespace rgpu::server::ptx::jit
