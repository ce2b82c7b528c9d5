// CudaBackend's side of checkpoints and moves (docs/migration.md;
// server/checkpoint/device_image.h says what a checkpoint holds).
//
// Addresses: on a server with [checkpoint] every device's memory lies in
// address window 0 (CudaOptions::fixed_addresses, windowed_memory.h), so a
// new worker — on this host or on another member — reserves the same
// addresses and maps new physical memory there (allocateAt). A session whose
// memory is where cuMemAlloc put it cannot be moved, and says so.
//
// Module variables are placed by the driver when it loads a module; the
// restore loads the modules again and checks that every variable is where
// the program knows it (cudaGetSymbolAddress, pointers kernels stored). If
// the driver put one elsewhere, the restore fails (and the move is called
// off): the driver offers no way to choose.
//
// CUDA arrays are the driver's, and a program knows them only by handle:
// a new worker makes each again (after the modules, whose variables the
// driver would otherwise place elsewhere) and writes its packed bytes
// (cuda_arrays.cc). Texture and surface objects are values the driver
// chooses and kernels receive: a fresh context hands them out from 1, the
// lowest free first (the fake driver does; not yet checked against NVIDIA's,
// scripts/gpu-check.sh does), so the restore makes them in ascending order of the
// handles the program holds, keeping each object the driver hands out below
// the next wanted one as a placeholder (a handle the program destroyed) and
// destroying the placeholders at the end. Ascending over all devices holds
// whether the driver has one pool of values for the process or one per
// context (a placeholder is made and destroyed on its own device). A handle that comes back other
// than the program's fails the restore (the move is called off), as a
// module variable placed elsewhere does.
//
// The device malloc heap is rgpu's own on such a worker (cuda_heap.cc), one
// range of device memory that moves like any other. What stays with the
// driver and cannot move: the driver's heap, once a kernel of a module that
// could not be bound to rgpu's heap and may call malloc has run
// (common::kernelsCallingMalloc reads the PTX's call graph). Such a session
// says why it cannot be checkpointed, and stays where it is.
//
// Events: a recorded event's completion is carried as CLOCK_MONOTONIC time.
// The old worker measures it against an event it records and waits for; the
// new one records the event once and keeps how much later that was than the
// completion (Event::shift_ns), which elapsedMs takes off, so
// cudaEventElapsedTime spans a move.
//
// Pre-copy: readWhileRunning copies an allocation's bytes on a stream of
// its own (non-blocking: it waits for no work of the session's, only for
// scrubs) while the program runs; release() takes the same lock, so no
// memory is unmapped under such a copy.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {
namespace {

// CLOCK_MONOTONIC, as the sim's events keep it (the host's processes share it).
int64_t monotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string CudaBackend::notCheckpointable() const {
  if (!opts_.fixed_addresses)
    return "its device memory is where cuMemAlloc put it (the worker was started without [checkpoint])";
  for (size_t d = 0; d < devices_.size(); ++d)
    if (!windows_ || !windows_->has(static_cast<int>(d)))
      return "device " + std::to_string(d) + "'s memory is where cuMemAlloc put it (its address window could not be "
             "reserved: see the worker's log)";
  if (malloc_used_)
    return "a kernel that may call device malloc ran, and the CUDA driver keeps the heap's blocks";
  std::lock_guard lock(mu_);
  if (capture_.active) return "a graph is being captured";
  return "";
}

Status CudaBackend::peekReady(Device& d) {
  DriverApi& api = *api_;
  std::lock_guard lock(mu_);
  if (!d.peek_stream) RGPU_TRY(RGPU_CU(cuStreamCreateWithPriority(&d.peek_stream, CU_STREAM_NON_BLOCKING, 0)));
  if (!d.peek_done) RGPU_TRY(RGPU_CU(cuEventCreate(&d.peek_done, CU_EVENT_DISABLE_TIMING)));
  return afterScrubsLocked(d.peek_stream, &d.peek_scrub_seen);
}

Status CudaBackend::peekDone(Device& d) {
  DriverApi& api = *api_;
  RGPU_TRY(RGPU_CU(cuEventRecord(d.peek_done, d.peek_stream)));
  return RGPU_CU(cuEventSynchronize(d.peek_done));
}

Status CudaBackend::readWhileRunning(int device, DevPtr at, uint64_t size, uint8_t* out) {
  DriverApi& api = *api_;
  if (device < 0 || static_cast<size_t>(device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device " + std::to_string(device));
  std::lock_guard peek(peek_mu_);
  Device& d = devices_[static_cast<size_t>(device)];
  RGPU_TRY(use(device));
  // Mapped memory only (what was freed meanwhile reads as zeroes); release()
  // waits for peek_mu_, so it stays mapped until the copy is done.
  if (!windows_ || !windows_->mapped(at, size)) {
    std::memset(out, 0, size);
    return Status::ok();
  }
  RGPU_TRY(peekReady(d));
  RGPU_TRY_ASSIGN(pin, takePinned(std::min<uint64_t>(size, 4ull << 20)));
  Status s;
  for (uint64_t off = 0; s && off < size; off += pin.capacity) {
    const uint64_t n = std::min(pin.capacity, size - off);
    s = RGPU_CU(cuMemcpyDtoHAsync(pin.data, at + off, n, d.peek_stream));
    if (s) s = peekDone(d);
    if (s) std::memcpy(out + off, pin.data, n);
  }
  givePinned(pin);
  return s;
}

Status CudaBackend::allocateAt(int device, DevPtr at, uint64_t size) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device " + std::to_string(device));
  if (!windows_ || !windows_->has(device))
    return Status(err::kNotSupported, "device " + std::to_string(device) +
                                          " has no address window here: memory cannot be placed at " +
                                          fmt::format("{:#x}", at));
  RGPU_TRY(use(device));
  RGPU_TRY(windows_->allocateAt(device, at, size));
  // Zeroed as any fresh memory (the restore writes over it in stream order).
  if (Status s = scrub(device, at, size); !s) {
    (void)windows_->release(at);
    return s;
  }
  std::lock_guard lock(mu_);
  allocations_[at] = device;
  return Status::ok();
}

Result<std::vector<Backend::ModuleGlobal>> CudaBackend::moduleGlobals(uint32_t module) const {
  DriverApi& api = *api_;
  Module m;
  {
    std::lock_guard lock(mu_);
    auto it = modules_.find(module);
    if (it == modules_.end()) return Status(err::kInvalidResourceHandle, "unknown module");
    m = it->second;
  }
  RGPU_TRY(const_cast<CudaBackend*>(this)->use(m.device));
  std::vector<ModuleGlobal> out;
  for (const std::string& name : m.variables) {
    CUdeviceptr p = 0;
    size_t bytes = 0;
    CUresult r = api.cuModuleGetGlobal(&p, &bytes, m.handle, name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) continue;  // a cubin's own object, not a variable the driver knows
    RGPU_TRY(api.check(r, "cuModuleGetGlobal", __FILE__, __LINE__));
    out.push_back({name, static_cast<DevPtr>(p), static_cast<DevPtr>(p), bytes, bytes});
  }
  return out;
}

Status CudaBackend::loadModuleAt(uint32_t id, int device, const std::string& fatbin, const std::vector<ModuleGlobal>& at) {
  DriverApi& api = *api_;
  RGPU_TRY(loadModule(id, device, fatbin));
  auto m = moduleOf(id);
  if (!m) return m.status();
  Status s;
  for (const ModuleGlobal& g : at) {
    CUdeviceptr p = 0;
    size_t bytes = 0;
    CUresult r = api.cuModuleGetGlobal(&p, &bytes, m->first, g.name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      s = Status(err::kInvalidValue, "checkpoint: module " + std::to_string(id) + " has no variable " + g.name);
    } else if (r != CUDA_SUCCESS) {
      s = api.check(r, "cuModuleGetGlobal", __FILE__, __LINE__);
    } else if (p != g.addr || bytes != g.size) {
      s = Status(err::kNotSupported, "module " + std::to_string(id) + "'s variable " + g.name + " lies at " +
                                         fmt::format("{:#x}", p) + " in the new worker, not at " +
                                         fmt::format("{:#x}", g.addr) +
                                         " where the program knows it (the CUDA driver places module variables)");
    }
    if (!s) break;
  }
  if (!s) (void)unloadModule(id);
  return s;
}

Result<Backend::EventState> CudaBackend::eventState(uint32_t event) const {
  DriverApi& api = *api_;
  Event e;
  {
    std::lock_guard lock(mu_);
    auto it = events_.find(event);
    if (it == events_.end()) return Status(err::kInvalidResourceHandle, "unknown event " + std::to_string(event));
    e = it->second;
  }
  EventState st;
  if (!e.recorded) return st;
  RGPU_TRY(const_cast<CudaBackend*>(this)->use(e.device));
  // (A drained session's recorded events have all completed.)
  RGPU_TRY(RGPU_CU(cuEventQuery(e.handle)));
  st.recorded = true;
  // When it completed, measured against an event recorded now: the time
  // between the two, back from the moment the second is seen complete.
  CUstream stream = nullptr;
  CUevent now = nullptr;
  RGPU_TRY(RGPU_CU(cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, 0)));
  Status s = RGPU_CU(cuEventCreate(&now, CU_EVENT_DEFAULT));
  if (s) s = RGPU_CU(cuEventRecord(now, stream));
  if (s) s = RGPU_CU(cuEventSynchronize(now));
  const int64_t seen = monotonicNs();
  float ms = 0;
  // An event without timing has no time to carry: it comes back recorded, and timing it fails as before.
  if (s && api.cuEventElapsedTime(&ms, e.handle, now) == CUDA_SUCCESS)
    st.completed_ns = seen - static_cast<int64_t>(static_cast<double>(ms) * 1e6) - e.shift_ns;
  if (now) (void)api.cuEventDestroy(now);
  (void)api.cuStreamDestroy(stream);
  if (!s) return s;
  return st;
}

Status CudaBackend::restoreEvent(uint32_t event, int device, uint32_t flags, const EventState& state) {
  DriverApi& api = *api_;
  RGPU_TRY(createEvent(event, device, flags));
  if (!state.recorded) return Status::ok();
  CUevent handle;
  {
    std::lock_guard lock(mu_);
    handle = events_.at(event).handle;
  }
  // Recorded and complete: recorded once here on a stream of its own, its
  // times shifted back to when it completed in the old worker.
  CUstream stream = nullptr;
  RGPU_TRY(RGPU_CU(cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, 0)));
  Status s = RGPU_CU(cuEventRecord(handle, stream));
  if (s) s = RGPU_CU(cuEventSynchronize(handle));
  const int64_t seen = monotonicNs();
  (void)api.cuStreamDestroy(stream);
  RGPU_TRY(s);
  std::lock_guard lock(mu_);
  Event& e = events_.at(event);
  e.recorded = true;
  e.shift_ns = state.completed_ns > 0 ? std::max<int64_t>(0, seen - state.completed_ns) : 0;
  return Status::ok();
}

Status CudaBackend::placeObject(uint64_t want, int device, bool surface,
                                const std::function<Result<uint64_t>()>& make) {
  const char* kind = surface ? "surface" : "texture";
  for (;;) {
    RGPU_TRY_ASSIGN(got, make());
    if (got == want) return Status::ok();
    {
      std::lock_guard lock(mu_);
      if (got < want && placeholders_.size() < kMaxObjectPlaceholders) {
        placeholders_.push_back({got, device, surface});
        continue;
      }
    }
    (void)(surface ? destroySurface(device, got) : destroyTexture(device, got));
    if (got < want)
      return Status(err::kNotSupported, fmt::format("{} object {} would take more than {} objects to reach in the new "
                                                    "worker (the CUDA driver chooses object handles)",
                                                    kind, want, kMaxObjectPlaceholders));
    return Status(err::kNotSupported, fmt::format("{} object {} is {} in the new worker, not {} as the program knows it "
                                                  "(the CUDA driver chooses object handles)",
                                                  kind, want, got, want));
  }
}

Status CudaBackend::createTextureAt(uint64_t handle, const TextureSpec& spec) {
  if (!handle) return Status(err::kInvalidValue, "a texture object is restored under a handle");
  return placeObject(handle, spec.device, false, [&] { return createTexture(spec); });
}

Status CudaBackend::createSurfaceAt(uint64_t handle, int device, uint64_t array, uint32_t level) {
  if (!handle) return Status(err::kInvalidValue, "a surface object is restored under a handle");
  return placeObject(handle, device, true, [&] { return createSurface(device, array, level); });
}

Status CudaBackend::objectsRestored() {
  std::vector<Placeholder> spare;
  {
    std::lock_guard lock(mu_);
    spare.swap(placeholders_);
  }
  Status first;
  for (const Placeholder& p : spare) {
    Status s = p.surface ? destroySurface(p.device, p.handle) : destroyTexture(p.device, p.handle);
    if (first && !s) first = s;
  }
  if (!spare.empty()) RGPU_LOG_INFO("restore: {} texture and surface objects made to reach the program's handles, destroyed again", spare.size());
  return first;
}

}  // namespace rgpu::server::cuda
