// The configuration a daemon has validated, handed to every worker it starts.
//
// The daemon reads server.toml and the TLS files at start and again on SIGHUP;
// a worker never reads them itself. So a SIGHUP that brings a broken file, a
// key that does not match its certificate, or a change that needs a restart
// (the listener, the backend, its devices) is refused as a whole and new
// sessions keep the last good configuration; a good one applies to every
// session that starts after it. Workers get the snapshot as a sealed memfd
// (it holds the private key: only the daemon's own workers inherit it).
#pragma once

#include <string>

#include "common/status.h"
#include "common/tls.h"
#include "server/config/server_config.h"

namespace rgpu::server {

struct ConfigSnapshot {
  std::string path;     // server.toml ("" when the daemon runs on defaults)
  std::string text;     // its contents
  ServerConfig config;  // parsed from `text`
  common::TlsOptions tls;  // the server's TLS options with the PEM text loaded

  // Reads `path` (or takes `defaults` when empty) and the TLS files, and checks
  // that a TLS context can be made from them.
  static Result<ConfigSnapshot> take(const std::string& path, const ServerConfig& defaults);
  // A sealed memfd holding this snapshot.
  Result<int> toMemfd() const;
  // Reads a snapshot from a memfd (with pread: workers share its offset).
  static Result<ConfigSnapshot> fromFd(int fd);
};

// The server's TLS options for `cfg` (PEM text not loaded).
common::TlsOptions serverTlsOptions(const ServerConfig& cfg);

}  // namespace rgpu::server
