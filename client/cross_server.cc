#include "client/cross_server.h"

#include <map>
#include <optional>
#include <mutex>
#include <vector>

#include "client/api_util.h"
#include "protocol/frame.h"

namespace rgpu::client {
namespace {

// Copies [src, src + n) of device `device` to the host, done on return.
Status toHost(void* dst, uint64_t src, uint64_t n, int device) {
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initMemcpyDtoH();
  m.setSrc(src);
  m.setSize(n);
  setStream(m.initStream(), {0, device});
  auto r = rt().call(msg, nullptr, 0, dst, n);
  return r ? Status::ok() : r.status();
}

// Copies host bytes to device `device`; `last`: done (and checked) on return.
Status toDevice(uint64_t dst, const void* src, uint64_t n, int device, bool last) {
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
  m.setDst(dst);
  m.setSize(n);
  setStream(m.initStream(), {0, device});
  if (!last) return rt().post(msg, src, n);  // sent now: the buffer may be reused
  auto r = rt().call(msg, src, n);
  return r ? Status::ok() : r.status();
}

// Device to device between two servers, through a host buffer, in pieces
// of kRelayPiece: a piece's host-to-device leg is sent while the next
// piece's device-to-host leg runs.
constexpr uint64_t kRelayPiece = 8ull << 20;
Status between(uint64_t dst, int dd, uint64_t src, int sd, uint64_t n) {
  const uint64_t chunk = kRelayPiece;
  std::vector<char> buf(std::min(n, chunk));
  for (uint64_t off = 0; off < n; off += chunk) {
    const uint64_t k = std::min(chunk, n - off);
    RGPU_TRY(toHost(buf.data(), src + off, k, sd));
    RGPU_TRY(toDevice(dst + off, buf.data(), k, dd, off + k >= n));
  }
  return Status::ok();
}

// A non-blocking stream of the runtime's own on `device` (a gate's event side).
Result<StreamRef> relayStream(int device) {
  static std::mutex mu;
  static std::map<int, uint32_t> streams;
  std::lock_guard lock(mu);
  if (auto it = streams.find(device); it != streams.end() && rt().streamNonBlocking(it->second))
    return StreamRef{it->second, device};  // (gone after cudaDeviceReset: made again)
  auto id = rt().newOwnStream(device);
  if (!id) return id.status();
  streams[device] = *id;
  return StreamRef{*id, device};
}

}  // namespace

Status synchronize(StreamRef s) {
  common::CallMessage msg(32);
  setStream(msg.initRoot<wire::Request>().initStreamSynchronize(), s);
  auto r = rt().call(msg);
  return r ? Status::ok() : r.status();
}

Result<std::optional<StreamRef>> streamOfServerHolding(const void* p, StreamRef s) {
  if (!rt().spread()) return std::optional<StreamRef>();
  int d = -1;
  if (rt().classify(p, &d) != MemKind::kDevice || !rt().acrossServers(d, s.device)) return std::optional<StreamRef>();
  RGPU_TRY(synchronize(s));
  return std::optional<StreamRef>(StreamRef{0, d});
}

Status relayPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, StreamRef s) {
  RGPU_TRY(synchronize(s));
  if (!rt().acrossServers(dst_device, src_device)) {
    RGPU_TRY(peerOn(dst, dst_device, src, src_device, count, {0, dst_device}, true));
    return synchronize({0, dst_device});
  }
  return between(reinterpret_cast<uint64_t>(dst), dst_device, reinterpret_cast<uint64_t>(src), src_device, count);
}

Status waitAcrossServers(StreamRef s, uint32_t event, int event_device) {
  auto set = rt().servers();
  if (!set) return set.status();
  auto p = relayStream(event_device);
  if (!p) return p.status();
  const uint64_t opener = rt().newHostFuncId(), waiter = rt().newHostFuncId();
  rt().addGate(opener, (*set)->partOf(event_device), waiter, (*set)->partOf(s.device));
  {
    // Where the event is: the private stream waits for it, then opens the gate.
    common::CallMessage msg(32);
    auto m = msg.initRoot<wire::Request>().initStreamWaitEvent();
    setStream(m.initStream(), *p);
    m.setEvent(event);
    RGPU_TRY(rt().post(msg));
    common::CallMessage open(32);
    auto h = open.initRoot<wire::Request>().initHostFuncEnqueue();
    h.setId(opener);
    setStream(h.initStream(), *p);
    RGPU_TRY(rt().post(open));
  }
  // The waiting stream: a host function that finishes once the gate is open.
  common::CallMessage msg(32);
  auto h = msg.initRoot<wire::Request>().initHostFuncEnqueue();
  h.setId(waiter);
  setStream(h.initStream(), s);
  return rt().post(msg);
}

}  // namespace rgpu::client
