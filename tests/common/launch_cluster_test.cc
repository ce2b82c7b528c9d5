// The cluster rules every checker of a launch shares (common/launch_cluster.h).
#include "common/launch_cluster.h"

#include <gtest/gtest.h>

namespace rgpu::common {
namespace {

TEST(LaunchCluster, TheRequestTheKernelsOwnOrNoneAndNvidiasRefusals) {
  bool explicit_cluster = true;
  // No cluster anywhere: one block per cluster, not a cluster launch.
  auto none = launchCluster("k", {}, false, {6, 1, 1}, {}, false, explicit_cluster);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->x * none->y * none->z, 1u);
  EXPECT_FALSE(explicit_cluster);
  // The kernel's own, and a request that repeats it.
  auto own = launchCluster("k", {2, 1, 1}, true, {6, 2, 1}, {}, false, explicit_cluster);
  ASSERT_TRUE(own);
  EXPECT_EQ(own->x, 2u);
  EXPECT_TRUE(explicit_cluster);
  EXPECT_TRUE(launchCluster("k", {2, 1, 1}, true, {6, 2, 1}, {2, 1, 1}, false, explicit_cluster));
  // A request on a kernel without one.
  auto asked = launchCluster("k", {}, false, {8, 1, 1}, {4, 1, 1}, false, explicit_cluster);
  ASSERT_TRUE(asked);
  EXPECT_EQ(asked->x, 4u);
  EXPECT_TRUE(explicit_cluster);
  // Refusals, each cudaErrorInvalidClusterSize naming the kernel.
  struct Bad {
    ClusterDims own;
    bool needs;
    ClusterDims grid, requested;
    bool non_portable;
    const char* why;
  };
  const Bad bad[] = {
      {{}, false, {8, 1, 1}, {4, 0, 1}, false, "at least 1"},
      {{2, 1, 1}, true, {8, 1, 1}, {4, 1, 1}, false, "compiled for clusters of 2x1x1"},
      {{}, true, {8, 1, 1}, {}, false, "runs in clusters only"},
      {{}, false, {6, 1, 1}, {4, 1, 1}, false, "not a whole number of clusters"},
      {{}, false, {32, 1, 1}, {16, 1, 1}, false, "at most 8"},
      {{}, false, {64, 1, 1}, {32, 1, 1}, true, "at most 16"},
  };
  for (const Bad& b : bad) {
    auto r = launchCluster("kern", b.own, b.needs, b.grid, b.requested, b.non_portable, explicit_cluster);
    ASSERT_FALSE(r) << b.why;
    EXPECT_EQ(r.status().code(), err::kInvalidClusterSize);
    EXPECT_NE(r.status().message().find(b.why), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("kernel kern"), std::string::npos) << r.status().message();
  }
  // 16 blocks with non-portable sizes allowed.
  EXPECT_TRUE(launchCluster("k", {}, false, {32, 1, 1}, {16, 1, 1}, true, explicit_cluster));
}

}  // namespace
}  // namespace rgpu::common
