// The pool manager end to end: a real rgpu-server (daemon + workers) with a
// policy, several concurrent CUDA programs, and what each of them sees.
#include <gtest/gtest.h>
#include <signal.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "server/config/server_config.h"
#include "tests/e2e/pool_fixture.h"
#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

using json = nlohmann::json;

TEST_F(Pool, QuotaIsExactToTheByteAndCudaMemGetInfoShowsIt) {
  start("memory_quota = \"1MiB\"\n");
  RunResult r = as("alice", "quota 1048576");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("allocate the quota: cudaSuccess"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("meminfo: free 0 total 1048576"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("one byte more: cudaErrorMemoryAllocation"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("free: cudaSuccess"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("allocate again: cudaSuccess"), std::string::npos) << r.output;
  // bob has no quota.
  RunResult b = as("bob", "quota 1048576");
  EXPECT_NE(b.output.find("one byte more: cudaSuccess"), std::string::npos) << b.output;
  EXPECT_NE(server_->log().find("memory quota of user 'alice' on device 0 exceeded"), std::string::npos);
}

TEST_F(Pool, TheDeviceMallocHeapCountsAgainstTheQuota) {
  start("memory_quota = \"1MiB\"\n");
  RunResult over = as("alice", "heap 2097152 4096");
  EXPECT_NE(over.output.find("set the malloc heap: cudaErrorMemoryAllocation"), std::string::npos) << over.output;
  EXPECT_NE(over.output.find("allocate beside it: cudaSuccess"), std::string::npos) << over.output;
  RunResult within = as("alice", "heap 524288 786432");
  EXPECT_NE(within.output.find("set the malloc heap: cudaSuccess"), std::string::npos) << within.output;
  EXPECT_NE(within.output.find("allocate beside it: cudaErrorMemoryAllocation"), std::string::npos) << within.output;
}

TEST_F(Pool, QuotaSpansTheUsersSessionsAndACrashedWorkerReturnsItsShare) {
  start("memory_quota = \"1MiB\"\n");
  std::thread t = holder("alice", 786432, 2000, dir_.file("holder.out"));
  RunResult second = as("alice", "quota 524288");
  EXPECT_NE(second.output.find("allocate the quota: cudaErrorMemoryAllocation"), std::string::npos) << second.output;
  // Kill the holder's worker process as a crash would.
  std::smatch m;
  std::string log = server_->log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("session 1: worker (\\d+)"))) << log;
  ::kill(std::stoi(m[1].str()), SIGKILL);
  waitFor([&] { return server_->log().find("killed by signal 9") != std::string::npos; }, "the worker's death");
  t.join();
  EXPECT_NE(readFile(dir_.file("holder.out")).find("free: cudaErrorDevicesUnavailable"), std::string::npos)
      << readFile(dir_.file("holder.out"));  // only that client failed
  RunResult after = as("alice", "quota 1048576");
  EXPECT_NE(after.output.find("allocate the quota: cudaSuccess"), std::string::npos) << after.output;
  EXPECT_NE(after.output.find("one byte more: cudaErrorMemoryAllocation"), std::string::npos) << after.output;
}

TEST_F(Pool, KillingAWorkerMidKernelFailsOnlyThatClient) {
  start("", "", "", true);
  std::string fair = std::string(RGPU_TEST_PROGRAMS_DIR) + "/fair_client";
  RunResult victim, other;
  std::thread a([&] {
    victim = run(fair + " 20 10", "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  });
  waitFor([&] { return server_->log().find("placed on device(s)") != std::string::npos; }, "the first session");
  std::thread b([&] {
    other = run(fair + " 2 10", "RGPU_CONFIG=" + dir_.file("bob.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  });
  std::smatch m;
  std::string log = server_->log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("session (\\d+): user 'alice' placed"))) << log;
  std::string sid = m[1].str();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("session " + sid + ": worker (\\d+)"))) << log;
  usleep(300000);  // let its kernels run
  ::kill(std::stoi(m[1].str()), SIGKILL);
  a.join();
  b.join();
  EXPECT_NE(victim.code, 0);
  EXPECT_NE(victim.output.find("cudaErrorDevicesUnavailable"), std::string::npos) << victim.output;
  EXPECT_NE(victim.output.find("lost the connection to rgpu server"), std::string::npos) << victim.output;
  EXPECT_EQ(other.code, 0) << other.output;  // the other session went on
  EXPECT_NE(other.output.find("kernels "), std::string::npos) << other.output;
  EXPECT_NE(server_->log().find("killed by signal 9"), std::string::npos);
}

TEST_F(Pool, DeviceAccessIsDeniedToAUserWhoMayNotUseIt) {
  start("", "devices = [\"*H200*\"]\n");
  RunResult r = as("bob", "info");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("cudaGetDeviceCount: cudaErrorNotPermitted"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("user 'bob' may not use any device of this server"), std::string::npos) << r.output;
}

TEST_F(Pool, PlacementFollowsTheRequestAndDevicesAreRenumberedForTheSession) {
  start("", "devices = [\"1\"]\n");
  RunResult a100 = as("alice", "info", "RGPU_DEVICES=1");
  writeFile(dir_.file("h100.toml"), readFile(dir_.file("alice.toml")) +
                                        "[request]\ndevices = 1\nmin_compute_capability = \"9.0\"\n");
  RunResult h100 = run(poolClient() + " info", "RGPU_CONFIG=" + dir_.file("h100.toml") + " LD_LIBRARY_PATH=" +
                                                   RGPU_CLIENT_LIBDIR);
  EXPECT_NE(h100.output.find("device 0: rgpu sim H100"), std::string::npos) << h100.output;
  EXPECT_EQ(h100.output.find("device 1:"), std::string::npos) << h100.output;
  // Both idle: the one with more free memory (A100, 2 GiB) is the least loaded.
  EXPECT_NE(a100.output.find("device 0: rgpu sim A100"), std::string::npos) << a100.output;
  // bob may use host device 1 only; it is his device 0.
  RunResult b = as("bob", "info");
  EXPECT_NE(b.output.find("device 0: rgpu sim A100, total 2147483648"), std::string::npos) << b.output;
  EXPECT_EQ(b.output.find("device 1:"), std::string::npos) << b.output;
  writeFile(dir_.file("never.toml"), readFile(dir_.file("alice.toml")) + "[request]\ndevices = 3\n");
  RunResult never = run(poolClient() + " info", "RGPU_CONFIG=" + dir_.file("never.toml") + " LD_LIBRARY_PATH=" +
                                                    RGPU_CLIENT_LIBDIR);
  EXPECT_NE(never.output.find("no placement can ever satisfy this: asked for 3 device(s)"), std::string::npos)
      << never.output;
}

TEST_F(Pool, AdmissionQueuesAndTimesOutWithWhatWasAskedAndWhatIsFree) {
  start("max_sessions = 1\n");
  std::thread t = holder("alice", 256, 1500, dir_.file("holder.out"));
  RunResult refused = as("alice", "info", "RGPU_WAIT_MS=200");
  EXPECT_NE(refused.output.find("cudaErrorDevicesUnavailable"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("user 'alice' has 1 session(s), max_sessions = 1"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("ms in the admission queue"), std::string::npos) << refused.output;
  RunResult waited = as("alice", "info", "RGPU_WAIT_MS=30000");  // admitted when the holder leaves
  t.join();
  EXPECT_EQ(waited.code, 0) << waited.output;
  EXPECT_NE(waited.output.find("cudaGetDeviceCount: cudaSuccess"), std::string::npos) << waited.output;
  EXPECT_NE(server_->log().find("user 'alice' waits in the admission queue"), std::string::npos);
}

TEST_F(Pool, PolicyReloadOnSighupAppliesWithoutARestart) {
  start("memory_quota = \"1MiB\"\n");
  RunResult before = as("alice", "quota 2097152");
  EXPECT_NE(before.output.find("allocate the quota: cudaErrorMemoryAllocation"), std::string::npos) << before.output;
  writeFile(dir_.file("server.toml"), poolToml(dir_.path(), "memory_quota = \"2MiB\"\n", ""));
  ::kill(server_->pid(), SIGHUP);
  waitFor([&] { return server_->log().find("SIGHUP: configuration reloaded") != std::string::npos; }, "the reload");
  RunResult after = as("alice", "quota 2097152");
  EXPECT_NE(after.output.find("allocate the quota: cudaSuccess"), std::string::npos) << after.output;
  EXPECT_NE(after.output.find("one byte more: cudaErrorMemoryAllocation"), std::string::npos) << after.output;
}

RunResult smi(const std::string& client_toml, const std::string& args) {
  return run(std::string(RGPU_SMI_BIN) + " " + args, "RGPU_CONFIG=" + client_toml);
}

TEST_F(Pool, RgpuSmiShowsDevicesAndSessionsAdminsSeeEveryone) {
  start("", "admin = true\n");
  std::thread t = holder("alice", 1 << 20, 3000, dir_.file("holder.out"));
  std::thread tb = holder("bob", 256, 3000, dir_.file("bob.out"));
  // Machine-readable, as nvidia-smi's. The holder asked for no count: it got every device, and allocated on its 0.
  RunResult gpus = smi(dir_.file("alice.toml"),
                       "--query-gpu=index,name,memory.used,memory.total,sessions,compute_cap --format=csv,noheader,nounits");
  EXPECT_EQ(gpus.code, 0) << gpus.output;
  EXPECT_NE(gpus.output.find("0, rgpu sim H100, 1, 1024, 2, 9.0\n"), std::string::npos) << gpus.output;
  EXPECT_NE(gpus.output.find("1, rgpu sim A100, 0, 2048, 2, 8.0\n"), std::string::npos) << gpus.output;
  RunResult mine = smi(dir_.file("alice.toml"), "--query-sessions=user,devices,memory,priority,state --format=csv");
  EXPECT_NE(mine.output.find("user, devices, memory, priority, state\n"), std::string::npos) << mine.output;
  EXPECT_NE(mine.output.find("alice, 0 1, 1 MiB, normal, running\n"), std::string::npos) << mine.output;
  EXPECT_EQ(mine.output.find("bob"), std::string::npos) << "a user sees only their own sessions:\n" << mine.output;
  // bob is an admin: he sees alice's session.
  RunResult all = smi(dir_.file("bob.toml"), "--query-sessions=user,host,pid --format=csv,noheader");
  EXPECT_NE(all.output.find("alice, "), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("bob, "), std::string::npos) << all.output;
  RunResult table = smi(dir_.file("alice.toml"), "");
  EXPECT_NE(table.output.find("GPU  NAME"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("rgpu sim H100  1 MiB / 1024 MiB"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("SESSION  USER"), std::string::npos) << table.output;
  t.join();
  tb.join();
  RunResult bad = smi(dir_.file("alice.toml"), "--query-gpu=index,bogus --format=csv");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("unknown --query-gpu field 'bogus'"), std::string::npos) << bad.output;
}

TEST_F(Pool, EveryEndedSessionLeavesAnAccountingLineAndRgpuSmiSumsThem) {
  const std::string path = dir_.file("accounting.jsonl");
  start("", "", "[accounting]\npath = \"" + path + "\"\n");
  // alice copies both ways and runs a kernel.
  RunResult a = run(std::string(RGPU_EXAMPLES_DIR) + "/vector_add",
                    "RGPU_CONFIG=" + dir_.file("alice.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  ASSERT_EQ(a.code, 0) << a.output;
  // bob's worker dies as a crash would: the daemon accounts for the session anyway.
  std::thread t = holder("bob", 1 << 20, 2000, dir_.file("holder.out"));
  std::smatch m;
  std::string log = server_->log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("session 2: worker (\\d+)"))) << log;
  ::kill(std::stoi(m[1].str()), SIGKILL);
  t.join();
  std::vector<json> lines;
  waitFor([&] {
    lines.clear();
    std::istringstream in(readFile(path));
    for (std::string l; std::getline(in, l);) lines.push_back(json::parse(l, nullptr, false));
    return lines.size() == 2;
  }, "two accounting lines in " + path);
  std::map<std::string, json> by_user;
  for (auto& j : lines) {
    ASSERT_TRUE(j.is_object());
    by_user[j.value("user", "")] = j;
  }
  const json& al = by_user["alice"];
  EXPECT_EQ(al["session"], 1);
  EXPECT_EQ(al["reason"], "client left") << al.dump();
  EXPECT_GE(al["peak_memory"].get<uint64_t>(), 1u << 20) << al.dump();
  EXPECT_GT(al["gib_hours"].get<double>(), 0) << al.dump();
  EXPECT_GT(al["wall_s"].get<double>(), 0) << al.dump();
  EXPECT_GT(al["calls"].get<uint64_t>(), 3u) << al.dump();
  EXPECT_GT(al["gpu_s"].get<double>(), 0) << al.dump();
  EXPECT_GE(al["bytes_in"].get<uint64_t>(), al["bytes_out"].get<uint64_t>()) << al.dump();  // two inputs, one output
  EXPECT_GT(al["bytes_out"].get<uint64_t>(), 0u) << al.dump();
  EXPECT_EQ(al["devices"].size(), 2u) << al.dump();  // asked for no count: every device
  EXPECT_EQ(al["devices"][0]["name"], "rgpu sim H100") << al.dump();
  EXPECT_EQ(al["migrations"], 0);
  EXPECT_EQ(al["ended"].get<std::string>().size(), 20u) << al.dump();  // 2026-12-05T15:20:56Z
  const json& bl = by_user["bob"];
  EXPECT_EQ(bl["reason"], "worker killed by signal 9") << bl.dump();
  EXPECT_EQ(bl["peak_memory"].get<uint64_t>(), 1u << 20) << bl.dump();
  // Per user and day, from the file alone.
  RunResult sum = run(std::string(RGPU_SMI_BIN) + " --accounting " + path + " --format=csv", "");
  EXPECT_EQ(sum.code, 0) << sum.output;
  const std::string day = al["ended"].get<std::string>().substr(0, 10);
  EXPECT_NE(sum.output.find(day + ", alice, 1, "), std::string::npos) << sum.output;
  EXPECT_NE(sum.output.find(day + ", bob, 1, "), std::string::npos) << sum.output;
  RunResult missing = run(std::string(RGPU_SMI_BIN) + " --accounting " + dir_.file("nothing.jsonl"), "");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.output.find("cannot read accounting log"), std::string::npos) << missing.output;
  std::printf("accounting:\n%s%s", readFile(path).c_str(), sum.output.c_str());
}

// GET `path` from 127.0.0.1:port, with `headers` ("Name: value\r\n" each); the whole response.
// Prometheus text format -> {"name{labels}": value}; checks every line parses.
std::map<std::string, double> parseMetrics(const std::string& body, std::string* bad) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.e+-]+)$)");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::smatch m;
    if (!std::regex_match(line, m, sample)) {
      *bad += line + "\n";
      continue;
    }
    out[m[1].str() + m[2].str()] = std::stod(m[3].str());
  }
  return out;
}

TEST_F(Pool, PrometheusEndpointReportsDevicesUsersAndSessions) {
  start("memory_quota = \"4MiB\"\n", "", "[pool]\nmetrics_listen = \"127.0.0.1:0\"\n");
  std::string log = server_->log();
  uint16_t port = test::metricsPort(log);
  ASSERT_NE(port, 0) << log;
  std::thread t = holder("alice", 3 << 20, 3000, dir_.file("holder.out"));
  std::string resp = httpGet(port, "/metrics");
  ASSERT_NE(resp.find("HTTP/1.0 200 OK"), std::string::npos) << resp;
  ASSERT_NE(resp.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << resp;
  std::string body = resp.substr(resp.find("\r\n\r\n") + 4);
  std::string bad;
  auto metrics = parseMetrics(body, &bad);
  EXPECT_TRUE(bad.empty()) << "unparsable lines:\n" << bad;
  auto find = [&](const std::string& prefix) -> double {
    for (auto& [k, v] : metrics)
      if (k.rfind(prefix, 0) == 0) return v;
    ADD_FAILURE() << "no metric " << prefix << " in:\n" << body;
    return -1;
  };
  EXPECT_EQ(find("DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-"), 3);
  EXPECT_EQ(find("DCGM_FI_DEV_FB_FREE{gpu=\"0\""), 1021);
  EXPECT_EQ(find("rgpu_device_sessions{gpu=\"1\""), 1);
  EXPECT_EQ(find("rgpu_user_quota_used_bytes{user=\"alice\",gpu=\"0\"}"), 3 << 20);
  EXPECT_EQ(find("rgpu_user_quota_bytes{user=\"alice\"}"), 4 << 20);
  EXPECT_EQ(find("rgpu_user_admissions_total{user=\"alice\"}"), 1);
  EXPECT_EQ(find("rgpu_session_memory_bytes{session=\"1\",user=\"alice\""), 3 << 20);
  EXPECT_GE(find("rgpu_session_calls_total{session=\"1\",user=\"alice\""), 0);
  EXPECT_EQ(find("rgpu_admission_queue_length{}"), 0);
  EXPECT_NE(httpGet(port, "/other").find("404 Not Found"), std::string::npos);
  t.join();
}

TEST_F(Pool, MetricsNeedTheBearerTokenAndCanLeaveTenantsOut) {
  start("", "", "[pool]\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_token = \"scrape-secret\"\nmetrics_labels = \"aggregate\"\n");
  std::string log = server_->log();
  uint16_t port = test::metricsPort(log);
  ASSERT_NE(port, 0) << log;
  std::thread t = holder("alice", 1 << 20, 2000, dir_.file("holder.out"));
  EXPECT_NE(httpGet(port, "/metrics").find("401 Unauthorized"), std::string::npos);
  EXPECT_NE(httpGet(port, "/metrics", "Authorization: Bearer wrong\r\n").find("401 Unauthorized"), std::string::npos);
  std::string resp = httpGet(port, "/metrics", "authorization: Bearer scrape-secret\r\n");
  ASSERT_NE(resp.find("HTTP/1.0 200 OK"), std::string::npos) << resp;
  std::string body = resp.substr(resp.find("\r\n\r\n") + 4);
  std::string bad;
  auto metrics = parseMetrics(body, &bad);
  EXPECT_TRUE(bad.empty()) << "unparsable lines:\n" << bad;
  EXPECT_NE(body.find("rgpu_device_sessions{"), std::string::npos) << body;
  EXPECT_NE(body.find("rgpu_sessions "), std::string::npos) << body;
  EXPECT_EQ(body.find("alice"), std::string::npos) << "a tenant's name in aggregate metrics:\n" << body;
  EXPECT_EQ(body.find("client_host"), std::string::npos) << body;
  t.join();
}

TEST(PoolConfig, MetricsOffLoopbackNeedAToken) {
  auto c = server::parseServerConfig("[pool]\nmetrics_listen = \"0.0.0.0:9400\"\n", "server.toml");
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("need [pool] metrics_token"), std::string::npos) << c.status().message();
  EXPECT_TRUE(server::parseServerConfig("[pool]\nmetrics_listen = \"0.0.0.0:9400\"\nmetrics_token = \"t\"\n", "s.toml"));
  EXPECT_TRUE(server::parseServerConfig("[pool]\nmetrics_listen = \"127.0.0.1:9400\"\n", "s.toml"));
}

}  // namespace
}  // namespace rgpu::test
