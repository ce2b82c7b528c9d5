#include "server/cuda/cuda_backend.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "common/fatbin.h"
#include "common/log.h"
#include "common/spin.h"
#include "protocol/frame.h"
#include "server/backend/device_props.h"
#include "server/cuda/device_heap_ptx.h"

namespace rgpu::server::cuda {
namespace {

// The context made current on this thread by the last use(); saves a driver
// call per operation.
thread_local CUcontext t_current = nullptr;

Status unknownStream(StreamKey k) {
  return Status(err::kInvalidResourceHandle, "unknown stream " + std::to_string(k.id));
}
Status unknownEvent(uint32_t id) { return Status(err::kInvalidResourceHandle, "unknown event " + std::to_string(id)); }

}  // namespace

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaOptions& opts) {
  auto api = DriverApi::load(opts.driver_library);
  if (!api) return api.status();
  std::unique_ptr<CudaBackend> b(new CudaBackend(std::move(*api), opts));
  RGPU_TRY(b->init());
  b->completer_ = std::thread([raw = b.get()] { raw->completerLoop(); });
  b->releaser_ = std::thread([raw = b.get()] { raw->releaserLoop(); });
  return b;
}

CudaBackend::CudaBackend(std::unique_ptr<DriverApi> api, const CudaOptions& opts)
    : api_(std::move(api)), opts_(opts) {}

Status CudaBackend::init() {
  DriverApi& api = *api_;
  CUresult r = api.cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE) return Status(err::kNoDevice, "the CUDA driver (" + api.library() + ") sees no GPU");
  RGPU_TRY(api.check(r, "cuInit", __FILE__, __LINE__));
  RGPU_TRY(RGPU_CU(cuDriverGetVersion(&driver_version_)));
  int count = 0;
  RGPU_TRY(RGPU_CU(cuDeviceGetCount(&count)));
  if (count <= 0) return Status(err::kNoDevice, "the CUDA driver (" + api.library() + ") sees no GPU");
  std::vector<int> ordinals = opts_.devices;
  if (ordinals.empty())
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  devices_.resize(ordinals.size());
  legacy_scrub_seen_ = std::vector<std::atomic<uint64_t>>(ordinals.size());
  for (size_t i = 0; i < ordinals.size(); ++i) {
    Device& d = devices_[i];
    if (ordinals[i] < 0 || ordinals[i] >= count)
      return Status(err::kInvalidDevice, "device " + std::to_string(ordinals[i]) + " does not exist (the driver sees " +
                                             std::to_string(count) + ")");
    RGPU_TRY(RGPU_CU(cuDeviceGet(&d.dev, ordinals[i])));
    RGPU_TRY(RGPU_CU(cuDevicePrimaryCtxRetain(&d.ctx, d.dev)));
    char name[256] = {};
    RGPU_TRY(RGPU_CU(cuDeviceGetName(name, sizeof name - 1, d.dev)));
    CUuuid uuid{};
    RGPU_TRY(RGPU_CU(cuDeviceGetUuid(&uuid, d.dev)));
    size_t total = 0;
    RGPU_TRY(RGPU_CU(cuDeviceTotalMem(&total, d.dev)));
    CUdevice dev = d.dev;
    descriptions_.push_back(describeDevice(name, std::string(uuid.bytes, 16), total, [&](int a) {
      int v = 0;
      if (api.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), dev) != CUDA_SUCCESS) v = 0;
      return v;
    }));
    RGPU_LOG_INFO("cuda: device {} (host GPU {}): {}, compute capability {}.{}, {} SMs, {} MiB", i, ordinals[i], name,
                  descriptions_.back().major, descriptions_.back().minor, descriptions_.back().sm_count, total >> 20);
  }
  if (opts_.address_window || opts_.fixed_addresses) {
    std::vector<WindowedMemory::DeviceInfo> infos;
    for (size_t i = 0; i < devices_.size(); ++i) infos.push_back({devices_[i].dev, descriptions_[i].total_mem});
    windows_ = WindowedMemory::create(api, infos, opts_.address_window, [this](int i) { return use(i); });
  }
  return Status::ok();
}

void CudaBackend::stopThreads() {
  {
    // The session has told its host functions to return; wait for those running.
    std::unique_lock lock(host_calls_->mu);
    host_calls_->alive = false;
    host_calls_->cv.notify_all();  // those waiting for replies return
    host_calls_->cv.wait(lock, [&] { return host_calls_->running == 0; });
  }
  {
    std::lock_guard lock(jobs_mu_);
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  if (completer_.joinable()) completer_.join();
  {
    // The releaser finishes what is queued (frees, unloads, their callbacks) first.
    std::lock_guard lock(release_mu_);
    release_stop_ = true;
  }
  release_cv_.notify_all();
  if (releaser_.joinable()) releaser_.join();
}

void CudaBackend::toReleaser(std::function<void()> work) {
  {
    std::lock_guard lock(release_mu_);
    releases_.push_back(std::move(work));
  }
  release_cv_.notify_one();
}

void CudaBackend::releaserLoop() {
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(release_mu_);
      release_cv_.wait(lock, [&] { return release_stop_ || !releases_.empty(); });
      if (releases_.empty()) return;  // stopping, and nothing left
      work = std::move(releases_.front());
      releases_.pop_front();
    }
    work();
  }
}

Status CudaBackend::afterDeviceDone(int device, std::function<Status()> work, Done done) {
  return whenDeviceDone(device, [this, work = std::move(work), done = std::move(done)](Status) mutable {
    toReleaser([work = std::move(work), done = std::move(done)] { done(work()); });
  });
}

CudaBackend::~CudaBackend() {
  stopThreads();
  releaseGraphs();
  releaseBlas();
  releaseFft();
  releaseSolver();
  releaseSparse();
  releaseDnn();
  DriverApi& api = *api_;
  // Jobs the completer left pending: their events go with the spares below.
  for (Job& j : jobs_) {
    auto& d = devices_[j.device];
    d.spare_events.insert(d.spare_events.end(), j.events.begin(), j.events.end());
    for (CUevent e : j.timed)
      if (e) d.spare_timed.push_back(e);
  }
  jobs_.clear();
  // Callbacks of work still pending are dropped: the session is going away.
  for (auto& [id, s] : streams_)
    if (use(s.device)) (void)api.cuStreamDestroy(s.handle);
  for (auto& s : retired_)
    if (use(s.device)) (void)api.cuStreamDestroy(s.handle);
  for (auto& [id, e] : events_)
    if (use(e.device)) (void)api.cuEventDestroy(e.handle);
  for (auto& [id, m] : modules_)
    if (use(m.device)) (void)api.cuModuleUnload(m.handle);
  for (size_t d = 0; d < devices_.size(); ++d)
    if (use(static_cast<int>(d))) harvestScrubTime(static_cast<int>(d), true);
  if (const uint64_t b = scrubbed_bytes_.load())
    RGPU_LOG_INFO("scrub: {} MiB of fresh device memory zeroed before the session used it; the device took {:.1f} ms "
                  "for {} MiB of it ({:.1f} GB/s)",
                  b >> 20, scrub_ns_.load() / 1e6, scrub_timed_bytes_.load() >> 20,
                  static_cast<double>(scrub_timed_bytes_.load()) / std::max<uint64_t>(scrub_ns_.load(), 1));
  for (auto& [ptr, dev] : allocations_)
    if (!(windows_ && windows_->owns(ptr)) && use(dev)) (void)api.cuMemFree(ptr);
  windows_.reset();  // unmaps what is left, while the contexts live
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!use(static_cast<int>(d))) continue;
    for (CUevent e : devices_[d].spare_events) (void)api.cuEventDestroy(e);
    for (CUevent e : devices_[d].spare_timed) (void)api.cuEventDestroy(e);
    if (devices_[d].scrub_zero) (void)api.cuMemFree(devices_[d].scrub_zero);
    if (devices_[d].scrub_done) (void)api.cuEventDestroy(devices_[d].scrub_done);
    if (devices_[d].scrub_start) (void)api.cuEventDestroy(devices_[d].scrub_start);
    if (devices_[d].scrub_stream) (void)api.cuStreamDestroy(devices_[d].scrub_stream);
    if (devices_[d].peek_done) (void)api.cuEventDestroy(devices_[d].peek_done);
    if (devices_[d].peek_stream) (void)api.cuStreamDestroy(devices_[d].peek_stream);
  }
  if (!devices_.empty() && use(0))
    for (auto& [cap, p] : idle_pinned_) (void)api.cuMemFreeHost(p.data);
  for (auto& d : devices_)
    if (d.ctx) (void)api.cuDevicePrimaryCtxRelease(d.dev);
  t_current = nullptr;
  if (saved_stdout_ >= 0) {
    // Restoring fd 1 drops the pipe's last write end: the reader sees EOF.
    std::fflush(stdout);
    ::dup2(saved_stdout_, 1);
    ::close(saved_stdout_);
    if (out_reader_.joinable()) out_reader_.join();
    ::close(out_fd_);
  }
}

Status CudaBackend::use(int device) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device " + std::to_string(device));
  CUcontext ctx = devices_[device].ctx;
  if (t_current == ctx) return Status::ok();
  DriverApi& api = *api_;
  RGPU_TRY(RGPU_CU(cuCtxSetCurrent(ctx)));
  t_current = ctx;
  return Status::ok();
}

Status CudaBackend::setPrintfFifo(int device, uint64_t bytes) {
  RGPU_TRY(use(device));
  DriverApi& api = *api_;
  return RGPU_CU(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, bytes));
}

void CudaBackend::setAsyncErrorSink(std::function<void(Status)> sink) {
  std::lock_guard lock(mu_);
  async_sink_ = std::move(sink);
}

void CudaBackend::setFatalSink(std::function<void(Status)> sink) {
  std::lock_guard lock(mu_);
  fatal_sink_ = std::move(sink);
}

void CudaBackend::setOutputSink(std::function<void(std::string)> sink) {
  std::lock_guard lock(out_mu_);
  output_sink_ = std::move(sink);
  if (!opts_.capture_stdout || out_fd_ >= 0) return;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    RGPU_LOG_WARN("cuda: device printf will go to the server's stdout: pipe: {}", std::strerror(errno));
    return;
  }
  std::fflush(stdout);
  saved_stdout_ = ::dup(1);
  ::dup2(fds[1], 1);
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  out_fd_ = fds[0];
  out_reader_ = std::thread([this] { readOutputLoop(); });
}

// Keeps the pipe drained (a driver writing a large printf buffer must never
// block), appending under the lock so the completer's own drain keeps order.
void CudaBackend::readOutputLoop() {
  for (;;) {
    pollfd p{out_fd_, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return;
    std::lock_guard lock(out_mu_);
    char buf[16384];
    for (;;) {
      ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n > 0) {
        // Bounded: a session printing without ever synchronising cannot grow the worker without limit.
        if (out_buf_.size() < (16u << 20)) out_buf_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) return;  // EOF: teardown
      break;               // EAGAIN
    }
  }
}

void CudaBackend::forwardOutput(CUevent done) {
  if (!printf_possible_.load(std::memory_order_relaxed) || out_fd_ < 0) return;
  // Finished already, so this returns at once; it is a synchronisation point,
  // at which the driver writes its printf buffer to stdout. (nullptr: a fault
  // was reported; take what the driver has written.)
  if (done) (void)api_->cuEventSynchronize(done);
  std::fflush(stdout);
  std::string text;
  std::function<void(std::string)> sink;
  {
    std::lock_guard lock(out_mu_);
    char buf[16384];
    ssize_t n;
    while ((n = ::read(out_fd_, buf, sizeof buf)) > 0) out_buf_.append(buf, static_cast<size_t>(n));
    text.swap(out_buf_);
    sink = output_sink_;
  }
  if (!text.empty() && sink) sink(std::move(text));
}

void CudaBackend::reportAsync(const Status& s) {
  std::function<void(Status)> sink;
  {
    std::lock_guard lock(mu_);
    sink = async_sink_;
  }
  if (sink) sink(s);
}

template <typename Map>
std::optional<typename Map::mapped_type> CudaBackend::take(Map& table, uint32_t id) {
  std::lock_guard lock(mu_);
  auto it = table.find(id);
  if (it == table.end()) return std::nullopt;
  auto v = std::move(it->second);
  table.erase(it);
  return v;
}

Result<CudaBackend::Function> CudaBackend::functionOf(uint32_t id) {
  std::lock_guard lock(mu_);
  auto it = functions_.find(id);
  if (it == functions_.end()) return Status(err::kInvalidDeviceFunction, "unknown function");
  return it->second;
}

Result<CudaBackend::Event> CudaBackend::eventOf(uint32_t id) {
  std::lock_guard lock(mu_);
  auto it = events_.find(id);
  if (it == events_.end()) return unknownEvent(id);
  return it->second;
}

Result<std::pair<CUmodule, int>> CudaBackend::moduleOf(uint32_t id) {
  std::lock_guard lock(mu_);
  auto it = modules_.find(id);
  if (it == modules_.end()) return Status(err::kInvalidResourceHandle, "unknown module");
  return std::make_pair(it->second.handle, it->second.device);
}

Result<std::pair<int, CUstream>> CudaBackend::streamOf(StreamKey key) {
  if (capture_.active) {  // every call of a native graph goes to its capture stream
    RGPU_TRY(use(capture_.device));
    return std::make_pair(capture_.device, capture_.stream);
  }
  // Work on a stream comes after every scrub queued before it (scrub()).
  if (key.id == 0) {
    RGPU_TRY(use(key.device));
    if (key.device >= 0 && static_cast<size_t>(key.device) < legacy_scrub_seen_.size()) {
      std::atomic<uint64_t>& seen = legacy_scrub_seen_[static_cast<size_t>(key.device)];
      if (seen.load(std::memory_order_acquire) != scrub_epoch_.load(std::memory_order_acquire)) {
        std::lock_guard lock(mu_);
        uint64_t s = seen.load(std::memory_order_relaxed);
        RGPU_TRY(afterScrubsLocked(CU_STREAM_LEGACY, &s));
        seen.store(s, std::memory_order_release);
      }
    }
    return std::make_pair(key.device, CU_STREAM_LEGACY);
  }
  int device;
  CUstream handle;
  {
    std::lock_guard lock(mu_);
    auto it = streams_.find(key.id);
    if (it == streams_.end()) return unknownStream(key);
    device = it->second.device;
    handle = it->second.handle;
    RGPU_TRY(use(device));
    RGPU_TRY(afterScrubsLocked(handle, &it->second.scrub_seen));
  }
  return std::make_pair(device, handle);
}

// ---- completion -----------------------------------------------------------

void CudaBackend::addJob(Job job) {
  {
    std::lock_guard lock(jobs_mu_);
    jobs_.push_back(std::move(job));
  }
  jobs_cv_.notify_one();
}

Status CudaBackend::whenDone(int device, const std::vector<CUstream>& streams, Done done) {
  DriverApi& api = *api_;
  Job job;
  job.device = device;
  job.done = std::move(done);
  Status r;
  for (CUstream s : streams) {
    CUevent e = nullptr;
    {
      std::lock_guard lock(mu_);
      auto& spare = devices_[device].spare_events;
      if (!spare.empty()) {
        e = spare.back();
        spare.pop_back();
      }
    }
    if (!e && !(r = RGPU_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING)))) break;
    job.events.push_back(e);
    if (!(r = RGPU_CU(cuEventRecord(e, s)))) break;
  }
  if (!r) {
    {
      std::lock_guard lock(mu_);
      for (CUevent x : job.events) devices_[device].spare_events.push_back(x);
    }
    // The fault may have happened before we asked: it is still the stream's error.
    if (err::isSticky(r.code())) reportAsync(r);
    return r;
  }
  addJob(std::move(job));
  return Status::ok();
}

void CudaBackend::completerLoop() {
  DriverApi& api = *api_;
  std::list<Job> mine;
  unsigned idle_rounds = 0;
  for (;;) {
    {
      std::unique_lock lock(jobs_mu_);
      if (mine.empty()) {
        jobs_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        idle_rounds = 0;
      } else if (idle_rounds > 64) {
        // Nothing finished for a while: back off (up to 200 us), waking for new work.
        auto delay = std::chrono::microseconds(std::min(200u, 2u << std::min(idle_rounds - 64, 7u)));
        jobs_cv_.wait_for(lock, delay, [&] { return stopping_ || !jobs_.empty(); });
      }
      if (stopping_) {
        jobs_.splice(jobs_.end(), mine);
        return;
      }
      mine.splice(mine.end(), jobs_);
    }
    // Polled newest first, finished oldest first. Jobs complete in any order
    // (streams run concurrently), but what one job's completion implies of an
    // older one's (same stream, an implicit or event dependency) must show:
    // a synchronisation's reply never overtakes the reply of a download it
    // waited for. Polling the older job after the newer one sees that.
    for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
      Job& j = *it;
      j.status = use(j.device);
      j.complete = true;
      auto poll = [&](CUevent e) {
        CUresult r = api.cuEventQuery(e);
        if (r == CUDA_ERROR_NOT_READY) return j.complete = false;
        if (r != CUDA_SUCCESS) j.status = api.check(r, "cuEventQuery", __FILE__, __LINE__);
        return true;
      };
      while (j.status && j.next < j.events.size() && poll(j.events[j.next])) ++j.next;
      if (j.status && j.complete && j.watched) poll(j.watched);
      if (j.status && !j.complete && !j.kernel.empty() && pastDeadline(j)) {
        // Nothing behind it can complete: the session ends and the worker exits.
        std::lock_guard lock(jobs_mu_);
        jobs_.splice(jobs_.end(), mine);
        return;
      }
    }
    bool progressed = false;
    for (auto it = mine.begin(); it != mine.end();) {
      Job& j = *it;
      Status st = j.status;
      if (st && !j.complete) {
        ++it;
        continue;
      }
      progressed = true;
      if (CUevent last = !j.events.empty() ? j.events.back() : j.watched) forwardOutput(last);
      {
        std::lock_guard lock(mu_);
        auto& spare = devices_[j.device].spare_events;
        spare.insert(spare.end(), j.events.begin(), j.events.end());
      }
      if (!st) reportAsync(st);
      Done done = std::move(j.done);
      std::vector<CUevent> timed = std::move(j.timed);
      int device = j.device;
      it = mine.erase(it);
      done(st);
      if (!timed.empty()) {
        std::lock_guard lock(mu_);
        for (CUevent e : timed)
          if (e) devices_[device].spare_timed.push_back(e);
      }
    }
    if (progressed) idle_rounds = 0;
    else if (++idle_rounds <= 64 && !common::spinYield())
      idle_rounds = 65;  // the cores are busy: back off to sleeps at once (common/spin.h)
  }
}

bool CudaBackend::pastDeadline(Job& j) {
  auto now = std::chrono::steady_clock::now();
  if (j.started == std::chrono::steady_clock::time_point{}) {
    if (api_->cuEventQuery(j.timed[0]) != CUDA_SUCCESS) return false;  // still queued behind other work
    j.started = now;
    return false;
  }
  if (now - j.started < std::chrono::milliseconds(opts_.kernel_timeout_ms)) return false;
  Status s(err::kLaunchTimeout, "kernel " + j.kernel + " ran longer than [limits] kernel_timeout_ms = " +
                                    std::to_string(opts_.kernel_timeout_ms) +
                                    " ms; the GPU cannot stop it, so the session ends");
  RGPU_LOG_WARN("cuda: {}", s.message());
  reportAsync(s);
  std::function<void(Status)> fatal;
  {
    std::lock_guard lock(mu_);
    fatal = fatal_sink_;
  }
  if (fatal) fatal(s);
  return true;
}

// ---- streams and events ---------------------------------------------------

Status CudaBackend::createStream(StreamKey key, uint32_t flags, int priority) {
  DriverApi& api = *api_;
  RGPU_TRY(use(key.device));
  {
    std::lock_guard lock(mu_);
    if (key.id == 0 || streams_.count(key.id)) return Status(err::kInvalidValue, "stream id in use");
  }
  CUstream s = nullptr;
  RGPU_TRY(RGPU_CU(cuStreamCreateWithPriority(&s, flags & CU_STREAM_NON_BLOCKING, priority)));
  std::lock_guard lock(mu_);
  streams_[key.id] = {key.device, s, (flags & CU_STREAM_NON_BLOCKING) != 0};
  return Status::ok();
}

Status CudaBackend::destroyStream(StreamKey key) {
  // As in CUDA, work already queued still runs. cuStreamDestroy would return
  // at once and leave nothing to wait on, so the stream stays ours until its
  // work is done.
  std::lock_guard lock(mu_);
  auto it = streams_.find(key.id);
  if (it == streams_.end()) return unknownStream(key);
  retired_.push_back(std::move(it->second));
  streams_.erase(it);
  reapRetiredLocked();
  return Status::ok();
}

void CudaBackend::reapRetiredLocked() {
  DriverApi& api = *api_;
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (!use(it->device) || api.cuStreamQuery(it->handle) == CUDA_ERROR_NOT_READY) {
      ++it;
      continue;
    }
    (void)api.cuStreamDestroy(it->handle);
    it = retired_.erase(it);
  }
}

Status CudaBackend::createEvent(uint32_t id, int device, uint32_t flags) {
  DriverApi& api = *api_;
  RGPU_TRY(use(device));
  {
    std::lock_guard lock(mu_);
    if (events_.count(id)) return Status(err::kInvalidValue, "event id in use");
  }
  // cudaEvent* flags have the CU_EVENT_* values.
  CUevent e = nullptr;
  RGPU_TRY(RGPU_CU(cuEventCreate(&e, flags & (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING))));
  std::lock_guard lock(mu_);
  events_[id] = Event{device, e, nullptr, 0};
  return Status::ok();
}

Status CudaBackend::destroyEvent(uint32_t id) {
  DriverApi& api = *api_;
  auto taken = take(events_, id);
  if (!taken) return unknownEvent(id);
  Event e = *taken;
  RGPU_TRY(use(e.device));
  return RGPU_CU(cuEventDestroy(e.handle));
}

// ---- launches and events --------------------------------------------------

Status CudaBackend::launch(StreamKey key, uint32_t function, const LaunchConfig& cfg, std::string params) {
  DriverApi& api = *api_;
  auto found = functionOf(function);
  if (!found) return found.status();
  Function f = *found;
  auto s = streamOf(key);
  if (!s) return s.status();
  if (s->first != f.device)
    return Status(err::kInvalidDeviceFunction, "the kernel's module is loaded on device " + std::to_string(f.device) +
                                                   ", the stream is on device " + std::to_string(s->first));
  if (f.mallocs) malloc_used_.store(true);  // its blocks are the driver's from now on
  if (f.own_heap) RGPU_TRY(ensureHeap(f.device));  // (before the kernel is queued: it reads where the heap is)
  size_t size = params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CUresult r = CUDA_SUCCESS;
  (void)asKernel(s->first, s->second, f.name, [&] {  // r says how it went
    const bool cluster = cfg.cluster.x || cfg.cluster.y || cfg.cluster.z;
    if (cfg.cooperative || cluster) {
      // cuLaunchKernelEx takes the packed block (cuLaunchCooperativeKernel only
      // argument pointers) and the attributes; the driver checks the cluster
      // against the kernel's own (__cluster_dims__) and the grid.
      CUlaunchAttribute attrs[2] = {};
      unsigned n = 0;
      if (cfg.cooperative) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[n++].value.cooperative = 1;
      }
      if (cluster) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim.x = cfg.cluster.x;
        attrs[n].value.clusterDim.y = cfg.cluster.y;
        attrs[n++].value.clusterDim.z = cfg.cluster.z;
      }
      CUlaunchConfig lc{};
      lc.gridDimX = cfg.grid.x, lc.gridDimY = cfg.grid.y, lc.gridDimZ = cfg.grid.z;
      lc.blockDimX = cfg.block.x, lc.blockDimY = cfg.block.y, lc.blockDimZ = cfg.block.z;
      lc.sharedMemBytes = static_cast<unsigned>(cfg.shared_mem);
      lc.hStream = s->second;
      lc.attrs = attrs;
      lc.numAttrs = n;
      r = api.cuLaunchKernelEx(&lc, f.handle, nullptr, params.empty() ? nullptr : extra);
    } else {
      r = api.cuLaunchKernel(f.handle, cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.block.x, cfg.block.y, cfg.block.z,
                             static_cast<unsigned>(cfg.shared_mem), s->second, nullptr, params.empty() ? nullptr : extra);
    }
    return r == CUDA_SUCCESS ? Status::ok() : Status(err::kUnknown, "");
  });
  // The runtime reports a grid, block or shared memory size the device cannot
  // take as a bad configuration; the driver says "invalid value".
  if (r == CUDA_ERROR_INVALID_VALUE)
    return Status(err::kInvalidConfiguration, "cuLaunchKernel: " + api.describe(r) + ": grid, block or shared memory size");
  return api.check(r, "cuLaunchKernel", __FILE__, __LINE__);
}

Status CudaBackend::asKernel(int dev, CUstream stream, const std::string& name, const std::function<Status()>& enqueue) {
  DriverApi& api = *api_;
  // Under a launch gate: wait for our turn on the device, and time the work
  // with an event pair so the session is charged its GPU time.
  // Under the watchdog too: the start event tells when the work began.
  // A node of a native graph being captured: the graph's launch is admitted and timed.
  if (capture_.active) return enqueue();
  bool held = false;
  bool timed = gate_ || opts_.kernel_timeout_ms;
  CUevent start = nullptr, end = nullptr;
  if (timed) {
    if (gate_) {
      gate_->queued(dev);
      held = gate_->acquire(dev);
    }
    {
      std::lock_guard lock(mu_);
      auto& spare = devices_[dev].spare_timed;
      for (CUevent* e : {&start, &end})
        if (!spare.empty()) {
          *e = spare.back();
          spare.pop_back();
        }
    }
    for (CUevent* e : {&start, &end})
      if (!*e && api.cuEventCreate(e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) *e = nullptr;
    if (start && end && api.cuEventRecord(start, stream) != CUDA_SUCCESS) start = nullptr;
  }
  Status s = enqueue();
  if (timed) {
    if (s && end && api.cuEventRecord(end, stream) == CUDA_SUCCESS) {
      Job job;
      job.device = dev;
      job.watched = end;
      job.timed = {start, end};
      if (opts_.kernel_timeout_ms && start) job.kernel = name;
      job.done = [this, dev, held, start, end](Status st) {
        float ms = 0;
        if (st && start) (void)api_->cuEventElapsedTime(&ms, start, end);
        uint64_t ns = static_cast<uint64_t>(ms * 1e6);
        gpu_ns_ += ns;
        if (gate_) gate_->done(dev, ns, held);
      };
      addJob(std::move(job));
    } else {
      if (gate_) gate_->done(dev, 0, held);
      std::lock_guard lock(mu_);
      for (CUevent e : {start, end})
        if (e) devices_[dev].spare_timed.push_back(e);
    }
  }
  return s;
}

Status CudaBackend::recordEvent(uint32_t event, StreamKey key) {
  DriverApi& api = *api_;
  if (capture_.active && !api.cuEventRecordWithFlags) return notCapturable("an event record");
  auto found = eventOf(event);
  if (!found) return found.status();
  Event e = *found;
  auto s = streamOf(key);
  if (!s) return s.status();
  if (s->first != e.device)
    return Status(err::kInvalidResourceHandle, "event and stream belong to different devices");
  if (capture_.active) {  // an event record node; its replies are counted at each launch
    RGPU_TRY(RGPU_CU(cuEventRecordWithFlags(e.handle, s->second, CU_EVENT_RECORD_EXTERNAL)));
    capture_.parts.events.push_back(event);
    return Status::ok();
  }
  std::lock_guard lock(mu_);  // the record and the count it remembers go together
  RGPU_TRY(RGPU_CU(cuEventRecord(e.handle, s->second)));
  auto it = events_.find(event);
  if (it != events_.end()) {
    it->second.replies = repliesLocked(key);
    it->second.replies_due = it->second.replies ? it->second.replies->issued : 0;
    it->second.recorded = true;
    it->second.shift_ns = 0;
  }
  return Status::ok();
}

Status CudaBackend::waitEvent(StreamKey key, uint32_t event) {
  DriverApi& api = *api_;
  auto e = eventOf(event);
  if (!e) return e.status();
  auto s = streamOf(key);
  if (!s) return s.status();
  // In a native graph: an event wait node (the event is recorded outside the graph).
  return RGPU_CU(cuStreamWaitEvent(s->second, e->handle, capture_.active ? CU_EVENT_WAIT_EXTERNAL : 0));
}

void CudaBackend::runHostCall(void* p) {
  auto* c = static_cast<HostCall*>(p);
  std::unique_ptr<HostCall> owned(c->once ? c : nullptr);  // a native graph's stays with the graph
  {
    std::unique_lock lock(c->calls->mu);
    if (c->replies)  // the completer sends them; it signals `cv` after each
      c->calls->cv.wait(lock, [&] { return !c->calls->alive || c->replies->written.load() >= c->replies_due; });
    if (!c->calls->alive) return;  // the session is gone
    ++c->calls->running;
  }
  c->fn();
  std::lock_guard lock(c->calls->mu);
  --c->calls->running;
  c->calls->cv.notify_all();
}

Status CudaBackend::waitStream(StreamKey waiter, StreamKey waited) {
  if (capture_.active) return notCapturable("a wait for another stream");
  DriverApi& api = *api_;
  auto d = streamOf(waited);
  if (!d) return d.status();
  CUevent e = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& spare = devices_[d->first].spare_events;
    if (!spare.empty()) {
      e = spare.back();
      spare.pop_back();
    }
  }
  if (!e) RGPU_TRY(RGPU_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING)));
  Status s = RGPU_CU(cuEventRecord(e, d->second));
  if (s) {
    auto w = streamOf(waiter);
    // The wait is for this record: the event may be recorded again at once.
    s = w ? RGPU_CU(cuStreamWaitEvent(w->second, e, 0)) : w.status();
  }
  std::lock_guard lock(mu_);
  devices_[d->first].spare_events.push_back(e);
  return s;
}

Status CudaBackend::hostCall(StreamKey key, std::function<void()> fn) {
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  auto call = std::make_unique<HostCall>(HostCall{std::move(fn), host_calls_, !capture_.active, nullptr, 0});
  if (!capture_.active) {
    std::lock_guard lock(mu_);
    call->replies = repliesLocked(key);
    call->replies_due = call->replies ? call->replies->issued : 0;
  }
  RGPU_TRY(RGPU_CU(cuLaunchHostFunc(s->second, &CudaBackend::runHostCall, call.get())));
  if (capture_.active) capture_.parts.host_calls.push_back(std::move(call));  // a host node of the graph
  else (void)call.release();  // runHostCall frees it
  return Status::ok();
}

Status CudaBackend::whenStreamDone(StreamKey key, Done done) {
  if (capture_.active) return notCapturable("a completion wait");
  auto s = streamOf(key);
  if (!s) return s.status();
  return whenDone(s->first, {s->second}, std::move(done));
}

Status CudaBackend::whenEventDone(uint32_t event, Done done) {
  if (capture_.active) return notCapturable("a completion wait");
  auto found = eventOf(event);
  if (!found) return found.status();
  Event e = *found;
  RGPU_TRY(use(e.device));
  Job job;
  job.device = e.device;
  job.watched = e.handle;
  job.done = std::move(done);
  addJob(std::move(job));
  return Status::ok();
}

Status CudaBackend::whenDeviceDone(int device, Done done) {
  if (capture_.active) return notCapturable("a completion wait");
  RGPU_TRY(use(device));
  // The legacy stream waits for all blocking streams; non-blocking ones are
  // waited for separately, and so are destroyed streams still working.
  std::vector<CUstream> streams{CU_STREAM_LEGACY};
  {
    std::lock_guard lock(mu_);
    reapRetiredLocked();
    for (auto& [id, s] : streams_)
      if (s.device == device && s.non_blocking) streams.push_back(s.handle);
    for (auto& s : retired_)
      if (s.device == device) streams.push_back(s.handle);
    // Scrubs too: memory is released only once nothing zeroes it any more.
    if (devices_[static_cast<size_t>(device)].scrubbed) streams.push_back(devices_[static_cast<size_t>(device)].scrub_stream);
  }
  return whenDone(device, streams, std::move(done));
}

Result<bool> CudaBackend::streamIdle(StreamKey key) {
  if (capture_.active) return notCapturable("a stream query");
  DriverApi& api = *api_;
  auto s = streamOf(key);
  if (!s) return s.status();
  CUresult r = api.cuStreamQuery(s->second);
  if (r == CUDA_ERROR_NOT_READY) return false;
  RGPU_TRY(api.check(r, "cuStreamQuery", __FILE__, __LINE__));
  std::lock_guard lock(mu_);
  return repliesOnWireLocked(key);
}

Result<bool> CudaBackend::eventDone(uint32_t event) {
  DriverApi& api = *api_;
  auto found = eventOf(event);
  if (!found) return found.status();
  Event e = *found;
  RGPU_TRY(use(e.device));
  CUresult r = api.cuEventQuery(e.handle);
  if (r == CUDA_ERROR_NOT_READY) return false;
  RGPU_TRY(api.check(r, "cuEventQuery", __FILE__, __LINE__));
  std::lock_guard lock(mu_);
  return !e.replies || e.replies->written >= e.replies_due;
}

Result<float> CudaBackend::elapsedMs(uint32_t start, uint32_t end) {
  DriverApi& api = *api_;
  auto a = eventOf(start);
  if (!a) return a.status();
  auto b = eventOf(end);
  if (!b) return b.status();
  RGPU_TRY(use(a->device));
  float ms = 0;
  RGPU_TRY(RGPU_CU(cuEventElapsedTime(&ms, a->handle, b->handle)));
  // A restored event's driver time is later than when it completed (cuda_checkpoint.cc).
  if (a->shift_ns != b->shift_ns) ms += static_cast<float>(static_cast<double>(a->shift_ns - b->shift_ns) / 1e6);
  return ms;
}

// ---- modules, functions, globals ------------------------------------------

Status CudaBackend::loadModule(uint32_t id, int device, const std::string& fatbin) {
  DriverApi& api = *api_;
  // Our own parser sees the untrusted image first; the driver only gets one
  // whose structure checks out. It also gives the parameter layouts.
  auto image = common::parseImage(fatbin.data(), fatbin.size());  // a fatbin, or a library's PTX or cubin
  if (!image) return image.status();
  RGPU_TRY(use(device));
  {
    std::lock_guard lock(mu_);
    if (modules_.count(id)) return Status(err::kInvalidValue, "module id in use");
  }
  CUmodule m = nullptr;
  CUdeviceptr heap_var = 0;
  std::set<std::string> mallocs;
  if (opts_.fixed_addresses) {
    // A module that may call device malloc (or free) goes on rgpu's heap where it can (cuda_heap.cc).
    mallocs = common::kernelsCallingMalloc(*image);
    bool heap_calls = !mallocs.empty();  // (else: a module that only frees)
    for (auto& e : image->entries)
      heap_calls = heap_calls || (e.kind == common::FatbinEntry::kPtx && namesHeapCalls(e.payload));
    if (heap_calls) {
      RGPU_TRY_ASSIGN(bound, loadOnOwnHeap(device, *image, &heap_var));
      m = bound;
    }
  }
  CUresult r = m ? CUDA_SUCCESS : api.cuModuleLoadData(&m, fatbin.data());
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU) {
    const auto& d = descriptions_[device];
    return Status(cudaErrorFromDriver(r), "the fatbin has no code for device " + std::to_string(device) + " (sm_" +
                                              std::to_string(d.major) + std::to_string(d.minor) +
                                              "): rebuild with -arch=sm_" + std::to_string(d.major) +
                                              std::to_string(d.minor) + ", or embed PTX (-arch=sm_XX does)");
  }
  RGPU_TRY(api.check(r, "cuModuleLoadData", __FILE__, __LINE__));
  Module mod;
  mod.device = device;
  mod.handle = m;
  for (auto& [name, k] : image->kernels) mod.param_bytes[name] = k.param_bytes;
  if (opts_.fixed_addresses) {  // what a checkpoint needs to know (cuda_checkpoint.cc)
    mod.variables = common::moduleVariables(*image);
    mod.mallocs = std::move(mallocs);
    mod.heap_var = heap_var;
  }
  if (Status s = heapKnownTo(device, heap_var); !s) {
    (void)api.cuModuleUnload(m);
    return s;
  }
  for (auto& e : image->entries)
    if (e.payload.find("vprintf") != std::string::npos || e.payload.find("__assertfail") != std::string::npos)
      printf_possible_ = true;
  std::lock_guard lock(mu_);
  mod.placed = next_placed_++;
  modules_[id] = std::move(mod);
  return Status::ok();
}

Status CudaBackend::unloadModule(uint32_t id) {
  DriverApi& api = *api_;
  auto taken = take(modules_, id);
  if (!taken) return Status(err::kInvalidResourceHandle, "unknown module");
  Module m = std::move(*taken);
  {
    std::lock_guard lock(mu_);
    for (auto f = functions_.begin(); f != functions_.end();) f = f->second.module == id ? functions_.erase(f) : ++f;
  }
  RGPU_TRY(use(m.device));
  return RGPU_CU(cuModuleUnload(m.handle));
}

Result<uint32_t> CudaBackend::registerFunction(uint32_t id, uint32_t module, const std::string& name) {
  DriverApi& api = *api_;
  CUmodule m;
  int device;
  std::optional<uint32_t> expected;
  bool mallocs = false, own_heap = false;
  {
    std::lock_guard lock(mu_);
    auto it = modules_.find(module);
    if (it == modules_.end()) return Status(err::kInvalidResourceHandle, "unknown module");
    m = it->second.handle;
    device = it->second.device;
    mallocs = it->second.mallocs.count(name) != 0;
    own_heap = mallocs && it->second.heap_var;
    if (own_heap) mallocs = false;  // rgpu's heap, not the driver's
    if (auto k = it->second.param_bytes.find(name); k != it->second.param_bytes.end()) expected = k->second;
  }
  RGPU_TRY(use(device));
  CUfunction f = nullptr;
  CUresult r = api.cuModuleGetFunction(&f, m, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    return Status(err::kInvalidDeviceFunction, "kernel " + name + " is not in the module");
  RGPU_TRY(api.check(r, "cuModuleGetFunction", __FILE__, __LINE__));
  // The driver's view of the parameter block, when it can tell (12.4+).
  std::optional<uint32_t> driver_bytes;
  if (api.cuFuncGetParamInfo) {
    uint64_t end = 0;
    size_t i = 0;
    for (; i < protocol::kMaxParamBytes; ++i) {
      size_t off = 0, size = 0;
      CUresult p = api.cuFuncGetParamInfo(f, i, &off, &size);
      if (p != CUDA_SUCCESS) break;
      end = std::max<uint64_t>(end, off + size);
    }
    driver_bytes = static_cast<uint32_t>(end);
  }
  if (driver_bytes && expected && *driver_bytes != *expected)
    return Status(err::kInvalidKernelImage, "kernel " + name + ": the driver's parameter block is " +
                                                std::to_string(*driver_bytes) + " bytes, the fatbin's " +
                                                std::to_string(*expected));
  if (!driver_bytes && !expected)
    return Status(err::kInvalidKernelImage, "kernel " + name + ": no parameter layout in the fatbin, and the driver "
                                            "cannot tell (cuFuncGetParamInfo needs a 12.4+ driver)");
  std::lock_guard lock(mu_);
  functions_[id] = {module, device, f, name, mallocs, own_heap};
  return driver_bytes ? *driver_bytes : *expected;
}

Result<FunctionAttributes> CudaBackend::functionAttributes(uint32_t function) {
  DriverApi& api = *api_;
  auto found = functionOf(function);
  if (!found) return found.status();
  Function f = *found;
  RGPU_TRY(use(f.device));
  auto get = [&](CUfunction_attribute a, auto& out) -> Status {
    int v = 0;
    RGPU_TRY(RGPU_CU(cuFuncGetAttribute(&v, a, f.handle)));
    out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    return Status::ok();
  };
  FunctionAttributes fa;
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fa.max_threads_per_block));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fa.shared_size));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, fa.const_size));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fa.local_size));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_NUM_REGS, fa.num_regs));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_PTX_VERSION, fa.ptx_version));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_BINARY_VERSION, fa.binary_version));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fa.max_dynamic_shared));
  RGPU_TRY(get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, fa.preferred_carveout));
  // Thread-block clusters (drivers without them say "invalid value": none).
  auto optional = [&](CUfunction_attribute a, auto& out) {
    int v = 0;
    if (api.cuFuncGetAttribute(&v, a, f.handle) == CUDA_SUCCESS) out = static_cast<std::remove_reference_t<decltype(out)>>(v);
  };
  optional(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, fa.cluster_x);
  optional(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, fa.cluster_y);
  optional(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, fa.cluster_z);
  optional(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, fa.cluster_must_be_set);
  optional(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, fa.non_portable_cluster);
  optional(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, fa.cluster_policy);
  return fa;
}

Status CudaBackend::setFunctionAttribute(uint32_t function, int attr, int value) {
  DriverApi& api = *api_;
  auto found = functionOf(function);
  if (!found) return found.status();
  Function f = *found;
  RGPU_TRY(use(f.device));
  // cudaFuncAttribute values are the CUfunction_attribute ones.
  return RGPU_CU(cuFuncSetAttribute(f.handle, static_cast<CUfunction_attribute>(attr), value));
}

Result<int> CudaBackend::occupancy(uint32_t function, int block_size, uint64_t dynamic_smem) {
  DriverApi& api = *api_;
  auto found = functionOf(function);
  if (!found) return found.status();
  Function f = *found;
  RGPU_TRY(use(f.device));
  int n = 0;
  RGPU_TRY(RGPU_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f.handle, block_size, dynamic_smem)));
  return n;
}

Result<GlobalVar> CudaBackend::globalAddress(uint32_t module, const std::string& name, uint64_t /*size_hint*/) {
  DriverApi& api = *api_;
  auto mod = moduleOf(module);
  if (!mod) return mod.status();
  auto [m, device] = *mod;
  RGPU_TRY(use(device));
  CUdeviceptr p = 0;
  size_t bytes = 0;
  CUresult r = api.cuModuleGetGlobal(&p, &bytes, m, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) return Status(err::kInvalidSymbol, "no variable " + name + " in the module");
  RGPU_TRY(api.check(r, "cuModuleGetGlobal", __FILE__, __LINE__));
  GlobalVar g{static_cast<DevPtr>(p), static_cast<uint64_t>(bytes)};
  // A __managed__ variable: the driver packs the module's into one managed
  // allocation, which the client pages whole (a driver without these entry
  // points: the client finds the variable off a page boundary and says so).
  unsigned managed = 0;
  CUdeviceptr base = 0;
  size_t span = 0;
  if (api.cuPointerGetAttribute && api.cuMemGetAddressRange &&
      api.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS && managed &&
      api.cuMemGetAddressRange(&base, &span, p) == CUDA_SUCCESS && base <= p && p + bytes <= base + span) {
    g.managed_base = base;
    g.managed_size = span;
  }
  return g;
}

}  // namespace rgpu::server::cuda
