#include "server/sim/ptx/ptx_liveness.h"

#include <algorithm>

namespace rgpu::server::ptx {
namespace {

// Instructions whose destination (d, and d2) is written for every lane they
// run for, and which read it not.
bool definesDestination(Op op) {
  switch (op) {
    case Op::kMov:
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kMad:
    case Op::kMul24:
    case Op::kMad24:
    case Op::kFma:
    case Op::kDiv:
    case Op::kRem:
    case Op::kAbs:
    case Op::kNeg:
    case Op::kMin:
    case Op::kMax:
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor:
    case Op::kNot:
    case Op::kCnot:
    case Op::kShl:
    case Op::kShr:
    case Op::kShf:
    case Op::kBfe:
    case Op::kBfi:
    case Op::kBrev:
    case Op::kClz:
    case Op::kPopc:
    case Op::kPrmt:
    case Op::kLop3:
    case Op::kSelp:
    case Op::kSlct:
    case Op::kSetp:
    case Op::kSet:
    case Op::kCvt:
    case Op::kCvta:
    case Op::kLd:
    case Op::kRcp:
    case Op::kSqrt:
    case Op::kRsqrt:
    case Op::kEx2:
    case Op::kLg2:
    case Op::kSin:
    case Op::kCos:
    case Op::kTanh:
    case Op::kCopysign:
    case Op::kTestp:
    case Op::kBmsk:
    case Op::kBfind:
    case Op::kFns:
    case Op::kDp4a:
    case Op::kDp2a:
    case Op::kSad:
    case Op::kSzext:
    case Op::kActivemask:
    case Op::kIsspacep:
      return true;
    default:
      return false;
  }
}

// Instructions that read other lanes' registers, or leave the thread's code
// (calls): the per-thread analysis does not describe them.
bool outsideTheAnalysis(Op op) {
  switch (op) {
    case Op::kShfl:
    case Op::kVote:
    case Op::kRedux:
    case Op::kMatch:
    case Op::kWmma:
    case Op::kMma:
    case Op::kLdmatrix:
    case Op::kMovmatrix:
    case Op::kCall:
    case Op::kRetFunc:
      return true;
    default:
      return false;
  }
}

template <typename F>
void eachRegister(const Operand& o, F&& f) {
  switch (o.kind) {
    case Operand::kReg:
    case Operand::kParamReg:
      f(o.reg);
      break;
    case Operand::kAddr:
      if (o.has_base) f(o.reg);
      break;
    case Operand::kVec:
      for (const Operand& e : o.vec) eachRegister(e, f);
      break;
    default:
      break;
  }
}

}  // namespace

bool Liveness::Bits::orAndNot(const Bits& a, const Bits& b) {
  bool changed = false;
  for (size_t i = 0; i < w_.size(); ++i) {
    uint64_t v = w_[i] | (a.w_[i] & ~b.w_[i]);
    changed |= v != w_[i];
    w_[i] = v;
  }
  return changed;
}

bool Liveness::Bits::orWith(const Bits& a) {
  bool changed = false;
  for (size_t i = 0; i < w_.size(); ++i) {
    uint64_t v = w_[i] | a.w_[i];
    changed |= v != w_[i];
    w_[i] = v;
  }
  return changed;
}

// What instruction `in` reads (registers it may read before writing), and
// what it writes outright.
template <typename Read, typename Def>
void Liveness::effects(const Inst& in, Read&& read, Def&& def) const {
  const bool defines = definesDestination(in.op);
  if (in.guard >= 0) read(static_cast<uint32_t>(in.guard));
  for (const Operand* o : {&in.a, &in.b, &in.c, &in.e}) eachRegister(*o, read);
  if (!defines || in.d.kind == Operand::kAddr) eachRegister(in.d, read);
  if (!defines) eachRegister(in.d2, read);
  if (defines && in.guard < 0) {
    if (in.d.kind != Operand::kAddr) eachRegister(in.d, def);
    eachRegister(in.d2, def);
  }
}

Liveness::Liveness(const Function& fn) : fn_(fn), nregs_(fn.num_regs) {
  const auto& code = fn.code;
  const size_t n = code.size();
  exact_ = n > 0 && !fn.has_calls;
  for (const Inst& in : code) exact_ = exact_ && !outsideTheAnalysis(in.op);
  if (!exact_) return;
  // Basic blocks: a leader at 0, at branch targets and after a branch, return, exit or trap.
  auto ends = [](const Inst& in) {
    return in.op == Op::kBra || in.op == Op::kRet || in.op == Op::kExit || in.op == Op::kTrap;
  };
  std::vector<bool> leader(n + 1, false);
  leader[0] = true;
  for (size_t i = 0; i < n; ++i) {
    if (code[i].op == Op::kBra && code[i].target < n) leader[code[i].target] = true;
    if (ends(code[i])) leader[i + 1] = true;
  }
  block_of_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (leader[i]) start_.push_back(static_cast<uint32_t>(i));
    block_of_[i] = static_cast<uint32_t>(start_.size() - 1);
  }
  const size_t nb = start_.size();
  start_.push_back(static_cast<uint32_t>(n));
  std::vector<Bits> gen(nb, Bits(nregs_)), kill(nb, Bits(nregs_));
  live_in_.assign(nb, Bits(nregs_));
  live_out_.assign(nb, Bits(nregs_));
  std::vector<std::vector<size_t>> succ(nb);
  for (size_t b = 0; b < nb; ++b) {
    for (size_t i = start_[b]; i < start_[b + 1]; ++i) {
      effects(
          code[i],
          [&](uint32_t r) {
            if (r < nregs_ && !kill[b].has(r)) gen[b].set(r);
          },
          [&](uint32_t r) {
            if (r < nregs_) kill[b].set(r);
          });
    }
    const size_t last = start_[b + 1] - 1;
    const Inst& end = code[last];
    const bool falls = !ends(end) || end.guard >= 0;
    if (end.op == Op::kBra && end.target < n) succ[b].push_back(block_of_[end.target]);
    if (falls && last + 1 < n) succ[b].push_back(block_of_[last + 1]);
  }
  // live_in = gen | (union of the successors' live_in) & ~kill, to a fixed point.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t b = nb; b-- > 0;) {
      for (size_t s : succ[b]) live_out_[b].orWith(live_in_[s]);
      changed |= live_in_[b].orWith(gen[b]);
      changed |= live_in_[b].orAndNot(live_out_[b], kill[b]);
    }
  }
}

std::vector<uint32_t> Liveness::liveIn() const {
  std::vector<uint32_t> live;
  for (uint32_t r = 0; r < nregs_; ++r)
    if (!exact_ || live_in_[0].has(r)) live.push_back(r);
  return live;
}

std::vector<Liveness::Bits> Liveness::liveAfter(uint32_t start, uint32_t count) const {
  std::vector<Bits> after(count, Bits(nregs_));
  if (!exact_) {
    for (Bits& b : after) b.setAll();
    return after;
  }
  // Backwards from the end of the block that holds the span.
  const uint32_t b = block_of_[start];
  Bits live = live_out_[b];
  for (uint32_t i = start_[b + 1]; i-- > start;) {
    if (i < start + count) after[i - start] = live;
    effects(
        fn_.code[i], [&](uint32_t r) { if (r < nregs_) live.set(r); },
        [&](uint32_t r) {
          if (r < nregs_) live.clear(r);
        });
  }
  return after;
}

std::vector<uint32_t> liveInRegisters(const Function& fn) { return Liveness(fn).liveIn(); }

}  // namespace rgpu::server::ptx
