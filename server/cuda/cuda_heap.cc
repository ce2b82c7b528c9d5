// Device malloc on the CUDA backend, and cudaLimitMallocHeapSize.
//
// Without fixed addresses the driver's own heap serves kernels' malloc, as
// with NVIDIA's runtime. On a worker whose sessions may move
// (CudaOptions::fixed_addresses), a module whose kernels may call malloc,
// free or __nv_aligned_device_malloc is loaded as its PTX bound to rgpu's
// heap (device_heap_ptx.h): the highest PTX the image holds for the device's
// compute capability, which the driver JIT-compiles. Its kHeapVariable says
// where the device's heap is.
//
// The heap: made at the first launch of such a kernel on the device, of the
// size cudaLimitMallocHeapSize last set (the driver's default, 8 MiB,
// before), in the session's address window like any allocation (zeroed: an
// empty heap). From then on the size cannot change (cudaErrorInvalidValue,
// as NVIDIA's runtime answers). Every module of the device bound to the heap
// gets its address and size (modules loaded later, when they load), on the
// device's peek stream, and the launch is queued only once they are there.
// A checkpoint carries the heap as one range of device memory
// (Backend::MallocHeap with no block list: the allocator's state is in the
// bytes); a restore places it at the same address before the modules are
// loaded again, and each module gets the address as it loads.
//
// A module that cannot be bound (no PTX for the device, PTX the rewrite or
// the driver refuses) is loaded from its image as before, logged once; a
// session that launches a kernel of it that may call malloc uses the driver's
// heap and cannot be checkpointed (notCheckpointable says why). In a worker
// that restored a heap such a module fails to load instead (the restore is
// called off): the moved blocks are rgpu's, and the driver's free() must
// never get one.
// cudaLimitMallocHeapSize is also given to the driver, for such modules.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "server/cuda/cuda_backend.h"
#include "server/cuda/device_heap_ptx.h"

namespace rgpu::server::cuda {
namespace {

constexpr uint64_t kDefaultHeapBytes = 8ull << 20;  // the driver's cudaLimitMallocHeapSize until set

}  // namespace

Result<CUmodule> CudaBackend::loadOnOwnHeap(int device, const common::FatbinImage& image, CUdeviceptr* heap_var) {
  DriverApi& api = *api_;
  const auto& desc = descriptions_[static_cast<size_t>(device)];
  const uint32_t cc = static_cast<uint32_t>(desc.major * 10 + desc.minor);
  bool restored;
  {
    std::lock_guard lock(mu_);
    restored = devices_[static_cast<size_t>(device)].heap_restored;
  }
  auto driversHeap = [&](const std::string& why) -> Result<CUmodule> {
    if (restored)
      // Its kernels would use the driver's heap, and their free() would get the moved blocks.
      return Status(err::kNotSupported, "a module whose kernels may call device malloc cannot be bound to rgpu's heap "
                                        "on device " + std::to_string(device) + " here (" + why +
                                        "), and that heap holds the moved session's blocks");
    common::logLimited("own-heap", "cuda: a module whose kernels may call device malloc is on the driver's heap, and "
                                   "a session that runs one of them cannot move: " + why);
    return static_cast<CUmodule>(nullptr);
  };
  const common::FatbinEntry* best = nullptr;
  for (auto& e : image.entries)
    if (e.kind == common::FatbinEntry::kPtx && e.arch <= cc && (!best || e.arch > best->arch)) best = &e;
  if (!best) return driversHeap("its image has no PTX for sm_" + std::to_string(cc) + " to bind to rgpu's heap");
  auto text = withRgpuHeap(best->payload);
  if (!text) return driversHeap(text.status().message());
  CUmodule m = nullptr;
  CUresult r = api.cuModuleLoadData(&m, text->c_str());
  if (r != CUDA_SUCCESS)
    return driversHeap("the driver refused its PTX bound to rgpu's heap: " +
                       api.check(r, "cuModuleLoadData", __FILE__, __LINE__).message());
  size_t bytes = 0;
  r = api.cuModuleGetGlobal(heap_var, &bytes, m, kHeapVariable);
  if (r != CUDA_SUCCESS || bytes != 16) {
    (void)api.cuModuleUnload(m);
    return driversHeap(std::string("the driver did not place ") + kHeapVariable);
  }
  RGPU_LOG_DEBUG("cuda: a module on device {} calls device malloc: loaded as its PTX for sm_{} on rgpu's heap", device,
                 best->arch);
  return m;
}

Status CudaBackend::heapKnownTo(int device, CUdeviceptr heap_var) {
  if (!heap_var) return Status::ok();
  DevPtr base;
  uint64_t size;
  {
    std::lock_guard lock(mu_);
    base = devices_[static_cast<size_t>(device)].heap_base;
    size = devices_[static_cast<size_t>(device)].heap_size;
  }
  // Not made yet: ensureHeap tells every bound module when it is.
  return base ? writeHeapVariables(device, {heap_var}, base, size, false) : Status::ok();
}

Status CudaBackend::writeHeapVariables(int device, const std::vector<CUdeviceptr>& vars, DevPtr base,
                                       uint64_t size, bool zero_header) {
  DriverApi& api = *api_;
  if (vars.empty() && !zero_header) return Status::ok();
  std::lock_guard peek(peek_mu_);
  Device& d = devices_[static_cast<size_t>(device)];
  RGPU_TRY(use(device));
  RGPU_TRY(peekReady(d));
  RGPU_TRY_ASSIGN(pin, takePinned(16));
  const uint64_t value[2] = {base, size};
  std::memcpy(pin.data, value, sizeof value);
  Status s;
  if (zero_header) s = RGPU_CU(cuMemsetD8Async(base, 0, kHeapHeaderBytes, d.peek_stream));
  for (CUdeviceptr v : vars)
    if (s) s = RGPU_CU(cuMemcpyHtoDAsync(v, pin.data, sizeof value, d.peek_stream));
  if (s) s = peekDone(d);
  givePinned(pin);
  return s;
}

Status CudaBackend::ensureHeap(int device) {
  uint64_t size;
  std::vector<CUdeviceptr> vars;
  {
    std::lock_guard lock(mu_);
    const Device& d = devices_[static_cast<size_t>(device)];
    if (d.heap_base) return Status::ok();
    size = std::max(d.malloc_heap ? d.malloc_heap : kDefaultHeapBytes, kMinHeapBytes);
    for (auto& [id, m] : modules_)
      if (m.device == device && m.heap_var) vars.push_back(m.heap_var);
  }
  RGPU_TRY_ASSIGN(base, allocate(device, size));
  // An empty heap is all zeroes in its header (the blocks need not be:
  // malloc's memory is uninitialised, and [cuda] scrub zeroes it anyway).
  if (Status s = writeHeapVariables(device, vars, base, size, true); !s) {
    (void)release(base);
    return s;
  }
  {
    std::lock_guard lock(mu_);
    devices_[static_cast<size_t>(device)].heap_base = base;
    devices_[static_cast<size_t>(device)].heap_size = size;
  }
  RGPU_LOG_INFO("cuda: device {}'s malloc heap: {} bytes at {:#x}, rgpu's (it moves with the session)", device, size,
                base);
  return Status::ok();
}

Status CudaBackend::setMallocHeap(int device, uint64_t bytes) {
  RGPU_TRY(use(device));
  DriverApi& api = *api_;
  {
    std::lock_guard lock(mu_);
    if (devices_[static_cast<size_t>(device)].heap_base)
      return Status(err::kInvalidValue, "cudaLimitMallocHeapSize cannot change once a kernel that may call malloc "
                                        "has run on device " + std::to_string(device));
  }
  RGPU_TRY(RGPU_CU(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, bytes)));
  std::lock_guard lock(mu_);
  devices_[static_cast<size_t>(device)].malloc_heap = bytes;  // (a checkpoint carries it)
  return Status::ok();
}

Result<std::vector<Backend::MallocHeap>> CudaBackend::mallocHeaps() const {
  // rgpu's heap with its memory (its state is in the bytes: no blocks), or
  // only the limit; a session on the driver's heap was refused
  // (notCheckpointable).
  std::vector<MallocHeap> out;
  std::lock_guard lock(mu_);
  for (size_t d = 0; d < devices_.size(); ++d) {
    const Device& dev = devices_[d];
    if (dev.heap_base) out.push_back({static_cast<int32_t>(d), dev.heap_size, dev.heap_base, {}});
    else if (dev.malloc_heap) out.push_back({static_cast<int32_t>(d), dev.malloc_heap, 0, {}});
  }
  return out;
}

Status CudaBackend::restoreMallocHeap(const MallocHeap& heap) {
  if (heap.device < 0 || static_cast<size_t>(heap.device) >= devices_.size())
    return Status(err::kInvalidDevice, "checkpoint: a malloc heap on device " + std::to_string(heap.device));
  const auto d = static_cast<size_t>(heap.device);
  if (heap.limit == 0 || heap.limit > descriptions_[d].total_mem)
    return Status(err::kInvalidValue, "checkpoint: a malloc heap of " + std::to_string(heap.limit) + " bytes");
  if (!heap.blocks.empty())
    return Status(err::kNotSupported, "checkpoint: a malloc heap with a list of blocks (another backend's) cannot be "
                                      "made on the cuda backend");
  if (heap.base && heap.limit < kMinHeapBytes)
    return Status(err::kInvalidValue, "checkpoint: rgpu's malloc heap of " + std::to_string(heap.limit) + " bytes");
  RGPU_TRY(setMallocHeap(heap.device, heap.limit));
  if (!heap.base) return Status::ok();
  // Its bytes (the allocator's state with them) come with the image's memory.
  RGPU_TRY(allocateAt(heap.device, heap.base, heap.limit));
  std::lock_guard lock(mu_);
  devices_[d].heap_base = heap.base;
  devices_[d].heap_size = heap.limit;
  devices_[d].heap_restored = true;
  return Status::ok();
}

}  // namespace rgpu::server::cuda
