// A small etcd v3 client over etcd's JSON gateway (HTTP/1.1 + JSON, keys
// and values base64, int64s as strings), for the pool's membership.
//
// Endpoints are tried in order: a call that cannot reach the one last used
// (connect, TLS or read failure, or its timeout) moves to the next and tries
// each once; the one that answered is used first from then on. An endpoint
// is "http://host:port" or "https://host:port" (TLS: the CA to verify etcd
// with, and a client certificate and key when etcd asks for one). Each call
// is one connection with `timeout` for all of it, so a dead or silent etcd
// costs at most `timeout` per endpoint, never a hang.
//
// What etcd answers is untrusted input like any other: responses larger than
// kMaxEtcdResponseBytes are refused, malformed JSON is an error, never a
// crash. Not thread-safe: one owner (ClusterMember's thread, or a test).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::server::cluster {

// The most bytes one etcd response may have (a range over the whole pool's keys).
inline constexpr size_t kMaxEtcdResponseBytes = 64u << 20;

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "http://127.0.0.1:2379", "https://etcd1:2379", ...
  std::string ca_file, cert_file, key_file;  // TLS (https endpoints)
  std::chrono::milliseconds timeout{2000};   // per endpoint, per call
};

struct EtcdKv {
  std::string key, value;
  int64_t lease = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;  // writes since the key was created
};

// One operation of a transaction's branch.
struct EtcdOp {
  enum Kind { kPut, kDelete } kind = kPut;
  std::string key, value;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  static Result<std::unique_ptr<EtcdClient>> create(const EtcdOptions& options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // A lease of `ttl_s` seconds: its id.
  Result<int64_t> grantLease(int64_t ttl_s);
  // Renews a lease: the seconds it now has; 0 when etcd no longer has it.
  Result<int64_t> keepAlive(int64_t lease);
  // Ends a lease and deletes its keys (a lease etcd no longer has: ok).
  Status revoke(int64_t lease);
  Status put(const std::string& key, const std::string& value, int64_t lease = 0);
  // The key, or (prefix) every key that starts with it, in key order.
  Result<std::vector<EtcdKv>> range(const std::string& key, bool prefix = false);
  Status erase(const std::string& key, bool prefix = false);
  // If `key` does not exist, runs `ops` (true); else nothing (false).
  Result<bool> putIfAbsent(const std::string& key, const std::vector<EtcdOp>& ops);
  // If `key` has been written `version` times since it was created (0: it
  // does not exist), runs `ops` (true); else nothing (false).
  Result<bool> putIfVersion(const std::string& key, int64_t version, const std::vector<EtcdOp>& ops);
  // If `key` is held by `lease`, runs `ops` (true); else nothing (false).
  Result<bool> putIfLease(const std::string& key, int64_t lease, const std::vector<EtcdOp>& ops);

  // The endpoint that answered last ("" before the first call).
  const std::string& endpoint() const;

 private:
  struct Impl;
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The end of the range of every key starting with `prefix` (etcd's range_end).
std::string prefixEnd(const std::string& prefix);

}  // namespace rgpu::server::cluster
