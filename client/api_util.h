// Shared helpers of the exported CUDA functions (api_*.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <new>

#include "client/runtime.h"
#include "common/log.h"

namespace rgpu::client {

inline Runtime& rt() { return Runtime::get(); }

// The one entry wrapper: runs `f` (returning Status), records failures as the
// thread's last error, and never lets an exception cross the C ABI.
template <typename F>
cudaError_t guarded(F&& f) noexcept {
  if (rt().forked()) return rt().finish(rt().forkedError());
  try {
    return rt().finish(f());
  } catch (const std::bad_alloc&) {
    return rt().finish(Status(err::kMemoryAllocation, "client out of host memory"));
  } catch (const std::exception& e) {
    return rt().finish(Status(err::kUnknown, std::string("internal error: ") + e.what()));
  } catch (...) {
    return rt().finish(Status(err::kUnknown, "internal error"));
  }
}

inline void setStream(wire::StreamRef::Builder b, StreamRef s) {
  b.setId(s.id);
  b.setDevice(s.device);
}

// A device allocation on `device` (cudaMalloc's path), tracked by the runtime.
Result<uint64_t> allocateDeviceMemory(int device, uint64_t size);
// Stream-ordered allocation (api_mempool.cc): from `pool`, or the device's
// current pool when null; the pool's figures count it until it is freed.
Status poolAllocate(void** ptr, size_t size, cudaMemPool_t pool, int device);
void poolForget(void* ptr);  // a freed pointer leaves its pool's figures
// cudaMallocAsync on a capturing stream: a memory allocation node (true; `st`
// says how it went and *out is its address), or false when `s` does not capture.
bool captureAllocation(StreamRef s, size_t size, void** out, Status* st);

inline Status needPtr(const void* p, const char* what) {
  return p ? Status::ok() : Status(err::kInvalidValue, std::string(what) + " is NULL");
}

// Core copy used by every cudaMemcpy* entry point.
Status memcpyImpl(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream, bool async,
                  bool ptsz);
Status memsetImpl(void* dst, int value, size_t count, cudaStream_t stream, bool ptsz);
// Posts a peer copy on stream `s` (cudaMemcpyPeer's message; `serialize`: ordered with all three devices' work).
Status peerOn(void* dst, int dst_device, const void* src, int src_device, size_t count, StreamRef s, bool serialize);
Status memcpy2DImpl(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz);
Status memset2DImpl(void* dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream, bool ptsz);
Status streamSyncImpl(cudaStream_t stream, bool ptsz);
Status streamQueryImpl(cudaStream_t stream, bool ptsz);
Status streamWaitEventImpl(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptsz);
Status eventRecordImpl(cudaEvent_t event, cudaStream_t stream, bool ptsz, unsigned flags = 0);
Status launchHostFuncImpl(cudaStream_t stream, void (*fn)(void*), void* user, bool ptsz);
Status symbolCopyImpl(const void* symbol, void* host, size_t count, size_t offset, cudaMemcpyKind kind,
                      cudaStream_t stream, bool to_symbol, bool async, bool ptsz);

}  // namespace rgpu::client

#define RGPU_EXPORT extern "C" __attribute__((visibility("default")))
