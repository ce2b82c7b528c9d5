#include "server/backend/allocation_table.h"

#include <cstdio>

namespace rgpu::server {
std::string hexAddress(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status AllocationTable::add(uint64_t base, uint64_t size, int device, bool is_symbol) {
  if (entries_.size() >= max_entries_)
    return Status(err::kMemoryAllocation, "session allocation limit reached (max_allocations = " +
                                              std::to_string(max_entries_) + ")");
  if (size == 0 || base + size < base) return Status(err::kInvalidValue, "empty or wrapping allocation");
  entries_[base] = {size, device, is_symbol};
  return Status::ok();
}

Result<AllocationTable::Entry> AllocationTable::remove(uint64_t base) {
  auto it = entries_.find(base);
  if (it == entries_.end() || it->second.is_symbol)
    return Status(err::kInvalidValue, "pointer " + hexAddress(base) + " is not the start of an allocation of this session");
  Entry e = it->second;
  entries_.erase(it);
  ++generation_;
  return e;
}

const AllocationTable::Entry* AllocationTable::find(uint64_t ptr, uint64_t* base) const {
  auto it = entries_.upper_bound(ptr);
  if (it == entries_.begin()) return nullptr;
  --it;
  if (ptr - it->first >= it->second.size) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

Status AllocationTable::check(uint64_t ptr, uint64_t size, int* device) const {
  uint64_t base = 0;
  const Entry* e = find(ptr, &base);
  if (!e)
    return Status(err::kInvalidValue, "pointer " + hexAddress(ptr) + " is not inside an allocation of this session");
  if (size > e->size - (ptr - base))
    return Status(err::kInvalidValue, "range " + hexAddress(ptr) + " + " + std::to_string(size) +
                                          " bytes runs past the end of its allocation (" + hexAddress(base) + ", " +
                                          std::to_string(e->size) + " bytes)");
  if (device) *device = e->device;
  return Status::ok();
}

Status AllocationTable::check2D(uint64_t ptr, uint64_t pitch, uint64_t width, uint64_t height, int* device) const {
  if (width > pitch) return Status(err::kInvalidPitchValue, "width exceeds pitch");
  if (height == 0 || width == 0) return check(ptr, 0, device);
  // Overflow-safe: (height - 1) * pitch + width must not wrap.
  if (pitch != 0 && height - 1 > (UINT64_MAX - width) / pitch)
    return Status(err::kInvalidValue, "2D region size overflows");
  return check(ptr, (height - 1) * pitch + width, device);
}

std::vector<uint64_t> AllocationTable::bases() const {
  std::vector<uint64_t> out;
  for (auto& [b, e] : entries_)
    if (!e.is_symbol) out.push_back(b);
  return out;
}

uint64_t AllocationTable::bytesOn(int device) const {
  uint64_t n = 0;
  for (auto& [b, e] : entries_)
    if (e.device == device) n += e.size;
  return n;
}

}  // namespace rgpu::server
