// A range of device memory a library call reads or writes, named for the
// error that refuses it (common/solver_args.h, common/sparse_args.h).
#pragma once

#include <cstdint>

namespace rgpu::common {

struct DeviceRange {
  uint64_t ptr, bytes;
  const char* what;
};

}  // namespace rgpu::common
