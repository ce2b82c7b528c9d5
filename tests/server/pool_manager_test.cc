#include "server/pool/pool_manager.h"

#include <gtest/gtest.h>

namespace rgpu::server {
namespace {

using Clock = PoolManager::Clock;
using std::chrono::milliseconds;

std::vector<PoolDeviceInfo> twoDevices() {
  return {{"rgpu sim H100", "GPU-aaaa0000", 16ull << 30, 90}, {"rgpu sim A100", "GPU-bbbb0000", 8ull << 30, 80}};
}

UserEntry user(const std::string& name) {
  UserEntry u;
  u.name = name;
  u.token = name;
  return u;
}

ClientInfo client(const std::string& name) { return {name, "host", "127.0.0.1:1", 42}; }

TEST(PoolManager, PlacesOnTheLeastLoadedMatchingDevices) {
  PoolManager pool(twoDevices(), {user("alice")}, {});
  auto t = Clock::now();
  DeviceRequest one;
  one.count = 1;
  auto a = pool.admit(1, client("alice"), one, t);
  ASSERT_TRUE(a && *a);
  EXPECT_EQ((*a)->devices, std::vector<int>{0});  // both idle: more free memory first
  auto b = pool.admit(2, client("alice"), one, t);
  ASSERT_TRUE(b && *b);
  EXPECT_EQ((*b)->devices, std::vector<int>{1});  // device 0 has a session now
  DeviceRequest h100;
  h100.count = 1;
  h100.model = "*H100*";
  auto c = pool.admit(3, client("alice"), h100, t);
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->devices, std::vector<int>{0});
  DeviceRequest all;  // count 0: every allowed device
  auto d = pool.admit(4, client("alice"), all, t);
  ASSERT_TRUE(d && *d);
  EXPECT_EQ((*d)->devices, (std::vector<int>{0, 1}));
}

TEST(PoolManager, DeviceAccessFollowsThePolicy) {
  UserEntry bob = user("bob");
  bob.devices = {"GPU-bbbb"};  // UUID prefix
  UserEntry carol = user("carol");
  carol.devices = {"*H200*"};  // no such model here
  UserEntry dave = user("dave");
  dave.devices = {"0"};
  PoolManager pool(twoDevices(), {bob, carol, dave}, {});
  auto t = Clock::now();
  DeviceRequest any;
  any.count = 1;
  auto b = pool.admit(1, client("bob"), any, t);
  ASSERT_TRUE(b && *b);
  EXPECT_EQ((*b)->devices, std::vector<int>{1});
  auto c = pool.admit(2, client("carol"), any, t);
  ASSERT_TRUE(c);
  ASSERT_FALSE(*c);
  EXPECT_EQ(c->status().code(), err::kNotPermitted);
  EXPECT_NE(c->status().message().find("user 'carol' may not use any device"), std::string::npos);
  DeviceRequest two;
  two.count = 2;
  auto d = pool.admit(3, client("dave"), two, t);  // can never fit: refused at once, not queued
  ASSERT_TRUE(d);
  ASSERT_FALSE(*d);
  EXPECT_EQ(d->status().code(), err::kDevicesUnavailable);
  EXPECT_NE(d->status().message().find("not allowed for dave"), std::string::npos) << d->status().message();
  EXPECT_EQ(pool.queued(), 0u);
}

TEST(PoolManager, QuotaIsExactToTheByteAcrossTheUsersSessions) {
  UserEntry alice = user("alice");
  alice.memory_quota = 1 << 20;
  PoolManager pool(twoDevices(), {alice}, {});
  auto t = Clock::now();
  DeviceRequest r;
  r.count = 1;
  r.model = "*H100*";
  ASSERT_TRUE(*pool.admit(1, client("alice"), r, t));
  ASSERT_TRUE(*pool.admit(2, client("alice"), r, t));
  EXPECT_TRUE(pool.reserve(1, 0, (1 << 20) - 256));
  EXPECT_TRUE(pool.reserve(2, 0, 256));  // exactly the quota, over two sessions
  Status over = pool.reserve(2, 0, 1);
  EXPECT_EQ(over.code(), err::kMemoryAllocation);
  EXPECT_NE(over.message().find("memory quota of user 'alice' on device 0 exceeded: 1.0 MiB of 1.0 MiB in use, asked 1 B"),
            std::string::npos)
      << over.message();
  pool.release(1, 0, 256);  // credited at once
  EXPECT_TRUE(pool.reserve(2, 0, 256));
  EXPECT_EQ(pool.quotaView(2, 0), std::make_pair(uint64_t(1) << 20, uint64_t(1) << 20));
  pool.end(1);  // a worker that exits (or crashes) returns everything
  EXPECT_EQ(pool.quotaView(2, 0).second, 512u);
  EXPECT_EQ(pool.reserve(2, 1, 1).code(), err::kInvalidDevice);  // not placed there
  EXPECT_EQ(pool.reserve(9, 0, 1).code(), err::kNotPermitted);
}

TEST(PoolManager, APoolQuotaCountsEveryDeviceAndSessionOfTheUser) {
  UserEntry alice = user("alice");
  alice.pool_memory_quota = 3ull << 30;
  PoolManager pool(twoDevices(), {alice, user("bob")}, {});
  auto t = Clock::now();
  DeviceRequest all;
  auto a = pool.admit(1, client("alice"), all, t);
  auto b = pool.admit(2, client("alice"), all, t);
  ASSERT_TRUE(a && *a && b && *b);
  EXPECT_EQ((*a)->pool_quota, 3ull << 30);  // the worker checks every allocation with the daemon
  EXPECT_TRUE(pool.reserve(1, 0, 2ull << 30));
  EXPECT_TRUE(pool.reserve(2, 1, (1ull << 30) - 256));
  Status over = pool.reserve(2, 0, 512);  // another device, another session: the same quota
  EXPECT_EQ(over.code(), err::kMemoryAllocation);
  EXPECT_NE(over.message().find("pool memory quota of user 'alice' exceeded"), std::string::npos) << over.message();
  EXPECT_TRUE(pool.reserve(2, 0, 256));  // to the byte
  pool.release(1, 0, 1ull << 30);
  EXPECT_TRUE(pool.reserve(2, 1, 1ull << 30));
  auto c = pool.admit(3, client("bob"), all, t);
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->pool_quota, 0u);
  EXPECT_TRUE(pool.reserve(3, 0, 8ull << 30));  // bob has none
  pool.end(2);
  EXPECT_EQ(pool.poolUsed("alice"), 1ull << 30);
}

TEST(PoolManager, AMemberOfAPoolAllocatesWithinItsShareAndGivesBackAllButOneSlice) {
  UserEntry alice = user("alice");
  alice.pool_memory_quota = 32ull << 30;  // slices of 1 GiB
  EXPECT_EQ(poolQuotaSlice(alice.pool_memory_quota), 1ull << 30);
  EXPECT_EQ(poolQuotaSlice(1ull << 20), 1ull << 20);   // at least 1 MiB
  EXPECT_EQ(poolQuotaSlice(1ull << 40), 1ull << 30);   // at most 1 GiB
  PoolManager pool(twoDevices(), {alice}, {});
  pool.setPoolGrants(true);
  auto t = Clock::now();
  auto a = pool.admit(1, client("alice"), DeviceRequest{}, t);
  ASSERT_TRUE(a && *a);
  // No share yet: everything is a shortfall, and an allocation past the share is refused.
  EXPECT_EQ(pool.grantShortfall(1, 100 << 20), 100ull << 20);
  EXPECT_EQ(pool.reserve(1, 0, 100 << 20).code(), err::kMemoryAllocation);
  pool.addGrant("alice", 1ull << 30);
  EXPECT_EQ(pool.grantShortfall(1, 100 << 20), 0u);
  EXPECT_TRUE(pool.reserve(1, 0, 100 << 20));
  EXPECT_EQ(pool.grantShortfall(1, 1ull << 30), 100ull << 20);
  // etcd could not be asked: the whole quota, against this member's own use.
  EXPECT_TRUE(pool.reserve(1, 1, 5ull << 30, true));
  pool.addGrant("alice", 5ull << 30);  // (the share grows by what it took)
  EXPECT_TRUE(pool.trimGrants().empty()) << "within use plus one slice";
  pool.release(1, 1, 5ull << 30);
  EXPECT_TRUE(pool.trimGrants({"alice"}).empty()) << "a user asking for more now is left alone";
  auto trimmed = pool.trimGrants();
  ASSERT_EQ(trimmed.size(), 1u);
  EXPECT_EQ(trimmed[0].second, (100ull << 20) + (1ull << 30));  // use plus one spare slice
  EXPECT_EQ(pool.granted("alice"), trimmed[0].second);
  pool.end(1);
  trimmed = pool.trimGrants();
  ASSERT_EQ(trimmed.size(), 1u);
  EXPECT_EQ(trimmed[0].second, 0u);  // nothing here: no share kept
}

TEST(PoolManager, QueuesUntilItFitsThenPlacesByPriorityThenArrival) {
  UserEntry low = user("low");
  low.priority = Priority::kLow;
  UserEntry high = user("high");
  high.priority = Priority::kHigh;
  PoolConfig cfg;
  cfg.admission_timeout_ms = 10000;
  PoolManager pool({{"only", "GPU-cccc", 4ull << 30, 90}}, {user("alice"), low, high}, cfg);
  auto t = Clock::now();
  DeviceRequest big;
  big.count = 1;
  big.min_memory = 3ull << 30;
  ASSERT_TRUE(*pool.admit(1, client("alice"), big, t));
  ASSERT_TRUE(pool.reserve(1, 0, 3ull << 30));
  EXPECT_FALSE(pool.admit(2, client("low"), big, t + milliseconds(1)));   // queued
  EXPECT_FALSE(pool.admit(3, client("high"), big, t + milliseconds(2)));  // queued, ahead of low
  EXPECT_EQ(pool.queued(), 2u);
  EXPECT_TRUE(pool.retry(t + milliseconds(5)).empty());  // nothing freed yet
  pool.end(1);
  auto decided = pool.retry(t + milliseconds(10));
  ASSERT_EQ(decided.size(), 2u);  // both fit now: free memory is only taken by allocations
  EXPECT_EQ(decided[0].first, 3u);
  EXPECT_EQ(decided[1].first, 2u);
  auto snap = pool.snapshot(t + milliseconds(10));
  EXPECT_NEAR(snap.users["high"].admission_wait_s, 0.008, 1e-6);
}

TEST(PoolManager, QueuedRequestTimesOutWithWhatWasAskedAndWhatIsFree) {
  UserEntry alice = user("alice");
  alice.max_sessions = 1;
  PoolConfig cfg;
  cfg.admission_timeout_ms = 5000;
  PoolManager pool(twoDevices(), {alice}, cfg);
  auto t = Clock::now();
  DeviceRequest r;
  r.count = 1;
  r.wait_ms = 200;
  ASSERT_TRUE(*pool.admit(1, client("alice"), r, t));
  EXPECT_FALSE(pool.admit(2, client("alice"), r, t));
  ASSERT_TRUE(pool.nextDeadline());
  EXPECT_EQ(*pool.nextDeadline(), t + milliseconds(200));
  EXPECT_TRUE(pool.retry(t + milliseconds(199)).empty());
  auto out = pool.retry(t + milliseconds(200));
  ASSERT_EQ(out.size(), 1u);
  ASSERT_FALSE(out[0].second);
  EXPECT_NE(out[0].second.status().message().find("user 'alice' has 1 session(s), max_sessions = 1"),
            std::string::npos)
      << out[0].second.status().message();
  EXPECT_NE(out[0].second.status().message().find("waited 200 ms"), std::string::npos);
  // Memory: asked more than is free anywhere.
  DeviceRequest huge;
  huge.count = 1;
  huge.min_memory = 12ull << 30;
  huge.wait_ms = 1;
  UserEntry bob = user("bob");
  pool.setPolicy({alice, bob}, cfg);
  ASSERT_TRUE(*pool.admit(3, client("bob"), {1, 0, 0, "*H100*", 0}, t));
  ASSERT_TRUE(pool.reserve(3, 0, 8ull << 30));
  EXPECT_FALSE(pool.admit(4, client("bob"), huge, t));
  auto late = pool.retry(t + milliseconds(1));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_NE(late[0].second.status().message().find("asked for 1 device(s) with 12.0 GiB free"), std::string::npos)
      << late[0].second.status().message();
  EXPECT_NE(late[0].second.status().message().find("device 0 (rgpu sim H100, cc 9.0) 8.0 GiB free of 16.0 GiB"),
            std::string::npos)
      << late[0].second.status().message();
}

TEST(PoolManager, SnapshotShowsDevicesSessionsAndQueue) {
  PoolManager pool(twoDevices(), {user("alice")}, {});
  auto t = Clock::now();
  ASSERT_TRUE(*pool.admit(7, client("alice"), {1, 0, 0, "", 0}, t));
  ASSERT_TRUE(pool.reserve(7, 0, 1000));
  pool.usage(7, {10, 20, 30, 40, 0});
  auto s = pool.snapshot(t);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].used, 1000u);
  EXPECT_EQ(s.devices[0].sessions, 1u);
  ASSERT_EQ(s.sessions.size(), 1u);
  EXPECT_EQ(s.sessions[0].client.user, "alice");
  EXPECT_EQ(s.sessions[0].memory, 1000u);
  EXPECT_EQ(s.sessions[0].usage.calls, 10u);
  EXPECT_EQ(s.sessions[0].usage.gpu_ns, 40u);
}

TEST(PoolManager, MpsEnvironmentCarriesThreadPercentageAndPinnedMemoryPerDevice) {
  UserEntry alice = user("alice");
  alice.memory_quota = 4ull << 30;
  alice.mps_thread_percentage = 25;
  PoolManager pool(twoDevices(), {alice}, {});
  auto p = pool.admit(1, client("alice"), {}, Clock::now());
  ASSERT_TRUE(p && *p);
  auto env = mpsEnvironment(**p);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0], std::make_pair(std::string("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), std::string("25")));
  EXPECT_EQ(env[1], std::make_pair(std::string("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), std::string("0=4096M,1=4096M")));
  EXPECT_TRUE(mpsEnvironment(Placement{}).empty());  // no policy: nothing set
}

}  // namespace
}  // namespace rgpu::server
