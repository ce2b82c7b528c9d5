#include "server/sim/device_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "server/backend/allocation_table.h"
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
  // Transparent huge pages where the kernel gives them on request: the first
  // write to fresh device memory then takes one fault per 2 MiB instead of
  // one per 4 KiB (a 64 MiB upload's first copy: about 0.3 s of faults on a
  // virtual machine). Only a hint: refused or unsupported, pages stay small.
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  return std::unique_ptr<DeviceArena>(new DeviceArena(reinterpret_cast<uint64_t>(p), bytes));
}

DeviceArena::DeviceArena(uint64_t base, uint64_t size) : base_(base), size_(size), ranges_(base, size) {}

DeviceArena::~DeviceArena() { munmap(reinterpret_cast<void*>(base_), size_); }

Result<uint64_t> DeviceArena::allocate(uint64_t size) {
  uint64_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  if (rounded < size || rounded == 0) rounded = kAlign;
  std::lock_guard lock(mu_);
  auto p = ranges_.allocate(rounded, kAlign);
  if (!p)
    return Status(err::kMemoryAllocation, "no free block of " + std::to_string(rounded) + " bytes in the " +
                                              std::to_string(size_) + "-byte device address range");
  return *p;
}

Status DeviceArena::allocateAt(uint64_t p, uint64_t size) {
  if (p % kAlign) return Status(err::kInvalidValue, "device address " + std::to_string(p) + " is not 512-byte aligned");
  uint64_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  if (rounded < size || rounded == 0) rounded = kAlign;
  std::lock_guard lock(mu_);
  if (!ranges_.allocateAt(p, rounded))
    return Status(err::kMemoryAllocation, "device range [" + hexAddress(p) + ", +" + std::to_string(rounded) +
                                              ") is taken or outside this arena [" + hexAddress(base_) + ", +" +
                                              std::to_string(size_) + ")");
  return Status::ok();
}

bool DeviceArena::free(uint64_t p) {
  std::lock_guard lock(mu_);
  const uint64_t size = ranges_.free(p);
  if (size == 0) return false;
  // Pages wholly inside the freed range hold no other allocation: back to the system.
  const uint64_t page = pageSize();
  uint64_t first = (p + page - 1) / page * page, last = (p + size) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

}  // namespace rgpu::server
