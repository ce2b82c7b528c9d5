// cuDNN's legacy operations on the CPU for the sim backend (and the fake
// cuDNN the CUDA backend's tests load): one call (common/dnn_args.h) on host
// memory. Reference loops over strided tensors, so every layout (NCHW, NHWC,
// any strides) is one case; values are computed in double and stored in the
// tensor's type (float, double, half, bfloat16) rounded to nearest even.
// Every algorithm of a convolution runs the same loops and needs no
// workspace. As in cuDNN, a destination is not read when its beta is 0.
//
// Dropout keeps its generator in the states the program allocated
// (kSimDropoutStateBytes: a mark, the seed and a counter advanced by each
// forward call) and its mask in the reserve space (one byte per element);
// the sequence is rgpu's own (a counter-based hash of seed and position),
// not NVIDIA's, whose generator is not published.
//
// The session checked every range; run() checks only what lies in device
// memory: that the dropout states were initialised and the reserve space
// is large enough.
#pragma once

#include "common/dnn_args.h"
#include "common/status.h"

namespace rgpu::server::simdnn {

Status run(const common::dnn::Args& a);

}  // namespace rgpu::server::simdnn
