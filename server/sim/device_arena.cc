#include "server/sim/device_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/sanitizers.h"

namespace rgpu::server {
namespace {

constexpr uint64_t kAlign = 512;

uint64_t pageSize() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

void* mapAt(uint64_t want, uint64_t bytes, bool fixed) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED_NOREPLACE : 0);
  void* p = mmap(fixed ? reinterpret_cast<void*>(want) : nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (fixed && p != reinterpret_cast<void*>(want)) {  // taken as a hint only (an old kernel, a sanitizer)
    munmap(p, bytes);
    return nullptr;
  }
  return p;
}

}  // namespace

std::pair<uint64_t, uint64_t> DeviceArena::spanWindow(uint32_t window) {
  if (window == 0) return {kSimDeviceWindow, 16};
  if (window >= kSpanWindows) return {0, 0};
  return {kSimDeviceWindow + window * kSpanWindowSlots * kDeviceWindowSlot, kSpanWindowSlots};
}

Result<std::unique_ptr<DeviceArena>> DeviceArena::create(uint64_t bytes, uint64_t preferred, uint64_t slots) {
  const uint64_t page = pageSize();
  bytes = (bytes + page - 1) / page * page;
  if (bytes == 0) bytes = page;
  uint64_t stride = (bytes + kDeviceWindowSlot - 1) / kDeviceWindowSlot * kDeviceWindowSlot;
#if RGPU_TSAN
  // ThreadSanitizer allows application memory only in its own ranges: the
  // window is not one of them, so the system places the arena.
  preferred = 0;
#endif
  void* p = nullptr;
  for (uint64_t slot = 0; slot < slots && !p && preferred; ++slot) p = mapAt(preferred + slot * stride, bytes, true);
  if (!p) {
    common::logOnce("device-window", "simulated device memory is not in its usual address window (" +
                                         std::string(std::strerror(errno)) + "): placed by the system instead");
    p = mapAt(0, bytes, false);
  }
  if (!p)
    return Status(err::kMemoryAllocation, "cannot reserve " + std::to_string(bytes) +
                                              " bytes of address space for simulated device memory: " +
                                              std::strerror(errno));
  return std::unique_ptr<DeviceArena>(new DeviceArena(reinterpret_cast<uint64_t>(p), bytes));
}

DeviceArena::DeviceArena(uint64_t base, uint64_t size) : base_(base), size_(size) { addFreeLocked(base, size); }

DeviceArena::~DeviceArena() { munmap(reinterpret_cast<void*>(base_), size_); }

void DeviceArena::addFreeLocked(uint64_t p, uint64_t size) {
  free_by_addr_[p] = size;
  free_by_size_.emplace(size, p);
}

void DeviceArena::removeFreeLocked(std::map<uint64_t, uint64_t>::iterator it) {
  auto [b, e] = free_by_size_.equal_range(it->second);
  for (auto s = b; s != e; ++s)
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  free_by_addr_.erase(it);
}

Result<uint64_t> DeviceArena::allocate(uint64_t size) {
  uint64_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  if (rounded < size || rounded == 0) rounded = kAlign;
  std::lock_guard lock(mu_);
  auto fit = free_by_size_.lower_bound(rounded);  // the smallest block that fits
  if (fit == free_by_size_.end())
    return Status(err::kMemoryAllocation, "no free block of " + std::to_string(rounded) + " bytes in the " +
                                              std::to_string(size_) + "-byte device address range");
  uint64_t p = fit->second, block = fit->first;
  removeFreeLocked(free_by_addr_.find(p));
  if (block > rounded) addFreeLocked(p + rounded, block - rounded);
  used_[p] = rounded;
  return p;
}

bool DeviceArena::free(uint64_t p) {
  std::lock_guard lock(mu_);
  auto it = used_.find(p);
  if (it == used_.end()) return false;
  uint64_t start = p, size = it->second;
  used_.erase(it);
  // Pages wholly inside the freed range hold no other allocation: back to the system.
  const uint64_t page = pageSize();
  uint64_t first = (start + page - 1) / page * page, last = (start + size) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  // Merge with the free neighbours.
  auto next = free_by_addr_.lower_bound(start);
  if (next != free_by_addr_.end() && next->first == start + size) {
    size += next->second;
    removeFreeLocked(next);
  }
  auto prev = free_by_addr_.lower_bound(start);
  if (prev != free_by_addr_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      removeFreeLocked(prev);
    }
  }
  addFreeLocked(start, size);
  return true;
}

}  // namespace rgpu::server
