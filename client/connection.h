// The client's one TLS connection to its server.
//
// Threads:
//  - application threads call post() (asynchronous calls: appended to a batch
//    and never wait for the network) and call() (synchronous: waits for the
//    reply; other threads keep going meanwhile);
//  - a flusher thread writes batched asynchronous calls, so a burst of launches
//    becomes one TLS record instead of one per call;
//  - a receiver thread reads replies and routes each to its waiting caller by
//    sequence number (device-to-host data goes straight into the caller's
//    buffer), and hands host-function notifications to the callback thread.
// Frames reach the wire in sequence-number order: the sequence number is
// assigned under the batch lock, and write_mu_ is held from taking a batch
// until it is written.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/client_config.h"
#include "common/frame_io.h"
#include "common/tls.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::client {

// A decoded reply, owned by the caller.
struct Reply {
  Status status;           // the call's own result (or a transport failure)
  Status async_error;      // an earlier asynchronous call's error, if any
  std::vector<uint64_t> words;  // the raw reply message (capnp words)
  wire::Reply::Reader reader() const;
 private:
  mutable std::unique_ptr<capnp::FlatArrayMessageReader> msg_;
};

struct Welcome {
  std::string identity;
  std::string backend;
  int driver_version = 0;
  uint64_t session_id = 0;
  struct Device {
    std::string name;
    std::string prop;
    std::vector<int32_t> attributes;
    uint64_t total_mem = 0;
  };
  std::vector<Device> devices;
};

class Connection {
 public:
  using HostFuncHandler = std::function<void(uint64_t id)>;

  // Connects, authenticates, and starts the I/O threads.
  static Result<std::unique_ptr<Connection>> open(const ClientConfig& cfg, HostFuncHandler on_host_func);
  ~Connection();

  const Welcome& welcome() const { return welcome_; }

  // Asynchronous call: returns once queued (or, with bulk, once the bulk bytes
  // are written: the caller's buffer may be reused afterwards).
  Status post(capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0);
  // Synchronous call: sends, waits for the reply. Reply bulk data (exactly
  // `in_len` bytes) is written to `in`.
  Reply call(capnp::MessageBuilder& msg, const void* bulk = nullptr, uint64_t bulk_len = 0, void* in = nullptr,
             uint64_t in_len = 0);
  // Sends a call whose reply (with `in_len` bytes for `in`) is consumed by the
  // receiver thread later; its error surfaces as an asynchronous error.
  Status postExpectingData(capnp::MessageBuilder& msg, void* in, uint64_t in_len);

  // Flushes queued calls, closes the connection and stops the I/O threads,
  // quietly (the process is exiting). Idempotent.
  void close();

  // Errors of asynchronous calls the receiver saw in replies to deferred calls.
  Status takeDeferredError();
  // Non-ok once the connection is lost; every later call fails with it.
  Status broken() const;
  const std::string& server() const { return server_; }

 private:
  struct Slot {
    std::atomic<int> state{0};  // 0 waiting, 1 done
    std::vector<uint64_t> words;
    Status status;
    void* in = nullptr;
    uint64_t in_len = 0;
    bool deferred = false;  // owned by the receiver (postExpectingData)
  };

  Connection(std::unique_ptr<common::TlsConnection> conn, std::string server, common::Compression c);
  Status handshake(const ClientConfig& cfg);
  // Queues a frame; returns its sequence number. With `now`, writes the batch
  // (and `bulk`) before returning.
  Status enqueue(capnp::MessageBuilder& msg, uint8_t flags, const void* bulk, uint64_t bulk_len, bool now,
                 Slot* slot, uint64_t* seq_out);
  void flusherLoop();
  void receiverLoop();
  void callbackLoop();
  void fail(const Status& s);

  std::unique_ptr<common::TlsConnection> conn_;
  std::string server_;
  common::Compression compression_;
  Welcome welcome_;
  HostFuncHandler on_host_func_;

  std::mutex batch_mu_;
  std::condition_variable batch_cv_;
  std::vector<uint8_t> batch_;
  uint64_t next_seq_ = 1;
  bool stopping_ = false;
  std::atomic<bool> closing_{false};
  std::mutex write_mu_;
  common::BulkSender bulk_sender_;  // guarded by write_mu_

  std::atomic<int> sync_waiters_{0};  // callers waiting for a reply: the receiver busy-polls
  mutable std::mutex slots_mu_;
  std::unordered_map<uint64_t, Slot*> slots_;
  Status broken_;
  Status deferred_error_;

  std::mutex cb_mu_;
  std::condition_variable cb_cv_;
  std::deque<uint64_t> callbacks_;

  std::thread flusher_, receiver_, callback_;
};

}  // namespace rgpu::client
