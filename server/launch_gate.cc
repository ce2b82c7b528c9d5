#include "server/launch_gate.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

namespace rgpu::server {
namespace {
bool onDevice(const GatePolicy& s, int d) { return d >= 0 && d < kMaxGateDevices && (s.devices.load() >> d) & 1; }

template <typename T>
Result<T*> mapShared(int fd, bool writable, const char* what) {
  void* p = ::mmap(nullptr, sizeof(T), writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status(err::kUnknown, std::string("mmap of ") + what + ": " + std::strerror(errno));
  return static_cast<T*>(p);
}

// A memfd of sizeof(T) bytes, mapped, holding a T.
template <typename T>
Result<std::pair<int, T*>> makeShared(const char* name) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status(err::kUnknown, std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, sizeof(T)) != 0) {
    ::close(fd);
    return Status(err::kUnknown, std::string("ftruncate: ") + std::strerror(errno));
  }
  auto p = mapShared<T>(fd, true, name);
  if (!p) {
    ::close(fd);
    return p.status();
  }
  return std::make_pair(fd, new (*p) T());
}
uint64_t nowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
}  // namespace

uint64_t virtualTime(const GatePolicy& p, const GateSlot& s) {
  uint32_t w = std::max<uint32_t>(p.weight_milli.load(std::memory_order_relaxed), 1);
  return s.vstart_ns.load(std::memory_order_relaxed) + s.gpu_ns.load(std::memory_order_relaxed) * 1000 / w;
}

Result<GateTableOwner> GateTableOwner::create() {
  auto table = makeShared<GateTable>("rgpu-launch-gate");
  if (!table) return table.status();
  auto policy = makeShared<GatePolicyTable>("rgpu-launch-policy");
  if (!policy) {
    ::munmap(table->second, sizeof(GateTable));
    ::close(table->first);
    return policy.status();
  }
  // From now on nobody can map the policy writable, nor write() it: not a
  // worker holding any descriptor of it (reopened through /proc or not).
  // The daemon's own mapping, made above, stays writable.
  if (::fcntl(policy->first, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status st(err::kUnknown, std::string("sealing the gate policy (Linux 5.1 or later needed): ") + std::strerror(errno));
    ::munmap(table->second, sizeof(GateTable));
    ::munmap(policy->second, sizeof(GatePolicyTable));
    ::close(table->first);
    ::close(policy->first);
    return st;
  }
  // Workers get a descriptor opened read-only, too.
  int ro = ::open(("/proc/self/fd/" + std::to_string(policy->first)).c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) {
    Status st(err::kUnknown, std::string("reopening the gate policy read-only: ") + std::strerror(errno));
    ::munmap(table->second, sizeof(GateTable));
    ::munmap(policy->second, sizeof(GatePolicyTable));
    ::close(table->first);
    ::close(policy->first);
    return st;
  }
  return GateTableOwner(table->first, table->second, policy->first, ro, policy->second);
}

GateTableOwner::GateTableOwner(GateTableOwner&& o) noexcept
    : fd_(o.fd_), table_(o.table_), policy_fd_(o.policy_fd_), policy_ro_fd_(o.policy_ro_fd_), policy_(o.policy_) {
  o.fd_ = o.policy_fd_ = o.policy_ro_fd_ = -1;
  o.table_ = nullptr;
  o.policy_ = nullptr;
}

GateTableOwner::~GateTableOwner() {
  if (table_) ::munmap(table_, sizeof(GateTable));
  if (policy_) ::munmap(policy_, sizeof(GatePolicyTable));
  for (int fd : {fd_, policy_fd_, policy_ro_fd_})
    if (fd >= 0) ::close(fd);
}

int GateTableOwner::assign(uint64_t session, const std::vector<int>& devices, int priority, double weight) {
  uint64_t mask = 0;
  for (int d : devices)
    if (d >= 0 && d < 64) mask |= 1ull << d;
  uint64_t vmin = std::numeric_limits<uint64_t>::max();
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    const GatePolicy& p = policy_->slots[i];
    if (p.session.load() && (p.devices.load() & mask)) vmin = std::min(vmin, virtualTime(p, table_->slots[i]));
  }
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    GatePolicy& p = policy_->slots[i];
    GateSlot& s = table_->slots[i];
    if (p.session.load()) continue;
    p.devices = mask;
    p.priority = priority;
    p.weight_milli = static_cast<uint32_t>(std::clamp(weight * 1000, 1.0, 1e6));
    s.pending = 0;
    s.gpu_ns = 0;
    s.vstart_ns = vmin == std::numeric_limits<uint64_t>::max() ? 0 : vmin;
    p.session = session;  // last: the slot is live
    return static_cast<int>(i);
  }
  return -1;
}

void GateTableOwner::update(int slot, int priority, double weight) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return;
  GatePolicy& p = policy_->slots[slot];
  GateSlot& s = table_->slots[slot];
  // Keep its virtual time where it is across the change of weight.
  uint64_t vt = virtualTime(p, s);
  p.priority = priority;
  p.weight_milli = static_cast<uint32_t>(std::clamp(weight * 1000, 1.0, 1e6));
  uint64_t now = virtualTime(p, s);
  s.vstart_ns = s.vstart_ns.load() + vt - std::min(vt, now);
}

void GateTableOwner::clear(int slot) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return;
  GatePolicy& p = policy_->slots[slot];
  GateSlot& s = table_->slots[slot];
  // A worker that died in the middle of a kernel leaves the device to the others.
  uint64_t session = p.session.load();
  for (auto& d : table_->devices) {
    uint64_t expected = session;
    d.owner.compare_exchange_strong(expected, 0);
  }
  p.session = 0;
  s.pending = 0;
  p.devices = 0;
}

Result<std::unique_ptr<SharedLaunchGate>> SharedLaunchGate::map(int fd, int policy_fd, int slot,
                                                                std::vector<int> physical) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return Status(err::kInvalidValue, "bad gate slot");
  // The policy must come read-only: a descriptor we could write through means
  // the daemon handed us the wrong one.
  int mode = ::fcntl(policy_fd, F_GETFL);
  if (mode < 0 || (mode & O_ACCMODE) != O_RDONLY)
    return Status(err::kInvalidValue, "the launch gate policy descriptor is not read-only");
  auto t = mapShared<GateTable>(fd, true, "the launch gate");
  if (!t) return t.status();
  auto p = mapShared<GatePolicyTable>(policy_fd, false, "the launch gate policy");
  if (!p) {
    ::munmap(*t, sizeof(GateTable));
    return p.status();
  }
  return std::unique_ptr<SharedLaunchGate>(new SharedLaunchGate(*t, *p, slot, std::move(physical)));
}

SharedLaunchGate::~SharedLaunchGate() {
  ::munmap(table_, sizeof(GateTable));
  ::munmap(const_cast<GatePolicyTable*>(policy_), sizeof(GatePolicyTable));
}

void SharedLaunchGate::queued(int device) {
  if (mine_->pending.fetch_add(1) != 0) return;
  // Back from idle: no credit for the time it did not compete.
  int host = physical_[static_cast<size_t>(device)];
  uint64_t vmin = std::numeric_limits<uint64_t>::max();
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    const GatePolicy& p = policy_->slots[i];
    const GateSlot& s = table_->slots[i];
    if (&s != mine_ && p.session.load() && s.pending.load() && onDevice(p, host) &&
        p.priority.load() == my_policy_->priority.load())
      vmin = std::min(vmin, virtualTime(p, s));
  }
  uint64_t vt = virtualTime(*my_policy_, *mine_);
  if (vmin != std::numeric_limits<uint64_t>::max() && vt + kFairSlackNs < vmin)
    mine_->vstart_ns += vmin - kFairSlackNs - vt;
}

bool SharedLaunchGate::heldBack(int host) const {
  int prio = my_policy_->priority.load();
  uint64_t vt = virtualTime(*my_policy_, *mine_), now = nowNs();
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    const GatePolicy& p = policy_->slots[i];
    const GateSlot& s = table_->slots[i];
    if (&s == mine_ || !p.session.load() || !onDevice(p, host)) continue;
    int pr = p.priority.load();
    bool busy = s.pending.load() > 0;
    if (pr > prio && (busy || now - s.idle_since_ns.load() < kHoldoverNs)) return true;
    if (pr == prio && busy && virtualTime(p, s) + kFairSlackNs < vt) return true;
  }
  return false;
}

bool SharedLaunchGate::acquire(int device) {
  int host = physical_[static_cast<size_t>(device)];
  if (host < 0 || host >= kMaxGateDevices) return false;
  GateDevice& d = table_->devices[host];
  uint64_t me = my_policy_->session.load();
  uint64_t join_deadline = nowNs() + kMaxJoinWaitNs;
  // Waiting costs the running session nothing but our wake-ups: back off from
  // 50 us to 1 ms (well inside kHoldoverNs, so a higher class's gaps stay covered).
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    {
      std::lock_guard lock(mu_);
      bool held_back = heldBack(host);
      if (holding_[host] > 0) {
        // We hold it: join, unless someone is owed the device (then let ours drain, within a bound).
        if (!held_back || nowNs() > join_deadline) {
          ++holding_[host];
          return true;
        }
      } else if (!held_back) {
        uint64_t expected = 0;
        if (d.owner.compare_exchange_strong(expected, me)) {
          d.since_ns = nowNs();
          holding_[host] = 1;
          return true;
        }
        if (expected != me && nowNs() - d.since_ns.load() > kStuckNs) return false;  // beside a stuck kernel
      }
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void SharedLaunchGate::done(int device, uint64_t gpu_ns, bool held) {
  int host = physical_[static_cast<size_t>(device)];
  if (held && host >= 0 && host < kMaxGateDevices) {
    std::lock_guard lock(mu_);
    if (holding_[host] > 0 && --holding_[host] == 0) {
      uint64_t me = my_policy_->session.load();
      table_->devices[host].owner.compare_exchange_strong(me, 0);
    }
  }
  mine_->gpu_ns += gpu_ns;
  if (mine_->pending.fetch_sub(1) == 1) mine_->idle_since_ns = nowNs();
}

}  // namespace rgpu::server
