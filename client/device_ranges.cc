#include "client/device_ranges.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/log.h"

namespace rgpu::client {
namespace {

uint64_t pageSize() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// 0: reserved; else the errno of the refusal.
int mapNothing(uint64_t start, uint64_t len) {
  void* want = reinterpret_cast<void*>(start);
  void* got = mmap(want, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == MAP_FAILED) return errno;
  if (got != want) {  // a kernel without MAP_FIXED_NOREPLACE treats it as a hint
    munmap(got, len);
    return EEXIST;
  }
  return 0;
}

}  // namespace

void DeviceRanges::splitAt(uint64_t at) {
  auto it = segments_.upper_bound(at);
  if (it == segments_.begin()) return;
  --it;
  if (it->first == at || it->second.end <= at) return;
  Segment tail{it->second.end, it->second.count};
  it->second.end = at;
  segments_.emplace(at, tail);
}

DeviceRanges::Result DeviceRanges::reserve(uint64_t p, uint64_t size) {
  if (size == 0) return Result::kReserved;
  const uint64_t page = pageSize();
  uint64_t start = p / page * page, end = (p + size + page - 1) / page * page;
  if (end <= start) return Result::kUnavailable;  // wraps around
  std::lock_guard lock(mu_);
  splitAt(start);
  splitAt(end);
  // The gaps between our segments inside [start, end) get new reservations.
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  uint64_t at = start;
  for (auto it = segments_.lower_bound(start); it != segments_.end() && it->first < end; ++it) {
    if (it->first > at) gaps.emplace_back(at, it->first);
    at = it->second.end;
  }
  if (at < end) gaps.emplace_back(at, end);
  std::vector<std::pair<uint64_t, uint64_t>> mapped;
  int refused = 0;
  for (auto [a, b] : gaps) {
    if (int e = mapNothing(a, b - a)) {
      refused = e;
      break;
    }
    mapped.emplace_back(a, b);
  }
  if (refused) {
    for (auto [a, b] : mapped) munmap(reinterpret_cast<void*>(a), b - a);
    if (refused == EEXIST) return Result::kCollides;
    common::logOnce("device-ranges", std::string("cannot reserve device address ranges in this process (") +
                                         std::strerror(refused) +
                                         "): host and device pointers are told apart by the allocation table only");
    return Result::kUnavailable;
  }
  for (auto it = segments_.lower_bound(start); it != segments_.end() && it->first < end; ++it) ++it->second.count;
  for (auto [a, b] : mapped) segments_.emplace(a, Segment{b, 1});
  return Result::kReserved;
}

void DeviceRanges::release(uint64_t p, uint64_t size) {
  if (size == 0) return;
  const uint64_t page = pageSize();
  uint64_t start = p / page * page, end = (p + size + page - 1) / page * page;
  std::lock_guard lock(mu_);
  splitAt(start);
  splitAt(end);
  for (auto it = segments_.lower_bound(start); it != segments_.end() && it->first < end;) {
    if (--it->second.count > 0) {
      ++it;
      continue;
    }
    munmap(reinterpret_cast<void*>(it->first), it->second.end - it->first);
    it = segments_.erase(it);
  }
}

}  // namespace rgpu::client
