// CudaBackend: a session's calls replayed on real GPUs through the driver API.
//
// One instance per worker process. Each device is used through its primary
// context (the same one NVIDIA's runtime would use), made current on whichever
// thread calls in. Session stream 0 is the device's legacy default stream
// (CU_STREAM_LEGACY), so CUDA itself gives the runtime's implicit ordering.
//
// Completion: work the session waits for (a stream, an event, the device, a
// device-to-host copy) gets a completion event recorded behind it; one
// completer thread polls the pending events (spinning briefly, then backing off
// to 200 us) and runs the callbacks. Errors the driver reports there (kernel
// faults) go to the async error sink as well, where the session makes them
// sticky. Host-to-device and device-to-host bytes pass through pinned staging
// buffers taken from a pool and returned once their copy has completed, so a
// copy never blocks the dispatcher and memory is not pinned per call.
//
// Queries: cuStreamQuery and cuEventQuery say when the GPU is done, but a
// device-to-host copy is complete for the client only once its bytes are on
// the connection (after the completer saw it finish). Each stream counts the
// downloads it issued and those whose reply is on the wire (OnWire); a
// stream (or an event recorded behind a download) is reported complete only
// when both agree, so a query's answer never overtakes the data.
//
// Releases: cuMemFree, cuMemFreeHost and cuModuleUnload may synchronise the
// device. They run on a releaser thread of their own (afterDeviceDone), never
// on the completer (which would stall every completion and the watchdog) nor
// on the dispatch thread (which a pending host function may be waiting for).
//
// Device printf and assert messages: the driver flushes its printf buffer to
// stdout at synchronisation points. With capture_stdout, stdout is a pipe;
// when a completion is seen, cuEventSynchronize on the (finished) event makes
// the driver flush, and what arrived is handed to the output sink before the
// completion callback, so the client prints it before the call returns.
//
// Watchdog: with kernel_timeout_ms every kernel is timed by an event pair;
// one whose start event completed longer ago than that while its end event has
// not is reported (cudaErrorLaunchTimeout, sticky) and ends the session: the
// driver cannot stop a single kernel, but the worker's exit ends it.
//
// Graphs: a graph whose nodes are all device-side work (kernels, device
// copies, memsets, cuBLAS/cuBLASLt calls) becomes a real CUgraphExec. The
// session replays its nodes once through its handlers while a non-blocking
// stream of the worker's is being captured (relaxed mode: the completer and
// releaser threads keep working); the captured graph is instantiated, and
// each launch is one cuGraphLaunch, admitted, timed and watched as one kernel.
// While capturing, every stream a call names is that capture stream, and
// calls that cannot be captured (host copies, events, host functions,
// completion waits) fail, which makes the session fall back to node by node.
//
// Kernels: the shipped fatbin goes to cuModuleLoadData (the driver picks the
// SASS for the device or JIT-compiles the PTX). The parameter block size of a
// kernel comes from cuFuncGetParamInfo, cross-checked against the fatbin's
// .nv.info layout; launches pass the packed block the client built with
// CU_LAUNCH_PARAM_BUFFER_POINTER. On a worker whose sessions may move
// (fixed_addresses), a module whose kernels may call device malloc goes to
// the driver as its PTX bound to rgpu's own device heap instead
// (device_heap_ptx.h, cuda_heap.cc), so that the heap moves with the session.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/fatbin.h"
#include "server/backend/backend.h"
#include "server/cuda/blas_api.h"
#include "server/cuda/fft_api.h"
#include "server/cuda/solver_api.h"
#include "server/cuda/sparse_api.h"
#include "server/cuda/dnn_api.h"
#include "server/cuda/driver_api.h"
#include "server/cuda/windowed_memory.h"
#include "server/pool/launch_gate.h"

namespace rgpu::server::cuda {

struct CudaOptions {
  std::string driver_library = "libcuda.so.1";
  // Idle pinned staging memory kept for reuse; buffers beyond it are freed.
  uint64_t staging_pool_bytes = 256ull << 20;
  // Device printf: the driver writes it to this process's stdout. When set,
  // setOutputSink redirects stdout into a pipe and forwards what the driver
  // writes (workers only: it takes over the process's fd 1).
  bool capture_stdout = false;
  // The driver's device ordinals this session uses, in the session's order; empty: all.
  std::vector<int> devices;
  // [limits] kernel_timeout_ms: a kernel running longer ends the session (the
  // GPU cannot stop one kernel; the worker's exit does). 0: no limit.
  uint32_t kernel_timeout_ms = 0;
  // NVIDIA's cuBLAS and cuBLASLt, loaded on the session's first BLAS call.
  std::string cublas_library = "libcublas.so.13";
  std::string cublaslt_library = "libcublasLt.so.13";
  // NVIDIA's cuFFT, loaded on the session's first cuFFT plan.
  std::string cufft_library = "libcufft.so.12";
  // NVIDIA's cuSOLVER, loaded on the session's first cuSOLVER call.
  std::string cusolver_library = "libcusolver.so.12";
  // NVIDIA's cuSPARSE, loaded on the session's first cuSPARSE call.
  std::string cusparse_library = "libcusparse.so.12";
  std::string cudnn_library = "libcudnn.so.9";
  // The session is part `address_window` of a program spread over several
  // members (> 0): its device memory goes in that part's address window
  // (windowed_memory.h). 0: where cuMemAlloc puts it.
  uint32_t address_window = 0;
  // The server checkpoints sessions ([checkpoint]): every device's memory
  // goes in address window 0 (windowed_memory.h), where a new worker can
  // map the same addresses again (cuda_checkpoint.cc).
  bool fixed_addresses = false;
  // [cuda] scrub: device memory is zeroed before the session is given it, so
  // no session reads what another left in the GPU's memory — whether it
  // freed it, ended, or its worker died (the driver does not promise zeroes).
  bool scrub = true;
};

// The zeroed buffer arrays are scrubbed from (grown for a wider row).
inline constexpr uint64_t kScrubZeroBytes = 4ull << 20;
// A restore makes at most this many texture and surface objects it does not
// keep, to be handed the handles the program holds (placeObject).
inline constexpr size_t kMaxObjectPlaceholders = 65536;

class CudaBackend final : public Backend {
 public:
  // Loads the driver, initialises it and retains each device's primary context.
  static Result<std::unique_ptr<CudaBackend>> create(const CudaOptions& opts);
  ~CudaBackend() override;
  void stopThreads() override;

  // rgpu::server::Backend
  std::string name() const override { return "cuda"; }
  int driverVersion() const override { return driver_version_; }
  const std::vector<DeviceDescription>& devices() const override { return descriptions_; }
  void setAsyncErrorSink(std::function<void(Status)> sink) override;
  void setLaunchGate(LaunchGate* gate) override { gate_ = gate; }
  uint64_t gpuTimeNs() const override { return gpu_ns_.load(std::memory_order_relaxed); }
  uint64_t scrubbedBytes() const { return scrubbed_bytes_.load(std::memory_order_relaxed); }
  void setOutputSink(std::function<void(std::string)> sink) override;
  Status setPrintfFifo(int device, uint64_t bytes) override;
  Status setMallocHeap(int device, uint64_t bytes) override;
  void setFatalSink(std::function<void(Status)> sink) override;
  void flushOutput() override { forwardOutput(nullptr); }
  Result<DevPtr> allocate(int device, uint64_t size) override;
  Result<std::pair<DevPtr, uint64_t>> allocatePitch(int device, uint64_t width, uint64_t height) override;
  Status release(DevPtr ptr) override;
  Status memInfo(int device, uint64_t& free, uint64_t& total) override;
  Status createStream(StreamKey stream, uint32_t flags, int priority) override;
  Status destroyStream(StreamKey stream) override;
  Status createEvent(uint32_t id, int device, uint32_t flags) override;
  Status destroyEvent(uint32_t id) override;
  Status copyToDevice(StreamKey s, DevPtr dst, Staging data, uint64_t size) override;
  Status copyFromDevice(StreamKey s, DevPtr src, uint64_t size, ReadDone done) override;
  Status copyOnDevice(StreamKey s, DevPtr dst, DevPtr src, uint64_t size) override;
  Status copyPeer(StreamKey s, DevPtr dst, int dst_device, DevPtr src, int src_device, uint64_t size,
                  bool serialize) override;
  Status copy2DToDevice(StreamKey s, DevPtr dst, uint64_t dpitch, Staging data, uint64_t width,
                        uint64_t height) override;
  Status copy2DFromDevice(StreamKey s, DevPtr src, uint64_t spitch, uint64_t width, uint64_t height,
                          ReadDone done) override;
  // CUDA arrays, texture and surface objects (cuda_arrays.cc): the driver's
  // CUarray / CUmipmappedArray under the backend's own handles; texture and
  // surface objects are the driver's values, which kernels take as they are.
  Result<uint64_t> createArray(const ArraySpec& spec) override;
  Status destroyArray(uint64_t array) override;
  Status copy3D(StreamKey s, const Copy3DSpec& copy, Staging in, ReadDone out) override;
  Result<uint64_t> createTexture(const TextureSpec& spec) override;
  Status destroyTexture(int device, uint64_t texture) override;
  Result<uint64_t> createSurface(int device, uint64_t array, uint32_t level) override;
  Status destroySurface(int device, uint64_t surface) override;
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
  Status afterDeviceDone(int device, std::function<Status()> work, Done done) override;
  Result<bool> streamIdle(StreamKey s) override;
  Result<bool> eventDone(uint32_t event) override;
  Result<float> elapsedMs(uint32_t start, uint32_t end) override;
  Status loadModule(uint32_t id, int device, const std::string& fatbin) override;
  Status unloadModule(uint32_t id) override;
  Result<uint32_t> registerFunction(uint32_t id, uint32_t module, const std::string& name) override;
  Result<FunctionAttributes> functionAttributes(uint32_t function) override;
  Status setFunctionAttribute(uint32_t function, int attr, int value) override;
  Result<int> occupancy(uint32_t function, int block_size, uint64_t dynamic_smem) override;
  Result<GlobalVar> globalAddress(uint32_t module, const std::string& name, uint64_t size_hint) override;
  // (cuda_graphs.cc)
  bool nativeGraphs() const override;
  Status beginNativeGraph(int device, uint64_t in_bytes = 0, uint64_t out_bytes = 0, uint64_t host_bytes = 0) override;
  NativeBuffers nativeGraphBuffers() const override;
  Status copyToNativeHost(StreamKey s, uint64_t host_offset, DevPtr src, uint64_t size) override;
  Result<uint32_t> endNativeGraph(bool keep) override;
  Status launchNativeGraph(StreamKey s, uint32_t graph, Staging in = nullptr, ReadDone out = nullptr) override;
  void destroyNativeGraph(uint32_t graph) override;
  // Checkpoint and restore (cuda_checkpoint.cc; server/checkpoint/device_image.h).
  std::string notCheckpointable() const override;
  Status readWhileRunning(int device, DevPtr at, uint64_t size, uint8_t* out) override;
  Status allocateAt(int device, DevPtr at, uint64_t size) override;
  Result<std::vector<MallocHeap>> mallocHeaps() const override;
  Status restoreMallocHeap(const MallocHeap& heap) override;
  Result<std::vector<ModuleGlobal>> moduleGlobals(uint32_t module) const override;
  Status loadModuleAt(uint32_t id, int device, const std::string& fatbin, const std::vector<ModuleGlobal>& at) override;
  Result<EventState> eventState(uint32_t event) const override;
  Status restoreEvent(uint32_t event, int device, uint32_t flags, const EventState& state) override;
  // Arrays are the driver's: their bytes move packed (cuda_arrays.cc), and
  // texture and surface objects come back under the handles the program
  // holds where the driver hands those out again (cuda_checkpoint.cc).
  Result<std::pair<DevPtr, uint64_t>> arrayMemory(uint64_t array) const override;
  Status createArrayAt(uint64_t handle, const ArraySpec& spec, DevPtr base) override;
  Status readArray(uint64_t array, uint64_t offset, uint64_t n, uint8_t* out) override;
  Status writeArray(uint64_t array, uint64_t offset, const uint8_t* data, uint64_t n) override;
  Status createTextureAt(uint64_t handle, const TextureSpec& spec) override;
  Status createSurfaceAt(uint64_t handle, int device, uint64_t array, uint32_t level) override;
  Status objectsRestored() override;
  uint64_t placementOrder(bool array, uint64_t id) const override;
  // cuRAND: computed on this CPU (common/curand_cpu.h), uploaded in stream order (cuda_blas.cc).
  Status randFill(StreamKey s, const common::curand::Fill& f, DevPtr out, uint64_t count) override;
  // cuFFT: NVIDIA's plan of each client plan, made on its first use (cuda_fft.cc).
  Result<uint64_t> fftWorkSize(int device, uint64_t plan, const common::fft::Plan& p) override;
  Status fftExec(StreamKey s, uint64_t plan, const common::fft::Plan& p, const common::fft::Layout& l, int direction,
                 DevPtr in, DevPtr out, DevPtr work, uint64_t work_size) override;
  void fftRelease(int device, uint64_t plan) override;
  // cuSOLVER: NVIDIA's, one handle per device (cuda_solver.cc).
  Result<int64_t> solverBufferSize(int device, const common::solver::Args& a) override;
  Status solver(StreamKey s, const common::solver::Args& a) override;
  // cuSPARSE: NVIDIA's, one handle per device (cuda_sparse.cc).
  Result<uint64_t> sparseBufferSize(int device, const common::sparse::Args& a) override;
  Status sparse(StreamKey s, const common::sparse::Args& a) override;
  // cuDNN: NVIDIA's, one handle per device (cuda_dnn.cc).
  Result<uint64_t> dnnSize(int device, common::dnn::Query q, const common::dnn::Args& a) override;
  Status dnn(StreamKey s, const common::dnn::Args& a) override;
  // (cuda_blas.cc)
  Status blas(StreamKey s, const BlasArgs& call, ReadDone done) override;
  Status ltMatmul(StreamKey s, const LtArgs& call) override;
  Result<std::vector<LtAlgo>> ltHeuristic(int device, const LtArgs& call, uint32_t requested,
                                          uint64_t max_workspace) override;

 private:
  // Downloads a stream has issued, and those whose replies are on the wire (under mu_).
  // shared_ptr: events recorded on the stream keep counting on it after the
  // stream is destroyed.
  // `written` is atomic for host functions waiting on it (runHostCall) without mu_.
  struct Replies {
    uint64_t issued = 0;
    std::atomic<uint64_t> written{0};
  };
  struct Device {
    CUdevice dev = 0;
    std::shared_ptr<Replies> legacy_replies = std::make_shared<Replies>();
    CUcontext ctx = nullptr;
    std::vector<CUevent> spare_events;  // completion events for reuse
    std::vector<CUevent> spare_timed;   // timing events (kernel GPU time under a launch gate)
    // cuBLAS and cuBLASLt on this device, made on first use (dispatch thread only).
    cublasHandle_t blas = nullptr;
    cublasLtHandle_t lt = nullptr;
    // Device words for reductions on their way to the client, one per call
    // in flight (calls on different streams run concurrently): taken when the
    // call is queued, given back once its copy to the client is done.
    std::vector<CUdeviceptr> scratch_chunks;  // kScratchChunk bytes each
    std::vector<CUdeviceptr> scratch_free;
    // Where fresh allocations are zeroed (CudaOptions::scrub): a stream of
    // its own, so a scrub waits for nothing of the session's.
    CUstream scrub_stream = nullptr;
    CUevent scrub_done = nullptr;  // recorded after each scrub; every stream waits for it before its next work
    bool scrubbed = false;         // scrub_done has been recorded (under mu_)
    // What the device's scrubs cost (CudaOptions::scrub): the time between
    // scrub_start and scrub_done covers `timed_pending` bytes not yet counted.
    CUevent scrub_start = nullptr;
    uint64_t timed_pending = 0;
    // Zeroes that arrays are scrubbed from (they have no memset): made at
    // the first array, grown for a wider row, freed with the backend.
    CUdeviceptr scrub_zero = 0;
    uint64_t scrub_zero_bytes = 0;
    // cudaLimitMallocHeapSize as the session set it (0: never set).
    uint64_t malloc_heap = 0;
    // rgpu's device heap (cuda_heap.cc): made at the first launch of a kernel
    // that may call malloc from a module bound to it, in the address window.
    DevPtr heap_base = 0;
    uint64_t heap_size = 0;
    bool heap_restored = false;  // placed by a restore, holding the moved session's blocks
    // Reads of a running session's memory (readWhileRunning, under peek_mu_):
    // a stream of their own, which waits for no work of the session's but
    // for its scrubs, and an event to wait on.
    CUstream peek_stream = nullptr;
    CUevent peek_done = nullptr;
    uint64_t peek_scrub_seen = 0;  // under mu_
  };
  struct Stream {
    int device = 0;
    CUstream handle = nullptr;
    bool non_blocking = false;
    uint64_t scrub_seen = 0;  // scrub_epoch_ it last waited for (under mu_)
    std::shared_ptr<Replies> replies = std::make_shared<Replies>();
  };
  struct Event {
    int device = 0;
    CUevent handle = nullptr;
    // The stream's downloads issued before the last record: on the wire before the event counts as complete.
    std::shared_ptr<Replies> replies;
    uint64_t replies_due = 0;
    bool recorded = false;  // cuEventRecord'ed at least once (or restored so)
    // A restored event was recorded in the new worker `shift_ns` after it
    // completed in the old one: its times are the driver's less that.
    int64_t shift_ns = 0;
  };
  struct Module {
    int device = 0;
    CUmodule handle = nullptr;
    std::map<std::string, uint32_t> param_bytes;  // from the fatbin's .nv.info / PTX
    // With CudaOptions::fixed_addresses (else empty): the module-scope
    // variables the image declares, and the kernels that may call device malloc.
    std::vector<std::string> variables;
    std::set<std::string> mallocs;
    uint64_t placed = 0;  // placementOrder
    // Loaded as PTX bound to rgpu's device heap (cuda_heap.cc): the address
    // of its kHeapVariable (0: the driver's malloc, if any).
    CUdeviceptr heap_var = 0;
  };
  struct Function {
    uint32_t module = 0;
    int device = 0;
    CUfunction handle = nullptr;
    std::string name;
    bool mallocs = false;   // may call the driver's device malloc
    bool own_heap = false;  // may call malloc on rgpu's device heap
  };
  // Work to run once every event has completed (in any order).
  struct Job {
    int device = 0;
    std::vector<CUevent> events;  // completion events, returned to the device's spares
    CUevent watched = nullptr;    // a session event polled, not owned
    std::vector<CUevent> timed;   // timing events, returned to spare_timed after `done`
    Done done;
    size_t next = 0;  // events before this one have completed
    // The completer's last poll (completerLoop): complete, or failed with `status`.
    bool complete = false;
    Status status;
    // The watchdog (kernel launches under kernel_timeout_ms): timed[0] marks
    // the kernel's start; `started` is when the completer first saw it.
    std::string kernel;
    std::chrono::steady_clock::time_point started{};
  };
  // A pinned host buffer of `capacity` bytes.
  struct Pinned {
    uint8_t* data = nullptr;
    uint64_t capacity = 0;
  };

  explicit CudaBackend(std::unique_ptr<DriverApi> api, const CudaOptions& opts);
  Status init();
  Status use(int device);  // makes the device's primary context current on this thread
  // Zeroes [p, p + bytes) of a fresh allocation on `device` and waits for it
  // (CudaOptions::scrub; nothing when off). The device's context is current.
  Status scrub(int device, CUdeviceptr p, uint64_t bytes);
  // After a scrub was queued (the device's context current): records its
  // end for the streams to wait for, and times it when it can.
  Status scrubQueued(int device, uint64_t bytes);
  // `handle` (on a stream that last waited for epoch *seen) waits for every
  // scrub queued since. Under mu_.
  Status afterScrubsLocked(CUstream handle, uint64_t* seen);
  // Waits until no scrub of `device` runs (before memory or an array goes).
  Status scrubsDone(int device);
  // Adds what finished scrubs of `device` took to the figures; `wait`: wait for the last first.
  void harvestScrubTime(int device, bool wait);
  // The scrub stream and event of `device`, and (zero_bytes > 0) a zeroed
  // buffer of at least that many bytes. The device's context is current.
  Status scrubReady(int device, uint64_t zero_bytes);
  // An allocation in the device's address window (windows_), recorded.
  Result<DevPtr> windowed(int device, uint64_t size);
  // The device's peek stream and event (made on first use), once it waits
  // for every scrub queued so far; peekDone() waits for what was queued on
  // it. The caller holds peek_mu_, with the device's context current.
  Status peekReady(Device& d);
  Status peekDone(Device& d);
  // rgpu's device heap (cuda_heap.cc). The module's image loaded as its
  // PTX bound to the heap, or null (and why, logged) when that cannot be --
  // an error instead where the device's heap was restored.
  Result<CUmodule> loadOnOwnHeap(int device, const common::FatbinImage& image, CUdeviceptr* heap_var);
  // A module bound to the heap (heap_var; 0: none) learns where it is, if it is made yet.
  Status heapKnownTo(int device, CUdeviceptr heap_var);
  // The device's heap, made (of its cudaLimitMallocHeapSize) if missing,
  // and known to every module of the device bound to it.
  Status ensureHeap(int device);
  // Writes {base, size} into module variables of `device` (the heap's
  // address and size), first zeroing the heap's header when asked, and
  // waits until they are there (on the device's peek stream, after scrubs).
  Status writeHeapVariables(int device, const std::vector<CUdeviceptr>& vars, DevPtr base, uint64_t size,
                            bool zero_header);
  Result<std::pair<int, CUstream>> streamOf(StreamKey key);
  // Copies of table entries, looked up under mu_.
  Result<Function> functionOf(uint32_t id);
  Result<Event> eventOf(uint32_t id);
  Result<std::pair<CUmodule, int>> moduleOf(uint32_t id);
  // Removes and returns a table entry, under mu_.
  template <typename Map>
  std::optional<typename Map::mapped_type> take(Map& table, uint32_t id);
  // Runs `enqueue` (which queues GPU work on `stream` of device `dev`) as the
  // session's kernel: admitted by the launch gate, timed for the session's GPU
  // time and under the watchdog. `name` names it in a watchdog report.
  Status asKernel(int dev, CUstream stream, const std::string& name, const std::function<Status()>& enqueue);
  // NVIDIA's BLAS libraries, loaded on first use (cuda_blas.cc).
  Result<BlasApi*> blasApi();
  Result<cublasHandle_t> blasHandle(int dev);
  Result<cublasLtHandle_t> ltHandle(int dev);
  void releaseBlas();
  // NVIDIA's cuFFT plan of client plan `plan` on `dev`, made when missing or
  // made from another description (dispatch thread; cuda_fft.cc).
  struct FftPlan {
    common::fft::Plan desc;
    int handle = 0;  // cufftHandle
    uint64_t work_size = 0;
  };
  Result<FftPlan*> fftPlan(int dev, uint64_t plan, const common::fft::Plan& p);
  void releaseFft();
  Result<cusolverDnHandle_t> solverHandle(int dev);  // (loads the library on first use)
  void releaseSolver();
  Result<cusparseHandle_t> sparseHandle(int dev);  // (loads the library on first use)
  template <typename F>
  Status withSparse(int dev, const common::sparse::Args& a, F&& f);
  // An SpGEMM step (cuda_spgemm.cc): NVIDIA's whole sequence for it, on the stream.
  Status spgemm(int dev, CUstream stream, const common::sparse::Args& a);
  void releaseSparse();
  Result<cudnnHandle_t> dnnHandle(int dev);  // (loads the library on first use)
  void releaseDnn();
  // A 16-byte device word of `dev` for one reduction's result (dispatch thread).
  Result<CUdeviceptr> takeScratch(int dev);
  void giveScratch(int dev, CUdeviceptr word);
  // While a native graph is captured (dispatch thread): a call that cannot
  // become a graph node fails with this.
  Status notCapturable(const char* what) const;
  // Destroys every native graph and capture stream (teardown).
  void releaseGraphs();
  // cuStreamDestroy for retired streams whose work is done (under mu_).
  void reapRetiredLocked();
  // Hands a job to the completer thread.
  void addJob(Job job);
  // Records a completion event on `stream` and runs `done` when it completes.
  Status whenDone(int device, const std::vector<CUstream>& streams, Done done);
  void completerLoop();
  void reportAsync(const Status& s);
  // A timed kernel that started `kernel_timeout_ms` ago and has not finished:
  // reports it (sticky) and ends the session through the fatal sink.
  bool pastDeadline(Job& j);
  // Makes the driver flush device printf (after `done` completed; nullptr: no
  // event to synchronise on) and forwards it.
  void forwardOutput(CUevent done);
  void readOutputLoop();
  // cuMemcpy2DAsync, or the same copy row by row where the driver refuses the pitches.
  Status memcpy2D(const CUDA_MEMCPY2D& m, CUstream stream);
  Result<Pinned> takePinned(uint64_t size);
  void givePinned(Pinned p);
  // After a staged copy was enqueued (or failed to be): return the buffer when it is done.
  // Returns `pin` to the pool, and drops `charge` (the copy's staging), once
  // the copy enqueued on `stream` has run.
  Status afterUpload(int device, CUstream stream, Pinned pin, Staging charge, Status enqueued);
  Status afterDownload(StreamKey key, int device, CUstream stream, Pinned pin, uint64_t size, ReadDone done,
                       Status enqueued);
  // The download counters of a session stream (under mu_).
  std::shared_ptr<Replies> repliesLocked(StreamKey key);
  // Every download issued on `key` (and on the streams it implicitly waits
  // for) has its reply on the wire (under mu_).
  bool repliesOnWireLocked(StreamKey key);

  struct CudaArray {
    int device = 0;
    CUarray array = nullptr;            // a plain array
    CUmipmappedArray mipmapped = nullptr;
    ArraySpec spec;
    uint64_t placed = 0;  // placementOrder
  };
  uint64_t next_placed_ = 1;  // under mu_
  // createArray under a handle of the caller's (`want`; 0: the next free).
  Result<uint64_t> createArrayImpl(const ArraySpec& spec, uint64_t want);
  // readArray (to_host) and writeArray: the array's packed bytes.
  Status arrayBytes(uint64_t array, uint64_t offset, uint64_t n, uint8_t* host, bool to_host);
  // A restore's texture or surface object of `device` (made by `make`)
  // under the handle `want`. Objects the driver hands out below it are kept
  // as placeholders (kMaxObjectPlaceholders at most) until
  // objectsRestored(); one above it fails the restore.
  Status placeObject(uint64_t want, int device, bool surface, const std::function<Result<uint64_t>()>& make);
  struct Placeholder {
    uint64_t handle = 0;
    int device = 0;
    bool surface = false;
  };
  std::vector<Placeholder> placeholders_;  // under mu_
  // A copy of an array's entry (takes mu_).
  Result<CudaArray> arrayOf(uint64_t array) const;
  // The CUarray of an array's level (under mu_ for the table).
  Result<std::pair<int, CUarray>> arrayLevel(uint64_t array, uint32_t level);
  std::unordered_map<uint64_t, CudaArray> arrays_;  // under mu_
  // A new array's every level zeroed, as scrub() zeroes memory (nothing when off).
  Status scrubArray(const CudaArray& a, const ArraySpec& spec);
  uint64_t next_array_ = 1;

  std::unique_ptr<DriverApi> api_;
  CudaOptions opts_;
  std::unique_ptr<BlasApi> blas_api_;  // null until a BLAS call loads it
  Status blas_error_;                  // why it could not be loaded (sticky)
  bool blas_tried_ = false;
  std::unique_ptr<FftApi> fft_api_;    // null until a cuFFT plan loads it
  Status fft_error_;
  bool fft_tried_ = false;
  std::map<std::pair<int, uint64_t>, FftPlan> fft_plans_;  // (device, client plan) -> NVIDIA's; dispatch thread
  std::unique_ptr<SolverApi> solver_api_;  // null until a cuSOLVER call loads it
  Status solver_error_;
  bool solver_tried_ = false;
  std::map<int, cusolverDnHandle_t> solver_handles_;  // per device; dispatch thread
  std::unique_ptr<SparseApi> sparse_api_;  // null until a cuSPARSE call loads it
  Status sparse_error_;
  bool sparse_tried_ = false;
  std::map<int, cusparseHandle_t> sparse_handles_;  // per device; dispatch thread
  std::unique_ptr<DnnApi> dnn_api_;  // null until a cuDNN call loads it
  Status dnn_error_;
  bool dnn_tried_ = false;
  std::map<int, cudnnHandle_t> dnn_handles_;  // per device; dispatch thread
  int driver_version_ = 0;
  std::vector<DeviceDescription> descriptions_;

  mutable std::mutex mu_;  // guards the maps below and the devices' spare events
  // Held while readWhileRunning copies from an allocation and while
  // release() unmaps one: a copy never reads memory being unmapped. Before mu_.
  std::mutex peek_mu_;
  // A kernel that may call device malloc was launched: the heap the driver
  // keeps may hold blocks, and the session cannot be checkpointed.
  std::atomic<bool> malloc_used_{false};
  std::vector<Device> devices_;
  std::unordered_map<uint32_t, Stream> streams_;
  // Destroyed by the session while work was still queued on them: kept (not
  // given to cuStreamDestroy) until that work is done, so cudaDeviceSynchronize,
  // cudaFree and cudaDeviceReset can still wait for it.
  std::vector<Stream> retired_;
  std::unordered_map<uint32_t, Event> events_;
  std::unordered_map<uint32_t, Module> modules_;
  std::unordered_map<uint32_t, Function> functions_;
  std::unordered_map<DevPtr, int> allocations_;  // pointer -> device
  // A span part's memory, in its address window (null: cuMemAlloc for all devices).
  std::unique_ptr<WindowedMemory> windows_;
  std::function<void(Status)> async_sink_;
  std::function<void(Status)> fatal_sink_;

  LaunchGate* gate_ = nullptr;        // priorities and weights (daemon mode); set before launches
  std::atomic<uint64_t> gpu_ns_{0};  // kernel GPU time, measured when a gate is set
  std::atomic<uint64_t> scrubbed_bytes_{0};  // zeroed before the session got them (scrub())
  // Device time of the scrubs that could be timed, and their bytes.
  std::atomic<uint64_t> scrub_ns_{0}, scrub_timed_bytes_{0};
  // Scrubs queued so far, all devices (changed under mu_; read without it
  // on the per-call path, streamOf), and by device the epoch its legacy
  // stream last waited for: a call finds nothing to wait for without a lock.
  std::atomic<uint64_t> scrub_epoch_{0};
  std::vector<std::atomic<uint64_t>> legacy_scrub_seen_;
  std::atomic<bool> printf_possible_{false};  // a loaded module calls vprintf or __assertfail
  std::mutex out_mu_;  // guards out_buf_, reads of out_fd_ and output_sink_
  std::function<void(std::string)> output_sink_;
  std::string out_buf_;
  int out_fd_ = -1;         // read end of the pipe that is now stdout
  int saved_stdout_ = -1;   // the original stdout, restored at teardown
  std::thread out_reader_;

  std::mutex pinned_mu_;
  std::multimap<uint64_t, Pinned> idle_pinned_;  // by capacity
  uint64_t idle_pinned_bytes_ = 0;

  // Host functions queued in the driver may run after this backend is gone;
  // they check `alive` first, and the destructor waits for running ones.
  struct HostCalls {
    std::mutex mu;
    std::condition_variable cv;
    bool alive = true;
    int running = 0;
  };
  // shared_ptr: owned jointly by the backend and every host function queued in the driver.
  std::shared_ptr<HostCalls> host_calls_ = std::make_shared<HostCalls>();

  // The releaser: blocking work, in order (see the top of this file).
  void releaserLoop();
  void toReleaser(std::function<void()> work);
  std::mutex release_mu_;
  std::condition_variable release_cv_;
  std::deque<std::function<void()>> releases_;
  bool release_stop_ = false;
  std::thread releaser_;

  // Native graphs (cuda_graphs.cc; dispatch thread only).
  // A host function of a native graph: kept by the graph, run at each launch.
  struct HostCall {
    std::function<void()> fn;
    std::shared_ptr<HostCalls> calls;
    bool once = true;  // a plain cuLaunchHostFunc: freed after its one run
    // The stream's downloads queued before it: their replies go on the wire
    // before the client is asked to run the function, which may read them.
    std::shared_ptr<Replies> replies;
    uint64_t replies_due = 0;
  };
  static void runHostCall(void* p);
  // What a native graph owns besides its executable graph.
  struct NativeParts {
    CUdeviceptr in = 0, out = 0;  // the host copies' device buffers
    uint64_t in_bytes = 0, out_bytes = 0;
    uint8_t* host = nullptr;  // pinned: downloads a host node reads (copyToNativeHost)
    uint64_t host_bytes = 0;
    std::vector<std::unique_ptr<HostCall>> host_calls;
    std::vector<uint32_t> events;  // recorded by the graph: their replies are counted at each launch
  };
  struct Capture {
    bool active = false;
    int device = 0;
    CUstream stream = nullptr;
    NativeParts parts;
  } capture_;
  std::vector<CUstream> capture_streams_;  // by device, made on first use
  struct NativeGraph {
    int device = 0;
    CUgraphExec exec = nullptr;
    NativeParts parts;
    CUevent last = nullptr;  // recorded after each launch: the next one waits for it
  };
  // Frees what `g` holds (idempotent: what it freed it forgets).
  void freeNative(NativeGraph& g);
  // Destroyed graphs whose launches may still run (their host calls may still
  // be called): freed by the releaser once the device is idle, or at the end.
  std::list<std::shared_ptr<NativeGraph>> retired_graphs_;  // under mu_
  std::unordered_map<uint32_t, NativeGraph> native_graphs_;
  uint32_t next_native_graph_ = 1;

  std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::list<Job> jobs_;
  bool stopping_ = false;
  std::thread completer_;
};

}  // namespace rgpu::server::cuda
