// The process-wide client runtime behind the exported CUDA functions.
//
// The C ABI forces one instance per process (Runtime::get()). It owns the lazy
// connection, the registry of fatbins/kernels/variables registered by nvcc's
// constructors, the client-side handle tables (streams, events), and the
// tracking of device and pinned host allocations that cudaMemcpyDefault and
// cudaPointerGetAttributes need. Thread-safe: registration happens before main
// on one thread, everything else may be called from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/client_config.h"
#include "client/connection.h"
#include "client/device_ranges.h"
#include "client/servers.h"
#include "common/fatbin.h"

namespace rgpu::client {

// Wire reference to a stream: id 0 is the device's legacy default stream.
struct StreamRef {
  uint32_t id = 0;
  int device = 0;
};

struct KernelRecord {
  uint32_t index = 0;
  uint32_t module = 0;
  std::string name;
  const void* host_fun = nullptr;
  bool has_layout = false;
  common::KernelInfo layout;
};

struct VarRecord {
  uint32_t index = 0;
  uint32_t module = 0;
  std::string name;
  uint64_t size = 0;
  bool constant = false;
  std::map<int, uint64_t> address;  // per device, resolved on first use
  // A __managed__ variable the server packed with others: the managed
  // allocation holding it, per device (absent: pages of its own).
  std::map<int, std::pair<uint64_t, uint64_t>> managed;
};

struct ModuleRecord {
  uint32_t index = 0;
  std::string fatbin;
  std::map<std::string, common::KernelInfo> kernels;
  std::vector<uint32_t> kernel_ids, var_ids;
  uint64_t shipped = 0;  // bit per device
  bool unregistered = false;
  // cudaLibraryLoadData/LoadFromFile: a module the program loaded as data
  // (every kernel registered at load, variables on request); unloaded: its
  // kernels and variables are gone.
  bool library = false, unloaded = false;
};

enum class MemKind { kHost, kPinned, kDevice };

// What a launch of a kernel on a device may ask for, from the server's
// cudaFuncGetAttributes; or why the kernel cannot run there at all (its
// module has no image for the device, ...). Launches are checked against it
// before they are sent, so a bad one fails the launch itself, visible to
// cudaGetLastError right after <<<>>> on the launching thread.
struct LaunchLimits {
  Status error;
  uint32_t max_threads = 1024;  // honours __launch_bounds__
  uint64_t static_shared = 0;
  uint64_t max_dynamic_shared = 48 * 1024;
  // Thread-block clusters: the kernel's own (__cluster_dims__ or
  // cudaFuncAttributeRequiredCluster*; 0s: none), whether it needs one, and
  // whether it may use non-portable sizes (up to 16 blocks).
  uint32_t cluster_x = 0, cluster_y = 0, cluster_z = 0;
  bool cluster_must_be_set = false, non_portable_cluster = false;
};

class Runtime {
 public:
  static Runtime& get();

  // ---- connection and errors --------------------------------------------
  // The servers of the program's devices (one, or one per member the pool
  // spread it over: client/servers.h); connects on first use, and a failure
  // is sticky.
  Result<ServerSet*> servers();
  // The first of them (the only one unless the pool spread the program).
  Result<Connection*> conn();
  // The program's devices are on several servers.
  bool spread() const {
    ServerSet* s = servers_ptr_.load(std::memory_order_acquire);
    return s && !s->single();
  }
  // Program devices `a` and `b` are on two servers (never with one server).
  bool acrossServers(int a, int b) const {
    ServerSet* s = servers_ptr_.load(std::memory_order_acquire);
    return s && !s->single() && !s->sameServer(a, b);
  }
  // fork(): a child of a process that had connected gets a runtime that
  // refuses every call (cudaErrorInitializationError, as NVIDIA's does after
  // fork) and never touches the parent's connection, not even at exit.
  bool forked() const { return forked_.load(std::memory_order_relaxed); }
  Status forkedError();
  // The configuration the connection was made with (defaults before that).
  const ClientConfig& config() const { return cfg_; }
  // Records a failure as the thread's last error; returns its code.
  cudaError_t finish(const Status& s);
  // The thread's last error; after a kernel fault, that fault, on every
  // thread and for the life of the process (it is never reset).
  cudaError_t lastError(bool reset);
  // The kernel fault that made the context unusable, or 0.
  int sticky() const { return sticky_.load(std::memory_order_relaxed); }
  // Sends a synchronous call; an earlier asynchronous error is returned if the
  // call itself succeeded (CUDA's reporting rule).
  // Each request goes to the server of the device it names (ServerSet::localize);
  // one naming none to that of the pointer, event or object it names, found
  // here (route()), or to the first server.
  Result<Reply> call(capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0,
                     void* in = nullptr, uint64_t in_len = 0) {
    return callOn(-1, msg, bulk, bulk_len, in, in_len);
  }
  Status post(capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0) {
    return postOn(-1, msg, bulk, bulk_len);
  }
  // The same, for a request about program device `device` that names none
  // (an array's, a graph's, a texture's: objects only the caller knows).
  Result<Reply> callOn(int device, capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0,
                       void* in = nullptr, uint64_t in_len = 0);
  // `pinned`: the bulk is the program's pinned memory (Connection::post).
  Status postOn(int device, capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0,
                bool pinned = false);
  // Connection::postExpectingData and postScatter, routed as post().
  Status postExpectingData(capnp::MessageBuilder& msg, void* in, uint64_t in_len);
  Status postScatter(capnp::MessageBuilder& msg, std::vector<uint8_t> bulk,
                     std::vector<std::pair<void*, uint64_t>> parts);
  // Prints the device printf output received so far: called where NVIDIA's
  // driver flushes its printf buffer (synchronisation, blocking copies,
  // launches, module loads, host callbacks, cudaDeviceReset, exit).
  void flushDeviceOutput();

  // ---- devices ------------------------------------------------------------
  int currentDevice();
  Status setCurrentDevice(int device);
  Result<const Welcome::Device*> device(int index);
  int deviceCount();  // 0 when not connected
  unsigned& deviceFlags() { return device_flags_; }
  // cudaDeviceGetLimit / cudaDeviceSetLimit: CUDA's defaults until set.
  Result<size_t> limit(int device, cudaLimit which);
  Status setLimit(int device, cudaLimit which, size_t value);

  // ---- streams and events ----------------------------------------------------
  Result<StreamRef> stream(cudaStream_t s, bool per_thread_default = false);
  cudaStream_t newStream(int device, unsigned flags, int priority, uint32_t* id);
  Status dropStream(cudaStream_t s, StreamRef* ref);
  // A non-blocking stream of the runtime's own on `device`, created on its server: its id.
  Result<uint32_t> newOwnStream(int device);
  // Destroys a stream the runtime made itself (a thread's default stream).
  void releaseStream(cudaStream_t s) noexcept;
  Result<std::pair<unsigned, int>> streamInfo(cudaStream_t s);  // flags, priority
  // cudaStreamNonBlocking is set for stream `id` (false for unknown ones).
  bool streamNonBlocking(uint32_t id);
  // cudaStreamSetAttribute(cudaLaunchAttributePriority): what cudaStreamGetPriority reports from now on.
  Status setStreamPriority(cudaStream_t s, int priority);
  cudaEvent_t newEvent(int device, unsigned flags, uint32_t* id);
  Result<uint32_t> event(cudaEvent_t e);
  // The device of event or stream `id` (-1: none such), without a lock while
  // the thread looked it up before and no handle was removed since.
  int eventDevice(uint32_t id);
  int streamDevice(uint32_t id);
  Status dropEvent(cudaEvent_t e, uint32_t* id, int* device = nullptr);
  uint64_t addHostFunc(void (*fn)(void*), void* user);
  // Runs host function `id` for the server of part `part`, then tells that
  // server it is done (a gate: when its other side has come too).
  void runHostFunc(uint64_t id, size_t part);
  // A cross-server cudaStreamWaitEvent (client/cross_server.h): host
  // functions `opener` (queued where the event is) and `waiter` (queued on
  // the waiting stream, part `waiter_part`): the waiter's server is told it
  // is done once both have run.
  void addGate(uint64_t opener, size_t opener_part, uint64_t waiter, size_t waiter_part);
  uint64_t newHostFuncId();

  // ---- memory tracking -----------------------------------------------------
  // Records device memory and reserves its range in this process (see
  // client/device_ranges.h). kCollides: the range overlaps this process's
  // own memory; it is tracked anyway (the caller decides what to do). Also
  // kCollides, and not tracked: it overlaps memory of a device on another
  // server of the program (client/servers.h).
  DeviceRanges::Result trackDevice(uint64_t ptr, uint64_t size, int device);
  // (`device` >= 0: only if the allocation at `ptr` is that device's.)
  void untrackDevice(uint64_t ptr, int device = -1);
  void untrackDeviceAll(int device);
  // cudaDeviceReset: the server dropped the device's allocations, modules,
  // streams and events; forget them here too (modules are shipped again, so
  // their variables start from their initial values).
  void forgetDevice(int device);
  // Kind of a pointer from this process's view; for device pointers also the
  // allocation's device.
  MemKind classify(const void* p, int* device = nullptr, uint64_t* base = nullptr, uint64_t* size = nullptr,
                   unsigned* flags = nullptr);
  void trackPinned(const void* p, uint64_t size, unsigned flags);
  // The pinned range that starts at `p`: false when there is none.
  bool pinnedAt(const void* p, uint64_t* size, unsigned* flags);
  void untrackPinned(const void* p);
  // Returns once no queued device-to-host copy still has to write into
  // [p, p + len) (see Connection::waitForWritesInto).
  void waitForWritesInto(const void* p, uint64_t len);

  // ---- registration ------------------------------------------------------------
  void** registerFatBinary(void* wrapper);
  void registerFunction(void** handle, const char* host_fun, const char* device_name);
  void registerVar(void** handle, char* host_var, const char* device_name, size_t size, int constant);
  // `alias` names the same variable as `host_var` from now on (a __managed__
  // variable: host code names it by its managed address).
  void aliasVar(const void* alias, const void* host_var);
  void unregisterFatBinary(void** handle);
  Result<const KernelRecord*> kernelByHostFun(const void* host_fun);
  Result<const KernelRecord*> kernelByHandle(cudaKernel_t handle);
  cudaKernel_t handleOf(const KernelRecord& k);
  // The kernel behind a server kernel id (serverKernelId), or null.
  const KernelRecord* kernelByServerId(uint32_t id);
  // Ships the module of `kernel` (and its functions and variables) to `device`.
  Status ensureShipped(uint32_t module, int device);
  uint32_t serverKernelId(const KernelRecord& k, int device) const { return (k.index + 1) << 6 | device; }
  // Resolves a __device__/__constant__ variable by its host shadow address.
  Result<std::pair<uint64_t, uint64_t>> symbol(const void* host_var, int device);
  // Asks the server where variable `vid` of a shipped module is on `device`
  // (address, and size as the module has it) and remembers the address.
  Result<std::pair<uint64_t, uint64_t>> resolveVar(uint32_t vid, int device);
  // Of a resolved __managed__ variable: the range to page for it (base, size):
  // the managed allocation the server packed it in, or the variable itself.
  std::pair<uint64_t, uint64_t> managedRange(const void* host_var, int device);

  // ---- libraries (cudaLibrary*: modules the program holds as data) ----------
  // Registers `image` (a fatbin, cubin or PTX, checked) as a module with all
  // its kernels; shipped to a device on first use like the program's own.
  Result<uint32_t> loadLibrary(std::string image);
  Status unloadLibrary(uint32_t module);
  Result<uint32_t> libraryOf(cudaLibrary_t lib);
  cudaLibrary_t libraryHandle(uint32_t module) const;
  std::vector<cudaKernel_t> libraryKernels(uint32_t module);
  Result<cudaKernel_t> libraryKernel(uint32_t module, const std::string& name);
  // A library's __device__/__constant__ variable: (address, size) on `device`.
  Result<std::pair<uint64_t, uint64_t>> libraryGlobal(uint32_t module, const std::string& name, int device);

  // The launch limits of `k` on `device`: fetched once (a round trip at the
  // kernel's first launch there), then cached; `refresh` fetches them again.
  Result<LaunchLimits> launchLimits(const KernelRecord& k, int device, bool refresh = false);
  // cudaFuncGetAttributes's answer for `k` on `device` (and the cache's refresh).
  Result<cudaFuncAttributes> funcAttributes(const KernelRecord& k, int device);
  // cudaFuncSetAttribute changed what the kernel may ask for.
  void forgetLaunchLimits(const KernelRecord& k, int device);

  // The checks a launch of `k` on `device` passes before it is sent (CUDA
  // reports these at once): configuration, the kernel's own limits, and the
  // cluster it asks for (0s: none; see checkCluster).
  Status checkLaunch(const KernelRecord& k, dim3 grid, dim3 block, size_t shmem, int device,
                     dim3 cluster = dim3(0, 0, 0));
  // Launch with the packed parameter block. `cooperative`: every block
  // resident at once (cudaLaunchCooperativeKernel); a grid larger than the
  // device holds fails here with cudaErrorCooperativeLaunchTooLarge.
  Status launch(const KernelRecord& k, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream,
                bool ptsz, bool cooperative = false, dim3 cluster = dim3(0, 0, 0));
  // Blocks of `k` one multiprocessor of `device` holds at once (the server's
  // occupancy answer, cached per block size and shared memory).
  Result<int> blocksPerMultiprocessor(const KernelRecord& k, int device, int block_threads, size_t shmem);
  // A cooperative grid of `blocks` fits on `device` at once.
  Status checkCooperative(const KernelRecord& k, int device, uint64_t blocks, int block_threads, size_t shmem);

 private:
  Runtime() = default;
  // The cluster a launch asks for (0s: none) fits the kernel (`lim`) and the
  // grid, as the driver decides (cudaErrorInvalidClusterSize;
  // cudaErrorNotSupported where the device has no clusters).
  Status checkCluster(const KernelRecord& k, const LaunchLimits& lim, dim3 grid, dim3 cluster, int device);
  // atexit: flush and close the connection before the libraries it uses
  // (OpenSSL) clean up; later calls get cudaErrorCudartUnloading.
  static void shutdownAtExit();
  static void atForkChild();

  // Finds the server `msg` goes to and puts its device fields in that
  // server's numbering.
  Result<Connection*> route(capnp::MessageBuilder& msg, int device);
  // The device of the pointer, event or object a request names, or -1.
  int deviceNamed(wire::Request::Reader r);
  // Tells part `part`'s server host function `id` is done.
  void hostFuncDone(uint64_t id, size_t part);

  std::mutex conn_mu_;
  std::unique_ptr<ServerSet> servers_;
  std::atomic<ServerSet*> servers_ptr_{nullptr};
  Status conn_error_;
  bool conn_tried_ = false;
  std::atomic<bool> exiting_{false};
  // This process is a fork() child of the one that made the connection.
  std::atomic<bool> forked_{false};
  std::atomic<bool> conn_attempted_{false};
  // A kernel fault (illegal address, assert, trap): sticky, as on a GPU.
  std::atomic<int> sticky_{0};
  ClientConfig cfg_;
  unsigned device_flags_ = 0;
  std::mutex limits_mu_;
  std::map<std::pair<int, int>, size_t> limits_;  // (device, cudaLimit) -> value set
  std::shared_mutex launch_limits_mu_;  // read on every launch
  std::map<std::pair<uint32_t, int>, LaunchLimits> launch_limits_;  // (kernel, device)
  std::map<std::tuple<uint32_t, int, int, size_t>, int> occupancy_;  // (kernel, device, threads, shmem); launch_limits_mu_

  std::shared_mutex reg_mu_;
  std::deque<ModuleRecord> modules_;
  std::deque<KernelRecord> kernels_;
  std::deque<VarRecord> vars_;
  std::unordered_map<const void*, uint32_t> kernel_by_host_;
  std::unordered_map<const void*, uint32_t> var_by_host_;
  std::mutex ship_mu_;

  std::shared_mutex handle_mu_;
  struct StreamState {
    int device;
    unsigned flags;
    int priority;
  };
  std::unordered_map<uint32_t, StreamState> streams_;
  std::unordered_map<uint32_t, int> events_;
  std::atomic<uint32_t> next_stream_{1}, next_event_{1};
  // Moves on whenever a stream or event is removed (under handle_mu_): the
  // threads' caches of handles they found valid (runtime.cc) lapse.
  std::atomic<uint64_t> handle_gen_{0};

  std::mutex host_fn_mu_;
  std::unordered_map<uint64_t, std::pair<void (*)(void*), void*>> host_fns_;
  uint64_t next_host_fn_ = 1;
  struct Gate {
    uint64_t opener = 0, waiter = 0;
    size_t opener_part = 0, waiter_part = 0;
    bool opened = false, arrived = false;
  };
  // While gates are pending: opens those whose opener's server is lost.
  void watchGates();
  bool gate_watch_ = false;  // host_fn_mu_
  std::unordered_map<uint64_t, std::shared_ptr<Gate>> gates_;  // by both host function ids; host_fn_mu_

  std::shared_mutex mem_mu_;
  struct Range {
    uint64_t size;
    int device;
    unsigned flags;
    bool reserved = false;  // device memory whose range DeviceRanges holds for it
  };
  DeviceRanges device_ranges_;
  std::map<uint64_t, Range> device_allocs_;
  std::map<uint64_t, Range> pinned_;
};

// Handle encodings: a recognisable tag so a stray pointer is rejected, and the
// id in the low bits.
inline constexpr uint64_t kStreamTag = 0x7267'7073'0000'0000ull;  // "rgps"
inline constexpr uint64_t kEventTag = 0x7267'7065'0000'0000ull;   // "rgpe"
inline constexpr uint64_t kKernelTag = 0x7267'706b'0000'0000ull;  // "rgpk"
inline constexpr uint64_t kLibraryTag = 0x7267'706c'0000'0000ull;  // "rgpl"

}  // namespace rgpu::client
