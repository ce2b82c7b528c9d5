#include "server/daemon/status_page.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace rgpu::server {
namespace {

ServerConfig config(const std::string& pool_keys) {
  auto c = parseServerConfig("[[users]]\nname = \"alice\"\ntoken = \"a-token\"\nadmin = true\n"
                             "[[users]]\nname = \"bob\"\ntoken = \"b-token\"\n"
                             "[[users]]\nname = \"carol\"\ncert_cn = \"carol\"\n"
                             "[pool]\nmetrics_listen = \"127.0.0.1:0\"\n" + pool_keys,
                             "server.toml");
  EXPECT_TRUE(c) << c.status().message();
  return c ? *c : ServerConfig{};
}

bool adminIsAlice(const std::string& u) { return u == "alice"; }

PoolSnapshot twoSessions() {
  PoolSnapshot s;
  PoolSnapshot::Device d;
  d.info.name = "dev <b>0</b>";
  d.info.total = 1 << 30;
  d.used = 3 << 20;
  s.devices.push_back(d);
  PoolSnapshot::Session a;
  a.id = 1;
  a.client = {"alice", "host-a", "10.0.0.1", 11};
  a.devices = {0};
  a.memory = 1 << 20;
  a.usage.gpu_ns = 2'500'000'000;
  PoolSnapshot::Session b = a;
  b.id = 2;
  b.client = {"bob", "host-b", "10.0.0.2", 22};
  PoolSnapshot::Session q = b;
  q.id = 3;
  q.queued = true;
  s.sessions = {a, b, q};
  return s;
}

TEST(StatusViewer, UsersNeedTheirTokenAndOnlyAdminsSeeEveryone) {
  ServerConfig c = config("");
  auto none = statusViewer(c, "", adminIsAlice);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().code(), err::kNotPermitted);
  EXPECT_FALSE(statusViewer(c, "nobody's", adminIsAlice));
  auto bob = statusViewer(c, "b-token", adminIsAlice);
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->user, "bob");
  EXPECT_FALSE(bob->all);
  auto alice = statusViewer(c, "a-token", adminIsAlice);
  ASSERT_TRUE(alice);
  EXPECT_TRUE(alice->all);
}

TEST(StatusViewer, TheMetricsTokenSeesWhatMetricsShowAndOpenNeedsNoToken) {
  auto labels = statusViewer(config("metrics_token = \"m\"\n"), "m", adminIsAlice);
  ASSERT_TRUE(labels);
  EXPECT_TRUE(labels->all && labels->sessions);
  auto aggregate = statusViewer(config("metrics_token = \"m\"\nmetrics_labels = \"aggregate\"\n"), "m", adminIsAlice);
  ASSERT_TRUE(aggregate);
  EXPECT_FALSE(aggregate->sessions);
  auto open = statusViewer(config("status_page = \"open\"\n"), "", adminIsAlice);
  ASSERT_TRUE(open);
  EXPECT_TRUE(open->all);
}

TEST(StatusPageConfig, OpenIsRefusedOffLoopbackAndUnknownModesAreNamed) {
  auto off_loopback = parseServerConfig(
      "[pool]\nmetrics_listen = \"0.0.0.0:9400\"\nmetrics_token = \"t\"\nstatus_page = \"open\"\n", "s.toml");
  ASSERT_FALSE(off_loopback);
  EXPECT_NE(off_loopback.status().message().find("only on a loopback metrics_listen"), std::string::npos)
      << off_loopback.status().message();
  auto bad = parseServerConfig("[pool]\nstatus_page = \"everyone\"\n", "s.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("status_page"), std::string::npos);
  EXPECT_TRUE(parseServerConfig("[pool]\nmetrics_listen = \"0.0.0.0:9400\"\nmetrics_token = \"t\"\n", "s.toml"));
}

TEST(StatusJson, AUserSeesTheirOwnSessionsAndCountsTheRest) {
  using json = nlohmann::json;
  auto j = json::parse(statusJson(twoSessions(), {}, StatusViewer{"bob", false, true}, {"1.0", "h", "", "sim"}));
  ASSERT_EQ(j["sessions"].size(), 2u);  // bob's running and queued ones
  for (auto& x : j["sessions"]) EXPECT_EQ(x["user"], "bob");
  EXPECT_EQ(j["hidden"], 1);
  EXPECT_EQ(j["queued"], 1);
  EXPECT_EQ(j["devices"][0]["name"], "dev <b>0</b>");  // as text: the page never parses it as markup
  EXPECT_EQ(j["devices"][0]["temperature"], nullptr);
  auto all = json::parse(statusJson(twoSessions(), {{40, 55, 210000}}, StatusViewer{"", true, true}, {}));
  EXPECT_EQ(all["sessions"].size(), 3u);
  EXPECT_EQ(all["sessions"][0]["gpu_seconds"], 2.5);
  EXPECT_EQ(all["devices"][0]["utilization"], 40);
  EXPECT_EQ(all["devices"][0]["power_w"], 210.0);
  auto none = json::parse(statusJson(twoSessions(), {}, StatusViewer{"", true, false}, {}));
  EXPECT_EQ(none["sessions"].size(), 0u);
  EXPECT_EQ(none["hidden"], 3);
}

}  // namespace
}  // namespace rgpu::server
