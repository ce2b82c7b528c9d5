// The seam between a session's dispatcher and a GPU (real or simulated).
//
// One Backend instance serves one session (one worker process). The session has
// already validated every pointer, size and handle against its own tables
// before calling in, so a Backend may trust its arguments. Stream-ordered
// operations are enqueued and return at once; errors found while executing them
// are handed to the async error sink. Completion callbacks run on a backend
// thread and must not block for long.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/curand_cpu.h"
#include "common/fft_plan.h"
#include "common/solver_args.h"
#include "common/sparse_args.h"
#include "common/dnn_args.h"
#include "common/status.h"
#include "server/backend/blas.h"

namespace rgpu::server {

using DevPtr = uint64_t;

struct StreamKey {
  uint32_t id = 0;  // 0: the legacy default stream of `device`
  int device = 0;
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct DeviceDescription {
  std::string name;
  std::string prop;              // cudaDeviceProp bytes (1008 in CUDA 13)
  std::vector<int32_t> attributes;  // by cudaDeviceAttr
  uint64_t total_mem = 0;
  int major = 0, minor = 0, sm_count = 0;
  std::string uuid;  // 16 bytes
};

struct FunctionAttributes {
  uint64_t shared_size = 0, const_size = 0, local_size = 0;
  int max_threads_per_block = 1024;
  int num_regs = 0;
  int ptx_version = 0;
  int binary_version = 0;
  int max_dynamic_shared = 48 * 1024;
  int preferred_carveout = -1;
  // Thread-block clusters: the kernel's own cluster (__cluster_dims__; 0s: none),
  // whether it runs in clusters only, and the cudaFuncSetAttribute settings.
  int cluster_x = 0, cluster_y = 0, cluster_z = 0;
  bool cluster_must_be_set = false;
  int non_portable_cluster = 0;
  int cluster_policy = 0;
};

// A module-scope variable. A __managed__ variable must be paged by the client
// (client/managed.h) with all bytes of the pages it lies on: where the backend
// gives it pages of its own (the sim), `managed_size` is 0; where it packs the
// module's managed variables into one managed allocation (the driver), that
// allocation is [managed_base, managed_base + managed_size), holding `addr`.
struct GlobalVar {
  DevPtr addr = 0;
  uint64_t size = 0;
  DevPtr managed_base = 0;
  uint64_t managed_size = 0;
};

struct LaunchConfig {
  Dim3 grid, block;
  uint64_t shared_mem = 0;
  // Every block resident at once (cudaLaunchCooperativeKernel); a grid larger
  // than the device holds at once fails with cudaErrorCooperativeLaunchTooLarge.
  bool cooperative = false;
  // Thread-block clusters (cudaLaunchAttributeClusterDimension); 0s: the
  // kernel's own (__cluster_dims__), or none. The backend checks them: each
  // divides the grid, at most 8 blocks (16 where the kernel allows
  // non-portable sizes), only on compute capability 9.0 and later, else
  // cudaErrorInvalidClusterSize (cudaErrorNotSupported before 9.0).
  Dim3 cluster{0, 0, 0};
};

// CUDA arrays, textures and surfaces (server/backend/array_table.h checks every
// field before a backend sees it). Array formats: `channels` of `bits` each
// (cudaChannelFormatKind `kind`: 0 signed, 1 unsigned, 2 float).
// A channel format: kind 0 signed, 1 unsigned, 2 float; `normalized`: the
// format itself is normalised (cudaChannelFormatKind{Uns,S}ignedNormalized*):
// texture fetches return floats whatever the read mode.
struct ArrayFormat {
  int kind = 2;
  int channels = 1;
  int bits = 32;
  bool normalized = false;
  uint32_t bytes() const { return static_cast<uint32_t>(channels * bits / 8); }
};
// cudaArray flags.
inline constexpr uint32_t kArrayLayered = 0x01, kArraySurfaceLoadStore = 0x02, kArrayCubemap = 0x04,
                          kArrayTextureGather = 0x08;
struct ArraySpec {
  int device = 0;
  ArrayFormat format;
  // Elements; height 0: 1D; depth 0: neither 3D nor layered. Layered: depth
  // counts layers; cubemaps: 6 faces (x cubes when layered).
  uint64_t width = 1, height = 0, depth = 0;
  uint32_t flags = 0;
  uint32_t levels = 0;  // a mipmapped array's levels; 0: a plain array (one level)
};
// One side of a 3D copy: the bulk of the request or its reply (packed),
// pitched device memory, or an array's level. x in bytes.
struct CopySide {
  enum Kind : uint8_t { kHost, kDevice, kArray } kind = kHost;
  uint64_t ptr = 0;  // kDevice: the address; kArray: the array's handle
  uint32_t level = 0;
  uint64_t pitch = 0, rows = 0;  // kDevice: bytes between rows, rows between slices
  uint64_t x = 0, y = 0, z = 0;
};
struct Copy3DSpec {
  CopySide src, dst;
  uint64_t width = 0, height = 1, depth = 1;  // bytes, rows, slices
};
// cudaResourceDesc and cudaTextureDesc as the session checked them.
struct TextureSpec {
  int device = 0;
  enum Resource : uint8_t { kArray, kMipmapped, kLinear, kPitch2D } resource = kArray;
  uint64_t array = 0;  // kArray, kMipmapped: the array's handle
  uint32_t level = 0;  // kArray: which level of a mipmapped array it is
  uint64_t ptr = 0;    // kLinear, kPitch2D
  ArrayFormat format;  // kLinear, kPitch2D
  uint64_t size = 0;   // kLinear: bytes
  uint64_t width = 0, height = 0, pitch = 0;  // kPitch2D: elements, rows, bytes
  uint8_t address[3] = {0, 0, 0};  // cudaTextureAddressMode
  bool linear_filter = false, normalized_read = false, srgb = false, normalized_coords = false;
  float border[4] = {0, 0, 0, 0};
  uint32_t max_anisotropy = 0;
  bool mip_linear = false;
  float mip_bias = 0, min_lod = 0, max_lod = 0;
  bool disable_trilinear = false, seamless_cubemap = false;
};

// A byte buffer handed from the session to a stream-ordered copy.
// shared_ptr: the closure that holds it lives in a std::function, which must be
// copyable; ownership is still single (the buffer returns to the session's pool
// when the copy has run).
using Staging = std::shared_ptr<std::vector<uint8_t>>;

using Done = std::function<void(Status)>;
// Runs as a result's frame takes its place on the connection: any frame sent
// after it runs follows that result on the wire.
using OnWire = std::function<void()>;
// A device-to-host result. The receiver sends `data` on to the client and
// runs `on_wire` as it does: only from then on may the backend report the
// operation complete to a query (cudaStreamQuery, cudaEventQuery), whose
// answer would otherwise overtake the data it vouches for — or, reported
// later, say "not ready" to a client that already holds the data.
using ReadDone = std::function<void(Status, const uint8_t* data, uint64_t size, const OnWire& on_wire)>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual int driverVersion() const = 0;
  virtual const std::vector<DeviceDescription>& devices() const = 0;
  // Bit i set: kernels on `device` can use the memory of session device i
  // (what cudaDeviceCanAccessPeer reports). None unless a backend offers it.
  virtual uint64_t peerAccess(int device) const { return 0; }
  // Errors of stream-ordered work, reported at the client's next synchronising call.
  virtual void setAsyncErrorSink(std::function<void(Status)> sink) = 0;

  // Stops the backend's threads: when it returns, no completion callback or
  // sink runs any more (work still queued has run, or been abandoned where
  // the backend can stop it: sim kernels stop at once). Idempotent. The session
  // calls it before destroying the backend, because the callbacks call back
  // into the session and through it into the backend.
  virtual void stopThreads() {}

  // Launch admission (priorities, weights) for kernels; nullptr: none. The
  // gate outlives the backend.
  virtual void setLaunchGate(class LaunchGate* gate) {}

  // Kernel time of this session so far (GPU time per session, for the pool).
  virtual uint64_t gpuTimeNs() const { return 0; }

  // The backend cannot go on: a kernel ran past [limits] kernel_timeout_ms
  // and the device cannot stop it. The session must end; the worker then exits
  // without tearing the backend down (the process's exit frees the GPU).
  virtual void setFatalSink(std::function<void(Status)> sink) {}

  // Device printf output of finished launches, in completion order.
  virtual void setOutputSink(std::function<void(std::string)> sink) {}
  // cudaDeviceSetLimit(cudaLimitPrintfFifoSize): the bytes of device printf
  // output one launch on `device` keeps (the newest). As NVIDIA's, refused
  // with kInvalidValue once a kernel that calls printf has run there. The
  // session has checked `bytes` against [limits] max_printf_fifo_bytes.
  virtual Status setPrintfFifo(int device, uint64_t bytes) = 0;
  // cudaDeviceSetLimit(cudaLimitMallocHeapSize): the device heap kernels'
  // malloc() draws on. As NVIDIA's, refused with kInvalidValue once a kernel
  // that calls malloc or free has been launched there. The session has
  // charged `bytes` to the user's quota.
  virtual Status setMallocHeap(int device, uint64_t bytes) = 0;
  // Hands any device output not yet delivered to the sink now (the session
  // calls it before it first reports a kernel fault, so an assert's message
  // reaches the client before the error does).
  virtual void flushOutput() {}

  // Memory.
  virtual Result<DevPtr> allocate(int device, uint64_t size) = 0;
  // cudaMallocPitch: `height` rows of `width` bytes at a pitch the device
  // prefers (at most `width` rounded up to 4 KiB); the allocation is pitch * height.
  virtual Result<std::pair<DevPtr, uint64_t>> allocatePitch(int device, uint64_t width, uint64_t height) = 0;
  virtual Status release(DevPtr ptr) = 0;
  virtual Status memInfo(int device, uint64_t& free, uint64_t& total) = 0;

  // Streams and events; ids are the session's (client-chosen, validated).
  virtual Status createStream(StreamKey stream, uint32_t flags, int priority) = 0;
  virtual Status destroyStream(StreamKey stream) = 0;
  virtual Status createEvent(uint32_t id, int device, uint32_t flags) = 0;
  virtual Status destroyEvent(uint32_t id) = 0;

  // Where the bytes of a host-to-device copy on `s` may be written directly,
  // when nothing queued before it on `s` (or on the streams it implicitly
  // waits for) is still pending; nullptr when the copy must be staged.
  // Saves a full extra copy of bulk data in the worker.
  virtual uint8_t* directWriteTarget(StreamKey s, DevPtr dst) { return nullptr; }
  // Whether directWriteTarget ever answers (worth waiting for a stream to go idle).
  virtual bool writesDirectly() const { return false; }

  // Stream-ordered work.
  virtual Status copyToDevice(StreamKey s, DevPtr dst, Staging data, uint64_t size) = 0;
  virtual Status copyFromDevice(StreamKey s, DevPtr src, uint64_t size, ReadDone done) = 0;
  virtual Status copyOnDevice(StreamKey s, DevPtr dst, DevPtr src, uint64_t size) = 0;
  // Between devices, on `s`. With `serialize` (cudaMemcpyPeer), also after all
  // work queued so far on the legacy streams of `src_device` and `dst_device`,
  // and before all work queued there later.
  virtual Status copyPeer(StreamKey s, DevPtr dst, int dst_device, DevPtr src, int src_device, uint64_t size,
                          bool serialize) = 0;
  // 2D: rows of `width` bytes, `height` rows; host side packed (pitch = width).
  virtual Status copy2DToDevice(StreamKey s, DevPtr dst, uint64_t dpitch, Staging data, uint64_t width,
                                uint64_t height) = 0;
  virtual Status copy2DFromDevice(StreamKey s, DevPtr src, uint64_t spitch, uint64_t width, uint64_t height,
                                  ReadDone done) = 0;
  virtual Status copy2DOnDevice(StreamKey s, DevPtr dst, uint64_t dpitch, DevPtr src, uint64_t spitch,
                                uint64_t width, uint64_t height) = 0;
  virtual Status fill(StreamKey s, DevPtr dst, uint8_t value, uint64_t size) = 0;
  virtual Status fill2D(StreamKey s, DevPtr dst, uint64_t pitch, uint8_t value, uint64_t width,
                        uint64_t height) = 0;
  // Rows of `width` bytes (a multiple of `element_size`, 2 or 4) filled with
  // the low `element_size` bytes of `pattern`, repeated.
  virtual Status fillPattern2D(StreamKey s, DevPtr dst, uint64_t pitch, uint32_t pattern, unsigned element_size,
                               uint64_t width, uint64_t height) = 0;
  virtual Status launch(StreamKey s, uint32_t function, const LaunchConfig& cfg, std::string params) = 0;
  virtual Status recordEvent(uint32_t event, StreamKey s) = 0;
  virtual Status waitEvent(StreamKey s, uint32_t event) = 0;
  // Work queued on `waiter` from now on starts after the work queued so far on `waited`.
  virtual Status waitStream(StreamKey waiter, StreamKey waited) = 0;
  // Runs `fn` in stream order; the stream does not proceed until it returns.
  virtual Status hostCall(StreamKey s, std::function<void()> fn) = 0;

  // Native graphs: a backend that can run a graph's device-side work as one
  // unit of its own (the CUDA backend: a CUgraphExec the driver launches
  // whole) says so with nativeGraphs(). Between beginNativeGraph(device) and
  // endNativeGraph(), the stream-ordered calls the session makes (launch,
  // copyOnDevice, copy2DOnDevice, fill, fill2D, fillPattern2D, blas without a
  // host result, ltMatmul, recordEvent, waitEvent, hostCall) are recorded into
  // the graph instead of run, whatever stream they name; any other
  // stream-ordered call fails. A recorded hostCall's `fn` is kept by the graph
  // and runs at each of its launches. endNativeGraph (keep = false: discard)
  // returns the graph's id, or why none could be made (the session then runs
  // the nodes one by one). A native graph bakes in the pointers, kernels and
  // events it was made with: the session rebuilds it whenever memory was
  // freed, a module unloaded or an event destroyed since. Destroying one whose
  // launch is still running is allowed (its resources go when the launch is done).
  //
  // Host copies: a graph made with in_bytes/out_bytes has device buffers of
  // that size (nativeGraphBuffers, while capturing). The session records a
  // host-to-device node as a copy from the input buffer and a device-to-host
  // node as a copy into the output buffer; each launch then copies `in`
  // (in_bytes) into the input buffer before the graph runs and hands the
  // output buffer to `out` after it (with no output buffer, `out` gets no
  // bytes once the graph is done). Launches of one graph run one after the
  // other, whatever streams they are on, so they never share the buffers.
  // `host_bytes`: a buffer in (pinned) host memory, for device-to-host nodes
  // a host node comes after; copyToNativeHost records such a node, and the
  // host node's function reads the bytes from `host` when it runs (a host
  // function may not call the driver; reading host memory it may).
  struct NativeBuffers {
    DevPtr in = 0, out = 0;
    const uint8_t* host = nullptr;
  };
  virtual bool nativeGraphs() const { return false; }
  virtual Status beginNativeGraph(int device, uint64_t in_bytes = 0, uint64_t out_bytes = 0, uint64_t host_bytes = 0) {
    return Status(err::kNotSupported, std::string("native graphs are not available on the ") + name() + " backend");
  }
  virtual NativeBuffers nativeGraphBuffers() const { return {}; }
  virtual Status copyToNativeHost(StreamKey s, uint64_t host_offset, DevPtr src, uint64_t size) {
    return Status(err::kNotSupported, std::string("native graphs are not available on the ") + name() + " backend");
  }
  virtual Result<uint32_t> endNativeGraph(bool keep) {
    return Status(err::kNotSupported, std::string("native graphs are not available on the ") + name() + " backend");
  }
  virtual Status launchNativeGraph(StreamKey s, uint32_t graph, Staging in = nullptr, ReadDone out = nullptr) {
    return Status(err::kNotSupported, std::string("native graphs are not available on the ") + name() + " backend");
  }
  virtual void destroyNativeGraph(uint32_t graph) {}

  // Conditional graph nodes (cudaGraphConditionalHandleCreate, IF/WHILE/SWITCH
  // nodes). A handle names a 32-bit value on the device that kernels set
  // (cudaGraphSetConditional) and conditional nodes read when the stream
  // reaches them. Between beginBody() and endBody(), the stream-ordered device
  // calls the session makes (launch, copyOnDevice, copy2DOnDevice, fill,
  // fill2D, fillPattern2D, conditional) are recorded into a body instead of
  // queued, whatever stream they name; bodies nest. conditional() queues one
  // operation that, when `s` reaches it, reads the handle's value and runs the
  // bodies it picks (type as wire::ConditionalType: 0 if, 1 while, 2 switch),
  // each body's work in order, as one unit of the stream. A while node stops
  // when the session ends or a kernel of its body faults.
  struct Body;
  virtual Result<uint64_t> conditionalHandle(int device) {
    return Status(err::kNotSupported, std::string("conditional graph nodes are not available on the ") + name() +
                                          " backend");
  }
  virtual Status beginBody() {
    return Status(err::kNotSupported, std::string("conditional graph nodes are not available on the ") + name() +
                                          " backend");
  }
  virtual Result<std::shared_ptr<Body>> endBody() {
    return Status(err::kNotSupported, std::string("conditional graph nodes are not available on the ") + name() +
                                          " backend");
  }
  virtual Status conditional(StreamKey s, uint64_t handle, int type, std::vector<std::shared_ptr<Body>> bodies) {
    return Status(err::kNotSupported, std::string("conditional graph nodes are not available on the ") + name() +
                                          " backend");
  }

  // CUDA arrays, textures and surfaces. Handles are the backend's (never
  // 0). A texture or surface object's value may be the same as one of
  // another device's (a driver gives each device's context its own):
  // destroying one names its device too. The session has checked every
  // extent and position against the array (ArraySpec) and every device
  // range against its allocations.
  // Destroying an array, texture or surface waits for nothing: the session
  // calls it once the device's queued work is done (afterDeviceDone).
  virtual Result<uint64_t> createArray(const ArraySpec& spec) {
    return Status(err::kNotSupported, std::string("CUDA arrays are not available on the ") + name() + " backend");
  }
  virtual Status destroyArray(uint64_t array) { return Status(err::kInvalidValue, "no such array"); }
  // Stream-ordered: `in` holds a host source's packed bytes; `out` receives
  // a host destination's.
  virtual Status copy3D(StreamKey s, const Copy3DSpec& copy, Staging in, ReadDone out) {
    return Status(err::kNotSupported, std::string("CUDA arrays are not available on the ") + name() + " backend");
  }
  virtual Result<uint64_t> createTexture(const TextureSpec& spec) {
    return Status(err::kNotSupported, std::string("texture objects are not available on the ") + name() + " backend");
  }
  virtual Status destroyTexture(int device, uint64_t texture) {
    return Status(err::kInvalidValue, "no such texture object");
  }
  virtual Result<uint64_t> createSurface(int device, uint64_t array, uint32_t level) {
    return Status(err::kNotSupported, std::string("surface objects are not available on the ") + name() + " backend");
  }
  virtual Status destroySurface(int device, uint64_t surface) {
    return Status(err::kInvalidValue, "no such surface object");
  }

  // Completion. `done` runs once the work enqueued so far has finished.
  virtual Status whenStreamDone(StreamKey s, Done done) = 0;
  virtual Status whenEventDone(uint32_t event, Done done) = 0;
  virtual Status whenDeviceDone(int device, Done done) = 0;
  // Runs `work` once the work queued so far on `device` is done, then `done`
  // with its result. `work` may block (freeing memory or unloading a module
  // can synchronise the device), so a backend runs it where that stalls
  // neither the completion of other work nor the dispatch thread.
  virtual Status afterDeviceDone(int device, std::function<Status()> work, Done done) {
    return whenDeviceDone(device, [work = std::move(work), done = std::move(done)](Status) { done(work()); });
  }
  virtual Result<bool> streamIdle(StreamKey s) = 0;
  virtual Result<bool> eventDone(uint32_t event) = 0;
  virtual Result<float> elapsedMs(uint32_t start, uint32_t end) = 0;

  // Modules, functions, globals.
  virtual Status loadModule(uint32_t id, int device, const std::string& fatbin) = 0;
  virtual Status unloadModule(uint32_t id) = 0;
  // Binds function id -> (module, mangled name); reports its parameter block size.
  virtual Result<uint32_t> registerFunction(uint32_t id, uint32_t module, const std::string& name) = 0;
  virtual Result<FunctionAttributes> functionAttributes(uint32_t function) = 0;
  virtual Status setFunctionAttribute(uint32_t function, int attr, int value) = 0;
  virtual Result<int> occupancy(uint32_t function, int block_size, uint64_t dynamic_smem) = 0;
  // Address and size of a module-scope variable (allocated on first use).
  virtual Result<GlobalVar> globalAddress(uint32_t module, const std::string& name, uint64_t size_hint) = 0;

  // Checkpoint and restore (server/checkpoint/device_image.h): a restored
  // session's memory must be where the program's pointers say it is. A
  // backend that cannot place memory at a given address says so with
  // kNotSupported, and the session cannot be checkpointed (or moved) there.
  //
  // Why this session's backend state cannot be checkpointed now ("": it can).
  virtual std::string notCheckpointable() const { return name() + " backend sessions cannot be checkpointed yet"; }
  // Device memory [at, at + size) readable in place by a thread other than
  // the streams', while they run (a pre-copy reads a running session's
  // memory: what it reads may be torn, and is checked again later); nullptr
  // when this backend's memory cannot be read so.
  virtual const uint8_t* hostView(DevPtr at, uint64_t size) const { return nullptr; }
  // Copies [at, at + size) of allocation memory of `device` to `out` from a
  // thread other than the dispatcher's, while the session's streams run (a
  // pre-copy: what it reads may be torn, and is checked again later); the
  // bytes of an allocation freed meanwhile read as zeroes. kNotSupported when
  // this backend cannot. By default: through hostView.
  virtual Status readWhileRunning(int device, DevPtr at, uint64_t size, uint8_t* out) {
    const uint8_t* p = hostView(at, size);
    if (!p) return Status(err::kNotSupported, "the " + name() + " backend's memory cannot be read while the session runs");
    std::memcpy(out, p, size);
    return Status::ok();
  }
  // Allocates exactly [at, at + size) on `device` (as allocate() does, at a
  // chosen address): kMemoryAllocation when any of it is taken.
  virtual Status allocateAt(int device, DevPtr at, uint64_t size) {
    return Status(err::kNotSupported, "the " + name() + " backend cannot place memory at an address");
  }
  // Each device's malloc heap (cudaLimitMallocHeapSize, and once a kernel
  // called malloc, the heap's memory and the blocks in use in it), and the
  // same put back in a fresh backend, the heap's memory at `base`.
  struct MallocHeap {
    int32_t device = 0;
    uint64_t limit = 0;
    DevPtr base = 0;  // 0: not made yet
    std::vector<std::pair<uint64_t, uint64_t>> blocks;  // offset from base, length
  };
  virtual Result<std::vector<MallocHeap>> mallocHeaps() const {
    return Status(err::kNotSupported, "the " + name() + " backend cannot report its malloc heaps");
  }
  virtual Status restoreMallocHeap(const MallocHeap& heap) {
    return Status(err::kNotSupported, "the " + name() + " backend cannot restore a malloc heap");
  }
  // conditionalHandle() in a fresh backend, at the address (the handle) a
  // checkpoint recorded; its value comes back with the checkpoint's bytes.
  virtual Status restoreConditionalHandle(int device, uint64_t handle) {
    return Status(err::kNotSupported, "the " + name() + " backend cannot restore a conditional node's handle");
  }
  // A loaded module's variables: where each lives and the allocation that
  // holds it (`base`, `alloc_size`; a __managed__ variable's is page-aligned).
  struct ModuleGlobal {
    std::string name;
    DevPtr addr = 0, base = 0;
    uint64_t size = 0, alloc_size = 0;
  };
  virtual Result<std::vector<ModuleGlobal>> moduleGlobals(uint32_t module) const {
    return Status(err::kNotSupported, "the " + name() + " backend cannot list a module's variables");
  }
  // A completed event's state: recorded or not, and when it completed
  // (CLOCK_MONOTONIC ns, which every process of the host shares: a restored
  // event times against one recorded after the move). Called with the
  // session's work drained.
  struct EventState {
    bool recorded = false;
    int64_t completed_ns = 0;
  };
  virtual Result<EventState> eventState(uint32_t event) const {
    return Status(err::kNotSupported, "the " + name() + " backend cannot report an event's state");
  }
  // createEvent, in the state a checkpoint recorded.
  virtual Status restoreEvent(uint32_t event, int device, uint32_t flags, const EventState& state) {
    if (state.recorded) return Status(err::kNotSupported, "the " + name() + " backend cannot restore a recorded event");
    return createEvent(event, device, flags);
  }
  // A CUDA array's memory. A backend that keeps arrays in its own device
  // memory (the sim) says where (`base`) and how many bytes (its levels as
  // one allocation), and they move as any memory does. One whose arrays the
  // driver keeps (the CUDA backend) says base 0 and the bytes of its levels
  // packed -- level after level, slice after slice, row after row -- which
  // move through readArray and writeArray (offsets and counts in whole
  // elements; called with the session's work drained, or before it runs).
  // createArrayAt, createTextureAt and createSurfaceAt make the objects
  // again under the handles the program holds, the array's memory at `base`
  // (0: the driver's). A restore makes the texture and surface objects in
  // ascending order of their handles, then calls objectsRestored().
  virtual Result<std::pair<DevPtr, uint64_t>> arrayMemory(uint64_t array) const {
    return Status(err::kNotSupported, "the " + name() + " backend cannot checkpoint arrays");
  }
  virtual Status readArray(uint64_t array, uint64_t offset, uint64_t n, uint8_t* out) {
    return Status(err::kNotSupported, "the " + name() + " backend keeps its arrays in device memory");
  }
  virtual Status writeArray(uint64_t array, uint64_t offset, const uint8_t* data, uint64_t n) {
    return Status(err::kNotSupported, "the " + name() + " backend keeps its arrays in device memory");
  }
  virtual Status objectsRestored() { return Status::ok(); }
  // Where a driver places what it makes in memory of its own (module
  // variables, arrays) depends on what it made before: the order in which
  // a module (`array` false) or an array was made, counted over both (0: the
  // backend places them itself). A restore makes them again in that order.
  virtual uint64_t placementOrder(bool array, uint64_t id) const { return 0; }
  virtual Status createArrayAt(uint64_t handle, const ArraySpec& spec, DevPtr base) {
    return Status(err::kNotSupported, "the " + name() + " backend cannot restore arrays");
  }
  virtual Status createTextureAt(uint64_t handle, const TextureSpec& spec) {
    return Status(err::kNotSupported, "the " + name() + " backend cannot restore texture objects");
  }
  virtual Status createSurfaceAt(uint64_t handle, int device, uint64_t array, uint32_t level) {
    return Status(err::kNotSupported, "the " + name() + " backend cannot restore surface objects");
  }
  // loadModule, with the module's variables placed as `at` says (every one
  // of them; their initial values are written over by the restore).
  virtual Status loadModuleAt(uint32_t id, int device, const std::string& fatbin, const std::vector<ModuleGlobal>& at) {
    return Status(err::kNotSupported, "the " + name() + " backend cannot place a module's variables");
  }

  // cuRAND (docs/curand.md): `count` values of generator `f` into [out, ...)
  // in stream order; the session checked the range and the generator type.
  virtual Status randFill(StreamKey s, const common::curand::Fill& f, DevPtr out, uint64_t count) {
    return Status(err::kNotSupported, "cuRAND generators on the " + name() + " backend are not built yet");
  }

  // cuFFT (docs/cufft.md). `plan` is the client's name for a plan, unique in
  // the session: a backend may keep what it makes for it (NVIDIA's plan)
  // until fftRelease(plan), and must make it again from `p` when it has not
  // (a move to a new worker carries none).
  // The device work area the plan's transforms need on `device` (bytes).
  virtual Result<uint64_t> fftWorkSize(int device, uint64_t plan, const common::fft::Plan& p) {
    return Status(err::kNotSupported, "cuFFT on the " + name() + " backend is not built");
  }
  // One transform of `l` (the session checked both ranges, and the work
  // area's `work_size` bytes when `work` is set) in stream order.
  // `direction`: -1 forward, +1 inverse.
  virtual Status fftExec(StreamKey s, uint64_t plan, const common::fft::Plan& p, const common::fft::Layout& l,
                         int direction, DevPtr in, DevPtr out, DevPtr work, uint64_t work_size) {
    return Status(err::kNotSupported, "cuFFT on the " + name() + " backend is not built");
  }
  virtual void fftRelease(int device, uint64_t plan) {}

  // cuSOLVER's dense routines (docs/cusolver.md): the workspace (elements of
  // the call's type) a call of `a` needs on `device`, and one call in stream
  // order (the session checked every range, common::solver::ranges).
  virtual Result<int64_t> solverBufferSize(int device, const common::solver::Args& a) {
    return Status(err::kNotSupported, "cuSOLVER on the " + name() + " backend is not built");
  }
  virtual Status solver(StreamKey s, const common::solver::Args& a) {
    return Status(err::kNotSupported, "cuSOLVER on the " + name() + " backend is not built");
  }

  // cuSPARSE's SpMV and SpMM (docs/cusparse.md): the external buffer (bytes)
  // a call needs on `device`, and one call in stream order (the session
  // checked every range, common::sparse::ranges).
  virtual Result<uint64_t> sparseBufferSize(int device, const common::sparse::Args& a) {
    return Status(err::kNotSupported, "cuSPARSE on the " + name() + " backend is not built");
  }
  virtual Status sparse(StreamKey s, const common::sparse::Args& a) {
    return Status(err::kNotSupported, "cuSPARSE on the " + name() + " backend is not built");
  }

  // cuDNN's legacy operations (docs/cudnn.md): a size (workspace, dropout
  // states or reserve space, bytes) on `device`, and one call in stream
  // order (the session checked every range, common::dnn::ranges).
  virtual Result<uint64_t> dnnSize(int device, common::dnn::Query q, const common::dnn::Args& a) {
    return Status(err::kNotSupported, "cuDNN on the " + name() + " backend is not built");
  }
  virtual Status dnn(StreamKey s, const common::dnn::Args& a) {
    return Status(err::kNotSupported, "cuDNN on the " + name() + " backend is not built");
  }

  // cuBLAS and cuBLASLt (server/backend/blas.h): calls the session has checked, run
  // in stream order. `done`, when set, receives a reduction's result bytes
  // (its result goes back to the client); otherwise errors are asynchronous.
  virtual Status blas(StreamKey s, const BlasArgs& call, ReadDone done) {
    return Status(err::kNotSupported, std::string("cuBLAS is not available on the ") + name() + " backend");
  }
  virtual Status ltMatmul(StreamKey s, const LtArgs& call) {
    return Status(err::kNotSupported, std::string("cuBLASLt is not available on the ") + name() + " backend");
  }
  struct LtAlgo {
    std::string algo;  // cublasLtMatmulAlgo_t bytes
    uint64_t workspace = 0;
    float waves = 0;
  };
  // Algorithms for a matmul (no memory is touched), best first.
  virtual Result<std::vector<LtAlgo>> ltHeuristic(int device, const LtArgs& call, uint32_t requested,
                                                  uint64_t max_workspace) {
    return Status(err::kNotSupported, std::string("cuBLASLt is not available on the ") + name() + " backend");
  }
};

}  // namespace rgpu::server
