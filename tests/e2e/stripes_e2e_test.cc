// Striped bulk transfer end to end (common/stripes.h, docs/architecture.md):
// a program's large copies travel over several TLS connections of its
// session and arrive intact; cutting one stripe, or every connection in the
// middle of a frame, loses nothing (the session resumes and joins new
// stripes); [session] max_stripes holds, and a session without resume takes
// none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <regex>
#include <thread>

#include "tests/support/cut_proxy.h"
#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string stripeClient() { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/stripe_client"; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class StripedCopies : public ::testing::Test {
 protected:
  void start(const std::string& server_extra, const std::string& client_extra, bool proxy = false) {
    makeCerts(dir_.path());
    std::string toml = serverToml(dir_.path(), server_extra);
    toml.replace(toml.find("log_level = \"info\""), std::strlen("log_level = \"info\""), "log_level = \"debug\"");
    server_ = std::make_unique<ServerProcess>(dir_.path(), toml);
    uint16_t port = server_->port();
    if (proxy) {
      proxy_ = std::make_unique<CutProxy>(server_->port());
      port = proxy_->port();
    }
    // (Top-level keys before clientToml's [tls] table.)
    writeFile(dir_.file("client.toml"), client_extra + clientToml(dir_.path(), port));
  }
  std::string env() const { return "RGPU_CONFIG=" + dir_.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR; }
  // The session's end line, once the worker wrote it.
  std::string endLine() {
    std::smatch m;
    for (int i = 0; i < 500; ++i) {
      std::string log = server_->log();
      if (std::regex_search(log, m, std::regex("session 1 ended \\([^\n]*"))) return m[0].str();
      usleep(10000);
    }
    return "";
  }
  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<CutProxy> proxy_;
};

TEST_F(StripedCopies, ArriveIntactAndTheStripesCarryThemBothWays) {
  start("", "stripes = 3\nlog_level = \"debug\"\n");
  RunResult r = run(stripeClient() + " 4 24", env());
  ASSERT_EQ(r.code, 0) << r.output << "\nserver log:\n" << server_->log();
  EXPECT_NE(r.output.find("stripe_client: 4 iterations of 24 MiB each way, twice: all checks passed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("3 stripe connection(s) joined session 1"), std::string::npos) << r.output;
  std::string log = server_->log();
  for (int k = 1; k <= 3; ++k)
    EXPECT_NE(log.find("session 1: stripe connection " + std::to_string(k) + " joined"), std::string::npos) << log;
  // 4 x 2 x 24 MiB each way; with the main connection taking a quarter of
  // each payload, the stripes carry three quarters of what was striped.
  std::string end = endLine();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(end, m, std::regex("stripe connections carried ([0-9.]+) MiB in and ([0-9.]+) MiB out")))
      << end;
  EXPECT_GE(std::stod(m[1].str()), 100.0) << end;
  EXPECT_GE(std::stod(m[2].str()), 100.0) << end;
}

TEST_F(StripedCopies, CuttingAStripeOrEveryConnectionMidFrameLosesNothing) {
  start("[session]\nresume_grace_ms = 20000\n", "stripes = 2\nlog_level = \"debug\"\n", true);
  std::atomic<bool> done{false};
  std::atomic<int> stage{0};
  std::thread cutter([&] {
    auto joined = [&] {
      // The main connection and both stripes are through the proxy.
      for (int i = 0; i < 2000 && !done.load() && proxy_->open() < 3; ++i) usleep(2000);
      return proxy_->open() >= 3;
    };
    // 1: one stripe alone, while copies run.
    if (!joined()) return;
    usleep(150000);
    proxy_->cutNewest();
    stage = 1;
    // 2 and 3: every connection, in the middle of a frame each way.
    const uint64_t step = 9'000'037;
    for (int k = 0; k < 2 && !done.load(); ++k) {
      while (!done.load() && proxy_->open() >= 3) usleep(2000);  // the resume after the last cut
      if (!joined()) return;
      int before = proxy_->cuts();
      if (k == 0) proxy_->cutAtUpstream(proxy_->upstream() + step);
      else proxy_->cutAtDownstream(proxy_->downstream() + step);
      while (!done.load() && proxy_->cuts() == before) usleep(2000);
      stage = 2 + k;
    }
  });
  RunResult r = run(stripeClient() + " 12 16 40", env());
  done.store(true);
  cutter.join();
  ASSERT_EQ(r.code, 0) << r.output << "\nserver log:\n" << server_->log();
  EXPECT_NE(r.output.find("stripe_client: 12 iterations of 16 MiB each way, twice: all checks passed"), std::string::npos)
      << r.output;
  EXPECT_EQ(stage.load(), 3) << "the program ended before every cut:\n" << r.output;
  EXPECT_EQ(proxy_->cuts(), 3);
  std::string log = server_->log();
  // Each cut cost a resume, after which both stripes joined again.
  EXPECT_EQ(count(log, "resumed by"), 3u) << log;
  EXPECT_GE(count(r.output, "2 stripe connection(s) joined session 1"), 3u) << r.output;
  EXPECT_NE(endLine().find("stripe connections carried"), std::string::npos);
}

TEST_F(StripedCopies, AProgramThatEndsWhileItsStripesJoinEndsWithoutAWarning) {
  // The stripes reach the server only after the program has ended its
  // session: their joins fail, and that is no news to report at exit.
  // (Its 200 ms pause lets the joins start; they would arrive 1.5 s after
  // that, but the program's exit cuts the one in its handshake short.)
  start("", "stripes = 2\nlog_level = \"debug\"\n", true);
  proxy_->delayJoins(1, 1500);
  RunResult r = run(stripeClient() + " 1 1 200", env());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("stripe_client: 1 iterations of 1 MiB each way, twice: all checks passed"), std::string::npos)
      << r.output;
  EXPECT_EQ(count(r.output, "stripe connection(s) joined"), 0u) << r.output;
  EXPECT_EQ(count(r.output, "warning"), 0u) << r.output;
  EXPECT_NE(r.output.find("stripe joins stopped, the session is closing or resuming (TLS handshake with"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cut short: the connection was shut down)"), std::string::npos) << r.output;
  EXPECT_GE(proxy_->accepted(), 2) << "no stripe connection was opened";
}

TEST_F(StripedCopies, MaxStripesHoldsAndASessionWithoutResumeTakesNone) {
  start("[session]\nmax_stripes = 1\n", "stripes = 3\n");
  RunResult r = run(stripeClient() + " 2 8", env());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("all checks passed"), std::string::npos) << r.output;
  // The Welcome said one: the client asked for no more.
  EXPECT_EQ(count(server_->log(), "joined from"), 1u) << server_->log();
  EXPECT_EQ(count(server_->log(), "stripe connection from"), 0u) << "no join was refused:\n" << server_->log();

  // Without resume there are no stripes: everything goes on the one connection.
  writeFile(dir_.file("client.toml"), "stripes = 3\nresume = false\n" + clientToml(dir_.path(), server_->port()));
  r = run(stripeClient() + " 2 8", env());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(server_->log(), "joined from"), 1u) << server_->log();
}

}  // namespace
}  // namespace rgpu::test
