// CudaBackend's CUDA arrays, 3D copies with them, and texture and surface
// objects, through the driver API (cuArray3DCreate, cuMemcpy3DAsync,
// cuTexObjectCreate, cuSurfObjectCreate). The session checked every handle
// and range; host sides travel through the backend's pinned buffers, as the
// 2D copies do.
#include <algorithm>
#include <cstring>

#include "server/cuda/cuda_backend.h"

#include "common/array_shape.h"
#include "common/spin.h"
#include "server/backend/array_table.h"

namespace rgpu::server::cuda {

namespace {

Status unavailable(const char* what) {
  return Status(err::kNotSupported, std::string(what) + ": the CUDA driver lacks the array and texture entry points");
}

CUarray_format driverFormat(const ArrayFormat& f) {
  if (f.normalized) {
    static constexpr CUarray_format unorm[2][3] = {
        {CU_AD_FORMAT_UNORM_INT8X1, CU_AD_FORMAT_UNORM_INT8X2, CU_AD_FORMAT_UNORM_INT8X4},
        {CU_AD_FORMAT_UNORM_INT16X1, CU_AD_FORMAT_UNORM_INT16X2, CU_AD_FORMAT_UNORM_INT16X4}};
    static constexpr CUarray_format snorm[2][3] = {
        {CU_AD_FORMAT_SNORM_INT8X1, CU_AD_FORMAT_SNORM_INT8X2, CU_AD_FORMAT_SNORM_INT8X4},
        {CU_AD_FORMAT_SNORM_INT16X1, CU_AD_FORMAT_SNORM_INT16X2, CU_AD_FORMAT_SNORM_INT16X4}};
    const int b = f.bits == 8 ? 0 : 1, c = f.channels == 1 ? 0 : f.channels == 2 ? 1 : 2;
    return f.kind == 0 ? snorm[b][c] : unorm[b][c];
  }
  if (f.kind == 2) return f.bits == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
  if (f.kind == 0) return f.bits == 8 ? CU_AD_FORMAT_SIGNED_INT8 : f.bits == 16 ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_SIGNED_INT32;
  return f.bits == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 : f.bits == 16 ? CU_AD_FORMAT_UNSIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT32;
}

}  // namespace

Result<CudaBackend::CudaArray> CudaBackend::arrayOf(uint64_t array) const {
  std::lock_guard lock(mu_);
  auto it = arrays_.find(array);
  if (it == arrays_.end()) return Status(err::kInvalidValue, "no such array");
  return it->second;
}

Result<std::pair<int, CUarray>> CudaBackend::arrayLevel(uint64_t array, uint32_t level) {
  DriverApi& api = *api_;
  RGPU_TRY_ASSIGN(a, arrayOf(array));
  if (a.array) return std::make_pair(a.device, a.array);
  RGPU_TRY(use(a.device));
  CUarray l = nullptr;
  RGPU_TRY(RGPU_CU(cuMipmappedArrayGetLevel(&l, a.mipmapped, level)));
  return std::make_pair(a.device, l);
}

Result<uint64_t> CudaBackend::createArray(const ArraySpec& spec) { return createArrayImpl(spec, 0); }

Result<uint64_t> CudaBackend::createArrayImpl(const ArraySpec& spec, uint64_t want) {
  DriverApi& api = *api_;
  if (want) {
    std::lock_guard lock(mu_);
    if (arrays_.count(want)) return Status(err::kInvalidValue, "array handle " + std::to_string(want) + " in use");
  }
  if (!api.cuArray3DCreate || !api.cuMipmappedArrayCreate || !api.cuMemcpy3DAsync) return unavailable("cudaMallocArray");
  RGPU_TRY(use(spec.device));
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = spec.width;
  d.Height = spec.height;
  d.Depth = spec.depth;
  d.Format = driverFormat(spec.format);
  d.NumChannels = static_cast<unsigned>(spec.format.channels);
  d.Flags = spec.flags;  // the runtime's cudaArray* flags are the driver's CUDA_ARRAY3D_* values
  CudaArray a;
  a.device = spec.device;
  a.spec = spec;
  CUresult r = spec.levels ? api.cuMipmappedArrayCreate(&a.mipmapped, &d, spec.levels) : api.cuArray3DCreate(&a.array, &d);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return Status(err::kMemoryAllocation, "out of memory for an array");
  RGPU_TRY(api.check(r, spec.levels ? "cuMipmappedArrayCreate" : "cuArray3DCreate", __FILE__, __LINE__));
  if (Status s = scrubArray(a, spec); !s) {
    (void)(a.array ? api.cuArrayDestroy(a.array) : api.cuMipmappedArrayDestroy(a.mipmapped));
    return s;
  }
  std::lock_guard lock(mu_);
  const uint64_t id = want ? want : next_array_++;
  next_array_ = std::max(next_array_, id + 1);
  a.placed = next_placed_++;
  arrays_[id] = a;
  return id;
}

// ---- arrays in checkpoints (backend.h: arrayMemory) ----

Result<std::pair<DevPtr, uint64_t>> CudaBackend::arrayMemory(uint64_t array) const {
  RGPU_TRY_ASSIGN(a, arrayOf(array));
  return std::make_pair(DevPtr{0}, packedBytes(a.spec));
}

uint64_t CudaBackend::placementOrder(bool array, uint64_t id) const {
  std::lock_guard lock(mu_);
  if (array) {
    auto it = arrays_.find(id);
    return it == arrays_.end() ? 0 : it->second.placed;
  }
  auto it = modules_.find(static_cast<uint32_t>(id));
  return it == modules_.end() ? 0 : it->second.placed;
}

Status CudaBackend::createArrayAt(uint64_t handle, const ArraySpec& spec, DevPtr base) {
  if (!handle || base)
    return Status(err::kInvalidValue, "an array is restored under a handle, in the CUDA driver's memory (no address)");
  auto r = createArrayImpl(spec, handle);
  return r ? Status::ok() : r.status();
}

Status CudaBackend::readArray(uint64_t array, uint64_t offset, uint64_t n, uint8_t* out) {
  return arrayBytes(array, offset, n, out, true);
}

Status CudaBackend::writeArray(uint64_t array, uint64_t offset, const uint8_t* data, uint64_t n) {
  return arrayBytes(array, offset, n, const_cast<uint8_t*>(data), false);
}

// [offset, offset + n) of the array's packed bytes to or from `host`, in
// pieces of one level's slice each (whole rows, or part of one row), through
// a pinned buffer on the device's own stream, after its scrubs.
Status CudaBackend::arrayBytes(uint64_t array, uint64_t offset, uint64_t n, uint8_t* host, bool to_host) {
  DriverApi& api = *api_;
  RGPU_TRY_ASSIGN(a, arrayOf(array));
  const uint64_t e = a.spec.format.bytes();
  const auto levels = arrayLevels(a.spec);
  const uint64_t packed = packedBytes(a.spec);
  if (offset % e || n % e || offset > packed || n > packed - offset)
    return Status(err::kInvalidValue, "bytes " + std::to_string(offset) + "+" + std::to_string(n) + " of an array of " +
                                          std::to_string(packed) + " bytes in " + std::to_string(e) + "-byte elements");
  std::lock_guard peek(peek_mu_);
  Device& d = devices_[static_cast<size_t>(a.device)];
  RGPU_TRY(use(a.device));
  RGPU_TRY(peekReady(d));
  RGPU_TRY_ASSIGN(pin, takePinned(std::min<uint64_t>(std::max<uint64_t>(n, 1), 4ull << 20)));
  Status s;
  auto levelBytes = [&](size_t i) { return levels[i].width * e * levels[i].height * levels[i].slices; };
  // Level l starts `start` bytes into the packed bytes.
  size_t l = 0;
  uint64_t start = 0;
  for (uint64_t done = 0; s && done < n;) {
    const uint64_t chunk = std::min(pin.capacity, n - done);
    if (!to_host) std::memcpy(pin.data, host + done, chunk);
    for (uint64_t at = 0; s && at < chunk;) {
      const uint64_t pos = offset + done + at;
      while (pos >= start + levelBytes(l)) start += levelBytes(l++);
      const uint64_t row = levels[l].width * e;
      const uint64_t r = (pos - start) / row, x = (pos - start) % row, y = r % levels[l].height,
                     z = r / levels[l].height, left = chunk - at;
      // Part of one row, or whole rows of one slice.
      const uint64_t width = x || left < row ? std::min(row - x, left) : row;
      const uint64_t rows = x || left < row ? 1 : std::min(left / row, levels[l].height - y);
      CUarray arr = a.array;
      if (!arr) s = RGPU_CU(cuMipmappedArrayGetLevel(&arr, a.mipmapped, static_cast<unsigned>(l)));
      if (!s) break;
      CUDA_MEMCPY3D m{};
      CUmemorytype& array_type = to_host ? m.srcMemoryType : m.dstMemoryType;
      CUmemorytype& host_type = to_host ? m.dstMemoryType : m.srcMemoryType;
      array_type = CU_MEMORYTYPE_ARRAY;
      host_type = CU_MEMORYTYPE_HOST;
      (to_host ? m.srcArray : m.dstArray) = arr;
      (to_host ? m.srcXInBytes : m.dstXInBytes) = x;
      (to_host ? m.srcY : m.dstY) = y;
      (to_host ? m.srcZ : m.dstZ) = z;
      if (to_host) {
        m.dstHost = pin.data + at;
        m.dstPitch = width;
        m.dstHeight = rows;
      } else {
        m.srcHost = pin.data + at;
        m.srcPitch = width;
        m.srcHeight = rows;
      }
      m.WidthInBytes = width;
      m.Height = rows;
      m.Depth = 1;
      s = RGPU_CU(cuMemcpy3DAsync(&m, d.peek_stream));
      at += width * rows;
    }
    if (s) s = peekDone(d);
    if (s && to_host) std::memcpy(host + done, pin.data, chunk);
    done += chunk;
  }
  givePinned(pin);
  return s;
}

// Arrays have no memset: each level's rows are copied from a zeroed buffer,
// a block of rows at a time, on the scrub stream, ordered before the
// session's work as scrub() is.
Status CudaBackend::scrubArray(const CudaArray& a, const ArraySpec& spec) {
  if (!opts_.scrub) return Status::ok();
  DriverApi& api = *api_;
  const bool layered = spec.flags & (kArrayLayered | kArrayCubemap);
  const uint32_t levels = spec.levels ? spec.levels : 1;
  uint64_t zeroed = 0;
  for (uint32_t level = 0; level < levels; ++level) {
    const auto dims = common::arrayLevel(spec.width, spec.height, spec.depth, layered, level);
    const uint64_t row = dims.width * spec.format.bytes();
    RGPU_TRY(scrubReady(spec.device, row));
    Device& d = devices_[static_cast<size_t>(spec.device)];
    if (level == 0) {
      harvestScrubTime(spec.device, false);
      if (d.timed_pending == 0) RGPU_TRY(RGPU_CU(cuEventRecord(d.scrub_start, d.scrub_stream)));
    }
    CUarray arr = a.array;
    if (!arr) RGPU_TRY(RGPU_CU(cuMipmappedArrayGetLevel(&arr, a.mipmapped, level)));
    const uint64_t rows = std::max<uint64_t>(d.scrub_zero_bytes / row, 1);
    for (uint64_t z = 0; z < dims.slices; ++z)
      for (uint64_t y = 0; y < dims.height; y += rows) {
        CUDA_MEMCPY3D m{};
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m.srcDevice = d.scrub_zero;
        m.srcPitch = row;
        m.srcHeight = rows;
        m.dstMemoryType = CU_MEMORYTYPE_ARRAY;
        m.dstArray = arr;
        m.dstY = y;
        m.dstZ = z;
        m.WidthInBytes = row;
        m.Height = std::min(rows, dims.height - y);
        m.Depth = 1;
        RGPU_TRY(RGPU_CU(cuMemcpy3DAsync(&m, d.scrub_stream)));
      }
    zeroed += row * dims.height * dims.slices;
  }
  return scrubQueued(spec.device, zeroed);  // not waited for: streams wait for it (scrub())
}

Status CudaBackend::destroyArray(uint64_t array) {
  DriverApi& api = *api_;
  CudaArray a;
  {
    std::lock_guard lock(mu_);
    auto it = arrays_.find(array);
    if (it == arrays_.end()) return Status(err::kInvalidValue, "no such array");
    a = it->second;
    arrays_.erase(it);
  }
  RGPU_TRY(use(a.device));
  RGPU_TRY(scrubsDone(a.device));
  return a.array ? RGPU_CU(cuArrayDestroy(a.array)) : RGPU_CU(cuMipmappedArrayDestroy(a.mipmapped));
}

Status CudaBackend::copy3D(StreamKey key, const Copy3DSpec& c, Staging in, ReadDone out) {
  DriverApi& api = *api_;
  if (!api.cuMemcpy3DAsync) return unavailable("cudaMemcpy3D");
  // A native graph's node: between arrays and device memory only (a host
  // side goes through the graph's buffers, client/graph_exec.cc).
  if (capture_.active && (c.src.kind == CopySide::kHost || c.dst.kind == CopySide::kHost))
    return notCapturable("an array copy with host memory");
  auto s = streamOf(key);
  if (!s) return s.status();
  const uint64_t packed = c.width * c.height * c.depth;
  Pinned pin;
  if (c.src.kind == CopySide::kHost || c.dst.kind == CopySide::kHost) {
    auto p = takePinned(packed);
    if (!p) return p.status();
    pin = *p;
    if (c.src.kind == CopySide::kHost) std::memcpy(pin.data, in->data(), packed);
  }
  CUDA_MEMCPY3D m{};
  auto side = [&](const CopySide& e, CUmemorytype& type, const void*& host, CUdeviceptr& dev, CUarray& arr,
                  size_t& x, size_t& y, size_t& z, size_t& pitch, size_t& height) -> Status {
    x = e.x, y = e.y, z = e.z;
    switch (e.kind) {
      case CopySide::kHost:
        type = CU_MEMORYTYPE_HOST, host = pin.data, pitch = c.width, height = c.height;
        x = y = z = 0;
        return Status::ok();
      case CopySide::kDevice:
        type = CU_MEMORYTYPE_DEVICE, dev = e.ptr, pitch = e.pitch, height = e.rows;
        return Status::ok();
      case CopySide::kArray: {
        auto l = arrayLevel(e.ptr, e.level);
        if (!l) return l.status();
        type = CU_MEMORYTYPE_ARRAY, arr = l->second;
        return Status::ok();
      }
    }
    return Status(err::kInvalidValue, "bad copy side");
  };
  const void* src_host = nullptr;
  const void* dst_host = nullptr;
  Status st = side(c.src, m.srcMemoryType, src_host, m.srcDevice, m.srcArray, m.srcXInBytes, m.srcY, m.srcZ,
                   m.srcPitch, m.srcHeight);
  if (st) st = side(c.dst, m.dstMemoryType, dst_host, m.dstDevice, m.dstArray, m.dstXInBytes, m.dstY, m.dstZ,
                    m.dstPitch, m.dstHeight);
  m.srcHost = src_host;
  m.dstHost = const_cast<void*>(dst_host);
  m.WidthInBytes = c.width;
  m.Height = c.height;
  m.Depth = c.depth;
  if (st) st = RGPU_CU(cuMemcpy3DAsync(&m, s->second));
  if (c.src.kind == CopySide::kHost) return afterUpload(s->first, s->second, pin, std::move(in), st);
  if (c.dst.kind == CopySide::kHost) return afterDownload(key, s->first, s->second, pin, packed, std::move(out), st);
  return st;
}

Result<uint64_t> CudaBackend::createTexture(const TextureSpec& t) {
  DriverApi& api = *api_;
  if (!api.cuTexObjectCreate) return unavailable("cudaCreateTextureObject");
  RGPU_TRY(use(t.device));
  CUDA_RESOURCE_DESC res{};
  switch (t.resource) {
    case TextureSpec::kArray: {
      auto l = arrayLevel(t.array, t.level);
      if (!l) return l.status();
      res.resType = CU_RESOURCE_TYPE_ARRAY;
      res.res.array.hArray = l->second;
      break;
    }
    case TextureSpec::kMipmapped: {
      std::lock_guard lock(mu_);
      auto it = arrays_.find(t.array);
      if (it == arrays_.end() || !it->second.mipmapped) return Status(err::kInvalidValue, "no such mipmapped array");
      res.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
      res.res.mipmap.hMipmappedArray = it->second.mipmapped;
      break;
    }
    case TextureSpec::kLinear:
      res.resType = CU_RESOURCE_TYPE_LINEAR;
      res.res.linear.devPtr = t.ptr;
      res.res.linear.format = driverFormat(t.format);
      res.res.linear.numChannels = static_cast<unsigned>(t.format.channels);
      res.res.linear.sizeInBytes = t.size;
      break;
    case TextureSpec::kPitch2D:
      res.resType = CU_RESOURCE_TYPE_PITCH2D;
      res.res.pitch2D.devPtr = t.ptr;
      res.res.pitch2D.format = driverFormat(t.format);
      res.res.pitch2D.numChannels = static_cast<unsigned>(t.format.channels);
      res.res.pitch2D.width = t.width;
      res.res.pitch2D.height = t.height;
      res.res.pitch2D.pitchInBytes = t.pitch;
      break;
  }
  CUDA_TEXTURE_DESC td{};
  for (int i = 0; i < 3; ++i) td.addressMode[i] = static_cast<CUaddress_mode>(t.address[i]);
  td.filterMode = t.linear_filter ? CU_TR_FILTER_MODE_LINEAR : CU_TR_FILTER_MODE_POINT;
  // The runtime's cudaTextureDesc as the driver's flags.
  td.flags = (t.normalized_read ? 0u : CU_TRSF_READ_AS_INTEGER) | (t.normalized_coords ? CU_TRSF_NORMALIZED_COORDINATES : 0u) |
             (t.srgb ? CU_TRSF_SRGB : 0u) | (t.disable_trilinear ? CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION : 0u) |
             (t.seamless_cubemap ? CU_TRSF_SEAMLESS_CUBEMAP : 0u);
  td.maxAnisotropy = t.max_anisotropy;
  td.mipmapFilterMode = t.mip_linear ? CU_TR_FILTER_MODE_LINEAR : CU_TR_FILTER_MODE_POINT;
  td.mipmapLevelBias = t.mip_bias;
  td.minMipmapLevelClamp = t.min_lod;
  td.maxMipmapLevelClamp = t.max_lod;
  for (int i = 0; i < 4; ++i) td.borderColor[i] = t.border[i];
  CUtexObject tex = 0;
  RGPU_TRY(RGPU_CU(cuTexObjectCreate(&tex, &res, &td, nullptr)));
  return static_cast<uint64_t>(tex);
}

// In the object's own context: a driver may give each context its own values.
Status CudaBackend::destroyTexture(int device, uint64_t texture) {
  DriverApi& api = *api_;
  if (!api.cuTexObjectDestroy) return unavailable("cudaDestroyTextureObject");
  RGPU_TRY(use(device));
  return RGPU_CU(cuTexObjectDestroy(static_cast<CUtexObject>(texture)));
}

Result<uint64_t> CudaBackend::createSurface(int device, uint64_t array, uint32_t level) {
  DriverApi& api = *api_;
  if (!api.cuSurfObjectCreate) return unavailable("cudaCreateSurfaceObject");
  auto l = arrayLevel(array, level);
  if (!l) return l.status();
  RGPU_TRY(use(device));
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_ARRAY;
  res.res.array.hArray = l->second;
  CUsurfObject surf = 0;
  RGPU_TRY(RGPU_CU(cuSurfObjectCreate(&surf, &res)));
  return static_cast<uint64_t>(surf);
}

Status CudaBackend::destroySurface(int device, uint64_t surface) {
  DriverApi& api = *api_;
  if (!api.cuSurfObjectDestroy) return unavailable("cudaDestroySurfaceObject");
  RGPU_TRY(use(device));
  return RGPU_CU(cuSurfObjectDestroy(static_cast<CUsurfObject>(surface)));
}

}  // namespace rgpu::server::cuda
