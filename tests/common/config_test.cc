#include <gtest/gtest.h>
#include <stdlib.h>

#include "client/client_config.h"
#include "common/tls.h"
#include "server/config/server_config.h"
#include "tests/support/test_env.h"

namespace rgpu {
namespace {

TEST(ParseHostPort, AcceptsHostsAndBracketedIpv6) {
  auto a = common::parseHostPort("gpu01.example:7443");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->first, "gpu01.example");
  EXPECT_EQ(a->second, 7443);
  auto b = common::parseHostPort("[::1]:9");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->first, "::1");
  EXPECT_EQ(b->second, 9);
}

TEST(ParseHostPort, RejectsMalformedAddresses) {
  for (const char* s : {"nohost", ":80", "host:", "host:99999", "host:12x", "[::1]80"})
    EXPECT_FALSE(common::parseHostPort(s)) << s;
}

TEST(ServerConfig, ReadsUsersDevicesAndLimits) {
  test::TempDir dir;
  test::writeFile(dir.file("s.toml"), R"(
listen = "0.0.0.0:9000"
backend = "auto"
[tls]
cert = "server.pem"
key = "server.key"
[[users]]
name = "alice"
cert_cn = "alice"
pool_memory_quota = "48GiB"
[[users]]
name = "bob"
token = "t"
[limits]
max_streams = 7
[[sim.devices]]
name = "A"
memory = "2GiB"
compute_capability = "8.6"
sm_count = 84
[[sim.devices]]
name = "B"
)");
  auto c = server::loadServerConfig(dir.file("s.toml"));
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->listen, "0.0.0.0:9000");
  EXPECT_EQ(c->backend, "auto");
  EXPECT_EQ(c->tls_cert, dir.file("server.pem"));  // relative to the config file
  ASSERT_EQ(c->users.size(), 2u);
  EXPECT_EQ(c->users[1].token, "t");
  EXPECT_EQ(c->users[0].pool_memory_quota, 48ull << 30);
  EXPECT_EQ(c->users[1].pool_memory_quota, 0u);
  EXPECT_EQ(c->limits.max_streams, 7u);
  ASSERT_EQ(c->sim_devices.size(), 2u);
  EXPECT_EQ(c->sim_devices[0].memory, 2ull << 30);
  EXPECT_EQ(c->sim_devices[0].major, 8);
  EXPECT_EQ(c->sim_devices[0].minor, 6);
  EXPECT_EQ(c->sim_devices[0].sm_count, 84);
}

TEST(ServerConfig, RejectsBadValuesWithTheFileAndKey) {
  test::TempDir dir;
  test::writeFile(dir.file("s.toml"), "backend = \"quantum\"\n");
  auto c = server::loadServerConfig(dir.file("s.toml"));
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("backend"), std::string::npos);
  EXPECT_NE(c.status().message().find(dir.file("s.toml")), std::string::npos);
  test::writeFile(dir.file("u.toml"), "[[users]]\nname = \"x\"\n");
  EXPECT_FALSE(server::loadServerConfig(dir.file("u.toml")));  // neither token nor cert
  test::writeFile(dir.file("q.toml"), "[[users]]\nname = \"x\"\ntoken = \"t\"\npool_memory_quota = \"lots\"\n");
  auto q = server::loadServerConfig(dir.file("q.toml"));
  ASSERT_FALSE(q);
  EXPECT_NE(q.status().message().find("pool_memory_quota"), std::string::npos) << q.status().message();
  test::writeFile(dir.file("h.toml"), "[sim]\nhot_paths = \"fast\"\n");
  auto h = server::loadServerConfig(dir.file("h.toml"));
  ASSERT_FALSE(h);
  EXPECT_NE(h.status().message().find("sim.hot_paths"), std::string::npos) << h.status().message();
  test::writeFile(dir.file("h2.toml"), "[sim]\nhot_paths = false\n");
  auto h2 = server::loadServerConfig(dir.file("h2.toml"));
  ASSERT_TRUE(h2) << h2.status().message();
  EXPECT_FALSE(h2->sim_hot_paths);
  test::writeFile(dir.file("bad.toml"), "listen = \n");
  EXPECT_FALSE(server::loadServerConfig(dir.file("bad.toml")));
  EXPECT_FALSE(server::loadServerConfig(dir.file("missing.toml")));
}

TEST(ServerConfig, CheckpointsNeedADirAndAKeyTogether) {
  test::TempDir dir;
  test::writeFile(dir.file("c.toml"), "[checkpoint]\ndir = \"ck\"\nkey_file = \"ck.key\"\ndrain_timeout_ms = 2500\n");
  auto c = server::loadServerConfig(dir.file("c.toml"));
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->checkpoint_dir, dir.file("ck"));  // relative to the file
  EXPECT_EQ(c->checkpoint_key_file, dir.file("ck.key"));
  EXPECT_EQ(c->checkpoint_drain_timeout_ms, 2500u);
  test::writeFile(dir.file("d.toml"), "[checkpoint]\ndir = \"ck\"\n");
  auto d = server::loadServerConfig(dir.file("d.toml"));
  ASSERT_FALSE(d);
  EXPECT_NE(d.status().message().find("dir and key_file go together"), std::string::npos) << d.status().message();
  test::writeFile(dir.file("t.toml"), "[checkpoint]\ndrain_timeout_ms = 0\n");
  auto t = server::loadServerConfig(dir.file("t.toml"));
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find("checkpoint.drain_timeout_ms"), std::string::npos) << t.status().message();
  EXPECT_TRUE(server::ServerConfig{}.checkpoint_dir.empty()) << "no checkpoints unless configured";
}

TEST(ServerConfig, DrainingByMovingSessionsNeedsAPoolAndCheckpoints) {
  test::TempDir dir;
  EXPECT_EQ(server::ServerConfig{}.pool.drain, "wait");
  const std::string pool_and_checkpoints =
      "[cluster]\nendpoints = [\"http://127.0.0.1:2379\"]\nname = \"a\"\n"
      "[checkpoint]\ndir = \"ck\"\nkey_file = \"ck.key\"\n";
  test::writeFile(dir.file("m.toml"), "[pool]\ndrain = \"migrate\"\n" + pool_and_checkpoints);
  auto m = server::loadServerConfig(dir.file("m.toml"));
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ(m->pool.drain, "migrate");
  test::writeFile(dir.file("alone.toml"), "[pool]\ndrain = \"migrate\"\n[checkpoint]\ndir = \"ck\"\nkey_file = \"k\"\n");
  auto alone = server::loadServerConfig(dir.file("alone.toml"));
  ASSERT_FALSE(alone);
  EXPECT_NE(alone.status().message().find("needs [cluster] and [checkpoint]"), std::string::npos)
      << alone.status().message();
  test::writeFile(dir.file("x.toml"), "[pool]\ndrain = \"later\"\n" + pool_and_checkpoints);
  auto x = server::loadServerConfig(dir.file("x.toml"));
  ASSERT_FALSE(x);
  EXPECT_NE(x.status().message().find("pool.drain"), std::string::npos) << x.status().message();
}

TEST(ParseSize, UnderstandsBinaryUnits) {
  EXPECT_EQ(*server::parseSize("16GiB"), 16ull << 30);
  EXPECT_EQ(*server::parseSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*server::parseSize("4096"), 4096u);
  EXPECT_FALSE(server::parseSize("12 parsecs"));
}

TEST(ClientConfig, EnvironmentOverridesTheFile) {
  test::TempDir dir;
  test::writeFile(dir.file("client.toml"), "server = \"a:1\"\ntoken = \"file\"\n[tls]\nca = \"ca.pem\"\n");
  setenv("RGPU_CONFIG", dir.file("client.toml").c_str(), 1);
  setenv("RGPU_SERVER", "b:2", 1);
  auto c = client::loadClientConfig();
  unsetenv("RGPU_SERVER");
  unsetenv("RGPU_CONFIG");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->server, "b:2");
  EXPECT_EQ(c->token, "file");
  EXPECT_EQ(c->ca, dir.file("ca.pem"));
  EXPECT_EQ(c->source, dir.file("client.toml"));
}

TEST(ClientConfig, KeysTheClientDoesNotReadAreNamed) {
  test::TempDir dir;
  // `resume` belongs at the top, not under [tls]; `timeout_ms` is no key.
  test::writeFile(dir.file("client.toml"), "server = \"a:1\"\ntimeout_ms = 5\nresume = false\n"
                                           "[tls]\nca = \"ca.pem\"\nresume = false\n[request]\ndevices = 1\ncount = 2\n");
  setenv("RGPU_CONFIG", dir.file("client.toml").c_str(), 1);
  auto c = client::loadClientConfig();
  unsetenv("RGPU_CONFIG");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->unknown_keys, (std::vector<std::string>{"request.count", "timeout_ms", "tls.resume"}));
  EXPECT_FALSE(c->resume);
  // The sample knows only keys the client reads.
  setenv("RGPU_CONFIG", (std::string(RGPU_SOURCE_DIR) + "/examples/client.toml").c_str(), 1);
  auto sample = client::loadClientConfig();
  unsetenv("RGPU_CONFIG");
  ASSERT_TRUE(sample) << sample.status().message();
  EXPECT_TRUE(sample->unknown_keys.empty()) << sample->unknown_keys.front();
}

TEST(ClientConfig, MissingConfigNamedByRgpuConfigIsAnError) {
  setenv("RGPU_CONFIG", "/nonexistent/rgpu/client.toml", 1);
  auto c = client::loadClientConfig();
  unsetenv("RGPU_CONFIG");
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("/nonexistent/rgpu/client.toml"), std::string::npos);
}

}  // namespace
}  // namespace rgpu
