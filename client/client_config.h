// client.toml: where the server is and how to authenticate.
// Lookup order: $RGPU_CONFIG, ~/.config/rgpu/client.toml, /etc/rgpu/client.toml.
// Environment overrides: RGPU_SERVER (host:port), RGPU_TOKEN, RGPU_CA, RGPU_CERT,
// RGPU_KEY, RGPU_SERVER_NAME, RGPU_CONNECT_TIMEOUT_MS, RGPU_COMPRESSION, RGPU_STRIPES,
// RGPU_DEVICES (request_devices), RGPU_WAIT_MS (request_wait_ms), RGPU_RESUME
// (0/1), RGPU_INSECURE_PLAINTEXT (0/1).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::client {

struct ClientConfig {
  std::string source;  // the file read, or "" when none was found
  // Keys of that file the client does not read ("tls.resume"): the program
  // warns of each once it has its log (a misplaced key is otherwise ignored).
  std::vector<std::string> unknown_keys;
  std::string server;  // host:port
  std::string server_name;  // name to verify in the server certificate (default: host)
  std::string ca, cert, key, token;
  std::string compression = "off";
  std::string log_level = "warn";
  int connect_timeout_ms = 10000;
  // A connection silent this long while calls wait is declared dead.
  int dead_after_s = 30;
  // Session resume: after a dropped connection, reconnect and carry on (if the
  // server allows it) instead of failing every later call.
  bool resume = true;
  uint64_t resume_buffer = 256ull << 20;  // requests kept for replay before callers wait
  // Extra TLS connections bulk payloads of at least stripe_min_bytes are
  // striped over (common/stripes.h), so that several cores encrypt a large
  // copy; -1 ("auto"): one fewer than the cores, at most 7. Needs resume.
  int stripes = -1;
  uint64_t stripe_min_bytes = 4ull << 20;
  // No TLS (a server with insecure_plaintext on loopback): tokens only.
  bool insecure_plaintext = false;
  // [request]: the devices this program needs; the server's pool places it.
  uint32_t request_devices = 0;        // 0: every device the user may use
  uint64_t request_min_memory = 0;     // bytes free on each
  uint32_t request_min_cc = 0;         // major * 10 + minor
  std::string request_model;           // glob on the device name
  uint32_t request_wait_ms = 0;        // longest wait in the admission queue; 0: the server's
  bool monitor = false;                // rgpu-smi: no devices, status only (not from the file)
};

Result<ClientConfig> loadClientConfig();
// "config <file>" or "no config file (looked in ...)", for error messages.
std::string describeSource(const ClientConfig& cfg);

}  // namespace rgpu::client
