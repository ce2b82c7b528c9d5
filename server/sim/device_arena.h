// Simulated device memory: one address-space reservation, carved into
// allocations.
//
// A GPU's memory lives at addresses of its own (the driver's unified address
// range), apart from a process's heap. Simulated devices get the same: their
// memory is one private, lazily committed mapping placed preferably in an
// otherwise unused window of the address space (kSimDeviceWindow, 32 TiB up,
// where neither the kernel's default placement nor sanitizers' shadow and
// allocator regions go). Device pointers then look like device pointers, and
// a client — which reserves every device range it learns of in its own
// address space (client/device_ranges.h) — never finds one on its own memory.
// Where the window cannot be had (a sanitizer that forbids it, a strict
// overcommit policy refusing the size), the arena lives wherever the kernel
// puts it.
//
// Allocations are best-fit over the free blocks, 512-byte aligned (as
// cudaMalloc's, and the texture alignment); freeing returns whole pages to the system. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "common/status.h"

namespace rgpu::server {

// Where sim devices' memory goes (first choice): 32 TiB, in 1 TiB slots.
inline constexpr uint64_t kSimDeviceWindow = 0x2000'0000'0000ull;
inline constexpr uint64_t kDeviceWindowSlot = 1ull << 40;
// A program whose devices are on several servers (a span, docs/pool.md) has
// one session on each: part k > 0 places its memory 4 slots further per part
// (4 slots tried), so the program's devices never share addresses; parts
// past kSpanWindows go where the system puts them (the client still detects
// an overlap: client/device_ranges.h).
inline constexpr uint32_t kSpanWindows = 16;
inline constexpr uint64_t kSpanWindowSlots = 4;

class DeviceArena {
 public:
  // Reserves `bytes` of address space, at the first free slot of
  // [preferred, preferred + `slots` slots) if it can, else anywhere.
  static Result<std::unique_ptr<DeviceArena>> create(uint64_t bytes, uint64_t preferred, uint64_t slots = 16);
  // Where the memory of span part `window` goes first, and how many slots are tried there.
  static std::pair<uint64_t, uint64_t> spanWindow(uint32_t window);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // `size` bytes (rounded up to 256), or kMemoryAllocation when no free block fits.
  Result<uint64_t> allocate(uint64_t size);
  // Frees an allocation of this arena (its size is remembered); false if `p` is not one.
  bool free(uint64_t p);
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  DeviceArena(uint64_t base, uint64_t size);
  void addFreeLocked(uint64_t p, uint64_t size);
  void removeFreeLocked(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t base_, size_;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> used_;          // allocation -> size
  std::map<uint64_t, uint64_t> free_by_addr_;  // free block -> size
  std::multimap<uint64_t, uint64_t> free_by_size_;  // size -> free block
};

}  // namespace rgpu::server
