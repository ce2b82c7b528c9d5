// The interpreter's launch side: the worker thread pool, Interpreter::run
// (how the blocks of a launch are scheduled: in parallel, a cooperative grid
// together, each cluster's blocks together, within the session's memory
// budget), the cluster a launch gets, and the small helpers the backends
// share. How a block's warps execute is ptx_interp.cc.
#include "server/sim/ptx/ptx_interp.h"
#include "common/sanitizers.h"
#include "common/spin.h"
#include "server/sim/ptx/ptx_reconverge.h"
#include <emmintrin.h>
#include <algorithm>
#include <atomic>
#include <bit>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include "common/half.h"
#include "server/sim/ptx/ptx_block.h"
#include "server/sim/ptx/ptx_parser.h"

namespace rgpu::server::ptx {
namespace {
// A pool thread keeps the memory of the last block it ran (registers,
// .local, .shared) for the next, up to this much.
constexpr uint64_t kKeptBlockBytes = 8ull << 20;
// How long an idle pool thread looks for the next job before it sleeps.
constexpr std::chrono::microseconds kPoolSpin{2000};
}  // namespace

// ---- thread pool ------------------------------------------------------------------

ThreadPool::ThreadPool(unsigned threads) {
  for (unsigned i = 1; i < threads; ++i) {
    workers_.emplace_back([this, i] {
      std::unique_lock lock(mu_);
      for (;;) {
        if (!stop_ && jobs_.empty()) {
          // A program's launches come back to back, and a thread asleep on
          // an idle core can take a millisecond to wake (a virtual machine's
          // halted vCPU): look for the next job for a while first, yielding
          // (common/spin.h: not at all while the cores are busy).
          const uint64_t seen = posted_.load(std::memory_order_relaxed);
          lock.unlock();
          common::spinFor(kPoolSpin, [&] { return posted_.load(std::memory_order_relaxed) != seen; });
          lock.lock();
        }
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (stop_) return;
        Job* job = jobs_.front();
        // The job lives on its caller's stack: the caller may not return while
        // a worker still holds it (checked under mu_).
        ++job->active;
        lock.unlock();
        work(*job, i);
        lock.lock();
        if (--job->active == 0) done_cv_.notify_all();
      }
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work(Job& job, unsigned slot) {
  const uint64_t share = 4ull * size();
  for (;;) {
    // Guided: a claim is a quarter of each thread's fair share of what is
    // left, at most `grain` — a launch ends with single blocks, so the
    // threads finish within a block of each other, not within a chunk.
    uint64_t i = job.next.load(std::memory_order_relaxed), g = 1;
    do {
      if (i >= job.n) break;
      g = std::clamp<uint64_t>((job.n - i) / share, 1, job.grain);
    } while (!job.next.compare_exchange_weak(i, i + g, std::memory_order_relaxed));
    if (i >= job.n) {
      std::lock_guard lock(mu_);
      auto it = std::find(jobs_.begin(), jobs_.end(), &job);
      if (it != jobs_.end()) jobs_.erase(it);  // exhausted: no new takers
      return;
    }
    const uint64_t end = std::min(job.n, i + g);
    uint64_t finished = 0;
    for (uint64_t k = i; k < end; ++k) {
      (*job.fn)(k, slot);
      ++finished;
      if (job.stop && job.stop->load(std::memory_order_relaxed)) {
        // The rest of this chunk, and what nobody has claimed, count as done.
        finished += end - k - 1;
        uint64_t from = job.next.exchange(job.n);
        if (from < job.n) finished += job.n - from;
        break;
      }
    }
    if (job.done.fetch_add(finished) + finished == job.n) {
      std::lock_guard lock(mu_);
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::parallelFor(uint64_t n, const std::function<void(uint64_t, unsigned)>& fn,
                             const std::atomic<bool>* stop) {
  if (n == 0) return;
  Job job;
  job.fn = &fn;
  job.stop = stop;
  job.n = n;
  // Chunks small enough that the threads still share the work evenly.
  job.grain = size() > 1 ? std::clamp<uint64_t>(n / (16ull * size()), 1, 64) : 1;
  if (n > 1 && !workers_.empty()) {
    std::lock_guard lock(mu_);
    jobs_.push_back(&job);
    posted_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_all();
  }
  work(job, 0);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return job.done.load() == job.n && job.active == 0; });
  auto it = std::find(jobs_.begin(), jobs_.end(), &job);
  if (it != jobs_.end()) jobs_.erase(it);
}

Interpreter::Interpreter(unsigned threads)
    : pool_(threads ? threads : std::max(1u, std::thread::hardware_concurrency())) {}

LaunchResult Interpreter::run(const Launch& launch) {
  using namespace detail;
  // The kernel's compiled units, when the JIT's policy gives some (only with
  // the hot paths on: off, everything runs through the general code).
  const std::shared_ptr<const jit::Code> compiled = fastPathsOn() ? jit::codeFor(*launch.fn) : nullptr;
  Launch L = launch;
  L.jit = compiled.get();
  LaunchResult result;
  const Function& fn = *L.fn;
  uint64_t threads = uint64_t{L.block.x} * L.block.y * L.block.z;
  uint32_t nwarps = static_cast<uint32_t>((threads + 31) / 32);
  uint64_t nblocks = uint64_t{L.grid.x} * L.grid.y * L.grid.z;
  uint64_t shared_bytes = uint64_t{fn.static_shared} + L.dynamic_shared;
  if (!L.cluster.x || !L.cluster.y || !L.cluster.z || L.grid.x % L.cluster.x || L.grid.y % L.cluster.y ||
      L.grid.z % L.cluster.z) {
    result.status = Status(kErrLaunchFailure, "the grid is not a whole number of clusters");
    return result;
  }
  if (shared_bytes > kMaxSharedBytes) {
    result.status = Status(kErrLaunchFailure, "shared memory of the launch exceeds the block limit");
    return result;
  }
  // What one block holds while it runs: shared, .local and register files.
  uint64_t block_bytes = shared_bytes + uint64_t{fn.local_bytes} * nwarps * 32 +
                         uint64_t{nwarps} * fn.num_regs * 32 * sizeof(uint64_t);
  // Blocks that must be resident at once and can never fit the session's budget.
  auto overBudget = [&](uint64_t bytes, const std::string& what) {
    if (!L.budget || bytes <= L.budget->limit()) return false;
    result.status = Status(kErrLaunchOutOfResources, what + " needs " + std::to_string(bytes) +
                                                         " bytes of interpreter memory (registers, .local, .shared) at "
                                                         "once; the session may use " +
                                                         std::to_string(L.budget->limit()) +
                                                         " ([limits] max_interpreter_bytes)");
    return true;
  };
  if (overBudget(block_bytes, "one block of this launch")) return result;
  std::atomic<bool> abort{false};
  std::mutex mu;
  Fault first;
  std::atomic<uint64_t> insts{0};
  // Thread-instructions of blocks that ended with nothing else to collect, per pool thread.
  struct alignas(64) Slot {
    uint64_t insts = 0;
  };
  std::vector<Slot> per_slot(pool_.size());
  // Makes `b` (new, or one that ran an earlier block) block bi.
  auto makeBlock = [&](uint64_t bi, Block& b) {
    b.reset();
    b.cx = static_cast<uint32_t>(bi % L.grid.x);
    b.cy = static_cast<uint32_t>((bi / L.grid.x) % L.grid.y);
    b.cz = static_cast<uint32_t>(bi / (uint64_t{L.grid.x} * L.grid.y));
    b.shared.assign(shared_bytes, 0);
    b.local.assign(static_cast<size_t>(fn.local_bytes) * nwarps * 32, 0);
    b.warps.resize(nwarps);
    for (uint32_t k = 0; k < nwarps; ++k) {
      Warp& w = b.warps[k];
      w.reset();
      w.id = k;
      uint64_t first_tid = uint64_t{k} * 32;
      uint64_t n = std::min<uint64_t>(32, threads - first_tid);
      w.valid = n == 32 ? 0xffffffffu : (1u << n) - 1;
      w.active = w.valid;
      const uint32_t t0 = k * 32;
      uint32_t x = t0 % L.block.x, y = (t0 / L.block.x) % L.block.y, z = t0 / (L.block.x * L.block.y);
      if (x + 32 <= L.block.x) {  // the warp's lanes on one row: the commonest case, in a loop that vectorises
        for (uint32_t lane = 0; lane < 32; ++lane) {
          w.tid[0][lane] = x + lane;
          w.tid[1][lane] = y;
          w.tid[2][lane] = z;
        }
      } else for (uint32_t lane = 0; lane < 32; ++lane) {  // thread t0 + lane, counted on from t0
        w.tid[0][lane] = x;
        w.tid[1][lane] = y;
        w.tid[2][lane] = z;
        if (++x == L.block.x) {
          x = 0;
          if (++y == L.block.y) y = 0, ++z;
        }
      }
      // A reused file keeps what the last block left in the registers every
      // path writes before reading (ptx_liveness.h); the others read as 0.
      const size_t slots = static_cast<size_t>(fn.num_regs) * 32;
      if (w.regs.size() != slots) {
        w.regs.assign(slots, 0);
      } else {
        for (uint32_t r : fn.live_in) std::fill_n(w.regs.begin() + static_cast<ptrdiff_t>(r) * 32, 32, 0);
      }
      for (uint32_t& top : w.sp) top = fn.stack_base;
    }
  };
  // A finished block's output, instructions and fault (the first one wins); mu held.
  auto collect = [&](const Block& b, const Fault& f) {
    insts.fetch_add(b.insts, std::memory_order_relaxed);
    result.output += b.output;
    result.printf_dropped += b.printf_dropped;
    boundOutput(result.output, L.printf_fifo, result.printf_dropped);
    if (f.code && !first.code) first = f;
  };
  // Clusters: block bi's cluster (index among the grid's clusters), its rank and place in it.
  const Dim3 cd = L.cluster;
  const uint64_t cluster_size = uint64_t{cd.x} * cd.y * cd.z;
  const uint64_t nclusters = nblocks / cluster_size;
  auto clusterOf = [&](Block& b) {
    b.ccx = b.cx % cd.x, b.ccy = b.cy % cd.y, b.ccz = b.cz % cd.z;
    b.rank = b.ccx + cd.x * (b.ccy + cd.y * b.ccz);
    uint64_t kx = b.cx / cd.x, ky = b.cy / cd.y, kz = b.cz / cd.z;
    return kx + uint64_t{L.grid.x / cd.x} * (ky + uint64_t{L.grid.y / cd.y} * kz);
  };
  // The blocks of a cluster run their slices in turn until all end; when every
  // live one waits at the cluster barrier and none can go on, they deadlock.
  auto runTogether = [&](std::vector<std::unique_ptr<BlockRunner>>& runners, std::vector<Cluster>& clusters) {
    std::vector<bool> running(runners.size(), true);
    for (uint64_t live = runners.size(); live;) {
      bool any = false;
      uint64_t phases = 0;
      for (const Cluster& c : clusters) phases += c.phase;
      for (size_t i = 0; i < runners.size(); ++i) {
        if (!running[i]) continue;
        if (!runners[i]->slice()) running[i] = false, --live, any = true;
        else any |= !runners[i]->stalled();
      }
      uint64_t after = 0;
      for (Cluster& c : clusters) {
        c.settle();
        after += c.phase;
      }
      if (!any && after == phases && live) {
        for (size_t i = 0; i < runners.size(); ++i)
          if (running[i]) runners[i]->fail(kErrLaunchFailure, "cluster barrier deadlock: the blocks of a cluster wait at barrier.cluster for threads that never arrive");
        break;
      }
    }
  };
  auto finish = [&] {
    result.thread_instructions = insts.load();
    for (const Slot& s : per_slot) result.thread_instructions += s.insts;
    if (!compiled) jit::noteInterpreted(fn, result.thread_instructions);
    boundOutput(result.output, L.printf_fifo, result.printf_dropped, true);
    if (first.code) result.status = Status(first.code, first.message);
    return result;
  };
  if (L.cooperative) {
    // Every block resident at once: all take their memory first, then their
    // rounds interleave on this thread until the last block ends (a block
    // spinning at a grid barrier yields after its time slice).
    uint64_t total = block_bytes * nblocks;
    if (overBudget(total, "the cooperative grid")) return result;
    if (L.budget && !L.budget->take(total, [&] {
          return (L.cancel && L.cancel->load(std::memory_order_relaxed)) || std::chrono::steady_clock::now() > L.deadline;
        })) {
      result.status = Status(kErrLaunchFailure, "stopped while waiting for interpreter memory");
      return result;
    }
    std::vector<Block> blocks(nblocks);
    std::vector<Cluster> clusters(nclusters);
    for (Cluster& c : clusters) c.blocks.resize(cluster_size);
    std::vector<std::unique_ptr<BlockRunner>> runners;
    for (uint64_t bi = 0; bi < nblocks; ++bi) {
      makeBlock(bi, blocks[bi]);
      Cluster& c = clusters[clusterOf(blocks[bi])];
      c.blocks[blocks[bi].rank] = &blocks[bi];
      blocks[bi].cluster = &c;
      runners.push_back(std::make_unique<BlockRunner>(L, blocks[bi], abort));
    }
    runTogether(runners, clusters);
    for (uint64_t bi = 0; bi < nblocks; ++bi) collect(blocks[bi], runners[bi]->faulted());
    if (L.budget) L.budget->give(total);
    return finish();
  }
  if (cluster_size > 1) {
    // Clusters in parallel, the blocks of each together on one thread.
    const uint64_t cluster_bytes = block_bytes * cluster_size;
    if (overBudget(cluster_bytes, "one cluster of this launch")) return result;
    pool_.parallelFor(nclusters, [&](uint64_t ci, unsigned) {
      if (abort.load(std::memory_order_relaxed)) return;
      if (L.budget && !L.budget->take(cluster_bytes, [&] {
            return abort.load(std::memory_order_relaxed) || (L.cancel && L.cancel->load(std::memory_order_relaxed)) ||
                   std::chrono::steady_clock::now() > L.deadline;
          })) {
        std::lock_guard lock(mu);
        if (!first.code && !abort.load()) first = Fault{kErrLaunchFailure, "stopped while waiting for interpreter memory"};
        abort.store(true);
        return;
      }
      // The cluster's blocks in rank order.
      const uint64_t ncx = L.grid.x / cd.x, ncy = L.grid.y / cd.y;
      const uint64_t kx = ci % ncx, ky = (ci / ncx) % ncy, kz = ci / (ncx * ncy);
      std::vector<Block> blocks(cluster_size);
      std::vector<Cluster> cluster(1);
      cluster[0].blocks.resize(cluster_size);
      std::vector<std::unique_ptr<BlockRunner>> runners;
      for (uint64_t r = 0; r < cluster_size; ++r) {
        uint64_t bx = kx * cd.x + r % cd.x, by = ky * cd.y + (r / cd.x) % cd.y, bz = kz * cd.z + r / (uint64_t{cd.x} * cd.y);
        makeBlock(bx + uint64_t{L.grid.x} * (by + uint64_t{L.grid.y} * bz), blocks[r]);
        (void)clusterOf(blocks[r]);
        cluster[0].blocks[blocks[r].rank] = &blocks[r];
        blocks[r].cluster = &cluster[0];
        runners.push_back(std::make_unique<BlockRunner>(L, blocks[r], abort));
      }
      runTogether(runners, cluster);
      {
        std::lock_guard lock(mu);
        for (uint64_t r = 0; r < cluster_size; ++r) collect(blocks[r], runners[r]->faulted());
      }
      if (L.budget) L.budget->give(cluster_bytes);
    }, &abort);
    return finish();
  }
  pool_.parallelFor(nblocks, [&](uint64_t bi, unsigned slot) {
    if (abort.load(std::memory_order_relaxed)) return;
    if (L.budget) {
      bool got = L.budget->take(block_bytes, [&] {
        return abort.load(std::memory_order_relaxed) || (L.cancel && L.cancel->load(std::memory_order_relaxed)) ||
               std::chrono::steady_clock::now() > L.deadline;
      });
      if (!got) {
        std::lock_guard lock(mu);
        if (!first.code && !abort.load())
          first = std::chrono::steady_clock::now() > L.deadline
                      ? Fault{kErrLaunchTimeout, "ran longer than [limits] kernel_timeout_ms = " +
                                                     std::to_string(L.timeout_ms) + " ms (waiting for interpreter memory)"}
                      : Fault{kErrLaunchFailure, "stopped: the session ended while the kernel ran"};
        abort.store(true);
        return;
      }
    }
    struct Give {
      MemoryBudget* budget;
      uint64_t bytes;
      ~Give() {
        if (budget) budget->give(bytes);
      }
    } give{L.budget, block_bytes};
    // Each pool thread reuses one block's memory from block to block; one
    // that held more than kKeptBlockBytes gives it back after.
    thread_local std::unique_ptr<Block> kept;
    if (!kept) kept = std::make_unique<Block>();
    Block& b = *kept;
    makeBlock(bi, b);
    struct Trim {
      std::unique_ptr<Block>& kept;
      uint64_t bytes;
      ~Trim() {
        if (bytes > kKeptBlockBytes) kept.reset();
      }
    } trim{kept, block_bytes};
    Cluster solo;  // a cluster of its own (barrier.cluster, %cluster_* as on a GPU without clusters)
    solo.blocks = {&b};
    b.cluster = &solo;
    BlockRunner runner(L, b, abort);
    Fault f = runner.run();
    if (f.code || !b.output.empty() || b.printf_dropped) {
      std::lock_guard lock(mu);
      collect(b, f);
    } else {
      per_slot[slot].insts += b.insts;  // (all collect does with nothing else to gather: no lock, no shared line)
    }
  }, &abort);
  return finish();
}

bool MemoryBudget::tryTake(uint64_t bytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  while (used + bytes <= limit_ && used + bytes >= used) {
    if (used_.compare_exchange_weak(used, used + bytes, std::memory_order_acquire, std::memory_order_relaxed)) return true;
  }
  return false;
}

bool MemoryBudget::take(uint64_t bytes, const std::function<bool()>& stop) {
  if (tryTake(bytes)) return true;
  waiting_.fetch_add(1);
  std::unique_lock lock(mu_);
  bool got;
  while (!(got = tryTake(bytes))) {
    if (stop()) break;
    cv_.wait_for(lock, std::chrono::milliseconds(5));
  }
  waiting_.fetch_sub(1);
  return got;
}

void MemoryBudget::give(uint64_t bytes) {
  used_.fetch_sub(bytes, std::memory_order_release);
  if (waiting_.load() != 0) {
    std::lock_guard lock(mu_);  // (a waiter between its check and its wait sees the bytes in 5 ms anyway)
    cv_.notify_all();
  }
}

uint64_t MemoryBudget::used() { return used_.load(); }

bool usesPrintf(const Module& m) {
  for (auto& [name, fn] : m.functions)
    for (auto& in : fn.code)
      if (in.op == Op::kCallPrintf) return true;
  return false;
}

void boundOutput(std::string& out, uint64_t limit, uint64_t& dropped, bool exact) {
  if (out.size() <= (exact ? limit : 2 * limit)) return;
  uint64_t cut = out.size() - limit;
  out.erase(0, cut);
  dropped += cut;
}

}  // namespace rgpu::server::ptx
