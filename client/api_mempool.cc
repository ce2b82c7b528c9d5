// Memory pools and stream-ordered allocation (cudaMemPool*, cudaDeviceGet/
// SetMemPool, cudaMemGet/SetMemPool, cudaMallocFromPoolAsync).
//
// Each device has a default pool; programs may create more and make one the
// device's current pool. An allocation from a pool is a device allocation
// like cudaMalloc's — it counts against the user's quota the same way — and
// is returned to the device when freed (cudaFreeAsync frees once the work
// queued before it has run). So a pool caches nothing: its reserved memory
// is what is in use, cudaMemPoolTrimTo has nothing to release, and the
// release threshold and reuse policies are kept and reported but change
// nothing. The figures (used/reserved, current and high-water marks) are
// exact. Pools that export handles to other processes (IPC) are not
// supported (cudaErrorNotSupported).
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "client/api_util.h"
#include "client/graph.h"

using namespace rgpu;
using namespace rgpu::client;

struct CUmemPoolHandle_st {  // cudaMemPool_t points at one of these
  int device = 0;
  bool is_default = false;
  int reuse_follow = 1, reuse_opportunistic = 1, reuse_internal = 1;
  uint64_t release_threshold = 0;
  uint64_t used = 0, used_high = 0;
  std::map<int, cudaMemAccessFlags> access;  // peers granted (its own device is always read-write)
};

namespace {

std::mutex g_mu;
std::map<int, std::unique_ptr<CUmemPoolHandle_st>> g_defaults;  // device -> its default pool
std::set<CUmemPoolHandle_st*> g_created;
std::map<int, cudaMemPool_t> g_current;                   // device -> its current pool
std::map<void*, std::pair<cudaMemPool_t, uint64_t>> g_allocations;

cudaMemPool_t defaultPoolLocked(int device) {
  auto& p = g_defaults[device];
  if (!p) {
    p = std::make_unique<CUmemPoolHandle_st>();
    p->device = device;
    p->is_default = true;
  }
  return p.get();
}

cudaMemPool_t currentPoolLocked(int device) {
  auto it = g_current.find(device);
  return it != g_current.end() ? it->second : defaultPoolLocked(device);
}

Status checkPoolLocked(cudaMemPool_t pool) {
  if (!pool) return Status(err::kInvalidValue, "memPool is NULL");
  if (g_created.count(pool)) return Status::ok();
  for (auto& [d, p] : g_defaults)
    if (p.get() == pool) return Status::ok();
  return Status(err::kInvalidValue, "not a memory pool of this process");
}

Status checkLocation(const cudaMemLocation* loc, cudaMemAllocationType type) {
  RGPU_TRY(needPtr(loc, "location"));
  if (type != cudaMemAllocationTypePinned) return Status(err::kInvalidValue, "only pinned (device) pools exist");
  if (loc->type != cudaMemLocationTypeDevice)
    return Status(err::kNotSupported, "pools of host or managed memory are not supported by rgpu");
  return rt().device(loc->id).status();
}

}  // namespace

namespace rgpu::client {

Status poolAllocate(void** ptr, size_t size, cudaMemPool_t pool, int device) {
  RGPU_TRY(needPtr(ptr, "ptr"));
  *ptr = nullptr;
  {
    std::lock_guard lock(g_mu);
    if (pool) RGPU_TRY(checkPoolLocked(pool));
    else pool = currentPoolLocked(device);
    device = pool->device;
  }
  if (size == 0) return Status::ok();
  auto p = allocateDeviceMemory(device, size);
  if (!p) return p.status();
  *ptr = reinterpret_cast<void*>(*p);
  std::lock_guard lock(g_mu);
  pool->used += size;
  pool->used_high = std::max(pool->used_high, pool->used);
  g_allocations[*ptr] = {pool, size};
  return Status::ok();
}

void poolForget(void* ptr) {
  std::lock_guard lock(g_mu);
  auto it = g_allocations.find(ptr);
  if (it == g_allocations.end()) return;
  it->second.first->used -= it->second.second;
  g_allocations.erase(it);
}

}  // namespace rgpu::client

RGPU_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto s = rt().stream(stream);
    if (!s) return s.status();
    RGPU_TRY(needPtr(memPool, "memPool"));
    RGPU_TRY(needPtr(ptr, "ptr"));
    if (Status c; capturesActive() && captureAllocation(*s, size, ptr, &c)) return c;
    return poolAllocate(ptr, size, memPool, 0);
  });
}
RGPU_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool,
                                                     cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto s = rt().stream(stream, true);
    if (!s) return s.status();
    RGPU_TRY(needPtr(memPool, "memPool"));
    RGPU_TRY(needPtr(ptr, "ptr"));
    if (Status c; capturesActive() && captureAllocation(*s, size, ptr, &c)) return c;
    return poolAllocate(ptr, size, memPool, 0);
  });
}

namespace {

// The device- and location-named forms (cudaDeviceGetMemPool,
// cudaMemGetMemPool, ...) are the same calls.
Status getPool(cudaMemPool_t* out, int device, bool current) {
  RGPU_TRY(needPtr(out, "memPool"));
  RGPU_TRY(rt().device(device).status());
  std::lock_guard lock(g_mu);
  *out = current ? currentPoolLocked(device) : defaultPoolLocked(device);
  return Status::ok();
}

Status setPool(int device, cudaMemPool_t pool, int mismatch) {
  RGPU_TRY(rt().device(device).status());
  std::lock_guard lock(g_mu);
  RGPU_TRY(checkPoolLocked(pool));
  if (pool->device != device) return Status(mismatch, "the pool belongs to another device");
  g_current[device] = pool;
  return Status::ok();
}

}  // namespace

RGPU_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  return guarded([&] { return getPool(memPool, device, false); });
}
RGPU_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) {
  return guarded([&] { return getPool(memPool, device, true); });
}
RGPU_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  return guarded([&] { return setPool(device, memPool, err::kInvalidDevice); });
}
RGPU_EXPORT cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t* memPool, cudaMemLocation* location,
                                                 cudaMemAllocationType type) {
  return guarded([&]() -> Status {
    RGPU_TRY(checkLocation(location, type));
    return getPool(memPool, location->id, false);
  });
}
RGPU_EXPORT cudaError_t cudaMemGetMemPool(cudaMemPool_t* memPool, cudaMemLocation* location,
                                          cudaMemAllocationType type) {
  return guarded([&]() -> Status {
    RGPU_TRY(checkLocation(location, type));
    return getPool(memPool, location->id, true);
  });
}
RGPU_EXPORT cudaError_t cudaMemSetMemPool(cudaMemLocation* location, cudaMemAllocationType type,
                                          cudaMemPool_t memPool) {
  return guarded([&]() -> Status {
    RGPU_TRY(checkLocation(location, type));
    return setPool(location->id, memPool, err::kInvalidValue);
  });
}

RGPU_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const cudaMemPoolProps* props) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(memPool, "memPool"));
    RGPU_TRY(needPtr(props, "poolProps"));
    RGPU_TRY(checkLocation(&props->location, props->allocType));
    if (props->handleTypes != cudaMemHandleTypeNone)
      return Status(err::kNotSupported, "pools that export handles to other processes are not supported by rgpu");
    auto pool = std::make_unique<CUmemPoolHandle_st>();
    pool->device = props->location.id;
    std::lock_guard lock(g_mu);
    *memPool = pool.get();
    g_created.insert(pool.release());
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  return guarded([&]() -> Status {
    std::lock_guard lock(g_mu);
    RGPU_TRY(checkPoolLocked(memPool));
    if (memPool->is_default) return Status(err::kInvalidValue, "a device's default pool cannot be destroyed");
    // As NVIDIA's: allocations still out stay valid (and are freed as usual);
    // the device's current pool goes back to its default.
    for (auto it = g_current.begin(); it != g_current.end();)
      it = it->second == memPool ? g_current.erase(it) : std::next(it);
    for (auto& [ptr, a] : g_allocations)
      if (a.first == memPool) a.first = defaultPoolLocked(memPool->device);
    g_created.erase(memPool);
    delete memPool;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t) {
  return guarded([&]() -> Status {
    std::lock_guard lock(g_mu);
    return checkPoolLocked(memPool);  // nothing cached: nothing to release
  });
}

RGPU_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(value, "value"));
    std::lock_guard lock(g_mu);
    RGPU_TRY(checkPoolLocked(memPool));
    auto flag = [&](int& f) {
      f = *static_cast<int*>(value) != 0;
      return Status::ok();
    };
    switch (attr) {
      case cudaMemPoolReuseFollowEventDependencies: return flag(memPool->reuse_follow);
      case cudaMemPoolReuseAllowOpportunistic: return flag(memPool->reuse_opportunistic);
      case cudaMemPoolReuseAllowInternalDependencies: return flag(memPool->reuse_internal);
      case cudaMemPoolAttrReleaseThreshold:
        memPool->release_threshold = *static_cast<uint64_t*>(value);
        return Status::ok();
      case cudaMemPoolAttrReservedMemHigh:
      case cudaMemPoolAttrUsedMemHigh:
        // Only a reset to the current value (0 passed) is allowed, as NVIDIA's.
        if (*static_cast<uint64_t*>(value) != 0) return Status(err::kInvalidValue, "a high-water mark can only be reset to 0");
        memPool->used_high = memPool->used;
        return Status::ok();
      default:
        return Status(err::kInvalidValue, "cudaMemPoolAttr " + std::to_string(static_cast<int>(attr)) + " cannot be set");
    }
  });
}
RGPU_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(value, "value"));
    std::lock_guard lock(g_mu);
    RGPU_TRY(checkPoolLocked(memPool));
    auto u64 = [&](uint64_t v) {
      *static_cast<uint64_t*>(value) = v;
      return Status::ok();
    };
    auto i32 = [&](int v) {
      *static_cast<int*>(value) = v;
      return Status::ok();
    };
    switch (attr) {
      case cudaMemPoolReuseFollowEventDependencies: return i32(memPool->reuse_follow);
      case cudaMemPoolReuseAllowOpportunistic: return i32(memPool->reuse_opportunistic);
      case cudaMemPoolReuseAllowInternalDependencies: return i32(memPool->reuse_internal);
      case cudaMemPoolAttrReleaseThreshold: return u64(memPool->release_threshold);
      case cudaMemPoolAttrReservedMemCurrent:  // nothing is cached: reserved is what is used
      case cudaMemPoolAttrUsedMemCurrent: return u64(memPool->used);
      case cudaMemPoolAttrReservedMemHigh:
      case cudaMemPoolAttrUsedMemHigh: return u64(memPool->used_high);
      default: return Status(err::kInvalidValue, "unknown cudaMemPoolAttr " + std::to_string(static_cast<int>(attr)));
    }
  });
}

RGPU_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const cudaMemAccessDesc* descList, size_t count) {
  return guarded([&]() -> Status {
    if (count && !descList) return Status(err::kInvalidValue, "descList is NULL");
    std::lock_guard lock(g_mu);
    RGPU_TRY(checkPoolLocked(memPool));
    for (size_t i = 0; i < count; ++i) {
      const auto& d = descList[i];
      if (d.location.type != cudaMemLocationTypeDevice) return Status(err::kInvalidValue, "access for a device only");
      RGPU_TRY(rt().device(d.location.id).status());
      if (d.location.id == memPool->device && d.flags != cudaMemAccessFlagsProtReadWrite)
        return Status(err::kInvalidValue, "a pool's own device keeps read-write access");
      memPool->access[d.location.id] = d.flags;
    }
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t memPool,
                                             cudaMemLocation* location) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(flags, "flags"));
    RGPU_TRY(needPtr(location, "location"));
    std::lock_guard lock(g_mu);
    RGPU_TRY(checkPoolLocked(memPool));
    if (location->type != cudaMemLocationTypeDevice) return Status(err::kInvalidValue, "access for a device only");
    RGPU_TRY(rt().device(location->id).status());
    auto it = memPool->access.find(location->id);
    *flags = location->id == memPool->device ? cudaMemAccessFlagsProtReadWrite
             : it != memPool->access.end()   ? it->second
                                             : cudaMemAccessFlagsProtNone;
    return Status::ok();
  });
}
