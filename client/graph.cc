// Graphs and their nodes (client/graph.h): the registry of live handles,
// edges, cloning, ordering, and node parameters from the program's structures.
#include "client/graph.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>
#include <thread>
#include <unordered_set>

#include "client/api_util.h"
#include "client/arrays.h"
#include "client/managed.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::client {
namespace {

constexpr cudaGraphEdgeData kNoEdgeData{};

// Live handles. Top-level graphs are the program's (owned here); child graphs
// are owned by their nodes but are graphs all the same.
struct Registry {
  std::unordered_map<CUgraph_st*, std::shared_ptr<CUgraph_st>> owned;
  std::unordered_set<const CUgraph_st*> graphs;
  std::unordered_set<const CUgraphNode_st*> nodes;
};
Registry& reg() {
  static auto* r = new Registry;  // never destroyed: handles may be used during exit
  return *r;
}

void registerTree(CUgraph_st& g) {
  reg().graphs.insert(&g);
  for (auto& n : g.nodes) {
    reg().nodes.insert(n.get());
    if (n->p.child) registerTree(*n->p.child);
    for (auto& b : n->p.bodies) registerTree(*b);
  }
}

void unregisterTree(CUgraph_st& g) {
  reg().graphs.erase(&g);
  for (auto& n : g.nodes) {
    reg().nodes.erase(n.get());
    if (n->p.child) unregisterTree(*n->p.child);
    for (auto& b : n->p.bodies) unregisterTree(*b);
  }
}

bool graphLive(const CUgraph_st* g) { return reg().graphs.count(g) != 0; }

}  // namespace

std::recursive_mutex& graphMutex() {
  static auto* mu = new std::recursive_mutex;
  return *mu;
}

Status checkGraph(cudaGraph_t g) {
  if (!g || !graphLive(g)) return Status(err::kInvalidValue, "not a live graph handle");
  return Status::ok();
}

Status checkNode(cudaGraphNode_t n) {
  if (!n || !reg().nodes.count(n)) return Status(err::kInvalidValue, "not a live graph node handle");
  return Status::ok();
}

cudaGraph_t newGraph() {
  auto g = std::make_shared<CUgraph_st>();
  CUgraph_st* raw = g.get();
  reg().owned.emplace(raw, std::move(g));
  reg().graphs.insert(raw);
  return raw;
}

cudaGraph_t adoptGraph(std::shared_ptr<CUgraph_st> g) {
  CUgraph_st* raw = g.get();
  reg().owned.emplace(raw, std::move(g));
  registerTree(*raw);
  return raw;
}

namespace {
std::unordered_set<const CUuserObject_st*>& userObjects() {
  static auto* s = new std::unordered_set<const CUuserObject_st*>;
  return *s;
}
}  // namespace

Status checkUserObject(cudaUserObject_t o) {
  if (!o || !userObjects().count(o)) return Status(err::kInvalidValue, "not a live user object");
  return Status::ok();
}

cudaUserObject_t newUserObject(void* ptr, cudaHostFn_t destroy, unsigned refs) {
  auto* o = new CUuserObject_st{ptr, destroy, refs};
  userObjects().insert(o);
  return o;
}

void retainUserObject(cudaUserObject_t o, unsigned n) { o->refs += n; }

void releaseUserObject(cudaUserObject_t o, unsigned n) {
  o->refs -= std::min(n, o->refs);
  if (o->refs) return;
  userObjects().erase(o);
  // The destructor may not call CUDA and must not wait for our locks: it runs on a thread of its own.
  std::thread([o] {
    o->destroy(o->ptr);
    delete o;
  }).detach();
}

void destroyGraph(cudaGraph_t g) {
  for (auto& [o, n] : g->user_refs) releaseUserObject(o, n);
  g->user_refs.clear();
  auto it = reg().owned.find(g);
  unregisterTree(*g);
  if (it != reg().owned.end()) reg().owned.erase(it);
}

Result<cudaGraphNode_t> addNode(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, NodeParams p) {
  RGPU_TRY(checkGraph(g));
  if (n && !deps) return Status(err::kInvalidValue, "pDependencies is NULL");
  for (size_t i = 0; i < n; ++i) {
    RGPU_TRY(checkNode(deps[i]));
    if (deps[i]->graph != g) return Status(err::kInvalidValue, "a dependency belongs to another graph");
    for (size_t j = 0; j < i; ++j)
      if (deps[j] == deps[i]) return Status(err::kInvalidValue, "a dependency is named twice");
  }
  if (p.child) {
    if (hasConditionalNodes(*p.child))
      return Status(err::kInvalidValue, "a graph with conditional nodes cannot be a child graph");
    // The node owns a copy of the child graph, as cudaGraphAddChildGraphNode does.
    p.child = cloneGraph(*p.child, nullptr);
    registerTree(*p.child);
  }
  for (auto& b : p.bodies) registerTree(*b);
  auto node = std::make_unique<CUgraphNode_st>();
  node->graph = g;
  node->p = std::move(p);
  pointArgs(node->p);
  for (size_t i = 0; i < n; ++i) {
    node->in.push_back(deps[i]);
    deps[i]->out.push_back(node.get());
  }
  CUgraphNode_st* raw = node.get();
  g->nodes.push_back(std::move(node));
  reg().nodes.insert(raw);
  return raw;
}

Status checkEdgeData(const cudaGraphEdgeData& d, const CUgraphNode_st* from, cudaGraphNodeType to_type) {
  for (unsigned char r : d.reserved)
    if (r) return Status(err::kInvalidValue, "cudaGraphEdgeData: reserved bytes must be zero");
  if (d.to_port) return Status(err::kInvalidValue, "cudaGraphEdgeData: to_port must be 0");
  if (d.type != cudaGraphDependencyTypeDefault && d.type != cudaGraphDependencyTypeProgrammatic)
    return Status(err::kInvalidValue, "cudaGraphEdgeData: unknown dependency type " + std::to_string(d.type));
  const bool kernel_from = from->p.type == cudaGraphNodeTypeKernel;
  if (d.from_port > cudaGraphKernelNodePortLaunchCompletion || (d.from_port && !kernel_from))
    return Status(err::kInvalidValue, "cudaGraphEdgeData: only kernel nodes have from ports (0, 1 or 2)");
  if (d.from_port == cudaGraphKernelNodePortProgrammatic && d.type != cudaGraphDependencyTypeProgrammatic)
    return Status(err::kInvalidValue, "cudaGraphEdgeData: the programmatic port needs a programmatic edge");
  if (d.type == cudaGraphDependencyTypeProgrammatic) {
    if (!kernel_from || to_type != cudaGraphNodeTypeKernel)
      return Status(err::kInvalidValue, "cudaGraphEdgeData: a programmatic edge joins two kernel nodes");
    if (d.from_port == cudaGraphKernelNodePortDefault)
      return Status(err::kInvalidValue,
                    "cudaGraphEdgeData: a programmatic edge leaves from the programmatic or launch-completion port");
  }
  return Status::ok();
}

cudaGraphEdgeData edgeData(const CUgraphNode_st* from, const CUgraphNode_st* to) {
  auto it = to->in_data.find(from);
  return it == to->in_data.end() ? cudaGraphEdgeData{} : it->second;
}

Status addEdge(cudaGraphNode_t from, cudaGraphNode_t to, const cudaGraphEdgeData* data) {
  RGPU_TRY(checkNode(from));
  RGPU_TRY(checkNode(to));
  if (from->graph != to->graph) return Status(err::kInvalidValue, "the nodes belong to different graphs");
  if (from == to) return Status(err::kInvalidValue, "a node cannot depend on itself");
  if (std::find(to->in.begin(), to->in.end(), from) != to->in.end())
    return Status(err::kInvalidValue, "the dependency exists already");
  if (data) RGPU_TRY(checkEdgeData(*data, from, to->p.type));
  to->in.push_back(from);
  from->out.push_back(to);
  if (data && std::memcmp(data, &kNoEdgeData, sizeof kNoEdgeData)) to->in_data[from] = *data;
  return Status::ok();
}

Status removeEdge(cudaGraphNode_t from, cudaGraphNode_t to) {
  RGPU_TRY(checkNode(from));
  RGPU_TRY(checkNode(to));
  auto it = std::find(to->in.begin(), to->in.end(), from);
  if (it == to->in.end()) return Status(err::kInvalidValue, "no such dependency");
  to->in.erase(it);
  to->in_data.erase(from);
  from->out.erase(std::find(from->out.begin(), from->out.end(), to));
  return Status::ok();
}

void destroyNode(cudaGraphNode_t n) {
  for (auto* d : n->in) d->out.erase(std::find(d->out.begin(), d->out.end(), n));
  for (auto* d : n->out) {
    d->in.erase(std::find(d->in.begin(), d->in.end(), n));
    d->in_data.erase(n);
  }
  if (n->p.child) unregisterTree(*n->p.child);
  for (auto& b : n->p.bodies) unregisterTree(*b);
  reg().nodes.erase(n);
  auto& v = n->graph->nodes;
  v.erase(std::find_if(v.begin(), v.end(), [&](const auto& u) { return u.get() == n; }));
}

std::shared_ptr<CUgraph_st> cloneGraph(const CUgraph_st& g, std::map<const CUgraphNode_st*, CUgraphNode_st*>* map) {
  auto out = std::make_shared<CUgraph_st>();
  out->cond_handles = g.cond_handles;
  std::map<const CUgraphNode_st*, CUgraphNode_st*> local;
  auto& m = map ? *map : local;
  for (auto& n : g.nodes) {
    auto c = std::make_unique<CUgraphNode_st>();
    c->graph = out.get();
    c->p = n->p;
    c->enabled = n->enabled;
    c->origin = n.get();
    if (n->p.child) c->p.child = cloneGraph(*n->p.child, map);
    for (auto& b : c->p.bodies) b = cloneGraph(*b, map);
    pointArgs(c->p);  // into the copy's own parameter block
    m[n.get()] = c.get();
    out->nodes.push_back(std::move(c));
  }
  for (auto& n : g.nodes) {
    for (auto* d : n->in) {
      m[n.get()]->in.push_back(m[d]);
      m[d]->out.push_back(m[n.get()]);
    }
    for (auto& [d, data] : n->in_data) m[n.get()]->in_data[m[d]] = data;
  }
  return out;
}

std::vector<CUgraphNode_st*> topoOrder(const CUgraph_st& g) {
  std::unordered_map<const CUgraphNode_st*, size_t> waiting;
  std::unordered_map<const CUgraphNode_st*, size_t> index;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    waiting[g.nodes[i].get()] = g.nodes[i]->in.size();
    index[g.nodes[i].get()] = i;
  }
  std::set<size_t> ready;  // creation order among the nodes that may run
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i]->in.empty()) ready.insert(i);
  std::vector<CUgraphNode_st*> order;
  while (!ready.empty()) {
    CUgraphNode_st* n = g.nodes[*ready.begin()].get();
    ready.erase(ready.begin());
    order.push_back(n);
    for (auto* d : n->out)
      if (--waiting[d] == 0) ready.insert(index[d]);
  }
  return order;  // shorter than g.nodes: the graph has a cycle
}

// ---- parameters ---------------------------------------------------------------------

namespace {
constexpr uintptr_t kParamBufferPointer = 0x1, kParamBufferSize = 0x2, kParamEnd = 0x0;
}  // namespace

void pointArgs(NodeParams& p) {
  p.body_handles.clear();
  for (auto& b : p.bodies) p.body_handles.push_back(b.get());
  p.arg_ptrs.clear();
  if (!p.kernel) return;
  for (const auto& a : p.kernel->layout.params) p.arg_ptrs.push_back(p.params.data() + a.offset);
}

Result<NodeParams> kernelParams(const cudaKernelNodeParams& k) {
  auto rec = rt().kernelByHostFun(k.func);
  if (!rec) return rec.status();
  const KernelRecord& kr = **rec;
  if (!kr.has_layout) return Status(err::kInvalidDeviceFunction, "no parameter layout for kernel " + kr.name);
  NodeParams p;
  p.type = cudaGraphNodeTypeKernel;
  p.device = rt().currentDevice();
  p.kernel = &kr;
  p.grid = k.gridDim;
  p.block = k.blockDim;
  p.shmem = k.sharedMemBytes;
  p.params.assign(kr.layout.param_bytes, '\0');
  if (k.kernelParams) {
    for (size_t i = 0; i < kr.layout.params.size(); ++i) {
      const auto& a = kr.layout.params[i];
      if (a.size && !k.kernelParams[i]) return Status(err::kInvalidValue, "kernel argument " + std::to_string(i) + " is NULL");
      if (a.size) std::memcpy(p.params.data() + a.offset, k.kernelParams[i], a.size);
    }
  } else if (k.extra) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END: the block packed already.
    const void* buf = nullptr;
    size_t size = 0;
    for (size_t i = 0; i < 16 && reinterpret_cast<uintptr_t>(k.extra[i]) != kParamEnd; i += 2) {
      auto key = reinterpret_cast<uintptr_t>(k.extra[i]);
      if (key == kParamBufferPointer) buf = k.extra[i + 1];
      else if (key == kParamBufferSize) size = *static_cast<size_t*>(k.extra[i + 1]);
      else return Status(err::kInvalidValue, "unknown key in the kernel's extra parameters");
    }
    if (!buf || size != kr.layout.param_bytes)
      return Status(err::kInvalidValue, "the extra parameter buffer does not match kernel " + kr.name + "'s " +
                                            std::to_string(kr.layout.param_bytes) + " bytes");
    std::memcpy(p.params.data(), buf, size);
  } else if (!kr.layout.params.empty()) {
    return Status(err::kInvalidValue, "kernel arguments missing");
  }
  pointArgs(p);
  return p;
}

void kernelOut(NodeParams& p, cudaKernelNodeParams* out) {
  *out = {};
  out->func = const_cast<void*>(p.kernel->host_fun);
  out->gridDim = p.grid;
  out->blockDim = p.block;
  out->sharedMemBytes = p.shmem;
  out->kernelParams = p.arg_ptrs.data();
  out->extra = nullptr;
}

namespace {

// A copy node with an array on one side or both (the extent counts elements).
Result<NodeParams> arrayCopyParams(const cudaMemcpy3DParms& c) {
  if (c.kind < cudaMemcpyHostToHost || c.kind > cudaMemcpyDefault)
    return Status(err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind");
  CopyEnd ends[2];
  size_t width = 0;
  RGPU_TRY(copyEnds(c, &ends[0], &ends[1], &width));
  NodeParams p;
  p.type = cudaGraphNodeTypeMemcpy;
  p.copy = c;
  cudaPitchedPtr* ptrs[2] = {&p.copy.srcPtr, &p.copy.dstPtr};
  bool dev[2], named_dev[2];  // each side is device memory; the kind says so
  named_dev[0] = c.kind == cudaMemcpyDeviceToHost || c.kind == cudaMemcpyDeviceToDevice;
  named_dev[1] = c.kind == cudaMemcpyHostToDevice || c.kind == cudaMemcpyDeviceToDevice;
  int device = -1, memory_device = -1;
  for (int i = 0; i < 2; ++i) {
    const CopyEnd& e = ends[i];
    if (e.array) {
      dev[i] = true;
      if (device >= 0 && device != e.array->device)
        return Status(err::kInvalidValue, "arrays of two devices (cudaMemcpy3DPeer's copy, not offered)");
      device = e.array->device;
      if (e.x + width > e.array->width * e.array->elem || e.y + c.extent.height > e.array->rows ||
          e.z + c.extent.depth > e.array->slices)
        return Status(err::kInvalidValue, "a copy node reaches past its array's extent");
      continue;
    }
    if (!e.ptr) return Status(err::kInvalidValue, "a copy node needs source and destination");
    // Mapped host memory is copied on the device, through its alias; managed
    // memory named as host memory is device memory (client/managed.h).
    ptrs[i]->ptr = const_cast<void*>(ManagedMemory::get().deviceSide(e.ptr));
    dev[i] = rt().classify(ptrs[i]->ptr, &memory_device) == MemKind::kDevice;
    if (dev[i] && !named_dev[i] && ManagedMemory::get().contains(ptrs[i]->ptr)) named_dev[i] = true;
    if (ptrs[i]->pitch == 0) ptrs[i]->pitch = width;
    if (ptrs[i]->ysize == 0) ptrs[i]->ysize = c.extent.height;
    if (e.x + width > ptrs[i]->pitch) return Status(err::kInvalidPitchValue, "a copy node's width exceeds its pitch");
  }
  if (c.kind != cudaMemcpyDefault && (named_dev[0] != dev[0] || named_dev[1] != dev[1]))
    return Status(err::kInvalidValue, "the copy node's sides do not match its cudaMemcpyKind");
  if (memory_device >= 0 && memory_device != device)
    return Status(err::kInvalidValue, "the array is on device " + std::to_string(device) + ", the memory on device " +
                                          std::to_string(memory_device));
  p.device = device;
  p.copy.kind = dev[0] ? (dev[1] ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost) : cudaMemcpyHostToDevice;
  return p;
}

}  // namespace

Result<NodeParams> memcpyParams(const cudaMemcpy3DParms& c) {
  if (c.extent.width == 0 || c.extent.height == 0 || c.extent.depth == 0)
    return Status(err::kInvalidValue, "a copy node's extent is empty");
  if (c.srcArray || c.dstArray) return arrayCopyParams(c);
  if (!c.srcPtr.ptr || !c.dstPtr.ptr) return Status(err::kInvalidValue, "a copy node needs source and destination");
  NodeParams p;
  p.type = cudaGraphNodeTypeMemcpy;
  p.copy = c;
  // Mapped host memory is copied on the device, through its alias (client/managed.h).
  p.copy.dstPtr.ptr = const_cast<void*>(ManagedMemory::get().deviceSide(c.dstPtr.ptr));
  p.copy.srcPtr.ptr = const_cast<void*>(ManagedMemory::get().deviceSide(c.srcPtr.ptr));
  int dd = -1, sd = -1;
  bool dev_dst = rt().classify(p.copy.dstPtr.ptr, &dd) == MemKind::kDevice;
  bool dev_src = rt().classify(p.copy.srcPtr.ptr, &sd) == MemKind::kDevice;
  cudaMemcpyKind kind = c.kind;
  if (kind == cudaMemcpyDefault)
    kind = dev_src ? (dev_dst ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                   : (dev_dst ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
    return Status(err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind");
  kind = effectiveKind(p.copy.dstPtr.ptr, p.copy.srcPtr.ptr, kind);  // managed memory on a host side: device memory
  bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (want_dst != dev_dst || want_src != dev_src)
    return Status(err::kInvalidValue, "the copy node's pointers do not match its cudaMemcpyKind");
  p.copy.kind = kind;
  p.device = want_src ? sd : dd;
  // Pitches: a pitch of 0 means rows of exactly the width.
  if (p.copy.srcPtr.pitch == 0) p.copy.srcPtr.pitch = c.extent.width;
  if (p.copy.dstPtr.pitch == 0) p.copy.dstPtr.pitch = c.extent.width;
  if (p.copy.srcPtr.ysize == 0) p.copy.srcPtr.ysize = c.extent.height;
  if (p.copy.dstPtr.ysize == 0) p.copy.dstPtr.ysize = c.extent.height;
  if (c.extent.width + c.srcPos.x > p.copy.srcPtr.pitch || c.extent.width + c.dstPos.x > p.copy.dstPtr.pitch)
    return Status(err::kInvalidPitchValue, "a copy node's width exceeds its pitch");
  return p;
}

Result<NodeParams> memcpy1DParams(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  cudaMemcpy3DParms c{};
  c.srcPtr = cudaPitchedPtr{const_cast<void*>(src), count, count, 1};
  c.dstPtr = cudaPitchedPtr{dst, count, count, 1};
  c.extent = cudaExtent{count, 1, 1};
  c.kind = kind;
  return memcpyParams(c);
}

Result<NodeParams> memsetParams(const cudaMemsetParams& m) {
  if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4)
    return Status(err::kInvalidValue, "a memset node's element size must be 1, 2 or 4");
  if (m.width == 0 || m.height == 0) return Status(err::kInvalidValue, "a memset node's extent is empty");
  int dev = -1;
  if (rt().classify(m.dst, &dev) != MemKind::kDevice)
    return Status(err::kInvalidValue, "a memset node's destination is not a device pointer of this process");
  if (m.height > 1 && m.pitch < m.width * m.elementSize)
    return Status(err::kInvalidPitchValue, "a memset node's pitch is smaller than its row");
  NodeParams p;
  p.type = cudaGraphNodeTypeMemset;
  p.device = dev;
  p.memset = m;
  return p;
}

Result<NodeParams> hostParams(const cudaHostNodeParams& h) {
  if (!h.fn) return Status(err::kInvalidValue, "a host node's function is NULL");
  NodeParams p;
  p.type = cudaGraphNodeTypeHost;
  p.host = h;
  return p;
}

namespace {
struct GraphMemory {
  std::mutex mu;
  std::map<int, uint64_t> used, high;
};
GraphMemory& graphMemory() {
  static auto* m = new GraphMemory;
  return *m;
}
}  // namespace

GraphAllocation::~GraphAllocation() {
  if (graph_memory) noteGraphMemory(device, -static_cast<int64_t>(size));
  if (!ptr) return;
  try {
    rt().untrackDevice(ptr);
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initFree().setPtr(ptr);
    (void)rt().post(msg);  // the server frees once the work queued before is done
  } catch (...) {
  }
}

uint64_t graphMemoryUsed(int device) {
  std::lock_guard lock(graphMemory().mu);
  return graphMemory().used[device];
}
uint64_t graphMemoryHigh(int device) {
  std::lock_guard lock(graphMemory().mu);
  return graphMemory().high[device];
}
void resetGraphMemoryHigh(int device) {
  std::lock_guard lock(graphMemory().mu);
  graphMemory().high[device] = graphMemory().used[device];
}

void noteGraphMemory(int device, int64_t delta) {
  std::lock_guard lock(graphMemory().mu);
  uint64_t& used = graphMemory().used[device];
  used += static_cast<uint64_t>(delta);
  auto& h = graphMemory().high[device];
  h = std::max(h, used);
}

Result<NodeParams> memFreeParams(void* dptr) {
  // Only a graph's own allocations: a free node frees nothing early (see GraphAllocation).
  for (const CUgraph_st* g : reg().graphs)
    for (auto& n : g->nodes)
      if (n->p.alloc && reinterpret_cast<void*>(n->p.alloc->ptr) == dptr) {
        NodeParams np;
        np.type = cudaGraphNodeTypeMemFree;
        np.free_ptr = dptr;
        return np;
      }
  return Status(err::kInvalidValue, "a memory free node frees an allocation of a graph's memory allocation node");
}

namespace {
// The handles the server made for this program (they last as long as its session).
std::unordered_set<cudaGraphConditionalHandle>& condHandles() {
  static auto* s = new std::unordered_set<cudaGraphConditionalHandle>;
  return *s;
}
}  // namespace

Result<cudaGraphConditionalHandle> conditionalHandle(cudaGraph_t g, unsigned default_value, unsigned flags) {
  RGPU_TRY(checkGraph(g));
  if (flags & ~unsigned{cudaGraphCondAssignDefault}) return Status(err::kInvalidValue, "unknown conditional handle flags");
  common::CallMessage msg(16);
  msg.initRoot<wire::Request>().initConditionalHandleCreate().setDevice(rt().currentDevice());
  auto r = rt().call(msg);
  if (!r) return r.status();
  auto h = static_cast<cudaGraphConditionalHandle>(r->reader().getValue());
  condHandles().insert(h);
  g->cond_handles.push_back({h, default_value, flags});
  return h;
}

Result<NodeParams> conditionalParams(const cudaConditionalNodeParams& c) {
  if (!condHandles().count(c.handle)) return Status(err::kInvalidValue, "not a conditional handle of this program");
  switch (c.type) {
    case cudaGraphCondTypeIf:
      if (c.size != 1 && c.size != 2) return Status(err::kInvalidValue, "an if node has 1 or 2 bodies");
      break;
    case cudaGraphCondTypeWhile:
      if (c.size != 1) return Status(err::kInvalidValue, "a while node has 1 body");
      break;
    case cudaGraphCondTypeSwitch:
      if (c.size == 0) return Status(err::kInvalidValue, "a switch node has at least 1 body");
      if (c.size > kMaxSwitchBodies)
        return Status(err::kInvalidValue, "a switch node of " + std::to_string(c.size) + " bodies; rgpu takes at most " +
                                              std::to_string(kMaxSwitchBodies) + " (kMaxSwitchBodies)");
      break;
    default:
      return Status(err::kInvalidValue, "unknown conditional node type " + std::to_string(c.type));
  }
  NodeParams p;
  p.type = cudaGraphNodeTypeConditional;
  p.cond_handle = c.handle;
  p.cond_type = c.type;
  for (unsigned i = 0; i < c.size; ++i) p.bodies.push_back(std::make_shared<CUgraph_st>());
  pointArgs(p);
  return p;
}

bool hasConditionalNodes(const CUgraph_st& g) {
  for (auto& n : g.nodes)
    if (n->p.type == cudaGraphNodeTypeConditional || (n->p.child && hasConditionalNodes(*n->p.child))) return true;
  return false;
}

bool hasMemoryNodes(const CUgraph_st& g) {
  for (auto& n : g.nodes)
    if (n->p.type == cudaGraphNodeTypeMemAlloc || (n->p.child && hasMemoryNodes(*n->p.child))) return true;
  return false;
}

Result<NodeParams> eventParams(cudaGraphNodeType type, cudaEvent_t e) {
  auto id = rt().event(e);
  if (!id) return id.status();
  NodeParams p;
  p.type = type;
  p.event = e;
  return p;
}

}  // namespace rgpu::client
