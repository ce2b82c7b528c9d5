#include "server/backend_factory.h"

#include "common/log.h"
#include "server/sim_backend.h"

namespace rgpu::server {

Result<std::unique_ptr<Backend>> makeBackend(const ServerConfig& cfg) {
  if (cfg.backend == "cuda")
    return Status(err::kInsufficientDriver,
                  "backend = \"cuda\" was asked for, but this build has no CUDA backend yet; use backend = \"sim\"");
  if (cfg.backend == "auto")
    common::logOnce("backend-auto", "backend = \"auto\": using the sim backend (no CUDA backend in this build)");
  SimOptions opts;
  opts.launch_log = cfg.sim_launch_log;
  return std::unique_ptr<Backend>(std::make_unique<SimBackend>(cfg.sim_devices, opts));
}

}  // namespace rgpu::server
