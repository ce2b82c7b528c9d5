// Nothing waits for ever, against the real daemon: [limits] kernel_timeout_ms
// stops a kernel that never ends (sim) or ends its session (CUDA, where the GPU
// cannot stop one kernel); a client that leaves while one runs does not leave
// its worker, memory or quota behind; a worker does not outlive its daemon.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "tests/e2e/pool_fixture.h"

namespace rgpu::test {
namespace {

std::string faults() { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/faults"; }

class Watchdog : public Pool {
 protected:
  bool workersGone() { return childrenOf(server_->pid()) == 0; }
};

TEST_F(Watchdog, ASimKernelPastTheTimeoutIsStoppedAndTheErrorIsSticky) {
  start("", "", "[limits]\nkernel_timeout_ms = 300\n", true);
  RunResult r = run(faults() + " spin", "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_NE(r.output.find("spinning"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("synchronize: cudaErrorLaunchTimeout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("later call: cudaErrorLaunchTimeout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ran longer than [limits] kernel_timeout_ms = 300 ms"), std::string::npos) << r.output;
  // The server goes on: the next session runs a kernel (a small one: the limit still applies).
  RunResult next = run(faults() + " ok", "RGPU_CONFIG=" + dir_.file("bob.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_NE(next.output.find("synchronize: cudaSuccess"), std::string::npos) << next.output;
}

TEST_F(Watchdog, AClientThatLeavesWhileItsKernelSpinsFreesItsWorkerMemoryAndQuota) {
  // No kernel timeout: only the client's departure ends the kernel. A short
  // resume grace period, so the worker gives the session up quickly.
  start("memory_quota = \"64MiB\"\n", "", "[session]\nresume_grace_ms = 200\n", true);
  RunResult r = run("timeout -s KILL 2 " + faults() + " spin",
                    "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_NE(r.output.find("spinning"), std::string::npos) << r.output;
  waitFor([&] { return workersGone(); }, "the worker of the departed client to exit");
  std::string log = server_->log();
  EXPECT_EQ(log.find("teardown did not finish"), std::string::npos) << log;  // the kernel stopped, no forced exit
  // Its memory and quota are back: alice may hold her whole quota again.
  RunResult full = as("alice", "quota 67108864");
  EXPECT_NE(full.output.find("allocate the quota: cudaSuccess"), std::string::npos) << full.output;
}

TEST_F(Watchdog, ACudaKernelPastTheTimeoutEndsItsSessionAndTheWorkerExits) {
  makeCerts(dir_.path());
  std::string toml = poolToml(dir_.path(), "", "", "[limits]\nkernel_timeout_ms = 300\n");
  toml = toml.substr(0, toml.find("[[sim.devices]]"));
  toml.replace(toml.find("backend = \"sim\""), std::strlen("backend = \"sim\""), "backend = \"cuda\"");
  toml += "[cuda]\ndriver_library = \"" + std::string(RGPU_FAKE_CUDA_LIB) + "\"\n";
  server_ = std::make_unique<ServerProcess>(dir_.path(), toml);
  writeFile(dir_.file("alice.toml"), clientToml(dir_.path(), server_->port(), "alice"));
  RunResult r = run(faults() + " spin", "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_NE(r.output.find("synchronize: cudaErrorLaunchTimeout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("later call: cudaErrorLaunchTimeout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the GPU cannot stop it, so the session ends"), std::string::npos) << r.output;
  waitFor([&] { return workersGone(); }, "the worker to exit");
  EXPECT_NE(server_->log().find("exiting without teardown"), std::string::npos) << server_->log();
  RunResult after = run(faults() + " ok", "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_NE(after.output.find("synchronize: cudaSuccess"), std::string::npos) << after.output;  // a new worker and context
}

TEST_F(Watchdog, WorkersDoNotOutliveTheirDaemonAndQueuedClientsAreReleased) {
  start("max_sessions = 1\n");
  std::thread holding = holder("alice", 256, 3000, dir_.file("holder.out"));
  RunResult queued;
  std::thread waiting([&] {
    // Bounded only so that a regression fails instead of hanging the suite.
    queued = run("timeout -s KILL 30 " + poolClient() + " info",
                 "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR + " RGPU_WAIT_MS=60000");
  });
  waitFor([&] { return server_->log().find("user 'alice' waits in the admission queue") != std::string::npos; },
          "the second session to queue");
  ::kill(server_->pid(), SIGKILL);  // the daemon dies without a word
  waiting.join();
  holding.join();
  EXPECT_NE(queued.code, 137) << "the queued client hung: " << queued.output;
  EXPECT_NE(queued.output.find("cudaErrorDevicesUnavailable"), std::string::npos) << queued.output;
  std::string held = readFile(dir_.file("holder.out"));
  EXPECT_EQ(held.find("free: cudaSuccess"), std::string::npos) << held;  // its session ended with the daemon
}

}  // namespace
}  // namespace rgpu::test
