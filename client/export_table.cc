// cudaGetExportTable: rgpu's own table for its cuBLAS libraries and
// benchmarks (client/export_table.h). NVIDIA's private tables are not available through
// rgpu: asking for one is refused like any unsupported call.
#include "client/export_table.h"

#include <cstring>

#include "client/api_util.h"

namespace rgpu::client {
namespace {

Status ready() {
  auto c = rt().conn();
  return c ? Status::ok() : c.status();
}

Result<Reply> call(capnp::MessageBuilder& msg, void* in, uint64_t in_len) { return rt().call(msg, nullptr, 0, in, in_len); }

Status post(capnp::MessageBuilder& msg) { return rt().post(msg); }

Status stream(cudaStream_t s, uint32_t* id, int* device) {
  auto r = rt().stream(s);
  if (!r) return r.status();
  *id = r->id;
  *device = r->device;
  return Status::ok();
}

int currentDevice() { return rt().currentDevice(); }

std::string logLevel() { return rt().config().log_level; }

Status setCallTiming(bool on) {
  auto c = rt().conn();
  if (!c) return c.status();
  (*c)->setTimed(on);
  return Status::ok();
}

bool lastCallTiming(CallTiming* out) { return Connection::lastTiming(out); }

const ExportTable kTable = {sizeof(ExportTable), ready, call, post, stream, currentDevice, logLevel,
                            setCallTiming, lastCallTiming};

}  // namespace
}  // namespace rgpu::client

using namespace rgpu::client;

RGPU_EXPORT cudaError_t cudaGetExportTable(const void** table, const cudaUUID_t* id) {
  if (!table || !id) return cudaErrorInvalidValue;
  if (std::memcmp(id->bytes, kExportTableId.bytes, sizeof id->bytes) == 0) {
    *table = &kTable;
    return cudaSuccess;
  }
  rgpu::common::logOnce("cudaGetExportTable", "cudaGetExportTable: NVIDIA's private interfaces are not available "
                                              "through rgpu (cudaErrorNotSupported)");
  return cudaErrorNotSupported;
}
