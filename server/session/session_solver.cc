// cuSOLVER (client/solver, docs/cusolver.md): a dense routine's workspace
// size, and the routine in stream order. The session checks the arguments
// as cuSOLVER would (common::solver::check) and every range the routine
// reads or writes against its allocations on the stream's device.
#include "common/log.h"
#include "common/solver_args.h"
#include "server/session/session.h"

namespace rgpu::server {

namespace sv = common::solver;

Status Session::onSolverBufferSize(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getSolverBufferSize();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  const sv::Args a = sv::fromWire(m);
  if (s) s = sv::check(a);
  Result<int64_t> size = s ? backend_->solverBufferSize(key.device, a) : Result<int64_t>(s);
  if (!size) {
    RGPU_LOG_WARN("session {}: cuSOLVER buffer size refused: {}", session_id_, size.status().message());
    finish(h, size.status());
    return Status::ok();
  }
  finish(h, Status::ok(), [n = *size](auto& r) { r.setValue(n); });
  return Status::ok();
}

Status Session::onSolver(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getSolver();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  const sv::Args a = sv::fromWire(m);
  if (s) s = sv::check(a);
  if (s) s = checkRanges(sv::ranges(a), key.device);
  if (s) s = backend_->solver(key, a);
  if (!s) RGPU_LOG_WARN("session {}: {} refused: {}", session_id_, sv::opName(a.op, a.type), s.message());
  finish(h, s);
  return Status::ok();
}

Status Session::checkRanges(const std::vector<common::DeviceRange>& ranges, int device) const {
  for (const common::DeviceRange& r : ranges) {
    int dev = -1;
    Status s = allocs_.check(r.ptr, r.bytes, &dev);
    if (s && dev != device)
      s = Status(err::kInvalidValue, "is on device " + std::to_string(dev) + ", the stream on device " +
                                         std::to_string(device));
    if (!s) return Status(s.code(), std::string(r.what) + ": " + s.message());
  }
  return Status::ok();
}

}  // namespace rgpu::server
