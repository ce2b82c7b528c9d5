// Native graphs on the CUDA backend: a session graph of device-side work
// captured once on a stream of the worker's and launched as one CUgraphExec
// (see cuda_backend.h, "Graphs").
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

Status CudaBackend::beginNativeGraph(int device) {
  DriverApi& api = *api_;
  if (!nativeGraphs()) return Backend::beginNativeGraph(device);
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
  RGPU_TRY(RGPU_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED)));
  capture_ = {true, device, stream};
  return Status::ok();
}

Result<uint32_t> CudaBackend::endNativeGraph(bool keep) {
  DriverApi& api = *api_;
  if (!capture_.active) return Status(err::kStreamCaptureUnmatched, "no native graph is being captured");
  Capture c = capture_;
  capture_ = {};
  RGPU_TRY(use(c.device));
  CUgraph graph = nullptr;
  // Always ended, even when discarded: the stream must leave capture mode.
  Status s = RGPU_CU(cuStreamEndCapture(c.stream, &graph));
  CUgraphExec exec = nullptr;
  if (s && keep) s = RGPU_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  if (graph) (void)api.cuGraphDestroy(graph);  // the executable graph keeps what it needs
  if (!s) return s;
  if (!keep) return Status(err::kStreamCaptureInvalidated, "native graph discarded");
  uint32_t id = next_native_graph_++;
  native_graphs_[id] = {c.device, exec};
  return id;
}

Status CudaBackend::launchNativeGraph(StreamKey key, uint32_t id) {
  DriverApi& api = *api_;
  if (capture_.active) return notCapturable("a graph launch");
  auto it = native_graphs_.find(id);
  if (it == native_graphs_.end()) return Status(err::kInvalidValue, "unknown native graph " + std::to_string(id));
  auto s = streamOf(key);
  if (!s) return s.status();
  if (s->first != it->second.device)
    return Status(err::kInvalidValue, "native graph of device " + std::to_string(it->second.device) +
                                          " launched on a stream of device " + std::to_string(s->first));
  CUgraphExec exec = it->second.exec;
  // One unit of work for the launch gate, the session's GPU time and the watchdog.
  return asKernel(s->first, s->second, "graph " + std::to_string(id),
                  [&] { return RGPU_CU(cuGraphLaunch(exec, s->second)); });
}

void CudaBackend::destroyNativeGraph(uint32_t id) {
  DriverApi& api = *api_;
  auto it = native_graphs_.find(id);
  if (it == native_graphs_.end()) return;
  // The driver frees an executable graph whose launch is still running once it is done.
  if (use(it->second.device)) (void)api.cuGraphExecDestroy(it->second.exec);
  native_graphs_.erase(it);
}

void CudaBackend::releaseGraphs() {
  DriverApi& api = *api_;
  if (capture_.active) (void)endNativeGraph(false);
  while (!native_graphs_.empty()) destroyNativeGraph(native_graphs_.begin()->first);
  for (size_t d = 0; d < capture_streams_.size(); ++d)
    if (capture_streams_[d] && use(static_cast<int>(d))) (void)api.cuStreamDestroy(capture_streams_[d]);
  capture_streams_.clear();
}

}  // namespace rgpu::server::cuda
