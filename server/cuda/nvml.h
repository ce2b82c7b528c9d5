// GPU inventory and health through NVML, loaded at run time.
//
// NVML (libnvidia-ml.so.1, part of the NVIDIA driver) answers name, UUID,
// memory, utilisation, temperature and power without creating a CUDA context,
// so the daemon may use it (it never initialises CUDA). Declarations are our
// own: the NVML header is not part of the CUDA toolkit on every host.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::server::cuda {

struct GpuHealth {
  unsigned index = 0;
  std::string name;
  std::string uuid;             // "GPU-xxxxxxxx-..."
  uint64_t memory_total = 0;    // bytes
  uint64_t memory_used = 0;     // bytes
  int utilization_gpu = -1;     // percent; -1 when NVML cannot tell
  int utilization_memory = -1;  // percent
  int temperature_c = -1;
  int power_mw = -1;
};

class Nvml {
 public:
  // Loads `library` and initialises NVML; a clear error when it is missing.
  static Result<std::unique_ptr<Nvml>> load(const std::string& library);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Every GPU's current state. Values NVML cannot give stay -1.
  Result<std::vector<GpuHealth>> sample() const;

 private:
  struct Api;
  Nvml() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
};

// "0  NVIDIA H200  GPU-...  1024 / 143771 MiB  3 %  31 C  75.2 W" lines, for logs and --list-gpus.
std::string formatGpus(const std::vector<GpuHealth>& gpus);

}  // namespace rgpu::server::cuda
