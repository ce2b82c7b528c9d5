// Native graphs on the CUDA backend: a session graph of device-side work
// captured once on a stream of the worker's and launched as one CUgraphExec
// (see backend.h, "Native graphs"). Host copies go through device buffers of
// the graph's own, host functions are the graph's host nodes (their closures
// kept with it), events its external record and wait nodes.
#include "common/log.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {

bool CudaBackend::nativeGraphs() const {
  const DriverApi& a = *api_;
  return a.cuStreamBeginCapture && a.cuStreamEndCapture && a.cuGraphInstantiateWithFlags && a.cuGraphLaunch &&
         a.cuGraphExecDestroy && a.cuGraphDestroy;
}

Status CudaBackend::notCapturable(const char* what) const {
  return Status(err::kStreamCaptureUnsupported, std::string(what) + " cannot be a node of a native graph");
}

Status CudaBackend::beginNativeGraph(int device, uint64_t in_bytes, uint64_t out_bytes, uint64_t host_bytes) {
  DriverApi& api = *api_;
  if (!nativeGraphs()) return Backend::beginNativeGraph(device, in_bytes, out_bytes, host_bytes);
  if (capture_.active) return Status(err::kStreamCaptureUnsupported, "a native graph is already being captured");
  if (device < 0 || static_cast<size_t>(device) >= devices_.size())
    return Status(err::kInvalidDevice, "invalid device ordinal " + std::to_string(device));
  RGPU_TRY(use(device));
  if (capture_streams_.size() < devices_.size()) capture_streams_.resize(devices_.size(), nullptr);
  CUstream& stream = capture_streams_[static_cast<size_t>(device)];
  // Non-blocking: a capture on a blocking stream would be invalidated by
  // work on the legacy stream, which the session's other streams may use.
  if (!stream) RGPU_TRY(RGPU_CU(cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, 0)));
  // Relaxed: the completer and releaser threads go on querying events and
  // freeing memory while the dispatch thread captures.
  NativeParts parts;
  parts.in_bytes = in_bytes, parts.out_bytes = out_bytes, parts.host_bytes = host_bytes;
  Status s;
  if (in_bytes) s = RGPU_CU(cuMemAlloc(&parts.in, in_bytes));
  if (s && out_bytes) s = RGPU_CU(cuMemAlloc(&parts.out, out_bytes));
  void* host = nullptr;
  if (s && host_bytes) s = RGPU_CU(cuMemHostAlloc(&host, host_bytes, 0));
  parts.host = static_cast<uint8_t*>(host);
  if (s) s = RGPU_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  if (!s) {
    NativeGraph none{device, nullptr, std::move(parts), nullptr};
    freeNative(none);
    return s;
  }
  capture_ = {true, device, stream, std::move(parts)};
  return Status::ok();
}

Backend::NativeBuffers CudaBackend::nativeGraphBuffers() const {
  return {capture_.parts.in, capture_.parts.out, capture_.parts.host};
}

Status CudaBackend::copyToNativeHost(StreamKey, uint64_t host_offset, DevPtr src, uint64_t size) {
  DriverApi& api = *api_;
  if (!capture_.active) return Status(err::kIllegalState, "no native graph is being captured");
  if (host_offset > capture_.parts.host_bytes || size > capture_.parts.host_bytes - host_offset)
    return Status(err::kInvalidValue, "past the native graph's host buffer");
  return RGPU_CU(cuMemcpyDtoHAsync(capture_.parts.host + host_offset, src, size, capture_.stream));
}

void CudaBackend::freeNative(NativeGraph& g) {
  DriverApi& api = *api_;
  if (!use(g.device)) return;
  if (g.exec) (void)api.cuGraphExecDestroy(g.exec);
  if (g.last) (void)api.cuEventDestroy(g.last);
  for (CUdeviceptr p : {g.parts.in, g.parts.out})
    if (p) (void)api.cuMemFree(p);
  if (g.parts.host) (void)api.cuMemFreeHost(g.parts.host);
  g.exec = nullptr, g.last = nullptr, g.parts = {};
}

Result<uint32_t> CudaBackend::endNativeGraph(bool keep) {
  DriverApi& api = *api_;
  if (!capture_.active) return Status(err::kStreamCaptureUnmatched, "no native graph is being captured");
  Capture c = std::move(capture_);
  capture_ = {};
  RGPU_TRY(use(c.device));
  CUgraph graph = nullptr;
  // Always ended, even when discarded: the stream must leave capture mode.
  Status s = RGPU_CU(cuStreamEndCapture(c.stream, &graph));
  CUgraphExec exec = nullptr;
  if (s && keep) s = RGPU_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  if (graph) (void)api.cuGraphDestroy(graph);  // the executable graph keeps what it needs
  CUevent last = nullptr;
  if (s && keep) s = RGPU_CU(cuEventCreate(&last, CU_EVENT_DISABLE_TIMING));
  if (!s || !keep) {
    NativeGraph discarded{c.device, exec, std::move(c.parts), last};
    freeNative(discarded);
    return s ? Status(err::kStreamCaptureInvalidated, "native graph discarded") : s;
  }
  uint32_t id = next_native_graph_++;
  native_graphs_[id] = {c.device, exec, std::move(c.parts), last};
  return id;
}

Status CudaBackend::launchNativeGraph(StreamKey key, uint32_t id, Staging in, ReadDone out) {
  DriverApi& api = *api_;
  if (capture_.active) return notCapturable("a graph launch");
  auto it = native_graphs_.find(id);
  if (it == native_graphs_.end()) return Status(err::kInvalidValue, "unknown native graph " + std::to_string(id));
  auto s = streamOf(key);
  if (!s) return s.status();
  if (s->first != it->second.device)
    return Status(err::kInvalidValue, "native graph of device " + std::to_string(it->second.device) +
                                          " launched on a stream of device " + std::to_string(s->first));
  NativeGraph& g = it->second;
  const NativeParts& parts = g.parts;
  if (parts.in_bytes && (!in || in->size() < parts.in_bytes))
    return Status(err::kInvalidValue, "native graph launch without its host-to-device bytes");
  if ((parts.out_bytes || parts.host_bytes) && !out)
    return Status(err::kInvalidValue, "native graph launch without a reader of its results");
  // After the graph's previous launch, wherever it ran: the buffers and host
  // calls are the graph's own.
  RGPU_TRY(RGPU_CU(cuStreamWaitEvent(s->second, g.last, 0)));
  if (parts.in_bytes) RGPU_TRY(copyToDevice(key, parts.in, std::move(in), parts.in_bytes));
  CUgraphExec exec = g.exec;
  // One unit of work for the launch gate, the session's GPU time and the watchdog.
  RGPU_TRY(asKernel(s->first, s->second, "graph " + std::to_string(id),
                    [&] { return RGPU_CU(cuGraphLaunch(exec, s->second)); }));
  // The graph is launched: what fails from here on is the launch's asynchronous error.
  if (out) {
    // The output buffer's bytes; or, with nothing in it (every download went
    // out from a host node), the launch's answer once the graph is done.
    ReadDone fail = out;
    Status r = parts.out_bytes ? copyFromDevice(key, parts.out, parts.out_bytes, std::move(out))
                               : afterDownload(key, s->first, s->second, Pinned{}, 0, std::move(out), Status::ok());
    if (!r) fail(r, nullptr, 0, nullptr);
  }
  if (!parts.events.empty()) {
    // An event the graph records completes once the launch's results are on the wire.
    std::lock_guard lock(mu_);
    auto replies = repliesLocked(key);
    for (uint32_t e : parts.events)
      if (auto ev = events_.find(e); ev != events_.end()) {
        ev->second.replies = replies;
        ev->second.replies_due = replies ? replies->issued : 0;
      }
  }
  if (Status r = RGPU_CU(cuEventRecord(g.last, s->second)); !r) {
    RGPU_LOG_WARN("native graph {}: its next launch is not ordered after this one: {}", id, r.message());
  }
  return Status::ok();
}

void CudaBackend::destroyNativeGraph(uint32_t id) {
  auto it = native_graphs_.find(id);
  if (it == native_graphs_.end()) return;
  auto g = std::make_shared<NativeGraph>(std::move(it->second));
  native_graphs_.erase(it);
  {
    std::lock_guard lock(mu_);
    retired_graphs_.push_back(g);
  }
  // Its buffers and host calls go once the launches queued so far are done
  // (else, with the device broken, when the backend goes).
  Status s = whenDeviceDone(g->device, [this, g](Status) {
    toReleaser([this, g] {
      freeNative(*g);
      std::lock_guard lock(mu_);
      retired_graphs_.remove(g);
    });
  });
  if (!s) RGPU_LOG_WARN("native graph {}: kept until the session ends: {}", id, s.message());
}

void CudaBackend::releaseGraphs() {
  DriverApi& api = *api_;
  if (capture_.active) (void)endNativeGraph(false);
  // The completer and releaser have stopped: freed here, once each graph's last
  // launch is done (its host calls return at once now: the session is gone).
  for (auto& [id, g] : native_graphs_) {
    if (g.last && use(g.device)) (void)api.cuEventSynchronize(g.last);
    freeNative(g);
  }
  native_graphs_.clear();
  for (auto& g : retired_graphs_) {  // destroyed, their release not run
    if (g->last && use(g->device)) (void)api.cuEventSynchronize(g->last);
    freeNative(*g);
  }
  retired_graphs_.clear();
  for (size_t d = 0; d < capture_streams_.size(); ++d)
    if (capture_streams_[d] && use(static_cast<int>(d))) (void)api.cuStreamDestroy(capture_streams_[d]);
  capture_streams_.clear();
}

}  // namespace rgpu::server::cuda
