// The shape of a CUDA array's mipmap level, as the client (cudaArrayGetInfo,
// copy arithmetic), the server (checks, the sim's layout) and the drivers
// agree on it: each level halves width, height and a 3D depth (never below
// 1); layers and cube faces are not halved. Missing dimensions (CUDA's 0
// height of a 1D array, 0 depth of a 2D one) count as 1.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rgpu::common {

struct ArrayLevelDims {
  uint64_t width = 1, height = 1, slices = 1;  // elements, rows, slices (3D depth, layers, cube faces)
};

// Level `level` of an array of width x height x depth elements; `layered`:
// the depth counts layers (or cube faces), not a third dimension.
inline ArrayLevelDims arrayLevel(uint64_t width, uint64_t height, uint64_t depth, bool layered, uint32_t level) {
  auto halve = [level](uint64_t v) { return std::max<uint64_t>(level < 64 ? v >> level : 0, 1); };
  ArrayLevelDims d;
  d.width = halve(width);
  d.height = height ? halve(height) : 1;
  d.slices = layered ? std::max<uint64_t>(depth, 1) : depth ? halve(depth) : 1;
  return d;
}

}  // namespace rgpu::common
