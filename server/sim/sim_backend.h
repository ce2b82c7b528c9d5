// SimBackend: configurable fake devices in host memory.
//
// Device memory is host memory (a device pointer is the host address of the
// allocation; the session has validated every range before we see it), in a
// DeviceArena of its own, away from the worker's heap (server/sim/device_arena.h). Each
// stream is an executor thread running its operations in order; cross-stream
// ordering (the legacy default stream, cudaStreamWaitEvent) is expressed as
// dependencies on (stream, ticket) pairs checked before an operation runs.
// One mutex guards all stream, event and waiter state.
//
// Memory outlives every operation that may touch it. Each queued operation
// carries a sequence number; freeing an allocation (cudaFree, a module's
// variables on unload, cudaDeviceReset) retires it at once — kernels that
// start later and were queued later no longer see it — but returns its bytes
// to the arena only when no operation queued before the free is still
// pending, on any device's stream. A copy behind a blocked stream, or a
// kernel of another device that took its snapshot of the memory ranges, can
// therefore never reach memory reused by a later allocation.
//
// Kernels run on the PTX interpreter (server/sim/ptx/), from the PTX the fatbin
// carries. A launch that faults (illegal address, assert, trap) reports its
// error at the next synchronising call; such errors are sticky, as on a GPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/fatbin.h"
#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_ir.h"
#include "server/sim/ptx/ptx_texture.h"
#include "common/launch_cluster.h"
#include "server/backend/backend.h"
#include "server/sim/device_arena.h"
#include "server/pool/launch_gate.h"
#include "server/config/server_config.h"

namespace rgpu::server {

// Decoded PTX instructions all of a session's loaded modules may hold
// together (about 330 bytes each): past it a module load fails.
inline constexpr uint64_t kMaxSimInstsPerSession = 4u << 20;

struct SimOptions {
  std::string launch_log;  // when set, every launch is appended here (tests)
  // The host's (physical) index of each configured device, when the session
  // got a subset of them; empty: 0, 1, 2, ... (identity, UUIDs follow it).
  std::vector<int> physical;
  // [limits] kernel_timeout_ms: a kernel running longer is stopped and fails
  // with cudaErrorLaunchTimeout (sticky); 0: no limit.
  uint32_t kernel_timeout_ms = 0;
  // Decoded instructions the session's loaded modules may hold together.
  uint64_t max_module_instructions = kMaxSimInstsPerSession;
  // [limits] max_interpreter_bytes: registers, .local and .shared of the
  // blocks the session's launches run at once (ptx::MemoryBudget).
  uint64_t max_interpreter_bytes = 1ull << 30;
  // The session is part `address_window` of a program spread over several
  // servers: its memory goes in that part's window (spanWindow, server/backend/address_space.h).
  uint32_t address_window = 0;
  // [sim] hot_paths: the interpreter's whole-warp hot paths (ptx_fast.cc);
  // off, every instruction goes through its general code (the reference the
  // hot paths are checked against). For the whole worker process.
  bool hot_paths = true;
  // [sim] jit, jit_threshold, jit_library (server/sim/ptx/ptx_jit.h): for the whole worker process.
  std::string jit = "auto";
  uint64_t jit_threshold = 1ull << 20;
  std::string jit_library;
};

// Largest module-scope variable the sim allocates.
inline constexpr uint64_t kMaxSimGlobalBytes = 256ull << 20;

class SimBackend final : public Backend {
 public:
  SimBackend(const std::vector<SimDeviceConfig>& devices, SimOptions opts);
  ~SimBackend() override;
  void stopThreads() override;

  // rgpu::server::Backend
  std::string name() const override { return "sim"; }
  uint64_t gpuTimeNs() const override { return gpu_ns_.load(std::memory_order_relaxed); }
  void setLaunchGate(LaunchGate* gate) override { gate_ = gate; }
  int driverVersion() const override { return 13000; }
  const std::vector<DeviceDescription>& devices() const override { return devices_; }
  // All of a session's sim devices live in its worker's memory: every kernel reaches every device.
  uint64_t peerAccess(int device) const override {
    uint64_t all = devices_.size() >= 64 ? ~0ull : (1ull << devices_.size()) - 1;
    return all & ~(1ull << device);
  }
  void setAsyncErrorSink(std::function<void(Status)> sink) override;
  void setOutputSink(std::function<void(std::string)> sink) override;
  Status setPrintfFifo(int device, uint64_t bytes) override;
  Status setMallocHeap(int device, uint64_t bytes) override;
  Result<std::vector<MallocHeap>> mallocHeaps() const override;
  Status restoreMallocHeap(const MallocHeap& heap) override;
  Result<DevPtr> allocate(int device, uint64_t size) override;
  Result<std::pair<DevPtr, uint64_t>> allocatePitch(int device, uint64_t width, uint64_t height) override;
  Status release(DevPtr ptr) override;
  Status memInfo(int device, uint64_t& free, uint64_t& total) override;
  Status createStream(StreamKey stream, uint32_t flags, int priority) override;
  Status destroyStream(StreamKey stream) override;
  Status createEvent(uint32_t id, int device, uint32_t flags) override;
  Status destroyEvent(uint32_t id) override;
  uint8_t* directWriteTarget(StreamKey s, DevPtr dst) override;
  bool writesDirectly() const override { return true; }
  const uint8_t* hostView(DevPtr at, uint64_t size) const override;
  Status copyToDevice(StreamKey s, DevPtr dst, Staging data, uint64_t size) override;
  Status copyFromDevice(StreamKey s, DevPtr src, uint64_t size, ReadDone done) override;
  Status copyOnDevice(StreamKey s, DevPtr dst, DevPtr src, uint64_t size) override;
  Status copyPeer(StreamKey s, DevPtr dst, int dst_device, DevPtr src, int src_device, uint64_t size,
                  bool serialize) override;
  Status copy2DToDevice(StreamKey s, DevPtr dst, uint64_t dpitch, Staging data, uint64_t width,
                        uint64_t height) override;
  Status copy2DFromDevice(StreamKey s, DevPtr src, uint64_t spitch, uint64_t width, uint64_t height,
                          ReadDone done) override;
  Status copy2DOnDevice(StreamKey s, DevPtr dst, uint64_t dpitch, DevPtr src, uint64_t spitch, uint64_t width,
                        uint64_t height) override;
  Status fill(StreamKey s, DevPtr dst, uint8_t value, uint64_t size) override;
  Status fill2D(StreamKey s, DevPtr dst, uint64_t pitch, uint8_t value, uint64_t width, uint64_t height) override;
  Status fillPattern2D(StreamKey s, DevPtr dst, uint64_t pitch, uint32_t pattern, unsigned element_size, uint64_t width,
                       uint64_t height) override;
  Status launch(StreamKey s, uint32_t function, const LaunchConfig& cfg, std::string params) override;
  Status recordEvent(uint32_t event, StreamKey s) override;
  Status waitEvent(StreamKey s, uint32_t event) override;
  Status waitStream(StreamKey waiter, StreamKey waited) override;
  Status hostCall(StreamKey s, std::function<void()> fn) override;
  Status whenStreamDone(StreamKey s, Done done) override;
  Status whenEventDone(uint32_t event, Done done) override;
  Status whenDeviceDone(int device, Done done) override;
  Result<bool> streamIdle(StreamKey s) override;
  Result<bool> eventDone(uint32_t event) override;
  Result<float> elapsedMs(uint32_t start, uint32_t end) override;
  Status loadModule(uint32_t id, int device, const std::string& fatbin) override;
  std::string notCheckpointable() const override;
  Status allocateAt(int device, DevPtr at, uint64_t size) override;
  Result<std::vector<ModuleGlobal>> moduleGlobals(uint32_t module) const override;
  Result<EventState> eventState(uint32_t event) const override;
  Status restoreEvent(uint32_t event, int device, uint32_t flags, const EventState& state) override;
  Status loadModuleAt(uint32_t id, int device, const std::string& fatbin, const std::vector<ModuleGlobal>& at) override;
  Status unloadModule(uint32_t id) override;
  Result<uint32_t> registerFunction(uint32_t id, uint32_t module, const std::string& name) override;
  Result<FunctionAttributes> functionAttributes(uint32_t function) override;
  Status setFunctionAttribute(uint32_t function, int attr, int value) override;
  Result<int> occupancy(uint32_t function, int block_size, uint64_t dynamic_smem) override;
  Result<GlobalVar> globalAddress(uint32_t module, const std::string& name, uint64_t size_hint) override;
  Status blas(StreamKey s, const BlasArgs& call, ReadDone done) override;
  Status ltMatmul(StreamKey s, const LtArgs& call) override;
  Status randFill(StreamKey s, const common::curand::Fill& f, DevPtr out, uint64_t count) override;  // (sim_rand.cc)
  // cuFFT by FFTW (sim_fft.h), as the session's kernel: no work area, no plan kept per client plan.
  Result<uint64_t> fftWorkSize(int device, uint64_t plan, const common::fft::Plan& p) override;
  Status fftExec(StreamKey s, uint64_t plan, const common::fft::Plan& p, const common::fft::Layout& l, int direction,
                 DevPtr in, DevPtr out, DevPtr work, uint64_t work_size) override;
  // cuSOLVER by LAPACK (sim_solver.h), as the session's kernel; no workspace asked for (sim_solver.cc).
  Result<int64_t> solverBufferSize(int device, const common::solver::Args& a) override;
  Status solver(StreamKey s, const common::solver::Args& a) override;
  // cuSPARSE on the CPU (sim_sparse.h), as the session's kernel; no external buffer.
  Result<uint64_t> sparseBufferSize(int device, const common::sparse::Args& a) override;
  Status sparse(StreamKey s, const common::sparse::Args& a) override;
  // cuDNN on the CPU (sim_dnn.h), as the session's kernel; no workspace.
  Result<uint64_t> dnnSize(int device, common::dnn::Query q, const common::dnn::Args& a) override;
  Status dnn(StreamKey s, const common::dnn::Args& a) override;
  Result<std::vector<LtAlgo>> ltHeuristic(int device, const LtArgs& call, uint32_t requested,
                                          uint64_t max_workspace) override;
  // Conditional graph nodes (sim_conditional.cc): a handle is the address of
  // a device word of the session's (kernels' cudaGraphSetConditional stores
  // to it); a body is the recorded operations, run in order inside the
  // conditional node's one operation.
  Result<uint64_t> conditionalHandle(int device) override;
  Status restoreConditionalHandle(int device, uint64_t handle) override;
  Status beginBody() override;
  Result<std::shared_ptr<Body>> endBody() override;
  Status conditional(StreamKey s, uint64_t handle, int type, std::vector<std::shared_ptr<Body>> bodies) override;
  // CUDA arrays, textures and surfaces (sim_arrays.cc): an array is one
  // allocation of the device's, its levels laid out as ptx_texture.h says;
  // texture and surface objects are the interpreter's descriptors of them.
  Result<uint64_t> createArray(const ArraySpec& spec) override;
  Status destroyArray(uint64_t array) override;
  Status copy3D(StreamKey s, const Copy3DSpec& copy, Staging in, ReadDone out) override;
  Result<uint64_t> createTexture(const TextureSpec& spec) override;
  Status destroyTexture(int device, uint64_t texture) override;
  Result<uint64_t> createSurface(int device, uint64_t array, uint32_t level) override;
  Result<std::pair<DevPtr, uint64_t>> arrayMemory(uint64_t array) const override;
  Status createArrayAt(uint64_t handle, const ArraySpec& spec, DevPtr base) override;
  Status createTextureAt(uint64_t handle, const TextureSpec& spec) override;
  Status createSurfaceAt(uint64_t handle, int device, uint64_t array, uint32_t level) override;
  Status destroySurface(int device, uint64_t surface) override;

 private:
  struct Stream;
  using Dep = std::pair<Stream*, uint64_t>;  // done when stream->completed >= ticket
  struct Op {
    std::function<void()> fn;
    std::vector<Dep> deps;
    uint64_t seq = 0;  // order of enqueueing, over all streams
  };
  struct Stream {
    int device = 0;
    bool legacy = false;
    bool non_blocking = false;
    bool stopping = false;
    bool finished = false;  // its thread has drained the queue and returned (destroyed streams)
    uint64_t enqueued = 0, completed = 0;
    uint64_t running_seq = 0;  // the op its thread runs now (0: none); queued ones follow in order
    // The running op's reply (a device-to-host copy, a BLAS result) is on
    // the wire: the client may ask about the stream before `completed` counts
    // it, so queries count it as done; ordering still waits for `completed`.
    // Set as the reply takes its place on the connection (OnWire), so a
    // query's answer never overtakes the data it vouches for.
    bool replied = false;
    std::deque<Op> queue;
    std::thread thread;
  };
  struct Event {
    int device = 0;
    uint32_t flags = 0;
    bool recorded = false;
    Stream* stream = nullptr;  // of the last record; null when none, or once that stream was reaped (done)
    uint64_t ticket = 0;
    std::chrono::steady_clock::time_point when;
    bool stamped = false;
  };
  struct Waiter {
    std::vector<Dep> deps;
    Done done;
  };
  struct Module {
    int device = 0;
    common::FatbinImage image;
    // shared: launches still queued when the module is unloaded keep its code.
    std::shared_ptr<const ptx::Module> program;
    uint64_t instructions = 0;  // decoded, for kMaxSimInstsPerSession
    int ptx_arch = 0;
    std::map<std::string, std::pair<DevPtr, uint64_t>> globals;
    std::map<DevPtr, DevPtr> global_bases;  // __managed__ variables: address -> their allocation
    // Each variable's allocation, as asked for (a checkpoint places it again: moduleGlobals).
    std::map<std::string, uint64_t> global_alloc;
    bool uses_printf = false;
  };
  struct Function {
    uint32_t module = 0;
    std::string name;
    uint32_t param_bytes = 0;
    int max_dynamic_shared = 48 * 1024;
    // cudaFuncSetAttribute: the required cluster (where the kernel has none of
    // its own), non-portable cluster sizes, the scheduling preference (a hint).
    Dim3 required_cluster{0, 0, 0};
    int non_portable_cluster = 0, cluster_policy = 0;
    std::shared_ptr<const ptx::Module> program;
    const ptx::Function* code = nullptr;  // inside `program`
    bool uses_printf = false;             // its module calls vprintf
  };
  struct Allocation {
    int device;
    uint64_t size;
    // 0: live. Else retired (freed by the session) when the next operation
    // would have been numbered `retired_at`: operations numbered below it may
    // still touch it, so its bytes stay until they have all run.
    uint64_t retired_at = 0;
  };

  // The kernel's own cluster (__cluster_dims__, else the cudaFuncAttributeRequiredCluster* it was given; 0s: none).
  static common::ClusterDims ownCluster(const Function& f);

  // All below with mu_ held.
  Result<Stream*> streamLocked(StreamKey key);
  std::vector<Dep> implicitDeps(Stream* s);
  Status enqueueLocked(Stream* s, std::function<void()> fn, std::vector<Dep> extra = {});
  bool depsMet(const std::vector<Dep>& deps) const;
  // For queries (streamIdle, eventDone): a stream's replied op counts as done.
  static uint64_t doneForQueries(const Stream* s) { return s->completed + (s->replied ? 1 : 0); }
  // Inside an op that sends a reply: the OnWire hook that sets
  // Stream::replied for the stream running it.
  OnWire repliedHook();
  void runStream(Stream* s);
  void fireReadyWaitersLocked(std::unique_lock<std::mutex>& lock);
  Status addWaiterLocked(std::vector<Dep> deps, Done done);
  // Joins destroyed streams whose threads have finished and forgets every
  // dependency on them (all met): a program that creates and destroys
  // streams all the time must not accumulate threads.
  void reapRetiredLocked();
  Status enqueue(StreamKey key, std::function<void()> fn);
  void reportAsync(Status s);
  // Runs `work` as the device's kernel: admitted by the launch gate, its time
  // charged to the session. On a stream's thread.
  void runAsKernel(int device, const std::function<void()>& work);
  Result<DevPtr> allocateLocked(int device, uint64_t size);
  Status allocateAtLocked(int device, DevPtr at, uint64_t size);
  // loadModule; `at`: a restore's placement of the variables (loadModuleAt).
  Status loadModuleImpl(uint32_t id, int device, const std::string& fatbin, const std::vector<ModuleGlobal>* at);
  // Retires what allocateLocked returned: gone for operations queued from
  // now on, its bytes freed once the operations queued before have run.
  void releaseLocked(DevPtr ptr);
  // Frees the retired allocations no pending operation may touch any more.
  // Costs a pass over the streams, only while something is retired: the
  // per-operation path keeps no index of pending operations.
  void reclaimLocked();
  // The lowest sequence number of an operation queued or running; next_op_seq_ when none.
  uint64_t oldestPendingLocked() const;
  // The memory a kernel (or a BLAS call reading pointers from memory) run
  // as operation `op_seq` may touch: live allocations, and those retired
  // after it was queued.
  ptx::MemoryRanges memoryRangesLocked(uint64_t op_seq) const;

  std::vector<DeviceDescription> devices_;
  SimOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable progress_;
  std::vector<std::unique_ptr<Stream>> legacy_;  // by device
  std::unordered_map<uint32_t, std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Stream>> retired_;  // destroyed; joined at teardown
  std::unordered_map<uint32_t, Event> events_;
  std::vector<Waiter> waiters_;
  std::unordered_map<uint32_t, Module> modules_;
  std::unordered_map<uint32_t, Function> functions_;
  // Blocks of `f` one multiprocessor holds at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor).
  int occupancyLocked(const Function& f, int block_size, uint64_t dynamic_smem) const;
  std::unordered_map<DevPtr, Allocation> allocations_;
  std::vector<uint64_t> used_;  // bytes allocated per device (retired ones until freed)
  std::vector<uint64_t> printf_fifo_;   // per device: cudaLimitPrintfFifoSize
  // Per device: cudaLimitMallocHeapSize, and the heap once a kernel that
  // calls malloc was launched (a range of device memory; never unmade).
  std::vector<uint64_t> malloc_heap_bytes_;
  std::vector<std::unique_ptr<ptx::DeviceHeap>> heaps_;
  std::vector<bool> printf_launched_;   // per device: a kernel that may printf was queued
  uint64_t next_op_seq_ = 1;
  std::vector<DevPtr> retired_allocs_;  // retired, waiting for the operations queued before them
  std::unique_ptr<DeviceArena> arena_;  // all devices' memory
  uint64_t module_insts_ = 0;   // decoded instructions of the loaded modules
  std::function<void(Status)> async_sink_;
  std::function<void(std::string)> output_sink_;
  ptx::Interpreter interp_;
  ptx::MemoryBudget interp_budget_;
  std::atomic<uint64_t> gpu_ns_{0};  // kernel time, summed over launches
  std::atomic<bool> cancel_{false};  // the session is ending: running kernels stop
  std::atomic<uint64_t> faults_{0};  // sticky errors reported: a while node's loop stops at one
  // Bodies being recorded (beginBody), innermost last: enqueueLocked appends to it.
  std::vector<std::vector<std::function<void()>>> recording_;
  // Arrays by handle, and the texture and surface objects; a launch takes
  // the objects as they are when it is queued (snapshot_, remade after a
  // change), so destroying one after the launch does not reach it.
  struct SimArray {
    int device = 0;
    DevPtr base = 0;
    ptx::TexImage image;
  };
  std::unordered_map<uint64_t, SimArray> arrays_;
  ptx::Textures objects_;
  std::shared_ptr<const ptx::Textures> objects_snapshot_;
  uint64_t next_object_ = 1;
  std::shared_ptr<const ptx::Textures> texturesLocked();
  // The create* calls, under handle `id` (0: the next one) and, for an
  // array, at `base` (0: wherever the arena has room).
  Result<uint64_t> createArrayImpl(const ArraySpec& spec, uint64_t id, DevPtr base);
  Result<uint64_t> createTextureImpl(const TextureSpec& spec, uint64_t id);
  Result<uint64_t> createSurfaceImpl(uint64_t array, uint32_t level, uint64_t id);
  // An id for a new object: `want`, or the next free one when 0; an id in use is refused.
  Result<uint64_t> objectIdLocked(uint64_t want);
  LaunchGate* gate_ = nullptr;       // set before the first launch
  std::mutex log_mu_;
  std::ofstream launch_log_;
};

}  // namespace rgpu::server
