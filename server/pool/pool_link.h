// How a session reaches the pool manager.
//
// A worker process talks to the daemon's PoolManager over its control socket
// (ControlSocketLink: one AF_UNIX datagram socket pair per worker, made at
// fork). Tests and in-process servers use LocalPool, which owns a PoolManager.
// The daemon's side of the socket is PoolService.
//
// Control datagrams are text fields separated by 0x1f: a verb, then its
// arguments; replies start with "ok" or "err". Only calls that need an answer
// wait for one (admission, a quota-checked allocation, the quota view, the
// status); allocations without a quota, frees and usage reports are one-way.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/pool/launch_gate.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

// What a client authenticated with, as its worker passes it to the daemon:
// a bearer token, or a verified certificate (PEM) with the client's proof of
// holding its key for this connection (common/tls.h proveClientKey).
struct ClientCredential {
  std::string token;
  std::string cert_pem;
  std::string binding;  // the connection's exporter value
  std::string proof;    // the client's signature over it
};

class PoolLink {
 public:
  virtual ~PoolLink() = default;
  // Proves to the pool who the client is, before admit or status: the
  // credential it authenticated with. The daemon checks it against its own
  // users and CA and binds the session to the user it finds, once; it never
  // takes a worker's word.
  virtual Status bindIdentity(const std::string& user, const ClientCredential& credential) = 0;
  // Blocks while the request waits in the admission queue.
  virtual Result<Placement> admit(const ClientInfo& who, const DeviceRequest& req) = 0;
  // An allocation on physical `device`; `checked`: wait for the quota verdict.
  virtual Status reserve(int device, uint64_t bytes, bool checked) = 0;
  virtual void release(int device, uint64_t bytes) = 0;
  // (quota, bytes the user has allocated on the device).
  virtual std::pair<uint64_t, uint64_t> quotaView(int device) = 0;
  // wire::PoolStatus as a flat Cap'n Proto message: every session for admins
  // (the pool manager's policy says who is one), else the user's own.
  virtual Result<std::string> status(const std::string& user) = 0;
  // The pool of servers this one is a member of (wire::PoolMembers, flat
  // message bytes); kNotSupported when it is not one.
  virtual Result<std::string> members() { return Status(err::kNotSupported, "this server is not a member of a pool"); }
  virtual void usage(const SessionUsage& u) = 0;
  // Why the session ended, told once as it ends (the accounting log's
  // reason; the daemon bounds it and names a crash itself).
  virtual void ended(const std::string& reason) {}
  // The launch gate of an admitted session (priorities, weights); nullptr: none.
  virtual std::unique_ptr<LaunchGate> gateFor(const Placement& p) { return nullptr; }
  // The session's client resumes after a dropped connection (one-way): only
  // such a session can move to another worker (docs/migration.md).
  virtual void resumable() {}
  // A session moved to this worker (docs/migration.md) takes up the pool's
  // record of it, which its old worker held: its placement (with its launch
  // gate slot, whose page comes with it for gateFor). The daemon allows it
  // only to the worker it started for that.
  virtual Result<Placement> rejoin() { return Status(err::kNotSupported, "sessions move only between workers of a daemon"); }
  // Moves `session` to a new worker (admins; the daemon checks): what it
  // took, or why not. `member`: "" or this server's own name.
  virtual Result<std::string> moveSession(uint64_t session, const std::string& member) {
    return Status(err::kNotSupported, "sessions move only between workers of a daemon");
  }
};

// Live device health the daemon adds to the status (NVML), by physical index.
struct DeviceHealth {
  int utilization = -1, temperature = -1, power_mw = -1;
};

// Builds wire::PoolStatus from a snapshot (flat message bytes).
std::string encodePoolStatus(const PoolSnapshot& s, const std::string& user, bool admin,
                             const std::vector<DeviceHealth>& health);

// A PoolManager in this process (tests, in-process servers).
class LocalPool final : public PoolLink {
 public:
  LocalPool(std::shared_ptr<PoolManager> pool, std::shared_ptr<std::mutex> mu, uint64_t session)
      : pool_(std::move(pool)), mu_(std::move(mu)), session_(session) {}
  ~LocalPool() override;
  // rgpu::server::PoolLink
  // (In one process the session's own check is the only one.)
  Status bindIdentity(const std::string&, const ClientCredential&) override { return Status::ok(); }
  Result<Placement> admit(const ClientInfo& who, const DeviceRequest& req) override;
  Status reserve(int device, uint64_t bytes, bool checked) override;
  void release(int device, uint64_t bytes) override;
  std::pair<uint64_t, uint64_t> quotaView(int device) override;
  Result<std::string> status(const std::string& user) override;
  void usage(const SessionUsage& u) override;

 private:
  // shared_ptr: one manager and its lock serve every in-process session.
  std::shared_ptr<PoolManager> pool_;
  std::shared_ptr<std::mutex> mu_;
  uint64_t session_;
};

// The worker's end of its control socket.
class ControlSocketLink final : public PoolLink {
 public:
  // `answer_timeout`: longest wait for a reply (admission waits longer: its own timeout plus this).
  // `stop_fd`, when readable, ends any wait (the worker is being stopped).
  ControlSocketLink(int fd, int gate_policy_fd, std::chrono::milliseconds answer_timeout, int stop_fd = -1);
  ~ControlSocketLink() override;
  // rgpu::server::PoolLink
  Status bindIdentity(const std::string& user, const ClientCredential& credential) override;
  Result<Placement> admit(const ClientInfo& who, const DeviceRequest& req) override;
  Status reserve(int device, uint64_t bytes, bool checked) override;
  void release(int device, uint64_t bytes) override;
  std::pair<uint64_t, uint64_t> quotaView(int device) override;
  Result<std::string> status(const std::string& user) override;
  Result<std::string> members() override;
  void usage(const SessionUsage& u) override;
  void ended(const std::string& reason) override;
  std::unique_ptr<LaunchGate> gateFor(const Placement& p) override;
  Result<Placement> rejoin() override;
  void resumable() override;
  Result<std::string> moveSession(uint64_t session, const std::string& member) override;

 private:
  void send(const std::string& msg);
  // Sends a question and returns the whole reply ("ok…"), or the error it
  // carries; a descriptor that came with the reply goes to *fd (closed when
  // fd is null).
  Result<std::string> ask(const std::string& msg, std::chrono::milliseconds timeout, int* fd = nullptr);
  int fd_;
  int gate_policy_fd_;  // the launch gate's policy table, read-only; -1: none
  int gate_page_fd_ = -1;  // this session's own gate page, from the admission reply
  std::chrono::milliseconds answer_timeout_;
  int stop_fd_;  // not owned
  std::mutex mu_;  // one question at a time: replies come back in order
};

// Field helpers for the control datagrams.
inline constexpr char kFieldSep = '\x1f';
std::string joinFields(const std::vector<std::string>& fields);
// Binary fields travel as hex ("" when `hex` is not).
std::string toHex(const std::string& bytes);
std::string fromHex(const std::string& hex);
std::vector<std::string> splitFields(const std::string& msg, size_t max_fields);
// Placement <-> fields (after "ok").
std::vector<std::string> placementFields(const Placement& p);
Result<Placement> placementFromFields(const std::vector<std::string>& f);

}  // namespace rgpu::server
