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

std::chrono::steady_clock::duration ClusterMember::idleAfter() const {
  return std::max<Clock::duration>(std::chrono::seconds(cfg_.lease_ttl_s),
                                   10 * std::chrono::milliseconds(cfg_.load_interval_ms));
}

void ClusterMember::run() {
  const std::string member_key = memberKey(cfg_.prefix, cfg_.name), load_key = loadKey(cfg_.prefix, cfg_.name);
  const auto ttl = std::chrono::seconds(cfg_.lease_ttl_s);
  const auto renew_every = std::chrono::duration_cast<Clock::duration>(ttl) / 3;
  const auto load_every = std::chrono::milliseconds(cfg_.load_interval_ms);
  int64_t lease = 0;
  bool written_draining = false;
  std::string written_load;
  Clock::time_point next_renew = Clock::now(), next_load = Clock::now(), next_view = Clock::now();
  std::set<std::string> skipped_logged;  // malformed records already said
  std::string outage;  // the last failure logged (once per outage)
  auto failed = [&](const Status& s) {
    if (s.message() != outage) RGPU_LOG_WARN("cluster: {} (retrying)", s.message());
    outage = s.message();
  };
  std::unique_lock lock(mu_);
  while (!stop_) {
    const bool draining = draining_;
    const std::string load = load_;
    lock.unlock();
    const auto now = Clock::now();
    Clock::duration retry = std::chrono::seconds(1);
    if (!lease) {
      // Register: a fresh lease, and both keys in one transaction that
      // succeeds only if no live member holds the name.
      auto l = etcd_->grantLease(cfg_.lease_ttl_s);
      if (!l) {
        failed(l.status());
      } else {
        std::vector<EtcdOp> ops = {{EtcdOp::kPut, member_key, memberRecord(cfg_, devices_, draining, started_ms_), *l}};
        if (!load.empty()) ops.push_back({EtcdOp::kPut, load_key, load, *l});
        auto put = etcd_->putIfAbsent(member_key, ops);
        if (put && *put) {
          lease = *l;
          written_draining = draining;
          written_load = load;
          next_renew = now + renew_every;
          next_load = now + load_every;
          RGPU_LOG_INFO("cluster: registered as '{}' ({}) in etcd at {}, lease {} s, {} device(s)", cfg_.name,
                        cfg_.advertise, etcd_->endpoint(), cfg_.lease_ttl_s, devices_.size());
          outage.clear();
        } else {
          (void)etcd_->revoke(*l);
          failed(put ? Status(err::kNotPermitted, "the name '" + cfg_.name + "' is held by another live member ("
                                                      "its lease must expire first, at most " +
                                                      std::to_string(cfg_.lease_ttl_s) + " s)")
                     : put.status());
          retry = std::max<Clock::duration>(retry, renew_every);
        }
      }
    } else {
      Status s;
      if (now >= next_renew) {
        auto left = etcd_->keepAlive(lease);
        if (left && *left <= 0) {
          RGPU_LOG_WARN("cluster: etcd no longer has lease {} of '{}': registering again", lease, cfg_.name);
          lease = 0;
          retry = Clock::duration::zero();
        } else if (!left) {
          s = left.status();
        } else {
          next_renew = now + renew_every;
        }
      }
      if (lease && s && draining != written_draining) {
        s = etcd_->put(member_key, memberRecord(cfg_, devices_, draining, started_ms_), lease);
        if (s) {
          written_draining = draining;
          RGPU_LOG_INFO("cluster: '{}' is draining: no new placements", cfg_.name);
        }
      }
      if (lease && s && !load.empty() && load != written_load && now >= next_load) {
        s = etcd_->put(load_key, load, lease);
        if (s) written_load = load, next_load = now + load_every;
      }
      if (!s) failed(s);
      else if (lease) outage.clear();
    }
    // Slots taken and given back (admissions wait for them).
    lock.lock();
    std::deque<SlotTask> tasks;
    tasks.swap(slot_tasks_);
    lock.unlock();
    for (auto& t : tasks) runSlotTask(t, lease);
    // The pool, for placement: read while admissions ask for it (recently),
    // so a quiet member reads nothing.
    std::optional<std::vector<MemberView>> fresh;
    bool read_failed = false;
    lock.lock();
    const bool wanted = now - wanted_at_ <= idleAfter();
    lock.unlock();
    if (wanted && now >= next_view) {
      auto members = etcd_->range(cfg_.prefix + "members/", true);
      auto loads = members ? etcd_->range(cfg_.prefix + "load/", true) : members;
      if (members && loads) {
        std::vector<std::string> skipped;
        fresh = parseView(cfg_.prefix, *members, *loads, &skipped);
        for (const auto& why : skipped)
          if (skipped_logged.insert(why).second) RGPU_LOG_WARN("cluster: a record in etcd is left out: {}", why);
      } else {
        read_failed = true;
      }
      next_view = now + load_every;
    }
    lock.lock();
    if (fresh) view_ = std::move(*fresh), view_at_ = Clock::now();
    if (fresh || read_failed) {
      view_reachable_ = !read_failed;
      ++view_reads_;
      cv_.notify_all();
    }
    registered_ = lease != 0;
    if (stop_) break;
    // Sleep until the next renewal, load write or retry; a change wakes it.
    auto wake = lease ? std::min(next_renew, std::max(next_load, now)) : now + retry;
    if (now - wanted_at_ <= idleAfter()) wake = std::min(wake, std::max(next_view, now));
    if (lease && !outage.empty()) wake = std::min(wake, now + retry);
    const auto wanted_before = wanted_at_;
    cv_.wait_until(lock, wake, [&] {
      return stop_ || draining_ != written_draining || (lease && load_ != written_load && Clock::now() >= next_load) ||
             wanted_at_ != wanted_before || !slot_tasks_.empty();
    });
    if (wanted_at_ != wanted_before) next_view = std::min(next_view, Clock::now());
  }
  for (auto& t : slot_tasks_)  // never run: the member is going (its slots with it)
    if (t.done) t.done(Status::ok(), false);
  slot_tasks_.clear();
  lock.unlock();
  if (lease) {
    Status s = etcd_->revoke(lease);
    if (s) RGPU_LOG_INFO("cluster: '{}' left the pool", cfg_.name);
    else RGPU_LOG_WARN("cluster: leaving the pool: {} (the keys go when the lease expires, within {} s)", s.message(),
                       cfg_.lease_ttl_s);
  }
  std::lock_guard relock(mu_);
  registered_ = false;
}

}  // namespace rgpu::server::cluster
