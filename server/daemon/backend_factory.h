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

#include "server/backend/backend.h"
#include "server/pool/pool_manager.h"
#include "server/config/server_config.h"

namespace rgpu::server {

// What a probe found: the devices' names, or why there are none.
struct CudaProbe {
  Status status;                          // ok when the driver loaded and sees >= 1 device
  std::vector<PoolDeviceInfo> inventory;  // name, UUID, memory, compute capability
  int driver_version = 0;
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for 16 UUID bytes, as nvidia-smi writes it.
std::string uuidText(const std::string& bytes);
// The configured sim devices, for the pool.
std::vector<PoolDeviceInfo> simInventory(const ServerConfig& cfg);

// Runs `exe --probe-cuda` (with `config_path`) and reads its report. Bounded by a timeout.
CudaProbe probeCuda(const std::string& exe, const std::string& config_path, const ServerConfig& cfg);
// The probe child's side: prints the report on stdout, returns the exit code.
int runCudaProbe(const ServerConfig& cfg);

struct BackendChoice {
  std::string backend;                    // "cuda" or "sim"
  std::vector<PoolDeviceInfo> inventory;  // the devices the pool shares
};
// Resolves cfg.backend ("auto" becomes "cuda" or "sim") and says why in the log.
// Fails when "cuda" was asked for and no driver or GPU is usable.
Result<BackendChoice> chooseBackend(const ServerConfig& cfg, const std::string& exe, const std::string& config_path);

// Whether an NVIDIA MPS control daemon serves this host ($CUDA_MPS_PIPE_DIRECTORY,
// else /tmp/nvidia-mps, holds its control pipe).
bool mpsDaemonRunning();

// Builds the backend named by cfg.backend ("auto": CUDA when it starts, else
// sim) over the host's devices `physical` (in the session's order; empty: all).
// `address_window`: the session is that part of a program the pool spread
// over several members (Placement::span_index); its memory goes in the
// part's own address window (server/backend/address_space.h): the sim's
// arena, the CUDA backend's virtual memory reservations (windowed_memory.h).
Result<std::unique_ptr<Backend>> makeBackend(const ServerConfig& cfg, const std::vector<int>& physical = {},
                                             uint32_t address_window = 0);

}  // namespace rgpu::server
