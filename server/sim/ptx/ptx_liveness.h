// The registers a kernel's thread may read before it writes them.
//
// A block's warps get their register files from the previous block a pool
// thread ran (ptx_launch.cc): only these registers must be zeroed for the
// kernel to see what a fresh, zeroed file would show it (every other register
// is written on every path before any read of it, so whatever it held is
// never seen). Zeroing whole files was half the time of short kernels.
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

// fn's registers live at its entry, ascending; every register (0 ..
// num_regs - 1) when the analysis does not apply.
std::vector<uint32_t> liveInRegisters(const Function& fn);

}  // namespace rgpu::server::ptx
