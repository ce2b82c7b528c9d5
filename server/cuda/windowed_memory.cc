#include "server/cuda/windowed_memory.h"

#include <algorithm>
#include <optional>

#include "common/log.h"

namespace rgpu::server::cuda {
namespace {

constexpr uint64_t kSmallAlign = 512;  // cudaMalloc's alignment

CUmemAllocationProp deviceProp(CUdevice dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

}  // namespace

std::unique_ptr<WindowedMemory> WindowedMemory::create(DriverApi& api, const std::vector<DeviceInfo>& devices,
                                                       uint32_t window, std::function<Status(int)> use) {
  const std::string who = window ? "span part " + std::to_string(window) : std::string("checkpointed sessions");
  auto skip = [&](const std::string& why) {
    common::logOnce("cuda-window", "cuda: " + who + ": device memory is where cuMemAlloc puts it, not in " +
                                       (window ? "the part's" : "an") + " address window (" + why +
                                       (window ? "); the client refuses an overlap with another member's"
                                               : "); these sessions cannot be checkpointed or moved"));
    return nullptr;
  };
  auto [base, slots] = spanWindow(window);
  if (window == 0) slots = std::min(slots, kSpanWindowSlots);  // part 1's window follows
  if (devices.empty()) return nullptr;
  if (slots == 0) return skip("past the last of the " + std::to_string(kSpanWindows) + " windows");
  if (!api.cuMemAddressReserve || !api.cuMemAddressFree || !api.cuMemCreate || !api.cuMemRelease || !api.cuMemMap ||
      !api.cuMemUnmap || !api.cuMemSetAccess || !api.cuMemGetAllocationGranularity)
    return skip("the driver has no virtual memory management calls");
  uint64_t granularity = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!use(static_cast<int>(i))) return skip("no context");
    int supported = 0;
    (void)api.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                   devices[i].dev);
    if (!supported) return skip("device " + std::to_string(i) + " does not support virtual memory management");
    size_t g = 0;
    CUmemAllocationProp prop = deviceProp(devices[i].dev);
    CUresult r = api.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (r != CUDA_SUCCESS || g == 0 || (g & (g - 1)))
      return skip("cuMemGetAllocationGranularity: " + api.describe(r));
    granularity = std::max<uint64_t>(granularity, g);
  }
  std::unique_ptr<WindowedMemory> w(new WindowedMemory(api, granularity, std::move(use)));
  // Twice each device's memory (room for fragmentation), all of the part's
  // devices within its window.
  const uint64_t room = slots * kDeviceWindowSlot / devices.size() / granularity * granularity;
  uint64_t at = base;
  w->devices_.resize(devices.size());
  bool any = false;
  for (size_t i = 0; i < devices.size(); ++i) {
    Device& d = w->devices_[i];
    d.index = static_cast<int>(i);
    d.dev = devices[i].dev;
    const uint64_t want = std::min(room, (2 * devices[i].total_mem + granularity - 1) / granularity * granularity);
    if (want == 0 || !w->use_(d.index)) continue;
    CUdeviceptr got = 0;
    CUresult r = api.cuMemAddressReserve(&got, want, granularity, at, 0);
    if (r != CUDA_SUCCESS || got != at) {
      if (r == CUDA_SUCCESS) (void)api.cuMemAddressFree(got, want);  // placed elsewhere: the window is taken
      common::logOnce("cuda-window-taken", "cuda: " + who + ": the address window at " + fmt::format("{:#x}", at) +
                                               " cannot be reserved (" +
                                               (r == CUDA_SUCCESS ? std::string("taken") : api.describe(r)) +
                                               "): that device's memory is where cuMemAlloc puts it");
      at += want;
      continue;
    }
    d.base = at;
    d.size = want;
    d.addresses = std::make_unique<RangeAllocator>(at, want);
    at += want;
    any = true;
    // Its own access, and that of the session's devices that can reach it.
    for (size_t j = 0; j < devices.size(); ++j) {
      int peer = j == i;
      if (j != i && api.cuDeviceCanAccessPeer &&
          api.cuDeviceCanAccessPeer(&peer, devices[j].dev, devices[i].dev) != CUDA_SUCCESS)
        peer = 0;
      if (!peer) continue;
      CUmemAccessDesc a{};
      a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      a.location.id = devices[j].dev;
      a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      d.access.push_back(a);
    }
  }
  if (!any) return nullptr;
  RGPU_LOG_INFO("cuda: {}: device memory in {} address window from {:#x} ({} MiB granules)", who,
                window ? "the part's" : "an", base, granularity >> 20);
  return w;
}

WindowedMemory::~WindowedMemory() {
  for (Device& d : devices_) {
    if (!d.size || !use_(d.index)) continue;
    for (auto& [at, m] : d.own) unmap(d, at, m);
    for (auto& [at, c] : d.chunks) unmap(d, at, Mapping{c.handle, granularity_});
    (void)api_.cuMemAddressFree(d.base, d.size);
  }
}

bool WindowedMemory::has(int device) const {
  return device >= 0 && static_cast<size_t>(device) < devices_.size() && devices_[device].size != 0;
}

Result<WindowedMemory::Mapping> WindowedMemory::mapNew(Device& d, uint64_t size, uint64_t& at) {
  std::optional<uint64_t> where;
  if (at) {
    if (d.addresses->allocateAt(at, size)) where = at;
  } else {
    where = d.addresses->allocate(size, granularity_);
  }
  if (!where)
    return Status(err::kMemoryAllocation, at ? "device " + std::to_string(d.index) +
                                                   "'s address window has no room at " + fmt::format("{:#x}", at)
                                             : "out of memory on device " + std::to_string(d.index) + ": its " +
                                                   std::to_string(d.size >> 20) + " MiB address window is full");
  DriverApi& api = api_;
  CUmemAllocationProp prop = deviceProp(d.dev);
  Mapping m{0, size};
  CUresult r = api.cuMemCreate(&m.handle, size, &prop, 0);
  if (r != CUDA_SUCCESS) {
    d.addresses->free(*where);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
      return Status(err::kMemoryAllocation,
                    "out of memory on device " + std::to_string(d.index) + ": asked " + std::to_string(size) + " bytes");
    return api.check(r, "cuMemCreate", __FILE__, __LINE__);
  }
  Status s = RGPU_CU(cuMemMap(*where, size, 0, m.handle, 0));
  if (s) {
    s = RGPU_CU(cuMemSetAccess(*where, size, d.access.data(), d.access.size()));
    if (!s) (void)api.cuMemUnmap(*where, size);
  }
  if (!s) {
    (void)api.cuMemRelease(m.handle);
    d.addresses->free(*where);
    return s;
  }
  at = *where;
  return m;
}

void WindowedMemory::unmap(Device& d, uint64_t at, const Mapping& m) {
  // The physical memory goes back once it is unmapped and its handle released.
  (void)api_.cuMemUnmap(at, m.size);
  (void)api_.cuMemRelease(m.handle);
  d.addresses->free(at);
}

Result<CUdeviceptr> WindowedMemory::allocate(int device, uint64_t size) {
  if (!has(device)) return Status(err::kInvalidDevice, "device " + std::to_string(device) + " has no window");
  size = std::max<uint64_t>(size, 1);
  std::lock_guard lock(mu_);
  Device& d = devices_[device];
  if (size > granularity_ / 2) {
    const uint64_t rounded = (size + granularity_ - 1) / granularity_ * granularity_;
    if (rounded < size) return Status(err::kMemoryAllocation, "asked " + std::to_string(size) + " bytes");
    uint64_t at = 0;
    auto m = mapNew(d, rounded, at);
    if (!m) return m.status();
    d.own.emplace(at, *m);
    return static_cast<CUdeviceptr>(at);
  }
  const uint64_t rounded = (size + kSmallAlign - 1) / kSmallAlign * kSmallAlign;
  // TODO(perf): a scan of the chunks; a free-space index if programs hold
  // very many small allocations.
  for (auto& [at, c] : d.chunks)
    if (auto p = c.blocks.allocate(rounded, kSmallAlign)) {
      if (d.spare_chunk == at) d.spare_chunk = 0;
      return static_cast<CUdeviceptr>(*p);
    }
  uint64_t at = 0;
  auto m = mapNew(d, granularity_, at);
  if (!m) return m.status();
  auto& c = d.chunks.emplace(at, Chunk{m->handle, RangeAllocator(at, granularity_)}).first->second;
  return static_cast<CUdeviceptr>(*c.blocks.allocate(rounded, kSmallAlign));
}

Status WindowedMemory::allocateAt(int device, CUdeviceptr at, uint64_t size) {
  if (!has(device)) return Status(err::kInvalidDevice, "device " + std::to_string(device) + " has no window");
  size = std::max<uint64_t>(size, 1);
  auto refuse = [&](const std::string& why) {
    return Status(err::kMemoryAllocation, "cannot place " + std::to_string(size) + " bytes at " +
                                              fmt::format("{:#x}", at) + " on device " + std::to_string(device) + ": " +
                                              why);
  };
  std::lock_guard lock(mu_);
  Device& d = devices_[device];
  if (at < d.base || at - d.base >= d.size) return refuse("outside its address window");
  const uint64_t chunk_at = at / granularity_ * granularity_;
  const bool big = size > granularity_ / 2;
  const uint64_t rounded = big ? (size + granularity_ - 1) / granularity_ * granularity_
                               : (size + kSmallAlign - 1) / kSmallAlign * kSmallAlign;
  if (rounded < size) return refuse("too large");
  if (big ? at != chunk_at : at % kSmallAlign != 0) return refuse("not where an allocation of its size goes");
  // Empty chunks in the way (kept spare, or left by a pre-copy's placement) go.
  const uint64_t span = big ? rounded : granularity_;
  for (auto it = d.chunks.lower_bound(chunk_at); it != d.chunks.end() && it->first < chunk_at + span;) {
    if (it->first == chunk_at && !big) break;  // the chunk this block belongs in
    if (!it->second.blocks.empty()) return refuse("taken");
    if (d.spare_chunk == it->first) d.spare_chunk = 0;
    unmap(d, it->first, Mapping{it->second.handle, granularity_});
    it = d.chunks.erase(it);
  }
  if (big) {
    uint64_t where = at;
    auto m = mapNew(d, rounded, where);
    if (!m) return m.status();
    d.own.emplace(at, *m);
    return Status::ok();
  }
  auto c = d.chunks.find(chunk_at);
  if (c == d.chunks.end()) {
    uint64_t where = chunk_at;
    auto m = mapNew(d, granularity_, where);
    if (!m) return m.status();
    c = d.chunks.emplace(chunk_at, Chunk{m->handle, RangeAllocator(chunk_at, granularity_)}).first;
  }
  if (!c->second.blocks.allocateAt(at, rounded)) return refuse("taken");
  if (d.spare_chunk == chunk_at) d.spare_chunk = 0;
  return Status::ok();
}

WindowedMemory::Device* WindowedMemory::deviceOf(uint64_t p) {
  for (Device& d : devices_)
    if (d.size && p >= d.base && p - d.base < d.size) return &d;
  return nullptr;
}

const WindowedMemory::Device* WindowedMemory::deviceOf(uint64_t p) const {
  return const_cast<WindowedMemory*>(this)->deviceOf(p);
}

bool WindowedMemory::owns(CUdeviceptr p) const {
  std::lock_guard lock(mu_);
  return deviceOf(p) != nullptr;
}

bool WindowedMemory::mapped(CUdeviceptr p, uint64_t size) const {
  std::lock_guard lock(mu_);
  const Device* d = deviceOf(p);
  if (!d || size == 0) return false;
  auto within = [&](uint64_t at, uint64_t len) { return p >= at && p - at <= len && size <= len - (p - at); };
  if (auto it = d->own.upper_bound(p); it != d->own.begin() && within(std::prev(it)->first, std::prev(it)->second.size))
    return true;
  auto c = d->chunks.upper_bound(p);
  return c != d->chunks.begin() && within(std::prev(c)->first, granularity_);
}

bool WindowedMemory::release(CUdeviceptr p) {
  std::lock_guard lock(mu_);
  Device* d = deviceOf(p);
  if (!d) return false;
  if (auto it = d->own.find(p); it != d->own.end()) {
    unmap(*d, it->first, it->second);
    d->own.erase(it);
    return true;
  }
  auto it = d->chunks.upper_bound(p);
  if (it == d->chunks.begin()) return false;
  --it;
  if (p - it->first >= granularity_ || !it->second.blocks.free(p)) return false;
  if (!it->second.blocks.empty()) return true;
  if (!d->spare_chunk) {
    d->spare_chunk = it->first;  // kept for the next small allocation
    return true;
  }
  unmap(*d, it->first, Mapping{it->second.handle, granularity_});
  d->chunks.erase(it);
  return true;
}

}  // namespace rgpu::server::cuda
