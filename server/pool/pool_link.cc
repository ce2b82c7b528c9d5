#include "server/pool/pool_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cctype>
#include <cstring>
#include <thread>
#include <utility>

#include "common/log.h"
#include "server/pool/fd_passing.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::server {
namespace {
// A control datagram: the status of a large pool is the biggest.
constexpr size_t kMaxControlBytes = 1 << 20;
constexpr size_t kMaxStatusSessions = 4096;

uint64_t toU64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

std::string clean(std::string s) {
  for (char& c : s)
    if (c == kFieldSep) c = ' ';
  return s;
}
}  // namespace

std::string toHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string fromHex(const std::string& hex) {
  auto nibble = [](char c) { return c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0'; };
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    if (!std::isxdigit(static_cast<unsigned char>(hex[i])) || !std::isxdigit(static_cast<unsigned char>(hex[i + 1])))
      return "";
    out += static_cast<char>(nibble(hex[i]) << 4 | nibble(hex[i + 1]));
  }
  return out;
}

std::string joinFields(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += kFieldSep;
    out += clean(fields[i]);
  }
  return out;
}

std::vector<std::string> splitFields(const std::string& msg, size_t max_fields) {
  std::vector<std::string> out;
  size_t at = 0;
  while (out.size() + 1 < max_fields) {
    size_t next = msg.find(kFieldSep, at);
    if (next == std::string::npos) break;
    out.push_back(msg.substr(at, next - at));
    at = next + 1;
  }
  out.push_back(msg.substr(at));  // the last field keeps any separators (binary payloads)
  return out;
}

std::vector<std::string> placementFields(const Placement& p) {
  std::string devs;
  for (int d : p.devices) devs += (devs.empty() ? "" : ",") + std::to_string(d);
  // A span's parts: "count\x1daddress\x1dmember", separated by 0x1e (member
  // names and addresses with control characters never get this far: placement.cc).
  std::string span;
  for (const auto& part : p.span)
    span += (span.empty() ? "" : "\x1e") + std::to_string(part.count) + "\x1d" + part.address + "\x1d" + part.member;
  return {devs, std::to_string(p.quota), std::to_string(static_cast<int>(p.priority)), std::to_string(p.weight),
          std::to_string(p.gate_slot), std::to_string(p.mps_thread_percentage), p.redirect, p.redirect_member, span,
          std::to_string(p.pool_quota)};
}

Result<Placement> placementFromFields(const std::vector<std::string>& f) {
  if (f.size() < 7) return Status(err::kUnknown, "malformed placement from the pool manager");
  Placement p;
  std::string devs = f[1];
  for (size_t at = 0; at < devs.size();) {
    size_t comma = devs.find(',', at);
    std::string one = devs.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!one.empty()) p.devices.push_back(std::atoi(one.c_str()));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  p.quota = toU64(f[2]);
  int prio = std::atoi(f[3].c_str());
  p.priority = prio == 2 ? Priority::kHigh : prio == 0 ? Priority::kLow : Priority::kNormal;
  p.weight = std::atof(f[4].c_str());
  p.gate_slot = std::atoi(f[5].c_str());
  p.mps_thread_percentage = static_cast<uint32_t>(std::atoi(f[6].c_str()));
  if (f.size() >= 9) p.redirect = f[7], p.redirect_member = f[8];
  if (f.size() >= 10 && !f[9].empty()) {
    for (size_t at = 0; at <= f[9].size();) {
      size_t end = f[9].find('\x1e', at);
      std::string one = f[9].substr(at, end == std::string::npos ? std::string::npos : end - at);
      size_t a = one.find('\x1d'), b = a == std::string::npos ? a : one.find('\x1d', a + 1);
      if (b == std::string::npos) return Status(err::kUnknown, "malformed span from the pool manager");
      p.span.push_back({one.substr(b + 1), one.substr(a + 1, b - a - 1), static_cast<uint32_t>(toU64(one.substr(0, a)))});
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  if (f.size() >= 11) p.pool_quota = toU64(f[10]);
  return p;
}

std::string encodePoolStatus(const PoolSnapshot& s, const std::string& user, bool admin,
                             const std::vector<DeviceHealth>& health) {
  capnp::MallocMessageBuilder out;
  auto st = out.initRoot<wire::PoolStatus>();
  auto devs = st.initDevices(static_cast<unsigned>(s.devices.size()));
  for (size_t i = 0; i < s.devices.size(); ++i) {
    auto d = devs[static_cast<unsigned>(i)];
    const auto& x = s.devices[i];
    d.setIndex(static_cast<uint32_t>(i));
    d.setName(x.info.name);
    d.setUuid(x.info.uuid);
    d.setMemoryTotal(x.info.total);
    d.setMemoryUsed(x.used);
    d.setSessions(x.sessions);
    d.setComputeCapability(x.info.cc);
    DeviceHealth h = i < health.size() ? health[i] : DeviceHealth{};
    d.setUtilization(h.utilization);
    d.setTemperature(h.temperature);
    d.setPowerMw(h.power_mw);
  }
  std::vector<const PoolSnapshot::Session*> shown;
  uint32_t queued = 0;
  for (auto& x : s.sessions) {
    queued += x.queued ? 1 : 0;
    if ((admin || x.client.user == user) && shown.size() < kMaxStatusSessions) shown.push_back(&x);
  }
  st.setQueued(queued);
  auto list = st.initSessions(static_cast<unsigned>(shown.size()));
  for (size_t i = 0; i < shown.size(); ++i) {
    auto o = list[static_cast<unsigned>(i)];
    const auto& x = *shown[i];
    o.setId(x.id);
    o.setUser(x.client.user);
    o.setHost(x.client.host);
    o.setPid(x.client.pid);
    o.setAddress(x.client.address);
    auto d = o.initDevices(static_cast<unsigned>(x.devices.size()));
    for (size_t k = 0; k < x.devices.size(); ++k) d.set(static_cast<unsigned>(k), static_cast<uint32_t>(x.devices[k]));
    o.setMemory(x.memory);
    o.setPriority(priorityName(x.priority));
    o.setGpuTimeNs(x.usage.gpu_ns);
    o.setCalls(x.usage.calls);
    o.setState(x.queued ? "queued" : "running");
    o.setSeconds(static_cast<uint64_t>(x.seconds));
  }
  auto words = capnp::messageToFlatArray(out);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// ---- LocalPool --------------------------------------------------------------

LocalPool::~LocalPool() {
  std::lock_guard lock(*mu_);
  pool_->end(session_);
}

Result<Placement> LocalPool::admit(const ClientInfo& who, const DeviceRequest& req) {
  std::unique_lock lock(*mu_);
  auto now = PoolManager::Clock::now();
  auto d = pool_->admit(session_, who, req, now);
  if (d) return *d;
  // Queued: poll until decided (in-process use only: tests and tools).
  for (;;) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lock.lock();
    for (auto& [id, r] : pool_->retry(PoolManager::Clock::now()))
      if (id == session_) return r;
  }
}

Status LocalPool::reserve(int device, uint64_t bytes, bool /*checked*/) {
  std::lock_guard lock(*mu_);
  return pool_->reserve(session_, device, bytes);
}

void LocalPool::release(int device, uint64_t bytes) {
  std::lock_guard lock(*mu_);
  pool_->release(session_, device, bytes);
}

std::pair<uint64_t, uint64_t> LocalPool::quotaView(int device) {
  std::lock_guard lock(*mu_);
  return pool_->quotaView(session_, device);
}

Result<std::string> LocalPool::status(const std::string& user) {
  std::lock_guard lock(*mu_);
  return encodePoolStatus(pool_->snapshot(PoolManager::Clock::now()), user, pool_->isAdmin(user), {});
}

void LocalPool::usage(const SessionUsage& u) {
  std::lock_guard lock(*mu_);
  pool_->usage(session_, u);
}

// ---- ControlSocketLink -------------------------------------------------------

ControlSocketLink::ControlSocketLink(int fd, int gate_policy_fd, std::chrono::milliseconds answer_timeout, int stop_fd)
    : fd_(fd), gate_policy_fd_(gate_policy_fd), answer_timeout_(answer_timeout), stop_fd_(stop_fd) {}

ControlSocketLink::~ControlSocketLink() {
  ::close(fd_);
  if (gate_policy_fd_ >= 0) ::close(gate_policy_fd_);
  if (gate_page_fd_ >= 0) ::close(gate_page_fd_);
}

std::unique_ptr<LaunchGate> ControlSocketLink::gateFor(const Placement& p) {
  if (gate_page_fd_ < 0 || gate_policy_fd_ < 0 || p.gate_slot < 0) return nullptr;
  int page = std::exchange(gate_page_fd_, -1);  // map() seals and closes it
  auto peers = [this](int slot, uint64_t session) {
    int fd = -1;
    auto r = ask(joinFields({"peer", std::to_string(slot), std::to_string(session)}), answer_timeout_, &fd);
    if (!r && fd >= 0) ::close(fd);
    return r ? fd : -1;
  };
  auto g = SharedLaunchGate::map(page, gate_policy_fd_, p.gate_slot, p.devices, peers);
  if (!g) {
    RGPU_LOG_WARN("launch gate unavailable, kernels run without priorities and weights: {}", g.status().message());
    return nullptr;
  }
  return std::move(*g);
}

void ControlSocketLink::send(const std::string& msg) {
  if (::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL) < 0)
    RGPU_LOG_DEBUG("control socket: send: {}", std::strerror(errno));
}

Result<std::string> ControlSocketLink::ask(const std::string& msg, std::chrono::milliseconds timeout, int* fd) {
  std::lock_guard lock(mu_);
  if (::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL) < 0)
    return Status(err::kDevicesUnavailable, std::string("the rgpu-server daemon is gone: ") + std::strerror(errno));
  pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  int r;
  while ((r = ::poll(p, stop_fd_ >= 0 ? 2 : 1, static_cast<int>(timeout.count()))) < 0 && errno == EINTR) {
  }
  if (r > 0 && (p[1].revents & POLLIN) && !(p[0].revents & POLLIN))
    return Status(err::kDevicesUnavailable, "rgpu-server is shutting down");
  if (r <= 0) return Status(err::kDevicesUnavailable, "the rgpu-server daemon did not answer the pool request");
  std::string buf(kMaxControlBytes, '\0');
  int passed = -1;
  ssize_t n = receiveWithFd(fd_, buf, passed);
  if (fd) *fd = passed;
  else if (passed >= 0) ::close(passed);
  if (n <= 0) return Status(err::kDevicesUnavailable, "the rgpu-server daemon closed the control socket");
  buf.resize(static_cast<size_t>(n));
  if (buf.rfind("err", 0) == 0) {
    auto f = splitFields(buf, 3);
    if (f.size() < 3) return Status(err::kUnknown, "malformed error from the pool manager");
    return Status(std::atoi(f[1].c_str()), f[2]);
  }
  if (buf != "ok" && buf.rfind(std::string("ok") + kFieldSep, 0) != 0)
    return Status(err::kUnknown, "malformed reply from the pool manager");
  return buf;
}

Status ControlSocketLink::bindIdentity(const std::string& user, const ClientCredential& c) {
  auto r = ask(joinFields({"auth", user, c.token, c.cert_pem, toHex(c.binding), toHex(c.proof)}), answer_timeout_);
  if (!r) return r.status();
  return Status::ok();
}

Result<Placement> ControlSocketLink::admit(const ClientInfo& who, const DeviceRequest& req) {
  // The reply brings this session's launch gate page along.
  if (gate_page_fd_ >= 0) ::close(std::exchange(gate_page_fd_, -1));
  auto f = ask(joinFields({"admit", who.user, who.host, who.address, std::to_string(who.pid), std::to_string(req.count),
                           std::to_string(req.min_memory), std::to_string(req.min_cc), req.model,
                           std::to_string(req.wait_ms), req.no_redirect ? "1" : "0"}),
               answer_timeout_ + std::chrono::milliseconds(req.wait_ms ? req.wait_ms : 24u * 3600 * 1000),
               &gate_page_fd_);
  if (!f) return f.status();
  return placementFromFields(splitFields(*f, 11));
}

void ControlSocketLink::resumable() { send("resumable"); }

Result<Placement> ControlSocketLink::rejoin() {
  if (gate_page_fd_ >= 0) ::close(std::exchange(gate_page_fd_, -1));
  auto f = ask("rejoin", answer_timeout_, &gate_page_fd_);
  if (!f) return f.status();
  return placementFromFields(splitFields(*f, 11));
}

Result<std::string> ControlSocketLink::moveSession(uint64_t session, const std::string& member) {
  // A move takes as long as its checkpoint and restore, bounded by the
  // daemon (session_move.h): wait well past that.
  auto r = ask(joinFields({"move", std::to_string(session), member}), answer_timeout_ + std::chrono::minutes(30));
  if (!r) return r.status();
  auto f = splitFields(*r, 2);
  return f.size() > 1 ? f[1] : std::string();
}

Status ControlSocketLink::reserve(int device, uint64_t bytes, bool checked) {
  std::string msg = joinFields({"reserve", std::to_string(device), std::to_string(bytes), checked ? "1" : "0"});
  if (!checked) {
    send(msg);
    return Status::ok();
  }
  auto f = ask(msg, answer_timeout_);
  return f ? Status::ok() : f.status();
}

void ControlSocketLink::release(int device, uint64_t bytes) {
  send(joinFields({"release", std::to_string(device), std::to_string(bytes)}));
}

std::pair<uint64_t, uint64_t> ControlSocketLink::quotaView(int device) {
  auto r = ask(joinFields({"view", std::to_string(device)}), answer_timeout_);
  if (!r) return {0, 0};
  auto f = splitFields(*r, 3);
  if (f.size() < 3) return {0, 0};
  return {toU64(f[1]), toU64(f[2])};
}

Result<std::string> ControlSocketLink::status(const std::string& user) {
  auto r = ask(joinFields({"status", user}), answer_timeout_);
  if (!r) return r.status();
  auto f = splitFields(*r, 2);
  if (f.size() < 2) return Status(err::kUnknown, "malformed status from the pool manager");
  return f[1];
}

Result<std::string> ControlSocketLink::members() {
  auto r = ask("members", answer_timeout_);
  if (!r) return r.status();
  auto f = splitFields(*r, 2);
  if (f.size() < 2) return Status(err::kUnknown, "malformed members answer from the pool manager");
  return f[1];
}

void ControlSocketLink::ended(const std::string& reason) { send(joinFields({"ended", reason})); }

void ControlSocketLink::usage(const SessionUsage& u) {
  send(joinFields({"usage", std::to_string(u.calls), std::to_string(u.bytes_in), std::to_string(u.bytes_out),
                   std::to_string(u.gpu_ns), std::to_string(u.errors)}));
}

}  // namespace rgpu::server
