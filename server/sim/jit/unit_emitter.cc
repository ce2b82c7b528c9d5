#include "server/sim/jit/unit_emitter.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>

#include "server/sim/jit/emitter.h"
#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_jit.h"

namespace rgpu::server::ptx::jit {

Emitter::Emitter(llvm::Module& m, const Function& fn, const Liveness& live, uint32_t first_slot)
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

llvm::Function* Emitter::emit(const Span& span, const std::string& name) {
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

bool Emitter::mayStop(const Inst& in) {
  if (in.op != Op::kLd && in.op != Op::kSt) return false;
  const Operand& addr = in.op == Op::kLd ? in.a : in.d;
  return (!addr.has_base && addr.sym_space == Space::kParam ? Space::kParam : in.space) != Space::kParam;
}

void Emitter::planStores(const Span& span) {
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

Value* Emitter::fieldAddress(size_t offset, llvm::Type* t) {
  Value* p = b_.CreateConstInBoundsGEP1_64(i8_, frame_, offset);
  return b_.CreateBitCast(p, llvm::PointerType::getUnqual(t));
}

Value* Emitter::regAddress(uint32_t r) {
  Value* p = b_.CreateConstInBoundsGEP1_64(i64_, regs_, uint64_t{r} * kLanes);
  return b_.CreateBitCast(p, llvm::PointerType::getUnqual(v64_));
}

Value* Emitter::reg(uint32_t r) {
  auto it = cur_.find(r);
  if (it != cur_.end()) return it->second;
  auto* load = b_.CreateAlignedLoad(v64_, regAddress(r), llvm::Align(8));
  load->setMetadata(llvm::LLVMContext::MD_alias_scope, regs_scope_);
  cur_[r] = load;
  return load;
}

void Emitter::setReg(uint32_t r, Value* v, Value* em) {
  Value* value = guarded_ ? b_.CreateSelect(em, v, reg(r)) : v;
  if (store_[index_].has(r)) {  // (else nothing reads it from memory before it is written again)
    auto* store = b_.CreateMaskedStore(v, regAddress(r), llvm::Align(8), em);
    store->setMetadata(llvm::LLVMContext::MD_alias_scope, regs_scope_);
  }
  cur_[r] = value;
}

Value* Emitter::operand(const Operand& o) {
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

Value* Emitter::special(Special s) {
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

Value* Emitter::quiet(Value* x) {
  Value* bits = b_.CreateBitCast(x, v32_);
  return b_.CreateBitCast(b_.CreateOr(bits, splat32(0x00400000u)), vf_);
}

Value* Emitter::nanFirst(Value* r, std::initializer_list<Value*> ops) {
  Value* pick = r;
  for (auto it = std::rbegin(ops); it != std::rend(ops); ++it) pick = b_.CreateSelect(isNan(*it), quiet(*it), pick);
  return b_.CreateSelect(isNan(r), pick, r);
}

void Emitter::instruction(const Inst& in) {
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

void Emitter::orStop(Value* ok) {
  auto* next = llvm::BasicBlock::Create(c_, "ok", f_);
  b_.CreateCondBr(ok, next, stopBlock(index_));
  b_.SetInsertPoint(next);
}

llvm::BasicBlock* Emitter::stopBlock(uint32_t at) {
  auto* bb = llvm::BasicBlock::Create(c_, "stop", f_);
  // What ran before this instruction (the interpreter counts its lanes when it runs it).
  stops_.push_back({bb, at, before_});
  return bb;
}

void Emitter::finish(uint32_t count) {
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

void Emitter::memoryAccess(const Inst& in, Value* em, Value* active) {
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
    Value* v = b_.CreateAlignedLoad(scalar, b_.CreateBitCast(p, llvm::PointerType::getUnqual(scalar)), llvm::Align(1));
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
    Value* contiguous = b_.CreateAnd(
        b_.CreateICmpEQ(active, b_.getInt32(-1)),
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
    Value* hit =
        b_.CreateICmpNE(b_.CreateCall(lookup_type, lookup, {frame_, lo, b_.CreateSub(end, lo), slot}), b_.getInt8(0));
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
    Value* v = n == 8              ? static_cast<Value*>(phi)
               : isSigned(in.type) ? b_.CreateSExt(phi, v64_)
                                   : b_.CreateZExt(phi, v64_);
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

llvm::Function* emitUnit(llvm::Module& module, const Function& fn, const Liveness& live, const Span& span,
                         const std::string& name, uint32_t& slots) {
  Emitter e(module, fn, live, slots);
  llvm::Function* f = e.emit(span, name);
  slots = e.slots();
  return f;
}

}  // namespace rgpu::server::ptx::jit
