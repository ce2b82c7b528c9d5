#include "server/daemon/preauth_guard.h"

#include <gtest/gtest.h>

#include <vector>

namespace rgpu::server {
namespace {

TEST(PreAuthGuard, AFloodFromOneAddressDisplacesOnlyItsOwnOldest) {
  PreAuthGuard g({/*total=*/10, /*per_address=*/3});
  std::vector<int> evicted;
  uint64_t legit = g.admit("10.0.0.1", [&] { evicted.push_back(-1); });
  for (int i = 0; i < 100; ++i) g.admit("10.0.0.9", [&evicted, i] { evicted.push_back(i); });
  EXPECT_EQ(g.countFrom("10.0.0.9"), 3u);
  EXPECT_EQ(g.countFrom("10.0.0.1"), 1u);
  ASSERT_EQ(evicted.size(), 97u);
  EXPECT_EQ(evicted.front(), 0) << "the oldest goes first";
  EXPECT_EQ(evicted.back(), 96);
  g.forget(legit);
  EXPECT_EQ(g.count(), 3u);
}

TEST(PreAuthGuard, TheTotalCapEvictsTheOldestOfAnyAddress) {
  PreAuthGuard g({/*total=*/4, /*per_address=*/4});
  std::vector<std::string> evicted;
  for (int i = 0; i < 6; ++i) {
    std::string a = "10.0.0." + std::to_string(i);
    g.admit(a, [&evicted, a] { evicted.push_back(a); });
  }
  EXPECT_EQ(g.count(), 4u);
  EXPECT_EQ(evicted, (std::vector<std::string>{"10.0.0.0", "10.0.0.1"}));
  EXPECT_EQ(g.evicted(), 2u);
}

TEST(PreAuthGuard, AnAuthenticatedConnectionLeavesAndRebindingChangesTheEviction) {
  PreAuthGuard g({2, 2});
  int socket_closed = 0, worker_killed = 0;
  uint64_t a = g.admit("h", [&] { ++socket_closed; });
  g.rebind(a, [&] { ++worker_killed; });  // its first bytes came: a worker now
  uint64_t b = g.admit("h", [] {});
  g.forget(b);  // authenticated: no longer counted, never evicted
  g.forget(b);  // (twice is harmless)
  g.admit("h", [] {});
  g.admit("h", [] {});
  EXPECT_EQ(worker_killed, 1);
  EXPECT_EQ(socket_closed, 0);
  EXPECT_TRUE(g.evictOldest());
  EXPECT_EQ(g.count(), 1u);
}

}  // namespace
}  // namespace rgpu::server
