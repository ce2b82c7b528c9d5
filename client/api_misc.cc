// Hints and queries that NVIDIA's runtime always accepts or answers, which rgpu
// answers the same way: the profiler switches, device limits, PCI bus ids,
// device choice, shared memory bank configuration, L2 persistence.
#include <cuda_profiler_api.h>

#include <cstdio>
#include <cstring>

#include "client/api_util.h"

using namespace rgpu;
using namespace rgpu::client;

namespace {
Result<const cudaDeviceProp*> propOf(int device) {
  auto d = rt().device(device);
  if (!d) return d.status();
  if ((*d)->prop.size() < sizeof(cudaDeviceProp)) return Status(err::kInvalidDevice, "no properties for this device");
  return reinterpret_cast<const cudaDeviceProp*>((*d)->prop.data());
}
}  // namespace

RGPU_EXPORT cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
RGPU_EXPORT cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

RGPU_EXPORT cudaError_t cudaDeviceGetLimit(size_t* pValue, enum cudaLimit limit) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pValue, "pValue"));
    auto v = rt().limit(rt().currentDevice(), limit);
    if (!v) return v.status();
    *pValue = *v;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
  return guarded([&] { return rt().setLimit(rt().currentDevice(), limit, value); });
}

RGPU_EXPORT cudaError_t cudaChooseDevice(int* device, const struct cudaDeviceProp* prop) {
  // The device whose compute capability is closest to (and not below) the one asked for; else device 0.
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(device, "device"));
    RGPU_TRY(needPtr(prop, "prop"));
    int count = rt().deviceCount();
    if (count == 0) return rt().device(0).status();
    int best = 0, best_cc = -1;
    int want = prop->major * 10 + prop->minor;
    for (int d = 0; d < count; ++d) {
      auto p = propOf(d);
      if (!p) return p.status();
      int cc = (*p)->major * 10 + (*p)->minor;
      if (cc >= want && (best_cc < want || cc < best_cc)) best = d, best_cc = cc;
    }
    *device = best;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pciBusId, "pciBusId"));
    if (len <= 0) return Status(err::kInvalidValue, "len must be positive");
    auto p = propOf(device);
    if (!p) return p.status();
    std::snprintf(pciBusId, static_cast<size_t>(len), "%04x:%02x:%02x.0", (*p)->pciDomainID, (*p)->pciBusID,
                  (*p)->pciDeviceID);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(device, "device"));
    RGPU_TRY(needPtr(pciBusId, "pciBusId"));
    // [domain:]bus:device[.function], hexadecimal, as NVIDIA's runtime accepts.
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (std::sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) < 3) {
      dom = 0;
      if (std::sscanf(pciBusId, "%x:%x.%x", &bus, &dev, &fn) < 2) return Status(err::kInvalidValue, "not a PCI bus id");
    }
    for (int d = 0, n = rt().deviceCount(); d < n; ++d) {
      auto p = propOf(d);
      if (p && static_cast<unsigned>((*p)->pciDomainID) == dom && static_cast<unsigned>((*p)->pciBusID) == bus &&
          static_cast<unsigned>((*p)->pciDeviceID) == dev) {
        *device = d;
        return Status::ok();
      }
    }
    return Status(err::kInvalidDevice, std::string("no device at PCI bus id ") + pciBusId);
  });
}

RGPU_EXPORT cudaError_t cudaSetValidDevices(int* device_arr, int len) {
  return guarded([&]() -> Status {
    if (len < 0 || (len > 0 && !device_arr)) return Status(err::kInvalidValue, "bad device list");
    for (int i = 0; i < len; ++i) RGPU_TRY(rt().device(device_arr[i]).status());
    return Status::ok();
  });
}

// Bank size configuration has no effect on the GPUs CUDA 13 supports; NVIDIA's runtime accepts it.
RGPU_EXPORT cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config) {
  return guarded([&]() -> Status {
    if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte)
      return Status(err::kInvalidValue, "unknown shared memory configuration");
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig* pConfig) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pConfig, "pConfig"));
    *pConfig = cudaSharedMemBankSizeFourByte;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaFuncSetSharedMemConfig(const void* func, enum cudaSharedMemConfig config) {
  return guarded([&]() -> Status {
    RGPU_TRY(rt().kernelByHostFun(func).status());
    if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte)
      return Status(err::kInvalidValue, "unknown shared memory configuration");
    return Status::ok();
  });
}
// A hint: persisting L2 lines are reset to normal; nothing to do remotely.
RGPU_EXPORT cudaError_t cudaCtxResetPersistingL2Cache(void) { return cudaSuccess; }
