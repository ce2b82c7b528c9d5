// Shared by the pool end-to-end tests: a real rgpu-server with a policy.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "tests/support/test_env.h"

namespace rgpu::test {

// Resident memory of a process, in KiB.
inline long rssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

// Child processes (workers) of a process.
inline int childrenOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  int n = 0;
  for (std::string c; in >> c;) ++n;
  return n;
}

inline std::string poolClient() { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/pool_client"; }

// server.toml with two sim devices and a policy for alice (certificate) and bob (token).
inline std::string poolToml(const std::string& dir, const std::string& alice, const std::string& bob,
                     const std::string& extra = "") {
  return "listen = \"127.0.0.1:0\"\nlog_level = \"debug\"\nbackend = \"sim\"\n" + extra +
         "[tls]\ncert = \"" + dir + "/server.pem\"\nkey = \"" + dir + "/server.key\"\nca = \"" + dir + "/ca.pem\"\n"
         "[[users]]\nname = \"alice\"\ncert_cn = \"alice\"\n" + alice +
         "[[users]]\nname = \"bob\"\ntoken = \"bob-token\"\n" + bob +
         "[[sim.devices]]\nname = \"rgpu sim H100\"\nmemory = \"1GiB\"\ncompute_capability = \"9.0\"\nsm_count = 4\n"
         "[[sim.devices]]\nname = \"rgpu sim A100\"\nmemory = \"2GiB\"\ncompute_capability = \"8.0\"\nsm_count = 4\n";
}

class Pool : public ::testing::Test {
 protected:
  void start(const std::string& alice, const std::string& bob = "", const std::string& extra = "",
             bool one_device = false) {
    makeCerts(dir_.path());
    std::string toml = poolToml(dir_.path(), alice, bob, extra);
    if (fake_cuda_) {  // the fake driver's one device instead of the sim's two
      toml.replace(toml.find("backend = \"sim\""), std::strlen("backend = \"sim\""), "backend = \"cuda\"");
      toml.insert(toml.find("[tls]"), fakeCudaToml());
    }
    if (one_device) toml = toml.substr(0, toml.find("[[sim.devices]]\nname = \"rgpu sim A100\""));
    server_ = std::make_unique<ServerProcess>(dir_.path(), toml);
    writeFile(dir_.file("alice.toml"), clientToml(dir_.path(), server_->port(), "alice"));
    writeFile(dir_.file("bob.toml"), "token = \"bob-token\"\n" + clientToml(dir_.path(), server_->port(), ""));
  }
  RunResult as(const std::string& user, const std::string& args, const std::string& env = "") {
    return run(poolClient() + " " + args, "RGPU_CONFIG=" + dir_.file(user + ".toml") +
                                              " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR + " " + env);
  }
  // Starts `pool_client hold` in the background; returns once it holds its memory.
  std::thread holder(const std::string& user, uint64_t bytes, int ms, const std::string& out) {
    std::string args = "hold " + std::to_string(bytes) + " " + std::to_string(ms) + " >" + out + " 2>&1";
    std::thread t([this, user, args] { as(user, args); });
    waitFor([&] { return readFile(out).find("holding") != std::string::npos; }, out);
    return t;
  }
  // Polls what a process writes once (a file or the server log); there is no event to wait on.
  // `seconds`: how long a loaded 2-core CI machine may take to get there.
  template <typename F>
  void waitFor(F ready, const std::string& what, int seconds = 10) {
    for (int i = 0; i < seconds * 200 && !ready(); ++i) usleep(5000);
    ASSERT_TRUE(ready()) << "timed out waiting for " << what << "\nserver log:\n" << server_->log();
  }
  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  bool fake_cuda_ = false;  // start(): backend = "cuda" on the fake driver (tests/fake_driver)
};

}  // namespace rgpu::test
