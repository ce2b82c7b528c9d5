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

class Bits {
 public:
  explicit Bits(uint32_t n = 0) : w_((n + 63) / 64, 0) {}
  void set(uint32_t r) { w_[r / 64] |= 1ull << (r % 64); }
  bool has(uint32_t r) const { return w_[r / 64] >> (r % 64) & 1; }
  // this |= a & ~b; whether anything changed.
  bool orAndNot(const Bits& a, const Bits& b) {
    bool changed = false;
    for (size_t i = 0; i < w_.size(); ++i) {
      uint64_t v = w_[i] | (a.w_[i] & ~b.w_[i]);
      changed |= v != w_[i];
      w_[i] = v;
    }
    return changed;
  }
  bool orWith(const Bits& a) {
    bool changed = false;
    for (size_t i = 0; i < w_.size(); ++i) {
      uint64_t v = w_[i] | a.w_[i];
      changed |= v != w_[i];
      w_[i] = v;
    }
    return changed;
  }

 private:
  std::vector<uint64_t> w_;
};

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

std::vector<uint32_t> all(uint32_t n) {
  std::vector<uint32_t> r(n);
  for (uint32_t i = 0; i < n; ++i) r[i] = i;
  return r;
}

}  // namespace

std::vector<uint32_t> liveInRegisters(const Function& fn) {
  const auto& code = fn.code;
  const uint32_t nregs = fn.num_regs;
  const size_t n = code.size();
  if (n == 0 || fn.has_calls) return all(nregs);
  for (const Inst& in : code)
    if (outsideTheAnalysis(in.op)) return all(nregs);
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
  std::vector<size_t> start;  // block b is [start[b], start[b + 1])
  std::vector<int32_t> block_of(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (leader[i]) start.push_back(i);
    block_of[i] = static_cast<int32_t>(start.size() - 1);
  }
  const size_t nb = start.size();
  start.push_back(n);
  std::vector<Bits> gen(nb, Bits(nregs)), kill(nb, Bits(nregs)), live_in(nb, Bits(nregs));
  std::vector<std::vector<size_t>> succ(nb);
  for (size_t b = 0; b < nb; ++b) {
    for (size_t i = start[b]; i < start[b + 1]; ++i) {
      const Inst& in = code[i];
      const bool defines = definesDestination(in.op);
      auto read = [&](uint32_t r) {
        if (r < nregs && !kill[b].has(r)) gen[b].set(r);
      };
      if (in.guard >= 0) read(static_cast<uint32_t>(in.guard));
      for (const Operand* o : {&in.a, &in.b, &in.c, &in.e}) eachRegister(*o, read);
      if (!defines || in.d.kind == Operand::kAddr) eachRegister(in.d, read);
      if (!defines) eachRegister(in.d2, read);
      if (defines && in.guard < 0) {
        auto def = [&](uint32_t r) {
          if (r < nregs) kill[b].set(r);
        };
        if (in.d.kind != Operand::kAddr) eachRegister(in.d, def);
        eachRegister(in.d2, def);
      }
    }
    const size_t last = start[b + 1] - 1;
    const Inst& end = code[last];
    const bool falls = !ends(end) || end.guard >= 0;
    if (end.op == Op::kBra && end.target < n) succ[b].push_back(static_cast<size_t>(block_of[end.target]));
    if (falls && last + 1 < n) succ[b].push_back(static_cast<size_t>(block_of[last + 1]));
  }
  // live_in = gen | (union of the successors' live_in) & ~kill, to a fixed point.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t b = nb; b-- > 0;) {
      Bits out(nregs);
      for (size_t s : succ[b]) out.orWith(live_in[s]);
      changed |= live_in[b].orWith(gen[b]);
      changed |= live_in[b].orAndNot(out, kill[b]);
    }
  }
  std::vector<uint32_t> live;
  for (uint32_t r = 0; r < nregs; ++r)
    if (live_in[0].has(r)) live.push_back(r);
  return live;
}

}  // namespace rgpu::server::ptx
