// cuBLAS and cuBLASLt calls on the server: the decoded form a backend runs
// (independent of the wire), and the checks the session makes before a
// backend sees one — every matrix, vector, scalar, bias, auxiliary and
// workspace range must lie inside the session's own allocations, with sizes
// that cannot overflow. Pointer arrays (gemmBatched) live in device memory and
// may be written by earlier stream work, so their elements are checked by the
// backend when the call runs (the sim) or by the GPU's own address space (CUDA:
// one process per session).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/backend/allocation_table.h"

namespace rgpu::server {

// The order of wire::BlasOp.
enum class BlasOp : uint8_t {
  kAxpy, kDot, kNrm2, kScal, kAsum, kIamax, kIamin, kCopy, kSwap, kGemv, kGer, kGemm, kGemmStridedBatched,
  kGemmBatched, kGeam, kDgmm, kTrsm, kSyrk, kTrmm, kSymm, kSyr2k,
  // The batched factorizations: `a` the array of A pointers (lda), `b` the
  // second array (getrs: B, getri: C, matinv: Ainv, geqrf: tau; ldb), `x` the
  // pivots (n per matrix; 0: none), `c` the per-matrix info (0: reported to
  // the host by the client), m x n matrices (getrs: k right-hand sides).
  kGetrfBatched, kGetrsBatched, kGetriBatched, kMatinvBatched, kGeqrfBatched,
  // Complex only (C, Z): C = alpha op(A) op(A)^H + beta C with real alpha and
  // beta (herk), alpha op(A) op(B)^H + conj(alpha) op(B) op(A)^H + beta C with
  // real beta (her2k), alpha A B + beta C with A Hermitian (hemm).
  kHerk, kHer2k, kHemm,
  // Complex only: x^H y (dotc), A += alpha x y^H (gerc). (dot and ger are
  // dotu and geru for complex types; a complex scal's alpha is c_type.)
  kDotc, kGerc,
  // Level 2: x = op(A) x and x = op(A)^-1 x with A triangular (trmv, trsv),
  // y = alpha A x + beta y with A symmetric or Hermitian (symv, hemv); n x n.
  kTrmv, kTrsv, kSymv, kHemv
};
inline constexpr BlasOp kLastBlasOp = BlasOp::kHemv;
const char* blasOpName(BlasOp op);

// alpha or beta: bytes (host pointer mode) or a device address.
struct BlasScalar {
  bool device = false;
  uint64_t ptr = 0;
  uint8_t bytes[16] = {};  // (a complex double at most)
};

struct BlasArgs {
  BlasOp op = BlasOp::kAxpy;
  int32_t a_type = 0, b_type = 0, c_type = 0, compute = 0;
  int32_t trans_a = 0, trans_b = 0;
  int32_t side = 0, uplo = 0, diag = 0;  // dgmm, trsm, trmm, symm, syrk, syr2k: cuBLAS's enum values
  int64_t m = 0, n = 0, k = 0;
  BlasScalar alpha, beta;
  uint64_t a = 0, b = 0, c = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int64_t batch = 1;
  uint64_t x = 0, y = 0;
  int64_t incx = 0, incy = 0;
  uint64_t result = 0;  // device address of the result; 0: it goes back to the client
  bool result64 = false;  // iamax/iamin of the _64 API: an int64_t index
  uint32_t math_mode = 0;
  uint64_t workspace = 0, workspace_size = 0;
};

// Bytes of a level-1 reduction's result (dot, nrm2, asum: the element type's
// real type; iamax/iamin: the index); 0 for ops without one.
size_t blasResultBytes(const BlasArgs& a);

struct LtMatrix {
  uint64_t ptr = 0;
  int32_t type = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = 0;  // 0 column-major, 1 row-major
  int32_t batch = 1;
  int64_t batch_stride = 0;  // elements
};

// cublasLtEpilogue_t bits and values rgpu runs.
namespace lt {
inline constexpr uint32_t kDefault = 1, kRelu = 2, kBias = 4, kBgrad = 16, kGelu = 32, kAux = 128;
inline constexpr uint32_t kDrelu = 8 | 128, kDgelu = 64 | 128, kBgradA = 256, kBgradB = 512;
bool epilogueSupported(uint32_t e);
const char* epilogueName(uint32_t e);
}  // namespace lt

struct LtArgs {
  int32_t compute = 0, scale_type = 0, pointer_mode = 0;
  int32_t trans_a = 0, trans_b = 0;
  uint32_t epilogue = lt::kDefault;
  uint64_t bias = 0;
  int32_t bias_type = 0;
  int64_t bias_batch_stride = 0;
  uint64_t aux = 0;
  int64_t aux_ld = 0, aux_batch_stride = 0;
  int32_t aux_type = 0;
  BlasScalar alpha, beta;
  LtMatrix a, b, c, d;
  uint64_t workspace = 0, workspace_size = 0;
  std::string algo;  // cublasLtMatmulAlgo_t bytes from a heuristic, or empty
  // The problem: D is m x n, op(A) m x k.
  uint64_t m() const { return d.rows; }
  uint64_t n() const { return d.cols; }
  uint64_t k() const;
};

// Checks a call's arguments and every range it names against `allocs`.
// `device` receives the device the memory is on (all of it must be on one).
Status checkBlas(const BlasArgs& a, const AllocationTable& allocs, int* device);
// The same for a matmul; without `allocs` only the problem (types, shapes,
// epilogue), as for a heuristic query that names no memory.
Status checkLt(const LtArgs& a, const AllocationTable* allocs, int* device);

// Largest dimension the CPU implementation (OpenBLAS, 32-bit indices) takes.
inline constexpr int64_t kMaxSimBlasDim = INT32_MAX;

}  // namespace rgpu::server
