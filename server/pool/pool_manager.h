// The pool manager: which sessions use which devices, under which policy.
//
// Lives in the daemon (one thread: the daemon's event loop), fed by the
// workers over their control sockets (server/pool/pool_link.h). It owns the device
// inventory, each user's policy (server.toml [[users]]), the sessions with
// their memory and usage, and the admission queue. Pure logic: no I/O, time
// passed in, so it is unit-tested directly.
//
// Memory accounting is exact: a worker reports every allocation and free of
// its session (synchronously when the user has a quota, so the check and the
// accounting are one step), and a session that ends — cleanly or by a crash —
// returns everything it held at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/config/server_config.h"

namespace rgpu::server {

struct PoolDeviceInfo {
  std::string name;
  std::string uuid;      // "GPU-xxxxxxxx-…"
  uint64_t total = 0;    // bytes
  uint32_t cc = 0;       // major * 10 + minor
  uint32_t sms = 0;      // multiprocessors
};

struct ClientInfo {
  std::string user, host, address;
  uint32_t pid = 0;
};

struct DeviceRequest {
  uint32_t count = 0;       // 0: every allowed device that matches
  uint64_t min_memory = 0;  // free bytes on each
  uint32_t min_cc = 0;
  std::string model;        // glob on the device name; empty = any
  uint32_t wait_ms = 0;     // 0: the server's admission_timeout_ms
  bool no_redirect = false; // a pool of servers placed the client here already: take it or refuse it
  // Another member of a pool could take it once it has room: what can never
  // fit here waits in the queue (to be sent there) instead of being refused.
  bool elsewhere = false;
};

// One member's part of a program whose devices a pool of servers spread over
// several members (docs/pool.md, "One program, several members").
struct SpanPart {
  std::string member, address;  // name, host:port
  uint32_t count = 0;           // devices the program takes there
};

struct Placement {
  std::vector<int> devices;    // physical indices; the session's device i is devices[i]
  uint64_t quota = 0;          // bytes per device (0: none)
  uint64_t pool_quota = 0;     // bytes over the pool, [[users]] pool_memory_quota (0: none)
  Priority priority = Priority::kNormal;
  double weight = 1.0;
  int gate_slot = -1;          // the session's slot in the launch gate table (-1: none)
  uint32_t mps_thread_percentage = 0;  // 0: not set
  // Set instead of devices: a pool of servers places the client on another
  // member (its host:port, and name for messages); the client goes there.
  std::string redirect, redirect_member;
  // Set instead of devices: no one member has the devices asked for; the
  // client takes part.count devices at each part's member, in this order.
  std::vector<SpanPart> span;
  // The session is part `span_index` of such a program (Hello.spanIndex):
  // sim devices place their memory in an address window of their own for it,
  // so the program's devices on different members never share addresses.
  uint32_t span_index = 0;
};

// Under NVIDIA MPS: the environment a CUDA worker sets before cuInit so the MPS
// server enforces the policy too (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from
// mps_thread_percentage, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from the memory
// quota, per device as the worker sees them: "0=4096M,1=4096M").
std::vector<std::pair<std::string, std::string>> mpsEnvironment(const Placement& p);

struct SessionUsage {
  uint64_t calls = 0, bytes_in = 0, bytes_out = 0, gpu_ns = 0, errors = 0;
};

// What a session that ran used, over its whole life (server/accounting/).
struct SessionRecord {
  uint64_t session = 0;
  ClientInfo client;
  std::vector<int> devices;  // physical indices
  double seconds = 0;        // from admission to its end
  SessionUsage usage;        // the worker's last report
  uint64_t peak_memory = 0;  // bytes, all its devices together
  double byte_seconds = 0;   // device memory held, integrated over time
  uint32_t migrations = 0;   // times it moved to another worker or member
};

struct PoolSnapshot {
  struct Device {
    PoolDeviceInfo info;
    uint64_t used = 0;
    uint32_t sessions = 0;
  };
  struct Session {
    uint64_t id = 0;
    ClientInfo client;
    std::vector<int> devices;
    uint64_t memory = 0;
    Priority priority = Priority::kNormal;
    SessionUsage usage;
    bool queued = false;
    double seconds = 0;  // since admission, or waiting
  };
  struct User {
    std::vector<uint64_t> quota_used;  // per device
    uint64_t quota = 0;
    uint64_t admissions = 0, refusals = 0;
    double admission_wait_s = 0;  // sum over admissions
  };
  std::vector<Device> devices;
  std::vector<Session> sessions;
  std::map<std::string, User> users;
};

class PoolManager {
 public:
  using Clock = std::chrono::steady_clock;

  PoolManager(std::vector<PoolDeviceInfo> devices, std::vector<UserEntry> users, PoolConfig cfg);

  // A policy reload (SIGHUP): running sessions keep their devices; quotas and
  // limits apply from the next allocation or admission.
  void setPolicy(std::vector<UserEntry> users, PoolConfig cfg);

  // Decided at once (placed, or refused with why), or nullopt: queued, and
  // decided later by retry().
  std::optional<Result<Placement>> admit(uint64_t session, const ClientInfo& who, const DeviceRequest& req,
                                         Clock::time_point now);
  // Queued requests that now fit (placed) or whose wait ran out (refused), in
  // queue order: priority class first, then arrival.
  std::vector<std::pair<uint64_t, Result<Placement>>> retry(Clock::time_point now);
  // When the earliest queued request times out (for the daemon's timer).
  std::optional<Clock::time_point> nextDeadline() const;

  // An allocation of `bytes` on physical `device` by `session`: refused when it
  // would take the user past the quota on that device.
  Status reserve(uint64_t session, int device, uint64_t bytes);
  void release(uint64_t session, int device, uint64_t bytes);
  // `pool_unchecked`: a member of a pool whose etcd cannot be asked checks
  // the pool-wide quota against this member's own use only.
  Status reserve(uint64_t session, int device, uint64_t bytes, bool pool_unchecked);
  // (quota, bytes the session's user has allocated on the device).
  std::pair<uint64_t, uint64_t> quotaView(uint64_t session, int device) const;

  // ---- the pool-wide memory quota ([[users]] pool_memory_quota) --------------
  // A server alone checks it against the user's bytes on this server. A
  // member of a pool (setPoolGrants) checks it against the share of the
  // quota it holds in etcd for the user — granted in slices (poolQuotaSlice)
  // by the cluster member — so an allocation reads etcd only when the share
  // runs out: PoolService asks for the shortfall first, then reserves.
  void setPoolGrants(bool on) { pool_grants_ = on; }
  bool poolGrants() const { return pool_grants_; }
  // The session's user and their pool quota ("" and 0: none such).
  std::pair<std::string, uint64_t> poolQuotaOf(uint64_t session) const;
  // Bytes beyond this member's share an allocation of `bytes` by `session`
  // needs (0: it fits the share, or the user has no pool quota).
  uint64_t grantShortfall(uint64_t session, uint64_t bytes) const;
  void addGrant(const std::string& user, uint64_t bytes);
  uint64_t granted(const std::string& user) const;
  uint64_t poolUsed(const std::string& user) const;  // bytes on this member, all devices
  // Users whose share is more than one slice beyond their use: the share each
  // keeps (use plus one spare slice); their grants are lowered to it.
  // Users in `busy` (asking for more now) are left as they are.
  std::vector<std::pair<std::string, uint64_t>> trimGrants(const std::set<std::string>& busy = {});
  void usage(uint64_t session, const SessionUsage& u);
  // The session's worker exited (or crashed) or it left the queue: all it
  // held returns. A session that was admitted leaves its record.
  std::optional<SessionRecord> end(uint64_t session);
  // Where memory-time (byte_seconds) reads the time: reserve and release
  // take none (tests set a clock of their own).
  void setClock(std::function<Clock::time_point()> clock) { clock_ = std::move(clock); }

  PoolSnapshot snapshot(Clock::time_point now) const;
  bool isAdmin(const std::string& user) const { return policyOf(user).admin; }
  uint32_t maxSessions(const std::string& user) const { return policyOf(user).max_sessions; }
  // How long a request asking `wait_ms` may wait (0: the server's admission_timeout_ms; never more).
  std::chrono::milliseconds admissionWait(uint32_t wait_ms) const {
    return std::chrono::milliseconds(wait_ms ? std::min(wait_ms, cfg_.admission_timeout_ms) : cfg_.admission_timeout_ms);
  }
  // A running session's placement (its priority and weight follow policy reloads).
  std::optional<Placement> placementOf(uint64_t session) const;
  // The session moved to another worker (its record, memory and quota go with it).
  void moved(uint64_t session);
  // What a member that takes the session from this one must know: its
  // client, the bytes it holds on each of its devices (in its order), and
  // how often it moved before.
  struct MoveInfo {
    ClientInfo who;
    std::vector<uint64_t> memory;
    uint32_t migrations = 0;
  };
  std::optional<MoveInfo> moveInfo(uint64_t session) const;
  // A session moved in from another member counts the moves it made there.
  void setMigrations(uint64_t session, uint32_t n);
  size_t queued() const { return queue_.size(); }
  std::vector<uint64_t> queuedSessions() const {
    std::vector<uint64_t> out;
    for (auto& q : queue_) out.push_back(q.session);
    return out;
  }
  struct QueuedRequest {
    uint64_t session;
    ClientInfo who;
    DeviceRequest req;
  };
  // The queue in its order (a pool of servers may send some elsewhere).
  std::vector<QueuedRequest> queuedRequests() const {
    std::vector<QueuedRequest> out;
    for (auto& q : queue_) out.push_back({q.session, q.who, q.req});
    return out;
  }
  const std::vector<PoolDeviceInfo>& devices() const { return devices_; }

 private:
  struct Pending {
    uint64_t session;
    ClientInfo who;
    DeviceRequest req;
    Clock::time_point since, deadline;
    Priority priority;
    uint64_t order;
  };
  struct Running {
    ClientInfo who;
    Placement placement;
    std::map<int, uint64_t> memory;  // physical device -> bytes
    SessionUsage usage;
    Clock::time_point since;
    // Accounting: the most it held at once, and bytes held x seconds up to `held_at`.
    uint64_t held = 0, peak = 0;
    double byte_seconds = 0;
    uint32_t migrations = 0;
    Clock::time_point held_at, started;  // (clock_'s)
  };
  // Adds the memory-time since the last change, then adds `bytes` to `held`
  // (or takes them off, `freed`). Unsigned: a reservation may be 2^63 bytes
  // or more before the backend refuses it.
  void accountMemory(Running& r, uint64_t bytes, bool freed = false);
  struct UserState {
    std::map<int, uint64_t> used;  // physical device -> bytes, all sessions
    uint64_t granted = 0;          // this member's share of the pool quota (setPoolGrants)
    uint64_t admissions = 0, refusals = 0;
    double admission_wait_s = 0;
  };

  const UserEntry& policyOf(const std::string& user) const;
  bool allowed(const UserEntry& u, int device) const;
  bool matchesStatically(const DeviceRequest& r, int device) const;
  uint64_t freeBytes(int device) const;
  uint32_t sessionsOn(int device) const;
  uint32_t sessionsOf(const std::string& user) const;
  // Placement if it fits now; else why not (and whether it can ever fit).
  Result<Placement> tryPlace(const ClientInfo& who, const DeviceRequest& req, bool* never) const;
  std::string describeFree(const DeviceRequest& req, const std::string& user) const;
  void start(uint64_t session, const ClientInfo& who, const Placement& p, Clock::time_point now,
             Clock::time_point asked);

  std::vector<PoolDeviceInfo> devices_;
  std::vector<UserEntry> users_;
  UserEntry default_user_;
  PoolConfig cfg_;
  std::map<uint64_t, Running> running_;
  std::deque<Pending> queue_;
  std::map<std::string, UserState> user_state_;
  uint64_t next_order_ = 0;
  bool pool_grants_ = false;
  std::function<Clock::time_point()> clock_ = [] { return Clock::now(); };
};

// The slice a member of a pool takes of a user's pool quota at a time:
// 1/32 of it, from 1 MiB to 1 GiB. At most 32 etcd transactions fill a
// member's use up to the quota, and a member keeps at most one spare slice,
// so a refusal comes at most one slice per other member early.
inline uint64_t poolQuotaSlice(uint64_t quota) {
  return std::clamp<uint64_t>(quota / 32, 1ull << 20, 1ull << 30);
}

// Whether one entry of a user's `devices` ("0", a UUID prefix "GPU-3f2a",
// or a glob on the name "*H100*") names physical device `index`.
bool deviceEntryMatches(const std::string& entry, int index, const PoolDeviceInfo& d);

// "16.0 GiB", "512 B": sizes in messages.
std::string formatBytes(uint64_t bytes);

}  // namespace rgpu::server
