#include "server/cluster/placement.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/tls.h"
#include "server/cluster/etcd_client.h"

namespace rgpu::server::cluster {

using json = nlohmann::json;

Result<PoolPolicy> parsePoolPolicy(const std::string& s) {
  if (s == "spread") return PoolPolicy::kSpread;
  if (s == "pack") return PoolPolicy::kPack;
  return Status(err::kInvalidValue, "pool policy '" + s + "' is neither \"spread\" nor \"pack\"");
}

namespace {

uint64_t u64(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>()
         : it != j.end() && it->is_number_integer() && it->get<int64_t>() > 0 ? static_cast<uint64_t>(it->get<int64_t>())
                                                                              : 0;
}

// "9.0" -> 90; 0 when it is not major.minor.
uint32_t ccOf(const json& j) {
  auto it = j.find("cc");
  if (it == j.end() || !it->is_string()) return 0;
  unsigned major = 0, minor = 0;
  if (std::sscanf(it->get<std::string>().c_str(), "%u.%u", &major, &minor) != 2 || major > 100 || minor > 9) return 0;
  return major * 10 + minor;
}

Result<MemberView> parseMember(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return Status(err::kInvalidValue, "not a JSON object");
  MemberView m;
  if (!j.contains("name") || !j["name"].is_string() || !j.contains("address") || !j["address"].is_string())
    return Status(err::kInvalidValue, "no name or address");
  m.name = j["name"].get<std::string>();
  m.address = j["address"].get<std::string>();
  // Names and addresses travel in control datagrams and messages: no control characters.
  for (const std::string* t : {&m.name, &m.address})
    for (unsigned char c : *t)
      if (c < 0x20 || c == 0x7f) return Status(err::kInvalidValue, "a name or address with control characters");
  if (auto hp = common::parseHostPort(m.address); !hp || hp->second == 0)
    return Status(err::kInvalidValue, "address '" + m.address + "' is not host:port");
  m.draining = j.value("state", std::string()) != "ready";
  if (!j.contains("devices") || !j["devices"].is_array()) return Status(err::kInvalidValue, "no device list");
  for (const auto& d : j["devices"]) {
    if (!d.is_object() || !d.contains("name") || !d["name"].is_string())
      return Status(err::kInvalidValue, "a device without a name");
    MemberView::Device dev;
    dev.name = d["name"].get<std::string>();
    if (d.contains("uuid") && d["uuid"].is_string()) dev.uuid = d["uuid"].get<std::string>();
    dev.memory = u64(d, "memory");
    dev.free = dev.memory;
    dev.cc = ccOf(d);
    m.devices.push_back(std::move(dev));
  }
  return m;
}

// Applies a load record to `m` (a malformed one leaves `m` as its record says: idle).
void applyLoad(MemberView& m, const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return;
  m.sessions = static_cast<uint32_t>(u64(j, "sessions"));
  m.queued = static_cast<uint32_t>(u64(j, "queued"));
  if (!j.contains("devices") || !j["devices"].is_array()) return;
  for (const auto& d : j["devices"]) {
    if (!d.is_object()) continue;
    const uint64_t i = u64(d, "index");
    if (i >= m.devices.size()) continue;
    m.devices[i].free = std::min(u64(d, "free"), m.devices[i].memory);
    m.devices[i].sessions = static_cast<uint32_t>(u64(d, "sessions"));
  }
}

bool matches(const std::string& pattern, const std::string& text) {
  return pattern.empty() || ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

bool deviceFits(const MemberView::Device& d, const DeviceRequest& req) {
  return matches(req.model, d.name) && d.cc >= req.min_cc && d.free >= req.min_memory;
}

// How loaded `m` is for ranking: sessions per device, and the free memory of its fitting devices.
std::pair<double, uint64_t> loadOf(const MemberView& m, const DeviceRequest& req) {
  uint32_t sessions = 0;
  uint64_t free = 0;
  for (const auto& d : m.devices) {
    sessions += d.sessions;
    if (deviceFits(d, req)) free += d.free;
  }
  return {m.devices.empty() ? 0.0 : static_cast<double>(sessions) / m.devices.size(), free};
}

}  // namespace

std::vector<MemberView> parseView(const std::string& prefix, const std::vector<EtcdKv>& members,
                                  const std::vector<EtcdKv>& loads, std::vector<std::string>* skipped) {
  std::map<std::string, MemberView> by_name;
  const std::string mp = prefix + "members/", lp = prefix + "load/";
  for (const auto& kv : members) {
    if (kv.key.rfind(mp, 0) != 0) continue;
    const std::string name = kv.key.substr(mp.size());
    auto m = parseMember(kv.value);
    if (m && m->name != name) m = Status(err::kInvalidValue, "its record names '" + m->name + "'");
    if (!m) {
      if (skipped) skipped->push_back("member '" + name + "': " + m.status().message());
      continue;
    }
    by_name[name] = std::move(*m);
  }
  for (const auto& kv : loads) {
    if (kv.key.rfind(lp, 0) != 0) continue;
    auto it = by_name.find(kv.key.substr(lp.size()));
    if (it != by_name.end()) applyLoad(it->second, kv.value);
  }
  std::vector<MemberView> out;
  for (auto& [name, m] : by_name) out.push_back(std::move(m));
  return out;
}

bool fits(const MemberView& m, const DeviceRequest& req) {
  if (m.draining) return false;
  uint32_t n = 0;
  for (const auto& d : m.devices) n += deviceFits(d, req) ? 1 : 0;
  return n >= std::max<uint32_t>(req.count, 1);
}

bool couldFit(const MemberView& m, const DeviceRequest& req) {
  MemberView idle = m;
  for (auto& d : idle.devices) d.free = d.memory;
  return fits(idle, req);
}

std::optional<size_t> choose(const std::vector<MemberView>& view, const DeviceRequest& req, PoolPolicy policy,
                             const std::string& self) {
  std::optional<size_t> best;
  std::pair<double, uint64_t> best_load;
  for (size_t i = 0; i < view.size(); ++i) {
    if (!fits(view[i], req)) continue;
    const auto load = loadOf(view[i], req);
    bool better = false;
    if (!best) {
      better = true;
    } else if (load.first != best_load.first) {
      better = policy == PoolPolicy::kSpread ? load.first < best_load.first : load.first > best_load.first;
    } else if (load.second != best_load.second) {
      better = policy == PoolPolicy::kSpread ? load.second > best_load.second : load.second < best_load.second;
    } else {
      better = view[i].name == self;  // a tie: stay here
    }
    if (better) best = i, best_load = load;
  }
  return best;
}

namespace {
uint32_t fittingDevices(const MemberView& m, const DeviceRequest& req) {
  if (m.draining) return 0;
  uint32_t n = 0;
  for (const auto& d : m.devices) n += deviceFits(d, req) ? 1 : 0;
  return n;
}
}  // namespace

std::vector<SpanPart> chooseSpan(const std::vector<MemberView>& view, const DeviceRequest& req, PoolPolicy policy,
                                 const std::string& self) {
  if (req.count < 2) return {};
  std::vector<size_t> order;
  std::vector<uint32_t> fits(view.size());  // fitting devices per member, counted once
  uint64_t total = 0;
  for (size_t i = 0; i < view.size(); ++i)
    if ((fits[i] = fittingDevices(view[i], req))) order.push_back(i), total += fits[i];
  if (total < req.count) return {};
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (fits[a] != fits[b]) return fits[a] > fits[b];  // few members
    const auto la = loadOf(view[a], req), lb = loadOf(view[b], req);
    if (la.first != lb.first) return policy == PoolPolicy::kSpread ? la.first < lb.first : la.first > lb.first;
    if (la.second != lb.second) return policy == PoolPolicy::kSpread ? la.second > lb.second : la.second < lb.second;
    return view[a].name == self && view[b].name != self;
  });
  std::vector<SpanPart> parts;
  uint32_t left = req.count;
  for (size_t i : order) {
    if (!left) break;
    const uint32_t take = std::min(left, fits[i]);
    parts.push_back({view[i].name, view[i].address, take});
    left -= take;
  }
  return parts;
}

bool couldSpan(const std::vector<MemberView>& view, const DeviceRequest& req) {
  std::vector<MemberView> idle = view;
  for (auto& m : idle)
    for (auto& d : m.devices) d.free = d.memory;
  return !chooseSpan(idle, req, PoolPolicy::kSpread, "").empty();
}

}  // namespace rgpu::server::cluster
