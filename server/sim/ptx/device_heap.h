// The device heap that kernels' malloc() and free() draw on (a GPU's
// cudaLimitMallocHeapSize): one per device, a range of that device's memory
// reserved when the first kernel that calls malloc is launched, alive until
// the device is reset. Thread-safe: every lane of every block may allocate
// at once. First fit with coalescing; blocks 16-byte aligned, as NVIDIA's.
// malloc of 0 bytes or past what is free returns 0 (NULL), as on a GPU; free
// of 0 or of an address the heap did not hand out does nothing.
// __nv_aligned_device_malloc asks for a larger alignment (a power of 2; any
// other, 0 included, gets NULL) of the address itself.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>
#include <mutex>

namespace rgpu::server::ptx {

class DeviceHeap {
 public:
  DeviceHeap(uint64_t base, uint64_t size) : base_(base), size_(size) {
    if (size) free_[0] = size;
  }
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t allocate(uint64_t bytes, uint64_t align = kAlign);
  bool release(uint64_t address);
  uint64_t inUse() const;
  // The blocks in use (offset from base, length), for a checkpoint; restore()
  // takes them up in a fresh heap: false (and the heap unchanged) when one is
  // misaligned, past the heap or overlaps another.
  std::vector<std::pair<uint64_t, uint64_t>> blocks() const;
  bool restore(const std::vector<std::pair<uint64_t, uint64_t>>& blocks);

 private:
  static constexpr uint64_t kAlign = 16;
  const uint64_t base_, size_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
  std::map<uint64_t, uint64_t> used_;  // offset -> length
};

}  // namespace rgpu::server::ptx
