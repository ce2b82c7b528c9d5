// Measured properties of compute sharing, and the soak: these tests run alone
// (RUN_SERIAL), each comparing figures taken side by side in the same run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <regex>
#include <thread>
#include <vector>

#include "tests/e2e/pool_fixture.h"
#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

// fair_client's kernels per second.
double rateOf(const RunResult& r) {
  std::smatch m;
  if (!std::regex_search(r.output, m, std::regex("rate ([0-9.]+)"))) return 0;
  return std::stod(m[1].str());
}

double jain(const std::vector<double>& x) {
  double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += v * v;
  }
  return sq > 0 ? sum * sum / (x.size() * sq) : 0;
}

std::string fairClient() { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/fair_client"; }

// Runs one fair_client per entry of `users` at once, for `seconds` each.
std::vector<RunResult> compete(const std::vector<std::string>& configs, double seconds) {
  std::vector<RunResult> out(configs.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < configs.size(); ++i)
    ts.emplace_back([&, i] {
      out[i] = run(fairClient() + " " + std::to_string(seconds) + " 10",
                   "RGPU_CONFIG=" + configs[i] + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
    });
  for (auto& t : ts) t.join();
  return out;
}

TEST_F(Pool, EqualWeightsShareADeviceFairly) {
  start("", "", "", true);
  auto r = compete({dir_.file("alice.toml"), dir_.file("alice.toml"), dir_.file("bob.toml")}, 3.0);
  std::vector<double> rates;
  for (auto& x : r) {
    EXPECT_EQ(x.code, 0) << x.output;
    rates.push_back(rateOf(x));
  }
  double j = jain(rates);
  std::printf("equal weights: %.1f %.1f %.1f kernels/s, Jain's index %.3f\n", rates[0], rates[1], rates[2], j);
  EXPECT_GE(j, 0.95);
}

TEST_F(Pool, WeightsSetTheShareOfGpuTime) {
  start("weight = 3\n", "weight = 1\n", "", true);
  auto r = compete({dir_.file("alice.toml"), dir_.file("bob.toml")}, 3.0);
  double a = rateOf(r[0]), b = rateOf(r[1]);
  std::printf("weights 3:1: %.1f vs %.1f kernels/s, ratio %.2f\n", a, b, b > 0 ? a / b : 0);
  ASSERT_GT(b, 0) << r[1].output;
  EXPECT_GT(a / b, 2.0);
  EXPECT_LT(a / b, 4.5);
}

TEST_F(Pool, HighPriorityKeepsItsThroughputWhileALowOneCompetes) {
  start("priority = \"low\"\n", "priority = \"high\"\n", "", true);
  // bob (high) alone, then while alice (low) runs throughout, then alone again.
  auto alone = [&] {
    return run(fairClient() + " 2 20", "RGPU_CONFIG=" + dir_.file("bob.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  };
  // On a shared 2-core machine other load can only lower the competing
  // figure, never raise it: the property holds if one of three trials shows it.
  double best = 0;
  for (int trial = 1; trial <= 3 && best < 0.9; ++trial) {
    RunResult solo = alone();
    RunResult low;
    std::thread t([&] {
      low = run(fairClient() + " 4 20", "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" +
                                              RGPU_CLIENT_LIBDIR);
    });
    usleep(500000);  // let the low-priority client get going first
    RunResult high = run(fairClient() + " 3 20", "RGPU_CONFIG=" + dir_.file("bob.toml") + " LD_LIBRARY_PATH=" +
                                                      RGPU_CLIENT_LIBDIR);
    t.join();
    RunResult solo_after = alone();  // the machine may be busier or quieter now: average both
    double s = (rateOf(solo) + rateOf(solo_after)) / 2, h = rateOf(high);
    std::printf("priority, trial %d: high alone %.1f, high with a low competitor %.1f kernels/s (%.1f %%); low %.1f\n",
                trial, s, h, s > 0 ? 100 * h / s : 0, rateOf(low));
    ASSERT_GT(s, 0) << solo.output;
    EXPECT_EQ(low.code, 0) << low.output;  // held back, not starved for ever: it finishes
    best = std::max(best, h / s);
  }
  EXPECT_GE(best, 0.9);
}

TEST_F(Pool, SoakThirtyTwoClientsOfTenThousandMixedCallsLeaveNothingBehind) {
  start("", "admin = true\n");
  std::string soak = std::string(RGPU_TEST_PROGRAMS_DIR) + "/soak_client";
  auto client = [&](const std::string& user) {
    return run(soak + " 10000", "RGPU_CONFIG=" + dir_.file(user + ".toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  };
  // Two rounds of 32 clients at once. The first is the baseline: the daemon's
  // allocator makes its per-thread arenas for as many threads as such a round
  // has, once. A leak grows with every round; the second must leave nothing.
  auto round = [&](std::vector<RunResult>& out) {
    std::vector<std::thread> ts;
    for (int i = 0; i < 32; ++i) ts.emplace_back([&, i] { out[i] = client(i % 2 ? "alice" : "bob"); });
    for (auto& t : ts) t.join();
  };
  std::vector<RunResult> out(32);
  round(out);
  for (auto& r : out) ASSERT_EQ(r.code, 0) << r.output;
  waitFor([&] { return childrenOf(server_->pid()) == 0; }, "the first round's workers to exit");
  long before = rssKiB(server_->pid());
  auto t0 = std::chrono::steady_clock::now();
  round(out);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long calls = 0;
  for (auto& r : out) {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(", 0 errors, results ok"), std::string::npos) << r.output;
    std::smatch m;
    if (std::regex_search(r.output, m, std::regex("soak: (\\d+) calls"))) calls += std::stol(m[1].str());
  }
  waitFor([&] { return childrenOf(server_->pid()) == 0; }, "every worker to exit");
  long after = rssKiB(server_->pid());
  RunResult smi = run(std::string(RGPU_SMI_BIN) + " --query-gpu=memory.used,sessions --format=csv,noheader,nounits",
                      "RGPU_CONFIG=" + dir_.file("bob.toml"));
  std::printf("soak: 32 clients, %ld calls in %.1f s (%.0f calls/s); daemon RSS %ld -> %ld KiB; pool after: %s", calls,
              secs, calls / secs, before, after, smi.output.c_str());
  EXPECT_GE(calls, 32 * 10000);
  // Back to baseline: no worker left, nothing allocated or placed in the pool, the daemon did not grow.
  EXPECT_EQ(smi.output, "0, 0\n0, 0\n") << smi.output;
#if !defined(__SANITIZE_ADDRESS__)
  // (Under ASan the daemon's allocator quarantines what it frees, so its RSS
  // says nothing about leaks there; LeakSanitizer and the unit tests do.)
  EXPECT_LE(after - before, 2048) << "daemon RSS " << before << " -> " << after << " KiB";
#endif
}

}  // namespace
}  // namespace rgpu::test
