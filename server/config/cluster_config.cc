// [cluster] of server.toml: this server as a member of a pool on etcd.
#include <unistd.h>

#include "common/tls.h"
#include "server/config/server_config.h"

namespace rgpu::server {

Status parseClusterConfig(const toml::table& tbl, const std::string& path, const std::string& listen,
                          ClusterConfig& out) {
  const auto* t = tbl["cluster"].as_table();
  if (!t) return Status::ok();
  auto bad = [&](const std::string& key, const std::string& why) {
    return Status(err::kInvalidValue, path + ": cluster." + key + " " + why);
  };
  ClusterConfig c;
  if (const auto* eps = (*t)["endpoints"].as_array()) {
    for (const auto& e : *eps) {
      auto s = e.value<std::string>();
      if (!s || s->empty()) return bad("endpoints", "entries are URLs such as \"http://127.0.0.1:2379\"");
      c.endpoints.push_back(*s);
    }
  } else if ((*t).contains("endpoints")) {
    return bad("endpoints", "must be a list of URLs");
  }
  if (c.endpoints.empty()) return bad("endpoints", "must name at least one etcd endpoint");
  c.prefix = (*t)["prefix"].value_or(c.prefix);
  if (c.prefix.empty() || c.prefix.back() != '/') return bad("prefix", "must end with '/'");
  c.name = (*t)["name"].value_or(std::string());
  if (c.name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    c.name = host;
  }
  if (c.name.empty() || c.name.size() > 128 || c.name.find('/') != std::string::npos)
    return bad("name", "must be 1..128 characters without '/'");
  c.advertise = (*t)["advertise"].value_or(listen);
  auto hp = common::parseHostPort(c.advertise);
  if (!hp) return bad("advertise", "must be host:port (" + hp.status().message() + ")");
  if (hp->first == "0.0.0.0" || hp->first == "::" || hp->first == "[::]" || hp->first.empty())
    return bad("advertise", "must be an address clients can reach, not the wildcard of `listen` ('" + c.advertise + "')");
  auto range = [&](const char* key, uint32_t& v, int64_t lo, int64_t hi) -> Status {
    if (auto x = (*t)[key].value<int64_t>()) {
      if (*x < lo || *x > hi) return bad(key, "must be " + std::to_string(lo) + ".." + std::to_string(hi));
      v = static_cast<uint32_t>(*x);
    }
    return Status::ok();
  };
  RGPU_TRY(range("lease_ttl_s", c.lease_ttl_s, 2, 3600));
  RGPU_TRY(range("load_interval_ms", c.load_interval_ms, 100, 60000));
  RGPU_TRY(range("etcd_timeout_ms", c.etcd_timeout_ms, 100, 60000));
  c.policy = (*t)["policy"].value_or(c.policy);
  if (c.policy != "spread" && c.policy != "pack") return bad("policy", "must be \"spread\" or \"pack\"");
  auto file = [&](const char* key) {
    auto v = (*t)[key].value<std::string>();
    return v && !v->empty() ? common::resolveRelative(path, *v) : std::string();
  };
  c.tls_ca = file("tls_ca");
  c.tls_cert = file("tls_cert");
  c.tls_key = file("tls_key");
  if (c.tls_cert.empty() != c.tls_key.empty()) return bad("tls_cert", "and cluster.tls_key go together");
  c.insecure_plaintext = (*t)["insecure_plaintext"].value_or(false);
  for (const auto& e : c.endpoints) {
    if (e.rfind("https://", 0) == 0) {
      if (c.tls_ca.empty()) return bad("tls_ca", "is needed to verify the https endpoint " + e);
      continue;
    }
    if (e.rfind("http://", 0) != 0) return bad("endpoints", "entry '" + e + "' is not an http:// or https:// URL");
    auto ep = common::parseHostPort(e.substr(7));
    if (!ep) return bad("endpoints", "entry '" + e + "': " + ep.status().message());
    if (!common::isLoopbackHost(ep->first) && !c.insecure_plaintext)
      return bad("endpoints", "entry '" + e + "' is plaintext to another host: use https (cluster.tls_ca) or set "
                              "cluster.insecure_plaintext = true");
  }
  out = std::move(c);
  return Status::ok();
}

}  // namespace rgpu::server
