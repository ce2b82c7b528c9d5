// cuSPARSE's SpMV and SpMM on the CPU for the sim backend (and the fake
// cuSPARSE the CUDA backend's tests load): one call (common/sparse_args.h)
// on host memory, in the call's value type. The session checked every range;
// the offsets and indices it reads are checked here, as values: offsets that
// do not start at the base, decrease or pass nnz, and indices outside the
// matrix, fail the call (an error naming the first one) before anything is
// written. The sim needs no external buffer (bufferSize 0).
#pragma once

#include <complex>
#include <cstring>

#include "common/sparse_args.h"
#include "common/status.h"

namespace rgpu::server::simsparse {

// Any call of common/sparse_args.h (SpGEMM's steps: runSpGemm, sim_spgemm.cc).
Status run(const common::sparse::Args& a);
Status runSpGemm(const common::sparse::Args& a);

// f(T{}) for the C++ type T of cuSPARSE value type `type`.
template <typename F>
Status withValueType(int32_t type, F&& f) {
  switch (type) {
    case common::sparse::kR32F: return f(float{});
    case common::sparse::kR64F: return f(double{});
    case common::sparse::kC32F: return f(std::complex<float>{});
    case common::sparse::kC64F: return f(std::complex<double>{});
  }
  return Status(err::kNotSupported, "cuSPARSE data type " + std::to_string(type));
}

// Index i of an array of 32- or 64-bit indices.
inline int64_t indexAt(uint64_t ptr, int32_t type, int64_t i) {
  if (type == common::sparse::kIndex64) {
    int64_t v;
    std::memcpy(&v, reinterpret_cast<const uint8_t*>(ptr) + 8 * i, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(ptr) + 4 * i, 4);
  return v;
}

}  // namespace rgpu::server::simsparse
