// Devices, versions, errors, function attributes and occupancy.
#include <cuda_occupancy.h>

#include <cstring>
#include <mutex>
#include <set>

#include "client/api_util.h"
#include "client/error_table.h"

using namespace rgpu;
using namespace rgpu::client;

namespace {
#include "cudart_error_table.inc"  // kCudart, from NVIDIA's libcudart.so.13 (client/gen_error_table.cc)
}  // namespace

RGPU_EXPORT const char* cudaGetErrorName(cudaError_t error) { return errorName(kCudart, error); }
RGPU_EXPORT const char* cudaGetErrorString(cudaError_t error) { return errorText(kCudart, error); }
RGPU_EXPORT cudaError_t cudaGetLastError(void) { return rt().lastError(true); }
RGPU_EXPORT cudaError_t cudaPeekAtLastError(void) { return rt().lastError(false); }

RGPU_EXPORT cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return rt().finish(Status(err::kInvalidValue, "NULL"));
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}
RGPU_EXPORT cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return rt().finish(Status(err::kInvalidValue, "NULL"));
  // The server's driver; 0 (as with no driver installed) when unreachable.
  auto c = rt().conn();
  *driverVersion = c ? (*c)->welcome().driver_version : 0;
  return cudaSuccess;
}

RGPU_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(count, "count"));
    *count = 0;
    auto c = rt().servers();
    if (!c) return c.status();
    *count = static_cast<int>((*c)->devices().size());
    return *count ? Status::ok() : Status(err::kNoDevice, "the rgpu server offers no devices");
  });
}
RGPU_EXPORT cudaError_t cudaGetDevice(int* device) {
  if (!device) return rt().finish(Status(err::kInvalidValue, "NULL"));
  *device = rt().currentDevice();
  return cudaSuccess;
}
RGPU_EXPORT cudaError_t cudaSetDevice(int device) {
  return guarded([&] { return rt().setCurrentDevice(device); });
}
RGPU_EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  return guarded([&] { return rt().device(device).status(); });
}
RGPU_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  return guarded([&]() -> Status {
    if (flags & ~(cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax | cudaDeviceSyncMemops))
      return Status(err::kInvalidValue, "unknown device flags");
    rt().deviceFlags() = flags;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return rt().finish(Status(err::kInvalidValue, "NULL"));
  *flags = rt().deviceFlags();
  return cudaSuccess;
}
RGPU_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(prop, "prop"));
    auto d = rt().device(device);
    if (!d) return d.status();
    std::memset(prop, 0, sizeof *prop);
    std::memcpy(prop, (*d)->prop.data(), std::min(sizeof *prop, (*d)->prop.size()));
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(value, "value"));
    auto d = rt().device(device);
    if (!d) return d.status();
    const auto& a = (*d)->attributes;
    if (attr < 0 || static_cast<size_t>(attr) >= a.size())
      return Status(err::kInvalidValue, "unknown device attribute " + std::to_string(static_cast<int>(attr)));
    *value = a[static_cast<size_t>(attr)];
    return Status::ok();
  });
}
namespace {
// Whether kernels on `device` can use `peer`'s memory, as the server says
// (cudaMemcpyPeer works between any two devices regardless).
Result<bool> peerReachable(int device, int peer) {
  auto d = rt().device(device);
  if (!d) return d.status();
  RGPU_TRY(rt().device(peer).status());
  return device != peer && peer < 64 && ((*d)->peer_access >> peer & 1);
}
std::mutex g_peer_mu;
std::set<std::pair<int, int>> g_peers_enabled;  // (device, peer)
}  // namespace

RGPU_EXPORT cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(canAccessPeer, "canAccessPeer"));
    auto r = peerReachable(device, peerDevice);
    if (!r) return r.status();
    *canAccessPeer = *r;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  return guarded([&]() -> Status {
    if (flags) return Status(err::kInvalidValue, "flags must be 0");
    int dev = rt().currentDevice();
    if (peerDevice == dev) return Status(err::kInvalidDevice, "a device is not its own peer");
    auto r = peerReachable(dev, peerDevice);
    if (!r) return r.status();
    if (!*r)
      return Status(cudaErrorPeerAccessUnsupported, "kernels on device " + std::to_string(dev) + " cannot use device " +
                                                        std::to_string(peerDevice) + "'s memory on this server");
    std::lock_guard lock(g_peer_mu);
    if (!g_peers_enabled.insert({dev, peerDevice}).second)
      return Status(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled");
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  return guarded([&]() -> Status {
    int dev = rt().currentDevice();
    RGPU_TRY(rt().device(peerDevice).status());
    std::lock_guard lock(g_peer_mu);
    if (!g_peers_enabled.erase({dev, peerDevice}))
      return Status(cudaErrorPeerAccessNotEnabled, "peer access was not enabled");
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceGetP2PAttribute(int* value, enum cudaDeviceP2PAttr attr, int srcDevice,
                                                  int dstDevice) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(value, "value"));
    if (srcDevice == dstDevice) return Status(err::kInvalidDevice, "a device is not its own peer");
    auto r = peerReachable(srcDevice, dstDevice);
    if (!r) return r.status();
    switch (attr) {
      case cudaDevP2PAttrPerformanceRank: *value = 0; break;
      case cudaDevP2PAttrAccessSupported: *value = *r; break;
      case cudaDevP2PAttrNativeAtomicSupported: *value = *r; break;
      case cudaDevP2PAttrCudaArrayAccessSupported: *value = 0; break;
      default: return Status(err::kInvalidValue, "unknown cudaDeviceP2PAttr " + std::to_string(static_cast<int>(attr)));
    }
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig) {
  // A preference the hardware may ignore; accepted as on GPUs with fixed caches.
  return cudaSuccess;
}
RGPU_EXPORT cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache* pCacheConfig) {
  if (!pCacheConfig) return rt().finish(Status(err::kInvalidValue, "NULL"));
  *pCacheConfig = cudaFuncCachePreferNone;
  return cudaSuccess;
}

RGPU_EXPORT struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f) {
  struct cudaChannelFormatDesc d;
  d.x = x;
  d.y = y;
  d.z = z;
  d.w = w;
  d.f = f;
  return d;
}

// ---- functions -----------------------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(attr, "attr"));
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    auto a = rt().funcAttributes(**k, rt().currentDevice());
    if (!a) return a.status();
    *attr = *a;
    return Status::ok();
  });
}
// NVIDIA's own occupancy calculator (cuda_occupancy.h, shipped with the
// toolkit) over the device's properties and the kernel's attributes.
RGPU_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, const void* func,
                                                                  int numBlocks, int blockSize) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(dynamicSmemSize, "dynamicSmemSize"));
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    int dev = rt().currentDevice();
    auto fa = rt().funcAttributes(**k, dev);
    if (!fa) return fa.status();
    auto d = rt().device(dev);
    if (!d) return d.status();
    if ((*d)->prop.size() < sizeof(cudaDeviceProp)) return Status(err::kInvalidDevice, "no properties for this device");
    cudaOccDeviceProp props(*reinterpret_cast<const cudaDeviceProp*>((*d)->prop.data()));
    cudaOccFuncAttributes attrs(*fa);
    cudaOccDeviceState state;
    size_t out = 0;
    if (cudaOccAvailableDynamicSMemPerBlock(&out, &props, &attrs, &state, numBlocks, blockSize) != CUDA_OCC_SUCCESS)
      return Status(err::kInvalidValue, "no occupancy for " + std::to_string(numBlocks) + " blocks of " +
                                            std::to_string(blockSize) + " threads");
    *dynamicSmemSize = out;
    return Status::ok();
  });
}

namespace {
Status setFuncAttribute(const void* func, cudaFuncAttribute attr, int value, int dev) {
  {
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    RGPU_TRY(rt().device(dev).status());
    RGPU_TRY(rt().ensureShipped((*k)->module, dev));
    common::CallMessage msg(32);
    auto m = msg.initRoot<wire::Request>().initFuncSetAttribute();
    m.setId(rt().serverKernelId(**k, dev));
    m.setAttr(attr);
    m.setValue(value);
    auto r = rt().call(msg);
    rt().forgetLaunchLimits(**k, dev);  // the next launch asks again
    return r ? Status::ok() : r.status();
  }
}
}  // namespace

RGPU_EXPORT cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  return guarded([&] { return setFuncAttribute(func, attr, value, rt().currentDevice()); });
}
// The library-management handles: a kernel's handle stands for it in every call that takes a function.
RGPU_EXPORT cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(kernelPtr, "kernelPtr"));
    auto k = rt().kernelByHostFun(entryFuncAddr);
    if (!k) return k.status();
    *kernelPtr = rt().handleOf(**k);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(functionPtr, "functionPtr"));
    auto k = rt().kernelByHostFun(symbolPtr);
    if (!k) return k.status();
    *functionPtr = reinterpret_cast<cudaFunction_t>(rt().handleOf(**k));
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, enum cudaFuncAttribute attr, int value,
                                                        int device) {
  return guarded([&] { return setFuncAttribute(kernel, attr, value, device); });
}
RGPU_EXPORT cudaError_t cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache cacheConfig) {
  return guarded([&] { return rt().kernelByHostFun(func).status(); });  // a preference; see cudaDeviceSetCacheConfig
}
RGPU_EXPORT cudaError_t cudaFuncGetName(const char** name, const void* func) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(name, "name"));
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    *name = (*k)->name.c_str();
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex, size_t* paramOffset,
                                             size_t* paramSize) {
  return guarded([&]() -> Status {
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    if (!(*k)->has_layout || paramIndex >= (*k)->layout.params.size()) return Status(err::kInvalidValue, "no such parameter");
    if (paramOffset) *paramOffset = (*k)->layout.params[paramIndex].offset;
    if (paramSize) *paramSize = (*k)->layout.params[paramIndex].size;
    return Status::ok();
  });
}

namespace {
Status occupancyImpl(int* numBlocks, const void* func, int blockSize, size_t dynamicSMemSize, unsigned /*flags*/) {
  RGPU_TRY(needPtr(numBlocks, "numBlocks"));
  auto k = rt().kernelByHostFun(func);
  if (!k) return k.status();
  // (The flags only switch off caching that the driver does, never the answer.)
  auto n = rt().blocksPerMultiprocessor(**k, rt().currentDevice(), blockSize, dynamicSMemSize);
  if (!n) return n.status();
  *numBlocks = *n;
  return Status::ok();
}
}  // namespace

RGPU_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                                      size_t dynamicSMemSize) {
  return guarded([&] { return occupancyImpl(numBlocks, func, blockSize, dynamicSMemSize, 0); });
}
RGPU_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                               int blockSize, size_t dynamicSMemSize,
                                                                               unsigned int flags) {
  return guarded([&] { return occupancyImpl(numBlocks, func, blockSize, dynamicSMemSize, flags); });
}

// Thread-block clusters. How many clusters of `config` the device holds at
// once, and the largest cluster a launch of `func` may use. The device
// schedules a cluster's blocks together: the answer here is the blocks the
// device holds at once (occupancy x multiprocessors) in whole clusters.
namespace {
Result<dim3> clusterOf(const KernelRecord& k, const cudaLaunchConfig_t* config, int device) {
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension)
      return dim3(config->attrs[i].val.clusterDim.x, config->attrs[i].val.clusterDim.y, config->attrs[i].val.clusterDim.z);
  auto fa = rt().funcAttributes(k, device);
  if (!fa) return fa.status();
  if (fa->requiredClusterWidth > 0)
    return dim3(static_cast<unsigned>(fa->requiredClusterWidth), static_cast<unsigned>(fa->requiredClusterHeight),
                static_cast<unsigned>(fa->requiredClusterDepth));
  return Status(err::kInvalidClusterSize, "no cluster dimension: neither the launch configuration nor the kernel gives one");
}

// Blocks of `k` in `config` the device holds at once (occupancy x multiprocessors).
Result<uint64_t> residentBlocks(const KernelRecord& k, const cudaLaunchConfig_t* config, int device) {
  const int threads = static_cast<int>(config->blockDim.x * config->blockDim.y * config->blockDim.z);
  auto per_sm = rt().blocksPerMultiprocessor(k, device, threads, config->dynamicSmemBytes);
  if (!per_sm) return per_sm.status();
  auto dev = rt().device(device);
  if (!dev) return dev.status();
  return uint64_t(*per_sm) * static_cast<uint64_t>((*dev)->attributes[cudaDevAttrMultiProcessorCount]);
}

Status clusterDevice(int device) {
  auto dev = rt().device(device);
  if (!dev) return dev.status();
  const auto& a = (*dev)->attributes;
  if (static_cast<size_t>(cudaDevAttrClusterLaunch) >= a.size() || !a[cudaDevAttrClusterLaunch])
    return Status(err::kNotSupported, "the device does not support thread-block clusters");
  return Status::ok();
}
}  // namespace

RGPU_EXPORT cudaError_t cudaOccupancyMaxActiveClusters(int* numClusters, const void* func, const cudaLaunchConfig_t* config) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(numClusters, "numClusters"));
    RGPU_TRY(needPtr(config, "config"));
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    const int device = rt().currentDevice();
    RGPU_TRY(clusterDevice(device));
    auto c = clusterOf(**k, config, device);
    if (!c) return c.status();
    const uint64_t size = uint64_t{c->x} * c->y * c->z;
    auto fa = rt().funcAttributes(**k, device);
    if (!fa) return fa.status();
    if (size == 0 || size > (fa->nonPortableClusterSizeAllowed ? 16u : 8u))
      return Status(err::kInvalidClusterSize, "clusters of " + std::to_string(size) + " blocks");
    auto blocks = residentBlocks(**k, config, device);
    if (!blocks) return blocks.status();
    *numClusters = static_cast<int>(*blocks / size);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaOccupancyMaxPotentialClusterSize(int* clusterSize, const void* func,
                                                             const cudaLaunchConfig_t* config) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(clusterSize, "clusterSize"));
    RGPU_TRY(needPtr(config, "config"));
    auto k = rt().kernelByHostFun(func);
    if (!k) return k.status();
    const int device = rt().currentDevice();
    RGPU_TRY(clusterDevice(device));
    auto fa = rt().funcAttributes(**k, device);
    if (!fa) return fa.status();
    auto blocks = residentBlocks(**k, config, device);
    if (!blocks) return blocks.status();
    *clusterSize = static_cast<int>(std::min<uint64_t>(fa->nonPortableClusterSizeAllowed ? 16 : 8, *blocks));
    return Status::ok();
  });
}
