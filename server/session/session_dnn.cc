// cuDNN (client/dnn, docs/cudnn.md): the legacy API's operations and their
// sizes. The session checks the call as cuDNN would (common::dnn::check) and
// every range it reads or writes -- tensors, filters, workspace, dropout
// states and reserve space -- against its allocations on the stream's
// device; what lies in device memory (dropout states) is checked where it
// is read (the sim's executor, or NVIDIA's library in the session's own
// context).
#include "common/dnn_args.h"
#include "common/log.h"
#include "server/session/session.h"

namespace rgpu::server {

namespace dn = common::dnn;

Status Session::onDnnSize(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getDnnSize();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  const dn::Args a = dn::fromWire(m);
  const auto q = static_cast<dn::Query>(m.getQuery());
  if (s && m.getQuery() > dn::kLastQuery) s = Status(err::kInvalidValue, "unknown size query");
  if (s && q != dn::Query::kDropoutStates) s = dn::checkShapes(a);
  Result<uint64_t> size = s ? backend_->dnnSize(key.device, q, a) : Result<uint64_t>(s);
  if (!size) {
    RGPU_LOG_WARN("session {}: {} size query refused: {}", session_id_, dn::opName(a.op), size.status().message());
    finish(h, size.status());
    return Status::ok();
  }
  finish(h, Status::ok(), [n = *size](auto& r) { r.setValue(static_cast<int64_t>(n)); });
  return Status::ok();
}

Status Session::onDnn(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getDnn();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  const dn::Args a = dn::fromWire(m);
  if (s) s = dn::check(a);
  if (s) s = checkRanges(dn::ranges(a), key.device);
  if (s) s = backend_->dnn(key, a);
  if (!s) RGPU_LOG_WARN("session {}: {} refused: {}", session_id_, dn::opName(a.op), s.message());
  finish(h, s);
  return Status::ok();
}

}  // namespace rgpu::server
