#include "server/launch_gate.h"

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
bool onDevice(const GateSlot& s, int d) { return d >= 0 && d < kMaxGateDevices && (s.devices.load() >> d) & 1; }
uint64_t nowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
}  // namespace

uint64_t virtualTime(const GateSlot& s) {
  uint32_t w = std::max<uint32_t>(s.weight_milli.load(std::memory_order_relaxed), 1);
  return s.vstart_ns.load(std::memory_order_relaxed) + s.gpu_ns.load(std::memory_order_relaxed) * 1000 / w;
}

Result<GateTableOwner> GateTableOwner::create() {
  int fd = ::memfd_create("rgpu-launch-gate", MFD_CLOEXEC);
  if (fd < 0) return Status(err::kUnknown, std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, sizeof(GateTable)) != 0) {
    ::close(fd);
    return Status(err::kUnknown, std::string("ftruncate: ") + std::strerror(errno));
  }
  void* p = ::mmap(nullptr, sizeof(GateTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return Status(err::kUnknown, std::string("mmap: ") + std::strerror(errno));
  }
  return GateTableOwner(fd, new (p) GateTable());
}

GateTableOwner::GateTableOwner(GateTableOwner&& o) noexcept : fd_(o.fd_), table_(o.table_) {
  o.fd_ = -1;
  o.table_ = nullptr;
}

GateTableOwner::~GateTableOwner() {
  if (table_) ::munmap(table_, sizeof(GateTable));
  if (fd_ >= 0) ::close(fd_);
}

int GateTableOwner::assign(uint64_t session, const std::vector<int>& devices, int priority, double weight) {
  uint64_t mask = 0;
  for (int d : devices)
    if (d >= 0 && d < 64) mask |= 1ull << d;
  uint64_t vmin = std::numeric_limits<uint64_t>::max();
  for (auto& s : table_->slots)
    if (s.session.load() && (s.devices.load() & mask)) vmin = std::min(vmin, virtualTime(s));
  for (uint32_t i = 0; i < kMaxGateSlots; ++i) {
    GateSlot& s = table_->slots[i];
    if (s.session.load()) continue;
    s.devices = mask;
    s.priority = priority;
    s.weight_milli = static_cast<uint32_t>(std::clamp(weight * 1000, 1.0, 1e6));
    s.pending = 0;
    s.gpu_ns = 0;
    s.vstart_ns = vmin == std::numeric_limits<uint64_t>::max() ? 0 : vmin;
    s.session = session;  // last: the slot is live
    return static_cast<int>(i);
  }
  return -1;
}

void GateTableOwner::update(int slot, int priority, double weight) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return;
  GateSlot& s = table_->slots[slot];
  // Keep its virtual time where it is across the change of weight.
  uint64_t vt = virtualTime(s);
  s.priority = priority;
  s.weight_milli = static_cast<uint32_t>(std::clamp(weight * 1000, 1.0, 1e6));
  uint64_t now = virtualTime(s);
  s.vstart_ns = s.vstart_ns.load() + vt - std::min(vt, now);
}

void GateTableOwner::clear(int slot) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return;
  GateSlot& s = table_->slots[slot];
  // A worker that died in the middle of a kernel leaves the device to the others.
  uint64_t session = s.session.load();
  for (auto& d : table_->devices) {
    uint64_t expected = session;
    d.owner.compare_exchange_strong(expected, 0);
  }
  s.session = 0;
  s.pending = 0;
  s.devices = 0;
}

Result<std::unique_ptr<SharedLaunchGate>> SharedLaunchGate::map(int fd, int slot, std::vector<int> physical) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxGateSlots) return Status(err::kInvalidValue, "bad gate slot");
  void* p = ::mmap(nullptr, sizeof(GateTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status(err::kUnknown, std::string("mmap of the launch gate: ") + std::strerror(errno));
  auto* t = static_cast<GateTable*>(p);
  return std::unique_ptr<SharedLaunchGate>(new SharedLaunchGate(t, &t->slots[slot], std::move(physical)));
}

SharedLaunchGate::~SharedLaunchGate() { ::munmap(table_, sizeof(GateTable)); }

void SharedLaunchGate::queued(int device) {
  if (mine_->pending.fetch_add(1) != 0) return;
  // Back from idle: no credit for the time it did not compete.
  int host = physical_[static_cast<size_t>(device)];
  uint64_t vmin = std::numeric_limits<uint64_t>::max();
  for (auto& s : table_->slots)
    if (&s != mine_ && s.session.load() && s.pending.load() && onDevice(s, host) &&
        s.priority.load() == mine_->priority.load())
      vmin = std::min(vmin, virtualTime(s));
  uint64_t vt = virtualTime(*mine_);
  if (vmin != std::numeric_limits<uint64_t>::max() && vt + kFairSlackNs < vmin)
    mine_->vstart_ns += vmin - kFairSlackNs - vt;
}

bool SharedLaunchGate::heldBack(int host) const {
  int prio = mine_->priority.load();
  uint64_t vt = virtualTime(*mine_), now = nowNs();
  for (auto& s : table_->slots) {
    if (&s == mine_ || !s.session.load() || !onDevice(s, host)) continue;
    int p = s.priority.load();
    bool busy = s.pending.load() > 0;
    if (p > prio && (busy || now - s.idle_since_ns.load() < kHoldoverNs)) return true;
    if (p == prio && busy && virtualTime(s) + kFairSlackNs < vt) return true;
  }
  return false;
}

bool SharedLaunchGate::acquire(int device) {
  int host = physical_[static_cast<size_t>(device)];
  if (host < 0 || host >= kMaxGateDevices) return false;
  GateDevice& d = table_->devices[host];
  uint64_t me = mine_->session.load();
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
      uint64_t me = mine_->session.load();
      table_->devices[host].owner.compare_exchange_strong(me, 0);
    }
  }
  mine_->gpu_ns += gpu_ns;
  if (mine_->pending.fetch_sub(1) == 1) mine_->idle_since_ns = nowNs();
}

}  // namespace rgpu::server
