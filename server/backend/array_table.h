// A session's CUDA arrays, texture objects and surface objects: the
// authority every handle and range a client names is checked against
// before a backend sees it (as AllocationTable is for device pointers).
//
// Handles are the backend's; each session has its own table, in its own
// worker, so a handle of another session is simply not here. A texture or
// surface object is named by its device and its value: a driver may give
// two devices' contexts the same values (kernels take the value, each on its
// own device), so the value alone does not name one. An array's
// levels have the shape every backend gives them (arrayLevels): a copy is
// refused unless it lies inside one level, whole elements wide. Textures
// and surfaces name the array they read; destroying the array first is
// allowed (as on NVIDIA's runtime), and a kernel that then uses the object
// faults instead of reading memory the session gave back.
//
// Named limits: kMaxArrays, kMaxTextureObjects, kMaxSurfaceObjects per
// session; array extents by the device's cudaDevAttrMaxTexture*/Surface*
// attributes. Not thread-safe: owned by the session's dispatch thread.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/array_shape.h"
#include "common/status.h"
#include "server/backend/allocation_table.h"
#include "server/backend/backend.h"

namespace rgpu::server {

inline constexpr size_t kMaxArrays = 65536;
inline constexpr size_t kMaxTextureObjects = 65536;
inline constexpr size_t kMaxSurfaceObjects = 65536;

using common::ArrayLevelDims;

// A cudaChannelFormatDesc as an ArrayFormat, or cudaErrorInvalidChannelDescriptor.
Result<ArrayFormat> checkFormat(int x, int y, int z, int w, int kind);
// An ArrayFormat from elsewhere (a checkpoint): ok when it is one checkFormat makes.
Status checkFormat(const ArrayFormat& f);
// The levels of an array (one for a plain array).
std::vector<ArrayLevelDims> arrayLevels(const ArraySpec& spec);
// The bytes its levels hold, packed (level after level, slice after slice, row after row).
uint64_t packedBytes(const ArraySpec& spec);
// Checks an array's shape, flags and extents against the device's
// attributes (by cudaDeviceAttr); the bytes its levels hold, packed.
// `spec.format` is checkFormat's answer.
Result<uint64_t> checkArray(const ArraySpec& spec, const std::vector<int32_t>& attributes);

class ArrayTable {
 public:
  struct Array {
    ArraySpec spec;
    std::vector<ArrayLevelDims> levels;
    uint64_t bytes = 0;  // charged to the user's quota
  };
  struct Object {  // a texture or surface object
    int device = 0;
    TextureSpec texture;   // a texture: how it was made (a checkpoint makes it again)
    uint64_t array = 0;    // a surface: its array and level
    uint32_t level = 0;
  };

  Status addArray(uint64_t handle, Array a);
  Result<Array> removeArray(uint64_t handle);
  const Array* array(uint64_t handle) const;
  enum Kind { kTexture, kSurface };
  using ObjectKey = std::pair<uint64_t, int>;  // value, device: ascending values first
  // Refused past the kind's limit, or where o.device already has this value.
  Status addObject(Kind kind, uint64_t handle, Object o);
  Result<Object> removeObject(Kind kind, int device, uint64_t handle);

  // cudaDeviceReset: everything of `device` leaves the table.
  struct Dropped {
    std::vector<std::pair<uint64_t, uint64_t>> arrays;  // handle, bytes
    std::vector<uint64_t> textures, surfaces;  // the device's
  };
  Dropped dropDevice(int device);
  // No array, texture or surface object.
  bool empty() const { return arrays_.empty() && objects_[0].empty() && objects_[1].empty(); }
  // Everything, for a checkpoint.
  const std::unordered_map<uint64_t, Array>& arrays() const { return arrays_; }
  const std::map<ObjectKey, Object>& objects(Kind kind) const { return objects_[kind]; }

  // Checks one side of a copy of width x height x depth (bytes, rows,
  // slices) against the array it names or the allocations; reports its
  // device (host sides: -1).
  Status checkSide(const CopySide& side, uint64_t width, uint64_t height, uint64_t depth,
                   const AllocationTable& allocs, int* device) const;

 private:
  std::unordered_map<uint64_t, Array> arrays_;
  std::map<ObjectKey, Object> objects_[2];  // by Kind
};

}  // namespace rgpu::server
