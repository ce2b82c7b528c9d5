// Managed and mapped memory calls (client/managed.h): cudaMallocManaged,
// prefetch, advice, stream attachment, the range attribute queries, mapped
// host memory and its device pointers.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "client/api_util.h"
#include "client/managed.h"

using namespace rgpu;
using namespace rgpu::client;

namespace {

constexpr uint64_t kPage = kManagedPage;

Status checkLocation(const cudaMemLocation& l) {
  if (l.type == cudaMemLocationTypeHost || l.type == cudaMemLocationTypeHostNuma ||
      l.type == cudaMemLocationTypeHostNumaCurrent)
    return Status::ok();
  if (l.type == cudaMemLocationTypeDevice) return rt().device(l.id).status();
  return Status(err::kInvalidValue, "invalid memory location");
}

// An int attribute as cudaMemRangeGetAttribute reports a location: a device,
// cudaCpuDeviceId for the host, cudaInvalidDeviceId for none.
int locationId(const cudaMemLocation& l) {
  if (l.type == cudaMemLocationTypeDevice) return l.id;
  if (l.type == cudaMemLocationTypeInvalid) return cudaInvalidDeviceId;
  return cudaCpuDeviceId;
}

Status rangeAttribute(void* data, size_t size, cudaMemRangeAttribute attr, const void* ptr, size_t count) {
  RGPU_TRY(needPtr(data, "data"));
  uint64_t base = 0;
  if (!ManagedMemory::get().range(ptr, count, &base))
    return Status(err::kInvalidValue, "the range is not managed memory of this process");
  auto a = ManagedMemory::get().advice(base);
  auto putInt = [&](int v) -> Status {
    if (size != 4) return Status(err::kInvalidValue, "dataSize must be 4 for this attribute");
    std::memcpy(data, &v, 4);
    return Status::ok();
  };
  switch (attr) {
    case cudaMemRangeAttributeReadMostly: return putInt(a.read_mostly ? 1 : 0);
    case cudaMemRangeAttributePreferredLocation: return putInt(locationId(a.preferred));
    case cudaMemRangeAttributeLastPrefetchLocation: return putInt(locationId(a.last_prefetch));
    case cudaMemRangeAttributePreferredLocationType: return putInt(a.preferred.type);
    case cudaMemRangeAttributePreferredLocationId: return putInt(a.preferred.id);
    case cudaMemRangeAttributeLastPrefetchLocationType: return putInt(a.last_prefetch.type);
    case cudaMemRangeAttributeLastPrefetchLocationId: return putInt(a.last_prefetch.id);
    case cudaMemRangeAttributeAccessedBy: {
      if (size % 4 || size == 0) return Status(err::kInvalidValue, "dataSize must be a non-zero multiple of 4");
      auto* out = static_cast<int*>(data);
      size_t n = size / 4;
      for (size_t i = 0; i < n; ++i) out[i] = i < a.accessed_by.size() ? a.accessed_by[i] : cudaInvalidDeviceId;
      return Status::ok();
    }
    default:
      return Status(err::kInvalidValue, "unknown memory range attribute");
  }
}

// Device memory of `pages` pages for managed or mapped memory, zeroed before
// this returns (so neither side needs the other's bytes until device work).
Result<uint64_t> zeroedDeviceMemory(int dev, uint64_t bytes) {
  auto base = allocateDeviceMemory(dev, bytes);
  if (!base) return base;
  ManagedMemory::OwnRequests own;  // not the program's device work: other managed memory stays as it is
  common::CallMessage msg(32);
  auto m = msg.initRoot<wire::Request>().initMemset();
  m.setDst(*base);
  m.setValue(0);
  m.setSize(bytes);
  setStream(m.initStream(), {0, dev});
  Status s = rt().post(msg);
  if (s) {
    common::CallMessage sync(32);
    setStream(sync.initRoot<wire::Request>().initStreamSynchronize(), {0, dev});
    auto r = rt().call(sync);
    if (!r) s = r.status();
  }
  if (!s) {
    freeDeviceMemory(*base);
    return s;
  }
  return base;
}

}  // namespace

namespace rgpu::client {

void freeDeviceMemory(uint64_t base) {
  common::CallMessage msg(32);
  msg.initRoot<wire::Request>().initFree().setPtr(base);
  (void)rt().call(msg);
  rt().untrackDevice(base);
}

Result<void*> allocateMapped(size_t size) {
  const uint64_t bytes = (size + kPage - 1) / kPage * kPage;
  void* h = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (h == MAP_FAILED) return Status(err::kMemoryAllocation, "host allocation failed");
  const int dev = rt().currentDevice();
  auto d = zeroedDeviceMemory(dev, bytes);
  if (!d) {
    munmap(h, bytes);
    return d.status();
  }
  Status s = ManagedMemory::get().add(reinterpret_cast<uint64_t>(h), bytes, *d, *d, dev);
  if (!s) {
    freeDeviceMemory(*d);
    munmap(h, bytes);
    return s;
  }
  return h;
}

Status registerMapped(void* p, size_t size) {
  const auto at = reinterpret_cast<uint64_t>(p);
  if (at % kPage || size % kPage)
    return Status(err::kNotSupported, "cudaHostRegisterMapped of memory that does not start and end on a page boundary "
                                      "is not supported by rgpu (the rest of its pages would be protected with it)");
  const int dev = rt().currentDevice();
  auto d = allocateDeviceMemory(dev, size);
  if (!d) return d.status();
  Status s = ManagedMemory::get().add(at, size, *d, *d, dev, true);
  if (!s) freeDeviceMemory(*d);
  return s;
}

Status freeMapped(void* p, size_t size, bool registered) {
  uint64_t base = ManagedMemory::get().remove(reinterpret_cast<uint64_t>(p), registered);
  if (!base) return Status::ok();
  freeDeviceMemory(base);
  if (!registered) munmap(p, (size + kPage - 1) / kPage * kPage);
  return Status::ok();
}

}  // namespace rgpu::client

RGPU_EXPORT cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pDevice, "pDevice"));
    if (flags) return Status(err::kInvalidValue, "flags must be 0");
    if (ManagedMemory::get().contains(pHost) || ManagedMemory::get().mappedDevice(pHost)) {
      // Mapped memory's device alias; managed memory is its own.
      *pDevice = const_cast<void*>(ManagedMemory::get().deviceSide(pHost));
      return Status::ok();
    }
    return Status(err::kInvalidValue, "not mapped host memory (cudaHostAllocMapped or cudaHostRegisterMapped)");
  });
}

RGPU_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(devPtr, "devPtr"));
    *devPtr = nullptr;
    if (size == 0) return Status(err::kInvalidValue, "cudaMallocManaged of 0 bytes");
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
      return Status(err::kInvalidValue, "flags must be cudaMemAttachGlobal or cudaMemAttachHost");
    // Pages of its own: one more page than it needs, so the managed range can start on a page.
    const uint64_t pages = (size + kPage - 1) / kPage;
    if (pages > (UINT64_MAX / kPage) - 2) return Status(err::kMemoryAllocation, "size too large");
    const int dev = rt().currentDevice();
    auto base = zeroedDeviceMemory(dev, (pages + 1) * kPage);  // the host's first reads need no fetch
    if (!base) return base.status();
    const uint64_t p = (*base + kPage - 1) / kPage * kPage;
    if (Status s = ManagedMemory::get().add(p, size, *base, 0, dev); !s) {
      freeDeviceMemory(*base);
      return s;
    }
    *devPtr = reinterpret_cast<void*>(p);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, struct cudaMemLocation location,
                                             unsigned int flags, cudaStream_t stream) {
  return guarded([&]() -> Status {
    uint64_t base = 0;
    if (!ManagedMemory::get().range(devPtr, count, &base))
      return Status(err::kInvalidValue, "cudaMemPrefetchAsync of memory that is not managed");
    if (flags) return Status(err::kInvalidValue, "flags must be 0");
    RGPU_TRY(checkLocation(location));
    auto s = rt().stream(stream);
    if (!s) return s.status();
    auto a = ManagedMemory::get().advice(base);
    a.last_prefetch = location;
    ManagedMemory::get().setAdvice(base, a);
    if (location.type == cudaMemLocationTypeDevice) return ManagedMemory::get().beforeDeviceWork();
    // To the host: after the stream's work, fetched now (the call returns once it is).
    common::CallMessage msg(32);
    setStream(msg.initRoot<wire::Request>().initStreamSynchronize(), *s);
    auto r = rt().call(msg);
    if (!r) return r.status();
    return ManagedMemory::get().prefetchToHost(reinterpret_cast<uint64_t>(devPtr), count);
  });
}
RGPU_EXPORT cudaError_t cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count, struct cudaMemLocation location,
                                                  unsigned int flags, cudaStream_t stream) {
  return cudaMemPrefetchAsync(devPtr, count, location, flags, stream);
}

RGPU_EXPORT cudaError_t cudaMemAdvise(const void* devPtr, size_t count, enum cudaMemoryAdvise advice,
                                      struct cudaMemLocation location) {
  return guarded([&]() -> Status {
    uint64_t base = 0;
    if (!ManagedMemory::get().range(devPtr, count, &base))
      return Status(err::kInvalidValue, "cudaMemAdvise of memory that is not managed");
    auto a = ManagedMemory::get().advice(base);
    switch (advice) {
      case cudaMemAdviseSetReadMostly: a.read_mostly = true; break;
      case cudaMemAdviseUnsetReadMostly: a.read_mostly = false; break;
      case cudaMemAdviseSetPreferredLocation:
        RGPU_TRY(checkLocation(location));
        a.preferred = location;
        break;
      case cudaMemAdviseUnsetPreferredLocation: a.preferred = {cudaMemLocationTypeInvalid, 0}; break;
      case cudaMemAdviseSetAccessedBy:
      case cudaMemAdviseUnsetAccessedBy: {
        RGPU_TRY(checkLocation(location));
        int id = locationId(location);
        auto it = std::find(a.accessed_by.begin(), a.accessed_by.end(), id);
        if (advice == cudaMemAdviseSetAccessedBy && it == a.accessed_by.end()) a.accessed_by.push_back(id);
        if (advice == cudaMemAdviseUnsetAccessedBy && it != a.accessed_by.end()) a.accessed_by.erase(it);
        break;
      }
      default:
        return Status(err::kInvalidValue, "unknown cudaMemoryAdvise");
    }
    ManagedMemory::get().setAdvice(base, a);
    return Status::ok();  // a hint: the coherence is the same whatever it says
  });
}

RGPU_EXPORT cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void* devPtr, size_t length, unsigned int flags) {
  return guarded([&]() -> Status {
    auto s = rt().stream(stream);
    if (!s) return s.status();
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost && flags != cudaMemAttachSingle)
      return Status(err::kInvalidValue, "unknown attach flags");
    if (!ManagedMemory::get().range(devPtr, length ? length : 1))
      return Status(err::kInvalidValue, "cudaStreamAttachMemAsync of memory that is not managed");
    return Status::ok();  // every stream sees managed memory the same way here
  });
}
RGPU_EXPORT cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void* devPtr, size_t length,
                                                      unsigned int flags) {
  return cudaStreamAttachMemAsync(stream, devPtr, length, flags);
}

RGPU_EXPORT cudaError_t cudaMemRangeGetAttribute(void* data, size_t dataSize, enum cudaMemRangeAttribute attribute,
                                                 const void* devPtr, size_t count) {
  return guarded([&] { return rangeAttribute(data, dataSize, attribute, devPtr, count); });
}

RGPU_EXPORT cudaError_t cudaMemRangeGetAttributes(void** data, size_t* dataSizes, enum cudaMemRangeAttribute* attributes,
                                                  size_t numAttributes, const void* devPtr, size_t count) {
  return guarded([&]() -> Status {
    if (numAttributes && (!data || !dataSizes || !attributes)) return Status(err::kInvalidValue, "NULL array");
    for (size_t i = 0; i < numAttributes; ++i)
      RGPU_TRY(rangeAttribute(data[i], dataSizes[i], attributes[i], devPtr, count));
    return Status::ok();
  });
}
