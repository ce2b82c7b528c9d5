// The session's CUDA arrays, texture objects and surface objects: creation
// and destruction, and copies to, from and between arrays and pitched
// memory. Every handle, extent and range is checked against the session's
// ArrayTable and AllocationTable before the backend sees it.
#include <driver_types.h>

#include <algorithm>
#include <cmath>

#include "common/log.h"
#include "protocol/frame.h"
#include "server/session/session.h"

namespace rgpu::server {

using protocol::FrameHeader;

namespace {

Result<ArrayFormat> formatOf(wire::ChannelFormat::Reader f) {
  return checkFormat(f.getX(), f.getY(), f.getZ(), f.getW(), f.getKind());
}

CopySide sideOf(wire::CopySide::Reader r) {
  CopySide s;
  switch (r.which()) {
    case wire::CopySide::HOST: s.kind = CopySide::kHost; break;
    case wire::CopySide::DEVICE: s.kind = CopySide::kDevice, s.ptr = r.getDevice(); break;
    case wire::CopySide::ARRAY: s.kind = CopySide::kArray, s.ptr = r.getArray(); break;
  }
  s.level = r.getLevel();
  s.pitch = r.getPitch();
  s.rows = r.getRows();
  s.x = r.getX();
  s.y = r.getY();
  s.z = r.getZ();
  return s;
}

// A reply carrying a new handle.
auto valueReply(uint64_t v) {
  return [v](auto& r) { r.setValue(static_cast<int64_t>(v)); };
}

// A texture's resource (cudaResourceDesc): an array of the session's, or
// memory inside one of its allocations, on the texture's device, within the
// device's limits (`attrs`, by cudaDeviceAttr).
Status textureResource(wire::TextureCreate::Reader m, const std::vector<int32_t>& attrs, const ArrayTable& arrays,
                       const AllocationTable& allocs, TextureSpec& t) {
  auto bad = [](const std::string& why) { return Status(err::kInvalidValue, why); };
  auto attr = [&](int i) {
    return static_cast<uint64_t>(std::max(static_cast<size_t>(i) < attrs.size() ? attrs[static_cast<size_t>(i)] : 0, 0));
  };
  if (m.getResource() == wire::TextureResource::ARRAY || m.getResource() == wire::TextureResource::MIPMAPPED_ARRAY) {
    t.resource = m.getResource() == wire::TextureResource::ARRAY ? TextureSpec::kArray : TextureSpec::kMipmapped;
    t.array = m.getHandle();
    t.level = m.getLevel();
    const ArrayTable::Array* a = arrays.array(t.array);
    if (!a) return bad("array " + std::to_string(t.array) + " is not one of this session's");
    if (t.resource == TextureSpec::kMipmapped && a->spec.levels == 0)
      return bad("a mipmapped-array resource names a plain array");
    if (t.level >= a->levels.size()) return bad("the array has no level " + std::to_string(t.level));
    if (a->spec.device != t.device) return bad("the array is on another device");
    t.format = a->spec.format;
    return Status::ok();
  }
  const bool linear = m.getResource() == wire::TextureResource::LINEAR;
  t.resource = linear ? TextureSpec::kLinear : TextureSpec::kPitch2D;
  t.ptr = m.getPtr();
  auto f = formatOf(m.getFormat());
  if (!f) return f.status();
  t.format = *f;
  const uint64_t align = std::max<uint64_t>(attr(cudaDevAttrTextureAlignment), 1);
  if (t.ptr % align) return bad("texture memory must be aligned to " + std::to_string(align) + " bytes");
  int dev = -1;
  if (linear) {
    t.size = m.getSize();
    if (t.size == 0 || t.size % t.format.bytes()) return bad("a linear texture is whole elements");
    if (t.size / t.format.bytes() > attr(cudaDevAttrMaxTexture1DLinearWidth))
      return bad("a linear texture of " + std::to_string(t.size / t.format.bytes()) +
                 " elements is larger than the device's limit");
    RGPU_TRY(allocs.check(t.ptr, t.size, &dev));
  } else {
    t.width = m.getWidth(), t.height = m.getHeight(), t.pitch = m.getPitch();
    if (t.width == 0 || t.height == 0) return bad("a pitch-2D texture has a width and a height");
    if (t.width > attr(cudaDevAttrMaxTexture2DLinearWidth) || t.height > attr(cudaDevAttrMaxTexture2DLinearHeight) ||
        t.pitch > attr(cudaDevAttrMaxTexture2DLinearPitch))
      return bad("the pitch-2D texture is larger than the device's limits");
    if (t.pitch % std::max<uint64_t>(attr(cudaDevAttrTexturePitchAlignment), 1) || t.pitch < t.width * t.format.bytes())
      return bad("the pitch " + std::to_string(t.pitch) +
                 " is not a multiple of the device's texture pitch alignment at least a row wide");
    RGPU_TRY(allocs.check2D(t.ptr, t.pitch, t.width * t.format.bytes(), t.height, &dev));
  }
  if (dev != t.device) return bad("the memory is on another device");
  return Status::ok();
}

// A texture's sampler (cudaTextureDesc), with NVIDIA's refusals.
Status textureSampler(wire::TextureCreate::Reader m, TextureSpec& t) {
  auto modes = m.getAddressMode();
  for (unsigned i = 0; i < 3; ++i) {
    const int v = i < modes.size() ? modes[i] : 0;
    if (v < 0 || v > 3) return Status(err::kInvalidValue, "unknown address mode " + std::to_string(v));
    t.address[i] = static_cast<uint8_t>(v);
  }
  if (m.getFilterMode() < 0 || m.getFilterMode() > 1 || m.getMipmapFilterMode() < 0 || m.getMipmapFilterMode() > 1)
    return Status(err::kInvalidValue, "unknown filter mode");
  if (m.getReadMode() < 0 || m.getReadMode() > 1) return Status(err::kInvalidValue, "unknown read mode");
  t.linear_filter = m.getFilterMode() == 1;
  t.normalized_read = m.getReadMode() == 1 || t.format.normalized;  // a normalised format reads as floats
  t.srgb = m.getSRGB();
  auto border = m.getBorderColor();
  for (unsigned i = 0; i < 4 && i < border.size(); ++i) t.border[i] = border[i];
  t.normalized_coords = m.getNormalizedCoords();
  t.max_anisotropy = m.getMaxAnisotropy();
  t.mip_linear = m.getMipmapFilterMode() == 1;
  t.mip_bias = m.getMipmapLevelBias();
  t.min_lod = m.getMinMipmapLevelClamp();
  t.max_lod = m.getMaxMipmapLevelClamp();
  t.disable_trilinear = m.getDisableTrilinearOptimization();
  t.seamless_cubemap = m.getSeamlessCubemap();
  if (std::isnan(t.mip_bias) || std::isnan(t.min_lod) || std::isnan(t.max_lod))
    return Status(err::kInvalidValue, "mipmap bias and clamps are numbers");
  // Integers read as integers cannot be filtered; only 8- and 16-bit integers read as normalised floats.
  if (t.format.kind != 2 && !t.normalized_read && t.linear_filter)
    return Status(err::kInvalidFilterSetting, "linear filtering of integers read as integers");
  if (t.format.kind != 2 && t.normalized_read && t.format.bits == 32)
    return Status(err::kInvalidNormSetting, "32-bit integers cannot be read as normalised floats");
  return Status::ok();
}

}  // namespace

Status Session::onArrayCreate(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getArrayCreate();
  ArraySpec spec;
  spec.device = m.getDevice();
  spec.width = m.getWidth();
  spec.height = m.getHeight();
  spec.depth = m.getDepth();
  spec.flags = m.getFlags();
  spec.levels = m.getLevels();
  Status s = checkDevice(spec.device);
  Result<uint64_t> bytes = Status(err::kInvalidValue, "");
  if (s) {
    auto f = formatOf(m.getFormat());
    if (f) spec.format = *f;
    else s = f.status();
  }
  if (s) {
    bytes = checkArray(spec, backend_->devices()[static_cast<size_t>(spec.device)].attributes);
    s = bytes.status();
  }
  if (!s) {
    RGPU_LOG_INFO("session {}: array refused: {}", session_id_, s.message());
    return finish(h, s), Status::ok();
  }
  const uint64_t charge = chargedBytes(*bytes);
  const int phys = physical(spec.device);
  if (Status q = pool_.reserve(phys, charge, placement_.quota > 0 || placement_.pool_quota > 0); !q) {
    RGPU_LOG_INFO("session {}: array of {} bytes refused: {}", session_id_, *bytes, q.message());
    return finish(h, q), Status::ok();
  }
  auto handle = backend_->createArray(spec);
  if (!handle) {
    pool_.release(phys, charge);
    return finish(h, handle.status()), Status::ok();
  }
  ArrayTable::Array a{spec, arrayLevels(spec), *bytes};
  if (Status add = arrays_.addArray(*handle, std::move(a)); !add) {
    (void)backend_->destroyArray(*handle);
    pool_.release(phys, charge);
    return finish(h, add), Status::ok();
  }
  finish(h, Status::ok(), valueReply(*handle));
  return Status::ok();
}

Status Session::onArrayDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  const uint64_t seq = h.seq, handle = req.getArrayDestroy().getHandle();
  auto a = arrays_.removeArray(handle);
  if (!a) {
    RGPU_LOG_WARN("session {}: cudaFreeArray: {}", session_id_, a.status().message());
    return finish(h, a.status()), Status::ok();
  }
  // As cudaFree: work still queued may use the array.
  const bool async = h.flags & protocol::kFlagAsync;
  const int phys = physical(a->spec.device);
  const uint64_t charge = chargedBytes(a->bytes);
  ++graph_epoch_;  // native graphs may copy to or from it
  Status s = backend_->afterDeviceDone(a->spec.device, [this, handle] { return backend_->destroyArray(handle); },
                                       freed(seq, async, phys, charge));
  if (!s) finish(h, s);
  return Status::ok();
}

Status Session::onCopy3D(const FrameHeader& h, wire::Request::Reader req) {
  const uint64_t seq = h.seq;
  auto m = req.getCopy3D();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  Copy3DSpec c;
  c.src = sideOf(m.getSrc());
  c.dst = sideOf(m.getDst());
  c.width = m.getWidth();
  c.height = m.getHeight();
  c.depth = m.getDepth();
  const bool from_host = c.src.kind == CopySide::kHost, to_host = c.dst.kind == CopySide::kHost;
  const bool empty = c.width == 0 || c.height == 0 || c.depth == 0;  // succeeds, as NVIDIA's runtime
  const unsigned __int128 total = static_cast<unsigned __int128>(c.width) * c.height * c.depth;
  if (s && from_host && to_host) s = Status(err::kInvalidMemcpyDirection, "a host-to-host copy is the client's own");
  if (s && (from_host || to_host) && total > protocol::kMaxBulkBytes)
    s = Status(err::kInvalidValue, "copy larger than the frame limit");
  for (const CopySide* side : {&c.src, &c.dst}) {
    int dev = -1;
    if (s && !empty) s = arrays_.checkSide(*side, c.width, c.height, c.depth, allocs_, &dev);
    // An array is its device's (another device's: cudaMemcpy3DPeer, not offered).
    if (s && side->kind == CopySide::kArray && dev != key.device)
      s = Status(err::kInvalidValue, "the array is on device " + std::to_string(dev) + ", the copy's stream on device " +
                                         std::to_string(key.device));
  }
  if (!s) RGPU_LOG_WARN("session {}: array copy rejected: {}", session_id_, s.message());
  if (from_host) {
    const uint64_t bytes = static_cast<uint64_t>(total);
    if (!s || empty) {
      RGPU_TRY(consumeBulk(h, h.bulk_len, nullptr));
      return finish(h, s), Status::ok();
    }
    Staging data;
    RGPU_TRY(consumeBulk(h, bytes, &data));
    if (!data) return finish(h, stagingRefused(bytes)), Status::ok();
    finishCopyIn(h, key, backend_->copy3D(key, c, std::move(data), nullptr));
    return Status::ok();
  }
  RGPU_TRY(bulkNotExpected(h));
  if (!s || empty) return finish(h, s), Status::ok();
  if (to_host) {
    s = backend_->copy3D(key, c, nullptr, replyWith(seq));
    if (!s) finish(h, s);
    return Status::ok();
  }
  finish(h, backend_->copy3D(key, c, nullptr, nullptr));
  return Status::ok();
}

Status Session::onTextureCreate(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getTextureCreate();
  TextureSpec t;
  t.device = m.getDevice();
  Status s = checkDevice(t.device);
  if (s) s = textureResource(m, backend_->devices()[static_cast<size_t>(t.device)].attributes, arrays_, allocs_, t);
  if (s) s = textureSampler(m, t);
  if (!s) {
    RGPU_LOG_INFO("session {}: texture object refused: {}", session_id_, s.message());
    return finish(h, s), Status::ok();
  }
  auto handle = backend_->createTexture(t);
  if (!handle) return finish(h, handle.status()), Status::ok();
  if (Status add = arrays_.addObject(ArrayTable::kTexture, *handle, {t.device, t, 0, 0}); !add) {
    (void)backend_->destroyTexture(t.device, *handle);
    return finish(h, add), Status::ok();
  }
  finish(h, Status::ok(), valueReply(*handle));
  return Status::ok();
}

Status Session::onSurfaceCreate(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getSurfaceCreate();
  const uint64_t array = m.getArray();
  const uint32_t level = m.getLevel();
  const ArrayTable::Array* a = arrays_.array(array);
  Status s;
  if (!a) s = Status(err::kInvalidValue, "array " + std::to_string(array) + " is not one of this session's");
  else if (level >= a->levels.size()) s = Status(err::kInvalidValue, "the array has no level " + std::to_string(level));
  else if (!(a->spec.flags & kArraySurfaceLoadStore))
    s = Status(err::kInvalidValue, "the array was not made with cudaArraySurfaceLoadStore");
  if (!s) {
    RGPU_LOG_INFO("session {}: surface object refused: {}", session_id_, s.message());
    return finish(h, s), Status::ok();
  }
  auto handle = backend_->createSurface(a->spec.device, array, level);
  if (!handle) return finish(h, handle.status()), Status::ok();
  if (Status add = arrays_.addObject(ArrayTable::kSurface, *handle, {a->spec.device, {}, array, level}); !add) {
    (void)backend_->destroySurface(a->spec.device, *handle);
    return finish(h, add), Status::ok();
  }
  finish(h, Status::ok(), valueReply(*handle));
  return Status::ok();
}

Status Session::onTextureDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  const uint64_t handle = req.getTextureDestroy().getHandle();
  const int device = req.getTextureDestroy().getDevice();
  auto o = arrays_.removeObject(ArrayTable::kTexture, device, handle);
  finish(h, o ? backend_->destroyTexture(device, handle) : o.status());
  return Status::ok();
}

Status Session::onSurfaceDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  const uint64_t handle = req.getSurfaceDestroy().getHandle();
  const int device = req.getSurfaceDestroy().getDevice();
  auto o = arrays_.removeObject(ArrayTable::kSurface, device, handle);
  finish(h, o ? backend_->destroySurface(device, handle) : o.status());
  return Status::ok();
}

}  // namespace rgpu::server
