// Executable graphs (client/graph.h): flattening a graph into the wire nodes
// the server runs, sending them once, launching with one message, updating.
#include <capnp/serialize.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "client/api_util.h"
#include "client/arrays.h"
#include "client/graph.h"
#include "client/managed.h"
#include "common/frame_io.h"

namespace rgpu::client {
namespace {

// Parts of one graphCreate message: a graph larger than this goes in several.
constexpr size_t kGraphChunkWords = (protocol::kMaxMessageBytes / 2) / sizeof(capnp::word);

struct WireNode {
  // kConditional: device_ptr is the handle, size the type, `bodies` each
  // body's node count; kCondReset: device_ptr is the handle, size the value.
  enum Kind { kRequest, kToDevice, kToHost, kHostFunc, kConditional, kCondReset } kind = kRequest;
  std::vector<uint64_t> bodies;
  kj::Array<capnp::word> request;  // kRequest: a Request message
  uint64_t device_ptr = 0, size = 0;
  const void* host_src = nullptr;
  void* host_dst = nullptr;
  cudaHostNodeParams host{};
  std::shared_ptr<const cudaMemcpy3DParms> copy;  // kHostFunc of a host-to-host copy node
};

std::unordered_map<const CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>& execs() {
  static auto* m = new std::unordered_map<const CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>>;
  return *m;
}
std::atomic<uint32_t> g_next_exec{1};
using Buffers = std::vector<std::shared_ptr<GraphAllocation>>;

template <typename F>
WireNode request(F&& fill) {
  common::CallMessage msg(64);
  fill(msg.initRoot<wire::Request>());
  WireNode w;
  w.request = capnp::messageToFlatArray(msg);
  return w;
}

void streamOn(wire::StreamRef::Builder b, int device) {
  b.setId(0);
  b.setDevice(device);
}

uint64_t at(const cudaPitchedPtr& p, const cudaPos& pos, size_t y, size_t z) {
  return reinterpret_cast<uint64_t>(p.ptr) + ((pos.z + z) * p.ysize + pos.y + y) * p.pitch + pos.x;
}

// A host-to-host copy node's work, run as a host function (`user`: its
// parameters, owned by this one run).
void CUDART_CB runHostCopy(void* user) {
  std::unique_ptr<cudaMemcpy3DParms> c(static_cast<cudaMemcpy3DParms*>(user));
  for (size_t z = 0; z < c->extent.depth; ++z)
    for (size_t y = 0; y < c->extent.height; ++y)
      std::memmove(reinterpret_cast<void*>(at(c->dstPtr, c->dstPos, y, z)),
                   reinterpret_cast<const void*>(at(c->srcPtr, c->srcPos, y, z)), c->extent.width);
}

void flattenCopy(const NodeParams& p, std::vector<WireNode>& out) {
  const auto& c = p.copy;
  const size_t w = c.extent.width, h = c.extent.height, d = c.extent.depth;
  if (c.kind == cudaMemcpyHostToHost) {  // the client's own memory: a host function of the stream
    WireNode n;
    n.kind = WireNode::kHostFunc;
    n.copy = std::make_shared<const cudaMemcpy3DParms>(c);
    out.push_back(std::move(n));
    return;
  }
  if (c.kind == cudaMemcpyDeviceToDevice) {
    int sd = -1, dd = -1;
    rt().classify(c.srcPtr.ptr, &sd);
    rt().classify(c.dstPtr.ptr, &dd);
    for (size_t z = 0; z < d; ++z) {
      if (sd != dd) {
        for (size_t y = 0; y < h; ++y)
          out.push_back(request([&](wire::Request::Builder r) {
            auto m = r.initMemcpyPeer();
            m.setDst(at(c.dstPtr, c.dstPos, y, z)), m.setDstDevice(dd);
            m.setSrc(at(c.srcPtr, c.srcPos, y, z)), m.setSrcDevice(sd);
            m.setSize(w);
            streamOn(m.initStream(), p.device);
          }));
      } else if (h == 1) {
        out.push_back(request([&](wire::Request::Builder r) {
          auto m = r.initMemcpyDtoD();
          m.setDst(at(c.dstPtr, c.dstPos, 0, z)), m.setSrc(at(c.srcPtr, c.srcPos, 0, z)), m.setSize(w);
          streamOn(m.initStream(), p.device);
        }));
      } else {
        out.push_back(request([&](wire::Request::Builder r) {
          auto m = r.initMemcpy2D();
          m.setKind(3);
          m.setDst(at(c.dstPtr, c.dstPos, 0, z)), m.setDpitch(c.dstPtr.pitch);
          m.setSrc(at(c.srcPtr, c.srcPos, 0, z)), m.setSpitch(c.srcPtr.pitch);
          m.setWidth(w), m.setHeight(h);
          streamOn(m.initStream(), p.device);
        }));
      }
    }
    return;
  }
  // Host side: one host copy node per run of rows contiguous on both sides.
  const bool to_device = c.kind == cudaMemcpyHostToDevice;
  WireNode* run = nullptr;
  uint64_t run_src_end = 0, run_dst_end = 0;
  for (size_t z = 0; z < d; ++z)
    for (size_t y = 0; y < h; ++y) {
      uint64_t src = at(c.srcPtr, c.srcPos, y, z), dst = at(c.dstPtr, c.dstPos, y, z);
      if (run && src == run_src_end && dst == run_dst_end) {
        run->size += w;
      } else {
        WireNode n;
        n.kind = to_device ? WireNode::kToDevice : WireNode::kToHost;
        n.size = w;
        if (to_device) n.device_ptr = dst, n.host_src = reinterpret_cast<const void*>(src);
        else n.device_ptr = src, n.host_dst = reinterpret_cast<void*>(dst);
        out.push_back(std::move(n));
        run = &out.back();
      }
      run_src_end = src + w;
      run_dst_end = dst + w;
    }
}

// A copy node with an array on a side: one copy3D request between device
// sides. A host side goes through a buffer of the executable graph's on the
// device (the graph's host copies fill or read it at each launch, as a plain
// host copy node's bytes travel), so the array copy itself is device-side.
Status flattenArrayCopy(const NodeParams& p, std::vector<WireNode>& out, Buffers& staging) {
  CopyEnd src, dst;
  size_t width = 0;
  RGPU_TRY(copyEnds(p.copy, &src, &dst, &width));  // an array freed since: refused here
  const size_t h = p.copy.extent.height, d = p.copy.extent.depth;
  auto copy3D = [&](const CopyEnd& a, const CopyEnd& b) {
    out.push_back(request([&](wire::Request::Builder r) {
      auto m = r.initCopy3D();
      fillCopy3D(m, a, true, b, true, width, h, d);
      streamOn(m.initStream(), p.device);
    }));
  };
  if (p.copy.kind == cudaMemcpyDeviceToDevice) {
    copy3D(src, dst);
    return Status::ok();
  }
  auto buffer = std::make_shared<GraphAllocation>();
  buffer->device = p.device;
  buffer->graph_memory = false;
  bool& internal = captureInternalCall();
  const bool was = internal;
  internal = true;
  auto at = allocateDeviceMemory(p.device, uint64_t{width} * h * d);
  internal = was;
  if (!at) return at.status();
  buffer->ptr = *at;
  staging.push_back(buffer);
  CopyEnd packed;
  packed.ptr = reinterpret_cast<void*>(*at);
  packed.pitch = width, packed.rows = h;
  // The host side's rows to or from the packed buffer, as a host copy node's.
  NodeParams host = p;
  host.copy.srcArray = host.copy.dstArray = nullptr;
  host.copy.extent = cudaExtent{width, h, d};
  const cudaPitchedPtr dense{packed.ptr, width, width, h};
  if (p.copy.kind == cudaMemcpyHostToDevice) {
    host.copy.dstPtr = dense, host.copy.dstPos = cudaPos{0, 0, 0};
    flattenCopy(host, out);
    copy3D(packed, dst);
  } else {
    copy3D(src, packed);
    host.copy.srcPtr = dense, host.copy.srcPos = cudaPos{0, 0, 0};
    flattenCopy(host, out);
  }
  return Status::ok();
}

void flattenMemset(const NodeParams& p, std::vector<WireNode>& out) {
  const auto& m = p.memset;
  const unsigned es = m.elementSize;
  uint8_t bytes[4];
  std::memcpy(bytes, &m.value, 4);
  bool uniform = es == 1 || (bytes[0] == bytes[1] && (es == 2 || (bytes[0] == bytes[2] && bytes[0] == bytes[3])));
  const uint64_t width = m.width * es;
  out.push_back(request([&](wire::Request::Builder r) {
    if (m.height == 1 && uniform) {
      auto f = r.initMemset();
      f.setDst(reinterpret_cast<uint64_t>(m.dst)), f.setValue(bytes[0]), f.setSize(width);
      streamOn(f.initStream(), p.device);
      return;
    }
    auto f = r.initMemset2D();
    f.setDst(reinterpret_cast<uint64_t>(m.dst));
    f.setPitch(m.height == 1 ? width : m.pitch);
    f.setWidth(width), f.setHeight(m.height);
    f.setValue(bytes[0]);
    if (!uniform) f.setElementSize(static_cast<uint8_t>(es)), f.setPattern(m.value);
    streamOn(f.initStream(), p.device);
  }));
}

// What a conditional node's body may hold (recursively): kernels, copies
// and memsets of device memory, empty, child graph and conditional nodes.
// Returns the first node that is none of these.
const CUgraphNode_st* notInBody(const CUgraph_st& g) {
  for (auto& n : g.nodes) {
    const NodeParams& p = n->p;
    if (!p.request.empty()) return n.get();  // a captured library call
    switch (p.type) {
      case cudaGraphNodeTypeKernel:
      case cudaGraphNodeTypeMemcpy:  // with host memory: refused once flattened
      case cudaGraphNodeTypeMemset:
      case cudaGraphNodeTypeEmpty:
        break;
      case cudaGraphNodeTypeGraph:
        if (auto* bad = notInBody(*p.child)) return bad;
        break;
      case cudaGraphNodeTypeConditional:
        for (auto& b : p.bodies)
          if (auto* bad = notInBody(*b)) return bad;
        break;
      default:
        return n.get();
    }
  }
  return nullptr;
}

Status flatten(const CUgraph_st& g, int device, std::vector<WireNode>& out, Buffers& staging, cudaGraphNode_t* err_node);

// Names the program's node behind `at` as the one instantiation failed at (the first only); returns `s`.
Status failedAt(const Status& s, const CUgraphNode_st* at, cudaGraphNode_t* err_node) {
  if (err_node && !*err_node) *err_node = const_cast<CUgraphNode_st*>(at->origin ? at->origin : at);
  return s;
}

// A conditional node and then its bodies' nodes, body after body.
Status flattenConditional(const CUgraphNode_st& n, int device, std::vector<WireNode>& out, Buffers& staging,
                          cudaGraphNode_t* err_node) {
  const NodeParams& p = n.p;
  auto fault = [&](const Status& s, const CUgraphNode_st* at) { return failedAt(s, at, err_node); };
  const size_t at = out.size();
  WireNode w;
  w.kind = WireNode::kConditional;
  w.device_ptr = p.cond_handle;
  w.size = static_cast<uint64_t>(p.cond_type);
  out.push_back(std::move(w));
  for (auto& b : p.bodies) {
    if (const CUgraphNode_st* bad = notInBody(*b))
      return fault(Status(err::kInvalidValue, "a conditional node's body may hold kernel, memcpy, memset, empty, child "
                                              "graph and conditional nodes only"), bad);
    const size_t before = out.size();
    RGPU_TRY(flatten(*b, device, out, staging, err_node));
    for (size_t i = before; i < out.size(); ++i)
      if (out[i].kind == WireNode::kToDevice || out[i].kind == WireNode::kToHost || out[i].kind == WireNode::kHostFunc)
        return fault(Status(err::kInvalidValue, "a conditional node's body copies device memory only"), &n);
    out[at].bodies.push_back(out.size() - before);
  }
  return Status::ok();
}

// Appends the wire nodes of `g` in an order that respects its edges.
Status flatten(const CUgraph_st& g, int device, std::vector<WireNode>& out, Buffers& staging, cudaGraphNode_t* err_node) {
  auto order = topoOrder(g);
  if (order.size() != g.nodes.size()) return Status(err::kInvalidValue, "the graph has a cycle");
  // Handles of this graph that take their default value whenever it starts.
  for (const auto& h : g.cond_handles)
    if (h.flags & cudaGraphCondAssignDefault) {
      WireNode w;
      w.kind = WireNode::kCondReset;
      w.device_ptr = h.handle;
      w.size = h.default_value;
      out.push_back(std::move(w));
    }
  for (CUgraphNode_st* n : order) {
    auto fault = [&](const Status& s) { return failedAt(s, n, err_node); };
    if (!n->enabled) continue;
    const NodeParams& p = n->p;
    if (!p.request.empty()) {
      WireNode w;
      w.request = kj::heapArray<capnp::word>(p.request.data(), p.request.size());
      out.push_back(std::move(w));
      continue;
    }
    bool on_device = p.type == cudaGraphNodeTypeKernel ||
                     (p.type == cudaGraphNodeTypeMemcpy && p.copy.kind != cudaMemcpyHostToHost) ||
                     p.type == cudaGraphNodeTypeMemset;
    if (on_device && p.device != device)
      return fault(Status(err::kNotSupported, "rgpu runs a graph on one device; this node is on device " +
                                                  std::to_string(p.device) + ", the graph on " + std::to_string(device)));
    switch (p.type) {
      case cudaGraphNodeTypeKernel: {
        dim3 cluster(0, 0, 0);
        if (auto cl = p.attrs.find(cudaLaunchAttributeClusterDimension); cl != p.attrs.end())
          cluster = dim3(cl->second.clusterDim.x, cl->second.clusterDim.y, cl->second.clusterDim.z);
        if (Status s = rt().checkLaunch(*p.kernel, p.grid, p.block, p.shmem, device, cluster); !s) return fault(s);
        auto coop = p.attrs.find(cudaLaunchAttributeCooperative);
        const bool cooperative = coop != p.attrs.end() && coop->second.cooperative;
        if (cooperative) {
          Status s = rt().checkCooperative(*p.kernel, device, uint64_t{p.grid.x} * p.grid.y * p.grid.z,
                                           static_cast<int>(p.block.x * p.block.y * p.block.z), p.shmem);
          if (!s) return fault(s);
        }
        out.push_back(request([&](wire::Request::Builder r) {
          auto lk = r.initLaunchKernel();
          lk.setFunction(rt().serverKernelId(*p.kernel, device));
          auto gr = lk.initGrid();
          gr.setX(p.grid.x), gr.setY(p.grid.y), gr.setZ(p.grid.z);
          auto b = lk.initBlock();
          b.setX(p.block.x), b.setY(p.block.y), b.setZ(p.block.z);
          lk.setSharedMem(p.shmem);
          lk.setCooperative(cooperative);
          if (auto cl = p.attrs.find(cudaLaunchAttributeClusterDimension); cl != p.attrs.end()) {
            auto c = lk.initCluster();
            c.setX(cl->second.clusterDim.x), c.setY(cl->second.clusterDim.y), c.setZ(cl->second.clusterDim.z);
          }
          streamOn(lk.initStream(), device);
          lk.setParams(kj::arrayPtr(reinterpret_cast<const kj::byte*>(p.params.data()), p.params.size()));
        }));
        break;
      }
      case cudaGraphNodeTypeMemcpy:
        if (p.copy.srcArray || p.copy.dstArray) {
          if (Status s = flattenArrayCopy(p, out, staging); !s) return fault(s);
        } else {
          flattenCopy(p, out);
        }
        break;
      case cudaGraphNodeTypeMemset:
        flattenMemset(p, out);
        break;
      case cudaGraphNodeTypeHost: {
        WireNode w;
        w.kind = WireNode::kHostFunc;
        w.host = p.host;
        out.push_back(std::move(w));
        break;
      }
      case cudaGraphNodeTypeGraph:
        RGPU_TRY(flatten(*p.child, device, out, staging, err_node));
        break;
      case cudaGraphNodeTypeConditional:
        RGPU_TRY(flattenConditional(*n, device, out, staging, err_node));
        break;
      case cudaGraphNodeTypeEventRecord:
      case cudaGraphNodeTypeWaitEvent: {
        auto id = rt().event(p.event);
        if (!id) return fault(id.status());
        out.push_back(request([&](wire::Request::Builder r) {
          if (p.type == cudaGraphNodeTypeEventRecord) {
            auto m = r.initEventRecord();
            m.setId(*id);
            streamOn(m.initStream(), device);
          } else {
            auto m = r.initStreamWaitEvent();
            m.setEvent(*id);
            streamOn(m.initStream(), device);
          }
        }));
        break;
      }
      case cudaGraphNodeTypeEmpty:
      case cudaGraphNodeTypeMemAlloc:  // the memory exists for the graph's life (GraphAllocation)
      case cudaGraphNodeTypeMemFree:
        break;
      default:
        return fault(Status(err::kNotSupported, "graph node type " + std::to_string(p.type) + " is not supported by rgpu"));
    }
  }
  return Status::ok();
}

// The device a graph runs on: its first kernel, copy or memset's.
int graphDevice(const CUgraph_st& g, int fallback) {
  for (auto& n : g.nodes) {
    if (n->p.type == cudaGraphNodeTypeGraph) {
      int d = graphDevice(*n->p.child, -1);
      if (d >= 0) return d;
    } else if (n->p.type == cudaGraphNodeTypeConditional) {
      for (auto& b : n->p.bodies)
        if (int d = graphDevice(*b, -1); d >= 0) return d;
    } else if (n->p.request.empty() &&
               (n->p.type == cudaGraphNodeTypeKernel || n->p.type == cudaGraphNodeTypeMemset ||
                (n->p.type == cudaGraphNodeTypeMemcpy && n->p.copy.kind != cudaMemcpyHostToHost))) {
      return n->p.device;
    }
  }
  return fallback;
}

// Sends `e->shape` to the server (in parts when large); `sync`: the last
// part waits for the answer, so a refusal is the caller's error.
Status sendExec(CUgraphExec_st& e, bool sync, cudaGraphNode_t* err_node) {
  std::vector<WireNode> nodes;
  Buffers staging;
  RGPU_TRY(flatten(*e.shape, e.device, nodes, staging, err_node));
  e.staging = std::move(staging);  // the last one's are freed after the work queued before (as cudaFree)
  e.host_in.clear(), e.host_out.clear(), e.host_fns.clear();
  for (auto& n : nodes) {
    if (n.kind == WireNode::kToDevice) e.host_in.emplace_back(n.host_src, n.size);
    if (n.kind == WireNode::kToHost) e.host_out.emplace_back(n.host_dst, n.size);
    if (n.kind == WireNode::kHostFunc) e.host_fns.push_back({n.host, n.copy});
  }
  size_t begin = 0;
  bool first = true;
  do {
    size_t end = begin, words = 0;
    while (end < nodes.size() && (end == begin || words + nodes[end].request.size() + nodes[end].bodies.size() + 8 < kGraphChunkWords))
      words += nodes[end].request.size() + nodes[end].bodies.size() + 8, ++end;
    common::CallMessage msg(static_cast<unsigned>(words + 64));
    auto gc = msg.initRoot<wire::Request>().initGraphCreate();
    gc.setId(e.id);
    gc.setDevice(e.device);
    gc.setAppend(!first);
    auto list = gc.initNodes(static_cast<unsigned>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      auto out = list[static_cast<unsigned>(i - begin)];
      const WireNode& n = nodes[i];
      switch (n.kind) {
        case WireNode::kRequest: {
          capnp::FlatArrayMessageReader r(n.request.asPtr(), common::readerOptions());
          out.setRequest(r.getRoot<wire::Request>());
          break;
        }
        case WireNode::kToDevice: {
          auto c = out.initHostToDevice();
          c.setDevice(n.device_ptr), c.setSize(n.size);
          break;
        }
        case WireNode::kToHost: {
          auto c = out.initDeviceToHost();
          c.setDevice(n.device_ptr), c.setSize(n.size);
          break;
        }
        case WireNode::kHostFunc:
          out.setHostFunc();
          break;
        case WireNode::kConditional: {
          auto c = out.initConditional();
          c.setHandle(n.device_ptr);
          c.setType(static_cast<wire::ConditionalType>(n.size));
          auto b = c.initBodies(static_cast<unsigned>(n.bodies.size()));
          for (size_t k = 0; k < n.bodies.size(); ++k) b.set(static_cast<unsigned>(k), n.bodies[k]);
          break;
        }
        case WireNode::kCondReset: {
          auto c = out.initConditionalReset();
          c.setHandle(n.device_ptr);
          c.setValue(static_cast<uint32_t>(n.size));
          break;
        }
      }
    }
    if (end == nodes.size() && sync) {
      auto r = rt().call(msg);
      if (!r) return r.status();
    } else {
      RGPU_TRY(rt().post(msg));
    }
    first = false;
    begin = end;
  } while (begin < nodes.size());
  e.sent = true;
  return Status::ok();
}

// Same topology: the same nodes (by creation order, recursively for child
// graphs), of the same types, with the same edges.
bool sameTopology(const CUgraph_st& a, const CUgraph_st& b, cudaGraphExecUpdateResultInfo* info) {
  auto fail = [&](cudaGraphExecUpdateResult r, CUgraphNode_st* n) {
    if (info) info->result = r, info->errorNode = n, info->errorFromNode = nullptr;
    return false;
  };
  if (a.nodes.size() != b.nodes.size()) return fail(cudaGraphExecUpdateErrorTopologyChanged, nullptr);
  std::unordered_map<const CUgraphNode_st*, size_t> ia, ib;
  for (size_t i = 0; i < a.nodes.size(); ++i) ia[a.nodes[i].get()] = i, ib[b.nodes[i].get()] = i;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    auto& x = *a.nodes[i];
    auto& y = *b.nodes[i];
    if (x.p.type != y.p.type || x.p.request.empty() != y.p.request.empty())
      return fail(cudaGraphExecUpdateErrorNodeTypeChanged, b.nodes[i].get());
    if (x.in.size() != y.in.size()) return fail(cudaGraphExecUpdateErrorTopologyChanged, b.nodes[i].get());
    // Dependencies with their edge data (type and port).
    std::vector<std::pair<size_t, int>> dx, dy;
    auto kind = [](const cudaGraphEdgeData& e) { return e.type << 8 | e.from_port; };
    for (auto* d : x.in) dx.emplace_back(ia[d], kind(edgeData(d, &x)));
    for (auto* d : y.in) dy.emplace_back(ib[d], kind(edgeData(d, &y)));
    std::sort(dx.begin(), dx.end());
    std::sort(dy.begin(), dy.end());
    if (dx != dy) return fail(cudaGraphExecUpdateErrorTopologyChanged, b.nodes[i].get());
    if (x.p.type == cudaGraphNodeTypeMemcpy && x.p.copy.kind != y.p.copy.kind)
      return fail(cudaGraphExecUpdateErrorParametersChanged, b.nodes[i].get());
    if (x.p.type == cudaGraphNodeTypeGraph && !sameTopology(*x.p.child, *y.p.child, info)) return false;
    if (x.p.type == cudaGraphNodeTypeConditional) {
      if (x.p.cond_type != y.p.cond_type || x.p.cond_handle != y.p.cond_handle || x.p.bodies.size() != y.p.bodies.size())
        return fail(cudaGraphExecUpdateErrorParametersChanged, b.nodes[i].get());
      for (size_t k = 0; k < x.p.bodies.size(); ++k)
        if (!sameTopology(*x.p.bodies[k], *y.p.bodies[k], info)) return false;
    }
  }
  return true;
}

}  // namespace

Status checkExec(cudaGraphExec_t e) {
  if (!e || !execs().count(e)) return Status(err::kInvalidValue, "not a live executable graph handle");
  return Status::ok();
}

Result<cudaGraphExec_t> instantiate(cudaGraph_t g, unsigned long long flags, cudaGraphNode_t* err_node) {
  RGPU_TRY(checkGraph(g));
  if (g->capturing) return Status(err::kInvalidValue, "the graph is being captured into");
  constexpr unsigned long long kKnown = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
                                        cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  if (flags & ~kKnown) return Status(err::kInvalidValue, "unknown instantiation flags");
  if (flags & cudaGraphInstantiateFlagDeviceLaunch)
    return Status(err::kNotSupported, "device-launchable graphs are not supported by rgpu");
  const bool memory = hasMemoryNodes(*g) || hasConditionalNodes(*g);
  if (memory && g->mem_execs > 0)
    return Status(err::kNotSupported, "a graph with memory allocation or conditional nodes has one executable graph at a time");
  auto e = std::make_unique<CUgraphExec_st>();
  e->id = g_next_exec.fetch_add(1);
  e->flags = flags;
  e->device = graphDevice(*g, rt().currentDevice());
  e->shape = cloneGraph(*g, &e->by_origin);
  RGPU_TRY(sendExec(*e, true, err_node));
  if (memory) e->mem_source = g, ++g->mem_execs;
  e->user_refs = g->user_refs;  // the executable graph keeps the graph's user objects alive
  for (auto& [o, n] : e->user_refs) retainUserObject(o, n);
  CUgraphExec_st* raw = e.get();
  execs().emplace(raw, std::move(e));
  return raw;
}

void destroyExec(cudaGraphExec_t e) {
  for (auto& [o, n] : e->user_refs) releaseUserObject(o, n);
  if (e->mem_source && checkGraph(e->mem_source)) --e->mem_source->mem_execs;
  common::CallMessage msg(16);
  msg.initRoot<wire::Request>().initGraphDestroy().setId(e->id);
  (void)rt().postOn(e->device, msg);  // launches already queued keep running on the server
  execs().erase(e);
}

Status launchExec(cudaGraphExec_t e, cudaStream_t stream, bool ptsz) {
  std::lock_guard lock(graphMutex());
  RGPU_TRY(checkExec(e));
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  // On a capturing stream the graph becomes a child graph node (addNode copies it).
  if (Status st; capturesActive() && captureNodeOn(*s, [&]() -> Result<NodeParams> {
        NodeParams p;
        if (hasConditionalNodes(*e->shape))
          return Status(err::kInvalidValue, "a graph with conditional nodes cannot be launched into a capture");
        p.type = cudaGraphNodeTypeGraph;
        p.child = e->shape;
        return p;
      }, &st, nullptr))
    return st;
  if (s->device != e->device)
    return Status(err::kInvalidValue, "the graph was instantiated for device " + std::to_string(e->device) +
                                          "; the stream is on device " + std::to_string(s->device));
  if (!e->sent) RGPU_TRY(sendExec(*e, false, nullptr));
  rt().flushDeviceOutput();
  common::CallMessage msg(64 + e->host_fns.size());
  auto gl = msg.initRoot<wire::Request>().initGraphLaunch();
  gl.setId(e->id);
  setStream(gl.initStream(), *s);
  auto fns = gl.initHostFuncs(static_cast<unsigned>(e->host_fns.size()));
  for (size_t i = 0; i < e->host_fns.size(); ++i) {
    const auto& f = e->host_fns[i];
    fns.set(static_cast<unsigned>(i), f.copy ? rt().addHostFunc(&runHostCopy, new cudaMemcpy3DParms(*f.copy))
                                             : rt().addHostFunc(f.fn.fn, f.fn.userData));
  }
  // The host-to-device bytes as the program's memory holds them now.
  uint64_t in = 0;
  for (auto& [p, n] : e->host_in) in += n;
  std::vector<uint8_t> bulk(in);
  uint64_t off = 0;
  for (auto& [p, n] : e->host_in) {
    std::memcpy(bulk.data() + off, p, n);
    off += n;
  }
  if (e->host_out.empty()) return rt().post(msg, bulk.data(), bulk.size());
  return rt().postScatter(msg, std::move(bulk), e->host_out);
}

Status updateExec(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info) {
  RGPU_TRY(checkExec(e));
  RGPU_TRY(checkGraph(g));
  if (info) *info = {};
  if (!sameTopology(*e->shape, *g, info)) return Status(err::kGraphExecUpdateFailure, "the graph's topology differs");
  if (graphDevice(*g, e->device) != e->device) {
    if (info) info->result = cudaGraphExecUpdateErrorUnsupportedFunctionChange;
    return Status(err::kGraphExecUpdateFailure, "the graph runs on another device");
  }
  std::map<const CUgraphNode_st*, CUgraphNode_st*> fresh;
  auto shape = cloneGraph(*g, &fresh);
  // The program's original nodes keep naming the same positions.
  std::unordered_map<const CUgraphNode_st*, size_t> pos;
  for (size_t i = 0; i < e->shape->nodes.size(); ++i) pos[e->shape->nodes[i].get()] = i;
  for (auto& [orig, copy] : e->by_origin) {
    auto it = pos.find(copy);
    if (it == pos.end()) continue;  // a node inside a child graph: not addressable by the program
    CUgraphNode_st* now = shape->nodes[it->second].get();
    now->enabled = copy->enabled;
    copy = now;
  }
  e->shape = std::move(shape);
  e->sent = false;
  if (info) info->result = cudaGraphExecUpdateSuccess;
  return Status::ok();
}

namespace {
Result<CUgraphNode_st*> execNode(cudaGraphExec_t e, cudaGraphNode_t node) {
  RGPU_TRY(checkExec(e));
  RGPU_TRY(checkNode(node));
  auto it = e->by_origin.find(node);
  if (it == e->by_origin.end() || it->second->graph != e->shape.get())
    return Status(err::kInvalidValue, "the node is not part of the graph the executable graph came from");
  return it->second;
}
}  // namespace

Status setExecNodeParams(cudaGraphExec_t e, cudaGraphNode_t node, Result<NodeParams> params) {
  if (!params) return params.status();
  NodeParams p = std::move(*params);
  auto n = execNode(e, node);
  if (!n) return n.status();
  if ((*n)->p.type != p.type || !(*n)->p.request.empty())
    return Status(err::kInvalidValue, "the new parameters are of another node type");
  if (p.type == cudaGraphNodeTypeConditional)
    return Status(err::kInvalidValue, "a conditional node's parameters cannot be changed");
  if (p.type == cudaGraphNodeTypeMemcpy && p.copy.kind != (*n)->p.copy.kind)
    return Status(err::kInvalidValue, "a copy node's direction cannot change in an executable graph");
  if ((p.type == cudaGraphNodeTypeKernel || p.type == cudaGraphNodeTypeMemcpy || p.type == cudaGraphNodeTypeMemset) &&
      p.device != e->device)
    return Status(err::kInvalidValue, "the new parameters are for another device");
  if (p.type == cudaGraphNodeTypeGraph) {
    if (!sameTopology(*(*n)->p.child, *p.child, nullptr))
      return Status(err::kInvalidValue, "the child graph's topology differs");
    p.child = cloneGraph(*p.child, nullptr);
  }
  p.attrs = std::move((*n)->p.attrs);  // attributes stay the node's
  (*n)->p = std::move(p);
  pointArgs((*n)->p);
  e->sent = false;
  return Status::ok();
}

Status setExecNodeEnabled(cudaGraphExec_t e, cudaGraphNode_t node, bool enabled) {
  auto n = execNode(e, node);
  if (!n) return n.status();
  auto t = (*n)->p.type;
  if (t != cudaGraphNodeTypeKernel && t != cudaGraphNodeTypeMemcpy && t != cudaGraphNodeTypeMemset)
    return Status(err::kInvalidValue, "only kernel, copy and memset nodes can be disabled");
  if ((*n)->enabled != enabled) e->sent = false;
  (*n)->enabled = enabled;
  return Status::ok();
}

Result<bool> execNodeEnabled(cudaGraphExec_t e, cudaGraphNode_t node) {
  auto n = execNode(e, node);
  if (!n) return n.status();
  return (*n)->enabled;
}

}  // namespace rgpu::client
