// cuSOLVER's dense routines (client/solver, docs/cusolver.md): one call's
// arguments, whether cuSOLVER would accept them, and the device memory it
// reads and writes -- the ranges the server checks each call against.
//
// A call names its matrices by device pointer and leading dimension
// (column-major, as cuSOLVER's): an m x n matrix with leading dimension ld
// spans ld (n - 1) + m elements. Real types take real eigenvalues and
// singular values; complex ones (C, Z) take them in the matching real type.
// devInfo is one int in device memory, written by every call (LAPACK's info:
// 0, -i for an illegal i-th argument, > 0 for a numerical failure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_range.h"
#include "common/status.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::common::solver {

enum class Op : uint8_t { kPotrf, kPotrs, kGetrf, kGetrs, kGeqrf, kOrmqr, kSyevd, kGesvd };
inline constexpr uint8_t kOpCount = 8;
const char* opName(Op op, int32_t type);  // cuSOLVER's name, e.g. "cusolverDnDpotrf"

// cudaDataType_t values of the four precisions.
inline constexpr int32_t kR32F = 0, kR64F = 1, kC32F = 4, kC64F = 5;
inline bool knownType(int32_t t) { return t == kR32F || t == kR64F || t == kC32F || t == kC64F; }
inline uint32_t elementBytes(int32_t t) { return t == kR32F ? 4 : t == kC64F ? 16 : 8; }
inline uint32_t realBytes(int32_t t) { return t == kR32F || t == kC32F ? 4 : 8; }
inline bool isComplex(int32_t t) { return t == kC32F || t == kC64F; }

// Dimensions: at most this (cuSOLVER's are int).
inline constexpr int64_t kMaxDim = INT32_MAX;

struct Args {
  Op op = Op::kPotrf;
  int32_t type = kR32F;
  int32_t uplo = 0;   // cublasFillMode_t: 0 lower, 1 upper
  int32_t trans = 0;  // cublasOperation_t: 0 N, 1 T, 2 C
  int32_t side = 0;   // cublasSideMode_t: 0 left, 1 right
  int32_t jobz = 0;   // cusolverEigMode_t: 0 values only, 1 vectors too
  char jobu = 'N', jobvt = 'N';  // gesvd: 'A', 'S', 'O' or 'N'
  int64_t m = 0, n = 0, k = 0, nrhs = 0;
  uint64_t a = 0;
  int64_t lda = 1;
  uint64_t b = 0;  // potrs/getrs: B; ormqr: C
  int64_t ldb = 1;
  uint64_t ipiv = 0, tau = 0, w = 0;  // w: syevd's eigenvalues, gesvd's singular values
  uint64_t u = 0;
  int64_t ldu = 1;
  uint64_t vt = 0;
  int64_t ldvt = 1;
  uint64_t work = 0;
  int64_t lwork = 0;  // elements of `type`
  uint64_t rwork = 0;  // gesvd: min(m, n) - 1 reals of the superdiagonal, when given
  uint64_t info = 0;
};

// Which argument cuSOLVER would refuse (CUSOLVER_STATUS_INVALID_VALUE), with
// the reason; ok when none.
Status check(const Args& a);

// A range of device memory the call reads or writes.
using Range = DeviceRange;
// Every range of a call check() accepted (empty matrices take none).
std::vector<Range> ranges(const Args& a);

// The call on the wire (wire::Solver; the stream is set by the caller).
void toWire(const Args& a, wire::Solver::Builder b);
Args fromWire(wire::Solver::Reader r);

}  // namespace rgpu::common::solver
