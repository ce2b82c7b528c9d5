// One client session, served by one worker process.
//
// Threads: the dispatch thread (run()) reads frames, validates every handle,
// pointer and size against the session's tables, and calls the Backend. Replies
// to calls that wait for stream work (synchronize, device-to-host copies) are
// sent later from backend threads, so a blocking call from one client thread
// never stalls the calls of its other threads. Replies may be written by any
// thread (TlsConnection serialises frames).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/frame_io.h"
#include "common/tls.h"
#include "protocol/rgpu.capnp.h"
#include "server/allocation_table.h"
#include "server/backend.h"
#include "server/pool_link.h"
#include "server/server_config.h"

namespace rgpu::server {

class StagingPool;

// Builds the session's backend over the host devices the pool placed it on.
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const Placement& placement)>;

class Session {
 public:
  // `pool` outlives the session. The backend is built once the pool has
  // admitted the client (monitor sessions — rgpu-smi — get none).
  Session(std::unique_ptr<common::TlsConnection> conn, const ServerConfig& cfg, BackendFactory make_backend,
          PoolLink& pool, uint64_t session_id);
  ~Session();

  // Authenticates the client, then serves it until it leaves or the connection
  // fails. Returns ok on a clean goodbye.
  Status run();
  const std::string& identity() const { return identity_; }

 private:
  Status handshake();
  Status serve();
  // Handles one request; returns non-ok only for errors that end the session
  // (transport failure). Call errors go back to the client.
  Status dispatch(const protocol::FrameHeader& h, wire::Request::Reader req);
  Status consumeBulk(const protocol::FrameHeader& h, uint64_t expected, Staging* into);

  using Fill = std::function<void(wire::Reply::Builder&)>;
  // Sends a reply (sync request) or records the error (async request).
  void finish(const protocol::FrameHeader& h, const Status& s, const Fill& fill = nullptr);
  void sendReply(uint64_t seq, const Status& s, const Fill& fill, const uint8_t* bulk = nullptr,
                 uint64_t bulk_len = 0);
  void recordAsyncError(const Status& s);
  void sendNotify(const std::function<void(wire::Notify::Builder&)>& fill);

  // Connects the backend's callbacks to this session.
  void attachBackend(std::unique_ptr<Backend> backend);
  // Sends the session's usage to the pool at most every 250 ms (`force`: now).
  void reportUsage(bool force);
  // The pool's (physical) index of session device `device`.
  int physical(int device) const { return placement_.devices[static_cast<size_t>(device)]; }
  Status checkStream(wire::StreamRef::Reader s, StreamKey& key) const;
  Status checkDevice(int device) const;

  std::unique_ptr<common::TlsConnection> conn_;
  common::FrameReader* reader_ = nullptr;  // the dispatch thread's reader, during serve()
  const ServerConfig& cfg_;
  BackendFactory make_backend_;
  PoolLink& pool_;
  Placement placement_;
  bool monitor_ = false;  // rgpu-smi: pool status only, no backend
  std::unique_ptr<LaunchGate> gate_;  // before backend_: outlives it
  std::unique_ptr<Backend> backend_;
  std::atomic<uint64_t> calls_{0}, bytes_in_{0}, bytes_out_{0}, errors_{0};
  std::chrono::steady_clock::time_point last_usage_report_{};
  uint64_t session_id_;
  std::string identity_;
  common::Compression compression_ = common::Compression::kOff;
  std::shared_ptr<StagingPool> staging_;  // shared: buffers in flight return to it after we are gone

  AllocationTable allocs_;
  std::unordered_map<uint32_t, int> streams_;   // id -> device
  std::unordered_map<uint32_t, int> events_;    // id -> device
  std::unordered_map<uint32_t, int> modules_;   // id -> device
  std::unordered_map<uint32_t, uint32_t> functions_;  // id -> parameter bytes
  struct Var {
    uint32_t module;
    std::string name;
    uint64_t size;
    uint64_t addr;  // 0 until resolved
  };
  std::unordered_map<uint32_t, Var> vars_;

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
};

}  // namespace rgpu::server
