// cuSPARSE (client/sparse, docs/cusparse.md): SpMV and SpMM and their
// external buffers. The session checks the call as cuSPARSE would
// (common::sparse::check) and every range it reads or writes against its
// allocations on the stream's device; the values of the offsets and indices
// are checked where they are read (the sim's executor, or NVIDIA's library
// in the session's own context).
#include "common/log.h"
#include "common/sparse_args.h"
#include "server/session/session.h"

namespace rgpu::server {

namespace sp = common::sparse;

Status Session::onSparseBufferSize(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getSparseBufferSize();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  const sp::Args a = sp::fromWire(m);
  if (s) s = sp::check(a);
  Result<uint64_t> size = s ? backend_->sparseBufferSize(key.device, a) : Result<uint64_t>(s);
  if (!size) {
    RGPU_LOG_WARN("session {}: {}_bufferSize refused: {}", session_id_, sp::opName(a.op), size.status().message());
    finish(h, size.status());
    return Status::ok();
  }
  finish(h, Status::ok(), [n = *size](auto& r) { r.setValue(static_cast<int64_t>(n)); });
  return Status::ok();
}

Status Session::onSparse(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getSparse();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  const sp::Args a = sp::fromWire(m);
  if (s) s = sp::check(a);
  if (s) s = checkRanges(sp::ranges(a), key.device);
  if (s) s = backend_->sparse(key, a);
  if (!s) RGPU_LOG_WARN("session {}: {} refused: {}", session_id_, sp::opName(a.op), s.message());
  finish(h, s);
  return Status::ok();
}

}  // namespace rgpu::server
