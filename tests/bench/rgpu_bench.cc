// rgpu-bench: rgpu against raw TLS on the same transport, measured side by
// side in one run (this machine is shared and noisy, so every figure is a
// median over interleaved rounds).
//
//   (a) synchronous call round trip (cudaStreamQuery on an idle stream) vs a
//       raw TLS ping-pong of the same frame size;
//   (b) asynchronous call rate (cudaStreamWaitEvent on a never-recorded event:
//       fire and forget, a no-op on the server);
//   (c) cudaMemcpy host-to-device and device-to-host bandwidth for 64 MiB vs a
//       raw TLS bulk stream in the same direction;
//   (d) a CUDA graph of 20 kernel launches against the same 20 launches issued
//       one by one, both run to completion: kernels per second each way;
//   (e) cudaMemcpyAsync host-to-device of 64 MiB in 256 KiB and in 4 MiB
//       pieces, from pinned memory (sent from the program's buffer as it is)
//       and from pageable memory (copied, or waited for, so that a resume can
//       replay it).
//
// --compression measures (f) alone: 64 MiB copies each way with lz4 `auto`
// against `off`, on data lz4 takes at many GB/s (one-hot rows of 1024
// floats), on data it shrinks 5x but takes at about 1 GB/s (a float tensor
// nine-tenths zeros, as after a ReLU: on loopback `auto` sends it as it is),
// and on incompressible data (random bytes). Each setting is a
// child process of its own against a server of its own setting (a server's
// setting governs what it sends), interleaved round by round.
//
// --stripes N,M,... measures (g) alone: 256 MiB copies each way (random
// bytes) with client.toml `stripes` = N, M, ... (a child process each),
// against one raw TLS stream of 256 MiB, interleaved round by round.
//
// It starts its own rgpu-server (sim backend) and raw TLS peer on loopback,
// with throwaway certificates. Links rgpu's libcudart.so.13 like any program.
//
//   rgpu-bench [--quick] [--load] [--breakdown] [--only a|b|c|d|e] [--async-calls N] [--compression] [--stripes 0,1,3]
// --load: a CPU hog on every core (a busy loop per core, at normal priority)
// for the whole measurement, as a compiler or a training job beside it would be.
// Round trips are timed one by one: median and 99th percentile of all of them.
// --breakdown: where a synchronous call's time goes, stage by stage (the
// client and the server stamp each call: client/export_table.h CallTiming).
// --only X: measurement X alone (for profiling it); the others print 0.
// --async-calls N: (b)'s calls per round (200,000), more for a profile of
// its steady state (`perf record -D` past the set-up).
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/export_table.h"
#include "common/tls.h"
#include "tests/bench/bench_server.h"
#include "tests/support/test_env.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using rgpu::common::TlsConnection;
using rgpu::common::TlsContext;

#ifdef RGPU_BENCH_GRAPHS
extern "C" cudaError_t rgpuBenchStep(int* p, cudaStream_t s);  // graph_kernels.cu
#endif

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "rgpu-bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// ---- the raw TLS peer (a separate process, like rgpu's worker) ----------------
// Commands: 'p' n k: k times read n bytes and echo them; 's' total: read total
// bytes, answer one byte; 'r' total: send total bytes.
void rawPeer(int lfd, const std::string& dir) {
  int fd = ::accept(lfd, nullptr, nullptr);
  auto ctx = TlsContext::makeServer(rgpu::common::TlsOptions::files(dir + "/ca.pem", dir + "/server.pem", dir + "/server.key", false));
  auto c = TlsConnection::accept(**ctx, fd, std::chrono::seconds(10));
  if (!c) _exit(1);
  TlsConnection& conn = **c;
  std::vector<char> buf(64 << 20);
  for (;;) {
    char cmd;
    uint64_t a[2];
    if (!conn.readExact(&cmd, 1) || !conn.readExact(a, sizeof a)) _exit(0);
    if (cmd == 'p') {
      for (uint64_t i = 0; i < a[1]; ++i) {
        if (!conn.readExact(buf.data(), a[0]) || !conn.write(buf.data(), a[0])) _exit(1);
      }
    } else if (cmd == 's') {
      for (uint64_t left = a[0]; left;) {
        uint64_t n = std::min<uint64_t>(left, buf.size());
        if (!conn.readExact(buf.data(), n)) _exit(1);
        left -= n;
      }
      char ok = 1;
      (void)conn.write(&ok, 1);
    } else if (cmd == 'r') {
      for (uint64_t left = a[0]; left;) {
        uint64_t n = std::min<uint64_t>(left, buf.size());
        if (!conn.write(buf.data(), n)) _exit(1);
        left -= n;
      }
    }
  }
}

struct Raw {
  pid_t pid = -1;
  std::unique_ptr<TlsConnection> conn;
  void command(char c, uint64_t a, uint64_t b) {
    char frame[17];
    frame[0] = c;
    std::memcpy(frame + 1, &a, 8);
    std::memcpy(frame + 9, &b, 8);
    (void)conn->write(frame, sizeof frame);
  }
};

Raw startRaw(const std::string& dir) {
  uint16_t port = 0;
  int lfd = rgpu::test::listenLoopback(&port);
  Raw r;
  r.pid = fork();
  if (r.pid == 0) {
    rawPeer(lfd, dir);
    _exit(0);
  }
  ::close(lfd);
  auto ctx = TlsContext::makeClient(rgpu::common::TlsOptions::files(dir + "/ca.pem", "", "", false));
  auto c = TlsConnection::connect(**ctx, "127.0.0.1", port, "", std::chrono::seconds(10));
  if (!c) {
    std::fprintf(stderr, "rgpu-bench: raw peer: %s\n", c.status().message().c_str());
    std::exit(1);
  }
  r.conn = std::move(*c);
  return r;
}

}  // namespace

// A busy loop on each core until killed (--load).
std::vector<pid_t> startHogs() {
  std::vector<pid_t> hogs;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i) {
    pid_t p = fork();
    if (p == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    if (p > 0) hogs.push_back(p);
  }
  return hogs;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// --breakdown: `calls` timed cudaStreamQuery calls, the median of each stage.
int breakdown(cudaStream_t s, int calls) {
  const void* table = nullptr;
  if (cudaGetExportTable(&table, &rgpu::client::kExportTableId) != cudaSuccess || !table) {
    std::fprintf(stderr, "rgpu-bench: the runtime is not rgpu's (no export table)\n");
    return 1;
  }
  const auto* t = static_cast<const rgpu::client::ExportTable*>(table);
  if (t->size < offsetof(rgpu::client::ExportTable, lastCallTiming) + sizeof t->lastCallTiming) {
    std::fprintf(stderr, "rgpu-bench: this runtime does not time calls\n");
    return 1;
  }
  if (auto on = t->setCallTiming(true); !on) {
    std::fprintf(stderr, "rgpu-bench: %s\n", on.message().c_str());
    return 1;
  }
  struct Stage {
    const char* name;
    const char* what;
    std::vector<double> us;
  };
  // One timeline, stage after stage; the client's write() call is shown on
  // its own: it often returns after the server has read the frame (the write
  // wakes the worker, which may run first on its core).
  std::vector<Stage> stages = {
      {"client encode", "the call's message and frame built", {}},
      {"to the server", "TLS write, loopback, the worker waking, TLS read of the frame", {}},
      {"server dispatch", "the request decoded and its handler found", {}},
      {"backend", "the handler: checks, the backend's answer", {}},
      {"reply", "the reply encoded, written, read by the caller (or the receiver thread)", {}},
      {"client wake-up", "the caller running again (none when it read its reply itself)", {}},
  };
  std::vector<double> total, write_call;
  for (int i = 0; i < calls; ++i) {
    check(cudaStreamQuery(s), "cudaStreamQuery");
    rgpu::client::CallTiming c;
    if (!t->lastCallTiming(&c)) {
      std::fprintf(stderr, "rgpu-bench: the call was not timed\n");
      return 1;
    }
    const uint64_t at[] = {c.entered, c.built, c.server_read, c.server_dispatch, c.server_replied, c.received,
                           c.returned};
    for (size_t k = 0; k < stages.size(); ++k)
      stages[k].us.push_back(static_cast<double>(static_cast<int64_t>(at[k + 1] - at[k])) / 1e3);
    total.push_back(static_cast<double>(c.returned - c.entered) / 1e3);
    write_call.push_back(static_cast<double>(c.written - c.built) / 1e3);
  }
  (void)t->setCallTiming(false);
  const double sum = median(total);
  std::printf("(a) a synchronous call (cudaStreamQuery), stage by stage: median of %d calls (and p99)\n", calls);
  std::printf("%-18s %10s %10s %7s   %s\n", "stage", "median", "p99", "share", "what it holds");
  for (const Stage& st : stages) {
    const double m = median(st.us);
    std::printf("%-18s %7.1f us %7.1f us %6.0f%%   %s\n", st.name, m, percentile(st.us, 0.99), 100.0 * m / sum, st.what);
  }
  std::printf("%-18s %7.1f us %7.1f us %6s   (the medians of the stages need not add up to it)\n", "total", sum,
              percentile(total, 0.99), "100%");
  std::printf("%-18s %7.1f us %7.1f us %7s   the client's write() call alone (it may return after the server\n"
              "%-18s %10s %10s %7s   has read the frame: the write wakes the worker, which can run first)\n",
              "  (client write)", median(write_call), percentile(write_call, 0.99), "", "", "", "", "");
  return 0;
}

// ---- (f) compression --------------------------------------------------------

std::vector<char> makeData(const std::string& kind, uint64_t bytes) {
  std::vector<char> v(bytes, 0);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  if (kind == "random") {
    for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
      uint64_t r = next();
      std::memcpy(v.data() + i, &r, 8);
    }
  } else if (kind == "onehot") {  // one-hot rows of 1024 floats (labels, masks)
    auto* f = reinterpret_cast<float*>(v.data());
    for (uint64_t row = 0; row < bytes / 4096; ++row) f[row * 1024 + next() % 1024] = 1.0f;
  } else {  // "sparse": one float in ten nonzero, at random places, of random value
    auto* f = reinterpret_cast<float*>(v.data());
    for (uint64_t i = 0; i < bytes / 4; ++i) {
      uint64_t r = next();
      if (r % 10 == 0) f[i] = static_cast<float>(r >> 40) / 1048576.0f;
    }
  }
  return v;
}

// A child of --compression: copies of `kind` data each way with the
// compression its environment says; prints "H2D D2H" in GB/s.
int copyChild(const std::string& kind, bool quick, uint64_t mib) {
  const uint64_t bytes = quick ? (4ull << 20) : (mib << 20);
  const int copies = quick ? 1 : 3;
  std::vector<char> host = makeData(kind, bytes), back(bytes);
  void* dev = nullptr;
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  // Warm-up both ways: a session's first large payload goes as it is and
  // times the link (common/frame_io.h: worthCompressing).
  check(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice), "warm-up copy");
  check(cudaMemcpy(back.data(), dev, bytes, cudaMemcpyDeviceToHost), "warm-up copy");
  // (A copy into a stream whose last reply the server still holds goes
  // through a staging buffer: the session's first one is allocated here.)
  check(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice), "warm-up copy");
  auto t0 = Clock::now();
  for (int i = 0; i < copies; ++i) check(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice), "H2D");
  auto t1 = Clock::now();
  for (int i = 0; i < copies; ++i) check(cudaMemcpy(back.data(), dev, bytes, cudaMemcpyDeviceToHost), "D2H");
  auto t2 = Clock::now();
  if (std::memcmp(host.data(), back.data(), bytes) != 0) {
    std::fprintf(stderr, "rgpu-bench: data came back wrong\n");
    return 1;
  }
  cudaFree(dev);
  std::printf("%.4f %.4f\n", bytes * copies / seconds(t0, t1) / 1e9, bytes * copies / seconds(t1, t2) / 1e9);
  return 0;
}

int compressionBench(bool quick) {
  const int rounds = quick ? 1 : 6;
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const char* modes[] = {"off", "auto"};
  const char* kinds[] = {"onehot", "sparse", "random"};
  const char* kind_names[] = {"one-hot rows", "90% zeros", "random"};
  rgpu::bench::BenchServer servers[2];
  for (int m = 0; m < 2; ++m)
    servers[m] = rgpu::bench::launchServer(std::string("rgpu-bench-lz4-") + modes[m], "",
                                           std::string("compression = \"") + modes[m] + "\"\n");
  std::vector<double> up[3][2], down[3][2];  // [kind][mode]
  int rc = 0;
  for (int r = 0; r < rounds && rc == 0; ++r)
    for (int k = 0; k < 3 && rc == 0; ++k)
      for (int i = 0; i < 2 && rc == 0; ++i) {
        const int m = (r + i) % 2;  // off first in even rounds, auto first in odd ones
        std::string cmd = "RGPU_CONFIG=" + servers[m].dir + "/client.toml RGPU_COMPRESSION=" + modes[m] + " " + self +
                          " --copy-child " + kinds[k] + (quick ? " --quick" : "");
        FILE* f = popen(cmd.c_str(), "r");
        double a = 0, b = 0;
        if (!f || std::fscanf(f, "%lf %lf", &a, &b) != 2) rc = 1;
        if (f && pclose(f) != 0) rc = 1;
        up[k][m].push_back(a);
        down[k][m].push_back(b);
      }
  for (auto& s : servers) rgpu::bench::stopServer(s);
  if (rc != 0) {
    std::fprintf(stderr, "rgpu-bench: a copy child failed\n");
    return 1;
  }
  std::printf("rgpu-bench: lz4 compression, loopback, TLS 1.3, sim backend, %u cores, %d interleaved rounds%s\n",
              std::thread::hardware_concurrency(), rounds, quick ? " (--quick: smoke test, figures meaningless)" : "");
  std::printf("%-34s %12s %12s %8s   %s\n", "(f) cudaMemcpy 64 MiB", "auto", "off", "ratio", "target");
  for (int k = 0; k < 3; ++k)
    for (int d = 0; d < 2; ++d) {
      auto& v = d == 0 ? up[k] : down[k];
      const double a = median(v[1]), o = median(v[0]);
      std::string what = std::string(d == 0 ? "H2D, " : "D2H, ") + kind_names[k];
      std::printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f   %s\n", what.c_str(), a, o, a / o,
                  k == 2 ? ">= 1.00" : ">= 3.00 where lz4 outruns the link, else >= 1.00");
    }
  return 0;
}

// ---- (g) striped bulk ---------------------------------------------------------

// 256 MiB copies each way (random bytes: nothing to compress) by a child
// process per setting of `stripes` (client.toml; "0,1,3": each in turn),
// against one raw TLS stream of the same size in the same round, interleaved.
int stripesBench(bool quick, const std::string& counts) {
  const int rounds = quick ? 1 : 5;
  const uint64_t mib = quick ? 4 : 256;
  std::vector<std::string> settings;
  for (size_t at = 0; at <= counts.size();) {
    size_t comma = counts.find(',', at);
    settings.push_back(counts.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  rgpu::bench::BenchServer server = rgpu::bench::launchServer("rgpu-bench-stripes");
  // One raw TLS stream, and as many as the host has cores side by side (each
  // a peer process of its own): what this host's cores can move at all.
  const unsigned cores = std::max(2u, std::thread::hardware_concurrency());
  std::vector<Raw> raws;
  for (unsigned i = 0; i < cores; ++i) raws.push_back(startRaw(server.dir));
  Raw& raw = raws[0];
  std::vector<char> buf(mib << 20, 7);
  std::vector<std::vector<double>> up(settings.size()), down(settings.size());
  std::vector<double> raw_up, raw_down, par_up, par_down;
  int rc = 0;
  for (int r = 0; r < rounds && rc == 0; ++r) {
    raw.command('s', buf.size(), 0);
    auto t0 = Clock::now();
    (void)raw.conn->write(buf.data(), buf.size());
    char ack;
    (void)raw.conn->readExact(&ack, 1);
    raw_up.push_back(buf.size() / seconds(t0, Clock::now()) / 1e9);
    raw.command('r', buf.size(), 0);
    t0 = Clock::now();
    (void)raw.conn->readExact(buf.data(), buf.size());
    raw_down.push_back(buf.size() / seconds(t0, Clock::now()) / 1e9);
    for (int d = 0; d < 2; ++d) {
      const uint64_t share = buf.size() / raws.size();
      t0 = Clock::now();
      std::vector<std::thread> ts;
      for (size_t i = 0; i < raws.size(); ++i)
        ts.emplace_back([&, i] {
          char* at = buf.data() + i * share;
          raws[i].command(d == 0 ? 's' : 'r', share, 0);
          if (d == 0) {
            (void)raws[i].conn->write(at, share);
            char a;
            (void)raws[i].conn->readExact(&a, 1);
          } else {
            (void)raws[i].conn->readExact(at, share);
          }
        });
      for (auto& t : ts) t.join();
      (d == 0 ? par_up : par_down).push_back(share * raws.size() / seconds(t0, Clock::now()) / 1e9);
    }
    for (size_t i = 0; i < settings.size() && rc == 0; ++i) {
      const size_t k = (i + static_cast<size_t>(r)) % settings.size();  // a different one first each round
      std::string cmd = "RGPU_CONFIG=" + server.dir + "/client.toml RGPU_STRIPES=" + settings[k] + " " + self +
                        " --copy-child random --copy-mib " + std::to_string(mib) + (quick ? " --quick" : "");
      FILE* f = popen(cmd.c_str(), "r");
      double a = 0, b = 0;
      if (!f || std::fscanf(f, "%lf %lf", &a, &b) != 2) rc = 1;
      if (f && pclose(f) != 0) rc = 1;
      up[k].push_back(a);
      down[k].push_back(b);
    }
  }
  for (Raw& x : raws) {
    x.conn.reset();
    waitpid(x.pid, nullptr, 0);
  }
  rgpu::bench::stopServer(server);
  if (rc != 0) {
    std::fprintf(stderr, "rgpu-bench: a copy child failed\n");
    return 1;
  }
  const double ru = median(raw_up), rd = median(raw_down);
  std::printf("rgpu-bench: striped bulk, loopback, TLS 1.3, sim backend, %u cores, %d interleaved rounds%s\n",
              std::thread::hardware_concurrency(), rounds, quick ? " (--quick: smoke test, figures meaningless)" : "");
  std::printf("%-34s %12s %12s %8s   %s\n", "(g) cudaMemcpy, random bytes", "rgpu", "raw TLS", "ratio", "target");
  std::printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f   (this host's ceiling: %u raw streams at once)\n",
              ("raw TLS, " + std::to_string(raws.size()) + " streams, up").c_str(), median(par_up), ru,
              median(par_up) / ru, static_cast<unsigned>(raws.size()));
  std::printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f\n", ("raw TLS, " + std::to_string(raws.size()) + " streams, down").c_str(),
              median(par_down), rd, median(par_down) / rd);
  for (size_t k = 0; k < settings.size(); ++k)
    for (int d = 0; d < 2; ++d) {
      const double v = median(d == 0 ? up[k] : down[k]), base = d == 0 ? ru : rd;
      std::string what = std::string(d == 0 ? "H2D " : "D2H ") + std::to_string(mib) + " MiB, stripes = " + settings[k];
      std::printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f   >= 1.60 (striped)\n", what.c_str(), v, base, v / base);
    }
  return 0;
}

int main(int argc, char** argv) {
  bool quick = false, load = false, split = false, compression = false;  // --quick: smoke test, tiny counts
  std::string only, child, stripe_counts;
  uint64_t copy_mib = 64;
  int async_per_round = 200000;  // (b) calls per round
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") quick = true;
    if (std::string(argv[i]) == "--load") load = true;
    if (std::string(argv[i]) == "--breakdown") split = true;
    if (std::string(argv[i]) == "--only" && i + 1 < argc) only = argv[++i];
    if (std::string(argv[i]) == "--compression") compression = true;
    if (std::string(argv[i]) == "--copy-child" && i + 1 < argc) child = argv[++i];
    if (std::string(argv[i]) == "--copy-mib" && i + 1 < argc) copy_mib = std::strtoull(argv[++i], nullptr, 10);
    if (std::string(argv[i]) == "--stripes" && i + 1 < argc) stripe_counts = argv[++i];
    if (std::string(argv[i]) == "--async-calls" && i + 1 < argc) async_per_round = std::atoi(argv[++i]);
  }
  if (!child.empty()) return copyChild(child, quick, copy_mib);
  if (compression) return compressionBench(quick);
  if (!stripe_counts.empty()) return stripesBench(quick, stripe_counts);
  auto want = [&](const char* m) { return only.empty() || only == m; };
  const int rounds = quick ? 1 : 7;
  const int pings = quick ? 50 : 2000;
  const int async_calls = quick ? 1000 : async_per_round;
  const uint64_t bulk = quick ? (1 << 20) : (64ull << 20);
  const int copies = quick ? 1 : 4;

  const std::string& dir = rgpu::bench::startBenchServer("rgpu-bench").dir;
  Raw raw = startRaw(dir);

  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  cudaEvent_t never;
  check(cudaEventCreate(&never), "cudaEventCreate");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  // A cudaStreamQuery frame is 32 header + 40 message bytes; its reply 32 + 24.
  const uint64_t ping_bytes = 64;

  std::vector<double> rt_rgpu, rt_raw, async_rate, async_drain, h2d, d2h, raw_up, raw_down;
  std::vector<char> host(bulk, 1), back(bulk);
  void* dev = nullptr;
  check(cudaMalloc(&dev, bulk), "cudaMalloc");
  check(cudaMemcpy(dev, host.data(), bulk, cudaMemcpyHostToDevice), "warm-up copy");
  check(cudaMemcpy(back.data(), dev, bulk, cudaMemcpyDeviceToHost), "warm-up copy");
  std::vector<char> pbuf(ping_bytes);
  char* pinned = nullptr;
  check(cudaMallocHost(reinterpret_cast<void**>(&pinned), bulk), "cudaMallocHost");
  std::memcpy(pinned, host.data(), bulk);
  const uint64_t pieces[2] = {256 << 10, 4 << 20};
  std::vector<double> async_up[2][2];  // [piece size][pageable, pinned]
  const std::vector<pid_t> hogs = load ? startHogs() : std::vector<pid_t>{};

#ifdef RGPU_BENCH_GRAPHS
  // (d): the same 20 kernels captured once into a graph.
  constexpr int kGraphKernels = 20;
  const int graph_iters = quick ? 5 : 500;
  int* counter = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(int)), "cudaMalloc");
  check(cudaMemset(counter, 0, sizeof(int)), "cudaMemset");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  for (int k = 0; k < kGraphKernels; ++k) check(rgpuBenchStep(counter, s), "captured launch");
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  std::vector<double> one_by_one, graphed, graph_launches;
#endif

  // (a) queries an idle stream: nothing of the set-up (the legacy stream's
  // memset, which a blocking stream waits for) may still be queued.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (split) {
    const int rc = breakdown(s, quick ? 50 : 5000);
    for (pid_t h : hogs) kill(h, SIGKILL);
    for (pid_t h : hogs) waitpid(h, nullptr, 0);
    cudaFree(dev);
    raw.conn.reset();
    waitpid(raw.pid, nullptr, 0);
    return rc;
  }
  for (int round = 0; round < rounds; ++round) {
    // (a) round trips, raw then rgpu.
    raw.command('p', ping_bytes, want("a") ? pings : 0);
    for (int i = 0; i < (want("a") ? pings : 0); ++i) {
      auto t = Clock::now();
      (void)raw.conn->write(pbuf.data(), ping_bytes);
      (void)raw.conn->readExact(pbuf.data(), ping_bytes);
      rt_raw.push_back(seconds(t, Clock::now()) * 1e6);
    }
    for (int i = 0; i < (want("a") ? pings : 0); ++i) {
      auto t = Clock::now();
      check(cudaStreamQuery(s), "cudaStreamQuery");
      rt_rgpu.push_back(seconds(t, Clock::now()) * 1e6);
    }
    auto t0 = Clock::now(), t1 = t0;

    // (b) asynchronous calls, drained by one synchronising call.
    t0 = Clock::now();
    for (int i = 0; i < (want("b") ? async_calls : 0); ++i) check(cudaStreamWaitEvent(s, never, 0), "cudaStreamWaitEvent");
    const auto issued = Clock::now();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    t1 = Clock::now();
    async_rate.push_back((want("b") ? async_calls : 0) / seconds(t0, t1));
    async_drain.push_back(seconds(issued, t1) / seconds(t0, t1));

    // (c) bulk, each direction: raw then rgpu.
    const int copies_now = want("c") ? copies : 0;
    raw.command('s', bulk * copies_now, 0);
    t0 = Clock::now();
    for (int i = 0; i < copies_now; ++i) (void)raw.conn->write(host.data(), bulk);
    char ack;
    (void)raw.conn->readExact(&ack, 1);
    t1 = Clock::now();
    raw_up.push_back(bulk * copies_now / seconds(t0, t1) / 1e9);
    t0 = Clock::now();
    for (int i = 0; i < copies_now; ++i) check(cudaMemcpy(dev, host.data(), bulk, cudaMemcpyHostToDevice), "H2D");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    t1 = Clock::now();
    h2d.push_back(bulk * copies_now / seconds(t0, t1) / 1e9);

    raw.command('r', bulk * copies_now, 0);
    t0 = Clock::now();
    for (int i = 0; i < copies_now; ++i) (void)raw.conn->readExact(back.data(), bulk);
    t1 = Clock::now();
    raw_down.push_back(bulk * copies_now / seconds(t0, t1) / 1e9);
    t0 = Clock::now();
    for (int i = 0; i < copies_now; ++i) check(cudaMemcpy(back.data(), dev, bulk, cudaMemcpyDeviceToHost), "D2H");
    t1 = Clock::now();
    d2h.push_back(bulk * copies_now / seconds(t0, t1) / 1e9);

    // (e) asynchronous copies in pieces, from pageable then pinned memory.
    for (int p = 0; p < 2; ++p)
      for (int from = 0; from < 2; ++from) {
        const char* src = from ? pinned : host.data();
        const uint64_t piece = std::min(pieces[p], bulk);
        t0 = Clock::now();
        for (int i = 0; i < (want("e") ? copies : 0); ++i)
          for (uint64_t off = 0; off < bulk; off += piece)
            check(cudaMemcpyAsync(static_cast<char*>(dev) + off, src + off, std::min(piece, bulk - off),
                                  cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync");
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        t1 = Clock::now();
        async_up[p][from].push_back(bulk * (want("e") ? copies : 0) / seconds(t0, t1) / 1e9);
      }

#ifdef RGPU_BENCH_GRAPHS
    // (d) 20 launches one by one, then the graph of them, each run to completion.
    t0 = Clock::now();
    const int graph_iters_now = want("d") ? graph_iters : 0;
    for (int i = 0; i < graph_iters_now; ++i)
      for (int k = 0; k < kGraphKernels; ++k) check(rgpuBenchStep(counter, s), "launch");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    t1 = Clock::now();
    one_by_one.push_back(graph_iters_now * kGraphKernels / seconds(t0, t1));
    t0 = Clock::now();
    for (int i = 0; i < graph_iters_now; ++i) check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    t1 = Clock::now();
    graphed.push_back(graph_iters_now * kGraphKernels / seconds(t0, t1));
    graph_launches.push_back(graph_iters_now / seconds(t0, t1));
#endif
  }
  if (want("e")) check(cudaMemcpy(back.data(), dev, bulk, cudaMemcpyDeviceToHost), "D2H");
  if ((want("c") || want("e")) && std::memcmp(host.data(), back.data(), bulk) != 0) {
    std::fprintf(stderr, "rgpu-bench: data came back wrong\n");
    return 1;
  }

  for (pid_t h : hogs) kill(h, SIGKILL);
  for (pid_t h : hogs) waitpid(h, nullptr, 0);
  double a_rgpu = median(rt_rgpu), a_raw = median(rt_raw), b = median(async_rate);
  double p_rgpu = percentile(rt_rgpu, 0.99), p_raw = percentile(rt_raw, 0.99);
  double up = median(h2d), up_raw = median(raw_up), down = median(d2h), down_raw = median(raw_down);
  std::printf("rgpu-bench: loopback, TLS 1.3, sim backend, %u cores, %d interleaved rounds%s%s\n",
              std::thread::hardware_concurrency(), rounds, load ? ", a CPU hog on every core (--load)" : "",
              quick ? " (--quick: smoke test, figures meaningless)" : "");
  std::printf("%-34s %12s %12s %8s   %s\n", "measure", "rgpu", "raw TLS", "ratio", "target");
  // --only prints the rows it measured.
  if (want("a")) {
    std::printf("%-34s %9.1f us %9.1f us %8.2f   <= 1.10\n", "(a) sync call round trip, median", a_rgpu, a_raw,
                a_rgpu / a_raw);
    std::printf("%-34s %9.1f us %9.1f us %8.2f   <= 1.10\n", "(a) sync call round trip, p99", p_rgpu, p_raw,
                p_rgpu / p_raw);
  }
  if (want("b")) {
    // The share of the time the final synchronising call waited: near 0 the
    // program's thread bounds the rate, near 1 the server does.
    std::printf("%-34s %10.0f/s %12s %8s   >= 1500000/s (%.0f%% of the time draining)\n",
                "(b) async calls (no-op on server)", b, "-", "-", 100 * median(async_drain));
  }
  if (want("c")) {
    std::printf("%-34s %8.2f GB/s %7.2f GB/s %8.2f   >= 1.60\n", "(c) H2D cudaMemcpy 64 MiB", up, up_raw, up / up_raw);
    std::printf("%-34s %8.2f GB/s %7.2f GB/s %8.2f   >= 1.60\n", "(c) D2H cudaMemcpy 64 MiB", down, down_raw,
                down / down_raw);
  }
  if (want("e")) std::printf("%-34s %12s %12s %8s\n", "", "pinned", "pageable", "ratio");
  for (int p = 0; p < (want("e") ? 2 : 0); ++p) {
    const double pin = median(async_up[p][1]), page = median(async_up[p][0]);
    std::string what = "(e) H2D async, " + std::to_string(pieces[p] >> 10) + " KiB pieces";
    std::printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f   (64 MiB; pinned: no copy kept)\n", what.c_str(), pin, page,
                pin / page);
  }

#ifdef RGPU_BENCH_GRAPHS
  int ran = 0;
  check(cudaMemcpy(&ran, counter, sizeof ran, cudaMemcpyDeviceToHost), "counter");
  if (want("d") && ran != 2 * rounds * graph_iters * kGraphKernels) {
    std::fprintf(stderr, "rgpu-bench: %d kernels ran, %d launched\n", ran, 2 * rounds * graph_iters * kGraphKernels);
    return 1;
  }
  double solo = median(one_by_one), viag = median(graphed);
  if (want("d")) {
    std::printf("%-34s %12s %12s %8s\n", "", "graph", "one by one", "ratio");
    std::printf("%-34s %10.0f/s %10.0f/s %8.2f   (kernels/s; %.0f graph launches/s)\n",
                "(d) 20-kernel graph vs 20 launches", viag, solo, viag / solo, median(graph_launches));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(counter);
#endif
  cudaFree(dev);
  cudaFreeHost(pinned);
  raw.conn.reset();
  int st;
  waitpid(raw.pid, &st, 0);
  return 0;
}
