// Where each request goes: the runtime's call and post, over the program's
// servers (client/servers.h), and the host functions they ask the client to run.
#include "client/graph.h"
#include "client/managed.h"
#include "client/runtime.h"
#include "common/log.h"

#include <chrono>
#include <thread>

namespace rgpu::client {
namespace {
// Requests that run device work which may read or write managed memory:
// the host's dirty managed pages go to the server first (client/managed.h).
bool isDeviceWork(wire::Request::Which w) {
  using R = wire::Request;
  switch (w) {
    case R::MEMCPY_HTO_D: case R::MEMCPY_DTO_H: case R::MEMCPY_DTO_D: case R::MEMSET: case R::MEMCPY2_D:
    case R::MEMSET2_D: case R::LAUNCH_KERNEL: case R::MEMCPY_PEER: case R::BLAS: case R::LT_MATMUL: case R::COPY3_D:
    case R::GRAPH_LAUNCH: case R::RAND_FILL: case R::FFT_EXEC: case R::SOLVER:
    case R::SPARSE: case R::DNN:
      return true;
    default:
      return false;
  }
}
}  // namespace

int Runtime::deviceNamed(wire::Request::Reader r) {
  using R = wire::Request;
  int device = -1;
  switch (r.which()) {
    case R::FREE: classify(reinterpret_cast<const void*>(r.getFree().getPtr()), &device); break;
    case R::POINTER_ATTRIBUTES:
      classify(reinterpret_cast<const void*>(r.getPointerAttributes().getPtr()), &device);
      break;
    case R::EVENT_SYNCHRONIZE: device = eventDevice(r.getEventSynchronize().getId()); break;
    case R::EVENT_QUERY: device = eventDevice(r.getEventQuery().getId()); break;
    case R::EVENT_DESTROY: device = eventDevice(r.getEventDestroy().getId()); break;
    case R::EVENT_ELAPSED_TIME: device = eventDevice(r.getEventElapsedTime().getStart()); break;
    default: break;
  }
  return device;
}

Result<Connection*> Runtime::route(capnp::MessageBuilder& msg, int device) {
  auto set = servers();
  if (!set) return set.status();
  if ((*set)->single()) return &(*set)->primary();
  auto req = msg.getRoot<wire::Request>();
  if (device < 0) device = deviceNamed(req.asReader());
  size_t part = 0;
  RGPU_TRY((*set)->localize(req, device, &part));
  return &(*set)->part(part);
}

Result<Reply> Runtime::callOn(int device, capnp::MessageBuilder& msg, const void* bulk, uint64_t bulk_len, void* in,
                              uint64_t in_len) {
  if (int s = sticky_.load(std::memory_order_relaxed)) return Status(s, "a kernel fault made the context unusable");
  const bool own = ManagedMemory::transferring();  // managed bytes on the runtime's own stream
  if (capturesActive() && !own) RGPU_TRY(captureAllowsCall(msg.getRoot<wire::Request>().asReader()));
  if (!own && isDeviceWork(msg.getRoot<wire::Request>().which())) RGPU_TRY(ManagedMemory::get().beforeDeviceWork());
  auto c = route(msg, device);
  if (!c) return c.status();
  Reply r = (*c)->call(msg, bulk, bulk_len, in, in_len);
  if (err::isSticky(r.status.code())) sticky_.store(r.status.code());
  if (err::isSticky(r.async_error.code())) sticky_.store(r.async_error.code());
  if (!r.status) {
    if (err::isSticky(r.status.code())) common::logOnce("sticky:" + r.status.message(), "rgpu server " + (*c)->server() + ": " + r.status.message());
    return r.status;
  }
  if (!r.async_error.isOk()) {
    // The generic cudaGetErrorString text rarely says enough ("no kernel
    // image is available"); the server's reason does. Say it once.
    common::logOnce("async:" + r.async_error.message(),
                    "rgpu server " + (*c)->server() + ": " + r.async_error.message());
    return r.async_error;
  }
  if (Status d = (*c)->takeDeferredError(); !d) return d;
  return r;
}

Status Runtime::postOn(int device, capnp::MessageBuilder& msg, const void* bulk, uint64_t bulk_len, bool pinned) {
  if (int s = sticky_.load(std::memory_order_relaxed)) return Status(s, "a kernel fault made the context unusable");
  if (capturesActive() && !ManagedMemory::transferring()) {
    // A capturing stream's work becomes a graph node instead of a message.
    auto r = msg.getRoot<wire::Request>().asReader();
    if (auto s = requestStream(r)) {
      Status st;
      if (captureRequest(*s, r, &st)) return st;
    }
  }
  if (isDeviceWork(msg.getRoot<wire::Request>().which())) RGPU_TRY(ManagedMemory::get().beforeDeviceWork());
  auto c = route(msg, device);
  if (!c) return c.status();
  return (*c)->post(msg, bulk, bulk_len, pinned);
}

Status Runtime::postExpectingData(capnp::MessageBuilder& msg, void* in, uint64_t in_len) {
  RGPU_TRY(ManagedMemory::get().beforeDeviceWork());  // (the connection is used directly)
  auto c = route(msg, -1);
  if (!c) return c.status();
  return (*c)->postExpectingData(msg, in, in_len);
}

Status Runtime::postScatter(capnp::MessageBuilder& msg, std::vector<uint8_t> bulk,
                            std::vector<std::pair<void*, uint64_t>> parts) {
  RGPU_TRY(ManagedMemory::get().beforeDeviceWork());  // (the connection is used directly)
  auto c = route(msg, -1);
  if (!c) return c.status();
  return (*c)->postScatter(msg, std::move(bulk), std::move(parts));
}

void Runtime::hostFuncDone(uint64_t id, size_t part) {
  ServerSet* set = servers_ptr_.load(std::memory_order_acquire);
  if (!set || part >= set->size()) return;  // exiting: the sessions are closed
  common::CallMessage msg(32);
  msg.initRoot<wire::Request>().initHostFuncDone().setId(id);
  (void)set->part(part).postNow(msg);  // the stream waits for it: not after a flusher's nap
}

void Runtime::addGate(uint64_t opener, size_t opener_part, uint64_t waiter, size_t waiter_part) {
  auto g = std::make_shared<Gate>();
  g->opener = opener, g->opener_part = opener_part;
  g->waiter = waiter, g->waiter_part = waiter_part;
  std::lock_guard lock(host_fn_mu_);
  gates_[opener] = g;
  gates_[waiter] = g;
  if (!gate_watch_) {
    gate_watch_ = true;
    std::thread([this] { watchGates(); }).detach();  // the runtime is never destroyed
  }
}

void Runtime::watchGates() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ServerSet* set = servers_ptr_.load(std::memory_order_acquire);
    std::vector<std::pair<uint64_t, size_t>> done;
    {
      std::lock_guard lock(host_fn_mu_);
      if (gates_.empty() || !set) {
        gate_watch_ = false;
        return;
      }
      for (auto it = gates_.begin(); it != gates_.end();) {
        Gate& g = *it->second;
        if (it->first == g.opener && !set->part(g.opener_part).broken().isOk()) {
          RGPU_LOG_WARN("the server of an event a stream of {} waits for is lost: the stream goes on without it",
                        set->part(g.waiter_part).server());
          g.opened = true;
          if (g.arrived) done.emplace_back(g.waiter, g.waiter_part), gates_.erase(g.waiter);
          it = gates_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto [id, part] : done) hostFuncDone(id, part);
  }
}

}  // namespace rgpu::client
