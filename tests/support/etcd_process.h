// A private etcd (Debian's etcd-server) for tests: one member on loopback
// ports the test picks, its data in a directory of the test's. It can be
// stopped, killed and started again on the same ports (with its data, or
// without: an etcd that lost its state).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/cluster/etcd_client.h"

namespace rgpu::test {

class EtcdProcess {
 public:
  // Starts etcd with its data in `dir`/etcd-data; throws when it does not come up.
  // `tls_dir` (makeCerts'): https with the dev server certificate, and client
  // certificates of the dev CA required.
  explicit EtcdProcess(const std::string& dir, const std::string& tls_dir = "");
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "http://127.0.0.1:<port>" (https with TLS)
  std::string endpoint() const;
  uint16_t port() const { return client_port_; }
  void kill();  // SIGKILL, as a crash
  void stop();  // SIGTERM
  // Starts again on the same ports; `wipe`: with an empty data directory.
  void start(bool wipe = false);

 private:
  std::string dir_, tls_dir_;
  uint16_t client_port_ = 0, peer_port_ = 0;
  pid_t pid_ = -1;
};

// rgpu's etcd client for `endpoints` (plaintext); throws when it cannot be made.
std::unique_ptr<server::cluster::EtcdClient> etcdClient(std::vector<std::string> endpoints,
                                                        std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

// Polls `cond` every 50 ms until it holds or `limit` passes; how long it took.
std::optional<std::chrono::steady_clock::duration> waitFor(const std::function<bool()>& cond,
                                                           std::chrono::steady_clock::duration limit);

// Starts `program args...` (a path under the test programs) in the background
// with client.toml `config` and rgpu's runtime; its output goes to `out`
// ("" : nowhere). The pid, to kill or wait for.
pid_t spawnClient(const std::string& config, const std::string& out, const std::string& program,
                  const std::vector<std::string>& args);

}  // namespace rgpu::test
