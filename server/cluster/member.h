// This server as a member of the pool: its record in etcd (docs/pool.md).
//
// Keys, under the configured prefix (default "/rgpu/"), all attached to one
// lease of [cluster] lease_ttl_s seconds that this member keeps alive:
//
//   <prefix>members/<name>  the member record (JSON): name, advertised
//                           address, state ("ready" or "draining"), start
//                           time, version, and every device's index, name,
//                           UUID, memory, compute capability and SM count;
//   <prefix>load/<name>     the live load (JSON): sessions, queued requests,
//                           and per device the memory used and free, its
//                           sessions and busy fraction.
//
// The record is written once (and again when the state changes); the load
// at most once per load_interval_ms and only when it changed, so etcd's write
// rate per member is bounded by configuration, never by the call rate. The
// lease is renewed every third of its TTL. A member whose process dies
// leaves the pool when its lease expires (at most lease_ttl_s); one that
// stops cleanly revokes its lease, which deletes both keys at once.
//
// etcd failures never stop the server: the member retries (every second,
// then every third of the TTL) and logs once per outage. A lease etcd no
// longer has (it expired while etcd was unreachable, or etcd lost its data)
// is replaced and the keys written again. A name another live member holds is
// not taken: the member waits for that lease to go, logging why.
//
// For placement (placement.h) the member reads the pool — every member's
// record and load, two reads whatever the pool's size — at most once per
// load_interval_ms, and only while admissions ask for it: a member that
// admitted nobody for max(lease TTL, 10 load intervals) reads nothing, and
// the first admission after such a spell waits for a fresh read (at most
// min(etcd_timeout_ms, 500 ms); not when etcd was unreachable last time). A
// view older than the lease TTL (etcd unreachable) is none: admissions stay
// here.
//
// Pool-wide max_sessions: a session a member admits holds one of its user's
// slots, the key <prefix>sessions/<user>/<i> (i < max_sessions), created
// only if absent (one etcd transaction, so two members admitting at the same
// instant cannot both take the last slot) and attached to the member's lease
// (a member that dies gives its slots back when the lease expires). A slot
// is given back when its session ends. While etcd is unreachable slots are
// not checked (each member's own max_sessions still holds), and said so.
// A lease etcd lost takes the slots with it: they are taken again with the
// new lease (one another member took meanwhile is logged).
//
// Pool-wide pool_memory_quota: each member holds a share of a user's quota,
// the key <prefix>quota/<user>/m/<member> (bytes, decimal) under its lease,
// and the shares never add up to more than the quota: a member takes more
// in one transaction that reads every share of the user, and succeeds only
// if the user's anchor key <prefix>quota/<user>/anchor was not written since
// (the transaction writes it too), so two members growing their shares at
// once cannot both take the last bytes. Shares only shrink without the
// anchor (a smaller share, or a dead member's lease expiring, never lets
// the sum pass the quota). A lease etcd lost takes the shares with it; they
// are written again with the new lease, unchecked (the bytes are in use).
//
// Thread-safe: setLoad, setDraining, view and the slot calls may be called
// from any thread; the member's own thread does all etcd I/O.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/cluster/placement.h"
#include "server/config/server_config.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server::cluster {

class EtcdClient;

// The keys of member `name` under `prefix`.
std::string memberKey(const std::string& prefix, const std::string& name);
std::string loadKey(const std::string& prefix, const std::string& name);
// The member record (JSON) of this server.
std::string memberRecord(const ClusterConfig& cfg, const std::vector<PoolDeviceInfo>& devices, bool draining,
                         int64_t started_ms);
// The live load (JSON) from a pool snapshot and each device's busy fraction.
std::string loadRecord(const PoolSnapshot& pool, const std::vector<double>& busy);

// The view as rgpu-smi --pool gets it (wire::PoolMembers, flat message bytes).
std::string encodePoolMembers(const std::vector<MemberView>& view);

class ClusterMember {
 public:
  // Starts the member's thread; the first registration happens there.
  static Result<std::unique_ptr<ClusterMember>> start(const ClusterConfig& cfg, std::vector<PoolDeviceInfo> devices);
  // Revokes the lease (the member's keys go) and stops.
  ~ClusterMember();
  ClusterMember(const ClusterMember&) = delete;
  ClusterMember& operator=(const ClusterMember&) = delete;

  // The latest live load; written when due (and when it differs).
  void setLoad(std::string json);
  // SIGTERM: no new placements here. Written at once.
  void setDraining();
  // Whether the member's keys are in etcd now (for logs and tests).
  bool registered() const;
  // The pool as last read (empty: not read within the lease TTL).
  std::vector<MemberView> view();
  // Takes one of `user`'s `max` slots for `session`; `done` (on the member's
  // thread) gets ok, kDevicesUnavailable when all are taken, or ok with
  // `checked` false when etcd could not be asked.
  void acquireSlot(const std::string& user, uint32_t max, uint64_t session,
                   std::function<void(Status, bool checked)> done);
  // The session ended: its slot (if it has one) is given back.
  void releaseSlot(uint64_t session);
  // Grows this member's share of `user`'s pool quota `quota` by at least
  // `min` and at most `want` bytes; `done` (on the member's thread) gets the
  // bytes added, or kMemoryAllocation when the pool has fewer than `min`
  // left, or ok with `checked` false when etcd could not be asked.
  void acquireQuota(const std::string& user, uint64_t quota, uint64_t min, uint64_t want,
                    std::function<void(Status, uint64_t granted, bool checked)> done);
  // Sets this member's share of `user`'s quota (smaller: given back; 0: the key goes).
  void holdQuota(const std::string& user, uint64_t bytes);

 private:
  ClusterMember(const ClusterConfig& cfg, std::vector<PoolDeviceInfo> devices, std::unique_ptr<EtcdClient> etcd);
  struct Loop;
  using Clock = std::chrono::steady_clock;
  void run();
  void registerOnce(Loop& l, bool draining, const std::string& load, Clock::time_point now);
  void keepUp(Loop& l, bool draining, const std::string& load, Clock::time_point now);
  void readPool(Loop& l, Clock::time_point now, std::unique_lock<std::mutex>& lock);

  const ClusterConfig cfg_;
  const std::vector<PoolDeviceInfo> devices_;
  const int64_t started_ms_;
  std::unique_ptr<EtcdClient> etcd_;  // the thread's
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool draining_ = false;
  bool registered_ = false;
  std::string load_;
  struct SlotTask {
    std::string user;
    uint32_t max = 0;
    uint64_t session = 0;
    std::function<void(Status, bool)> done;  // null: a release
  };
  std::deque<SlotTask> slot_tasks_;
  std::map<uint64_t, std::string> slots_held_;  // session -> its slot key (the member's thread)
  void runSlotTask(SlotTask& t, int64_t lease);
  // Pool quota work, run in order on the member's thread with the lease (0: none).
  std::deque<std::function<void(int64_t lease)>> quota_jobs_;
  std::map<std::string, uint64_t> quota_held_;  // user -> this member's share (the member's thread)
  int64_t quota_lease_ = 0;                     // the lease quota_held_ is written under
  std::string quotaPrefix(const std::string& user) const;
  void growQuota(const std::string& user, uint64_t quota, uint64_t min, uint64_t want, int64_t lease,
                 const std::function<void(Status, uint64_t, bool)>& done);
  void writeQuota(const std::string& user, int64_t lease);
  void rewriteQuotas(int64_t lease);
  void rewriteSlots(int64_t lease);
  std::vector<MemberView> view_;
  std::chrono::steady_clock::time_point view_at_{}, wanted_at_{};
  uint64_t view_reads_ = 0;     // reads of the pool done (or failed)
  bool view_reachable_ = true;  // the last read reached etcd
  std::chrono::steady_clock::duration idleAfter() const;
  std::thread thread_;
};

}  // namespace rgpu::server::cluster
