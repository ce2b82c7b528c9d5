#include "server/pool/pool_manager.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdio>

namespace rgpu::server {

std::string formatBytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

namespace {
bool glob(const std::string& pattern, const std::string& text) {
  return pattern.empty() || ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}
bool allDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
std::string ccText(uint32_t cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }
double seconds(PoolManager::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

PoolManager::PoolManager(std::vector<PoolDeviceInfo> devices, std::vector<UserEntry> users, PoolConfig cfg)
    : devices_(std::move(devices)) {
  default_user_.name = "anonymous";
  setPolicy(std::move(users), std::move(cfg));
}

void PoolManager::setPolicy(std::vector<UserEntry> users, PoolConfig cfg) {
  users_ = std::move(users);
  cfg_ = std::move(cfg);
  // Running sessions keep their devices; their compute share follows the policy.
  for (auto& [id, r] : running_) {
    const UserEntry& u = policyOf(r.who.user);
    r.placement.priority = u.priority;
    r.placement.weight = u.weight;
    r.placement.quota = u.memory_quota;
    r.placement.pool_quota = u.pool_memory_quota;
  }
}

void PoolManager::moved(uint64_t session) {
  if (auto it = running_.find(session); it != running_.end()) ++it->second.migrations;
}

std::optional<PoolManager::MoveInfo> PoolManager::moveInfo(uint64_t session) const {
  auto it = running_.find(session);
  if (it == running_.end()) return std::nullopt;
  MoveInfo m;
  m.who = it->second.who;
  for (int d : it->second.placement.devices) {
    auto mem = it->second.memory.find(d);
    m.memory.push_back(mem == it->second.memory.end() ? 0 : mem->second);
  }
  m.migrations = it->second.migrations;
  return m;
}

void PoolManager::setMigrations(uint64_t session, uint32_t n) {
  if (auto it = running_.find(session); it != running_.end()) it->second.migrations = n;
}

std::optional<Placement> PoolManager::placementOf(uint64_t session) const {
  auto it = running_.find(session);
  if (it == running_.end()) return std::nullopt;
  return it->second.placement;
}

const UserEntry& PoolManager::policyOf(const std::string& user) const {
  for (auto& u : users_)
    if (u.name == user) return u;
  return default_user_;
}

bool deviceEntryMatches(const std::string& e, int index, const PoolDeviceInfo& d) {
  if (allDigits(e)) return e.size() < 10 && std::stoul(e) == static_cast<unsigned long>(index);
  if (e.rfind("GPU-", 0) == 0) return d.uuid.rfind(e, 0) == 0;
  return glob(e, d.name);
}

bool PoolManager::allowed(const UserEntry& u, int device) const {
  if (u.devices.empty()) return true;
  for (auto& e : u.devices)
    if (deviceEntryMatches(e, device, devices_[device])) return true;
  return false;
}

bool PoolManager::matchesStatically(const DeviceRequest& r, int device) const {
  const PoolDeviceInfo& d = devices_[device];
  return d.cc >= r.min_cc && glob(r.model, d.name) && d.total >= r.min_memory;
}

uint64_t PoolManager::freeBytes(int device) const {
  uint64_t used = 0;
  for (auto& [id, s] : running_)
    if (auto it = s.memory.find(device); it != s.memory.end()) used += it->second;
  return used >= devices_[device].total ? 0 : devices_[device].total - used;
}

uint32_t PoolManager::sessionsOn(int device) const {
  uint32_t n = 0;
  for (auto& [id, s] : running_)
    n += std::count(s.placement.devices.begin(), s.placement.devices.end(), device) ? 1 : 0;
  return n;
}

uint32_t PoolManager::sessionsOf(const std::string& user) const {
  uint32_t n = 0;
  for (auto& [id, s] : running_) n += s.who.user == user ? 1 : 0;
  return n;
}

std::string PoolManager::describeFree(const DeviceRequest& req, const std::string& user) const {
  std::string asked = "asked for " + (req.count ? std::to_string(req.count) : std::string("all allowed")) +
                      " device(s)";
  if (req.min_memory) asked += " with " + formatBytes(req.min_memory) + " free";
  if (req.min_cc) asked += ", compute capability >= " + ccText(req.min_cc);
  if (!req.model.empty()) asked += ", model '" + req.model + "'";
  std::string now = "; now:";
  const UserEntry& u = policyOf(user);
  for (size_t i = 0; i < devices_.size(); ++i) {
    int d = static_cast<int>(i);
    now += " device " + std::to_string(i) + " (" + devices_[i].name + ", cc " + ccText(devices_[i].cc) + ") " +
           formatBytes(freeBytes(d)) + " free of " + formatBytes(devices_[i].total) + ", " +
           std::to_string(sessionsOn(d)) + " session(s)" + (allowed(u, d) ? "" : ", not allowed for " + user) + ";";
  }
  return asked + now;
}

Result<Placement> PoolManager::tryPlace(const ClientInfo& who, const DeviceRequest& req, bool* never) const {
  const UserEntry& u = policyOf(who.user);
  std::vector<int> candidates;  // allowed and statically matching
  for (size_t i = 0; i < devices_.size(); ++i)
    if (allowed(u, static_cast<int>(i)) && matchesStatically(req, static_cast<int>(i)))
      candidates.push_back(static_cast<int>(i));
  size_t want = req.count ? req.count : std::max<size_t>(candidates.size(), 1);
  if (candidates.size() < want) {
    *never = true;
    bool any_allowed = false;
    for (size_t i = 0; i < devices_.size(); ++i) any_allowed |= allowed(u, static_cast<int>(i));
    if (!any_allowed)
      return Status(err::kNotPermitted, "user '" + who.user + "' may not use any device of this server");
    return Status(err::kDevicesUnavailable, "no placement can ever satisfy this: " + describeFree(req, who.user));
  }
  *never = false;
  if (u.max_sessions && sessionsOf(who.user) >= u.max_sessions)
    return Status(err::kDevicesUnavailable, "user '" + who.user + "' has " + std::to_string(sessionsOf(who.user)) +
                                                " session(s), max_sessions = " + std::to_string(u.max_sessions));
  std::vector<int> fit;
  for (int d : candidates)
    if (freeBytes(d) >= req.min_memory) fit.push_back(d);
  if (fit.size() < want) return Status(err::kDevicesUnavailable, "no device fits: " + describeFree(req, who.user));
  // Least loaded first: fewest sessions, then most free memory; index breaks ties.
  std::stable_sort(fit.begin(), fit.end(), [&](int a, int b) {
    uint32_t sa = sessionsOn(a), sb = sessionsOn(b);
    if (sa != sb) return sa < sb;
    return freeBytes(a) > freeBytes(b);
  });
  fit.resize(want);
  if (req.count == 0) std::sort(fit.begin(), fit.end());  // "all": keep the host's order
  Placement p;
  p.devices = fit;
  p.quota = u.memory_quota;
  p.pool_quota = u.pool_memory_quota;
  p.priority = u.priority;
  p.weight = u.weight;
  p.mps_thread_percentage = u.mps_thread_percentage;
  return p;
}

std::vector<std::pair<std::string, std::string>> mpsEnvironment(const Placement& p) {
  std::vector<std::pair<std::string, std::string>> env;
  if (p.mps_thread_percentage)
    env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(p.mps_thread_percentage));
  if (p.quota) {
    std::string limits;
    uint64_t mib = std::max<uint64_t>(p.quota >> 20, 1);
    for (size_t i = 0; i < p.devices.size(); ++i)
      limits += (i ? "," : "") + std::to_string(i) + "=" + std::to_string(mib) + "M";
    env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", limits);
  }
  return env;
}

void PoolManager::start(uint64_t session, const ClientInfo& who, const Placement& p, Clock::time_point now,
                        Clock::time_point asked) {
  Running r;
  r.who = who;
  r.placement = p;
  r.since = now;
  r.held_at = r.started = clock_();
  running_[session] = std::move(r);
  auto& us = user_state_[who.user];
  us.admissions++;
  us.admission_wait_s += seconds(now - asked);
}

std::optional<Result<Placement>> PoolManager::admit(uint64_t session, const ClientInfo& who, const DeviceRequest& req,
                                                    Clock::time_point now) {
  bool never = false;
  Result<Placement> p = tryPlace(who, req, &never);
  if (p) {
    start(session, who, *p, now, now);
    return p;
  }
  const uint32_t wait = static_cast<uint32_t>(admissionWait(req.wait_ms).count());
  if (never && req.elsewhere && p.status().code() == err::kDevicesUnavailable) never = false;  // waits for that member
  if (never || wait == 0) {
    user_state_[who.user].refusals++;
    return p;
  }
  const UserEntry& u = policyOf(who.user);
  queue_.push_back({session, who, req, now, now + std::chrono::milliseconds(wait), u.priority, next_order_++});
  std::stable_sort(queue_.begin(), queue_.end(), [](const Pending& a, const Pending& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.order < b.order;
  });
  return std::nullopt;
}

std::vector<std::pair<uint64_t, Result<Placement>>> PoolManager::retry(Clock::time_point now) {
  std::vector<std::pair<uint64_t, Result<Placement>>> out;
  for (auto it = queue_.begin(); it != queue_.end();) {
    bool never = false;
    Result<Placement> p = tryPlace(it->who, it->req, &never);
    if (never && it->req.elsewhere && p.status().code() == err::kDevicesUnavailable) never = false;
    if (p) {
      start(it->session, it->who, *p, now, it->since);
      out.emplace_back(it->session, std::move(p));
      it = queue_.erase(it);
    } else if (never || now >= it->deadline) {
      user_state_[it->who.user].refusals++;
      std::string why = p.status().message() + " (waited " + std::to_string(static_cast<int>(seconds(now - it->since) * 1000)) +
                        " ms in the admission queue)";
      out.emplace_back(it->session, Status(p.status().code(), why));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::optional<PoolManager::Clock::time_point> PoolManager::nextDeadline() const {
  std::optional<Clock::time_point> t;
  for (auto& q : queue_)
    if (!t || q.deadline < *t) t = q.deadline;
  return t;
}

Status PoolManager::reserve(uint64_t session, int device, uint64_t bytes) {
  return reserve(session, device, bytes, false);
}

Status PoolManager::reserve(uint64_t session, int device, uint64_t bytes, bool pool_unchecked) {
  auto it = running_.find(session);
  if (it == running_.end()) return Status(err::kNotPermitted, "session " + std::to_string(session) + " is not admitted");
  Running& r = it->second;
  if (std::find(r.placement.devices.begin(), r.placement.devices.end(), device) == r.placement.devices.end())
    return Status(err::kInvalidDevice, "device " + std::to_string(device) + " is not placed for this session");
  auto& used = user_state_[r.who.user].used[device];
  // What could not be counted without wrapping (no device has 2^64 bytes).
  if (bytes > UINT64_MAX - used || bytes > UINT64_MAX - r.memory[device])
    return Status(err::kMemoryAllocation, "asked " + std::to_string(bytes) + " bytes on device " +
                                              std::to_string(device) + ", more than can be held");
  uint64_t quota = policyOf(r.who.user).memory_quota;  // the current policy: a reload applies at once
  if (quota && (bytes > quota || used > quota - bytes))
    return Status(err::kMemoryAllocation, "memory quota of user '" + r.who.user + "' on device " +
                                              std::to_string(device) + " exceeded: " + formatBytes(used) + " of " +
                                              formatBytes(quota) + " in use, asked " + formatBytes(bytes));
  if (const uint64_t pq = policyOf(r.who.user).pool_memory_quota) {
    const uint64_t total = poolUsed(r.who.user);
    const bool share = pool_grants_ && !pool_unchecked;
    const uint64_t limit = share ? std::min(pq, user_state_[r.who.user].granted) : pq;
    if (bytes > limit || total > limit - bytes)
      return Status(err::kMemoryAllocation,
                    "pool memory quota of user '" + r.who.user + "' exceeded: " + formatBytes(total) + " in use on " +
                        (share ? "this member, which holds " + formatBytes(limit) + " of the pool's " + formatBytes(pq)
                               : "this server, of " + formatBytes(pq)) +
                        ", asked " + formatBytes(bytes));
  }
  used += bytes;
  r.memory[device] += bytes;
  accountMemory(r, bytes);
  return Status::ok();
}

void PoolManager::accountMemory(Running& r, uint64_t bytes, bool freed) {
  const Clock::time_point now = clock_();
  if (now > r.held_at) r.byte_seconds += static_cast<double>(r.held) * seconds(now - r.held_at);
  r.held_at = std::max(now, r.held_at);
  r.held = freed ? r.held - std::min(r.held, bytes) : r.held + std::min(bytes, UINT64_MAX - r.held);
  r.peak = std::max(r.peak, r.held);
}

std::pair<std::string, uint64_t> PoolManager::poolQuotaOf(uint64_t session) const {
  auto it = running_.find(session);
  if (it == running_.end()) return {"", 0};
  return {it->second.who.user, policyOf(it->second.who.user).pool_memory_quota};
}

uint64_t PoolManager::poolUsed(const std::string& user) const {
  auto us = user_state_.find(user);
  if (us == user_state_.end()) return 0;
  uint64_t total = 0;
  for (auto& [d, b] : us->second.used) total += b;
  return total;
}

uint64_t PoolManager::granted(const std::string& user) const {
  auto us = user_state_.find(user);
  return us == user_state_.end() ? 0 : us->second.granted;
}

uint64_t PoolManager::grantShortfall(uint64_t session, uint64_t bytes) const {
  if (!pool_grants_) return 0;
  auto [user, pq] = poolQuotaOf(session);
  if (!pq) return 0;
  const uint64_t need = poolUsed(user) + bytes, have = granted(user);
  return need > have ? need - have : 0;
}

void PoolManager::addGrant(const std::string& user, uint64_t bytes) { user_state_[user].granted += bytes; }

std::vector<std::pair<std::string, uint64_t>> PoolManager::trimGrants(const std::set<std::string>& busy) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [user, st] : user_state_) {
    if (!st.granted || busy.count(user)) continue;
    const uint64_t pq = policyOf(user).pool_memory_quota;
    const uint64_t used = poolUsed(user), keep = pq ? used + poolQuotaSlice(pq) : used;
    if (st.granted > keep) {
      st.granted = used && pq ? keep : 0;  // a user with nothing here keeps no share
      out.emplace_back(user, st.granted);
    }
  }
  return out;
}

void PoolManager::release(uint64_t session, int device, uint64_t bytes) {
  auto it = running_.find(session);
  if (it == running_.end()) return;
  uint64_t& mine = it->second.memory[device];
  bytes = std::min(bytes, mine);
  mine -= bytes;
  uint64_t& used = user_state_[it->second.who.user].used[device];
  used -= std::min(bytes, used);
  accountMemory(it->second, bytes, true);
}

std::pair<uint64_t, uint64_t> PoolManager::quotaView(uint64_t session, int device) const {
  auto it = running_.find(session);
  if (it == running_.end()) return {0, 0};
  auto us = user_state_.find(it->second.who.user);
  uint64_t used = 0;
  if (us != user_state_.end())
    if (auto u = us->second.used.find(device); u != us->second.used.end()) used = u->second;
  return {policyOf(it->second.who.user).memory_quota, used};
}

void PoolManager::usage(uint64_t session, const SessionUsage& u) {
  if (auto it = running_.find(session); it != running_.end()) it->second.usage = u;
}

std::optional<SessionRecord> PoolManager::end(uint64_t session) {
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](const Pending& p) { return p.session == session; }),
               queue_.end());
  auto it = running_.find(session);
  if (it == running_.end()) return std::nullopt;
  Running& r = it->second;
  for (auto& [device, bytes] : r.memory) {
    uint64_t& used = user_state_[r.who.user].used[device];
    used -= std::min(bytes, used);
  }
  accountMemory(r, 0);
  SessionRecord rec;
  rec.session = session;
  rec.client = r.who;
  rec.devices = r.placement.devices;
  rec.seconds = seconds(r.held_at - r.started);
  rec.usage = r.usage;
  rec.peak_memory = r.peak;
  rec.byte_seconds = r.byte_seconds;
  rec.migrations = r.migrations;
  running_.erase(it);
  return rec;
}

PoolSnapshot PoolManager::snapshot(Clock::time_point now) const {
  PoolSnapshot s;
  for (size_t i = 0; i < devices_.size(); ++i) {
    int d = static_cast<int>(i);
    s.devices.push_back({devices_[i], devices_[i].total - freeBytes(d), sessionsOn(d)});
  }
  for (auto& [id, r] : running_) {
    PoolSnapshot::Session x;
    x.id = id;
    x.client = r.who;
    x.devices = r.placement.devices;
    for (auto& [d, b] : r.memory) x.memory += b;
    x.priority = r.placement.priority;
    x.usage = r.usage;
    x.seconds = seconds(now - r.since);
    s.sessions.push_back(std::move(x));
  }
  for (auto& q : queue_) {
    PoolSnapshot::Session x;
    x.id = q.session;
    x.client = q.who;
    x.priority = q.priority;
    x.queued = true;
    x.seconds = seconds(now - q.since);
    s.sessions.push_back(std::move(x));
  }
  for (auto& [name, st] : user_state_) {
    auto& u = s.users[name];
    u.quota = policyOf(name).memory_quota;
    u.quota_used.assign(devices_.size(), 0);
    for (auto& [d, b] : st.used)
      if (d >= 0 && static_cast<size_t>(d) < devices_.size()) u.quota_used[d] = b;
    u.admissions = st.admissions;
    u.refusals = st.refusals;
    u.admission_wait_s = st.admission_wait_s;
  }
  return s;
}

}  // namespace rgpu::server
