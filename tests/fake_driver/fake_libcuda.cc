// A fake CUDA driver (libcuda.so.1) for tests on machines without a GPU.
//
// It exports only cuGetProcAddress_v2 (as NVIDIA's does for CUDA 12+ clients)
// and hands out the entry points CudaBackend asks for. Devices are host
// memory; kernels run on rgpu's PTX interpreter, from the PTX in the fatbin
// given to cuModuleLoadData, so the CUDA backend's whole path can be driven end
// to end in CI.
//
// Streams run concurrently, as on a GPU, so the tests see the orderings a GPU
// allows and not just one of them: every stream (and each device's legacy
// stream) has its own executor thread, and an operation waits only for what
// the driver's documented rules order it after — earlier work of its own
// stream, the legacy stream's implicit synchronisation with the blocking
// streams of its context, and cuStreamWaitEvent. cuStreamDestroy returns at
// once while the stream's work still runs; cuMemFree, cuMemFreeHost and
// cuModuleUnload synchronise (wait for all work queued so far), which the
// documentation allows them to. $RGPU_FAKE_CUDA_JITTER_US (or
// rgpu_fake_cuda_set_jitter) delays each operation by a random 0..N us, to
// shake out orderings a test depends on by luck.
//
// Stream capture and graphs, as far as rgpu uses them: a stream being
// captured (cuStreamBeginCapture, never the legacy stream) collects the
// operations queued on it instead of running them; cuStreamEndCapture makes
// them a graph, cuGraphInstantiateWithFlags an executable graph, and each
// cuGraphLaunch queues them as one operation that runs them in capture order.
// A launch refused while capturing invalidates the capture, and querying or
// synchronising a capturing stream fails, as the driver documents. Host
// functions become host nodes; events are captured only as external record
// and wait nodes (CU_EVENT_RECORD_EXTERNAL, CU_EVENT_WAIT_EXTERNAL): a launch
// waits, before its first node, for the last record of each event the graph
// waits for, and each event the graph records completes with the launch.
//
// A kernel fault makes the context's error sticky, as on a GPU. Every call is
// recorded (rgpu_fake_cuda_log, and the file named by $RGPU_FAKE_CUDA_LOG), and
// a test can make the next call of a name fail with a chosen CUresult
// (rgpu_fake_cuda_fail).
//
// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, ...) maps each physical allocation's memfd at the mapped
// address, so kernels and copies see the same bytes there; a mapping is
// device memory only once its access is set.
//
// Environment: RGPU_FAKE_CUDA_DEVICES (count, default 1; 0 = no device),
// RGPU_FAKE_CUDA_MEMORY (bytes per device, default 1 GiB), RGPU_FAKE_CUDA_LOG,
// RGPU_FAKE_CUDA_JITTER_US, RGPU_FAKE_CUDA_OBJECT_POOLS ("process", the
// default: one pool of texture and surface object values for the process;
// "device": one per device's context, so two devices hand out the same
// values). RGPU_FAKE_CUDA_VRAM=FILE makes device memory
// outlive the process, as a GPU's does: the arena's first bytes are FILE,
// cuMemAlloc hands memory out as the last process left it (not zeroed; a
// driver does not promise zeroes), lowest address first. It models one
// process at a time on the GPU (a test's sessions one after the other).
// RGPU_FAKE_CUDA_REFUSE_PTX_TEXT (set): cuModuleLoadData refuses a module
// given as PTX text (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) but loads fatbins,
// as a driver older than the toolkit does for a program whose fatbin has
// SASS for the GPU (the fake runs the fatbin's PTX all the same).
//
// This file: devices, contexts, streams, events, modules, kernels, graphs and
// the entry point table; fake_memory.cc and fake_arrays.cc the rest, and
// fake_cuda.h what they share.
#include "tests/fake_driver/fake_cuda.h"

namespace {

using namespace rgpu::fake;

// ---- init, devices, contexts ----

CUresult fakeInit(unsigned flags) {
  Driver& d = drv();
  std::lock_guard lock(d.mu);
  record("cuInit");
  if (auto it = d.fail_next.find("cuInit"); it != d.fail_next.end()) {
    CUresult r = it->second;
    d.fail_next.erase(it);
    return r;
  }
  if (d.device_count <= 0) return CUDA_ERROR_NO_DEVICE;
  if (!d.initialised) {
    d.initialised = true;
    d.interp = std::make_unique<ptx::Interpreter>(2);
    auto arena = DeviceArena::create(2 * d.memory * static_cast<uint64_t>(d.device_count) + (64ull << 20),
                                     kFakeGpuWindow);
    if (!arena) return CUDA_ERROR_OUT_OF_MEMORY;
    d.arena = std::move(*arena);
    if (const char* vram = std::getenv("RGPU_FAKE_CUDA_VRAM")) {
      // The first memory * devices bytes of the arena are this file, shared
      // by every process: what one context leaves there, the next finds.
      const uint64_t bytes = d.memory * static_cast<uint64_t>(d.device_count);
      int fd = ::open(vram, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
          ::mmap(reinterpret_cast<void*>(d.arena->base()), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                 0) == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
      ::close(fd);
      d.vram = true;
    }
    for (int dev = 0; dev < d.device_count; ++dev) d.legacy.push_back(newStream(dev, true, false));
  }
  return CUDA_SUCCESS;
}

CUresult fakeDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}

CUresult fakeGetErrorName(CUresult r, const char** s) {
  static const std::map<int, const char*> names = {
      {0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
      {3, "CUDA_ERROR_NOT_INITIALIZED"}, {100, "CUDA_ERROR_NO_DEVICE"}, {101, "CUDA_ERROR_INVALID_DEVICE"},
      {200, "CUDA_ERROR_INVALID_IMAGE"}, {201, "CUDA_ERROR_INVALID_CONTEXT"}, {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
      {400, "CUDA_ERROR_INVALID_HANDLE"}, {500, "CUDA_ERROR_NOT_FOUND"}, {600, "CUDA_ERROR_NOT_READY"},
      {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}, {710, "CUDA_ERROR_ASSERT"}, {719, "CUDA_ERROR_LAUNCH_FAILED"},
      {801, "CUDA_ERROR_NOT_SUPPORTED"}, {999, "CUDA_ERROR_UNKNOWN"}};
  auto it = names.find(r);
  if (it == names.end()) return CUDA_ERROR_INVALID_VALUE;
  *s = it->second;
  return CUDA_SUCCESS;
}

CUresult fakeGetErrorString(CUresult r, const char** s) {
  const char* n = nullptr;
  if (fakeGetErrorName(r, &n) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  *s = "reported by the fake driver";
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGetCount(int* n) {
  ENTER("cuDeviceGetCount", false);
  *n = drv().device_count;
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGet(CUdevice* dev, int ordinal) {
  ENTER("cuDeviceGet", false);
  if (ordinal < 0 || ordinal >= drv().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGetName(char* name, int len, CUdevice dev) {
  ENTER("cuDeviceGetName", false);
  if (dev < 0 || dev >= drv().device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, len, "rgpu fake GPU %d", dev);
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  ENTER("cuDeviceGetUuid", false);
  for (int i = 0; i < 16; ++i) uuid->bytes[i] = static_cast<char>(0xf0 + dev + i);
  return CUDA_SUCCESS;
}

CUresult fakeDeviceTotalMem(size_t* bytes, CUdevice dev) {
  ENTER("cuDeviceTotalMem", false);
  *bytes = drv().memory;
  return CUDA_SUCCESS;
}

CUresult fakeDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice dev) {
  ENTER("cuDeviceGetAttribute", false);
  if (dev < 0 || dev >= drv().device_count) return CUDA_ERROR_INVALID_DEVICE;
  // An H200-like device.
  static const std::map<int, int> attrs = {
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
      {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
      {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
      {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
      {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
      {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
      {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
      {CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0x19 + dev},
      {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 6144},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 60 * 1024 * 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
      {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
      {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
      {CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1},
      {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512},
      {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 131072},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 268435456},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, 131072},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 65536},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH, 131072},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, 65000},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH, 2097120},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, 16384},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, 16384},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, 16384},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 2048},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, 32768},
      {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, 2046},
  };
  auto it = attrs.find(a);
  if (a <= 0 || a > 200) return CUDA_ERROR_INVALID_VALUE;
  *v = it == attrs.end() ? 0 : it->second;
  return CUDA_SUCCESS;
}

CUresult fakePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRetain", false);
  if (dev < 0 || dev >= drv().device_count) return CUDA_ERROR_INVALID_DEVICE;
  drv().contexts[dev].refs++;
  *ctx = reinterpret_cast<CUcontext>(&drv().contexts[dev]);
  record("cuDevicePrimaryCtxRetain " + std::to_string(dev));
  return CUDA_SUCCESS;
}

CUresult fakePrimaryCtxRelease(CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRelease", false);
  if (dev < 0 || dev >= drv().device_count) return CUDA_ERROR_INVALID_DEVICE;
  FakeContext& c = drv().contexts[dev];
  if (--c.refs == 0) c.dropHeap();  // the context is gone, and its heap (launches in flight keep theirs)
  record("cuDevicePrimaryCtxRelease " + std::to_string(dev));
  return CUDA_SUCCESS;
}

CUresult fakeCtxSetCurrent(CUcontext ctx) {
  std::lock_guard lock(drv().mu);
  if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  t_ctx = reinterpret_cast<FakeContext*>(ctx);
  return CUDA_SUCCESS;
}

// ---- streams and events ----

CUresult fakeStreamCreateWithPriority(CUstream* s, unsigned flags, int priority) {
  ENTER("cuStreamCreateWithPriority");
  FakeStream* st = newStream(t_ctx->device, false, (flags & CU_STREAM_NON_BLOCKING) != 0);
  drv().streams.insert(st);
  *s = reinterpret_cast<CUstream>(st);
  record("cuStreamCreateWithPriority flags=" + std::to_string(flags) + " priority=" + std::to_string(priority));
  return CUDA_SUCCESS;
}

CUresult fakeStreamDestroy(CUstream s) {
  ENTER("cuStreamDestroy");
  auto* st = reinterpret_cast<FakeStream*>(s);
  if (!drv().streams.erase(st)) return CUDA_ERROR_INVALID_HANDLE;
  record("cuStreamDestroy");
  // As documented: returns at once; the work already queued still runs, and
  // the stream's thread ends when it has.
  st->destroyed = true;
  drv().cv.notify_all();
  return CUDA_SUCCESS;
}

CUresult fakeStreamQuery(CUstream s) {
  ENTER("cuStreamQuery");
  FakeStream* st = streamOf(s);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->capturing) {
    st->capturing->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  std::vector<Dep> deps = implicitDeps(st);
  deps.emplace_back(st, st->enqueued);
  return depsMet(deps) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult fakeStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  ENTER("cuStreamWaitEvent");
  auto* ev = reinterpret_cast<FakeEvent*>(e);
  FakeStream* st = streamOf(s);
  if (!st || !drv().events.count(ev)) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~unsigned{CU_EVENT_WAIT_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  if (st->capturing) {
    if (!(flags & CU_EVENT_WAIT_EXTERNAL)) {  // an event recorded outside the capture
      st->capturing->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    st->capturing->waits.push_back(ev);
    record("cuStreamWaitEvent external (captured)");
    return CUDA_SUCCESS;
  }
  record("cuStreamWaitEvent");
  // Waits for the event's most recent record at the time of this call.
  if (ev->recorded) enqueue(st, [] { return CUDA_SUCCESS; }, {{ev->stream, ev->ticket}});
  return CUDA_SUCCESS;
}

CUresult fakeEventCreate(CUevent* e, unsigned flags) {
  ENTER("cuEventCreate");
  auto* ev = new FakeEvent();
  ev->flags = flags;
  drv().events.insert(ev);
  *e = reinterpret_cast<CUevent>(ev);
  record("cuEventCreate flags=" + std::to_string(flags));
  return CUDA_SUCCESS;
}

CUresult fakeEventDestroy(CUevent e) {
  ENTER("cuEventDestroy");
  auto* ev = reinterpret_cast<FakeEvent*>(e);
  if (!drv().events.erase(ev)) return CUDA_ERROR_INVALID_HANDLE;
  // Ops that stamp it may still be queued: keep the object until exit.
  drv().dead_events.emplace_back(ev);
  return CUDA_SUCCESS;
}

CUresult eventRecordLocked(FakeEvent* ev, FakeStream* st, unsigned flags) {
  if (!drv().events.count(ev) || !st) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~unsigned{CU_EVENT_RECORD_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  if (st->capturing && (flags & CU_EVENT_RECORD_EXTERNAL)) {  // an event record node
    st->capturing->records.push_back(ev);
    st->capturing->ops.push_back([ev] {
      ev->when = Clock::now();
      return CUDA_SUCCESS;
    });
    record("cuEventRecordWithFlags external (captured)");
    return CUDA_SUCCESS;
  }
  if (st->capturing) {  // rgpu never records its events into a capture as internal dependencies
    st->capturing->invalidated = true;
    record("cuEventRecord on a capturing stream (refused)");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  ev->recorded = true;
  ev->stream = st;
  ev->ticket = enqueue(st, [ev] {
    ev->when = Clock::now();
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeEventRecord(CUevent e, CUstream s) {
  ENTER("cuEventRecord");
  return eventRecordLocked(reinterpret_cast<FakeEvent*>(e), streamOf(s), 0);
}

CUresult fakeEventRecordWithFlags(CUevent e, CUstream s, unsigned flags) {
  ENTER("cuEventRecordWithFlags");
  return eventRecordLocked(reinterpret_cast<FakeEvent*>(e), streamOf(s), flags);
}

bool eventComplete(const FakeEvent* ev) { return !ev->recorded || ev->stream->completed >= ev->ticket; }

CUresult fakeEventQuery(CUevent e) {
  ENTER("cuEventQuery");
  auto* ev = reinterpret_cast<FakeEvent*>(e);
  if (!drv().events.count(ev)) return CUDA_ERROR_INVALID_HANDLE;
  return eventComplete(ev) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult fakeEventSynchronize(CUevent e) {
  ENTER("cuEventSynchronize");
  auto* ev = reinterpret_cast<FakeEvent*>(e);
  if (!drv().events.count(ev)) return CUDA_ERROR_INVALID_HANDLE;
  FakeStream* st = ev->stream;
  uint64_t ticket = ev->ticket;
  if (ev->recorded) drv().cv.wait(lock, [&] { return st->completed >= ticket; });
  return drv().sticky;
}

CUresult fakeEventElapsedTime(float* ms, CUevent a, CUevent b) {
  ENTER("cuEventElapsedTime");
  auto* x = reinterpret_cast<FakeEvent*>(a);
  auto* y = reinterpret_cast<FakeEvent*>(b);
  if (!drv().events.count(x) || !drv().events.count(y)) return CUDA_ERROR_INVALID_HANDLE;
  if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!x->recorded || !y->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!eventComplete(x) || !eventComplete(y)) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(y->when - x->when).count();
  return CUDA_SUCCESS;
}

CUresult fakeLaunchHostFunc(CUstream s, CUhostFn fn, void* user) {
  ENTER("cuLaunchHostFunc");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  record("cuLaunchHostFunc");
  enqueue(streamOf(s), [=] {
    fn(user);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

// ---- modules and kernels ----

CUresult fakeModuleLoadData(CUmodule* out, const void* image) {
  ENTER("cuModuleLoadData");
  Driver& d = drv();
  // A fatbin, a cubin or NUL-terminated PTX text, as the driver takes them.
  auto img = rgpu::common::parseImage(image, rgpu::common::imageLength(image));
  if (!img) return CUDA_ERROR_INVALID_IMAGE;
  if (d.refuse_ptx_text) {
    uint32_t magic = 0;
    std::memcpy(&magic, image, sizeof magic);
    if (magic != rgpu::common::kFatbinMagic && std::memcmp(image, "\x7f" "ELF", 4) != 0) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  // Like the driver on an sm_90 GPU: SASS for another architecture is useless,
  // PTX up to compute_90 is JIT-compiled (here: interpreted).
  const rgpu::common::FatbinEntry* best = nullptr;
  for (auto& e : img->entries)
    if (e.kind == rgpu::common::FatbinEntry::kPtx && e.arch <= 90 && (!best || e.arch > best->arch)) best = &e;
  if (!best) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  auto program = ptx::parsePtx(best->payload);
  if (!program) return CUDA_ERROR_INVALID_PTX;
  auto m = std::make_unique<FakeModule>();
  m->device = t_ctx->device;
  m->ptx_arch = static_cast<int>(best->arch);
  m->image = std::move(*img);
  m->program = std::move(*program);
  // The managed variables' segment: each at its alignment, from a page boundary.
  uint64_t managed_bytes = 0;
  std::vector<uint64_t> offsets;
  for (auto& g : m->program.globals) {
    const uint64_t align = std::max<uint64_t>(g.align, 1);
    offsets.push_back(g.managed ? (managed_bytes + align - 1) / align * align : 0);
    if (g.managed) managed_bytes = offsets.back() + std::max<uint64_t>(g.size, 1);
  }
  constexpr uint64_t kPage = 4096;
  if (managed_bytes) {
    const uint64_t seg = (managed_bytes + kPage - 1) / kPage * kPage;
    auto a = d.arena->allocate(seg + kPage);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    m->managed_alloc = *a;
    m->managed_at = (*a + kPage - 1) / kPage * kPage;
    std::memset(reinterpret_cast<void*>(m->managed_at), 0, seg);
    d.allocations[m->managed_at] = {m->device, seg};
    d.managed.insert(m->managed_at);
  }
  std::vector<uint64_t> addrs;
  for (size_t i = 0; i < m->program.globals.size(); ++i) {
    auto& g = m->program.globals[i];
    if (g.managed) {
      const uint64_t at = m->managed_at + offsets[i];
      std::memcpy(reinterpret_cast<void*>(at), g.init.data(), g.init.size());
      addrs.push_back(at);
      m->globals[g.name] = {at, g.size};
      continue;
    }
    uint64_t size = std::max<uint64_t>(g.size, 1), rounded = (size + 255) / 256 * 256;
    auto a = d.arena->allocate(rounded);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    void* p = reinterpret_cast<void*>(*a);
    std::memset(p, 0, rounded);
    std::memcpy(p, g.init.data(), g.init.size());
    d.allocations[reinterpret_cast<uint64_t>(p)] = {m->device, rounded};
    addrs.push_back(reinterpret_cast<uint64_t>(p));
    m->globals[g.name] = {reinterpret_cast<uint64_t>(p), g.size};
  }
  ptx::bindGlobals(m->program, addrs);
  record("cuModuleLoadData ptx=" + std::to_string(m->ptx_arch));
  *out = reinterpret_cast<CUmodule>(m.get());
  d.modules.insert(m.release());
  return CUDA_SUCCESS;
}

CUresult fakeModuleUnload(CUmodule mod) {
  ENTER("cuModuleUnload");
  auto* m = reinterpret_cast<FakeModule*>(mod);
  if (!drv().modules.erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  synchronizeAll(lock);
  const auto seg = drv().allocations.find(m->managed_at);
  const uint64_t seg_size = m->managed_alloc && seg != drv().allocations.end() ? seg->second.second : 0;
  for (auto& [name, g] : m->globals) {
    if (g.first - m->managed_at < seg_size) continue;  // in the managed segment
    drv().allocations.erase(g.first);
    drv().arena->free(g.first);
  }
  if (m->managed_alloc) {
    drv().allocations.erase(m->managed_at);
    drv().managed.erase(m->managed_at);
    drv().arena->free(m->managed_alloc);
  }
  for (auto it = drv().functions.begin(); it != drv().functions.end();) {
    if ((*it)->module != m) {
      ++it;
      continue;
    }
    delete *it;
    it = drv().functions.erase(it);
  }
  record("cuModuleUnload");
  delete m;
  return CUDA_SUCCESS;
}

CUresult fakeModuleGetFunction(CUfunction* f, CUmodule mod, const char* name) {
  ENTER("cuModuleGetFunction");
  auto* m = reinterpret_cast<FakeModule*>(mod);
  if (!drv().modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->program.functions.find(name);
  if (it == m->program.functions.end() || !it->second.is_entry) return CUDA_ERROR_NOT_FOUND;
  auto* fn = new FakeFunction{m, name, &it->second};
  drv().functions.insert(fn);
  *f = reinterpret_cast<CUfunction>(fn);
  record(std::string("cuModuleGetFunction ") + name);
  return CUDA_SUCCESS;
}

CUresult fakeModuleGetGlobal(CUdeviceptr* p, size_t* bytes, CUmodule mod, const char* name) {
  ENTER("cuModuleGetGlobal");
  auto* m = reinterpret_cast<FakeModule*>(mod);
  if (!drv().modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->globals.find(name);
  if (it == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (p) *p = it->second.first;
  if (bytes) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

// The allocation holding `p` (managed or not): its base and size.
CUresult fakeMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  ENTER("cuMemGetAddressRange");
  auto it = drv().allocations.upper_bound(p);
  if (it == drv().allocations.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (p - it->first >= it->second.second) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = it->first;
  if (size) *size = it->second.second;
  return CUDA_SUCCESS;
}

// Of a device pointer: whether it is managed memory (the only attribute rgpu asks for).
CUresult fakePointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  ENTER("cuPointerGetAttribute");
  if (attr != CU_POINTER_ATTRIBUTE_IS_MANAGED) return CUDA_ERROR_INVALID_VALUE;
  auto it = drv().allocations.upper_bound(p);
  if (it == drv().allocations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (p - it->first >= it->second.second) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<unsigned*>(data) = drv().managed.count(it->first) ? 1 : 0;
  return CUDA_SUCCESS;
}

FakeFunction* functionOf(CUfunction f) {
  auto* fn = reinterpret_cast<FakeFunction*>(f);
  return drv().functions.count(fn) ? fn : nullptr;
}

CUresult fakeFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  ENTER("cuFuncGetParamInfo");
  FakeFunction* fn = functionOf(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= fn->code->params.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = fn->code->params[index].first;
  *size = fn->code->params[index].second;
  return CUDA_SUCCESS;
}

CUresult fakeFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  ENTER("cuFuncGetAttribute");
  FakeFunction* fn = functionOf(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = fn->code->max_threads ? static_cast<int>(fn->code->max_threads) : 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = static_cast<int>(fn->code->static_shared); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = static_cast<int>(fn->code->local_bytes); break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = static_cast<int>(std::min<uint32_t>(fn->code->num_regs, 255)); break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = fn->module->ptx_arch; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = fn->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *v = -1; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *v = static_cast<int>(fn->code->cluster_x); break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *v = static_cast<int>(fn->code->cluster_y); break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *v = static_cast<int>(fn->code->cluster_z); break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *v = fn->code->explicit_cluster && !fn->code->cluster_x; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *v = fn->non_portable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *v = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult fakeCtxSetLimit(CUlimit limit, size_t value) {
  ENTER("cuCtxSetLimit");
  if (limit == CU_LIMIT_PRINTF_FIFO_SIZE && value == 0) return CUDA_ERROR_INVALID_VALUE;
  if (limit == CU_LIMIT_MALLOC_HEAP_SIZE) {
    FakeContext& c = drv().contexts[static_cast<size_t>(t_ctx->device)];
    if (c.heap) return CUDA_ERROR_INVALID_VALUE;  // a kernel that calls malloc ran
    c.heap_limit = std::max<size_t>(value, 16);
  }
  record("cuCtxSetLimit " + std::to_string(static_cast<int>(limit)) + "=" + std::to_string(value));
  return CUDA_SUCCESS;
}

CUresult fakeFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  ENTER("cuFuncSetAttribute");
  FakeFunction* fn = functionOf(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (v < 0 || v > 232448) return CUDA_ERROR_INVALID_VALUE;
    fn->max_dynamic_shared = v;
  }
  if (a == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) fn->non_portable_cluster = v != 0;
  record("cuFuncSetAttribute " + std::to_string(a) + "=" + std::to_string(v));
  return CUDA_SUCCESS;
}

CUresult fakeOccupancy(int* n, CUfunction f, int block, size_t smem) {
  ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  FakeFunction* fn = functionOf(f);
  if (!fn || block <= 0) return CUDA_ERROR_INVALID_VALUE;
  uint32_t bound = fn->code->max_threads ? fn->code->max_threads : 1024;
  *n = static_cast<uint32_t>(block) > bound ? 0 : std::max(1, std::min(32, 2048 / block));
  return CUDA_SUCCESS;
}

std::string hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<const unsigned char*>(p)[i];
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

CUresult launchLocked(const char* name, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                      unsigned bz, unsigned smem, CUstream s, void** params, void** extra, bool cooperative,
                      Dim3 cluster = {0, 0, 0});

// A call on a capturing stream that fails invalidates the capture (lock held).
CUresult capturedResult(CUstream s, CUresult r) {
  FakeStream* st = streamOf(s);
  if (r != CUDA_SUCCESS && st && st->capturing) st->capturing->invalidated = true;
  return r;
}

// ---- stream capture and graphs ----

CUresult fakeStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  ENTER("cuStreamBeginCapture");
  FakeStream* st = streamOf(s);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (st->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  st->capturing = std::make_unique<FakeGraph>();
  record("cuStreamBeginCapture mode=" + std::to_string(static_cast<int>(mode)));
  return CUDA_SUCCESS;
}

CUresult fakeStreamEndCapture(CUstream s, CUgraph* out) {
  ENTER("cuStreamEndCapture");
  FakeStream* st = streamOf(s);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (!st->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  std::unique_ptr<FakeGraph> g = std::move(st->capturing);
  *out = nullptr;
  record("cuStreamEndCapture " + std::to_string(g->ops.size()) + " nodes" + (g->invalidated ? " (invalidated)" : ""));
  if (g->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  drv().graphs.insert(g.get());
  *out = reinterpret_cast<CUgraph>(g.release());
  return CUDA_SUCCESS;
}

CUresult fakeGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long flags) {
  ENTER("cuGraphInstantiateWithFlags");
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!drv().graphs.count(g) || flags) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new FakeGraphExec;
  e->ops = std::make_shared<const std::vector<std::function<CUresult()>>>(g->ops);
  e->records = g->records;
  e->waits = g->waits;
  drv().graph_execs.insert(e);
  *out = reinterpret_cast<CUgraphExec>(e);
  record("cuGraphInstantiateWithFlags " + std::to_string(g->ops.size()) + " nodes");
  return CUDA_SUCCESS;
}

CUresult fakeGraphLaunch(CUgraphExec exec, CUstream s) {
  ENTER("cuGraphLaunch");
  auto* e = reinterpret_cast<FakeGraphExec*>(exec);
  FakeStream* st = streamOf(s);
  if (!drv().graph_execs.count(e)) return CUDA_ERROR_INVALID_VALUE;
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  record("cuGraphLaunch " + std::to_string(e->ops->size()) + " nodes");
  std::vector<Dep> waits;
  for (FakeEvent* ev : e->waits) {
    if (!drv().events.count(ev)) return CUDA_ERROR_INVALID_HANDLE;  // destroyed since
    if (ev->recorded) waits.emplace_back(ev->stream, ev->ticket);
  }
  uint64_t ticket = enqueue(st, [ops = e->ops] {
    for (const auto& op : *ops)
      if (CUresult r = op(); r != CUDA_SUCCESS) return r;
    return CUDA_SUCCESS;
  }, waits);
  for (FakeEvent* ev : e->records) {
    ev->recorded = true;
    ev->stream = st;
    ev->ticket = ticket;
  }
  return CUDA_SUCCESS;
}

CUresult fakeGraphExecDestroy(CUgraphExec exec) {
  ENTER("cuGraphExecDestroy");
  auto* e = reinterpret_cast<FakeGraphExec*>(exec);
  if (!drv().graph_execs.erase(e)) return CUDA_ERROR_INVALID_VALUE;
  record("cuGraphExecDestroy");
  delete e;  // launches in flight hold the operations
  return CUDA_SUCCESS;
}

CUresult fakeGraphDestroy(CUgraph graph) {
  ENTER("cuGraphDestroy");
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!drv().graphs.erase(g)) return CUDA_ERROR_INVALID_VALUE;
  delete g;
  return CUDA_SUCCESS;
}

CUresult fakeLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned smem, CUstream s, void** params, void** extra) {
  ENTER("cuLaunchKernel");
  return capturedResult(s, launchLocked("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, smem, s, params, extra, false));
}

// cuLaunchKernelEx: rgpu uses it for cooperative and cluster launches (the attributes it passes).
CUresult fakeLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  ENTER("cuLaunchKernelEx");
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  bool cooperative = false;
  Dim3 cluster{0, 0, 0};
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      cooperative = c->attrs[i].value.cooperative != 0;
    } else if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      cluster = {c->attrs[i].value.clusterDim.x, c->attrs[i].value.clusterDim.y, c->attrs[i].value.clusterDim.z};
    } else {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  return capturedResult(c->hStream, launchLocked("cuLaunchKernelEx", f, c->gridDimX, c->gridDimY, c->gridDimZ,
                                                 c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes,
                                                 c->hStream, params, extra, cooperative, cluster));
}

CUresult launchLocked(const char* name, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                      unsigned bz, unsigned smem, CUstream s, void** params, void** extra, bool cooperative,
                      Dim3 requested_cluster) {
  FakeFunction* fn = functionOf(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (params) return CUDA_ERROR_NOT_SUPPORTED;  // rgpu always passes the packed buffer
  std::string block;
  if (extra) {
    const void* buf = nullptr;
    size_t size = 0;
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = e[1];
      else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t*>(e[1]);
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buf) return CUDA_ERROR_INVALID_VALUE;
    block.assign(static_cast<const char*>(buf), size);
  }
  if (block.size() != fn->code->param_bytes) return CUDA_ERROR_INVALID_VALUE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || uint64_t(bx) * by * bz > 1024 || bz > 64 ||
      gy > 65535 || gz > 65535 || smem > static_cast<unsigned>(fn->max_dynamic_shared))
    return CUDA_ERROR_INVALID_VALUE;
  // More threads than the kernel's __launch_bounds__ (or its registers) allow.
  if (fn->code->max_threads && uint64_t(bx) * by * bz > fn->code->max_threads) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  // The fake device's co-residency: 132 multiprocessors of 2048 threads, 32 blocks each at most.
  if (cooperative && uint64_t(gx) * gy * gz > 132 * std::min<uint64_t>(32, 2048 / (uint64_t(bx) * by * bz)))
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  // Clusters, as the driver decides them (the kernel's own, or the attribute's).
  bool explicit_cluster = false;
  const ptx::Function& code = *fn->code;
  auto cluster = rgpu::common::launchCluster(fn->name, {code.cluster_x, code.cluster_y, code.cluster_z},
                                             code.explicit_cluster, {gx, gy, gz},
                                             {requested_cluster.x, requested_cluster.y, requested_cluster.z},
                                             fn->non_portable_cluster, explicit_cluster);
  if (!cluster) {
    record(std::string(name) + " refused: " + cluster.status().message());
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  const Dim3 cd{cluster->x, cluster->y, cluster->z};
  std::ostringstream line;
  line << name << (cooperative ? " cooperative " : " ")
       << (explicit_cluster ? "cluster=" + std::to_string(cd.x) + "," + std::to_string(cd.y) + "," + std::to_string(cd.z) + " " : "")
       << fn->name << " grid=" << gx << "," << gy << "," << gz << " block=" << bx << "," << by
       << "," << bz << " shmem=" << smem << " params=" << hex(block.data(), block.size());
  record(line.str());
  std::shared_ptr<const ptx::Textures> textures = texturesLocked(streamOf(s)->device);  // as the kernel starts, as a GPU's
  std::shared_ptr<ptx::DeviceHeap> heap;
  if (fn->code->uses_malloc) {
    Driver& d = drv();
    FakeContext& c = d.contexts[static_cast<size_t>(streamOf(s)->device)];
    if (!c.heap) {
      auto at = d.arena->allocate(c.heap_limit);
      if (!at) return CUDA_ERROR_OUT_OF_MEMORY;
      d.allocations[*at] = {c.device, c.heap_limit};
      c.heap = std::make_shared<ptx::DeviceHeap>(*at, c.heap_limit);
    }
    heap = c.heap;
  }
  enqueue(streamOf(s), [fn, gx, gy, gz, bx, by, bz, smem, block, cooperative, cd, explicit_cluster, textures, heap] {
    ptx::MemoryRanges memory;
    {
      std::lock_guard l(drv().mu);
      for (auto& [base, a] : drv().allocations) memory.emplace_back(base, base + a.second);
      addArrayRanges(memory);
    }
    uint64_t workspace[2] = {0, 0};  // the grid barrier of a cooperative launch
    auto ws = reinterpret_cast<uint64_t>(workspace);
    if (cooperative) memory.insert(std::lower_bound(memory.begin(), memory.end(), std::make_pair(ws, ws + 16)), {ws, ws + 16});
    ptx::Launch L;
    L.fn = fn->code;
    L.grid = {gx, gy, gz};
    L.block = {bx, by, bz};
    L.dynamic_shared = smem;
    L.params = reinterpret_cast<const uint8_t*>(block.data());
    L.memory = &memory;
    L.sm_count = 4;
    L.cooperative = cooperative;
    L.grid_workspace = cooperative ? ws : 0;
    L.cluster = cd;
    L.explicit_cluster = explicit_cluster;
    L.textures = textures.get();
    L.heap = heap.get();
    ptx::LaunchResult r = drv().interp->run(L);
    if (!r.output.empty()) {
      std::fwrite(r.output.data(), 1, r.output.size(), stdout);
      std::fflush(stdout);
    }
    return r.status ? CUDA_SUCCESS : static_cast<CUresult>(r.status.code());
  });
  return CUDA_SUCCESS;
}

const std::map<std::string, void*>& entryPoints();  // this file's, below

// Every entry point by name (fake_memory.cc's and fake_arrays.cc's among them).
const std::map<std::string, void*>& table() {
  static const std::map<std::string, void*> t = [] {
    std::map<std::string, void*> all = arrayEntryPoints();
    all.insert(memoryEntryPoints().begin(), memoryEntryPoints().end());
    all.insert(entryPoints().begin(), entryPoints().end());
    return all;
  }();
  return t;
}

const std::map<std::string, void*>& entryPoints() {
  static const std::map<std::string, void*> t = {
      {"cuInit", reinterpret_cast<void*>(&fakeInit)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&fakeDriverGetVersion)},
      {"cuGetErrorName", reinterpret_cast<void*>(&fakeGetErrorName)},
      {"cuGetErrorString", reinterpret_cast<void*>(&fakeGetErrorString)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(&fakeDeviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void*>(&fakeDeviceGet)},
      {"cuDeviceGetName", reinterpret_cast<void*>(&fakeDeviceGetName)},
      {"cuDeviceGetUuid", reinterpret_cast<void*>(&fakeDeviceGetUuid)},
      {"cuDeviceTotalMem", reinterpret_cast<void*>(&fakeDeviceTotalMem)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&fakeDeviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&fakePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(&fakePrimaryCtxRelease)},
      {"cuCtxSetCurrent", reinterpret_cast<void*>(&fakeCtxSetCurrent)},
      {"cuCtxSetLimit", reinterpret_cast<void*>(&fakeCtxSetLimit)},
      {"cuStreamCreateWithPriority", reinterpret_cast<void*>(&fakeStreamCreateWithPriority)},
      {"cuStreamDestroy", reinterpret_cast<void*>(&fakeStreamDestroy)},
      {"cuStreamQuery", reinterpret_cast<void*>(&fakeStreamQuery)},
      {"cuStreamWaitEvent", reinterpret_cast<void*>(&fakeStreamWaitEvent)},
      {"cuEventCreate", reinterpret_cast<void*>(&fakeEventCreate)},
      {"cuEventDestroy", reinterpret_cast<void*>(&fakeEventDestroy)},
      {"cuEventRecord", reinterpret_cast<void*>(&fakeEventRecord)},
      {"cuEventRecordWithFlags", reinterpret_cast<void*>(&fakeEventRecordWithFlags)},
      {"cuEventQuery", reinterpret_cast<void*>(&fakeEventQuery)},
      {"cuEventElapsedTime", reinterpret_cast<void*>(&fakeEventElapsedTime)},
      {"cuEventSynchronize", reinterpret_cast<void*>(&fakeEventSynchronize)},
      {"cuLaunchHostFunc", reinterpret_cast<void*>(&fakeLaunchHostFunc)},
      {"cuLaunchKernel", reinterpret_cast<void*>(&fakeLaunchKernel)},
      {"cuLaunchKernelEx", reinterpret_cast<void*>(&fakeLaunchKernelEx)},
      {"cuModuleLoadData", reinterpret_cast<void*>(&fakeModuleLoadData)},
      {"cuModuleUnload", reinterpret_cast<void*>(&fakeModuleUnload)},
      {"cuModuleGetFunction", reinterpret_cast<void*>(&fakeModuleGetFunction)},
      {"cuModuleGetGlobal", reinterpret_cast<void*>(&fakeModuleGetGlobal)},
      {"cuMemGetAddressRange", reinterpret_cast<void*>(&fakeMemGetAddressRange)},
      {"cuPointerGetAttribute", reinterpret_cast<void*>(&fakePointerGetAttribute)},
      {"cuFuncGetAttribute", reinterpret_cast<void*>(&fakeFuncGetAttribute)},
      {"cuFuncSetAttribute", reinterpret_cast<void*>(&fakeFuncSetAttribute)},
      {"cuFuncGetParamInfo", reinterpret_cast<void*>(&fakeFuncGetParamInfo)},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor", reinterpret_cast<void*>(&fakeOccupancy)},
      {"cuStreamBeginCapture", reinterpret_cast<void*>(&fakeStreamBeginCapture)},
      {"cuStreamEndCapture", reinterpret_cast<void*>(&fakeStreamEndCapture)},
      {"cuGraphInstantiateWithFlags", reinterpret_cast<void*>(&fakeGraphInstantiateWithFlags)},
      {"cuGraphLaunch", reinterpret_cast<void*>(&fakeGraphLaunch)},
      {"cuGraphExecDestroy", reinterpret_cast<void*>(&fakeGraphExecDestroy)},
      {"cuGraphDestroy", reinterpret_cast<void*>(&fakeGraphDestroy)},
  };
  return t;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                                     cuuint64_t flags,
                                                                     CUdriverProcAddressQueryResult* status) {
  {
    std::lock_guard lock(drv().mu);
    record(std::string("cuGetProcAddress ") + symbol + " " + std::to_string(version) + " flags=" +
           std::to_string(flags));
  }
  auto it = table().find(symbol);
  if (it == table().end()) {
    *pfn = nullptr;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = it->second;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

// Test hooks.
__attribute__((visibility("default"))) const char* rgpu_fake_cuda_log() {
  static thread_local std::string copy;
  std::lock_guard lock(drv().mu);
  copy = drv().log;
  return copy.c_str();
}

__attribute__((visibility("default"))) void rgpu_fake_cuda_clear_log() {
  std::lock_guard lock(drv().mu);
  drv().log.clear();
}

__attribute__((visibility("default"))) void rgpu_fake_cuda_fail(const char* name, int result) {
  std::lock_guard lock(drv().mu);
  drv().fail_next[name] = static_cast<CUresult>(result);
}

// Clears a sticky fault (a new process on a real GPU).
__attribute__((visibility("default"))) void rgpu_fake_cuda_reset_sticky() {
  std::lock_guard lock(drv().mu);
  drv().sticky = CUDA_SUCCESS;
}

// Forgets every texture and surface object and the contexts' malloc heaps
// (a new process starts without them: a test's second backend standing for
// a new worker).
__attribute__((visibility("default"))) void rgpu_fake_cuda_drop_objects() {
  std::lock_guard lock(drv().mu);
  dropObjectsLocked();
  for (FakeContext& c : drv().contexts) c.dropHeap();
}

// Queues work of another fake library (the fake cuBLAS) on `stream`, in order
// with the driver's own; a non-zero return is a launch failure (sticky).
// `release` frees `arg` once the work can run no more (a captured graph runs it at each launch).
__attribute__((visibility("default"))) void rgpu_fake_cuda_enqueue(CUstream stream, int (*fn)(void*), void* arg,
                                                                   void (*release)(void*), const char* what) {
  std::shared_ptr<void> held(arg, release);
  std::lock_guard lock(drv().mu);
  record(what);
  FakeStream* s = streamOf(stream);
  if (!s) {
    record(std::string(what) + ": unknown stream (dropped)");
    return;
  }
  enqueue(s, [fn, held] { return fn(held.get()) ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS; });
}

// A line in the driver's log from another fake library (the fake cuBLAS).
__attribute__((visibility("default"))) void rgpu_fake_cuda_record(const char* line) {
  std::lock_guard lock(drv().mu);
  record(line);
}

// Delays each stream operation by a random 0..`us` microseconds (0: none).
__attribute__((visibility("default"))) void rgpu_fake_cuda_set_jitter(unsigned us) {
  std::lock_guard lock(drv().mu);
  drv().jitter_us = us;
}

__attribute__((visibility("default"))) uint64_t rgpu_fake_cuda_live_allocations() {
  std::lock_guard lock(drv().mu);
  return drv().allocations.size();
}

}  // extern "C"
