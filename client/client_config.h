// client.toml: where the server is and how to authenticate.
// Lookup order: $RGPU_CONFIG, ~/.config/rgpu/client.toml, /etc/rgpu/client.toml.
// Environment overrides: RGPU_SERVER (host:port), RGPU_TOKEN, RGPU_CA, RGPU_CERT,
// RGPU_KEY, RGPU_SERVER_NAME, RGPU_CONNECT_TIMEOUT_MS, RGPU_COMPRESSION.
#pragma once

#include <string>

#include "common/status.h"

namespace rgpu::client {

struct ClientConfig {
  std::string source;  // the file read, or "" when none was found
  std::string server;  // host:port
  std::string server_name;  // name to verify in the server certificate (default: host)
  std::string ca, cert, key, token;
  std::string compression = "off";
  std::string log_level = "warn";
  int connect_timeout_ms = 10000;
  // A connection silent this long while calls wait is declared dead.
  int dead_after_s = 30;
};

Result<ClientConfig> loadClientConfig();
// "config <file>" or "no config file (looked in ...)", for error messages.
std::string describeSource(const ClientConfig& cfg);

}  // namespace rgpu::client
