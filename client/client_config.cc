#include "client/client_config.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "common/config.h"
#include "protocol/frame.h"

namespace rgpu::client {

namespace {
// "auto" (-1) or 0..kMaxStripes.
Result<int> parseStripes(const std::string& v) {
  if (v == "auto") return -1;
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0 || n > static_cast<long>(protocol::kMaxStripes))
    return Status(err::kInvalidValue, "'" + v + "' is not \"auto\" or 0.." + std::to_string(protocol::kMaxStripes));
  return static_cast<int>(n);
}
}  // namespace

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
    // Every key read below, by table.
    static const common::KeySchema known = {
        {"", {"server", "server_name", "token", "compression", "log_level", "connect_timeout_ms", "dead_after_s",
              "resume", "insecure_plaintext", "resume_buffer", "stripes", "stripe_min_bytes", "request", "tls"}},
        {"request", {"devices", "min_memory", "min_compute_capability", "model", "wait_ms"}},
        {"tls", {"ca", "cert", "key"}}};
    c.unknown_keys = common::unknownKeys(tbl, known);
    c.server = tbl["server"].value_or(std::string());
    if (const auto* list = tbl["server"].as_array())  // members of a pool, tried in order
      for (const auto& s : *list)
        if (auto v = s.value<std::string>()) c.server += (c.server.empty() ? "" : ",") + *v;
    c.server_name = tbl["server_name"].value_or(std::string());
    c.token = tbl["token"].value_or(std::string());
    c.compression = tbl["compression"].value_or(c.compression);
    c.log_level = tbl["log_level"].value_or(c.log_level);
    c.connect_timeout_ms = tbl["connect_timeout_ms"].value_or(c.connect_timeout_ms);
    c.dead_after_s = tbl["dead_after_s"].value_or(c.dead_after_s);
    c.resume = tbl["resume"].value_or(c.resume);
    c.insecure_plaintext = tbl["insecure_plaintext"].value_or(c.insecure_plaintext);
    if (auto b = tbl["resume_buffer"].value<std::string>()) {
      auto bytes = common::parseSize(*b);
      if (!bytes) return Status(err::kInvalidValue, "config " + path + ": resume_buffer: " + bytes.status().message());
      c.resume_buffer = *bytes;
    }
    if (tbl.contains("stripes")) {
      auto n = parseStripes(tbl["stripes"].value<std::string>().value_or(
          std::to_string(tbl["stripes"].value<int64_t>().value_or(-2))));
      if (!n) return Status(err::kInvalidValue, "config " + path + ": stripes: " + n.status().message());
      c.stripes = *n;
    }
    if (auto b = tbl["stripe_min_bytes"].value<std::string>()) {
      auto bytes = common::parseSize(*b);
      if (!bytes || *bytes < (64u << 10))
        return Status(err::kInvalidValue, "config " + path + ": stripe_min_bytes: " +
                                              (bytes ? std::string("at least 64K") : bytes.status().message()));
      c.stripe_min_bytes = *bytes;
    }
    if (auto req = tbl["request"].as_table()) {
      auto where = "config " + path + ": request.";
      int64_t n = (*req)["devices"].value_or(int64_t{0});
      if (n < 0 || n > 1024) return Status(err::kInvalidValue, where + "devices must be 0..1024");
      c.request_devices = static_cast<uint32_t>(n);
      if (auto m = (*req)["min_memory"].value<std::string>()) {
        auto b = common::parseSize(*m);
        if (!b) return Status(err::kInvalidValue, where + "min_memory: " + b.status().message());
        c.request_min_memory = *b;
      }
      if (auto cc = (*req)["min_compute_capability"].value<std::string>()) {
        int major = 0, minor = 0;
        if (std::sscanf(cc->c_str(), "%d.%d", &major, &minor) != 2 || major < 0 || minor < 0 || minor > 9)
          return Status(err::kInvalidValue, where + "min_compute_capability must look like \"8.0\"");
        c.request_min_cc = static_cast<uint32_t>(major * 10 + minor);
      }
      c.request_model = (*req)["model"].value_or(std::string());
      int64_t w = (*req)["wait_ms"].value_or(int64_t{0});
      if (w < 0 || w > 86400000) return Status(err::kInvalidValue, where + "wait_ms must be 0..86400000");
      c.request_wait_ms = static_cast<uint32_t>(w);
    }
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
  if (auto v = common::envString("RGPU_DEVICES")) c.request_devices = static_cast<uint32_t>(std::atoi(v->c_str()));
  if (auto v = common::envString("RGPU_WAIT_MS")) c.request_wait_ms = static_cast<uint32_t>(std::atoi(v->c_str()));
  if (auto v = common::envString("RGPU_RESUME")) c.resume = *v != "0";
  if (auto v = common::envString("RGPU_INSECURE_PLAINTEXT")) c.insecure_plaintext = *v != "0";
  if (auto v = common::envString("RGPU_STRIPES")) {
    auto n = parseStripes(*v);
    if (!n) return Status(err::kInvalidValue, "RGPU_STRIPES: " + n.status().message());
    c.stripes = *n;
  }
  if (c.stripes < 0) c.stripes = static_cast<int>(std::min(std::max(std::thread::hardware_concurrency(), 1u), 8u)) - 1;
  // Below two of the largest frames the client could not make progress.
  c.resume_buffer = std::max<uint64_t>(c.resume_buffer, 128ull << 20);
  return c;
}

std::string describeSource(const ClientConfig& cfg) {
  if (!cfg.source.empty()) return "config " + cfg.source;
  return "no config file ($RGPU_CONFIG, ~/.config/rgpu/client.toml and /etc/rgpu/client.toml are absent)";
}

}  // namespace rgpu::client
