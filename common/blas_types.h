// cuBLAS types as rgpu forwards them, shared by the client libraries
// (libcublas.so.13, libcublasLt.so.13) and the server: the values of CUDA's
// cudaDataType_t and cublasComputeType_t (the client static_asserts them
// against NVIDIA's headers), element sizes, the scalar type a compute type
// implies, the type combinations rgpu runs, and the memory extent of strided
// vectors and matrices (what the server checks against a session's allocations).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rgpu::common::blas {

// cudaDataType_t (the types rgpu runs: complex ones in gemm only).
inline constexpr int32_t kR32F = 0;
inline constexpr int32_t kR64F = 1;
inline constexpr int32_t kR16F = 2;
inline constexpr int32_t kC32F = 4;
inline constexpr int32_t kC64F = 5;
inline constexpr int32_t kR16BF = 14;

inline bool isComplex(int32_t type) { return type == kC32F || type == kC64F; }

// cublasComputeType_t.
inline constexpr int32_t kCompute16F = 64;
inline constexpr int32_t kCompute16FPedantic = 65;
inline constexpr int32_t kCompute32F = 68;
inline constexpr int32_t kCompute32FPedantic = 69;
inline constexpr int32_t kCompute64F = 70;
inline constexpr int32_t kCompute64FPedantic = 71;
inline constexpr int32_t kCompute32FFast16F = 74;
inline constexpr int32_t kCompute32FFast16BF = 75;
inline constexpr int32_t kCompute32FFastTF32 = 77;

// cublasOperation_t: N, T, C (C is T for real types).
inline constexpr int32_t kOpN = 0;
inline constexpr int32_t kOpT = 1;
inline constexpr int32_t kOpC = 2;

// Bytes of one element; 0 for a type rgpu does not run.
inline size_t elementSize(int32_t type) {
  switch (type) {
    case kR32F: return 4;
    case kR64F: return 8;
    case kR16F: case kR16BF: return 2;
    case kC32F: return 8;
    case kC64F: return 16;
    default: return 0;
  }
}

inline const char* typeName(int32_t type) {
  switch (type) {
    case kR32F: return "CUDA_R_32F";
    case kR64F: return "CUDA_R_64F";
    case kR16F: return "CUDA_R_16F";
    case kR16BF: return "CUDA_R_16BF";
    case kC32F: return "CUDA_C_32F";
    case kC64F: return "CUDA_C_64F";
    default: return "an unsupported type";
  }
}

// The type of alpha and beta under a compute type; -1 when rgpu does not run it.
inline int32_t scalarType(int32_t compute) {
  switch (compute) {
    case kCompute16F: case kCompute16FPedantic: return kR16F;
    case kCompute32F: case kCompute32FPedantic: case kCompute32FFast16F: case kCompute32FFast16BF:
    case kCompute32FFastTF32:
      return kR32F;
    case kCompute64F: case kCompute64FPedantic: return kR64F;
    default: return -1;
  }
}

// The type of alpha and beta of a gemm whose C is `c`: complex for a complex C.
inline int32_t scalarTypeOf(int32_t compute, int32_t c) {
  const int32_t s = scalarType(compute);
  if (!isComplex(c) || s < 0) return s;
  return s == kR32F ? kC32F : s == kR64F ? kC64F : -1;
}

// The A, B, C type combinations of cublasGemmEx (and cuBLASLt's A, B, C=D)
// as NVIDIA documents them, but int8; complex in cublasGemmEx and the typed
// C/Z gemms only (`complex_ok`: cuBLASLt passes false).
inline bool gemmSupported(int32_t a, int32_t b, int32_t c, int32_t compute, bool complex_ok = true) {
  if (a != b) return false;
  if (isComplex(a) && !complex_ok) return false;
  switch (compute) {
    case kCompute16F: case kCompute16FPedantic: return a == kR16F && c == kR16F;
    case kCompute32F: case kCompute32FPedantic:
      return (a == kR32F && c == kR32F) || (a == kC32F && c == kC32F) ||
             ((a == kR16F || a == kR16BF) && (c == a || c == kR32F));
    case kCompute32FFast16F: case kCompute32FFast16BF: case kCompute32FFastTF32:
      return (a == kR32F && c == kR32F) || (a == kC32F && c == kC32F);
    case kCompute64F: case kCompute64FPedantic: return (a == kR64F && c == kR64F) || (a == kC64F && c == kC64F);
    default: return false;
  }
}

// Elements spanned by a column-major rows x cols matrix with leading
// dimension ld (ld >= rows): (cols - 1) * ld + rows, 0 when empty. False on
// negative sizes or overflow.
inline bool matrixExtent(int64_t rows, int64_t cols, int64_t ld, uint64_t& elements) {
  if (rows < 0 || cols < 0 || ld < 0) return false;
  if (rows == 0 || cols == 0) {
    elements = 0;
    return true;
  }
  if (ld < rows) return false;
  uint64_t span;
  if (__builtin_mul_overflow(static_cast<uint64_t>(cols - 1), static_cast<uint64_t>(ld), &span)) return false;
  return !__builtin_add_overflow(span, static_cast<uint64_t>(rows), &elements);
}

// Elements spanned by a vector of n elements inc apart (BLAS: a negative inc
// walks the same span backwards): 1 + (n - 1) * |inc|, 0 when n is 0.
inline bool vectorExtent(int64_t n, int64_t inc, uint64_t& elements) {
  if (n < 0 || inc == 0 || inc == INT64_MIN) return false;
  if (n == 0) {
    elements = 0;
    return true;
  }
  uint64_t step = static_cast<uint64_t>(inc < 0 ? -inc : inc), span;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n - 1), step, &span)) return false;
  return !__builtin_add_overflow(span, uint64_t{1}, &elements);
}

}  // namespace rgpu::common::blas
