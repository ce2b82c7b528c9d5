// The session's CUDA arrays, texture objects and surface objects: creation
// and destruction, and copies to, from and between arrays and pitched
// memory. Every handle, extent and range is checked against the session's
// ArrayTable and AllocationTable before the backend sees it.
#include <driver_types.h>

#include <algorithm>

#include "common/log.h"
#include "protocol/frame.h"
#include "server/session.h"

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
  if (Status q = pool_.reserve(phys, charge, placement_.quota > 0); !q) {
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
  const uint64_t value = *handle;
  finish(h, Status::ok(), [value](auto& r) { r.setValue(static_cast<int64_t>(value)); });
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
  ++graph_epoch_;
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
  if (s && from_host && to_host) s = Status(err::kInvalidMemcpyDirection, "a host-to-host copy is the client's own");
  uint64_t bytes = 0;
  if (s && (c.height == 0 || c.depth == 0 || c.width == 0)) {
    // Nothing to copy (as NVIDIA's runtime, a zero extent succeeds).
  } else if (s) {
    using U = unsigned __int128;
    U total = static_cast<U>(c.width) * c.height * c.depth;
    if ((from_host || to_host) && total > protocol::kMaxBulkBytes)
      s = Status(err::kInvalidValue, "copy larger than the frame limit");
    bytes = from_host || to_host ? static_cast<uint64_t>(total) : 0;
    int sd = -1, dd = -1;
    if (s) s = arrays_.checkSide(c.src, c.width, c.height, c.depth, allocs_, &sd);
    if (s) s = arrays_.checkSide(c.dst, c.width, c.height, c.depth, allocs_, &dd);
  }
  if (!s) RGPU_LOG_WARN("session {}: array copy rejected: {}", session_id_, s.message());
  const bool empty = c.height == 0 || c.depth == 0 || c.width == 0;
  if (from_host) {
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
  auto bad = [&](const std::string& why) {
    if (s) s = Status(err::kInvalidValue, why);
  };
  const ArrayTable::Array* a = nullptr;
  switch (m.getResource()) {
    case wire::TextureResource::ARRAY:
    case wire::TextureResource::MIPMAPPED_ARRAY:
      t.resource = m.getResource() == wire::TextureResource::ARRAY ? TextureSpec::kArray : TextureSpec::kMipmapped;
      t.array = m.getHandle();
      t.level = m.getLevel();
      a = arrays_.array(t.array);
      if (!a) bad("array " + std::to_string(t.array) + " is not one of this session's");
      else if (t.resource == TextureSpec::kMipmapped && a->spec.levels == 0)
        bad("a mipmapped-array resource names a plain array");
      else if (t.level >= a->levels.size()) bad("the array has no level " + std::to_string(t.level));
      else if (a->spec.device != t.device) bad("the array is on another device");
      if (a) t.format = a->spec.format;
      break;
    case wire::TextureResource::LINEAR:
    case wire::TextureResource::PITCH2_D: {
      const bool linear = m.getResource() == wire::TextureResource::LINEAR;
      t.resource = linear ? TextureSpec::kLinear : TextureSpec::kPitch2D;
      t.ptr = m.getPtr();
      auto f = formatOf(m.getFormat());
      if (!f) {
        if (s) s = f.status();
        break;
      }
      t.format = *f;
      const auto& attrs = backend_->devices()[static_cast<size_t>(s ? t.device : 0)].attributes;
      auto attr = [&](int i) { return static_cast<uint64_t>(std::max(attrs.size() > static_cast<size_t>(i) ? attrs[static_cast<size_t>(i)] : 0, 0)); };
      const uint64_t align = std::max<uint64_t>(attr(cudaDevAttrTextureAlignment), 1);
      if (t.ptr % align) bad("texture memory must be aligned to " + std::to_string(align) + " bytes");
      int dev = -1;
      if (linear) {
        t.size = m.getSize();
        if (t.size == 0 || t.size % t.format.bytes()) bad("a linear texture is whole elements");
        else if (t.size / t.format.bytes() > attr(cudaDevAttrMaxTexture1DLinearWidth))
          bad("a linear texture of " + std::to_string(t.size / t.format.bytes()) + " elements is larger than the device's limit");
        if (s) s = allocs_.check(t.ptr, t.size, &dev);
      } else {
        t.width = m.getWidth(), t.height = m.getHeight(), t.pitch = m.getPitch();
        if (t.width == 0 || t.height == 0) bad("a pitch-2D texture has a width and a height");
        else if (t.width > attr(cudaDevAttrMaxTexture2DLinearWidth) || t.height > attr(cudaDevAttrMaxTexture2DLinearHeight) ||
                 t.pitch > attr(cudaDevAttrMaxTexture2DLinearPitch))
          bad("the pitch-2D texture is larger than the device's limits");
        else if (t.pitch % std::max<uint64_t>(attr(cudaDevAttrTexturePitchAlignment), 1) || t.pitch < t.width * t.format.bytes())
          bad("the pitch " + std::to_string(t.pitch) + " is not a multiple of the device's texture pitch alignment at least a row wide");
        if (s) s = allocs_.check2D(t.ptr, t.pitch, t.width * t.format.bytes(), t.height, &dev);
      }
      if (s && dev != t.device) bad("the memory is on another device");
      break;
    }
    default:
      bad("unknown resource type");
  }
  auto modes = m.getAddressMode();
  for (unsigned i = 0; i < 3; ++i) {
    int v = i < modes.size() ? modes[i] : 0;
    if (v < 0 || v > 3) bad("unknown address mode " + std::to_string(v));
    t.address[i] = static_cast<uint8_t>(v);
  }
  if (m.getFilterMode() < 0 || m.getFilterMode() > 1 || m.getMipmapFilterMode() < 0 || m.getMipmapFilterMode() > 1)
    bad("unknown filter mode");
  if (m.getReadMode() < 0 || m.getReadMode() > 1) bad("unknown read mode");
  t.linear_filter = m.getFilterMode() == 1;
  t.normalized_read = m.getReadMode() == 1;
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
  if (!(t.mip_bias == t.mip_bias) || !(t.min_lod == t.min_lod) || !(t.max_lod == t.max_lod))
    bad("mipmap bias and clamps are numbers");
  // As NVIDIA's runtime: integers read as integers cannot be filtered, and
  // only 8- and 16-bit integers read as normalised floats.
  if (s && t.format.kind != 2 && !t.normalized_read && t.linear_filter)
    s = Status(err::kInvalidFilterSetting, "linear filtering of integers read as integers");
  if (s && t.format.kind != 2 && t.normalized_read && t.format.bits == 32)
    s = Status(err::kInvalidNormSetting, "32-bit integers cannot be read as normalised floats");
  if (!s) {
    RGPU_LOG_INFO("session {}: texture object refused: {}", session_id_, s.message());
    return finish(h, s), Status::ok();
  }
  auto handle = backend_->createTexture(t);
  if (!handle) return finish(h, handle.status()), Status::ok();
  if (Status add = arrays_.addTexture(*handle, {t.device, a ? t.array : 0}); !add) {
    (void)backend_->destroyTexture(*handle);
    return finish(h, add), Status::ok();
  }
  const uint64_t value = *handle;
  finish(h, Status::ok(), [value](auto& r) { r.setValue(static_cast<int64_t>(value)); });
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
  if (Status add = arrays_.addSurface(*handle, {a->spec.device, array}); !add) {
    (void)backend_->destroySurface(*handle);
    return finish(h, add), Status::ok();
  }
  const uint64_t value = *handle;
  finish(h, Status::ok(), [value](auto& r) { r.setValue(static_cast<int64_t>(value)); });
  return Status::ok();
}

Status Session::onTextureDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  const uint64_t handle = req.getTextureDestroy().getHandle();
  auto o = arrays_.removeTexture(handle);
  if (!o) return finish(h, o.status()), Status::ok();
  ++graph_epoch_;
  finish(h, backend_->destroyTexture(handle));
  return Status::ok();
}

Status Session::onSurfaceDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  const uint64_t handle = req.getSurfaceDestroy().getHandle();
  auto o = arrays_.removeSurface(handle);
  if (!o) return finish(h, o.status()), Status::ok();
  ++graph_epoch_;
  finish(h, backend_->destroySurface(handle));
  return Status::ok();
}

}  // namespace rgpu::server
