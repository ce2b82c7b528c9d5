#include "client/client_config.h"

#include <cstdlib>

#include "common/config.h"

namespace rgpu::client {

Result<ClientConfig> loadClientConfig() {
  ClientConfig c;
  std::string path;
  if (auto env = common::envString("RGPU_CONFIG")) {
    path = *env;
    if (!common::fileExists(path)) return Status(err::kFileNotFound, "RGPU_CONFIG names " + path + ", which does not exist");
  } else {
    for (std::string p : {common::expandHome("~/.config/rgpu/client.toml"), std::string("/etc/rgpu/client.toml")}) {
      if (common::fileExists(p)) {
        path = p;
        break;
      }
    }
  }
  if (!path.empty()) {
    auto t = common::loadTomlFile(path);
    if (!t) return t.status();
    toml::table& tbl = *t;
    c.source = path;
    c.server = tbl["server"].value_or(std::string());
    c.server_name = tbl["server_name"].value_or(std::string());
    c.token = tbl["token"].value_or(std::string());
    c.compression = tbl["compression"].value_or(c.compression);
    c.log_level = tbl["log_level"].value_or(c.log_level);
    c.connect_timeout_ms = tbl["connect_timeout_ms"].value_or(c.connect_timeout_ms);
    c.dead_after_s = tbl["dead_after_s"].value_or(c.dead_after_s);
    if (auto tls = tbl["tls"].as_table()) {
      auto rel = [&](const char* k) {
        auto v = (*tls)[k].value<std::string>();
        return v ? common::resolveRelative(path, *v) : std::string();
      };
      c.ca = rel("ca");
      c.cert = rel("cert");
      c.key = rel("key");
    }
  }
  if (auto v = common::envString("RGPU_SERVER")) c.server = *v;
  if (auto v = common::envString("RGPU_SERVER_NAME")) c.server_name = *v;
  if (auto v = common::envString("RGPU_TOKEN")) c.token = *v;
  if (auto v = common::envString("RGPU_CA")) c.ca = *v;
  if (auto v = common::envString("RGPU_CERT")) c.cert = *v;
  if (auto v = common::envString("RGPU_KEY")) c.key = *v;
  if (auto v = common::envString("RGPU_COMPRESSION")) c.compression = *v;
  if (auto v = common::envString("RGPU_CONNECT_TIMEOUT_MS")) c.connect_timeout_ms = std::atoi(v->c_str());
  if (c.connect_timeout_ms <= 0) c.connect_timeout_ms = 10000;
  return c;
}

std::string describeSource(const ClientConfig& cfg) {
  if (!cfg.source.empty()) return "config " + cfg.source;
  return "no config file ($RGPU_CONFIG, ~/.config/rgpu/client.toml and /etc/rgpu/client.toml are absent)";
}

}  // namespace rgpu::client
