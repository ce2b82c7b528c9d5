#include "server/device_props.h"

#include <driver_types.h>

#include <cstring>
#include <functional>

namespace rgpu::server {

DeviceDescription describeSimDevice(const SimDeviceConfig& cfg, int index) {
  cudaDeviceProp p;
  std::memset(&p, 0, sizeof p);
  std::snprintf(p.name, sizeof p.name, "%s", cfg.name.c_str());
  // A stable UUID derived from the name and index.
  uint64_t h1 = std::hash<std::string>{}(cfg.name + "#" + std::to_string(index));
  uint64_t h2 = std::hash<std::string>{}(std::to_string(index) + "@" + cfg.name);
  std::memcpy(p.uuid.bytes, &h1, 8);
  std::memcpy(p.uuid.bytes + 8, &h2, 8);
  p.totalGlobalMem = cfg.memory;
  p.sharedMemPerBlock = 48 * 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = cfg.major;
  p.minor = cfg.minor;
  p.textureAlignment = 512;
  p.texturePitchAlignment = 32;
  p.multiProcessorCount = cfg.sm_count;
  p.canMapHostMemory = 0;  // host memory is on another machine
  p.surfaceAlignment = 512;
  p.concurrentKernels = 1;
  p.pciBusID = index + 1;
  p.asyncEngineCount = 2;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.persistingL2CacheMaxSize = 0;
  p.maxThreadsPerMultiProcessor = 2048;
  p.streamPrioritiesSupported = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
  p.sharedMemPerMultiprocessor = 228 * 1024;
  p.regsPerMultiprocessor = 65536;
  p.managedMemory = 0;
  p.computePreemptionSupported = 1;
  p.cooperativeLaunch = 0;
  p.sharedMemPerBlockOptin = 227 * 1024;
  p.maxBlocksPerMultiProcessor = 32;
  p.reservedSharedMemPerBlock = 1024;
  p.hostRegisterSupported = 0;
  p.memoryPoolsSupported = 0;
  p.deviceNumaId = -1;
  p.hostNumaId = -1;

  DeviceDescription d;
  d.name = cfg.name;
  d.prop.assign(reinterpret_cast<const char*>(&p), sizeof p);
  d.total_mem = cfg.memory;
  d.major = cfg.major;
  d.minor = cfg.minor;
  d.sm_count = cfg.sm_count;
  d.uuid.assign(reinterpret_cast<const char*>(p.uuid.bytes), 16);

  auto& a = d.attributes;
  a.assign(160, 0);
  auto set = [&](cudaDeviceAttr attr, long v) { a[static_cast<size_t>(attr)] = static_cast<int32_t>(v); };
  set(cudaDevAttrMaxThreadsPerBlock, p.maxThreadsPerBlock);
  set(cudaDevAttrMaxBlockDimX, p.maxThreadsDim[0]);
  set(cudaDevAttrMaxBlockDimY, p.maxThreadsDim[1]);
  set(cudaDevAttrMaxBlockDimZ, p.maxThreadsDim[2]);
  set(cudaDevAttrMaxGridDimX, p.maxGridSize[0]);
  set(cudaDevAttrMaxGridDimY, p.maxGridSize[1]);
  set(cudaDevAttrMaxGridDimZ, p.maxGridSize[2]);
  set(cudaDevAttrMaxSharedMemoryPerBlock, static_cast<long>(p.sharedMemPerBlock));
  set(cudaDevAttrTotalConstantMemory, static_cast<long>(p.totalConstMem));
  set(cudaDevAttrWarpSize, p.warpSize);
  set(cudaDevAttrMaxPitch, static_cast<long>(p.memPitch));
  set(cudaDevAttrMaxRegistersPerBlock, p.regsPerBlock);
  set(cudaDevAttrClockRate, 1980000);
  set(cudaDevAttrTextureAlignment, static_cast<long>(p.textureAlignment));
  set(cudaDevAttrGpuOverlap, 1);
  set(cudaDevAttrMultiProcessorCount, p.multiProcessorCount);
  set(cudaDevAttrCanMapHostMemory, p.canMapHostMemory);
  set(cudaDevAttrSurfaceAlignment, static_cast<long>(p.surfaceAlignment));
  set(cudaDevAttrConcurrentKernels, p.concurrentKernels);
  set(cudaDevAttrPciBusId, p.pciBusID);
  set(cudaDevAttrMemoryClockRate, 2619000);
  set(cudaDevAttrGlobalMemoryBusWidth, p.memoryBusWidth);
  set(cudaDevAttrL2CacheSize, p.l2CacheSize);
  set(cudaDevAttrMaxThreadsPerMultiProcessor, p.maxThreadsPerMultiProcessor);
  set(cudaDevAttrAsyncEngineCount, p.asyncEngineCount);
  set(cudaDevAttrUnifiedAddressing, p.unifiedAddressing);
  set(cudaDevAttrTexturePitchAlignment, static_cast<long>(p.texturePitchAlignment));
  set(cudaDevAttrComputeCapabilityMajor, p.major);
  set(cudaDevAttrComputeCapabilityMinor, p.minor);
  set(cudaDevAttrStreamPrioritiesSupported, p.streamPrioritiesSupported);
  set(cudaDevAttrGlobalL1CacheSupported, p.globalL1CacheSupported);
  set(cudaDevAttrLocalL1CacheSupported, p.localL1CacheSupported);
  set(cudaDevAttrMaxSharedMemoryPerMultiprocessor, static_cast<long>(p.sharedMemPerMultiprocessor));
  set(cudaDevAttrMaxRegistersPerMultiprocessor, p.regsPerMultiprocessor);
  set(cudaDevAttrSingleToDoublePrecisionPerfRatio, 2);
  set(cudaDevAttrComputePreemptionSupported, p.computePreemptionSupported);
  set(cudaDevAttrMaxSharedMemoryPerBlockOptin, static_cast<long>(p.sharedMemPerBlockOptin));
  set(cudaDevAttrMaxBlocksPerMultiprocessor, p.maxBlocksPerMultiProcessor);
  set(cudaDevAttrReservedSharedMemoryPerBlock, static_cast<long>(p.reservedSharedMemPerBlock));
  set(cudaDevAttrNumaId, -1);
  set(cudaDevAttrHostNumaId, -1);
  return d;
}

}  // namespace rgpu::server
