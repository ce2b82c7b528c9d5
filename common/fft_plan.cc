#include "common/fft_plan.h"

namespace rgpu::common::fft {

namespace {

bool knownType(int32_t t) { return t == kR2C || t == kC2R || t == kC2C || t == kD2Z || t == kZ2D || t == kZ2Z; }

Verdict refuse(Problem p, std::string why) { return Verdict{p, std::move(why)}; }

// Sizes of the input or output side: the complex side of a real transform
// has n/2 + 1 elements in its last dimension.
void sideSizes(const Layout& l, bool input, int64_t out[kMaxRank]) {
  const bool half = input ? realOutput(l.type) : realInput(l.type);
  for (int k = 0; k < l.rank; ++k) out[k] = l.n[k];
  if (half) out[l.rank - 1] = l.n[l.rank - 1] / 2 + 1;
}

uint64_t spanBytes(const Layout& l, bool input) {
  int64_t sizes[kMaxRank];
  sideSizes(l, input, sizes);
  const int64_t* stride = input ? l.is : l.os;
  // Sizes, strides (a stride times the embeddings) and distances are at most
  // 2^40 (check()): each term is below 2^80, the sum is taken in 128 bits.
  unsigned __int128 last = 0;
  for (int k = 0; k < l.rank; ++k) last += static_cast<unsigned __int128>(sizes[k] - 1) * static_cast<uint64_t>(stride[k]);
  last += static_cast<unsigned __int128>(l.batch - 1) * static_cast<uint64_t>(input ? l.idist : l.odist);
  unsigned __int128 bytes = (last + 1) * (input ? inputElementBytes(l.type) : outputElementBytes(l.type));
  return bytes > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(bytes);
}

}  // namespace

Verdict check(const Plan& p) {
  if (!knownType(p.type)) return refuse(Problem::kInvalidType, "transform type " + std::to_string(p.type));
  if (p.rank < 1 || p.rank > kMaxRank) return refuse(Problem::kInvalidSize, "rank " + std::to_string(p.rank));
  if (p.batch < 1 || p.batch > kMaxExtent) return refuse(Problem::kInvalidSize, "batch " + std::to_string(p.batch));
  unsigned __int128 elements = 1;
  for (int k = 0; k < p.rank; ++k) {
    if (p.n[k] < 1 || p.n[k] > kMaxExtent)
      return refuse(Problem::kInvalidSize, "size " + std::to_string(p.n[k]) + " in dimension " + std::to_string(k));
    elements *= static_cast<uint64_t>(p.n[k]);
  }
  if (elements > static_cast<uint64_t>(kMaxExtent)) return refuse(Problem::kInvalidSize, "too many elements in one transform");
  if (!p.advanced) return {};
  for (int64_t v : {p.istride, p.ostride})
    if (v < 1 || v > kMaxExtent) return refuse(Problem::kInvalidValue, "stride " + std::to_string(v));
  for (int64_t v : {p.idist, p.odist})
    if (v < 0 || v > kMaxExtent) return refuse(Problem::kInvalidValue, "distance " + std::to_string(v));
  unsigned __int128 in = 1, out = 1;
  for (int k = 1; k < p.rank; ++k) {
    for (int64_t v : {p.inembed[k], p.onembed[k]})
      if (v < 1 || v > kMaxExtent) return refuse(Problem::kInvalidValue, "embedding " + std::to_string(v));
    in *= static_cast<uint64_t>(p.inembed[k]);
    out *= static_cast<uint64_t>(p.onembed[k]);
  }
  in *= static_cast<uint64_t>(p.istride);
  out *= static_cast<uint64_t>(p.ostride);
  if (in > static_cast<uint64_t>(kMaxExtent) || out > static_cast<uint64_t>(kMaxExtent))
    return refuse(Problem::kInvalidValue, "a stride times the embeddings spans more than 2^40 elements");
  return {};
}

Layout layoutOf(const Plan& p, bool in_place) {
  Layout l;
  l.type = p.type;
  l.rank = p.rank;
  l.batch = p.batch;
  l.in_place = in_place;
  for (int k = 0; k < p.rank; ++k) l.n[k] = p.n[k];
  if (p.advanced) {
    int64_t si = p.istride, so = p.ostride;
    for (int k = p.rank - 1; k >= 0; --k) {
      l.is[k] = si;
      l.os[k] = so;
      if (k > 0) {
        si *= p.inembed[k];
        so *= p.onembed[k];
      }
    }
    l.idist = p.idist;
    l.odist = p.odist;
    return l;
  }
  // Basic: row-major, each side's last dimension as long as its elements are
  // (a real side transformed in place padded to the complex side's length).
  int64_t in_sizes[kMaxRank], out_sizes[kMaxRank];
  sideSizes(l, true, in_sizes);
  sideSizes(l, false, out_sizes);
  const int64_t half = p.n[p.rank - 1] / 2 + 1;
  if (in_place && realInput(p.type)) in_sizes[p.rank - 1] = 2 * half;
  if (in_place && realOutput(p.type)) out_sizes[p.rank - 1] = 2 * half;
  int64_t si = 1, so = 1;
  for (int k = p.rank - 1; k >= 0; --k) {
    l.is[k] = si;
    l.os[k] = so;
    si *= in_sizes[k];
    so *= out_sizes[k];
  }
  l.idist = si;
  l.odist = so;
  return l;
}

uint64_t inputBytes(const Layout& l) { return spanBytes(l, true); }
uint64_t outputBytes(const Layout& l) { return spanBytes(l, false); }

}  // namespace rgpu::common::fft
