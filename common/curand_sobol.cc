// cuRAND's Sobol generators on the CPU, bit for bit (curand_cpu.h): Sobol32,
// scrambled Sobol32, Sobol64 and scrambled Sobol64 from NVIDIA's direction
// vectors and scramble constants, which the request carries (the client reads
// them out of NVIDIA's libcurand.so.10; no header or Debian package holds
// them). Each value is computed from its index alone (Gray code: the XOR of
// the direction vectors of idx ^ (idx >> 1)'s set bits), so a call written in
// pieces gives what it gives whole. The conversions are curand_uniform.h's and
// curand_normal_static.h's, as NVIDIA's host generator computes them: Sobol32
// uniform doubles add 2^-32; normals are the inverse normal CDF.
//
// Built with -ffp-contract=off (common/CMakeLists.txt).
#include <cmath>
#include <cstring>
#include <string>

#include "common/curand_cpu.h"
#include "common/curand_math.h"

namespace rgpu::common::curand {

Status sobolCheck(const Fill& f) {
  const bool wide = isSobol64(f.rng);
  if (f.dims < 1 || f.dims > kMaxSobolDimensions)
    return Status(err::kInvalidValue, "Sobol dimensions " + std::to_string(f.dims) + " (1 to 20000)");
  if ((f.dist == Dist::kBits64) != wide && (f.dist == Dist::kBits64 || f.dist == Dist::kBits32))
    return Status(err::kInvalidValue, wide ? "32-bit values of a 64-bit Sobol generator"
                                           : "64-bit values of a 32-bit generator");
  if (f.call_count % f.dims || f.call_start < f.offset || (f.call_start - f.offset) % f.dims ||
      f.position < f.call_start || f.position - f.call_start > f.call_count)
    return Status(err::kInvalidValue, "a Sobol call of " + std::to_string(f.call_count) + " values over " +
                                          std::to_string(f.dims) + " dimensions does not hold together");
  if (f.directions.size() != static_cast<size_t>(f.dims) * directionWords(f.rng) ||
      f.scramble.size() != static_cast<size_t>(f.dims) * scrambleWords(f.rng))
    return Status(err::kInvalidValue, "Sobol direction vectors or scramble constants of the wrong size");
  return Status::ok();
}

namespace {

uint64_t word64(const std::vector<uint32_t>& v, size_t at) {
  return static_cast<uint64_t>(v[at]) | static_cast<uint64_t>(v[at + 1]) << 32;
}

// The bits of index `idx` of dimension `d`.
uint32_t bits32(const Fill& f, uint32_t d, uint64_t idx) {
  uint32_t x = f.scramble.empty() ? 0 : f.scramble[d];
  const uint32_t* v = f.directions.data() + static_cast<size_t>(d) * 32;
  const uint64_t gray = idx ^ (idx >> 1);
  for (int b = 0; b < 32; ++b)
    if (gray >> b & 1) x ^= v[b];
  return x;
}
uint64_t bits64(const Fill& f, uint32_t d, uint64_t idx) {
  uint64_t x = f.scramble.empty() ? 0 : word64(f.scramble, static_cast<size_t>(d) * 2);
  const size_t at = static_cast<size_t>(d) * 128;
  const uint64_t gray = idx ^ (idx >> 1);
  for (int b = 0; b < 64; ++b)
    if (gray >> b & 1) x ^= word64(f.directions, at + 2 * b);
  return x;
}

// curand_uniform.h's and curand_normal_static.h's conversions of a 32-bit
// word and of a 64-bit one.
float uniformOf(uint32_t x) { return math::uniform(x); }
float uniformOf(uint64_t x) { return math::uniform(static_cast<uint32_t>(x >> 32)); }
double uniformDoubleOf(uint32_t x) {
  constexpr double k = 2.3283064365386963e-10;  // CURAND_2POW32_INV_DOUBLE
  return x * k + k;
}
double uniformDoubleOf(uint64_t x) { return (x >> 11) * math::k2Pow53Inv + (math::k2Pow53Inv / 2.0); }
float normalOf(uint32_t x) { return math::normalIcdf(x); }
float normalOf(uint64_t x) { return math::normalIcdf(static_cast<uint32_t>(x >> 32)); }

// One value of `f`'s kind from the bits `x` (the generator's width: check() refused the other's words).
template <typename W>
void value(const Fill& f, W x, uint8_t* o) {
  switch (f.dist) {
    case Dist::kBits32: case Dist::kBits64: std::memcpy(o, &x, sizeof x); return;
    case Dist::kPoisson: return;  // (poissonGenerate() makes them of the words)
    case Dist::kUniform: { const float v = uniformOf(x); std::memcpy(o, &v, 4); return; }
    case Dist::kUniformDouble: { const double v = uniformDoubleOf(x); std::memcpy(o, &v, 8); return; }
    case Dist::kNormal: case Dist::kLogNormal: {
      const float v = math::shaped(normalOf(x), f.dist, f.mean, f.stddev);
      std::memcpy(o, &v, 4);
      return;
    }
    case Dist::kNormalDouble: case Dist::kLogNormalDouble: {
      const double v = math::shaped(math::normalIcdfDouble(x), f.dist, f.mean, f.stddev);
      std::memcpy(o, &v, 8);
      return;
    }
  }
}

}  // namespace

Status sobolGenerate(const Fill& f, uint8_t* out, uint64_t count) {
  const uint64_t per = f.call_count / f.dims, first = f.offset + (f.call_start - f.offset) / f.dims;
  const uint32_t width = valueBytes(f.dist);
  if (f.position - f.call_start + count > f.call_count)
    return Status(err::kInvalidValue, "a Sobol part past the end of its call");
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t k = f.position - f.call_start + j;
    const uint32_t d = static_cast<uint32_t>(k / per);
    const uint64_t idx = first + k % per;
    if (isSobol64(f.rng)) value(f, bits64(f, d, idx), out + j * width);
    else value(f, bits32(f, d, idx), out + j * width);
  }
  return Status::ok();
}

}  // namespace rgpu::common::curand
