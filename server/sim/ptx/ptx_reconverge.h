// Where the lanes of a warp that took different ways at a branch meet again.
//
// That is the branch's immediate post-dominator: the first instruction every
// path from the branch passes through. The interpreter parks lanes that reach
// it until every live lane of the divergence has (the SIMT reconvergence
// stack of a GPU), so a barrier or a warp-wide operation after it sees the
// whole warp. Scheduling by lowest program counter alone is not enough:
// nvcc places loop latches above the loop body, so a join point can sit at
// a lower address than a path still to run.
#pragma once

#include <cstdint>
#include <vector>

#include "server/sim/ptx/ptx_ir.h"

namespace rgpu::server::ptx {

inline constexpr uint32_t kNoReconvergence = UINT32_MAX;

// One entry per instruction: for a conditional branch, the pc where its paths
// meet (kNoReconvergence when they meet only at the end of the thread);
// kNoReconvergence for every other instruction.
std::vector<uint32_t> reconvergencePoints(const std::vector<Inst>& code);

}  // namespace rgpu::server::ptx
