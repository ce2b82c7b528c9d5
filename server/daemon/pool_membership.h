// The daemon as a member of a pool of servers ([cluster], docs/pool.md): the
// cluster member (its etcd thread), what the daemon's pool service asks of
// it (redirects, the members view, session slots), and the load it is told
// every load_interval_ms. Lives on the daemon's io_context thread; destroyed
// before the pool service it was wired into.
#pragma once

#include <asio.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/cluster/member.h"
#include "server/pool/pool_service.h"

namespace rgpu::server {

// Each device's busy fraction: NVML's utilisation where it is known, else the
// device time sessions used since the last sample (`last_gpu_ns`, updated; a
// session's time split over its devices) over `interval`.
std::vector<double> busyFractions(const PoolSnapshot& snap, const std::vector<DeviceHealth>& health,
                                  std::vector<uint64_t>& last_gpu_ns, std::chrono::milliseconds interval);

class PoolMembership {
 public:
  // Joins the pool `cfg.cluster` names, advertising `port` when its address
  // says port 0, and wires `service` to it.
  static Result<std::unique_ptr<PoolMembership>> join(const ServerConfig& cfg, uint16_t port,
                                                      const std::vector<PoolDeviceInfo>& inventory, asio::io_context& io,
                                                      PoolManager& pool, PoolService& service,
                                                      PoolService::HealthFn health);
  // SIGTERM: no new placements here.
  void draining() { member_->setDraining(); }
  // The pool as last read (fresh when it was not read lately): for moving
  // sessions to other members.
  std::vector<cluster::MemberView> view() { return member_->view(); }
  // The member (not this one, not draining, none of `tried`) that should
  // take a session needing `req` as the pool's policy places programs, or none.
  std::optional<std::string> moveTarget(const DeviceRequest& req, const std::set<std::string>& tried = {});

 private:
  PoolMembership(asio::io_context& io, PoolManager& pool, PoolService& service, PoolService::HealthFn health,
                 std::chrono::milliseconds interval, size_t devices);
  void publishLoad();

  std::unique_ptr<cluster::ClusterMember> member_;
  std::string name_;
  cluster::PoolPolicy policy_{};
  PoolManager& pool_;
  PoolService& service_;
  PoolService::HealthFn health_;
  std::chrono::milliseconds interval_;
  asio::steady_timer timer_;
  std::vector<uint64_t> last_gpu_ns_;
};

}  // namespace rgpu::server
