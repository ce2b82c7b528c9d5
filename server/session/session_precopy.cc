// Pre-copy (docs/migration.md): the session's side.
//
// The daemon asks over the handoff socket ("precopy", the base file's key,
// and the file) while the program runs. The resume thread records it; the
// dispatch thread, between two requests, takes the list of the session's
// allocations and the compute capability its modules need, and a thread of
// its own copies those allocations to the base as the program goes on
// (device_image.h: read in place, each slice's hash kept), then tells the
// daemon "precopied". The checkpoint of the move that follows sends only the
// slices that changed since. A restoring worker places the base first
// (prerestore), also while the program still runs where it was.
#include <unistd.h>

#include <chrono>

#include "common/log.h"
#include "server/session/session.h"

namespace rgpu::server {

void Session::requestPrecopy(int fd, const std::string& key_hex) {
  {
    std::lock_guard lock(resume_mu_);
    if (precopy_request_ && precopy_request_->fd >= 0) ::close(precopy_request_->fd);
    precopy_request_ = PrecopyRequest{fd, key_hex};
  }
  precopy_wanted_.store(true);
}

void Session::startPrecopy() {
  precopy_wanted_.store(false);
  PrecopyRequest req;
  {
    std::lock_guard lock(resume_mu_);
    if (!precopy_request_) return;
    req = *precopy_request_;
    precopy_request_.reset();
  }
  auto refuse = [&](const std::string& why) {
    RGPU_LOG_WARN("session {}: no pre-copy: {}", session_id_, why);
    ::close(req.fd);
    tellDaemon(joinFields({"precopy-refused", why}));
  };
  joinPrecopy();  // an earlier move's pre-copy (that move failed): this one's replaces it
  if (std::string why = notCheckpointable(); !why.empty()) return refuse("cannot be checkpointed: " + why);
  auto key = fileKeyFromHex(req.key_hex);
  if (!key) return refuse(key.status().message());
  std::vector<PrecopyRange> ranges;
  for (uint64_t base : allocs_.bases())
    if (const AllocationTable::Entry* e = allocs_.find(base); e && !e->is_symbol)
      ranges.push_back({e->device, base, e->size});
  const uint32_t need = modulesNeedComputeCapability();
  const uint32_t span = placement_.span_index;
  precopy_base_.reset();
  precopy_thread_ = std::thread([this, fd = req.fd, key = *key, ranges = std::move(ranges), need, span] {
    auto t0 = std::chrono::steady_clock::now();
    auto w = CheckpointWriter::start(key, fdSink(fd));
    Result<PrecopyBase> base = w ? writePrecopyBase(*backend_, span, ranges, **w) : Result<PrecopyBase>(w.status());
    Status s = base ? (*w)->finish() : base.status();
    ::close(fd);
    if (!s) {
      RGPU_LOG_WARN("session {}: no pre-copy: {}", session_id_, s.message());
      tellDaemon(joinFields({"precopy-refused", s.message()}));
      return;
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    RGPU_LOG_INFO("session {}: pre-copied {} allocation(s), {} bytes, in {} ms while it ran", session_id_,
                  ranges.size(), base->bytes, ms);
    precopy_base_ = std::make_unique<PrecopyBase>(std::move(*base));
    tellDaemon(joinFields({"precopied", std::to_string((*w)->plainBytes()), std::to_string((*w)->storedBytes()),
                           std::to_string(ms), std::to_string(need)}));
  });
}

void Session::joinPrecopy() {
  if (precopy_thread_.joinable()) precopy_thread_.join();
}

Status Session::prerestore(CheckpointReader& in, const Placement& placed) {
  RGPU_TRY_ASSIGN(span, readPrecopySpan(in));
  placement_ = placed;
  placement_.span_index = span;
  auto backend = make_backend_(placement_);
  if (!backend) return backend.status();
  attachBackend(std::move(*backend));
  RGPU_TRY_ASSIGN(ranges, restorePrecopyBase(*backend_, in, imageLimits()));
  preplaced_ = std::move(ranges);
  prerestored_ = true;
  return Status::ok();
}

}  // namespace rgpu::server
