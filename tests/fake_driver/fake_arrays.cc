// The fake CUDA driver's arrays, 3D copies, and texture and surface objects
// (fake_libcuda.cc says what the fake is; fake_cuda.h its shared state).
#include <algorithm>

#include "tests/fake_driver/fake_cuda.h"

namespace rgpu::fake {

// ---- arrays, texture and surface objects ----
// An array is host memory, its rows packed, counted in its device's memory
// use (cuMemGetInfo) as on a GPU; a mipmapped array one array per level.
// Texture and surface objects are numbers from one pool, the lowest free
// first (a fresh process's first object is 1): one pool for the process, or
// with RGPU_FAKE_CUDA_OBJECT_POOLS=device one per device's context (a
// value then names an object of the current context only). Each is described for the
// interpreter as the sim describes its own (server/sim/ptx/ptx_texture.h),
// so kernels sample and write them; a launch sees the objects as they were
// when it was queued, and faults on an object whose memory is gone.

// An array's elements live in the fake's device memory (its arena), as a
// GPU's do: with RGPU_FAKE_CUDA_VRAM, what one process left in an array's
// memory is what the next one's array there starts with.
struct FakeArray {
  int device = 0;
  size_t width = 1, height = 1, slices = 1, elem = 1;
  CUDA_ARRAY3D_DESCRIPTOR desc{};  // as created (level 0's)
  uint8_t* data = nullptr;
  size_t size = 0;
  ~FakeArray();
};
struct FakeMipmapped {
  std::vector<std::unique_ptr<FakeArray>> levels;
};
// Never destroyed, as the driver state (fake_cuda.h: drv()): what a process
// leaves made is the driver's until it exits.
std::set<FakeArray*>& fakeArrays() {
  static auto* s = new std::set<FakeArray*>;
  return *s;
}
std::set<FakeMipmapped*>& fakeMipmapped() {
  static auto* s = new std::set<FakeMipmapped*>;
  return *s;
}
struct ObjectPool {
  std::set<unsigned long long> handles;
  ptx::Textures table;
  std::shared_ptr<const ptx::Textures> snapshot;  // null: changed since
  unsigned long long lowest_free = 1;             // no handle below it is free
};
std::map<int, ObjectPool>& objectPools() {
  static auto* p = new std::map<int, ObjectPool>;
  return *p;
}
// The pool of `device`'s objects.
ObjectPool& poolOf(int device) { return objectPools()[drv().object_pool_per_device ? device : 0]; }
// The pool of the current context's objects.
ObjectPool& currentPool() { return poolOf(t_ctx ? t_ctx->device : 0); }

std::shared_ptr<const ptx::Textures> texturesLocked(int device) {
  ObjectPool& p = poolOf(device);
  if (!p.snapshot) p.snapshot = std::make_shared<const ptx::Textures>(p.table);
  return p.snapshot;
}

void dropObjectsLocked() { objectPools().clear(); }

// The lowest handle not in use in the current context's pool.
unsigned long long newObjectLocked() {
  ObjectPool& p = currentPool();
  unsigned long long h = p.lowest_free;
  while (p.handles.count(h)) ++h;
  p.lowest_free = h + 1;
  p.handles.insert(h);
  p.snapshot.reset();
  return h;
}

// Bytes per channel.
size_t formatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT8X4: return 1;
    case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X4: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_UNORM_INT16X4: return 2;
    case CU_AD_FORMAT_SNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X4: return 2;
    default: return 4;
  }
}

// The channels a normalised format names (0: any of 1, 2, 4).
unsigned formatChannels(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1: return 1;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2: return 2;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4: return 4;
    default: return 0;
  }
}

std::unique_ptr<FakeArray> makeArray(const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned level) {
  auto a = std::make_unique<FakeArray>();
  const auto dims = rgpu::common::arrayLevel(d->Width, d->Height, d->Depth,
                                             d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP), level);
  a->width = dims.width, a->height = dims.height, a->slices = dims.slices;
  a->elem = formatBytes(d->Format) * d->NumChannels;
  a->desc = *d;
  a->device = t_ctx->device;
  a->size = a->width * a->height * a->slices * a->elem;
  Driver& drv_ = drv();
  auto at = drv_.arena->allocate(std::max<size_t>(a->size, 1));
  if (!at) return nullptr;
  a->data = reinterpret_cast<uint8_t*>(*at);
  if (!drv_.vram) std::memset(a->data, 0, a->size);  // as a GPU's: what was there before
  return a;
}

FakeArray::~FakeArray() {
  if (data) drv().arena->free(reinterpret_cast<uint64_t>(data));
}

// Charges (or, negative, credits) `bytes` to the current device's memory use; false when it does not fit.
bool chargeDevice(int device, int64_t bytes) {
  Driver& d = drv();
  if (bytes > 0 && d.used[device] + static_cast<uint64_t>(bytes) > d.memory) return false;
  d.used[device] += static_cast<uint64_t>(bytes);
  return true;
}

CUresult fakeArray3DCreate(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  ENTER("cuArray3DCreate");
  if (!out || !d || d->Width == 0 || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) ||
      (formatChannels(d->Format) && formatChannels(d->Format) != d->NumChannels))
    return CUDA_ERROR_INVALID_VALUE;
  auto a = makeArray(d, 0);
  if (!a || !chargeDevice(a->device, static_cast<int64_t>(a->size))) return CUDA_ERROR_OUT_OF_MEMORY;
  record("cuArray3DCreate " + std::to_string(d->Width) + "x" + std::to_string(d->Height) + "x" + std::to_string(d->Depth) +
         " flags=" + std::to_string(d->Flags) + " format=" + std::to_string(d->Format) + "x" +
         std::to_string(d->NumChannels));
  *out = reinterpret_cast<CUarray>(a.get());
  fakeArrays().insert(a.release());
  return CUDA_SUCCESS;
}

CUresult fakeArrayDestroy(CUarray a) {
  ENTER("cuArrayDestroy");
  auto* fa = reinterpret_cast<FakeArray*>(a);
  if (!fakeArrays().count(fa)) return CUDA_ERROR_INVALID_HANDLE;
  synchronizeAll(lock);  // work queued so far may use it
  fakeArrays().erase(fa);
  chargeDevice(fa->device, -static_cast<int64_t>(fa->size));
  delete fa;
  record("cuArrayDestroy");
  return CUDA_SUCCESS;
}

CUresult fakeMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned levels) {
  ENTER("cuMipmappedArrayCreate");
  if (!out || !d || d->Width == 0 || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  auto m = std::make_unique<FakeMipmapped>();
  int64_t bytes = 0;
  for (unsigned l = 0; l < levels; ++l) {
    m->levels.push_back(makeArray(d, l));
    if (!m->levels.back()) return CUDA_ERROR_OUT_OF_MEMORY;
    bytes += static_cast<int64_t>(m->levels.back()->size);
  }
  if (!chargeDevice(t_ctx->device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  record("cuMipmappedArrayCreate levels=" + std::to_string(levels));
  *out = reinterpret_cast<CUmipmappedArray>(m.get());
  fakeMipmapped().insert(m.release());
  return CUDA_SUCCESS;
}

CUresult fakeMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray m, unsigned level) {
  ENTER("cuMipmappedArrayGetLevel");
  auto* fm = reinterpret_cast<FakeMipmapped*>(m);
  if (!fakeMipmapped().count(fm) || level >= fm->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUarray>(fm->levels[level].get());
  return CUDA_SUCCESS;
}

CUresult fakeMipmappedArrayDestroy(CUmipmappedArray m) {
  ENTER("cuMipmappedArrayDestroy");
  auto* fm = reinterpret_cast<FakeMipmapped*>(m);
  if (!fakeMipmapped().count(fm)) return CUDA_ERROR_INVALID_HANDLE;
  synchronizeAll(lock);
  fakeMipmapped().erase(fm);
  for (auto& l : fm->levels) chargeDevice(l->device, -static_cast<int64_t>(l->size));
  delete fm;
  record("cuMipmappedArrayDestroy");
  return CUDA_SUCCESS;
}

// A level array the fake made (plain, or a level of a mipmapped array). Lock held.
FakeArray* knownArray(CUarray a) {
  auto* fa = reinterpret_cast<FakeArray*>(a);
  if (fakeArrays().count(fa)) return fa;
  for (FakeMipmapped* m : fakeMipmapped())
    for (auto& l : m->levels)
      if (l.get() == fa) return fa;
  return nullptr;
}

CUresult fakeMemcpy3DAsync(const CUDA_MEMCPY3D* m, CUstream s) {
  ENTER("cuMemcpy3DAsync");
  if (!m || !knownStream(s)) return CUDA_ERROR_INVALID_VALUE;
  struct End {
    uint8_t* base;
    size_t pitch, slice;
  };
  const size_t w = m->WidthInBytes, h = m->Height, dd = m->Depth;
  auto end = [&](CUmemorytype type, const void* host, CUdeviceptr dev, CUarray arr, size_t x, size_t y, size_t z,
                 size_t pitch, size_t height, End& e) {
    if (type == CU_MEMORYTYPE_ARRAY) {
      FakeArray* a = knownArray(arr);
      if (!a || x % a->elem || x + w > a->width * a->elem || y + h > a->height || z + dd > a->slices) return false;
      e = {a->data + (z * a->height + y) * a->width * a->elem + x, a->width * a->elem, a->width * a->elem * a->height};
      return true;
    }
    uint8_t* b = type == CU_MEMORYTYPE_HOST ? static_cast<uint8_t*>(const_cast<void*>(host)) : reinterpret_cast<uint8_t*>(dev);
    e = {b + (z * height + y) * pitch + x, pitch, pitch * height};
    if (type == CU_MEMORYTYPE_DEVICE && !deviceRange(reinterpret_cast<uint64_t>(e.base), (dd - 1) * e.slice + (h - 1) * pitch + w))
      return false;
    return true;
  };
  End src{}, dst{};
  if (!end(m->srcMemoryType, m->srcHost, m->srcDevice, m->srcArray, m->srcXInBytes, m->srcY, m->srcZ, m->srcPitch,
           m->srcHeight, src) ||
      !end(m->dstMemoryType, m->dstHost, m->dstDevice, m->dstArray, m->dstXInBytes, m->dstY, m->dstZ, m->dstPitch,
           m->dstHeight, dst))
    return CUDA_ERROR_INVALID_VALUE;
  record("cuMemcpy3DAsync " + std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(dd) +
         (streamOf(s)->capturing ? " (captured)" : ""));
  enqueue(streamOf(s), [=] {
    for (size_t z = 0; z < dd; ++z)
      for (size_t y = 0; y < h; ++y) std::memmove(dst.base + z * dst.slice + y * dst.pitch, src.base + z * src.slice + y * src.pitch, w);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

void addArrayRanges(ptx::MemoryRanges& memory) {
  auto add = [&](const FakeArray& a) {
    const auto at = reinterpret_cast<uint64_t>(a.data);
    memory.emplace_back(at, at + a.size);
  };
  for (FakeArray* a : fakeArrays()) add(*a);
  for (FakeMipmapped* m : fakeMipmapped())
    for (auto& l : m->levels) add(*l);
  std::sort(memory.begin(), memory.end());
}

ptx::TexFormat texFormat(CUarray_format f, unsigned channels) {
  ptx::TexFormat t;
  t.channels = static_cast<uint8_t>(channels);
  t.bits = static_cast<uint8_t>(formatBytes(f) * 8);
  switch (f) {
    case CU_AD_FORMAT_HALF: case CU_AD_FORMAT_FLOAT: t.kind = ptx::kFormatFloat; break;
    case CU_AD_FORMAT_SIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X4:
      t.kind = ptx::kFormatSigned; break;
    default: t.kind = ptx::kFormatUnsigned;
  }
  return t;
}

// The image of an array's levels (one level: a plain array, or one level of a mipmapped one).
ptx::TexImage imageOf(const std::vector<const FakeArray*>& levels) {
  const CUDA_ARRAY3D_DESCRIPTOR& d = levels[0]->desc;
  const bool layered = d.Flags & CUDA_ARRAY3D_LAYERED, cube = d.Flags & CUDA_ARRAY3D_CUBEMAP;
  ptx::TexImage img;
  img.shape = ptx::arrayShape(layered, cube, d.Height, d.Depth);
  img.format = texFormat(d.Format, d.NumChannels);
  if (layered || cube) img.layers = static_cast<uint32_t>(cube ? d.Depth / 6 : d.Depth);
  for (const FakeArray* a : levels) {
    ptx::TexLevel l;
    l.base = reinterpret_cast<uint64_t>(a->data);
    l.width = static_cast<uint32_t>(a->width);
    l.height = static_cast<uint32_t>(a->height);
    l.depth = static_cast<uint32_t>(a->slices);
    l.pitch = a->width * a->elem;
    l.slice = l.pitch * a->height;
    img.levels.push_back(l);
  }
  return img;
}

CUresult fakeTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* td,
                             const CUDA_RESOURCE_VIEW_DESC* view) {
  ENTER("cuTexObjectCreate");
  if (!out || !res || !td || view) return CUDA_ERROR_INVALID_VALUE;
  ptx::TexObject o;
  switch (res->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      const FakeArray* a = knownArray(res->res.array.hArray);
      if (!a) return CUDA_ERROR_INVALID_HANDLE;
      o.image = imageOf({a});
      break;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      auto* m = reinterpret_cast<FakeMipmapped*>(res->res.mipmap.hMipmappedArray);
      if (!fakeMipmapped().count(m)) return CUDA_ERROR_INVALID_HANDLE;
      std::vector<const FakeArray*> levels;
      for (auto& l : m->levels) levels.push_back(l.get());
      o.image = imageOf(levels);
      break;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
      const auto& l = res->res.linear;
      o.image.format = texFormat(l.format, l.numChannels);
      const uint64_t e = o.image.format.bytes();
      if (!e || l.sizeInBytes < e) return CUDA_ERROR_INVALID_VALUE;
      o.image.levels = {{l.devPtr, static_cast<uint32_t>(l.sizeInBytes / e), 1, 1, l.sizeInBytes, l.sizeInBytes}};
      break;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      const auto& p = res->res.pitch2D;
      o.image.shape = ptx::TexShape::k2D;
      o.image.format = texFormat(p.format, p.numChannels);
      o.image.levels = {{p.devPtr, static_cast<uint32_t>(p.width), static_cast<uint32_t>(p.height), 1, p.pitchInBytes,
                         p.pitchInBytes * p.height}};
      break;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  ptx::TexSampler& s = o.sampler;
  for (int i = 0; i < 3; ++i) s.address[i] = static_cast<uint8_t>(td->addressMode[i]);
  s.linear = td->filterMode == CU_TR_FILTER_MODE_LINEAR;
  s.normalized_read = !(td->flags & CU_TRSF_READ_AS_INTEGER);
  s.normalized_coords = td->flags & CU_TRSF_NORMALIZED_COORDINATES;
  s.srgb = td->flags & CU_TRSF_SRGB;
  for (int i = 0; i < 4; ++i) s.border[i] = td->borderColor[i];
  s.mip_linear = td->mipmapFilterMode == CU_TR_FILTER_MODE_LINEAR;
  s.mip_bias = td->mipmapLevelBias;
  s.min_lod = td->minMipmapLevelClamp;
  s.max_lod = td->maxMipmapLevelClamp;
  *out = newObjectLocked();
  currentPool().table.textures[*out] = std::move(o);
  record("cuTexObjectCreate resType=" + std::to_string(res->resType) + " flags=" + std::to_string(td->flags) +
         " filter=" + std::to_string(td->filterMode));
  return CUDA_SUCCESS;
}

CUresult fakeObjectDestroy(unsigned long long o, const char* name) {
  ENTER(name);
  ObjectPool& p = currentPool();
  if (!p.handles.erase(o)) return CUDA_ERROR_INVALID_VALUE;
  p.lowest_free = std::min(p.lowest_free, o);
  p.table.textures.erase(o);
  p.table.surfaces.erase(o);
  p.snapshot.reset();
  record(name);
  return CUDA_SUCCESS;
}
CUresult fakeTexObjectDestroy(CUtexObject o) { return fakeObjectDestroy(o, "cuTexObjectDestroy"); }
CUresult fakeSurfObjectDestroy(CUsurfObject o) { return fakeObjectDestroy(o, "cuSurfObjectDestroy"); }

CUresult fakeSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* res) {
  ENTER("cuSurfObjectCreate");
  if (!out || !res || res->resType != CU_RESOURCE_TYPE_ARRAY || !knownArray(res->res.array.hArray))
    return CUDA_ERROR_INVALID_VALUE;
  *out = newObjectLocked();
  currentPool().table.surfaces[*out] = imageOf({knownArray(res->res.array.hArray)});
  record("cuSurfObjectCreate");
  return CUDA_SUCCESS;
}

const std::map<std::string, void*>& arrayEntryPoints() {
  static const std::map<std::string, void*> t = {
      {"cuArray3DCreate", reinterpret_cast<void*>(&fakeArray3DCreate)},
      {"cuArrayDestroy", reinterpret_cast<void*>(&fakeArrayDestroy)},
      {"cuMipmappedArrayCreate", reinterpret_cast<void*>(&fakeMipmappedArrayCreate)},
      {"cuMipmappedArrayGetLevel", reinterpret_cast<void*>(&fakeMipmappedArrayGetLevel)},
      {"cuMipmappedArrayDestroy", reinterpret_cast<void*>(&fakeMipmappedArrayDestroy)},
      {"cuMemcpy3DAsync", reinterpret_cast<void*>(&fakeMemcpy3DAsync)},
      {"cuTexObjectCreate", reinterpret_cast<void*>(&fakeTexObjectCreate)},
      {"cuTexObjectDestroy", reinterpret_cast<void*>(&fakeTexObjectDestroy)},
      {"cuSurfObjectCreate", reinterpret_cast<void*>(&fakeSurfObjectCreate)},
      {"cuSurfObjectDestroy", reinterpret_cast<void*>(&fakeSurfObjectDestroy)},
  };
  return t;
}

}  // namespace rgpu::fake
