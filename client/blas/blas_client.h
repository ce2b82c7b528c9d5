// What rgpu's libcublas.so.13 and libcublasLt.so.13 share: the runtime's
// export table (client/export_table.h), the mapping of rgpu's errors onto
// cublasStatus_t, one guarded entry wrapper (no exception crosses the C ABI),
// and the encoding of scalars and streams into a call.
//
// Handles are client objects: creating one costs no round trip; each call
// carries the handle's stream, pointer mode, math mode and workspace. Calls
// whose result stays on the device are asynchronous, batched with the
// runtime's own calls in one session and stream order; their errors surface
// at the next synchronising call, as a kernel fault would on a GPU.
#pragma once

#include <cublas_api.h>

#include <cstring>
#include <string>

#include "client/export_table.h"
#include "common/log.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::client::blas {

// The runtime's table, or null when this process's libcudart.so.13 is not
// rgpu's (the reason is logged once).
const ExportTable* table();

// cublasGetStatusName / cublasGetStatusString, and cuBLASLt's: NVIDIA's texts.
const char* statusName(cublasStatus_t s);
const char* statusString(cublasStatus_t s);
const char* ltStatusName(cublasStatus_t s);
const char* ltStatusString(cublasStatus_t s);

// rgpu's error (a cudaError_t and its message) as a cuBLAS status; logs the
// message once per distinct text. `connecting`: errors of the connection
// itself (cublasCreate) are NOT_INITIALIZED rather than EXECUTION_FAILED.
cublasStatus_t toBlasStatus(const Status& s, const char* call, bool connecting = false);

// Runs `f` (returning cublasStatus_t) with exceptions turned into INTERNAL_ERROR.
template <typename F>
cublasStatus_t guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return toBlasStatus(Status(err::kMemoryAllocation, "out of host memory"), call);
  } catch (const std::exception& e) {
    return toBlasStatus(Status(err::kUnknown, std::string("internal error: ") + e.what()), call);
  } catch (...) {
    return toBlasStatus(Status(err::kUnknown, "internal error"), call);
  }
}

// Logged once per name: rgpu does not implement `name` (CUBLAS_STATUS_NOT_SUPPORTED).
cublasStatus_t unsupported(const char* name, const char* why = nullptr);

// Fills a stream reference for `stream` on `device` (stream 0 is the handle's
// device's legacy stream).
Status setStream(wire::StreamRef::Builder b, const ExportTable& t, cudaStream_t stream, int device);

// A scalar: `bytes` bytes read now from host memory, or a device address.
inline void setScalar(wire::BlasScalar::Builder b, const void* p, size_t bytes, bool device) {
  if (device) b.setDevice(reinterpret_cast<uint64_t>(p));
  else b.setHost(kj::arrayPtr(static_cast<const kj::byte*>(p), bytes));
}

inline uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// For cublasCreate / cublasLtCreate: connects the runtime's session (an error
// there is NOT_INITIALIZED) and gives the calling thread's device, which the
// new handle is bound to.
cublasStatus_t openSession(const char* call, int* device);

// cublasCreate / cublasLtCreate and their Destroy: a `Context` (with `kMagic`,
// `magic` and `device`) bound to the calling thread's device.
template <class Context>
cublasStatus_t createHandle(const char* call, Context** out) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  int device = 0;
  if (cublasStatus_t st = openSession(call, &device); st != CUBLAS_STATUS_SUCCESS) return st;
  auto* h = new Context;
  h->device = device;
  *out = h;
  return CUBLAS_STATUS_SUCCESS;
}
template <class Context>
cublasStatus_t destroyHandle(Context* h) {
  if (!h || h->magic != Context::kMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace rgpu::client::blas

#define RGPU_BLAS_EXPORT extern "C" __attribute__((visibility("default")))
// One exported entry point returning cublasStatus_t, and its guarded body.
#define RGPU_BLAS_API(name, ...) RGPU_BLAS_EXPORT cublasStatus_t name(__VA_ARGS__)
#define RGPU_BLAS_RUN(name, ...) \
  return ::rgpu::client::blas::guarded(#name, [&]() -> cublasStatus_t { __VA_ARGS__; })
