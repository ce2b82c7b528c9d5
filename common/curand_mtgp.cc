// cuRAND's MTGP32 generator on the CPU, bit for bit (common/curand_cpu.h).
// Built with -ffp-contract=off (common/CMakeLists.txt), as curand_cpu.cc.
//
// NVIDIA's host API runs 192 MTGP32 blocks (the first 192 parameter sets of
// the toolkit's curand_mtgp32dc_p_11213.h), block i seeded with
// (uint32)(seed ^ seed >> 32) + i + 1 as curandMakeMTGP32KernelState does.
// Every value takes one element of one block's sequence, whatever its kind:
// position p is element (p / 49152) * 256 + p % 256 of block (p / 256) % 192
// (rows of 256 elements per block). So a value depends on its position only.
//
// MTGP32 has no jump ahead: reaching row r means running every block r rows.
// The block states at the start of the last row of recent calls are kept
// (kKeptStates, per seed and row), so a program that goes on where its last
// call stopped pays for its own values only.
#include <cuda_runtime_api.h>
#include <curand_mtgp32.h>
#include <curand_mtgp32dc_p_11213.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "common/curand_cpu.h"
#include "common/curand_math.h"

namespace rgpu::common::curand {
namespace {

constexpr uint64_t kBlocks = 192, kRow = 256, kRowValues = kBlocks * kRow;
constexpr unsigned kRing = 1024, kRingMask = kRing - 1, kN = 351;  // MTGP32_STATE_SIZE, MTGPDC_N
constexpr size_t kKeptStates = 4;

struct Block {
  uint32_t s[kRing];
  uint32_t off = 0;
};

const mtgp32_params_fast_t& params(uint64_t b) { return mtgp32dc_params_fast_11213[b]; }

// mtgp32_init_state (curand_mtgp32_host.h).
void init(Block& blk, uint64_t b, uint32_t seed) {
  const mtgp32_params_fast_t& p = params(b);
  const int size = p.mexp / 32 + 1;
  const uint32_t hidden = p.tbl[4] ^ (p.tbl[8] << 16);
  uint32_t tmp = hidden;
  tmp += tmp >> 16;
  tmp += tmp >> 8;
  std::memset(blk.s, 0, sizeof blk.s);
  std::memset(blk.s, tmp & 0xff, sizeof(uint32_t) * size);
  blk.s[0] = seed;
  blk.s[1] = hidden;
  for (int i = 1; i < size; ++i) blk.s[i] ^= 1812433253u * (blk.s[i - 1] ^ (blk.s[i - 1] >> 30)) + i;
  blk.off = 0;
}

// The next element of block b (curand_mtgp32_kernel.h's curand(), one thread at a time).
inline uint32_t next(Block& blk, const mtgp32_params_fast_t& p) {
  const uint32_t o0 = blk.off;
  uint32_t x = (blk.s[o0 & kRingMask] & p.mask) ^ blk.s[(o0 + 1) & kRingMask];
  x ^= x << p.sh1;
  const uint32_t y = x ^ (blk.s[(o0 + p.pos) & kRingMask] >> p.sh2);
  const uint32_t r = y ^ p.tbl[y & 0x0f];
  blk.s[(o0 + kN) & kRingMask] = r;
  uint32_t t = blk.s[(o0 + p.pos - 1) & kRingMask];
  t ^= t >> 16;
  t ^= t >> 8;
  blk.off = (o0 + 1) & kRingMask;
  return r ^ p.tmp_tbl[t & 0x0f];
}

// Every block's state at the start of `row` for `seed`.
struct States {
  uint64_t seed = 0, row = 0;
  std::vector<Block> blocks;
};

std::mutex kept_mu;
std::list<std::shared_ptr<const States>>& kept() {
  static std::list<std::shared_ptr<const States>> k;
  return k;
}

// The kept states of `seed` nearest below `row`, or the seed's start.
std::unique_ptr<States> nearest(uint64_t seed, uint64_t row) {
  {
    std::lock_guard lock(kept_mu);
    std::shared_ptr<const States> best;
    for (auto& s : kept())
      if (s->seed == seed && s->row <= row && (!best || s->row > best->row)) best = s;
    if (best) return std::make_unique<States>(*best);
  }
  auto s = std::make_unique<States>();
  s->seed = seed;
  s->blocks.resize(kBlocks);
  const uint64_t folded = seed ^ (seed >> 32);
  for (uint64_t b = 0; b < kBlocks; ++b) init(s->blocks[b], b, static_cast<uint32_t>(folded) + static_cast<uint32_t>(b) + 1);
  return s;
}

void keep(const States& s) {
  std::lock_guard lock(kept_mu);
  auto& k = kept();
  for (auto it = k.begin(); it != k.end(); ++it)
    if ((*it)->seed == s.seed && (*it)->row == s.row) {
      k.splice(k.begin(), k, it);
      return;
    }
  k.push_front(std::make_shared<const States>(s));
  if (k.size() > kKeptStates) k.pop_back();
}

}  // namespace

// ---- the inverse normal CDF (curand_math.h) --------------------------------------
namespace math {
namespace {
// erfinv and erfcinv by J.M. Blair, C.A. Edwards, J.H. Johnson, "Rational
// Chebyshev Approximations for the Inverse of the Error Function", Math.
// Comp. 30 (1976), tables 18, 39, 59 and 82, evaluated in the order NVIDIA's
// host code evaluates them (checked bit for bit against its generator).
double poly(double t, std::initializer_list<double> c) {
  double r = *c.begin();
  for (auto it = c.begin() + 1; it != c.end(); ++it) r = r * t + *it;
  return r;
}
// (q's leading coefficient is 1.)
double monic(double t, std::initializer_list<double> c) {
  double r = t + *c.begin();
  for (auto it = c.begin() + 1; it != c.end(); ++it) r = r * t + *it;
  return r;
}
double tail59(double t) {
  const double p = poly(t, {2.7834010353747001060e-3, 8.6030097526280260580e-1, 2.1371214997265515515e+0,
                            3.1598519601132090206e+0, 3.5780402569085996758e+0, 1.5335297523989890804e+0,
                            3.4839207139657522572e-1, 5.3644861147153648366e-2, 4.3836709877126095665e-3,
                            1.3858518113496718808e-4, 1.1738352509991666680e-6});
  const double q = monic(t, {2.2859981272422905412e+0, 4.3859045256449554654e+0, 4.6632960348736635331e+0,
                             3.9846608184671757296e+0, 1.6068377709719017609e+0, 3.5609087305900265560e-1,
                             5.3963550303200816744e-2, 4.3873424022706935023e-3, 1.3858762165532246059e-4,
                             1.1738313872397777529e-6});
  return p / (q * t);
}
double erfinv(double a) {
  const double fa = std::fabs(a);
  if (fa >= 1.0) return fa == 1.0 ? a * HUGE_VAL : std::nan("");
  if (fa >= 0.9375) {
    const double t = tail59(1.0 / std::sqrt(-std::log1p(-fa)));
    return a < 0.0 ? -t : t;
  }
  if (fa >= 0.75) {
    const double t = a * a - .87890625;
    const double p = poly(t, {.21489185007307062000e+0, -.64200071507209448655e+1, .29631331505876308123e+2,
                              -.47644367129787181803e+2, .34810057749357500873e+2, -.12954198980646771502e+2,
                              .25349389220714893917e+1, -.24758242362823355486e+0, .94897362808681080020e-2});
    const double q = monic(t, {-.12831383833953226499e+2, .41409991778428888716e+2, -.53715373448862143349e+2,
                               .33880176779595142685e+2, -.11315360624238054876e+2, .20369295047216351160e+1,
                               -.18611650627372178511e+0, .67544512778850945940e-2});
    return a * (p / q);
  }
  const double t = a * a - .5625;
  const double p = poly(t, {-.23886240104308755900e+2, .45560204272689128170e+3, -.22977467176607144887e+4,
                            .46631433533434331287e+4, -.43799652308386926161e+4, .19007153590528134753e+4,
                            -.30786872642313695280e+3});
  const double q = monic(t, {-.83288327901936570000e+2, .92741319160935318800e+3, -.35088976383877264098e+4,
                             .59039348134843665626e+4, -.48481635430048872102e+4, .18997769186453057810e+4,
                             -.28386514725366621129e+3});
  return a * (p / q);
}
double erfcinv(double a) {
  if (std::isnan(a)) return a + a;
  if (a <= 0.0) return a == 0.0 ? HUGE_VAL : std::nan("");
  if (a >= 0.0625) return erfinv(1.0 - a);
  const double t = 1.0 / std::sqrt(-std::log(a));
  if (a >= 1e-100) return tail59(t);
  const double p = poly(t, {6.9952990607058154858e-1, 1.9507620287580568829e+0, 8.2810030904462690216e-1,
                            1.1279046353630280005e-1, 6.0537914739162189689e-3, 1.3714329569665128933e-4,
                            1.2964481560643197452e-6, 4.6156006321345332510e-9, 4.5344689563209398450e-12});
  const double q = monic(t, {1.5771922386662040546e+0, 2.1238242087454993542e+0, 8.4001814918178042919e-1,
                             1.1311889334355782065e-1, 6.0574830550097140404e-3, 1.3715891988350205065e-4,
                             1.2964671850944981713e-6, 4.6156017600933592558e-9, 4.5344687377088206783e-12});
  return p / (q * t);
}
}  // namespace

// curand_normal_static.h's _curand_normal_icdf and _curand_normal_icdf_double (erfcinvf is erfcinv in double).
float normalIcdf(uint32_t x) {
  float s = -1.4142135f;
  if (x > 0x80000000u) x = 0xffffffffu - x, s = -s;
  const float p = x * k2Pow32Inv + (k2Pow32Inv / 2.0f);
  return s * static_cast<float>(erfcinv(static_cast<double>(2.0f * p)));
}
double normalIcdfDouble(uint32_t x) {
  double s = -1.4142135623730951;
  if (x > 0x80000000u) x = 0xffffffffu - x, s = -s;
  constexpr double k = 2.3283064365386963e-10;  // CURAND_2POW32_INV_DOUBLE
  const double p = x * k + (k / 2.0);
  return s * erfcinv(2.0 * p);
}
double normalIcdfDouble(uint64_t x) {
  double s = -1.4142135623730951;
  x >>= 11;
  if (x > 0x10000000000000ull) x = 0x1fffffffffffffull - x, s = -s;
  const double p = x * k2Pow53Inv + (k2Pow53Inv / 2.0);
  return s * erfcinv(2.0 * p);
}

}  // namespace math

namespace {

// One value of `f`'s kind from an element.
void value(const Fill& f, uint32_t x, uint8_t* o) {
  switch (f.dist) {
    case Dist::kBits32: std::memcpy(o, &x, 4); break;
    case Dist::kBits64: case Dist::kPoisson: break;  // (check() refuses the one, poissonGenerate() takes the other)
    case Dist::kUniform: { const float v = math::uniform(x); std::memcpy(o, &v, 4); break; }
    case Dist::kUniformDouble: {
      constexpr double k = 2.3283064365386963e-10;
      const double v = x * k + k;  // (NVIDIA's host MTGP32: 2^-32 added, not 2^-33)
      std::memcpy(o, &v, 8);
      break;
    }
    case Dist::kNormal: case Dist::kLogNormal: {
      const float v = math::shaped(math::normalIcdf(x), f.dist, f.mean, f.stddev);
      std::memcpy(o, &v, 4);
      break;
    }
    case Dist::kNormalDouble: {  // (NVIDIA's: the float inverse, widened)
      const double v = static_cast<double>(math::normalIcdf(x)) * f.stddev + f.mean;
      std::memcpy(o, &v, 8);
      break;
    }
    case Dist::kLogNormalDouble: {
      const double v = std::exp(math::normalIcdfDouble(x) * f.stddev + f.mean);
      std::memcpy(o, &v, 8);
      break;
    }
  }
}

}  // namespace

Status mtgpGenerate(const Fill& f, uint8_t* out, uint64_t count) {
  const uint64_t first_row = f.position / kRowValues, last_row = (f.position + count - 1) / kRowValues;
  std::unique_ptr<States> st = nearest(f.seed, first_row);
  if (first_row - st->row > kMaxMtgpSkipRows)
    return Status(err::kInvalidValue, "MTGP32 position " + std::to_string(f.position) + " lies " +
                                          std::to_string(first_row - st->row) +
                                          " rows of 49152 values past the nearest state this process keeps for the "
                                          "seed (at most kMaxMtgpSkipRows, " + std::to_string(kMaxMtgpSkipRows) +
                                          ", are run to reach a call's first value)");
  for (; st->row < first_row; ++st->row)
    for (uint64_t b = 0; b < kBlocks; ++b)
      for (uint64_t k = 0; k < kRow; ++k) (void)next(st->blocks[b], params(b));
  const uint32_t width = valueBytes(f.dist);
  for (uint64_t row = first_row; row <= last_row; ++row) {
    if (row == last_row) keep(*st);  // (the next call starts in this row, or the one after)
    const uint64_t base = row * kRowValues;
    for (uint64_t b = 0; b < kBlocks; ++b) {
      Block& blk = st->blocks[b];
      const mtgp32_params_fast_t& p = params(b);
      for (uint64_t k = 0; k < kRow; ++k) {
        const uint32_t x = next(blk, p);
        const uint64_t pos = base + b * kRow + k;
        if (pos >= f.position && pos < f.position + count) value(f, x, out + (pos - f.position) * width);
      }
    }
    ++st->row;
  }
  if ((f.position + count) % kRowValues == 0) keep(*st);  // (ended at a row's end: the next starts a row)
  return Status::ok();
}

}  // namespace rgpu::common::curand
