// Managed memory (cudaMallocManaged) over the network: one pointer that the
// program uses on the host and kernels use on the server's device.
//
// The device side is an ordinary allocation of the server's (counted against
// the quota like cudaMalloc's, zeroed when made). Its address range is
// reserved in this process anyway (client/device_ranges.h); for managed
// memory the reservation becomes the host side: the same addresses, backed by
// this process's pages, whose protection tracks who holds the bytes. The
// coherence is that of a device whose concurrentManagedAccess is 0 (reported
// so):
//
// - a page the host has no copy of is PROT_NONE. The program's first access
//   faults (SIGSEGV, handled here): the page — with the rest of its 64 KiB
//   block the host lacks — is fetched from the server (a page the device has
//   never been given work since the allocation is zeros: nothing travels) and
//   becomes readable. A fault on the page right after the last fetch of the
//   allocation (a sequential read) fetches twice as many pages as that one
//   did, up to 4 MiB;
// - a write to a readable page faults once more and makes it writable and
//   dirty;
// - before any request that is device work (a launch, a graph launch, a copy
//   or memset of device memory, a cuBLAS call), the dirty pages travel to the
//   server, synchronously (so every stream sees them), in runs of contiguous
//   pages through the bulk path; then every host copy is dropped (PROT_NONE):
//   the device may change any managed byte from then on.
//
// So only the pages the program touches travel, and a program that never
// touches a managed buffer on the host moves no bytes. Fetches run on a
// non-blocking stream of the runtime's own, so a host function that reads
// managed memory is not stuck behind its own stream. Touching managed memory
// on the host while device work that uses it runs is undefined, as on a GPU
// without concurrent managed access (where it is a segmentation fault): here
// the host sees the bytes as the device has them at that moment.
//
// The runtime never reads or writes managed memory as host memory itself: a
// copy whose host side is managed is made a device-side copy (effectiveKind),
// so no runtime thread faults while it holds a lock.
//
// Thread-safe. Faults of other kinds go to the handler that was installed before.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace rgpu::client {

// The unit the host side of managed and mapped memory is tracked and protected in.
inline constexpr uint64_t kManagedPage = 4096;

class ManagedMemory {
 public:
  static ManagedMemory& get();

  // [p, p + size) lies in a fresh (zeroed) device allocation at `server_base`
  // whose range this process has reserved: it becomes managed. Installs the
  // fault handler on first use.
  // Mapped host memory (cudaHostAlloc with cudaHostAllocMapped): the host
  // range [p, p + size) is this process's own pages, the device side is at
  // `device_addr` (0: at p, managed memory) on `device`.
  // `host_has_bytes`: the host's pages hold the bytes (registered memory): they go up at the next device work.
  // `initialised`: the device's bytes are not zeros (a __managed__ variable's initial value): the host fetches them.
  Status add(uint64_t p, uint64_t size, uint64_t server_base, uint64_t device_addr, int device,
             bool host_has_bytes = false, bool initialised = false);
  // Where the runtime reads or writes `p` (a copy's side): for mapped host
  // memory its device alias, else `p` itself.
  const void* deviceSide(const void* p);
  // `p` is the device alias of mapped host memory; hostSide gives its host address (0: none).
  bool mappedDevice(const void* p);
  uint64_t hostSide(const void* p);
  // cudaFree / cudaFreeHost / cudaHostUnregister: the allocation the server
  // knows (0: `p` is not managed or mapped memory). The range is left
  // PROT_NONE, or, with `give_back`, holding the device's bytes and writable
  // (registered memory goes back to the program as it is now).
  uint64_t remove(uint64_t p, bool give_back = false);
  bool contains(const void* p);
  // cudaDeviceReset: the device's managed memory and streams are gone.
  void forgetDevice(int device);
  // The managed allocation holding [p, p + count) (false: none holds it all).
  bool range(const void* p, size_t count, uint64_t* base = nullptr, uint64_t* size = nullptr);
  // What cudaMemAdvise and cudaMemPrefetchAsync said of an allocation (cudaMemRangeGetAttribute).
  struct Advice {
    bool read_mostly = false;
    cudaMemLocation preferred{cudaMemLocationTypeInvalid, 0};
    std::vector<int> accessed_by;
    cudaMemLocation last_prefetch{cudaMemLocationTypeInvalid, 0};
  };
  Advice advice(uint64_t base);
  void setAdvice(uint64_t base, const Advice& a);
  // Whether this thread is moving managed bytes (its requests are the runtime's own).
  static bool transferring();
  // While one lives, this thread's requests are the runtime's own (not device work of the program's).
  struct OwnRequests {
    OwnRequests();
    ~OwnRequests();
  };
  // Dirty pages to the server, then no host copies (see above). Called by the
  // runtime before each device-work request; reentrant calls (its own
  // uploads) return at once.
  Status beforeDeviceWork();
  // cudaMemPrefetchAsync to the host: the range's pages fetched now.
  Status prefetchToHost(uint64_t p, uint64_t size);

  // Bytes that travelled and faults handled, since the start (RGPU_MANAGED_STATS=1 prints them at exit).
  struct Stats {
    uint64_t up = 0, down = 0, faults = 0, fetches = 0;
  };
  Stats stats();

  // The fault handler's work: false when `addr` is not managed memory.
  bool handleFault(void* addr, bool write);

 private:
  enum : uint8_t { kNone, kClean, kDirty };  // host's copy of a page
  struct Alloc {
    int device = 0;
    uint64_t server_base = 0;
    uint64_t device_addr = 0;  // where the bytes are on the device (the host address for managed memory)
    Advice advice;
    uint64_t size;
    std::vector<uint8_t> pages;  // kNone / kClean / kDirty
    bool fresh = true;           // the device has had no work since it was made: its bytes are zeros
    bool host_pages = false;     // some page is kClean or kDirty
    // Read-ahead: a fault on the page after the last fetch fetches twice as much (up to 4 MiB).
    size_t next_fault = SIZE_MAX, ahead = 0;
  };
  Alloc* findLocked(uint64_t p, uint64_t* base);
  // Makes pages [first, last) of the allocation at `base` host-readable, fetching what the host lacks.
  Status fetchLocked(uint64_t base, Alloc& a, size_t first, size_t last);
  void installHandler();

  std::recursive_mutex mu_;  // recursive: a fetch's own call may flush (nothing to do then)
  std::map<uint64_t, Alloc> allocs_;
  // The runtime's own non-blocking stream on `device` for fetches and uploads (made on first use).
  Result<uint32_t> ownStreamLocked(int device);

  // Allocations registered: while 0 (most programs), the per-copy lookups return at once, without the lock.
  std::atomic<size_t> count_{0};
  std::atomic<bool> any_host_{false};   // some allocation has host pages
  std::atomic<bool> any_fresh_{false};  // some allocation is fresh
  std::atomic<uint64_t> up_{0}, down_{0}, faults_{0}, fetches_{0};
  std::map<int, uint32_t> own_streams_;
  std::map<uint64_t, uint64_t> by_device_;  // mapped memory: device alias -> host address
};

// Mapped host memory (client/api_managed.cc): cudaHostAlloc(..., cudaHostAllocMapped)
// is this process's own pages with a device alias the server allocated;
// cudaHostRegister(..., cudaHostRegisterMapped) gives pages the program has
// (whole pages only: the neighbours of a page are protected with it) one.
// The coherence is managed memory's.
Result<void*> allocateMapped(size_t size);
Status registerMapped(void* p, size_t size);
// cudaFreeHost / cudaHostUnregister of mapped memory (`registered`: the
// pages are the program's and stay, holding the device's bytes).
Status freeMapped(void* p, size_t size, bool registered);
// Gives device memory back to the server and forgets its range.
void freeDeviceMemory(uint64_t base);

// A copy's kind as the runtime carries it out: a host side that is managed
// memory is taken as device memory (cudaMemcpyDefault is resolved by the caller).
cudaMemcpyKind effectiveKind(void* dst, const void* src, cudaMemcpyKind kind);

}  // namespace rgpu::client
