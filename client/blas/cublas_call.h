// What rgpu's cuBLAS files share (cublas_api.cc, cublas_level3.cc): the
// handle -- a client object carrying the stream, pointer and math modes and
// workspace every call sends -- and the one way a call travels (`submit`:
// queued in the handle's stream order, or synchronous when its result comes
// back to host memory).
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "client/blas/blas_client.h"
#include "common/blas_types.h"

// The handle: a client object (cublas_api.h only declares the struct).
struct cublasContext {
  static constexpr uint64_t kMagic = 0x7361'6c62'7570'6772ull;  // "rgpublas"
  uint64_t magic = kMagic;
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  cublasEmulationStrategy_t emulation = CUBLAS_EMULATION_STRATEGY_DEFAULT;
  void* workspace = nullptr;
  size_t workspace_size = 0;
  int sm_count_target = 0;
};

namespace rgpu::client::blas::call {

namespace cb = rgpu::common::blas;
using rgpu::Status;


inline bool valid(cublasHandle_t h) { return h && h->magic == cublasContext::kMagic; }

template <typename T> constexpr int32_t typeOf();
template <> constexpr int32_t typeOf<float>() { return cb::kR32F; }
template <> constexpr int32_t typeOf<double>() { return cb::kR64F; }
template <> constexpr int32_t typeOf<__half>() { return cb::kR16F; }
template <> constexpr int32_t typeOf<cuComplex>() { return cb::kC32F; }
template <> constexpr int32_t typeOf<cuDoubleComplex>() { return cb::kC64F; }

inline bool opValid(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }
inline bool fillValid(cublasFillMode_t uplo) { return uplo == CUBLAS_FILL_MODE_LOWER || uplo == CUBLAS_FILL_MODE_UPPER; }
inline bool diagValid(cublasDiagType_t diag) { return diag == CUBLAS_DIAG_NON_UNIT || diag == CUBLAS_DIAG_UNIT; }
inline bool sideValid(cublasSideMode_t side) { return side == CUBLAS_SIDE_LEFT || side == CUBLAS_SIDE_RIGHT; }

// Sends one cuBLAS call that `fill` completes. With `result`, the call's
// result comes back to host memory (synchronous); otherwise it is queued.
template <typename F>
cublasStatus_t submit(const char* name, cublasHandle_t h, F&& fill, void* result = nullptr, size_t result_len = 0) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const rgpu::client::ExportTable* t = table();
  if (!t) return CUBLAS_STATUS_NOT_INITIALIZED;
  capnp::MallocMessageBuilder msg(256);
  auto c = msg.initRoot<wire::Request>().initBlas();
  if (Status s = rgpu::client::blas::setStream(c.initStream(), *t, h->stream, h->device); !s) return toBlasStatus(s, name);
  c.setMathMode(static_cast<uint32_t>(h->math_mode));
  c.setWorkspace(addr(h->workspace));
  c.setWorkspaceSize(h->workspace_size);
  fill(c);
  if (result) {
    auto r = t->call(msg, result, result_len);
    return toBlasStatus(r ? Status::ok() : r.status(), name);
  }
  return toBlasStatus(t->post(msg), name);
}

// x and y of a level 1 or 2 call.
inline void setVectors(wire::BlasCall::Builder c, const void* x, int64_t incx, const void* y, int64_t incy) {
  c.setX(addr(x));
  c.setIncx(incx);
  c.setY(addr(y));
  c.setIncy(incy);
}

}  // namespace rgpu::client::blas::call
