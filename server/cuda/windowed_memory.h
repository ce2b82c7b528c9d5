// Device memory of a span part, or of a session that may be checkpointed,
// placed in an address window with the driver's virtual memory management
// calls.
//
// A program whose devices are on several members (a span, docs/pool.md)
// holds raw device pointers of each, and two hosts' drivers tend to hand out
// the same addresses. So part k > 0 of a span keeps its memory in its own
// window (server/backend/address_space.h), as sim members do: each device of
// the part gets one reservation there (cuMemAddressReserve at a fixed
// address: twice the device's memory, less where the part's devices would
// not fit its 4 TiB), carved in units of the allocation granularity G
// (cuMemGetAllocationGranularity; 2 MiB on current GPUs):
// - an allocation of more than G/2 bytes gets a physical allocation of its
//   own (cuMemCreate, its size rounded up to G), mapped at a G-aligned
//   address of the reservation;
// - smaller ones share chunks: one G-byte physical allocation mapped and
//   carved 512-byte aligned (cudaMalloc's alignment), as cudaMalloc packs
//   small allocations into its pages. A chunk that empties is unmapped and
//   released, except one per device kept for the next small allocation.
// Each mapping is readable and writable by its device and by every device
// of the session that can access it as a peer (cuDeviceCanAccessPeer), so
// copies between the session's devices work as with cuMemAlloc memory.
//
// A session on a server that checkpoints sessions ([checkpoint],
// docs/migration.md) has its memory in window 0 the same way, so that a new
// worker — on this host or another — can map the same addresses again:
// allocateAt() places an allocation exactly where a checkpoint says, by the
// same rules (an own mapping at a G-aligned address, or a block of the chunk
// at the G-aligned address below it), so an allocation placed there is one
// allocate() could have made.
//
// Where a device cannot have its window (the driver lacks the calls, the
// device does not support them, the addresses are taken), create() leaves it
// out with one log line naming why, and the backend uses cuMemAlloc for it:
// the client still refuses an allocation that overlaps another member's.
//
// The caller makes the device's context current before allocate() and
// release(); release() runs once the device's queued work is done (the
// backend's releaser). Thread-safe.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "server/backend/address_space.h"
#include "server/cuda/driver_api.h"

namespace rgpu::server::cuda {

class WindowedMemory {
 public:
  struct DeviceInfo {
    CUdevice dev = 0;
    uint64_t total_mem = 0;
  };
  // Reserves span part `window`'s addresses for `devices` (the session's, in
  // its order; window 0: the first kSpanWindowSlots slots of the part-0
  // window, for a session that may be checkpointed). `use(i)` makes device
  // i's context current. Null (and a log line) when no device could have
  // its window.
  static std::unique_ptr<WindowedMemory> create(DriverApi& api, const std::vector<DeviceInfo>& devices,
                                                uint32_t window, std::function<Status(int)> use);
  // Unmaps and releases everything still allocated, then the reservations.
  ~WindowedMemory();
  WindowedMemory(const WindowedMemory&) = delete;
  WindowedMemory& operator=(const WindowedMemory&) = delete;

  // Whether device `device` has its window (else: cuMemAlloc).
  bool has(int device) const;
  // `size` bytes of device `device`'s window; kMemoryAllocation when the
  // device's memory or the window is full.
  Result<CUdeviceptr> allocate(int device, uint64_t size);
  // Exactly [at, at + size) of device `device`'s window (a checkpoint's
  // allocation): kMemoryAllocation when any of it is taken, outside the
  // window, or not where allocate() would have put an allocation of `size`
  // (a big one G-aligned); an empty chunk in the way is unmapped first.
  Status allocateAt(int device, CUdeviceptr at, uint64_t size);
  // Frees an allocation made here; false when `p` is not one.
  bool release(CUdeviceptr p);
  bool owns(CUdeviceptr p) const;
  // Whether all of [p, p + size) is mapped (in one own mapping or one chunk).
  bool mapped(CUdeviceptr p, uint64_t size) const;

 private:
  struct Mapping {
    CUmemGenericAllocationHandle handle = 0;
    uint64_t size = 0;
  };
  struct Chunk {
    CUmemGenericAllocationHandle handle = 0;
    RangeAllocator blocks;
  };
  struct Device {
    int index = 0;
    CUdevice dev = 0;
    uint64_t base = 0, size = 0;  // the reservation (size 0: none)
    std::unique_ptr<RangeAllocator> addresses;  // the reservation, in units of G
    std::map<uint64_t, Mapping> own;            // allocations with a physical allocation of their own
    std::map<uint64_t, Chunk> chunks;           // shared chunks, by address
    uint64_t spare_chunk = 0;                   // an empty chunk kept mapped (0: none)
    std::vector<CUmemAccessDesc> access;        // this device and its peers: read-write
  };
  WindowedMemory(DriverApi& api, uint64_t granularity, std::function<Status(int)> use)
      : api_(api), granularity_(granularity), use_(std::move(use)) {}
  // Maps `size` bytes (a multiple of G) of new physical memory at a free
  // address of `d`'s reservation (`at` != 0 on entry: exactly there).
  Result<Mapping> mapNew(Device& d, uint64_t size, uint64_t& at);
  void unmap(Device& d, uint64_t at, const Mapping& m);
  Device* deviceOf(uint64_t p);
  const Device* deviceOf(uint64_t p) const;

  DriverApi& api_;
  const uint64_t granularity_;
  std::function<Status(int)> use_;
  mutable std::mutex mu_;
  std::vector<Device> devices_;  // by session device; fixed after create()
};

}  // namespace rgpu::server::cuda
