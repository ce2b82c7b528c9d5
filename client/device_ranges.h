// Keeps this process's own memory out of the device address ranges it knows.
//
// Device pointers are the server's addresses, passed through unchanged, and
// nothing stops the client's own heap or mappings from lying at the same
// addresses: then a host buffer would be taken for device memory
// (cudaMemcpyDefault, cudaPointerGetAttributes). So every device range the
// client learns of is reserved in its own address space — PROT_NONE, no
// backing, MAP_FIXED_NOREPLACE — until it is freed: no later host mapping can
// land there, and an existing one is detected (the reservation fails) so the
// caller can get another device range instead.
//
// Ranges are page-aligned outward; a page shared by several device ranges is
// reserved once and counted. Where the process cannot reserve at all (an
// address-space limit, a sanitizer's shadow memory) the reservation is skipped
// with one log line: classification then rests on the allocation table alone.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace rgpu::client {

class DeviceRanges {
 public:
  enum class Result { kReserved, kCollides, kUnavailable };

  // Reserves [p, p + size). kCollides: some page of it is this process's own
  // memory (nothing is reserved then); kUnavailable: the system refused
  // (nothing reserved, the range is still usable as device memory).
  Result reserve(uint64_t p, uint64_t size);
  // Undoes one reserve() of the same range that returned kReserved.
  void release(uint64_t p, uint64_t size);

 private:
  struct Segment {
    uint64_t end;
    uint32_t count;
  };
  // Splits the segment containing `at` (if any) so that one starts there.
  void splitAt(uint64_t at);
  std::mutex mu_;
  std::map<uint64_t, Segment> segments_;  // disjoint page ranges we reserved, by start
};

}  // namespace rgpu::client
