#include "server/sim/ptx/device_heap.h"

namespace rgpu::server::ptx {

uint64_t DeviceHeap::allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > size_) return 0;
  uint64_t want = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    uint64_t at = it->first, left = it->second - want;
    free_.erase(it);
    if (left) free_[at + want] = left;
    used_[at] = want;
    return base_ + at;
  }
  return 0;
}

bool DeviceHeap::release(uint64_t address) {
  if (address < base_ || address >= base_ + size_) return false;
  std::lock_guard lock(mu_);
  auto u = used_.find(address - base_);
  if (u == used_.end()) return false;
  uint64_t at = u->first, len = u->second;
  used_.erase(u);
  // Coalesce with the free neighbours on both sides.
  auto next = free_.lower_bound(at);
  if (next != free_.end() && at + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += len;
      return true;
    }
  }
  free_[at] = len;
  return true;
}

uint64_t DeviceHeap::inUse() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (auto& [at, len] : used_) n += len;
  return n;
}

std::vector<std::pair<uint64_t, uint64_t>> DeviceHeap::blocks() const {
  std::lock_guard lock(mu_);
  return {used_.begin(), used_.end()};
}

bool DeviceHeap::restore(const std::vector<std::pair<uint64_t, uint64_t>>& blocks) {
  std::map<uint64_t, uint64_t> used, free;
  uint64_t end = 0;  // of the previous block
  for (auto [at, len] : blocks) {
    if (len == 0 || at % kAlign || len % kAlign || at < end || at > size_ || len > size_ - at) return false;
    if (at > end) free[end] = at - end;
    used[at] = len;
    end = at + len;
  }
  if (end < size_) free[end] = size_ - end;
  std::lock_guard lock(mu_);
  used_.swap(used);
  free_.swap(free);
  return true;
}

}  // namespace rgpu::server::ptx
