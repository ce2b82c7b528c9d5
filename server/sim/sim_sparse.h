// cuSPARSE's SpMV and SpMM on the CPU for the sim backend (and the fake
// cuSPARSE the CUDA backend's tests load): one call (common/sparse_args.h)
// on host memory, in the call's value type. The session checked every range;
// the offsets and indices it reads are checked here, as values: offsets that
// do not start at the base, decrease or pass nnz, and indices outside the
// matrix, fail the call (an error naming the first one) before anything is
// written. The sim needs no external buffer (bufferSize 0).
#pragma once

#include "common/sparse_args.h"
#include "common/status.h"

namespace rgpu::server::simsparse {

Status run(const common::sparse::Args& a);

}  // namespace rgpu::server::simsparse
