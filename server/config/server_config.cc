#include "server/config/server_config.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cstdlib>
#include <sstream>

#include "common/config.h"
#include "common/tls.h"
#include "protocol/frame.h"

namespace rgpu::server {

const char* priorityName(Priority p) {
  switch (p) {
    case Priority::kHigh: return "high";
    case Priority::kLow: return "low";
    default: return "normal";
  }
}

Result<ServerConfig> loadServerConfig(const std::string& path) {
  auto text = common::readTextFile(path);
  if (!text) return text.status();
  return parseServerConfig(*text, path);
}

std::string restartOnlyChanges(const ServerConfig& a, const ServerConfig& b) {
  std::string keys;
  auto differs = [&](bool d, const char* key) {
    if (d) keys += (keys.empty() ? "" : ", ") + std::string(key);
  };
  differs(a.listen != b.listen, "listen");
  differs(a.backend != b.backend, "backend");
  differs(a.insecure_plaintext != b.insecure_plaintext, "insecure_plaintext");
  differs(a.cuda_driver_library != b.cuda_driver_library, "[cuda] driver_library");
  differs(a.nvml_library != b.nvml_library, "[cuda] nvml_library");
  differs(a.pool.metrics_listen != b.pool.metrics_listen, "[pool] metrics_listen");
  differs(a.pool.metrics_token != b.pool.metrics_token, "[pool] metrics_token");
  differs(a.worker_user != b.worker_user, "[security] worker_user");
  differs(a.pool.metrics_labels != b.pool.metrics_labels, "[pool] metrics_labels");
  differs(a.pool.status_page != b.pool.status_page, "[pool] status_page");
  differs(a.pool.drain != b.pool.drain, "[pool] drain");
  // (drain_timeout_ms reaches workers in their snapshot: a reload applies to sessions started after it.)
  differs(a.checkpoint_dir != b.checkpoint_dir || a.checkpoint_key_file != b.checkpoint_key_file,
          "[checkpoint] dir, key_file");
  differs(a.accounting.path != b.accounting.path || a.accounting.max_bytes != b.accounting.max_bytes ||
              a.accounting.keep != b.accounting.keep,
          "[accounting]");
  {
    const auto &x = a.cluster, &y = b.cluster;
    differs(x.endpoints != y.endpoints || x.prefix != y.prefix || x.name != y.name || x.advertise != y.advertise ||
                x.lease_ttl_s != y.lease_ttl_s || x.load_interval_ms != y.load_interval_ms ||
                x.etcd_timeout_ms != y.etcd_timeout_ms || x.tls_ca != y.tls_ca || x.tls_cert != y.tls_cert ||
                x.tls_key != y.tls_key || x.insecure_plaintext != y.insecure_plaintext || x.policy != y.policy,
            "[cluster]");
  }
  bool devs = a.sim_devices.size() != b.sim_devices.size();
  for (size_t i = 0; !devs && i < a.sim_devices.size(); ++i) {
    const auto &x = a.sim_devices[i], &y = b.sim_devices[i];
    devs = x.name != y.name || x.memory != y.memory || x.major != y.major || x.minor != y.minor || x.sm_count != y.sm_count;
  }
  differs(devs, "[[sim.devices]]");
  return keys;
}

std::string tokenDigest(const std::string& token) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), md);
  static const char* hex = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned char b : md) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

bool tokenMatches(const std::string& configured, const std::string& given) {
  if (configured.empty() || given.empty()) return false;
  const std::string want = configured.rfind("sha256:", 0) == 0 ? configured : tokenDigest(configured);
  const std::string got = tokenDigest(given);
  return want.size() == got.size() && CRYPTO_memcmp(want.data(), got.data(), got.size()) == 0;
}

std::string userFor(const ServerConfig& cfg, const std::string& cn, const std::string& token) {
  for (auto& u : cfg.users)
    if ((!cn.empty() && !u.cert_cn.empty() && u.cert_cn == cn) || (!token.empty() && tokenMatches(u.token, token)))
      return u.name;
  return cfg.allow_anonymous ? "anonymous" : "";
}

Result<std::string> withTokensDigested(const std::string& text, const std::string& path) {
  auto t = common::parseToml(text, path);
  if (!t) return t.status();
  if (auto* users = (*t)["users"].as_array())
    for (auto& u : *users)
      if (auto* ut = u.as_table())
        if (auto tok = (*ut)["token"].value<std::string>(); tok && !tok->empty() && tok->rfind("sha256:", 0) != 0)
          ut->insert_or_assign("token", tokenDigest(*tok));
  if (auto* pool = (*t)["pool"].as_table())
    if (auto tok = (*pool)["metrics_token"].value<std::string>(); tok && !tok->empty() && tok->rfind("sha256:", 0) != 0)
      pool->insert_or_assign("metrics_token", tokenDigest(*tok));
  std::ostringstream out;
  out << *t;
  return out.str();
}

Result<ServerConfig> parseServerConfig(const std::string& text, const std::string& path) {
  ServerConfig c;
  c.source = path;
  auto t = common::parseToml(text, path);
  if (!t) return t.status();
  toml::table& tbl = *t;
  auto where = [&](const std::string& key) { return "config " + path + ": " + key; };
  c.listen = tbl["listen"].value_or(c.listen);
  c.log_level = tbl["log_level"].value_or(c.log_level);
  c.backend = tbl["backend"].value_or(c.backend);
  c.compression = tbl["compression"].value_or(c.compression);
  c.allow_anonymous = tbl["allow_anonymous"].value_or(false);
  c.insecure_plaintext = tbl["insecure_plaintext"].value_or(false);
  if (c.backend != "sim" && c.backend != "cuda" && c.backend != "auto")
    return Status(err::kInvalidValue, where("backend") + " must be sim, cuda or auto");
  if (auto* tls = tbl["tls"].as_table()) {
    auto rel = [&](const char* k) {
      auto v = (*tls)[k].value<std::string>();
      return v ? common::resolveRelative(path, *v) : std::string();
    };
    c.tls_cert = rel("cert");
    c.tls_key = rel("key");
    c.tls_ca = rel("ca");
    c.require_client_cert = (*tls)["require_client_cert"].value_or(false);
    c.handshake_timeout_ms = (*tls)["handshake_timeout_ms"].value_or(c.handshake_timeout_ms);
  }
  if (auto* session = tbl["session"].as_table()) {
    if (auto g = (*session)["resume_grace_ms"].value<int64_t>()) {
      if (*g < 0 || *g > 24 * 3600 * 1000)
        return Status(err::kInvalidValue, where("session.resume_grace_ms") + " must be 0..86400000");
      c.resume_grace_ms = static_cast<uint32_t>(*g);
    }
    if (auto m = (*session)["max_stripes"].value<int64_t>()) {
      if (*m < 0 || *m > protocol::kMaxStripes)
        return Status(err::kInvalidValue, where("session.max_stripes") + " must be 0.." +
                                              std::to_string(protocol::kMaxStripes));
      c.max_stripes = static_cast<uint32_t>(*m);
    }
  }
  if (c.insecure_plaintext) {
    auto hp = common::parseHostPort(c.listen);
    if (!hp || !common::isLoopbackHost(hp->first))
      return Status(err::kInvalidValue, where("insecure_plaintext") + ": plaintext is only allowed on a loopback `listen` "
                                        "address (127.0.0.1, ::1, localhost), not '" + c.listen + "'");
  }
  if (auto* users = tbl["users"].as_array()) {
    for (auto& u : *users) {
      auto* ut = u.as_table();
      if (!ut) return Status(err::kInvalidValue, where("users") + " entries must be tables");
      UserEntry e;
      e.name = (*ut)["name"].value_or(std::string());
      e.token = (*ut)["token"].value_or(std::string());
      e.cert_cn = (*ut)["cert_cn"].value_or(std::string());
      if (e.name.empty()) return Status(err::kInvalidValue, where("users") + ": every user needs a name");
      if (e.token.empty() && e.cert_cn.empty())
        return Status(err::kInvalidValue, where("users") + ": user '" + e.name + "' needs a token or a cert_cn");
      std::string who = where("users") + ": user '" + e.name + "': ";
      if (auto* devs = (*ut)["devices"].as_array()) {
        for (auto& d : *devs) {
          if (auto sv = d.value<std::string>()) e.devices.push_back(*sv);
          else if (auto iv = d.value<int64_t>(); iv && *iv >= 0) e.devices.push_back(std::to_string(*iv));
          else return Status(err::kInvalidValue, who + "devices entries are indices, UUIDs or model patterns");
        }
      }
      if (auto q = (*ut)["memory_quota"].value<std::string>()) {
        auto bytes = parseSize(*q);
        if (!bytes) return Status(err::kInvalidValue, who + "memory_quota: " + bytes.status().message());
        e.memory_quota = *bytes;
      }
      if (auto q = (*ut)["pool_memory_quota"].value<std::string>()) {
        auto bytes = parseSize(*q);
        if (!bytes) return Status(err::kInvalidValue, who + "pool_memory_quota: " + bytes.status().message());
        e.pool_memory_quota = *bytes;
      }
      if (auto m = (*ut)["max_sessions"].value<int64_t>()) {
        if (*m < 0 || *m > 1000000) return Status(err::kInvalidValue, who + "max_sessions must be 0..1000000");
        e.max_sessions = static_cast<uint32_t>(*m);
      }
      std::string prio = (*ut)["priority"].value_or(std::string("normal"));
      if (prio == "high") e.priority = Priority::kHigh;
      else if (prio == "normal") e.priority = Priority::kNormal;
      else if (prio == "low") e.priority = Priority::kLow;
      else return Status(err::kInvalidValue, who + "priority must be high, normal or low");
      e.weight = (*ut)["weight"].value_or(1.0);
      if (auto w = (*ut)["weight"].value<int64_t>()) e.weight = static_cast<double>(*w);
      if (!(e.weight > 0 && e.weight <= 1000)) return Status(err::kInvalidValue, who + "weight must be in (0, 1000]");
      e.admin = (*ut)["admin"].value_or(false);
      if (auto m = (*ut)["mps_thread_percentage"].value<int64_t>()) {
        if (*m < 1 || *m > 100) return Status(err::kInvalidValue, who + "mps_thread_percentage must be 1..100");
        e.mps_thread_percentage = static_cast<uint32_t>(*m);
      }
      c.users.push_back(std::move(e));
    }
  }
  if (auto* pool = tbl["pool"].as_table()) {
    // Durations: 0 .. one day.
    auto millis = [&](const char* key, uint32_t& out) -> Status {
      auto t = (*pool)[key].value<int64_t>();
      if (!t) return Status::ok();
      if (*t < 0 || *t > 24 * 3600 * 1000)
        return Status(err::kInvalidValue, where(std::string("pool.") + key) + " must be 0..86400000");
      out = static_cast<uint32_t>(*t);
      return Status::ok();
    };
    RGPU_TRY(millis("admission_timeout_ms", c.pool.admission_timeout_ms));
    RGPU_TRY(millis("drain_timeout_ms", c.pool.drain_timeout_ms));
    c.pool.metrics_listen = (*pool)["metrics_listen"].value_or(std::string());
    c.pool.metrics_token = (*pool)["metrics_token"].value_or(std::string());
    c.pool.metrics_labels = (*pool)["metrics_labels"].value_or(c.pool.metrics_labels);
    if (c.pool.metrics_labels != "sessions" && c.pool.metrics_labels != "aggregate")
      return Status(err::kInvalidValue, where("pool.metrics_labels") + " must be \"sessions\" or \"aggregate\"");
    if (!c.pool.metrics_listen.empty() && c.pool.metrics_token.empty()) {
      auto hp = common::parseHostPort(c.pool.metrics_listen);
      if (!hp || !common::isLoopbackHost(hp->first))
        return Status(err::kInvalidValue, where("pool.metrics_listen") + ": metrics on a non-loopback address ('" +
                                              c.pool.metrics_listen +
                                              "') need [pool] metrics_token: they name every tenant's sessions");
    }
    c.pool.drain = (*pool)["drain"].value_or(c.pool.drain);
    if (c.pool.drain != "wait" && c.pool.drain != "migrate")
      return Status(err::kInvalidValue, where("pool.drain") + " must be \"wait\" or \"migrate\"");
    c.pool.status_page = (*pool)["status_page"].value_or(c.pool.status_page);
    if (c.pool.status_page != "users" && c.pool.status_page != "open" && c.pool.status_page != "off")
      return Status(err::kInvalidValue, where("pool.status_page") + " must be \"users\", \"open\" or \"off\"");
    if (c.pool.status_page == "open" && !c.pool.metrics_listen.empty()) {
      auto hp = common::parseHostPort(c.pool.metrics_listen);
      if (!hp || !common::isLoopbackHost(hp->first))
        return Status(err::kInvalidValue, where("pool.status_page") + " = \"open\" shows every tenant's sessions "
                                              "to anyone: only on a loopback metrics_listen, not '" +
                                              c.pool.metrics_listen + "'");
    }
  }
  if (auto* acc = tbl["accounting"].as_table()) {
    c.accounting.path = (*acc)["path"].value_or(std::string());
    if (auto v = (*acc)["max_bytes"].value<std::string>()) {
      auto bytes = parseSize(*v);
      if (!bytes) return Status(err::kInvalidValue, where("accounting.max_bytes") + ": " + bytes.status().message());
      c.accounting.max_bytes = *bytes;
    } else if (auto n = (*acc)["max_bytes"].value<int64_t>()) {
      c.accounting.max_bytes = *n > 0 ? static_cast<uint64_t>(*n) : 0;
    }
    if (c.accounting.max_bytes < 4096)
      return Status(err::kInvalidValue, where("accounting.max_bytes") + " must be at least 4 KiB");
    if (auto k = (*acc)["keep"].value<int64_t>()) {
      if (*k < 0 || *k > 1000) return Status(err::kInvalidValue, where("accounting.keep") + " must be 0..1000");
      c.accounting.keep = static_cast<uint32_t>(*k);
    }
  }
  if (auto* lim = tbl["limits"].as_table()) {
    auto& L = c.limits;
    L.max_allocations = (*lim)["max_allocations"].value_or(L.max_allocations);
    L.max_streams = (*lim)["max_streams"].value_or(L.max_streams);
    L.max_events = (*lim)["max_events"].value_or(L.max_events);
    L.max_modules = (*lim)["max_modules"].value_or(L.max_modules);
    L.max_functions = (*lim)["max_functions"].value_or(L.max_functions);
    L.max_pending_host_funcs = (*lim)["max_pending_host_funcs"].value_or(L.max_pending_host_funcs);
    L.max_graphs = (*lim)["max_graphs"].value_or(L.max_graphs);
    L.max_graph_nodes = (*lim)["max_graph_nodes"].value_or(L.max_graph_nodes);
    L.max_conditional_handles = (*lim)["max_conditional_handles"].value_or(L.max_conditional_handles);
    // A size: "16MiB", or a number of bytes.
    auto size = [&](const char* key, uint64_t& out) -> Status {
      if (auto v = (*lim)[key].value<std::string>()) {
        auto bytes = parseSize(*v);
        if (!bytes) return Status(err::kInvalidValue, where(std::string("limits.") + key) + ": " + bytes.status().message());
        out = *bytes;
      } else if (auto n = (*lim)[key].value<int64_t>()) {
        if (*n < 0) return Status(err::kInvalidValue, where(std::string("limits.") + key) + " must not be negative");
        out = static_cast<uint64_t>(*n);
      }
      return Status::ok();
    };
    RGPU_TRY(size("max_printf_fifo_bytes", L.max_printf_fifo_bytes));
    RGPU_TRY(size("max_staging_bytes", L.max_staging_bytes));
    RGPU_TRY(size("max_interpreter_bytes", L.max_interpreter_bytes));
    L.max_unauthenticated = (*lim)["max_unauthenticated"].value_or(L.max_unauthenticated);
    L.max_unauthenticated_per_address =
        (*lim)["max_unauthenticated_per_address"].value_or(L.max_unauthenticated_per_address);
    if (L.max_unauthenticated == 0 || L.max_unauthenticated_per_address == 0)
      return Status(err::kInvalidValue, where("limits.max_unauthenticated") + ": the caps must be at least 1");
    if (L.max_staging_bytes < protocol::kMaxBulkBytes)
      return Status(err::kInvalidValue, where("limits.max_staging_bytes") + " must be at least 64MiB (one frame's bulk)");
    if (auto k = (*lim)["kernel_timeout_ms"].value<int64_t>()) {
      if (*k < 0 || *k > 24 * 3600 * 1000)
        return Status(err::kInvalidValue, where("limits.kernel_timeout_ms") + " must be 0..86400000");
      L.kernel_timeout_ms = static_cast<uint32_t>(*k);
    }
  }
  if (auto* sec = tbl["security"].as_table())
    if (auto u = (*sec)["worker_user"].value<std::string>()) {
      c.worker_user = *u;
      c.worker_user_set = true;
    }
  if (auto* cu = tbl["cuda"].as_table()) {
    // A library named with a path is relative to this file; a bare name is the loader's to find.
    for (auto [key, field] : {std::pair{"driver_library", &c.cuda_driver_library}, {"nvml_library", &c.nvml_library},
                              {"cublas_library", &c.cublas_library}, {"cublaslt_library", &c.cublaslt_library},
                              {"cufft_library", &c.cufft_library}, {"cusolver_library", &c.cusolver_library},
                              {"cusparse_library", &c.cusparse_library}, {"cudnn_library", &c.cudnn_library}})
      if (auto lib = (*cu)[key].value<std::string>())
        *field = lib->find('/') == std::string::npos ? *lib : common::resolveRelative(path, *lib);
    if (auto sc = (*cu)["scrub"]; sc) {
      if (!sc.is_boolean()) return Status(err::kInvalidValue, where("cuda.scrub") + " must be true or false");
      c.cuda_scrub = *sc.value<bool>();
    }
    if (auto pool = (*cu)["staging_pool"].value<std::string>()) {
      auto bytes = parseSize(*pool);
      if (!bytes) return Status(err::kInvalidValue, where("cuda.staging_pool") + ": " + bytes.status().message());
      c.cuda_staging_pool = *bytes;
    }
  }
  if (auto* ck = tbl["checkpoint"].as_table()) {
    if (auto d = (*ck)["dir"].value<std::string>()) c.checkpoint_dir = common::resolveRelative(path, *d);
    if (auto k = (*ck)["key_file"].value<std::string>()) c.checkpoint_key_file = common::resolveRelative(path, *k);
    if (auto t = (*ck)["drain_timeout_ms"].value<int64_t>()) {
      if (*t < 1 || *t > 3600000)
        return Status(err::kInvalidValue, where("checkpoint.drain_timeout_ms") + " must be 1..3600000");
      c.checkpoint_drain_timeout_ms = static_cast<uint32_t>(*t);
    }
    if (auto pc = (*ck)["precopy"]; pc) {
      if (!pc.is_boolean()) return Status(err::kInvalidValue, where("checkpoint.precopy") + " must be true or false");
      c.checkpoint_precopy = *pc.value<bool>();
    }
    if (c.checkpoint_dir.empty() != c.checkpoint_key_file.empty())
      return Status(err::kInvalidValue, where("checkpoint") + ": dir and key_file go together");
  }
  if (c.pool.drain == "migrate" && (c.checkpoint_dir.empty() || !tbl["cluster"].as_table()))
    return Status(err::kInvalidValue, where("pool.drain") + " = \"migrate\" moves sessions to other members: it "
                                          "needs [cluster] and [checkpoint] dir and key_file");
  if (auto* sim = tbl["sim"].as_table()) {
    if (auto log = (*sim)["launch_log"].value<std::string>()) c.sim_launch_log = common::resolveRelative(path, *log);
    if (auto hot = (*sim)["hot_paths"]; hot) {
      if (!hot.is_boolean()) return Status(err::kInvalidValue, where("sim.hot_paths") + " must be true or false");
      c.sim_hot_paths = *hot.value<bool>();
    }
    if (auto jit = (*sim)["jit"]; jit) {
      auto mode = jit.value<std::string>();
      if (!mode || (*mode != "auto" && *mode != "eager" && *mode != "off"))
        return Status(err::kInvalidValue, where("sim.jit") + " must be \"auto\", \"eager\" or \"off\"");
      c.sim_jit = *mode;
    }
    if (auto th = (*sim)["jit_threshold"]; th) {
      auto n = th.value<int64_t>();
      if (!n || *n < 0) return Status(err::kInvalidValue, where("sim.jit_threshold") + " must be a count of thread-instructions per instruction of a kernel (>= 0)");
      c.sim_jit_threshold = static_cast<uint64_t>(*n);
    }
    if (auto lib = (*sim)["jit_library"].value<std::string>()) c.sim_jit_library = common::resolveRelative(path, *lib);
    if (auto* devs = (*sim)["devices"].as_array()) {
      for (auto& d : *devs) {
        auto* dt = d.as_table();
        if (!dt) return Status(err::kInvalidValue, where("sim.devices") + " entries must be tables");
        SimDeviceConfig s;
        s.name = (*dt)["name"].value_or(s.name);
        if (auto m = (*dt)["memory"].value<std::string>()) {
          auto bytes = parseSize(*m);
          if (!bytes) return Status(err::kInvalidValue, where("sim.devices.memory") + ": " + bytes.status().message());
          s.memory = *bytes;
        } else if (auto mi = (*dt)["memory"].value<int64_t>()) {
          s.memory = static_cast<uint64_t>(*mi);
        }
        std::string cc = (*dt)["compute_capability"].value_or(std::string("9.0"));
        if (std::sscanf(cc.c_str(), "%d.%d", &s.major, &s.minor) != 2)
          return Status(err::kInvalidValue, where("sim.devices.compute_capability") + " must look like \"9.0\"");
        s.sm_count = (*dt)["sm_count"].value_or(s.sm_count);
        if (s.sm_count < 1 || s.sm_count > 1024)
          return Status(err::kInvalidValue, where("sim.devices.sm_count") + " must be 1..1024");
        c.sim_devices.push_back(std::move(s));
      }
    }
  }
  if (c.sim_devices.empty()) c.sim_devices.push_back({});
  RGPU_TRY(parseClusterConfig(tbl, path, c.listen, c.cluster));
  return c;
}

}  // namespace rgpu::server
