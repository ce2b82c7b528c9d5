// Chooses and builds the backend a worker uses: `sim`, `cuda` or `auto`.
//
// The daemon never initialises CUDA (a process that forks after cuInit is
// undefined behaviour), so it learns whether a driver and GPUs are present by
// running `rgpu-server --probe-cuda` as a child, which loads the driver, counts
// the devices and exits. Workers then build the chosen backend themselves.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/server_config.h"

namespace rgpu::server {

// What a probe found: the devices' names, or why there are none.
struct CudaProbe {
  Status status;                   // ok when the driver loaded and sees >= 1 device
  std::vector<std::string> devices;
  int driver_version = 0;
};

// Runs `exe --probe-cuda` (with `config_path`) and reads its report. Bounded by a timeout.
CudaProbe probeCuda(const std::string& exe, const std::string& config_path, const ServerConfig& cfg);
// The probe child's side: prints the report on stdout, returns the exit code.
int runCudaProbe(const ServerConfig& cfg);

// Resolves cfg.backend ("auto" becomes "cuda" or "sim") and says why in the log.
// Fails when "cuda" was asked for and no driver or GPU is usable.
Result<std::string> chooseBackend(const ServerConfig& cfg, const std::string& exe, const std::string& config_path);

// Builds the backend named by cfg.backend ("auto": CUDA when it starts, else sim).
Result<std::unique_ptr<Backend>> makeBackend(const ServerConfig& cfg);

}  // namespace rgpu::server
