// A fake NVML (libnvidia-ml.so.1) for tests: two GPUs with fixed readings;
// the second cannot report power (as some boards cannot).
#include <cstdio>
#include <cstring>

extern "C" {
struct nvmlDevice_st {
  unsigned index;
};
static nvmlDevice_st g_devices[2] = {{0}, {1}};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
#define API __attribute__((visibility("default")))
API int nvmlInit_v2() { return 0; }
API int nvmlShutdown() { return 0; }
API const char* nvmlErrorString(int r) { return r == 3 ? "Not Supported" : "Unknown Error"; }
API int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 2;
  return 0;
}
API int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_st** d) {
  if (i >= 2) return 2;
  *d = &g_devices[i];
  return 0;
}
API int nvmlDeviceGetName(nvmlDevice_st* d, char* s, unsigned n) {
  std::snprintf(s, n, "Fake H200 %u", d->index);
  return 0;
}
API int nvmlDeviceGetUUID(nvmlDevice_st* d, char* s, unsigned n) {
  std::snprintf(s, n, "GPU-fa4e0000-0000-0000-0000-00000000000%u", d->index);
  return 0;
}
API int nvmlDeviceGetMemoryInfo(nvmlDevice_st* d, nvmlMemory_t* m) {
  m->total = 150754820096ull;
  m->used = (d->index + 1) * 1048576ull * 512;
  m->free = m->total - m->used;
  return 0;
}
API int nvmlDeviceGetUtilizationRates(nvmlDevice_st* d, nvmlUtilization_t* u) {
  u->gpu = 40 + d->index;
  u->memory = 10;
  return 0;
}
API int nvmlDeviceGetTemperature(nvmlDevice_st* d, int sensor, unsigned* t) {
  *t = 31 + d->index;
  return sensor == 0 ? 0 : 1;
}
API int nvmlDeviceGetPowerUsage(nvmlDevice_st* d, unsigned* mw) {
  if (d->index == 1) return 3;  // NVML_ERROR_NOT_SUPPORTED
  *mw = 75250;
  return 0;
}
}
