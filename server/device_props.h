// cudaDeviceProp and cudaDeviceAttr values for a device, as the client's
// cudaGetDeviceProperties / cudaDeviceGetAttribute will report them.
#pragma once

#include "server/backend.h"
#include "server/server_config.h"

namespace rgpu::server {

// A simulated device shaped like a recent data-centre GPU of the configured
// compute capability, memory and SM count.
DeviceDescription describeSimDevice(const SimDeviceConfig& cfg, int index);

}  // namespace rgpu::server
