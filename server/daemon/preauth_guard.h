// The daemon's bound on connections that have not authenticated yet.
//
// Before a client has proved who it is, it costs the server: an accepted
// socket, then (after its first bytes) a worker process doing the TLS
// handshake. Anyone who reaches the port can open such connections, so
// their number is capped, over all peers (`total`) and per source address
// (`per_address`). A new connection past a cap evicts the oldest
// unauthenticated one of that address (or, for the total, of any address):
// the slowest handshakes go first, a client that authenticates within
// milliseconds is practically never the oldest, and a flood only ever
// displaces itself.
//
// An entry leaves the guard when its connection authenticates, closes or its
// worker exits (forget), or when it is evicted (its Evict runs then, once).
// Not thread-safe: the daemon's io thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <string>

namespace rgpu::server {

class PreAuthGuard {
 public:
  struct Limits {
    uint32_t total = 128;
    uint32_t per_address = 32;
  };
  using Evict = std::function<void()>;

  explicit PreAuthGuard(Limits limits) : limits_(limits) {}

  // A new connection from `address`: first evicts what the caps demand,
  // then counts this one. Returns its id (never 0).
  uint64_t admit(const std::string& address, Evict evict);
  // How `id` is evicted from now on (its socket became a worker). No-op for an unknown id.
  void rebind(uint64_t id, Evict evict);
  // `id` no longer counts. No-op for an unknown or evicted id.
  void forget(uint64_t id);
  // Evicts the oldest entry, if any (the daemon ran out of descriptors).
  bool evictOldest();

  size_t count() const { return order_.size(); }
  size_t countFrom(const std::string& address) const;
  uint64_t evicted() const { return evicted_; }

 private:
  struct Entry {
    uint64_t id;
    std::string address;
    Evict evict;
  };
  using Order = std::list<Entry>;  // oldest first
  void evict(Order::iterator it);

  Limits limits_;
  Order order_;
  std::map<uint64_t, Order::iterator> by_id_;
  std::map<std::string, uint32_t> per_address_;
  uint64_t next_id_ = 1;
  uint64_t evicted_ = 0;
};

}  // namespace rgpu::server
