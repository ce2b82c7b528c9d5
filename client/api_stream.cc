// Streams, events, host functions, synchronisation.
#include "client/api_util.h"
#include "client/arrays.h"
#include "client/cross_server.h"
#include "client/graph.h"

using namespace rgpu;
using namespace rgpu::client;

namespace rgpu::client {

Status streamSyncImpl(cudaStream_t stream, bool ptsz) {
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  common::CallMessage msg(32);
  setStream(msg.initRoot<wire::Request>().initStreamSynchronize(), *s);
  auto r = rt().call(msg);
  rt().flushDeviceOutput();
  return r ? Status::ok() : r.status();
}

Status streamQueryImpl(cudaStream_t stream, bool ptsz) {
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  common::CallMessage msg(32);
  setStream(msg.initRoot<wire::Request>().initStreamQuery(), *s);
  auto r = rt().call(msg);
  return r ? Status::ok() : r.status();
}

Status streamWaitEventImpl(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool ptsz) {
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  auto e = rt().event(event);
  if (!e) return e.status();
  if (Status c; capturesActive() && captureEventWait(*s, event, *e, flags, &c)) return c;
  // The event's device is looked up only where it may be another server's.
  if (const int ed = rt().spread() ? rt().eventDevice(*e) : -1; rt().acrossServers(ed, s->device))
    return waitAcrossServers(*s, *e, ed);
  common::CallMessage msg(32);
  auto m = msg.initRoot<wire::Request>().initStreamWaitEvent();
  setStream(m.initStream(), *s);
  m.setEvent(*e);
  m.setFlags(flags);
  return rt().post(msg);
}

Status eventRecordImpl(cudaEvent_t event, cudaStream_t stream, bool ptsz, unsigned flags) {
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  auto e = rt().event(event);
  if (!e) return e.status();
  if (Status c; capturesActive() && captureEventRecord(*s, event, *e, flags, &c)) return c;
  if (rt().spread() && rt().acrossServers(rt().eventDevice(*e), s->device))
    return Status(err::kInvalidResourceHandle, "the event and the stream are on devices of two servers");
  common::CallMessage msg(32);
  auto m = msg.initRoot<wire::Request>().initEventRecord();
  m.setId(*e);
  setStream(m.initStream(), *s);
  return rt().post(msg);
}

Status launchHostFuncImpl(cudaStream_t stream, void (*fn)(void*), void* user, bool ptsz) {
  RGPU_TRY(needPtr(reinterpret_cast<const void*>(fn), "fn"));
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  if (Status c; capturesActive() && captureNodeOn(*s, [&] { return hostParams(cudaHostNodeParams{fn, user}); }, &c, nullptr))
    return c;
  // Runs here, on the client, when the server's stream reaches this point.
  uint64_t id = rt().addHostFunc(fn, user);
  common::CallMessage msg(32);
  auto m = msg.initRoot<wire::Request>().initHostFuncEnqueue();
  m.setId(id);
  setStream(m.initStream(), *s);
  return rt().post(msg);
}

}  // namespace rgpu::client

namespace {
Status createStream(cudaStream_t* pStream, unsigned flags, int priority) {
  RGPU_TRY(needPtr(pStream, "pStream"));
  if (flags & ~1u) return Status(err::kInvalidValue, "unknown stream flags");
  auto c = rt().conn();
  if (!c) return c.status();
  int dev = rt().currentDevice();
  uint32_t id = 0;
  cudaStream_t h = rt().newStream(dev, flags, priority, &id);
  common::CallMessage msg(32);
  auto m = msg.initRoot<wire::Request>().initStreamCreate();
  setStream(m.initStream(), {id, dev});
  m.setFlags(flags);
  m.setPriority(priority);
  RGPU_TRY(rt().post(msg));
  *pStream = h;
  return Status::ok();
}

struct CallbackArgs {
  cudaStreamCallback_t cb;
  cudaStream_t stream;
  void* user;
};
void runStreamCallback(void* p) {
  auto* a = static_cast<CallbackArgs*>(p);
  a->cb(a->stream, cudaSuccess, a->user);
  delete a;
}
}  // namespace

RGPU_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return guarded([&] { return createStream(pStream, 0, 0); });
}
RGPU_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return guarded([&] { return createStream(pStream, flags, 0); });
}
RGPU_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  // Clamp as CUDA does: lower numbers are higher priority, range [-5, 0].
  return guarded([&] { return createStream(pStream, flags, std::max(-5, std::min(0, priority))); });
}
RGPU_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}
RGPU_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return guarded([&]() -> Status {
    StreamRef ref;
    RGPU_TRY(rt().dropStream(stream, &ref));
    if (capturesActive()) forgetCaptureStream(ref.id);
    common::CallMessage msg(32);
    setStream(msg.initRoot<wire::Request>().initStreamDestroy(), ref);
    return rt().post(msg);
  });
}
RGPU_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(flags, "flags"));
    auto i = rt().streamInfo(hStream);
    if (!i) return i.status();
    *flags = i->first;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int* flags) {
  return cudaStreamGetFlags(hStream, flags);
}
RGPU_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(priority, "priority"));
    auto i = rt().streamInfo(hStream);
    if (!i) return i.status();
    *priority = i->second;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int* priority) {
  return cudaStreamGetPriority(hStream, priority);
}
RGPU_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(device, "device"));
    auto s = rt().stream(hStream);
    if (!s) return s.status();
    *device = s->device;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int* device) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(device, "device"));
    auto s = rt().stream(hStream, true);
    if (!s) return s.status();
    *device = s->device;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return guarded([&] { return streamSyncImpl(stream, false); });
}
RGPU_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return guarded([&] { return streamSyncImpl(stream, true); });
}
// cudaStreamQuery's "not ready" is an answer, not an error: it does not become
// the thread's last error.
RGPU_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Status s = streamQueryImpl(stream, false);
  return s.code() == err::kNotReady ? cudaErrorNotReady : guarded([&] { return s; });
}
RGPU_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  Status s = streamQueryImpl(stream, true);
  return s.code() == err::kNotReady ? cudaErrorNotReady : guarded([&] { return s; });
}
RGPU_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return guarded([&] { return streamWaitEventImpl(stream, event, flags, false); });
}
RGPU_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return guarded([&] { return streamWaitEventImpl(stream, event, flags, true); });
}
RGPU_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return guarded([&] { return launchHostFuncImpl(stream, fn, userData, false); });
}
RGPU_EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return guarded([&] { return launchHostFuncImpl(stream, fn, userData, true); });
}
RGPU_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                              unsigned int flags) {
  return guarded([&]() -> Status {
    if (flags != 0) return Status(err::kInvalidValue, "flags must be 0");
    RGPU_TRY(needPtr(reinterpret_cast<const void*>(callback), "callback"));
    auto* args = new CallbackArgs{callback, stream, userData};
    Status s = launchHostFuncImpl(stream, runStreamCallback, args, false);
    if (!s) delete args;
    return s;
  });
}
RGPU_EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                                   unsigned int flags) {
  return cudaStreamAddCallback(stream, callback, userData, flags);
}

// ---- events ------------------------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(event, "event"));
    if (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess))
      return Status(err::kInvalidValue, "unknown event flags");
    if (flags & cudaEventInterprocess) return Status(err::kNotSupported, "interprocess events are not supported");
    auto c = rt().conn();
    if (!c) return c.status();
    int dev = rt().currentDevice();
    uint32_t id = 0;
    cudaEvent_t h = rt().newEvent(dev, flags, &id);
    common::CallMessage msg(32);
    auto m = msg.initRoot<wire::Request>().initEventCreate();
    m.setId(id);
    m.setDevice(dev);
    m.setFlags(flags);
    RGPU_TRY(rt().post(msg));
    *event = h;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
RGPU_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return guarded([&] { return eventRecordImpl(event, stream, false); });
}
RGPU_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return guarded([&] { return eventRecordImpl(event, stream, true); });
}
RGPU_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return guarded([&]() -> Status {
    if (flags & ~cudaEventRecordExternal) return Status(err::kInvalidValue, "unknown event record flags");
    return eventRecordImpl(event, stream, false, flags);
  });
}
RGPU_EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return guarded([&]() -> Status {
    if (flags & ~cudaEventRecordExternal) return Status(err::kInvalidValue, "unknown event record flags");
    return eventRecordImpl(event, stream, true, flags);
  });
}
RGPU_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return guarded([&]() -> Status {
    auto e = rt().event(event);
    if (!e) return e.status();
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initEventSynchronize().setId(*e);
    auto r = rt().call(msg);
    rt().flushDeviceOutput();
    return r ? Status::ok() : r.status();
  });
}
RGPU_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  auto e = rt().event(event);
  if (!e) return guarded([&] { return e.status(); });
  common::CallMessage msg(32);
  msg.initRoot<wire::Request>().initEventQuery().setId(*e);
  auto r = rt().call(msg);
  if (!r && r.status().code() == err::kNotReady) return cudaErrorNotReady;
  return guarded([&] { return r ? Status::ok() : r.status(); });
}
RGPU_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(ms, "ms"));
    auto a = rt().event(start);
    if (!a) return a.status();
    auto b = rt().event(end);
    if (!b) return b.status();
    if (rt().acrossServers(rt().eventDevice(*a), rt().eventDevice(*b)))
      return Status(err::kInvalidResourceHandle, "the events are on devices of two servers: no common clock");
    common::CallMessage msg(32);
    auto m = msg.initRoot<wire::Request>().initEventElapsedTime();
    m.setStart(*a);
    m.setEnd(*b);
    auto r = rt().call(msg);
    if (!r) return r.status();
    *ms = r->reader().getElapsedMs();
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return guarded([&]() -> Status {
    uint32_t id = 0;
    int device = 0;
    RGPU_TRY(rt().dropEvent(event, &id, &device));
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initEventDestroy().setId(id);
    return rt().postOn(device, msg);
  });
}

// ---- device-wide synchronisation ------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  return guarded([&]() -> Status {
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initDeviceSynchronize().setDevice(rt().currentDevice());
    auto r = rt().call(msg);
    rt().flushDeviceOutput();
    return r ? Status::ok() : r.status();
  });
}

RGPU_EXPORT cudaError_t cudaDeviceReset(void) {
  return guarded([&]() -> Status {
    int dev = rt().currentDevice();
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initDeviceReset().setDevice(dev);
    auto r = rt().call(msg);
    rt().flushDeviceOutput();
    rt().forgetDevice(dev);
    forgetDeviceArrays(dev);
    forgetDeviceObjects(dev);
    return r ? Status::ok() : r.status();
  });
}
