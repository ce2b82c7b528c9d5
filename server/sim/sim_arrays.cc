// SimBackend's CUDA arrays, copies with them, and texture and surface
// objects (the interpreter samples them: server/sim/ptx/ptx_texture.h).
#include <cstring>

#include "server/backend/array_table.h"
#include "server/sim/sim_backend.h"

namespace rgpu::server {

namespace {

ptx::TexFormat texFormat(const ArrayFormat& f) {
  return {f.kind, static_cast<uint8_t>(f.channels), static_cast<uint8_t>(f.bits)};
}

// Where a copy side's bytes start, and its row and slice strides.
struct Strides {
  uint64_t base = 0, pitch = 0, slice = 0;
};

}  // namespace

std::shared_ptr<const ptx::Textures> SimBackend::texturesLocked() {
  if (!objects_snapshot_) objects_snapshot_ = std::make_shared<const ptx::Textures>(objects_);
  return objects_snapshot_;
}

Result<uint64_t> SimBackend::objectIdLocked(uint64_t want) {
  if (!want) return next_object_++;
  if (arrays_.count(want) || objects_.textures.count(want) || objects_.surfaces.count(want))
    return Status(err::kInvalidValue, "object handle " + std::to_string(want) + " in use");
  next_object_ = std::max(next_object_, want + 1);
  return want;
}

Result<uint64_t> SimBackend::createArray(const ArraySpec& spec) { return createArrayImpl(spec, 0, 0); }

Status SimBackend::createArrayAt(uint64_t handle, const ArraySpec& spec, DevPtr base) {
  if (!handle || !base) return Status(err::kInvalidValue, "an array is restored under a handle, at an address");
  auto r = createArrayImpl(spec, handle, base);
  return r ? Status::ok() : r.status();
}

Result<std::pair<DevPtr, uint64_t>> SimBackend::arrayMemory(uint64_t array) const {
  std::lock_guard lock(mu_);
  auto it = arrays_.find(array);
  if (it == arrays_.end()) return Status(err::kInvalidValue, "no such array");
  auto a = allocations_.find(it->second.base);
  if (a == allocations_.end()) return Status(err::kInvalidValue, "the array's memory is gone");
  return std::make_pair(it->second.base, a->second.size);
}

Result<uint64_t> SimBackend::createArrayImpl(const ArraySpec& spec, uint64_t want, DevPtr base) {
  ptx::TexImage img;
  img.shape = ptx::arrayShape(spec.flags & kArrayLayered, spec.flags & kArrayCubemap, spec.height, spec.depth);
  img.format = texFormat(spec.format);
  if (spec.flags & (kArrayLayered | kArrayCubemap))
    img.layers = static_cast<uint32_t>(spec.flags & kArrayCubemap ? spec.depth / 6 : spec.depth);
  const uint64_t e = spec.format.bytes();
  uint64_t total = 0;
  std::vector<uint64_t> offsets;
  for (const auto& d : arrayLevels(spec)) {
    ptx::TexLevel l;
    l.width = static_cast<uint32_t>(d.width);
    l.height = static_cast<uint32_t>(d.height);
    l.depth = static_cast<uint32_t>(d.slices);
    l.pitch = d.width * e;
    l.slice = l.pitch * d.height;
    offsets.push_back(total);
    total += (l.slice * d.slices + 15) / 16 * 16;
    img.levels.push_back(l);
  }
  std::lock_guard lock(mu_);
  auto id = objectIdLocked(want);
  if (!id) return id.status();
  Result<DevPtr> p = base;
  if (base) {
    if (Status s = allocateAtLocked(spec.device, base, total); !s) return s;
  } else {
    p = allocateLocked(spec.device, total);
    if (!p) return p.status();
  }
  for (size_t i = 0; i < img.levels.size(); ++i) img.levels[i].base = *p + offsets[i];
  arrays_[*id] = {spec.device, *p, std::move(img)};
  return *id;
}

Status SimBackend::destroyArray(uint64_t array) {
  std::lock_guard lock(mu_);
  auto it = arrays_.find(array);
  if (it == arrays_.end()) return Status(err::kInvalidValue, "no such array");
  releaseLocked(it->second.base);  // textures of it now fault: their memory is no longer in the ranges
  arrays_.erase(it);
  return Status::ok();
}

Status SimBackend::copy3D(StreamKey s, const Copy3DSpec& c, Staging in, ReadDone out) {
  Strides src, dst;
  {
    std::lock_guard lock(mu_);
    auto strides = [&](const CopySide& side, Strides& st) -> Status {
      switch (side.kind) {
        case CopySide::kHost:
          st = {0, c.width, c.width * c.height};
          return Status::ok();
        case CopySide::kDevice:
          st = {side.ptr + (side.z * side.rows + side.y) * side.pitch + side.x, side.pitch, side.rows * side.pitch};
          return Status::ok();
        case CopySide::kArray: {
          auto it = arrays_.find(side.ptr);
          if (it == arrays_.end() || side.level >= it->second.image.levels.size())
            return Status(err::kInvalidValue, "no such array");
          const ptx::TexLevel& l = it->second.image.levels[side.level];
          st = {l.base + side.z * l.slice + side.y * l.pitch + side.x, l.pitch, l.slice};
          return Status::ok();
        }
      }
      return Status(err::kInvalidValue, "bad copy side");
    };
    RGPU_TRY(strides(c.src, src));
    RGPU_TRY(strides(c.dst, dst));
  }
  const uint64_t w = c.width, h = c.height, d = c.depth;
  if (c.dst.kind == CopySide::kHost) {
    return enqueue(s, [=, this, out = std::move(out)] {
      std::vector<uint8_t> packed(w * h * d);
      for (uint64_t z = 0; z < d; ++z)
        for (uint64_t y = 0; y < h; ++y)
          std::memcpy(packed.data() + (z * h + y) * w,
                      reinterpret_cast<const uint8_t*>(src.base + z * src.slice + y * src.pitch), w);
      out(Status::ok(), packed.data(), packed.size(), repliedHook());
    });
  }
  return enqueue(s, [=, in = std::move(in)] {
    const uint64_t from = c.src.kind == CopySide::kHost ? reinterpret_cast<uint64_t>(in->data()) : src.base;
    for (uint64_t z = 0; z < d; ++z)
      for (uint64_t y = 0; y < h; ++y)
        std::memmove(reinterpret_cast<uint8_t*>(dst.base + z * dst.slice + y * dst.pitch),
                     reinterpret_cast<const uint8_t*>(from + z * src.slice + y * src.pitch), w);
  });
}

Result<uint64_t> SimBackend::createTexture(const TextureSpec& t) { return createTextureImpl(t, 0); }

Status SimBackend::createTextureAt(uint64_t handle, const TextureSpec& t) {
  if (!handle) return Status(err::kInvalidValue, "a texture object is restored under a handle");
  if ((t.resource == TextureSpec::kLinear || t.resource == TextureSpec::kPitch2D) && t.format.bytes() == 0)
    return Status(err::kInvalidValue, "a texture object's format has no bytes");
  auto r = createTextureImpl(t, handle);
  return r ? Status::ok() : r.status();
}

Result<uint64_t> SimBackend::createTextureImpl(const TextureSpec& t, uint64_t want) {
  ptx::TexObject o;
  ptx::TexSampler& s = o.sampler;
  for (int i = 0; i < 3; ++i) s.address[i] = t.address[i];
  s.linear = t.linear_filter;
  s.normalized_read = t.normalized_read;
  s.normalized_coords = t.normalized_coords;
  s.srgb = t.srgb;
  for (int i = 0; i < 4; ++i) s.border[i] = t.border[i];
  s.mip_linear = t.mip_linear;
  s.mip_bias = t.mip_bias;
  s.min_lod = t.min_lod;
  s.max_lod = t.max_lod;
  std::lock_guard lock(mu_);
  const uint32_t e = t.format.bytes();
  switch (t.resource) {
    case TextureSpec::kArray:
    case TextureSpec::kMipmapped: {
      auto it = arrays_.find(t.array);
      if (it == arrays_.end()) return Status(err::kInvalidValue, "no such array");
      o.image = it->second.image;
      if (t.resource == TextureSpec::kArray && t.level >= o.image.levels.size())
        return Status(err::kInvalidValue, "the array has no level " + std::to_string(t.level));
      if (t.resource == TextureSpec::kArray) {  // one level (of a mipmapped array, cudaGetMipmappedArrayLevel's)
        ptx::TexLevel l = o.image.levels[t.level];
        o.image.levels = {l};
      }
      break;
    }
    case TextureSpec::kLinear:
      o.image.shape = ptx::TexShape::k1D;
      o.image.format = texFormat(t.format);
      o.image.levels = {{t.ptr, static_cast<uint32_t>(t.size / e), 1, 1, t.size, t.size}};
      break;
    case TextureSpec::kPitch2D:
      o.image.shape = ptx::TexShape::k2D;
      o.image.format = texFormat(t.format);
      o.image.levels = {{t.ptr, static_cast<uint32_t>(t.width), static_cast<uint32_t>(t.height), 1, t.pitch,
                         t.pitch * t.height}};
      break;
  }
  auto id = objectIdLocked(want);
  if (!id) return id.status();
  objects_.textures[*id] = std::move(o);
  objects_snapshot_.reset();
  return *id;
}

Status SimBackend::destroyTexture(int, uint64_t texture) {  // (a value names one object on the sim)
  std::lock_guard lock(mu_);
  if (!objects_.textures.erase(texture)) return Status(err::kInvalidValue, "no such texture object");
  objects_snapshot_.reset();
  return Status::ok();
}

Result<uint64_t> SimBackend::createSurface(int device, uint64_t array, uint32_t level) {
  return createSurfaceImpl(array, level, 0);
}

Status SimBackend::createSurfaceAt(uint64_t handle, int device, uint64_t array, uint32_t level) {
  if (!handle) return Status(err::kInvalidValue, "a surface object is restored under a handle");
  auto r = createSurfaceImpl(array, level, handle);
  return r ? Status::ok() : r.status();
}

Result<uint64_t> SimBackend::createSurfaceImpl(uint64_t array, uint32_t level, uint64_t want) {
  std::lock_guard lock(mu_);
  auto it = arrays_.find(array);
  if (it == arrays_.end() || level >= it->second.image.levels.size()) return Status(err::kInvalidValue, "no such array");
  ptx::TexImage img = it->second.image;
  ptx::TexLevel l = img.levels[level];
  img.levels = {l};
  auto id = objectIdLocked(want);
  if (!id) return id.status();
  objects_.surfaces[*id] = std::move(img);
  objects_snapshot_.reset();
  return *id;
}

Status SimBackend::destroySurface(int, uint64_t surface) {
  std::lock_guard lock(mu_);
  if (!objects_.surfaces.erase(surface)) return Status(err::kInvalidValue, "no such surface object");
  objects_snapshot_.reset();
  return Status::ok();
}

}  // namespace rgpu::server
