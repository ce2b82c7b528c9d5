// The session's stream, event and device requests, and host functions: what
// waits for stream work is answered from a backend thread once the work is
// done, so one client thread's wait never stalls the others.
#include "common/log.h"
#include "protocol/frame.h"
#include "server/session/session.h"

#include <utility>

namespace rgpu::server {

using protocol::FrameHeader;

Status Session::onStreamCreate(const FrameHeader& h, wire::Request::Reader req) {
  const auto& L = cfg_.limits;
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getStreamCreate();
  uint32_t id = m.getStream().getId();
  int dev = m.getStream().getDevice();
  Status s = checkDevice(dev);
  if (s && id == 0) s = Status(err::kInvalidValue, "stream id 0 is reserved");
  if (s && streams_.count(id)) s = Status(err::kInvalidValue, "stream id " + std::to_string(id) + " in use");
  if (s && streams_.size() >= L.max_streams)
    s = Status(err::kLaunchOutOfResources, "session stream limit reached (max_streams = " + std::to_string(L.max_streams) + ")");
  if (s) s = backend_->createStream({id, dev}, m.getFlags(), m.getPriority());
  if (s) {
    streams_[id] = dev;
    stream_options_[id] = {m.getFlags(), m.getPriority()};
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onStreamDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  StreamKey key;
  Status s = checkStream(req.getStreamDestroy(), key);
  if (s && key.id == 0) s = Status(err::kInvalidResourceHandle, "cannot destroy the default stream");
  if (s) s = backend_->destroyStream(key);
  if (s) {
    streams_.erase(key.id);
    stream_options_.erase(key.id);
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onStreamSynchronize(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  RGPU_TRY(bulkNotExpected(h));
  StreamKey key;
  Status s = checkStream(req.getStreamSynchronize(), key);
  if (s) s = backend_->whenStreamDone(key, [this, seq](Status st) { sendReply(seq, st, nullptr); });
  if (!s) finish(h, s);
  return Status::ok();
}

Status Session::onStreamQuery(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  StreamKey key;
  Status s = checkStream(req.getStreamQuery(), key);
  if (s) {
    auto idle = backend_->streamIdle(key);
    s = !idle ? idle.status() : *idle ? Status::ok() : Status(err::kNotReady, "stream busy");
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onStreamWaitEvent(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getStreamWaitEvent();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  if (s && !events_.count(m.getEvent())) s = Status(err::kInvalidResourceHandle, "unknown event");
  if (s) s = backend_->waitEvent(key, m.getEvent());
  finish(h, s);
  return Status::ok();
}

Status Session::onEventCreate(const FrameHeader& h, wire::Request::Reader req) {
  const auto& L = cfg_.limits;
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getEventCreate();
  Status s = checkDevice(m.getDevice());
  if (s && (m.getId() == 0 || events_.count(m.getId()))) s = Status(err::kInvalidValue, "event id in use");
  if (s && events_.size() >= L.max_events)
    s = Status(err::kLaunchOutOfResources, "session event limit reached (max_events = " + std::to_string(L.max_events) + ")");
  if (s) s = backend_->createEvent(m.getId(), m.getDevice(), m.getFlags());
  if (s) {
    events_[m.getId()] = m.getDevice();
    event_flags_[m.getId()] = m.getFlags();
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onEventRecord(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getEventRecord();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  if (s && !events_.count(m.getId())) s = Status(err::kInvalidResourceHandle, "unknown event");
  if (s) s = backend_->recordEvent(m.getId(), key);
  finish(h, s);
  return Status::ok();
}

Status Session::onEventSynchronize(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  RGPU_TRY(bulkNotExpected(h));
  uint32_t id = req.getEventSynchronize().getId();
  Status s = events_.count(id) ? Status::ok() : Status(err::kInvalidResourceHandle, "unknown event");
  if (s) s = backend_->whenEventDone(id, [this, seq](Status st) { sendReply(seq, st, nullptr); });
  if (!s) finish(h, s);
  return Status::ok();
}

Status Session::onEventQuery(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  uint32_t id = req.getEventQuery().getId();
  Status s = events_.count(id) ? Status::ok() : Status(err::kInvalidResourceHandle, "unknown event");
  if (s) {
    auto d = backend_->eventDone(id);
    s = !d ? d.status() : *d ? Status::ok() : Status(err::kNotReady, "event not completed");
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onEventElapsedTime(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getEventElapsedTime();
  Status s = events_.count(m.getStart()) && events_.count(m.getEnd())
                 ? Status::ok()
                 : Status(err::kInvalidResourceHandle, "unknown event");
  float ms = 0;
  if (s) {
    auto r = backend_->elapsedMs(m.getStart(), m.getEnd());
    if (r) ms = *r;
    else s = r.status();
  }
  finish(h, s, [ms](auto& r) { r.setElapsedMs(ms); });
  return Status::ok();
}

Status Session::onEventDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  uint32_t id = req.getEventDestroy().getId();
  Status s = events_.count(id) ? backend_->destroyEvent(id) : Status(err::kInvalidResourceHandle, "unknown event");
  if (s) {
    events_.erase(id);
    event_flags_.erase(id);
  }
  if (s) ++graph_epoch_;  // native graphs may record or wait for it
  finish(h, s);
  return Status::ok();
}

Status Session::onDeviceSynchronize(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  RGPU_TRY(bulkNotExpected(h));
  int dev = req.getDeviceSynchronize().getDevice();
  Status s = checkDevice(dev);
  if (s) s = backend_->whenDeviceDone(dev, [this, seq](Status st) { sendReply(seq, st, nullptr); });
  if (!s) finish(h, s);
  return Status::ok();
}

Status Session::onSetLimit(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  constexpr int kCudaLimitPrintfFifoSize = 1, kCudaLimitMallocHeapSize = 2;  // (driver_types.h)
  auto m = req.getSetLimit();
  Status s = checkDevice(m.getDevice());
  if (s && m.getLimit() == kCudaLimitMallocHeapSize) return setMallocHeap(h, m.getDevice(), m.getValue());
  if (s && m.getLimit() != kCudaLimitPrintfFifoSize)
    s = Status(err::kUnsupportedLimit, "cudaLimit " + std::to_string(m.getLimit()) + " is kept by the client");
  // The FIFO is worker memory per launch: bounded for every tenant.
  if (s && m.getValue() > cfg_.limits.max_printf_fifo_bytes)
    s = Status(err::kMemoryAllocation, "a printf FIFO of " + std::to_string(m.getValue()) +
                                           " bytes is over this server's limit (max_printf_fifo_bytes = " +
                                           std::to_string(cfg_.limits.max_printf_fifo_bytes) + ")");
  if (s && m.getValue() == 0) s = Status(err::kInvalidValue, "the printf FIFO cannot be empty");
  if (s) s = backend_->setPrintfFifo(m.getDevice(), m.getValue());
  finish(h, s);
  return Status::ok();
}

Status Session::setMallocHeap(const FrameHeader& h, int dev, uint64_t bytes) {
  // The heap is device memory: it counts against the user's quota like an
  // allocation (the previous size's charge returns once the new one holds).
  int phys = physical(dev);
  uint64_t charge = chargedBytes(bytes);
  Status s = pool_.reserve(phys, charge, placement_.quota > 0 || placement_.pool_quota > 0);
  if (s) {
    s = backend_->setMallocHeap(dev, bytes);
    if (!s) pool_.release(phys, charge);
  }
  if (s) {
    pool_.release(phys, std::exchange(malloc_heap_charge_[dev], charge));
  } else {
    RGPU_LOG_INFO("session {}: cudaLimitMallocHeapSize of {} bytes refused: {}", session_id_, bytes, s.message());
  }
  finish(h, s);
  return Status::ok();
}

Status Session::onDeviceReset(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  RGPU_TRY(bulkNotExpected(h));
  int dev = req.getDeviceReset().getDevice();
  Status s = checkDevice(dev);
  if (!s) return finish(h, s), Status::ok();
  // As NVIDIA's runtime: everything the device's context held goes.
  // Requests from now on no longer find it; the memory and the modules
  // (whose __device__ variables start from their initial values when
  // loaded again) are released once the device's queued work is done.
  std::vector<uint64_t> mine;
  for (uint64_t b : allocs_.bases()) {
    const AllocationTable::Entry* e = allocs_.find(b);
    if (e->device == dev && !e->is_symbol) mine.push_back(b);
  }
  uint64_t charge = 0;
  for (uint64_t b : mine) {
    auto e = allocs_.remove(b);
    if (e) charge += chargedBytes(e->size);
  }
  std::vector<uint32_t> mods;
  for (auto& [id, d] : modules_)
    if (d == dev) mods.push_back(id);
  for (uint32_t id : mods) forgetModule(id);
  forgetGraphs(dev);
  ArrayTable::Dropped objects = arrays_.dropDevice(dev);
  for (auto& [handle, bytes] : objects.arrays) charge += chargedBytes(bytes);
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (it->second != dev) {
      ++it;
      continue;
    }
    (void)backend_->destroyStream({it->first, dev});
    stream_options_.erase(it->first);
    it = streams_.erase(it);
  }
  for (auto it = events_.begin(); it != events_.end();) {
    if (it->second != dev) {
      ++it;
      continue;
    }
    (void)backend_->destroyEvent(it->first);
    event_flags_.erase(it->first);
    it = events_.erase(it);
  }
  int phys = physical(dev);
  s = backend_->afterDeviceDone(
      dev,
      [this, dev, mine, mods, objects = std::move(objects)] {
        for (uint64_t t : objects.textures) (void)backend_->destroyTexture(dev, t);
        for (uint64_t t : objects.surfaces) (void)backend_->destroySurface(dev, t);
        for (auto& [handle, bytes] : objects.arrays) (void)backend_->destroyArray(handle);
        for (uint64_t b : mine) (void)backend_->release(b);
        for (uint32_t id : mods) (void)backend_->unloadModule(id);  // (one that never loaded: unknown, ignored)
        return Status::ok();
      },
      [this, seq, phys, charge](Status) {
        pool_.release(phys, charge);
        sendReply(seq, Status::ok(), nullptr);
      });
  if (!s) finish(h, s);
  return Status::ok();
}

Status Session::onHostFuncEnqueue(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getHostFuncEnqueue();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  uint64_t id = m.getId();
  if (s) s = enqueueHostFunc(key, id);
  finish(h, s);
  return Status::ok();
}

Status Session::reserveHostFunc(uint64_t id) {
  const auto& L = cfg_.limits;
  std::lock_guard lock(host_mu_);
  if (host_pending_.size() >= L.max_pending_host_funcs)
    return Status(err::kLaunchOutOfResources, "too many pending host functions (max_pending_host_funcs = " +
                                                  std::to_string(L.max_pending_host_funcs) + ")");
  if (!host_pending_.insert(id).second) return Status(err::kInvalidValue, "host function id in use");
  return Status::ok();
}

void Session::runHostFunc(uint64_t id) {
  sendNotify([id](wire::Notify::Builder& n) { n.setHostFuncReady(id); });
  std::unique_lock lock(host_mu_);
  host_cv_.wait(lock, [&] { return closing_ || !host_pending_.count(id); });
}

Status Session::enqueueHostFunc(StreamKey key, uint64_t id) {
  RGPU_TRY(reserveHostFunc(id));
  Status s = backend_->hostCall(key, [this, id] { runHostFunc(id); });
  if (!s) {
    std::lock_guard lock(host_mu_);
    host_pending_.erase(id);
  }
  return s;
}

Status Session::onHostFuncDone(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  {
    std::lock_guard lock(host_mu_);
    host_pending_.erase(req.getHostFuncDone().getId());
  }
  host_cv_.notify_all();
  finish(h, Status::ok());
  return Status::ok();
}

}  // namespace rgpu::server
