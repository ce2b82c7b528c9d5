// The interpreter's texture and surface unit: what `tex`, `tld4`, `txq`,
// `suld`, `sust` and `suq` read and write.
//
// A texture or surface object is a 64-bit handle a kernel receives as a
// parameter; the launch carries the session's table of them (Textures), a
// snapshot taken when the kernel starts. An image is device memory laid out
// by rgpu (arrays: each level's rows packed, `pitch` bytes apart, its slices
// — depth, layers, cube faces — `slice` bytes apart, levels one after
// another) or the program's own (linear and pitch-2D resources). Every texel
// address is checked against the launch's memory ranges before it is read or
// written, so an image whose memory was freed (the array destroyed, the
// linear buffer given back) faults with cudaErrorIllegalAddress instead of
// reaching memory the session no longer owns; an unknown handle faults too.
//
// Sampling follows the CUDA programming guide's texture-fetching appendix:
// unnormalised or normalised coordinates; address modes wrap, clamp, mirror,
// border (wrap and mirror only with normalised coordinates, else clamp);
// point filtering picks floor(x); linear filtering takes x - 0.5, and its
// weights are 9-bit fixed point with 8 fractional bits (1.0 exact); 8- and
// 16-bit integers read as normalised floats ([0, 1] unsigned, [-1, 1]
// signed) when asked, sRGB-encoded 8-bit values are linearised first;
// channels the format lacks read as 0 (and alpha as 1). Mipmapped textures
// pick their level from an explicit LOD (tex.level) or the gradients
// (tex.grad), with bias and clamps; cubemaps pick a face from the direction
// vector's largest component.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace rgpu::server::ptx {

// cudaChannelFormatKind values the unit understands.
inline constexpr int kFormatSigned = 0, kFormatUnsigned = 1, kFormatFloat = 2;

struct TexFormat {
  int kind = kFormatFloat;
  uint8_t channels = 1;  // 1, 2 or 4
  uint8_t bits = 32;     // per channel: 8, 16 or 32 (16 float: half)
  uint32_t bytes() const { return channels * bits / 8u; }
};

// Texture shapes (cudaResourceType and the array's flags together).
enum class TexShape : uint8_t { k1D, k2D, k3D, kLayered1D, kLayered2D, kCubemap, kCubemapLayered };
// An array's shape from its flags and extents (height 0: 1D; depth 0: neither 3D nor layered).
inline TexShape arrayShape(bool layered, bool cubemap, uint64_t height, uint64_t depth) {
  if (cubemap) return layered ? TexShape::kCubemapLayered : TexShape::kCubemap;
  if (layered) return height ? TexShape::kLayered2D : TexShape::kLayered1D;
  if (depth) return TexShape::k3D;
  return height ? TexShape::k2D : TexShape::k1D;
}

struct TexLevel {
  uint64_t base = 0;  // device address of its first texel
  uint32_t width = 1, height = 1, depth = 1;  // depth: slices (3D depth, layers, 6 x layers cube faces)
  uint64_t pitch = 0, slice = 0;  // bytes between rows, between slices
  // The bytes from base its texels span (elements of `elem` bytes).
  uint64_t span(uint32_t elem) const { return (depth - 1) * slice + (height - 1) * pitch + uint64_t{width} * elem; }
};

struct TexImage {
  TexShape shape = TexShape::k1D;
  TexFormat format;
  std::vector<TexLevel> levels;  // at least one
  uint32_t layers = 0;           // layered shapes: layers (cubemaps: cubes)
};

// cudaAddressMode values.
inline constexpr uint8_t kAddrWrap = 0, kAddrClamp = 1, kAddrMirror = 2, kAddrBorder = 3;

struct TexSampler {
  uint8_t address[3] = {kAddrClamp, kAddrClamp, kAddrClamp};
  bool linear = false;           // cudaFilterModeLinear
  bool normalized_read = false;  // cudaReadModeNormalizedFloat
  bool normalized_coords = false;
  bool srgb = false;
  float border[4] = {0, 0, 0, 0};
  bool mip_linear = false;
  float mip_bias = 0, min_lod = 0, max_lod = 0;
};

struct TexObject {
  TexImage image;
  TexSampler sampler;
};

// A session's texture and surface objects by handle.
struct Textures {
  std::unordered_map<uint64_t, TexObject> textures;
  std::unordered_map<uint64_t, TexImage> surfaces;
};

// Geometries of tex/tld4/suld/sust (Inst::mode).
inline constexpr uint8_t kGeo1D = 0, kGeo2D = 1, kGeo3D = 2, kGeoA1D = 3, kGeoA2D = 4, kGeoCube = 5, kGeoACube = 6;
// tex variants (Inst::layout): plain, .level (explicit LOD), .grad (gradients).
inline constexpr uint8_t kTexBase = 0, kTexLevel = 1, kTexGrad = 2;
// suld/sust out-of-range behaviour (Inst::m).
inline constexpr uint8_t kSurfTrap = 0, kSurfClamp = 1, kSurfZero = 2;
// txq / suq queries (Inst::k).
enum TexQuery : uint8_t {
  kQWidth, kQHeight, kQDepth, kQChannelDataType, kQChannelOrder, kQNormalizedCoords, kQArraySize,
  kQNumMipmapLevels, kQNumSamples, kQFilterMode, kQAddrMode0, kQAddrMode1, kQAddrMode2,
  kQForceUnnormalizedCoords, kQMemoryLayout,
};

// The sampling arithmetic, for the interpreter and for tests that model it.
namespace tex {

// Reads one texel's channels as the sampler returns them (before filtering):
// floats, or integers (as doubles) for element-type reads of integer formats.
void decodeTexel(const TexFormat& f, const uint8_t* p, bool normalized_read, bool srgb, double out[4]);
// Whether a texture of this format and sampler returns floats.
bool returnsFloat(const TexFormat& f, const TexSampler& s);
// A linear filter's weight for fraction `frac` (9-bit fixed point, 8 fractional bits).
double weight(double frac);
// The texel index that address mode `mode` makes of `i` in [0, n); -1: the border.
int64_t addressIndex(int64_t i, int64_t n, uint8_t mode);
// The cube face (0..5) and the face's normalised coordinates of direction (x, y, z).
int cubeFace(double x, double y, double z, double& u, double& v);

}  // namespace tex

}  // namespace rgpu::server::ptx
