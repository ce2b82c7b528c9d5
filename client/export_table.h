// rgpu's private interface between its CUDA runtime (libcudart.so.13) and its
// other client libraries (libcublas.so.13, libcublasLt.so.13) and benchmarks
// (rgpu-bench --breakdown), obtained the way
// NVIDIA's own libraries obtain theirs: cudaGetExportTable with rgpu's UUID.
// Through it those libraries use the runtime's one session — its connection,
// its streams, its ordering — so a cuBLAS call and a kernel launch on one
// stream run in the order the program made them, and their errors surface
// together. libcudart's exported names stay exactly NVIDIA's.
//
// Both sides are built from this tree with one compiler, so the table passes
// rgpu's C++ types. Fields are only ever appended; `size` says how many the
// runtime has.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "client/connection.h"
#include "common/status.h"

namespace rgpu::client {

struct StreamRef;

inline constexpr cudaUUID_t kExportTableId = {{'r', 'g', 'p', 'u', '-', 'e', 'x', 'p', 'o', 'r', 't', 's', '-', 'v', '1', 0}};

struct ExportTable {
  uint64_t size;  // sizeof(ExportTable) in the runtime
  // Connects on first use; afterwards the error that makes every call fail, if any.
  Status (*ready)();
  // A synchronous call (reply bulk, exactly in_len bytes, into `in`); an
  // earlier asynchronous error is returned if the call itself succeeded.
  Result<Reply> (*call)(capnp::MessageBuilder& msg, void* in, uint64_t in_len);
  // An asynchronous call, batched with the runtime's own.
  Status (*post)(capnp::MessageBuilder& msg);
  // The wire reference of a stream (0, cudaStreamLegacy, cudaStreamPerThread, a created one).
  Status (*stream)(cudaStream_t s, uint32_t* id, int* device);
  // The calling thread's current device (cudaGetDevice).
  int (*currentDevice)();
  // client.toml's log_level (RGPU_LOG_LEVEL overrides it), for the libraries' own logs.
  std::string (*logLevel)();
  // Times every synchronous call from now on (Connection::setTimed), and the
  // calling thread's last timed call (rgpu-bench --breakdown).
  Status (*setCallTiming)(bool on);
  bool (*lastCallTiming)(CallTiming* out);
};

}  // namespace rgpu::client
