#include "server/pool/launch_gate.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include "common/spin.h"

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
using common::monotonicNs;
}  // namespace

uint64_t virtualTime(const GatePolicy& p, const GateActivity& a) {
  uint32_t w = std::max<uint32_t>(p.weight_milli.load(std::memory_order_relaxed), 1);
  return a.vstart_ns.load(std::memory_order_relaxed) + a.gpu_ns.load(std::memory_order_relaxed) * 1000 / w;
}

Result<GateTableOwner> GateTableOwner::create() {
  auto policy = makeShared<GatePolicyTable>("rgpu-launch-policy");
  if (!policy) return policy.status();
  // From now on nobody can map the policy writable, nor write() it: not a
  // worker holding any descriptor of it (reopened through /proc or not).
  // The daemon's own mapping, made above, stays writable.
  if (::fcntl(policy->first, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status st(err::kUnknown, std::string("sealing the gate policy (Linux 5.1 or later needed): ") + std::strerror(errno));
    ::munmap(policy->second, sizeof(GatePolicyTable));
    ::close(policy->first);
    return st;
  }
  // Workers get a descriptor opened read-only, too.
  int ro = ::open(("/proc/self/fd/" + std::to_string(policy->first)).c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) {
    Status st(err::kUnknown, std::string("reopening the gate policy read-only: ") + std::strerror(errno));
    ::munmap(policy->second, sizeof(GatePolicyTable));
    ::close(policy->first);
    return st;
  }
  return GateTableOwner(policy->first, ro, policy->second);
}

GateTableOwner::GateTableOwner(GateTableOwner&& o) noexcept
    : policy_fd_(o.policy_fd_), policy_ro_fd_(o.policy_ro_fd_), policy_(o.policy_), pages_(std::move(o.pages_)) {
  o.policy_fd_ = o.policy_ro_fd_ = -1;
  o.policy_ = nullptr;
}

GateTableOwner::~GateTableOwner() {
  if (pages_)
    for (uint32_t i = 0; i < kMaxGateSlots; ++i) dropPage(static_cast<int>(i));
  if (policy_) ::munmap(policy_, sizeof(GatePolicyTable));
  for (int fd : {policy_fd_, policy_ro_fd_})
    if (fd >= 0) ::close(fd);
}

void GateTableOwner::dropPage(int slot) {
  Page& page = pages_[static_cast<size_t>(slot)];
  if (page.map) ::munmap(page.map, sizeof(GateActivity));
  if (page.fd >= 0) ::close(page.fd);
  page = Page{};
}

GateActivity* GateTableOwner::activity(int slot) const {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return nullptr;
  return pages_[static_cast<size_t>(slot)].map;
}

int GateTableOwner::activityFd(int slot) const {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return -1;
  return pages_[static_cast<size_t>(slot)].fd;
}

Result<int> GateTableOwner::peerFd(int slot, uint64_t session) const {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots || session == 0 ||
      policy_->slots[slot].session.load() != session || pages_[static_cast<size_t>(slot)].fd < 0)
    return Status(err::kInvalidValue, "no such session in the launch gate");
  int fd = pages_[static_cast<size_t>(slot)].fd;
  // Until its worker has mapped it and sealed it, a reopened descriptor could still be mapped writable.
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_FUTURE_WRITE)) return Status(err::kNotReady, "its worker has not sealed its page yet");
  int ro = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) return Status(err::kUnknown, std::string("reopening a gate page read-only: ") + std::strerror(errno));
  return ro;
}

int GateTableOwner::assign(uint64_t session, const std::vector<int>& devices, int priority, double weight) {
  uint64_t mask = 0;
  for (int d : devices)
    if (d >= 0 && d < 64) mask |= 1ull << d;
  uint64_t vmin = std::numeric_limits<uint64_t>::max();
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    const GatePolicy& p = policy_->slots[i];
    if (p.session.load() && (p.devices.load() & mask) && pages_[i].map) vmin = std::min(vmin, virtualTime(p, *pages_[i].map));
  }
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    GatePolicy& p = policy_->slots[i];
    if (p.session.load()) continue;
    auto page = makeShared<GateActivity>("rgpu-launch-activity");
    if (!page) return -1;
    pages_[i] = Page{page->first, page->second};
    p.devices = mask;
    p.priority = priority;
    p.weight_milli = static_cast<uint32_t>(std::clamp(weight * 1000, 1.0, 1e6));
    page->second->vstart_ns = vmin == std::numeric_limits<uint64_t>::max() ? 0 : vmin;
    p.session = session;  // last: the slot is live
    return static_cast<int>(i);
  }
  return -1;
}

void GateTableOwner::update(int slot, int priority, double weight) {
  GateActivity* a = activity(slot);
  if (!a) return;
  GatePolicy& p = policy_->slots[slot];
  // Keep its virtual time where it is across the change of weight.
  uint64_t vt = virtualTime(p, *a);
  p.priority = priority;
  p.weight_milli = static_cast<uint32_t>(std::clamp(weight * 1000, 1.0, 1e6));
  uint64_t now = virtualTime(p, *a);
  a->vstart_ns = a->vstart_ns.load() + vt - std::min(vt, now);
}

void GateTableOwner::clear(int slot) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return;
  GatePolicy& p = policy_->slots[slot];
  // A worker that died in the middle of a kernel leaves its devices to the
  // others (who may still have its page mapped until they see the slot change).
  if (GateActivity* a = activity(slot)) {
    for (auto& h : a->holding_since) h = 0;
    a->pending = 0;
  }
  p.session = 0;
  p.devices = 0;
  dropPage(slot);
}

Result<std::unique_ptr<SharedLaunchGate>> SharedLaunchGate::map(int own_fd, int policy_fd, int slot,
                                                                std::vector<int> physical, PeerSource peers) {
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } own{own_fd};
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return Status(err::kInvalidValue, "bad gate slot");
  // The policy must come read-only: a descriptor we could write through means
  // the daemon handed us the wrong one.
  int mode = ::fcntl(policy_fd, F_GETFL);
  if (mode < 0 || (mode & O_ACCMODE) != O_RDONLY)
    return Status(err::kInvalidValue, "the launch gate policy descriptor is not read-only");
  auto mine = mapShared<GateActivity>(own_fd, true, "this session's launch gate page");
  if (!mine) return mine.status();
  // Nobody maps it writable after us (the daemon hands it to others only
  // once this seal is on).
  if (::fcntl(own_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status st(err::kUnknown, std::string("sealing this session's launch gate page: ") + std::strerror(errno));
    ::munmap(*mine, sizeof(GateActivity));
    return st;
  }
  auto p = mapShared<GatePolicyTable>(policy_fd, false, "the launch gate policy");
  if (!p) {
    ::munmap(*mine, sizeof(GateActivity));
    return p.status();
  }
  return std::unique_ptr<SharedLaunchGate>(new SharedLaunchGate(*mine, *p, slot, std::move(physical), std::move(peers)));
}

SharedLaunchGate::~SharedLaunchGate() {
  for (uint32_t i = 0; i < kMaxGateSlots; ++i)
    if (peers_[i].map) ::munmap(const_cast<GateActivity*>(peers_[i].map), sizeof(GateActivity));
  ::munmap(mine_, sizeof(GateActivity));
  ::munmap(const_cast<GatePolicyTable*>(policy_), sizeof(GatePolicyTable));
}

const GateActivity* SharedLaunchGate::peer(uint32_t i, uint64_t session) {
  Peer& p = peers_[i];
  if (p.map && p.session == session) return p.map;
  if (p.map) {  // the slot serves another session now
    ::munmap(const_cast<GateActivity*>(p.map), sizeof(GateActivity));
    p = Peer{};
  }
  uint64_t now = monotonicNs();
  if (p.session == session && now < p.retry_ns) return nullptr;
  p.session = session;
  p.retry_ns = now + kPeerRetryNs;
  int fd = peer_source_ ? peer_source_(static_cast<int>(i), session) : -1;
  if (fd < 0) return nullptr;
  auto m = mapShared<GateActivity>(fd, false, "another session's launch gate page");
  ::close(fd);
  if (!m) return nullptr;
  p.map = *m;
  return p.map;
}

template <typename F>
bool SharedLaunchGate::forEachPeer(int host, F&& visit) {
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    const GatePolicy& p = policy_->slots[i];
    uint64_t session = p.session.load();
    if (static_cast<int>(i) == my_slot_ || !session || !onDevice(p, host)) continue;
    const GateActivity* s = peer(i, session);
    if (s && visit(i, p, *s)) return true;
  }
  return false;
}

void SharedLaunchGate::queued(int device) {
  if (mine_->pending.fetch_add(1) != 0) return;
  // Back from idle: no credit for the time it did not compete.
  int host = physical_[static_cast<size_t>(device)];
  uint64_t vmin = std::numeric_limits<uint64_t>::max();
  {
    std::lock_guard lock(mu_);
    forEachPeer(host, [&](uint32_t, const GatePolicy& p, const GateActivity& s) {
      if (p.priority.load() == my_policy_->priority.load() && s.pending.load()) vmin = std::min(vmin, virtualTime(p, s));
      return false;
    });
  }
  uint64_t vt = virtualTime(*my_policy_, *mine_);
  if (vmin != std::numeric_limits<uint64_t>::max() && vt + kFairSlackNs < vmin)
    mine_->vstart_ns += vmin - kFairSlackNs - vt;
}

bool SharedLaunchGate::heldBack(int host) {
  int prio = my_policy_->priority.load();
  uint64_t vt = virtualTime(*my_policy_, *mine_), now = monotonicNs();
  return forEachPeer(host, [&](uint32_t, const GatePolicy& p, const GateActivity& s) {
    int pr = p.priority.load();
    bool busy = s.pending.load() > 0;
    return (pr > prio && (busy || now - s.idle_since_ns.load() < kHoldoverNs)) ||
           (pr == prio && busy && virtualTime(p, s) + kFairSlackNs < vt);
  });
}

void SharedLaunchGate::contenders(int host, uint64_t mine_since, bool& older, bool& younger) {
  older = younger = false;
  uint64_t now = monotonicNs();
  forEachPeer(host, [&](uint32_t i, const GatePolicy&, const GateActivity& s) {
    uint64_t since = s.holding_since[host].load();  // seq_cst: after our own flag went up
    if (since == 0 || now - std::min(now, since) > kStuckNs) return false;  // free, or a kernel that never ends
    if (since < mine_since || (since == mine_since && static_cast<int>(i) < my_slot_)) older = true;
    else younger = true;
    return false;
  });
}

bool SharedLaunchGate::acquire(int device) {
  int host = physical_[static_cast<size_t>(device)];
  if (host < 0 || host >= kMaxGateDevices) return false;
  std::atomic<uint64_t>& flag = mine_->holding_since[host];
  uint64_t join_deadline = monotonicNs() + kMaxJoinWaitNs;
  // Waiting costs the running session nothing but our wake-ups: back off from
  // 50 us to 1 ms (well inside kHoldoverNs, so a higher class's gaps stay covered).
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    {
      std::lock_guard lock(mu_);
      bool held_back = heldBack(host);
      if (holding_[host] > 0) {
        // We hold it: join, unless someone is owed the device (then let ours drain, within a bound).
        if (!held_back || monotonicNs() > join_deadline) {
          ++holding_[host];
          return true;
        }
      } else if (!held_back) {
        // Raise our flag, then look at the others' (Dekker: of two that do
        // this at once, at least one sees the other).
        uint64_t since = monotonicNs();
        flag.store(since);
        bool older = false, younger = false;
        contenders(host, since, older, younger);
        if (!older) {
          // A younger claim backs off when it sees ours; one that did not see
          // ours runs its kernel first and then drops it.
          while (younger) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            contenders(host, since, older, younger);
          }
          holding_[host] = 1;
          return true;
        }
        flag.store(0);
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
    if (holding_[host] > 0 && --holding_[host] == 0) mine_->holding_since[host] = 0;
  }
  mine_->gpu_ns += gpu_ns;
  if (mine_->pending.fetch_sub(1) == 1) mine_->idle_since_ns = monotonicNs();
}

}  // namespace rgpu::server
