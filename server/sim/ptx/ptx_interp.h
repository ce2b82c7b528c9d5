// Executes decoded PTX kernels on CPU threads.
//
// Execution model: a block's warps run on one host thread, cooperatively —
// each warp runs until it reaches a barrier, exits, or uses up its time slice;
// a barrier releases when every live warp of the block has arrived. A warp is
// 32 lanes executing in lockstep under an active mask; after a divergent
// branch the lanes at the lowest program counter run first, so paths
// reconverge where they meet again (structured code as nvcc emits it). Blocks
// are spread over a pool of worker threads. Every global access is checked
// against the session's allocations; a bad one ends the launch with
// cudaErrorIllegalAddress, never touches memory outside them.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/sim/ptx/device_heap.h"
#include "server/sim/ptx/ptx_ir.h"

namespace rgpu::server::ptx {

// CUDA error codes a launch can end with.
inline constexpr int kErrIllegalAddress = 700;
inline constexpr int kErrLaunchTimeout = 702;
inline constexpr int kErrLaunchOutOfResources = 701;
inline constexpr int kErrAssert = 710;
inline constexpr int kErrMisaligned = 716;
inline constexpr int kErrLaunchFailure = 719;

// Generic-address windows for shared and local memory (global addresses are
// the host addresses of allocations, always below these).
inline constexpr uint64_t kSharedWindow = 0xfe00'0000'0000'0000ull;
inline constexpr uint64_t kLocalWindow = 0xfd00'0000'0000'0000ull;
inline constexpr uint64_t kParamWindow = 0xfc00'0000'0000'0000ull;
inline constexpr uint64_t kWindowMask = 0xff00'0000'0000'0000ull;

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct Textures;  // ptx_texture.h
namespace jit {
class Code;  // ptx_jit.h
}

// Readable/writable global memory: sorted, non-overlapping [base, end).
using MemoryRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// The range of `r` that holds all of [addr, addr + size), or null.
inline const std::pair<uint64_t, uint64_t>* findRange(const MemoryRanges& r, uint64_t addr, uint64_t size) {
  auto it = std::upper_bound(r.begin(), r.end(), std::make_pair(addr, UINT64_MAX));
  if (it == r.begin()) return nullptr;  // (else the range before `it` starts at or below addr)
  --it;
  return addr + size >= addr && addr + size <= it->second ? &*it : nullptr;
}

// The interpreter memory (registers, .local and .shared of the blocks
// running at once) one session's launches may hold together, over all its
// streams. A block takes its share before it allocates and waits while the
// budget is spent; a launch one of whose blocks alone needs more fails with
// kErrLaunchOutOfResources. Thread-safe.
class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit) : limit_(limit) {}
  uint64_t limit() const { return limit_; }
  // Waits until `bytes` fit; false if `stop` says to give up first (polled
  // every few milliseconds).
  bool take(uint64_t bytes, const std::function<bool()>& stop);
  void give(uint64_t bytes);
  uint64_t used();

 private:
  // Takes `bytes` if they fit now (blocks take and give all the time: no lock).
  bool tryTake(uint64_t bytes);
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
  std::atomic<uint32_t> waiting_{0};  // threads in take()'s slow path
  std::mutex mu_;                     // for cv_ only
  std::condition_variable cv_;
};

// CUDA's default cudaLimitPrintfFifoSize.
inline constexpr uint64_t kDefaultPrintfFifo = 1ull << 20;
inline constexpr uint64_t kDefaultMallocHeap = 8ull << 20;  // cudaLimitMallocHeapSize's default
// Widest field (width or precision) a device printf conversion is given:
// "%2000000000d" must not make the worker format two gigabytes.
inline constexpr int64_t kMaxPrintfField = 4096;

struct Launch {
  const Function* fn = nullptr;
  Dim3 grid, block;
  uint32_t dynamic_shared = 0;
  const uint8_t* params = nullptr;  // the packed parameter block, fn->param_bytes long
  const MemoryRanges* memory = nullptr;
  int sm_count = 1;
  // The watchdog: past `deadline` the launch ends with kErrLaunchTimeout;
  // when *cancel turns true (the session is ending) it ends at once. Both are
  // checked between time slices of 4096 instructions per warp.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  const std::atomic<bool>* cancel = nullptr;
  uint32_t timeout_ms = 0;  // what `deadline` came from, for the message
  // The device printf FIFO (cudaLimitPrintfFifoSize): a launch keeps at
  // most this many bytes of output, the newest, as CUDA's circular buffer
  // does. Worker memory per launch stays bounded by it.
  uint64_t printf_fifo = kDefaultPrintfFifo;
  MemoryBudget* budget = nullptr;  // the session's; null: unbounded
  // The device's malloc heap (kernels whose fn->uses_malloc); null: malloc returns NULL.
  DeviceHeap* heap = nullptr;
  // A cooperative launch (cudaLaunchCooperativeKernel): every block is
  // resident at once (their time slices interleave on one thread), and
  // `grid_workspace` (zeroed global memory within `memory`, 16 bytes) is what
  // grid-wide synchronisation counts arrivals in.
  bool cooperative = false;
  uint64_t grid_workspace = 0;
  // Thread-block clusters (sm_90): the blocks of a cluster are resident
  // together (their time slices interleave on one thread), synchronise with
  // barrier.cluster and read and write each other's shared memory (mapa,
  // .shared::cluster). {1,1,1} without `explicit_cluster`: no clusters, each
  // block its own. The grid is a whole number of clusters (checked by the caller).
  Dim3 cluster{1, 1, 1};
  bool explicit_cluster = false;
  // The session's texture and surface objects (ptx_texture.h); null: none.
  const Textures* textures = nullptr;
  // The kernel's compiled units (ptx_jit.h): set by Interpreter::run from
  // the JIT's policy, whatever the caller put here.
  const jit::Code* jit = nullptr;
};

struct LaunchResult {
  Status status;            // ok, or the fault that ended the launch
  std::string output;       // device printf output (and assertion messages)
  uint64_t thread_instructions = 0;
  uint64_t printf_dropped = 0;  // older output bytes the FIFO bound dropped
};

// Whether any function of `m` calls vprintf (device printf).
bool usesPrintf(const Module& m);

// Keeps the newest `limit` bytes of `out`, counting the dropped ones in
// `dropped`; trims only past twice the limit unless `exact`, so appending
// stays amortised O(1).
void boundOutput(std::string& out, uint64_t limit, uint64_t& dropped, bool exact = false);

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  // Runs fn(i, slot) for i in [0, n) on the pool and the calling thread;
  // returns when all are done. `slot` (below size()) is the thread's: no two
  // calls at once have the same. Threads take indices in chunks (a block of
  // a short kernel takes a microsecond or two: claiming each one alone made
  // the threads contend for the counters) that shrink to one index as the
  // rest runs out (a chunk of 8 matmul blocks, 0.7 ms, left one thread
  // working alone at the end of every launch). Once *stop turns true the indices
  // not yet started are skipped (a grid of 2^31 blocks must not take seconds
  // to abandon).
  void parallelFor(uint64_t n, const std::function<void(uint64_t, unsigned)>& fn,
                   const std::atomic<bool>* stop = nullptr);
  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

 private:
  struct Job {
    const std::function<void(uint64_t, unsigned)>* fn;
    const std::atomic<bool>* stop;
    uint64_t n;
    uint64_t grain = 1;  // indices claimed at a time
    std::atomic<uint64_t> next{0};
    std::atomic<uint64_t> done{0};
    int active = 0;  // workers inside work(); guarded by mu_
  };
  void work(Job& job, unsigned slot);
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<Job*> jobs_;
  std::atomic<uint64_t> posted_{0};  // jobs ever posted: what an idle thread spins on
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// The interpreter's hot paths (ptx_fast.cc) on or off, for every launch of
// the process: off runs every instruction through the general code, which
// gives the same bits (tests compare the two).
void setFastPaths(bool on);

class Interpreter {
 public:
  explicit Interpreter(unsigned threads = 0);  // 0: one per hardware thread
  LaunchResult run(const Launch& launch);

 private:
  ThreadPool pool_;
};

}  // namespace rgpu::server::ptx
