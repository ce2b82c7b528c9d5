// cuSPARSE's generic API (client/sparse, docs/cusparse.md): one SpMV or
// SpMM call with its matrices' descriptors, whether cuSPARSE would accept
// it, and the device memory it reads and writes -- the ranges the server
// checks each call against.
//
// A sparse matrix is CSR (row offsets, column indices, values), CSC (column
// offsets, row indices, values) or COO (row indices, column indices,
// values) or Blocked-ELL (block column indices, values; SpMM only), with
// 32- or 64-bit indices counted from 0 or 1. The offsets and
// indices are device memory the call reads: the server checks their ranges
// before the call, and the sim checks their values while it computes (an
// index outside the matrix is an error, never a read outside it). A dense
// vector is an n x 1 column-major matrix.
//   SpMV: y = alpha op(A) x + beta y;   SpMM: C = alpha op(A) op(B) + beta C.
//
// SpGEMM (C = alpha A B, all three CSR) keeps no state on the server: each
// step is a stream-ordered request whose answer lands in device memory the
// program gave (its external buffers), where the client reads it after
// synchronising the stream, as NVIDIA's library does to learn nnz(C).
//   kSpGemmCount:     the number of products and nnz(C), as a ProductHeader
//                     at the start of the buffer (workEstimation's buffer 1).
//   kSpGemmCompute:   the header, then C's row offsets, column indices
//                     (sorted in each row) and values, in C's index types and
//                     base and at productLayout()'s offsets, into the buffer
//                     (compute's buffer 2); the client's copy step is three
//                     device-to-device copies from it into C's arrays.
//   kSpGemmStructure: the same without values (reuse_nnz's buffer 3).
//   kSpGemmValues:    C's values on C's own pattern (reuse_compute):
//                     C = alpha A B + beta C, a product outside C's pattern
//                     dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_range.h"
#include "common/status.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::common::sparse {

enum class Op : uint8_t { kSpMV, kSpMM, kSpGemmCount, kSpGemmCompute, kSpGemmStructure, kSpGemmValues };
inline bool isSpGemm(Op op) { return op >= Op::kSpGemmCount && op <= Op::kSpGemmValues; }
enum class Format : uint8_t { kCsr, kCsc, kCoo, kBlockedEll };

// cusparseIndexType_t, cusparseOrder_t, cusparseOperation_t values.
inline constexpr int32_t kIndex32 = 2, kIndex64 = 3;
inline constexpr int32_t kOrderCol = 1, kOrderRow = 2;
inline constexpr int32_t kOpN = 0, kOpT = 1, kOpC = 2;
// cudaDataType_t values of the four value types.
inline constexpr int32_t kR32F = 0, kR64F = 1, kC32F = 4, kC64F = 5;
inline bool knownType(int32_t t) { return t == kR32F || t == kR64F || t == kC32F || t == kC64F; }
inline uint32_t elementBytes(int32_t t) { return t == kR32F ? 4 : t == kC64F ? 16 : 8; }
inline uint32_t indexBytes(int32_t t) { return t == kIndex64 ? 8 : 4; }

// Rows, columns and entries: at most this (index arithmetic stays far from 2^63).
inline constexpr int64_t kMaxDim = int64_t{1} << 40;

// Blocked-ELL: rows / block block-rows, each of ell_cols / block blocks of
// block x block values; `indices` holds each block's block column (row-major,
// (rows / block) x (ell_cols / block), -1 for none) and `values` the rows x
// ell_cols values, row-major; nnz is rows x ell_cols, as cuSPARSE counts it.
struct SpMat {
  Format format = Format::kCsr;
  int64_t rows = 0, cols = 0, nnz = 0;
  uint64_t offsets = 0;  // CSR: row offsets; CSC: column offsets; COO: row indices
  uint64_t indices = 0;  // CSR: column indices; CSC: row indices; COO: column indices; Blocked-ELL: block columns
  uint64_t values = 0;
  int32_t offset_type = kIndex32, index_type = kIndex32;
  int32_t base = 0;  // cusparseIndexBase_t
  int32_t value_type = kR32F;
  int64_t block = 0, ell_cols = 0;  // Blocked-ELL
};

struct DnMat {
  int64_t rows = 0, cols = 1, ld = 1;
  uint64_t values = 0;
  int32_t value_type = kR32F;
  int32_t order = kOrderCol;
};

// alpha or beta: host bytes (read when the call was made) or a device address.
struct Scalar {
  bool device = false;
  uint64_t ptr = 0;
  uint8_t bytes[16] = {};
};

struct Args {
  Op op = Op::kSpMV;
  int32_t op_a = kOpN, op_b = kOpN;
  Scalar alpha, beta;
  int32_t compute_type = kR32F;
  int32_t alg = 0;
  SpMat a;
  DnMat b, c;      // SpMV: x and y
  SpMat sb, sc;    // SpGEMM: B and C
  uint64_t buffer = 0, buffer_size = 0;
};

const char* opName(Op op);  // "cusparseSpMV", "cusparseSpMM", "cusparseSpGEMM_compute", ...

// What an SpGEMM step writes at the start of its buffer.
struct ProductHeader {
  static constexpr uint64_t kMagic = 0x5247505553504745;  // "RGPUSPGE"
  uint64_t magic = kMagic;
  int64_t nnz = 0;       // entries of C
  int64_t products = 0;  // multiplications A B takes (cusparseSpGEMM_getNumProducts)
  int64_t rows = 0;
};
// Where a product of `nnz` entries lies in its buffer, for C's types
// (offsets, indices and values each 256-byte aligned after the header).
struct ProductLayout {
  uint64_t offsets = 0, indices = 0, values = 0, bytes = 0;
};
ProductLayout productLayout(const SpMat& c, int64_t nnz, bool with_values);
// The buffer of kSpGemmCount (and the smallest buffer an SpGEMM step asks for).
inline constexpr uint64_t kHeaderBytes = 256;
// Products one row of an SpGEMM may take on the sim (each is kept, as its
// column and value, while its row is summed: at most 96 MiB for c64): a row
// past it fails the call.
inline constexpr int64_t kMaxRowProducts = int64_t{1} << 22;

// Which argument cuSPARSE would refuse, with the reason (err::kInvalidValue;
// err::kNotSupported for what rgpu does not compute: mixed value types,
// 16-bit indices); ok when none.
Status check(const Args& a);

using Range = DeviceRange;
// Every range of a call check() accepted.
std::vector<Range> ranges(const Args& a);

void toWire(const Args& a, wire::Sparse::Builder b);
Args fromWire(wire::Sparse::Reader r);

}  // namespace rgpu::common::sparse
