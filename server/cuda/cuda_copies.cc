// CudaBackend's memory and copies: allocations, pinned staging buffers,
// host<->device, device, peer and 2D copies, fills; and the accounting that
// keeps a query from overtaking a download's reply (see cuda_backend.h).
#include <algorithm>
#include <bit>
#include <cstring>

#include "common/spin.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {
namespace {
constexpr uint64_t kMinPinned = 64 * 1024;
}  // namespace

// ---- memory ---------------------------------------------------------------

Result<CudaBackend::Pinned> CudaBackend::takePinned(uint64_t size) {
  uint64_t cap = std::max(kMinPinned, std::bit_ceil(size));
  {
    std::lock_guard lock(pinned_mu_);
    auto it = idle_pinned_.find(cap);
    if (it != idle_pinned_.end()) {
      Pinned p = it->second;
      idle_pinned_.erase(it);
      idle_pinned_bytes_ -= cap;
      return p;
    }
  }
  DriverApi& api = *api_;
  void* p = nullptr;
  RGPU_TRY(RGPU_CU(cuMemHostAlloc(&p, cap, CU_MEMHOSTALLOC_PORTABLE)));
  return Pinned{static_cast<uint8_t*>(p), cap};
}

void CudaBackend::givePinned(Pinned p) {
  if (!p.data) return;  // none was taken (a reply without bytes)
  {
    std::lock_guard lock(pinned_mu_);
    if (idle_pinned_bytes_ + p.capacity <= opts_.staging_pool_bytes) {
      idle_pinned_.emplace(p.capacity, p);
      idle_pinned_bytes_ += p.capacity;
      return;
    }
  }
  // cuMemFreeHost may synchronise: not on the completer, which calls this.
  toReleaser([this, p] {
    if (use(0)) (void)api_->cuMemFreeHost(p.data);
  });
}

// The memset is queued on the scrub stream and not waited for: every stream
// of the session waits for the scrubs queued before its next work
// (afterScrubsLocked, from streamOf), so nothing the session queues can run
// before its memory is zeroed, and nothing it wrote can be zeroed after.
Status CudaBackend::scrub(int device, CUdeviceptr p, uint64_t bytes) {
  if (!opts_.scrub || bytes == 0) return Status::ok();
  DriverApi& api = *api_;
  Device& d = devices_[static_cast<size_t>(device)];
  RGPU_TRY(scrubReady(device, 0));
  harvestScrubTime(device, false);
  const bool timed = d.timed_pending == 0;
  if (timed) RGPU_TRY(RGPU_CU(cuEventRecord(d.scrub_start, d.scrub_stream)));
  RGPU_TRY(RGPU_CU(cuMemsetD8Async(p, 0, bytes, d.scrub_stream)));
  return scrubQueued(device, bytes);
}

Status CudaBackend::scrubQueued(int device, uint64_t bytes) {
  DriverApi& api = *api_;
  Device& d = devices_[static_cast<size_t>(device)];
  RGPU_TRY(RGPU_CU(cuEventRecord(d.scrub_done, d.scrub_stream)));
  // Still running when the next is queued behind it: timed together (the
  // stream is busy in between, so the span is all scrubbing).
  d.timed_pending += bytes;
  scrubbed_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  d.scrubbed = true;
  ++scrub_epoch_;
  return Status::ok();
}

void CudaBackend::harvestScrubTime(int device, bool wait) {
  DriverApi& api = *api_;
  Device& d = devices_[static_cast<size_t>(device)];
  if (!d.timed_pending || !d.scrub_done || !d.scrub_start) return;
  CUresult r = wait ? api.cuEventSynchronize(d.scrub_done) : api.cuEventQuery(d.scrub_done);
  if (r != CUDA_SUCCESS) return;  // still running (or failed: not timed)
  float ms = 0;
  if (api.cuEventElapsedTime && api.cuEventElapsedTime(&ms, d.scrub_start, d.scrub_done) == CUDA_SUCCESS) {
    scrub_ns_.fetch_add(static_cast<uint64_t>(static_cast<double>(ms) * 1e6), std::memory_order_relaxed);
    scrub_timed_bytes_.fetch_add(d.timed_pending, std::memory_order_relaxed);
  }
  d.timed_pending = 0;
}

Status CudaBackend::scrubsDone(int device) {
  DriverApi& api = *api_;
  CUevent e = nullptr;
  {
    std::lock_guard lock(mu_);
    const Device& d = devices_[static_cast<size_t>(device)];
    if (d.scrubbed) e = d.scrub_done;
  }
  return e ? RGPU_CU(cuEventSynchronize(e)) : Status::ok();
}

Status CudaBackend::afterScrubsLocked(CUstream handle, uint64_t* seen) {
  if (*seen == scrub_epoch_) return Status::ok();
  DriverApi& api = *api_;
  // Every device's: a stream's work may read memory of its peers too.
  for (const Device& d : devices_)
    if (d.scrubbed) RGPU_TRY(RGPU_CU(cuStreamWaitEvent(handle, d.scrub_done, 0)));
  *seen = scrub_epoch_;
  return Status::ok();
}

Status CudaBackend::scrubReady(int device, uint64_t zero_bytes) {
  DriverApi& api = *api_;
  Device& d = devices_[static_cast<size_t>(device)];
  if (!d.scrub_stream) RGPU_TRY(RGPU_CU(cuStreamCreateWithPriority(&d.scrub_stream, CU_STREAM_NON_BLOCKING, 0)));
  if (!d.scrub_done) RGPU_TRY(RGPU_CU(cuEventCreate(&d.scrub_done, CU_EVENT_DEFAULT)));  // timed: see harvestScrubTime
  if (!d.scrub_start) RGPU_TRY(RGPU_CU(cuEventCreate(&d.scrub_start, CU_EVENT_DEFAULT)));
  if (zero_bytes <= d.scrub_zero_bytes) return Status::ok();
  if (d.scrub_zero) {
    // Copies from it may be queued: wait for them.
    RGPU_TRY(RGPU_CU(cuEventRecord(d.scrub_done, d.scrub_stream)));
    RGPU_TRY(RGPU_CU(cuEventSynchronize(d.scrub_done)));
    (void)api.cuMemFree(d.scrub_zero);
    d.scrub_zero = 0;
    d.scrub_zero_bytes = 0;
  }
  const uint64_t bytes = std::max<uint64_t>(zero_bytes, kScrubZeroBytes);
  RGPU_TRY(RGPU_CU(cuMemAlloc(&d.scrub_zero, bytes)));
  d.scrub_zero_bytes = bytes;
  return RGPU_CU(cuMemsetD8Async(d.scrub_zero, 0, bytes, d.scrub_stream));  // before any copy from it, in stream order
}

Result<DevPtr> CudaBackend::allocate(int device, uint64_t size) {
  DriverApi& api = *api_;
  RGPU_TRY(use(device));
  if (windows_ && windows_->has(device)) return windowed(device, size);
  CUdeviceptr p = 0;
  CUresult r = api.cuMemAlloc(&p, std::max<uint64_t>(size, 1));
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return Status(err::kMemoryAllocation,
                  "out of memory on device " + std::to_string(device) + ": asked " + std::to_string(size) + " bytes");
  RGPU_TRY(api.check(r, "cuMemAlloc", __FILE__, __LINE__));
  if (Status s = scrub(device, p, size); !s) {
    (void)api.cuMemFree(p);
    return s;
  }
  std::lock_guard lock(mu_);
  allocations_[p] = device;
  return static_cast<DevPtr>(p);
}

Result<DevPtr> CudaBackend::windowed(int device, uint64_t size) {
  auto p = windows_->allocate(device, size);
  if (!p) return p.status();
  if (Status s = scrub(device, *p, size); !s) {
    (void)windows_->release(*p);
    return s;
  }
  std::lock_guard lock(mu_);
  allocations_[*p] = device;
  return static_cast<DevPtr>(*p);
}

Result<std::pair<DevPtr, uint64_t>> CudaBackend::allocatePitch(int device, uint64_t width, uint64_t height) {
  DriverApi& api = *api_;
  RGPU_TRY(use(device));
  if (windows_ && windows_->has(device)) {
    // Rows 512-byte aligned, as cuMemAllocPitch's on current GPUs.
    const uint64_t pitch = (width + 511) / 512 * 512;
    if (width == 0 || height == 0 || pitch < width || pitch > UINT64_MAX / height)
      return Status(err::kInvalidValue, "cannot allocate " + std::to_string(width) + " x " + std::to_string(height) +
                                            " bytes");
    auto p = windowed(device, pitch * height);
    if (!p) return p.status();
    return std::make_pair(*p, pitch);
  }
  CUdeviceptr p = 0;
  size_t pitch = 0;
  // 16-byte elements: rows suit the widest loads a kernel may make.
  CUresult r = api.cuMemAllocPitch(&p, &pitch, width, height, 16);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return Status(err::kMemoryAllocation, "out of memory on device " + std::to_string(device) + ": asked " +
                                              std::to_string(width) + " x " + std::to_string(height) + " bytes");
  RGPU_TRY(api.check(r, "cuMemAllocPitch", __FILE__, __LINE__));
  if (pitch < width || pitch > (width + 4095) / 4096 * 4096) {
    (void)api.cuMemFree(p);
    return Status(err::kUnknown, "cuMemAllocPitch chose pitch " + std::to_string(pitch) + " for rows of " +
                                     std::to_string(width) + " bytes");
  }
  if (Status s = scrub(device, p, static_cast<uint64_t>(pitch) * height); !s) {
    (void)api.cuMemFree(p);
    return s;
  }
  std::lock_guard lock(mu_);
  allocations_[p] = device;
  return std::make_pair(static_cast<DevPtr>(p), static_cast<uint64_t>(pitch));
}

Status CudaBackend::release(DevPtr ptr) {
  DriverApi& api = *api_;
  std::lock_guard peek(peek_mu_);  // no pre-copy reads it as it goes
  int device;
  {
    std::lock_guard lock(mu_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return Status(err::kInvalidDevicePointer, "not an allocation");
    device = it->second;
    allocations_.erase(it);
  }
  RGPU_TRY(use(device));
  RGPU_TRY(scrubsDone(device));
  if (windows_ && windows_->release(ptr)) return Status::ok();
  return RGPU_CU(cuMemFree(ptr));
}

Status CudaBackend::memInfo(int device, uint64_t& free, uint64_t& total) {
  DriverApi& api = *api_;
  RGPU_TRY(use(device));
  size_t f = 0, t = 0;
  RGPU_TRY(RGPU_CU(cuMemGetInfo(&f, &t)));
  free = f;
  total = t;
  return Status::ok();
}

// ---- stream-ordered work --------------------------------------------------

Status CudaBackend::afterUpload(int device, CUstream stream, Pinned pin, Staging charge, Status enqueued) {
  // The staged bytes are in `pin` now; the (emptied) Staging still counts
  // against the session's staging budget until the copy has run.
  charge->clear();
  charge->shrink_to_fit();
  if (!enqueued) {
    givePinned(pin);
    return enqueued;
  }
  // If this fails the copy's end is unknown: the buffer is leaked, never reused early.
  return whenDone(device, {stream}, [this, pin, charge](Status) { givePinned(pin); });
}

std::shared_ptr<CudaBackend::Replies> CudaBackend::repliesLocked(StreamKey key) {
  if (key.id == 0) return devices_[key.device].legacy_replies;
  auto it = streams_.find(key.id);
  return it == streams_.end() ? nullptr : it->second.replies;
}

bool CudaBackend::repliesOnWireLocked(StreamKey key) {
  auto done = [](const std::shared_ptr<Replies>& r) { return !r || r->written == r->issued; };
  if (!done(repliesLocked(key))) return false;
  // The legacy stream waits for the device's blocking streams; a blocking stream for the legacy one.
  bool legacy = key.id == 0;
  if (!legacy) {
    auto it = streams_.find(key.id);
    if (it == streams_.end() || it->second.non_blocking) return true;
    return done(devices_[it->second.device].legacy_replies);
  }
  for (auto& [id, s] : streams_)
    if (s.device == key.device && !s.non_blocking && !done(s.replies)) return false;
  return true;
}

Status CudaBackend::afterDownload(StreamKey key, int device, CUstream stream, Pinned pin, uint64_t size, ReadDone done,
                                  Status enqueued) {
  if (!enqueued) {
    givePinned(pin);
    return enqueued;
  }
  std::shared_ptr<Replies> replies;
  {
    std::lock_guard lock(mu_);
    replies = repliesLocked(key);
    if (replies) ++replies->issued;
  }
  Status s = whenDone(device, {stream}, [this, pin, size, replies, done = std::move(done)](Status st) {
    done(st, pin.data, size, [this, replies] {
      if (!replies) return;
      ++replies->written;
      // Host functions queued after this download may go now.
      { std::lock_guard lock(host_calls_->mu); }
      host_calls_->cv.notify_all();
    });
    givePinned(pin);
  });
  if (!s && replies) {
    std::lock_guard lock(mu_);
    --replies->issued;
  }
  return s;
}

Status CudaBackend::copyToDevice(StreamKey key, DevPtr dst, Staging data, uint64_t size) {
  if (capture_.active) return notCapturable("a host-to-device copy");
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  auto pin = takePinned(size);
  if (!pin) return pin.status();
  std::memcpy(pin->data, data->data(), size);
  return afterUpload(s->first, s->second, *pin, std::move(data),
                     RGPU_CU(cuMemcpyHtoDAsync(dst, pin->data, size, s->second)));
}

Status CudaBackend::copyFromDevice(StreamKey key, DevPtr src, uint64_t size, ReadDone done) {
  if (capture_.active) return notCapturable("a device-to-host copy");
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  auto pin = takePinned(size);
  if (!pin) return pin.status();
  return afterDownload(key, s->first, s->second, *pin, size, std::move(done),
                       RGPU_CU(cuMemcpyDtoHAsync(pin->data, src, size, s->second)));
}

Status CudaBackend::copyOnDevice(StreamKey key, DevPtr dst, DevPtr src, uint64_t size) {
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  return RGPU_CU(cuMemcpyDtoDAsync(dst, src, size, s->second));
}

Status CudaBackend::copyPeer(StreamKey key, DevPtr dst, int dst_device, DevPtr src, int src_device, uint64_t size,
                             bool serialize) {
  if (capture_.active && serialize) return notCapturable("a synchronous peer copy");
  DriverApi& api = *api_;
  if (!serialize) return copyOnDevice(key, dst, src, size);  // unified addressing: one copy, in stream order
  auto s = streamOf(key);
  if (!s) return s.status();
  int here = s->first;
  CUstream copy_stream = s->second;
  std::vector<int> others;
  for (int d : {src_device, dst_device})
    if (d != here && (others.empty() || others[0] != d)) others.push_back(d);
  // Events only order here; the driver frees each once its record has
  // completed, even if destroyed before.
  auto fence = [&](int device, CUstream from, CUstream to, int to_device) -> Status {
    RGPU_TRY(use(device));
    CUevent e = nullptr;
    RGPU_TRY(RGPU_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING)));
    Status r = RGPU_CU(cuEventRecord(e, from));
    if (r) r = use(to_device);
    if (r) r = RGPU_CU(cuStreamWaitEvent(to, e, 0));
    (void)api.cuEventDestroy(e);
    return r;
  };
  // After the work queued so far on the other devices' legacy streams ...
  for (int d : others) RGPU_TRY(fence(d, CU_STREAM_LEGACY, copy_stream, here));
  RGPU_TRY(use(here));
  RGPU_TRY(RGPU_CU(cuMemcpyDtoDAsync(dst, src, size, copy_stream)));
  // ... and before the work queued there later.
  for (int d : others) RGPU_TRY(fence(here, copy_stream, CU_STREAM_LEGACY, d));
  return use(here);
}

namespace {
CUDA_MEMCPY2D copy2D(uint64_t width, uint64_t height) {
  CUDA_MEMCPY2D m;
  std::memset(&m, 0, sizeof m);
  m.WidthInBytes = width;
  m.Height = height;
  return m;
}
}  // namespace

Status CudaBackend::memcpy2D(const CUDA_MEMCPY2D& m, CUstream stream) {
  DriverApi& api = *api_;
  CUresult r = api.cuMemcpy2DAsync(&m, stream);
  if (r != CUDA_ERROR_INVALID_VALUE) return api.check(r, "cuMemcpy2DAsync", __FILE__, __LINE__);
  // "cuMemcpy2D() may fail for pitches not computed by cuMemAllocPitch()"
  // (a program may pick its own): row by row then, in the same stream order.
  for (size_t row = 0; row < m.Height; ++row) {
    uint64_t so = row * m.srcPitch, d = row * m.dstPitch;
    bool src_dev = m.srcMemoryType == CU_MEMORYTYPE_DEVICE, dst_dev = m.dstMemoryType == CU_MEMORYTYPE_DEVICE;
    if (src_dev && dst_dev) r = api.cuMemcpyDtoDAsync(m.dstDevice + d, m.srcDevice + so, m.WidthInBytes, stream);
    else if (dst_dev) r = api.cuMemcpyHtoDAsync(m.dstDevice + d, static_cast<const uint8_t*>(m.srcHost) + so, m.WidthInBytes, stream);
    else r = api.cuMemcpyDtoHAsync(static_cast<uint8_t*>(m.dstHost) + d, m.srcDevice + so, m.WidthInBytes, stream);
    if (r != CUDA_SUCCESS) return api.check(r, "cuMemcpy*Async (a 2D copy by rows)", __FILE__, __LINE__);
  }
  return Status::ok();
}

Status CudaBackend::copy2DToDevice(StreamKey key, DevPtr dst, uint64_t dpitch, Staging data, uint64_t width,
                                   uint64_t height) {
  if (capture_.active) return notCapturable("a host-to-device copy");
  auto s = streamOf(key);
  if (!s) return s.status();
  uint64_t size = width * height;
  auto pin = takePinned(size);
  if (!pin) return pin.status();
  std::memcpy(pin->data, data->data(), size);
  CUDA_MEMCPY2D m = copy2D(width, height);
  m.srcMemoryType = CU_MEMORYTYPE_HOST;
  m.srcHost = pin->data;
  m.srcPitch = width;
  m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.dstDevice = dst;
  m.dstPitch = dpitch;
  return afterUpload(s->first, s->second, *pin, std::move(data), memcpy2D(m, s->second));
}

Status CudaBackend::copy2DFromDevice(StreamKey key, DevPtr src, uint64_t spitch, uint64_t width, uint64_t height,
                                     ReadDone done) {
  if (capture_.active) return notCapturable("a device-to-host copy");
  auto s = streamOf(key);
  if (!s) return s.status();
  uint64_t size = width * height;
  auto pin = takePinned(size);
  if (!pin) return pin.status();
  CUDA_MEMCPY2D m = copy2D(width, height);
  m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  m.srcDevice = src;
  m.srcPitch = spitch;
  m.dstMemoryType = CU_MEMORYTYPE_HOST;
  m.dstHost = pin->data;
  m.dstPitch = width;
  return afterDownload(key, s->first, s->second, *pin, size, std::move(done), memcpy2D(m, s->second));
}

Status CudaBackend::copy2DOnDevice(StreamKey key, DevPtr dst, uint64_t dpitch, DevPtr src, uint64_t spitch,
                                   uint64_t width, uint64_t height) {
  auto s = streamOf(key);
  if (!s) return s.status();
  CUDA_MEMCPY2D m = copy2D(width, height);
  m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  m.srcDevice = src;
  m.srcPitch = spitch;
  m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.dstDevice = dst;
  m.dstPitch = dpitch;
  return memcpy2D(m, s->second);
}

Status CudaBackend::fill(StreamKey key, DevPtr dst, uint8_t value, uint64_t size) {
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  return RGPU_CU(cuMemsetD8Async(dst, value, size, s->second));
}

Status CudaBackend::fillPattern2D(StreamKey key, DevPtr dst, uint64_t pitch, uint32_t pattern, unsigned element_size,
                                  uint64_t width, uint64_t height) {
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  if (height <= 1) pitch = width;
  if (element_size == 2)
    return RGPU_CU(cuMemsetD2D16Async(dst, pitch, static_cast<unsigned short>(pattern), width / 2, height, s->second));
  return RGPU_CU(cuMemsetD2D32Async(dst, pitch, pattern, width / 4, height, s->second));
}

Status CudaBackend::fill2D(StreamKey key, DevPtr dst, uint64_t pitch, uint8_t value, uint64_t width,
                           uint64_t height) {
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  return RGPU_CU(cuMemsetD2D8Async(dst, pitch, value, width, height, s->second));
}

}  // namespace rgpu::server::cuda
