#include "tests/support/test_env.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "common/dev_pki.h"
#include "server/daemon/backend_factory.h"
#include "server/session/session.h"

namespace rgpu::test {

TempDir::TempDir() {
  char templ[] = "/tmp/rgpu-test-XXXXXX";
  if (!mkdtemp(templ)) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
}
TempDir::~TempDir() { std::filesystem::remove_all(path_); }

int listenLoopback(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0)
    throw std::runtime_error("cannot listen on loopback");
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void makeCerts(const std::string& dir) {
  common::DevPkiOptions o;
  o.dir = dir;
  o.clients = {"alice", "bob"};
  o.etcd = true;
  if (auto s = common::makeDevPki(o); !s) throw std::runtime_error(s.message());
}

std::string serverToml(const std::string& dir, const std::string& extra, const std::string& sim_keys) {
  return "listen = \"127.0.0.1:0\"\nlog_level = \"info\"\nbackend = \"sim\"\n"
         "[tls]\ncert = \"" + dir + "/server.pem\"\nkey = \"" + dir + "/server.key\"\nca = \"" + dir + "/ca.pem\"\n"
         "handshake_timeout_ms = 2000\n"
         "[[users]]\nname = \"alice\"\ncert_cn = \"alice\"\n"
         "[[users]]\nname = \"bob\"\ntoken = \"bob-token\"\n"
         "[sim]\n" + sim_keys + "\n"
         "[[sim.devices]]\nname = \"rgpu test device\"\nmemory = \"1GiB\"\ncompute_capability = \"9.0\"\nsm_count = 8\n" +
         extra;
}

std::string fakeCudaToml() {
  return std::string("[cuda]\ndriver_library = \"") + RGPU_FAKE_CUDA_LIB + "\"\ncublas_library = \"" +
         RGPU_FAKE_CUBLAS_LIB + "\"\ncublaslt_library = \"" + RGPU_FAKE_CUBLAS_LIB + "\"\ncufft_library = \"" +
         RGPU_FAKE_CUFFT_LIB + "\"\ncusolver_library = \"" + RGPU_FAKE_CUSOLVER_LIB + "\"\ncusparse_library = \"" +
         RGPU_FAKE_CUSPARSE_LIB + "\"\ncudnn_library = \"" + RGPU_FAKE_CUDNN_LIB + "\"\n";
}

std::string cudaServerToml(const std::string& dir, const std::string& backend, const std::string& driver) {
  std::string t = fakeCudaToml();
  t.replace(t.find(RGPU_FAKE_CUDA_LIB), std::strlen(RGPU_FAKE_CUDA_LIB), driver);
  t = serverToml(dir, t);
  t.replace(t.find("backend = \"sim\""), std::strlen("backend = \"sim\""), "backend = \"" + backend + "\"");
  return t;
}

OwnServer::OwnServer(bool fake_cuda) {
  makeCerts(dir.path());
  if (fake_cuda) ::setenv("RGPU_FAKE_CUDA_LOG", dir.file("driver.log").c_str(), 1);
  server = std::make_unique<ServerProcess>(dir.path(), fake_cuda ? cudaServerToml(dir.path(), "cuda", RGPU_FAKE_CUDA_LIB)
                                                                 : serverToml(dir.path()));
  if (fake_cuda) ::unsetenv("RGPU_FAKE_CUDA_LOG");
  writeFile(dir.file("client.toml"), clientToml(dir.path(), server->port()));
}

std::string OwnServer::env() const {
  return "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR;
}

std::string OwnServer::driverLog() const { return readFile(dir.file("driver.log")); }

std::string clientToml(const std::string& dir, uint16_t port, const std::string& cert) {
  std::string s = "server = \"127.0.0.1:" + std::to_string(port) + "\"\nconnect_timeout_ms = 5000\n[tls]\nca = \"" + dir + "/ca.pem\"\n";
  if (!cert.empty()) s += "cert = \"" + dir + "/" + cert + ".pem\"\nkey = \"" + dir + "/" + cert + ".key\"\n";
  return s;
}

ServerProcess::ServerProcess(const std::string& dir, const std::string& toml) : dir_(dir) {
  writeFile(dir + "/server.toml", toml);
  std::string port_file = dir + "/port";
  std::remove(port_file.c_str());
  pid_ = fork();
  if (pid_ == 0) {
    std::string log = dir + "/server.log";
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    execl(RGPU_SERVER_BIN, "rgpu-server", "--config", (dir + "/server.toml").c_str(), "--port-file", port_file.c_str(),
          (char*)nullptr);
    _exit(127);
  }
  bool exited = false;
  port_ = waitForPortFile(port_file, pid_, &exited);
  if (port_) return;
  if (exited) {
    pid_ = -1;
    throw std::runtime_error("rgpu-server exited at start: " + log());
  }
  throw std::runtime_error("rgpu-server did not start: " + log());
}

uint16_t waitForPortFile(const std::string& port_file, pid_t pid, bool* exited) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    int p = 0;
    if (in >> p && p > 0 && p < 65536) return static_cast<uint16_t>(p);
    int st;
    if (pid > 0 && waitpid(pid, &st, WNOHANG) == pid) {
      if (exited) *exited = true;
      return 0;
    }
    // Polling a file the server writes once; there is no event to wait on.
    usleep(5000);
  }
  return 0;
}

int ServerProcess::stop() {
  if (pid_ <= 0) return 0;
  kill(pid_, SIGTERM);
  int st = 0;
  waitpid(pid_, &st, 0);
  pid_ = -1;
  return st;
}

int ServerProcess::wait() {
  if (pid_ <= 0) return 0;
  int st = 0;
  waitpid(pid_, &st, 0);
  pid_ = -1;
  return st;
}

ServerProcess::~ServerProcess() {
  stop();
  // Every worker of every test runs under the system call allow list: a
  // call it lacks would show here (sandbox.h restrictWorkerSyscalls).
  std::string text = log();
  EXPECT_EQ(text.find("the sandbox refused system call"), std::string::npos) << text;
}

std::string ServerProcess::log() const { return readFile(dir_ + "/server.log"); }

RunResult run(const std::string& command, const std::string& env) {
  RunResult r;
  std::string cmd = env + " " + command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

TlsPair makeTlsPair(const std::string& dir, const std::string& client_cert, std::string client_ca,
                    bool require_client_cert) {
  if (client_ca.empty()) client_ca = dir + "/ca.pem";
  uint16_t port = 0;
  int lfd = listenLoopback(&port);
  TlsPair pair;
  std::thread srv([&] {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    auto ctx = common::TlsContext::makeServer(common::TlsOptions::files(dir + "/ca.pem", dir + "/server.pem", dir + "/server.key", require_client_cert));
    if (!ctx) {
      pair.server = ctx.status();
      ::close(fd);
      return;
    }
    pair.server = common::TlsConnection::accept(**ctx, fd, std::chrono::milliseconds(3000));
  });
  common::TlsOptions o;
  o.ca_file = client_ca;
  if (!client_cert.empty()) {
    o.cert_file = dir + "/" + client_cert + ".pem";
    o.key_file = dir + "/" + client_cert + ".key";
  }
  auto ctx = common::TlsContext::makeClient(o);
  if (ctx) pair.client = common::TlsConnection::connect(**ctx, "127.0.0.1", port, "", std::chrono::milliseconds(3000));
  else pair.client = ctx.status();
  if (!pair.client) {
    // Unblock the server side if the client never completed.
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    int dummy = ::socket(AF_INET, SOCK_STREAM, 0);
    ::connect(dummy, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::close(dummy);
  }
  srv.join();
  ::close(lfd);
  return pair;
}

InProcessServer::InProcessServer(const std::string& dir, const std::string& extra_toml, bool fake_cuda) : dir_(dir) {
  writeFile(dir + "/inproc.toml",
            fake_cuda ? cudaServerToml(dir, "cuda", RGPU_FAKE_CUDA_LIB) + extra_toml : serverToml(dir, extra_toml));
  auto c = server::loadServerConfig(dir + "/inproc.toml");
  if (!c) throw std::runtime_error(c.status().message());
  cfg_ = *c;
  pool_ = std::make_shared<server::PoolManager>(server::simInventory(cfg_), cfg_.users, cfg_.pool);
  listen_fd_ = listenLoopback(&port_);
  thread_ = std::thread([this] { acceptLoop(); });
}

void InProcessServer::acceptLoop() {
  static std::atomic<uint64_t> next_id{1000};
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    sessions_.emplace_back([this, fd] {
      auto ctx = common::TlsContext::makeServer(common::TlsOptions::files(cfg_.tls_ca, cfg_.tls_cert, cfg_.tls_key, false));
      if (!ctx) {
        ::close(fd);
        return;
      }
      auto conn = common::TlsConnection::accept(**ctx, fd, std::chrono::milliseconds(2000));
      if (!conn) return;
      uint64_t id = next_id++;
      server::LocalPool pool(pool_, pool_mu_, id);
      server::Session session(
          std::move(*conn), cfg_, [this](const server::Placement& p) { return server::makeBackend(cfg_, p.devices); },
          pool, id);
      (void)session.run();
    });
  }
}

InProcessServer::~InProcessServer() {
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  thread_.join();
  for (auto& t : sessions_) t.join();
}

std::unique_ptr<common::TlsConnection> InProcessServer::connect(const std::string& cert) {
  common::TlsOptions o;
  o.ca_file = dir_ + "/ca.pem";
  if (!cert.empty()) {
    o.cert_file = dir_ + "/" + cert + ".pem";
    o.key_file = dir_ + "/" + cert + ".key";
  }
  auto ctx = common::TlsContext::makeClient(o);
  if (!ctx) throw std::runtime_error(ctx.status().message());
  auto c = common::TlsConnection::connect(**ctx, "127.0.0.1", port_, "", std::chrono::milliseconds(5000));
  if (!c) throw std::runtime_error(c.status().message());
  return std::move(*c);
}

uint16_t metricsPort(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("Prometheus metrics on http://127.0.0.1:(\\d+)/metrics"))) return 0;
  return static_cast<uint16_t>(std::stoi(m[1].str()));
}

std::string httpGet(uint16_t port, const std::string& path, const std::string& headers) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" + headers + "\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace rgpu::test
