#include "server/daemon/pool_membership.h"

#include <algorithm>

#include "common/tls.h"
#include "server/cluster/placement.h"

namespace rgpu::server {

std::vector<double> busyFractions(const PoolSnapshot& snap, const std::vector<DeviceHealth>& health,
                                  std::vector<uint64_t>& last_gpu_ns, std::chrono::milliseconds interval) {
  std::vector<double> busy(snap.devices.size(), 0.0);
  std::vector<uint64_t> gpu_ns(snap.devices.size(), 0);
  for (const auto& s : snap.sessions)
    for (int d : s.devices)
      if (d >= 0 && static_cast<size_t>(d) < gpu_ns.size()) gpu_ns[static_cast<size_t>(d)] += s.usage.gpu_ns / s.devices.size();
  last_gpu_ns.resize(gpu_ns.size(), 0);
  const double interval_ns = static_cast<double>(std::chrono::nanoseconds(interval).count());
  for (size_t i = 0; i < busy.size(); ++i) {
    if (i < health.size() && health[i].utilization >= 0) busy[i] = health[i].utilization / 100.0;
    else if (gpu_ns[i] >= last_gpu_ns[i]) busy[i] = std::min(1.0, (gpu_ns[i] - last_gpu_ns[i]) / interval_ns);
    last_gpu_ns[i] = gpu_ns[i];
  }
  return busy;
}

PoolMembership::PoolMembership(asio::io_context& io, PoolManager& pool, PoolService& service,
                               PoolService::HealthFn health, std::chrono::milliseconds interval, size_t devices)
    : pool_(pool), service_(service), health_(std::move(health)), interval_(interval), timer_(io),
      last_gpu_ns_(devices, 0) {}

Result<std::unique_ptr<PoolMembership>> PoolMembership::join(const ServerConfig& cfg, uint16_t port,
                                                             const std::vector<PoolDeviceInfo>& inventory,
                                                             asio::io_context& io, PoolManager& pool,
                                                             PoolService& service, PoolService::HealthFn health) {
  ClusterConfig cluster_cfg = cfg.cluster;
  // Advertised as `listen` with port 0: the port the system picked.
  if (auto a = common::parseHostPort(cluster_cfg.advertise); a && a->second == 0)
    cluster_cfg.advertise = cluster_cfg.advertise.substr(0, cluster_cfg.advertise.rfind(':') + 1) + std::to_string(port);
  auto m = cluster::ClusterMember::start(cluster_cfg, inventory);
  if (!m) return m.status();
  std::unique_ptr<PoolMembership> self(new PoolMembership(
      io, pool, service, std::move(health), std::chrono::milliseconds(cfg.cluster.load_interval_ms), inventory.size()));
  self->member_ = std::move(*m);
  cluster::ClusterMember* member = self->member_.get();
  // Admissions ask the pool first: a member that fits better takes the client.
  const auto policy = *cluster::parsePoolPolicy(cfg.cluster.policy);
  self->name_ = cfg.cluster.name;
  self->policy_ = policy;
  service.setRedirector([member, policy, name = cfg.cluster.name](const ClientInfo&, const DeviceRequest& req) {
    PoolService::PoolAnswer a;
    auto view = member->view();
    for (const auto& v : view) a.elsewhere |= v.name != name && cluster::couldFit(v, req);
    auto i = cluster::choose(view, req, policy, name);
    if (!i) {
      // No one member has them: several together may (the client takes a part at each).
      Placement p;
      p.span = cluster::chooseSpan(view, req, policy, name);
      if (!p.span.empty()) a.redirect = p;
      else a.elsewhere |= cluster::couldSpan(view, req);
      return a;
    }
    if (view[*i].name == name) return a;  // here
    Placement p;
    p.redirect = view[*i].address;
    p.redirect_member = view[*i].name;
    a.redirect = p;
    return a;
  });
  service.setMembers([member] { return cluster::encodePoolMembers(member->view()); });
  service.setSlots([member](const std::string& user, uint32_t max, uint64_t session,
                            std::function<void(Status, bool)> done) {
                     member->acquireSlot(user, max, session, std::move(done));
                   },
                   [member](uint64_t session) { member->releaseSlot(session); });
  service.setGrants([member](const std::string& user, uint64_t quota, uint64_t min, uint64_t want,
                             std::function<void(Status, uint64_t, bool)> done) {
                      member->acquireQuota(user, quota, min, want, std::move(done));
                    },
                    [member](const std::string& user, uint64_t bytes) { member->holdQuota(user, bytes); });
  self->publishLoad();
  return self;
}

void PoolMembership::publishLoad() {
  auto snap = pool_.snapshot(PoolManager::Clock::now());
  const auto health = health_ ? health_() : std::vector<DeviceHealth>();
  member_->setLoad(cluster::loadRecord(snap, busyFractions(snap, health, last_gpu_ns_, interval_)));
  service_.poolChanged();  // capacity (or a session slot) may have appeared elsewhere
  timer_.expires_after(interval_);
  timer_.async_wait([this](const asio::error_code& e) {
    if (!e) publishLoad();
  });
}

std::optional<std::string> PoolMembership::moveTarget(const DeviceRequest& req, const std::set<std::string>& tried) {
  std::vector<cluster::MemberView> others;
  for (auto& v : member_->view())
    if (v.name != name_ && !v.draining && !tried.count(v.name)) others.push_back(v);
  auto i = cluster::choose(others, req, policy_, name_);
  if (!i) return std::nullopt;
  return others[*i].name;
}

}  // namespace rgpu::server
