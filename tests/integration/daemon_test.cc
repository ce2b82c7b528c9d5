// rgpu-server as a process: startup errors, isolation between sessions,
// clean shutdown.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

std::unique_ptr<common::TlsConnection> connectTo(const std::string& dir, uint16_t port) {
  auto ctx = common::TlsContext::makeClient(common::TlsOptions::files(dir + "/ca.pem", dir + "/alice.pem", dir + "/alice.key", false));
  auto c = common::TlsConnection::connect(**ctx, "127.0.0.1", port, "", std::chrono::milliseconds(5000));
  EXPECT_TRUE(c) << c.status().message();
  return std::move(*c);
}

TEST(Daemon, ServesSessionsInSeparateWorkersAndSurvivesABadClient) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path()));
  RawClient a(connectTo(dir.path(), server.port()));
  ASSERT_EQ(a.hello().first, 0);
  uint64_t p = a.malloc(128);
  {
    RawClient bad(connectTo(dir.path(), server.port()));
    ASSERT_EQ(bad.hello().first, 0);
    std::string junk(100, '\xee');
    ASSERT_TRUE(bad.writeRaw(junk.data(), junk.size()));
    EXPECT_TRUE(bad.next().goodbye);
  }
  a.write(p, std::vector<uint8_t>(128, 3));
  RawReply r = a.readBack(p, 128);
  ASSERT_EQ(r.error, 0);
  EXPECT_EQ(r.bulk, std::vector<uint8_t>(128, 3));
  RawClient b(connectTo(dir.path(), server.port()));
  EXPECT_EQ(b.hello().first, 0);
  EXPECT_EQ(b.ping().error, 0);
  EXPECT_NE(server.log().find("bad frame magic"), std::string::npos);
}

TEST(Daemon, SigtermDrainsRunningSessionsUntilTheDeadlineAndTakesNoNewOnes) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path(), "[pool]\ndrain_timeout_ms = 1500\n"));
  RawClient a(connectTo(dir.path(), server.port()));
  ASSERT_EQ(a.hello().first, 0);
  ::kill(server.pid(), SIGTERM);
  EXPECT_EQ(a.ping().error, 0);  // a running session goes on during the drain
  uint64_t p = a.malloc(64);
  EXPECT_NE(p, 0u);
  // No new sessions: the listening socket is closed.
  auto ctx = common::TlsContext::makeClient(common::TlsOptions::files(dir.file("ca.pem"), dir.file("alice.pem"), dir.file("alice.key"), false));
  for (int i = 0; i < 200 && server.log().find("draining") == std::string::npos; ++i) usleep(5000);
  auto late = common::TlsConnection::connect(**ctx, "127.0.0.1", server.port(), "", std::chrono::milliseconds(2000));
  EXPECT_FALSE(late);
  int st = server.wait();  // at the deadline the session is ended and the daemon exits
  EXPECT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(a.next().error, -1);  // the session's connection is closed
  EXPECT_NE(server.log().find("drain deadline: ending 1 session(s)"), std::string::npos) << server.log();
}

TEST(Daemon, ASecondSigtermEndsSessionsAtOnce) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path()));  // default drain: 30 s
  RawClient a(connectTo(dir.path(), server.port()));
  ASSERT_EQ(a.hello().first, 0);
  ::kill(server.pid(), SIGTERM);
  for (int i = 0; i < 200 && server.log().find("draining") == std::string::npos; ++i) usleep(5000);
  int st = server.stop();  // the second SIGTERM
  EXPECT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(a.next().error, -1);
  EXPECT_NE(server.log().find("again: ending 1 session(s) now"), std::string::npos) << server.log();
}

TEST(Daemon, RefusesToStartWithBadTlsMaterial) {
  TempDir dir;
  makeCerts(dir.path());
  std::string toml = serverToml(dir.path());
  toml.replace(toml.find("server.key"), 10, "alice.key");  // key of another certificate
  writeFile(dir.file("server.toml"), toml);
  RunResult r = run(std::string(RGPU_SERVER_BIN) + " --config " + dir.file("server.toml"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("key does not match " + dir.file("server.pem")), std::string::npos) << r.output;
}

TEST(Daemon, CheckConfigListsEveryProblemAndTheDaemonWarnsOfUnknownKeys) {
  TempDir dir;
  makeCerts(dir.path());
  writeFile(dir.file("good.toml"), serverToml(dir.path()));
  RunResult good = run(std::string(RGPU_SERVER_BIN) + " --check-config " + dir.file("good.toml"));
  EXPECT_EQ(good.code, 0) << good.output;
  EXPECT_NE(good.output.find("would serve:\nlisten 127.0.0.1:0 over TLS 1.3"), std::string::npos) << good.output;
  EXPECT_NE(good.output.find(": 0 error(s)"), std::string::npos) << good.output;
  // A misplaced key (resume belongs to client.toml) and a misspelt one.
  std::string toml = serverToml(dir.path(), "[session]\nresume_grace = 5\n");
  toml.replace(toml.find("[tls]\n"), 6, "[tls]\nresume = false\n");
  writeFile(dir.file("bad.toml"), toml);
  RunResult bad = run(std::string(RGPU_SERVER_BIN) + " --check-config " + dir.file("bad.toml"));
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("error: unknown key 'tls.resume'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("error: unknown key 'session.resume_grace'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find(": 2 error(s)"), std::string::npos) << bad.output;
  // Started with it anyway, the server says so and serves.
  ServerProcess server(dir.path(), toml);
  EXPECT_NE(server.log().find("unknown key 'tls.resume' is ignored"), std::string::npos) << server.log();
  EXPECT_NE(server.log().find("unknown key 'session.resume_grace' is ignored"), std::string::npos) << server.log();
}

TEST(Daemon, RefusesACudaBackendItDoesNotHave) {
  TempDir dir;
  makeCerts(dir.path());
  writeFile(dir.file("server.toml"), serverToml(dir.path()));
  RunResult r = run(std::string(RGPU_SERVER_BIN) + " --backend cuda --config " + dir.file("server.toml"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("backend = \"cuda\""), std::string::npos) << r.output;
}

}  // namespace
}  // namespace rgpu::test
