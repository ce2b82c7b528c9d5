#include "server/checkpoint/device_image.h"

#include <xxhash.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <tuple>

#include "common/log.h"
#include "server/backend/array_table.h"

namespace rgpu::server {
namespace {

constexpr uint32_t kImageMagic = 0x48444b43;  // "CKDH" (modules and arrays with their placement order)

// Waits on a backend callback from the calling thread.
class Completion {
 public:
  void set(Status s) {
    std::lock_guard lock(mu_);
    status_ = std::move(s);
    done_ = true;
    cv_.notify_all();
  }
  Status wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    done_ = false;
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

// The device memory ranges the image's bytes come from, in the order written.
// An array the driver keeps (base 0) is a range of its packed bytes instead.
struct Range {
  int32_t device;
  DevPtr at;
  uint64_t size;
  uint64_t array = 0;  // not 0: [0, size) of this array's packed bytes (Backend::readArray)
};
std::vector<Range> rangesOf(const DeviceImage& image) {
  std::vector<Range> out;
  for (auto& a : image.allocations) out.push_back({a.device, a.base, a.size});
  for (auto& a : image.arrays) out.push_back({a.spec.device, a.base, a.size, a.base ? 0 : a.handle});
  for (auto& m : image.modules)
    for (auto& g : m.globals)
      if (g.size) out.push_back({m.device, g.addr, g.size});
  for (auto& h : image.heaps)
    if (h.base) out.push_back({h.device, h.base, h.limit});
  for (auto& c : image.cond_handles) out.push_back({c.device, c.handle, sizeof(uint32_t)});
  return out;
}

using SliceHashes = std::vector<std::array<uint64_t, 2>>;

std::array<uint64_t, 2> sliceHash(const uint8_t* data, uint64_t n) {
  XXH128_hash_t h = XXH3_128bits(data, n);
  return {h.low64, h.high64};
}

// A range's bytes, in pieces, each slice after a word: 0, the bytes follow;
// 1, they are what the pre-copy base holds (`hashes`, the base's slices of
// this range; null: none). `unchanged` counts the bytes not sent.
Status writeBytes(Backend& backend, const Range& r, CheckpointWriter& out, const SliceHashes* hashes,
                  uint64_t* unchanged) {
  // One piece's slices, the piece `off` bytes into the range.
  auto slices = [&](uint64_t off, const uint8_t* data, uint64_t size) {
    Status st;
    for (uint64_t at = 0; st && at < size; at += kDeviceImageSliceBytes) {
      const uint64_t m = std::min(kDeviceImageSliceBytes, size - at);
      const size_t slice = static_cast<size_t>((off + at) / kDeviceImageSliceBytes);
      const bool same = hashes && slice < hashes->size() && sliceHash(data + at, m) == (*hashes)[slice];
      st = out.putU32(same ? 1 : 0);
      if (st && !same) st = out.put(data + at, m);
      if (same) *unchanged += m;
    }
    return st;
  };
  Completion c;
  std::vector<uint8_t> piece;
  for (uint64_t off = 0; off < r.size; off += kDeviceImagePieceBytes) {
    uint64_t n = std::min(kDeviceImagePieceBytes, r.size - off);
    if (r.array) {
      piece.resize(n);
      RGPU_TRY(backend.readArray(r.array, off, n, piece.data()));
      RGPU_TRY(slices(off, piece.data(), n));
      continue;
    }
    // The bytes go into the stream from the backend's thread while this one
    // waits: the writer is never used by two threads at once.
    Status s = backend.copyFromDevice(StreamKey{0, r.device}, r.at + off, n,
                                      [&](Status st, const uint8_t* data, uint64_t size, const OnWire& on_wire) {
                                        if (st && size != n) st = Status(err::kUnknown, "short device read");
                                        if (st) st = slices(off, data, size);
                                        if (on_wire) on_wire();
                                        c.set(st);
                                      });
    if (!s) return s;
    if (s = c.wait(); !s) return s;
  }
  return Status::ok();
}

// `size` bytes into [at, at + size) of `device`: in place where the backend
// allows, else through a staging buffer on its legacy stream.
Status fill(Backend& backend, int32_t device, DevPtr at, uint64_t size, CheckpointReader& in) {
  StreamKey key{0, device};
  if (uint8_t* direct = backend.writesDirectly() ? backend.directWriteTarget(key, at) : nullptr) return in.get(direct, size);
  auto staging = std::make_shared<std::vector<uint8_t>>(size);
  RGPU_TRY(in.get(staging->data(), size));
  return backend.copyToDevice(key, at, staging, size);
}

// `placed`: the range holds the pre-copy's bytes already (slices marked unchanged stay).
Status readBytes(Backend& backend, const Range& r, CheckpointReader& in, bool placed) {
  std::vector<uint8_t> slice;
  for (uint64_t off = 0; off < r.size; off += kDeviceImageSliceBytes) {
    const uint64_t m = std::min(kDeviceImageSliceBytes, r.size - off);
    RGPU_TRY_ASSIGN(flag, in.getU32());
    if (flag == 1 && placed) continue;
    if (flag != 0)
      return Status(err::kInvalidValue, flag == 1 ? "checkpoint: bytes unchanged since a pre-copy this restore did not have"
                                                  : "checkpoint: a slice of device memory marked neither sent nor unchanged");
    if (r.array) {
      slice.resize(m);
      RGPU_TRY(in.get(slice.data(), m));
      RGPU_TRY(backend.writeArray(r.array, off, slice.data(), m));
      continue;
    }
    RGPU_TRY(fill(backend, r.device, r.at + off, m, in));
  }
  return Status::ok();
}

// Waits until every device's legacy stream has run what was queued on it.
Status drainDevices(Backend& backend) {
  const int32_t devices = static_cast<int32_t>(backend.devices().size());
  for (int32_t d = 0; d < devices; ++d) {
    Completion c;
    RGPU_TRY(backend.whenDeviceDone(d, [&](Status s) { c.set(std::move(s)); }));
    RGPU_TRY(c.wait());
  }
  return Status::ok();
}

constexpr uint32_t kBaseMagic = 0x50435042;  // "BPCP"

Status putFormat(CheckpointWriter& out, const ArrayFormat& f) {
  RGPU_TRY(out.putI32(f.kind));
  RGPU_TRY(out.putI32(f.channels));
  RGPU_TRY(out.putI32(f.bits));
  return out.putU32(f.normalized ? 1 : 0);
}

Status getFormat(CheckpointReader& in, ArrayFormat* f) {
  RGPU_TRY_ASSIGN(kind, in.getI32());
  RGPU_TRY_ASSIGN(channels, in.getI32());
  RGPU_TRY_ASSIGN(bits, in.getI32());
  RGPU_TRY_ASSIGN(normalized, in.getU32());
  *f = {kind, channels, bits, normalized != 0};
  return Status::ok();
}

Status putFloat(CheckpointWriter& out, float v) { return out.put(&v, sizeof v); }
Status getFloat(CheckpointReader& in, float* v) { return in.get(v, sizeof *v); }

Status putArraySpec(CheckpointWriter& out, const ArraySpec& s) {
  RGPU_TRY(out.putI32(s.device));
  RGPU_TRY(putFormat(out, s.format));
  RGPU_TRY(out.putU64(s.width));
  RGPU_TRY(out.putU64(s.height));
  RGPU_TRY(out.putU64(s.depth));
  RGPU_TRY(out.putU32(s.flags));
  return out.putU32(s.levels);
}

Status getArraySpec(CheckpointReader& in, ArraySpec* s) {
  RGPU_TRY_ASSIGN(device, in.getI32());
  s->device = device;
  RGPU_TRY(getFormat(in, &s->format));
  RGPU_TRY_ASSIGN(width, in.getU64());
  RGPU_TRY_ASSIGN(height, in.getU64());
  RGPU_TRY_ASSIGN(depth, in.getU64());
  RGPU_TRY_ASSIGN(flags, in.getU32());
  RGPU_TRY_ASSIGN(levels, in.getU32());
  s->width = width, s->height = height, s->depth = depth, s->flags = flags, s->levels = levels;
  return Status::ok();
}

Status putTextureSpec(CheckpointWriter& out, const TextureSpec& t) {
  RGPU_TRY(out.putI32(t.device));
  RGPU_TRY(out.putU32(t.resource));
  RGPU_TRY(out.putU64(t.array));
  RGPU_TRY(out.putU32(t.level));
  RGPU_TRY(out.putU64(t.ptr));
  RGPU_TRY(putFormat(out, t.format));
  for (uint64_t v : {t.size, t.width, t.height, t.pitch}) RGPU_TRY(out.putU64(v));
  for (uint8_t a : t.address) RGPU_TRY(out.putU32(a));
  uint32_t bits = (t.linear_filter ? 1u : 0u) | (t.normalized_read ? 2u : 0u) | (t.srgb ? 4u : 0u) |
                  (t.normalized_coords ? 8u : 0u) | (t.mip_linear ? 16u : 0u) | (t.disable_trilinear ? 32u : 0u) |
                  (t.seamless_cubemap ? 64u : 0u);
  RGPU_TRY(out.putU32(bits));
  for (float b : t.border) RGPU_TRY(putFloat(out, b));
  RGPU_TRY(out.putU32(t.max_anisotropy));
  for (float v : {t.mip_bias, t.min_lod, t.max_lod}) RGPU_TRY(putFloat(out, v));
  return Status::ok();
}

Status getTextureSpec(CheckpointReader& in, TextureSpec* t) {
  RGPU_TRY_ASSIGN(device, in.getI32());
  RGPU_TRY_ASSIGN(resource, in.getU32());
  if (resource > TextureSpec::kPitch2D) return Status(err::kInvalidValue, "checkpoint: a texture of no known kind");
  t->device = device;
  t->resource = static_cast<TextureSpec::Resource>(resource);
  RGPU_TRY_ASSIGN(array, in.getU64());
  RGPU_TRY_ASSIGN(level, in.getU32());
  RGPU_TRY_ASSIGN(ptr, in.getU64());
  t->array = array, t->level = level, t->ptr = ptr;
  RGPU_TRY(getFormat(in, &t->format));
  for (uint64_t* v : {&t->size, &t->width, &t->height, &t->pitch}) {
    RGPU_TRY_ASSIGN(x, in.getU64());
    *v = x;
  }
  for (uint8_t& a : t->address) {
    RGPU_TRY_ASSIGN(x, in.getU32());
    a = static_cast<uint8_t>(x);
  }
  RGPU_TRY_ASSIGN(bits, in.getU32());
  t->linear_filter = bits & 1, t->normalized_read = bits & 2, t->srgb = bits & 4, t->normalized_coords = bits & 8;
  t->mip_linear = bits & 16, t->disable_trilinear = bits & 32, t->seamless_cubemap = bits & 64;
  for (float& b : t->border) RGPU_TRY(getFloat(in, &b));
  RGPU_TRY_ASSIGN(aniso, in.getU32());
  t->max_anisotropy = aniso;
  for (float* v : {&t->mip_bias, &t->min_lod, &t->max_lod}) RGPU_TRY(getFloat(in, v));
  return Status::ok();
}

}  // namespace

Status writeDeviceImage(const DeviceImage& given, Backend& backend, CheckpointWriter& out, const PrecopyBase* base,
                        uint64_t* unchanged_bytes) {
  DeviceImage image = given;
  RGPU_TRY_ASSIGN(heaps, backend.mallocHeaps());
  image.heaps = std::move(heaps);
  for (auto& m : image.modules) {
    RGPU_TRY_ASSIGN(globals, backend.moduleGlobals(m.id));
    m.globals = std::move(globals);
  }
  for (auto& e : image.events) {
    RGPU_TRY_ASSIGN(state, backend.eventState(e.id));
    e.state = state;
  }
  for (auto& a : image.arrays) {
    RGPU_TRY_ASSIGN(memory, backend.arrayMemory(a.handle));
    std::tie(a.base, a.size) = memory;
    a.placed = backend.placementOrder(true, a.handle);
  }
  for (auto& m : image.modules) m.placed = backend.placementOrder(false, m.id);
  RGPU_TRY(out.putU32(kImageMagic));
  RGPU_TRY(out.putU64(image.allocations.size()));
  for (auto& a : image.allocations) {
    RGPU_TRY(out.putI32(a.device));
    RGPU_TRY(out.putU64(a.base));
    RGPU_TRY(out.putU64(a.size));
  }
  RGPU_TRY(out.putU64(image.heaps.size()));
  for (auto& h : image.heaps) {
    RGPU_TRY(out.putI32(h.device));
    RGPU_TRY(out.putU64(h.limit));
    RGPU_TRY(out.putU64(h.base));
    RGPU_TRY(out.putU64(h.blocks.size()));
    for (auto [at, len] : h.blocks) {
      RGPU_TRY(out.putU64(at));
      RGPU_TRY(out.putU64(len));
    }
  }
  RGPU_TRY(out.putU64(image.cond_handles.size()));
  for (auto& c : image.cond_handles) {
    RGPU_TRY(out.putI32(c.device));
    RGPU_TRY(out.putU64(c.handle));
  }
  RGPU_TRY(out.putU64(image.arrays.size()));
  for (auto& a : image.arrays) {
    RGPU_TRY(out.putU64(a.handle));
    RGPU_TRY(putArraySpec(out, a.spec));
    RGPU_TRY(out.putU64(a.base));
    RGPU_TRY(out.putU64(a.size));
    RGPU_TRY(out.putU64(a.placed));
  }
  RGPU_TRY(out.putU64(image.modules.size()));
  for (auto& m : image.modules) {
    RGPU_TRY(out.putU32(m.id));
    RGPU_TRY(out.putI32(m.device));
    RGPU_TRY(out.putU64(m.placed));
    RGPU_TRY(out.putString(m.fatbin));
    RGPU_TRY(out.putU64(m.globals.size()));
    for (auto& g : m.globals) {
      RGPU_TRY(out.putString(g.name));
      RGPU_TRY(out.putU64(g.addr));
      RGPU_TRY(out.putU64(g.base));
      RGPU_TRY(out.putU64(g.size));
      RGPU_TRY(out.putU64(g.alloc_size));
    }
  }
  RGPU_TRY(out.putU64(image.functions.size()));
  for (auto& f : image.functions) {
    RGPU_TRY(out.putU32(f.id));
    RGPU_TRY(out.putU32(f.module));
    RGPU_TRY(out.putString(f.name));
    RGPU_TRY(out.putU64(f.attributes.size()));
    for (auto& [attr, value] : f.attributes) {
      RGPU_TRY(out.putI32(attr));
      RGPU_TRY(out.putI32(value));
    }
  }
  RGPU_TRY(out.putU64(image.streams.size()));
  for (auto& s : image.streams) {
    RGPU_TRY(out.putU32(s.id));
    RGPU_TRY(out.putI32(s.device));
    RGPU_TRY(out.putU32(s.flags));
    RGPU_TRY(out.putI32(s.priority));
  }
  RGPU_TRY(out.putU64(image.events.size()));
  for (auto& e : image.events) {
    RGPU_TRY(out.putU32(e.id));
    RGPU_TRY(out.putI32(e.device));
    RGPU_TRY(out.putU32(e.flags));
    RGPU_TRY(out.putU32(e.state.recorded ? 1 : 0));
    RGPU_TRY(out.putU64(static_cast<uint64_t>(e.state.completed_ns)));
  }
  // Objects on the arrays (and on allocations) come after both.
  RGPU_TRY(out.putU64(image.textures.size()));
  for (auto& t : image.textures) {
    RGPU_TRY(out.putU64(t.handle));
    RGPU_TRY(putTextureSpec(out, t.spec));
  }
  RGPU_TRY(out.putU64(image.surfaces.size()));
  for (auto& s : image.surfaces) {
    RGPU_TRY(out.putU64(s.handle));
    RGPU_TRY(out.putI32(s.device));
    RGPU_TRY(out.putU64(s.array));
    RGPU_TRY(out.putU32(s.level));
  }
  uint64_t unchanged = 0;
  const size_t n_alloc = image.allocations.size();
  auto ranges = rangesOf(image);
  for (size_t i = 0; i < ranges.size(); ++i) {
    const SliceHashes* hashes = nullptr;
    if (base && i < n_alloc) {
      auto it = base->ranges.find({ranges[i].device, ranges[i].at});
      if (it != base->ranges.end() && it->second.first.size == ranges[i].size) hashes = &it->second.second;
    }
    RGPU_TRY(writeBytes(backend, ranges[i], out, hashes, &unchanged));
  }
  if (unchanged_bytes) *unchanged_bytes = unchanged;
  return Status::ok();
}

Result<PrecopyBase> writePrecopyBase(Backend& backend, uint32_t span_index, const std::vector<PrecopyRange>& ranges,
                                     CheckpointWriter& out) {
  PrecopyBase base;
  base.span_index = span_index;
  RGPU_TRY(out.putU32(kBaseMagic));
  RGPU_TRY(out.putU32(span_index));
  RGPU_TRY(out.putU64(ranges.size()));
  for (auto& r : ranges) {
    RGPU_TRY(out.putI32(r.device));
    RGPU_TRY(out.putU64(r.base));
    RGPU_TRY(out.putU64(r.size));
  }
  std::vector<uint8_t> slice(kDeviceImageSliceBytes);
  for (auto& r : ranges) {
    SliceHashes hashes;
    for (uint64_t off = 0; off < r.size; off += kDeviceImageSliceBytes) {
      const uint64_t m = std::min(kDeviceImageSliceBytes, r.size - off);
      // One copy, then its hash and its bytes: both of the same bytes, however the program writes meanwhile.
      RGPU_TRY(backend.readWhileRunning(r.device, r.base + off, m, slice.data()));
      hashes.push_back(sliceHash(slice.data(), m));
      RGPU_TRY(out.put(slice.data(), m));
    }
    base.ranges[{r.device, r.base}] = {r, std::move(hashes)};
    base.bytes += r.size;
  }
  return base;
}

Result<uint32_t> readPrecopySpan(CheckpointReader& in) {
  RGPU_TRY_ASSIGN(magic, in.getU32());
  if (magic != kBaseMagic) return Status(err::kInvalidValue, "not a pre-copy base");
  return in.getU32();
}

Result<std::vector<PrecopyRange>> restorePrecopyBase(Backend& backend, CheckpointReader& in,
                                                     const DeviceImageLimits& limits) {
  const int32_t devices = static_cast<int32_t>(backend.devices().size());
  RGPU_TRY_ASSIGN(n, in.getCount(limits.max_allocations, "allocations"));
  std::vector<PrecopyRange> ranges(n);
  for (auto& r : ranges) {
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY_ASSIGN(at, in.getU64());
    RGPU_TRY_ASSIGN(size, in.getU64());
    if (d < 0 || d >= devices) return Status(err::kInvalidDevice, "pre-copy base names device " + std::to_string(d));
    r = {d, at, size};
    RGPU_TRY(backend.allocateAt(d, at, size));
  }
  for (auto& r : ranges)
    for (uint64_t off = 0; off < r.size; off += kDeviceImageSliceBytes)
      RGPU_TRY(fill(backend, r.device, r.base + off, std::min(kDeviceImageSliceBytes, r.size - off), in));
  RGPU_TRY(in.finish());
  RGPU_TRY(drainDevices(backend));
  return ranges;
}

Result<DeviceImage> restoreDeviceImage(Backend& backend, CheckpointReader& in, const DeviceImageLimits& limits,
                                       const std::vector<PrecopyRange>* placed) {
  DeviceImage image;
  const int32_t devices = static_cast<int32_t>(backend.devices().size());
  auto checkDevice = [&](int32_t d) {
    return d >= 0 && d < devices ? Status::ok()
                                 : Status(err::kInvalidDevice, "checkpoint names device " + std::to_string(d) +
                                                                   " of a placement of " + std::to_string(devices));
  };
  RGPU_TRY_ASSIGN(magic, in.getU32());
  if (magic != kImageMagic)
    return Status(err::kInvalidValue, "checkpoint: no device image where one belongs (or one of another rgpu release)");

  RGPU_TRY_ASSIGN(n_alloc, in.getCount(limits.max_allocations, "allocations"));
  image.allocations.resize(n_alloc);
  for (auto& a : image.allocations) {
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY_ASSIGN(base, in.getU64());
    RGPU_TRY_ASSIGN(size, in.getU64());
    RGPU_TRY(checkDevice(d));
    a = {d, base, size};
  }
  // What a pre-copy placed stays if the image holds it as it is; the rest
  // of it goes before anything new is placed (its room may be wanted).
  std::set<std::tuple<int32_t, DevPtr, uint64_t>> kept;
  if (placed) {
    std::set<std::tuple<int32_t, DevPtr, uint64_t>> wanted;
    for (auto& a : image.allocations) wanted.insert({a.device, a.base, a.size});
    for (auto& r : *placed) {
      if (wanted.count({r.device, r.base, r.size})) kept.insert({r.device, r.base, r.size});
      else RGPU_TRY(backend.release(r.base));
    }
  }
  // At the address the program holds, or not at all.
  for (auto& a : image.allocations)
    if (!kept.count({a.device, a.base, a.size})) RGPU_TRY(backend.allocateAt(a.device, a.base, a.size));
  RGPU_TRY_ASSIGN(n_heaps, in.getCount(static_cast<uint64_t>(devices), "malloc heaps"));
  image.heaps.resize(n_heaps);
  for (auto& h : image.heaps) {
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY(checkDevice(d));
    RGPU_TRY_ASSIGN(limit, in.getU64());
    RGPU_TRY_ASSIGN(base, in.getU64());
    // A block is 16 bytes at least: no more of them than fit.
    RGPU_TRY_ASSIGN(n_blocks, in.getCount(base ? limit / 16 : 0, "malloc heap blocks"));
    h = {d, limit, base, {}};
    h.blocks.resize(n_blocks);
    for (auto& [at, len] : h.blocks) {
      RGPU_TRY_ASSIGN(a, in.getU64());
      RGPU_TRY_ASSIGN(l, in.getU64());
      at = a;
      len = l;
    }
    RGPU_TRY(backend.restoreMallocHeap(h));
  }
  RGPU_TRY_ASSIGN(n_cond, in.getCount(limits.max_conditional_handles, "conditional node handles"));
  image.cond_handles.resize(n_cond);
  for (auto& c : image.cond_handles) {
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY(checkDevice(d));
    RGPU_TRY_ASSIGN(handle, in.getU64());
    c = {d, handle};
    RGPU_TRY(backend.restoreConditionalHandle(d, handle));
  }
  RGPU_TRY_ASSIGN(n_arrays, in.getCount(limits.max_arrays, "arrays"));
  image.arrays.resize(n_arrays);
  for (auto& a : image.arrays) {
    RGPU_TRY_ASSIGN(handle, in.getU64());
    a.handle = handle;
    RGPU_TRY(getArraySpec(in, &a.spec));
    RGPU_TRY_ASSIGN(base, in.getU64());
    RGPU_TRY_ASSIGN(size, in.getU64());
    RGPU_TRY_ASSIGN(placed, in.getU64());
    a.placed = placed;
    RGPU_TRY(checkDevice(a.spec.device));
    // The format and shape checks its creation passed, before anything is made of it.
    RGPU_TRY(checkFormat(a.spec.format));
    RGPU_TRY_ASSIGN(bytes, checkArray(a.spec, backend.devices()[static_cast<size_t>(a.spec.device)].attributes));
    a.base = base;
    a.size = size;
    a.bytes = bytes;
  }
  RGPU_TRY_ASSIGN(n_mod, in.getCount(limits.max_modules, "modules"));
  image.modules.resize(n_mod);
  std::set<uint32_t> module_ids;
  for (auto& m : image.modules) {
    RGPU_TRY_ASSIGN(id, in.getU32());
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY(checkDevice(d));
    RGPU_TRY_ASSIGN(placed, in.getU64());
    m.placed = placed;
    RGPU_TRY_ASSIGN(fatbin, in.getString(limits.max_fatbin_bytes));
    RGPU_TRY_ASSIGN(n_glob, in.getCount(limits.max_globals_per_module, "variables in a module"));
    m.id = id;
    m.device = d;
    m.fatbin = std::move(fatbin);
    m.globals.resize(n_glob);
    for (auto& g : m.globals) {
      RGPU_TRY_ASSIGN(name, in.getString(kMaxCheckpointNameBytes));
      RGPU_TRY_ASSIGN(addr, in.getU64());
      RGPU_TRY_ASSIGN(base, in.getU64());
      RGPU_TRY_ASSIGN(size, in.getU64());
      RGPU_TRY_ASSIGN(alloc_size, in.getU64());
      g = {std::move(name), addr, base, size, alloc_size};
    }
    if (!module_ids.insert(id).second) return Status(err::kInvalidValue, "checkpoint names module " + std::to_string(id) + " twice");
  }
  // Modules and arrays in the order the old backend made them (a driver
  // places each one's memory after what it made before; ties: modules first).
  std::vector<std::tuple<uint64_t, int, size_t>> made;  // (placed, 0 module / 1 array, index)
  for (size_t i = 0; i < image.modules.size(); ++i) made.emplace_back(image.modules[i].placed, 0, i);
  for (size_t i = 0; i < image.arrays.size(); ++i) made.emplace_back(image.arrays[i].placed, 1, i);
  std::stable_sort(made.begin(), made.end());
  for (auto [placed, kind, i] : made) {
    if (kind == 0) {
      const DeviceImage::Module& m = image.modules[i];
      RGPU_TRY(backend.loadModuleAt(m.id, m.device, m.fatbin, m.globals));
      continue;
    }
    const DeviceImage::Array& a = image.arrays[i];
    RGPU_TRY(backend.createArrayAt(a.handle, a.spec, a.base));
    // The array the backend made is the size the checkpoint's bytes are.
    auto memory = backend.arrayMemory(a.handle);
    if (!memory) return memory.status();
    if (memory->first != a.base || memory->second != a.size)
      return Status(err::kInvalidValue, "checkpoint: array " + std::to_string(a.handle) + " does not match its memory");
  }
  RGPU_TRY_ASSIGN(n_fn, in.getCount(limits.max_functions, "kernels"));
  image.functions.resize(n_fn);
  for (auto& f : image.functions) {
    RGPU_TRY_ASSIGN(id, in.getU32());
    RGPU_TRY_ASSIGN(module, in.getU32());
    RGPU_TRY_ASSIGN(name, in.getString(kMaxCheckpointNameBytes));
    RGPU_TRY_ASSIGN(n_attr, in.getCount(64, "attributes of a kernel"));
    f.id = id;
    f.module = module;
    f.name = std::move(name);
    for (uint64_t i = 0; i < n_attr; ++i) {
      RGPU_TRY_ASSIGN(attr, in.getI32());
      RGPU_TRY_ASSIGN(value, in.getI32());
      f.attributes.emplace_back(attr, value);
    }
    auto r = backend.registerFunction(f.id, f.module, f.name);
    if (!r) return r.status();
    for (auto& [attr, value] : f.attributes) RGPU_TRY(backend.setFunctionAttribute(f.id, attr, value));
  }
  RGPU_TRY_ASSIGN(n_stream, in.getCount(limits.max_streams, "streams"));
  image.streams.resize(n_stream);
  for (auto& s : image.streams) {
    RGPU_TRY_ASSIGN(id, in.getU32());
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY_ASSIGN(flags, in.getU32());
    RGPU_TRY_ASSIGN(priority, in.getI32());
    RGPU_TRY(checkDevice(d));
    if (id == 0) return Status(err::kInvalidValue, "checkpoint names stream 0 (the legacy stream) as created");
    s = {id, d, flags, priority};
    RGPU_TRY(backend.createStream(StreamKey{id, d}, flags, priority));
  }
  RGPU_TRY_ASSIGN(n_event, in.getCount(limits.max_events, "events"));
  image.events.resize(n_event);
  for (auto& e : image.events) {
    RGPU_TRY_ASSIGN(id, in.getU32());
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY_ASSIGN(flags, in.getU32());
    RGPU_TRY_ASSIGN(recorded, in.getU32());
    RGPU_TRY_ASSIGN(completed_ns, in.getU64());
    RGPU_TRY(checkDevice(d));
    e = {id, d, flags, {recorded != 0, static_cast<int64_t>(completed_ns)}};
    RGPU_TRY(backend.restoreEvent(id, d, flags, e.state));
  }
  RGPU_TRY_ASSIGN(n_tex, in.getCount(limits.max_textures, "texture objects"));
  image.textures.resize(n_tex);
  for (auto& t : image.textures) {
    RGPU_TRY_ASSIGN(handle, in.getU64());
    t.handle = handle;
    RGPU_TRY(getTextureSpec(in, &t.spec));
    RGPU_TRY(checkDevice(t.spec.device));
    RGPU_TRY(checkFormat(t.spec.format));
  }
  RGPU_TRY_ASSIGN(n_surf, in.getCount(limits.max_surfaces, "surface objects"));
  image.surfaces.resize(n_surf);
  for (auto& s : image.surfaces) {
    RGPU_TRY_ASSIGN(handle, in.getU64());
    RGPU_TRY_ASSIGN(d, in.getI32());
    RGPU_TRY_ASSIGN(array, in.getU64());
    RGPU_TRY_ASSIGN(level, in.getU32());
    RGPU_TRY(checkDevice(d));
    s = {handle, d, array, level};
  }
  // Made in ascending order of their handles (a driver chooses them: see backend.h).
  std::vector<std::pair<uint64_t, size_t>> objects;  // handle; index: textures, then surfaces
  for (size_t i = 0; i < image.textures.size(); ++i) objects.emplace_back(image.textures[i].handle, i);
  for (size_t i = 0; i < image.surfaces.size(); ++i) objects.emplace_back(image.surfaces[i].handle, image.textures.size() + i);
  std::sort(objects.begin(), objects.end());
  for (auto [handle, i] : objects) {
    if (i < image.textures.size()) {
      RGPU_TRY(backend.createTextureAt(handle, image.textures[i].spec));
    } else {
      const DeviceImage::Surface& s = image.surfaces[i - image.textures.size()];
      RGPU_TRY(backend.createSurfaceAt(handle, s.device, s.array, s.level));
    }
  }
  RGPU_TRY(backend.objectsRestored());
  // The bytes, into memory placed above (a range outside it was refused there).
  auto ranges = rangesOf(image);
  for (size_t i = 0; i < ranges.size(); ++i)
    RGPU_TRY(readBytes(backend, ranges[i], in,
                       i < image.allocations.size() && kept.count({ranges[i].device, ranges[i].at, ranges[i].size})));
  // Copies queued on the legacy streams have landed before anyone runs.
  RGPU_TRY(drainDevices(backend));
  return image;
}

}  // namespace rgpu::server
