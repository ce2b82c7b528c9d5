// CUDA arrays in the client: what a cudaArray_t / cudaMipmappedArray_t
// points to, and the one copy every array and 3D copy entry point uses.
//
// An array lives on the server (named there by a handle); the client keeps
// its shape, so cudaArrayGetInfo and the element arithmetic of copies need no
// round trip. A handle a program passes in is looked up in the registry
// before it is dereferenced: a stale or made-up cudaArray_t is refused with
// cudaErrorInvalidResourceHandle, never followed. A level of a mipmapped
// array (cudaGetMipmappedArrayLevel) is an ArrayObject of its own, owned by
// the mipmapped array and freed with it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::client {

struct ArrayObject {
  uint64_t handle = 0;  // the server's (a level: its mipmapped array's)
  uint32_t level = 0;
  int device = 0;
  cudaChannelFormatDesc desc{};
  cudaExtent extent{};  // as cudaArrayGetInfo reports it (a level: that level's)
  unsigned flags = 0;
  uint32_t elem = 0;    // bytes per element
  uint64_t width = 1, rows = 1, slices = 1;  // elements, rows, slices (3D depth, layers, faces)
  bool level_of_mipmapped = false;
};

// A side of a copy as the program named it: an array, or memory at `ptr`
// with `pitch` bytes between rows and `rows` rows between slices; host or
// device as the pointer says. x in bytes.
struct CopyEnd {
  const ArrayObject* array = nullptr;
  void* ptr = nullptr;
  size_t pitch = 0, rows = 0;
  size_t x = 0, y = 0, z = 0;
};

// The array a program's handle names, or cudaErrorInvalidResourceHandle.
Result<ArrayObject*> arrayOf(const void* handle);
// Level `level` of a mipmapped array (cudaGetMipmappedArrayLevel's answer).
Result<ArrayObject*> mipmappedLevel(const void* mipmapped, uint32_t level);
// cudaDeviceReset: the device's arrays, texture and surface objects are gone
// (the server dropped them); their handles are refused from now on.
void forgetDeviceArrays(int device);
void forgetDeviceObjects(int device);
// Copies width (bytes) x height x depth between two ends, as cudaMemcpy3D.
// On a capturing stream (async forms) it becomes a copy node.
Status copy3D(const CopyEnd& src, const CopyEnd& dst, size_t width, size_t height, size_t depth, cudaMemcpyKind kind,
              cudaStream_t stream, bool async, bool ptsz);
// The ends and the width in bytes a cudaMemcpy3DParms names (its arrays
// looked up: a made-up handle is cudaErrorInvalidResourceHandle). With an
// array on either side the extent and the array's position count elements.
Status copyEnds(const cudaMemcpy3DParms& p, CopyEnd* src, CopyEnd* dst, size_t* width);
// Its inverse: the cudaMemcpy3DParms of a copy between two ends (a graph node's parameters).
Result<cudaMemcpy3DParms> copyParams(const CopyEnd& src, const CopyEnd& dst, size_t width, size_t height, size_t depth,
                                     cudaMemcpyKind kind);
// A copy3D request between two ends (`*dev`: the end is device memory, or an array).
void fillCopy3D(wire::Copy3D::Builder m, const CopyEnd& src, bool src_dev, const CopyEnd& dst, bool dst_dev,
                size_t width, size_t height, size_t depth);

}  // namespace rgpu::client
