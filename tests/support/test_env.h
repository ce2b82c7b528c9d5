// Test support: temporary directories with development certificates, a real
// rgpu-server process on port 0, an in-process session on loopback, and a
// helper that runs a program and captures its output.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/tls.h"
#include "server/pool/pool_manager.h"
#include "server/config/server_config.h"

namespace rgpu::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A TCP socket listening on 127.0.0.1 at a free port.
int listenLoopback(uint16_t* port);

void writeFile(const std::string& path, const std::string& text);
std::string readFile(const std::string& path);

// Certificates in `dir`: CA, server, and clients "alice" and "bob".
void makeCerts(const std::string& dir);
// server.toml text: TLS from `dir`, users alice (certificate) and bob (token
// "bob-token"), one sim device ([sim] gets `sim_keys`), plus `extra` appended.
std::string serverToml(const std::string& dir, const std::string& extra = "", const std::string& sim_keys = "");
// serverToml with `backend` and the CUDA driver `driver` (tests use the fake
// one), and NVIDIA's cuBLAS replaced by the fake one too.
// A [cuda] table naming the fake driver and the fake math libraries
// (tests/fake_driver): the CUDA backend without a GPU.
std::string fakeCudaToml();
std::string cudaServerToml(const std::string& dir, const std::string& backend, const std::string& driver);
// client.toml text for `port`, authenticating with certificate `cert` (or none).
std::string clientToml(const std::string& dir, uint16_t port, const std::string& cert = "alice");

// A real rgpu-server process, listening on 127.0.0.1:0.
class ServerProcess {
 public:
  ServerProcess(const std::string& dir, const std::string& toml);
  ~ServerProcess();
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const;
  // Stops with SIGTERM; returns the exit status as from waitpid.
  int stop();
  // Waits for the server to exit by itself; the exit status as from waitpid.
  int wait();

 private:
  std::string dir_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

struct RunResult {
  int code = -1;
  std::string output;  // stdout and stderr
};
// Runs `command` through sh with `env` (e.g. "A=1 B=2") in front.
RunResult run(const std::string& command, const std::string& env = "");
// GET `path` from 127.0.0.1:`port` (`headers`: extra lines, each ending in
// CRLF): the whole response, or "" when nothing listens.
std::string httpGet(uint16_t port, const std::string& path, const std::string& headers = "");
// A server of a test's own with development certificates, on the sim or
// (fake_cuda) on the CUDA backend over the fake driver and libraries, whose
// calls that driver logs to `driverLog()`; `env()` runs a program as its client.
struct OwnServer {
  explicit OwnServer(bool fake_cuda);
  std::string env() const;
  std::string driverLog() const;
  TempDir dir;
  std::unique_ptr<ServerProcess> server;
};

// The port of the Prometheus listener a server's `log` announces ("Prometheus
// metrics on http://127.0.0.1:PORT/metrics"); 0 when it announces none.
uint16_t metricsPort(const std::string& log);
// The port a server started with --port-file writes there, waited for up to
// 20 s; 0 when it did not come (or `pid`, when given, exited first: *exited).
uint16_t waitForPortFile(const std::string& port_file, pid_t pid = -1, bool* exited = nullptr);

// A connected TLS pair over loopback: server side uses the dev server
// certificate; the client presents `client_cert` ("" for none) and trusts
// `client_ca` (default: the dev CA). Either side may fail: results say why.
struct TlsPair {
  Result<std::unique_ptr<common::TlsConnection>> server = Status(err::kUnknown, "not run");
  Result<std::unique_ptr<common::TlsConnection>> client = Status(err::kUnknown, "not run");
};
TlsPair makeTlsPair(const std::string& dir, const std::string& client_cert = "alice", std::string client_ca = "",
                    bool require_client_cert = false);

// A Session of the real worker code, served in a thread of this process over
// loopback TLS. For protocol tests that write raw frames.
class InProcessServer {
 public:
  // `fake_cuda`: the CUDA backend on the fake driver instead of the sim.
  explicit InProcessServer(const std::string& dir, const std::string& extra_toml = "", bool fake_cuda = false);
  ~InProcessServer();
  uint16_t port() const { return port_; }
  // Connects a TLS client with certificate `cert` ("" for none).
  std::unique_ptr<common::TlsConnection> connect(const std::string& cert = "alice");
  const server::ServerConfig& config() const { return cfg_; }

 private:
  void acceptLoop();
  std::string dir_;
  server::ServerConfig cfg_;
  // One pool for the in-process sessions, as the daemon has (shared with their LocalPools).
  std::shared_ptr<server::PoolManager> pool_;
  std::shared_ptr<std::mutex> pool_mu_ = std::make_shared<std::mutex>();
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::vector<std::thread> sessions_;
};

}  // namespace rgpu::test
