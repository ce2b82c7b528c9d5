// The fake CUDA driver's device memory: cuMemAlloc and friends, virtual
// memory management, pinned host memory, copies and memsets (fake_libcuda.cc
// says what the fake is; fake_cuda.h its shared state).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fake_driver/fake_cuda.h"

namespace rgpu::fake {

// ---- memory ----

CUresult fakeMemAlloc(CUdeviceptr* p, size_t size) {
  ENTER("cuMemAlloc");
  Driver& d = drv();
  int dev = t_ctx->device;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t rounded = (size + 255) / 256 * 256;
  if (d.used[dev] + rounded > d.memory) return CUDA_ERROR_OUT_OF_MEMORY;
  auto a = d.arena->allocate(rounded);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  void* m = reinterpret_cast<void*>(*a);
  if (!d.vram) std::memset(m, 0, rounded);  // as a GPU's: what was there before
  d.used[dev] += rounded;
  d.allocations[reinterpret_cast<uint64_t>(m)] = {dev, rounded};
  *p = reinterpret_cast<CUdeviceptr>(m);
  record("cuMemAlloc " + std::to_string(size) + " device=" + std::to_string(dev));
  return CUDA_SUCCESS;
}

// Rows at a 256-byte pitch (a GPU picks its own; rgpu must not assume one).
CUresult fakeMemAllocPitch(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned element) {
  {
    ENTER("cuMemAllocPitch");
    if (width == 0 || height == 0 || (element != 4 && element != 8 && element != 16)) return CUDA_ERROR_INVALID_VALUE;
  }
  size_t chosen = (width + 255) / 256 * 256;
  CUresult r = fakeMemAlloc(p, chosen * height);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard lock(drv().mu);
  drv().pitches[*p] = chosen;
  *pitch = chosen;
  record("cuMemAllocPitch " + std::to_string(width) + "x" + std::to_string(height) + " pitch=" + std::to_string(chosen));
  return CUDA_SUCCESS;
}

CUresult fakeMemFree(CUdeviceptr p) {
  ENTER("cuMemFree");
  Driver& d = drv();
  auto it = d.allocations.find(p);
  if (it == d.allocations.end() || d.vmm.count(p)) return CUDA_ERROR_INVALID_VALUE;
  // cuMemFree synchronises: wait for queued work (it may use the memory).
  synchronizeAll(lock);
  it = d.allocations.find(p);
  if (it == d.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  d.used[it->second.first] -= it->second.second;
  d.arena->free(p);
  d.allocations.erase(it);
  d.pitches.erase(p);
  record("cuMemFree");
  return CUDA_SUCCESS;
}

CUresult fakeMemGetInfo(size_t* free, size_t* total) {
  ENTER("cuMemGetInfo");
  *total = drv().memory;
  *free = drv().memory - drv().used[t_ctx->device];
  return CUDA_SUCCESS;
}

// ---- virtual memory management ----
// Granularity 2 MiB (as current GPUs'); reservations honour the address asked
// for when it is free, else go where the system puts them (the driver's
// addr is a hint). cuMemUnmap waits for queued work, as cuMemFree does.

constexpr uint64_t kVmmGranularity = 2ull << 20;

bool deviceProp(const CUmemAllocationProp* prop) {
  return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
         prop->location.id >= 0 && prop->location.id < drv().device_count;
}

CUresult fakeMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags) {
  ENTER("cuMemGetAllocationGranularity", false);
  if (!g || !deviceProp(prop)) return CUDA_ERROR_INVALID_VALUE;
  *g = kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult fakeMemAddressReserve(CUdeviceptr* p, size_t size, size_t align, CUdeviceptr addr, unsigned long long) {
  ENTER("cuMemAddressReserve");
  if (!p || size == 0 || size % kVmmGranularity || (align && (align & (align - 1)))) return CUDA_ERROR_INVALID_VALUE;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* m = MAP_FAILED;
  if (addr) {
    m = mmap(reinterpret_cast<void*>(addr), size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != MAP_FAILED && m != reinterpret_cast<void*>(addr)) {
      munmap(m, size);
      m = MAP_FAILED;
    }
  }
  if (m == MAP_FAILED) m = mmap(nullptr, size, PROT_NONE, flags, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(m);
  drv().reservations[*p] = size;
  record("cuMemAddressReserve " + std::to_string(size) + (*p == addr ? " at the address asked" : " elsewhere"));
  return CUDA_SUCCESS;
}

CUresult fakeMemAddressFree(CUdeviceptr p, size_t size) {
  ENTER("cuMemAddressFree");
  Driver& d = drv();
  auto it = d.reservations.find(p);
  if (it == d.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = d.mappings.lower_bound(p);
  if (m != d.mappings.end() && m->first < p + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  munmap(reinterpret_cast<void*>(p), size);
  d.reservations.erase(it);
  record("cuMemAddressFree");
  return CUDA_SUCCESS;
}

CUresult fakeMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop,
                       unsigned long long) {
  ENTER("cuMemCreate");
  Driver& d = drv();
  if (!h || size == 0 || size % kVmmGranularity || !deviceProp(prop)) return CUDA_ERROR_INVALID_VALUE;
  const int dev = prop->location.id;
  if (d.used[dev] + size > d.memory) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("rgpu-fake-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  d.used[dev] += size;
  *h = d.next_physical++;
  d.physical[*h] = {fd, size, dev, 0, false};
  record("cuMemCreate " + std::to_string(size) + " device=" + std::to_string(dev));
  return CUDA_SUCCESS;
}

// Frees a physical allocation once it is released and mapped nowhere (lock held).
void dropPhysical(CUmemGenericAllocationHandle h) {
  Driver& d = drv();
  auto it = d.physical.find(h);
  if (it == d.physical.end() || !it->second.released || it->second.mappings) return;
  close(it->second.fd);
  d.used[it->second.device] -= it->second.size;
  d.physical.erase(it);
}

CUresult fakeMemRelease(CUmemGenericAllocationHandle h) {
  ENTER("cuMemRelease", false);
  auto it = drv().physical.find(h);
  if (it == drv().physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  dropPhysical(h);
  record("cuMemRelease");
  return CUDA_SUCCESS;
}

CUresult fakeMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long) {
  ENTER("cuMemMap");
  Driver& d = drv();
  auto ph = d.physical.find(h);
  if (ph == d.physical.end() || ph->second.released || size == 0 || size % kVmmGranularity ||
      offset % kVmmGranularity || offset + size > ph->second.size)
    return CUDA_ERROR_INVALID_VALUE;
  auto r = d.reservations.upper_bound(p);
  if (r == d.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (p < r->first || p + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;  // not reserved
  auto after = d.mappings.lower_bound(p);
  if (after != d.mappings.end() && after->first < p + size) return CUDA_ERROR_INVALID_VALUE;  // mapped already
  if (after != d.mappings.begin() && std::prev(after)->first + std::prev(after)->second.second > p)
    return CUDA_ERROR_INVALID_VALUE;
  // No access until cuMemSetAccess, as the driver's mappings start.
  void* m = mmap(reinterpret_cast<void*>(p), size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->second.fd,
                 static_cast<off_t>(offset));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  d.mappings[p] = {h, size};
  ++ph->second.mappings;
  record("cuMemMap " + std::to_string(size));
  return CUDA_SUCCESS;
}

CUresult fakeMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc* desc, size_t count) {
  ENTER("cuMemSetAccess");
  Driver& d = drv();
  auto m = d.mappings.find(p);
  if (m == d.mappings.end() || m->second.second != size || !desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  bool owner = false;
  const int dev = d.physical[m->second.first].device;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
        desc[i].location.id >= d.device_count)
      return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].location.id == dev && desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) owner = true;
  }
  if (!owner) return CUDA_ERROR_INVALID_VALUE;  // rgpu always grants its own device read-write
  if (mprotect(reinterpret_cast<void*>(p), size, PROT_READ | PROT_WRITE) != 0) return CUDA_ERROR_UNKNOWN;
  d.allocations[p] = {dev, size};
  d.vmm.insert(p);
  record("cuMemSetAccess " + std::to_string(size) + " devices=" + std::to_string(count));
  return CUDA_SUCCESS;
}

CUresult fakeMemUnmap(CUdeviceptr p, size_t size) {
  ENTER("cuMemUnmap");
  Driver& d = drv();
  auto m = d.mappings.find(p);
  if (m == d.mappings.end() || m->second.second != size) return CUDA_ERROR_INVALID_VALUE;
  synchronizeAll(lock);
  m = d.mappings.find(p);
  if (m == d.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  const CUmemGenericAllocationHandle h = m->second.first;
  // Back to a bare reservation.
  mmap(reinterpret_cast<void*>(p), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  d.mappings.erase(m);
  d.allocations.erase(p);
  d.vmm.erase(p);
  --d.physical[h].mappings;
  dropPhysical(h);
  record("cuMemUnmap " + std::to_string(size));
  return CUDA_SUCCESS;
}

CUresult fakeDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  ENTER("cuDeviceCanAccessPeer", false);
  const int n = drv().device_count;
  if (!can || dev < 0 || dev >= n || peer < 0 || peer >= n) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer;
  return CUDA_SUCCESS;
}

CUresult fakeMemHostAlloc(void** p, size_t size, unsigned flags) {
  ENTER("cuMemHostAlloc");
  *p = std::malloc(size ? size : 1);
  drv().host_allocations[*p] = size;
  record("cuMemHostAlloc " + std::to_string(size));
  return CUDA_SUCCESS;
}

CUresult fakeMemFreeHost(void* p) {
  ENTER("cuMemFreeHost");
  if (!drv().host_allocations.count(p)) return CUDA_ERROR_INVALID_VALUE;
  synchronizeAll(lock);  // a copy queued from it may still be waiting to run
  if (!drv().host_allocations.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  record("cuMemFreeHost");
  return CUDA_SUCCESS;
}

// Host pointers of async copies must be pinned, or the copy is synchronous on a real GPU.
bool pinned(const void* p) {
  auto it = drv().host_allocations.upper_bound(p);
  if (it == drv().host_allocations.begin()) return false;
  --it;
  return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second;
}

CUresult fakeMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  ENTER("cuMemcpyHtoDAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  record(std::string("cuMemcpyHtoDAsync ") + std::to_string(n) + (pinned(src) ? " pinned" : " pageable"));
  enqueue(streamOf(s), [=] {
    std::memcpy(reinterpret_cast<void*>(dst), src, n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoHAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(src, n)) return CUDA_ERROR_INVALID_VALUE;
  record(std::string("cuMemcpyDtoHAsync ") + std::to_string(n) + (pinned(dst) ? " pinned" : " pageable"));
  enqueue(streamOf(s), [=] {
    std::memcpy(dst, reinterpret_cast<void*>(src), n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoDAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(dst, n) || !deviceRange(src, n)) return CUDA_ERROR_INVALID_VALUE;
  record("cuMemcpyDtoDAsync " + std::to_string(n));
  enqueue(streamOf(s), [=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemcpy2DAsync(const CUDA_MEMCPY2D* m, CUstream s) {
  ENTER("cuMemcpy2DAsync");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  CUDA_MEMCPY2D c = *m;
  auto base = [](CUmemorytype t, const void* host, CUdeviceptr dev) -> uint8_t* {
    return t == CU_MEMORYTYPE_HOST ? static_cast<uint8_t*>(const_cast<void*>(host)) : reinterpret_cast<uint8_t*>(dev);
  };
  uint8_t* src = base(c.srcMemoryType, c.srcHost, c.srcDevice) + c.srcXInBytes + c.srcY * c.srcPitch;
  uint8_t* dst = base(c.dstMemoryType, c.dstHost, c.dstDevice) + c.dstXInBytes + c.dstY * c.dstPitch;
  if (c.Height && (c.srcPitch < c.WidthInBytes || c.dstPitch < c.WidthInBytes)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t sspan = c.Height ? (c.Height - 1) * c.srcPitch + c.WidthInBytes : 0;
  uint64_t dspan = c.Height ? (c.Height - 1) * c.dstPitch + c.WidthInBytes : 0;
  if (c.srcMemoryType == CU_MEMORYTYPE_DEVICE && !deviceRange(reinterpret_cast<uint64_t>(src), sspan))
    return CUDA_ERROR_INVALID_VALUE;
  if (c.dstMemoryType == CU_MEMORYTYPE_DEVICE && !deviceRange(reinterpret_cast<uint64_t>(dst), dspan))
    return CUDA_ERROR_INVALID_VALUE;
  // "cuMemcpy2D() may fail for pitches not computed by cuMemAllocPitch()": here
  // it does, for a device pitch that is neither that nor a multiple of 32.
  auto pitchOk = [](uint64_t addr, size_t pitch) {
    Driver& d = drv();
    auto it = d.allocations.upper_bound(addr);
    if (it == d.allocations.begin()) return false;
    --it;
    auto pt = d.pitches.find(it->first);
    return pt != d.pitches.end() ? pt->second == pitch : pitch % 32 == 0;
  };
  if (c.Height > 1 && ((c.srcMemoryType == CU_MEMORYTYPE_DEVICE && !pitchOk(reinterpret_cast<uint64_t>(src), c.srcPitch)) ||
                       (c.dstMemoryType == CU_MEMORYTYPE_DEVICE && !pitchOk(reinterpret_cast<uint64_t>(dst), c.dstPitch)))) {
    record("cuMemcpy2DAsync refused: a pitch cuMemAllocPitch did not compute");
    return CUDA_ERROR_INVALID_VALUE;
  }
  record("cuMemcpy2DAsync " + std::to_string(c.WidthInBytes) + "x" + std::to_string(c.Height));
  enqueue(streamOf(s), [=] {
    for (size_t r = 0; r < c.Height; ++r) std::memmove(dst + r * c.dstPitch, src + r * c.srcPitch, c.WidthInBytes);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  ENTER("cuMemsetD8Async");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (!deviceRange(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  record("cuMemsetD8Async " + std::to_string(n));
  enqueue(streamOf(s), [=] {
    std::memset(reinterpret_cast<void*>(dst), v, n);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult fakeMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
  ENTER("cuMemsetD2D8Async");
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (h && (pitch < w || !deviceRange(dst, (h - 1) * pitch + w))) return CUDA_ERROR_INVALID_VALUE;
  record("cuMemsetD2D8Async " + std::to_string(w) + "x" + std::to_string(h));
  enqueue(streamOf(s), [=] {
    for (size_t r = 0; r < h; ++r) std::memset(reinterpret_cast<uint8_t*>(dst) + r * pitch, v, w);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

template <typename T>
CUresult fakeMemsetD2DN(const char* name, CUdeviceptr dst, size_t pitch, T v, size_t w, size_t h, CUstream s) {
  ENTER(name);
  if (!knownStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (h && (pitch < w * sizeof(T) || !deviceRange(dst, (h - 1) * pitch + w * sizeof(T)))) return CUDA_ERROR_INVALID_VALUE;
  if (dst % sizeof(T) || (h > 1 && pitch % sizeof(T))) return CUDA_ERROR_INVALID_VALUE;  // the driver's alignment rule
  record(std::string(name) + " " + std::to_string(w) + "x" + std::to_string(h));
  enqueue(streamOf(s), [=] {
    for (size_t r = 0; r < h; ++r)
      for (size_t x = 0; x < w; ++x) std::memcpy(reinterpret_cast<uint8_t*>(dst) + r * pitch + x * sizeof(T), &v, sizeof(T));
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}
CUresult fakeMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s) {
  return fakeMemsetD2DN("cuMemsetD2D16Async", dst, pitch, v, w, h, s);
}
CUresult fakeMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) {
  return fakeMemsetD2DN("cuMemsetD2D32Async", dst, pitch, v, w, h, s);
}

const std::map<std::string, void*>& memoryEntryPoints() {
  static const std::map<std::string, void*> t = {
      {"cuMemAlloc", reinterpret_cast<void*>(&fakeMemAlloc)},
      {"cuMemAllocPitch", reinterpret_cast<void*>(&fakeMemAllocPitch)},
      {"cuMemFree", reinterpret_cast<void*>(&fakeMemFree)},
      {"cuMemGetInfo", reinterpret_cast<void*>(&fakeMemGetInfo)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&fakeMemGetAllocationGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&fakeMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&fakeMemAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&fakeMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&fakeMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&fakeMemMap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&fakeMemSetAccess)},
      {"cuMemUnmap", reinterpret_cast<void*>(&fakeMemUnmap)},
      {"cuDeviceCanAccessPeer", reinterpret_cast<void*>(&fakeDeviceCanAccessPeer)},
      {"cuMemHostAlloc", reinterpret_cast<void*>(&fakeMemHostAlloc)},
      {"cuMemFreeHost", reinterpret_cast<void*>(&fakeMemFreeHost)},
      {"cuMemcpyHtoDAsync", reinterpret_cast<void*>(&fakeMemcpyHtoDAsync)},
      {"cuMemcpyDtoHAsync", reinterpret_cast<void*>(&fakeMemcpyDtoHAsync)},
      {"cuMemcpyDtoDAsync", reinterpret_cast<void*>(&fakeMemcpyDtoDAsync)},
      {"cuMemcpy2DAsync", reinterpret_cast<void*>(&fakeMemcpy2DAsync)},
      {"cuMemsetD8Async", reinterpret_cast<void*>(&fakeMemsetD8Async)},
      {"cuMemsetD2D8Async", reinterpret_cast<void*>(&fakeMemsetD2D8Async)},
      {"cuMemsetD2D16Async", reinterpret_cast<void*>(&fakeMemsetD2D16Async)},
      {"cuMemsetD2D32Async", reinterpret_cast<void*>(&fakeMemsetD2D32Async)},
  };
  return t;
}

}  // namespace rgpu::fake
