#include "server/backend/array_table.h"

#include <driver_types.h>

#include <algorithm>

namespace rgpu::server {

namespace {

Status invalid(const std::string& what) { return Status(err::kInvalidValue, what); }

int attr(const std::vector<int32_t>& a, int i) { return i >= 0 && static_cast<size_t>(i) < a.size() ? a[static_cast<size_t>(i)] : 0; }

}  // namespace

Result<ArrayFormat> checkFormat(int x, int y, int z, int w, int kind) {
  auto bad = [&](const std::string& why) {
    return Status(err::kInvalidChannelDescriptor, "channel format {" + std::to_string(x) + ", " + std::to_string(y) +
                                                      ", " + std::to_string(z) + ", " + std::to_string(w) + ", kind " +
                                                      std::to_string(kind) + "}: " + why);
  };
  // The normalised kinds (5..16): unsigned 8X1, 8X2, 8X4, 16X1, 16X2, 16X4, then
  // the signed ones; the descriptor is the one cudaCreateChannelDesc<kind>() makes.
  if (kind >= 5 && kind <= 16) {
    const int i = kind - 5, bits = i % 6 < 3 ? 8 : 16, channels = (i % 3 == 2) ? 4 : i % 3 + 1;
    const int want[4] = {bits, channels > 1 ? bits : 0, channels > 2 ? bits : 0, channels > 2 ? bits : 0};
    if (x != want[0] || y != want[1] || z != want[2] || w != want[3])
      return bad("a normalised kind takes the descriptor cudaCreateChannelDesc<kind>() makes");
    return ArrayFormat{i < 6 ? 1 : 0, channels, bits, true};
  }
  // cudaChannelFormatKindNone (3) is no format; 4 (NV12), 17..30 (block-compressed) and 31 (10-10-10-2) are not built.
  if (kind == 4 || (kind >= 17 && kind <= 31))
    return Status(err::kNotSupported, "channel format kind " + std::to_string(kind) +
                                          " (NV12, block-compressed or 10-10-10-2) is not supported by rgpu");
  if (kind < 0 || kind > 2) return bad("only signed, unsigned and float channels are supported");
  if (x != 8 && x != 16 && x != 32) return bad("channels are 8, 16 or 32 bits");
  if (kind == 2 && x == 8) return bad("float channels are 16 or 32 bits");
  const int bits[4] = {x, y, z, w};
  int channels = 1;
  while (channels < 4 && bits[channels] != 0) {
    if (bits[channels] != x) return bad("every channel has the first one's width");
    ++channels;
  }
  for (int c = channels; c < 4; ++c)
    if (bits[c] != 0) return bad("channels follow each other");
  if (channels == 3) return bad("three-channel formats are not supported by CUDA arrays");
  return ArrayFormat{kind, channels, x};
}

Status checkFormat(const ArrayFormat& f) {
  // The descriptor that makes it: bits per channel, and for a normalised
  // format its kind (5 + 6 for signed, + 3 for 16 bits, + the channel index).
  const int b = f.bits, y = f.channels > 1 ? b : 0, zw = f.channels > 2 ? b : 0;
  const int kind = !f.normalized ? f.kind
                                 : 5 + (f.kind == 1 ? 0 : 6) + (b == 16 ? 3 : 0) + (f.channels == 4 ? 2 : f.channels - 1);
  auto made = checkFormat(b, y, zw, zw, kind);
  if (!made) return made.status();
  if (made->kind != f.kind || made->channels != f.channels || made->bits != f.bits || made->normalized != f.normalized)
    return invalid("no channel format describes kind " + std::to_string(f.kind) + ", " + std::to_string(f.channels) +
                   " channel(s) of " + std::to_string(b) + " bits" + (f.normalized ? ", normalised" : ""));
  return Status::ok();
}

std::vector<ArrayLevelDims> arrayLevels(const ArraySpec& s) {
  const bool layered = s.flags & (kArrayLayered | kArrayCubemap);
  std::vector<ArrayLevelDims> out;
  for (uint32_t l = 0; l < std::max<uint32_t>(s.levels, 1); ++l)
    out.push_back(common::arrayLevel(s.width, s.height, s.depth, layered, l));
  return out;
}

Result<uint64_t> checkArray(const ArraySpec& s, const std::vector<int32_t>& a) {
  constexpr uint32_t kSparse = 0x40, kDeferred = 0x80, kColorAttachment = 0x20;
  if (s.flags & (kSparse | kDeferred))
    return Status(err::kNotSupported, "sparse and deferred-mapping arrays are not supported");
  if (s.flags & ~(kArrayLayered | kArraySurfaceLoadStore | kArrayCubemap | kArrayTextureGather | kColorAttachment))
    return invalid("unknown array flags " + std::to_string(s.flags));
  const std::string shape =
      "array of " + std::to_string(s.width) + " x " + std::to_string(s.height) + " x " + std::to_string(s.depth);
  if (s.width == 0) return invalid(shape + ": its width is 0");
  auto within = [&](uint64_t v, int limit_attr) { return v <= static_cast<uint64_t>(std::max(attr(a, limit_attr), 0)); };
  bool fits;
  const bool layered = s.flags & kArrayLayered, cube = s.flags & kArrayCubemap;
  if (cube) {
    if (s.width != s.height || s.depth == 0 || s.depth % 6 || (!layered && s.depth != 6))
      return invalid(shape + ": a cubemap has square faces and a depth of 6 (6 x cubes when layered)");
    fits = layered ? within(s.width, cudaDevAttrMaxTextureCubemapLayeredWidth) &&
                         within(s.depth, cudaDevAttrMaxTextureCubemapLayeredLayers)
                   : within(s.width, cudaDevAttrMaxTextureCubemapWidth);
  } else if (layered) {
    if (s.depth == 0) return invalid(shape + ": a layered array has at least one layer (its depth)");
    fits = s.height == 0 ? within(s.width, cudaDevAttrMaxTexture1DLayeredWidth) &&
                               within(s.depth, cudaDevAttrMaxTexture1DLayeredLayers)
                         : within(s.width, cudaDevAttrMaxTexture2DLayeredWidth) &&
                               within(s.height, cudaDevAttrMaxTexture2DLayeredHeight) &&
                               within(s.depth, cudaDevAttrMaxTexture2DLayeredLayers);
  } else if (s.depth) {
    if (s.height == 0) return invalid(shape + ": a 3D array has a height");
    fits = within(s.width, cudaDevAttrMaxTexture3DWidth) && within(s.height, cudaDevAttrMaxTexture3DHeight) &&
           within(s.depth, cudaDevAttrMaxTexture3DDepth);
  } else if (s.height) {
    fits = within(s.width, cudaDevAttrMaxTexture2DWidth) && within(s.height, cudaDevAttrMaxTexture2DHeight);
  } else {
    fits = within(s.width, cudaDevAttrMaxTexture1DWidth);
  }
  if (!fits) return invalid(shape + " is larger than the device's texture limits");
  if (s.levels) {
    uint64_t largest = std::max({s.width, s.height, layered || cube ? 0 : s.depth});
    uint32_t most = 1;
    while (largest >> most) ++most;
    if (s.levels > most)
      return invalid(shape + ": " + std::to_string(s.levels) + " mipmap levels, at most " + std::to_string(most));
  }
  return packedBytes(s);
}

uint64_t packedBytes(const ArraySpec& spec) {
  uint64_t bytes = 0;
  for (const auto& l : arrayLevels(spec)) bytes += l.width * l.height * l.slices * spec.format.bytes();
  return bytes;
}

Status ArrayTable::addArray(uint64_t handle, Array a) {
  if (arrays_.size() >= kMaxArrays)
    return Status(err::kMemoryAllocation, "the session holds " + std::to_string(kMaxArrays) + " arrays, its limit");
  arrays_[handle] = std::move(a);
  return Status::ok();
}

Result<ArrayTable::Array> ArrayTable::removeArray(uint64_t handle) {
  auto it = arrays_.find(handle);
  if (it == arrays_.end()) return invalid("array " + std::to_string(handle) + " is not one of this session's");
  Array a = std::move(it->second);
  arrays_.erase(it);
  return a;
}

const ArrayTable::Array* ArrayTable::array(uint64_t handle) const {
  auto it = arrays_.find(handle);
  return it == arrays_.end() ? nullptr : &it->second;
}

namespace {
const char* objectName(ArrayTable::Kind k) { return k == ArrayTable::kTexture ? "texture object" : "surface object"; }
}  // namespace

Status ArrayTable::addObject(Kind kind, uint64_t handle, Object o) {
  const size_t limit = kind == kTexture ? kMaxTextureObjects : kMaxSurfaceObjects;
  if (objects_[kind].size() >= limit)
    return Status(err::kMemoryAllocation, "the session holds " + std::to_string(limit) + " " + objectName(kind) +
                                              "s, its limit");
  if (!objects_[kind].emplace(ObjectKey{handle, o.device}, o).second)
    return invalid(std::string(objectName(kind)) + " " + std::to_string(handle) + " of device " +
                   std::to_string(o.device) + " is already one of this session's");
  return Status::ok();
}

Result<ArrayTable::Object> ArrayTable::removeObject(Kind kind, int device, uint64_t handle) {
  auto it = objects_[kind].find({handle, device});
  if (it == objects_[kind].end())
    return invalid(std::string(objectName(kind)) + " " + std::to_string(handle) + " of device " +
                   std::to_string(device) + " is not one of this session's");
  Object o = it->second;
  objects_[kind].erase(it);
  return o;
}

ArrayTable::Dropped ArrayTable::dropDevice(int device) {
  Dropped d;
  for (auto it = arrays_.begin(); it != arrays_.end();) {
    if (it->second.spec.device != device) {
      ++it;
      continue;
    }
    d.arrays.emplace_back(it->first, it->second.bytes);
    it = arrays_.erase(it);
  }
  for (Kind k : {kTexture, kSurface})
    for (auto it = objects_[k].begin(); it != objects_[k].end();) {
      if (it->second.device != device) {
        ++it;
        continue;
      }
      (k == kTexture ? d.textures : d.surfaces).push_back(it->first.first);
      it = objects_[k].erase(it);
    }
  return d;
}

Status ArrayTable::checkSide(const CopySide& s, uint64_t width, uint64_t height, uint64_t depth,
                             const AllocationTable& allocs, int* device) const {
  *device = -1;
  const std::string region = std::to_string(width) + " bytes x " + std::to_string(height) + " x " +
                             std::to_string(depth) + " at (" + std::to_string(s.x) + ", " + std::to_string(s.y) +
                             ", " + std::to_string(s.z) + ")";
  if (s.kind == CopySide::kHost) return Status::ok();
  if (s.kind == CopySide::kArray) {
    const Array* a = array(s.ptr);
    if (!a) return invalid("array " + std::to_string(s.ptr) + " is not one of this session's");
    if (s.level >= a->levels.size())
      return invalid("array " + std::to_string(s.ptr) + " has no level " + std::to_string(s.level));
    const ArrayLevelDims& l = a->levels[s.level];
    const uint64_t e = a->spec.format.bytes();
    if (s.x % e || width % e) return invalid(region + ": not whole elements of " + std::to_string(e) + " bytes");
    if (s.x > l.width * e || width > l.width * e - s.x || s.y > l.height || height > l.height - s.y ||
        s.z > l.slices || depth > l.slices - s.z)
      return invalid(region + " lies outside the array's " + std::to_string(l.width) + " x " + std::to_string(l.height) +
                     " x " + std::to_string(l.slices) + " elements");
    *device = a->spec.device;
    return Status::ok();
  }
  // Pitched device memory: the first and last byte it touches lie in one allocation.
  if ((height > 1 || depth > 1) && (s.pitch == 0 || s.x > s.pitch || width > s.pitch - s.x))
    return invalid(region + ": the pitch " + std::to_string(s.pitch) + " is narrower than a row");
  if (depth > 1 && (s.rows == 0 || s.y > s.rows || height > s.rows - s.y))
    return invalid(region + ": " + std::to_string(s.rows) + " rows per slice are too few");
  using U = unsigned __int128;
  const U first = (static_cast<U>(s.z) * s.rows + s.y) * s.pitch + s.x;
  const U span = (static_cast<U>(depth - 1) * s.rows + (height - 1)) * s.pitch + width;
  if (first + span + s.ptr > UINT64_MAX) return invalid(region + " is out of range");
  return allocs.check(s.ptr + static_cast<uint64_t>(first), static_cast<uint64_t>(span), device);
}

}  // namespace rgpu::server
