// Session resume end to end: a CUDA program runs through a proxy that cuts its
// connection to rgpu-server in the middle of frames, in both directions; the
// client reconnects, replays what the server had not carried out, and the
// program's every check passes. After the grace period the session is freed and
// the program gets a clear error.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/support/cut_proxy.h"
#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string resumeClient() { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/resume_client"; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The processes whose parent is `parent` (a daemon's workers).
std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after its ')'.
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == parent) out.push_back(static_cast<pid_t>(std::stol(line)));
  }
  return out;
}

class Resume : public ::testing::Test {
 protected:
  void start(const std::string& extra) {
    makeCerts(dir_.path());
    server_ = std::make_unique<ServerProcess>(dir_.path(), serverToml(dir_.path(), extra));
    proxy_ = std::make_unique<CutProxy>(server_->port());
    writeFile(dir_.file("client.toml"), clientToml(dir_.path(), proxy_->port()) + "log_level = \"warn\"\n");
  }
  std::string env() const {
    return "RGPU_CONFIG=" + dir_.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR;
  }
  // Polls what a process writes once; there is no event to wait on.
  template <typename F>
  bool waitFor(F ready, int ms) {
    for (int i = 0; i < ms / 5 && !ready(); ++i) usleep(5000);
    return ready();
  }
  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<CutProxy> proxy_;
};

TEST_F(Resume, CutsInBothDirectionsLoseNothingAndRepeatNothing) {
  start("[session]\nresume_grace_ms = 20000\n");
  // Cut four times: twice in the middle of what the client sends, twice in
  // the middle of what the server sends (replies with copy data, notifications).
  std::atomic<bool> done{false};
  std::thread cutter([&] {
    const uint64_t step = 5'000'037;  // odd, so the cuts land inside frames
    for (int k = 0; k < 4 && !done.load(); ++k) {
      // After the second cut the server cannot be reached for a while: the
      // client retries with back-off until it can.
      if (k == 1) proxy_->refuseAfterNextCut(700);
      if (k % 2 == 0) proxy_->cutAtUpstream(proxy_->upstream() + step);
      else proxy_->cutAtDownstream(proxy_->downstream() + step);
      while (!done.load() && proxy_->cuts() <= k) usleep(2000);
    }
  });
  RunResult r = run(resumeClient() + " 120", env());
  done.store(true);
  cutter.join();
  EXPECT_EQ(r.code, 0) << r.output << "\nserver log:\n" << server_->log();
  EXPECT_NE(r.output.find("resume_client: 120 iterations, 360 launches counted, 120 host functions: all checks passed"),
            std::string::npos)
      << r.output;
  // Device printf: every line exactly once.
  for (int it = 0; it < 120; it += 10)
    EXPECT_EQ(count(r.output, "tick " + std::to_string(it) + "\n"), 1u) << "tick " << it << "\n" << r.output;
  EXPECT_EQ(proxy_->cuts(), 4);
  std::string log = server_->log();
  EXPECT_EQ(count(log, "resumed by"), 4u) << log;
  EXPECT_EQ(count(r.output, "resumed session"), 4u) << r.output;
  EXPECT_GT(proxy_->refused(), 0);  // the client did have to retry
  // The worker logs the end once the client's goodbye reached it: give it 5 s.
  for (int i = 0; i < 500 && log.find("session 1 ended (") == std::string::npos; ++i) {
    usleep(10000);
    log = server_->log();
  }
  EXPECT_NE(log.find("session 1 ended (0 allocations released"), std::string::npos) << log;
}

TEST_F(Resume, PastTheGracePeriodTheSessionIsFreedAndTheProgramFailsClearly) {
  start("[session]\nresume_grace_ms = 800\n");
  std::string out = dir_.file("hold.out");
  RunResult r;
  std::thread program([&] { r = run(resumeClient() + " hold >" + out + " 2>&1", env()); });
  ASSERT_TRUE(waitFor([&] { return readFile(out).find("holding") != std::string::npos; }, 10000)) << readFile(out);
  proxy_->refuse(true);  // the server stays out of reach
  proxy_->cutNow();
  auto t0 = std::chrono::steady_clock::now();
  program.join();
  auto waited = std::chrono::steady_clock::now() - t0;
  std::string text = readFile(out);
  EXPECT_EQ(r.code, 3) << text;
  EXPECT_NE(text.find("a call failed: cudaErrorDevicesUnavailable"), std::string::npos) << text;
  EXPECT_NE(text.find("could not resume session 1 within the server's grace period of 800 ms"), std::string::npos) << text;
  EXPECT_LT(waited, std::chrono::seconds(10));
  // The worker gave the session up: its memory is released and it exits.
  ASSERT_TRUE(waitFor([&] { return server_->log().find("session 1 ended") != std::string::npos; }, 10000)) << server_->log();
  std::string log = server_->log();
  EXPECT_NE(log.find("session 1: the client did not resume within 800 ms; ending the session and freeing its memory"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("session 1 ended (1 allocations released"), std::string::npos) << log;
}

// A server that is gone entirely — the daemon and the worker, neither able to
// say goodbye (as when its host's rgpu-server is killed): a reconnection is
// refused, and nothing there can resume the session, so the program fails at
// once rather than retrying for the 30 s grace period.
TEST_F(Resume, AServerThatIsNoLongerRunningEndsTheProgramAtOnce) {
  start("");
  // Straight to the server: the proxy would accept the reconnections.
  writeFile(dir_.file("client.toml"), clientToml(dir_.path(), server_->port()) + "log_level = \"warn\"\n");
  std::string out = dir_.file("hold.out");
  RunResult r;
  std::thread program([&] { r = run(resumeClient() + " hold >" + out + " 2>&1", env()); });
  ASSERT_TRUE(waitFor([&] { return readFile(out).find("holding") != std::string::npos; }, 10000)) << readFile(out);
  std::vector<pid_t> workers = childrenOf(server_->pid());
  ASSERT_EQ(workers.size(), 1u);
  // The daemon frozen first, so that it neither answers a reconnection nor
  // makes the worker say goodbye as it dies; then both killed.
  auto t0 = std::chrono::steady_clock::now();
  ::kill(server_->pid(), SIGSTOP);
  ::kill(workers[0], SIGKILL);
  ::kill(server_->pid(), SIGKILL);
  server_->wait();
  program.join();
  auto waited = std::chrono::steady_clock::now() - t0;
  std::string text = readFile(out);
  EXPECT_EQ(r.code, 3) << text;
  EXPECT_NE(text.find("a call failed: cudaErrorDevicesUnavailable"), std::string::npos) << text;
  EXPECT_NE(text.find("127.0.0.1:" + std::to_string(server_->port()) +
                      ", which is no longer running (connection refused): session 1 is gone"),
            std::string::npos)
      << text;
  EXPECT_LT(waited, std::chrono::seconds(10));
  std::printf("resume: the program failed %.2f s after its server was gone\n",
              std::chrono::duration<double>(waited).count());
}

}  // namespace
}  // namespace rgpu::test
