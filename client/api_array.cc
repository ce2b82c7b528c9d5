// CUDA arrays: allocation, information, and copies to, from and between
// arrays and (3D) pitched memory (client/arrays.h).
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "client/api_util.h"
#include "client/arrays.h"
#include "client/graph.h"
#include "client/managed.h"
#include "common/array_shape.h"
#include "protocol/frame.h"

namespace rgpu::client {

namespace {

struct Mipmapped {
  uint64_t handle = 0;
  int device = 0;
  cudaChannelFormatDesc desc{};
  cudaExtent extent{};
  unsigned flags = 0;
  uint32_t levels = 0;
  std::vector<std::unique_ptr<ArrayObject>> level_arrays;  // made by cudaGetMipmappedArrayLevel
};

std::mutex& registryMutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<const void*, std::unique_ptr<ArrayObject>>& arrays() {
  static auto* m = new std::unordered_map<const void*, std::unique_ptr<ArrayObject>>;
  return *m;
}
std::unordered_map<const void*, std::unique_ptr<Mipmapped>>& mipmapped() {
  static auto* m = new std::unordered_map<const void*, std::unique_ptr<Mipmapped>>;
  return *m;
}
std::unordered_map<const void*, ArrayObject*>& levelArrays() {
  static auto* m = new std::unordered_map<const void*, ArrayObject*>;
  return *m;
}

uint32_t elementBytes(const cudaChannelFormatDesc& d) {
  return static_cast<uint32_t>((std::max(d.x, 0) + std::max(d.y, 0) + std::max(d.z, 0) + std::max(d.w, 0)) / 8);
}

// Level `l` of an array of `extent` (elements; CUDA's zeros for missing dimensions).
void levelShape(cudaExtent e, unsigned flags, uint32_t l, ArrayObject& a) {
  const bool layered = flags & (cudaArrayLayered | cudaArrayCubemap);
  const common::ArrayLevelDims d = common::arrayLevel(e.width, e.height, e.depth, layered, l);
  a.width = d.width, a.rows = d.height, a.slices = d.slices;
  a.extent = {a.width, e.height ? a.rows : 0, e.depth ? (layered ? e.depth : a.slices) : 0};
}

Result<uint64_t> createArray(const cudaChannelFormatDesc* desc, cudaExtent extent, unsigned flags, uint32_t levels,
                             int device) {
  RGPU_TRY(needPtr(desc, "desc"));
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initArrayCreate();
  m.setDevice(device);
  auto f = m.initFormat();
  f.setX(desc->x), f.setY(desc->y), f.setZ(desc->z), f.setW(desc->w), f.setKind(static_cast<int32_t>(desc->f));
  m.setWidth(extent.width);
  m.setHeight(extent.height);
  m.setDepth(extent.depth);
  m.setFlags(flags);
  m.setLevels(levels);
  auto r = rt().call(msg);
  if (!r) return r.status();
  return static_cast<uint64_t>(r->reader().getValue());
}

Status destroyArray(uint64_t handle, int device) {
  common::CallMessage msg(32);
  msg.initRoot<wire::Request>().initArrayDestroy().setHandle(handle);
  auto r = rt().callOn(device, msg);  // as cudaFreeArray: after the work that may use it
  return r ? Status::ok() : r.status();
}

Status allocate(cudaArray_t* out, const cudaChannelFormatDesc* desc, cudaExtent extent, unsigned flags) {
  RGPU_TRY(needPtr(out, "array"));
  RGPU_TRY(needPtr(desc, "desc"));
  const int dev = rt().currentDevice();
  auto h = createArray(desc, extent, flags, 0, dev);
  if (!h) return h.status();
  auto a = std::make_unique<ArrayObject>();
  a->handle = *h;
  a->device = dev;
  a->desc = *desc;
  a->flags = flags;
  a->elem = elementBytes(*desc);
  levelShape(extent, flags, 0, *a);
  a->extent = extent;
  *out = reinterpret_cast<cudaArray_t>(a.get());
  std::lock_guard lock(registryMutex());
  arrays()[a.get()] = std::move(a);
  return Status::ok();
}

// Whether `p` is device memory (after mapped host memory's translation to its device alias).
bool onDevice(void*& p) {
  p = const_cast<void*>(ManagedMemory::get().deviceSide(p));
  return rt().classify(p) == MemKind::kDevice;
}

void setSide(wire::CopySide::Builder b, const CopyEnd& e, bool device) {
  if (e.array) b.setArray(e.array->handle), b.setLevel(e.array->level);
  else if (device) b.setDevice(reinterpret_cast<uint64_t>(e.ptr)), b.setPitch(e.pitch), b.setRows(e.rows);
  else b.setHost();
  b.setX(e.x);
  b.setY(e.y);
  b.setZ(e.z);
}

char* hostAt(const CopyEnd& e, size_t y, size_t z) {
  return static_cast<char*>(e.ptr) + (z * e.rows + y) * e.pitch + e.x;
}

}  // namespace

void forgetDeviceArrays(int device) {
  std::lock_guard lock(registryMutex());
  std::erase_if(arrays(), [&](const auto& a) { return a.second->device == device; });
  std::erase_if(mipmapped(), [&](const auto& m) {
    if (m.second->device != device) return false;
    for (auto& l : m.second->level_arrays) levelArrays().erase(l.get());
    return true;
  });
}

Result<ArrayObject*> arrayOf(const void* handle) {
  std::lock_guard lock(registryMutex());
  if (auto it = arrays().find(handle); it != arrays().end()) return it->second.get();
  if (auto it = levelArrays().find(handle); it != levelArrays().end()) return it->second;
  return Status(err::kInvalidResourceHandle, "not a CUDA array of this process");
}

Status copy3D(const CopyEnd& src_in, const CopyEnd& dst_in, size_t width, size_t height, size_t depth,
              cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return Status(err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind");
  if (width == 0 || height == 0 || depth == 0) return Status::ok();
  CopyEnd src = src_in, dst = dst_in;
  if (!src.array) RGPU_TRY(needPtr(src.ptr, "source"));
  if (!dst.array) RGPU_TRY(needPtr(dst.ptr, "destination"));
  const bool sdev = src.array || onDevice(src.ptr), ddev = dst.array || onDevice(dst.ptr);
  for (const CopyEnd* e : {&src, &dst})
    if (!e->array && ((height > 1 && e->pitch < e->x + width) || (depth > 1 && e->rows < e->y + height)))
      return Status(err::kInvalidPitchValue, "a pitch narrower than the copy's rows, or too few rows per slice");
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  if (Status c; async && capturesActive() && captureNodeOn(*s, [&]() -> Result<NodeParams> {
        auto p = copyParams(src, dst, width, height, depth, kind);
        if (!p) return p.status();
        return memcpyParams(*p);
      }, &c, nullptr))
    return c;  // a copy node of the graph being captured
  if (!sdev && !ddev) {  // host to host: the client's own
    if (async) RGPU_TRY(streamSyncImpl(stream, ptsz));
    for (size_t z = 0; z < depth; ++z)
      for (size_t y = 0; y < height; ++y) std::memmove(hostAt(dst, dst.y + y, dst.z + z), hostAt(src, src.y + y, src.z + z), width);
    return Status::ok();
  }
  const bool host = !sdev || !ddev;
  const uint64_t limit = protocol::kMaxBulkBytes;
  if (host && uint64_t{width} * height * depth > limit) {
    // Pieces that fit one frame each: slices, then rows, then (a row past the limit) columns.
    auto piece = [&](size_t dx, size_t dy, size_t dz, size_t w, size_t h, size_t d) {
      CopyEnd a = src, b = dst;
      a.x += dx, a.y += dy, a.z += dz, b.x += dx, b.y += dy, b.z += dz;
      return copy3D(a, b, w, h, d, kind, stream, async, ptsz);
    };
    if (depth > 1) {
      for (size_t z = 0; z < depth; ++z) RGPU_TRY(piece(0, 0, z, width, height, 1));
    } else if (height > 1) {
      const size_t rows = std::max<size_t>(1, limit / width);
      for (size_t y = 0; y < height; y += rows) RGPU_TRY(piece(0, y, 0, width, std::min(rows, height - y), 1));
    } else {
      const size_t cols = limit / 16 * 16;
      for (size_t x = 0; x < width; x += cols) RGPU_TRY(piece(x, 0, 0, std::min(cols, width - x), 1, 1));
    }
    return Status::ok();
  }
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initCopy3D();
  fillCopy3D(m, src, sdev, dst, ddev, width, height, depth);
  setStream(m.initStream(), *s);
  const size_t packed = width * height * depth;
  if (!sdev) {
    std::vector<char> bytes(packed);
    for (size_t z = 0; z < depth; ++z)
      for (size_t y = 0; y < height; ++y)
        std::memcpy(bytes.data() + (z * height + y) * width, hostAt(src, src.y + y, src.z + z), width);
    if (async) return rt().post(msg, bytes.data(), packed);
    auto r = rt().call(msg, bytes.data(), packed);
    return r ? Status::ok() : r.status();
  }
  if (!ddev) {
    std::vector<char> bytes(packed);
    auto r = rt().call(msg, nullptr, 0, bytes.data(), packed);
    if (!r) return r.status();
    for (size_t z = 0; z < depth; ++z)
      for (size_t y = 0; y < height; ++y)
        std::memcpy(hostAt(dst, dst.y + y, dst.z + z), bytes.data() + (z * height + y) * width, width);
    return Status::ok();
  }
  return rt().post(msg);
}

void fillCopy3D(wire::Copy3D::Builder m, const CopyEnd& src, bool src_dev, const CopyEnd& dst, bool dst_dev,
                size_t width, size_t height, size_t depth) {
  setSide(m.initSrc(), src, src_dev);
  setSide(m.initDst(), dst, dst_dev);
  m.setWidth(width);
  m.setHeight(height);
  m.setDepth(depth);
}

Result<cudaMemcpy3DParms> copyParams(const CopyEnd& src, const CopyEnd& dst, size_t width, size_t height, size_t depth,
                                     cudaMemcpyKind kind) {
  const uint32_t unit = src.array ? src.array->elem : dst.array ? dst.array->elem : 1;
  if (width % unit) return Status(err::kInvalidValue, "an array copy's width is not whole elements");
  cudaMemcpy3DParms p{};
  auto side = [&](const CopyEnd& e, cudaArray_t& a, cudaPitchedPtr& ptr, cudaPos& pos) {
    if (e.array) a = reinterpret_cast<cudaArray_t>(const_cast<ArrayObject*>(e.array));
    else ptr = cudaPitchedPtr{e.ptr, e.pitch, width, e.rows};
    pos = e.array ? cudaPos{e.x / unit, e.y, e.z} : cudaPos{e.x, e.y, e.z};
  };
  side(src, p.srcArray, p.srcPtr, p.srcPos);
  side(dst, p.dstArray, p.dstPtr, p.dstPos);
  p.extent = cudaExtent{width / unit, height, depth};
  p.kind = kind;
  return p;
}

Status copyEnds(const cudaMemcpy3DParms& p, CopyEnd* src, CopyEnd* dst, size_t* width) {
  if (p.srcArray && p.srcPtr.ptr) return Status(err::kInvalidValue, "both srcArray and srcPtr are set");
  if (p.dstArray && p.dstPtr.ptr) return Status(err::kInvalidValue, "both dstArray and dstPtr are set");
  const ArrayObject* sa = nullptr;
  const ArrayObject* da = nullptr;
  if (p.srcArray) {
    auto a = arrayOf(p.srcArray);
    if (!a) return a.status();
    sa = *a;
  }
  if (p.dstArray) {
    auto a = arrayOf(p.dstArray);
    if (!a) return a.status();
    da = *a;
  }
  if (sa && da && sa->elem != da->elem) return Status(err::kInvalidValue, "arrays of different element sizes");
  const size_t unit = sa ? sa->elem : da ? da->elem : 1;
  auto end = [](const ArrayObject* a, const cudaPitchedPtr& ptr, const cudaPos& pos) {
    CopyEnd e;
    if (a) {
      e.array = a;
      e.x = pos.x * a->elem;
    } else {
      e.ptr = ptr.ptr;
      e.pitch = ptr.pitch, e.rows = ptr.ysize;
      e.x = pos.x;
    }
    e.y = pos.y, e.z = pos.z;
    return e;
  };
  *src = end(sa, p.srcPtr, p.srcPos);
  *dst = end(da, p.dstPtr, p.dstPos);
  *width = p.extent.width * unit;
  return Status::ok();
}

}  // namespace rgpu::client

using namespace rgpu::client;
using rgpu::Status;
namespace err = rgpu::err;

namespace {

CopyEnd arrayEnd(const ArrayObject* a, size_t x_bytes, size_t y, size_t z = 0) {
  CopyEnd e;
  e.array = a;
  e.x = x_bytes, e.y = y, e.z = z;
  return e;
}
CopyEnd memoryEnd(const void* p, size_t pitch, size_t rows = 0) {
  CopyEnd e;
  e.ptr = const_cast<void*>(p);
  e.pitch = pitch, e.rows = rows;
  return e;
}

Status toArray2D(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch, size_t width,
                 size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz) {
  auto a = arrayOf(dst);
  if (!a) return a.status();
  if (height > 1 && spitch < width) return Status(err::kInvalidPitchValue, "spitch is narrower than width");
  return copy3D(memoryEnd(src, spitch), arrayEnd(*a, wOffset, hOffset), width, height, 1, kind, stream, async, ptsz);
}
Status fromArray2D(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
                   size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz) {
  auto a = arrayOf(src);
  if (!a) return a.status();
  if (height > 1 && dpitch < width) return Status(err::kInvalidPitchValue, "dpitch is narrower than width");
  return copy3D(arrayEnd(*a, wOffset, hOffset), memoryEnd(dst, dpitch), width, height, 1, kind, stream, async, ptsz);
}
Status arrayToArray2D(cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws, size_t hs, size_t width,
                      size_t height, cudaMemcpyKind kind, bool ptsz) {
  auto d = arrayOf(dst);
  if (!d) return d.status();
  auto s = arrayOf(src);
  if (!s) return s.status();
  return copy3D(arrayEnd(*s, ws, hs), arrayEnd(*d, wd, hd), width, height, 1, kind, nullptr, true, ptsz);
}

// The legacy 1D forms: `count` bytes from (wOffset, hOffset) on, row after row.
Status linearArrayCopy(const ArrayObject* a, size_t wOffset, size_t hOffset, void* host, size_t count, bool to_array,
                       cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz) {
  const size_t row = a->width * a->elem;
  size_t done = 0, x = wOffset, y = hOffset;
  while (done < count) {
    size_t n, rows = 1;
    if (x == 0 && count - done >= row) {
      rows = (count - done) / row;
      n = row;
    } else {
      n = std::min(count - done, x < row ? row - x : count - done);
    }
    CopyEnd mem = memoryEnd(static_cast<char*>(host) + done, row);
    CopyEnd arr = arrayEnd(a, x, y);
    RGPU_TRY(to_array ? copy3D(mem, arr, n, rows, 1, kind, stream, async, ptsz)
                      : copy3D(arr, mem, n, rows, 1, kind, stream, async, ptsz));
    done += n * rows;
    x += n;
    if (rows > 1 || x >= row) y += rows, x = 0;
  }
  return Status::ok();
}

Status memcpy3D(const cudaMemcpy3DParms* p, cudaStream_t stream, bool async, bool ptsz) {
  if (!p) return Status(err::kInvalidValue, "the copy parameters are NULL");
  CopyEnd src, dst;
  size_t width = 0;
  RGPU_TRY(copyEnds(*p, &src, &dst, &width));
  return copy3D(src, dst, width, p->extent.height, p->extent.depth, p->kind, stream, async, ptsz);
}

}  // namespace

// ---- allocation and information -------------------------------------------------------

RGPU_EXPORT cudaError_t cudaMallocArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc, size_t width,
                                        size_t height, unsigned int flags) {
  return guarded([&] { return allocate(array, desc, cudaExtent{width, height, 0}, flags); });
}

RGPU_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                                          struct cudaExtent extent, unsigned int flags) {
  return guarded([&] { return allocate(array, desc, extent, flags); });
}

RGPU_EXPORT cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* out, const struct cudaChannelFormatDesc* desc,
                                                 struct cudaExtent extent, unsigned int numLevels, unsigned int flags) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(out, "mipmappedArray"));
    RGPU_TRY(needPtr(desc, "desc"));
    if (numLevels == 0) return Status(err::kInvalidValue, "a mipmapped array has at least one level");
    const int dev = rt().currentDevice();
    auto h = createArray(desc, extent, flags, numLevels, dev);
    if (!h) return h.status();
    auto m = std::make_unique<Mipmapped>();
    m->handle = *h;
    m->device = dev;
    m->desc = *desc;
    m->extent = extent;
    m->flags = flags;
    m->levels = numLevels;
    *out = reinterpret_cast<cudaMipmappedArray_t>(m.get());
    std::lock_guard lock(registryMutex());
    mipmapped()[m.get()] = std::move(m);
    return Status::ok();
  });
}

namespace rgpu::client {
Result<ArrayObject*> mipmappedLevel(const void* mip, uint32_t level) {
    std::lock_guard lock(registryMutex());
    auto it = mipmapped().find(mip);
    if (it == mipmapped().end()) return Status(err::kInvalidResourceHandle, "not a mipmapped array of this process");
    Mipmapped& m = *it->second;
    if (level >= m.levels) return Status(err::kInvalidValue, "the mipmapped array has no level " + std::to_string(level));
    for (auto& l : m.level_arrays)
      if (l->level == level) return l.get();
    auto a = std::make_unique<ArrayObject>();
    a->handle = m.handle;
    a->level = level;
    a->device = m.device;
    a->desc = m.desc;
    a->flags = m.flags;
    a->elem = elementBytes(m.desc);
    a->level_of_mipmapped = true;
    levelShape(m.extent, m.flags, level, *a);
    ArrayObject* out = a.get();
    levelArrays()[out] = out;
    m.level_arrays.push_back(std::move(a));
    return out;
}
}  // namespace rgpu::client

RGPU_EXPORT cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* levelArray, cudaMipmappedArray_const_t mip,
                                                   unsigned int level) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(levelArray, "levelArray"));
    auto a = mipmappedLevel(mip, level);
    if (!a) return a.status();
    *levelArray = reinterpret_cast<cudaArray_t>(*a);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaFreeArray(cudaArray_t array) {
  return guarded([&]() -> Status {
    if (!array) return Status::ok();
    std::unique_ptr<ArrayObject> a;
    {
      std::lock_guard lock(registryMutex());
      auto it = arrays().find(array);
      if (it == arrays().end()) return Status(err::kInvalidResourceHandle, "not a CUDA array of this process");
      a = std::move(it->second);
      arrays().erase(it);
    }
    return destroyArray(a->handle, a->device);
  });
}

RGPU_EXPORT cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mip) {
  return guarded([&]() -> Status {
    if (!mip) return Status::ok();
    std::unique_ptr<Mipmapped> m;
    {
      std::lock_guard lock(registryMutex());
      auto it = mipmapped().find(mip);
      if (it == mipmapped().end()) return Status(err::kInvalidResourceHandle, "not a mipmapped array of this process");
      m = std::move(it->second);
      mipmapped().erase(it);
      for (auto& l : m->level_arrays) levelArrays().erase(l.get());
    }
    return destroyArray(m->handle, m->device);
  });
}

RGPU_EXPORT cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc* desc, struct cudaExtent* extent,
                                         unsigned int* flags, cudaArray_t array) {
  return guarded([&]() -> Status {
    auto a = arrayOf(array);
    if (!a) return a.status();
    if (desc) *desc = (*a)->desc;
    if (extent) *extent = (*a)->extent;
    if (flags) *flags = (*a)->flags;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc* desc, cudaArray_const_t array) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(desc, "desc"));
    auto a = arrayOf(array);
    if (!a) return a.status();
    *desc = (*a)->desc;
    return Status::ok();
  });
}

// ---- copies -------------------------------------------------------------------------------

#define RGPU_TO_ARRAY_2D(NAME, ASYNC, PTSZ)                                                                      \
  RGPU_EXPORT cudaError_t NAME(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch, \
                               size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {    \
    return guarded([&] { return toArray2D(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, ASYNC, PTSZ); }); \
  }
RGPU_TO_ARRAY_2D(cudaMemcpy2DToArrayAsync, true, false)
RGPU_TO_ARRAY_2D(cudaMemcpy2DToArrayAsync_ptsz, true, true)
RGPU_EXPORT cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                            size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return toArray2D(dst, wOffset, hOffset, src, spitch, width, height, kind, nullptr, false, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                                 size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return toArray2D(dst, wOffset, hOffset, src, spitch, width, height, kind, nullptr, false, true); });
}

#define RGPU_FROM_ARRAY_2D(NAME, ASYNC, PTSZ)                                                                   \
  RGPU_EXPORT cudaError_t NAME(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, \
                               size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {   \
    return guarded([&] { return fromArray2D(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, ASYNC, PTSZ); }); \
  }
RGPU_FROM_ARRAY_2D(cudaMemcpy2DFromArrayAsync, true, false)
RGPU_FROM_ARRAY_2D(cudaMemcpy2DFromArrayAsync_ptsz, true, true)
RGPU_EXPORT cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                              size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return fromArray2D(dst, dpitch, src, wOffset, hOffset, width, height, kind, nullptr, false, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy2DFromArray_ptds(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                                   size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return fromArray2D(dst, dpitch, src, wOffset, hOffset, width, height, kind, nullptr, false, true); });
}

RGPU_EXPORT cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                 cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                                 size_t width, size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return arrayToArray2D(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                      cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                                      size_t width, size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return arrayToArray2D(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, true); });
}

// The deprecated 1D forms CUDA 13 still exports.
#define RGPU_LINEAR_TO(NAME, ASYNC, PTSZ, ...)                                                                   \
  RGPU_EXPORT cudaError_t NAME(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,  \
                               enum cudaMemcpyKind kind __VA_ARGS__) {                                          \
    return guarded([&]() -> Status {                                                                            \
      auto a = arrayOf(dst);                                                                                    \
      if (!a) return a.status();                                                                                \
      return linearArrayCopy(*a, wOffset, hOffset, const_cast<void*>(src), count, true, kind, STREAM, ASYNC, PTSZ); \
    });                                                                                                         \
  }
#define RGPU_LINEAR_FROM(NAME, ASYNC, PTSZ, ...)                                                                 \
  RGPU_EXPORT cudaError_t NAME(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,  \
                               enum cudaMemcpyKind kind __VA_ARGS__) {                                          \
    return guarded([&]() -> Status {                                                                            \
      auto a = arrayOf(src);                                                                                    \
      if (!a) return a.status();                                                                                \
      return linearArrayCopy(*a, wOffset, hOffset, dst, count, false, kind, STREAM, ASYNC, PTSZ);              \
    });                                                                                                         \
  }
#define STREAM nullptr
RGPU_LINEAR_TO(cudaMemcpyToArray, false, false)
RGPU_LINEAR_TO(cudaMemcpyToArray_ptds, false, true)
RGPU_LINEAR_FROM(cudaMemcpyFromArray, false, false)
RGPU_LINEAR_FROM(cudaMemcpyFromArray_ptds, false, true)
#undef STREAM
#define STREAM stream
RGPU_LINEAR_TO(cudaMemcpyToArrayAsync, true, false, , cudaStream_t stream)
RGPU_LINEAR_TO(cudaMemcpyToArrayAsync_ptsz, true, true, , cudaStream_t stream)
RGPU_LINEAR_FROM(cudaMemcpyFromArrayAsync, true, false, , cudaStream_t stream)
RGPU_LINEAR_FROM(cudaMemcpyFromArrayAsync_ptsz, true, true, , cudaStream_t stream)
#undef STREAM

RGPU_EXPORT cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                               cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t count,
                                               enum cudaMemcpyKind kind) {
  return guarded([&] { return arrayToArray2D(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, 1, kind, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                    cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                                    size_t count, enum cudaMemcpyKind kind) {
  return guarded([&] { return arrayToArray2D(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, 1, kind, true); });
}

RGPU_EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms* p) {
  return guarded([&] { return memcpy3D(p, nullptr, false, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms* p) {
  return guarded([&] { return memcpy3D(p, nullptr, false, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t stream) {
  return guarded([&] { return memcpy3D(p, stream, true, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms* p, cudaStream_t stream) {
  return guarded([&] { return memcpy3D(p, stream, true, true); });
}
