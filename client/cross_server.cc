#include "client/cross_server.h"

#include <map>
#include <mutex>
#include <vector>

#include "client/api_util.h"
#include "protocol/frame.h"

namespace rgpu::client {
namespace {

Status syncStream(StreamRef s) {
  capnp::MallocMessageBuilder msg(32);
  setStream(msg.initRoot<wire::Request>().initStreamSynchronize(), s);
  auto r = rt().call(msg);
  return r ? Status::ok() : r.status();
}

// Copies [src, src + n) of device `device` to the host, done on return.
Status toHost(void* dst, uint64_t src, uint64_t n, int device) {
  capnp::MallocMessageBuilder msg(64);
  auto m = msg.initRoot<wire::Request>().initMemcpyDtoH();
  m.setSrc(src);
  m.setSize(n);
  setStream(m.initStream(), {0, device});
  auto r = rt().call(msg, nullptr, 0, dst, n);
  return r ? Status::ok() : r.status();
}

// Copies host bytes to device `device`; `last`: done (and checked) on return.
Status toDevice(uint64_t dst, const void* src, uint64_t n, int device, bool last) {
  capnp::MallocMessageBuilder msg(64);
  auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
  m.setDst(dst);
  m.setSize(n);
  setStream(m.initStream(), {0, device});
  if (!last) return rt().post(msg, src, n);  // sent now: the buffer may be reused
  auto r = rt().call(msg, src, n);
  return r ? Status::ok() : r.status();
}

// Device to device on one server (both sides there), done on return.
Status onServer(uint64_t dst, int dd, uint64_t src, int sd, uint64_t n) {
  capnp::MallocMessageBuilder msg(64);
  auto m = msg.initRoot<wire::Request>().initMemcpyPeer();
  m.setDst(dst);
  m.setDstDevice(dd);
  m.setSrc(src);
  m.setSrcDevice(sd);
  m.setSize(n);
  m.setSerialize(true);
  setStream(m.initStream(), {0, dd});
  RGPU_TRY(rt().post(msg));
  return syncStream({0, dd});
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

bool same(int a, int b) {
  auto set = rt().servers();
  return !set || (*set)->sameServer(a, b);
}

// A non-blocking stream of the runtime's own on `device` (a gate's event side).
Result<StreamRef> relayStream(int device) {
  static std::mutex mu;
  static std::map<int, cudaStream_t> streams;
  std::lock_guard lock(mu);
  if (auto it = streams.find(device); it != streams.end())
    if (auto s = rt().stream(it->second)) return *s;  // (gone after cudaDeviceReset)
  uint32_t id = 0;
  cudaStream_t h = rt().newStream(device, cudaStreamNonBlocking, 0, &id);
  capnp::MallocMessageBuilder msg(32);
  auto m = msg.initRoot<wire::Request>().initStreamCreate();
  setStream(m.initStream(), {id, device});
  m.setFlags(cudaStreamNonBlocking);
  RGPU_TRY(rt().post(msg));
  streams[device] = h;
  return StreamRef{id, device};
}

}  // namespace

bool relayCopy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, StreamRef s, Status* st) {
  if (!rt().spread()) return false;
  int dd = -1, sd = -1;
  const bool dev_dst = rt().classify(dst, &dd) == MemKind::kDevice;
  const bool dev_src = rt().classify(src, &sd) == MemKind::kDevice;
  const auto d = reinterpret_cast<uint64_t>(dst), sp = reinterpret_cast<uint64_t>(src);
  const uint64_t chunk = protocol::kMaxBulkBytes;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dev_dst || same(dd, s.device)) return false;
      if ((*st = syncStream(s)))
        for (uint64_t off = 0; off < count && *st; off += chunk) {
          const uint64_t n = std::min<uint64_t>(chunk, count - off);
          *st = toDevice(d + off, static_cast<const char*>(src) + off, n, dd, off + n >= count);
        }
      return true;
    case cudaMemcpyDeviceToHost:
      if (!dev_src || same(sd, s.device)) return false;
      if ((*st = syncStream(s)))
        for (uint64_t off = 0; off < count && *st; off += chunk)
          *st = toHost(static_cast<char*>(dst) + off, sp + off, std::min<uint64_t>(chunk, count - off), sd);
      return true;
    case cudaMemcpyDeviceToDevice:
      if (!dev_dst || !dev_src || (same(dd, s.device) && same(sd, s.device))) return false;
      *st = syncStream(s);
      if (*st) *st = same(dd, sd) ? onServer(d, dd, sp, sd, count) : between(d, dd, sp, sd, count);
      return true;
    default:
      return false;
  }
}

Status relayPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, StreamRef s) {
  RGPU_TRY(syncStream(s));
  const auto d = reinterpret_cast<uint64_t>(dst), sp = reinterpret_cast<uint64_t>(src);
  if (same(dst_device, src_device)) return onServer(d, dst_device, sp, src_device, count);
  return between(d, dst_device, sp, src_device, count);
}

bool relayMemset(void* dst, int value, size_t count, StreamRef s, Status* st) {
  int dd = -1;
  if (!rt().spread() || rt().classify(dst, &dd) != MemKind::kDevice || same(dd, s.device)) return false;
  *st = syncStream(s);
  if (!*st) return true;
  capnp::MallocMessageBuilder msg(64);
  auto m = msg.initRoot<wire::Request>().initMemset();
  m.setDst(reinterpret_cast<uint64_t>(dst));
  m.setValue(static_cast<uint8_t>(value));
  m.setSize(count);
  setStream(m.initStream(), {0, dd});
  *st = rt().post(msg);
  if (*st) *st = syncStream({0, dd});
  return true;
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
    capnp::MallocMessageBuilder msg(32);
    auto m = msg.initRoot<wire::Request>().initStreamWaitEvent();
    setStream(m.initStream(), *p);
    m.setEvent(event);
    RGPU_TRY(rt().post(msg));
    capnp::MallocMessageBuilder open(32);
    auto h = open.initRoot<wire::Request>().initHostFuncEnqueue();
    h.setId(opener);
    setStream(h.initStream(), *p);
    RGPU_TRY(rt().post(open));
  }
  // The waiting stream: a host function that finishes once the gate is open.
  capnp::MallocMessageBuilder msg(32);
  auto h = msg.initRoot<wire::Request>().initHostFuncEnqueue();
  h.setId(waiter);
  setStream(h.initStream(), s);
  return rt().post(msg);
}

}  // namespace rgpu::client
