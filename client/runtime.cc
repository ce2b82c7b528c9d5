#include "client/runtime.h"

#include "client/graph.h"
#include "client/managed.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/launch_cluster.h"
#include "common/log.h"

namespace rgpu::client {
namespace {
thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
// Per-thread default streams (cudaStreamPerThread, --default-stream per-thread),
// per device. Destroyed when their thread ends, as NVIDIA's runtime does: a
// program that runs many short-lived threads must not run out of streams.
struct PerThreadStreams {
  std::map<int, cudaStream_t> by_device;
  ~PerThreadStreams() {
    for (auto& [device, h] : by_device) Runtime::get().releaseStream(h);
  }
};
thread_local PerThreadStreams t_default_streams;

// Stream and event handles this thread found valid lately
// (Runtime::streamDevice, Runtime::eventDevice), trusted while Runtime::handle_gen_ is what it was when
// they were looked up: removing any handle moves it on. A program's hot
// asynchronous calls then take no read lock of handle_mu_ (two per
// cudaStreamWaitEvent were a seventh of its cost on the calling thread).
struct HandleCache {
  static constexpr uint32_t kSlots = 8;  // by id: ids are never 0, so an empty slot matches none
  struct Slot {
    uint32_t id = 0;
    int device = 0;
  };
  uint64_t gen = ~0ull;
  Slot streams[kSlots], events[kSlots];
};
thread_local HandleCache t_handles;

// The device of handle `id` in `table` (the runtime's streams_ or events_,
// under `mu`), or -1 where it has none; from `slots` of the thread's cache
// while `gen` has not moved on since it was put there.
template <typename Table, typename DeviceOf>
int cachedDevice(HandleCache::Slot (&slots)[HandleCache::kSlots], const std::atomic<uint64_t>& gen,
                 std::shared_mutex& mu, const Table& table, uint32_t id, DeviceOf device_of) {
  HandleCache& c = t_handles;
  const uint64_t now = gen.load(std::memory_order_acquire);  // before the lookup
  HandleCache::Slot& slot = slots[id % HandleCache::kSlots];
  if (c.gen == now && slot.id == id) return slot.device;
  std::shared_lock lock(mu);
  auto it = table.find(id);
  if (it == table.end()) return -1;
  if (c.gen != now) c = HandleCache{}, c.gen = now;
  slot = {id, device_of(it->second)};
  return slot.device;
}

constexpr uint64_t kTagMask = 0xffff'ffff'0000'0000ull;
}  // namespace

Runtime& Runtime::get() {
  // Never destroyed: nvcc's atexit handlers and user static destructors may
  // call into the runtime after main returns.
  static Runtime* rt = [] {
    auto* r = new Runtime();
    pthread_atfork(nullptr, nullptr, &Runtime::atForkChild);
    return r;
  }();
  return *rt;
}

void Runtime::atForkChild() {
  // Only this thread exists in the child; the connection, its threads and any
  // lock another thread held are the parent's. Once the parent has tried to
  // connect, the child keeps its hands off all of it.
  Runtime& rt = get();
  if (rt.conn_attempted_.load()) {
    rt.forked_.store(true);
    rt.servers_ptr_.store(nullptr);
  }
}

Status Runtime::forkedError() {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    // Not through the logger: its lock may have been held by a parent thread at fork().
    static const char kMsg[] =
        "rgpu: CUDA called in a fork() child of a process that used CUDA: not supported (cudaErrorInitializationError), "
        "as with NVIDIA's runtime; the parent's session is untouched\n";
    [[maybe_unused]] auto n = ::write(2, kMsg, sizeof kMsg - 1);
  }
  return Status(err::kInitializationError, "");
}

// ---- connection and errors ----------------------------------------------------

Result<Connection*> Runtime::conn() {
  if (ServerSet* s = servers_ptr_.load(std::memory_order_acquire)) return &s->primary();
  auto s = servers();
  if (!s) return s.status();
  return &(*s)->primary();
}

Result<ServerSet*> Runtime::servers() {
  if (ServerSet* s = servers_ptr_.load(std::memory_order_acquire)) return s;
  if (forked()) return forkedError();
  conn_attempted_.store(true);
  std::lock_guard lock(conn_mu_);
  if (servers_ && !exiting_) return servers_.get();
  if (conn_tried_) return conn_error_;
  conn_tried_ = true;
  auto cfg = loadClientConfig();
  if (!cfg) {
    conn_error_ = Status(err::kDevicesUnavailable, cfg.status().message());
    common::initLogging("rgpu-client", "warn");
    RGPU_LOG_ERROR("{}", conn_error_.message());
    return conn_error_;
  }
  cfg_ = *cfg;
  common::initLogging("rgpu-client", cfg_.log_level);
  for (const auto& key : cfg_.unknown_keys)
    RGPU_LOG_WARN("config {}: unknown key '{}' is ignored (docs/configuration.md lists the keys)", cfg_.source, key);
  auto c = ServerSet::open(cfg_, [this](size_t part) -> Connection::HostFuncHandler {
    return [this, part](uint64_t id) { runHostFunc(id, part); };
  });
  if (!c) {
    conn_error_ = c.status();
    RGPU_LOG_ERROR("{}", conn_error_.message());
    return conn_error_;
  }
  servers_ = std::move(*c);
  servers_ptr_.store(servers_.get(), std::memory_order_release);
  // Registered after OpenSSL's own handler, so it runs before it.
  std::atexit(&Runtime::shutdownAtExit);
  return servers_.get();
}

void Runtime::shutdownAtExit() {
  Runtime& rt = get();
  if (rt.forked()) return;  // the parent's connection: not ours to close
  std::lock_guard lock(rt.conn_mu_);
  rt.exiting_ = true;
  rt.conn_tried_ = true;
  rt.conn_error_ = Status(err::kCudartUnloading, "the program is exiting: the rgpu connection is closed");
  rt.servers_ptr_.store(nullptr, std::memory_order_release);
  // The Connection objects stay (a thread of the program may still hold a
  // pointer to one); closing makes their calls fail instead of touching freed state.
  if (rt.servers_) {
    rt.servers_->close();
    // The context's destruction flushes the device's printf buffer on a GPU.
    std::string rest = rt.servers_->takeDeviceOutput();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fflush(stdout);
  }
}

cudaError_t Runtime::finish(const Status& s) {
  if (s) return cudaSuccess;
  auto code = static_cast<cudaError_t>(s.code());
  t_last_error = code;
  if (!s.message().empty()) RGPU_LOG_DEBUG("call failed ({}): {}", s.code(), s.message());
  return code;
}

cudaError_t Runtime::lastError(bool reset) {
  if (int s = sticky()) return static_cast<cudaError_t>(s);
  cudaError_t e = t_last_error;
  if (reset) t_last_error = cudaSuccess;
  return e;
}

void Runtime::flushDeviceOutput() {
  ServerSet* c = servers_ptr_.load(std::memory_order_acquire);
  if (!c) return;
  std::string text = c->takeDeviceOutput();
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// ---- devices ---------------------------------------------------------------------

int Runtime::currentDevice() { return t_device; }

Status Runtime::setCurrentDevice(int device) {
  auto d = this->device(device);
  if (!d) return d.status();
  t_device = device;
  return Status::ok();
}

Result<const Welcome::Device*> Runtime::device(int index) {
  auto c = servers();
  if (!c) return c.status();
  const auto& devs = (*c)->devices();
  if (devs.empty()) return Status(err::kNoDevice, "the rgpu server offers no devices");
  if (index < 0 || static_cast<size_t>(index) >= devs.size())
    return Status(err::kInvalidDevice, "device " + std::to_string(index) + " does not exist");
  return &devs[static_cast<size_t>(index)];
}

int Runtime::deviceCount() {
  auto c = servers();
  return c ? static_cast<int>((*c)->devices().size()) : 0;
}

namespace {
// CUDA's defaults (cudaDeviceGetLimit on a fresh context).
Result<size_t> defaultLimit(cudaLimit which) {
  switch (which) {
    case cudaLimitStackSize: return size_t{1024};
    case cudaLimitPrintfFifoSize: return size_t{1} << 20;
    case cudaLimitMallocHeapSize: return size_t{8} << 20;
    case cudaLimitDevRuntimeSyncDepth: return size_t{2};
    case cudaLimitDevRuntimePendingLaunchCount: return size_t{2048};
    case cudaLimitMaxL2FetchGranularity: return size_t{64};
    case cudaLimitPersistingL2CacheSize: return size_t{0};
  }
  return Status(cudaErrorUnsupportedLimit, "unknown cudaLimit " + std::to_string(static_cast<int>(which)));
}
}  // namespace

Result<size_t> Runtime::limit(int device, cudaLimit which) {
  RGPU_TRY(this->device(device).status());
  auto d = defaultLimit(which);
  if (!d) return d.status();
  std::lock_guard lock(limits_mu_);
  auto it = limits_.find({device, static_cast<int>(which)});
  return it == limits_.end() ? *d : it->second;
}

Status Runtime::setLimit(int device, cudaLimit which, size_t value) {
  RGPU_TRY(this->device(device).status());
  RGPU_TRY(defaultLimit(which).status());
  if (which == cudaLimitMaxL2FetchGranularity && (value > 128 || (value & (value - 1))))
    return Status(err::kInvalidValue, "the L2 fetch granularity is a power of two up to 128");
  if (which == cudaLimitPrintfFifoSize || which == cudaLimitMallocHeapSize) {
    // The device keeps printf output in a FIFO of this size, and kernels'
    // malloc draws on a heap of that one: the server's to allocate (and to
    // refuse past its bounds, or once a kernel that uses them ran).
    common::CallMessage msg(32);
    auto m = msg.initRoot<wire::Request>().initSetLimit();
    m.setDevice(device);
    m.setLimit(static_cast<int>(which));
    m.setValue(value);
    auto r = call(msg);
    if (!r) return r.status();
  }
  std::lock_guard lock(limits_mu_);
  limits_[{device, static_cast<int>(which)}] = value;
  return Status::ok();
}

// ---- streams and events ---------------------------------------------------------

cudaStream_t Runtime::newStream(int device, unsigned flags, int priority, uint32_t* id) {
  *id = next_stream_.fetch_add(1);
  {
    std::unique_lock lock(handle_mu_);
    streams_[*id] = {device, flags, priority};
  }
  return reinterpret_cast<cudaStream_t>(kStreamTag | *id);
}

Result<uint32_t> Runtime::newOwnStream(int device) {
  uint32_t id = 0;
  (void)newStream(device, cudaStreamNonBlocking, 0, &id);
  common::CallMessage msg(32);
  auto m = msg.initRoot<wire::Request>().initStreamCreate();
  m.initStream().setId(id);
  m.getStream().setDevice(device);
  m.setFlags(cudaStreamNonBlocking);
  RGPU_TRY(post(msg));
  return id;
}

Result<StreamRef> Runtime::stream(cudaStream_t s, bool per_thread_default) {
  auto v = reinterpret_cast<uint64_t>(s);
  if (v == 0 && per_thread_default) s = cudaStreamPerThread, v = 2;
  if (v == 0 || v == 1) return StreamRef{0, t_device};
  if (v == 2) {
    auto& mine = t_default_streams.by_device;
    auto it = mine.find(t_device);
    // cudaDeviceReset destroys the device's streams, this one too.
    if (it != mine.end() && streamDevice(static_cast<uint32_t>(reinterpret_cast<uint64_t>(it->second))) < 0)
      it = mine.end();
    if (it == mine.end()) {
      uint32_t id;
      cudaStream_t h = newStream(t_device, 0, 0, &id);
      common::CallMessage msg(64);
      auto sc = msg.initRoot<wire::Request>().initStreamCreate();
      sc.initStream().setId(id);
      sc.getStream().setDevice(t_device);
      RGPU_TRY(post(msg));
      it = mine.insert_or_assign(t_device, h).first;
    }
    v = reinterpret_cast<uint64_t>(it->second);
  }
  if ((v & kTagMask) != kStreamTag) return Status(err::kInvalidResourceHandle, "not a stream handle");
  auto id = static_cast<uint32_t>(v);
  const int device = streamDevice(id);
  if (device < 0) return Status(err::kInvalidResourceHandle, "stream was destroyed or never created");
  return StreamRef{id, device};
}

int Runtime::streamDevice(uint32_t id) {
  return cachedDevice(t_handles.streams, handle_gen_, handle_mu_, streams_, id,
                      [](const StreamState& s) { return s.device; });
}

void Runtime::releaseStream(cudaStream_t s) noexcept {
  try {
    if (exiting_.load() || forked_.load()) return;
    StreamRef ref;
    if (!dropStream(s, &ref)) return;
    common::CallMessage msg(32);
    auto sr = msg.initRoot<wire::Request>().initStreamDestroy();
    sr.setId(ref.id);
    sr.setDevice(ref.device);
    (void)post(msg);
  } catch (...) {
  }
}

Status Runtime::dropStream(cudaStream_t s, StreamRef* ref) {
  auto v = reinterpret_cast<uint64_t>(s);
  if ((v & kTagMask) != kStreamTag) return Status(err::kInvalidResourceHandle, "not a stream handle");
  std::unique_lock lock(handle_mu_);
  auto it = streams_.find(static_cast<uint32_t>(v));
  if (it == streams_.end()) return Status(err::kInvalidResourceHandle, "stream was destroyed or never created");
  *ref = {it->first, it->second.device};
  streams_.erase(it);
  handle_gen_.fetch_add(1, std::memory_order_release);
  return Status::ok();
}

Result<std::pair<unsigned, int>> Runtime::streamInfo(cudaStream_t s) {
  auto v = reinterpret_cast<uint64_t>(s);
  if (v == 0 || v == 1) return std::make_pair(0u, 0);
  if (v == 2) return std::make_pair(0u, 0);
  if ((v & kTagMask) != kStreamTag) return Status(err::kInvalidResourceHandle, "not a stream handle");
  std::shared_lock lock(handle_mu_);
  auto it = streams_.find(static_cast<uint32_t>(v));
  if (it == streams_.end()) return Status(err::kInvalidResourceHandle, "stream was destroyed or never created");
  return std::make_pair(it->second.flags, it->second.priority);
}

Status Runtime::setStreamPriority(cudaStream_t s, int priority) {
  auto v = reinterpret_cast<uint64_t>(s);
  if (v <= 2) return Status::ok();  // the default streams keep priority 0
  if ((v & kTagMask) != kStreamTag) return Status(err::kInvalidResourceHandle, "not a stream handle");
  std::unique_lock lock(handle_mu_);
  auto it = streams_.find(static_cast<uint32_t>(v));
  if (it == streams_.end()) return Status(err::kInvalidResourceHandle, "stream was destroyed or never created");
  it->second.priority = priority;
  return Status::ok();
}

cudaEvent_t Runtime::newEvent(int device, unsigned /*flags*/, uint32_t* id) {
  *id = next_event_.fetch_add(1);
  {
    std::unique_lock lock(handle_mu_);
    events_[*id] = device;
  }
  return reinterpret_cast<cudaEvent_t>(kEventTag | *id);
}

Result<uint32_t> Runtime::event(cudaEvent_t e) {
  auto v = reinterpret_cast<uint64_t>(e);
  if ((v & kTagMask) != kEventTag) return Status(err::kInvalidResourceHandle, "not an event handle");
  const auto id = static_cast<uint32_t>(v);
  if (eventDevice(id) < 0) return Status(err::kInvalidResourceHandle, "event was destroyed or never created");
  return id;
}

int Runtime::eventDevice(uint32_t id) {
  return cachedDevice(t_handles.events, handle_gen_, handle_mu_, events_, id, [](int device) { return device; });
}

Status Runtime::dropEvent(cudaEvent_t e, uint32_t* id, int* device) {
  auto v = reinterpret_cast<uint64_t>(e);
  if ((v & kTagMask) != kEventTag) return Status(err::kInvalidResourceHandle, "not an event handle");
  std::unique_lock lock(handle_mu_);
  auto it = events_.find(static_cast<uint32_t>(v));
  if (it == events_.end()) return Status(err::kInvalidResourceHandle, "event was destroyed or never created");
  if (device) *device = it->second;
  events_.erase(it);
  handle_gen_.fetch_add(1, std::memory_order_release);
  *id = static_cast<uint32_t>(v);
  return Status::ok();
}

uint64_t Runtime::newHostFuncId() {
  std::lock_guard lock(host_fn_mu_);
  return next_host_fn_++;
}

uint64_t Runtime::addHostFunc(void (*fn)(void*), void* user) {
  std::lock_guard lock(host_fn_mu_);
  uint64_t id = next_host_fn_++;
  host_fns_[id] = {fn, user};
  return id;
}

void Runtime::runHostFunc(uint64_t id, size_t part) {
  std::pair<void (*)(void*), void*> f{nullptr, nullptr};
  {
    std::unique_lock lock(host_fn_mu_);
    if (auto g = gates_.find(id); g != gates_.end()) {
      // A cross-server wait's gate: no code of the program's.
      std::shared_ptr<Gate> gate = g->second;
      gates_.erase(g);
      bool open_now = false;
      if (id == gate->waiter) {
        gate->arrived = true;
        open_now = gate->opened;
      } else {
        gate->opened = true;
        open_now = gate->arrived;
      }
      lock.unlock();
      if (id != gate->waiter) hostFuncDone(id, part);  // the event's side goes on at once
      if (open_now) hostFuncDone(gate->waiter, gate->waiter_part);
      return;
    }
    auto it = host_fns_.find(id);
    if (it != host_fns_.end()) {
      f = it->second;
      host_fns_.erase(it);
    }
  }
  flushDeviceOutput();  // as the driver does before a stream callback
  if (f.first) f.first(f.second);
  else RGPU_LOG_WARN("server asked for unknown host function {}", id);
  // The stream on the server waits for this before it proceeds.
  hostFuncDone(id, part);
}

// ---- memory tracking ------------------------------------------------------------

DeviceRanges::Result Runtime::trackDevice(uint64_t ptr, uint64_t size, int device) {
  ServerSet* set = servers_ptr_.load(std::memory_order_acquire);
  std::unique_lock lock(mem_mu_);
  if (set && !set->single()) {
    // Two members' drivers may hand out the same addresses: a pointer must
    // name one allocation, so one that overlaps another member's is refused.
    auto after = device_allocs_.lower_bound(ptr + size);
    if (after != device_allocs_.begin()) {
      auto before = std::prev(after);
      if (before->first + before->second.size > ptr && !set->sameServer(before->second.device, device))
        return DeviceRanges::Result::kCollides;
    }
  }
  auto it = device_allocs_.find(ptr);
  if (it != device_allocs_.end() && it->second.size == size && it->second.device == device)
    return DeviceRanges::Result::kReserved;  // known already (a symbol used again)
  if (it != device_allocs_.end() && it->second.reserved) device_ranges_.release(ptr, it->second.size);
  DeviceRanges::Result r = device_ranges_.reserve(ptr, size);
  device_allocs_[ptr] = {size, device, 0, r == DeviceRanges::Result::kReserved};
  return r;
}

void Runtime::untrackDevice(uint64_t ptr, int device) {
  std::unique_lock lock(mem_mu_);
  auto it = device_allocs_.find(ptr);
  if (it == device_allocs_.end() || (device >= 0 && it->second.device != device)) return;
  if (it->second.reserved) device_ranges_.release(ptr, it->second.size);
  device_allocs_.erase(it);
}

void Runtime::untrackDeviceAll(int device) {
  std::unique_lock lock(mem_mu_);
  for (auto it = device_allocs_.begin(); it != device_allocs_.end();) {
    if (it->second.device != device) {
      ++it;
      continue;
    }
    if (it->second.reserved) device_ranges_.release(it->first, it->second.size);
    it = device_allocs_.erase(it);
  }
}

void Runtime::forgetDevice(int device) {
  ManagedMemory::get().forgetDevice(device);
  untrackDeviceAll(device);
  {
    // Limits and kernel attributes set on the device start from their defaults again.
    std::lock_guard lock(limits_mu_);
    std::erase_if(limits_, [device](const auto& l) { return l.first.first == device; });
  }
  {
    std::unique_lock lock(launch_limits_mu_);
    std::erase_if(launch_limits_, [device](const auto& l) { return l.first.second == device; });
  }
  {
    std::unique_lock lock(reg_mu_);
    for (ModuleRecord& m : modules_) m.shipped &= ~(1ull << device);
    for (VarRecord& v : vars_) v.address.erase(device);
  }
  std::unique_lock lock(handle_mu_);
  std::erase_if(streams_, [device](const auto& s) { return s.second.device == device; });
  std::erase_if(events_, [device](const auto& e) { return e.second == device; });
  handle_gen_.fetch_add(1, std::memory_order_release);
}

MemKind Runtime::classify(const void* p, int* device, uint64_t* base, uint64_t* size, unsigned* flags) {
  auto v = reinterpret_cast<uint64_t>(p);
  std::shared_lock lock(mem_mu_);
  auto find = [v](const std::map<uint64_t, Range>& m) -> const std::pair<const uint64_t, Range>* {
    auto it = m.upper_bound(v);
    if (it == m.begin()) return nullptr;
    --it;
    return v - it->first < it->second.size ? &*it : nullptr;
  };
  if (auto* d = find(device_allocs_)) {
    if (device) *device = d->second.device;
    if (base) *base = d->first;
    if (size) *size = d->second.size;
    return MemKind::kDevice;
  }
  if (auto* h = find(pinned_)) {
    if (base) *base = h->first;
    if (size) *size = h->second.size;
    if (flags) *flags = h->second.flags;
    return MemKind::kPinned;
  }
  return MemKind::kHost;
}

void Runtime::trackPinned(const void* p, uint64_t size, unsigned flags) {
  std::unique_lock lock(mem_mu_);
  pinned_[reinterpret_cast<uint64_t>(p)] = {size, -1, flags};
}

bool Runtime::pinnedAt(const void* p, uint64_t* size, unsigned* flags) {
  std::shared_lock lock(mem_mu_);
  auto it = pinned_.find(reinterpret_cast<uint64_t>(p));
  if (it == pinned_.end()) return false;
  *size = it->second.size;
  *flags = it->second.flags;
  return true;
}

void Runtime::untrackPinned(const void* p) {
  std::unique_lock lock(mem_mu_);
  pinned_.erase(reinterpret_cast<uint64_t>(p));
}

void Runtime::waitForWritesInto(const void* p, uint64_t len) {
  if (ServerSet* c = servers_ptr_.load(std::memory_order_acquire))
    for (size_t i = 0; i < c->size(); ++i) c->part(i).waitForWritesInto(p, len);
}

// ---- registration --------------------------------------------------------------------

void** Runtime::registerFatBinary(void* wrapper) {
  std::unique_lock lock(reg_mu_);
  ModuleRecord m;
  m.index = static_cast<uint32_t>(modules_.size());
  auto bytes = common::fatbinFromWrapper(wrapper);
  if (bytes) {
    auto image = common::parseFatbin(bytes->data(), bytes->size());
    if (image) {
      m.kernels = std::move(image->kernels);
      m.fatbin = std::move(*bytes);
    } else {
      RGPU_LOG_WARN("fatbin {} not usable: {}", m.index, image.status().message());
    }
  } else {
    RGPU_LOG_WARN("fatbin {} not usable: {}", m.index, bytes.status().message());
  }
  modules_.push_back(std::move(m));
  // The handle nvcc keeps: a stable cell holding our module index.
  auto* cell = new uintptr_t(modules_.back().index);
  return reinterpret_cast<void**>(cell);
}

void Runtime::registerFunction(void** handle, const char* host_fun, const char* device_name) {
  std::unique_lock lock(reg_mu_);
  auto module = static_cast<uint32_t>(*reinterpret_cast<uintptr_t*>(handle));
  KernelRecord k;
  k.index = static_cast<uint32_t>(kernels_.size());
  k.module = module;
  k.name = device_name;
  k.host_fun = host_fun;
  auto& m = modules_[module];
  if (auto it = m.kernels.find(k.name); it != m.kernels.end()) {
    k.has_layout = true;
    k.layout = it->second;
  }
  m.kernel_ids.push_back(k.index);
  kernel_by_host_[host_fun] = k.index;
  kernels_.push_back(std::move(k));
}

void Runtime::registerVar(void** handle, char* host_var, const char* device_name, size_t size, int constant) {
  std::unique_lock lock(reg_mu_);
  auto module = static_cast<uint32_t>(*reinterpret_cast<uintptr_t*>(handle));
  VarRecord v;
  v.index = static_cast<uint32_t>(vars_.size());
  v.module = module;
  v.name = device_name;
  v.size = size;
  v.constant = constant != 0;
  modules_[module].var_ids.push_back(v.index);
  var_by_host_[host_var] = v.index;
  vars_.push_back(std::move(v));
}

void Runtime::aliasVar(const void* alias, const void* host_var) {
  std::unique_lock lock(reg_mu_);
  auto it = var_by_host_.find(host_var);
  if (it != var_by_host_.end()) var_by_host_[alias] = it->second;
}

void Runtime::unregisterFatBinary(void** handle) {
  // Runs from atexit: the session ends with the process and the server frees
  // the module then; sending more here would only slow the exit down.
  if (forked()) return;  // a lock a parent thread held at fork() may never be released here
  std::unique_lock lock(reg_mu_);
  auto module = static_cast<uint32_t>(*reinterpret_cast<uintptr_t*>(handle));
  if (module < modules_.size()) modules_[module].unregistered = true;
}

Result<const KernelRecord*> Runtime::kernelByHostFun(const void* host_fun) {
  std::shared_lock lock(reg_mu_);
  auto it = kernel_by_host_.find(host_fun);
  if (it == kernel_by_host_.end()) {
    // A cudaKernel_t (cudaGetKernel, cudaLibraryGetKernel) or cudaFunction_t
    // (cudaGetFuncBySymbol) stands for its kernel wherever a function pointer
    // is taken, as in CUDA 12+.
    auto v = reinterpret_cast<uint64_t>(host_fun);
    if ((v & kTagMask) == kKernelTag && static_cast<uint32_t>(v) < kernels_.size()) {
      const KernelRecord& k = kernels_[static_cast<uint32_t>(v)];
      if (modules_[k.module].unloaded) return Status(err::kInvalidResourceHandle, "the kernel's library was unloaded");
      return &k;
    }
    return Status(err::kInvalidDeviceFunction, "no kernel registered for this host function");
  }
  return &kernels_[it->second];
}

cudaKernel_t Runtime::handleOf(const KernelRecord& k) { return reinterpret_cast<cudaKernel_t>(kKernelTag | k.index); }

const KernelRecord* Runtime::kernelByServerId(uint32_t id) {
  std::shared_lock lock(reg_mu_);
  uint32_t idx = (id >> 6) - 1;
  if ((id >> 6) == 0 || idx >= kernels_.size()) return nullptr;
  return &kernels_[idx];
}

bool Runtime::streamNonBlocking(uint32_t id) {
  std::shared_lock lock(handle_mu_);
  auto it = streams_.find(id);
  return it != streams_.end() && (it->second.flags & cudaStreamNonBlocking);
}

Result<const KernelRecord*> Runtime::kernelByHandle(cudaKernel_t handle) {
  auto v = reinterpret_cast<uint64_t>(handle);
  if ((v & kTagMask) != kKernelTag) return Status(err::kInvalidResourceHandle, "not a kernel handle");
  std::shared_lock lock(reg_mu_);
  auto idx = static_cast<uint32_t>(v);
  if (idx >= kernels_.size()) return Status(err::kInvalidResourceHandle, "not a kernel handle");
  if (modules_[kernels_[idx].module].unloaded)
    return Status(err::kInvalidResourceHandle, "the kernel's library was unloaded");
  return &kernels_[idx];
}

Status Runtime::ensureShipped(uint32_t module, int device) {
  {
    std::shared_lock lock(reg_mu_);
    if (modules_[module].shipped & (1ull << device)) return Status::ok();
  }
  std::lock_guard ship(ship_mu_);
  std::shared_lock lock(reg_mu_);
  ModuleRecord& m = modules_[module];
  if (m.shipped & (1ull << device)) return Status::ok();
  if (m.unloaded) return Status(err::kInvalidResourceHandle, "the library was unloaded");
  if (m.fatbin.empty()) return Status(err::kInvalidKernelImage, "this module's fatbin could not be read");
  flushDeviceOutput();  // module loading flushes the printf buffer on a GPU
  if (device >= 64) return Status(err::kInvalidDevice, "rgpu supports 64 devices per server");
  uint32_t mid = (m.index + 1) << 6 | static_cast<uint32_t>(device);
  // All asynchronous: the fatbin bulk is written now, errors surface at the
  // next synchronising call, and no round trip is spent.
  {
    common::CallMessage msg(64);
    auto ml = msg.initRoot<wire::Request>().initModuleLoad();
    ml.setId(mid);
    ml.setDevice(device);
    RGPU_TRY(post(msg, m.fatbin.data(), m.fatbin.size()));
  }
  for (uint32_t kid : m.kernel_ids) {
    common::CallMessage msg(64);
    auto fr = msg.initRoot<wire::Request>().initFunctionRegister();
    fr.setId(serverKernelId(kernels_[kid], device));
    fr.setModule(mid);
    fr.setName(kernels_[kid].name);
    RGPU_TRY(post(msg));
  }
  for (uint32_t vid : m.var_ids) {
    common::CallMessage msg(64);
    auto vr = msg.initRoot<wire::Request>().initVarRegister();
    vr.setId((vid + 1) << 6 | static_cast<uint32_t>(device));
    vr.setModule(mid);
    vr.setName(vars_[vid].name);
    vr.setSize(vars_[vid].size);
    vr.setConstant(vars_[vid].constant);
    RGPU_TRY(post(msg));
  }
  lock.unlock();
  std::unique_lock w(reg_mu_);
  m.shipped |= 1ull << device;
  return Status::ok();
}

Result<std::pair<uint64_t, uint64_t>> Runtime::symbol(const void* host_var, int device) {
  uint32_t vid, module;
  uint64_t size;
  {
    std::shared_lock lock(reg_mu_);
    auto it = var_by_host_.find(host_var);
    if (it == var_by_host_.end()) return Status(err::kInvalidSymbol, "not a registered __device__ or __constant__ variable");
    vid = it->second;
    VarRecord& v = vars_[vid];
    if (auto a = v.address.find(device); a != v.address.end()) return std::make_pair(a->second, v.size);
    module = v.module;
    size = v.size;
  }
  RGPU_TRY(ensureShipped(module, device));
  auto where = resolveVar(vid, device);
  if (!where) return where.status();
  return std::make_pair(where->first, size);
}

Result<std::pair<uint64_t, uint64_t>> Runtime::resolveVar(uint32_t vid, int device) {
  common::CallMessage msg(32);
  msg.initRoot<wire::Request>().initSymbolAddress().setId((vid + 1) << 6 | static_cast<uint32_t>(device));
  auto r = call(msg);
  if (!r) return r.status();
  auto sym = r->reader().getSymbol();
  uint64_t addr = sym.getAddress(), size = sym.getSize();
  std::unique_lock lock(reg_mu_);
  vars_[vid].address[device] = addr;
  if (sym.getManagedSize()) vars_[vid].managed[device] = {sym.getManagedBase(), sym.getManagedSize()};
  return std::make_pair(addr, size);
}

std::pair<uint64_t, uint64_t> Runtime::managedRange(const void* host_var, int device) {
  std::shared_lock lock(reg_mu_);
  auto it = var_by_host_.find(host_var);
  if (it == var_by_host_.end()) return {0, 0};
  const VarRecord& v = vars_[it->second];
  if (auto m = v.managed.find(device); m != v.managed.end()) return m->second;
  auto a = v.address.find(device);
  return a == v.address.end() ? std::make_pair(uint64_t{0}, uint64_t{0}) : std::make_pair(a->second, v.size);
}

Result<cudaFuncAttributes> Runtime::funcAttributes(const KernelRecord& k, int device) {
  LaunchLimits l;
  cudaFuncAttributes attr;
  std::memset(&attr, 0, sizeof attr);
  Status s = ensureShipped(k.module, device);
  if (s) {
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initFuncGetAttributes().setId(serverKernelId(k, device));
    auto r = call(msg);
    if (r) {
      auto a = r->reader().getFuncAttributes();
      attr.sharedSizeBytes = a.getSharedSizeBytes();
      attr.constSizeBytes = a.getConstSizeBytes();
      attr.localSizeBytes = a.getLocalSizeBytes();
      attr.maxThreadsPerBlock = a.getMaxThreadsPerBlock();
      attr.numRegs = a.getNumRegs();
      attr.ptxVersion = a.getPtxVersion();
      attr.binaryVersion = a.getBinaryVersion();
      attr.cacheModeCA = a.getCacheModeCA();
      attr.maxDynamicSharedSizeBytes = a.getMaxDynamicSharedSizeBytes();
      attr.preferredShmemCarveout = a.getPreferredShmemCarveout();
      attr.clusterDimMustBeSet = a.getClusterDimMustBeSet();
      attr.requiredClusterWidth = a.getRequiredClusterWidth();
      attr.requiredClusterHeight = a.getRequiredClusterHeight();
      attr.requiredClusterDepth = a.getRequiredClusterDepth();
      attr.nonPortableClusterSizeAllowed = a.getNonPortableClusterSizeAllowed();
      attr.clusterSchedulingPolicyPreference = a.getClusterSchedulingPolicyPreference();
      l.max_threads = static_cast<uint32_t>(std::max(0, attr.maxThreadsPerBlock));
      l.static_shared = attr.sharedSizeBytes;
      l.max_dynamic_shared = static_cast<uint64_t>(std::max(0, attr.maxDynamicSharedSizeBytes));
      if (attr.requiredClusterWidth > 0 && attr.requiredClusterHeight > 0 && attr.requiredClusterDepth > 0) {
        l.cluster_x = static_cast<uint32_t>(attr.requiredClusterWidth);
        l.cluster_y = static_cast<uint32_t>(attr.requiredClusterHeight);
        l.cluster_z = static_cast<uint32_t>(attr.requiredClusterDepth);
      }
      l.cluster_must_be_set = attr.clusterDimMustBeSet != 0;
      l.non_portable_cluster = attr.nonPortableClusterSizeAllowed != 0;
    } else {
      s = r.status();
    }
  }
  // The kernel's own trouble (no image for this device, ...) is remembered;
  // a lost connection or a fault is not the kernel's.
  if (!s && (s.code() == err::kDevicesUnavailable || s.code() == err::kCudartUnloading || err::isSticky(s.code())))
    return s;
  if (!s) {
    common::logOnce("kernel:" + k.name + ":" + s.message(), "kernel " + k.name + " cannot run on device " +
                                                                std::to_string(device) + ": " + s.message());
    l.error = s;
  }
  {
    std::unique_lock lock(launch_limits_mu_);
    launch_limits_[{k.index, device}] = l;
  }
  if (!s) return s;
  return attr;
}

Result<LaunchLimits> Runtime::launchLimits(const KernelRecord& k, int device, bool refresh) {
  if (!refresh) {
    std::shared_lock lock(launch_limits_mu_);
    auto it = launch_limits_.find({k.index, device});
    if (it != launch_limits_.end()) return it->second;
  }
  auto a = funcAttributes(k, device);
  std::shared_lock lock(launch_limits_mu_);
  auto it = launch_limits_.find({k.index, device});
  if (it == launch_limits_.end()) return a.status();
  return it->second;
}

void Runtime::forgetLaunchLimits(const KernelRecord& k, int device) {
  std::unique_lock lock(launch_limits_mu_);
  launch_limits_.erase({k.index, device});
  for (auto it = occupancy_.begin(); it != occupancy_.end();)
    it = std::get<0>(it->first) == k.index && std::get<1>(it->first) == device ? occupancy_.erase(it) : std::next(it);
}

Status Runtime::launch(const KernelRecord& k, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream,
                       bool ptsz, bool cooperative, dim3 cluster) {
  flushDeviceOutput();  // a launch flushes the printf buffer on a GPU
  auto s = this->stream(stream, ptsz);
  if (!s) return s.status();
  RGPU_TRY(checkLaunch(k, grid, block, shmem, s->device, cluster));
  if (!k.layout.params.empty() && !args) return Status(err::kInvalidValue, "kernel arguments missing");
  if (cooperative)
    RGPU_TRY(checkCooperative(k, s->device, uint64_t{grid.x} * grid.y * grid.z, static_cast<int>(block.x * block.y * block.z),
                              shmem));

  common::CallMessage msg(128 + k.layout.param_bytes / 8);
  auto lk = msg.initRoot<wire::Request>().initLaunchKernel();
  lk.setFunction(serverKernelId(k, s->device));
  auto g = lk.initGrid();
  g.setX(grid.x), g.setY(grid.y), g.setZ(grid.z);
  auto b = lk.initBlock();
  b.setX(block.x), b.setY(block.y), b.setZ(block.z);
  lk.setSharedMem(shmem);
  auto sr = lk.initStream();
  sr.setId(s->id);
  sr.setDevice(s->device);
  lk.setCooperative(cooperative);
  if (cluster.x || cluster.y || cluster.z) {  // the server checks it against the kernel and the grid
    auto c = lk.initCluster();
    c.setX(cluster.x), c.setY(cluster.y), c.setZ(cluster.z);
  }
  // Argument pointers point into the caller's stack frame: pack them now.
  auto params = lk.initParams(k.layout.param_bytes);
  for (size_t i = 0; i < k.layout.params.size(); ++i) {
    const auto& p = k.layout.params[i];
    if (p.size) std::memcpy(params.begin() + p.offset, args[i], p.size);
  }
  return post(msg);
}

Result<int> Runtime::blocksPerMultiprocessor(const KernelRecord& k, int device, int block_threads, size_t shmem) {
  auto key = std::make_tuple(k.index, device, block_threads, shmem);
  {
    std::shared_lock lock(launch_limits_mu_);
    auto it = occupancy_.find(key);
    if (it != occupancy_.end()) return it->second;
  }
  RGPU_TRY(ensureShipped(k.module, device));
  common::CallMessage msg(32);
  auto m = msg.initRoot<wire::Request>().initOccupancy();
  m.setId(serverKernelId(k, device));
  m.setBlockSize(block_threads);
  m.setDynamicSmem(shmem);
  auto r = call(msg);
  if (!r) return r.status();
  int n = static_cast<int>(r->reader().getValue());
  std::unique_lock lock(launch_limits_mu_);
  occupancy_[key] = n;
  return n;
}

Status Runtime::checkCluster(const KernelRecord& k, const LaunchLimits& lim, dim3 grid, dim3 cluster, int device_index) {
  const bool asked = cluster.x || cluster.y || cluster.z, own = lim.cluster_x != 0;
  if (!asked && !own && !lim.cluster_must_be_set) return Status::ok();
  auto dev = device(device_index);
  if (!dev) return dev.status();
  const auto& a = (*dev)->attributes;
  if (static_cast<size_t>(cudaDevAttrClusterLaunch) >= a.size() || !a[cudaDevAttrClusterLaunch])
    return Status(err::kNotSupported, "the device does not support thread-block clusters");
  bool explicit_cluster = false;
  auto c = common::launchCluster(k.name, {lim.cluster_x, lim.cluster_y, lim.cluster_z}, lim.cluster_must_be_set,
                                 {grid.x, grid.y, grid.z}, {cluster.x, cluster.y, cluster.z}, lim.non_portable_cluster,
                                 explicit_cluster);
  return c ? Status::ok() : c.status();
}

Status Runtime::checkCooperative(const KernelRecord& k, int device_index, uint64_t blocks, int block_threads,
                                 size_t shmem) {
  auto dev = device(device_index);
  if (!dev) return dev.status();
  const auto& a = (*dev)->attributes;
  if (static_cast<size_t>(cudaDevAttrCooperativeLaunch) >= a.size() || !a[cudaDevAttrCooperativeLaunch])
    return Status(err::kNotSupported, "the device does not support cooperative launches");
  auto per_sm = blocksPerMultiprocessor(k, device_index, block_threads, shmem);
  if (!per_sm) return per_sm.status();
  uint64_t fits = uint64_t(*per_sm) * static_cast<uint64_t>(a[cudaDevAttrMultiProcessorCount]);
  if (blocks > fits)
    return Status(err::kCooperativeLaunchTooLarge,
                  "cooperative launch of " + std::to_string(blocks) + " blocks of kernel " + k.name + "; the device holds " +
                      std::to_string(fits) + " at once (" + std::to_string(*per_sm) + " per multiprocessor)");
  return Status::ok();
}

Status Runtime::checkLaunch(const KernelRecord& k, dim3 grid, dim3 block, size_t shmem, int device_index,
                            dim3 cluster) {
  auto dev = device(device_index);
  if (!dev) return dev.status();
  const auto& a = (*dev)->attributes;
  auto attr = [&](cudaDeviceAttr i) { return static_cast<size_t>(i) < a.size() ? static_cast<uint64_t>(a[i]) : 0; };
  uint64_t threads = uint64_t{block.x} * block.y * block.z;
  // Launch configuration errors are immediate in CUDA; check them here.
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      threads > attr(cudaDevAttrMaxThreadsPerBlock) || block.x > attr(cudaDevAttrMaxBlockDimX) ||
      block.y > attr(cudaDevAttrMaxBlockDimY) || block.z > attr(cudaDevAttrMaxBlockDimZ) ||
      grid.x > attr(cudaDevAttrMaxGridDimX) || grid.y > attr(cudaDevAttrMaxGridDimY) ||
      grid.z > attr(cudaDevAttrMaxGridDimZ))
    return Status(err::kInvalidConfiguration, "launch configuration outside the device's limits");
  if (!k.has_layout)
    return Status(err::kInvalidDeviceFunction, "no parameter layout for kernel " + k.name + " in its fatbin");
  // What the kernel itself allows (its image, __launch_bounds__, shared memory).
  auto lim = launchLimits(k, device_index);
  if (!lim) return lim.status();
  if (!lim->error.isOk()) return lim->error;
  if (threads > lim->max_threads)
    return Status(err::kLaunchOutOfResources, "kernel " + k.name + " allows " + std::to_string(lim->max_threads) +
                                                  " threads per block (__launch_bounds__ or its registers); the "
                                                  "launch asked for " + std::to_string(threads));
  if (shmem > lim->max_dynamic_shared)
    return Status(err::kInvalidValue, "kernel " + k.name + " may use " + std::to_string(lim->max_dynamic_shared) +
                                          " bytes of dynamic shared memory (cudaFuncSetAttribute raises it); the "
                                          "launch asked for " + std::to_string(shmem));
  if (shmem + lim->static_shared > attr(cudaDevAttrMaxSharedMemoryPerBlockOptin) &&
      attr(cudaDevAttrMaxSharedMemoryPerBlockOptin) > 0)
    return Status(err::kInvalidValue, "static plus dynamic shared memory exceed the device's limit");
  return checkCluster(k, *lim, grid, cluster, device_index);
}

}  // namespace rgpu::client
