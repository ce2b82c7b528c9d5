// A private etcd (Debian's etcd-server) for tests: one member on loopback
// ports the test picks, its data in a directory of the test's. It can be
// stopped, killed and started again on the same ports (with its data, or
// without: an etcd that lost its state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

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

}  // namespace rgpu::test
