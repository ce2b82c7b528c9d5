// cuFFT plans (client/fft, docs/cufft.md): what a plan is, whether cuFFT
// would accept it, and where a transform of it reads and writes.
//
// A plan is the client's, as a cuRAND generator is: its type, rank, sizes,
// data layout and batch. Every transform request carries the plan whole, so
// the server checks each transform's ranges from the request alone and keeps
// no plan a move would have to carry (the CUDA backend caches NVIDIA's plan
// of it; the sim plans FFTW from it).
//
// The layout of one transform depends on the plan and on whether it runs in
// place (input pointer == output pointer), as cuFFT's does:
//  - basic layout (cufftPlan1d/2d/3d, cufftPlanMany with inembed or onembed
//    null): data contiguous, row-major, batches one after another; a real
//    array transformed in place has its last dimension padded to
//    2 (n/2 + 1) reals (FFTW's layout, which cuFFT keeps);
//  - advanced layout (inembed and onembed given): element (i0, .., i{r-1})
//    of batch b lies at b dist + stride (i{r-1} + embed[r-1] (i{r-2} + ...)),
//    in elements of that side's type (inembed[0] and onembed[0] unused).
// The complex side of a real transform has n/2 + 1 elements in the last
// dimension (the non-redundant half).
#pragma once

#include <cstdint>
#include <string>

namespace rgpu::common::fft {

// cufftType values.
inline constexpr int32_t kR2C = 0x2a, kC2R = 0x2c, kC2C = 0x29, kD2Z = 0x6a, kZ2D = 0x6c, kZ2Z = 0x69;
inline constexpr int kMaxRank = 3;
// A size, an embedding, a stride, a distance or the batch: at most this (cuFFT's own limit on one
// dimension is far below; 64-bit arithmetic on extents cannot overflow under it).
inline constexpr int64_t kMaxExtent = int64_t{1} << 40;
// Bytes one side of a transform may span (input or output).
inline constexpr uint64_t kMaxSpanBytes = uint64_t{1} << 46;

struct Plan {
  int32_t type = kC2C;
  int32_t rank = 1;
  int64_t n[kMaxRank] = {1, 1, 1};
  bool advanced = false;  // inembed/onembed/strides/distances given (else the basic layout)
  int64_t inembed[kMaxRank] = {0, 0, 0}, onembed[kMaxRank] = {0, 0, 0};
  int64_t istride = 1, idist = 0, ostride = 1, odist = 0;
  int64_t batch = 1;
};

// Why cuFFT would refuse a plan (its cufftResult, by meaning).
enum class Problem { kNone, kInvalidType, kInvalidSize, kInvalidValue };
struct Verdict {
  Problem problem = Problem::kNone;
  std::string why;
  explicit operator bool() const { return problem == Problem::kNone; }
};
Verdict check(const Plan& p);

inline bool isDouble(int32_t type) { return type == kD2Z || type == kZ2D || type == kZ2Z; }
inline bool realInput(int32_t type) { return type == kR2C || type == kD2Z; }
inline bool realOutput(int32_t type) { return type == kC2R || type == kZ2D; }
inline bool isComplexToComplex(int32_t type) { return type == kC2C || type == kZ2Z; }
// Bytes of one element of the input / the output.
inline uint32_t inputElementBytes(int32_t type) { return (isDouble(type) ? 8 : 4) * (realInput(type) ? 1 : 2); }
inline uint32_t outputElementBytes(int32_t type) { return (isDouble(type) ? 8 : 4) * (realOutput(type) ? 1 : 2); }

// One transform's data as FFTW's guru interface takes it: the logical sizes
// (the real side's for real transforms), each dimension's stride on the
// input and the output side, and the batch, in elements of each side's type.
struct Layout {
  int32_t type = kC2C;
  int32_t rank = 1;
  int64_t n[kMaxRank] = {1, 1, 1};
  int64_t is[kMaxRank] = {0, 0, 0}, os[kMaxRank] = {0, 0, 0};
  int64_t batch = 1, idist = 0, odist = 0;
  bool in_place = false;
  bool operator==(const Layout&) const = default;
};

// The layout of a transform of a plan that check() accepted.
Layout layoutOf(const Plan& p, bool in_place);

// Bytes from the input (output) pointer to one past the last element the
// transform reads (writes).
uint64_t inputBytes(const Layout& l);
uint64_t outputBytes(const Layout& l);

}  // namespace rgpu::common::fft
