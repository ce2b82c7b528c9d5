#include "server/sim/jit/unit_emitter.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>

#include <cstddef>
#include <unordered_map>

#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_jit.h"

namespace rgpu::server::ptx::jit {
namespace {

using llvm::Value;

constexpr unsigned kLanes = 32;

class Emitter {
 public:
  Emitter(llvm::Module& m, const Function& fn, const Liveness& live, uint32_t first_slot)
      : m_(m), fn_(fn), live_(live), c_(m.getContext()), b_(c_), slots_(first_slot) {
    i1_ = b_.getInt1Ty();
    i8_ = b_.getInt8Ty();
    i32_ = b_.getInt32Ty();
    i64_ = b_.getInt64Ty();
    f32_ = b_.getFloatTy();
    f64_ = b_.getDoubleTy();
    v64_ = vec(i64_);
    v32_ = vec(i32_);
    vf_ = vec(f32_);
    vd_ = vec(f64_);
    vm_ = vec(i1_);
    llvm::MDBuilder md(c_);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("rgpu.jit");
    llvm::MDNode* regs = md.createAnonymousAliasScope(domain, "registers");
    regs_scope_ = llvm::MDNode::get(c_, {regs});
  }

  uint32_t slots() const { return slots_; }

  llvm::Function* emit(const Span& span, const std::string& name) {
    auto* i8p = llvm::PointerType::getUnqual(i8_);
    auto* type = llvm::FunctionType::get(i32_, {i8p, i32_}, false);
    f_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, m_);
    f_->addFnAttr(llvm::Attribute::NoUnwind);
    f_->addParamAttr(0, llvm::Attribute::NoAlias);
    f_->addParamAttr(0, llvm::Attribute::NoCapture);
    frame_ = f_->getArg(0);
    mask_ = f_->getArg(1);
    b_.SetInsertPoint(llvm::BasicBlock::Create(c_, "entry", f_));
    count_ = b_.CreateAlloca(i64_, nullptr, "insts");
    b_.CreateStore(b_.getInt64(0), count_);
    regs_ = frameField(offsetof(Frame, regs), llvm::PointerType::getUnqual(i64_));
    maskv_ = b_.CreateBitCast(mask_, vm_);
    planStores(span);
    for (uint32_t k = 0; k < span.count; ++k) {
      index_ = k;
      instruction(fn_.code[span.start + k]);
    }
    finish(span.count);
    return f_;
  }

 private:
  llvm::VectorType* vec(llvm::Type* t) { return llvm::FixedVectorType::get(t, kLanes); }

  // Whether the unit may stop before `in` (an access it may not vouch for).
  static bool mayStop(const Inst& in) {
    if (in.op != Op::kLd && in.op != Op::kSt) return false;
    const Operand& addr = in.op == Op::kLd ? in.a : in.d;
    return (!addr.has_base && addr.sym_space == Space::kParam ? Space::kParam : in.space) != Space::kParam;
  }

  // Which writes must reach the register file: a write is read from memory
  // only by the interpreter, where the unit ends (the registers live after
  // it) or where it may stop (those live before that instruction), and only
  // when no unguarded write of the unit replaces it first. Backwards over
  // the unit: `needed` holds the registers some later exit reads.
  void planStores(const Span& span) {
    const std::vector<Liveness::Bits> after = live_.liveAfter(span.start, span.count);
    store_.assign(span.count, Liveness::Bits(fn_.num_regs));
    Liveness::Bits needed = after[span.count - 1];
    for (uint32_t k = span.count; k-- > 0;) {
      const Inst& in = fn_.code[span.start + k];
      for (const Operand* d : {&in.d, &in.d2}) {
        if ((d->kind != Operand::kReg || (d == &in.d && in.op == Op::kSt)) || d->reg >= fn_.num_regs) continue;
        if (needed.has(d->reg)) store_[k].set(d->reg);
        if (in.guard < 0) needed.clear(d->reg);
      }
      if (k > 0 && mayStop(in)) needed.orWith(after[k - 1]);
    }
  }

  // ---- the frame and the registers -----------------------------------------------------

  Value* fieldAddress(size_t offset, llvm::Type* t) {
    Value* p = b_.CreateConstInBoundsGEP1_64(i8_, frame_, offset);
    return b_.CreateBitCast(p, llvm::PointerType::getUnqual(t));
  }
  Value* frameField(size_t offset, llvm::Type* t) { return b_.CreateLoad(t, fieldAddress(offset, t)); }

  Value* regAddress(uint32_t r) {
    Value* p = b_.CreateConstInBoundsGEP1_64(i64_, regs_, uint64_t{r} * kLanes);
    return b_.CreateBitCast(p, llvm::PointerType::getUnqual(v64_));
  }
  Value* reg(uint32_t r) {
    auto it = cur_.find(r);
    if (it != cur_.end()) return it->second;
    auto* load = b_.CreateAlignedLoad(v64_, regAddress(r), llvm::Align(8));
    load->setMetadata(llvm::LLVMContext::MD_alias_scope, regs_scope_);
    cur_[r] = load;
    return load;
  }
  // Writes v into register r for the lanes of em: in memory those lanes only
  // (the others keep what they hold, for the interpreter). The value later
  // instructions of the unit read: they read only lanes of the unit's mask,
  // for which an unguarded write's value is the register's; a guarded write
  // keeps the old value of the lanes its guard left out.
  void setReg(uint32_t r, Value* v, Value* em) {
    Value* value = guarded_ ? b_.CreateSelect(em, v, reg(r)) : v;
    if (store_[index_].has(r)) {  // (else nothing reads it from memory before it is written again)
      auto* store = b_.CreateMaskedStore(v, regAddress(r), llvm::Align(8), em);
      store->setMetadata(llvm::LLVMContext::MD_alias_scope, regs_scope_);
    }
    cur_[r] = value;
  }
  // Device memory is never the registers.
  void deviceAccess(llvm::Instruction* i) { i->setMetadata(llvm::LLVMContext::MD_noalias, regs_scope_); }

  Value* splat(Value* scalar) { return b_.CreateVectorSplat(kLanes, scalar); }
  Value* splat64(uint64_t v) { return splat(b_.getInt64(v)); }
  Value* splat32(uint32_t v) { return splat(b_.getInt32(v)); }

  // A source operand's 64-bit slots (BlockRunner::src).
  Value* operand(const Operand& o) {
    switch (o.kind) {
      case Operand::kReg:
      case Operand::kParamReg: {
        Value* v = reg(o.reg);
        if (!o.neg) return v;
        Value* bit = b_.CreateAnd(v, splat64(1));
        return b_.CreateZExt(b_.CreateICmpEQ(bit, splat64(0)), v64_);
      }
      case Operand::kImm:
        return splat64(o.imm);
      default:
        return special(o.special);
    }
  }
  Value* special(Special s) {
    auto uniform = [&](size_t offset) { return splat(frameField(offset, i64_)); };
    auto tid = [&](int k) {
      auto* p = frameField(offsetof(Frame, tid) + sizeof(uint32_t*) * static_cast<size_t>(k),
                           llvm::PointerType::getUnqual(i32_));
      Value* vp = b_.CreateBitCast(p, llvm::PointerType::getUnqual(v32_));
      return b_.CreateZExt(b_.CreateAlignedLoad(v32_, vp, llvm::Align(4)), v64_);
    };
    switch (s) {
      case Special::kTidX:
        return tid(0);
      case Special::kTidY:
        return tid(1);
      case Special::kTidZ:
        return tid(2);
      case Special::kNtidX:
        return uniform(offsetof(Frame, ntid));
      case Special::kNtidY:
        return uniform(offsetof(Frame, ntid) + 8);
      case Special::kNtidZ:
        return uniform(offsetof(Frame, ntid) + 16);
      case Special::kCtaidX:
        return uniform(offsetof(Frame, ctaid));
      case Special::kCtaidY:
        return uniform(offsetof(Frame, ctaid) + 8);
      case Special::kCtaidZ:
        return uniform(offsetof(Frame, ctaid) + 16);
      case Special::kNctaidX:
        return uniform(offsetof(Frame, nctaid));
      case Special::kNctaidY:
        return uniform(offsetof(Frame, nctaid) + 8);
      case Special::kNctaidZ:
        return uniform(offsetof(Frame, nctaid) + 16);
      case Special::kWarpid:
        return uniform(offsetof(Frame, warpid));
      default: {  // kLaneid (unit_plan admits no other)
        std::vector<llvm::Constant*> lanes;
        for (unsigned l = 0; l < kLanes; ++l) lanes.push_back(b_.getInt64(l));
        return llvm::ConstantVector::get(lanes);
      }
    }
  }

  // Narrow views of slots and back.
  Value* low(Value* v, int bytes) { return bytes >= 8 ? v : b_.CreateTrunc(v, vec(b_.getIntNTy(8 * bytes))); }
  Value* zext64(Value* v) { return v->getType() == v64_ ? v : b_.CreateZExt(v, v64_); }
  Value* sext64(Value* v) { return v->getType() == v64_ ? v : b_.CreateSExt(v, v64_); }
  Value* asF32(Value* v) { return b_.CreateBitCast(b_.CreateTrunc(v, v32_), vf_); }
  Value* fromF32(Value* f) { return b_.CreateZExt(b_.CreateBitCast(f, v32_), v64_); }
  // sext(v, t) / trunc(v, t) of ptx_block.h, as 64-bit slots.
  Value* sextT(Value* v, Type t) { return sext64(low(v, typeBytes(t))); }
  Value* truncT(Value* v, Type t) { return zext64(low(v, typeBytes(t))); }

  // The first NaN operand, quieted, where r is NaN (nanFirst in ptx_block.h).
  Value* quiet(Value* x) {
    Value* bits = b_.CreateBitCast(x, v32_);
    return b_.CreateBitCast(b_.CreateOr(bits, splat32(0x00400000u)), vf_);
  }
  Value* isNan(Value* x) { return b_.CreateFCmpUNO(x, x); }
  Value* nanFirst(Value* r, std::initializer_list<Value*> ops) {
    Value* pick = r;
    for (auto it = std::rbegin(ops); it != std::rend(ops); ++it) pick = b_.CreateSelect(isNan(*it), quiet(*it), pick);
    return b_.CreateSelect(isNan(r), pick, r);
  }

  // ---- instructions -----------------------------------------------------------------------

  void instruction(const Inst& in) {
    Value* em = maskv_;
    guarded_ = in.guard >= 0;
    if (in.guard >= 0) {
      Value* p = b_.CreateTrunc(reg(static_cast<uint32_t>(in.guard)), vm_);
      em = in.guard_neg ? b_.CreateAnd(em, b_.CreateNot(p)) : b_.CreateAnd(em, p);
    }
    Value* active = b_.CreateBitCast(em, i32_);
    Value* lanes = b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, active), i64_);
    before_ = b_.CreateLoad(i64_, count_);
    b_.CreateStore(b_.CreateAdd(before_, lanes), count_);
    if (in.op == Op::kLd || in.op == Op::kSt)
      memoryAccess(in, em, active);
    else
      arithmetic(in, em);
  }

  void arithmetic(const Inst& in, Value* em) {
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
        Value* r = in.op == Op::kAnd  ? b_.CreateAnd(a, bv)
                   : in.op == Op::kOr ? b_.CreateOr(a, bv)
                                      : b_.CreateXor(a, bv);
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

  void setp(const Inst& in, Value* em) {
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

  llvm::FunctionCallee libm(const char* name) {
    return m_.getOrInsertFunction(name, llvm::FunctionType::get(f64_, {f64_}, false));
  }
  Value* perLane(Value* x, llvm::FunctionCallee f) {
    Value* r = llvm::UndefValue::get(vd_);
    for (unsigned l = 0; l < kLanes; ++l) {
      Value* v = b_.CreateCall(f, {b_.CreateExtractElement(x, l)});
      r = b_.CreateInsertElement(r, v, l);
    }
    return r;
  }

  // ---- memory --------------------------------------------------------------------------

  // Continues in a new block when `ok`, else the unit stops before this instruction.
  void orStop(Value* ok) {
    auto* next = llvm::BasicBlock::Create(c_, "ok", f_);
    b_.CreateCondBr(ok, next, stopBlock(index_));
    b_.SetInsertPoint(next);
  }
  llvm::BasicBlock* stopBlock(uint32_t at) {
    auto* bb = llvm::BasicBlock::Create(c_, "stop", f_);
    // What ran before this instruction (the interpreter counts its lanes when it runs it).
    stops_.push_back({bb, at, before_});
    return bb;
  }
  // Every exit adds what ran to Frame::insts and returns the instructions done.
  void finish(uint32_t count) {
    auto ret = [&](uint32_t done, Value* counted) {
      Value* field = fieldAddress(offsetof(Frame, insts), i64_);
      b_.CreateStore(b_.CreateAdd(b_.CreateLoad(i64_, field), counted), field);
      b_.CreateRet(b_.getInt32(done));
    };
    ret(count, b_.CreateLoad(i64_, count_));
    for (auto& s : stops_) {
      b_.SetInsertPoint(s.block);
      ret(s.at, s.counted);
    }
  }

  // Memory of the global kind (global, const, generic): the addresses
  // themselves. Shared and local: 32-bit offsets into the block's or the
  // lane's memory (a window's bits go with the upper half).
  void memoryAccess(const Inst& in, Value* em, Value* active) {
    const bool load = in.op == Op::kLd;
    const Operand& addr = load ? in.a : in.d;
    const Operand& val = load ? in.d : in.a;
    const int n = typeBytes(in.type);
    const uint64_t bytes = static_cast<uint64_t>(n), align = bytes - 1;
    Space space = in.space;
    if (!addr.has_base && addr.sym_space != Space::kGeneric) space = addr.sym_space;
    auto* vn = vec(b_.getIntNTy(8 * n));
    auto* element_ptr = llvm::PointerType::getUnqual(vn->getElementType());
    auto* i8p = llvm::PointerType::getUnqual(i8_);
    if (space == Space::kParam) {  // a kernel parameter: one value for every lane
      Value* p = b_.CreateConstInBoundsGEP1_64(i8_, frameField(offsetof(Frame, params), i8p), addr.imm);
      auto* scalar = b_.getIntNTy(8 * n);
      Value* v =
          b_.CreateAlignedLoad(scalar, b_.CreateBitCast(p, llvm::PointerType::getUnqual(scalar)), llvm::Align(1));
      v = isSigned(in.type) ? b_.CreateSExt(v, i64_) : b_.CreateZExt(v, i64_);
      return setReg(val.reg, splat(v), em);
    }
    const bool global = space == Space::kGlobal || space == Space::kConst || space == Space::kGeneric;
    // This instruction's range slot (Frame::ranges): the allocation its last access fell in.
    Value* slot = nullptr;
    if (global) {
      Value* ranges = frameField(offsetof(Frame, ranges), llvm::PointerType::getUnqual(i64_));
      slot = b_.CreateConstInBoundsGEP1_64(i64_, ranges, 2 * uint64_t{slots_++});
    }
    // No active lane: nothing happens (not even the checks), as in the interpreter.
    auto* access = llvm::BasicBlock::Create(c_, "access", f_);
    auto* after = llvm::BasicBlock::Create(c_, "after", f_);
    // A guarded load's register keeps its lanes outside the guard: its value before.
    Value* before = load && guarded_ ? reg(val.reg) : nullptr;
    // Register values first read inside the access block do not dominate
    // what follows it: from `after` on, only those known before it.
    const auto known = cur_;
    auto* entry = b_.GetInsertBlock();
    b_.CreateCondBr(b_.CreateICmpNE(active, b_.getInt32(0)), access, after);
    b_.SetInsertPoint(access);
    Value* base = addr.has_base ? reg(addr.reg) : splat64(0);
    Value* a = b_.CreateAdd(base, splat64(addr.imm));
    Value* stored = load ? nullptr : low(operand(val), n);
    Value* origin = nullptr;  // shared and local: where offset 0 is
    Value* size = nullptr;    // shared: its bytes; local: a lane's
    if (space == Space::kShared) {
      origin = frameField(offsetof(Frame, shared), i8p);
      size = frameField(offsetof(Frame, shared_size), i64_);
    } else if (space == Space::kLocal) {
      origin = frameField(offsetof(Frame, local), i8p);
      size = frameField(offsetof(Frame, local_frame), i64_);
    }
    auto* whole = llvm::BasicBlock::Create(c_, "whole", f_);
    auto* lanes = llvm::BasicBlock::Create(c_, "lanes", f_);
    auto* done = llvm::BasicBlock::Create(c_, "done", f_);
    // Coalesced: every lane active, lane l at element l from the first lane's
    // address; once that range is known good, one vector access. (Never for
    // local memory: each lane has its own.)
    Value* first = nullptr;
    if (space == Space::kLocal) {
      b_.CreateBr(lanes);
    } else {
      std::vector<llvm::Constant*> steps;
      for (unsigned l = 0; l < kLanes; ++l) steps.push_back(b_.getInt64(uint64_t{l} * bytes));
      Value* addrs = global ? a : b_.CreateZExt(b_.CreateTrunc(a, v32_), v64_);
      Value* a0 = b_.CreateExtractElement(addrs, uint64_t{0});
      Value* contiguous = b_.CreateAnd(b_.CreateICmpEQ(active, b_.getInt32(-1)),
                                       b_.CreateAndReduce(b_.CreateICmpEQ(addrs, b_.CreateAdd(splat(a0), llvm::ConstantVector::get(steps)))));
      Value* end = b_.CreateAdd(a0, b_.getInt64(kLanes * bytes));
      Value* ok;
      if (global) {
        // In the slot's range, aligned, not wrapping, no lane in a window.
        Value* lo = b_.CreateLoad(i64_, slot);
        Value* hi = b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, slot, 1));
        ok = b_.CreateAnd(b_.CreateICmpUGE(a0, lo), b_.CreateICmpULE(end, hi));
        ok = b_.CreateAnd(ok, b_.CreateICmpUGT(end, a0));
        ok = b_.CreateAnd(ok, b_.CreateICmpEQ(b_.CreateAnd(a0, b_.getInt64(align)), b_.getInt64(0)));
        if (space == Space::kGeneric) ok = b_.CreateAnd(ok, b_.CreateICmpULE(end, b_.getInt64(kParamWindow)));
        first = a0;
      } else {
        // Shared: within the block's (not another block of the cluster's), aligned.
        Value* at = b_.CreateAdd(b_.CreatePtrToInt(origin, i64_), a0);
        ok = b_.CreateAnd(b_.CreateICmpULE(end, size), b_.CreateICmpULT(end, b_.getInt64(1u << 24)));
        ok = b_.CreateAnd(ok, b_.CreateICmpEQ(b_.CreateAnd(at, b_.getInt64(align)), b_.getInt64(0)));
        first = at;
      }
      b_.CreateCondBr(b_.CreateAnd(contiguous, ok), whole, lanes);
    }
    // One vector access.
    b_.SetInsertPoint(whole);
    Value* whole_value = nullptr;
    if (first) {
      Value* at = b_.CreateIntToPtr(first, llvm::PointerType::getUnqual(vn));
      if (load) {
        auto* l = b_.CreateAlignedLoad(vn, at, llvm::Align(bytes));
        deviceAccess(l);
        whole_value = l;
      } else {
        deviceAccess(b_.CreateAlignedStore(stored, at, llvm::Align(bytes)));
      }
      b_.CreateBr(done);
    } else {
      b_.CreateUnreachable();
    }
    // Lane by lane: the checks of BlockRunner::fastMemory over the active lanes.
    b_.SetInsertPoint(lanes);
    Value* ptrs;
    if (global) {
      Value* lo = b_.CreateIntMinReduce(b_.CreateSelect(em, a, splat64(~0ull)));
      Value* hi = b_.CreateIntMaxReduce(b_.CreateSelect(em, a, splat64(0)));
      Value* bits = b_.CreateOrReduce(b_.CreateSelect(em, a, splat64(0)));
      Value* end = b_.CreateAdd(hi, b_.getInt64(bytes));
      Value* ok = b_.CreateAnd(b_.CreateICmpUGE(end, hi),
                               b_.CreateICmpEQ(b_.CreateAnd(bits, b_.getInt64(align)), b_.getInt64(0)));
      if (space == Space::kGeneric) {  // the shared, local and param windows lie above kParamWindow
        Value* windows = b_.CreateOrReduce(b_.CreateAnd(em, b_.CreateICmpUGE(a, splat64(kParamWindow))));
        ok = b_.CreateAnd(ok, b_.CreateNot(windows));
      }
      orStop(ok);
      Value* slot_lo = b_.CreateLoad(i64_, slot);
      Value* slot_hi = b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, slot, 1));
      Value* cached = b_.CreateAnd(b_.CreateICmpUGE(lo, slot_lo), b_.CreateICmpULE(end, slot_hi));
      auto* miss = llvm::BasicBlock::Create(c_, "miss", f_);
      auto* found = llvm::BasicBlock::Create(c_, "found", f_);
      b_.CreateCondBr(cached, found, miss);
      b_.SetInsertPoint(miss);
      // (A C++ bool comes back in the low byte.)
      auto* lookup_type = llvm::FunctionType::get(i8_, {i8p, i64_, i64_, llvm::PointerType::getUnqual(i64_)}, false);
      Value* lookup = frameField(offsetof(Frame, lookup), llvm::PointerType::getUnqual(lookup_type));
      Value* hit = b_.CreateICmpNE(b_.CreateCall(lookup_type, lookup, {frame_, lo, b_.CreateSub(end, lo), slot}),
                                   b_.getInt8(0));
      b_.CreateCondBr(hit, found, stopBlock(index_));
      b_.SetInsertPoint(found);
      ptrs = b_.CreateIntToPtr(a, vec(element_ptr));
    } else {
      Value* a32 = b_.CreateTrunc(a, v32_);
      Value* hi = b_.CreateZExt(b_.CreateIntMaxReduce(b_.CreateSelect(em, a32, splat32(0))), i64_);
      Value* bits = b_.CreateZExt(b_.CreateOrReduce(b_.CreateSelect(em, a32, splat32(0))), i64_);
      Value* end = b_.CreateAdd(hi, b_.getInt64(bytes));
      Value* offsets = b_.CreateZExt(a32, v64_);
      Value* misaligned = b_.CreateOr(bits, b_.CreatePtrToInt(origin, i64_));
      Value* ok = b_.CreateICmpULE(end, size);
      if (space == Space::kShared) {
        // Bits 24..31 name another block of the cluster: the general path's.
        ok = b_.CreateAnd(ok, b_.CreateICmpULT(hi, b_.getInt64(1u << 24)));
      } else {
        misaligned = b_.CreateOr(misaligned, size);
        std::vector<llvm::Constant*> lane_index;
        for (unsigned l = 0; l < kLanes; ++l) lane_index.push_back(b_.getInt64(l));
        offsets = b_.CreateAdd(offsets, b_.CreateMul(llvm::ConstantVector::get(lane_index), splat(size)));
      }
      ok = b_.CreateAnd(ok, b_.CreateICmpEQ(b_.CreateAnd(misaligned, b_.getInt64(align)), b_.getInt64(0)));
      orStop(ok);
      ptrs = b_.CreateBitCast(b_.CreateGEP(i8_, origin, offsets), vec(element_ptr));
    }
    auto* lanes_end = b_.GetInsertBlock();
    Value* lanes_value = nullptr;
    if (load) {
      auto* g = b_.CreateMaskedGather(vn, ptrs, llvm::Align(bytes), em);
      deviceAccess(g);
      lanes_value = g;
    } else {
      deviceAccess(b_.CreateMaskedScatter(stored, ptrs, llvm::Align(bytes), em));
    }
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    if (load) {
      auto* phi = b_.CreatePHI(vn, 2);
      if (first) phi->addIncoming(whole_value, whole);
      phi->addIncoming(lanes_value, lanes_end);
      Value* v = n == 8 ? static_cast<Value*>(phi) : isSigned(in.type) ? b_.CreateSExt(phi, v64_) : b_.CreateZExt(phi, v64_);
      setReg(val.reg, v, em);
    }
    Value* loaded = load ? cur_[val.reg] : nullptr;
    auto* loaded_in = b_.GetInsertBlock();
    b_.CreateBr(after);
    b_.SetInsertPoint(after);
    cur_ = known;
    if (load) {
      // What the loaded register holds from here on (its store may have been
      // left out: planStores). Where no lane ran, the old value, which only
      // a guarded load's later readers can see (an unguarded one's readers
      // read no lane then: the unit's mask is empty).
      auto* phi = b_.CreatePHI(v64_, 2);
      phi->addIncoming(loaded, loaded_in);
      phi->addIncoming(before ? before : llvm::PoisonValue::get(v64_), entry);
      cur_[val.reg] = phi;
    }
  }

  struct Stop {
    llvm::BasicBlock* block;
    uint32_t at;
    Value* counted;
  };

  llvm::Module& m_;
  const Function& fn_;
  const Liveness& live_;
  llvm::LLVMContext& c_;
  llvm::IRBuilder<> b_;
  llvm::Type *i1_, *i8_, *i32_, *i64_, *f32_, *f64_;
  llvm::VectorType *v64_, *v32_, *vf_, *vd_, *vm_;
  llvm::MDNode* regs_scope_;
  llvm::Function* f_ = nullptr;
  Value* frame_ = nullptr;
  Value* mask_ = nullptr;
  Value* maskv_ = nullptr;
  Value* regs_ = nullptr;
  llvm::AllocaInst* count_ = nullptr;
  uint32_t index_ = 0;
  Value* before_ = nullptr;  // thread-instructions counted before the current instruction
  uint32_t slots_ = 0;       // range slots given out (Frame::ranges)
  bool guarded_ = false;     // the current instruction has a guard predicate
  std::unordered_map<uint32_t, Value*> cur_;
  std::vector<Liveness::Bits> store_;  // per instruction of the unit: the registers it writes that must be stored
  std::vector<Stop> stops_;
};

}  // namespace

llvm::Function* emitUnit(llvm::Module& module, const Function& fn, const Liveness& live, const Span& span,
                         const std::string& name, uint32_t& slots) {
  Emitter e(module, fn, live, slots);
  llvm::Function* f = e.emit(span, name);
  slots = e.slots();
  return f;
}

}  // namespace rgpu::server::ptx::jit
