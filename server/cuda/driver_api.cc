#include "server/cuda/driver_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "common/log.h"

namespace rgpu::server::cuda {
namespace {

// CUresult values whose cudaError_t has the same number and meaning
// (CUDA 13 cuda.h against driver_types.h; the two enums were aligned in CUDA 10).
constexpr std::array<int, 99> kSameInRuntime = {
    0,   1,   2,   3,   4,   5,   6,   7,   8,   34,  36,  46,  100, 101, 102, 200, 201, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 300,
    301, 302, 303, 304, 400, 401, 402, 500, 600, 700, 701, 702, 703, 704, 705, 708, 709, 710, 711, 712,
    713, 714, 715, 716, 717, 718, 719, 720, 721, 800, 801, 802, 803, 804, 805, 806, 807, 808, 809, 810,
    811, 812, 900, 901, 902, 903, 904, 905, 906, 907, 908, 909, 910, 911, 912, 913, 914, 915, 999};

// The CUDA version whose entry points we ask for: the headers we compile against.
constexpr int kAbiVersion = CUDA_VERSION;

}  // namespace

int cudaErrorFromDriver(CUresult r) {
  int v = static_cast<int>(r);
  if (std::binary_search(kSameInRuntime.begin(), kSameInRuntime.end(), v)) return v;
  if (r == CUDA_ERROR_CONTEXT_ALREADY_CURRENT) return err::kInvalidValue;
  return err::kUnknown;
}

Result<std::unique_ptr<DriverApi>> DriverApi::load(const std::string& library) {
  std::unique_ptr<DriverApi> api(new DriverApi());
  api->library_ = library;
  api->handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->handle_) {
    const char* why = ::dlerror();
    return Status(err::kInsufficientDriver, "cannot load the CUDA driver " + library + ": " + (why ? why : "dlopen failed") +
                                                " (is the NVIDIA driver installed on this host?)");
  }
  using GetProc = decltype(&::cuGetProcAddress);  // cuGetProcAddress_v2 in CUDA 13 headers
  auto get_proc = reinterpret_cast<GetProc>(::dlsym(api->handle_, "cuGetProcAddress_v2"));
  if (!get_proc)
    return Status(err::kInsufficientDriver,
                  library + " has no cuGetProcAddress_v2: the driver is older than CUDA 12.0; rgpu needs a CUDA 13 driver");
  std::string missing;
  auto resolve = [&](const char* name, void** slot, bool required) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = get_proc(name, slot, kAbiVersion, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
      *slot = nullptr;
      if (required) missing += missing.empty() ? name : std::string(", ") + name;
    }
  };
#define RGPU_RESOLVE(name) resolve(#name, reinterpret_cast<void**>(&api->name), true);
  RGPU_RESOLVE(cuInit)
  RGPU_RESOLVE(cuDriverGetVersion)
  RGPU_RESOLVE(cuGetErrorName)
  RGPU_RESOLVE(cuGetErrorString)
  RGPU_RESOLVE(cuDeviceGetCount)
  RGPU_RESOLVE(cuDeviceGet)
  RGPU_RESOLVE(cuDeviceGetName)
  RGPU_RESOLVE(cuDeviceGetUuid)
  RGPU_RESOLVE(cuDeviceTotalMem)
  RGPU_RESOLVE(cuDeviceGetAttribute)
  RGPU_RESOLVE(cuDevicePrimaryCtxRetain)
  RGPU_RESOLVE(cuDevicePrimaryCtxRelease)
  RGPU_RESOLVE(cuCtxSetCurrent)
  RGPU_RESOLVE(cuCtxSetLimit)
  RGPU_RESOLVE(cuMemAlloc)
  RGPU_RESOLVE(cuMemAllocPitch)
  RGPU_RESOLVE(cuMemFree)
  RGPU_RESOLVE(cuMemGetInfo)
  RGPU_RESOLVE(cuMemHostAlloc)
  RGPU_RESOLVE(cuMemFreeHost)
  RGPU_RESOLVE(cuMemcpyHtoDAsync)
  RGPU_RESOLVE(cuMemcpyDtoHAsync)
  RGPU_RESOLVE(cuMemcpyDtoDAsync)
  RGPU_RESOLVE(cuMemcpy2DAsync)
  RGPU_RESOLVE(cuMemsetD8Async)
  RGPU_RESOLVE(cuMemsetD2D8Async)
  RGPU_RESOLVE(cuMemsetD2D16Async)
  RGPU_RESOLVE(cuMemsetD2D32Async)
  RGPU_RESOLVE(cuStreamCreateWithPriority)
  RGPU_RESOLVE(cuStreamDestroy)
  RGPU_RESOLVE(cuStreamQuery)
  RGPU_RESOLVE(cuStreamWaitEvent)
  RGPU_RESOLVE(cuEventCreate)
  RGPU_RESOLVE(cuEventDestroy)
  RGPU_RESOLVE(cuEventRecord)
  RGPU_RESOLVE(cuEventQuery)
  RGPU_RESOLVE(cuEventSynchronize)
  RGPU_RESOLVE(cuEventElapsedTime)
  RGPU_RESOLVE(cuLaunchHostFunc)
  RGPU_RESOLVE(cuLaunchKernel)
  RGPU_RESOLVE(cuLaunchKernelEx)
  RGPU_RESOLVE(cuModuleLoadData)
  RGPU_RESOLVE(cuModuleUnload)
  RGPU_RESOLVE(cuModuleGetFunction)
  RGPU_RESOLVE(cuModuleGetGlobal)
  RGPU_RESOLVE(cuFuncGetAttribute)
  RGPU_RESOLVE(cuFuncSetAttribute)
  RGPU_RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor)
#undef RGPU_RESOLVE
  resolve("cuFuncGetParamInfo", reinterpret_cast<void**>(&api->cuFuncGetParamInfo), false);
#define RGPU_OPTIONAL(name) resolve(#name, reinterpret_cast<void**>(&api->name), false);
  RGPU_OPTIONAL(cuStreamBeginCapture)
  RGPU_OPTIONAL(cuStreamEndCapture)
  RGPU_OPTIONAL(cuGraphInstantiateWithFlags)
  RGPU_OPTIONAL(cuGraphLaunch)
  RGPU_OPTIONAL(cuGraphExecDestroy)
  RGPU_OPTIONAL(cuGraphDestroy)
  RGPU_OPTIONAL(cuEventRecordWithFlags)
  RGPU_OPTIONAL(cuArray3DCreate)
  RGPU_OPTIONAL(cuArrayDestroy)
  RGPU_OPTIONAL(cuMipmappedArrayCreate)
  RGPU_OPTIONAL(cuMipmappedArrayGetLevel)
  RGPU_OPTIONAL(cuMipmappedArrayDestroy)
  RGPU_OPTIONAL(cuMemcpy3DAsync)
  RGPU_OPTIONAL(cuTexObjectCreate)
  RGPU_OPTIONAL(cuTexObjectDestroy)
  RGPU_OPTIONAL(cuSurfObjectCreate)
  RGPU_OPTIONAL(cuSurfObjectDestroy)
  RGPU_OPTIONAL(cuPointerGetAttribute)
  RGPU_OPTIONAL(cuMemGetAddressRange)
  RGPU_OPTIONAL(cuMemAddressReserve)
  RGPU_OPTIONAL(cuMemAddressFree)
  RGPU_OPTIONAL(cuMemCreate)
  RGPU_OPTIONAL(cuMemRelease)
  RGPU_OPTIONAL(cuMemMap)
  RGPU_OPTIONAL(cuMemUnmap)
  RGPU_OPTIONAL(cuMemSetAccess)
  RGPU_OPTIONAL(cuMemGetAllocationGranularity)
  RGPU_OPTIONAL(cuDeviceCanAccessPeer)
#undef RGPU_OPTIONAL
  if (!missing.empty())
    return Status(err::kInsufficientDriver, library + " lacks driver entry points rgpu needs (" + missing +
                                                "): update the NVIDIA driver to one that supports CUDA 13");
  return api;
}

DriverApi::~DriverApi() {
  // The driver is never unloaded: its own threads may still be winding down.
}

std::string DriverApi::describe(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) (void)cuGetErrorName(r, &name);
  if (cuGetErrorString) (void)cuGetErrorString(r, &text);
  std::string out = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text) out += std::string(" (") + text + ")";
  return out;
}

Status DriverApi::check(CUresult r, const char* call, const char* file, int line) const {
  if (r == CUDA_SUCCESS) return Status::ok();
  const char* base = std::strrchr(file, '/');
  std::string where = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  std::string fn(call, std::strcspn(call, "("));
  return Status(cudaErrorFromDriver(r), fn + ": " + describe(r) + " [" + where + "]");
}

}  // namespace rgpu::server::cuda
