// The CUDA driver API, loaded at run time.
//
// `rgpu-server` is one binary for GPU hosts and CPU-only hosts, so it never
// links libcuda: DriverApi dlopens it (normally "libcuda.so.1"; tests point it
// at a fake), takes `cuGetProcAddress` by dlsym and asks it for every other
// entry point at the ABI version of the headers we compile against (13.0), so
// each pointer has exactly the prototype `cuda.h` declares. Only workers load
// it; the daemon never initialises CUDA (see DESIGN.md: no fork after cuInit).
//
// RGPU_CU(call) converts a CUresult into a Status naming the call, its
// file:line and the driver's own error name, with the cudaError_t code the
// runtime would have returned (cudaErrorFromDriver).
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace rgpu::server::cuda {

// The CUDA 13 runtime's error for a driver error (driver_types.h/cuda.h).
int cudaErrorFromDriver(CUresult r);

class DriverApi {
 public:
  // Loads `library` and resolves every entry point; a clear error when the
  // library is missing or too old.
  static Result<std::unique_ptr<DriverApi>> load(const std::string& library);
  ~DriverApi();
  DriverApi(const DriverApi&) = delete;
  DriverApi& operator=(const DriverApi&) = delete;

  const std::string& library() const { return library_; }
  // "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for a driver error.
  std::string describe(CUresult r) const;
  Status check(CUresult r, const char* call, const char* file, int line) const;

#define RGPU_CU_FN(name) decltype(&::name) name = nullptr;
  RGPU_CU_FN(cuInit)
  RGPU_CU_FN(cuDriverGetVersion)
  RGPU_CU_FN(cuGetErrorName)
  RGPU_CU_FN(cuGetErrorString)
  RGPU_CU_FN(cuDeviceGetCount)
  RGPU_CU_FN(cuDeviceGet)
  RGPU_CU_FN(cuDeviceGetName)
  RGPU_CU_FN(cuDeviceGetUuid)
  RGPU_CU_FN(cuDeviceTotalMem)
  RGPU_CU_FN(cuDeviceGetAttribute)
  RGPU_CU_FN(cuDevicePrimaryCtxRetain)
  RGPU_CU_FN(cuDevicePrimaryCtxRelease)
  RGPU_CU_FN(cuCtxSetCurrent)
  RGPU_CU_FN(cuCtxSetLimit)
  RGPU_CU_FN(cuMemAlloc)
  RGPU_CU_FN(cuMemAllocPitch)
  RGPU_CU_FN(cuMemFree)
  RGPU_CU_FN(cuMemGetInfo)
  RGPU_CU_FN(cuMemHostAlloc)
  RGPU_CU_FN(cuMemFreeHost)
  RGPU_CU_FN(cuMemcpyHtoDAsync)
  RGPU_CU_FN(cuMemcpyDtoHAsync)
  RGPU_CU_FN(cuMemcpyDtoDAsync)
  RGPU_CU_FN(cuMemcpy2DAsync)
  RGPU_CU_FN(cuMemsetD8Async)
  RGPU_CU_FN(cuMemsetD2D8Async)
  RGPU_CU_FN(cuMemsetD2D16Async)
  RGPU_CU_FN(cuMemsetD2D32Async)
  RGPU_CU_FN(cuStreamCreateWithPriority)
  RGPU_CU_FN(cuStreamDestroy)
  RGPU_CU_FN(cuStreamQuery)
  RGPU_CU_FN(cuStreamWaitEvent)
  RGPU_CU_FN(cuEventCreate)
  RGPU_CU_FN(cuEventDestroy)
  RGPU_CU_FN(cuEventRecord)
  RGPU_CU_FN(cuEventQuery)
  RGPU_CU_FN(cuEventSynchronize)
  RGPU_CU_FN(cuEventElapsedTime)
  RGPU_CU_FN(cuLaunchHostFunc)
  RGPU_CU_FN(cuLaunchKernel)
  RGPU_CU_FN(cuLaunchKernelEx)
  RGPU_CU_FN(cuModuleLoadData)
  RGPU_CU_FN(cuModuleUnload)
  RGPU_CU_FN(cuModuleGetFunction)
  RGPU_CU_FN(cuModuleGetGlobal)
  RGPU_CU_FN(cuFuncGetAttribute)
  RGPU_CU_FN(cuFuncSetAttribute)
  RGPU_CU_FN(cuOccupancyMaxActiveBlocksPerMultiprocessor)
  // Optional (CUDA 12.4+ drivers): null when the driver lacks it.
  RGPU_CU_FN(cuFuncGetParamInfo)
  // Optional: native graphs (a graph's nodes captured on a stream of the
  // worker's, instantiated and launched whole); without all of them graphs
  // run node by node.
  RGPU_CU_FN(cuStreamBeginCapture)
  RGPU_CU_FN(cuStreamEndCapture)
  RGPU_CU_FN(cuGraphInstantiateWithFlags)
  RGPU_CU_FN(cuGraphLaunch)
  RGPU_CU_FN(cuGraphExecDestroy)
  RGPU_CU_FN(cuGraphDestroy)
  // Optional: event record nodes in native graphs (without it such graphs run node by node).
  RGPU_CU_FN(cuEventRecordWithFlags)
  // Optional: CUDA arrays, texture and surface objects (without them those calls are refused as unsupported).
  RGPU_CU_FN(cuArray3DCreate)
  RGPU_CU_FN(cuArrayDestroy)
  RGPU_CU_FN(cuMipmappedArrayCreate)
  RGPU_CU_FN(cuMipmappedArrayGetLevel)
  RGPU_CU_FN(cuMipmappedArrayDestroy)
  RGPU_CU_FN(cuMemcpy3DAsync)
  RGPU_CU_FN(cuTexObjectCreate)
  RGPU_CU_FN(cuTexObjectDestroy)
  RGPU_CU_FN(cuSurfObjectCreate)
  RGPU_CU_FN(cuSurfObjectDestroy)
  // Optional: __managed__ variables (the driver packs a module's into one
  // managed allocation; the client pages that allocation as a whole).
  RGPU_CU_FN(cuPointerGetAttribute)
  RGPU_CU_FN(cuMemGetAddressRange)
  // Optional: virtual memory management, which places a span part's memory
  // in its address window (windowed_memory.h); without them a part's memory
  // is where cuMemAlloc puts it.
  RGPU_CU_FN(cuMemAddressReserve)
  RGPU_CU_FN(cuMemAddressFree)
  RGPU_CU_FN(cuMemCreate)
  RGPU_CU_FN(cuMemRelease)
  RGPU_CU_FN(cuMemMap)
  RGPU_CU_FN(cuMemUnmap)
  RGPU_CU_FN(cuMemSetAccess)
  RGPU_CU_FN(cuMemGetAllocationGranularity)
  RGPU_CU_FN(cuDeviceCanAccessPeer)
#undef RGPU_CU_FN

 private:
  DriverApi() = default;
  void* handle_ = nullptr;
  std::string library_;
};

}  // namespace rgpu::server::cuda

// Converts a driver call's result into a Status (needs `api` in scope: a DriverApi&).
#define RGPU_CU(call) (api.check((api.call), #call, __FILE__, __LINE__))
