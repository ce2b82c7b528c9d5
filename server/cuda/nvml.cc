#include "server/cuda/nvml.h"

#include <dlfcn.h>

#include <cstdio>

namespace rgpu::server::cuda {
namespace {
// From nvml.h (stable ABI since NVML 5).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr unsigned kNameLen = 96, kUuidLen = 96;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;

  std::string describe(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return s ? s : "NVML error " + std::to_string(r);
  }
};

Result<std::unique_ptr<Nvml>> Nvml::load(const std::string& library) {
  std::unique_ptr<Nvml> n(new Nvml());
  n->handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!n->handle_) {
    const char* why = ::dlerror();
    return Status(err::kInsufficientDriver, "cannot load NVML " + library + ": " + (why ? why : "dlopen failed"));
  }
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  std::string missing;
  auto get = [&](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(::dlsym(n->handle_, name));
    if (!slot) missing += missing.empty() ? name : std::string(", ") + name;
  };
  get(a.init, "nvmlInit_v2");
  get(a.shutdown, "nvmlShutdown");
  get(a.error_string, "nvmlErrorString");
  get(a.count, "nvmlDeviceGetCount_v2");
  get(a.handle, "nvmlDeviceGetHandleByIndex_v2");
  get(a.name, "nvmlDeviceGetName");
  get(a.uuid, "nvmlDeviceGetUUID");
  get(a.memory, "nvmlDeviceGetMemoryInfo");
  get(a.utilization, "nvmlDeviceGetUtilizationRates");
  get(a.temperature, "nvmlDeviceGetTemperature");
  get(a.power, "nvmlDeviceGetPowerUsage");
  if (!missing.empty()) return Status(err::kInsufficientDriver, library + " lacks " + missing);
  if (nvmlReturn_t r = a.init(); r != NVML_SUCCESS)
    return Status(err::kInsufficientDriver, "nvmlInit: " + a.describe(r));
  return n;
}

Nvml::~Nvml() {
  if (api_ && api_->shutdown) api_->shutdown();
}

Result<std::vector<GpuHealth>> Nvml::sample() const {
  const Api& a = *api_;
  unsigned count = 0;
  if (nvmlReturn_t r = a.count(&count); r != NVML_SUCCESS)
    return Status(err::kUnknown, "nvmlDeviceGetCount: " + a.describe(r));
  std::vector<GpuHealth> out;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t d = nullptr;
    if (nvmlReturn_t r = a.handle(i, &d); r != NVML_SUCCESS)
      return Status(err::kUnknown, "nvmlDeviceGetHandleByIndex(" + std::to_string(i) + "): " + a.describe(r));
    GpuHealth g;
    g.index = i;
    char buf[kNameLen > kUuidLen ? kNameLen : kUuidLen] = {};
    if (a.name(d, buf, kNameLen) == NVML_SUCCESS) g.name = buf;
    buf[0] = 0;
    if (a.uuid(d, buf, kUuidLen) == NVML_SUCCESS) g.uuid = buf;
    nvmlMemory_t m{};
    if (a.memory(d, &m) == NVML_SUCCESS) {
      g.memory_total = m.total;
      g.memory_used = m.used;
    }
    nvmlUtilization_t u{};
    if (a.utilization(d, &u) == NVML_SUCCESS) {
      g.utilization_gpu = static_cast<int>(u.gpu);
      g.utilization_memory = static_cast<int>(u.memory);
    }
    unsigned v = 0;
    if (a.temperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS) g.temperature_c = static_cast<int>(v);
    if (a.power(d, &v) == NVML_SUCCESS) g.power_mw = static_cast<int>(v);
    out.push_back(std::move(g));
  }
  return out;
}

std::string formatGpus(const std::vector<GpuHealth>& gpus) {
  std::string out;
  char line[512];
  for (auto& g : gpus) {
    auto known = [](int v, const char* fmt, double scale) {
      char b[32];
      if (v < 0) return std::string("n/a");
      std::snprintf(b, sizeof b, fmt, v / scale);
      return std::string(b);
    };
    std::snprintf(line, sizeof line, "%u  %s  %s  %llu / %llu MiB  util %s  %s  %s\n", g.index, g.name.c_str(),
                  g.uuid.c_str(), static_cast<unsigned long long>(g.memory_used >> 20),
                  static_cast<unsigned long long>(g.memory_total >> 20),
                  known(g.utilization_gpu, "%.0f %%", 1).c_str(), known(g.temperature_c, "%.0f C", 1).c_str(),
                  known(g.power_mw, "%.1f W", 1000).c_str());
    out += line;
  }
  return out;
}

}  // namespace rgpu::server::cuda
