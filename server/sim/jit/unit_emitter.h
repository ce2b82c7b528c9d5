// LLVM IR for one unit (ptx_jit.h): a function `i32 (Frame*, i32 mask)` that
// runs the unit's instructions for the lanes of the mask.
//
// Each PTX register is a vector of 32 lanes of 64-bit slots, as the
// interpreter keeps it (jit::Frame::regs). A register is loaded the first time
// the unit reads it and kept as a value after; a write is stored at once (the
// active lanes only) where the register is live after it (ptx_liveness.h), so
// that wherever the unit stops, the registers the interpreter may read hold
// what the instructions before it wrote. Instructions compute
// for all 32 lanes and keep the results of their active ones (the mask and
// the instruction's guard); memory is touched only for active lanes (masked
// gathers and scatters), after the checks of BlockRunner::fastMemory pass
// for the whole warp, or the unit stops before the access.
//
// Each form computes the bits its hot path computes (ptx_fast.cc), spelled
// out the same way: f32 NaN results as the first NaN operand quieted, shifts
// past the width, the 64-bit slot a narrow result or a sign-extending load
// leaves behind.
#pragma once

#include <cstdint>
#include <string>

#include "server/sim/jit/unit_plan.h"
#include "server/sim/ptx/ptx_ir.h"
#include "server/sim/ptx/ptx_liveness.h"

namespace llvm {
class Function;
class Module;
}  // namespace llvm

namespace rgpu::server::ptx::jit {

// Adds `name`, the unit `span` of `fn`, to `module`. Every instruction of the
// span must be compilable(fn, ...); `live` is fn's liveness (a result is
// stored only where it is live). Its global accesses take range slots
// (Frame::ranges) from `slots` on; `slots` comes back past the last one taken.
llvm::Function* emitUnit(llvm::Module& module, const Function& fn, const Liveness& live, const Span& span,
                         const std::string& name, uint32_t& slots);

}  // namespace rgpu::server::ptx::jit
