// The member's share of each user's pool-wide memory quota (member.h).
#include <charconv>

#include "common/log.h"
#include "server/cluster/etcd_client.h"
#include "server/cluster/member.h"

namespace rgpu::server::cluster {

namespace {
constexpr int kQuotaTries = 16;  // transactions lost to other members before giving up

// A share as etcd holds it: decimal bytes. Anything else is untrusted junk:
// counted as nothing, said once.
uint64_t shareBytes(const EtcdKv& kv) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(kv.value.data(), kv.value.data() + kv.value.size(), v);
  if (ec != std::errc() || end != kv.value.data() + kv.value.size()) {
    common::logOnce("quota-share:" + kv.key, "cluster: the pool quota share at " + kv.key + " is not a byte count: left out");
    return 0;
  }
  return v;
}
}  // namespace

std::string ClusterMember::quotaPrefix(const std::string& user) const { return cfg_.prefix + "quota/" + user + "/"; }

void ClusterMember::acquireQuota(const std::string& user, uint64_t quota, uint64_t min, uint64_t want,
                                 std::function<void(Status, uint64_t, bool)> done) {
  std::lock_guard lock(mu_);
  quota_jobs_.push_back([this, user, quota, min, want, done = std::move(done)](int64_t lease) {
    growQuota(user, quota, min, want, lease, done);
  });
  cv_.notify_all();
}

void ClusterMember::holdQuota(const std::string& user, uint64_t bytes) {
  std::lock_guard lock(mu_);
  quota_jobs_.push_back([this, user, bytes](int64_t lease) {
    quota_held_[user] = bytes;
    writeQuota(user, lease);
    if (!bytes) quota_held_.erase(user);
  });
  cv_.notify_all();
}

void ClusterMember::growQuota(const std::string& user, uint64_t quota, uint64_t min, uint64_t want, int64_t lease,
                              const std::function<void(Status, uint64_t, bool)>& done) {
  if (!lease) return done(Status::ok(), 0, false);
  const std::string base = quotaPrefix(user), anchor = base + "anchor", mine = base + "m/" + cfg_.name;
  for (int attempt = 0; attempt < kQuotaTries; ++attempt) {
    auto all = etcd_->range(base, true);
    if (!all) return done(Status::ok(), 0, false);
    int64_t version = 0;
    uint64_t total = 0;
    for (const auto& kv : *all) {
      if (kv.key == anchor) version = kv.version;
      else if (kv.key.rfind(base + "m/", 0) == 0 && kv.key != mine) total += std::min(shareBytes(kv), quota);
    }
    const uint64_t held = quota_held_[user];
    total = std::min(total + held, quota * 2);  // (no overflow; this member's own share as it knows it)
    const uint64_t left = quota > total ? quota - total : 0;
    if (left < min)
      return done(Status(err::kMemoryAllocation, "pool memory quota of user '" + user + "' exceeded: " +
                                                     formatBytes(total) + " of " + formatBytes(quota) +
                                                     " held by the pool's members, " + formatBytes(min) +
                                                     " more asked here"),
                  0, true);
    const uint64_t grant = std::min(want, left);
    auto took = etcd_->putIfVersion(anchor, version,
                                    {{EtcdOp::kPut, anchor, std::to_string(version + 1), 0},
                                     {EtcdOp::kPut, mine, std::to_string(held + grant), lease}});
    if (!took) return done(Status::ok(), 0, false);
    if (*took) {
      quota_held_[user] = held + grant;
      quota_lease_ = lease;
      return done(Status::ok(), grant, true);
    }
    // Another member changed the user's shares meanwhile: read them again.
  }
  done(Status(err::kMemoryAllocation, "pool memory quota of user '" + user + "': the pool's members kept changing "
                                      "their shares (" + std::to_string(kQuotaTries) + " tries)"),
       0, true);
}

void ClusterMember::writeQuota(const std::string& user, int64_t lease) {
  if (!lease) return;  // written with the lease once there is one (rewriteQuotas)
  const std::string key = quotaPrefix(user) + "m/" + cfg_.name;
  const uint64_t bytes = quota_held_[user];
  Status s = bytes ? etcd_->put(key, std::to_string(bytes), lease) : etcd_->erase(key);
  if (!s) RGPU_LOG_WARN("cluster: writing the pool quota share of '{}': {}", user, s.message());
  quota_lease_ = lease;
}

void ClusterMember::rewriteQuotas(int64_t lease) {
  // The shares went with the old lease; another member may have taken the
  // bytes meanwhile, which the next growth's read accounts for.
  for (auto& [user, bytes] : quota_held_)
    if (bytes) writeQuota(user, lease);
  quota_lease_ = lease;
}

}  // namespace rgpu::server::cluster
