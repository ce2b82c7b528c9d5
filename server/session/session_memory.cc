// The session's memory requests: allocation and free, copies of every kind,
// memset, memory information, pointer attributes. Every pointer and size is
// checked against the session's allocation table before the backend sees it.
#include <chrono>

#include "common/log.h"
#include "common/spin.h"
#include "protocol/frame.h"
#include "server/session/session.h"

namespace rgpu::server {

using protocol::FrameHeader;

namespace {
// A host-to-device copy at least this large waits up to kDirectWait for its
// stream to go idle when a reply that held the stream was just acknowledged.
constexpr uint64_t kDirectWaitBytes = 1ull << 20;
constexpr std::chrono::microseconds kDirectWait{2000};
}  // namespace

void Session::finishCopyIn(const FrameHeader& h, StreamKey key, Status s) {
  if (s && !(h.flags & protocol::kFlagAsync)) {
    const uint64_t seq = h.seq;
    s = backend_->whenStreamDone(key, [this, seq](Status st) { sendReply(seq, st, nullptr); });
    if (s) return;
  }
  finish(h, s);
}

Status Session::onMalloc(const FrameHeader& h, wire::Request::Reader req) {
  auto m = req.getMalloc();
  Status s = checkDevice(m.getDevice());
  bool pitched = m.getPitchHeight() > 0;
  uint64_t w = m.getPitchWidth(), rows = m.getPitchHeight();
  // cudaMallocPitch: the pitch is the backend's, at most a 4 KiB multiple of the width.
  if (s && pitched && (w == 0 || w > (1ull << 40) || rows > (1ull << 40) / ((w + 4095) / 4096 * 4096)))
    s = Status(err::kInvalidValue, "pitched allocation of " + std::to_string(w) + " x " + std::to_string(rows) +
                                       " bytes is out of range");
  uint64_t bytes = pitched ? (w + 4095) / 4096 * 4096 * rows : m.getSize();
  if (s && bytes == 0) {
    finish(h, Status::ok(), [](auto& r) { r.setPtr(0); });
    return Status::ok();
  }
  // More than the device has never fits: refused before the pool counts it
  // (a session's peak memory is what it held, not what it asked for).
  if (s) {
    const uint64_t total = backend_->devices()[static_cast<size_t>(m.getDevice())].total_mem;
    if (total && bytes > total)
      s = Status(err::kMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: more than the device's " +
                                             std::to_string(total));
  }
  if (!s) return finish(h, s), Status::ok();
  // The pool accounts (and, under a quota, first allows) every byte.
  uint64_t charge = chargedBytes(bytes);
  int phys = physical(m.getDevice());
  if (Status q = pool_.reserve(phys, charge, placement_.quota > 0 || placement_.pool_quota > 0); !q) {
    RGPU_LOG_INFO("session {}: cudaMalloc of {} bytes refused: {}", session_id_, bytes, q.message());
    return finish(h, q), Status::ok();
  }
  uint64_t pitch = 0;
  Result<DevPtr> p = Status(err::kUnknown, "");
  if (pitched) {
    auto pp = backend_->allocatePitch(m.getDevice(), w, rows);
    if (pp) {
      p = pp->first;
      pitch = pp->second;
      bytes = pitch * rows;
      pool_.release(phys, charge - chargedBytes(bytes));  // reserved for the widest pitch
      charge = chargedBytes(bytes);
    } else {
      p = pp.status();
    }
  } else {
    p = backend_->allocate(m.getDevice(), bytes);
  }
  if (!p) {
    pool_.release(phys, charge);
    return finish(h, p.status()), Status::ok();
  }
  if (Status a = allocs_.add(*p, bytes, m.getDevice()); !a) {
    uint64_t ptr = *p;
    (void)backend_->afterDeviceDone(m.getDevice(), [this, ptr] { return backend_->release(ptr); },
                                    [this, phys, charge](Status) { pool_.release(phys, charge); });
    return finish(h, a), Status::ok();
  }
  uint64_t ptr = *p;
  if (pitched) {
    finish(h, Status::ok(), [ptr, pitch](auto& r) {
      auto out = r.initPitched();
      out.setPtr(ptr);
      out.setPitch(pitch);
    });
  } else {
    finish(h, Status::ok(), [ptr](auto& r) { r.setPtr(ptr); });
  }
  return Status::ok();
}

Status Session::onFree(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  uint64_t ptr = req.getFree().getPtr();
  if (ptr == 0) return finish(h, Status::ok()), Status::ok();
  auto e = allocs_.remove(ptr);
  if (!e) {
    RGPU_LOG_WARN("session {}: cudaFree of {}: {}", session_id_, hexAddress(ptr), e.status().message());
    return finish(h, e.status()), Status::ok();
  }
  // cudaFree waits for the device: work still queued may use the memory.
  bool async = h.flags & protocol::kFlagAsync;
  int phys = physical(e->device);
  uint64_t charge = chargedBytes(e->size);
  Status s = backend_->afterDeviceDone(e->device, [this, ptr] { return backend_->release(ptr); },
                                       freed(seq, async, phys, charge));
  if (!s) finish(h, s);
  return Status::ok();
}

Done Session::freed(uint64_t seq, bool async, int phys, uint64_t charge) {
  return [this, seq, async, phys, charge](Status r) {
    if (r) pool_.release(phys, charge);  // credited the moment it is free
    if (async) {
      if (!r) recordAsyncError(r);
    } else {
      sendReply(seq, r, nullptr);
    }
  };
}

Status Session::onMemcpyHtoD(const FrameHeader& h, wire::Request::Reader req) {
  auto m = req.getMemcpyHtoD();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  if (s && m.getSize() > protocol::kMaxBulkBytes)
    s = Status(err::kInvalidValue, "copy larger than the frame limit");
  if (s) s = allocs_.check(m.getDst(), m.getSize());
  if (!s) {
    RGPU_LOG_WARN("session {}: host-to-device copy rejected: {}", session_id_, s.message());
    RGPU_TRY(consumeBulk(h, m.getSize(), nullptr));
    return finish(h, s), Status::ok();
  }
  uint8_t* direct = backend_->directWriteTarget(key, m.getDst());
  if (!direct && h.bulk_len >= kDirectWaitBytes && backend_->writesDirectly() && outbox_.holdEnding()) {
    // The stream's last work was a device-to-host copy whose reply waited for
    // the client's acknowledgement, which came just before this request (a
    // program that copies down, then up): it is idle within microseconds.
    // Wait for it a little rather than stage the bytes.
    common::spinFor(kDirectWait, [&] { return (direct = backend_->directWriteTarget(key, m.getDst())) != nullptr; });
  }
  if (direct && h.bulk_len == m.getSize()) {
    RGPU_TRY(reader_->readBulk(h, direct));
    finish(h, Status::ok());
    return Status::ok();
  }
  Staging data;
  RGPU_TRY(consumeBulk(h, m.getSize(), &data));
  if (!data) return finish(h, stagingRefused(m.getSize())), Status::ok();
  finishCopyIn(h, key, backend_->copyToDevice(key, m.getDst(), std::move(data), m.getSize()));
  return Status::ok();
}

Status Session::onMemcpyDtoH(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getMemcpyDtoH();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  if (s && m.getSize() > protocol::kMaxBulkBytes)
    s = Status(err::kInvalidValue, "copy larger than the frame limit");
  if (s) s = allocs_.check(m.getSrc(), m.getSize());
  if (!s) {
    RGPU_LOG_WARN("session {}: device-to-host copy rejected: {}", session_id_, s.message());
    return finish(h, s), Status::ok();
  }
  s = backend_->copyFromDevice(key, m.getSrc(), m.getSize(), replyWith(seq));
  if (!s) finish(h, s);
  return Status::ok();
}

Status Session::onMemcpyDtoD(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getMemcpyDtoD();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  if (s) s = allocs_.check(m.getDst(), m.getSize());
  if (s) s = allocs_.check(m.getSrc(), m.getSize());
  if (s) s = backend_->copyOnDevice(key, m.getDst(), m.getSrc(), m.getSize());
  finish(h, s);
  return Status::ok();
}

Status Session::onMemcpyPeer(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getMemcpyPeer();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  int dd = -1, sd = -1;
  if (s) s = allocs_.check(m.getDst(), m.getSize(), &dd);
  if (s) s = allocs_.check(m.getSrc(), m.getSize(), &sd);
  if (s && (dd != m.getDstDevice() || sd != m.getSrcDevice()))
    s = Status(err::kInvalidValue, "peer copy pointers are not on the devices named");
  if (s) s = backend_->copyPeer(key, m.getDst(), dd, m.getSrc(), sd, m.getSize(), m.getSerialize());
  finish(h, s);
  return Status::ok();
}

Status Session::onMemset(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getMemset();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  if (s) s = allocs_.check(m.getDst(), m.getSize());
  if (s) s = backend_->fill(key, m.getDst(), m.getValue(), m.getSize());
  finish(h, s);
  return Status::ok();
}

Status Session::onMemset2D(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getMemset2D();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  if (s) s = allocs_.check2D(m.getDst(), m.getPitch(), m.getWidth(), m.getHeight());
  const unsigned es = m.getElementSize() ? m.getElementSize() : 1;
  if (s && es != 1 && es != 2 && es != 4) s = Status(err::kInvalidValue, "memset element size must be 1, 2 or 4");
  if (s && (m.getWidth() % es != 0 || (m.getHeight() > 1 && m.getPitch() % es != 0)))
    s = Status(err::kInvalidValue, "memset width and pitch must be multiples of the element size");
  if (s && es == 1) s = backend_->fill2D(key, m.getDst(), m.getPitch(), m.getValue(), m.getWidth(), m.getHeight());
  else if (s) s = backend_->fillPattern2D(key, m.getDst(), m.getPitch(), m.getPattern(), es, m.getWidth(), m.getHeight());
  finish(h, s);
  return Status::ok();
}

Status Session::onMemcpy2D(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  auto m = req.getMemcpy2D();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  uint64_t w = m.getWidth(), ht = m.getHeight();
  bool h2d = m.getKind() == 1, d2h = m.getKind() == 2, d2d = m.getKind() == 3;
  if (s && !(h2d || d2h || d2d)) s = Status(err::kInvalidMemcpyDirection, "bad 2D copy kind");
  if (s && (h2d || d2h) && (ht != 0 && w > protocol::kMaxBulkBytes / ht))
    s = Status(err::kInvalidValue, "2D copy larger than the frame limit");
  if (s && (h2d || d2d)) s = allocs_.check2D(m.getDst(), m.getDpitch(), w, ht);
  if (s && (d2h || d2d)) s = allocs_.check2D(m.getSrc(), m.getSpitch(), w, ht);
  if (h2d) {
    if (!s) {
      RGPU_TRY(consumeBulk(h, h.bulk_len, nullptr));
      return finish(h, s), Status::ok();
    }
    Staging data;
    RGPU_TRY(consumeBulk(h, w * ht, &data));
    if (!data) return finish(h, stagingRefused(w * ht)), Status::ok();
    finishCopyIn(h, key, backend_->copy2DToDevice(key, m.getDst(), m.getDpitch(), std::move(data), w, ht));
    return Status::ok();
  }
  RGPU_TRY(bulkNotExpected(h));
  if (s && d2h) {
    s = backend_->copy2DFromDevice(key, m.getSrc(), m.getSpitch(), w, ht, replyWith(seq));
    if (!s) finish(h, s);
    return Status::ok();
  }
  if (s) s = backend_->copy2DOnDevice(key, m.getDst(), m.getDpitch(), m.getSrc(), m.getSpitch(), w, ht);
  finish(h, s);
  return Status::ok();
}

Status Session::onMemGetInfo(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  int dev = req.getMemGetInfo().getDevice();
  uint64_t free = 0, total = 0;
  Status s = checkDevice(dev);
  if (s) s = backend_->memInfo(dev, free, total);
  if (s && placement_.quota) {
    // The quota-limited view: what this user may still allocate here.
    auto [quota, used] = pool_.quotaView(physical(dev));
    if (quota) {
      total = std::min(total, quota);
      free = std::min(free, quota > used ? quota - used : 0);
    }
  }
  finish(h, s, [free, total](auto& r) {
    auto mi = r.initMemInfo();
    mi.setFree(free);
    mi.setTotal(total);
  });
  return Status::ok();
}

Status Session::onPointerAttributes(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  uint64_t base = 0;
  const AllocationTable::Entry* e = allocs_.find(req.getPointerAttributes().getPtr(), &base);
  if (!e) return finish(h, Status(err::kInvalidValue, "not a device pointer of this session")), Status::ok();
  int dev = e->device;
  uint64_t size = e->size;
  finish(h, Status::ok(), [dev, base, size](auto& r) {
    auto p = r.initPointer();
    p.setDevice(dev);
    p.setBase(base);
    p.setSize(size);
  });
  return Status::ok();
}

}  // namespace rgpu::server
