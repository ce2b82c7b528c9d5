// cuRAND's conversions of raw draws into values, as NVIDIA's host generator
// computes them (shared by common/curand_cpu.cc and common/curand_slots.cc;
// both are built with -ffp-contract=off: a fused multiply-add would round
// differently from NVIDIA's generator).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/curand_cpu.h"

namespace rgpu::common::curand::math {

inline constexpr float k2Pow32Inv = 2.3283064e-10f;
inline constexpr float k2Pow32Inv2Pi = 2.3283064e-10f * 6.2831855f;
inline constexpr double k2Pow53Inv = 1.0 / 9007199254740992.0;
inline constexpr double k2Pi = 6.283185307179586;
inline constexpr double kPi = 3.141592653589793;
inline constexpr float k2PiFloat = 6.2831855f;

// 32-bit words (XORWOW, Philox).
inline float uniform(uint32_t x) { return x * k2Pow32Inv + (k2Pow32Inv / 2.0f); }
inline double uniformDouble(uint32_t x, uint32_t y) {
  const uint64_t z = static_cast<uint64_t>(x) ^ (static_cast<uint64_t>(y) << (53 - 32));
  return z * k2Pow53Inv + (k2Pow53Inv / 2.0);
}
// Box-Muller on two words: (sin, cos) times the radius.
inline void boxMuller(uint32_t x, uint32_t y, float* a, float* b) {
  const float u = uniform(x);
  const float v = y * k2Pow32Inv2Pi + (k2Pow32Inv2Pi / 2.0f);
  const float s = sqrtf(-2.0f * logf(u));
  *a = sinf(v) * s;
  *b = cosf(v) * s;
}
// ... on four words (two doubles' worth).
inline void boxMullerDouble(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, double* a, double* b) {
  const double u = uniformDouble(w0, w1), v = uniformDouble(w2, w3);
  const double s = std::sqrt(-2.0 * std::log(u));
  *a = std::sin(k2Pi * v) * s;
  *b = std::cos(k2Pi * v) * s;
}

// The inverse normal CDF of a word, as curand_normal_static.h's
// _curand_normal_icdf (float, of a 32-bit word) and _curand_normal_icdf_double
// (of a 32- or 64-bit word) compute it on NVIDIA's host generators (MTGP32,
// Sobol); erfcinv by Blair, Edwards and Johnson in NVIDIA's evaluation order
// (curand_mtgp.cc).
float normalIcdf(uint32_t x);
double normalIcdfDouble(uint32_t x);
double normalIcdfDouble(uint64_t x);

// A standard normal value as `d` asks for it: scaled, shifted, and for log-normal, exp of that.
inline float shaped(float v, Dist d, double mean, double stddev) {
  const float n = v * static_cast<float>(stddev) + static_cast<float>(mean);
  return d == Dist::kLogNormal ? expf(n) : n;
}
inline double shaped(double v, Dist d, double mean, double stddev) {
  const double n = v * stddev + mean;
  return d == Dist::kLogNormalDouble ? std::exp(n) : n;
}

}  // namespace rgpu::common::curand::math
