// One client session, served by one worker process.
//
// Threads: the dispatch thread (run()) reads frames, validates every handle,
// pointer and size against the session's tables, and calls the Backend. Replies
// to calls that wait for stream work (synchronize, device-to-host copies) are
// sent later from backend threads, so a blocking call from one client thread
// never stalls the calls of its other threads. Replies may be written by any
// thread (the Outbox serialises frames).
//
// Requests must arrive numbered 1, 2, 3, ...: any other sequence number (a
// replayed or reordered frame) ends the session with a goodbye naming it.
//
// Resume: when client and server agree on it (Hello.resume, [session]
// resume_grace_ms > 0, a worker started by the daemon), a dropped connection
// does not end the session. The worker keeps its state for the grace period;
// a resume thread takes the sockets the daemon hands over (ResumeSource),
// checks TLS, the identity and the resume token, and the dispatch thread
// carries on over the new connection after telling the client the last
// request it dispatched (the client replays the rest; the Outbox resends the
// replies and notifications the client lacks).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "common/frame_io.h"
#include "common/stripes.h"
#include "common/tls.h"
#include "protocol/rgpu.capnp.h"
#include "server/backend/allocation_table.h"
#include "server/backend/array_table.h"
#include "server/backend/backend.h"
#include "server/checkpoint/checkpoint_stream.h"
#include "server/checkpoint/device_image.h"
#include "server/session/outbox.h"
#include "server/pool/pool_link.h"
#include "server/config/server_config.h"

namespace rgpu::server {

class StagingPool;

// Builds the session's backend over the host devices the pool placed it on.
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const Placement& placement)>;

// Where a resumed client's new connection comes from: the daemon passes the
// socket over `fd` (SCM_RIGHTS) and the session completes TLS with `tls`.
struct ResumeSource {
  int fd = -1;  // the session owns it; -1: this session cannot be resumed
  common::TlsContext* tls = nullptr;  // outlives the session
  std::string id;  // the random resume id the daemon routes by (kResumeIdBytes); "": no resume
};

// Resume handshakes (TLS and the Hello) one session runs at once; a socket
// handed over past it is closed. Each is bounded by the handshake timeout.
inline constexpr int kMaxResumeHandshakes = 4;

// The server acknowledges dispatched requests (so the client can drop its
// copies) after this many of them, or after kAckEveryBytes of them (frames
// and bulk), when no reply has done so already. Each acknowledgement costs
// the worker a write and the client a wake-up of its receiver, which then
// holds the batch lock while it drops the copies, so a stream of
// asynchronous calls pays for each (docs/architecture.md: every 1,024
// requests was too often). Once the worker has caught up, the client keeps
// less than kAckEveryBytes.
inline constexpr uint64_t kAckEveryRequests = 16384;
// (1 MiB: a client waits for the acknowledgement of each large bulk payload it
// did not copy, see client/connection.cc.)
inline constexpr uint64_t kAckEveryBytes = 1ull << 20;
// Replies whose bulk payload is at least this large go striped over the
// session's stripe connections, when it has any (common/stripes.h).
inline constexpr uint64_t kStripeReplyMinBytes = 4ull << 20;

class Session {
 public:
  // `pool` outlives the session. The backend is built once the pool has
  // admitted the client (monitor sessions — rgpu-smi — get none).
  Session(std::unique_ptr<common::TlsConnection> conn, const ServerConfig& cfg, BackendFactory make_backend,
          PoolLink& pool, uint64_t session_id, ResumeSource resume = {});
  ~Session();

  // Authenticates the client, then serves it until it leaves or the connection
  // fails. Returns ok on a clean goodbye.
  Status run();
  // Ends the session from another thread (SIGTERM): the client is told `why`
  // in a goodbye (so it does not try to resume) and run() returns.
  // `code`: the error the client's later calls get (0: devices unavailable).
  void stop(const std::string& why, int code = 0);
  const std::string& identity() const { return identity_; }
  // The backend cannot be torn down (a kernel past the watchdog that the GPU
  // cannot stop): the worker must exit instead of destroying the session.
  bool backendWedged() const { return wedged_.load(); }

  // A session moved to this worker from another (session_checkpoint.cc,
  // docs/migration.md): restore() takes its state from a checkpoint (in
  // place of run()'s handshake; the client is away meanwhile), and
  // runRestored() serves it from the client's resume on.
  // `placed`: the placement on this server of a session moved in from
  // another member (its devices, quota and priority here; as many devices
  // as the checkpoint holds); null: the checkpoint's own (a move between
  // workers of one daemon). A session moved in keeps the id its client
  // knows (client_session_id_) beside this worker's --session-id.
  Status restore(CheckpointReader& in, const Placement* placed = nullptr);
  // Before restore(): a pre-copy's base (session_precopy.cc), placed on the
  // devices of `placed` (for a move between workers of one daemon, the same
  // ones) while the program still runs elsewhere.
  Status prerestore(CheckpointReader& in, const Placement& placed);
  Status runRestored();
  // The session lives on in another worker: this one ended without a word
  // to the client or the pool.
  bool moved() const { return moved_; }

 private:
  Status handshake();
  Status serve();
  // What run() and runRestored() do once the session is over.
  Status endRun(Status s);
  // Reads and dispatches frames from `conn` until it fails or the client says
  // goodbye (ok). A protocol violation sets fatal_.
  Status serveConnection(common::TlsConnection& conn);
  // After a lost connection: waits up to the grace period for a validated new
  // one and takes it up.
  Status awaitResume(const Status& why);
  // The resume thread: takes sockets from the daemon and validates each on
  // a thread of its own (resumeHandshake), kMaxResumeHandshakes at most.
  void acceptResumes();
  void resumeHandshake(int fd);
  // session_stripes.cc. A validated Hello that asks to join as a stripe: its
  // Welcome, or a refusal.
  void joinStripe(std::unique_ptr<common::TlsConnection> conn, uint32_t generation, uint64_t hello_seq);
  // `conn` is the session's main connection from now on (its Welcome is
  // about to go out): stripes may join it. Returns its generation.
  uint32_t takeUpConnection(const common::TlsConnection& conn);
  void stopResumeThread();
  // session_checkpoint.cc: moving the session to another worker.
  struct MoveRequest {
    int fd = -1;          // the checkpoint file, ours to close
    std::string key_hex;  // its key (fileKeyHex)
    bool against_base = false;  // the new worker holds this session's pre-copy base
  };
  // kForward: committed to another member; this worker answers the
  // client's resumes with a redirect there (forward_) before it ends.
  enum class Verdict { kNone, kCommit, kAbort, kForward };
  // Why the session cannot be checkpointed now; "" when it can.
  std::string notCheckpointable();
  // Waits until the work queued on every device of the session has run.
  Status drainForCheckpoint();
  DeviceImage deviceImage() const;
  DeviceImageLimits imageLimits() const;
  // The compute capability (major * 10 + minor) a device needs to run every
  // module the session loaded (0: none), for a move to another member.
  uint32_t modulesNeedComputeCapability() const;
  Status writeCheckpoint(CheckpointWriter& out);
  // In awaitResume: writes the checkpoint and waits for the daemon's
  // verdict; true when the session moved (this worker ends).
  bool checkpointForMove(MoveRequest req);
  Verdict awaitVerdict();
  // Moved to another member: a validated resume (or stripe join) gets a
  // Welcome sending it there instead; true when `conn` was answered so.
  bool forwardResume(common::TlsConnection& conn, bool stripe, uint64_t hello_seq);
  // Moved to another member: waits until a resuming client was sent there,
  // the daemon closed the handoff socket, or the grace period passed.
  void awaitForwarded();
  // session_precopy.cc: the daemon asks for a pre-copy into `fd` (the resume
  // thread); the dispatch thread takes the allocations between two requests
  // (startPrecopy) and a thread of its own copies them as the program runs.
  void requestPrecopy(int fd, const std::string& key_hex);
  void startPrecopy();
  void joinPrecopy();
  // A message to the daemon on the handoff socket.
  void tellDaemon(const std::string& msg);
  // The user a connection authenticates as (certificate CN or token), or "".
  std::string authenticate(const common::TlsConnection& conn, const std::string& token) const;
  // Handles one request through its handler (handlers()); returns non-ok
  // only for errors that end the session (transport failure). Call errors go
  // back to the client.
  Status dispatch(const protocol::FrameHeader& h, wire::Request::Reader req);
  // The handler of each request kind, by its wire::Request union ordinal; null: unknown.
  using Handler = Status (Session::*)(const protocol::FrameHeader& h, wire::Request::Reader req);
  using Handlers = std::array<Handler, 96>;  // (more than the union's ordinals: handlers() asserts it)
  static const Handlers& handlers();
  // The handlers, one per request kind, in the file of their subsystem.
  Status onPing(const protocol::FrameHeader& h, wire::Request::Reader req);
  // session_memory.cc
  Status onMalloc(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onFree(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemcpyHtoD(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemcpyDtoH(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemcpyDtoD(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemcpyPeer(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemset(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemset2D(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemcpy2D(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onMemGetInfo(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onPointerAttributes(const protocol::FrameHeader& h, wire::Request::Reader req);
  // session_streams.cc: streams, events, devices, host functions
  Status onStreamCreate(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onStreamDestroy(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onStreamSynchronize(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onStreamQuery(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onStreamWaitEvent(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onEventCreate(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onEventRecord(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onEventSynchronize(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onEventQuery(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onEventElapsedTime(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onEventDestroy(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onDeviceSynchronize(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onDeviceReset(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onHostFuncEnqueue(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onHostFuncDone(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onSetLimit(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status setMallocHeap(const protocol::FrameHeader& h, int dev, uint64_t bytes);
  // session_modules.cc: modules, kernels, variables, launches
  Status onModuleLoad(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onModuleUnload(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onFunctionRegister(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onVarRegister(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onSymbolAddress(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onLaunchKernel(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onFuncGetAttributes(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onFuncSetAttribute(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onOccupancy(const protocol::FrameHeader& h, wire::Request::Reader req);
  // session_graphs.cc: CUDA graphs, kept instantiated and launched in one message
  Status onGraphCreate(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onGraphLaunch(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onGraphDestroy(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onConditionalHandleCreate(const protocol::FrameHeader& h, wire::Request::Reader req);
  // What runs once memory (an allocation, an array) was given back: credits
  // `charge` to the user's quota on `phys` and answers request `seq` (an
  // asynchronous free: records its error instead).
  Done freed(uint64_t seq, bool async, int phys, uint64_t charge);
  // session_arrays.cc: CUDA arrays, copies with them, texture and surface objects
  Status onArrayCreate(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onArrayDestroy(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onCopy3D(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onTextureCreate(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onTextureDestroy(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onSurfaceCreate(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onSurfaceDestroy(const protocol::FrameHeader& h, wire::Request::Reader req);
  // Runs the nodes of a launched graph on `key`; `all` holds its host-to-device bytes.
  void runGraph(const protocol::FrameHeader& h, const struct SessionGraph& g, StreamKey key,
                capnp::List<uint64_t>::Reader host_funcs, const Staging& all);
  // Launches `g` as the backend's native graph, (re)building it first where
  // needed; false when it cannot be one (the caller runs it node by node).
  // `host_funcs` and `all` as for runGraph (`all` is taken only when it returns true).
  bool launchNative(const protocol::FrameHeader& h, struct SessionGraph& g, StreamKey key,
                    capnp::List<uint64_t>::Reader host_funcs, Staging& all);
  // Builds the backend's native graph of `g` (see session_graphs.cc).
  void buildNative(const protocol::FrameHeader& h, struct SessionGraph& g);
  // Drops the backend's native graph of `g`, if any.
  void dropNative(struct SessionGraph& g);
  // A checkpoint's copy of the graphs (their messages as sent; native graphs
  // are made again at their next launch), and taking it up (session_graphs.cc).
  Status saveGraphs(CheckpointWriter& out) const;
  Status loadGraphs(CheckpointReader& in);
  // cudaDeviceReset: the device's graphs go.
  void forgetGraphs(int device);
  // Queues host function `id` (the client runs it) on `key`.
  Status enqueueHostFunc(StreamKey key, uint64_t id);
  // Host function `id` is pending (max_pending_host_funcs); runHostFunc asks
  // the client to run it and returns once it has (or the session is closing).
  Status reserveHostFunc(uint64_t id);
  void runHostFunc(uint64_t id);
  // (session_graphs.cc) The answer of graph launch `seq`: its device-to-host
  // bytes when `replies` (a synchronous launch), else only its error, recorded.
  ReadDone graphAnswer(uint64_t seq, bool replies);
  // One device-to-host node's bytes of graph launch `seq`, ahead of its reply.
  void sendGraphOutput(uint64_t seq, uint64_t offset, const uint8_t* data, uint64_t size);
  // A staging buffer of `size` bytes from the session's budget; null past it.
  Staging stage(uint64_t size);
  // (session.cc)
  Status onPoolStatus(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onPoolMembers(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onSessionMove(const protocol::FrameHeader& h, wire::Request::Reader req);
  // session_blas.cc: cuBLAS and cuBLASLt calls.
  Status dispatchBlas(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onRandFill(const protocol::FrameHeader& h, wire::Request::Reader req);  // (session_rand.cc)
  // session_fft.cc: cuFFT plans' work areas, transforms and their end.
  Status onFftPlan(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onFftExec(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onFftRelease(const protocol::FrameHeader& h, wire::Request::Reader req);
  // session_solver.cc: cuSOLVER's dense routines and their workspace sizes.
  Status onSolver(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onSolverBufferSize(const protocol::FrameHeader& h, wire::Request::Reader req);
  // session_dnn.cc: cuDNN's legacy operations and their sizes.
  Status onDnn(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onDnnSize(const protocol::FrameHeader& h, wire::Request::Reader req);
  // session_sparse.cc: cuSPARSE's SpMV and SpMM and their buffer sizes.
  Status onSparse(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status onSparseBufferSize(const protocol::FrameHeader& h, wire::Request::Reader req);
  // Each range lies in one of the session's allocations on `device` (a
  // library call's matrices, vectors and buffers); else the first that does
  // not, named (session_solver.cc).
  Status checkRanges(const std::vector<common::DeviceRange>& ranges, int device) const;
  // A request that carries no bulk bytes must have none (else the stream position is lost).
  Status bulkNotExpected(const protocol::FrameHeader& h) const;
  // A kernel or a variable may be registered: its module exists and the session has room.
  Status canRegister(uint64_t module) const;
  // A copy to the device: a synchronous one (cudaMemcpy) is answered once the
  // copy is done, with any error of the work before it, as NVIDIA's returns.
  void finishCopyIn(const protocol::FrameHeader& h, StreamKey key, Status s);
  // Device memory is accounted in cudaMalloc's 256-byte granules.
  static uint64_t chargedBytes(uint64_t size) { return (size + 255) / 256 * 256; }
  // Reads the request's bulk bytes into a staging buffer (`into`), or skips
  // them (`into` null). Over the session's staging budget *into stays null
  // (the bytes are skipped): the caller answers stagingRefused(). Non-ok
  // only when the stream position is lost.
  Status consumeBulk(const protocol::FrameHeader& h, uint64_t expected, Staging* into);
  Status stagingRefused(uint64_t bytes) const;

  using Fill = std::function<void(wire::Reply::Builder&)>;
  // Sends a reply (sync request) or records the error (async request).
  void finish(const protocol::FrameHeader& h, const Status& s, const Fill& fill = nullptr);
  void sendReply(uint64_t seq, const Status& s, const Fill& fill, const uint8_t* bulk = nullptr,
                 uint64_t bulk_len = 0, const OnWire& on_wire = nullptr);
  // A ReadDone that sends the result as the reply to `seq`.
  ReadDone replyWith(uint64_t seq) {
    return [this, seq](Status st, const uint8_t* d, uint64_t n, const OnWire& w) { sendReply(seq, st, nullptr, d, n, w); };
  }
  void recordAsyncError(const Status& s);
  void sendNotify(const std::function<void(wire::Notify::Builder&)>& fill, const uint8_t* bulk = nullptr,
                  uint64_t bulk_len = 0);

  // Connects the backend's callbacks to this session.
  void attachBackend(std::unique_ptr<Backend> backend);
  // Sends the session's usage to the pool at most every 250 ms (`force`: now).
  void reportUsage(bool force);
  // The pool's (physical) index of session device `device`.
  int physical(int device) const { return placement_.devices[static_cast<size_t>(device)]; }
  Status checkStream(wire::StreamRef::Reader s, StreamKey& key) const;
  Status checkDevice(int device) const;
  // Drops a module with its kernels and variables from the session's tables
  // (the backend's copy goes separately).
  void forgetModule(uint32_t id);
  // ok for a registered kernel that can run; else why not.
  Status usableFunction(uint32_t id) const;

  // Stripe connections of the current main connection (common/stripes.h):
  // joined through the resume thread (joinStripe), bound to the connection
  // serveConnection reads, cleared when it is lost. Declared before the
  // Outbox, which writes over them, so that they outlive it.
  common::Stripes stripes_;
  Outbox outbox_;
  common::FrameReader* reader_ = nullptr;  // the dispatch thread's reader, during serve()
  const ServerConfig& cfg_;
  BackendFactory make_backend_;
  PoolLink& pool_;
  Placement placement_;
  bool monitor_ = false;  // rgpu-smi: pool status only, no backend
  std::string redirected_;  // the pool sent the client to this member ("name at host:port"): no session here
  std::unique_ptr<LaunchGate> gate_;  // before backend_: outlives it
  std::unique_ptr<Backend> backend_;
  std::atomic<uint64_t> calls_{0}, bytes_in_{0}, bytes_out_{0}, errors_{0};
  std::chrono::steady_clock::time_point last_usage_report_{};
  uint64_t session_id_;
  std::string identity_;
  std::shared_ptr<StagingPool> staging_;  // shared: buffers in flight return to it after we are gone


  AllocationTable allocs_;
  ArrayTable arrays_;  // arrays, texture and surface objects
  std::unordered_map<uint32_t, int> streams_;   // id -> device
  std::unordered_map<uint32_t, int> events_;    // id -> device
  std::unordered_map<uint32_t, int> modules_;   // id -> device
  // What a checkpoint needs to make them again (session_checkpoint.cc):
  // each stream's flags and priority, each event's flags, each loaded
  // module's image. Entries go with their object.
  std::unordered_map<uint32_t, std::pair<uint32_t, int32_t>> stream_options_;
  std::unordered_map<uint32_t, uint32_t> event_flags_;
  std::unordered_map<uint32_t, std::string> module_images_;
  std::map<int, uint64_t> malloc_heap_charge_;    // device -> quota charged for its cudaLimitMallocHeapSize
  std::unordered_map<uint32_t, Status> module_errors_;  // modules that failed to load, and why
  struct Kernel {
    uint32_t module;
    uint32_t param_bytes;
    Status unusable;  // why it cannot run (its module failed to load, ...): launches fail with it
    std::string name;  // as registered (a checkpoint registers it again)
    std::vector<std::pair<int32_t, int32_t>> attributes;  // cudaFuncSetAttribute calls that took, in order
  };
  std::unordered_map<uint32_t, Kernel> functions_;
  struct Var {
    uint32_t module;
    std::string name;
    uint64_t size;
    uint64_t addr;  // 0 until resolved
  };
  std::unordered_map<uint32_t, Var> vars_;
  // Instantiated graphs (session_graphs.cc) and their nodes over all of them.
  std::unordered_map<uint32_t, std::shared_ptr<struct SessionGraph>> graphs_;
  // Conditional node handles the backend made for the session (they live as
  // long as it): the only ones its graphs may name.
  // (handle -> its device, which a checkpoint records)
  std::unordered_map<uint64_t, int> cond_handles_;
  uint64_t graph_nodes_ = 0;
  // While a graph's node runs: the launch's stream, which every stream field
  // of the node's request names (checkStream answers it).
  const StreamKey* graph_stream_ = nullptr;
  // While a native graph is being built (on the dispatch thread): where
  // finish() puts the first error of a node, instead of reporting it.
  Status* graph_build_ = nullptr;
  std::thread::id graph_build_thread_;
  // Native graphs are rebuilt when this changes: an allocation went, a module
  // was unloaded or a kernel's attributes changed since they were made.
  uint64_t graph_epoch_ = 0;
  uint64_t graphEpoch() const { return allocs_.generation() + graph_epoch_; }

  std::mutex async_mu_;
  Status async_error_;  // first unreported error of an asynchronous call
  Status sticky_;       // a kernel fault: every later call fails with it
  std::atomic<bool> has_sticky_{false};
  std::atomic<bool> fault_output_flushed_{false};  // flushOutput() ran before the first fault reply  // sticky_ is set: checked per request without the lock

  // Host functions waiting for the client to run them.
  std::mutex host_mu_;
  std::condition_variable host_cv_;
  std::unordered_set<uint64_t> host_pending_;
  bool closing_ = false;

  // Sequencing and resume (the dispatch thread's, but for the resume state).
  uint64_t next_seq_ = 1;          // the sequence number the next request must carry
  // The last timed request (kFlagTimed; rgpu-bench --breakdown): its sequence
  // number, and when it was read whole and its handler started (monotonic
  // ns), written by the dispatch thread before it publishes the number.
  std::atomic<uint64_t> timed_seq_{0};
  uint64_t timed_read_ns_ = 0, timed_dispatch_ns_ = 0;
  uint64_t unacked_requests_ = 0, unacked_bytes_ = 0;  // dispatched since the last acknowledgement
  bool fatal_ = false;             // a protocol violation: the session ends, no resume
  bool bye_ = false;               // the client said goodbye: an orderly end
  bool resume_ = false;            // agreed in the handshake
  std::atomic<bool> stopped_{false};  // stop() was called
  std::atomic<bool> wedged_{false};   // the backend's fatal sink fired
  std::thread::id dispatch_thread_;    // replies it sends must never wait for the client
  std::string resume_token_;
  ResumeSource resume_source_;
  int resume_stop_fd_ = -1;        // eventfd: ends the resume thread
  std::thread resume_thread_;
  std::mutex resume_mu_;
  std::string stop_reason_;  // the first stop()'s why (resume_mu_)
  std::condition_variable resume_cv_;
  bool resume_closed_ = false;      // resume_mu_: the daemon closed the handoff socket
  struct Pending {
    std::unique_ptr<common::TlsConnection> conn;
    uint64_t replies = 0, notifications = 0;
  } pending_;                       // a validated new connection, for the dispatch thread
  std::optional<MoveRequest> move_request_;  // resume_mu_: the daemon asked for a checkpoint
  Verdict verdict_ = Verdict::kNone;          // resume_mu_: the daemon's word on a move
  bool moved_ = false;                        // the dispatch thread's: the move was committed
  // Pre-copy (session_precopy.cc).
  struct PrecopyRequest {
    int fd = -1;
    std::string key_hex;
  };
  std::optional<PrecopyRequest> precopy_request_;  // resume_mu_
  std::atomic<bool> precopy_wanted_{false};
  std::thread precopy_thread_;                      // the dispatch thread's
  std::unique_ptr<PrecopyBase> precopy_base_;       // written by that thread; read once it is joined
  std::vector<PrecopyRange> preplaced_;             // a restorer's: what prerestore() placed
  bool prerestored_ = false;
  struct Forward {
    std::string address, member;  // where the session went (host:port, member name)
    bool told = false;            // a resuming client was sent there
  } forward_;                     // resume_mu_ (set with Verdict::kForward)
  // The session id the client knows: this worker's, or for a session moved
  // in from another member, the id it had there.
  uint64_t client_session_id_ = 0;
  uint64_t gpu_ns_base_ = 0;  // kernel time before the session moved to this worker
  // A join names the generation of the main connection it belongs to
  // (stripes_); resume_mu_ guards the generation, whether a main connection
  // is live, and the joins themselves.
  uint32_t generation_ = 1;
  bool live_ = false;
};

}  // namespace rgpu::server
