// CUDA graphs on the server: the client sends an instantiated graph once
// (graphCreate, its nodes flattened into an order that respects every
// dependency) and then launches it with one message (graphLaunch) however many
// nodes it has. A launch runs the nodes in that order on the launch's stream:
//
// - a `request` node goes through the handler of its request kind, exactly as
//   the call would on its own (every pointer, size and handle checked again at
//   each launch: memory freed since instantiation is refused, never touched),
//   with its stream fields replaced by the launch's stream (graph_stream_);
//   its errors are asynchronous, as a graph's are in CUDA;
// - host-to-device nodes take their bytes, in node order, from the launch's
//   bulk payload (the client reads the program's host memory at launch time);
// - device-to-host nodes put theirs, in node order, into the launch's one
//   reply, sent when the last of them has run; except a node a host node
//   comes after (the function may read its bytes): its bytes go to the client
//   in a notification of their own (graphOutput) as soon as it has run, so
//   they are in the program's memory before the client is asked to run the
//   function (the launch's reply carries zeros in their place);
// - host nodes become host functions the client runs, with ids the launch names.
//
// Only stream-ordered device-side kinds may be request nodes: a graph cannot
// allocate, synchronise, load modules or launch graphs from inside.
//
// Native graphs: where the backend has them (CUDA: a CUgraphExec) and every
// node is one it can capture (kernels, device copies, memsets, cuBLAS/cuBLASLt
// calls, event records and waits, host copies, host functions; not peer
// copies), the session runs the nodes once through their handlers while the
// backend captures them, and then launches the result whole. The handlers
// check every pointer, size, event and kernel as for a launch node by node; a
// node they refuse makes the graph run node by node, which reports the error
// as before. Host copies become copies from and to the graph's device buffers
// (backend.h), which each launch fills from its bulk payload and reads into
// its reply; host functions become host nodes that take the ids the launch
// names, in node order, from the graph's queue. A download a host node comes
// after goes to the graph's pinned host buffer, and the host node sends it
// (graphOutput) before asking the client to run the function. The native graph bakes in
// what was checked, so it is rebuilt at the next launch after any allocation
// went, a module was unloaded, an event destroyed or a kernel's attributes
// changed (graphEpoch()).
#include <capnp/serialize.h>

#include <deque>
#include <mutex>
#include <optional>

#include "common/frame_io.h"
#include "common/log.h"
#include "protocol/frame.h"
#include "server/checkpoint/checkpoint_stream.h"
#include "server/session/session.h"

namespace rgpu::server {

using protocol::FrameHeader;

// The host functions of a native graph's launches, in the order its host
// nodes run (its launches run one after the other): each id with its launch
// (the request's sequence number, for graphOutput) and whether it is answered.
struct HostQueue {
  struct Entry {
    uint64_t id, seq;
    bool replies;
  };
  std::mutex mu;
  std::deque<Entry> ids;
};
// A device-to-host node of a native graph: where its bytes are in the
// launch's reply (`wire`) and in the graph's output buffer, or (a host node
// comes after it) in its pinned host buffer.
struct NativeDownload {
  uint64_t wire, at, size;
};

struct SessionGraph {
  int device = 0;
  // The graphCreate messages, as sent. Each launch reads them with readers of
  // its own: Cap'n Proto's traversal limit counts over a reader's lifetime.
  std::vector<kj::Array<capnp::word>> chunks;
  uint64_t nodes = 0;
  uint64_t h2d_bytes = 0, d2h_bytes = 0;
  uint32_t host_funcs = 0;
  // 1-based positions in node order (0: none) of the first device-to-host node and the last host node.
  uint64_t first_d2h_node = 0, last_host_node = 0;
  Status broken;  // a part failed to arrive whole: launches fail with it
  // Native graph (see the top of this file).
  bool device_only = true;           // every node could be one of a native graph
  uint32_t native = 0;               // the backend's id; 0: none
  uint64_t native_epoch = 0;         // graphEpoch() when it was built
  uint64_t refused_epoch = ~0ull;    // a build failed at this epoch: not tried again before it changes
  std::shared_ptr<HostQueue> host_queue;  // of the native graph
  std::vector<NativeDownload> late;       // downloads through its output buffer (after the last host node)
  bool early = false;                     // some go to the client from its host nodes
  // The stream of the last launch: the next one, on any stream, starts after it.
  std::optional<StreamKey> last_stream;
  // While parts arrive: the conditional nodes whose bodies are not complete,
  // innermost last (a launch of a graph with one open is refused).
  struct OpenConditional {
    uint64_t remaining = 0;            // nodes left in the body being read
    std::deque<uint64_t> next;         // the sizes of its bodies after that one
  };
  std::vector<OpenConditional> open;
};

namespace {

// The request kinds a graph node may carry.
Status nodeKindAllowed(wire::Request::Reader r) {
  using R = wire::Request;
  switch (r.which()) {
    case R::LAUNCH_KERNEL:
    case R::MEMCPY_DTO_D:
    case R::MEMCPY_PEER:
    case R::MEMSET:
    case R::MEMSET2_D:
    case R::EVENT_RECORD:
    case R::STREAM_WAIT_EVENT:
    case R::LT_MATMUL:
      return Status::ok();
    case R::MEMCPY2_D:
      if (r.getMemcpy2D().getKind() == 3) return Status::ok();
      return Status(err::kInvalidValue, "a graph's 2D copy node with host memory must come as host copy nodes");
    case R::COPY3_D: {
      auto deviceSide = [](wire::CopySide::Reader s) {
        return s.which() == wire::CopySide::DEVICE || s.which() == wire::CopySide::ARRAY;
      };
      if (deviceSide(r.getCopy3D().getSrc()) && deviceSide(r.getCopy3D().getDst())) return Status::ok();
      return Status(err::kInvalidValue, "a graph's array copy with host memory must come as host copy nodes");
    }
    case R::RAND_FILL:
    case R::FFT_EXEC:  // (run node by node: NVIDIA's plan is made at its first transform, outside a capture)
    case R::SOLVER:
    case R::SPARSE:
    case R::DNN:
      return Status::ok();
    case R::BLAS:
      if (r.getBlas().getResult() != 0) return Status::ok();
      switch (r.getBlas().getOp()) {
        case wire::BlasOp::DOT: case wire::BlasOp::NRM2: case wire::BlasOp::ASUM:
        case wire::BlasOp::IAMAX: case wire::BlasOp::IAMIN:
          return Status(err::kInvalidValue, "a cuBLAS reduction into host memory cannot be a graph node");
        default:
          return Status::ok();
      }
    default:
      return Status(err::kInvalidValue, "request kind " + std::to_string(static_cast<int>(r.which())) +
                                            " cannot be a graph node");
  }
}

// Kernels, device copies and memsets: what every backend records as graph work.
bool kernelCopyOrMemset(wire::Request::Which w) {
  using R = wire::Request;
  switch (w) {
    case R::LAUNCH_KERNEL:
    case R::MEMCPY_DTO_D:
    case R::MEMSET:
    case R::MEMSET2_D:
    case R::MEMCPY2_D:  // device to device only (nodeKindAllowed)
    case R::COPY3_D:    // arrays and device memory only (nodeKindAllowed)
      return true;
    default:
      return false;
  }
}

// What a conditional node's body may hold: device work of one stream
// (kernels, device copies and memsets), empty and conditional nodes.
Status bodyKindAllowed(wire::GraphNode::Reader n) {
  switch (n.which()) {
    case wire::GraphNode::EMPTY:
    case wire::GraphNode::CONDITIONAL:
    case wire::GraphNode::CONDITIONAL_RESET:
      return Status::ok();
    case wire::GraphNode::REQUEST:
      if (kernelCopyOrMemset(n.getRequest().which())) return Status::ok();
      break;
    default:
      break;
  }
  return Status(err::kInvalidValue, "a conditional node's body may hold kernels, device copies, memsets, empty and "
                                    "conditional nodes only");
}

// Conditional nodes nest at most this deep (docs/limits.md).
constexpr size_t kMaxConditionalDepth = 16;

// A conditional node's handle and bodies, checked; its frame goes on `open`.
Status openConditional(const std::unordered_map<uint64_t, int>& handles, wire::GraphConditional::Reader c,
                       std::vector<SessionGraph::OpenConditional>& open) {
  if (!handles.count(c.getHandle())) return Status(err::kInvalidValue, "unknown conditional handle");
  auto bodies = c.getBodies();
  const auto type = static_cast<unsigned>(c.getType());
  if (type > 2) return Status(err::kInvalidValue, "unknown conditional node type " + std::to_string(type));
  if (bodies.size() == 0 || (type == 0 && bodies.size() > 2) || (type == 1 && bodies.size() != 1))
    return Status(err::kInvalidValue, "a conditional node of type " + std::to_string(type) + " with " +
                                          std::to_string(bodies.size()) + " bodies");
  if (open.size() >= kMaxConditionalDepth)
    return Status(err::kInvalidValue, "conditional nodes nested deeper than " + std::to_string(kMaxConditionalDepth));
  // Its bodies lie within the body that holds it.
  uint64_t total = 0, room = open.empty() ? ~0ull : open.back().remaining;
  for (uint64_t b : bodies) {
    if (b > room - total) return Status(err::kInvalidValue, "a conditional node's bodies overrun the body that holds it");
    total += b;
  }
  SessionGraph::OpenConditional o;
  o.remaining = bodies[0];
  for (unsigned i = 1; i < bodies.size(); ++i) o.next.push_back(bodies[i]);
  open.push_back(std::move(o));
  return Status::ok();
}

// A node the backend can capture into a native graph.
bool capturable(wire::GraphNode::Reader n) {
  using R = wire::Request;
  if (n.which() == wire::GraphNode::CONDITIONAL || n.which() == wire::GraphNode::CONDITIONAL_RESET) return false;
  if (n.which() != wire::GraphNode::REQUEST) return true;  // host copies and functions, empty nodes
  if (kernelCopyOrMemset(n.getRequest().which())) return true;
  switch (n.getRequest().which()) {
    case R::BLAS:       // results in device memory only (nodeKindAllowed)
    case R::LT_MATMUL:
    case R::RAND_FILL:
    case R::EVENT_RECORD:
    case R::STREAM_WAIT_EVENT:
      return true;
    case R::MEMCPY_PEER:  // a copy between devices in stream order (not cudaMemcpyPeer's fences)
      return !n.getRequest().getMemcpyPeer().getSerialize();
    default:
      return false;
  }
}

// The device-to-host results of one launch, gathered into its one reply.
struct Gather {
  std::mutex mu;
  std::vector<uint8_t> bytes;
  std::vector<OnWire> on_wire;
  Status first;
  uint64_t pending = 1;  // the parts, plus the launch itself until all are queued
  std::function<void(Status, const uint8_t*, uint64_t, const OnWire&)> send;

  void part(const Status& s, uint64_t off, const uint8_t* d, uint64_t n, const OnWire& w) {
    bool last;
    {
      std::lock_guard lock(mu);
      if (!s && first.isOk()) first = s;
      if (s && d && off + n <= bytes.size()) std::memcpy(bytes.data() + off, d, n);
      if (w) on_wire.push_back(w);
      last = --pending == 0;
    }
    if (!last) return;
    std::vector<OnWire> ws = std::move(on_wire);
    send(first, bytes.data(), bytes.size(), [ws] {
      for (auto& f : ws) f();
    });
  }
};

}  // namespace

Status Session::onGraphCreate(const FrameHeader& h, wire::Request::Reader req) {
  const auto& L = cfg_.limits;
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getGraphCreate();
  const uint32_t id = m.getId();
  auto nodes = m.getNodes();
  Status s = checkDevice(m.getDevice());
  std::shared_ptr<SessionGraph> g;
  if (s && m.getAppend()) {
    auto it = graphs_.find(id);
    if (it == graphs_.end()) s = Status(err::kInvalidValue, "graph " + std::to_string(id) + " to append to is unknown");
    else g = it->second;
    if (s && g->device != m.getDevice()) s = Status(err::kInvalidValue, "a graph's parts name different devices");
    if (s) s = g->broken;  // an earlier part was refused: so is the graph
  }
  if (s && !m.getAppend() && !graphs_.count(id) && graphs_.size() >= L.max_graphs)
    s = Status(err::kMemoryAllocation, "session graph limit reached (max_graphs = " + std::to_string(L.max_graphs) + ")");
  uint64_t replaced = (s && !m.getAppend() && graphs_.count(id)) ? graphs_[id]->nodes : 0;
  if (s && graph_nodes_ - replaced + nodes.size() > L.max_graph_nodes)
    s = Status(err::kMemoryAllocation, "session graph node limit reached (max_graph_nodes = " +
                                           std::to_string(L.max_graph_nodes) + ")");
  auto fresh = std::make_shared<SessionGraph>();
  SessionGraph& into = g ? *g : *fresh;
  uint64_t h2d = into.h2d_bytes, d2h = into.d2h_bytes;
  uint32_t host_funcs = into.host_funcs;
  uint64_t at = into.nodes, first_d2h = into.first_d2h_node, last_host = into.last_host_node;
  std::vector<SessionGraph::OpenConditional> open = into.open;
  for (auto n : nodes) {
    if (!s) break;
    ++at;
    if (!open.empty()) {  // in the body of every open conditional node
      s = bodyKindAllowed(n);
      for (auto& o : open) --o.remaining;
    }
    if (!s) break;
    switch (n.which()) {
      case wire::GraphNode::REQUEST:
        s = nodeKindAllowed(n.getRequest());
        break;
      case wire::GraphNode::HOST_TO_DEVICE:
        h2d += n.getHostToDevice().getSize();
        if (n.getHostToDevice().getSize() > protocol::kMaxBulkBytes || h2d > protocol::kMaxBulkBytes)
          s = Status(err::kInvalidValue, "a graph's host-to-device copies exceed one frame's bulk limit");
        break;
      case wire::GraphNode::DEVICE_TO_HOST:
        d2h += n.getDeviceToHost().getSize();
        if (n.getDeviceToHost().getSize() > protocol::kMaxBulkBytes || d2h > protocol::kMaxBulkBytes)
          s = Status(err::kInvalidValue, "a graph's device-to-host copies exceed one frame's bulk limit");
        if (!first_d2h) first_d2h = at;
        break;
      case wire::GraphNode::HOST_FUNC:
        ++host_funcs;
        last_host = at;
        break;
      case wire::GraphNode::EMPTY:
        break;
      case wire::GraphNode::CONDITIONAL:
        s = openConditional(cond_handles_, n.getConditional(), open);
        break;
      case wire::GraphNode::CONDITIONAL_RESET:
        if (!cond_handles_.count(n.getConditionalReset().getHandle()))
          s = Status(err::kInvalidValue, "unknown conditional handle");
        break;
      default:
        s = Status(err::kInvalidValue, "unknown graph node kind");
    }
    // Bodies complete after this node: the next body of their node begins, or the node ends.
    while (s && !open.empty() && open.back().remaining == 0) {
      if (open.back().next.empty()) {
        open.pop_back();
      } else {
        open.back().remaining = open.back().next.front();
        open.back().next.pop_front();
      }
    }
    if (s && !capturable(n)) into.device_only = false;
  }
  if (!s) {
    RGPU_LOG_WARN("session {}: graph {} refused: {}", session_id_, id, s.message());
    if (g) g->broken = s;  // a launch of the half-sent graph fails with it
    return finish(h, s), Status::ok();
  }
  // Kept as a message of its own: the frame's buffer is reused for the next one.
  {
    capnp::MallocMessageBuilder copy(m.totalSize().wordCount + 8);
    copy.setRoot(m);
    into.chunks.push_back(capnp::messageToFlatArray(copy));
  }
  into.nodes += nodes.size();
  into.h2d_bytes = h2d, into.d2h_bytes = d2h, into.host_funcs = host_funcs;
  into.first_d2h_node = first_d2h, into.last_host_node = last_host;
  into.open = std::move(open);
  if (g) dropNative(*g);  // made before this part arrived
  if (!g) {
    fresh->device = m.getDevice();
    graph_nodes_ -= replaced;
    if (auto old = graphs_.find(id); old != graphs_.end()) {
      dropNative(*old->second);
      fresh->last_stream = old->second->last_stream;  // an updated graph: still after its last launch
    }
    graphs_[id] = std::move(fresh);
  }
  graph_nodes_ += nodes.size();
  finish(h, Status::ok());
  return Status::ok();
}

Status Session::onConditionalHandleCreate(const FrameHeader& h, wire::Request::Reader req) {
  const auto& L = cfg_.limits;
  RGPU_TRY(bulkNotExpected(h));
  const int device = req.getConditionalHandleCreate().getDevice();
  Status s = checkDevice(device);
  if (s && cond_handles_.size() >= L.max_conditional_handles)
    s = Status(err::kMemoryAllocation, "session conditional handle limit reached (max_conditional_handles = " +
                                           std::to_string(L.max_conditional_handles) + ")");
  Result<uint64_t> made = s ? backend_->conditionalHandle(device) : Result<uint64_t>(s);
  if (!made) {
    if (made.status().code() == err::kNotSupported) common::logOnce("conditional handles", made.status().message());
    else RGPU_LOG_WARN("session {}: conditional handle refused: {}", session_id_, made.status().message());
    return finish(h, made.status()), Status::ok();
  }
  cond_handles_[*made] = device;
  const uint64_t v = *made;
  finish(h, Status::ok(), [v](auto& r) { r.setValue(static_cast<int64_t>(v)); });
  return Status::ok();
}

Status Session::onGraphDestroy(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto it = graphs_.find(req.getGraphDestroy().getId());
  if (it == graphs_.end()) return finish(h, Status(err::kInvalidValue, "unknown graph")), Status::ok();
  // Launches already queued hold their own reference to the nodes they run
  // (and the backend frees a native graph once its launches are done).
  graph_nodes_ -= it->second->nodes;
  dropNative(*it->second);
  graphs_.erase(it);
  finish(h, Status::ok());
  return Status::ok();
}

void Session::forgetGraphs(int device) {
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (it->second->device != device) {
      ++it;
      continue;
    }
    graph_nodes_ -= it->second->nodes;
    dropNative(*it->second);
    it = graphs_.erase(it);
  }
}

Status Session::onGraphLaunch(const FrameHeader& h, wire::Request::Reader req) {
  auto m = req.getGraphLaunch();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  std::shared_ptr<SessionGraph> g;
  if (s) {
    auto it = graphs_.find(m.getId());
    if (it == graphs_.end()) s = Status(err::kInvalidValue, "unknown graph " + std::to_string(m.getId()));
    else g = it->second;
  }
  if (s) s = g->broken;
  if (s && !g->open.empty()) s = Status(err::kInvalidValue, "the graph's last conditional node lacks nodes of its bodies");
  if (s && g->device != key.device)
    s = Status(err::kInvalidValue, "graph instantiated for device " + std::to_string(g->device) +
                                       " launched on a stream of device " + std::to_string(key.device));
  if (s && m.getHostFuncs().size() != g->host_funcs)
    s = Status(err::kInvalidValue, "graph launch names " + std::to_string(m.getHostFuncs().size()) +
                                       " host functions; the graph has " + std::to_string(g->host_funcs));
  Staging all;
  if (s && h.bulk_len != g->h2d_bytes)
    s = Status(err::kInvalidValue, "graph launch carries " + std::to_string(h.bulk_len) + " bytes; its host copies need " +
                                       std::to_string(g->h2d_bytes));
  if (s && h.bulk_len) {
    RGPU_TRY(consumeBulk(h, h.bulk_len, &all));
    if (!all) s = stagingRefused(h.bulk_len);
  } else if (h.bulk_len) {
    RGPU_TRY(consumeBulk(h, h.bulk_len, nullptr));
  }
  if (!s) {
    RGPU_LOG_WARN("session {}: graph launch refused: {}", session_id_, s.message());
    return finish(h, s), Status::ok();
  }
  // "Each launch is ordered behind ... any previous launches of graphExec."
  if (g->last_stream && (g->last_stream->id != key.id || g->last_stream->device != key.device)) {
    Status w = backend_->waitStream(key, *g->last_stream);
    if (!w) RGPU_LOG_DEBUG("session {}: graph launch not ordered after the last one: {}", session_id_, w.message());
  }
  g->last_stream = key;
  if (!launchNative(h, *g, key, m.getHostFuncs(), all)) runGraph(h, *g, key, m.getHostFuncs(), all);
  return Status::ok();
}

void Session::dropNative(SessionGraph& g) {
  if (g.native) backend_->destroyNativeGraph(g.native);
  g.native = 0;
  g.refused_epoch = ~0ull;
  g.host_queue.reset();
  g.late.clear();
  g.early = false;
}

void Session::buildNative(const FrameHeader& h, SessionGraph& g) {
  // Each node through its handler, recorded by the backend on a stream of its own.
  const uint64_t epoch = graphEpoch();
  auto queue = std::make_shared<HostQueue>();
  // Downloads a host node comes after go to a pinned buffer the host node
  // sends from; the others to the output buffer, downloaded after the graph.
  uint64_t early_bytes = 0;
  {
    uint64_t at = 0;
    for (const auto& words : g.chunks) {
      capnp::FlatArrayMessageReader reader(words.asPtr(), common::readerOptions());
      for (auto n : reader.getRoot<wire::GraphCreate>().getNodes())
        if (++at < g.last_host_node && n.which() == wire::GraphNode::DEVICE_TO_HOST)
          early_bytes += n.getDeviceToHost().getSize();
    }
  }
  std::vector<NativeDownload> late, early;
  Status build = backend_->beginNativeGraph(g.device, g.h2d_bytes, g.d2h_bytes - early_bytes, early_bytes);
  if (build) {
    const Backend::NativeBuffers bufs = backend_->nativeGraphBuffers();
    const DevPtr in = bufs.in, out = bufs.out;
    const uint8_t* pinned = bufs.host;  // (a variable: lambdas below capture it)
    StreamKey capture{0, g.device};
    FrameHeader node_h = h;
    node_h.flags = protocol::kFlagAsync;
    node_h.bulk_len = 0;
    graph_build_ = &build;
    graph_build_thread_ = std::this_thread::get_id();
    graph_stream_ = &capture;
    uint64_t in_off = 0, out_off = 0, pinned_off = 0, wire_off = 0, at = 0;
    for (const auto& words : g.chunks) {
      capnp::FlatArrayMessageReader reader(words.asPtr(), common::readerOptions());
      for (auto n : reader.getRoot<wire::GraphCreate>().getNodes()) {
        if (!build) break;
        ++at;
        Status st;
        switch (n.which()) {
          case wire::GraphNode::REQUEST: {
            auto r = n.getRequest();
            st = (this->*handlers()[static_cast<size_t>(r.which())])(node_h, r);
            break;
          }
          case wire::GraphNode::HOST_TO_DEVICE: {
            auto c = n.getHostToDevice();
            if (c.getSize() == 0) break;
            st = allocs_.check(c.getDevice(), c.getSize());
            if (st) st = backend_->copyOnDevice(capture, c.getDevice(), in + in_off, c.getSize());
            in_off += c.getSize();
            break;
          }
          case wire::GraphNode::DEVICE_TO_HOST: {
            auto c = n.getDeviceToHost();
            const uint64_t size = c.getSize();
            if (size == 0) break;
            st = allocs_.check(c.getDevice(), size);
            if (at < g.last_host_node) {
              if (st) st = backend_->copyToNativeHost(capture, pinned_off, c.getDevice(), size);
              early.push_back({wire_off, pinned_off, size});
              pinned_off += size;
            } else {
              if (st) st = backend_->copyOnDevice(capture, out + out_off, c.getDevice(), size);
              late.push_back({wire_off, out_off, size});
              out_off += size;
            }
            wire_off += size;
            break;
          }
          case wire::GraphNode::HOST_FUNC:
            // First the downloads since the previous host node, then the function.
            st = backend_->hostCall(capture, [this, queue, pinned, sends = std::move(early)] {
              HostQueue::Entry e;
              {
                std::lock_guard lock(queue->mu);
                if (queue->ids.empty()) return;  // cannot happen: each launch queues its ids first
                e = queue->ids.front();
                queue->ids.pop_front();
              }
              for (const NativeDownload& d : sends)
                if (e.replies) sendGraphOutput(e.seq, d.wire, pinned + d.at, d.size);
              runHostFunc(e.id);
            });
            early.clear();
            break;
          default:
            break;
        }
        if (!st && build) build = st;
      }
    }
    graph_stream_ = nullptr;
    graph_build_ = nullptr;
  }
  const bool keep = build.isOk();
  auto made = backend_->endNativeGraph(keep);
  if (made) {
    g.native = *made;
    g.native_epoch = epoch;
    g.host_queue = std::move(queue);
    g.early = early_bytes != 0;
    g.late = std::move(late);
  } else {
    g.refused_epoch = epoch;
    RGPU_LOG_DEBUG("session {}: graph runs node by node: {}", session_id_,
                   keep ? made.status().message() : build.message());
  }
}

bool Session::launchNative(const FrameHeader& h, SessionGraph& g, StreamKey key,
                           capnp::List<uint64_t>::Reader host_funcs, Staging& all) {
  if (!g.device_only || !backend_->nativeGraphs()) return false;
  const uint64_t epoch = graphEpoch();
  if (g.native && g.native_epoch != epoch) dropNative(g);
  if (!g.native && g.refused_epoch != epoch) buildNative(h, g);
  if (!g.native) return false;
  // The launch's host functions are pending from now; its host nodes take them in order.
  Status st;
  size_t reserved = 0;
  for (uint64_t id : host_funcs) {
    st = reserveHostFunc(id);
    if (!st) break;
    ++reserved;
  }
  const bool queued = st && reserved;
  const bool replies = !(h.flags & protocol::kFlagAsync);
  if (queued) {
    std::lock_guard lock(g.host_queue->mu);
    for (uint64_t id : host_funcs) g.host_queue->ids.push_back({id, h.seq, replies});
  }
  ReadDone out;
  if (g.d2h_bytes) {
    // The output buffer holds the downloads after the last host node; those
    // before it reached the client from the host nodes (zeros in their place).
    out = graphAnswer(h.seq, replies);
    if (g.early && replies) {
      auto late = std::make_shared<std::vector<NativeDownload>>(g.late);
      out = [answer = std::move(out), late, total = g.d2h_bytes](Status r, const uint8_t* d, uint64_t n,
                                                                 const OnWire& w) {
        if (!r) return answer(r, nullptr, 0, w);
        std::vector<uint8_t> full(total, 0);
        for (const NativeDownload& p : *late)
          if (p.at + p.size <= n) std::memcpy(full.data() + p.wire, d + p.at, p.size);
        answer(r, full.data(), full.size(), w);
      };
    }
  }
  if (st) st = backend_->launchNativeGraph(key, g.native, std::move(all), std::move(out));
  if (!st) {  // nothing of the graph runs: its host functions are not pending
    if (queued) {
      std::lock_guard lock(g.host_queue->mu);
      for (size_t i = 0; i < reserved && !g.host_queue->ids.empty(); ++i) g.host_queue->ids.pop_back();
    }
    {
      std::lock_guard lock(host_mu_);
      for (size_t i = 0; i < reserved; ++i) host_pending_.erase(host_funcs[static_cast<unsigned>(i)]);
    }
    RGPU_LOG_WARN("session {}: graph launch failed: {}", session_id_, st.message());
  }
  // With device-to-host copies the reply comes with their bytes (`out`).
  if (!st || !g.d2h_bytes) finish(h, st);
  return true;
}

ReadDone Session::graphAnswer(uint64_t seq, bool replies) {
  return [this, seq, replies](Status r, const uint8_t* d, uint64_t n, const OnWire& w) {
    if (replies) return sendReply(seq, r, nullptr, r && n ? d : nullptr, r ? n : 0, w);
    if (w) w();
    if (!r) recordAsyncError(r);
  };
}

void Session::sendGraphOutput(uint64_t seq, uint64_t offset, const uint8_t* data, uint64_t size) {
  sendNotify(
      [&](wire::Notify::Builder& n) {
        auto o = n.initGraphOutput();
        o.setCall(seq);
        o.setOffset(offset);
      },
      data, size);
}

void Session::runGraph(const FrameHeader& h, const SessionGraph& g, StreamKey key,
                       capnp::List<uint64_t>::Reader host_funcs, const Staging& all) {
  const bool replies = !(h.flags & protocol::kFlagAsync);
  auto gather = std::make_shared<Gather>();
  gather->bytes.resize(replies ? g.d2h_bytes : 0);
  const uint64_t seq = h.seq;
  gather->send = graphAnswer(seq, replies);
  FrameHeader node_h = h;  // each node: an asynchronous call without bulk
  node_h.flags = protocol::kFlagAsync;
  node_h.bulk_len = 0;
  graph_stream_ = &key;
  uint64_t in_off = 0, out_off = 0, at = 0;
  uint32_t next_host = 0;
  auto fail = [&](const Status& st) {
    if (!st) recordAsyncError(st);
  };
  // Conditional nodes whose bodies are being recorded (the backend's
  // beginBody/endBody), innermost last; each is queued once its last body is.
  struct Open {
    uint64_t handle = 0;
    int type = 0;
    uint64_t remaining = 0;
    std::deque<uint64_t> next;
    std::vector<std::shared_ptr<Backend::Body>> bodies;
  };
  std::vector<Open> open;
  Status recording;  // the backend refused to record a body: nothing more of the launch is queued
  for (const auto& words : g.chunks) {
   capnp::FlatArrayMessageReader reader(words.asPtr(), common::readerOptions());
   for (auto n : reader.getRoot<wire::GraphCreate>().getNodes()) {
    ++at;
    if (!recording) break;
    for (auto& o : open) --o.remaining;
    switch (n.which()) {
      case wire::GraphNode::REQUEST: {
        auto r = n.getRequest();
        Handler handler = handlers()[static_cast<size_t>(r.which())];
        Status st = (this->*handler)(node_h, r);  // non-ok only for a bulk mismatch, which cannot happen here
        fail(st);
        break;
      }
      case wire::GraphNode::HOST_TO_DEVICE: {
        auto c = n.getHostToDevice();
        uint64_t size = c.getSize(), off = in_off;
        in_off += size;
        if (size == 0) break;
        Status st = allocs_.check(c.getDevice(), size);
        Staging piece;
        if (st) piece = stage(size);
        if (st && !piece) st = stagingRefused(size);
        if (st) {
          std::memcpy(piece->data(), all->data() + off, size);
          st = backend_->copyToDevice(key, c.getDevice(), std::move(piece), size);
        }
        fail(st);
        break;
      }
      case wire::GraphNode::DEVICE_TO_HOST: {
        auto c = n.getDeviceToHost();
        uint64_t size = c.getSize(), off = out_off;
        out_off += size;
        if (size == 0) break;
        {
          std::lock_guard lock(gather->mu);
          ++gather->pending;
        }
        Status st = allocs_.check(c.getDevice(), size);
        const bool early = replies && at < g.last_host_node;  // a host function comes after it
        if (st)
          st = backend_->copyFromDevice(
              key, c.getDevice(), size,
              [this, gather, off, early, seq](Status r, const uint8_t* d, uint64_t len, const OnWire& w) {
                if (!early || !r) return gather->part(r, off, d, len, w);
                sendGraphOutput(seq, off, d, len);
                if (w) w();  // on the wire: host functions queued after it may run
                gather->part(r, off, nullptr, 0, nullptr);
              });
        if (!st) gather->part(st, off, nullptr, 0, nullptr);
        break;
      }
      case wire::GraphNode::HOST_FUNC:
        fail(enqueueHostFunc(key, host_funcs[next_host++]));
        break;
      case wire::GraphNode::CONDITIONAL: {
        auto c = n.getConditional();
        Open o;
        o.handle = c.getHandle();
        o.type = static_cast<int>(c.getType());
        for (uint64_t b : c.getBodies()) o.next.push_back(b);  // checked by onGraphCreate: at least one
        o.remaining = o.next.front();
        o.next.pop_front();
        open.push_back(std::move(o));
        recording = backend_->beginBody();
        break;
      }
      case wire::GraphNode::CONDITIONAL_RESET: {
        auto r = n.getConditionalReset();
        fail(backend_->fillPattern2D(key, r.getHandle(), 4, r.getValue(), 4, 4, 1));
        break;
      }
      default:
        break;
    }
    // Bodies complete after this node: the next one is recorded, or the node is queued.
    while (recording && !open.empty() && open.back().remaining == 0) {
      Open& o = open.back();
      auto body = backend_->endBody();
      if (!body) {
        recording = body.status();
        break;
      }
      o.bodies.push_back(*body);
      if (!o.next.empty()) {
        o.remaining = o.next.front();
        o.next.pop_front();
        recording = backend_->beginBody();
        continue;
      }
      Open done = std::move(o);
      open.pop_back();
      fail(backend_->conditional(key, done.handle, done.type, std::move(done.bodies)));
    }
   }
  }
  if (!recording) {
    // Not expected (only backends that record bodies make handles); bodies left open are dropped.
    RGPU_LOG_WARN("session {}: graph launch stopped: {}", session_id_, recording.message());
    recordAsyncError(recording);
  }
  graph_stream_ = nullptr;
  // Without device-to-host nodes a synchronous launch is answered once queued.
  gather->part(Status::ok(), 0, nullptr, 0, nullptr);
}

Status Session::saveGraphs(CheckpointWriter& out) const {
  RGPU_TRY(out.putU64(graphs_.size()));
  for (auto& [id, g] : graphs_) {
    if (!g->open.empty()) return Status(err::kNotReady, "graph " + std::to_string(id) + " is still arriving");
    RGPU_TRY(out.putU32(id));
    RGPU_TRY(out.putI32(g->device));
    RGPU_TRY(out.putU64(g->chunks.size()));
    for (auto& c : g->chunks) RGPU_TRY(out.putString(std::string(reinterpret_cast<const char*>(c.begin()), c.size() * 8)));
    for (uint64_t v : {g->nodes, g->h2d_bytes, g->d2h_bytes, g->first_d2h_node, g->last_host_node}) RGPU_TRY(out.putU64(v));
    RGPU_TRY(out.putU32(g->host_funcs));
    RGPU_TRY(out.putU32(g->device_only ? 1 : 0));
    RGPU_TRY(out.putStatus(g->broken));
    RGPU_TRY(out.putU32(g->last_stream ? 1 : 0));
    RGPU_TRY(out.putU32(g->last_stream ? g->last_stream->id : 0));
    RGPU_TRY(out.putI32(g->last_stream ? g->last_stream->device : 0));
  }
  return Status::ok();
}

Status Session::loadGraphs(CheckpointReader& in) {
  const auto& L = cfg_.limits;
  RGPU_TRY_ASSIGN(n, in.getU64());
  if (n > L.max_graphs) return Status(err::kInvalidValue, "checkpoint holds more graphs than max_graphs");
  for (uint64_t i = 0; i < n; ++i) {
    auto g = std::make_shared<SessionGraph>();
    RGPU_TRY_ASSIGN(id, in.getU32());
    RGPU_TRY_ASSIGN(dev, in.getI32());
    RGPU_TRY(checkDevice(dev));
    g->device = dev;
    RGPU_TRY_ASSIGN(chunks, in.getU64());
    if (chunks > L.max_graph_nodes) return Status(err::kInvalidValue, "checkpoint: a graph of too many parts");
    for (uint64_t c = 0; c < chunks; ++c) {
      RGPU_TRY_ASSIGN(bytes, in.getString(protocol::kMaxMessageBytes));
      if (bytes.size() % 8) return Status(err::kInvalidValue, "checkpoint: a graph part is not whole words");
      auto words = kj::heapArray<capnp::word>(bytes.size() / 8);
      std::memcpy(words.begin(), bytes.data(), bytes.size());
      g->chunks.push_back(std::move(words));
    }
    for (uint64_t* f : {&g->nodes, &g->h2d_bytes, &g->d2h_bytes, &g->first_d2h_node, &g->last_host_node}) {
      RGPU_TRY_ASSIGN(v, in.getU64());
      *f = v;
    }
    RGPU_TRY_ASSIGN(host_funcs, in.getU32());
    RGPU_TRY_ASSIGN(device_only, in.getU32());
    RGPU_TRY(in.getStatus(&g->broken));
    RGPU_TRY_ASSIGN(has_last, in.getU32());
    RGPU_TRY_ASSIGN(last_id, in.getU32());
    RGPU_TRY_ASSIGN(last_dev, in.getI32());
    g->host_funcs = host_funcs;
    g->device_only = device_only != 0;
    // The stream of its last launch, if the session still has it.
    if (has_last && (last_id == 0 ? checkDevice(last_dev).isOk() : streams_.count(last_id) != 0))
      g->last_stream = StreamKey{last_id, last_dev};
    if (graph_nodes_ + g->nodes > L.max_graph_nodes)
      return Status(err::kInvalidValue, "checkpoint holds more graph nodes than max_graph_nodes");
    graph_nodes_ += g->nodes;
    graphs_[id] = std::move(g);
  }
  return Status::ok();
}

}  // namespace rgpu::server
