#include "server/backend/device_props.h"

#include <driver_types.h>

#include <cstring>
#include <map>

namespace rgpu::server {
namespace {
// What rgpu cannot offer a remote client (yet), whatever the GPU can do: a
// kernel cannot reach the client's host memory over the network directly
// (mapped memory has a device alias that the client keeps coherent at launch
// and synchronisation points, client/managed.h; no unified addressing), so
// none of them is reported.
bool hiddenFromRemoteClients(int a) {
  switch (a) {
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrIntegrated:
    case cudaDevAttrConcurrentManagedAccess:  // managed memory is offered (client/managed.h), without it
    case cudaDevAttrPageableMemoryAccess:
    case cudaDevAttrPageableMemoryAccessUsesHostPageTables:
    case cudaDevAttrDirectManagedMemAccessFromHost:
    case cudaDevAttrHostNativeAtomicSupported:
    case cudaDevAttrCanUseHostPointerForRegisteredMem:
    case cudaDevAttrHostRegisterSupported:
    case cudaDevAttrHostRegisterReadOnlySupported:
    case cudaDevAttrMemoryPoolSupportedHandleTypes:  // (pools work; exporting them to other processes does not)
    case cudaDevAttrIpcEventSupport:
    case cudaDevAttrGPUDirectRDMASupported:
    case cudaDevAttrHostNumaMemoryPoolsSupported:
    case cudaDevAttrHostMemoryPoolsSupported:
    case cudaDevAttrHostNumaMultinodeIpcSupported:
    case cudaDevAttrTimelineSemaphoreInteropSupported:
      return true;
    default:
      return false;
  }
}
}  // namespace

DeviceDescription describeDevice(const std::string& name, const std::string& uuid, uint64_t total_mem,
                                 const std::function<int(int)>& attribute) {
  DeviceDescription d;
  d.attributes.assign(kDeviceAttributeSlots, 0);
  for (int a = 1; a < kDeviceAttributeSlots; ++a) d.attributes[a] = hiddenFromRemoteClients(a) ? 0 : attribute(a);
  auto A = [&](cudaDeviceAttr a) { return d.attributes[static_cast<size_t>(a)]; };

  cudaDeviceProp p;
  std::memset(&p, 0, sizeof p);
  std::snprintf(p.name, sizeof p.name, "%s", name.c_str());
  std::memcpy(p.uuid.bytes, uuid.data(), std::min<size_t>(uuid.size(), 16));
  p.totalGlobalMem = total_mem;
  p.sharedMemPerBlock = A(cudaDevAttrMaxSharedMemoryPerBlock);
  p.regsPerBlock = A(cudaDevAttrMaxRegistersPerBlock);
  p.warpSize = A(cudaDevAttrWarpSize);
  p.memPitch = static_cast<unsigned>(A(cudaDevAttrMaxPitch));
  p.maxThreadsPerBlock = A(cudaDevAttrMaxThreadsPerBlock);
  p.maxThreadsDim[0] = A(cudaDevAttrMaxBlockDimX);
  p.maxThreadsDim[1] = A(cudaDevAttrMaxBlockDimY);
  p.maxThreadsDim[2] = A(cudaDevAttrMaxBlockDimZ);
  p.maxGridSize[0] = A(cudaDevAttrMaxGridDimX);
  p.maxGridSize[1] = A(cudaDevAttrMaxGridDimY);
  p.maxGridSize[2] = A(cudaDevAttrMaxGridDimZ);
  p.totalConstMem = A(cudaDevAttrTotalConstantMemory);
  p.major = A(cudaDevAttrComputeCapabilityMajor);
  p.minor = A(cudaDevAttrComputeCapabilityMinor);
  p.textureAlignment = A(cudaDevAttrTextureAlignment);
  p.texturePitchAlignment = A(cudaDevAttrTexturePitchAlignment);
  p.multiProcessorCount = A(cudaDevAttrMultiProcessorCount);
  p.integrated = A(cudaDevAttrIntegrated);
  p.canMapHostMemory = A(cudaDevAttrCanMapHostMemory);
  p.maxTexture1D = A(cudaDevAttrMaxTexture1DWidth);
  p.maxTexture1DMipmap = A(cudaDevAttrMaxTexture1DMipmappedWidth);
  p.maxTexture2D[0] = A(cudaDevAttrMaxTexture2DWidth);
  p.maxTexture2D[1] = A(cudaDevAttrMaxTexture2DHeight);
  p.maxTexture2DMipmap[0] = A(cudaDevAttrMaxTexture2DMipmappedWidth);
  p.maxTexture2DMipmap[1] = A(cudaDevAttrMaxTexture2DMipmappedHeight);
  p.maxTexture2DLinear[0] = A(cudaDevAttrMaxTexture2DLinearWidth);
  p.maxTexture2DLinear[1] = A(cudaDevAttrMaxTexture2DLinearHeight);
  p.maxTexture2DLinear[2] = A(cudaDevAttrMaxTexture2DLinearPitch);
  p.maxTexture2DGather[0] = A(cudaDevAttrMaxTexture2DGatherWidth);
  p.maxTexture2DGather[1] = A(cudaDevAttrMaxTexture2DGatherHeight);
  p.maxTexture3D[0] = A(cudaDevAttrMaxTexture3DWidth);
  p.maxTexture3D[1] = A(cudaDevAttrMaxTexture3DHeight);
  p.maxTexture3D[2] = A(cudaDevAttrMaxTexture3DDepth);
  p.maxTexture3DAlt[0] = A(cudaDevAttrMaxTexture3DWidthAlt);
  p.maxTexture3DAlt[1] = A(cudaDevAttrMaxTexture3DHeightAlt);
  p.maxTexture3DAlt[2] = A(cudaDevAttrMaxTexture3DDepthAlt);
  p.maxTextureCubemap = A(cudaDevAttrMaxTextureCubemapWidth);
  p.maxTexture1DLayered[0] = A(cudaDevAttrMaxTexture1DLayeredWidth);
  p.maxTexture1DLayered[1] = A(cudaDevAttrMaxTexture1DLayeredLayers);
  p.maxTexture2DLayered[0] = A(cudaDevAttrMaxTexture2DLayeredWidth);
  p.maxTexture2DLayered[1] = A(cudaDevAttrMaxTexture2DLayeredHeight);
  p.maxTexture2DLayered[2] = A(cudaDevAttrMaxTexture2DLayeredLayers);
  p.maxTextureCubemapLayered[0] = A(cudaDevAttrMaxTextureCubemapLayeredWidth);
  p.maxTextureCubemapLayered[1] = A(cudaDevAttrMaxTextureCubemapLayeredLayers);
  p.maxSurface1D = A(cudaDevAttrMaxSurface1DWidth);
  p.maxSurface2D[0] = A(cudaDevAttrMaxSurface2DWidth);
  p.maxSurface2D[1] = A(cudaDevAttrMaxSurface2DHeight);
  p.maxSurface3D[0] = A(cudaDevAttrMaxSurface3DWidth);
  p.maxSurface3D[1] = A(cudaDevAttrMaxSurface3DHeight);
  p.maxSurface3D[2] = A(cudaDevAttrMaxSurface3DDepth);
  p.maxSurface1DLayered[0] = A(cudaDevAttrMaxSurface1DLayeredWidth);
  p.maxSurface1DLayered[1] = A(cudaDevAttrMaxSurface1DLayeredLayers);
  p.maxSurface2DLayered[0] = A(cudaDevAttrMaxSurface2DLayeredWidth);
  p.maxSurface2DLayered[1] = A(cudaDevAttrMaxSurface2DLayeredHeight);
  p.maxSurface2DLayered[2] = A(cudaDevAttrMaxSurface2DLayeredLayers);
  p.maxSurfaceCubemap = A(cudaDevAttrMaxSurfaceCubemapWidth);
  p.maxSurfaceCubemapLayered[0] = A(cudaDevAttrMaxSurfaceCubemapLayeredWidth);
  p.maxSurfaceCubemapLayered[1] = A(cudaDevAttrMaxSurfaceCubemapLayeredLayers);
  p.surfaceAlignment = A(cudaDevAttrSurfaceAlignment);
  p.concurrentKernels = A(cudaDevAttrConcurrentKernels);
  p.ECCEnabled = A(cudaDevAttrEccEnabled);
  p.pciBusID = A(cudaDevAttrPciBusId);
  p.pciDeviceID = A(cudaDevAttrPciDeviceId);
  p.pciDomainID = A(cudaDevAttrPciDomainId);
  p.tccDriver = A(cudaDevAttrTccDriver);
  p.asyncEngineCount = A(cudaDevAttrAsyncEngineCount);
  p.unifiedAddressing = A(cudaDevAttrUnifiedAddressing);
  p.memoryBusWidth = A(cudaDevAttrGlobalMemoryBusWidth);
  p.l2CacheSize = A(cudaDevAttrL2CacheSize);
  p.persistingL2CacheMaxSize = A(cudaDevAttrMaxPersistingL2CacheSize);
  p.maxThreadsPerMultiProcessor = A(cudaDevAttrMaxThreadsPerMultiProcessor);
  p.streamPrioritiesSupported = A(cudaDevAttrStreamPrioritiesSupported);
  p.globalL1CacheSupported = A(cudaDevAttrGlobalL1CacheSupported);
  p.localL1CacheSupported = A(cudaDevAttrLocalL1CacheSupported);
  p.sharedMemPerMultiprocessor = A(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  p.regsPerMultiprocessor = A(cudaDevAttrMaxRegistersPerMultiprocessor);
  p.managedMemory = A(cudaDevAttrManagedMemory);
  p.isMultiGpuBoard = A(cudaDevAttrIsMultiGpuBoard);
  p.multiGpuBoardGroupID = A(cudaDevAttrMultiGpuBoardGroupID);
  p.hostNativeAtomicSupported = A(cudaDevAttrHostNativeAtomicSupported);
  p.pageableMemoryAccess = A(cudaDevAttrPageableMemoryAccess);
  p.concurrentManagedAccess = A(cudaDevAttrConcurrentManagedAccess);
  p.computePreemptionSupported = A(cudaDevAttrComputePreemptionSupported);
  p.canUseHostPointerForRegisteredMem = A(cudaDevAttrCanUseHostPointerForRegisteredMem);
  p.cooperativeLaunch = A(cudaDevAttrCooperativeLaunch);
  p.sharedMemPerBlockOptin = A(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  p.pageableMemoryAccessUsesHostPageTables = A(cudaDevAttrPageableMemoryAccessUsesHostPageTables);
  p.directManagedMemAccessFromHost = A(cudaDevAttrDirectManagedMemAccessFromHost);
  p.maxBlocksPerMultiProcessor = A(cudaDevAttrMaxBlocksPerMultiprocessor);
  p.accessPolicyMaxWindowSize = A(cudaDevAttrMaxAccessPolicyWindowSize);
  p.reservedSharedMemPerBlock = A(cudaDevAttrReservedSharedMemoryPerBlock);
  p.hostRegisterSupported = A(cudaDevAttrHostRegisterSupported);
  p.sparseCudaArraySupported = A(cudaDevAttrSparseCudaArraySupported);
  p.hostRegisterReadOnlySupported = A(cudaDevAttrHostRegisterReadOnlySupported);
  p.timelineSemaphoreInteropSupported = A(cudaDevAttrTimelineSemaphoreInteropSupported);
  p.memoryPoolsSupported = A(cudaDevAttrMemoryPoolsSupported);
  p.gpuDirectRDMASupported = A(cudaDevAttrGPUDirectRDMASupported);
  p.gpuDirectRDMAFlushWritesOptions = A(cudaDevAttrGPUDirectRDMAFlushWritesOptions);
  p.gpuDirectRDMAWritesOrdering = A(cudaDevAttrGPUDirectRDMAWritesOrdering);
  p.memoryPoolSupportedHandleTypes = A(cudaDevAttrMemoryPoolSupportedHandleTypes);
  p.deferredMappingCudaArraySupported = A(cudaDevAttrDeferredMappingCudaArraySupported);
  p.ipcEventSupported = A(cudaDevAttrIpcEventSupport);
  p.clusterLaunch = A(cudaDevAttrClusterLaunch);
  p.unifiedFunctionPointers = 0;
  p.deviceNumaConfig = A(cudaDevAttrNumaConfig);
  p.deviceNumaId = A(cudaDevAttrNumaId);
  p.mpsEnabled = A(cudaDevAttrMpsEnabled);
  p.hostNumaId = A(cudaDevAttrHostNumaId);
  p.gpuPciDeviceID = A(cudaDevAttrGpuPciDeviceId);
  p.gpuPciSubsystemID = A(cudaDevAttrGpuPciSubsystemId);
  p.hostNumaMultinodeIpcSupported = A(cudaDevAttrHostNumaMultinodeIpcSupported);

  d.name = name;
  d.prop.assign(reinterpret_cast<const char*>(&p), sizeof p);
  d.total_mem = total_mem;
  d.major = p.major;
  d.minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.uuid.assign(reinterpret_cast<const char*>(p.uuid.bytes), 16);
  return d;
}

namespace {
// What the CUDA Programming Guide's "technical specifications per compute
// capability" table gives each architecture, with the L2 size of the
// data-centre part of that generation (V100, T4, A100, A10, L4, H100).
struct ArchLimits {
  int smem_per_sm_kib, smem_optin_kib, threads_per_sm, blocks_per_sm, l2_mib, mem_sync_domains;
};
ArchLimits archLimits(int major, int minor) {
  if (major == 7 && minor == 0) return {96, 96, 2048, 32, 6, 1};
  if (major == 7) return {64, 64, 1024, 16, 4, 1};
  if (major == 8 && minor == 0) return {164, 163, 2048, 32, 40, 1};
  if (major == 8 && minor == 7) return {164, 163, 2048, 16, 4, 1};
  if (major == 8 && minor == 9) return {100, 99, 1536, 24, 48, 1};
  if (major == 8) return {100, 99, 1536, 16, 6, 1};
  if (major == 12) return {100, 99, 1536, 32, 48, 4};
  return {228, 227, 2048, 32, 50, 4};  // 9.x, 10.x: Hopper and data-centre Blackwell
}
}  // namespace

DeviceDescription describeSimDevice(const SimDeviceConfig& cfg, int index) {
  const ArchLimits arch = archLimits(cfg.major, cfg.minor);
  // A stable UUID derived from the name and index.
  uint64_t h[2] = {std::hash<std::string>{}(cfg.name + "#" + std::to_string(index)),
                   std::hash<std::string>{}(std::to_string(index) + "@" + cfg.name)};
  std::string uuid(reinterpret_cast<const char*>(h), 16);
  const std::map<int, int> attrs = {
      {cudaDevAttrMaxThreadsPerBlock, 1024},
      {cudaDevAttrMaxBlockDimX, 1024},
      {cudaDevAttrMaxBlockDimY, 1024},
      {cudaDevAttrMaxBlockDimZ, 64},
      {cudaDevAttrMaxGridDimX, 2147483647},
      {cudaDevAttrMaxGridDimY, 65535},
      {cudaDevAttrMaxGridDimZ, 65535},
      {cudaDevAttrMaxSharedMemoryPerBlock, 48 * 1024},
      {cudaDevAttrTotalConstantMemory, 65536},
      {cudaDevAttrWarpSize, 32},
      {cudaDevAttrMaxPitch, 2147483647},
      {cudaDevAttrMaxRegistersPerBlock, 65536},
      {cudaDevAttrClockRate, 1980000},
      {cudaDevAttrTextureAlignment, 512},
      {cudaDevAttrGpuOverlap, 1},
      {cudaDevAttrMultiProcessorCount, cfg.sm_count},
      {cudaDevAttrSurfaceAlignment, 512},
      {cudaDevAttrConcurrentKernels, 1},
      {cudaDevAttrPciBusId, index + 1},
      {cudaDevAttrMemoryClockRate, 2619000},
      {cudaDevAttrGlobalMemoryBusWidth, 5120},
      {cudaDevAttrL2CacheSize, arch.l2_mib * 1024 * 1024},
      // L2 persistence (hints the sim accepts): an H100's window limit, 3/4 of L2 set aside at most.
      {cudaDevAttrMaxAccessPolicyWindowSize, 134213632},
      {cudaDevAttrMaxPersistingL2CacheSize, arch.l2_mib * 3 / 4 * 1024 * 1024},
      {cudaDevAttrMaxThreadsPerMultiProcessor, arch.threads_per_sm},
      {cudaDevAttrAsyncEngineCount, 2},
      {cudaDevAttrTexturePitchAlignment, 32},
      {cudaDevAttrComputeCapabilityMajor, cfg.major},
      {cudaDevAttrComputeCapabilityMinor, cfg.minor},
      {cudaDevAttrStreamPrioritiesSupported, 1},
      {cudaDevAttrGlobalL1CacheSupported, 1},
      {cudaDevAttrLocalL1CacheSupported, 1},
      {cudaDevAttrMaxSharedMemoryPerMultiprocessor, arch.smem_per_sm_kib * 1024},
      {cudaDevAttrMaxRegistersPerMultiprocessor, 65536},
      {cudaDevAttrSingleToDoublePrecisionPerfRatio, 2},
      {cudaDevAttrComputePreemptionSupported, 1},
      {cudaDevAttrMaxSharedMemoryPerBlockOptin, arch.smem_optin_kib * 1024},
      {cudaDevAttrMaxBlocksPerMultiprocessor, arch.blocks_per_sm},
      {cudaDevAttrReservedSharedMemoryPerBlock, 1024},
      {cudaDevAttrNumaId, -1},
      {cudaDevAttrMemoryPoolsSupported, 1},  // stream-ordered allocation (pools without IPC handles)
      {cudaDevAttrManagedMemory, 1},         // cudaMallocManaged, without concurrent access (client/managed.h)
      {cudaDevAttrCanMapHostMemory, 1},      // mapped host memory through a device alias (no unified addressing)
      {cudaDevAttrCooperativeLaunch, 1},     // every block of a cooperative grid is resident at once
      {cudaDevAttrHostNumaId, -1},
      {cudaDevAttrEccEnabled, 1},  // as on data-centre GPUs
      {cudaDevAttrMemSyncDomainCount, arch.mem_sync_domains},
      {cudaDevAttrClusterLaunch, cfg.major >= 9 ? 1 : 0},  // thread-block clusters (the interpreter runs them)
      {cudaDevAttrSparseCudaArraySupported, 0},  // sparse arrays: not offered
      // Textures and surfaces (an H100's limits; the sim samples them in the interpreter).
      {cudaDevAttrMaxTexture1DWidth, 131072},
      {cudaDevAttrMaxTexture1DLinearWidth, 268435456},
      {cudaDevAttrMaxTexture1DMipmappedWidth, 32768},
      {cudaDevAttrMaxTexture2DWidth, 131072},
      {cudaDevAttrMaxTexture2DHeight, 65536},
      {cudaDevAttrMaxTexture2DLinearWidth, 131072},
      {cudaDevAttrMaxTexture2DLinearHeight, 65000},
      {cudaDevAttrMaxTexture2DLinearPitch, 2097120},
      {cudaDevAttrMaxTexture2DMipmappedWidth, 32768},
      {cudaDevAttrMaxTexture2DMipmappedHeight, 32768},
      {cudaDevAttrMaxTexture2DGatherWidth, 32768},
      {cudaDevAttrMaxTexture2DGatherHeight, 32768},
      {cudaDevAttrMaxTexture3DWidth, 16384},
      {cudaDevAttrMaxTexture3DHeight, 16384},
      {cudaDevAttrMaxTexture3DDepth, 16384},
      {cudaDevAttrMaxTexture3DWidthAlt, 8192},
      {cudaDevAttrMaxTexture3DHeightAlt, 8192},
      {cudaDevAttrMaxTexture3DDepthAlt, 32768},
      {cudaDevAttrMaxTexture1DLayeredWidth, 32768},
      {cudaDevAttrMaxTexture1DLayeredLayers, 2048},
      {cudaDevAttrMaxTexture2DLayeredWidth, 32768},
      {cudaDevAttrMaxTexture2DLayeredHeight, 32768},
      {cudaDevAttrMaxTexture2DLayeredLayers, 2048},
      {cudaDevAttrMaxTextureCubemapWidth, 32768},
      {cudaDevAttrMaxTextureCubemapLayeredWidth, 32768},
      {cudaDevAttrMaxTextureCubemapLayeredLayers, 2046},
      {cudaDevAttrMaxSurface1DWidth, 32768},
      {cudaDevAttrMaxSurface2DWidth, 131072},
      {cudaDevAttrMaxSurface2DHeight, 65536},
      {cudaDevAttrMaxSurface3DWidth, 16384},
      {cudaDevAttrMaxSurface3DHeight, 16384},
      {cudaDevAttrMaxSurface3DDepth, 16384},
      {cudaDevAttrMaxSurface1DLayeredWidth, 32768},
      {cudaDevAttrMaxSurface1DLayeredLayers, 2048},
      {cudaDevAttrMaxSurface2DLayeredWidth, 32768},
      {cudaDevAttrMaxSurface2DLayeredHeight, 32768},
      {cudaDevAttrMaxSurface2DLayeredLayers, 2048},
      {cudaDevAttrMaxSurfaceCubemapWidth, 32768},
      {cudaDevAttrMaxSurfaceCubemapLayeredWidth, 32768},
      {cudaDevAttrMaxSurfaceCubemapLayeredLayers, 2046},
  };
  return describeDevice(cfg.name, uuid, cfg.memory, [&](int a) {
    auto it = attrs.find(a);
    return it == attrs.end() ? 0 : it->second;
  });
}

}  // namespace rgpu::server
