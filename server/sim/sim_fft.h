// cuFFT on the CPU for the sim backend (and the fake cuFFT the CUDA
// backend's tests load): one transform of a checked layout
// (common/fft_plan.h) on host memory, by FFTW (single precision for
// C2C/R2C/C2R, double for Z2Z/D2Z/Z2D), unnormalised as cuFFT's.
//
// FFTW's plans are made once per layout, direction and in-place-ness
// (FFTW_ESTIMATE | FFTW_UNALIGNED: planning reads no data, and a plan runs
// on any addresses) and kept, at most kPlans of them; making a plan is
// serialised (FFTW's planner is not thread-safe), running one is not.
// Called from a stream's executor thread, in stream order; the session has
// checked both ranges.
#pragma once

#include "common/fft_plan.h"
#include "common/status.h"

namespace rgpu::server::simfft {

inline constexpr size_t kPlans = 256;

// `direction`: -1 forward, +1 inverse (C2C and Z2Z; a real type's is its own).
// A C2R/Z2D transform may overwrite its input, as cuFFT's may.
Status execute(const common::fft::Layout& l, int direction, void* in, void* out);

}  // namespace rgpu::server::simfft
