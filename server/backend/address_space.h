// Where device memory goes in a worker's address space, and the carving of
// an address range into allocations. Shared by the sim backend (its arena)
// and the CUDA backend (span parts placed with the driver's virtual memory
// management calls).
//
// Windows: sim devices' memory goes first at kSimDeviceWindow (32 TiB up, in
// 1 TiB slots), where neither the kernel's default placement, drivers, nor
// sanitizers' shadow and allocator regions go. A program whose devices are on
// several servers (a span, docs/pool.md) has one session on each; part k > 0
// places its memory in a window of its own, 4 slots further per part, so the
// program's devices never share addresses — whichever backend each member
// runs. Parts past kSpanWindows go where the system (or driver) puts them;
// the client still detects an overlap (client/device_ranges.h).
//
// RangeAllocator: best fit over the free blocks of one range, at the
// alignment each call asks for; neighbours merge when freed. Not thread-safe:
// its owner locks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace rgpu::server {

inline constexpr uint64_t kSimDeviceWindow = 0x2000'0000'0000ull;
inline constexpr uint64_t kDeviceWindowSlot = 1ull << 40;
inline constexpr uint32_t kSpanWindows = 16;
inline constexpr uint64_t kSpanWindowSlots = 4;

// Where the memory of span part `window` goes first, and how many 1 TiB slots
// it has there ({0, 0}: no window, the system places it). Part 0 (and a
// program on one server) has the 16 slots from kSimDeviceWindow.
std::pair<uint64_t, uint64_t> spanWindow(uint32_t window);

class RangeAllocator {
 public:
  RangeAllocator(uint64_t base, uint64_t size);

  // `size` bytes (> 0) at a multiple of `align` (a power of two), taken from
  // the smallest free block that holds them; nullopt when none does.
  std::optional<uint64_t> allocate(uint64_t size, uint64_t align);
  // Exactly [at, at + size) (a restored allocation); false when any of it is
  // taken or outside the range.
  bool allocateAt(uint64_t at, uint64_t size);
  // Frees an allocation; returns its size, 0 when `p` is not one.
  uint64_t free(uint64_t p);
  bool empty() const { return used_.empty(); }
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  void addFree(uint64_t p, uint64_t size);
  void removeFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t base_, size_;
  std::map<uint64_t, uint64_t> used_;               // allocation -> size
  std::map<uint64_t, uint64_t> free_by_addr_;       // free block -> size
  std::multimap<uint64_t, uint64_t> free_by_size_;  // size -> free block
};

}  // namespace rgpu::server
