// Which of a Function's instructions the JIT compiles, and into which units
// (ptx_jit.h says what a unit is and why it may not contain a place control
// can reach other than from the instruction before).
//
// An instruction is compilable when it is a form the interpreter's hot paths
// take (ptx_fast.cc), decided from the instruction alone: the checks that
// depend on values (addresses) are made by the compiled code, which stops
// before an instruction it cannot vouch for.
#pragma once

#include <cstdint>
#include <vector>

#include "server/sim/ptx/ptx_ir.h"

namespace rgpu::server::ptx::jit {

// Whether `in` (of `fn`) may be part of a unit.
bool compilable(const Function& fn, const Inst& in);

struct Span {
  uint32_t start = 0, count = 0;
};

// fn's units: maximal runs of compilable instructions that hold no leader
// (branch target, instruction after a branch or call, callee entry, meeting
// point) but at their start; runs shorter than `min_count` are left to the
// interpreter.
std::vector<Span> planUnits(const Function& fn, uint32_t min_count);

}  // namespace rgpu::server::ptx::jit
