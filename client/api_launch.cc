// Registration hooks nvcc emits, and kernel launches.
#include "client/api_util.h"
#include "client/managed.h"

#include <map>
#include <mutex>
#include <vector>

using namespace rgpu;
using namespace rgpu::client;

namespace {
// Launch configuration pushed by <<<>>> and popped by the device stub. Nested
// pushes are legal (a launch inside argument evaluation), hence a stack.
struct CallConfig {
  dim3 grid, block;
  size_t shmem;
  cudaStream_t stream;
};
thread_local std::vector<CallConfig> t_call_configs;
}  // namespace

RGPU_EXPORT void** __cudaRegisterFatBinary(void* fatCubin) { return rt().registerFatBinary(fatCubin); }
RGPU_EXPORT void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) {}
RGPU_EXPORT void __cudaUnregisterFatBinary(void** fatCubinHandle) { rt().unregisterFatBinary(fatCubinHandle); }
namespace {
// __managed__ variables by module: where the program's host code reads each one's address.
struct ManagedVar {
  void** host_ptr;
  size_t size;
};
std::mutex g_managed_vars_mu;
std::map<void**, std::vector<ManagedVar>>& managedVars() {
  static auto* m = new std::map<void**, std::vector<ManagedVar>>;
  return *m;
}
}  // namespace

// nvcc's host code calls this before its first access to a __managed__
// variable of the module: the variables get their addresses (pages of their
// own on the device, paged as managed memory, client/managed.h).
RGPU_EXPORT char __cudaInitModule(void** fatCubinHandle) {
  std::vector<ManagedVar> vars;
  {
    std::lock_guard lock(g_managed_vars_mu);
    auto it = managedVars().find(fatCubinHandle);
    if (it == managedVars().end()) return 1;
    vars = it->second;
  }
  const int dev = rt().currentDevice();
  for (const ManagedVar& v : vars) {
    if (*v.host_ptr) continue;
    auto sym = rt().symbol(v.host_ptr, dev);  // loads the module
    Status s = sym ? Status::ok() : sym.status();
    // The pages to track: the variable's own (sim), or the managed allocation
    // the driver packed the module's managed variables in (all of them at once).
    auto [base, span] = rt().managedRange(v.host_ptr, dev);
    if (s && base % kManagedPage)
      s = Status(err::kNotSupported, "the server placed it off a page boundary, in no managed allocation of its own");
    if (s && !ManagedMemory::get().contains(reinterpret_cast<void*>(base))) {
      if (rt().trackDevice(base, span, dev) == DeviceRanges::Result::kCollides)
        s = Status(err::kNotSupported, "it lies over this process's own memory");
      if (s) s = ManagedMemory::get().add(base, span, 0, 0, dev, false, /*initialised=*/true);
    }
    if (!s) {
      common::logOnce("managed-var", "a __managed__ variable cannot be used through rgpu: " + s.message());
      return 0;
    }
    *v.host_ptr = reinterpret_cast<void*>(sym->first);
    rt().aliasVar(*v.host_ptr, v.host_ptr);  // cudaMemcpyToSymbol(counter, ...) names it by its address
  }
  return 1;
}

RGPU_EXPORT void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun,
                                        const char* deviceName, int thread_limit, uint3* tid, uint3* bid, dim3* bDim,
                                        dim3* gDim, int* wSize) {
  rt().registerFunction(fatCubinHandle, hostFun, deviceName ? deviceName : deviceFun);
}

RGPU_EXPORT void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress, const char* deviceName,
                                   int ext, size_t size, int constant, int global) {
  rt().registerVar(fatCubinHandle, hostVar, deviceName ? deviceName : deviceAddress, size, constant);
}

RGPU_EXPORT void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress, char* deviceAddress,
                                          const char* deviceName, int ext, size_t size, int constant, int global) {
  // A variable of the module, known by the address of the pointer the host
  // code reads (its address comes with __cudaInitModule).
  rt().registerVar(fatCubinHandle, reinterpret_cast<char*>(hostVarPtrAddress),
                   deviceName ? deviceName : deviceAddress, size, constant);
  std::lock_guard lock(g_managed_vars_mu);
  managedVars()[fatCubinHandle].push_back({hostVarPtrAddress, size});
}

RGPU_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream) {
  t_call_configs.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

RGPU_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  if (t_call_configs.empty()) return rt().finish(Status(err::kInvalidConfiguration, "no pushed launch configuration"));
  CallConfig c = t_call_configs.back();
  t_call_configs.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shmem;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

RGPU_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  return cudaGetKernel(kernel, hostFun);  // (api_device.cc)
}

RGPU_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                           size_t sharedMem, cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto k = rt().kernelByHandle(kernel);
    if (!k) return k.status();
    return rt().launch(**k, gridDim, blockDim, args, sharedMem, stream, false);
  });
}
RGPU_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                                size_t sharedMem, cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto k = rt().kernelByHandle(kernel);
    if (!k) return k.status();
    return rt().launch(**k, gridDim, blockDim, args, sharedMem, stream, true);
  });
}

RGPU_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                         cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    return rt().launch(**k, gridDim, blockDim, args, sharedMem, stream, false);
  });
}
RGPU_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                              size_t sharedMem, cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    return rt().launch(**k, gridDim, blockDim, args, sharedMem, stream, true);
  });
}

RGPU_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                    size_t sharedMem, cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    return rt().launch(**k, gridDim, blockDim, args, sharedMem, stream, false, true);
  });
}
RGPU_EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                         size_t sharedMem, cudaStream_t stream) {
  return guarded([&]() -> Status {
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    return rt().launch(**k, gridDim, blockDim, args, sharedMem, stream, true, true);
  });
}

namespace {
Status launchEx(const cudaLaunchConfig_t* config, const void* func, void** args, bool ptsz) {
  RGPU_TRY(needPtr(config, "config"));
  bool cooperative = false;
  dim3 cluster(0, 0, 0);
  std::vector<std::pair<cudaEvent_t, int>> events;  // recorded behind the kernel
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    // Attributes that change what a launch means are honoured or refused;
    // hints NVIDIA's runtime takes are taken.
    const cudaLaunchAttributeValue& v = config->attrs[i].val;
    switch (config->attrs[i].id) {
      case cudaLaunchAttributeIgnore:
      case cudaLaunchAttributePriority:
      case cudaLaunchAttributeAccessPolicyWindow:
      case cudaLaunchAttributeClusterSchedulingPolicyPreference:
      case cudaLaunchAttributeSynchronizationPolicy:
      case cudaLaunchAttributeMemSyncDomainMap:
      case cudaLaunchAttributeMemSyncDomain:
      case cudaLaunchAttributePreferredSharedMemoryCarveout:
      case cudaLaunchAttributeNvlinkUtilCentricScheduling:
      // A preferred cluster is a preference: the launch keeps its regular cluster (or none).
      case cudaLaunchAttributePreferredClusterDimension:
      // Programmatic dependent launch permits the kernel to start before its
      // predecessor ends; starting after it is a schedule that permission
      // allows (griddepcontrol.wait then has nothing left to wait for).
      case cudaLaunchAttributeProgrammaticStreamSerialization:
        break;
      // Events that may trigger once every block has triggered (or begun):
      // recorded behind the kernel, they trigger when it is done, which is after both.
      case cudaLaunchAttributeProgrammaticEvent:
        if (!v.programmaticEvent.event) return Status(err::kInvalidResourceHandle, "programmatic event is null");
        events.emplace_back(v.programmaticEvent.event, v.programmaticEvent.flags);
        break;
      case cudaLaunchAttributeLaunchCompletionEvent:
        if (!v.launchCompletionEvent.event) return Status(err::kInvalidResourceHandle, "launch completion event is null");
        events.emplace_back(v.launchCompletionEvent.event, v.launchCompletionEvent.flags);
        break;
      case cudaLaunchAttributeCooperative:
        cooperative = config->attrs[i].val.cooperative != 0;
        break;
      case cudaLaunchAttributeClusterDimension:
        cluster = dim3(config->attrs[i].val.clusterDim.x, config->attrs[i].val.clusterDim.y,
                       config->attrs[i].val.clusterDim.z);
        break;
      default:
        return Status(err::kNotSupported, "launch attribute " + std::to_string(config->attrs[i].id) +
                                              " is not supported by rgpu yet");
    }
  }
  auto k = rt().kernelByHostFun(func);
  if (!k) return k.status();
  RGPU_TRY(rt().launch(**k, config->gridDim, config->blockDim, args, config->dynamicSmemBytes, config->stream, ptsz,
                       cooperative, cluster));
  for (auto& [event, flags] : events) RGPU_TRY(eventRecordImpl(event, config->stream, ptsz));
  return Status::ok();
}
}  // namespace

RGPU_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return guarded([&] { return launchEx(config, func, args, false); });
}
RGPU_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return guarded([&] { return launchEx(config, func, args, true); });
}
