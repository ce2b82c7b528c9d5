// Compute sharing between the sessions of a device: priorities and weights,
// enforced by launch admission in the workers.
//
// The daemon keeps a policy table in shared memory, one slot per running
// session (GatePolicyTable: the session, its devices, priority class and
// weight). It is the daemon's alone: workers get a read-only descriptor of it
// and map it read-only, so no worker can raise its own priority or weight, or
// move onto another session's devices. What a session does (GateActivity:
// kernels queued, GPU time used, the devices it runs kernels on) lives in a
// page of its own, a memfd per session: its worker maps it writable and then
// seals it against any further writable mapping; every other worker gets a
// read-only descriptor of it from the daemon, only once it is sealed. So each
// worker writes its own activity and nobody else's. Before a kernel runs, the
// worker's gate waits while
//   - a session of a higher priority class on the same device has kernels
//     queued (lower sessions are held back while it has work), or
//   - a session of the same class on the device is behind it in weighted GPU
//     time (virtual time = GPU time / weight) by more than kFairSlackNs:
//     sessions that compete get GPU time in proportion to their weights.
// and then takes the device for the kernel's duration: kernels of different
// sessions do not overlap on a device, as on a GPU without MPS, so the GPU
// time each session is charged is its own. Taking a device writes only the
// taker's page (Dekker's flags: raise ours, then look at the others'; of two
// raised, the younger backs off and the older waits for it to drop). A higher class counts as busy for
// kHoldoverNs after its last kernel, so the gaps between its batches are not
// taken by lower ones. The session with the least virtual time in the highest
// busy class is never held, so the gate cannot deadlock; a kernel that holds
// the device longer than kStuckNs (a kernel that never ends) no longer keeps
// the others out. A session that was idle is lifted to the
// others' virtual time when it returns (no hoarded credit). The daemon fills a
// slot at admission and clears it when the worker exits, crashed or not.
//
// The gate is cooperative: a worker a tenant has taken over can skip it for
// its own kernels. What it cannot do is change how the gate treats anyone
// else (docs/security.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace rgpu::server {

inline constexpr uint32_t kMaxGateSlots = 1024;
inline constexpr uint64_t kFairSlackNs = 5'000'000;  // 5 ms of weighted GPU time
inline constexpr uint64_t kHoldoverNs = 10'000'000;  // a higher class stays "busy" this long after its work
inline constexpr uint64_t kStuckNs = 2'000'000'000;  // a device held this long is shared again
inline constexpr int kMaxGateDevices = 64;
inline constexpr uint64_t kPeerRetryNs = 10'000'000;  // a page not available yet is asked for again after this

// The daemon's: read-only to workers.
struct GatePolicy {
  std::atomic<uint64_t> session{0};   // 0: free
  std::atomic<uint64_t> devices{0};   // bit d: placed on host device d (d < 64)
  std::atomic<int32_t> priority{1};   // Priority
  std::atomic<uint32_t> weight_milli{1000};
};

struct GatePolicyTable {
  GatePolicy slots[kMaxGateSlots];
};

// One session's page: written by its worker (and by the daemon, which set it
// up), read by the workers that share a device with it.
struct GateActivity {
  std::atomic<uint32_t> pending{0};   // kernels queued or running
  std::atomic<uint64_t> gpu_ns{0};
  std::atomic<uint64_t> vstart_ns{0}; // virtual-time offset (newcomers, returners)
  std::atomic<uint64_t> idle_since_ns{0};  // when pending last fell to 0 (steady clock)
  // When it took host device d for its kernels (steady clock); 0: it does not hold d.
  std::atomic<uint64_t> holding_since[kMaxGateDevices] = {};
};

// Virtual time of a session: where it stands in weighted GPU time.
uint64_t virtualTime(const GatePolicy& p, const GateActivity& a);

// Daemon side: owns the policy table and every session's activity page.
class GateTableOwner {
 public:
  static Result<GateTableOwner> create();
  GateTableOwner(GateTableOwner&& o) noexcept;
  ~GateTableOwner();
  // A read-only descriptor of the policy table, for workers (a descriptor
  // opened read-only cannot be mapped writable).
  int policyFd() const { return policy_ro_fd_; }
  const GatePolicyTable& policy() const { return *policy_; }
  // Fills a free slot for `session` and makes its activity page; its virtual
  // time starts at the least of the sessions sharing its devices. -1 when
  // the table is full or no page could be made.
  int assign(uint64_t session, const std::vector<int>& devices, int priority, double weight);
  void update(int slot, int priority, double weight);
  void clear(int slot);
  // The writable descriptor of a slot's page, for its own worker only (-1: none).
  int activityFd(int slot) const;
  // A read-only descriptor of the page of `slot` while it serves `session`,
  // once its worker sealed it (caller closes); an error otherwise.
  Result<int> peerFd(int slot, uint64_t session) const;
  GateActivity* activity(int slot) const;  // the daemon's own mapping (nullptr: none)

 private:
  struct Page {
    int fd = -1;
    GateActivity* map = nullptr;
  };
  GateTableOwner(int policy_fd, int policy_ro_fd, GatePolicyTable* p) : policy_fd_(policy_fd), policy_ro_fd_(policy_ro_fd), policy_(p) {}
  void dropPage(int slot);
  int policy_fd_ = -1, policy_ro_fd_ = -1;
  GatePolicyTable* policy_ = nullptr;
  std::unique_ptr<Page[]> pages_ = std::make_unique<Page[]>(kMaxGateSlots);
};

// Worker side: the hooks a backend calls around each kernel.
//   queued()  when the kernel is enqueued;
//   acquire() before it runs (sim) or is submitted (CUDA): may wait; returns
//             whether the kernel holds the device (pass it to done());
//   done()    after it ran, with its GPU time (or was dropped: 0).
// A session may have several kernels on the device at once (streams, or
// asynchronous submission to a GPU); while it holds the device and nobody is
// owed it, more of its kernels join; when someone is, new ones wait (at most
// kMaxJoinWait, so a session whose kernels wait on its own host functions
// cannot deadlock) until its kernels on the device have finished.
inline constexpr uint64_t kMaxJoinWaitNs = 50'000'000;

class LaunchGate {
 public:
  virtual ~LaunchGate() = default;
  virtual void queued(int device) = 0;
  virtual bool acquire(int device) = 0;
  virtual void done(int device, uint64_t gpu_ns, bool held) = 0;
};

// A worker's gate over the daemon's policy table and the sessions' pages.
class SharedLaunchGate final : public LaunchGate {
 public:
  // Asks the daemon for a read-only descriptor of another session's page
  // (-1: not available now; asked again later).
  using PeerSource = std::function<int(int slot, uint64_t session)>;
  // `own_fd`: this session's page, mapped writable, then sealed and closed.
  // `policy_fd` is mapped read-only (a descriptor that allows writing is refused).
  static Result<std::unique_ptr<SharedLaunchGate>> map(int own_fd, int policy_fd, int slot, std::vector<int> physical,
                                                       PeerSource peers);
  ~SharedLaunchGate() override;
  // rgpu::server::LaunchGate
  void queued(int device) override;
  bool acquire(int device) override;
  void done(int device, uint64_t gpu_ns, bool held) override;

 private:
  SharedLaunchGate(GateActivity* mine, const GatePolicyTable* p, int slot, std::vector<int> physical, PeerSource peers)
      : policy_(p), mine_(mine), my_slot_(slot), my_policy_(&p->slots[slot]), physical_(std::move(physical)),
        peer_source_(std::move(peers)) {}
  // The page of live slot `i` (its session `session`), mapped on first use; nullptr while unavailable. mu_ held.
  const GateActivity* peer(uint32_t i, uint64_t session);
  bool heldBack(int host_device);  // mu_ held
  // Calls visit(slot, policy, activity) for every other live session on
  // `host` whose page is mapped, until it returns true (then true). mu_ held.
  template <typename F>
  bool forEachPeer(int host, F&& visit);
  // Whether another session holds `host` with a claim older than ours (then we back off),
  // and whether a younger one does (then we wait for it to drop). mu_ held.
  void contenders(int host, uint64_t mine_since, bool& older, bool& younger);
  const GatePolicyTable* policy_;
  GateActivity* mine_;
  int my_slot_;
  const GatePolicy* my_policy_;
  std::vector<int> physical_;
  PeerSource peer_source_;
  std::mutex mu_;                                  // this process's view of its holds and peers
  int holding_[kMaxGateDevices] = {};              // our kernels holding each host device
  struct Peer {
    const GateActivity* map = nullptr;
    uint64_t session = 0;
    uint64_t retry_ns = 0;  // not available: ask again after this
  };
  std::unique_ptr<Peer[]> peers_ = std::make_unique<Peer[]>(kMaxGateSlots);
};

}  // namespace rgpu::server
