#include "tests/support/etcd_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/cluster/etcd_client.h"
#include "tests/support/test_env.h"

namespace rgpu::test {

namespace {
// A port nothing listens on now (bound, then released for etcd to take).
uint16_t freePort() {
  uint16_t port = 0;
  int fd = listenLoopback(&port);
  ::close(fd);
  return port;
}

// Answers a read (through rgpu's own etcd client).
bool healthy(const std::string& endpoint, const std::string& tls_dir) {
  server::cluster::EtcdOptions o;
  o.endpoints = {endpoint};
  o.timeout = std::chrono::milliseconds(500);
  if (!tls_dir.empty()) o.ca_file = tls_dir + "/ca.pem", o.cert_file = tls_dir + "/alice.pem", o.key_file = tls_dir + "/alice.key";
  auto c = server::cluster::EtcdClient::create(o);
  return c && (*c)->range("/health-probe");
}
}  // namespace

EtcdProcess::EtcdProcess(const std::string& dir, const std::string& tls_dir)
    : dir_(dir), tls_dir_(tls_dir), client_port_(freePort()), peer_port_(freePort()) {
  start();
}

EtcdProcess::~EtcdProcess() { kill(); }

std::string EtcdProcess::endpoint() const {
  return (tls_dir_.empty() ? "http://127.0.0.1:" : "https://127.0.0.1:") + std::to_string(client_port_);
}

void EtcdProcess::start(bool wipe) {
  const std::string data = dir_ + "/etcd-data";
  if (wipe) std::filesystem::remove_all(data);
  const std::string client = endpoint();
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
  pid_ = fork();
  if (pid_ == 0) {
    std::string log = dir_ + "/etcd.log";
    FILE* f = std::freopen(log.c_str(), "a", stderr);
    (void)f;
    ::dup2(2, 1);
    std::vector<std::string> args = {"etcd", "--name", "test", "--data-dir", data, "--listen-client-urls", client,
                                     "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                     "--initial-advertise-peer-urls", peer, "--initial-cluster", "test=" + peer};
    if (!tls_dir_.empty())
      args.insert(args.end(), {"--cert-file", tls_dir_ + "/etcd.pem", "--key-file", tls_dir_ + "/etcd.key",
                               "--client-cert-auth", "--trusted-ca-file", tls_dir_ + "/ca.pem"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp("etcd", argv.data());
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (healthy(endpoint(), tls_dir_)) return;
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("etcd exited at start (is etcd-server installed? scripts/setup.sh): " +
                               readFile(dir_ + "/etcd.log"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("etcd did not become healthy: " + readFile(dir_ + "/etcd.log"));
}

std::unique_ptr<server::cluster::EtcdClient> etcdClient(std::vector<std::string> endpoints,
                                                        std::chrono::milliseconds timeout) {
  server::cluster::EtcdOptions o;
  o.endpoints = std::move(endpoints);
  o.timeout = timeout;
  auto c = server::cluster::EtcdClient::create(o);
  if (!c) throw std::runtime_error(c.status().message());
  return std::move(*c);
}

std::optional<std::chrono::steady_clock::duration> waitFor(const std::function<bool()>& cond,
                                                           std::chrono::steady_clock::duration limit) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < limit) {
    if (cond()) return std::chrono::steady_clock::now() - start;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

pid_t spawnClient(const std::string& config, const std::string& out, const std::string& program,
                  const std::vector<std::string>& args) {
  const std::string prog = std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + program;
  pid_t pid = fork();
  if (pid == 0) {
    setenv("RGPU_CONFIG", config.c_str(), 1);
    setenv("LD_LIBRARY_PATH", RGPU_CLIENT_LIBDIR, 1);
    int fd = out.empty() ? ::open("/dev/null", O_WRONLY) : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1), ::dup2(fd, 2);
    std::vector<char*> argv = {const_cast<char*>(program.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(prog.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

void EtcdProcess::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void EtcdProcess::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace rgpu::test
