// Throwaway certificates for development, tests and `rgpu-run --local`:
// a CA, a server certificate (CN and SAN localhost, 127.0.0.1, ::1) and client
// certificates signed by it. EC P-256 keys. Never for production use.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::common {

struct DevPkiOptions {
  std::string dir;                                // files are written here
  std::vector<std::string> clients = {"dev"};     // client certificate CNs
  int valid_days = 30;
  // Validity window offsets, for tests of expired / not-yet-valid certificates.
  long not_before_offset_s = -60;
  // Also etcd.pem/etcd.key: an etcd member's certificate on loopback (tests).
  bool etcd = false;
};

// Writes ca.pem, ca.key, server.pem, server.key and <cn>.pem/<cn>.key for each
// client (and etcd.pem/etcd.key when asked). Keys are written 0600.
Status makeDevPki(const DevPkiOptions& opts);

}  // namespace rgpu::common
