#include "server/daemon/preauth_guard.h"

namespace rgpu::server {

uint64_t PreAuthGuard::admit(const std::string& address, Evict evict_fn) {
  // Per address first: a flood from one address displaces its own.
  if (limits_.per_address > 0) {
    while (countFrom(address) >= limits_.per_address) {
      auto it = order_.begin();
      while (it != order_.end() && it->address != address) ++it;
      if (it == order_.end()) break;
      evict(it);
    }
  }
  while (limits_.total > 0 && order_.size() >= limits_.total) evict(order_.begin());
  uint64_t id = next_id_++;
  order_.push_back({id, address, std::move(evict_fn)});
  by_id_[id] = std::prev(order_.end());
  ++per_address_[address];
  return id;
}

void PreAuthGuard::rebind(uint64_t id, Evict evict_fn) {
  auto it = by_id_.find(id);
  if (it != by_id_.end()) it->second->evict = std::move(evict_fn);
}

void PreAuthGuard::forget(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  Order::iterator e = it->second;
  if (--per_address_[e->address] == 0) per_address_.erase(e->address);
  by_id_.erase(it);
  order_.erase(e);
}

bool PreAuthGuard::evictOldest() {
  if (order_.empty()) return false;
  evict(order_.begin());
  return true;
}

size_t PreAuthGuard::countFrom(const std::string& address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

void PreAuthGuard::evict(Order::iterator it) {
  Evict fn = std::move(it->evict);
  forget(it->id);  // first: `fn` may close what leads back here
  ++evicted_;
  if (fn) fn();
}

}  // namespace rgpu::server
