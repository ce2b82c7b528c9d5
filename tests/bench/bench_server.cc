#include "tests/bench/bench_server.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/dev_pki.h"

namespace fs = std::filesystem;

namespace rgpu::bench {
namespace {

BenchServer* g_server = nullptr;  // the process's one server, stopped at exit

[[noreturn]] void fail(const std::string& tag, const char* what) {
  std::fprintf(stderr, "%s: %s\n", tag.c_str(), what);
  std::exit(1);
}

}  // namespace

BenchServer launchServer(const std::string& tag, const std::string& extra, const std::string& top) {
  BenchServer s;
  std::string templ = "/tmp/" + tag + "-XXXXXX";
  if (!mkdtemp(templ.data())) fail(tag, "cannot make a temporary directory");
  s.dir = templ;
  common::DevPkiOptions pki;
  pki.dir = s.dir;
  pki.clients = {"bench"};
  if (!common::makeDevPki(pki)) fail(tag, "cannot make certificates");
  std::ofstream(s.dir + "/server.toml") << "listen = \"127.0.0.1:0\"\nlog_level = \"warn\"\nbackend = \"sim\"\n" << top
                                        << "[tls]\ncert = \"server.pem\"\nkey = \"server.key\"\nca = \"ca.pem\"\n"
                                        << "[[users]]\nname = \"bench\"\ncert_cn = \"bench\"\n"
                                        << "[[sim.devices]]\nname = \"bench device\"\nmemory = \"4GiB\"\n"
                                        << extra;
  // Installed: rgpu-server is beside us. In the build tree: where CMake put it.
  fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  std::string server = fs::exists(self / "rgpu-server") ? (self / "rgpu-server").string() : RGPU_SERVER_BIN;
  s.pid = fork();
  if (s.pid == 0) {
    execl(server.c_str(), "rgpu-server", "--config", (s.dir + "/server.toml").c_str(), "--port-file",
          (s.dir + "/port").c_str(), (char*)nullptr);
    _exit(127);
  }
  for (int i = 0; i < 2000 && !s.port; ++i) {
    int p = 0;
    std::ifstream(s.dir + "/port") >> p;
    if (p > 0) s.port = static_cast<uint16_t>(p);
    else std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!s.port) fail(tag, "rgpu-server did not start");
  std::ofstream(s.dir + "/client.toml") << "server = \"127.0.0.1:" << s.port
                                        << "\"\n[tls]\nca = \"ca.pem\"\ncert = \"bench.pem\"\nkey = \"bench.key\"\n";
  return s;
}

void stopServer(const BenchServer& s) {
  int st;
  kill(s.pid, SIGTERM);
  waitpid(s.pid, &st, 0);
  fs::remove_all(s.dir);
}

const BenchServer& startBenchServer(const std::string& tag) {
  g_server = new BenchServer(launchServer(tag));  // lives until exit
  setenv("RGPU_CONFIG", (g_server->dir + "/client.toml").c_str(), 1);
  std::atexit([] { stopServer(*g_server); });
  return *g_server;
}

}  // namespace rgpu::bench
