// rgpu-server --check-config FILE: everything wrong with a server.toml, at
// once, before the server is (re)started with it (docs/configuration.md).
//
// Beyond what loading checks — every invalid value, not only the first: the
// parser stops at one, so the check removes it and parses again, until the
// rest loads (valueErrors) —
//   - every key is one the server reads: a misspelt or misplaced key (say
//     `resume` under [tls]) would otherwise be silently ignored;
//   - the TLS files are readable, each key matches its certificate, and no
//     certificate has expired (one expiring within 30 days is a warning);
//   - each [[users]] `devices` entry names a device of the inventory (sim
//     devices; a CUDA server's GPUs are known only once it runs), user names
//     and tokens are unique, [security] worker_user exists;
//   - [accounting] path's directory exists and is writable, [cluster] files
//     are readable.
// The daemon itself warns about unknown keys at start (unknownKeys).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "server/config/server_config.h"

namespace rgpu::server {

struct ConfigProblem {
  bool error = true;  // false: a warning
  std::string text;
};

struct ConfigCheck {
  std::vector<ConfigProblem> problems;
  std::string summary;  // what the server would serve, when the file loads
  int errors() const;
};

ConfigCheck checkServerConfig(const std::string& path, std::chrono::system_clock::time_point now);

// The most value errors one check lists.
inline constexpr size_t kMaxValueErrors = 64;
// Every invalid value of `text` (a server.toml), each as the server would say
// it, in the order the parser meets them; empty when it loads.
std::vector<std::string> valueErrors(const std::string& text, const std::string& path);

// "tls.resume", "users[1].quota": the keys of `text` the server does not read.
std::vector<std::string> unknownKeys(const std::string& text, const std::string& path);

// The report --check-config prints; its exit status is 1 when errors() > 0.
std::string formatConfigCheck(const std::string& path, const ConfigCheck& c);

}  // namespace rgpu::server
