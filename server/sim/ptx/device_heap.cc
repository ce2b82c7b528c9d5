#include "server/sim/ptx/device_heap.h"

#include <algorithm>

namespace rgpu::server::ptx {

uint64_t DeviceHeap::allocate(uint64_t bytes, uint64_t align) {
  if (bytes == 0 || bytes > size_ || align == 0 || (align & (align - 1)) || align > size_) return 0;
  align = std::max(align, kAlign);
  uint64_t want = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    // The first address in this free block at the alignment asked.
    const uint64_t start = (base_ + it->first + align - 1) / align * align - base_;
    const uint64_t skip = start - it->first;
    if (skip > it->second || it->second - skip < want) continue;
    uint64_t at = it->first, left = it->second - skip - want;
    free_.erase(it);
    if (skip) free_[at] = skip;
    if (left) free_[start + want] = left;
    used_[start] = want;
    return base_ + start;
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
