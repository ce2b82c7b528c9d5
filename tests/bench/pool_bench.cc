// The pool of servers on etcd, measured (docs/pool.md "Scale"):
//
//  1. placement: parsing the pool's view (what two etcd reads return) and
//     choosing a member, for a simulated pool of 1,000 members x 8 devices;
//  2. admission: a program's first CUDA call when the member it asks takes
//     it, against when that member redirects it to another (one extra TLS
//     connection and Hello), both through real rgpu-servers and a real etcd;
//  3. etcd writes per member while a program makes calls as fast as it can:
//     bounded by [cluster] load_interval_ms, not by the call rate.
//
// Figures are printed side by side in one run (the machine is shared and
// noisy); nothing is asserted. `--quick`: fewer repetitions (the test).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "server/cluster/etcd_client.h"
#include "server/cluster/placement.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_env.h"

using namespace rgpu;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void placementScale(int rounds) {
  const int members = 1000, devices = 8;
  std::vector<server::cluster::EtcdKv> recs, loads;
  const char* models[] = {"Sim H100", "Sim A100", "Sim L4"};
  for (int m = 0; m < members; ++m) {
    std::string name = "gpu" + std::to_string(m), devs, load;
    for (int d = 0; d < devices; ++d) {
      devs += std::string(d ? "," : "") + "{\"index\":" + std::to_string(d) + ",\"name\":\"" + models[m % 3] +
              "\",\"memory\":85899345920,\"cc\":\"9.0\",\"sms\":132,\"uuid\":\"GPU-x\"}";
      load += std::string(d ? "," : "") + "{\"index\":" + std::to_string(d) + ",\"used\":0,\"free\":" +
              std::to_string((uint64_t(m * 7 + d) % 80) << 30) + ",\"sessions\":" + std::to_string((m + d) % 5) +
              ",\"busy\":0.5}";
    }
    recs.push_back({"/rgpu/members/" + name,
                    "{\"name\":\"" + name + "\",\"address\":\"" + name + ".example:7443\",\"state\":\"ready\","
                    "\"started\":0,\"version\":\"0\",\"devices\":[" + devs + "]}", 0, 0, 0});
    loads.push_back({"/rgpu/load/" + name, "{\"sessions\":3,\"queued\":0,\"devices\":[" + load + "]}", 0, 0, 0});
  }
  size_t bytes = 0;
  for (auto& k : recs) bytes += k.value.size();
  for (auto& k : loads) bytes += k.value.size();
  std::vector<double> parse_ms, choose_us;
  std::vector<server::cluster::MemberView> view;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    view = server::cluster::parseView("/rgpu/", recs, loads);
    parse_ms.push_back(ms(Clock::now() - t0));
  }
  server::DeviceRequest req;
  req.count = 4;
  req.min_memory = 40ull << 30;
  req.model = "Sim A100";
  size_t picked = 0;
  for (int r = 0; r < rounds * 20; ++r) {
    auto t0 = Clock::now();
    auto i = server::cluster::choose(view, req, r % 2 ? server::cluster::PoolPolicy::kPack
                                                      : server::cluster::PoolPolicy::kSpread, "gpu0");
    choose_us.push_back(ms(Clock::now() - t0) * 1000);
    picked += i ? 1 : 0;
  }
  std::printf("placement, %d members x %d devices (%.1f MiB of records and loads): parse the view %.2f ms, "
              "choose a member %.1f us (median of %d / %d; %zu placed)\n",
              members, devices, bytes / 1048576.0, median(parse_ms), median(choose_us), rounds, rounds * 20, picked);
}

test::RunResult poolClient(const test::TempDir& dir, const std::string& toml) {
  test::writeFile(dir.file("client.toml"), toml);
  return test::run(std::string(RGPU_TEST_PROGRAMS_DIR) + "/pool_client info",
                   "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
}

void admissionAndWrites(int reps) {
  test::TempDir certs, etcd_dir, da, db, client;
  test::makeCerts(certs.path());
  test::EtcdProcess etcd(etcd_dir.path());
  auto member = [&](const std::string& name, const std::string& device) {
    return test::serverToml(certs.path(), "[[sim.devices]]\nname = \"" + device + "\"\nmemory = \"8GiB\"\n"
                                          "[cluster]\nendpoints = [\"" + etcd.endpoint() + "\"]\nname = \"" + name +
                                          "\"\nload_interval_ms = 200\n");
  };
  test::ServerProcess a(da.path(), member("a", "Sim A")), b(db.path(), member("b", "Sim B"));
  server::cluster::EtcdOptions o;
  o.endpoints = {etcd.endpoint()};
  auto etcd_client = std::move(*server::cluster::EtcdClient::create(o));
  for (int i = 0; i < 100; ++i) {
    auto r = etcd_client->range("/rgpu/members/", true);
    if (r && r->size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the members' views
  const std::string base = test::clientToml(certs.path(), a.port()) + "[request]\ndevices = 1\n";
  std::vector<double> direct, redirected;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    auto d = poolClient(client, base + "model = \"Sim A\"\n");
    direct.push_back(ms(Clock::now() - t0));
    t0 = Clock::now();
    auto r = poolClient(client, base + "model = \"Sim B\"\n");
    redirected.push_back(ms(Clock::now() - t0));
    if (d.code || r.code) {
      std::printf("admission run failed:\n%s\n%s\n", d.output.c_str(), r.output.c_str());
      return;
    }
  }
  const double md = median(direct), mr = median(redirected);
  std::printf("admission (a program's run: start, connect, first call, exit; median of %d): taken by the member asked "
              "%.1f ms, redirected to another %.1f ms: the redirect costs %.1f ms (x%.2f)\n",
              reps, md, mr, mr - md, md > 0 ? mr / md : 0);

  auto version = [&] {
    auto r = etcd_client->range("/rgpu/load/a");
    return r && !r->empty() ? (*r)[0].version : 0;
  };
  const int64_t v0 = version();
  auto t0 = Clock::now();
  test::writeFile(client.file("client.toml"), test::clientToml(certs.path(), a.port()));
  auto soak = test::run(std::string(RGPU_TEST_PROGRAMS_DIR) + "/soak_client " + std::to_string(reps * 20000),
                        "RGPU_CONFIG=" + client.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t writes = version() - v0;
  std::printf("etcd writes of a member under load: %d calls in %.2f s (%.0f calls/s): %lld load writes, %.1f writes/s "
              "(bound: 1 per load_interval_ms = 200 ms, 5/s, whatever the call rate)%s\n",
              reps * 20000, s, reps * 20000 / s, static_cast<long long>(writes), writes / s,
              soak.code ? " [soak client failed]" : "");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  placementScale(quick ? 3 : 20);
  admissionAndWrites(quick ? 2 : 10);
  return 0;
}
