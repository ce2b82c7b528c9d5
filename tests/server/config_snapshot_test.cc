#include "server/config/config_snapshot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/support/test_env.h"

namespace rgpu::server {
namespace {

TEST(ConfigSnapshot, WorkersGetTokenDigestsNeverTheTokens) {
  test::TempDir dir;
  test::makeCerts(dir.path());
  std::string toml = test::serverToml(dir.path(), "[pool]\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_token = \"scrape-me\"\n");
  test::writeFile(dir.file("server.toml"), toml);
  auto snap = ConfigSnapshot::take(dir.file("server.toml"), ServerConfig{});
  ASSERT_TRUE(snap) << snap.status().message();
  auto fd = snap->toMemfd();
  ASSERT_TRUE(fd) << fd.status().message();
  std::string bytes(1 << 20, '\0');
  ssize_t n = ::pread(*fd, bytes.data(), bytes.size(), 0);
  ASSERT_GT(n, 0);
  bytes.resize(static_cast<size_t>(n));
  EXPECT_EQ(bytes.find("bob-token"), std::string::npos) << "a user's token reached the workers' snapshot";
  EXPECT_EQ(bytes.find("scrape-me"), std::string::npos);
  EXPECT_NE(bytes.find(tokenDigest("bob-token")), std::string::npos);
  auto worker = ConfigSnapshot::fromFd(*fd);
  ::close(*fd);
  ASSERT_TRUE(worker) << worker.status().message();
  const UserEntry* bob = nullptr;
  for (auto& u : worker->config.users)
    if (u.name == "bob") bob = &u;
  ASSERT_NE(bob, nullptr);
  EXPECT_TRUE(tokenMatches(bob->token, "bob-token"));
  EXPECT_FALSE(tokenMatches(bob->token, "bob-token2"));
  EXPECT_FALSE(tokenMatches(bob->token, bob->token)) << "the digest itself is not a token";
  EXPECT_EQ(worker->config.limits.max_streams, snap->config.limits.max_streams);
}

TEST(ServerConfig, TheSampleConfigParsesWithTheSafeDefaultsItDocuments) {
  std::string path = std::string(RGPU_SOURCE_DIR) + "/examples/server.toml";
  auto c = parseServerConfig(test::readFile(path), path);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->limits.kernel_timeout_ms, 600000u);
  EXPECT_EQ(c->limits.max_staging_bytes, 512ull << 20);
  EXPECT_EQ(c->limits.max_unauthenticated, 128u);
  EXPECT_EQ(c->limits.max_unauthenticated_per_address, 32u);
  // Built in, without a file: the same bounds.
  ServerConfig d;
  EXPECT_EQ(d.limits.kernel_timeout_ms, 600000u);
  UserEntry u;
  EXPECT_EQ(u.max_sessions, 16u);
}

}  // namespace
}  // namespace rgpu::server
