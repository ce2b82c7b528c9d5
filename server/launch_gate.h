// Compute sharing between the sessions of a device: priorities and weights,
// enforced by launch admission in the workers.
//
// The daemon keeps two small tables in shared memory, one slot per running
// session. The policy table (GatePolicyTable: the session, its devices,
// priority class and weight) is the daemon's alone: workers get a read-only
// descriptor of it and map it read-only, so no worker can raise its own
// priority or weight, or move onto another session's devices. The activity
// table (GateTable: kernels queued, GPU time used, and who holds each
// device) is written by the workers themselves. Before a kernel runs, the worker's gate
// waits while
//   - a session of a higher priority class on the same device has kernels
//     queued (lower sessions are held back while it has work), or
//   - a session of the same class on the device is behind it in weighted GPU
//     time (virtual time = GPU time / weight) by more than kFairSlackNs:
//     sessions that compete get GPU time in proportion to their weights.
// and then takes the device for the kernel's duration: kernels of different
// sessions do not overlap on a device, as on a GPU without MPS, so the GPU
// time each session is charged is its own. A higher class counts as busy for
// kHoldoverNs after its last kernel, so the gaps between its batches are not
// taken by lower ones. The session with the least virtual time in the highest
// busy class is never held, so the gate cannot deadlock; a kernel that holds
// the device longer than kStuckNs (a kernel that never ends) no longer keeps
// the others out. A session that was idle is lifted to the
// others' virtual time when it returns (no hoarded credit). The daemon fills a
// slot at admission and clears it when the worker exits, crashed or not.
#pragma once

#include <atomic>
#include <cstdint>
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

// The workers': each updates its own (a worker could write others' too:
// that skews only the sharing of compute, see docs/security.md).
struct GateSlot {
  std::atomic<uint32_t> pending{0};   // kernels queued or running
  std::atomic<uint64_t> gpu_ns{0};
  std::atomic<uint64_t> vstart_ns{0}; // virtual-time offset (newcomers, returners)
  std::atomic<uint64_t> idle_since_ns{0};  // when pending last fell to 0 (steady clock)
};

struct GateDevice {
  std::atomic<uint64_t> owner{0};     // session running a kernel on it; 0: free
  std::atomic<uint64_t> since_ns{0};  // when the owner took it
};

struct GateTable {
  GateSlot slots[kMaxGateSlots];
  GateDevice devices[kMaxGateDevices];
};

// Virtual time of a slot: where it stands in weighted GPU time.
uint64_t virtualTime(const GatePolicy& p, const GateSlot& s);

// Daemon side: owns the shared memory.
class GateTableOwner {
 public:
  static Result<GateTableOwner> create();
  GateTableOwner(GateTableOwner&& o) noexcept;
  ~GateTableOwner();
  int fd() const { return fd_; }
  // A read-only descriptor of the policy table, for workers (a descriptor
  // opened read-only cannot be mapped writable).
  int policyFd() const { return policy_ro_fd_; }
  GateTable& table() { return *table_; }
  const GatePolicyTable& policy() const { return *policy_; }
  // Fills a free slot for `session`; its virtual time starts at the least of
  // the sessions sharing its devices. -1 when the table is full.
  int assign(uint64_t session, const std::vector<int>& devices, int priority, double weight);
  void update(int slot, int priority, double weight);
  void clear(int slot);

 private:
  GateTableOwner(int fd, GateTable* t, int policy_fd, int policy_ro_fd, GatePolicyTable* p)
      : fd_(fd), table_(t), policy_fd_(policy_fd), policy_ro_fd_(policy_ro_fd), policy_(p) {}
  int fd_ = -1;
  GateTable* table_ = nullptr;
  int policy_fd_ = -1, policy_ro_fd_ = -1;
  GatePolicyTable* policy_ = nullptr;
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

// A worker's gate over the daemon's tables (fds 5 and 8 in the worker).
class SharedLaunchGate final : public LaunchGate {
 public:
  // `policy_fd` is mapped read-only (a descriptor that allows writing is refused).
  static Result<std::unique_ptr<SharedLaunchGate>> map(int fd, int policy_fd, int slot, std::vector<int> physical);
  ~SharedLaunchGate() override;
  // rgpu::server::LaunchGate
  void queued(int device) override;
  bool acquire(int device) override;
  void done(int device, uint64_t gpu_ns, bool held) override;

 private:
  SharedLaunchGate(GateTable* t, const GatePolicyTable* p, int slot, std::vector<int> physical)
      : table_(t), policy_(p), mine_(&t->slots[slot]), my_policy_(&p->slots[slot]), physical_(std::move(physical)) {}
  bool heldBack(int host_device) const;
  GateTable* table_;
  const GatePolicyTable* policy_;
  GateSlot* mine_;
  const GatePolicy* my_policy_;
  std::vector<int> physical_;
  std::mutex mu_;                                  // this process's view of its holds
  int holding_[kMaxGateDevices] = {};              // our kernels holding each host device
};

}  // namespace rgpu::server
