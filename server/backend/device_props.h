// cudaDeviceProp and cudaDeviceAttr values for a device, as the client's
// cudaGetDeviceProperties / cudaDeviceGetAttribute will report them.
//
// Both backends describe a device by its cudaDeviceAttr values (a real one
// asks the driver, a simulated one makes them up); describeDevice derives the
// 1008-byte CUDA 13 cudaDeviceProp from them, so the two views always agree.
// Features a remote client cannot use (mapped or managed host memory, host
// registration, pageable access, memory pools) are reported as absent.
#pragma once

#include <functional>

#include "server/backend/backend.h"
#include "server/config/server_config.h"

namespace rgpu::server {

// Number of cudaDeviceAttr slots reported (CUDA 13 values end at 147).
inline constexpr int kDeviceAttributeSlots = 160;

// `attribute(a)` returns cudaDeviceAttr `a` (0 when unknown); `uuid` is 16 bytes.
DeviceDescription describeDevice(const std::string& name, const std::string& uuid, uint64_t total_mem,
                                 const std::function<int(int)>& attribute);

// A simulated device shaped like a recent data-centre GPU of the configured
// compute capability, memory and SM count.
DeviceDescription describeSimDevice(const SimDeviceConfig& cfg, int index);

}  // namespace rgpu::server
