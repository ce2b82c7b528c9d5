// The fake CUDA driver's shared state and helpers, for the files that make
// it up (fake_libcuda.cc says what the fake is and how it behaves):
// fake_libcuda.cc (devices, contexts, streams, events, modules, kernels,
// graphs, the entry point table), fake_memory.cc (device memory, virtual
// memory management, host memory, copies and memsets) and fake_arrays.cc
// (arrays, texture and surface objects).
//
// Invariants: every entry point takes drv().mu first (ENTER) and holds it
// while it touches any of the state here; a stream's operations run on its
// executor thread without the lock, in order, each once what the driver's
// rules order it after has run (enqueue); "Locked" functions expect the
// lock held.
#pragma once

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
#include "server/sim/ptx/device_heap.h"
#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_parser.h"
#include "server/sim/ptx/ptx_texture.h"

namespace rgpu::fake {

using namespace rgpu::server;
using Clock = std::chrono::steady_clock;
using ptx::Dim3;

struct FakeContext {
  int device = 0;
  int refs = 0;
  // The driver's malloc heap (CU_LIMIT_MALLOC_HEAP_SIZE): made in device
  // memory at the first launch of a kernel that calls malloc, fixed from then
  // on (CUDA_ERROR_INVALID_VALUE), gone with the context's last release (its
  // memory is not given back). Under Driver::mu.
  uint64_t heap_limit = 8ull << 20;
  std::shared_ptr<ptx::DeviceHeap> heap;
  void dropHeap() {
    heap.reset();
    heap_limit = 8ull << 20;
  }
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
  bool object_pool_per_device = false;  // RGPU_FAKE_CUDA_OBJECT_POOLS=device
  bool refuse_ptx_text = false;         // RGPU_FAKE_CUDA_REFUSE_PTX_TEXT

  Driver() {
    if (const char* n = std::getenv("RGPU_FAKE_CUDA_DEVICES")) device_count = std::atoi(n);
    if (const char* m = std::getenv("RGPU_FAKE_CUDA_MEMORY")) memory = std::strtoull(m, nullptr, 10);
    if (const char* l = std::getenv("RGPU_FAKE_CUDA_LOG")) log_file.open(l, std::ios::app);
    if (const char* j = std::getenv("RGPU_FAKE_CUDA_JITTER_US")) jitter_us = static_cast<unsigned>(std::atoi(j));
    if (const char* p = std::getenv("RGPU_FAKE_CUDA_OBJECT_POOLS")) object_pool_per_device = std::string(p) == "device";
    refuse_ptx_text = std::getenv("RGPU_FAKE_CUDA_REFUSE_PTX_TEXT") != nullptr;
    contexts.resize(std::max(device_count, 0));
    for (int i = 0; i < device_count; ++i) contexts[i].device = i;
    used.assign(std::max(device_count, 0), 0);
  }
};

// Where the fake GPUs' memory goes (first choice), apart from the sim's window.
inline constexpr uint64_t kFakeGpuWindow = 0x3000'0000'0000ull;

inline Driver& drv() {
  static Driver* d = new Driver();  // never destroyed: the executors may outlive static destructors
  return *d;
}

inline thread_local FakeContext* t_ctx = nullptr;

inline void record(const std::string& line) {
  Driver& d = drv();
  d.log += line + "\n";
  if (d.log_file.is_open()) {
    d.log_file << line << "\n";
    d.log_file.flush();
  }
}

// Common entry checks, with the driver lock held: injected failures, then
// initialisation, then a sticky fault.
inline CUresult enter(const char* name, bool needs_context = true) {
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

inline bool depsMet(const std::vector<Dep>& deps) {
  for (auto& [s, ticket] : deps)
    if (s->completed < ticket) return false;
  return true;
}

// One stream's executor: its operations in order, each once its dependencies are met.
inline void executorLoop(FakeStream* s) {
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
inline FakeStream* newStream(int device, bool legacy, bool non_blocking) {
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
inline std::vector<Dep> implicitDeps(FakeStream* s) {
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
inline uint64_t enqueue(FakeStream* s, std::function<CUresult()> fn, std::vector<Dep> extra = {}) {
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
inline void synchronizeAll(std::unique_lock<std::mutex>& lock) {
  Driver& d = drv();
  std::vector<Dep> all;
  for (FakeStream* s : d.all_streams) all.emplace_back(s, s->enqueued);
  d.cv.wait(lock, [&] { return depsMet(all); });
}

// The stream a handle names (the legacy stream of the current context for
// 0/CU_STREAM_LEGACY), or null for an unknown handle. Lock held.
inline FakeStream* streamOf(CUstream s) {
  Driver& d = drv();
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
    return t_ctx && t_ctx->device < static_cast<int>(d.legacy.size()) ? d.legacy[t_ctx->device] : nullptr;
  auto* st = reinterpret_cast<FakeStream*>(s);
  return d.streams.count(st) ? st : nullptr;
}

inline bool knownStream(CUstream s) { return streamOf(s) != nullptr; }

// An address range every byte of which is in one allocation.
inline bool deviceRange(uint64_t p, uint64_t n) {
  Driver& d = drv();
  auto it = d.allocations.upper_bound(p);
  if (it == d.allocations.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second.second && p + n >= p;
}

// ---- device memory (fake_memory.cc) ----
// Its entry points, by name.
const std::map<std::string, void*>& memoryEntryPoints();

// ---- arrays, texture and surface objects (fake_arrays.cc); lock held ----
// The objects as the interpreter samples them, as a kernel queued now on
// `device` sees them.
std::shared_ptr<const ptx::Textures> texturesLocked(int device);
// Adds the arrays' memory to a launch's ranges (kept sorted).
void addArrayRanges(ptx::MemoryRanges& memory);
// Forgets every texture and surface object (a new process's start afresh).
void dropObjectsLocked();
// The array, texture and surface entry points, by name.
const std::map<std::string, void*>& arrayEntryPoints();

}  // namespace rgpu::fake
