// A session's device allocations: the authority every pointer a client names is
// checked against before any backend touches memory. A client can only read or
// write ranges inside allocations it made (or module variables it resolved).
// Not thread-safe: owned by the session's dispatch thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::server {

// A device address as the logs show it ("0x7f...").
std::string hexAddress(uint64_t v);

class AllocationTable {
 public:
  struct Entry {
    uint64_t size = 0;
    int device = 0;
    bool is_symbol = false;  // module variable: not freeable with cudaFree
  };

  explicit AllocationTable(uint64_t max_entries) : max_entries_(max_entries) {}

  Status add(uint64_t base, uint64_t size, int device, bool is_symbol = false);
  // Removes the allocation that starts exactly at `base` (cudaFree semantics).
  Result<Entry> remove(uint64_t base);
  // Drops any entry starting at base (module variables on unload).
  void forget(uint64_t base) {
    generation_ += entries_.erase(base);
  }
  // Changes whenever an allocation goes (what was checked before may be stale).
  uint64_t generation() const { return generation_; }
  // Checks that [ptr, ptr + size) lies inside one allocation; reports its device.
  Status check(uint64_t ptr, uint64_t size, int* device = nullptr) const;
  // Checks a pitched 2D region: `height` rows of `width` bytes, `pitch` apart.
  Status check2D(uint64_t ptr, uint64_t pitch, uint64_t width, uint64_t height, int* device = nullptr) const;
  // The allocation containing ptr, if any, with its base.
  const Entry* find(uint64_t ptr, uint64_t* base = nullptr) const;
  std::vector<uint64_t> bases() const;  // of allocations (module variables left out)
  // Every entry, module variables included (a checkpoint's copy of the table).
  std::vector<std::pair<uint64_t, Entry>> entries() const { return {entries_.begin(), entries_.end()}; }
  size_t count() const { return entries_.size(); }
  uint64_t bytesOn(int device) const;

 private:
  uint64_t max_entries_;
  uint64_t generation_ = 0;
  std::map<uint64_t, Entry> entries_;
};

}  // namespace rgpu::server
