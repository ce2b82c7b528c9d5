// Where in a pool of servers a client's device request goes (docs/pool.md).
//
// The view is what the members wrote to etcd (member.h): each member's
// devices and live load. A member can take a request when it is not
// draining and `count` of its devices (at least one) fit: name matching the
// model glob, compute capability at least min_cc, free memory at least
// min_memory. Among those, by the pool's policy:
//
//   spread  the least loaded (fewest sessions per device, then the most free
//           memory on its fitting devices) — load spreads over the hosts;
//   pack    the most loaded that still fits (most sessions per device, then
//           the least free memory) — hosts fill one after the other and
//           whole hosts stay free for jobs that need all of one.
//
// Ties go to `self` (no needless redirect), then to the name's order.
//
// A request for several devices that no one member can take may be spread
// over several (a span): as few members as the fitting devices allow — those
// with the most fitting devices first, ties by the policy's order — each
// contributing what fits there; the program's devices are the parts' in that
// order. Requests for one device, or for "all" (count 0), never span.
// What etcd holds is untrusted input: a record that does not parse, names
// an address that is not host:port, or a name with control characters, is
// left out (and said so once).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server::cluster {

struct EtcdKv;

enum class PoolPolicy { kSpread, kPack };
Result<PoolPolicy> parsePoolPolicy(const std::string& s);

struct MemberView {
  struct Device {
    std::string name, uuid;
    uint64_t memory = 0, free = 0;
    uint32_t cc = 0;  // major * 10 + minor
    uint32_t sessions = 0;
  };
  std::string name, address;
  bool draining = false;
  std::vector<Device> devices;
  uint32_t sessions = 0, queued = 0;
};

// The members under `prefix` from the records and loads a range of it returned.
// `skipped`, when given, receives a line per record left out.
std::vector<MemberView> parseView(const std::string& prefix, const std::vector<EtcdKv>& members,
                                  const std::vector<EtcdKv>& loads, std::vector<std::string>* skipped = nullptr);

// Whether `m`'s devices fit `req` now (count of them, at least one).
bool fits(const MemberView& m, const DeviceRequest& req);
// Whether they could once free (the same, with total memory for free memory; draining members never).
bool couldFit(const MemberView& m, const DeviceRequest& req);
// The member that should take `req` (an index into `view`), or none fits.
std::optional<size_t> choose(const std::vector<MemberView>& view, const DeviceRequest& req, PoolPolicy policy,
                             const std::string& self);
// The parts of a span for `req` (see above), or empty when the fitting
// devices of all members together are too few (or req.count < 2).
std::vector<SpanPart> chooseSpan(const std::vector<MemberView>& view, const DeviceRequest& req, PoolPolicy policy,
                                 const std::string& self);
// Whether a span could take `req` once its devices are free.
bool couldSpan(const std::vector<MemberView>& view, const DeviceRequest& req);

}  // namespace rgpu::server::cluster
