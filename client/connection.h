// The client's one TLS connection to its server.
//
// Threads:
//  - application threads call post() (asynchronous calls: appended to a batch
//    and never wait for the network) and call() (synchronous: waits for the
//    reply; other threads keep going meanwhile);
//  - a flusher thread writes batched asynchronous calls, so a burst of launches
//    becomes one TLS record instead of one per call. After each write it naps
//    for kFlusherNap while the next batch gathers (a napping flusher is not
//    woken, unless the batch reaches kNapWakeBytes or takes an urgent frame —
//    an acknowledgement, which the server may be waiting for); only a flusher
//    asleep with nothing to write is woken by the next call. So an
//    asynchronous call waits at most one nap for the wire, or until the next
//    synchronous call, which writes the batch itself (postNow() writes at
//    once: a host function's end, which its stream waits for);
//  - whoever holds the read role reads frames and routes each reply to its
//    waiting caller by sequence number (device-to-host data goes straight
//    into the caller's buffer), and hands host-function notifications to the
//    callback thread. A synchronous caller takes the role while it is free
//    and reads until its own reply has come (no thread hand-off between the
//    reply and the caller); otherwise the receiver thread holds it while
//    frames arrive. The role goes back only with nothing buffered above the
//    socket (read ahead, in OpenSSL), so the receiver can wait for data on
//    the socket without the role. It stays out of the way for kReceiverPark
//    after a caller read (back-to-back calls then wake no other thread)
//    unless someone waits on it (needs_receiver_). Only the role's holder
//    reads the connection or touches the receiving state (frames_,
//    notify_seen_, the ack counters, session_over_); a caller whose read
//    fails leaves the failure in read_failed_ for the receiver, which alone
//    reconnects or ends the session.
// Frames reach the wire in sequence-number order: the sequence number is
// assigned under the batch lock, and write_mu_ is held from taking a batch
// until it is written.
//
// Resume (when the Welcome grants it): every request is kept until the server
// acknowledges it as dispatched (a reply to it or to a later request, or an
// Ack), within `resume_buffer` bytes (callers wait for room beyond it). When
// the connection drops, the receiver reconnects with the resume preamble and
// token within the server's grace period; a replay thread writes the kept
// requests the server had not dispatched, in order, before any new one, while
// the receiver takes the replies and notifications the server resends (late
// duplicates are dropped by sequence number). Calls waiting meanwhile simply
// go on waiting. Past the grace period every call fails, saying why.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/client_config.h"
#include "client/kept_log.h"
#include "common/call_message.h"
#include "common/frame_io.h"
#include "common/stripes.h"
#include "common/sync.h"
#include "common/tls.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::client {

// A decoded reply, owned by the caller.
struct Reply {
  Status status;           // the call's own result (or a transport failure)
  Status async_error;      // an earlier asynchronous call's error, if any
  std::vector<uint64_t> words;  // the raw reply message (capnp words)
  // Inline: rgpu's cuBLAS libraries read replies the runtime received (client/export_table.h).
  wire::Reply::Reader reader() const {
    if (!msg_) msg_ = std::make_unique<capnp::FlatArrayMessageReader>(common::asWords(words), common::readerOptions());
    return msg_->getRoot<wire::Reply>();
  }
 private:
  mutable std::unique_ptr<capnp::FlatArrayMessageReader> msg_;
};

struct Welcome {
  std::string identity;
  std::string backend;
  int driver_version = 0;
  uint64_t session_id = 0;
  uint32_t resume_grace_ms = 0;  // 0: this session does not survive a dropped connection
  struct Device {
    std::string name;
    std::string prop;
    std::vector<int32_t> attributes;
    uint64_t total_mem = 0;
    uint64_t peer_access = 0;  // bit i: kernels here can use device i's memory
  };
  std::vector<Device> devices;
  uint32_t max_stripes = 0;  // stripe connections the server takes (common/stripes.h)
  uint32_t generation = 0;   // which of the session's main connections this is
};

// A member's part of a program the pool spread over several members
// (Welcome.span; docs/pool.md).
struct SpanPart {
  std::string member, address;
  uint32_t count = 0;
};

// Where a timed synchronous call's time went (Connection::setTimed;
// rgpu-bench --breakdown): steady_clock ns (CLOCK_MONOTONIC, one clock for
// the client and a server on the same host).
struct CallTiming {
  uint64_t entered = 0;   // call() began
  uint64_t built = 0;     // its frame was encoded
  uint64_t written = 0;   // the frame was written to the connection
  uint64_t received = 0;  // the reader (the caller itself, or another thread) had the reply
  uint64_t returned = 0;  // the caller was awake with it
  // The server's: the request read whole, its handler started, the reply built.
  uint64_t server_read = 0, server_dispatch = 0, server_replied = 0;
};

// The resume preamble naming a session's 16-byte resume id (the daemon's
// routing, server/daemon/daemon.h), and the TLS settings for a connection to
// `host` (plaintext only to loopback).
std::string resumePreamble(const std::string& resume_id);
Result<std::unique_ptr<common::TlsContext>> clientContext(const ClientConfig& cfg, const std::string& host);

// A resume may be sent on to the member a session moved to (a Welcome with
// a redirect, docs/migration.md) at most this often in one reconnection.
inline constexpr int kMaxResumeRedirects = 4;

class Connection {
 public:
  using HostFuncHandler = std::function<void(uint64_t id)>;

  // Connects to the first server of cfg.server that can be reached (a list:
  // "a:1, b:2"), authenticates, follows a pool's redirect once, and starts
  // the I/O threads. When the pool spreads the program's devices over
  // several members instead, it returns null and fills `*span` with them
  // (and `*span_from` with the member that said so); without `span` that is
  // an error.
  static Result<std::unique_ptr<Connection>> open(const ClientConfig& cfg, HostFuncHandler on_host_func,
                                                  std::vector<SpanPart>* span = nullptr,
                                                  std::string* span_from = nullptr);
  // Part `index` of such a span: a session at the member cfg.server names,
  // which takes the client or refuses it (never sends it on).
  static Result<std::unique_ptr<Connection>> openPart(const ClientConfig& cfg, HostFuncHandler on_host_func,
                                                      uint32_t index);
  ~Connection();

  const Welcome& welcome() const { return welcome_; }

  // Asynchronous call: returns once queued (or, with bulk, once the bulk bytes
  // are written: the caller's buffer may be reused afterwards).
  // `pinned`: the bulk is the program's pinned memory (cudaMallocHost,
  // cudaHostRegister) and is neither copied for a replay nor waited on:
  // CUDA's contract is that the program leaves it alone until the stream has
  // done the copy, which the server has then dispatched and no replay needs.
  // A kept request points into it until acknowledged (waitForWritesInto).
  Status post(capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0, bool pinned = false);
  // An asynchronous call that something on the server waits for (a host
  // function's end, which lets its stream go on): written by this thread at
  // once, with whatever is batched before it, not after the flusher's nap.
  Status postNow(capnp::MessageBuilder& msg);
  // Synchronous call: sends, waits for the reply. Reply bulk data (exactly
  // `in_len` bytes) is written to `in`.
  Reply call(capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0, void* in = nullptr,
             uint64_t in_len = 0);
  // Sends a call whose reply (with `in_len` bytes for `in`) is consumed by the
  // reader later; its error surfaces as an asynchronous error.
  Status postExpectingData(capnp::MessageBuilder& msg, void* in, uint64_t in_len);
  // A deferred call like postExpectingData whose request carries `bulk` (kept
  // until the reply, for replay after a resume) and whose reply's bytes are
  // scattered over `parts` in order (a graph launch's device-to-host nodes).
  Status postScatter(capnp::MessageBuilder& msg, std::vector<uint8_t> bulk,
                     std::vector<std::pair<void*, uint64_t>> parts);
  // Waits until no reply of postExpectingData still has to be written into
  // [p, p + len), and no kept pinned request still reads from it (a ping makes
  // the server acknowledge them): before that memory goes back to the
  // program's allocator (cudaFreeHost, cudaHostUnregister), as NVIDIA's
  // runtime synchronises there.
  void waitForWritesInto(const void* p, uint64_t len);

  // Flushes queued calls, closes the connection and stops the I/O threads,
  // quietly (the process is exiting). Idempotent.
  void close();

  // Errors of asynchronous calls the receiver saw in replies to deferred calls.
  Status takeDeferredError();
  // Device printf output received so far and not yet taken. The runtime
  // prints it where NVIDIA's driver flushes its printf buffer (synchronising
  // calls, launches, module loads, host callbacks, reset, exit), not when it
  // happens to arrive, so it interleaves with the program's own output as on a GPU.
  std::string takeDeviceOutput();
  // Non-ok once the connection is lost; every later call fails with it.
  Status broken() const;
  // Where the session is served now (host:port): a session moved to another
  // member of a pool is followed there (docs/migration.md).
  std::string server() const {
    std::lock_guard lock(server_mu_);
    return server_;
  }
  // How often this connection was resumed (tests, diagnostics).
  int resumes() const { return resumes_.load(); }
  // Synchronous calls whose reply their own thread read (the read role;
  // tests, diagnostics).
  uint64_t callerReads() const { return caller_reads_.load(std::memory_order_relaxed); }
  // Batches the flusher thread wrote (tests, diagnostics).
  uint64_t flusherWrites() const { return flusher_writes_.load(std::memory_order_relaxed); }
  // Times the flusher went to sleep, and times a call (or close()) rang it
  // awake: at most once per sleep (tests, diagnostics).
  uint64_t flusherSleeps() const { return flusher_sleeps_.load(std::memory_order_relaxed); }
  uint64_t flusherRings() const { return flusher_bell_.ticket(); }

  // After a write the flusher waits this long for more calls before it
  // writes again or sleeps until woken; a batch that reaches kNapWakeBytes
  // meanwhile wakes it at once. Without the nap a burst of asynchronous
  // calls cost a wake-up (a system call on the posting thread, a context
  // switch) every few calls.
  static constexpr std::chrono::microseconds kFlusherNap{50};
  static constexpr size_t kNapWakeBytes = 64 * 1024;
  // Bytes of requests (and copied bulk) kept for a replay and not yet
  // acknowledged (tests, diagnostics).
  uint64_t keptBytes();
  // Times every synchronous call from now on (the server stamps it too);
  // lastTiming() is the calling thread's last timed call, if any.
  void setTimed(bool on) { timed_.store(on, std::memory_order_relaxed); }
  static bool lastTiming(CallTiming* out);

 private:
  struct Slot {
    std::atomic<int> state{0};  // 0 waiting, 1 done
    std::vector<uint64_t> words;
    Status status;
    void* in = nullptr;
    uint64_t in_len = 0;
    bool deferred = false;  // owned by the receiver (postExpectingData)
    // postScatter: `in` is `scratch`, copied out to `parts` when it lands.
    std::vector<uint8_t> own_bulk, scratch;
    std::vector<std::pair<void*, uint64_t>> parts;
    std::vector<bool> delivered;  // parts that came ahead in a graphOutput notification
    bool timed = false;           // stamp `received` (setTimed)
    uint64_t received = 0;
  };

  using Kept = KeptLog::Entry;

  Connection(std::unique_ptr<common::TlsConnection> conn, std::string server, common::Compression c);
  // Connects to cfg.server and says Hello (`redirected`: the pool sent us);
  // `unreachable`: it could not be reached at all.
  static Result<std::unique_ptr<Connection>> connectOne(const ClientConfig& cfg, bool redirected, bool* unreachable,
                                                        uint32_t span_index = 0);
  // Starts the I/O threads of a connection that has a session.
  void start(HostFuncHandler on_host_func);
  Status handshake(const ClientConfig& cfg);
  // Hello for a new session, or (with `resume`) for taking this one up again.
  void buildHello(capnp::MessageBuilder& msg, const ClientConfig& cfg, bool resume);
  // Queues a frame; returns its sequence number. With `now`, writes the batch
  // (and `bulk`) before returning.
  Status enqueue(capnp::MessageBuilder& msg, uint8_t flags, const void* bulk, uint64_t bulk_len, bool now,
                 Slot* slot, uint64_t* seq_out, bool pinned = false);
  void flusherLoop();
  std::vector<uint8_t> takeBatchLocked();  // write_mu_ and batch_mu_ held
  // Whether a frame just appended to the batch (which held `before` bytes)
  // must wake the flusher; one after which flush_now_ is set (the server may
  // wait for it) also cuts its nap short. If so, marks the flusher woken: the
  // caller rings flusher_bell_ (after releasing batch_mu_ where it can), and
  // no later call rings again. batch_mu_ held.
  bool claimFlusherWakeLocked(size_t before);
  enum class Flusher { kBusy, kIdle, kNapping };
  // The flusher sleeps as `why` until woken or `timeout` passes, batch_mu_
  // released meanwhile.
  void flusherSleepLocked(std::unique_lock<common::AdaptiveMutex>& lock, Flusher why, std::chrono::nanoseconds timeout);
  void receiverLoop();
  // The receiver's reading of the current connection (frames_), called
  // holding the read role: returns why it failed, holding the role again.
  Status receive();
  // Reads one frame from frames_ and handles it (the read role's holder).
  Status readFrame();
  // A synchronous caller reads until `slot` is done, if the read role is
  // free; false when someone else holds it (the caller then waits).
  bool readFor(Slot& slot);
  // Someone waits for frames without reading (a caller without the role, a
  // writer waiting for room): the receiver does not park meanwhile.
  class NeedsReceiver {
   public:
    explicit NeedsReceiver(Connection& c);
    ~NeedsReceiver();
   private:
    Connection& c_;
  };
  void callbackLoop();
  // A graphOutput notification: its bulk straight into the launch's part (the read role).
  Status graphOutput(const protocol::FrameHeader& h, common::FrameReader& reader, uint64_t call, uint64_t offset);
  void fail(const Status& s);
  // A deferred slot is done (its data landed, or never will): forgets its
  // target range and frees it.
  void endDeferred(Slot* slot);
  // A write failed: with resume, the receiver reconnects; else the end.
  Status lost(common::TlsConnection& conn, const Status& s);
  // Reconnects and takes up the session; the new connection, or why not.
  Result<common::TlsConnection*> reconnect(const Status& why);

  // With batch_mu_ held.
  void dropKeptLocked(uint64_t upto);
  Status waitForRoomLocked(std::unique_lock<common::AdaptiveMutex>& lock, uint64_t bytes);
  uint64_t repliesFloorLocked();  // batch_mu_, takes slots_mu_
  // Tells the server what arrived (batch_mu_ held), so it can drop its copies.
  // `stripe_ready`: the client reads that stripe connection from now on.
  void acknowledgeLocked(bool bye = false, uint32_t stripe_ready = 0);

  // connection_stripes.cc. Reads one frame from `conn` within `limit` (a
  // watchdog shuts a silent connection); its message is copied to `words`.
  static Status readFrameWithin(common::TlsConnection& conn, std::chrono::milliseconds limit,
                                protocol::FrameHeader& h, std::vector<uint64_t>& words);
  // Joins up to cfg_.stripes stripe connections to main connection
  // `generation` on a thread of its own (after the previous joiner ends).
  void startStripes(uint32_t generation);
  void joinStripes(uint64_t epoch, uint32_t generation, uint32_t count);
  // The main connection is gone (or the program is exiting): joins for it stop, its stripes close.
  void dropStripes();

  // The current connection. Writers use it under write_mu_; the receiver and
  // replay thread replace it (holding write_mu_); fail() only shuts it down.
  std::atomic<common::TlsConnection*> conn_{nullptr};
  std::vector<std::unique_ptr<common::TlsConnection>> owned_;  // every connection made; freed at destruction
  std::mutex owned_mu_;
  std::string server_;  // server_mu_ once the receiver runs (reconnect() may change it)
  mutable std::mutex server_mu_;
  bool redirected_ = false;  // the pool sent this client here (Hello.redirected)
  std::string redirect_, redirect_member_;  // the Welcome sent us on (host:port, member name)
  std::vector<SpanPart> span_;  // the Welcome spread the program over several members
  uint32_t span_index_ = 0;     // this connection is that part of a span (Hello.spanIndex)
  ClientConfig cfg_;  // for reconnecting
  common::Compression compression_;
  Welcome welcome_;
  HostFuncHandler on_host_func_;

  // Taken by every asynchronous call and by the flusher for each batch
  // (an AdaptiveMutex: common/sync.h).
  common::AdaptiveMutex batch_mu_;
  std::vector<uint8_t> batch_;
  uint64_t next_seq_ = 1;
  bool stopping_ = false;
  // batch_mu_: what the flusher is doing. Asleep (kIdle, kNapping), it is woken
  // through flusher_bell_ by claimFlusherWakeLocked, which marks it kBusy at once:
  // the next call finds it woken already and does not ring again.
  Flusher flusher_state_ = Flusher::kBusy;
  common::Doorbell flusher_bell_;
  std::atomic<uint64_t> flusher_sleeps_{0};
  bool flush_now_ = false;  // batch_mu_: the batch holds an urgent frame (claimFlusherWakeLocked)
  std::atomic<bool> closing_{false};
  std::mutex write_mu_;
  common::BulkSender bulk_sender_;  // guarded by write_mu_
  std::vector<uint8_t> spare_;      // write_mu_: the last written batch's buffer (takeBatchLocked)

  std::atomic<int> sync_waiters_{0};  // callers waiting for a reply: the reader busy-polls

  // The read role (see the top of this file).
  enum class Reader { kNone, kReceiver, kCaller };
  std::mutex reader_mu_;  // innermost: no other lock is taken while it is held
  std::condition_variable reader_cv_;
  Reader reader_ = Reader::kNone;                      // reader_mu_
  int needs_receiver_ = 0;                             // reader_mu_ (NeedsReceiver)
  std::chrono::steady_clock::time_point caller_read_;  // reader_mu_: a caller last gave the role back
  Status read_failed_;                                 // reader_mu_: a caller's read failed
  std::unique_ptr<common::FrameReader> frames_;        // the role's: the current connection's reader
  std::atomic<uint64_t> caller_reads_{0};              // callerReads()
  std::atomic<uint64_t> flusher_writes_{0};            // flusherWrites()
  std::atomic<bool> timed_{false};    // setTimed
  mutable std::mutex slots_mu_;
  std::unordered_map<uint64_t, Slot*> slots_;
  Status broken_;
  std::atomic<bool> is_broken_{false};  // broken_ is set: asynchronous calls ask without slots_mu_
  Status deferred_error_;

  // Target ranges of deferred slots whose data has not landed (start -> end).
  std::mutex deferred_mu_;
  std::condition_variable deferred_cv_;
  std::multimap<uint64_t, uint64_t> deferred_ranges_;

  // Device printf output not yet printed (bounded by kMaxDeviceOutput).
  std::mutex output_mu_;
  std::string device_output_;
  bool output_dropped_ = false;
  std::atomic<bool> has_output_{false};  // device_output_ is not empty: saves the lock on every launch

  std::mutex cb_mu_;
  std::condition_variable cb_cv_;
  std::deque<uint64_t> callbacks_;
  bool cb_stop_ = false;  // guarded by cb_mu_

  // Resume state.
  bool resume_ = false;            // the Welcome granted it (fixed after the handshake)
  std::string resume_token_;
  std::string resume_id_;  // what the resume preamble names (16 random bytes)
  uint64_t resume_buffer_ = 0;     // bytes of kept requests before callers wait
  KeptLog kept_;                   // batch_mu_: requests kept for replay (client/kept_log.h)
  std::condition_variable_any room_cv_;  // with batch_mu_: kept bytes fell, or the connection broke
  // The receiver's: notifications seen (floor and any beyond it), unacknowledged counts.
  std::atomic<uint64_t> notify_floor_{0};
  std::set<uint64_t> notify_seen_;
  uint64_t replies_since_ack_ = 0, bulk_since_ack_ = 0, notifies_since_ack_ = 0;
  bool session_over_ = false;      // a goodbye or protocol error: no resume
  std::mutex retry_mu_;            // the reconnect back-off sleeps on retry_cv_ (close() wakes it)
  std::condition_variable retry_cv_;
  std::thread replay_;
  std::atomic<int> resumes_{0};

  std::thread flusher_, receiver_, callback_;

  // Stripe connections of the current main connection (common/stripes.h).
  // stripe_mu_ orders a join against a lost connection: a joiner adds its
  // stripe only while stripe_epoch_ is still the one it started in.
  common::Stripes stripes_;
  std::mutex stripe_mu_;
  uint64_t stripe_epoch_ = 0;
  // A join's connection during its TLS handshake (under stripe_mu_):
  // dropStripes() shuts it down, so a program's exit does not wait for it.
  common::TlsConnection* stripe_joining_ = nullptr;
  std::thread stripe_joiner_;  // started by start() and the receiver's reconnect(), joined by close()
};

}  // namespace rgpu::client
