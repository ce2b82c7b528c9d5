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
// RGPU_FAKE_CUDA_JITTER_US. RGPU_FAKE_CUDA_VRAM=FILE makes device memory
// outlive the process, as a GPU's does: the arena's first bytes are FILE,
// cuMemAlloc hands memory out as the last process left it (not zeroed; a
// driver does not promise zeroes), lowest address first. It models one
// process at a time on the GPU (a test's sessions one after the other).
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <random>
#include <thread>
#include <vector>

#include "common/array_shape.h"
#include "common/fatbin.h"
#include "common/launch_cluster.h"
#include "server/sim/device_arena.h"
#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_parser.h"
#include "server/sim/ptx/ptx_texture.h"

namespace {

using namespace rgpu::server;
using Clock = std::chrono::steady_clock;
using ptx::Dim3;

struct FakeContext {
  int device = 0;
  int refs = 0;
};

struct FakeStream;
// A captured graph: its operations in capture order.
struct FakeEvent;
struct FakeGraph {
  std::vector<std::function<CUresult()>> ops;
  std::vector<FakeEvent*> records, waits;  // external event nodes
  bool invalidated = false;
};
struct FakeGraphExec {
  std::shared_ptr<const std::vector<std::function<CUresult()>>> ops;  // shared with launches in flight
  std::vector<FakeEvent*> records, waits;
};
// Done once `stream` has completed `ticket` operations.
using Dep = std::pair<FakeStream*, uint64_t>;

struct FakeOp {
  std::function<CUresult()> fn;
  std::vector<Dep> deps;
};

// Never freed before exit: destroyed streams drain on their own thread, and
// events and dependencies may still name them.
struct FakeStream {
  int device = 0;
  bool legacy = false;
  bool non_blocking = false;
  bool destroyed = false;
  std::unique_ptr<FakeGraph> capturing;  // set between cuStreamBeginCapture and cuStreamEndCapture
  uint64_t enqueued = 0, completed = 0;
  std::deque<FakeOp> queue;
};

struct FakeEvent {
  unsigned flags = 0;
  FakeStream* stream = nullptr;  // of the last record
  uint64_t ticket = 0;
  bool recorded = false;
  Clock::time_point when;
};

struct FakeModule {
  int device = 0;
  rgpu::common::FatbinImage image;
  ptx::Module program;
  int ptx_arch = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> globals;  // name -> (address, size)
  // __managed__ variables, packed into one managed allocation of the module's
  // (as the driver does: off page boundaries, next to each other).
  uint64_t managed_alloc = 0, managed_at = 0;
};

struct FakeFunction {
  FakeModule* module = nullptr;
  std::string name;
  const ptx::Function* code = nullptr;
  int max_dynamic_shared = 48 * 1024;
  bool non_portable_cluster = false;  // CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
};

struct Driver {
  std::mutex mu;
  std::condition_variable cv;  // any stream progressed or got work
  bool initialised = false;
  int device_count = 1;
  uint64_t memory = 1ull << 30;
  unsigned jitter_us = 0;
  std::vector<FakeContext> contexts;
  std::vector<uint64_t> used;
  std::map<uint64_t, std::pair<int, uint64_t>> allocations;  // address -> (device, size)
  std::map<uint64_t, uint64_t> pitches;                      // pitched allocation -> its pitch
  std::map<const void*, size_t> host_allocations;  // pinned host memory
  std::set<uint64_t> managed;  // allocations (of `allocations`) that are managed memory
  // Virtual memory management: address reservations (base -> size), physical
  // allocations (each a memfd, so that a mapping shows its bytes at the
  // mapped address), and mappings (address -> handle, size). A mapping whose
  // access is set is in `allocations` too (and in `vmm`, which cuMemFree refuses).
  struct Physical {
    int fd = -1;
    uint64_t size = 0;
    int device = 0;
    int mappings = 0;
    bool released = false;
  };
  std::map<uint64_t, uint64_t> reservations;
  std::map<CUmemGenericAllocationHandle, Physical> physical;
  CUmemGenericAllocationHandle next_physical = 1;
  std::map<uint64_t, std::pair<CUmemGenericAllocationHandle, uint64_t>> mappings;
  std::set<uint64_t> vmm;
  std::vector<FakeStream*> legacy;                 // by device
  std::set<FakeStream*> streams;                   // live created streams
  std::vector<FakeStream*> all_streams;            // every stream ever made (for synchronising calls)
  std::set<FakeEvent*> events;
  std::vector<std::unique_ptr<FakeEvent>> dead_events;  // destroyed, but queued ops may still stamp them
  std::set<FakeModule*> modules;
  std::set<FakeFunction*> functions;
  std::set<FakeGraph*> graphs;
  std::set<FakeGraphExec*> graph_execs;
  CUresult sticky = CUDA_SUCCESS;
  std::map<std::string, CUresult> fail_next;
  std::string log;
  std::ofstream log_file;
  std::unique_ptr<ptx::Interpreter> interp;
  // Device memory, at addresses of its own as a driver's unified address range is.
  std::unique_ptr<DeviceArena> arena;
  bool vram = false;  // RGPU_FAKE_CUDA_VRAM: device memory outlives the process

  Driver() {
    if (const char* n = std::getenv("RGPU_FAKE_CUDA_DEVICES")) device_count = std::atoi(n);
    if (const char* m = std::getenv("RGPU_FAKE_CUDA_MEMORY")) memory = std::strtoull(m, nullptr, 10);
    if (const char* l = std::getenv("RGPU_FAKE_CUDA_LOG")) log_file.open(l, std::ios::app);
    if (const char* j = std::getenv("RGPU_FAKE_CUDA_JITTER_US")) jitter_us = static_cast<unsigned>(std::atoi(j));
    contexts.resize(std::max(device_count, 0));
    for (int i = 0; i < device_count; ++i) contexts[i].device = i;
    used.assign(std::max(device_count, 0), 0);
  }
};

// Where the fake GPUs' memory goes (first choice), apart from the sim's window.
constexpr uint64_t kFakeGpuWindow = 0x3000'0000'0000ull;

Driver& drv() {
  static Driver* d = new Driver();  // never destroyed: the executors may outlive static destructors
  return *d;
}

thread_local FakeContext* t_ctx = nullptr;

void record(const std::string& line) {
  Driver& d = drv();
  d.log += line + "\n";
  if (d.log_file.is_open()) {
    d.log_file << line << "\n";
    d.log_file.flush();
  }
}

// Common entry checks, with the driver lock held: injected failures, then
// initialisation, then a sticky fault.
CUresult enter(const char* name, bool needs_context = true) {
  Driver& d = drv();
  auto it = d.fail_next.find(name);
  if (it != d.fail_next.end()) {
    CUresult r = it->second;
    d.fail_next.erase(it);
    record(std::string(name) + " -> injected " + std::to_string(r));
    return r;
  }
  if (!d.initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (needs_context && !t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
  return d.sticky;
}

#define ENTER(name, ...)                                 \
  std::unique_lock lock(drv().mu);                       \
  if (CUresult e_ = enter(name, ##__VA_ARGS__); e_ != CUDA_SUCCESS) return e_;

bool depsMet(const std::vector<Dep>& deps) {
  for (auto& [s, ticket] : deps)
    if (s->completed < ticket) return false;
  return true;
}

// One stream's executor: its operations in order, each once its dependencies are met.
void executorLoop(FakeStream* s) {
  Driver& d = drv();
  thread_local std::mt19937 rng(std::random_device{}());
  std::unique_lock lock(d.mu);
  for (;;) {
    d.cv.wait(lock, [&] { return (s->destroyed && s->queue.empty()) || (!s->queue.empty() && depsMet(s->queue.front().deps)); });
    if (s->queue.empty()) return;  // destroyed and drained
    FakeOp op = std::move(s->queue.front());
    s->queue.pop_front();
    unsigned jitter = d.jitter_us;
    CUresult r = CUDA_SUCCESS;
    if (d.sticky == CUDA_SUCCESS) {
      lock.unlock();
      if (jitter) std::this_thread::sleep_for(std::chrono::microseconds(rng() % (jitter + 1)));
      r = op.fn();
      lock.lock();
    }
    if (r != CUDA_SUCCESS && d.sticky == CUDA_SUCCESS) d.sticky = r;
    ++s->completed;
    d.cv.notify_all();
  }
}

// With the lock held.
FakeStream* newStream(int device, bool legacy, bool non_blocking) {
  Driver& d = drv();
  auto* s = new FakeStream;
  s->device = device;
  s->legacy = legacy;
  s->non_blocking = non_blocking;
  d.all_streams.push_back(s);
  std::thread(executorLoop, s).detach();
  return s;
}

// What an operation newly queued on `s` implicitly waits for: the legacy
// stream waits for the earlier work of its context's blocking streams, and a
// blocking stream for the legacy stream's.
std::vector<Dep> implicitDeps(FakeStream* s) {
  Driver& d = drv();
  std::vector<Dep> deps;
  auto pending = [](FakeStream* t) { return t->enqueued > t->completed; };
  if (s->legacy) {
    for (FakeStream* t : d.all_streams)  // destroyed ones too, while their work runs
      if (!t->legacy && t->device == s->device && !t->non_blocking && pending(t)) deps.emplace_back(t, t->enqueued);
  } else if (!s->non_blocking) {
    FakeStream* l = d.legacy[s->device];
    if (pending(l)) deps.emplace_back(l, l->enqueued);
  }
  return deps;
}

// With the lock held; returns the operation's ticket on its stream.
uint64_t enqueue(FakeStream* s, std::function<CUresult()> fn, std::vector<Dep> extra = {}) {
  Driver& d = drv();
  if (s->capturing) {  // a node of the graph being captured
    s->capturing->ops.push_back(std::move(fn));
    return s->enqueued;
  }
  std::vector<Dep> deps = implicitDeps(s);
  deps.insert(deps.end(), extra.begin(), extra.end());
  s->queue.push_back({std::move(fn), std::move(deps)});
  d.cv.notify_all();
  return ++s->enqueued;
}

// Waits (lock held) until every operation queued so far, on every stream, has run.
void synchronizeAll(std::unique_lock<std::mutex>& lock) {
  Driver& d = drv();
  std::vector<Dep> all;
  for (FakeStream* s : d.all_streams) all.emplace_back(s, s->enqueued);
  d.cv.wait(lock, [&] { return depsMet(all); });
}

// The stream a handle names (the legacy stream of the current context for
// 0/CU_STREAM_LEGACY), or null for an unknown handle. Lock held.
FakeStream* streamOf(CUstream s) {
  Driver& d = drv();
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
    return t_ctx && t_ctx->device < static_cast<int>(d.legacy.size()) ? d.legacy[t_ctx->device] : nullptr;
  auto* st = reinterpret_cast<FakeStream*>(s);
  return d.streams.count(st) ? st : nullptr;
}

bool knownStream(CUstream s) { return streamOf(s) != nullptr; }

// An address range every byte of which is in one allocation.
bool deviceRange(uint64_t p, uint64_t n) {
  Driver& d = drv();
  auto it = d.allocations.upper_bound(p);
  if (it == d.allocations.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second.second && p + n >= p;
}

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
  drv().contexts[dev].refs--;
  record("cuDevicePrimaryCtxRelease " + std::to_string(dev));
  return CUDA_SUCCESS;
}

CUresult fakeCtxSetCurrent(CUcontext ctx) {
  std::lock_guard lock(drv().mu);
  if (!drv().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  t_ctx = reinterpret_cast<FakeContext*>(ctx);
  return CUDA_SUCCESS;
}

// ---- memory ----

CUresult fakeMemAlloc(CUdeviceptr* p, size_t size) {
  ENTER("cuMemAlloc");
  Driver& d = drv();
  int dev = t_ctx->device;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t rounded = (size + 255) / 256 * 256;
  if (d.used[dev] + rounded > d.memory) return CUDA_ERROR_OUT_OF_MEMORY;
  auto a = d.arena->allocate(rounded);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  void* m = reinterpret_cast<void*>(*a);
  if (!d.vram) std::memset(m, 0, rounded);  // as a GPU's: what was there before
  d.used[dev] += rounded;
  d.allocations[reinterpret_cast<uint64_t>(m)] = {dev, rounded};
  *p = reinterpret_cast<CUdeviceptr>(m);
  record("cuMemAlloc " + std::to_string(size) + " device=" + std::to_string(dev));
  return CUDA_SUCCESS;
}

// Rows at a 256-byte pitch (a GPU picks its own; rgpu must not assume one).
CUresult fakeMemAllocPitch(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned element) {
  {
    ENTER("cuMemAllocPitch");
    if (width == 0 || height == 0 || (element != 4 && element != 8 && element != 16)) return CUDA_ERROR_INVALID_VALUE;
  }
  size_t chosen = (width + 255) / 256 * 256;
  CUresult r = fakeMemAlloc(p, chosen * height);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard lock(drv().mu);
  drv().pitches[*p] = chosen;
  *pitch = chosen;
  record("cuMemAllocPitch " + std::to_string(width) + "x" + std::to_string(height) + " pitch=" + std::to_string(chosen));
  return CUDA_SUCCESS;
}

CUresult fakeMemFree(CUdeviceptr p) {
  ENTER("cuMemFree");
  Driver& d = drv();
  auto it = d.allocations.find(p);
  if (it == d.allocations.end() || d.vmm.count(p)) return CUDA_ERROR_INVALID_VALUE;
  // cuMemFree synchronises: wait for queued work (it may use the memory).
  synchronizeAll(lock);
  it = d.allocations.find(p);
  if (it == d.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  d.used[it->second.first] -= it->second.second;
  d.arena->free(p);
  d.allocations.erase(it);
  d.pitches.erase(p);
  record("cuMemFree");
  return CUDA_SUCCESS;
}

CUresult fakeMemGetInfo(size_t* free, size_t* total) {
  ENTER("cuMemGetInfo");
  *total = drv().memory;
  *free = drv().memory - drv().used[t_ctx->device];
  return CUDA_SUCCESS;
}

// ---- virtual memory management ----
// Granularity 2 MiB (as current GPUs'); reservations honour the address asked
// for when it is free, else go where the system puts them (the driver's
// addr is a hint). cuMemUnmap waits for queued work, as cuMemFree does.

constexpr uint64_t kVmmGranularity = 2ull << 20;

bool deviceProp(const CUmemAllocationProp* prop) {
  return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
         prop->location.id >= 0 && prop->location.id < drv().device_count;
}

CUresult fakeMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags) {
  ENTER("cuMemGetAllocationGranularity", false);
  if (!g || !deviceProp(prop)) return CUDA_ERROR_INVALID_VALUE;
  *g = kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult fakeMemAddressReserve(CUdeviceptr* p, size_t size, size_t align, CUdeviceptr addr, unsigned long long) {
  ENTER("cuMemAddressReserve");
  if (!p || size == 0 || size % kVmmGranularity || (align && (align & (align - 1)))) return CUDA_ERROR_INVALID_VALUE;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* m = MAP_FAILED;
  if (addr) {
    m = mmap(reinterpret_cast<void*>(addr), size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != MAP_FAILED && m != reinterpret_cast<void*>(addr)) {
      munmap(m, size);
      m = MAP_FAILED;
    }
  }
  if (m == MAP_FAILED) m = mmap(nullptr, size, PROT_NONE, flags, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(m);
  drv().reservations[*p] = size;
  record("cuMemAddressReserve " + std::to_string(size) + (*p == addr ? " at the address asked" : " elsewhere"));
  return CUDA_SUCCESS;
}

CUresult fakeMemAddressFree(CUdeviceptr p, size_t size) {
  ENTER("cuMemAddressFree");
  Driver& d = drv();
  auto it = d.reservations.find(p);
  if (it == d.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = d.mappings.lower_bound(p);
  if (m != d.mappings.end() && m->first < p + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  munmap(reinterpret_cast<void*>(p), size);
  d.reservations.erase(it);
  record("cuMemAddressFree");
  return CUDA_SUCCESS;
}

CUresult fakeMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop,
                       unsigned long long) {
  ENTER("cuMemCreate");
  Driver& d = drv();
  if (!h || size == 0 || size % kVmmGranularity || !deviceProp(prop)) return CUDA_ERROR_INVALID_VALUE;
  const int dev = prop->location.id;
  if (d.used[dev] + size > d.memory) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("rgpu-fake-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  d.used[dev] += size;
  *h = d.next_physical++;
  d.physical[*h] = {fd, size, dev, 0, false};
  record("cuMemCreate " + std::to_string(size) + " device=" + std::to_string(dev));
  return CUDA_SUCCESS;
}

// Frees a physical allocation once it is released and mapped nowhere (lock held).
void dropPhysical(CUmemGenericAllocationHandle h) {
  Driver& d = drv();
  auto it = d.physical.find(h);
  if (it == d.physical.end() || !it->second.released || it->second.mappings) return;
  close(it->second.fd);
  d.used[it->second.device] -= it->second.size;
  d.physical.erase(it);
}

CUresult fakeMemRelease(CUmemGenericAllocationHandle h) {
  ENTER("cuMemRelease", false);
  auto it = drv().physical.find(h);
  if (it == drv().physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  dropPhysical(h);
  record("cuMemRelease");
  return CUDA_SUCCESS;
}

CUresult fakeMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long) {
  ENTER("cuMemMap");
  Driver& d = drv();
  auto ph = d.physical.find(h);
  if (ph == d.physical.end() || ph->second.released || size == 0 || size % kVmmGranularity ||
      offset % kVmmGranularity || offset + size > ph->second.size)
    return CUDA_ERROR_INVALID_VALUE;
  auto r = d.reservations.upper_bound(p);
  if (r == d.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (p < r->first || p + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;  // not reserved
  auto after = d.mappings.lower_bound(p);
  if (after != d.mappings.end() && after->first < p + size) return CUDA_ERROR_INVALID_VALUE;  // mapped already
  if (after != d.mappings.begin() && std::prev(after)->first + std::prev(after)->second.second > p)
    return CUDA_ERROR_INVALID_VALUE;
  // No access until cuMemSetAccess, as the driver's mappings start.
  void* m = mmap(reinterpret_cast<void*>(p), size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->second.fd,
                 static_cast<off_t>(offset));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  d.mappings[p] = {h, size};
  ++ph->second.mappings;
  record("cuMemMap " + std::to_string(size));
  return CUDA_SUCCESS;
}

CUresult fakeMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc* desc, size_t count) {
  ENTER("cuMemSetAccess");
  Driver& d = drv();
  auto m = d.mappings.find(p);
  if (m == d.mappings.end() || m->second.second != size || !desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  bool owner = false;
  const int dev = d.physical[m->second.first].device;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        desc[i].location.id >= d.device_count)
      return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].location.id == dev && desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) owner = true;
  }
  if (!owner) return CUDA_ERROR_INVALID_VALUE;  // rgpu always grants its own device read-write
  if (mprotect(reinterpret_cast<void*>(p), size, PROT_READ | PROT_WRITE) != 0) return CUDA_ERROR_UNKNOWN;
  d.allocations[p] = {dev, size};
  d.vmm.insert(p);
  record("cuMemSetAccess " + std::to_string(size) + " devices=" + std::to_string(count));
  return CUDA_SUCCESS;
}

CUresult fakeMemUnmap(CUdeviceptr p, size_t size) {
  ENTER("cuMemUnmap");
  Driver& d = drv();
  auto m = d.mappings.find(p);
  if (m == d.mappings.end() || m->second.second != size) return CUDA_ERROR_INVALID_VALUE;
  synchronizeAll(lock);
  m = d.mappings.find(p);
  if (m == d.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  const CUmemGenericAllocationHandle h = m->second.first;
  // Back to a bare reservation.
  mmap(reinterpret_cast<void*>(p), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  d.mappings.erase(m);
  d.allocations.erase(p);
  d.vmm.erase(p);
  --d.physical[h].mappings;
  dropPhysical(h);
  record("cuMemUnmap " + std::to_string(size));
  return CUDA_SUCCESS;
}

CUresult fakeDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  ENTER("cuDeviceCanAccessPeer", false);
  const int n = drv().device_count;
  if (!can || dev < 0 || dev >= n || peer < 0 || peer >= n) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer;
  return CUDA_SUCCESS;
}

CUresult fakeMemHostAlloc(void** p, size_t size, unsigned flags) {
  ENTER("cuMemHostAlloc");
  *p = std::malloc(size ? size : 1);
  drv().host_allocations[*p] = size;
  record("cuMemHostAlloc " + std::to_string(size));
  return CUDA_SUCCESS;
}

CUresult fakeMemFreeHost(void* p) {
  ENTER("cuMemFreeHost");
  if (!drv().host_allocations.count(p)) return CUDA_ERROR_INVALID_VALUE;
  synchronizeAll(lock);  // a copy queued from it may still be waiting to run
  if (!drv().host_allocations.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  record("cuMemFreeHost");
  return CUDA_SUCCESS;
}

// Host pointers of async copies must be pinned, or the copy is synchronous on a real GPU.
bool pinned(const void* p) {
  auto it = drv().host_allocations.upper_bound(p);
  if (it == drv().host_allocations.begin()) return false;
  --it;
  return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second;
}

CUresult fakeMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  ENTER("cuMemcpyHtoDAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  record(std::string("cuMemcpyHtoDAsync ") + std::to_string(n) + (pinned(src) ? " pinned" : " pageable"));
  enqueue(streamOf(s), [=] {
    std::memcpy(reinterpret_cast<void*>(dst), src, n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoHAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(src, n)) return CUDA_ERROR_INVALID_VALUE;
  record(std::string("cuMemcpyDtoHAsync ") + std::to_string(n) + (pinned(dst) ? " pinned" : " pageable"));
  enqueue(streamOf(s), [=] {
    std::memcpy(dst, reinterpret_cast<void*>(src), n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoDAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(dst, n) || !deviceRange(src, n)) return CUDA_ERROR_INVALID_VALUE;
  record("cuMemcpyDtoDAsync " + std::to_string(n));
  enqueue(streamOf(s), [=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemcpy2DAsync(const CUDA_MEMCPY2D* m, CUstream s) {
  ENTER("cuMemcpy2DAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  CUDA_MEMCPY2D c = *m;
  auto base = [](CUmemorytype t, const void* host, CUdeviceptr dev) -> uint8_t* {
    return t == CU_MEMORYTYPE_HOST ? static_cast<uint8_t*>(const_cast<void*>(host)) : reinterpret_cast<uint8_t*>(dev);
  };
  uint8_t* src = base(c.srcMemoryType, c.srcHost, c.srcDevice) + c.srcXInBytes + c.srcY * c.srcPitch;
  uint8_t* dst = base(c.dstMemoryType, c.dstHost, c.dstDevice) + c.dstXInBytes + c.dstY * c.dstPitch;
  if (c.Height && (c.srcPitch < c.WidthInBytes || c.dstPitch < c.WidthInBytes)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t sspan = c.Height ? (c.Height - 1) * c.srcPitch + c.WidthInBytes : 0;
  uint64_t dspan = c.Height ? (c.Height - 1) * c.dstPitch + c.WidthInBytes : 0;
  if (c.srcMemoryType == CU_MEMORYTYPE_DEVICE && !deviceRange(reinterpret_cast<uint64_t>(src), sspan))
    return CUDA_ERROR_INVALID_VALUE;
  if (c.dstMemoryType == CU_MEMORYTYPE_DEVICE && !deviceRange(reinterpret_cast<uint64_t>(dst), dspan))
    return CUDA_ERROR_INVALID_VALUE;
  // "cuMemcpy2D() may fail for pitches not computed by cuMemAllocPitch()": here
  // it does, for a device pitch that is neither that nor a multiple of 32.
  auto pitchOk = [](uint64_t addr, size_t pitch) {
    Driver& d = drv();
    auto it = d.allocations.upper_bound(addr);
    if (it == d.allocations.begin()) return false;
    --it;
    auto pt = d.pitches.find(it->first);
    return pt != d.pitches.end() ? pt->second == pitch : pitch % 32 == 0;
  };
  if (c.Height > 1 && ((c.srcMemoryType == CU_MEMORYTYPE_DEVICE && !pitchOk(reinterpret_cast<uint64_t>(src), c.srcPitch)) ||
                       (c.dstMemoryType == CU_MEMORYTYPE_DEVICE && !pitchOk(reinterpret_cast<uint64_t>(dst), c.dstPitch)))) {
    record("cuMemcpy2DAsync refused: a pitch cuMemAllocPitch did not compute");
    return CUDA_ERROR_INVALID_VALUE;
  }
  record("cuMemcpy2DAsync " + std::to_string(c.WidthInBytes) + "x" + std::to_string(c.Height));
  enqueue(streamOf(s), [=] {
    for (size_t r = 0; r < c.Height; ++r) std::memmove(dst + r * c.dstPitch, src + r * c.srcPitch, c.WidthInBytes);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  ENTER("cuMemsetD8Async");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  record("cuMemsetD8Async " + std::to_string(n));
  enqueue(streamOf(s), [=] {
    std::memset(reinterpret_cast<void*>(dst), v, n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
  ENTER("cuMemsetD2D8Async");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (h && (pitch < w || !deviceRange(dst, (h - 1) * pitch + w))) return CUDA_ERROR_INVALID_VALUE;
  record("cuMemsetD2D8Async " + std::to_string(w) + "x" + std::to_string(h));
  enqueue(streamOf(s), [=] {
    for (size_t r = 0; r < h; ++r) std::memset(reinterpret_cast<uint8_t*>(dst) + r * pitch, v, w);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

template <typename T>
CUresult fakeMemsetD2DN(const char* name, CUdeviceptr dst, size_t pitch, T v, size_t w, size_t h, CUstream s) {
  ENTER(name);
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (h && (pitch < w * sizeof(T) || !deviceRange(dst, (h - 1) * pitch + w * sizeof(T)))) return CUDA_ERROR_INVALID_VALUE;
  if (dst % sizeof(T) || (h > 1 && pitch % sizeof(T))) return CUDA_ERROR_INVALID_VALUE;  // the driver's alignment rule
  record(std::string(name) + " " + std::to_string(w) + "x" + std::to_string(h));
  enqueue(streamOf(s), [=] {
    for (size_t r = 0; r < h; ++r)
      for (size_t x = 0; x < w; ++x) std::memcpy(reinterpret_cast<uint8_t*>(dst) + r * pitch + x * sizeof(T), &v, sizeof(T));
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}
CUresult fakeMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s) {
  return fakeMemsetD2DN("cuMemsetD2D16Async", dst, pitch, v, w, h, s);
}
CUresult fakeMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) {
  return fakeMemsetD2DN("cuMemsetD2D32Async", dst, pitch, v, w, h, s);
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

// Texture and surface objects as the interpreter samples them, and the
// arrays' memory a launch may touch (both below, with the arrays). Lock held.
std::shared_ptr<const ptx::Textures> texturesLocked();
void addArrayRanges(ptx::MemoryRanges& memory);

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
  std::shared_ptr<const ptx::Textures> textures = texturesLocked();  // as the kernel starts, as a GPU's
  enqueue(streamOf(s), [fn, gx, gy, gz, bx, by, bz, smem, block, cooperative, cd, explicit_cluster, textures] {
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
    ptx::LaunchResult r = drv().interp->run(L);
    if (!r.output.empty()) {
      std::fwrite(r.output.data(), 1, r.output.size(), stdout);
      std::fflush(stdout);
    }
    return r.status ? CUDA_SUCCESS : static_cast<CUresult>(r.status.code());
  });
  return CUDA_SUCCESS;
}

// ---- arrays, texture and surface objects ----
// An array is host memory, its rows packed, counted in its device's memory
// use (cuMemGetInfo) as on a GPU; a mipmapped array one array per level.
// Texture and surface objects are numbers from one pool, the lowest free
// first (a fresh process's first object is 1), each described for the
// interpreter as the sim describes its own (server/sim/ptx/ptx_texture.h),
// so kernels sample and write them; a launch sees the objects as they were
// when it was queued, and faults on an object whose memory is gone.

// An array's elements live in the fake's device memory (its arena), as a
// GPU's do: with RGPU_FAKE_CUDA_VRAM, what one process left in an array's
// memory is what the next one's array there starts with.
struct FakeArray {
  int device = 0;
  size_t width = 1, height = 1, slices = 1, elem = 1;
  CUDA_ARRAY3D_DESCRIPTOR desc{};  // as created (level 0's)
  uint8_t* data = nullptr;
  size_t size = 0;
  ~FakeArray();
};
struct FakeMipmapped {
  std::vector<std::unique_ptr<FakeArray>> levels;
};
std::set<FakeArray*>& fakeArrays() {
  static std::set<FakeArray*> s;
  return s;
}
std::set<FakeMipmapped*>& fakeMipmapped() {
  static std::set<FakeMipmapped*> s;
  return s;
}
std::set<unsigned long long>& fakeObjects() {
  static std::set<unsigned long long> s;
  return s;
}
ptx::Textures& objectTable() {
  static ptx::Textures t;
  return t;
}
std::shared_ptr<const ptx::Textures> g_objects_snapshot;  // null: changed since
unsigned long long g_lowest_free = 1;  // no handle below it is free

std::shared_ptr<const ptx::Textures> texturesLocked() {
  if (!g_objects_snapshot) g_objects_snapshot = std::make_shared<const ptx::Textures>(objectTable());
  return g_objects_snapshot;
}

void dropObjectsLocked() {
  fakeObjects().clear();
  objectTable() = {};
  g_objects_snapshot.reset();
  g_lowest_free = 1;
}

// The lowest handle not in use.
unsigned long long newObjectLocked() {
  unsigned long long h = g_lowest_free;
  while (fakeObjects().count(h)) ++h;
  g_lowest_free = h + 1;
  fakeObjects().insert(h);
  g_objects_snapshot.reset();
  return h;
}

// Bytes per channel.
size_t formatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT8X4: return 1;
    case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X4: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_UNORM_INT16X4: return 2;
    case CU_AD_FORMAT_SNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X4: return 2;
    default: return 4;
  }
}

// The channels a normalised format names (0: any of 1, 2, 4).
unsigned formatChannels(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1: return 1;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2: return 2;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4: return 4;
    default: return 0;
  }
}

std::unique_ptr<FakeArray> makeArray(const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned level) {
  auto a = std::make_unique<FakeArray>();
  const auto dims = rgpu::common::arrayLevel(d->Width, d->Height, d->Depth,
                                             d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP), level);
  a->width = dims.width, a->height = dims.height, a->slices = dims.slices;
  a->elem = formatBytes(d->Format) * d->NumChannels;
  a->desc = *d;
  a->device = t_ctx->device;
  a->size = a->width * a->height * a->slices * a->elem;
  Driver& drv_ = drv();
  auto at = drv_.arena->allocate(std::max<size_t>(a->size, 1));
  if (!at) return nullptr;
  a->data = reinterpret_cast<uint8_t*>(*at);
  if (!drv_.vram) std::memset(a->data, 0, a->size);  // as a GPU's: what was there before
  return a;
}

FakeArray::~FakeArray() {
  if (data) drv().arena->free(reinterpret_cast<uint64_t>(data));
}

// Charges (or, negative, credits) `bytes` to the current device's memory use; false when it does not fit.
bool chargeDevice(int device, int64_t bytes) {
  Driver& d = drv();
  if (bytes > 0 && d.used[device] + static_cast<uint64_t>(bytes) > d.memory) return false;
  d.used[device] += static_cast<uint64_t>(bytes);
  return true;
}

CUresult fakeArray3DCreate(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  ENTER("cuArray3DCreate");
  if (!out || !d || d->Width == 0 || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) ||
      (formatChannels(d->Format) && formatChannels(d->Format) != d->NumChannels))
    return CUDA_ERROR_INVALID_VALUE;
  auto a = makeArray(d, 0);
  if (!a || !chargeDevice(a->device, static_cast<int64_t>(a->size))) return CUDA_ERROR_OUT_OF_MEMORY;
  record("cuArray3DCreate " + std::to_string(d->Width) + "x" + std::to_string(d->Height) + "x" + std::to_string(d->Depth) +
         " flags=" + std::to_string(d->Flags) + " format=" + std::to_string(d->Format) + "x" +
         std::to_string(d->NumChannels));
  *out = reinterpret_cast<CUarray>(a.get());
  fakeArrays().insert(a.release());
  return CUDA_SUCCESS;
}

CUresult fakeArrayDestroy(CUarray a) {
  ENTER("cuArrayDestroy");
  auto* fa = reinterpret_cast<FakeArray*>(a);
  if (!fakeArrays().count(fa)) return CUDA_ERROR_INVALID_HANDLE;
  synchronizeAll(lock);  // work queued so far may use it
  fakeArrays().erase(fa);
  chargeDevice(fa->device, -static_cast<int64_t>(fa->size));
  delete fa;
  record("cuArrayDestroy");
  return CUDA_SUCCESS;
}

CUresult fakeMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned levels) {
  ENTER("cuMipmappedArrayCreate");
  if (!out || !d || d->Width == 0 || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  auto m = std::make_unique<FakeMipmapped>();
  int64_t bytes = 0;
  for (unsigned l = 0; l < levels; ++l) {
    m->levels.push_back(makeArray(d, l));
    if (!m->levels.back()) return CUDA_ERROR_OUT_OF_MEMORY;
    bytes += static_cast<int64_t>(m->levels.back()->size);
  }
  if (!chargeDevice(t_ctx->device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  record("cuMipmappedArrayCreate levels=" + std::to_string(levels));
  *out = reinterpret_cast<CUmipmappedArray>(m.get());
  fakeMipmapped().insert(m.release());
  return CUDA_SUCCESS;
}

CUresult fakeMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray m, unsigned level) {
  ENTER("cuMipmappedArrayGetLevel");
  auto* fm = reinterpret_cast<FakeMipmapped*>(m);
  if (!fakeMipmapped().count(fm) || level >= fm->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUarray>(fm->levels[level].get());
  return CUDA_SUCCESS;
}

CUresult fakeMipmappedArrayDestroy(CUmipmappedArray m) {
  ENTER("cuMipmappedArrayDestroy");
  auto* fm = reinterpret_cast<FakeMipmapped*>(m);
  if (!fakeMipmapped().count(fm)) return CUDA_ERROR_INVALID_HANDLE;
  synchronizeAll(lock);
  fakeMipmapped().erase(fm);
  for (auto& l : fm->levels) chargeDevice(l->device, -static_cast<int64_t>(l->size));
  delete fm;
  record("cuMipmappedArrayDestroy");
  return CUDA_SUCCESS;
}

// A level array the fake made (plain, or a level of a mipmapped array). Lock held.
FakeArray* knownArray(CUarray a) {
  auto* fa = reinterpret_cast<FakeArray*>(a);
  if (fakeArrays().count(fa)) return fa;
  for (FakeMipmapped* m : fakeMipmapped())
    for (auto& l : m->levels)
      if (l.get() == fa) return fa;
  return nullptr;
}

CUresult fakeMemcpy3DAsync(const CUDA_MEMCPY3D* m, CUstream s) {
  ENTER("cuMemcpy3DAsync");
  if (!m || !knownStream(s)) return CUDA_ERROR_INVALID_VALUE;
  struct End {
    uint8_t* base;
    size_t pitch, slice;
  };
  const size_t w = m->WidthInBytes, h = m->Height, dd = m->Depth;
  auto end = [&](CUmemorytype type, const void* host, CUdeviceptr dev, CUarray arr, size_t x, size_t y, size_t z,
                 size_t pitch, size_t height, End& e) {
    if (type == CU_MEMORYTYPE_ARRAY) {
      FakeArray* a = knownArray(arr);
      if (!a || x % a->elem || x + w > a->width * a->elem || y + h > a->height || z + dd > a->slices) return false;
      e = {a->data + (z * a->height + y) * a->width * a->elem + x, a->width * a->elem, a->width * a->elem * a->height};
      return true;
    }
    uint8_t* b = type == CU_MEMORYTYPE_HOST ? static_cast<uint8_t*>(const_cast<void*>(host)) : reinterpret_cast<uint8_t*>(dev);
    e = {b + (z * height + y) * pitch + x, pitch, pitch * height};
    if (type == CU_MEMORYTYPE_DEVICE && !deviceRange(reinterpret_cast<uint64_t>(e.base), (dd - 1) * e.slice + (h - 1) * pitch + w))
      return false;
    return true;
  };
  End src{}, dst{};
  if (!end(m->srcMemoryType, m->srcHost, m->srcDevice, m->srcArray, m->srcXInBytes, m->srcY, m->srcZ, m->srcPitch,
           m->srcHeight, src) ||
      !end(m->dstMemoryType, m->dstHost, m->dstDevice, m->dstArray, m->dstXInBytes, m->dstY, m->dstZ, m->dstPitch,
           m->dstHeight, dst))
    return CUDA_ERROR_INVALID_VALUE;
  record("cuMemcpy3DAsync " + std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(dd) +
         (streamOf(s)->capturing ? " (captured)" : ""));
  enqueue(streamOf(s), [=] {
    for (size_t z = 0; z < dd; ++z)
      for (size_t y = 0; y < h; ++y) std::memmove(dst.base + z * dst.slice + y * dst.pitch, src.base + z * src.slice + y * src.pitch, w);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

void addArrayRanges(ptx::MemoryRanges& memory) {
  auto add = [&](const FakeArray& a) {
    const auto at = reinterpret_cast<uint64_t>(a.data);
    memory.emplace_back(at, at + a.size);
  };
  for (FakeArray* a : fakeArrays()) add(*a);
  for (FakeMipmapped* m : fakeMipmapped())
    for (auto& l : m->levels) add(*l);
  std::sort(memory.begin(), memory.end());
}

ptx::TexFormat texFormat(CUarray_format f, unsigned channels) {
  ptx::TexFormat t;
  t.channels = static_cast<uint8_t>(channels);
  t.bits = static_cast<uint8_t>(formatBytes(f) * 8);
  switch (f) {
    case CU_AD_FORMAT_HALF: case CU_AD_FORMAT_FLOAT: t.kind = ptx::kFormatFloat; break;
    case CU_AD_FORMAT_SIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X4:
      t.kind = ptx::kFormatSigned; break;
    default: t.kind = ptx::kFormatUnsigned;
  }
  return t;
}

// The image of an array's levels (one level: a plain array, or one level of a mipmapped one).
ptx::TexImage imageOf(const std::vector<const FakeArray*>& levels) {
  const CUDA_ARRAY3D_DESCRIPTOR& d = levels[0]->desc;
  const bool layered = d.Flags & CUDA_ARRAY3D_LAYERED, cube = d.Flags & CUDA_ARRAY3D_CUBEMAP;
  ptx::TexImage img;
  img.shape = cube      ? (layered ? ptx::TexShape::kCubemapLayered : ptx::TexShape::kCubemap)
              : layered ? (d.Height ? ptx::TexShape::kLayered2D : ptx::TexShape::kLayered1D)
              : d.Depth ? ptx::TexShape::k3D
              : d.Height ? ptx::TexShape::k2D
                         : ptx::TexShape::k1D;
  img.format = texFormat(d.Format, d.NumChannels);
  if (layered || cube) img.layers = static_cast<uint32_t>(cube ? d.Depth / 6 : d.Depth);
  for (const FakeArray* a : levels) {
    ptx::TexLevel l;
    l.base = reinterpret_cast<uint64_t>(a->data);
    l.width = static_cast<uint32_t>(a->width);
    l.height = static_cast<uint32_t>(a->height);
    l.depth = static_cast<uint32_t>(a->slices);
    l.pitch = a->width * a->elem;
    l.slice = l.pitch * a->height;
    img.levels.push_back(l);
  }
  return img;
}

CUresult fakeTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* td,
                             const CUDA_RESOURCE_VIEW_DESC* view) {
  ENTER("cuTexObjectCreate");
  if (!out || !res || !td || view) return CUDA_ERROR_INVALID_VALUE;
  ptx::TexObject o;
  switch (res->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      const FakeArray* a = knownArray(res->res.array.hArray);
      if (!a) return CUDA_ERROR_INVALID_HANDLE;
      o.image = imageOf({a});
      break;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      auto* m = reinterpret_cast<FakeMipmapped*>(res->res.mipmap.hMipmappedArray);
      if (!fakeMipmapped().count(m)) return CUDA_ERROR_INVALID_HANDLE;
      std::vector<const FakeArray*> levels;
      for (auto& l : m->levels) levels.push_back(l.get());
      o.image = imageOf(levels);
      break;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
      const auto& l = res->res.linear;
      o.image.format = texFormat(l.format, l.numChannels);
      const uint64_t e = o.image.format.bytes();
      if (!e || l.sizeInBytes < e) return CUDA_ERROR_INVALID_VALUE;
      o.image.levels = {{l.devPtr, static_cast<uint32_t>(l.sizeInBytes / e), 1, 1, l.sizeInBytes, l.sizeInBytes}};
      break;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      const auto& p = res->res.pitch2D;
      o.image.shape = ptx::TexShape::k2D;
      o.image.format = texFormat(p.format, p.numChannels);
      o.image.levels = {{p.devPtr, static_cast<uint32_t>(p.width), static_cast<uint32_t>(p.height), 1, p.pitchInBytes,
                         p.pitchInBytes * p.height}};
      break;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  ptx::TexSampler& s = o.sampler;
  for (int i = 0; i < 3; ++i) s.address[i] = static_cast<uint8_t>(td->addressMode[i]);
  s.linear = td->filterMode == CU_TR_FILTER_MODE_LINEAR;
  s.normalized_read = !(td->flags & CU_TRSF_READ_AS_INTEGER);
  s.normalized_coords = td->flags & CU_TRSF_NORMALIZED_COORDINATES;
  s.srgb = td->flags & CU_TRSF_SRGB;
  for (int i = 0; i < 4; ++i) s.border[i] = td->borderColor[i];
  s.mip_linear = td->mipmapFilterMode == CU_TR_FILTER_MODE_LINEAR;
  s.mip_bias = td->mipmapLevelBias;
  s.min_lod = td->minMipmapLevelClamp;
  s.max_lod = td->maxMipmapLevelClamp;
  *out = newObjectLocked();
  objectTable().textures[*out] = std::move(o);
  record("cuTexObjectCreate resType=" + std::to_string(res->resType) + " flags=" + std::to_string(td->flags) +
         " filter=" + std::to_string(td->filterMode));
  return CUDA_SUCCESS;
}

CUresult fakeObjectDestroy(unsigned long long o, const char* name) {
  ENTER(name);
  if (!fakeObjects().erase(o)) return CUDA_ERROR_INVALID_VALUE;
  g_lowest_free = std::min(g_lowest_free, o);
  objectTable().textures.erase(o);
  objectTable().surfaces.erase(o);
  g_objects_snapshot.reset();
  record(name);
  return CUDA_SUCCESS;
}
CUresult fakeTexObjectDestroy(CUtexObject o) { return fakeObjectDestroy(o, "cuTexObjectDestroy"); }
CUresult fakeSurfObjectDestroy(CUsurfObject o) { return fakeObjectDestroy(o, "cuSurfObjectDestroy"); }

CUresult fakeSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* res) {
  ENTER("cuSurfObjectCreate");
  if (!out || !res || res->resType != CU_RESOURCE_TYPE_ARRAY || !knownArray(res->res.array.hArray))
    return CUDA_ERROR_INVALID_VALUE;
  *out = newObjectLocked();
  objectTable().surfaces[*out] = imageOf({knownArray(res->res.array.hArray)});
  record("cuSurfObjectCreate");
  return CUDA_SUCCESS;
}

const std::map<std::string, void*>& table() {
  static const std::map<std::string, void*> t = {
      {"cuArray3DCreate", reinterpret_cast<void*>(&fakeArray3DCreate)},
      {"cuArrayDestroy", reinterpret_cast<void*>(&fakeArrayDestroy)},
      {"cuMipmappedArrayCreate", reinterpret_cast<void*>(&fakeMipmappedArrayCreate)},
      {"cuMipmappedArrayGetLevel", reinterpret_cast<void*>(&fakeMipmappedArrayGetLevel)},
      {"cuMipmappedArrayDestroy", reinterpret_cast<void*>(&fakeMipmappedArrayDestroy)},
      {"cuMemcpy3DAsync", reinterpret_cast<void*>(&fakeMemcpy3DAsync)},
      {"cuTexObjectCreate", reinterpret_cast<void*>(&fakeTexObjectCreate)},
      {"cuTexObjectDestroy", reinterpret_cast<void*>(&fakeTexObjectDestroy)},
      {"cuSurfObjectCreate", reinterpret_cast<void*>(&fakeSurfObjectCreate)},
      {"cuSurfObjectDestroy", reinterpret_cast<void*>(&fakeSurfObjectDestroy)},
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
      {"cuMemAlloc", reinterpret_cast<void*>(&fakeMemAlloc)},
      {"cuMemAllocPitch", reinterpret_cast<void*>(&fakeMemAllocPitch)},
      {"cuMemFree", reinterpret_cast<void*>(&fakeMemFree)},
      {"cuMemGetInfo", reinterpret_cast<void*>(&fakeMemGetInfo)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&fakeMemGetAllocationGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&fakeMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&fakeMemAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&fakeMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&fakeMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&fakeMemMap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&fakeMemSetAccess)},
      {"cuMemUnmap", reinterpret_cast<void*>(&fakeMemUnmap)},
      {"cuDeviceCanAccessPeer", reinterpret_cast<void*>(&fakeDeviceCanAccessPeer)},
      {"cuMemHostAlloc", reinterpret_cast<void*>(&fakeMemHostAlloc)},
      {"cuMemFreeHost", reinterpret_cast<void*>(&fakeMemFreeHost)},
      {"cuMemcpyHtoDAsync", reinterpret_cast<void*>(&fakeMemcpyHtoDAsync)},
      {"cuMemcpyDtoHAsync", reinterpret_cast<void*>(&fakeMemcpyDtoHAsync)},
      {"cuMemcpyDtoDAsync", reinterpret_cast<void*>(&fakeMemcpyDtoDAsync)},
      {"cuMemcpy2DAsync", reinterpret_cast<void*>(&fakeMemcpy2DAsync)},
      {"cuMemsetD8Async", reinterpret_cast<void*>(&fakeMemsetD8Async)},
      {"cuMemsetD2D8Async", reinterpret_cast<void*>(&fakeMemsetD2D8Async)},
      {"cuMemsetD2D16Async", reinterpret_cast<void*>(&fakeMemsetD2D16Async)},
      {"cuMemsetD2D32Async", reinterpret_cast<void*>(&fakeMemsetD2D32Async)},
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

// Forgets every texture and surface object (a new process's handles start
// afresh: a test's second backend standing for a new worker).
__attribute__((visibility("default"))) void rgpu_fake_cuda_drop_objects() {
  std::lock_guard lock(drv().mu);
  dropObjectsLocked();
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
