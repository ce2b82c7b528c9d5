#include "server/daemon/config_check.h"

#include "server/checkpoint/checkpoint_stream.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "common/config.h"
#include "common/tls.h"
#include "server/checkpoint/checkpoint_stream.h"
#include "server/daemon/backend_factory.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {
namespace {

// Every key the server reads, by table ("" the top level; "users" and
// "sim.devices" are arrays of tables). server_config.cc and cluster_config.cc
// read them; ConfigCheck.TheSampleAndEveryDocumentedKeyAreKnown keeps the two in step.
const common::KeySchema& schema() {
  static const common::KeySchema s = {
      {"", {"listen", "log_level", "backend", "compression", "allow_anonymous", "insecure_plaintext", "tls",
            "session", "users", "pool", "accounting", "limits", "security", "cuda", "sim", "cluster", "checkpoint"}},
      {"tls", {"cert", "key", "ca", "require_client_cert", "handshake_timeout_ms"}},
      {"session", {"resume_grace_ms", "max_stripes"}},
      {"users", {"name", "token", "cert_cn", "devices", "memory_quota", "pool_memory_quota", "max_sessions",
                 "priority", "weight", "admin", "mps_thread_percentage"}},
      {"pool", {"admission_timeout_ms", "drain_timeout_ms", "drain", "metrics_listen", "metrics_token", "metrics_labels",
                "status_page"}},
      {"accounting", {"path", "max_bytes", "keep"}},
      {"limits", {"max_allocations", "max_streams", "max_events", "max_modules", "max_functions",
                  "max_pending_host_funcs", "max_graphs", "max_graph_nodes", "max_conditional_handles",
                  "max_printf_fifo_bytes", "max_staging_bytes", "max_interpreter_bytes", "max_unauthenticated",
                  "max_unauthenticated_per_address", "kernel_timeout_ms"}},
      {"security", {"worker_user"}},
      {"checkpoint", {"dir", "key_file", "drain_timeout_ms", "precopy"}},
      {"cuda", {"driver_library", "nvml_library", "cublas_library", "cublaslt_library", "cufft_library", "cusolver_library", "cusparse_library", "cudnn_library", "staging_pool", "scrub"}},
      {"sim", {"launch_log", "hot_paths", "jit", "jit_threshold", "jit_library", "devices"}},
      {"sim.devices", {"name", "memory", "compute_capability", "sm_count"}},
      {"cluster", {"endpoints", "prefix", "name", "advertise", "lease_ttl_s", "load_interval_ms", "etcd_timeout_ms",
                   "policy", "tls_ca", "tls_cert", "tls_key", "insecure_plaintext"}},
  };
  return s;
}

// The first certificate in a PEM file (for its dates), or null.
std::unique_ptr<X509, decltype(&X509_free)> readCert(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  X509* x = f ? PEM_read_X509(f, nullptr, nullptr, nullptr) : nullptr;
  if (f) std::fclose(f);
  return {x, &X509_free};
}

class Checker {
 public:
  explicit Checker(std::chrono::system_clock::time_point now) : now_(now) {}
  void error(const std::string& s) { out.problems.push_back({true, s}); }
  void warn(const std::string& s) { out.problems.push_back({false, s}); }

  // A certificate file: readable, PEM, not expired; `key` (when given) matches it.
  void certificate(const std::string& what, const std::string& cert_path, const std::string& key_path) {
    if (::access(cert_path.c_str(), R_OK) != 0) return error(what + ": cannot read " + cert_path);
    auto cert = readCert(cert_path);
    if (!cert) return error(what + ": " + cert_path + " holds no PEM certificate");
    const time_t now = std::chrono::system_clock::to_time_t(now_);
    ASN1_TIME* at = ASN1_TIME_set(nullptr, now);
    int days = 0, secs = 0;
    if (at && ASN1_TIME_diff(&days, &secs, at, X509_get0_notAfter(cert.get()))) {
      if (days < 0 || (days == 0 && secs <= 0)) error(what + ": " + cert_path + " has expired");
      else if (days < 30) warn(what + ": " + cert_path + " expires in " + std::to_string(days) + " day(s)");
    }
    if (at && ASN1_TIME_diff(&days, &secs, at, X509_get0_notBefore(cert.get())) && (days > 0 || secs > 0))
      error(what + ": " + cert_path + " is not valid yet");
    ASN1_TIME_free(at);
    if (key_path.empty()) return;
    // The pair as the server itself loads it: readable, PEM, matching.
    auto ctx = common::TlsContext::makeServer(common::TlsOptions::files("", cert_path, key_path));
    if (!ctx) error(what + ": " + ctx.status().message());
  }

  ConfigCheck out;

 private:
  std::chrono::system_clock::time_point now_;
};

std::string describe(const ServerConfig& c, const std::vector<PoolDeviceInfo>& devices) {
  std::string s = "listen " + c.listen + (c.insecure_plaintext ? " (plaintext, no TLS)" : " over TLS 1.3") +
                  (c.require_client_cert ? ", client certificates required" : "") + "\nbackend " + c.backend + "\n";
  if (c.backend == "sim") {
    for (size_t i = 0; i < devices.size(); ++i)
      s += "  device " + std::to_string(i) + ": " + devices[i].name + " (" + devices[i].uuid + "), " +
           formatBytes(devices[i].total) + ", compute capability " + std::to_string(devices[i].cc / 10) + "." +
           std::to_string(devices[i].cc % 10) + "\n";
  } else {
    s += "  devices: the GPUs the CUDA driver (" + c.cuda_driver_library + ") finds at start\n";
  }
  s += std::to_string(c.users.size()) + " user(s)" + (c.allow_anonymous ? ", anonymous clients allowed" : "") + "\n";
  for (const auto& u : c.users) {
    std::string how = !u.cert_cn.empty() ? "certificate CN '" + u.cert_cn + "'" : "";
    if (!u.token.empty()) how += std::string(how.empty() ? "" : " or ") + "token";
    s += "  " + u.name + ": " + how + (u.admin ? ", admin" : "") +
         (u.memory_quota ? ", memory quota " + formatBytes(u.memory_quota) : "") +
         (u.devices.empty() ? "" : ", " + std::to_string(u.devices.size()) + " device entr(ies)") + "\n";
  }
  s += "admission timeout " + std::to_string(c.pool.admission_timeout_ms) + " ms, drain " +
       std::to_string(c.pool.drain_timeout_ms) + " ms, session resume grace " + std::to_string(c.resume_grace_ms) +
       " ms\n";
  if (!c.pool.metrics_listen.empty())
    s += "metrics on " + c.pool.metrics_listen +
         (c.pool.status_page == "off" ? "" : ", status page (" + c.pool.status_page + ") at /") + "\n";
  if (!c.cluster.endpoints.empty()) s += "member '" + c.cluster.name + "' of the pool in etcd at " + c.cluster.endpoints[0] + "\n";
  if (!c.accounting.path.empty()) s += "accounting log " + c.accounting.path + "\n";
  if (!c.checkpoint_dir.empty()) s += "sessions can be moved (rgpu-smi --migrate), checkpoints in " + c.checkpoint_dir + "\n";
  return s;
}

}  // namespace

int ConfigCheck::errors() const {
  int n = 0;
  for (const auto& p : problems) n += p.error ? 1 : 0;
  return n;
}

namespace {

// Every value of `t` by path: {"pool", "metrics_labels"}, {"users", "1", "weight"}.
using KeyPath = std::vector<std::string>;
void leaves(const toml::node& n, KeyPath& at, std::vector<KeyPath>& out) {
  if (const auto* tbl = n.as_table()) {
    for (const auto& [k, v] : *tbl) {
      at.emplace_back(k.str());
      leaves(v, at, out);
      at.pop_back();
    }
  } else if (const auto* arr = n.as_array(); arr && !arr->empty() && arr->is_array_of_tables()) {
    for (size_t i = 0; i < arr->size(); ++i) {
      at.push_back(std::to_string(i));
      leaves(*arr->get(i), at, out);
      at.pop_back();
    }
  } else {
    out.push_back(at);
  }
}

bool erase(toml::table& t, const KeyPath& p, size_t i = 0) {
  if (i + 1 == p.size()) return t.erase(p[i]) > 0;
  toml::node* n = t.get(p[i]);
  if (!n) return false;
  if (auto* sub = n->as_table()) return erase(*sub, p, i + 1);
  auto* arr = n->as_array();
  if (!arr || i + 2 >= p.size()) return false;  // {"users", "1", "weight"}: element 1's key
  toml::node* elem = arr->get(std::stoul(p[i + 1]));
  return elem && elem->as_table() && erase(*elem->as_table(), p, i + 2);
}

Status parseTable(const toml::table& t, const std::string& path) {
  std::ostringstream text;
  text << t;
  auto c = parseServerConfig(text.str(), path);
  return c ? Status::ok() : c.status();
}

}  // namespace

std::vector<std::string> valueErrors(const std::string& text, const std::string& path) {
  std::vector<std::string> errors;
  auto parsed = common::parseToml(text, path);
  if (!parsed) return {parsed.status().message()};
  toml::table t = std::move(*parsed);
  for (Status s = parseTable(t, path); !s && errors.size() < kMaxValueErrors; s = parseTable(t, path)) {
    errors.push_back(s.message());
    // The value the parser stopped at: removing it makes this error go.
    // Keys the message names are tried first (removing another key could
    // change the message by making the file wrong in a new way).
    std::vector<KeyPath> all;
    KeyPath at;
    leaves(t, at, all);
    std::stable_partition(all.begin(), all.end(), [&](const KeyPath& p) {
      return s.message().find(p.back()) != std::string::npos;
    });
    bool found = false;
    for (const auto& p : all) {
      toml::table without = t;
      if (!erase(without, p)) continue;
      Status after = parseTable(without, path);
      if (after.ok() || after.message() != s.message()) {
        t = std::move(without);
        found = true;
        break;
      }
    }
    if (!found) break;  // not one value: what follows it cannot be listed
  }
  return errors;
}

std::vector<std::string> unknownKeys(const std::string& text, const std::string& path) {
  auto t = common::parseToml(text, path);
  return t ? common::unknownKeys(*t, schema()) : std::vector<std::string>{};
}

ConfigCheck checkServerConfig(const std::string& path, std::chrono::system_clock::time_point now) {
  Checker c(now);
  auto text = common::readTextFile(path);
  if (!text) {
    c.error(text.status().message());
    return c.out;
  }
  if (auto t = common::parseToml(*text, path); !t) {
    c.error(t.status().message());
    return c.out;
  }
  for (const auto& k : unknownKeys(*text, path)) c.error("unknown key '" + k + "' (the server would ignore it)");
  auto cfg = parseServerConfig(*text, path);
  if (!cfg) {
    for (const auto& e : valueErrors(*text, path)) c.error(e);
    return c.out;
  }
  if (!cfg->insecure_plaintext) {
    if (cfg->tls_cert.empty() || cfg->tls_key.empty()) c.error("[tls] cert and key are needed (or insecure_plaintext)");
    else c.certificate("[tls] cert", cfg->tls_cert, cfg->tls_key);
    if (!cfg->tls_ca.empty()) c.certificate("[tls] ca", cfg->tls_ca, "");
    else if (cfg->require_client_cert) c.error("[tls] require_client_cert needs [tls] ca");
  }
  if (!cfg->cluster.tls_cert.empty()) c.certificate("[cluster] tls_cert", cfg->cluster.tls_cert, cfg->cluster.tls_key);
  if (!cfg->cluster.tls_ca.empty()) c.certificate("[cluster] tls_ca", cfg->cluster.tls_ca, "");
  // Users: unique names and tokens; device entries that name a device.
  const auto devices = simInventory(*cfg);
  std::set<std::string> names, tokens;
  for (const auto& u : cfg->users) {
    if (!names.insert(u.name).second) c.error("[[users]] '" + u.name + "' appears twice");
    if (!u.token.empty() && !tokens.insert(u.token).second) c.error("[[users]] '" + u.name + "': its token is another user's too");
    if (u.token.empty() && u.cert_cn.empty()) c.warn("[[users]] '" + u.name + "' has neither token nor cert_cn: no client can be it");
    if (cfg->backend != "sim") continue;
    for (const auto& e : u.devices) {
      bool any = false;
      for (size_t i = 0; i < devices.size() && !any; ++i) any = deviceEntryMatches(e, static_cast<int>(i), devices[i]);
      if (!any) c.error("[[users]] '" + u.name + "': devices entry '" + e + "' names none of the server's devices");
    }
  }
  if (cfg->worker_user_set && !cfg->worker_user.empty() && !::getpwnam(cfg->worker_user.c_str()))
    c.error("[security] worker_user '" + cfg->worker_user + "' is not a user of this host");
  if (!cfg->accounting.path.empty()) {
    const auto slash = cfg->accounting.path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : cfg->accounting.path.substr(0, slash);
    if (::access(dir.c_str(), W_OK) != 0) c.error("[accounting] path: cannot write in " + dir);
  }
  if (!cfg->checkpoint_key_file.empty()) {
    if (auto k = loadCheckpointKey(cfg->checkpoint_key_file); !k) c.error(k.status().message());
    if (::access(cfg->checkpoint_dir.c_str(), W_OK) != 0 && errno != ENOENT)
      c.error("[checkpoint] dir: cannot write in " + cfg->checkpoint_dir);
  }
  if (cfg->backend == "sim" && devices.empty()) c.warn("backend sim with no [[sim.devices]]: clients get no device");
  c.out.summary = describe(*cfg, devices);
  return c.out;
}

std::string formatConfigCheck(const std::string& path, const ConfigCheck& c) {
  std::string s;
  if (!c.summary.empty()) s += path + " would serve:\n" + c.summary;
  int warnings = 0;
  for (const auto& p : c.problems) {
    s += std::string(p.error ? "error: " : "warning: ") + p.text + "\n";
    warnings += p.error ? 0 : 1;
  }
  s += path + ": " + std::to_string(c.errors()) + " error(s), " + std::to_string(warnings) + " warning(s)\n";
  return s;
}

}  // namespace rgpu::server
