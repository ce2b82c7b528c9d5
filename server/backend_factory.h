// Chooses and builds the backend a worker uses: `sim`, `cuda` or `auto`.
#pragma once

#include <memory>

#include "server/backend.h"
#include "server/server_config.h"

namespace rgpu::server {

Result<std::unique_ptr<Backend>> makeBackend(const ServerConfig& cfg);

}  // namespace rgpu::server
