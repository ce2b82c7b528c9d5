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
// The windows, and a span part's own, are in server/backend/address_space.h.
// Where the window cannot be had (a sanitizer that forbids it, a strict
// overcommit policy refusing the size), the arena lives wherever the kernel
// puts it.
//
// Allocations are best-fit over the free blocks, 512-byte aligned (as
// cudaMalloc's, and the texture alignment); freeing returns whole pages to the system. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "server/backend/address_space.h"

namespace rgpu::server {

class DeviceArena {
 public:
  // Reserves `bytes` of address space, at the first free slot of
  // [preferred, preferred + `slots` slots) if it can, else anywhere.
  static Result<std::unique_ptr<DeviceArena>> create(uint64_t bytes, uint64_t preferred, uint64_t slots = 16);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // `size` bytes (rounded up to 512), or kMemoryAllocation when no free block fits.
  Result<uint64_t> allocate(uint64_t size);
  // Exactly [p, p + size rounded up to 512) (a restored session's
  // allocation, server/checkpoint/device_image.h): kMemoryAllocation when any
  // of it is taken or outside the arena, kInvalidValue when `p` is not aligned.
  Status allocateAt(uint64_t p, uint64_t size);
  // Frees an allocation of this arena (its size is remembered); false if `p` is not one.
  bool free(uint64_t p);
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  DeviceArena(uint64_t base, uint64_t size);

  const uint64_t base_, size_;
  std::mutex mu_;
  RangeAllocator ranges_;  // under mu_
};

}  // namespace rgpu::server
