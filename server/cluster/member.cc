#include "server/cluster/member.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "common/log.h"
#include "protocol/rgpu.capnp.h"
#include "server/cluster/etcd_client.h"

namespace rgpu::server::cluster {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::string memberKey(const std::string& prefix, const std::string& name) { return prefix + "members/" + name; }
std::string loadKey(const std::string& prefix, const std::string& name) { return prefix + "load/" + name; }

std::string memberRecord(const ClusterConfig& cfg, const std::vector<PoolDeviceInfo>& devices, bool draining,
                         int64_t started_ms) {
  json devs = json::array();
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    devs.push_back({{"index", i}, {"name", d.name}, {"uuid", d.uuid}, {"memory", d.total},
                    {"cc", std::to_string(d.cc / 10) + "." + std::to_string(d.cc % 10)}, {"sms", d.sms}});
  }
  return json{{"name", cfg.name},          {"address", cfg.advertise}, {"state", draining ? "draining" : "ready"},
              {"started", started_ms},     {"version", RGPU_VERSION},  {"devices", devs}}
      .dump();
}

std::string loadRecord(const PoolSnapshot& pool, const std::vector<double>& busy) {
  uint32_t sessions = 0, queued = 0;
  for (const auto& s : pool.sessions) (s.queued ? queued : sessions)++;
  json devs = json::array();
  for (size_t i = 0; i < pool.devices.size(); ++i) {
    const auto& d = pool.devices[i];
    devs.push_back({{"index", i},
                    {"used", d.used},
                    {"free", d.info.total > d.used ? d.info.total - d.used : 0},
                    {"sessions", d.sessions},
                    {"busy", i < busy.size() ? busy[i] : 0.0}});
  }
  return json{{"sessions", sessions}, {"queued", queued}, {"devices", devs}}.dump();
}

std::string encodePoolMembers(const std::vector<MemberView>& view) {
  capnp::MallocMessageBuilder msg;
  auto list = msg.initRoot<wire::PoolMembers>().initMembers(static_cast<unsigned>(view.size()));
  for (size_t i = 0; i < view.size(); ++i) {
    const MemberView& m = view[i];
    auto out = list[static_cast<unsigned>(i)];
    out.setName(m.name);
    out.setAddress(m.address);
    out.setState(m.draining ? "draining" : "ready");
    out.setSessions(m.sessions);
    out.setQueued(m.queued);
    auto devs = out.initDevices(static_cast<unsigned>(m.devices.size()));
    for (size_t d = 0; d < m.devices.size(); ++d) {
      auto o = devs[static_cast<unsigned>(d)];
      const auto& dev = m.devices[d];
      o.setIndex(static_cast<uint32_t>(d));
      o.setName(dev.name);
      o.setUuid(dev.uuid);
      o.setMemoryTotal(dev.memory);
      o.setMemoryUsed(dev.memory - std::min(dev.free, dev.memory));
      o.setUtilization(-1);
      o.setTemperature(-1);
      o.setPowerMw(-1);
      o.setSessions(dev.sessions);
      o.setComputeCapability(dev.cc);
    }
  }
  auto words = capnp::messageToFlatArray(msg);
  return std::string(reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word));
}

Result<std::unique_ptr<ClusterMember>> ClusterMember::start(const ClusterConfig& cfg,
                                                            std::vector<PoolDeviceInfo> devices) {
  EtcdOptions o;
  o.endpoints = cfg.endpoints;
  o.ca_file = cfg.tls_ca;
  o.cert_file = cfg.tls_cert;
  o.key_file = cfg.tls_key;
  o.timeout = std::chrono::milliseconds(cfg.etcd_timeout_ms);
  auto etcd = EtcdClient::create(o);
  if (!etcd) return etcd.status();
  std::unique_ptr<ClusterMember> m(new ClusterMember(cfg, std::move(devices), std::move(*etcd)));
  m->thread_ = std::thread([p = m.get()] { p->run(); });
  return m;
}

ClusterMember::ClusterMember(const ClusterConfig& cfg, std::vector<PoolDeviceInfo> devices,
                             std::unique_ptr<EtcdClient> etcd)
    : cfg_(cfg), devices_(std::move(devices)), started_ms_(unixMillis()), etcd_(std::move(etcd)) {}

ClusterMember::~ClusterMember() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ClusterMember::setLoad(std::string j) {
  std::lock_guard lock(mu_);
  load_ = std::move(j);
  cv_.notify_all();
}

void ClusterMember::setDraining() {
  std::lock_guard lock(mu_);
  draining_ = true;
  cv_.notify_all();
}

bool ClusterMember::registered() const {
  std::lock_guard lock(mu_);
  return registered_;
}

std::vector<MemberView> ClusterMember::view() {
  std::unique_lock lock(mu_);
  const auto now = Clock::now();
  const bool idle = now - wanted_at_ > idleAfter();
  wanted_at_ = now;
  if (idle) {
    // The first admission after a quiet spell: wait (briefly) for a fresh read.
    const uint64_t seen = view_reads_;
    cv_.notify_all();
    if (view_reachable_)
      cv_.wait_for(lock, std::chrono::milliseconds(std::min<uint32_t>(cfg_.etcd_timeout_ms, 500)),
                   [&] { return view_reads_ != seen || stop_; });
  }
  if (Clock::now() - view_at_ > std::chrono::seconds(cfg_.lease_ttl_s)) return {};
  return view_;
}

void ClusterMember::acquireSlot(const std::string& user, uint32_t max, uint64_t session,
                                std::function<void(Status, bool)> done) {
  std::lock_guard lock(mu_);
  slot_tasks_.push_back({user, max, session, std::move(done)});
  cv_.notify_all();
}

void ClusterMember::releaseSlot(uint64_t session) {
  std::lock_guard lock(mu_);
  slot_tasks_.push_back({"", 0, session, nullptr});
  cv_.notify_all();
}

void ClusterMember::runSlotTask(SlotTask& t, int64_t lease) {
  if (!t.done) {  // a release: only the key this member's lease holds
    auto it = slots_held_.find(t.session);
    if (it == slots_held_.end()) return;
    if (lease) (void)etcd_->putIfLease(it->second, lease, {{EtcdOp::kDelete, it->second, "", 0}});
    slots_held_.erase(it);
    return;
  }
  if (!lease) return t.done(Status::ok(), false);
  const std::string base = cfg_.prefix + "sessions/" + t.user + "/";
  const std::string value = cfg_.name + "/" + std::to_string(t.session);
  for (uint32_t k = 0; k < t.max; ++k) {
    const uint32_t i = static_cast<uint32_t>((t.session + k) % t.max);  // start apart: fewer collisions
    const std::string key = base + std::to_string(i);
    auto took = etcd_->putIfAbsent(key, {{EtcdOp::kPut, key, value, lease}});
    if (!took) return t.done(Status::ok(), false);
    if (*took) {
      slots_held_[t.session] = key;
      return t.done(Status::ok(), true);
    }
  }
  t.done(Status(err::kDevicesUnavailable, "user '" + t.user + "' has " + std::to_string(t.max) +
                                              " session(s) in the pool, max_sessions = " + std::to_string(t.max)),
         true);
}

void ClusterMember::rewriteSlots(int64_t lease) {
  for (auto& [session, key] : slots_held_) {
    auto took = etcd_->putIfAbsent(key, {{EtcdOp::kPut, key, cfg_.name + "/" + std::to_string(session), lease}});
    if (took && !*took)  // another member took it meanwhile: the user has one session more than max_sessions
      RGPU_LOG_WARN("cluster: session {}'s slot {} was taken while etcd had lost it", session, key);
  }
}

std::chrono::steady_clock::duration ClusterMember::idleAfter() const {
  return std::max<Clock::duration>(std::chrono::seconds(cfg_.lease_ttl_s),
                                   10 * std::chrono::milliseconds(cfg_.load_interval_ms));
}

// The member thread's own state.
struct ClusterMember::Loop {
  std::string member_key, load_key;
  Clock::duration renew_every{}, load_every{};
  int64_t lease = 0;
  bool written_draining = false;
  std::string written_load;
  Clock::time_point next_renew{}, next_load{}, next_view{};
  Clock::duration retry = std::chrono::seconds(1);
  std::set<std::string> skipped_logged;  // malformed records already said
  std::string outage;                    // the last failure logged (once per outage)
  void failed(const Status& s) {
    if (s.message() != outage) RGPU_LOG_WARN("cluster: {} (retrying)", s.message());
    outage = s.message();
  }
};

// A fresh lease, and both keys in one transaction that succeeds only if no
// live member holds the name.
void ClusterMember::registerOnce(Loop& l, bool draining, const std::string& load, Clock::time_point now) {
  auto lease = etcd_->grantLease(cfg_.lease_ttl_s);
  if (!lease) return l.failed(lease.status());
  std::vector<EtcdOp> ops = {{EtcdOp::kPut, l.member_key, memberRecord(cfg_, devices_, draining, started_ms_), *lease}};
  if (!load.empty()) ops.push_back({EtcdOp::kPut, l.load_key, load, *lease});
  auto put = etcd_->putIfAbsent(l.member_key, ops);
  if (!put || !*put) {
    (void)etcd_->revoke(*lease);
    l.failed(put ? Status(err::kNotPermitted, "the name '" + cfg_.name + "' is held by another live member (its lease "
                                              "must expire first, at most " + std::to_string(cfg_.lease_ttl_s) + " s)")
                 : put.status());
    l.retry = std::max<Clock::duration>(l.retry, l.renew_every);
    return;
  }
  l.lease = *lease;
  l.written_draining = draining;
  l.written_load = load;
  l.next_renew = now + l.renew_every;
  l.next_load = now + l.load_every;
  RGPU_LOG_INFO("cluster: registered as '{}' ({}) in etcd at {}, lease {} s, {} device(s)", cfg_.name, cfg_.advertise,
                etcd_->endpoint(), cfg_.lease_ttl_s, devices_.size());
  l.outage.clear();
}

// Renews the lease when due, and writes what changed: the state, the load.
void ClusterMember::keepUp(Loop& l, bool draining, const std::string& load, Clock::time_point now) {
  Status s;
  if (now >= l.next_renew) {
    auto left = etcd_->keepAlive(l.lease);
    if (left && *left <= 0) {
      RGPU_LOG_WARN("cluster: etcd no longer has lease {} of '{}': registering again", l.lease, cfg_.name);
      l.lease = 0;
      l.retry = Clock::duration::zero();
      return;
    }
    if (!left) s = left.status();
    else l.next_renew = now + l.renew_every;
  }
  if (s && draining != l.written_draining) {
    s = etcd_->put(l.member_key, memberRecord(cfg_, devices_, draining, started_ms_), l.lease);
    if (s) {
      l.written_draining = draining;
      RGPU_LOG_INFO("cluster: '{}' is draining: no new placements", cfg_.name);
    }
  }
  if (s && !load.empty() && load != l.written_load && now >= l.next_load) {
    s = etcd_->put(l.load_key, load, l.lease);
    if (s) l.written_load = load, l.next_load = now + l.load_every;
  }
  if (!s) l.failed(s);
  else l.outage.clear();
}

// Reads the pool (while admissions ask for it) and publishes the view. `lock` held on entry and exit.
void ClusterMember::readPool(Loop& l, Clock::time_point now, std::unique_lock<std::mutex>& lock) {
  if (now - wanted_at_ > idleAfter() || now < l.next_view) return;
  lock.unlock();
  auto members = etcd_->range(cfg_.prefix + "members/", true);
  auto loads = members ? etcd_->range(cfg_.prefix + "load/", true) : members;
  std::optional<std::vector<MemberView>> fresh;
  if (members && loads) {
    std::vector<std::string> skipped;
    fresh = parseView(cfg_.prefix, *members, *loads, &skipped);
    for (const auto& why : skipped)
      if (l.skipped_logged.insert(why).second) RGPU_LOG_WARN("cluster: a record in etcd is left out: {}", why);
  }
  l.next_view = now + l.load_every;
  lock.lock();
  if (fresh) view_ = std::move(*fresh), view_at_ = Clock::now();
  view_reachable_ = fresh.has_value();
  ++view_reads_;
  cv_.notify_all();
}

void ClusterMember::run() {
  Loop l;
  l.member_key = memberKey(cfg_.prefix, cfg_.name);
  l.load_key = loadKey(cfg_.prefix, cfg_.name);
  l.renew_every = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(cfg_.lease_ttl_s)) / 3;
  l.load_every = std::chrono::milliseconds(cfg_.load_interval_ms);
  std::unique_lock lock(mu_);
  while (!stop_) {
    const bool draining = draining_;
    const std::string load = load_;
    std::deque<SlotTask> tasks;
    tasks.swap(slot_tasks_);
    std::deque<std::function<void(int64_t)>> jobs;
    jobs.swap(quota_jobs_);
    lock.unlock();
    const auto now = Clock::now();
    l.retry = std::chrono::seconds(1);
    if (!l.lease) registerOnce(l, draining, load, now);
    else keepUp(l, draining, load, now);
    if (l.lease && l.lease != quota_lease_) {
      // A new lease (etcd lost the old one): the slots and shares it held, again.
      rewriteSlots(l.lease);
      rewriteQuotas(l.lease);
    }
    for (auto& t : tasks) runSlotTask(t, l.lease);  // admissions wait for these
    for (auto& j : jobs) j(l.lease);                // and allocations for these
    lock.lock();
    readPool(l, now, lock);
    registered_ = l.lease != 0;
    if (stop_) break;
    // Sleep until the next renewal, load write, pool read or retry; a change wakes it.
    auto wake = l.lease ? std::min(l.next_renew, std::max(l.next_load, now)) : now + l.retry;
    if (now - wanted_at_ <= idleAfter()) wake = std::min(wake, std::max(l.next_view, now));
    if (l.lease && !l.outage.empty()) wake = std::min(wake, now + l.retry);
    const auto wanted_before = wanted_at_;
    cv_.wait_until(lock, wake, [&] {
      return stop_ || draining_ != l.written_draining ||
             (l.lease && load_ != l.written_load && Clock::now() >= l.next_load) || wanted_at_ != wanted_before ||
             !slot_tasks_.empty() || !quota_jobs_.empty();
    });
    if (wanted_at_ != wanted_before) l.next_view = std::min(l.next_view, Clock::now());
  }
  for (auto& t : slot_tasks_)  // never run: the member is going (its slots with it)
    if (t.done) t.done(Status::ok(), false);
  slot_tasks_.clear();
  std::deque<std::function<void(int64_t)>> left;
  left.swap(quota_jobs_);
  lock.unlock();
  for (auto& j : left) j(0);  // unchecked: the member is going (its shares with its lease)
  if (l.lease) {
    Status s = etcd_->revoke(l.lease);
    if (s) RGPU_LOG_INFO("cluster: '{}' left the pool", cfg_.name);
    else RGPU_LOG_WARN("cluster: leaving the pool: {} (the keys go when the lease expires, within {} s)", s.message(),
                       cfg_.lease_ttl_s);
  }
  std::lock_guard relock(mu_);
  registered_ = false;
}

}  // namespace rgpu::server::cluster
