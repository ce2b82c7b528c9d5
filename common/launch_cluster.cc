#include "common/launch_cluster.h"

namespace rgpu::common {

Result<ClusterDims> launchCluster(const std::string& kernel, ClusterDims own, bool needs_cluster, ClusterDims grid,
                                  ClusterDims requested, bool non_portable, bool& explicit_cluster) {
  auto dims = [](ClusterDims d) { return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z); };
  auto bad = [&](const std::string& why) { return Status(err::kInvalidClusterSize, "kernel " + kernel + ": " + why); };
  const bool asked = requested.x || requested.y || requested.z, has_own = own.x != 0;
  if (asked && (!requested.x || !requested.y || !requested.z)) return bad("cluster dimensions must all be at least 1");
  if (asked && has_own && (requested.x != own.x || requested.y != own.y || requested.z != own.z))
    return bad("it is compiled for clusters of " + dims(own) + " blocks (__cluster_dims__)");
  if (!asked && !has_own && needs_cluster) return bad("it runs in clusters only: launch it with a cluster dimension");
  const ClusterDims c = asked ? requested : has_own ? own : ClusterDims{1, 1, 1};
  explicit_cluster = asked || has_own || needs_cluster;
  if (grid.x % c.x || grid.y % c.y || grid.z % c.z)
    return bad("the grid (" + dims(grid) + ") is not a whole number of clusters of " + dims(c) + " blocks");
  const uint64_t size = uint64_t{c.x} * c.y * c.z, limit = non_portable ? 16 : 8;
  if (size > limit)
    return bad("clusters of " + std::to_string(size) + " blocks; at most " + std::to_string(limit) +
               (non_portable ? "" : " (16 with cudaFuncAttributeNonPortableClusterSizeAllowed)"));
  return c;
}

}  // namespace rgpu::common
