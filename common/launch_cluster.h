// The thread-block cluster a kernel launch runs in, as NVIDIA's driver
// decides it. One set of rules for every place that checks a launch: the
// client (so the error is immediate, as CUDA's launch errors are), the sim
// backend, and the tests' fake driver.
//
// The cluster is the launch's request (cudaLaunchAttributeClusterDimension),
// else the kernel's own (__cluster_dims__, or what
// cudaFuncAttributeRequiredCluster* set), else none ({1,1,1}). Refused with
// cudaErrorInvalidClusterSize: a request with a zero dimension, a request
// that contradicts the kernel's own, a kernel that needs clusters launched
// without one, a dimension that does not divide the grid, more than 8 blocks
// (16 where the kernel allows non-portable sizes). Whether the device has
// clusters at all (compute capability 9.0) is the caller's to check.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace rgpu::common {

struct ClusterDims {
  uint32_t x = 0, y = 0, z = 0;  // all 0: none given
};

// `own`: the kernel's cluster (0s: none); `needs_cluster`: the kernel runs in
// clusters only. `explicit_cluster` says whether the launch is a cluster launch.
Result<ClusterDims> launchCluster(const std::string& kernel, ClusterDims own, bool needs_cluster, ClusterDims grid,
                                  ClusterDims requested, bool non_portable, bool& explicit_cluster);

}  // namespace rgpu::common
