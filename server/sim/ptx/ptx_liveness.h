// Which registers a kernel's thread may still read: at its entry, and after
// each instruction.
//
// At the entry: a block's warps get their register files from the previous
// block a pool thread ran (ptx_launch.cc): only the registers live there must
// be zeroed for the kernel to see what a fresh, zeroed file would show it
// (every other register is written on every path before any read of it, so
// whatever it held is never seen). Zeroing whole files was half the time of
// short kernels. After an instruction: a JIT unit stores a result in the
// register file only when it is live there (the interpreter, should it take
// over at any later instruction, never reads the others before writing them).
//
// A backward liveness analysis over the kernel's control-flow graph, per
// thread. It stays conservative where a thread's view is not the whole story:
// a kernel with calls, or with instructions that read other lanes' registers
// (shuffles, votes, reductions, matches, warp-matrix operations), gets every
// register zeroed; a guarded write, or a write by an instruction not known to
// define its destination outright, kills nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "server/sim/ptx/ptx_ir.h"

namespace rgpu::server::ptx {

// The analysis of one Function (which must outlive it).
class Liveness {
 public:
  class Bits {
   public:
    explicit Bits(uint32_t n = 0) : w_((n + 63) / 64, 0) {}
    void set(uint32_t r) { w_[r / 64] |= 1ull << (r % 64); }
    void clear(uint32_t r) { w_[r / 64] &= ~(1ull << (r % 64)); }
    void setAll() {
      for (uint64_t& w : w_) w = ~0ull;
    }
    bool has(uint32_t r) const { return w_[r / 64] >> (r % 64) & 1; }
    bool orAndNot(const Bits& a, const Bits& b);  // this |= a & ~b; whether it changed
    bool orWith(const Bits& a);

   private:
    std::vector<uint64_t> w_;
  };

  explicit Liveness(const Function& fn);
  // Whether the analysis applies (else every register counts as live everywhere).
  bool exact() const { return exact_; }
  // The registers live at the Function's entry, ascending.
  std::vector<uint32_t> liveIn() const;
  // For each instruction of [start, start + count), which must lie in one
  // basic block (a JIT unit does): the registers live right after it, that
  // is, that some instruction may read on some path before writing them.
  std::vector<Bits> liveAfter(uint32_t start, uint32_t count) const;

 private:
  template <typename Read, typename Def>
  void effects(const Inst& in, Read&& read, Def&& def) const;

  const Function& fn_;
  uint32_t nregs_ = 0;
  bool exact_ = false;
  std::vector<uint32_t> start_;     // block b is [start_[b], start_[b + 1])
  std::vector<uint32_t> block_of_;  // by instruction
  std::vector<Bits> live_in_, live_out_;
};

// fn's registers live at its entry, ascending; every register (0 ..
// num_regs - 1) when the analysis does not apply.
std::vector<uint32_t> liveInRegisters(const Function& fn);

}  // namespace rgpu::server::ptx
