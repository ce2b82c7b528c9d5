#include "server/cluster/etcd_client.h"

#include <openssl/evp.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace rgpu::server::cluster {

using json = nlohmann::json;
using asio::ip::tcp;

namespace {

std::string base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> unbase64(const std::string& in) {
  if (in.size() % 4) return Status(err::kInvalidValue, "etcd sent malformed base64");
  std::string out(in.size() / 4 * 3 + 1, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  if (n < 0) return Status(err::kInvalidValue, "etcd sent malformed base64");
  size_t len = static_cast<size_t>(n);
  for (size_t i = in.size(); i > 0 && in[i - 1] == '='; --i) --len;  // EVP_DecodeBlock counts padding as zeros
  out.resize(len);
  return out;
}

// etcd's int64s are JSON strings; absent fields are 0.
int64_t int64Of(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_string()) return std::strtoll(it->get<std::string>().c_str(), nullptr, 10);
  if (it->is_number_integer()) return it->get<int64_t>();
  return 0;
}

struct Endpoint {
  bool tls = false;
  std::string host;
  uint16_t port = 0;
  std::string text;
};

Result<Endpoint> parseEndpoint(const std::string& s) {
  Endpoint e;
  e.text = s;
  std::string rest = s;
  if (rest.rfind("https://", 0) == 0) e.tls = true, rest = rest.substr(8);
  else if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  else return Status(err::kInvalidValue, "etcd endpoint '" + s + "' is not http://host:port or https://host:port");
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return Status(err::kInvalidValue, "etcd endpoint '" + s + "' names no port");
  e.host = rest.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') e.host = e.host.substr(1, e.host.size() - 2);
  long port = std::strtol(rest.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) return Status(err::kInvalidValue, "etcd endpoint '" + s + "' has a bad port");
  e.port = static_cast<uint16_t>(port);
  return e;
}

struct HttpReply {
  int status = 0;
  std::string body;
};

// Splits a whole HTTP/1.1 response (read to the connection's end) into its
// status and body, undoing chunked transfer encoding.
Result<HttpReply> parseResponse(const std::string& raw) {
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos)
    return Status(err::kUnknown, "etcd's answer is not HTTP");
  HttpReply r;
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  std::string head = raw.substr(0, head_end);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string body = raw.substr(head_end + 4);
  if (head.find("transfer-encoding: chunked") == std::string::npos) {
    r.body = std::move(body);
    return r;
  }
  size_t at = 0;
  for (;;) {
    size_t eol = body.find("\r\n", at);
    if (eol == std::string::npos) break;  // cut short: what came is what we have
    size_t n = std::strtoul(body.c_str() + at, nullptr, 16);
    if (n == 0) break;
    if (eol + 2 + n > body.size()) return Status(err::kUnknown, "etcd's chunked answer was cut short");
    r.body.append(body, eol + 2, n);
    at = eol + 2 + n + 2;
  }
  return r;
}

}  // namespace

struct EtcdClient::Impl {
  EtcdOptions options;
  std::vector<Endpoint> endpoints;
  size_t current = 0;
  std::string last;
  std::unique_ptr<asio::ssl::context> ssl;

  // One POST on one endpoint, all of it within the timeout.
  Result<HttpReply> post(const Endpoint& ep, const std::string& path, const std::string& body) {
    asio::io_context io;
    std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + ep.host + ":" + std::to_string(ep.port) +
                          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\nConnection: close\r\n\r\n" + body;
    std::string raw;
    std::error_code failure;
    bool done = false;
    tcp::resolver resolver(io);
    tcp::socket plain(io);
    std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
    if (ep.tls) {
      if (!ssl) return Status(err::kInvalidValue, "etcd endpoint " + ep.text + " is https but no [cluster] tls_ca is set");
      tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(plain, *ssl);
      SSL_set_tlsext_host_name(tls->native_handle(), ep.host.c_str());
      tls->set_verify_callback(asio::ssl::host_name_verification(ep.host));
    }
    std::array<char, 16384> buf;
    auto finish = [&](std::error_code ec) {
      failure = ec;
      done = true;
    };
    std::function<void()> readMore = [&] {
      auto onRead = [&](std::error_code ec, size_t n) {
        raw.append(buf.data(), n);
        if (raw.size() > kMaxEtcdResponseBytes) return finish(asio::error::message_size);
        if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) return finish({});
        if (ec) return finish(ec);
        readMore();
      };
      if (tls) tls->async_read_some(asio::buffer(buf), onRead);
      else plain.async_read_some(asio::buffer(buf), onRead);
    };
    auto send = [&] {
      auto onWritten = [&](std::error_code ec, size_t) {
        if (ec) return finish(ec);
        readMore();
      };
      if (tls) asio::async_write(*tls, asio::buffer(request), onWritten);
      else asio::async_write(plain, asio::buffer(request), onWritten);
    };
    resolver.async_resolve(ep.host, std::to_string(ep.port), [&](std::error_code ec, tcp::resolver::results_type rs) {
      if (ec) return finish(ec);
      asio::async_connect(plain, rs, [&](std::error_code ec2, const tcp::endpoint&) {
        if (ec2) return finish(ec2);
        if (!tls) return send();
        tls->async_handshake(asio::ssl::stream_base::client, [&](std::error_code ec3) {
          if (ec3) return finish(ec3);
          send();
        });
      });
    });
    io.run_for(options.timeout);
    if (!done) return Status(err::kSystemNotReady, "etcd at " + ep.text + " did not answer within " +
                                                std::to_string(options.timeout.count()) + " ms");
    if (failure) return Status(err::kUnknown, "etcd at " + ep.text + ": " + failure.message());
    return parseResponse(raw);
  }

  // A call on the first endpoint that answers, from the one that answered last.
  Result<json> call(const std::string& path, const json& body) {
    const std::string text = body.dump();
    std::string errors;
    for (size_t tried = 0; tried < endpoints.size(); ++tried) {
      const Endpoint& ep = endpoints[(current + tried) % endpoints.size()];
      auto r = post(ep, path, text);
      if (!r) {
        errors += (errors.empty() ? "" : "; ") + r.status().message();
        continue;
      }
      current = (current + tried) % endpoints.size();
      last = ep.text;
      json j = json::parse(r->body, nullptr, false);
      if (j.is_discarded()) return Status(err::kUnknown, "etcd at " + ep.text + " answered " + path + " with non-JSON");
      if (r->status != 200) {
        std::string msg = j.is_object() && j.contains("message") && j["message"].is_string()
                              ? j["message"].get<std::string>() : "HTTP " + std::to_string(r->status);
        // gRPC's NOT_FOUND (5): a lease etcd does not have.
        const int code = j.is_object() && j.contains("code") && j["code"].is_number_integer() ? j["code"].get<int>() : 0;
        return Status(code == 5 ? err::kNotFound : err::kUnknown, "etcd " + path + ": " + msg);
      }
      return j;
    }
    return Status(err::kSystemNotReady, "no etcd endpoint answered: " + errors);
  }
};

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::create(const EtcdOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.endpoints.empty()) return Status(err::kInvalidValue, "no etcd endpoints");
  bool any_tls = false;
  for (const auto& s : options.endpoints) {
    auto e = parseEndpoint(s);
    if (!e) return e.status();
    any_tls |= e->tls;
    impl->endpoints.push_back(*e);
  }
  if (any_tls && !options.ca_file.empty()) {
    try {
      impl->ssl = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
      impl->ssl->set_verify_mode(asio::ssl::verify_peer);
      impl->ssl->load_verify_file(options.ca_file);
      if (!options.cert_file.empty()) {
        impl->ssl->use_certificate_chain_file(options.cert_file);
        impl->ssl->use_private_key_file(options.key_file, asio::ssl::context::pem);
      }
    } catch (const std::exception& e) {
      return Status(err::kInvalidValue, std::string("etcd TLS: ") + e.what());
    }
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

const std::string& EtcdClient::endpoint() const { return impl_->last; }

Result<int64_t> EtcdClient::grantLease(int64_t ttl_s) {
  auto j = impl_->call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}});
  if (!j) return j.status();
  int64_t id = int64Of(*j, "ID");
  if (id == 0) return Status(err::kUnknown, "etcd granted no lease");
  return id;
}

Result<int64_t> EtcdClient::keepAlive(int64_t lease) {
  auto j = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}});
  if (!j) return j.status();
  // A stream of results; this one request gets one.
  const json& r = j->contains("result") ? (*j)["result"] : *j;
  return r.is_object() ? int64Of(r, "TTL") : 0;
}

Status EtcdClient::revoke(int64_t lease) {
  // etcd 3.4 serves it at /v3/kv/lease/revoke, 3.5 at /v3/lease/revoke.
  auto j = impl_->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
  if (!j && j.status().code() != err::kNotFound) j = impl_->call("/v3/kv/lease/revoke", {{"ID", std::to_string(lease)}});
  if (!j && j.status().code() != err::kNotFound) return j.status();
  return Status::ok();
}

Status EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body = {{"key", base64(key)}, {"value", base64(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  auto j = impl_->call("/v3/kv/put", body);
  return j ? Status::ok() : j.status();
}

Result<std::vector<EtcdKv>> EtcdClient::range(const std::string& key, bool prefix) {
  json body = {{"key", base64(key)}};
  if (prefix) body["range_end"] = base64(prefixEnd(key));
  auto j = impl_->call("/v3/kv/range", body);
  if (!j) return j.status();
  std::vector<EtcdKv> out;
  if (!j->contains("kvs")) return out;
  if (!(*j)["kvs"].is_array()) return Status(err::kUnknown, "etcd's range answer has no list of keys");
  for (const auto& kv : (*j)["kvs"]) {
    if (!kv.is_object() || !kv.contains("key") || !kv["key"].is_string())
      return Status(err::kUnknown, "etcd's range answer has a key that is not a string");
    EtcdKv e;
    auto k = unbase64(kv["key"].get<std::string>());
    if (!k) return k.status();
    e.key = std::move(*k);
    if (kv.contains("value") && kv["value"].is_string()) {
      auto v = unbase64(kv["value"].get<std::string>());
      if (!v) return v.status();
      e.value = std::move(*v);
    }
    e.lease = int64Of(kv, "lease");
    e.mod_revision = int64Of(kv, "mod_revision");
    e.version = int64Of(kv, "version");
    out.push_back(std::move(e));
  }
  return out;
}

Status EtcdClient::erase(const std::string& key, bool prefix) {
  json body = {{"key", base64(key)}};
  if (prefix) body["range_end"] = base64(prefixEnd(key));
  auto j = impl_->call("/v3/kv/deleterange", body);
  return j ? Status::ok() : j.status();
}

namespace {
json opsJson(const std::vector<EtcdOp>& ops) {
  json out = json::array();
  for (const auto& op : ops) {
    if (op.kind == EtcdOp::kPut) {
      json p = {{"key", base64(op.key)}, {"value", base64(op.value)}};
      if (op.lease) p["lease"] = std::to_string(op.lease);
      out.push_back({{"request_put", p}});
    } else {
      out.push_back({{"request_delete_range", {{"key", base64(op.key)}}}});
    }
  }
  return out;
}
}  // namespace

Result<bool> EtcdClient::putIfAbsent(const std::string& key, const std::vector<EtcdOp>& ops) {
  return putIfVersion(key, 0, ops);
}

Result<bool> EtcdClient::putIfVersion(const std::string& key, int64_t version, const std::vector<EtcdOp>& ops) {
  json body = {{"compare", json::array({{{"key", base64(key)}, {"target", "VERSION"}, {"result", "EQUAL"},
                                          {"version", std::to_string(version)}}})},
               {"success", opsJson(ops)}};
  auto j = impl_->call("/v3/kv/txn", body);
  if (!j) return j.status();
  return j->value("succeeded", false);
}

Result<bool> EtcdClient::putIfLease(const std::string& key, int64_t lease, const std::vector<EtcdOp>& ops) {
  json body = {{"compare", json::array({{{"key", base64(key)}, {"target", "LEASE"}, {"result", "EQUAL"},
                                          {"lease", std::to_string(lease)}}})},
               {"success", opsJson(ops)}};
  auto j = impl_->call("/v3/kv/txn", body);
  if (!j) return j.status();
  return j->value("succeeded", false);
}

std::string prefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace rgpu::server::cluster
