// cuSOLVER's dense routines on the CPU for the sim backend (and the fake
// cuSOLVER the CUDA backend's tests load): one call (common/solver_args.h)
// on host memory, by LAPACK (OpenBLAS's), writing devInfo as cuSOLVER does.
// LAPACK's own workspaces are taken here, so the sim asks for none
// (bufferSize 0) and leaves a given workspace untouched. getrf without a
// pivot array factors without pivoting, as cuSOLVER's does; getrs without
// one solves with the rows in place.
// Called from a stream's executor thread, in stream order; the session has
// checked every range (common::solver::ranges).
#pragma once

#include "common/solver_args.h"
#include "common/status.h"

namespace rgpu::server::simsolver {

Status run(const common::solver::Args& a);

}  // namespace rgpu::server::simsolver
