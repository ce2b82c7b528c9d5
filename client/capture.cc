// Stream capture (client/graph.h): while a stream captures, its stream-ordered
// calls become graph nodes instead of messages, with NVIDIA's rules:
// - the legacy stream cannot capture, and using it while a blocking stream of
//   its device captures invalidates that capture (cudaErrorStreamCaptureImplicit);
// - synchronising or querying a capturing stream, and "potentially unsafe"
//   calls (cudaMalloc, cudaFree, synchronous copies, cudaDeviceSynchronize)
//   where the capture mode forbids them, fail with
//   cudaErrorStreamCaptureUnsupported and invalidate the capture;
// - another stream joins a capture by waiting on an event recorded in it and
//   must be joined back into the origin stream before cudaStreamEndCapture
//   (else cudaErrorStreamCaptureUnjoined); waiting on an event of another
//   capture, or on one recorded outside without cudaEventWaitExternal, fails;
// - an invalidated capture ends with cudaErrorStreamCaptureInvalidated and no graph.
#include <algorithm>
#include <atomic>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "client/api_util.h"
#include "client/graph.h"

namespace rgpu::client {

struct Capture {
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  bool owns_graph = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  uint32_t origin = 0;
  int device = 0;
  Status invalid;
  std::map<uint32_t, std::vector<cudaGraphNode_t>> tips;  // the streams in the capture and what they depend on now
};

namespace {

struct CapturedEvent {
  std::shared_ptr<Capture> cap;
  std::vector<cudaGraphNode_t> nodes;
};

struct State {
  std::unordered_map<uint32_t, std::shared_ptr<Capture>> by_stream;
  std::unordered_map<uint32_t, CapturedEvent> events;
  unsigned long long next_id = 1;
};
State& st() {
  static auto* s = new State;
  return *s;
}
std::atomic<int> g_capturing_streams{0};

void invalidate(Capture& c, const Status& why) {
  if (c.invalid.isOk()) {
    c.invalid = why;
    common::logOnce("capture-invalidated", "a stream capture was invalidated: " + why.message());
  }
}

// The capture, if any, whose blocking streams the legacy stream of `device` would wait for.
std::vector<std::shared_ptr<Capture>> blockingCaptures(int device) {
  std::vector<std::shared_ptr<Capture>> out;
  for (auto& [id, c] : st().by_stream)
    if (c->device == device && !rt().streamNonBlocking(id) &&
        std::find(out.begin(), out.end(), c) == out.end())
      out.push_back(c);
  return out;
}

// Work on the legacy stream while blocking streams of its device capture.
bool implicitSync(StreamRef s, Status* out) {
  if (s.id != 0) return false;
  auto caps = blockingCaptures(s.device);
  if (caps.empty()) return false;
  Status why(err::kStreamCaptureImplicit,
             "the legacy stream was used while a blocking stream of its device was capturing");
  for (auto& c : caps) invalidate(*c, why);
  *out = why;
  return true;
}

// Captures that forbid this thread a potentially unsafe call (NVIDIA's capture modes).
std::vector<std::shared_ptr<Capture>> forbidding() {
  std::vector<std::shared_ptr<Capture>> out;
  const auto self = std::this_thread::get_id();
  const auto mode = threadCaptureMode();
  if (mode == cudaStreamCaptureModeRelaxed) return out;
  for (auto& [id, c] : st().by_stream) {
    bool mine = c->thread == self && c->mode != cudaStreamCaptureModeRelaxed;
    bool global_other = mode == cudaStreamCaptureModeGlobal && c->thread != self && c->mode == cudaStreamCaptureModeGlobal;
    if ((mine || global_other) && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

Capture* captureOf(uint32_t stream) {
  auto it = st().by_stream.find(stream);
  return it == st().by_stream.end() ? nullptr : it->second.get();
}

// Adds a node to the capture on stream `s`, after the stream's tips.
Status addCaptured(Capture& c, uint32_t stream, Result<NodeParams> p) {
  if (!p) {
    invalidate(c, p.status());
    return p.status();
  }
  auto& tips = c.tips[stream];
  auto n = addNode(c.graph, tips.data(), tips.size(), std::move(*p));
  if (!n) {
    invalidate(c, n.status());
    return n.status();
  }
  tips.assign(1, *n);
  return Status::ok();
}

}  // namespace

std::optional<StreamRef> requestStream(wire::Request::Reader r) {
  using R = wire::Request;
  auto ref = [](wire::StreamRef::Reader s) { return StreamRef{s.getId(), s.getDevice()}; };
  switch (r.which()) {
    case R::MEMCPY_HTO_D: return ref(r.getMemcpyHtoD().getStream());
    case R::MEMCPY_DTO_H: return ref(r.getMemcpyDtoH().getStream());
    case R::MEMCPY_DTO_D: return ref(r.getMemcpyDtoD().getStream());
    case R::MEMSET: return ref(r.getMemset().getStream());
    case R::MEMCPY2_D: return ref(r.getMemcpy2D().getStream());
    case R::MEMSET2_D: return ref(r.getMemset2D().getStream());
    case R::MEMCPY_PEER: return ref(r.getMemcpyPeer().getStream());
    case R::LAUNCH_KERNEL: return ref(r.getLaunchKernel().getStream());
    case R::EVENT_RECORD: return ref(r.getEventRecord().getStream());
    case R::STREAM_WAIT_EVENT: return ref(r.getStreamWaitEvent().getStream());
    case R::HOST_FUNC_ENQUEUE: return ref(r.getHostFuncEnqueue().getStream());
    case R::STREAM_SYNCHRONIZE: return ref(r.getStreamSynchronize());
    case R::STREAM_QUERY: return ref(r.getStreamQuery());
    case R::BLAS: return ref(r.getBlas().getStream());
    case R::LT_MATMUL: return ref(r.getLtMatmul().getStream());
    case R::RAND_FILL: return ref(r.getRandFill().getStream());
    case R::FFT_EXEC: return ref(r.getFftExec().getStream());
    case R::SOLVER: return ref(r.getSolver().getStream());
    case R::SPARSE: return ref(r.getSparse().getStream());
    case R::DNN: return ref(r.getDnn().getStream());
    case R::GRAPH_LAUNCH: return ref(r.getGraphLaunch().getStream());
    case R::COPY3_D: return ref(r.getCopy3D().getStream());
    default: return std::nullopt;
  }
}

namespace {

// The node a stream-ordered device-side request becomes.
Result<NodeParams> nodeOf(wire::Request::Reader r, int device) {
  using R = wire::Request;
  switch (r.which()) {
    case R::LAUNCH_KERNEL: {
      auto m = r.getLaunchKernel();
      const KernelRecord* k = rt().kernelByServerId(m.getFunction());
      if (!k) return Status(err::kInvalidDeviceFunction, "captured launch of an unknown kernel");
      NodeParams p;
      p.type = cudaGraphNodeTypeKernel;
      p.device = device;
      p.kernel = k;
      p.grid = dim3(m.getGrid().getX(), m.getGrid().getY(), m.getGrid().getZ());
      p.block = dim3(m.getBlock().getX(), m.getBlock().getY(), m.getBlock().getZ());
      p.shmem = static_cast<unsigned>(m.getSharedMem());
      auto b = m.getParams();
      p.params.assign(reinterpret_cast<const char*>(b.begin()), b.size());
      if (m.getCooperative()) p.attrs[cudaLaunchAttributeCooperative].cooperative = 1;
      if (m.hasCluster() && (m.getCluster().getX() || m.getCluster().getY() || m.getCluster().getZ())) {
        auto& c = p.attrs[cudaLaunchAttributeClusterDimension].clusterDim;
        c.x = m.getCluster().getX(), c.y = m.getCluster().getY(), c.z = m.getCluster().getZ();
      }
      return p;
    }
    case R::MEMCPY_DTO_D: {
      auto m = r.getMemcpyDtoD();
      return memcpy1DParams(reinterpret_cast<void*>(m.getDst()), reinterpret_cast<const void*>(m.getSrc()), m.getSize(),
                            cudaMemcpyDeviceToDevice);
    }
    case R::MEMCPY_PEER: {
      auto m = r.getMemcpyPeer();
      return memcpy1DParams(reinterpret_cast<void*>(m.getDst()), reinterpret_cast<const void*>(m.getSrc()), m.getSize(),
                            cudaMemcpyDeviceToDevice);
    }
    case R::MEMCPY2_D: {
      auto m = r.getMemcpy2D();
      if (m.getKind() != 3) break;
      cudaMemcpy3DParms c{};
      c.srcPtr = cudaPitchedPtr{reinterpret_cast<void*>(m.getSrc()), m.getSpitch(), m.getWidth(), m.getHeight()};
      c.dstPtr = cudaPitchedPtr{reinterpret_cast<void*>(m.getDst()), m.getDpitch(), m.getWidth(), m.getHeight()};
      c.extent = cudaExtent{m.getWidth(), m.getHeight(), 1};
      c.kind = cudaMemcpyDeviceToDevice;
      return memcpyParams(c);
    }
    case R::MEMSET: {
      auto m = r.getMemset();
      cudaMemsetParams p{reinterpret_cast<void*>(m.getDst()), 0, m.getValue(), 1, m.getSize(), 1};
      return memsetParams(p);
    }
    case R::MEMSET2_D: {
      auto m = r.getMemset2D();
      cudaMemsetParams p{reinterpret_cast<void*>(m.getDst()), m.getPitch(), m.getValue(), 1, m.getWidth(), m.getHeight()};
      return memsetParams(p);
    }
    case R::BLAS:
      if (r.getBlas().getResult() == 0) {
        switch (r.getBlas().getOp()) {
          case wire::BlasOp::DOT: case wire::BlasOp::NRM2: case wire::BlasOp::ASUM:
          case wire::BlasOp::IAMAX: case wire::BlasOp::IAMIN:
            return Status(err::kStreamCaptureUnsupported, "a cuBLAS result to host memory cannot be captured");
          default:
            break;
        }
      }
      [[fallthrough]];
    case R::LT_MATMUL:
    case R::RAND_FILL:
    case R::FFT_EXEC:
    case R::SOLVER:
    case R::SPARSE:
    case R::DNN: {
      // cuBLAS, cuRAND, cuFFT, cuSOLVER, cuSPARSE and cuDNN: kept in their wire form (NVIDIA's capture makes kernel nodes of them).
      common::CallMessage msg(64);
      msg.setRoot(r);
      auto words = capnp::messageToFlatArray(msg);
      NodeParams p;
      p.type = cudaGraphNodeTypeKernel;
      p.device = device;
      p.request.assign(words.begin(), words.end());
      return p;
    }
    default:
      break;
  }
  return Status(err::kStreamCaptureUnsupported,
                "call " + std::to_string(static_cast<int>(r.which())) + " cannot be captured into a graph by rgpu");
}

}  // namespace

bool& captureInternalCall() {
  thread_local bool internal = false;
  return internal;
}

bool captureNodeOn(StreamRef s, const std::function<Result<NodeParams>()>& make, Status* out, cudaGraphNode_t* node) {
  std::lock_guard lock(graphMutex());
  Capture* c = captureOf(s.id);
  if (!c) return implicitSync(s, out);
  if (!c->invalid.isOk()) {
    *out = Status(err::kStreamCaptureInvalidated, "the stream's capture was invalidated: " + c->invalid.message());
    return true;
  }
  *out = addCaptured(*c, s.id, make());
  if (*out && node) *node = c->tips[s.id].front();
  return true;
}

cudaStreamCaptureMode& threadCaptureMode() {
  thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

bool capturesActive() { return g_capturing_streams.load(std::memory_order_relaxed) > 0; }

bool captureRequest(StreamRef s, wire::Request::Reader req, Status* out) {
  return captureNodeOn(s, [&] { return nodeOf(req, s.device); }, out, nullptr);
}

Status captureAllowsCall(wire::Request::Reader req) {
  using R = wire::Request;
  if (captureInternalCall()) return Status::ok();  // a graph's own allocation
  std::lock_guard lock(graphMutex());
  if (auto s = requestStream(req)) {
    if (Capture* c = captureOf(s->id)) {
      Status why(err::kStreamCaptureUnsupported, "operation not permitted when stream is capturing");
      invalidate(*c, why);
      return why;
    }
    Status implicit;
    if (implicitSync(*s, &implicit)) return implicit;
  }
  uint32_t event = 0;
  switch (req.which()) {
    case R::EVENT_QUERY: event = req.getEventQuery().getId(); break;
    case R::EVENT_SYNCHRONIZE: event = req.getEventSynchronize().getId(); break;
    case R::EVENT_ELAPSED_TIME: event = req.getEventElapsedTime().getStart(); break;
    default: break;
  }
  if (event && st().events.count(event))
    return Status(err::kCapturedEvent, "the event was last recorded in a capturing stream");
  bool unsafe = false;
  switch (req.which()) {
    case R::MALLOC: case R::FREE: case R::DEVICE_SYNCHRONIZE: case R::DEVICE_RESET:
    case R::MEMCPY_HTO_D: case R::MEMCPY_DTO_H: case R::MEMCPY2_D: case R::MEMCPY_PEER: case R::COPY3_D:
    case R::ARRAY_CREATE: case R::ARRAY_DESTROY:
      unsafe = true;
      break;
    default:
      break;
  }
  if (!unsafe) return Status::ok();
  auto caps = forbidding();
  if (caps.empty()) return Status::ok();
  Status why(err::kStreamCaptureUnsupported,
             "operation not permitted when stream is capturing (see cudaThreadExchangeStreamCaptureMode)");
  for (auto& c : caps) invalidate(*c, why);
  return why;
}

bool captureEventRecord(StreamRef s, cudaEvent_t e, uint32_t event_id, unsigned flags, Status* out) {
  std::lock_guard lock(graphMutex());
  auto it = st().by_stream.find(s.id);
  if (it == st().by_stream.end()) {
    st().events.erase(event_id);  // recorded outside a capture from now on
    return implicitSync(s, out);
  }
  Capture& c = *it->second;
  if (!c.invalid.isOk()) return *out = Status(err::kStreamCaptureInvalidated, c.invalid.message()), true;
  if (flags & cudaEventRecordExternal) {
    *out = addCaptured(c, s.id, eventParams(cudaGraphNodeTypeEventRecord, e));
    return true;
  }
  st().events[event_id] = CapturedEvent{it->second, c.tips[s.id]};
  *out = Status::ok();
  return true;
}

bool captureEventWait(StreamRef s, cudaEvent_t e, uint32_t event_id, unsigned flags, Status* out) {
  std::lock_guard lock(graphMutex());
  auto ev = st().events.find(event_id);
  auto mine = st().by_stream.find(s.id);
  if (ev == st().events.end()) {
    if (mine == st().by_stream.end()) return false;  // neither side captures
    Capture& c = *mine->second;
    if (!c.invalid.isOk()) return *out = Status(err::kStreamCaptureInvalidated, c.invalid.message()), true;
    if (flags & cudaEventWaitExternal) {
      *out = addCaptured(c, s.id, eventParams(cudaGraphNodeTypeWaitEvent, e));
      return true;
    }
    *out = Status(err::kStreamCaptureIsolation,
                  "a capturing stream waited on an event recorded outside the capture (cudaEventWaitExternal allows it)");
    invalidate(c, *out);
    return true;
  }
  std::shared_ptr<Capture> cap = ev->second.cap;
  if (!cap->invalid.isOk()) return *out = Status(err::kStreamCaptureInvalidated, cap->invalid.message()), true;
  if (mine == st().by_stream.end()) {
    // The stream joins the capture (a fork).
    st().by_stream[s.id] = cap;
    cap->tips[s.id] = ev->second.nodes;
    g_capturing_streams.fetch_add(1);
    *out = Status::ok();
    return true;
  }
  if (mine->second != cap) {
    *out = Status(err::kStreamCaptureMerge, "the wait would merge two independent captures");
    invalidate(*cap, *out);
    invalidate(*mine->second, *out);
    return true;
  }
  auto& tips = cap->tips[s.id];
  for (auto* n : ev->second.nodes)
    if (std::find(tips.begin(), tips.end(), n) == tips.end()) tips.push_back(n);
  *out = Status::ok();
  return true;
}

void forgetCaptureStream(uint32_t stream_id) {
  std::lock_guard lock(graphMutex());
  auto it = st().by_stream.find(stream_id);
  if (it == st().by_stream.end()) return;
  invalidate(*it->second, Status(err::kStreamCaptureInvalidated, "a stream of the capture was destroyed"));
  it->second->tips.erase(stream_id);
  st().by_stream.erase(it);
  g_capturing_streams.fetch_sub(1);
}

Status beginCapture(cudaStream_t stream, bool ptsz, cudaStreamCaptureMode mode, cudaGraph_t into,
                    const cudaGraphNode_t* deps, size_t ndeps) {
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return Status(err::kInvalidValue, "unknown capture mode");
  if (s->id == 0) return Status(err::kStreamCaptureUnsupported, "the legacy default stream cannot be captured");
  std::lock_guard lock(graphMutex());
  if (captureOf(s->id)) return Status(err::kIllegalState, "the stream is capturing already");
  if (into) {
    RGPU_TRY(checkGraph(into));
    if (into->capturing) return Status(err::kInvalidValue, "the graph is being captured into already");
  }
  if (ndeps && !deps) return Status(err::kInvalidValue, "dependencies is NULL");
  for (size_t i = 0; i < ndeps; ++i) {
    RGPU_TRY(checkNode(deps[i]));
    if (deps[i]->graph != into) return Status(err::kInvalidValue, "a dependency is not a node of the graph");
  }
  auto c = std::make_shared<Capture>();
  c->id = st().next_id++;
  c->owns_graph = !into;
  c->graph = into ? into : newGraph();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s->id;
  c->device = s->device;
  c->tips[s->id].assign(deps, deps + ndeps);
  c->graph->capturing = c.get();
  st().by_stream[s->id] = c;
  g_capturing_streams.fetch_add(1);
  return Status::ok();
}

Status endCapture(cudaStream_t stream, bool ptsz, cudaGraph_t* out) {
  RGPU_TRY(needPtr(out, "pGraph"));
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  std::lock_guard lock(graphMutex());
  auto it = st().by_stream.find(s->id);
  if (it == st().by_stream.end()) return Status(err::kIllegalState, "the stream is not capturing");
  std::shared_ptr<Capture> c = it->second;
  if (c->origin != s->id) {
    invalidate(*c, Status(err::kStreamCaptureUnmatched, "the capture was ended on a stream it did not start on"));
    return Status(err::kStreamCaptureUnmatched, "the capture was not started on this stream");
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return Status(err::kStreamCaptureWrongThread, "the capture was started by another thread");
  // Every stream that joined must have been joined back into the origin.
  Status result;
  if (c->invalid.isOk()) {
    std::unordered_set<const CUgraphNode_st*> seen;
    std::vector<const CUgraphNode_st*> todo(c->tips[c->origin].begin(), c->tips[c->origin].end());
    while (!todo.empty()) {
      const CUgraphNode_st* n = todo.back();
      todo.pop_back();
      if (!seen.insert(n).second) continue;
      for (auto* d : n->in) todo.push_back(d);
    }
    for (auto& [id, tips] : c->tips)
      for (auto* n : tips)
        if (id != c->origin && !seen.count(n))
          result = Status(err::kStreamCaptureUnjoined, "a stream forked into the capture was not joined back into it");
  } else {
    result = Status(err::kStreamCaptureInvalidated, "the capture was invalidated: " + c->invalid.message());
  }
  for (auto i = st().by_stream.begin(); i != st().by_stream.end();) {
    if (i->second == c) {
      i = st().by_stream.erase(i);
      g_capturing_streams.fetch_sub(1);
    } else {
      ++i;
    }
  }
  for (auto i = st().events.begin(); i != st().events.end();) i = i->second.cap == c ? st().events.erase(i) : std::next(i);
  c->graph->capturing = nullptr;
  if (!result) {
    if (c->owns_graph) destroyGraph(c->graph);
    *out = nullptr;
    return result;
  }
  *out = c->graph;
  return Status::ok();
}

Status captureInfo(cudaStream_t stream, bool ptsz, cudaStreamCaptureStatus* status, unsigned long long* id,
                   cudaGraph_t* graph, const cudaGraphNode_t** deps, size_t* ndeps) {
  RGPU_TRY(needPtr(status, "captureStatus"));
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  std::lock_guard lock(graphMutex());
  Capture* c = captureOf(s->id);
  if (!c) {
    *status = cudaStreamCaptureStatusNone;
    if (s->id == 0 && !blockingCaptures(s->device).empty())
      return Status(err::kStreamCaptureImplicit, "the legacy stream was queried while a blocking stream captures");
    return Status::ok();
  }
  *status = c->invalid.isOk() ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusInvalidated;
  if (id) *id = c->id;
  if (graph) *graph = c->graph;
  auto& tips = c->tips[s->id];
  if (deps) *deps = tips.data();
  if (ndeps) *ndeps = tips.size();
  return Status::ok();
}

Status updateCaptureDependencies(cudaStream_t stream, bool ptsz, cudaGraphNode_t* deps, size_t n, unsigned flags) {
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  if (flags != cudaStreamAddCaptureDependencies && flags != cudaStreamSetCaptureDependencies)
    return Status(err::kInvalidValue, "unknown flags");
  std::lock_guard lock(graphMutex());
  Capture* c = captureOf(s->id);
  if (!c) return Status(err::kIllegalState, "the stream is not capturing");
  if (n && !deps) return Status(err::kInvalidValue, "dependencies is NULL");
  for (size_t i = 0; i < n; ++i) {
    RGPU_TRY(checkNode(deps[i]));
    if (deps[i]->graph != c->graph) return Status(err::kInvalidValue, "a dependency is not a node of the capture's graph");
  }
  auto& tips = c->tips[s->id];
  if (flags == cudaStreamSetCaptureDependencies) tips.clear();
  for (size_t i = 0; i < n; ++i)
    if (std::find(tips.begin(), tips.end(), deps[i]) == tips.end()) tips.push_back(deps[i]);
  return Status::ok();
}

}  // namespace rgpu::client
