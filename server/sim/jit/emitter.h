// The JIT's IR emitter for one unit (unit_emitter.h says what it emits):
// internal to the plugin. unit_emitter.cc has the unit's frame, its
// registers, the stores it makes and its memory accesses; unit_arith.cc the
// arithmetic, comparison and conversion forms.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/sim/jit/unit_plan.h"
#include "server/sim/ptx/ptx_ir.h"
#include "server/sim/ptx/ptx_liveness.h"

namespace rgpu::server::ptx::jit {

using llvm::Value;

inline constexpr unsigned kLanes = 32;

class Emitter {
 public:
  Emitter(llvm::Module& m, const Function& fn, const Liveness& live, uint32_t first_slot);

  uint32_t slots() const { return slots_; }

  llvm::Function* emit(const Span& span, const std::string& name);

 private:
  llvm::VectorType* vec(llvm::Type* t) { return llvm::FixedVectorType::get(t, kLanes); }

  // Whether the unit may stop before `in` (an access it may not vouch for).
  static bool mayStop(const Inst& in);

  // Which writes must reach the register file: a write is read from memory
  // only by the interpreter, where the unit ends (the registers live after
  // it) or where it may stop (those live before that instruction), and only
  // when no unguarded write of the unit replaces it first. Backwards over
  // the unit: `needed` holds the registers some later exit reads.
  void planStores(const Span& span);

  // ---- the frame and the registers -----------------------------------------------------
  Value* fieldAddress(size_t offset, llvm::Type* t);
  Value* frameField(size_t offset, llvm::Type* t) { return b_.CreateLoad(t, fieldAddress(offset, t)); }

  Value* regAddress(uint32_t r);
  Value* reg(uint32_t r);
  // Writes v into register r for the lanes of em: in memory those lanes only
  // (the others keep what they hold, for the interpreter). The value later
  // instructions of the unit read: they read only lanes of the unit's mask,
  // for which an unguarded write's value is the register's; a guarded write
  // keeps the old value of the lanes its guard left out.
  void setReg(uint32_t r, Value* v, Value* em);
  // Device memory is never the registers.
  void deviceAccess(llvm::Instruction* i) { i->setMetadata(llvm::LLVMContext::MD_noalias, regs_scope_); }

  Value* splat(Value* scalar) { return b_.CreateVectorSplat(kLanes, scalar); }
  Value* splat64(uint64_t v) { return splat(b_.getInt64(v)); }
  Value* splat32(uint32_t v) { return splat(b_.getInt32(v)); }

  // A source operand's 64-bit slots (BlockRunner::src).
  Value* operand(const Operand& o);
  Value* special(Special s);

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
  Value* quiet(Value* x);
  Value* isNan(Value* x) { return b_.CreateFCmpUNO(x, x); }
  Value* nanFirst(Value* r, std::initializer_list<Value*> ops);

  // ---- instructions -----------------------------------------------------------------------
  void instruction(const Inst& in);

  // ---- arithmetic (unit_arith.cc) ----------------------------------------------------------
  void arithmetic(const Inst& in, Value* em);
  void setp(const Inst& in, Value* em);
  Value* intBinary(const Inst& in);
  Value* f32Binary(const Inst& in);
  Value* f32Fma(const Inst& in);
  Value* f32Unary(const Inst& in);
  Value* convert(const Inst& in);
  Value* floatToInt(Value* v, Type t, Round r);
  // f32 (or f64) lanes of an operand.
  Value* readFloat(const Operand& o, Type t);
  // libm's double function `name` of one argument; f(x) lane by lane.
  llvm::FunctionCallee libm(const char* name);
  Value* perLane(Value* x, llvm::FunctionCallee f);
  Value* libmCall(llvm::FunctionCallee f, llvm::ArrayRef<Value*> args);
  Value* ftz(Value* f);                     // f32 subnormals to zeros of their sign
  Value* minMax(Value* x, Value* y, bool max);  // minNum / maxNum of ptx_block.h
  Value* saturate(Value* z);                    // .sat: NaN to 0, clamped to [0, 1]
  Value* nextAfter(Value* r, Value* toward);  // std::nextafter for finite f32 r
  Value* toFloat(Value* exact, Round mode);    // a double to f32 under `mode`

  // ---- memory --------------------------------------------------------------------------
  // Continues in a new block when `ok`, else the unit stops before this instruction.
  void orStop(Value* ok);
  llvm::BasicBlock* stopBlock(uint32_t at);
  // Every exit adds what ran to Frame::insts and returns the instructions done.
  void finish(uint32_t count);

  // Memory of the global kind (global, const, generic): the addresses
  // themselves. Shared and local: 32-bit offsets into the block's or the
  // lane's memory (a window's bits go with the upper half).
  void memoryAccess(const Inst& in, Value* em, Value* active);

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

}  // namespace rgpu::server::ptx::jit
