#include "server/pool/pool_service.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "server/pool/fd_passing.h"

namespace rgpu::server {
namespace {
constexpr size_t kMaxControlBytes = 64 * 1024;  // worker -> daemon: small requests only

std::string errorReply(const Status& s) { return joinFields({"err", std::to_string(s.code()), s.message()}); }
}  // namespace

PoolService::PoolService(asio::io_context& io, PoolManager& pool, HealthFn health, GateTableOwner* gates)
    : io_(io), pool_(pool), health_(std::move(health)), gates_(gates), timer_(io) {}

void PoolService::placed(uint64_t session, Placement p) {
  if (gates_) {
    p.gate_slot = gates_->assign(session, p.devices, static_cast<int>(p.priority), p.weight);
    if (p.gate_slot < 0) RGPU_LOG_WARN("session {}: launch gate table full; no priorities or weights for it", session);
    else slots_[session] = p.gate_slot;
  }
  // The session's own launch gate page goes to its worker alone, with the placement.
  replyPlacement(session, p, gates_ && p.gate_slot >= 0 ? gates_->activityFd(p.gate_slot) : -1);
}

void PoolService::shutdown() {
  for (uint64_t session : pool_.queuedSessions()) {
    pool_.end(session);
    reply(session, errorReply(Status(err::kDevicesUnavailable, "rgpu-server is shutting down")));
  }
  timer_.cancel();
}

void PoolService::policyChanged() {
  if (gates_)
    for (auto& [session, slot] : slots_)
      if (auto p = pool_.placementOf(session)) gates_->update(slot, static_cast<int>(p->priority), p->weight);
  decideQueued();
}

void PoolService::attach(uint64_t session, int fd) {
  Worker w;
  w.sock = std::make_unique<asio::local::datagram_protocol::socket>(io_, asio::local::datagram_protocol(), fd);
  w.buf.resize(kMaxControlBytes);
  workers_[session] = std::move(w);
  receive(session);
}

void PoolService::replaceWorker(uint64_t session, int fd) {
  if (auto it = workers_.find(session); it != workers_.end()) {
    asio::error_code ignored;
    it->second.sock->close(ignored);
    workers_.erase(it);
  }
  pool_.moved(session);
  rejoining_.insert(session);
  attach(session, fd);
}

Result<Placement> PoolService::admitMoved(uint64_t session, const ClientInfo& who, const std::vector<uint64_t>& memory,
                                         uint32_t min_cc, uint32_t migrations) {
  DeviceRequest req;
  req.count = static_cast<uint32_t>(memory.size());
  for (uint64_t m : memory) req.min_memory = std::max(req.min_memory, m);
  req.min_cc = min_cc;
  req.no_redirect = true;
  auto d = pool_.admit(session, who, req, PoolManager::Clock::now());
  if (!d) {
    (void)pool_.end(session);  // out of the queue: a move does not wait
    return Status(err::kDevicesUnavailable, "no device here fits it now (it was queued)");
  }
  if (!*d) return d->status();
  Placement p = **d;
  for (size_t i = 0; i < memory.size(); ++i)
    if (memory[i])
      if (Status s = pool_.reserve(session, p.devices[i], memory[i], true); !s) {
        (void)pool_.end(session);
        return s;
      }
  pool_.setMigrations(session, migrations + 1);
  identity_[session] = who.user;
  return p;
}

void PoolService::adoptMoved(uint64_t session, int fd) {
  attach(session, fd);
  resumable_.insert(session);
  rejoining_.insert(session);
  auto p = pool_.placementOf(session);
  auto user = identity_.find(session);
  if (!p || user == identity_.end()) return;
  if (const uint32_t max = acquire_ ? pool_.maxSessions(user->second) : 0) takeMovedSlot(session, user->second, max, 20);
}

void PoolService::takeMovedSlot(uint64_t session, const std::string& user, uint32_t max, int tries) {
  acquire_(user, max, session, [this, session, user, max, tries](Status s, bool checked) {
    asio::post(io_, [this, session, user, max, tries, s, checked] {
      if (!pool_.placementOf(session)) {
        if (release_) release_(session);  // it ended meanwhile
        return;
      }
      if (s || !checked) return;
      if (tries <= 0) {
        RGPU_LOG_WARN("session {}: moved here, but none of user '{}''s {} pool-wide session slot(s) came free; it runs "
                      "without one", session, user, max);
        return;
      }
      auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(250));
      t->async_wait([this, t, session, user, max, tries](const asio::error_code& ec) {
        if (!ec) takeMovedSlot(session, user, max, tries - 1);
      });
    });
  });
}

void PoolService::dropMoved(uint64_t session) {
  (void)pool_.end(session);
  identity_.erase(session);
  rejoining_.erase(session);
  resumable_.erase(session);
  trimGrants();
  decideQueued();
}

void PoolService::movedAway(uint64_t session, const std::string& member) {
  end_reasons_[session] = "moved to member '" + member + "'";
  detach(session);
}

void PoolService::detach(uint64_t session, const std::string& exit) {
  auto record = pool_.end(session);
  std::string reason = exit;
  if (auto it = end_reasons_.find(session); it != end_reasons_.end()) {
    reason = it->second;
    end_reasons_.erase(it);
  }
  if (record && on_ended_) on_ended_(*record, reason);
  slot_waiting_.erase(session);
  if (release_) release_(session);
  identity_.erase(session);
  rejoining_.erase(session);
  resumable_.erase(session);
  if (auto it = slots_.find(session); it != slots_.end()) {
    if (gates_) gates_->clear(it->second);
    slots_.erase(it);
  }
  if (auto it = workers_.find(session); it != workers_.end()) {
    asio::error_code ignored;
    it->second.sock->close(ignored);
    workers_.erase(it);
  }
  trimGrants();
  decideQueued();
}

void PoolService::reserveChecked(uint64_t session, int device, uint64_t bytes) {
  const std::string user = pool_.poolQuotaOf(session).first;
  if (grant_acquire_ && !user.empty() && (grant_waiting_.count(user) || pool_.grantShortfall(session, bytes))) {
    grant_waiting_[user].push_back({session, device, bytes});
    return askGrant(user);
  }
  Status s = pool_.reserve(session, device, bytes);
  reply(session, s ? "ok" : errorReply(s));
}

void PoolService::askGrant(const std::string& user) {
  auto q = grant_waiting_.find(user);
  if (q == grant_waiting_.end() || q->second.empty() || grant_asking_.count(user)) return;
  const GrantWait& w = q->second.front();
  const uint64_t quota = pool_.poolQuotaOf(w.session).second;
  const uint64_t shortfall = pool_.grantShortfall(w.session, w.bytes);
  if (!quota || !shortfall) return grantDecided(user, Status::ok(), 0, true);  // fits now (or is gone)
  const uint64_t slice = poolQuotaSlice(quota);
  const uint64_t want = shortfall > UINT64_MAX - slice ? shortfall : (shortfall + slice - 1) / slice * slice;
  grant_asking_.insert(user);
  grant_acquire_(user, quota, shortfall, want, [this, user](Status s, uint64_t granted, bool checked) {
    asio::post(io_, [this, user, s, granted, checked] {
      grant_asking_.erase(user);
      grantDecided(user, s, granted, checked);
    });
  });
}

void PoolService::grantDecided(const std::string& user, const Status& s, uint64_t granted, bool checked) {
  if (checked && s) pool_.addGrant(user, granted);
  if (!checked)
    common::logOnce("pool-quota", "pool-wide pool_memory_quota checked on this member alone: the pool's etcd is "
                                  "unreachable");
  auto q = grant_waiting_.find(user);
  bool first = true;
  while (q != grant_waiting_.end() && !q->second.empty()) {
    const GrantWait w = q->second.front();
    Status r;
    if (!checked) r = pool_.reserve(w.session, w.device, w.bytes, true);
    else if (!pool_.grantShortfall(w.session, w.bytes)) r = pool_.reserve(w.session, w.device, w.bytes);
    else if (first && !s) r = s;  // the pool had too little left for it
    else break;                   // needs more: ask again
    first = false;
    q->second.pop_front();
    if (!r) RGPU_LOG_INFO("session {}: {}", w.session, r.message());
    reply(w.session, r ? "ok" : errorReply(r));
  }
  if (q != grant_waiting_.end() && q->second.empty()) grant_waiting_.erase(q);
  askGrant(user);
  trimGrants();
}

void PoolService::trimGrants() {
  if (!grant_hold_) return;
  for (auto& [user, keep] : pool_.trimGrants(grant_asking_)) grant_hold_(user, keep);
}

void PoolService::receive(uint64_t session) {
  auto it = workers_.find(session);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  w.sock->async_receive(asio::buffer(w.buf), [this, session](const asio::error_code& ec, size_t n) {
    auto it = workers_.find(session);
    if (ec || it == workers_.end()) return;  // closed: detach() follows the worker's exit
    handle(session, std::string(it->second.buf.data(), n));
    receive(session);
  });
}

void PoolService::reply(uint64_t session, const std::string& msg, int fd) {
  auto it = workers_.find(session);
  if (it == workers_.end()) return;
  if (fd >= 0) {
    if (!sendWithFd(it->second.sock->native_handle(), msg, fd))
      RGPU_LOG_DEBUG("session {}: control reply not sent: {}", session, std::strerror(errno));
    return;
  }
  asio::error_code ec;
  it->second.sock->send(asio::buffer(msg), 0, ec);
  if (ec) RGPU_LOG_DEBUG("session {}: control reply not sent: {}", session, ec.message());
}

void PoolService::handle(uint64_t session, const std::string& msg) {
  auto f = splitFields(msg, 16);
  const std::string& verb = f[0];
  auto num = [&](size_t i) { return i < f.size() ? std::strtoull(f[i].c_str(), nullptr, 10) : 0ull; };
  if (verb == "auth" && f.size() >= 6) {
    if (identity_.count(session)) return reply(session, errorReply(Status(err::kNotPermitted, "already bound")));
    ClientCredential c{f[2], f[3], fromHex(f[4]), fromHex(f[5])};
    Result<std::string> user = authenticate_ ? authenticate_(c)
                                             : Result<std::string>(Status(err::kNotPermitted, "no authenticator"));
    if (user && *user != f[1]) user = Status(err::kNotPermitted, "the credential belongs to user '" + *user + "'");
    if (!user) {
      RGPU_LOG_WARN("session {}: its worker's claim to serve user '{}' refused: {}", session, f[1], user.status().message());
      return reply(session, errorReply(user.status()));
    }
    identity_[session] = *user;
    if (on_authenticated_) on_authenticated_(session);
    return reply(session, "ok");
  }
  // Everything else acts for the user the session is bound to.
  auto bound = identity_.find(session);
  if ((verb == "admit" || verb == "status" || verb == "move") && bound == identity_.end()) {
    RGPU_LOG_WARN("session {}: '{}' from a worker that proved no identity; refused", session, verb);
    return reply(session, errorReply(Status(err::kNotPermitted, "no identity bound to this session")));
  }
  if (verb == "admit" && f.size() >= 10) {
    ClientInfo who{bound->second, f[2], f[3], static_cast<uint32_t>(num(4))};
    DeviceRequest req;
    req.count = static_cast<uint32_t>(num(5));
    req.min_memory = num(6);
    req.min_cc = static_cast<uint32_t>(num(7));
    req.model = f[8];
    req.wait_ms = static_cast<uint32_t>(num(9));
    req.no_redirect = f.size() > 10 && f[10] == "1";
    if (!req.no_redirect && redirect_) {
      PoolAnswer a = redirect_(who, req);
      if (a.redirect) return sendElsewhere(session, who, *a.redirect);
      req.elsewhere = a.elsewhere;
    }
    if (const uint32_t max = acquire_ ? pool_.maxSessions(who.user) : 0) {
      // A pool-wide session slot first (decided on the cluster member's thread).
      const auto now = PoolManager::Clock::now();
      slot_waiting_[session] = {who, req, now, now + pool_.admissionWait(req.wait_ms), false};
      return askSlot(session, max);
    }
    admitHere(session, who, req);
  } else if (verb == "move" && f.size() >= 3) {
    // Who may move sessions is the daemon's policy: admins.
    if (!pool_.isAdmin(bound->second)) {
      RGPU_LOG_WARN("session {}: user '{}' asked to move session {}; only admins may", session, bound->second, f[1]);
      return reply(session, errorReply(Status(err::kNotPermitted, "only admins move sessions")));
    }
    if (!mover_) return reply(session, errorReply(Status(err::kNotSupported, "this server does not move sessions")));
    mover_(num(1), f[2] == member_name_ ? std::string() : f[2], [this, session](Result<std::string> r) {
      reply(session, r ? joinFields({"ok", *r}) : errorReply(r.status()));
    });
  } else if (verb == "resumable") {
    resumable_.insert(session);
  } else if (verb == "rejoin") {
    auto p = rejoining_.erase(session) ? pool_.placementOf(session) : std::nullopt;
    if (!p) return reply(session, errorReply(Status(err::kNotPermitted, "no moved session to rejoin")));
    // A slot of its own: the old worker sealed its page for itself alone.
    if (auto slot = slots_.find(session); slot != slots_.end()) {
      if (gates_) gates_->clear(slot->second);
      slots_.erase(slot);
    }
    p->gate_slot = -1;
    placed(session, *p);
  } else if (verb == "peer" && f.size() >= 3) {
    // Another session's gate page, read-only (only once its worker sealed it).
    if (!gates_ || !slots_.count(session)) return reply(session, errorReply(Status(err::kNotPermitted, "no gate slot")));
    auto fd = gates_->peerFd(static_cast<int>(num(1)), num(2));
    if (!fd) return reply(session, errorReply(fd.status()));
    reply(session, "ok", *fd);
    ::close(*fd);
  } else if (verb == "reserve" && f.size() >= 4) {
    if (f[3] == "1") return reserveChecked(session, static_cast<int>(num(1)), num(2));
    (void)pool_.reserve(session, static_cast<int>(num(1)), num(2));
  } else if (verb == "release" && f.size() >= 3) {
    pool_.release(session, static_cast<int>(num(1)), num(2));
    trimGrants();
    decideQueued();
  } else if (verb == "view" && f.size() >= 2) {
    auto [quota, used] = pool_.quotaView(session, static_cast<int>(num(1)));
    reply(session, joinFields({"ok", std::to_string(quota), std::to_string(used)}));
  } else if (verb == "status" && f.size() >= 2) {
    // Who may see everyone is the daemon's policy, not the worker's say.
    const std::string& user = bound->second;
    std::string body = encodePoolStatus(pool_.snapshot(PoolManager::Clock::now()), user, pool_.isAdmin(user),
                                        health_ ? health_() : std::vector<DeviceHealth>{});
    reply(session, std::string("ok") + kFieldSep + body);
  } else if (verb == "members") {
    if (!members_) return reply(session, errorReply(Status(err::kNotSupported, "this server is not a member of a pool "
                                                                               "([cluster] in server.toml)")));
    reply(session, std::string("ok") + kFieldSep + members_());
  } else if (verb == "usage" && f.size() >= 6) {
    pool_.usage(session, {num(1), num(2), num(3), num(4), num(5)});
  } else if (verb == "ended" && f.size() >= 2) {
    // The worker's word, kept short and printable: it goes into the accounting log.
    std::string why = f[1].substr(0, kMaxEndReason);
    for (char& c : why)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    end_reasons_[session] = why;
  } else {
    RGPU_LOG_WARN("session {}: malformed control message from its worker ({} bytes)", session, msg.size());
  }
}

void PoolService::admitHere(uint64_t session, const ClientInfo& who, const DeviceRequest& req) {
  auto d = pool_.admit(session, who, req, PoolManager::Clock::now());
  if (!d) {
    RGPU_LOG_INFO("session {}: user '{}' waits in the admission queue ({} waiting)", session, who.user, pool_.queued());
    decideQueued();
    return;
  }
  if (*d) {
    placed(session, **d);
  } else {
    RGPU_LOG_WARN("session {}: user '{}' refused: {}", session, who.user, d->status().message());
    if (release_) release_(session);
    reply(session, errorReply(d->status()));
  }
}

void PoolService::askSlot(uint64_t session, uint32_t max) {
  auto it = slot_waiting_.find(session);
  if (it == slot_waiting_.end() || it->second.asking) return;
  it->second.asking = true;
  acquire_(it->second.who.user, max, session, [this, session](Status s, bool checked) {
    asio::post(io_, [this, session, s, checked] { slotDecided(session, s, checked); });
  });
}

void PoolService::slotDecided(uint64_t session, const Status& s, bool checked) {
  auto it = slot_waiting_.find(session);
  if (it == slot_waiting_.end()) {  // the worker went meanwhile
    if (s && release_) release_(session);
    return;
  }
  SlotWait w = it->second;
  it->second.asking = false;
  if (s) {
    if (!checked) common::logOnce("pool-slots", "pool-wide max_sessions not checked: the pool's etcd is unreachable "
                                                "(each member's own max_sessions still holds)");
    slot_waiting_.erase(it);
    return admitHere(session, w.who, w.req);
  }
  const auto now = PoolManager::Clock::now();
  if (now >= w.deadline) {
    slot_waiting_.erase(it);
    RGPU_LOG_WARN("session {}: user '{}' refused: {}", session, w.who.user, s.message());
    return reply(session, errorReply(Status(s.code(), s.message() + " (waited " +
                                                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                             now - w.since).count()) +
                                                          " ms for a session of the pool to end)")));
  }
  // Asked again when the pool is read next (poolChanged).
}

void PoolService::sendElsewhere(uint64_t session, const ClientInfo& who, const Placement& p) {
  if (!p.span.empty()) {
    std::string parts;
    for (const auto& part : p.span)
      parts += (parts.empty() ? "" : ", ") + std::to_string(part.count) + " on '" + part.member + "' at " + part.address;
    RGPU_LOG_INFO("session {}: user '{}' placed by the pool on several members: {}", session, who.user, parts);
  } else {
    RGPU_LOG_INFO("session {}: user '{}' placed by the pool on member '{}' at {}", session, who.user, p.redirect_member,
                  p.redirect);
  }
  replyPlacement(session, p);
}

void PoolService::replyPlacement(uint64_t session, const Placement& p, int fd) {
  auto fields = placementFields(p);
  fields.insert(fields.begin(), "ok");
  reply(session, joinFields(fields), fd);
}

void PoolService::poolChanged() {
  for (auto& [session, w] : slot_waiting_)
    if (!w.asking) askSlot(session, pool_.maxSessions(w.who.user));
  if (!redirect_) return;
  for (const auto& q : pool_.queuedRequests()) {
    if (q.req.no_redirect) continue;
    PoolAnswer a = redirect_(q.who, q.req);
    if (!a.redirect) continue;
    pool_.end(q.session);  // out of this queue
    sendElsewhere(q.session, q.who, *a.redirect);
  }
}

void PoolService::decideQueued() {
  for (auto& [session, result] : pool_.retry(PoolManager::Clock::now())) {
    if (result) {
      placed(session, *result);
    } else {
      RGPU_LOG_WARN("session {}: admission refused: {}", session, result.status().message());
      reply(session, errorReply(result.status()));
    }
  }
  timer_.cancel();
  if (auto at = pool_.nextDeadline()) {
    timer_.expires_at(*at);
    timer_.async_wait([this](const asio::error_code& ec) {
      if (!ec) decideQueued();
    });
  }
}

}  // namespace rgpu::server
