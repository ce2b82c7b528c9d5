// The block runner's texture and surface instructions (tex, tld4, txq, suld,
// sust, suq) and the sampling arithmetic they share (ptx_texture.h).
#include "server/sim/ptx/ptx_texture.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "server/sim/ptx/ptx_block.h"

namespace rgpu::server::ptx {

namespace tex {

namespace {
double srgbToLinear(double c) { return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4); }
}  // namespace

void decodeTexel(const TexFormat& f, const uint8_t* p, bool normalized_read, bool srgb, double out[4]) {
  out[0] = out[1] = out[2] = 0;
  out[3] = 1;
  const int step = f.bits / 8;
  for (int c = 0; c < f.channels; ++c) {
    const uint8_t* q = p + c * step;
    double v = 0;
    if (f.kind == kFormatFloat) {
      if (f.bits == 16) {
        uint16_t h;
        std::memcpy(&h, q, 2);
        v = common::halfToFloat(h);
      } else {
        float x;
        std::memcpy(&x, q, 4);
        v = x;
      }
    } else {
      uint32_t u = 0;
      std::memcpy(&u, q, static_cast<size_t>(step));
      if (f.kind == kFormatSigned) {
        int64_t s = f.bits == 8 ? static_cast<int8_t>(u) : f.bits == 16 ? static_cast<int16_t>(u) : static_cast<int32_t>(u);
        v = static_cast<double>(s);
        if (normalized_read && f.bits < 32) v = std::max(v / static_cast<double>((1 << (f.bits - 1)) - 1), -1.0);
      } else {
        v = static_cast<double>(u);
        if (normalized_read && f.bits < 32) {
          v /= static_cast<double>((1u << f.bits) - 1);
          if (srgb && f.bits == 8 && c < 3) v = srgbToLinear(v);
        }
      }
    }
    out[c] = v;
  }
}

bool returnsFloat(const TexFormat& f, const TexSampler& s) {
  return f.kind == kFormatFloat || (s.normalized_read && f.bits < 32);
}

double weight(double frac) { return std::floor(frac * 256.0 + 0.5) / 256.0; }

int64_t addressIndex(int64_t i, int64_t n, uint8_t mode) {
  switch (mode) {
    case kAddrWrap: return ((i % n) + n) % n;
    case kAddrMirror: {
      int64_t m = ((i % (2 * n)) + 2 * n) % (2 * n);
      return m < n ? m : 2 * n - 1 - m;
    }
    case kAddrBorder: return i < 0 || i >= n ? -1 : i;
    default: return i < 0 ? 0 : i >= n ? n - 1 : i;
  }
}

int cubeFace(double x, double y, double z, double& u, double& v) {
  const double ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z);
  int face;
  double m, s, t;
  if (ax >= ay && ax >= az) {
    face = x >= 0 ? 0 : 1;
    m = ax, s = x >= 0 ? -z : z, t = -y;
  } else if (ay >= az) {
    face = y >= 0 ? 2 : 3;
    m = ay, s = x, t = y >= 0 ? z : -z;
  } else {
    face = z >= 0 ? 4 : 5;
    m = az, s = z >= 0 ? x : -x, t = -y;
  }
  if (m == 0) m = 1;
  u = (s / m + 1) / 2;
  v = (t / m + 1) / 2;
  return face;
}

}  // namespace tex

namespace detail {

namespace {

// A coordinate as an index: NaN reads as 0, and the range is bounded so the
// conversion to an integer is defined.
int64_t floorIndex(double c) {
  if (!(c == c)) return 0;
  return static_cast<int64_t>(std::floor(std::clamp(c, -1e15, 1e15)));
}

// One lane's fetch from an image: checks each level's memory once.
struct Sampler {
  const TexImage& img;
  const TexSampler& s;
  const MemoryRanges& memory;
  bool ok = true;
  uint64_t checked = 0;  // bit l: level l's memory is inside the ranges

  const TexLevel* level(size_t l) {
    if (l >= img.levels.size()) l = img.levels.size() - 1;
    const TexLevel& lv = img.levels[l];
    if (!(checked >> l & 1)) {
      if (!findRange(memory, lv.base, lv.span(img.format.bytes()))) {
        ok = false;
        return nullptr;
      }
      checked |= 1ull << l;
    }
    return &lv;
  }
  // Texel (x, y, slice) of a level; an index of -1 reads the border colour.
  void texel(const TexLevel& lv, int64_t x, int64_t y, int64_t z, double out[4]) {
    if (x < 0 || y < 0 || z < 0) {
      for (int c = 0; c < 4; ++c) out[c] = s.border[c];
      return;
    }
    const uint8_t* p = reinterpret_cast<const uint8_t*>(lv.base + static_cast<uint64_t>(z) * lv.slice +
                                                        static_cast<uint64_t>(y) * lv.pitch +
                                                        static_cast<uint64_t>(x) * img.format.bytes());
    uint8_t buf[16];
    for (uint32_t b = 0; b < img.format.bytes(); ++b) buf[b] = static_cast<uint8_t>(loadBytes(p + b, 1));
    tex::decodeTexel(img.format, buf, s.normalized_read, s.srgb, out);
  }
  // Filters level `lv` at texel-space coordinates c[0..dims) on slice `slice`
  // (3D: the third coordinate instead), with address modes `modes`.
  void filter(const TexLevel& lv, int dims, const double* c, int64_t slice, const uint8_t* modes, bool linear,
              double out[4]) {
    const int64_t n[3] = {lv.width, lv.height, lv.depth};
    if (!linear) {
      int64_t idx[3] = {0, 0, slice};
      for (int d = 0; d < dims; ++d) idx[d] = tex::addressIndex(floorIndex(c[d]), n[d], modes[d]);
      if (idx[0] < 0 || idx[1] < 0 || idx[2] < 0) return texel(lv, -1, -1, -1, out);
      return texel(lv, idx[0], idx[1], idx[2], out);
    }
    int64_t i0[3] = {0, 0, slice};
    double a[3] = {0, 0, 0};
    for (int d = 0; d < dims; ++d) {
      double cb = c[d] - 0.5;
      i0[d] = floorIndex(cb);
      a[d] = tex::weight(cb - static_cast<double>(i0[d]));
    }
    for (int k = 0; k < 4; ++k) out[k] = 0;
    for (int corner = 0; corner < (1 << dims); ++corner) {
      double wgt = 1;
      int64_t idx[3] = {0, 0, slice};
      bool border = false;
      for (int d = 0; d < dims; ++d) {
        const int hi = corner >> d & 1;
        wgt *= hi ? a[d] : 1 - a[d];
        idx[d] = tex::addressIndex(i0[d] + hi, n[d], modes[d]);
        border |= idx[d] < 0;
      }
      double v[4];
      if (border) texel(lv, -1, -1, -1, v);
      else texel(lv, idx[0], idx[1], idx[2], v);
      for (int k = 0; k < 4; ++k) out[k] += wgt * v[k];
    }
  }
};

int geometryDims(uint8_t geo) {
  switch (geo) {
    case kGeo1D: case kGeoA1D: return 1;
    case kGeo3D: return 3;
    default: return 2;
  }
}

bool geometryFits(uint8_t geo, TexShape shape, bool surface) {
  switch (geo) {
    case kGeo1D: return shape == TexShape::k1D;
    case kGeo2D: return shape == TexShape::k2D;
    case kGeo3D: return shape == TexShape::k3D;
    case kGeoA1D: return shape == TexShape::kLayered1D;
    case kGeoA2D:
      return shape == TexShape::kLayered2D ||
             (surface && (shape == TexShape::kCubemap || shape == TexShape::kCubemapLayered));
    case kGeoCube: return shape == TexShape::kCubemap;
    case kGeoACube: return shape == TexShape::kCubemapLayered;
  }
  return false;
}

// OpenCL's channel data type and order constants, as txq and suq report them.
uint32_t channelDataType(const TexFormat& f, bool normalized) {
  if (f.kind == kFormatFloat) return f.bits == 16 ? 0x10DD : 0x10DE;
  const int b = f.bits == 8 ? 0 : f.bits == 16 ? 1 : 2;
  if (normalized && b < 2) return (f.kind == kFormatSigned ? 0x10D0 : 0x10D2) + static_cast<uint32_t>(b);
  return (f.kind == kFormatSigned ? 0x10D7 : 0x10DA) + static_cast<uint32_t>(b);
}
uint32_t channelOrder(const TexFormat& f) { return f.channels == 1 ? 0x10B0 : f.channels == 2 ? 0x10B2 : 0x10B5; }

uint32_t queryImage(const TexImage& img, const TexSampler* s, uint8_t q, int64_t lod) {
  const size_t l = lod < 0 ? 0 : std::min<size_t>(static_cast<size_t>(lod), img.levels.size() - 1);
  const TexLevel& lv = img.levels[l];
  const bool layered = img.shape == TexShape::kLayered1D || img.shape == TexShape::kLayered2D ||
                       img.shape == TexShape::kCubemap || img.shape == TexShape::kCubemapLayered;
  switch (q) {
    case kQWidth: return lv.width;
    case kQHeight: return img.shape == TexShape::k1D || img.shape == TexShape::kLayered1D ? 0 : lv.height;
    case kQDepth: return img.shape == TexShape::k3D ? lv.depth : 0;
    case kQChannelDataType: return channelDataType(img.format, s && s->normalized_read);
    case kQChannelOrder: return channelOrder(img.format);
    case kQNormalizedCoords: return s && s->normalized_coords ? 1 : 0;
    case kQArraySize: return layered ? img.layers : 0;
    case kQNumMipmapLevels: return static_cast<uint32_t>(img.levels.size());
    case kQFilterMode: return s && s->linear ? 1 : 0;
    case kQAddrMode0: return s ? s->address[0] : 0;
    case kQAddrMode1: return s ? s->address[1] : 0;
    case kQAddrMode2: return s ? s->address[2] : 0;
    case kQMemoryLayout: return 1;  // block-linear: arrays (the only images surfaces take)
    default: return 0;  // num_samples, force_unnormalized_coords
  }
}

// Element e of a vector operand (or the operand itself) for `lane`.
uint64_t element(const Operand& o, size_t e, const Warp& w, int lane) {
  const Operand& x = o.kind == Operand::kVec ? o.vec[std::min(e, o.vec.size() - 1)] : o;
  if (x.kind == Operand::kReg) return w.regs[static_cast<size_t>(x.reg) * 32 + static_cast<size_t>(lane)];
  if (x.kind == Operand::kImm) return x.imm;
  return 0;
}

// The object `handle` names in `table` (the launch's textures or surfaces), or null.
template <typename Map>
const typename Map::mapped_type* lookup(const Textures* all, Map Textures::*table, uint64_t handle) {
  if (!all) return nullptr;
  auto it = (all->*table).find(handle);
  return it == (all->*table).end() ? nullptr : &it->second;
}

void writeDest(const Operand& d, size_t e, Warp& w, int lane, uint64_t v) {
  const Operand& x = d.kind == Operand::kVec ? d.vec[e] : d;
  if (x.kind == Operand::kReg) w.regs[static_cast<size_t>(x.reg) * 32 + static_cast<size_t>(lane)] = v;
}

}  // namespace

bool BlockRunner::execTexture(const Inst& in, Warp& w, uint32_t m) {
  LANES(m)
    const uint64_t handle = element(in.a, 0, w, l);
    const TexObject* found = lookup(L_.textures, &Textures::textures, handle);
    if (!found) {
      fault(kErrIllegalAddress, "texture object " + std::to_string(handle) + " is not one of this session's", in, w, l);
      return false;
    }
    const TexObject& t = *found;
    const TexImage& img = t.image;
    if (in.op == Op::kTxq) {
      int64_t lod = in.layout == kTexLevel ? static_cast<int32_t>(element(in.c, 0, w, l)) : 0;
      writeDest(in.d, 0, w, l, queryImage(img, &t.sampler, in.k, lod));
      continue;
    }
    if (!geometryFits(in.mode, img.shape, false)) {
      fault(kErrLaunchFailure, "the texture's shape does not match the instruction's geometry", in, w, l);
      return false;
    }
    Sampler S{img, t.sampler, *L_.memory};
    const bool int_coords = in.dtype == Type::kS32;
    auto coord = [&](size_t e) {
      uint64_t v = element(in.b, e, w, l);
      return int_coords ? static_cast<double>(static_cast<int32_t>(v)) : static_cast<double>(detail::f32(v));
    };
    const bool layered = in.mode == kGeoA1D || in.mode == kGeoA2D || in.mode == kGeoACube;
    const size_t first = layered ? 1 : 0;
    int64_t slice = 0;
    if (layered) {
      int64_t layer = static_cast<int32_t>(element(in.b, 0, w, l));
      layer = std::clamp<int64_t>(layer, 0, std::max<int64_t>(img.layers, 1) - 1);
      slice = in.mode == kGeoACube ? layer * 6 : layer;
    }
    // Level of detail.
    const TexLevel* base = S.level(0);
    if (!base) {
      fault(kErrIllegalAddress, "the texture's memory is no longer allocated", in, w, l);
      return false;
    }
    double lod = 0;
    if (in.layout == kTexLevel) {
      lod = detail::f32(element(in.c, 0, w, l));
    } else if (in.layout == kTexGrad) {
      const int dims = geometryDims(in.mode);
      double rho = 0;
      for (const Operand* g : {&in.c, &in.e}) {
        double len = 0;
        for (int d = 0; d < dims; ++d) {
          double v = detail::f32(element(*g, static_cast<size_t>(d), w, l));
          const double n = d == 0 ? base->width : d == 1 ? base->height : base->depth;
          if (t.sampler.normalized_coords || in.mode >= kGeoCube) v *= n;
          len += v * v;
        }
        rho = std::max(rho, std::sqrt(len));
      }
      lod = rho > 0 ? std::log2(rho) : -1e9;
    }
    lod += t.sampler.mip_bias;
    lod = std::max(std::min(lod, static_cast<double>(t.sampler.max_lod)), static_cast<double>(t.sampler.min_lod));
    lod = std::clamp(lod, 0.0, static_cast<double>(img.levels.size() - 1));
    double out[4] = {0, 0, 0, 1};
    if (in.op == Op::kTld4) {
      // The 2x2 footprint bilinear filtering would use, component k of each
      // texel, counter-clockwise from the lower left: (i, j+1), (i+1, j+1), (i+1, j), (i, j).
      const TexLevel* lv = base;
      double c[2] = {coord(first), coord(first + 1)};
      if (t.sampler.normalized_coords) c[0] *= lv->width, c[1] *= lv->height;
      const uint8_t* modes = t.sampler.address;
      uint8_t fixed[2];
      for (int d = 0; d < 2; ++d)
        fixed[d] = t.sampler.normalized_coords || modes[d] == kAddrBorder ? modes[d] : kAddrClamp;
      int64_t i = floorIndex(c[0] - 0.5), j = floorIndex(c[1] - 0.5);
      const int64_t at[4][2] = {{i, j + 1}, {i + 1, j + 1}, {i + 1, j}, {i, j}};
      for (int k = 0; k < 4; ++k) {
        int64_t x = tex::addressIndex(at[k][0], lv->width, fixed[0]);
        int64_t y = tex::addressIndex(at[k][1], lv->height, fixed[1]);
        double v[4];
        if (x < 0 || y < 0) S.texel(*lv, -1, -1, -1, v);
        else S.texel(*lv, x, y, slice, v);
        out[k] = v[in.k];
      }
    } else if (img.levels.size() == 1 && int_coords && in.mode == kGeo1D && t.sampler.address[0] != kAddrBorder &&
               !t.sampler.normalized_coords) {
      // tex1Dfetch and integer-coordinate fetches: the element itself; past the end, zeros.
      int64_t x = static_cast<int32_t>(element(in.b, 0, w, l));
      if (x >= 0 && x < base->width) S.texel(*base, x, 0, 0, out);
      else out[0] = out[1] = out[2] = out[3] = 0;
    } else {
      auto sampleLevel = [&](size_t li, double res[4]) -> bool {
        const TexLevel* lv = S.level(li);
        if (!lv) return false;
        int dims = geometryDims(in.mode);
        double c[3] = {0, 0, 0};
        uint8_t modes[3];
        bool normalized = t.sampler.normalized_coords;
        int64_t sl = slice;
        if (in.mode == kGeoCube || in.mode == kGeoACube) {
          double u, v;
          sl += tex::cubeFace(coord(first), coord(first + 1), coord(first + 2), u, v);
          c[0] = u, c[1] = v, dims = 2, normalized = true;
          modes[0] = modes[1] = kAddrClamp;
        } else {
          for (int d = 0; d < dims; ++d) {
            c[d] = coord(first + static_cast<size_t>(d));
            modes[d] = normalized || t.sampler.address[d] == kAddrBorder ? t.sampler.address[d] : kAddrClamp;
          }
        }
        if (normalized) {
          c[0] *= lv->width;
          if (dims > 1) c[1] *= lv->height;
          if (dims > 2) c[2] *= lv->depth;
        }
        S.filter(*lv, dims, c, sl, modes, t.sampler.linear && !int_coords, res);
        return S.ok;
      };
      bool fine;
      if (img.levels.size() > 1 && t.sampler.mip_linear) {
        const double l0 = std::floor(lod);
        const double a = tex::weight(lod - l0);
        double lo[4], hi[4];
        fine = sampleLevel(static_cast<size_t>(l0), lo) && sampleLevel(static_cast<size_t>(l0) + 1, hi);
        for (int k = 0; k < 4; ++k) out[k] = (1 - a) * lo[k] + a * hi[k];
      } else {
        fine = sampleLevel(static_cast<size_t>(std::floor(lod + 0.5)), out);
      }
      if (!fine) {
        fault(kErrIllegalAddress, "the texture's memory is no longer allocated", in, w, l);
        return false;
      }
    }
    if (!S.ok) {
      fault(kErrIllegalAddress, "the texture's memory is no longer allocated", in, w, l);
      return false;
    }
    const bool floats = tex::returnsFloat(img.format, t.sampler);
    for (size_t k = 0; k < 4; ++k) {
      uint64_t v = floats ? detail::b32(static_cast<float>(out[k]))
                          : static_cast<uint32_t>(static_cast<int64_t>(std::clamp(out[k], -2147483648.0, 4294967295.0)));
      writeDest(in.d, k, w, l, v);
    }
  END_LANES
  return true;
}

bool BlockRunner::execSurface(const Inst& in, Warp& w, uint32_t m) {
  LANES(m)
    const uint64_t handle = element(in.a, 0, w, l);
    const TexImage* found = lookup(L_.textures, &Textures::surfaces, handle);
    if (!found) {
      fault(kErrIllegalAddress, "surface object " + std::to_string(handle) + " is not one of this session's", in, w, l);
      return false;
    }
    const TexImage& img = *found;
    if (in.op == Op::kSuq) {
      writeDest(in.d, 0, w, l, queryImage(img, nullptr, in.k, 0));
      continue;
    }
    if (!geometryFits(in.mode, img.shape, true)) {
      fault(kErrLaunchFailure, "the surface's shape does not match the instruction's geometry", in, w, l);
      return false;
    }
    const TexLevel& lv = img.levels[0];
    if (!findRange(*L_.memory, lv.base, lv.span(img.format.bytes()))) {
      fault(kErrIllegalAddress, "the surface's memory is no longer allocated", in, w, l);
      return false;
    }
    const uint32_t size = static_cast<uint32_t>(typeBytes(in.type));
    const uint32_t access = size * in.vec;
    const bool layered = in.mode == kGeoA1D || in.mode == kGeoA2D;
    const size_t first = layered ? 1 : 0;
    const int dims = geometryDims(in.mode);
    // Byte x, rows y, slices z (3D depth, or the layer).
    int64_t x = static_cast<int32_t>(element(in.b, first, w, l));
    int64_t y = dims > 1 ? static_cast<int32_t>(element(in.b, first + 1, w, l)) : 0;
    int64_t z = dims > 2 ? static_cast<int32_t>(element(in.b, first + 2, w, l))
                         : layered ? static_cast<int32_t>(element(in.b, 0, w, l)) : 0;
    const int64_t row = static_cast<int64_t>(lv.width) * img.format.bytes();
    const int64_t limits[3] = {row - access, static_cast<int64_t>(dims > 1 ? lv.height : 1) - 1,
                               static_cast<int64_t>(lv.depth) - 1};
    int64_t* c[3] = {&x, &y, &z};
    bool outside = false;
    for (int d = 0; d < 3; ++d) outside |= *c[d] < 0 || *c[d] > limits[d];
    if (outside) {
      if (in.m == kSurfTrap || (in.m == kSurfClamp && limits[0] < 0)) {
        fault(kErrIllegalAddress,
              "surface access out of range (x " + std::to_string(x) + " bytes, y " + std::to_string(y) + ", z " +
                  std::to_string(z) + ")",
              in, w, l);
        return false;
      }
      if (in.m == kSurfZero) {
        if (in.op == Op::kSuld)
          for (size_t e = 0; e < in.vec; ++e) writeDest(in.d, e, w, l, 0);
        continue;
      }
      for (int d = 0; d < 3; ++d) *c[d] = std::clamp<int64_t>(*c[d], 0, std::max<int64_t>(limits[d], 0));
    }
    uint8_t* p = reinterpret_cast<uint8_t*>(lv.base + static_cast<uint64_t>(z) * lv.slice +
                                            static_cast<uint64_t>(y) * lv.pitch + static_cast<uint64_t>(x));
    for (size_t e = 0; e < in.vec; ++e) {
      if (in.op == Op::kSuld) writeDest(in.d, e, w, l, loadBytes(p + e * size, static_cast<int>(size)));
      else storeBytes(p + e * size, element(in.c, e, w, l), static_cast<int>(size));
    }
  END_LANES
  return true;
}

}  // namespace detail

}  // namespace rgpu::server::ptx
