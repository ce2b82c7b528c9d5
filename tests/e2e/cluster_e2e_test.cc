// The pool's membership on a real etcd (Debian's etcd-server on loopback
// ports of the test's): real rgpu-server processes registering, renewing,
// draining, dying and coming back, with real CUDA programs running.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <regex>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/cluster/etcd_client.h"
#include "server/config/server_config.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_env.h"

namespace rgpu {
namespace {

using json = nlohmann::json;
using server::cluster::EtcdClient;
using server::cluster::EtcdOp;
using server::cluster::EtcdOptions;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using test::etcdClient;
using test::spawnClient;
using test::waitFor;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::makeCerts(certs_.path());  // one CA for the whole pool, as in a real one
    etcd_ = std::make_unique<test::EtcdProcess>(etcd_dir_.path());
  }

  // server.toml of a member (certificates of the pool's CA) with a [cluster] section.
  std::string memberToml(const std::string& /*dir*/, const std::string& name, uint32_t ttl = 2,
                         const std::string& devices = "", const std::string& extra = "") {
    return test::serverToml(certs_.path(), devices + "[cluster]\nendpoints = [\"" + etcd_->endpoint() +
                                               "\"]\nname = \"" + name + "\"\nlease_ttl_s = " + std::to_string(ttl) +
                                               "\nload_interval_ms = 200\n" + extra);
  }
  std::string clientToml(uint16_t port) const { return test::clientToml(certs_.path(), port); }
  std::optional<json> member(const std::string& name) {
    auto r = etcdClient({etcd_->endpoint()}, 500ms)->range("/rgpu/members/" + name);
    if (!r || r->empty()) return std::nullopt;
    return json::parse((*r)[0].value);
  }
  std::optional<json> load(const std::string& name) {
    auto r = etcdClient({etcd_->endpoint()}, 500ms)->range("/rgpu/load/" + name);
    if (!r || r->empty()) return std::nullopt;
    return json::parse((*r)[0].value);
  }

  test::TempDir certs_, etcd_dir_;
  std::unique_ptr<test::EtcdProcess> etcd_;
};

TEST_F(ClusterTest, AMemberRegistersItsInventoryAndLoadAndLeavesWhenItStops) {
  test::TempDir d;
  test::ServerProcess s(d.path(), memberToml(d.path(), "gpu01", 2,
                                             "[[sim.devices]]\nname = \"Sim L4\"\nmemory = \"24GiB\"\n"
                                             "compute_capability = \"8.9\"\nsm_count = 58\n",
                                             "[pool]\nmetrics_listen = \"127.0.0.1:0\"\n"));
  ASSERT_TRUE(waitFor([&] { return member("gpu01").has_value() && load("gpu01").has_value(); }, 10s)) << s.log();
  json m = *member("gpu01");
  EXPECT_EQ(m["name"], "gpu01");
  EXPECT_EQ(m["address"], "127.0.0.1:" + std::to_string(s.port()));  // listen's port 0: the bound one
  EXPECT_EQ(m["state"], "ready");
  ASSERT_EQ(m["devices"].size(), 2u);
  EXPECT_EQ(m["devices"][0]["name"], "rgpu test device");
  EXPECT_EQ(m["devices"][1]["name"], "Sim L4");
  EXPECT_EQ(m["devices"][1]["memory"], 24ull << 30);
  EXPECT_EQ(m["devices"][1]["cc"], "8.9");
  EXPECT_EQ(m["devices"][1]["sms"], 58);
  EXPECT_EQ(m["devices"][0]["uuid"].get<std::string>().rfind("GPU-", 0), 0u);
  json l = *load("gpu01");
  EXPECT_EQ(l["sessions"], 0);
  EXPECT_EQ(l["devices"][1]["free"], 24ull << 30);
  // Its /metrics name it: every series has server="gpu01".
  const std::string log = s.log();
  ASSERT_NE(test::metricsPort(log), 0) << log;
  std::string metrics = test::httpGet(test::metricsPort(log), "/metrics");
  EXPECT_NE(metrics.find("rgpu_device_sessions{server=\"gpu01\",gpu=\"1\",UUID=\"GPU-"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("rgpu_admission_queue_length{server=\"gpu01\"} 0"), std::string::npos) << metrics;
  // A clean stop revokes the lease: both keys go at once.
  s.stop();
  EXPECT_FALSE(member("gpu01").has_value());
  EXPECT_FALSE(load("gpu01").has_value());
  EXPECT_NE(s.log().find("cluster: 'gpu01' left the pool"), std::string::npos) << s.log();
}

TEST_F(ClusterTest, ADrainingMemberSaysSoAtOnceAndAKilledOneLeavesWithinItsLease) {
  test::TempDir d1, d2;
  test::ServerProcess a(d1.path(), memberToml(d1.path(), "a"));
  test::ServerProcess b(d2.path(), memberToml(d2.path(), "b"));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s)) << a.log() << b.log();
  // Drain: a session keeps `a` running while it drains; its record says so.
  test::writeFile(d1.file("client.toml"), clientToml(a.port()));
  pid_t client = spawnClient(d1.file("client.toml"), "", "resume_client", {"hold"});
  ASSERT_TRUE(waitFor([&] { auto l = load("a"); return l && (*l)["sessions"] == 1; }, 10s)) << a.log();
  ::kill(a.pid(), SIGTERM);
  ASSERT_TRUE(waitFor([&] { auto m = member("a"); return m && (*m)["state"] == "draining"; }, 5s)) << a.log();
  ::kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  EXPECT_EQ(WEXITSTATUS(a.wait()), 0);
  EXPECT_FALSE(member("a").has_value());
  // SIGKILL: the record stays until the lease (2 s) expires, then goes.
  ::kill(b.pid(), SIGKILL);
  EXPECT_TRUE(member("b").has_value());
  auto gone = waitFor([&] { return !member("b").has_value(); }, 8s);
  ASSERT_TRUE(gone) << "the killed member's record outlived its lease";
  EXPECT_LE(*gone, 4s);  // TTL 2 s, plus etcd's lease check interval
  b.wait();
}

TEST_F(ClusterTest, EtcdWritesAreBoundedByTheLoadIntervalNotByTheCallRate) {
  test::TempDir d;
  test::ServerProcess s(d.path(), memberToml(d.path(), "busy"));  // load_interval_ms = 200
  ASSERT_TRUE(waitFor([&] { return load("busy").has_value(); }, 10s)) << s.log();
  auto version = [&](const std::string& key) {
    auto r = etcdClient({etcd_->endpoint()}, 500ms)->range(key);
    return r && !r->empty() ? (*r)[0].version : -1;
  };
  const int64_t member_before = version("/rgpu/members/busy"), load_before = version("/rgpu/load/busy");
  const auto t0 = Clock::now();
  test::writeFile(d.file("client.toml"), clientToml(s.port()));
  test::RunResult r = test::run(std::string(RGPU_TEST_PROGRAMS_DIR) + "/soak_client 60000",
                                "RGPU_CONFIG=" + d.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_NE(r.output.find("0 errors, results ok"), std::string::npos) << r.output;
  std::this_thread::sleep_for(500ms);  // the last change is written too
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t writes = version("/rgpu/load/busy") - load_before;
  std::printf("cluster: 60000 calls in %.2f s: %lld load writes (at most one per 200 ms), member record writes %lld\n",
              seconds, static_cast<long long>(writes),
              static_cast<long long>(version("/rgpu/members/busy") - member_before));
  EXPECT_GE(writes, 1);                          // the session's start and end were seen
  EXPECT_LE(writes, seconds / 0.2 + 2);          // bounded by the interval, whatever the call rate
  EXPECT_EQ(version("/rgpu/members/busy"), member_before);  // the record does not change with load
}

TEST_F(ClusterTest, MembersRegisterAgainWhenEtcdComesBackEvenWithoutItsData) {
  test::TempDir d;
  std::string toml = memberToml(d.path(), "phoenix");
  const std::string at = "cert_cn = \"alice\"\n";
  toml.replace(toml.find(at), at.size(), at + "pool_memory_quota = \"1GiB\"\n");  // a share to keep too
  test::ServerProcess s(d.path(), toml);
  ASSERT_TRUE(waitFor([&] { return member("phoenix").has_value(); }, 10s)) << s.log();
  // etcd restarts with its data: the lease lives on, the record stays.
  etcd_->stop();
  etcd_->start();
  EXPECT_TRUE(waitFor([&] { return member("phoenix").has_value(); }, 10s)) << s.log();
  // A program holds a session slot and a pool quota share through what follows.
  test::writeFile(d.file("holder.toml"), clientToml(s.port()));
  pid_t holder = spawnClient(d.file("holder.toml"), d.file("out"), "pool_client", {"steps", "30000", "1048576"});
  ASSERT_TRUE(waitFor([&] { return test::readFile(d.file("out")).find("holding") != std::string::npos; }, 10s));
  auto keys = [&](const std::string& prefix) {
    auto r = etcdClient({etcd_->endpoint()}, 500ms)->range(prefix, true);
    return r ? r->size() : 0;
  };
  ASSERT_TRUE(waitFor([&] { return keys("/rgpu/sessions/alice/") == 1 && keys("/rgpu/quota/alice/m/") == 1; }, 5s));
  // etcd crashes and comes back empty: the member registers again, with the slot and share it held.
  etcd_->kill();
  std::this_thread::sleep_for(1s);
  etcd_->start(/*wipe=*/true);
  EXPECT_TRUE(waitFor([&] { return member("phoenix").has_value(); }, 10s)) << s.log();
  EXPECT_NE(s.log().find("registering again"), std::string::npos) << s.log();
  EXPECT_TRUE(waitFor([&] { return keys("/rgpu/sessions/alice/") == 1 && keys("/rgpu/quota/alice/m/") == 1; }, 5s))
      << "the slot and the share came back with the new lease";
  ::kill(holder, SIGKILL);
  int st = 0;
  waitpid(holder, &st, 0);
  // The server kept serving meanwhile: a program runs through it.
  test::writeFile(d.file("client.toml"), clientToml(s.port()));
  test::RunResult r = test::run(std::string(RGPU_EXAMPLES_DIR) + "/vector_add", "RGPU_CONFIG=" + d.file("client.toml") +
                                                                                   " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(ClusterTest, ANameAnotherLiveMemberHoldsIsNotTaken) {
  test::TempDir d1, d2;
  test::ServerProcess first(d1.path(), memberToml(d1.path(), "same"));
  ASSERT_TRUE(waitFor([&] { return member("same").has_value(); }, 10s)) << first.log();
  test::ServerProcess second(d2.path(), memberToml(d2.path(), "same"));
  ASSERT_TRUE(waitFor([&] { return second.log().find("is held by another live member") != std::string::npos; }, 10s))
      << second.log();
  EXPECT_EQ((*member("same"))["address"], "127.0.0.1:" + std::to_string(first.port()));
  // When the first goes, the second takes the name.
  first.stop();
  ASSERT_TRUE(waitFor([&] { auto m = member("same"); return m && (*m)["address"] ==
                                                                     "127.0.0.1:" + std::to_string(second.port()); },
                      10s))
      << second.log();
}

// ---- placement across members ----------------------------------------------------

std::string simDevice(const std::string& name, const std::string& memory, const std::string& cc) {
  return "[[sim.devices]]\nname = \"" + name + "\"\nmemory = \"" + memory + "\"\ncompute_capability = \"" + cc +
         "\"\nsm_count = 8\n";
}

// Runs pool_client `args` with client.toml `toml` (written to `dir`): its output.
test::RunResult poolClient(const test::TempDir& dir, const std::string& toml, const std::string& args) {
  test::writeFile(dir.file("client.toml"), toml);
  return test::run(std::string(RGPU_TEST_PROGRAMS_DIR) + "/pool_client " + args,
                   "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
}

TEST_F(ClusterTest, RequestsArePlacedByModelMemoryAndCapabilityAcrossThreeMembers) {
  test::TempDir da, db, dc, client;
  test::ServerProcess a(da.path(), memberToml(da.path(), "h100-host", 2, simDevice("Sim H100", "80GiB", "9.0")));
  test::ServerProcess b(db.path(), memberToml(db.path(), "a100-host", 2, simDevice("Sim A100", "40GiB", "8.0")));
  test::ServerProcess c(dc.path(), memberToml(dc.path(), "l4-host", 2, simDevice("Sim L4", "24GiB", "8.9")));
  ASSERT_TRUE(waitFor([&] { return member("h100-host") && member("a100-host") && member("l4-host"); }, 10s));
  std::this_thread::sleep_for(500ms);  // each member's view of the pool is read every 200 ms
  struct Case {
    std::string request;
    uint16_t via;
    std::string lands_on;
  } cases[] = {
      {"model = \"*L4*\"\n", a.port(), "Sim L4"},                                        // by model, asked at the H100 host
      {"min_memory = \"60GiB\"\n", c.port(), "Sim H100"},                                // by memory, asked at the L4 host
      {"model = \"Sim A*\"\nmin_compute_capability = \"8.0\"\n", a.port(), "Sim A100"},
      {"min_compute_capability = \"8.9\"\nmin_memory = \"20GiB\"\nmodel = \"*L4\"\n", b.port(), "Sim L4"},
  };
  for (const auto& k : cases) {
    auto r = poolClient(client, clientToml(k.via) + "[request]\ndevices = 1\n" + k.request, "info");
    EXPECT_EQ(r.code, 0) << k.request << r.output;
    EXPECT_NE(r.output.find(k.lands_on), std::string::npos) << k.request << " should land on " << k.lands_on << ":\n"
                                                            << r.output;
  }
  // The member asked says where it sent the client; nothing fits: a clear refusal.
  EXPECT_NE(a.log().find("placed by the pool on member 'l4-host' at 127.0.0.1:" + std::to_string(c.port())),
            std::string::npos) << a.log();
  auto none = poolClient(client, clientToml(a.port()) + "[request]\ndevices = 1\nmodel = \"*B200*\"\nwait_ms = 100\n", "info");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.output.find("cudaErrorDevicesUnavailable"), std::string::npos) << none.output;
}

TEST_F(ClusterTest, SpreadSendsANewProgramToTheIdleMemberAndPackToTheBusyOne) {
  for (const char* policy : {"spread", "pack"}) {
    SCOPED_TRACE(policy);
    test::TempDir dx, dy, client, holder_dir;
    const std::string extra = std::string("policy = \"") + policy + "\"\n";
    test::ServerProcess x(dx.path(), memberToml(dx.path(), "x", 2, "", extra));
    test::ServerProcess y(dy.path(), memberToml(dy.path(), "y", 2, "", extra));
    ASSERT_TRUE(waitFor([&] { return member("x") && member("y"); }, 10s));
    // A program holds x's device.
    test::writeFile(holder_dir.file("client.toml"), clientToml(x.port()) + "[request]\ndevices = 1\n");
    pid_t holder = spawnClient(holder_dir.file("client.toml"), "", "pool_client", {"hold", "1048576", "20000"});
    ASSERT_TRUE(waitFor([&] { auto l = load("x"); return l && (*l)["sessions"] == 1; }, 10s)) << x.log();
    std::this_thread::sleep_for(500ms);  // both members' views have it
    // Asked at the busy member (spread) / the idle one (pack): the other one takes it.
    const uint16_t via = std::string(policy) == "spread" ? x.port() : y.port();
    const std::string to = std::string(policy) == "spread" ? "y" : "x";
    auto r = poolClient(client, clientToml(via) + "[request]\ndevices = 1\n", "info");
    EXPECT_EQ(r.code, 0) << r.output;
    const auto& asked = std::string(policy) == "spread" ? x : y;
    EXPECT_NE(asked.log().find("placed by the pool on member '" + to + "'"), std::string::npos) << asked.log();
    ::kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
  }
}

// ---- one program, devices of several members ----------------------------------------

TEST_F(ClusterTest, OneProgramUsesTheDevicesOfSeveralMembers) {
  test::TempDir da, db, client;
  test::ServerProcess a(da.path(), memberToml(da.path(), "a", 2, simDevice("Sim A", "4GiB", "9.0")));
  test::ServerProcess b(db.path(), memberToml(db.path(), "b", 2,
                                              simDevice("Sim B", "4GiB", "9.0") + simDevice("Sim B", "4GiB", "9.0")));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s));
  std::this_thread::sleep_for(500ms);  // each member's view of the pool is read every 200 ms
  // Three "Sim" devices: no member has them (each also has the test configuration's
  // own device), the pool has. Asked at a, which has one.
  const std::string sim = "[request]\nmodel = \"Sim *\"\n";
  test::writeFile(client.file("client.toml"), clientToml(a.port()) + sim);
  auto r = test::run(std::string(RGPU_RUN_BIN) + " -n 3 " + RGPU_TEST_PROGRAMS_DIR + "/multi_device",
                     "RGPU_CONFIG=" + client.file("client.toml"));  // -n 3: [request] devices = 3
  EXPECT_EQ(r.code, 0) << r.output << a.log() << b.log();
  EXPECT_NE(r.output.find("devices: 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("multi_device: ok"), std::string::npos) << r.output;
  // The member with the most fitting devices first: 0 and 1 are b's (peers of each other), 2 is a's.
  EXPECT_NE(r.output.find("device 0: Sim B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device 2: Sim A"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peer 0: 1 1 0\npeer 1: 1 1 0\npeer 2: 0 0 1\n"), std::string::npos) << r.output;
  if (auto at = r.output.find("figures:"); at != std::string::npos)
    std::printf("cluster: %s\n", r.output.substr(at, r.output.find('\n', at) - at).c_str());
  // What cannot cross servers is refused as CUDA refuses it between contexts.
  EXPECT_NE(r.output.find("elapsed between devices 0 and 2: cudaErrorInvalidResourceHandle"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("record device 0's event on device 2's stream: cudaErrorInvalidResourceHandle"),
            std::string::npos) << r.output;
  EXPECT_NE(a.log().find("placed by the pool on several members: 2 on 'b' at 127.0.0.1:" + std::to_string(b.port()) +
                         ", 1 on 'a' at 127.0.0.1:" + std::to_string(a.port())),
            std::string::npos) << a.log();
  // A session on each; the same program on one member's two devices gives the same answers.
  test::writeFile(client.file("client.toml"), clientToml(b.port()) + sim + "devices = 2\n");
  auto one = test::run(std::string(RGPU_TEST_PROGRAMS_DIR) + "/multi_device",
                       "RGPU_CONFIG=" + client.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("multi_device: ok"), std::string::npos) << one.output;
  // More than the whole pool has: refused, naming the request.
  test::writeFile(client.file("client.toml"), clientToml(a.port()) + sim + "devices = 4\nwait_ms = 100\n");
  auto none = test::run(std::string(RGPU_TEST_PROGRAMS_DIR) + "/multi_device",
                        "RGPU_CONFIG=" + client.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.output.find("cudaErrorDevicesUnavailable"), std::string::npos) << none.output;
}

// Members on the CUDA backend (the fake driver: every member's driver hands out
// the same addresses, as two hosts' drivers tend to): the second part's memory
// goes in its own address window through the driver's virtual memory calls,
// so the program's pointers never coincide. Texture and surface object values
// do coincide (each member's driver, and b's with a pool per device's context,
// hands out 1 first), and each kernel still takes its own device's objects.
TEST_F(ClusterTest, OneProgramUsesTheCudaDevicesOfSeveralMembers) {
  test::TempDir da, db, client;
  auto cudaMember = [&](const test::TempDir& d, const std::string& name, const char* gpus) {
    std::string toml = memberToml(d.path(), name);
    toml.replace(toml.find("backend = \"sim\""), std::strlen("backend = \"sim\""), "backend = \"cuda\"");
    toml += test::fakeCudaToml();
    ::setenv("RGPU_FAKE_CUDA_DEVICES", gpus, 1);  // the member's processes inherit it
    ::setenv("RGPU_FAKE_CUDA_OBJECT_POOLS", "device", 1);
    auto s = std::make_unique<test::ServerProcess>(d.path(), toml);
    ::unsetenv("RGPU_FAKE_CUDA_DEVICES");
    ::unsetenv("RGPU_FAKE_CUDA_OBJECT_POOLS");
    return s;
  };
  auto a = cudaMember(da, "a", "1");
  auto b = cudaMember(db, "b", "2");
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s)) << a->log() << b->log();
  std::this_thread::sleep_for(500ms);  // each member's view of the pool is read every 200 ms
  test::writeFile(client.file("client.toml"), clientToml(a->port()));
  auto r = test::run(std::string(RGPU_RUN_BIN) + " -n 3 " + RGPU_TEST_PROGRAMS_DIR + "/multi_device",
                     "RGPU_CONFIG=" + client.file("client.toml"));
  EXPECT_EQ(r.code, 0) << r.output << a->log() << b->log();
  EXPECT_NE(r.output.find("devices: 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("multi_device: ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device 2: rgpu fake GPU 0"), std::string::npos) << r.output;
  for (int d = 0; d < 3; ++d)
    EXPECT_NE(r.output.find("objects of device " + std::to_string(d) + ": texture 1, surface 2"), std::string::npos)
        << r.output;
  EXPECT_NE(r.output.find("ok texture and surface objects on every device"), std::string::npos) << r.output;
  // The CUDA backend offers no peer access, within a member or across.
  EXPECT_NE(r.output.find("peer 0: 1 0 0\npeer 1: 0 1 0\npeer 2: 0 0 1\n"), std::string::npos) << r.output;
  EXPECT_NE(a->log().find("placed by the pool on several members: 2 on 'b'"), std::string::npos) << a->log();
  // Part 1 (a's device) in its window; part 0 where its driver puts it.
  EXPECT_NE(a->log().find("cuda: span part 1: device memory in the part's address window from 0x240000000000"),
            std::string::npos) << a->log();
  EXPECT_EQ(b->log().find("cuda: span part"), std::string::npos) << b->log();
}

// ---- the pool-wide memory quota ----------------------------------------------------------

// alice may use 1 GiB over the whole pool (slices of 32 MiB).
std::string withPoolQuota(std::string toml) {
  const std::string at = "cert_cn = \"alice\"\n";
  toml.replace(toml.find(at), at.size(), at + "pool_memory_quota = \"1GiB\"\n");
  return toml;
}
constexpr uint64_t kMiB = 1 << 20;
std::string mib(uint64_t n) { return std::to_string(n * kMiB); }

TEST_F(ClusterTest, APoolMemoryQuotaHoldsOverTheMembersAndComesBackWhenAMemberDies) {
  test::TempDir da, db, client, holder_dir;
  test::ServerProcess a(da.path(), withPoolQuota(memberToml(da.path(), "a")));
  test::ServerProcess b(db.path(), withPoolQuota(memberToml(db.path(), "b")));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s));
  auto share = [&](const std::string& m) -> uint64_t {
    auto r = etcdClient({etcd_->endpoint()}, 500ms)->range("/rgpu/quota/alice/m/" + m);
    return r && !r->empty() ? std::stoull((*r)[0].value) : 0;
  };
  // 600 MiB on a, held.
  test::writeFile(holder_dir.file("client.toml"), clientToml(a.port()) + "[request]\ndevices = 1\n");
  pid_t holder = spawnClient(holder_dir.file("client.toml"), holder_dir.file("out"), "pool_client",
                             {"steps", "60000", mib(600)});
  ASSERT_TRUE(waitFor([&] { return test::readFile(holder_dir.file("out")).find("holding") != std::string::npos; }, 10s));
  EXPECT_NE(test::readFile(holder_dir.file("out")).find("allocate " + mib(600) + ": cudaSuccess"), std::string::npos);
  EXPECT_EQ(share("a"), 608 * kMiB) << "600 MiB in slices of 32";
  // On b: 384 MiB fit what a leaves (1024 - 608); 64 more would pass the quota and are refused.
  auto r = poolClient(client, clientToml(b.port()) + "[request]\ndevices = 1\n", "steps 0 " + mib(384) + " " + mib(64));
  EXPECT_NE(r.output.find("allocate " + mib(384) + ": cudaSuccess"), std::string::npos) << r.output << b.log();
  EXPECT_NE(r.output.find("allocate " + mib(64) + ": cudaErrorMemoryAllocation"), std::string::npos) << r.output;
  EXPECT_NE(b.log().find("pool memory quota of user 'alice' exceeded: 992.0 MiB of 1.0 GiB held by the pool's "
                         "members, 64.0 MiB more asked here"), std::string::npos) << b.log();
  EXPECT_TRUE(waitFor([&] { return share("b") == 0; }, 5s)) << "b's program ended: its share goes back";
  // a dies holding its share: the bytes come back when its lease expires, not before.
  ::kill(a.pid(), SIGKILL);
  const auto t0 = Clock::now();
  auto early = poolClient(client, clientToml(b.port()) + "[request]\ndevices = 1\n", "steps 0 " + mib(600));
  EXPECT_NE(early.output.find("cudaErrorMemoryAllocation"), std::string::npos) << early.output;
  bool got = false;
  while (!got && Clock::now() - t0 < 15s) {
    auto again = poolClient(client, clientToml(b.port()) + "[request]\ndevices = 1\n", "steps 0 " + mib(600));
    got = again.output.find("allocate " + mib(600) + ": cudaSuccess") != std::string::npos;
    if (!got) std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(got) << "a dead member's share never came back";
  std::printf("cluster: a killed member's pool quota share came back after %.2f s (lease 2 s)\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  ::kill(holder, SIGKILL);  // its server is gone
  int st = 0;
  waitpid(holder, &st, 0);
  a.wait();
}

TEST_F(ClusterTest, TwoMembersAllocatingAtOnceNeverPassThePoolQuota) {
  test::TempDir da, db, ca, cb;
  test::ServerProcess a(da.path(), withPoolQuota(memberToml(da.path(), "a")));
  test::ServerProcess b(db.path(), withPoolQuota(memberToml(db.path(), "b")));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s));
  auto shares = [&] {
    auto r = etcdClient({etcd_->endpoint()}, 500ms)->range("/rgpu/quota/alice/m/", true);
    return r ? r->size() : 99;
  };
  int both = 0, one = 0;
  for (int round = 0; round < 4; ++round) {
    ASSERT_TRUE(waitFor([&] { return shares() == 0; }, 5s)) << "the last round's shares were not given back";
    // 600 MiB on each at the same instant: the pool has room for one.
    test::writeFile(ca.file("client.toml"), clientToml(a.port()) + "[request]\ndevices = 1\n");
    test::writeFile(cb.file("client.toml"), clientToml(b.port()) + "[request]\ndevices = 1\n");
    pid_t pa = spawnClient(ca.file("client.toml"), ca.file("out"), "pool_client", {"steps", "1500", mib(600)});
    pid_t pb = spawnClient(cb.file("client.toml"), cb.file("out"), "pool_client", {"steps", "1500", mib(600)});
    int st = 0;
    waitpid(pa, &st, 0);
    waitpid(pb, &st, 0);
    const std::string ok = "allocate " + mib(600) + ": cudaSuccess";
    const int won = (test::readFile(ca.file("out")).find(ok) != std::string::npos) +
                    (test::readFile(cb.file("out")).find(ok) != std::string::npos);
    both += won == 2;
    one += won == 1;
  }
  EXPECT_EQ(both, 0) << "the quota was passed";
  EXPECT_EQ(one, 4) << a.log() << b.log();
}

TEST_F(ClusterTest, ADeadEntryInTheServerListOrABadAdvertisedAddressGivesAClearAnswer) {
  test::TempDir da, db, client;
  test::ServerProcess a(da.path(), memberToml(da.path(), "a", 2));
  // `bad` advertises an address nothing listens on, and has the only "Sim X" device.
  uint16_t dead = 0;
  ::close(test::listenLoopback(&dead));
  test::ServerProcess b(db.path(), memberToml(db.path(), "bad", 2, simDevice("Sim X", "8GiB", "9.0"),
                                              "advertise = \"127.0.0.1:" + std::to_string(dead) + "\"\n"));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("bad"); }, 10s));
  std::this_thread::sleep_for(500ms);
  // A dead first entry of `server` does not stop the client.
  std::string list = "server = \"127.0.0.1:" + std::to_string(dead) + ", 127.0.0.1:" + std::to_string(a.port()) + "\"\n";
  std::string toml = clientToml(a.port()) + "[request]\ndevices = 1\nmodel = \"rgpu test device\"\n";  // a's or bad's: a tie stays
  toml.replace(0, toml.find('\n') + 1, list);
  auto ok = poolClient(client, toml, "info");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("rgpu test device"), std::string::npos) << ok.output;
  // Placed on the member whose address is wrong: the error names it, no hang.
  auto r = poolClient(client, clientToml(a.port()) + "[request]\ndevices = 1\nmodel = \"Sim X\"\n", "info");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("placed this program on member 'bad' at 127.0.0.1:" + std::to_string(dead) +
                          ", which cannot be reached"),
            std::string::npos)
      << r.output;
}

TEST_F(ClusterTest, AQueuedProgramIsServedWhenAnotherMemberHasRoom) {
  test::TempDir da, db, client, holder_dir;
  test::ServerProcess a(da.path(), memberToml(da.path(), "a", 2));
  test::ServerProcess b(db.path(), memberToml(db.path(), "b", 2, simDevice("Sim Z", "2GiB", "9.0")));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s));
  // A program holds 1.5 GiB of b's Z for 3 s.
  test::writeFile(holder_dir.file("client.toml"), clientToml(b.port()) + "[request]\ndevices = 1\nmodel = \"Sim Z\"\n");
  pid_t holder = spawnClient(holder_dir.file("client.toml"), "", "pool_client", {"hold", "1610612736", "3000"});
  ASSERT_TRUE(waitFor([&] { auto l = load("b"); return l && (*l)["devices"][1]["used"] > 0; }, 10s)) << b.log();
  std::this_thread::sleep_for(500ms);
  // Asked at a, which has no Z at all: it waits there (b could take it), and goes to b once b has room.
  const auto t0 = Clock::now();
  auto r = poolClient(client, clientToml(a.port()) + "[request]\ndevices = 1\nmodel = \"Sim Z\"\nmin_memory = \"1GiB\"\n"
                                                     "wait_ms = 20000\n", "info");
  const auto waited = Clock::now() - t0;
  EXPECT_EQ(r.code, 0) << r.output << a.log();
  EXPECT_NE(r.output.find("Sim Z"), std::string::npos) << r.output;
  EXPECT_GE(waited, 1500ms);  // it did wait for the holder
  EXPECT_NE(a.log().find("waits in the admission queue"), std::string::npos) << a.log();
  EXPECT_NE(a.log().find("placed by the pool on member 'b'"), std::string::npos) << a.log();
  waitpid(holder, nullptr, 0);
  // Nothing in the pool could ever take it: refused at once, not queued.
  auto never = poolClient(client, clientToml(a.port()) + "[request]\ndevices = 1\nmodel = \"Sim Q\"\nwait_ms = 20000\n",
                          "info");
  EXPECT_NE(never.code, 0);
  EXPECT_NE(never.output.find("cudaErrorDevicesUnavailable"), std::string::npos) << never.output;
}

TEST_F(ClusterTest, RgpuSmiPoolListsEveryMemberItsDevicesAndTheCallersSessions) {
  test::TempDir da, db, client, holder_dir;
  test::ServerProcess a(da.path(), memberToml(da.path(), "a", 2));
  test::ServerProcess b(db.path(), memberToml(db.path(), "b", 2, simDevice("Sim Z", "2GiB", "8.9")));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s));
  test::writeFile(holder_dir.file("client.toml"), clientToml(b.port()) + "[request]\ndevices = 1\nmodel = \"Sim Z\"\n");
  pid_t holder = spawnClient(holder_dir.file("client.toml"), "", "pool_client", {"hold", "1048576", "20000"});
  ASSERT_TRUE(waitFor([&] { auto l = load("b"); return l && (*l)["sessions"] == 1; }, 10s)) << b.log();
  std::this_thread::sleep_for(500ms);
  test::writeFile(client.file("client.toml"), clientToml(a.port()));
  const std::string env = "RGPU_CONFIG=" + client.file("client.toml");
  auto table = test::run(std::string(RGPU_SMI_BIN) + " --pool", env);
  EXPECT_EQ(table.code, 0) << table.output;
  EXPECT_NE(table.output.find("2 member(s)"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("Sim Z"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("MEMBER"), std::string::npos) << table.output;
  auto csv = test::run(std::string(RGPU_SMI_BIN) + " --pool --query-members=member,state,name,sessions,compute_cap "
                                                   "--format=csv,noheader",
                       env);
  EXPECT_EQ(csv.code, 0) << csv.output;
  EXPECT_NE(csv.output.find("a, ready, rgpu test device, 0, 9.0\n"), std::string::npos) << csv.output;
  EXPECT_NE(csv.output.find("b, ready, Sim Z, 1, 8.9\n"), std::string::npos) << csv.output;
  // The holder's session, listed under member b (alice sees her own).
  auto sessions = test::run(std::string(RGPU_SMI_BIN) + " --pool --query-sessions=user,state --format=csv,noheader", env);
  EXPECT_EQ(sessions.code, 0) << sessions.output;
  EXPECT_NE(sessions.output.find("b, alice, running"), std::string::npos) << sessions.output;
  ::kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  // A server alone says it is in no pool.
  test::TempDir alone;
  test::ServerProcess s(alone.path(), test::serverToml(certs_.path()));
  test::writeFile(client.file("alone.toml"), clientToml(s.port()));
  auto no = test::run(std::string(RGPU_SMI_BIN) + " --pool", "RGPU_CONFIG=" + client.file("alone.toml"));
  EXPECT_NE(no.code, 0);
  EXPECT_NE(no.output.find("not a member of a pool"), std::string::npos) << no.output;
}

TEST_F(ClusterTest, MaxSessionsHoldsAcrossThePoolEvenWhenTwoMembersAdmitAtOnce) {
  // alice may have 2 sessions in the whole pool (each member's own policy alone would allow 2 each).
  auto limited = [&](const std::string& dir, const std::string& name) {
    std::string t = memberToml(dir, name, 2);
    t.replace(t.find("cert_cn = \"alice\"\n"), std::strlen("cert_cn = \"alice\"\n"), "cert_cn = \"alice\"\nmax_sessions = 2\n");
    return t;
  };
  test::TempDir da, db;
  test::ServerProcess a(da.path(), limited(da.path(), "a"));
  test::ServerProcess b(db.path(), limited(db.path(), "b"));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s));
  // Four programs at the same instant, two asking each member; each holds its session 4 s.
  std::vector<std::unique_ptr<test::TempDir>> dirs;
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    dirs.push_back(std::make_unique<test::TempDir>());
    test::writeFile(dirs.back()->file("client.toml"),
                    clientToml(i % 2 ? b.port() : a.port()) + "[request]\ndevices = 1\nwait_ms = 1000\n");
  }
  for (int i = 0; i < 4; ++i) {
    pid_t p = spawnClient(dirs[i]->file("client.toml"), dirs[i]->file("out"), "pool_client", {"hold", "1048576", "4000"});
    pids.push_back(p);
  }
  int held = 0, refused = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    waitpid(pids[i], nullptr, 0);
    std::string out = test::readFile(dirs[i]->file("out"));
    if (out.find("holding") != std::string::npos) ++held;
    if (out.find("max_sessions = 2") != std::string::npos) ++refused;
  }
  EXPECT_EQ(held, 2) << a.log() << b.log();
  EXPECT_EQ(refused, 2) << a.log() << b.log();
  // The slots came back with the sessions: two more fit.
  EXPECT_TRUE(waitFor([&] {
    auto slots = etcdClient({etcd_->endpoint()}, 500ms)->range("/rgpu/sessions/alice/", true);
    return slots && slots->empty();
  }, 5s));
  test::TempDir c;
  auto r = poolClient(c, clientToml(b.port()) + "[request]\ndevices = 1\n", "info");
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(ClusterTest, AMemberReachesEtcdOverTlsWithItsClientCertificate) {
  test::TempDir tls_etcd_dir, d;
  test::EtcdProcess tls_etcd(tls_etcd_dir.path(), certs_.path());
  const std::string c = certs_.path();
  test::ServerProcess s(d.path(), test::serverToml(c, "[cluster]\nendpoints = [\"" + tls_etcd.endpoint() +
                                                           "\"]\nname = \"secure\"\nlease_ttl_s = 2\ntls_ca = \"" + c +
                                                           "/ca.pem\"\ntls_cert = \"" + c + "/alice.pem\"\ntls_key = \"" + c +
                                                           "/alice.key\"\n"));
  EtcdOptions o;
  o.endpoints = {tls_etcd.endpoint()};
  o.ca_file = c + "/ca.pem", o.cert_file = c + "/bob.pem", o.key_file = c + "/bob.key";
  auto reader = std::move(*EtcdClient::create(o));
  EXPECT_TRUE(waitFor([&] { auto r = reader->range("/rgpu/members/secure"); return r && r->size() == 1; }, 10s)) << s.log();
  // The record is in etcd a moment before the member logs that it is.
  EXPECT_TRUE(waitFor([&] { return s.log().find("registered as 'secure'") != std::string::npos; }, 5s)) << s.log();
}

TEST_F(ClusterTest, ADeadMembersClientGetsAnErrorNamingItAndTheNextProgramGoesElsewhere) {
  test::TempDir da, db, client, holder_dir;
  test::ServerProcess a(da.path(), memberToml(da.path(), "a", 2));
  test::ServerProcess b(db.path(), memberToml(db.path(), "b", 2));
  ASSERT_TRUE(waitFor([&] { return member("a") && member("b"); }, 10s));
  // A program runs on b (resumable, the default); b dies under it.
  test::writeFile(holder_dir.file("client.toml"), clientToml(b.port()) + "[request]\ndevices = 1\n");
  pid_t holder = spawnClient(holder_dir.file("client.toml"), holder_dir.file("out"), "resume_client", {"hold"});
  ASSERT_TRUE(waitFor([&] { return test::readFile(holder_dir.file("out")).find("holding") != std::string::npos; }, 10s));
  ::kill(b.pid(), SIGKILL);
  // Its calls fail, naming the server, within seconds: never a hang.
  const auto t0 = Clock::now();
  int st = 0;
  ASSERT_TRUE(waitFor([&] { return waitpid(holder, &st, WNOHANG) == holder; }, 20s))
      << "the client hung; it printed:\n" << test::readFile(holder_dir.file("out")) << "\nb's log:\n" << b.log();
  std::string out = test::readFile(holder_dir.file("out"));
  EXPECT_NE(out.find("127.0.0.1:" + std::to_string(b.port())), std::string::npos) << out;
  std::printf("cluster: the dead member's client saw the error after %.2f s\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  b.wait();
  // b leaves the pool within its lease; the next program asking for any device lands on a,
  // even with b first in its server list.
  ASSERT_TRUE(waitFor([&] { return !member("b").has_value(); }, 8s));
  std::string toml = clientToml(a.port()) + "[request]\ndevices = 1\n";
  toml.replace(0, toml.find('\n') + 1, "server = \"127.0.0.1:" + std::to_string(b.port()) + ", 127.0.0.1:" +
                                            std::to_string(a.port()) + "\"\n");
  auto r = poolClient(client, toml, "info");
  EXPECT_EQ(r.code, 0) << r.output;
}

}  // namespace
}  // namespace rgpu
