#include "server/sim/sim_backend.h"

#include <driver_types.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/launch_cluster.h"
#include "common/log.h"
#include "server/backend/device_props.h"
#include "server/sim/ptx/ptx_jit.h"
#include "server/sim/ptx/ptx_parser.h"
#include "server/sim/sim_blas.h"

namespace rgpu::server {
namespace {
constexpr uint32_t kStreamNonBlocking = 0x1;  // cudaStreamNonBlocking
constexpr uint32_t kEventDisableTiming = 0x2;  // cudaEventDisableTiming
constexpr uint64_t kAlign = 512;               // cudaMalloc alignment (= the texture alignment: any allocation can back a texture)

Status noStream(StreamKey k) {
  return Status(err::kInvalidResourceHandle, "unknown stream " + std::to_string(k.id));
}
}  // namespace

SimBackend::SimBackend(const std::vector<SimDeviceConfig>& devices, SimOptions opts)
    : opts_(std::move(opts)), interp_budget_(opts_.max_interpreter_bytes) {
  ptx::setFastPaths(opts_.hot_paths);
  ptx::jit::configure(opts_.jit == "eager" ? ptx::jit::Mode::kEager
                      : opts_.jit == "off" ? ptx::jit::Mode::kOff
                                           : ptx::jit::Mode::kAuto,
                      opts_.jit_threshold, opts_.jit_library);
  for (size_t i = 0; i < devices.size(); ++i)
    devices_.push_back(describeSimDevice(devices[i], i < opts_.physical.size() ? opts_.physical[i] : static_cast<int>(i)));
  used_.assign(devices_.size(), 0);
  printf_fifo_.assign(devices_.size(), ptx::kDefaultPrintfFifo);
  printf_launched_.assign(devices_.size(), false);
  malloc_heap_bytes_.assign(devices_.size(), ptx::kDefaultMallocHeap);
  heaps_.resize(devices_.size());
  // Room for every device's memory twice over (fragmentation); committed only as used.
  uint64_t total = 64ull << 20;
  for (auto& d : devices_) total += 2 * d.total_mem;
  const auto [window, slots] = spanWindow(opts_.address_window);
  auto arena = DeviceArena::create(total, window, slots);
  // Array, texture and surface values too are the part's own, so the parts
  // of one program never hand it the same one.
  next_object_ = 1 + (uint64_t{opts_.address_window} << 40);
  if (arena) arena_ = std::move(*arena);
  else RGPU_LOG_WARN("sim: {}", arena.status().message());
  if (!opts_.launch_log.empty()) launch_log_.open(opts_.launch_log, std::ios::app);
  std::lock_guard lock(mu_);
  for (size_t d = 0; d < devices_.size(); ++d) {
    auto s = std::make_unique<Stream>();
    s->device = static_cast<int>(d);
    s->legacy = true;
    Stream* raw = s.get();
    s->thread = std::thread([this, raw] { runStream(raw); });
    legacy_.push_back(std::move(s));
  }
}

SimBackend::~SimBackend() {
  stopThreads();
  if (!arena_)
    for (auto& [ptr, a] : allocations_) std::free(reinterpret_cast<void*>(ptr));
  // (with the arena, its mapping goes with it)
}

void SimBackend::stopThreads() {
  cancel_.store(true);  // a kernel that never ends must not keep the worker alive
  {
    std::lock_guard lock(mu_);
    for (auto& s : legacy_) s->stopping = true;
    for (auto& [id, s] : streams_) s->stopping = true;
    for (auto& s : retired_) s->stopping = true;
    progress_.notify_all();
  }
  auto join = [](std::unique_ptr<Stream>& s) {
    if (s->thread.joinable()) s->thread.join();
  };
  for (auto& s : legacy_) join(s);
  for (auto& [id, s] : streams_) join(s);
  for (auto& s : retired_) join(s);
}

void SimBackend::setAsyncErrorSink(std::function<void(Status)> sink) {
  std::lock_guard lock(mu_);
  async_sink_ = std::move(sink);
}

void SimBackend::setOutputSink(std::function<void(std::string)> sink) {
  std::lock_guard lock(mu_);
  output_sink_ = std::move(sink);
}

Status SimBackend::setPrintfFifo(int device, uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Status(err::kInvalidDevice, "invalid device");
  if (printf_launched_[device])
    return Status(err::kInvalidValue, "cudaLimitPrintfFifoSize must be set before a kernel that calls printf is launched");
  printf_fifo_[device] = bytes;
  return Status::ok();
}

Status SimBackend::setMallocHeap(int device, uint64_t bytes) {
  std::lock_guard lock(mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Status(err::kInvalidDevice, "invalid device");
  if (heaps_[device])
    return Status(err::kInvalidValue, "cudaLimitMallocHeapSize must be set before a kernel that calls malloc is launched");
  malloc_heap_bytes_[device] = bytes;
  return Status::ok();
}

ptx::MemoryRanges SimBackend::memoryRangesLocked(uint64_t op_seq) const {
  ptx::MemoryRanges r;
  r.reserve(allocations_.size());
  for (auto& [base, a] : allocations_)
    if (!a.retired_at || a.retired_at > op_seq) r.emplace_back(base, base + a.size);
  std::sort(r.begin(), r.end());
  return r;
}

void SimBackend::reportAsync(Status s) {
  std::function<void(Status)> sink;
  {
    std::lock_guard lock(mu_);
    sink = async_sink_;
  }
  if (err::isSticky(s.code())) faults_.fetch_add(1);
  if (sink) sink(std::move(s));
}

// ---- memory -------------------------------------------------------------

Result<DevPtr> SimBackend::allocateLocked(int device, uint64_t size) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device " + std::to_string(device));
  uint64_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  if (rounded < size || used_[device] + rounded > devices_[device].total_mem || used_[device] + rounded < rounded)
    return Status(err::kMemoryAllocation, "out of memory on device " + std::to_string(device) + ": asked " +
                                              std::to_string(size) + " bytes, " +
                                              std::to_string(devices_[device].total_mem - used_[device]) + " free");
  DevPtr p = 0;
  if (arena_) {
    auto a = arena_->allocate(rounded);
    if (!a) return a.status();
    p = *a;
  } else {
    p = reinterpret_cast<DevPtr>(std::aligned_alloc(kAlign, rounded));
    if (!p) return Status(err::kMemoryAllocation, "host memory exhausted backing a sim allocation");
  }
  used_[device] += rounded;
  allocations_[p] = {device, rounded};
  return p;
}

void SimBackend::releaseLocked(DevPtr ptr) {
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.retired_at) return;
  it->second.retired_at = next_op_seq_;
  retired_allocs_.push_back(ptr);
  reclaimLocked();
}

uint64_t SimBackend::oldestPendingLocked() const {
  uint64_t oldest = next_op_seq_;
  auto visit = [&oldest](const Stream& s) {
    // A stream runs its queue in order: the running op, else the front, is its oldest.
    if (s.running_seq) oldest = std::min(oldest, s.running_seq);
    else if (!s.queue.empty()) oldest = std::min(oldest, s.queue.front().seq);
  };
  for (auto& s : legacy_) visit(*s);
  for (auto& [id, s] : streams_) visit(*s);
  for (auto& s : retired_) visit(*s);
  return oldest;
}

void SimBackend::reclaimLocked() {
  // Every operation numbered below this one has run.
  uint64_t oldest = oldestPendingLocked();
  std::erase_if(retired_allocs_, [&](DevPtr ptr) {
    auto it = allocations_.find(ptr);
    if (it->second.retired_at > oldest) return false;
    used_[it->second.device] -= it->second.size;
    if (arena_) arena_->free(ptr);
    else std::free(reinterpret_cast<void*>(ptr));
    allocations_.erase(it);
    return true;
  });
}

Status SimBackend::allocateAtLocked(int device, DevPtr at, uint64_t size) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device " + std::to_string(device));
  if (!arena_) return Status(err::kNotSupported, "this sim backend's memory is not in an arena of its own");
  uint64_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  if (rounded < size || used_[device] + rounded > devices_[device].total_mem || used_[device] + rounded < rounded)
    return Status(err::kMemoryAllocation, "out of memory on device " + std::to_string(device) + " placing " +
                                              std::to_string(size) + " bytes");
  if (auto s = arena_->allocateAt(at, rounded); !s) return s;
  used_[device] += rounded;
  allocations_[at] = {device, rounded};
  return Status::ok();
}

Status SimBackend::allocateAt(int device, DevPtr at, uint64_t size) {
  std::lock_guard lock(mu_);
  return allocateAtLocked(device, at, size);
}

std::string SimBackend::notCheckpointable() const {
  std::lock_guard lock(mu_);
  if (!arena_) return "the sim backend's memory is not in an arena of its own";
  if (!recording_.empty()) return "a graph body is being recorded";
  return "";
}

Result<std::vector<Backend::MallocHeap>> SimBackend::mallocHeaps() const {
  std::lock_guard lock(mu_);
  std::vector<MallocHeap> out;
  for (size_t d = 0; d < devices_.size(); ++d) {
    MallocHeap h;
    h.device = static_cast<int32_t>(d);
    h.limit = malloc_heap_bytes_[d];
    if (heaps_[d]) {
      h.base = heaps_[d]->base();
      h.blocks = heaps_[d]->blocks();
    }
    out.push_back(std::move(h));
  }
  return out;
}

Status SimBackend::restoreMallocHeap(const MallocHeap& heap) {
  std::lock_guard lock(mu_);
  if (heap.device < 0 || static_cast<size_t>(heap.device) >= devices_.size())
    return Status(err::kInvalidDevice, "checkpoint: a malloc heap on device " + std::to_string(heap.device));
  const auto d = static_cast<size_t>(heap.device);
  if (heap.limit == 0 || heap.limit > devices_[d].total_mem)
    return Status(err::kInvalidValue, "checkpoint: a malloc heap of " + std::to_string(heap.limit) + " bytes");
  malloc_heap_bytes_[d] = heap.limit;
  if (!heap.base) return Status::ok();
  RGPU_TRY(allocateAtLocked(heap.device, heap.base, heap.limit));
  auto h = std::make_unique<ptx::DeviceHeap>(heap.base, heap.limit);
  if (!h->restore(heap.blocks))
    return Status(err::kInvalidValue, "checkpoint: device " + std::to_string(d) +
                                          "'s malloc heap has a block out of place");
  heaps_[d] = std::move(h);
  return Status::ok();
}

Result<std::vector<Backend::ModuleGlobal>> SimBackend::moduleGlobals(uint32_t module) const {
  std::lock_guard lock(mu_);
  auto m = modules_.find(module);
  if (m == modules_.end()) return Status(err::kInvalidResourceHandle, "unknown module");
  std::vector<ModuleGlobal> out;
  for (auto& [name, g] : m->second.globals) {
    ModuleGlobal mg;
    mg.name = name;
    mg.addr = g.first;
    mg.size = g.second;
    auto b = m->second.global_bases.find(g.first);
    mg.base = b == m->second.global_bases.end() ? g.first : b->second;
    mg.alloc_size = m->second.global_alloc.at(name);
    out.push_back(std::move(mg));
  }
  return out;
}

Result<DevPtr> SimBackend::allocate(int device, uint64_t size) {
  std::lock_guard lock(mu_);
  return allocateLocked(device, size);
}

Result<std::pair<DevPtr, uint64_t>> SimBackend::allocatePitch(int device, uint64_t width, uint64_t height) {
  // Rows aligned as a GPU's texture pitch alignment asks (512 bytes).
  uint64_t pitch = (width + 511) / 512 * 512;
  std::lock_guard lock(mu_);
  auto p = allocateLocked(device, pitch * height);
  if (!p) return p.status();
  return std::make_pair(*p, pitch);
}

Status SimBackend::release(DevPtr ptr) {
  std::lock_guard lock(mu_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end() || it->second.retired_at)
    return Status(err::kInvalidDevicePointer, "not an allocation");
  releaseLocked(ptr);
  return Status::ok();
}

Status SimBackend::memInfo(int device, uint64_t& free, uint64_t& total) {
  std::lock_guard lock(mu_);
  if (device < 0 || static_cast<size_t>(device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device");
  total = devices_[device].total_mem;
  free = total - used_[device];
  return Status::ok();
}

// ---- streams and events ---------------------------------------------------

Result<SimBackend::Stream*> SimBackend::streamLocked(StreamKey key) {
  if (key.id == 0) {
    if (key.device < 0 || static_cast<size_t>(key.device) >= legacy_.size())
      return Status(err::kInvalidDevice, "invalid device " + std::to_string(key.device));
    return legacy_[key.device].get();
  }
  auto it = streams_.find(key.id);
  if (it == streams_.end()) return noStream(key);
  return it->second.get();
}

Status SimBackend::createStream(StreamKey key, uint32_t flags, int /*priority*/) {
  std::lock_guard lock(mu_);
  if (key.device < 0 || static_cast<size_t>(key.device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device");
  if (key.id == 0 || streams_.count(key.id)) return Status(err::kInvalidValue, "stream id in use");
  auto s = std::make_unique<Stream>();
  s->device = key.device;
  s->non_blocking = (flags & kStreamNonBlocking) != 0;
  Stream* raw = s.get();
  s->thread = std::thread([this, raw] { runStream(raw); });
  streams_.emplace(key.id, std::move(s));
  return Status::ok();
}

Status SimBackend::destroyStream(StreamKey key) {
  std::lock_guard lock(mu_);
  auto it = streams_.find(key.id);
  if (it == streams_.end()) return noStream(key);
  // As in CUDA, work already queued still runs; the thread exits when drained.
  it->second->stopping = true;
  retired_.push_back(std::move(it->second));
  streams_.erase(it);
  progress_.notify_all();
  reapRetiredLocked();
  return Status::ok();
}

void SimBackend::reapRetiredLocked() {
  auto forget = [](std::vector<Dep>& deps, Stream* s) {
    std::erase_if(deps, [s](const Dep& d) { return d.first == s; });
  };
  for (auto it = retired_.begin(); it != retired_.end();) {
    Stream* s = it->get();
    if (!s->finished) {
      ++it;
      continue;
    }
    // It returned holding no lock (it set `finished` under mu_, which we hold now).
    if (s->thread.joinable()) s->thread.join();
    for (auto* group : {&legacy_, &retired_})
      for (auto& t : *group)
        for (Op& op : t->queue) forget(op.deps, s);
    for (auto& [id, t] : streams_)
      for (Op& op : t->queue) forget(op.deps, s);
    for (Waiter& w : waiters_) forget(w.deps, s);
    for (auto& [id, e] : events_)
      if (e.stream == s) e.stream = nullptr;
    it = retired_.erase(it);
  }
}

Status SimBackend::createEvent(uint32_t id, int device, uint32_t flags) {
  std::lock_guard lock(mu_);
  if (events_.count(id)) return Status(err::kInvalidValue, "event id in use");
  Event e;
  e.device = device;
  e.flags = flags;
  events_.emplace(id, e);
  return Status::ok();
}

Result<Backend::EventState> SimBackend::eventState(uint32_t id) const {
  std::lock_guard lock(mu_);
  auto it = events_.find(id);
  if (it == events_.end()) return Status(err::kInvalidResourceHandle, "unknown event");
  const Event& e = it->second;
  EventState s;
  s.recorded = e.recorded;
  // (A drained session's recorded events have all completed.)
  if (e.recorded && !e.stamped) return Status(err::kNotReady, "event not completed");
  if (e.recorded)
    s.completed_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(e.when.time_since_epoch()).count();
  return s;
}

Status SimBackend::restoreEvent(uint32_t id, int device, uint32_t flags, const EventState& state) {
  std::lock_guard lock(mu_);
  if (events_.count(id)) return Status(err::kInvalidValue, "event id in use");
  Event e;
  e.device = device;
  e.flags = flags;
  if (state.recorded) {
    // Recorded and complete: no stream to wait for, its completion time kept.
    e.recorded = e.stamped = true;
    e.when = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(state.completed_ns));
  }
  events_.emplace(id, e);
  return Status::ok();
}

Status SimBackend::destroyEvent(uint32_t id) {
  std::lock_guard lock(mu_);
  return events_.erase(id) ? Status::ok() : Status(err::kInvalidResourceHandle, "unknown event");
}

std::vector<SimBackend::Dep> SimBackend::implicitDeps(Stream* s) {
  std::vector<Dep> deps;
  auto pending = [](Stream* t) { return t->enqueued > t->completed; };
  if (s->legacy) {
    // The legacy stream waits for all earlier work of the device's blocking streams.
    for (auto& [id, t] : streams_)
      if (t->device == s->device && !t->non_blocking && pending(t.get())) deps.emplace_back(t.get(), t->enqueued);
  } else if (!s->non_blocking) {
    Stream* l = legacy_[s->device].get();
    if (pending(l)) deps.emplace_back(l, l->enqueued);
  }
  return deps;
}

bool SimBackend::depsMet(const std::vector<Dep>& deps) const {
  for (auto& [s, ticket] : deps)
    if (s->completed < ticket) return false;
  return true;
}

Status SimBackend::enqueueLocked(Stream* s, std::function<void()> fn, std::vector<Dep> extra) {
  if (!recording_.empty()) {  // a conditional node's body: runs inside that node's operation
    recording_.back().push_back(std::move(fn));
    return Status::ok();
  }
  std::vector<Dep> deps = implicitDeps(s);
  deps.insert(deps.end(), extra.begin(), extra.end());
  uint64_t seq = next_op_seq_++;
  s->queue.push_back({std::move(fn), std::move(deps), seq});
  ++s->enqueued;
  progress_.notify_all();
  return Status::ok();
}

Status SimBackend::enqueue(StreamKey key, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  return enqueueLocked(*s, std::move(fn));
}

namespace {
thread_local void* t_running_stream = nullptr;  // the stream whose op this thread runs
thread_local uint64_t t_running_op = 0;         // and that op's sequence number
}  // namespace

OnWire SimBackend::repliedHook() {
  auto* s = static_cast<Stream*>(t_running_stream);
  return [this, s] {
    std::lock_guard lock(mu_);
    if (s) s->replied = true;
  };
}

void SimBackend::runStream(Stream* s) {
  t_running_stream = s;
  std::unique_lock lock(mu_);
  for (;;) {
    progress_.wait(lock, [&] { return (s->stopping && s->queue.empty()) || (!s->queue.empty() && depsMet(s->queue.front().deps)); });
    if (s->queue.empty()) {  // stopping and drained
      s->finished = true;
      return;
    }
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    s->running_seq = op.seq;
    lock.unlock();
    t_running_op = op.seq;
    op.fn();
    op.fn = nullptr;  // what it captured (staging, its module's code) goes before its memory may
    lock.lock();
    ++s->completed;
    s->replied = false;
    s->running_seq = 0;
    if (!retired_allocs_.empty()) reclaimLocked();
    fireReadyWaitersLocked(lock);
    progress_.notify_all();
  }
}

void SimBackend::fireReadyWaitersLocked(std::unique_lock<std::mutex>& lock) {
  std::vector<Done> ready;
  for (size_t i = 0; i < waiters_.size();) {
    if (depsMet(waiters_[i].deps)) {
      ready.push_back(std::move(waiters_[i].done));
      waiters_[i] = std::move(waiters_.back());
      waiters_.pop_back();
    } else {
      ++i;
    }
  }
  if (ready.empty()) return;
  lock.unlock();
  for (auto& d : ready) d(Status::ok());
  lock.lock();
}

Status SimBackend::addWaiterLocked(std::vector<Dep> deps, Done done) {
  if (depsMet(deps)) {
    // Run outside the lock: the callback may send a reply.
    mu_.unlock();
    done(Status::ok());
    mu_.lock();
    return Status::ok();
  }
  waiters_.push_back({std::move(deps), std::move(done)});
  return Status::ok();
}

Status SimBackend::recordEvent(uint32_t id, StreamKey key) {
  std::lock_guard lock(mu_);
  auto it = events_.find(id);
  if (it == events_.end()) return Status(err::kInvalidResourceHandle, "unknown event");
  auto s = streamLocked(key);
  if (!s) return s.status();
  Event& e = it->second;
  e.stamped = false;
  RGPU_TRY(enqueueLocked(*s, [this, id] {
    std::lock_guard l(mu_);
    auto ev = events_.find(id);
    if (ev != events_.end()) {
      ev->second.when = std::chrono::steady_clock::now();
      ev->second.stamped = true;
    }
  }));
  e.recorded = true;
  e.stream = *s;
  e.ticket = (*s)->enqueued;
  return Status::ok();
}

Status SimBackend::waitEvent(StreamKey key, uint32_t id) {
  std::lock_guard lock(mu_);
  auto it = events_.find(id);
  if (it == events_.end()) return Status(err::kInvalidResourceHandle, "unknown event");
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (!it->second.stream) return Status::ok();  // never recorded, or recorded on a stream long done
  return enqueueLocked(*s, [] {}, {{it->second.stream, it->second.ticket}});
}

Status SimBackend::waitStream(StreamKey waiter, StreamKey waited) {
  std::lock_guard lock(mu_);
  auto w = streamLocked(waiter);
  if (!w) return w.status();
  auto d = streamLocked(waited);
  if (!d) return d.status();
  return enqueueLocked(*w, [] {}, {{*d, (*d)->enqueued}});
}

Status SimBackend::hostCall(StreamKey key, std::function<void()> fn) { return enqueue(key, std::move(fn)); }

Status SimBackend::whenStreamDone(StreamKey key, Done done) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  std::vector<Dep> deps{{*s, (*s)->enqueued}};
  auto more = implicitDeps(*s);
  deps.insert(deps.end(), more.begin(), more.end());
  return addWaiterLocked(std::move(deps), std::move(done));
}

Status SimBackend::whenEventDone(uint32_t id, Done done) {
  std::lock_guard lock(mu_);
  auto it = events_.find(id);
  if (it == events_.end()) return Status(err::kInvalidResourceHandle, "unknown event");
  std::vector<Dep> deps;
  if (it->second.stream) deps.emplace_back(it->second.stream, it->second.ticket);
  return addWaiterLocked(std::move(deps), std::move(done));
}

Status SimBackend::whenDeviceDone(int device, Done done) {
  std::lock_guard lock(mu_);
  if (device < 0 || static_cast<size_t>(device) >= legacy_.size()) return Status(err::kInvalidDevice, "invalid device");
  std::vector<Dep> deps{{legacy_[device].get(), legacy_[device]->enqueued}};
  for (auto& [id, s] : streams_)
    if (s->device == device) deps.emplace_back(s.get(), s->enqueued);
  for (auto& s : retired_)
    if (s->device == device) deps.emplace_back(s.get(), s->enqueued);
  return addWaiterLocked(std::move(deps), std::move(done));
}

Result<bool> SimBackend::streamIdle(StreamKey key) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (doneForQueries(*s) != (*s)->enqueued) return false;
  for (auto& [other, ticket] : implicitDeps(*s))
    if (doneForQueries(other) < ticket) return false;
  return true;
}

Result<bool> SimBackend::eventDone(uint32_t id) {
  std::lock_guard lock(mu_);
  auto it = events_.find(id);
  if (it == events_.end()) return Status(err::kInvalidResourceHandle, "unknown event");
  return !it->second.stream || doneForQueries(it->second.stream) >= it->second.ticket;
}

Result<float> SimBackend::elapsedMs(uint32_t start, uint32_t end) {
  std::lock_guard lock(mu_);
  auto a = events_.find(start), b = events_.find(end);
  if (a == events_.end() || b == events_.end()) return Status(err::kInvalidResourceHandle, "unknown event");
  if ((a->second.flags | b->second.flags) & kEventDisableTiming)
    return Status(err::kInvalidResourceHandle, "event created with cudaEventDisableTiming");
  if (!a->second.recorded || !b->second.recorded) return Status(err::kInvalidResourceHandle, "event not recorded");
  if (!a->second.stamped || !b->second.stamped) return Status(err::kNotReady, "event not completed");
  return std::chrono::duration<float, std::milli>(b->second.when - a->second.when).count();
}

// ---- stream-ordered copies ---------------------------------------------------

const uint8_t* SimBackend::hostView(DevPtr at, uint64_t size) const {
  // Device memory is the arena's, mapped for the backend's life.
  if (!arena_ || at < arena_->base() || size > arena_->size() || at - arena_->base() > arena_->size() - size)
    return nullptr;
  return reinterpret_cast<const uint8_t*>(at);
}

uint8_t* SimBackend::directWriteTarget(StreamKey key, DevPtr dst) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s || (*s)->completed != (*s)->enqueued || !depsMet(implicitDeps(*s))) return nullptr;
  // Only the session's dispatch thread enqueues work, and it is busy with this
  // copy until the bytes are in: the stream stays idle meanwhile.
  return reinterpret_cast<uint8_t*>(dst);
}

Status SimBackend::copyToDevice(StreamKey s, DevPtr dst, Staging data, uint64_t size) {
  return enqueue(s, [dst, data = std::move(data), size] { std::memcpy(reinterpret_cast<void*>(dst), data->data(), size); });
}

Status SimBackend::copyFromDevice(StreamKey s, DevPtr src, uint64_t size, ReadDone done) {
  // Zero-copy: the reply is written from device memory while the stream is held.
  return enqueue(s, [this, src, size, done = std::move(done)] {
    done(Status::ok(), reinterpret_cast<const uint8_t*>(src), size, repliedHook());
  });
}

Status SimBackend::copyOnDevice(StreamKey s, DevPtr dst, DevPtr src, uint64_t size) {
  return enqueue(s, [dst, src, size] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), size); });
}

Status SimBackend::copyPeer(StreamKey key, DevPtr dst, int dst_device, DevPtr src, int src_device, uint64_t size,
                            bool serialize) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  auto copy = [dst, src, size] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), size); };
  if (!serialize) return enqueueLocked(*s, copy);
  // After everything queued on the other devices' legacy streams (and what they wait for) ...
  std::vector<Stream*> others;
  for (int d : {src_device, dst_device})
    if (d >= 0 && static_cast<size_t>(d) < legacy_.size() && legacy_[d].get() != *s &&
        std::find(others.begin(), others.end(), legacy_[d].get()) == others.end())
      others.push_back(legacy_[d].get());
  std::vector<Dep> after;
  for (Stream* l : others) {
    after.emplace_back(l, l->enqueued);
    for (const Dep& d : implicitDeps(l)) after.push_back(d);
  }
  RGPU_TRY(enqueueLocked(*s, copy, std::move(after)));
  // ... and before anything queued on them later.
  Dep copied{*s, (*s)->enqueued};
  for (Stream* l : others) RGPU_TRY(enqueueLocked(l, [] {}, {copied}));
  return Status::ok();
}

Status SimBackend::copy2DToDevice(StreamKey s, DevPtr dst, uint64_t dpitch, Staging data, uint64_t width,
                                  uint64_t height) {
  return enqueue(s, [=, data = std::move(data)] {
    for (uint64_t r = 0; r < height; ++r)
      std::memcpy(reinterpret_cast<uint8_t*>(dst + r * dpitch), data->data() + r * width, width);
  });
}

Status SimBackend::copy2DFromDevice(StreamKey s, DevPtr src, uint64_t spitch, uint64_t width, uint64_t height,
                                    ReadDone done) {
  return enqueue(s, [=, this, done = std::move(done)] {
    std::vector<uint8_t> packed(width * height);
    for (uint64_t r = 0; r < height; ++r)
      std::memcpy(packed.data() + r * width, reinterpret_cast<const uint8_t*>(src + r * spitch), width);
    done(Status::ok(), packed.data(), packed.size(), repliedHook());
  });
}

Status SimBackend::copy2DOnDevice(StreamKey s, DevPtr dst, uint64_t dpitch, DevPtr src, uint64_t spitch,
                                  uint64_t width, uint64_t height) {
  return enqueue(s, [=] {
    for (uint64_t r = 0; r < height; ++r)
      std::memmove(reinterpret_cast<void*>(dst + r * dpitch), reinterpret_cast<const void*>(src + r * spitch), width);
  });
}

Status SimBackend::fill(StreamKey s, DevPtr dst, uint8_t value, uint64_t size) {
  return enqueue(s, [=] { std::memset(reinterpret_cast<void*>(dst), value, size); });
}

Status SimBackend::fill2D(StreamKey s, DevPtr dst, uint64_t pitch, uint8_t value, uint64_t width, uint64_t height) {
  return enqueue(s, [=] {
    for (uint64_t r = 0; r < height; ++r) std::memset(reinterpret_cast<void*>(dst + r * pitch), value, width);
  });
}

Status SimBackend::fillPattern2D(StreamKey s, DevPtr dst, uint64_t pitch, uint32_t pattern, unsigned element_size,
                                 uint64_t width, uint64_t height) {
  return enqueue(s, [=] {
    for (uint64_t r = 0; r < height; ++r) {
      auto* row = reinterpret_cast<uint8_t*>(dst + r * pitch);
      for (uint64_t x = 0; x < width; x += element_size) std::memcpy(row + x, &pattern, element_size);
    }
  });
}

// ---- modules and launches ------------------------------------------------------

Status SimBackend::loadModule(uint32_t id, int device, const std::string& fatbin) {
  return loadModuleImpl(id, device, fatbin, nullptr);
}

Status SimBackend::loadModuleAt(uint32_t id, int device, const std::string& fatbin,
                                const std::vector<ModuleGlobal>& at) {
  return loadModuleImpl(id, device, fatbin, &at);
}

Status SimBackend::loadModuleImpl(uint32_t id, int device, const std::string& fatbin,
                                  const std::vector<ModuleGlobal>* at) {
  auto image = common::parseImage(fatbin.data(), fatbin.size());  // a fatbin, or a library's PTX or cubin
  if (!image) return image.status();
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Status(err::kInvalidDevice, "invalid device");
  // The PTX closest to (not above) the device's compute capability.
  int cc = devices_[device].major * 10 + devices_[device].minor;
  const common::FatbinEntry* best = nullptr;
  for (auto& e : image->entries) {
    if (e.kind != common::FatbinEntry::kPtx) continue;
    bool fits = static_cast<int>(e.arch) <= cc, best_fits = best && static_cast<int>(best->arch) <= cc;
    if (!best || (fits && !best_fits) || (fits == best_fits && (fits ? e.arch > best->arch : e.arch < best->arch))) best = &e;
  }
  if (!best)
    return Status(209, "the fatbin has no PTX, which the sim backend needs to run its kernels (built with -rdc=true, or "
                       "with -gencode ...,code=sm_XX only). Rebuild with -arch=sm_XX (which embeds PTX) and without -rdc");
  auto program = ptx::parsePtx(best->payload);
  if (!program) return program.status();
  Module m;
  m.device = device;
  m.ptx_arch = static_cast<int>(best->arch);
  m.instructions = ptx::instructionCount(*program);
  m.uses_printf = ptx::usesPrintf(*program);
  std::lock_guard lock(mu_);
  if (modules_.count(id)) return Status(err::kInvalidValue, "module id in use");
  if (module_insts_ + m.instructions > opts_.max_module_instructions)
    return Status(err::kMemoryAllocation, "the session's modules would hold more than " +
                                              std::to_string(opts_.max_module_instructions) +
                                              " decoded PTX instructions (this one has " +
                                              std::to_string(m.instructions) + "): unload modules first");
  // Module variables live in device memory, initialised from the PTX.
  std::vector<DevPtr> addrs;
  std::vector<DevPtr> bases;  // what each allocation is released by
  auto placed = [&](const std::string& name) -> const ModuleGlobal* {
    if (!at) return nullptr;
    for (auto& g : *at)
      if (g.name == name) return &g;
    return nullptr;
  };
  auto undo = [&](Status why) {
    for (DevPtr a : bases) releaseLocked(a);
    return why;
  };
  for (auto& g : program->globals) {
    // A __managed__ variable has pages of its own, from a page boundary: the
    // client pages it as managed memory (client/managed.h).
    constexpr uint64_t kPage = 4096;
    const uint64_t size = std::max<uint64_t>(g.size, 1);
    const uint64_t alloc_size = g.managed ? (size + 2 * kPage - 1) / kPage * kPage : size;
    DevPtr base = 0, addr = 0;
    if (at) {  // a restore: where the checkpointed module had it
      const ModuleGlobal* want = placed(g.name);
      if (!want || want->size != g.size || want->alloc_size != alloc_size || want->addr < want->base ||
          want->addr + size > want->base + alloc_size)
        return undo(Status(err::kInvalidValue, "restoring module " + std::to_string(id) + ": variable " + g.name +
                                                   " does not match the checkpoint"));
      if (auto s = allocateAtLocked(device, want->base, alloc_size); !s) return undo(s);
      base = want->base;
      addr = want->addr;
    } else {
      auto p = allocateLocked(device, alloc_size);
      if (!p) return undo(p.status());
      base = *p;
      addr = g.managed ? (*p + kPage - 1) / kPage * kPage : *p;
    }
    std::memcpy(reinterpret_cast<void*>(addr), g.init.data(), g.init.size());
    addrs.push_back(addr);
    bases.push_back(base);
    m.globals[g.name] = {addr, g.size};
    m.global_alloc[g.name] = alloc_size;
    if (addr != base) m.global_bases[addr] = base;
  }
  // Variables globalAddress() allocated later (not in the PTX), where they were.
  if (at)
    for (auto& g : *at) {
      if (m.globals.count(g.name)) continue;
      if (g.addr != g.base || g.size != g.alloc_size || g.size == 0 || g.size > kMaxSimGlobalBytes)
        return undo(Status(err::kInvalidValue, "restoring module " + std::to_string(id) + ": variable " + g.name +
                                                   " does not match the checkpoint"));
      if (auto s = allocateAtLocked(device, g.base, g.size); !s) return undo(s);
      bases.push_back(g.base);
      m.globals[g.name] = {g.base, g.size};
      m.global_alloc[g.name] = g.size;
    }
  ptx::bindGlobals(*program, addrs);
  m.program = std::make_shared<const ptx::Module>(std::move(*program));
  m.image = std::move(*image);
  module_insts_ += m.instructions;
  modules_.emplace(id, std::move(m));
  return Status::ok();
}

Status SimBackend::unloadModule(uint32_t id) {
  std::lock_guard lock(mu_);
  auto it = modules_.find(id);
  if (it == modules_.end()) return Status(err::kInvalidResourceHandle, "unknown module");
  for (auto& [name, g] : it->second.globals) {
    auto base = it->second.global_bases.find(g.first);
    releaseLocked(base == it->second.global_bases.end() ? g.first : base->second);
  }
  std::erase_if(functions_, [id](const auto& f) { return f.second.module == id; });
  module_insts_ -= it->second.instructions;
  modules_.erase(it);
  return Status::ok();
}

Result<uint32_t> SimBackend::registerFunction(uint32_t id, uint32_t module, const std::string& name) {
  std::lock_guard lock(mu_);
  auto m = modules_.find(module);
  if (m == modules_.end()) return Status(err::kInvalidResourceHandle, "unknown module");
  auto k = m->second.image.kernels.find(name);
  auto code = m->second.program->functions.find(name);
  if (k == m->second.image.kernels.end() || code == m->second.program->functions.end() || !code->second.is_entry)
    return Status(err::kInvalidDeviceFunction, "kernel " + name + " is not in the module's fatbin");
  if (code->second.param_bytes != k->second.param_bytes)
    return Status(err::kInvalidKernelImage, "kernel " + name + ": PTX and cubin disagree on the parameter block");
  Function fn;
  fn.module = module;
  fn.name = name;
  fn.param_bytes = k->second.param_bytes;
  fn.program = m->second.program;
  fn.code = &code->second;
  fn.uses_printf = m->second.uses_printf;
  functions_[id] = std::move(fn);
  return k->second.param_bytes;
}

common::ClusterDims SimBackend::ownCluster(const Function& f) {
  const ptx::Function& code = *f.code;
  if (code.cluster_x) return {code.cluster_x, code.cluster_y, code.cluster_z};
  const Dim3& r = f.required_cluster;  // cudaFuncAttributeRequiredCluster*: counts once all three are set
  return r.x && r.y && r.z ? common::ClusterDims{r.x, r.y, r.z} : common::ClusterDims{};
}

Result<FunctionAttributes> SimBackend::functionAttributes(uint32_t function) {
  std::lock_guard lock(mu_);
  auto f = functions_.find(function);
  if (f == functions_.end()) return Status(err::kInvalidDeviceFunction, "unknown function");
  const Module& m = modules_.at(f->second.module);
  FunctionAttributes a;
  const DeviceDescription& d = devices_[m.device];
  a.binary_version = d.major * 10 + d.minor;
  a.ptx_version = a.binary_version;
  a.ptx_version = m.ptx_arch;
  a.num_regs = static_cast<int>(std::min<uint32_t>(255, f->second.code->num_regs));
  a.local_size = f->second.code->local_bytes;
  a.shared_size = f->second.code->static_shared;
  if (f->second.code->max_threads) a.max_threads_per_block = static_cast<int>(f->second.code->max_threads);
  a.max_dynamic_shared = f->second.max_dynamic_shared;
  const ptx::Function& code = *f->second.code;
  const common::ClusterDims own = ownCluster(f->second);
  a.cluster_x = static_cast<int>(own.x), a.cluster_y = static_cast<int>(own.y), a.cluster_z = static_cast<int>(own.z);
  a.cluster_must_be_set = code.explicit_cluster && !code.cluster_x;
  a.non_portable_cluster = f->second.non_portable_cluster;
  a.cluster_policy = f->second.cluster_policy;
  return a;
}

Status SimBackend::setFunctionAttribute(uint32_t function, int attr, int value) {
  std::lock_guard lock(mu_);
  auto f = functions_.find(function);
  if (f == functions_.end()) return Status(err::kInvalidDeviceFunction, "unknown function");
  constexpr int kMaxDynamicSharedMemorySize = 8;  // cudaFuncAttributeMaxDynamicSharedMemorySize
  constexpr int kPreferredCarveout = 9;           // cudaFuncAttributePreferredSharedMemoryCarveout
  if (attr == kMaxDynamicSharedMemorySize) {
    const Module& m = modules_.at(f->second.module);
    if (value < 0 || m.device < 0 ||
        value > devices_[static_cast<size_t>(m.device)].attributes[cudaDevAttrMaxSharedMemoryPerBlockOptin])
      return Status(err::kInvalidValue, "dynamic shared memory beyond the device's opt-in limit");
    f->second.max_dynamic_shared = value;
    return Status::ok();
  }
  if (attr == kPreferredCarveout) return Status::ok();  // advisory, as on a GPU
  Function& fn = f->second;
  switch (attr) {
    case cudaFuncAttributeRequiredClusterWidth:
    case cudaFuncAttributeRequiredClusterHeight:
    case cudaFuncAttributeRequiredClusterDepth: {
      if (fn.code->cluster_x)
        return Status(err::kNotPermitted, "kernel " + fn.name + " has its cluster dimensions from compile time (__cluster_dims__)");
      if (value < 0 || value > 16) return Status(err::kInvalidValue, "cluster dimension out of range");
      uint32_t* dim = attr == cudaFuncAttributeRequiredClusterWidth    ? &fn.required_cluster.x
                      : attr == cudaFuncAttributeRequiredClusterHeight ? &fn.required_cluster.y
                                                                       : &fn.required_cluster.z;
      *dim = static_cast<uint32_t>(value);
      return Status::ok();
    }
    case cudaFuncAttributeNonPortableClusterSizeAllowed:
      if (value != 0 && value != 1) return Status(err::kInvalidValue, "cudaFuncAttributeNonPortableClusterSizeAllowed takes 0 or 1");
      fn.non_portable_cluster = value;
      return Status::ok();
    case cudaFuncAttributeClusterSchedulingPolicyPreference:  // a preference, as on a GPU
      if (value < cudaClusterSchedulingPolicyDefault || value > cudaClusterSchedulingPolicyLoadBalancing)
        return Status(err::kInvalidValue, "unknown cluster scheduling policy");
      fn.cluster_policy = value;
      return Status::ok();
    default:
      break;
  }
  return Status(err::kInvalidValue, "unsupported function attribute " + std::to_string(attr));
}

Result<int> SimBackend::occupancy(uint32_t function, int block_size, uint64_t dynamic_smem) {
  std::lock_guard lock(mu_);
  auto f = functions_.find(function);
  if (f == functions_.end()) return Status(err::kInvalidDeviceFunction, "unknown function");
  if (block_size <= 0) return Status(err::kInvalidValue, "block size must be positive");
  return occupancyLocked(f->second, block_size, dynamic_smem);
}

int SimBackend::occupancyLocked(const Function& f, int block_size, uint64_t dynamic_smem) const {
  uint32_t bound = f.code->max_threads ? f.code->max_threads : 1024;
  if (static_cast<uint32_t>(block_size) > bound) return 0;
  // The device's per-multiprocessor limits (device_props.cc, by architecture).
  const std::vector<int32_t>& a = devices_[static_cast<size_t>(modules_.at(f.module).device)].attributes;
  int warps = (block_size + 31) / 32;
  int by_threads = a[cudaDevAttrMaxThreadsPerMultiProcessor] / 32 / warps;
  uint64_t per_block = f.code->static_shared + dynamic_smem + static_cast<uint64_t>(a[cudaDevAttrReservedSharedMemoryPerBlock]);
  int by_smem = f.code->static_shared + dynamic_smem
                    ? static_cast<int>(static_cast<uint64_t>(a[cudaDevAttrMaxSharedMemoryPerMultiprocessor]) / per_block)
                    : a[cudaDevAttrMaxBlocksPerMultiprocessor];
  return std::min({a[cudaDevAttrMaxBlocksPerMultiprocessor], by_threads, by_smem});
}

Result<GlobalVar> SimBackend::globalAddress(uint32_t module, const std::string& name, uint64_t size_hint) {
  std::lock_guard lock(mu_);
  auto m = modules_.find(module);
  if (m == modules_.end()) return Status(err::kInvalidResourceHandle, "unknown module");
  auto g = m->second.globals.find(name);
  if (g != m->second.globals.end()) return GlobalVar{g->second.first, g->second.second};
  if (size_hint == 0 || size_hint > kMaxSimGlobalBytes)
    return Status(err::kInvalidSymbol, "symbol " + name + " has size " + std::to_string(size_hint) +
                                           " (limit " + std::to_string(kMaxSimGlobalBytes) + ")");
  auto p = allocateLocked(m->second.device, size_hint);
  if (!p) return p.status();
  std::memset(reinterpret_cast<void*>(*p), 0, size_hint);
  m->second.globals[name] = {*p, size_hint};
  m->second.global_alloc[name] = size_hint;
  return GlobalVar{*p, size_hint};
}

Status SimBackend::launch(StreamKey key, uint32_t function, const LaunchConfig& requested, std::string params) {
  std::lock_guard lock(mu_);
  LaunchConfig cfg = requested;  // with the cluster the launch gets
  auto f = functions_.find(function);
  if (f == functions_.end()) return Status(err::kInvalidDeviceFunction, "unknown function");
  if (params.size() != f->second.param_bytes)
    return Status(err::kInvalidValue, "kernel " + f->second.name + " takes " + std::to_string(f->second.param_bytes) +
                                          " parameter bytes, got " + std::to_string(params.size()));
  const Dim3 &g = cfg.grid, &b = cfg.block;
  uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0 || b.x > 1024 || b.y > 1024 ||
      b.z > 64 || threads > 1024 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u)
    return Status(err::kInvalidConfiguration, "launch configuration outside the device limits");
  if (f->second.code->max_threads && threads > f->second.code->max_threads)
    return Status(err::kLaunchOutOfResources, "kernel " + f->second.name + " is bounded to " +
                                                  std::to_string(f->second.code->max_threads) +
                                                  " threads per block (__launch_bounds__); launched with " +
                                                  std::to_string(threads));
  if (cfg.shared_mem > static_cast<uint64_t>(f->second.max_dynamic_shared))
    return Status(err::kInvalidValue, "dynamic shared memory " + std::to_string(cfg.shared_mem) +
                                          " exceeds the function's limit");
  uint64_t static_shared = f->second.code->static_shared;
  if (static_shared + cfg.shared_mem > ptx::kMaxSharedBytes)
    return Status(err::kInvalidValue, "static plus dynamic shared memory exceed the device's limit");
  // Thread-block clusters: as the driver decides them (common/launch_cluster.h), on 9.0 and later.
  bool explicit_cluster = false;
  {
    auto c = common::launchCluster(f->second.name, ownCluster(f->second), f->second.code->explicit_cluster,
                                   {g.x, g.y, g.z}, {cfg.cluster.x, cfg.cluster.y, cfg.cluster.z},
                                   f->second.non_portable_cluster != 0, explicit_cluster);
    if (!c) return c.status();
    if (explicit_cluster && devices_[key.device].major < 9)
      return Status(err::kNotSupported, "thread-block clusters need compute capability 9.0; the device has " +
                                            std::to_string(devices_[key.device].major) + "." +
                                            std::to_string(devices_[key.device].minor));
    cfg.cluster = {c->x, c->y, c->z};
  }
  if (cfg.cooperative) {
    // As on a GPU: the whole grid must fit on the device at once.
    uint64_t fits = uint64_t(occupancyLocked(f->second, static_cast<int>(threads), cfg.shared_mem)) *
                    static_cast<uint64_t>(devices_[key.device].sm_count);
    uint64_t blocks = uint64_t{g.x} * g.y * g.z;
    if (blocks > fits)
      return Status(err::kCooperativeLaunchTooLarge,
                    "cooperative launch of " + std::to_string(blocks) + " blocks; the device holds " +
                        std::to_string(fits) + " of them at once (occupancy x multiprocessors)");
  }
  auto s = streamLocked(key);
  if (!s) return s.status();
  std::string name = f->second.name;
  const ptx::Function* code = f->second.code;
  std::shared_ptr<const ptx::Module> program = f->second.program;  // alive until the launch has run
  int sm_count = devices_[key.device].sm_count;
  uint64_t printf_fifo = printf_fifo_[key.device];
  if (f->second.uses_printf) printf_launched_[key.device] = true;
  if (code->uses_malloc && !heaps_[key.device]) {
    // The heap comes with the first kernel that needs it, as on a GPU.
    auto p = allocateLocked(key.device, malloc_heap_bytes_[key.device]);
    if (!p)
      return Status(err::kMemoryAllocation, "kernel " + name + " calls malloc, and the device heap of " +
                                                std::to_string(malloc_heap_bytes_[key.device]) +
                                                " bytes (cudaLimitMallocHeapSize) does not fit: " + p.status().message());
    heaps_[key.device] = std::make_unique<ptx::DeviceHeap>(*p, malloc_heap_bytes_[key.device]);
  }
  ptx::DeviceHeap* heap = heaps_[key.device].get();
  std::shared_ptr<const ptx::Textures> textures = texturesLocked();
  auto run = [this, key, function, cfg, name, program, code, sm_count, printf_fifo, heap, explicit_cluster, textures,
              params = std::move(params)] {
    if (launch_log_.is_open()) {
      std::ostringstream line;
      line << "launch function=" << function << " name=" << name << " grid=" << cfg.grid.x << ',' << cfg.grid.y
           << ',' << cfg.grid.z << " block=" << cfg.block.x << ',' << cfg.block.y << ',' << cfg.block.z
           << " shmem=" << cfg.shared_mem << " stream=" << key.id << " device=" << key.device << " params=";
      static const char* hex = "0123456789abcdef";
      for (unsigned char c : params) line << hex[c >> 4] << hex[c & 15];
      std::lock_guard l(log_mu_);
      launch_log_ << line.str() << '\n';
      launch_log_.flush();
    }
    ptx::MemoryRanges memory;
    std::function<void(std::string)> out;
    {
      std::lock_guard l(mu_);
      memory = memoryRangesLocked(t_running_op);
      out = output_sink_;
    }
    // A cooperative grid's synchronisation workspace: zeroed, the kernel's to use.
    std::unique_ptr<uint64_t[]> workspace;
    if (cfg.cooperative) {
      workspace = std::make_unique<uint64_t[]>(2);
      auto ws = reinterpret_cast<uint64_t>(workspace.get());
      memory.insert(std::lower_bound(memory.begin(), memory.end(), std::make_pair(ws, ws + 16)), {ws, ws + 16});
    }
    ptx::Launch L;
    L.fn = code;
    L.grid = {cfg.grid.x, cfg.grid.y, cfg.grid.z};
    L.block = {cfg.block.x, cfg.block.y, cfg.block.z};
    L.dynamic_shared = static_cast<uint32_t>(cfg.shared_mem);
    L.params = reinterpret_cast<const uint8_t*>(params.data());
    L.memory = &memory;
    L.sm_count = sm_count;
    L.cancel = &cancel_;
    L.printf_fifo = printf_fifo;
    L.budget = &interp_budget_;
    L.heap = heap;
    L.cooperative = cfg.cooperative;
    L.grid_workspace = reinterpret_cast<uint64_t>(workspace.get());
    L.cluster = {cfg.cluster.x, cfg.cluster.y, cfg.cluster.z};
    L.explicit_cluster = explicit_cluster;
    L.textures = textures.get();
    ptx::LaunchResult r;
    runAsKernel(key.device, [&] {
      if (opts_.kernel_timeout_ms) {
        L.timeout_ms = opts_.kernel_timeout_ms;
        L.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.kernel_timeout_ms);
      }
      r = interp_.run(L);
    });
    if (!r.output.empty() && out) out(std::move(r.output));
    if (!r.status) reportAsync(Status(r.status.code(), "kernel " + name + ": " + r.status.message()));
  };
  if (!recording_.empty()) {  // in a conditional node's body: queued for the gate each time it runs
    recording_.back().push_back([this, device = key.device, run = std::move(run)] {
      if (gate_) gate_->queued(device);
      run();
    });
    return Status::ok();
  }
  if (gate_) gate_->queued(key.device);
  Status queued = enqueueLocked(*s, std::move(run));
  if (!queued && gate_) gate_->done(key.device, 0, false);
  return queued;
}

void SimBackend::runAsKernel(int device, const std::function<void()>& work) {
  bool held = gate_ && gate_->acquire(device);  // priorities and weights among the device's sessions
  auto t0 = std::chrono::steady_clock::now();
  work();
  uint64_t ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  gpu_ns_ += ns;
  if (gate_) gate_->done(device, ns, held);
}

// ---- cuBLAS and cuBLASLt --------------------------------------------------------

Status SimBackend::blas(StreamKey key, const BlasArgs& call, ReadDone done) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (gate_) gate_->queued(key.device);
  Status queued = enqueueLocked(*s, [this, key, call, done] {
    std::string result;
    Status st;
    runAsKernel(key.device, [&] {
      ptx::MemoryRanges memory;
      if (call.op == BlasOp::kGemmBatched || call.op >= BlasOp::kGetrfBatched) {
        std::lock_guard l(mu_);
        memory = memoryRangesLocked(t_running_op);
      }
      // Pointers read from device memory (a gemmBatched or factorization array) must name this session's memory.
      auto valid = [&memory](uint64_t p, uint64_t bytes) { return ptx::findRange(memory, p, bytes) != nullptr; };
      st = simblas::run(call, valid, &result);
    });
    if (done) {
      done(st, reinterpret_cast<const uint8_t*>(result.data()), result.size(), repliedHook());
    } else if (!st) reportAsync(Status(st.code(), std::string("cuBLAS ") + blasOpName(call.op) + ": " + st.message()));
  });
  if (!queued && gate_) gate_->done(key.device, 0, false);
  return queued;
}

Status SimBackend::ltMatmul(StreamKey key, const LtArgs& call) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (gate_) gate_->queued(key.device);
  Status queued = enqueueLocked(*s, [this, key, call] {
    Status st;
    runAsKernel(key.device, [&] { st = simblas::runLt(call); });
    if (!st) reportAsync(Status(st.code(), "cublasLtMatmul: " + st.message()));
  });
  if (!queued && gate_) gate_->done(key.device, 0, false);
  return queued;
}

Result<std::vector<Backend::LtAlgo>> SimBackend::ltHeuristic(int device, const LtArgs& call, uint32_t requested,
                                                             uint64_t max_workspace) {
  // One algorithm: the CPU's, which needs no workspace.
  if (requested == 0) return std::vector<LtAlgo>{};
  LtAlgo a;
  a.algo.assign(64, '\0');
  std::memcpy(a.algo.data(), "rgpu-sim", 8);
  a.waves = 1.0f;
  return std::vector<LtAlgo>{a};
}

}  // namespace rgpu::server
