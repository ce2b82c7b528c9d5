#include "server/backend/address_space.h"

namespace rgpu::server {

std::pair<uint64_t, uint64_t> spanWindow(uint32_t window) {
  if (window == 0) return {kSimDeviceWindow, 16};
  if (window >= kSpanWindows) return {0, 0};
  return {kSimDeviceWindow + window * kSpanWindowSlots * kDeviceWindowSlot, kSpanWindowSlots};
}

RangeAllocator::RangeAllocator(uint64_t base, uint64_t size) : base_(base), size_(size) {
  if (size) addFree(base, size);
}

void RangeAllocator::addFree(uint64_t p, uint64_t size) {
  free_by_addr_[p] = size;
  free_by_size_.emplace(size, p);
}

void RangeAllocator::removeFree(std::map<uint64_t, uint64_t>::iterator it) {
  auto [b, e] = free_by_size_.equal_range(it->second);
  for (auto s = b; s != e; ++s)
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  free_by_addr_.erase(it);
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t size, uint64_t align) {
  if (size == 0 || align == 0 || (align & (align - 1))) return std::nullopt;
  // The smallest block that holds `size` once its start is aligned; blocks
  // are usually aligned already (every size its owner asks for is a
  // multiple of the alignment), so the first candidate nearly always fits.
  for (auto fit = free_by_size_.lower_bound(size); fit != free_by_size_.end(); ++fit) {
    const uint64_t block = fit->second, block_size = fit->first;
    const uint64_t at = (block + align - 1) & ~(align - 1);
    if (at < block || at - block > block_size - size) continue;
    removeFree(free_by_addr_.find(block));
    if (at > block) addFree(block, at - block);
    if (block + block_size > at + size) addFree(at + size, block + block_size - (at + size));
    used_[at] = size;
    return at;
  }
  return std::nullopt;
}

bool RangeAllocator::allocateAt(uint64_t at, uint64_t size) {
  if (size == 0 || at + size < at) return false;
  // The free block that starts at or before `at` must hold all of it.
  auto it = free_by_addr_.upper_bound(at);
  if (it == free_by_addr_.begin()) return false;
  --it;
  const uint64_t block = it->first, block_size = it->second;
  if (at + size > block + block_size) return false;
  removeFree(it);
  if (at > block) addFree(block, at - block);
  if (block + block_size > at + size) addFree(at + size, block + block_size - (at + size));
  used_[at] = size;
  return true;
}

uint64_t RangeAllocator::free(uint64_t p) {
  auto it = used_.find(p);
  if (it == used_.end()) return 0;
  const uint64_t freed = it->second;
  uint64_t start = p, size = freed;
  used_.erase(it);
  auto next = free_by_addr_.lower_bound(start);
  if (next != free_by_addr_.end() && next->first == start + size) {
    size += next->second;
    removeFree(next);
  }
  auto prev = free_by_addr_.lower_bound(start);
  if (prev != free_by_addr_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      removeFree(prev);
    }
  }
  addFree(start, size);
  return freed;
}

}  // namespace rgpu::server
