// CUDA graphs and stream capture: the exported functions (client/graph.h has
// the model and the invariants).
#include <cstdio>
#include <cstring>

#include "client/api_util.h"
#include "client/graph.h"

using namespace rgpu;
using namespace rgpu::client;

namespace {

// Runs `f` with the graph state locked, as any exported call.
template <typename F>
cudaError_t locked(F&& f) {
  return guarded([&]() -> Status {
    std::lock_guard lock(graphMutex());
    return f();
  });
}

Status add(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, Result<NodeParams> p) {
  RGPU_TRY(needPtr(out, "pGraphNode"));
  if (!p) return p.status();
  auto node = addNode(g, deps, n, std::move(*p));
  if (!node) return node.status();
  *out = *node;
  return Status::ok();
}

Result<CUgraphNode_st*> nodeOfType(cudaGraphNode_t n, cudaGraphNodeType t) {
  RGPU_TRY(checkNode(n));
  if (n->p.type != t || !n->p.request.empty()) return Status(err::kInvalidValue, "the node is of another type");
  return n;
}

// Replaces a node's parameters with ones of the same type.
Status setParams(cudaGraphNode_t n, Result<NodeParams> p) {
  RGPU_TRY(checkNode(n));
  if (!p) return p.status();
  if (n->p.type != p->type || !n->p.request.empty()) return Status(err::kInvalidValue, "the node is of another type");
  p->attrs = std::move(n->p.attrs);
  n->p = std::move(*p);
  pointArgs(n->p);
  return Status::ok();
}

// Copies `n` handles into the program's array of `*count` entries (NULL
// entries past the end), or only the count when the array is NULL.
template <typename T>
Status fillOut(const std::vector<T>& v, T* out, size_t* count) {
  RGPU_TRY(needPtr(count, "count"));
  if (out) {
    for (size_t i = 0; i < *count; ++i) out[i] = i < v.size() ? v[i] : T{};
    *count = std::min(*count, v.size());
  } else {
    *count = v.size();
  }
  return Status::ok();
}

Result<NodeParams> symbolParams(const void* symbol, void* host, size_t count, size_t offset, cudaMemcpyKind kind,
                                bool to_symbol) {
  const int device = rt().currentDevice();
  auto sym = rt().symbol(symbol, device);
  if (!sym) return sym.status();
  rt().trackDevice(sym->first, sym->second, device);  // a device pointer from now on, as a symbol copy makes it
  if (offset > sym->second || count > sym->second - offset)
    return Status(err::kInvalidValue, "the copy runs past the end of the symbol");
  void* dev = reinterpret_cast<void*>(sym->first + offset);
  if (kind == cudaMemcpyDefault) kind = rt().classify(host) == MemKind::kDevice ? cudaMemcpyDeviceToDevice
                                                                               : (to_symbol ? cudaMemcpyHostToDevice
                                                                                            : cudaMemcpyDeviceToHost);
  return to_symbol ? memcpy1DParams(dev, host, count, kind) : memcpy1DParams(host, dev, count, kind);
}

// cudaGraphAddNode / cudaGraphNodeSetParams / cudaGraphExecNodeSetParams.
Result<NodeParams> genericParams(cudaGraphNodeParams* np) {
  if (!np) return Status(err::kInvalidValue, "nodeParams is NULL");
  switch (np->type) {
    case cudaGraphNodeTypeKernel: {
      cudaKernelNodeParams k{np->kernel.func, np->kernel.gridDim, np->kernel.blockDim, np->kernel.sharedMemBytes,
                             np->kernel.kernelParams, np->kernel.extra};
      return kernelParams(k);
    }
    case cudaGraphNodeTypeMemcpy: return memcpyParams(np->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
      const auto& m = np->memset;
      return memsetParams(cudaMemsetParams{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height});
    }
    case cudaGraphNodeTypeHost: return hostParams(cudaHostNodeParams{np->host.fn, np->host.userData});
    case cudaGraphNodeTypeGraph: {
      RGPU_TRY(checkGraph(np->graph.graph));
      NodeParams p;
      p.type = cudaGraphNodeTypeGraph;
      p.child = std::shared_ptr<CUgraph_st>(np->graph.graph, [](CUgraph_st*) {});  // copied by addNode
      return p;
    }
    case cudaGraphNodeTypeEmpty: {
      NodeParams p;
      p.type = cudaGraphNodeTypeEmpty;
      return p;
    }
    case cudaGraphNodeTypeMemAlloc: {
      cudaMemAllocNodeParams p{np->alloc.poolProps, np->alloc.accessDescs, np->alloc.accessDescCount,
                               np->alloc.bytesize, nullptr};
      auto r = memAllocParams(p);
      if (r) np->alloc.dptr = r->alloc_params.dptr;  // (out)
      return r;
    }
    case cudaGraphNodeTypeMemFree: return memFreeParams(np->free.dptr);
    case cudaGraphNodeTypeEventRecord: return eventParams(np->type, np->eventRecord.event);
    case cudaGraphNodeTypeWaitEvent: return eventParams(np->type, np->eventWait.event);
    case cudaGraphNodeTypeConditional: return conditionalParams(np->conditional);
    default:
      return Status(err::kNotSupported, "graph node type " + std::to_string(np->type) + " is not supported by rgpu");
  }
}

}  // namespace

namespace rgpu::client {
// (graph.h) Allocates at once, through cudaMalloc's path.
Result<NodeParams> memAllocParams(const cudaMemAllocNodeParams& in, int device) {
  if (in.bytesize == 0) return Status(err::kInvalidValue, "a memory allocation node of 0 bytes");
  if (in.poolProps.handleTypes != cudaMemHandleTypeNone)
    return Status(err::kNotSupported, "graph allocations that export handles (IPC) are not supported by rgpu");
  if (device < 0) {
    if (in.poolProps.location.type != cudaMemLocationTypeDevice)
      return Status(err::kInvalidValue, "a graph allocation resides on a device");
    device = in.poolProps.location.id;
  }
  RGPU_TRY(rt().device(device).status());
  auto a = std::make_shared<GraphAllocation>();
  a->device = device;
  a->size = in.bytesize;
  noteGraphMemory(device, static_cast<int64_t>(in.bytesize));  // (given back by the destructor, allocated or not)
  bool& internal = captureInternalCall();
  bool was = internal;
  internal = true;
  auto p = allocateDeviceMemory(device, in.bytesize);
  internal = was;
  if (!p) return p.status();
  a->ptr = *p;
  NodeParams np;
  np.type = cudaGraphNodeTypeMemAlloc;
  np.device = device;
  np.alloc = std::move(a);
  np.alloc_params = in;
  np.alloc_params.dptr = reinterpret_cast<void*>(np.alloc->ptr);
  np.alloc_params.accessDescs = nullptr;  // not kept: the program's array may go away
  np.alloc_params.accessDescCount = 0;
  return np;
}

}  // namespace rgpu::client

// ---- stream capture -----------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return guarded([&] { return beginCapture(stream, false, mode, nullptr, nullptr, 0); });
}
RGPU_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return guarded([&] { return beginCapture(stream, true, mode, nullptr, nullptr, 0); });
}
RGPU_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                      const cudaGraphNode_t* dependencies,
                                                      const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                                      enum cudaStreamCaptureMode mode) {
  return guarded([&] { return beginCapture(stream, false, mode, graph, dependencies, numDependencies); });
}
RGPU_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                           const cudaGraphNode_t* dependencies,
                                                           const cudaGraphEdgeData* dependencyData,
                                                           size_t numDependencies, enum cudaStreamCaptureMode mode) {
  return guarded([&] { return beginCapture(stream, true, mode, graph, dependencies, numDependencies); });
}
RGPU_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  return guarded([&] { return endCapture(stream, false, pGraph); });
}
RGPU_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* pGraph) {
  return guarded([&] { return endCapture(stream, true, pGraph); });
}
RGPU_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  return guarded([&] { return captureInfo(stream, false, pCaptureStatus, nullptr, nullptr, nullptr, nullptr); });
}
RGPU_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  return guarded([&] { return captureInfo(stream, true, pCaptureStatus, nullptr, nullptr, nullptr, nullptr); });
}
RGPU_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                                 unsigned long long* id_out, cudaGraph_t* graph_out,
                                                 const cudaGraphNode_t** dependencies_out,
                                                 const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  // Edges carry no data in rgpu's graphs: NULL means all-default edge data.
  if (edgeData_out) *edgeData_out = nullptr;
  return guarded(
      [&] { return captureInfo(stream, false, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out); });
}
RGPU_EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                                      enum cudaStreamCaptureStatus* captureStatus_out,
                                                      unsigned long long* id_out, cudaGraph_t* graph_out,
                                                      const cudaGraphNode_t** dependencies_out,
                                                      const cudaGraphEdgeData** edgeData_out,
                                                      size_t* numDependencies_out) {
  if (edgeData_out) *edgeData_out = nullptr;
  return guarded(
      [&] { return captureInfo(stream, true, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out); });
}
RGPU_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t* dependencies,
                                                            const cudaGraphEdgeData* dependencyData,
                                                            size_t numDependencies, unsigned int flags) {
  return guarded([&] { return updateCaptureDependencies(stream, false, dependencies, numDependencies, flags); });
}
RGPU_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t stream, cudaGraphNode_t* dependencies,
                                                                 const cudaGraphEdgeData* dependencyData,
                                                                 size_t numDependencies, unsigned int flags) {
  return guarded([&] { return updateCaptureDependencies(stream, true, dependencies, numDependencies, flags); });
}
RGPU_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(mode, "mode"));
    if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
        *mode != cudaStreamCaptureModeRelaxed)
      return Status(err::kInvalidValue, "unknown capture mode");
    std::swap(*mode, threadCaptureMode());
    return Status::ok();
  });
}

// ---- graphs -------------------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pGraph, "pGraph"));
    if (flags) return Status(err::kInvalidValue, "flags must be 0");
    *pGraph = newGraph();
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    if (graph->capturing) return Status(err::kIllegalState, "the graph is being captured into");
    destroyGraph(graph);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphClone(cudaGraph_t* pGraphClone, cudaGraph_t originalGraph) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pGraphClone, "pGraphClone"));
    RGPU_TRY(checkGraph(originalGraph));
    if (hasConditionalNodes(*originalGraph))
      return Status(err::kNotSupported, "a graph with conditional nodes cannot be cloned");
    *pGraphClone = adoptGraph(cloneGraph(*originalGraph, nullptr));
    (*pGraphClone)->user_refs = originalGraph->user_refs;  // the clone holds references of its own
    for (auto& [o, n] : originalGraph->user_refs) retainUserObject(o, n);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t* pNode, cudaGraphNode_t originalNode,
                                                 cudaGraph_t clonedGraph) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNode, "pNode"));
    RGPU_TRY(checkNode(originalNode));
    RGPU_TRY(checkGraph(clonedGraph));
    for (auto& n : clonedGraph->nodes)
      if (n->origin == originalNode) {
        *pNode = n.get();
        return Status::ok();
      }
    return Status(err::kInvalidValue, "the node has no copy in that graph");
  });
}

// ---- adding nodes ------------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                               const struct cudaKernelNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return add(pGraphNode, graph, pDependencies, numDependencies, kernelParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                               const struct cudaMemcpy3DParms* pCopyParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pCopyParams, "pCopyParams"));
    return add(pGraphNode, graph, pDependencies, numDependencies, memcpyParams(*pCopyParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                 void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return locked([&] { return add(pGraphNode, graph, pDependencies, numDependencies, memcpy1DParams(dst, src, count, kind)); });
}
RGPU_EXPORT cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                       const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                       const void* symbol, const void* src, size_t count, size_t offset,
                                                       enum cudaMemcpyKind kind) {
  return locked([&] {
    return add(pGraphNode, graph, pDependencies, numDependencies,
               symbolParams(symbol, const_cast<void*>(src), count, offset, kind, true));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                         const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                         void* dst, const void* symbol, size_t count, size_t offset,
                                                         enum cudaMemcpyKind kind) {
  return locked([&] {
    return add(pGraphNode, graph, pDependencies, numDependencies, symbolParams(symbol, dst, count, offset, kind, false));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                               const struct cudaMemsetParams* pMemsetParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pMemsetParams, "pMemsetParams"));
    return add(pGraphNode, graph, pDependencies, numDependencies, memsetParams(*pMemsetParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                             const struct cudaHostNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return add(pGraphNode, graph, pDependencies, numDependencies, hostParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                   const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                   cudaGraph_t childGraph) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(childGraph));
    if (childGraph == graph) return Status(err::kInvalidValue, "a graph cannot contain itself");
    NodeParams p;
    p.type = cudaGraphNodeTypeGraph;
    p.child = std::shared_ptr<CUgraph_st>(childGraph, [](CUgraph_st*) {});  // addNode keeps a copy
    return add(pGraphNode, graph, pDependencies, numDependencies, std::move(p));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                              const cudaGraphNode_t* pDependencies, size_t numDependencies) {
  return locked([&] {
    NodeParams p;
    p.type = cudaGraphNodeTypeEmpty;
    return add(pGraphNode, graph, pDependencies, numDependencies, std::move(p));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                    const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                    cudaEvent_t event) {
  return locked([&] {
    return add(pGraphNode, graph, pDependencies, numDependencies, eventParams(cudaGraphNodeTypeEventRecord, event));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                  const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                  cudaEvent_t event) {
  return locked([&] {
    return add(pGraphNode, graph, pDependencies, numDependencies, eventParams(cudaGraphNodeTypeWaitEvent, event));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                  const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                  struct cudaMemAllocNodeParams* nodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(nodeParams, "nodeParams"));
    RGPU_TRY(checkGraph(graph));
    auto p = memAllocParams(*nodeParams);
    if (p) nodeParams->dptr = p->alloc_params.dptr;
    return add(pGraphNode, graph, pDependencies, numDependencies, std::move(p));
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                 void* dptr) {
  return locked([&] { return add(pGraphNode, graph, pDependencies, numDependencies, memFreeParams(dptr)); });
}
RGPU_EXPORT cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, struct cudaMemAllocNodeParams* params_out) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(params_out, "params_out"));
    auto n = nodeOfType(node, cudaGraphNodeTypeMemAlloc);
    if (!n) return n.status();
    *params_out = (*n)->p.alloc_params;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void* dptr_out) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(dptr_out, "dptr_out"));
    auto n = nodeOfType(node, cudaGraphNodeTypeMemFree);
    if (!n) return n.status();
    *static_cast<void**>(dptr_out) = (*n)->p.free_ptr;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                         const cudaGraphNode_t* pDependencies, const cudaGraphEdgeData* dependencyData,
                                         size_t numDependencies, struct cudaGraphNodeParams* nodeParams) {
  return locked([&]() -> Status {
    auto p = genericParams(nodeParams);
    if (!p) return p.status();
    if (dependencyData && numDependencies) {
      if (!pDependencies) return Status(err::kInvalidValue, "pDependencies is NULL");
      for (size_t i = 0; i < numDependencies; ++i) {
        RGPU_TRY(checkNode(pDependencies[i]));
        RGPU_TRY(checkEdgeData(dependencyData[i], pDependencies[i], p->type));
      }
    }
    RGPU_TRY(add(pGraphNode, graph, pDependencies, numDependencies, std::move(p)));
    if (nodeParams->type == cudaGraphNodeTypeConditional)  // (out) the node's bodies
      nodeParams->conditional.phGraph_out = (*pGraphNode)->p.body_handles.data();
    if (dependencyData)
      for (size_t i = 0; i < numDependencies; ++i)
        if (dependencyData[i].type || dependencyData[i].from_port)
          (*pGraphNode)->in_data[pDependencies[i]] = dependencyData[i];
    return Status::ok();
  });
}

// ---- node parameters ----------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType* pType) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pType, "pType"));
    RGPU_TRY(checkNode(node));
    *pType = node->p.type;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    auto n = nodeOfType(node, cudaGraphNodeTypeKernel);
    if (!n) return n.status();
    kernelOut((*n)->p, pNodeParams);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setParams(node, kernelParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t hNode, cudaKernelNodeAttrID attr,
                                                        cudaKernelNodeAttrValue* value_out) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(value_out, "value_out"));
    auto n = nodeOfType(hNode, cudaGraphNodeTypeKernel);
    if (!n) return n.status();
    auto it = (*n)->p.attrs.find(attr);
    *value_out = it == (*n)->p.attrs.end() ? cudaLaunchAttributeValue{} : it->second;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t hNode, cudaKernelNodeAttrID attr,
                                                        const cudaKernelNodeAttrValue* value) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(value, "value"));
    auto n = nodeOfType(hNode, cudaGraphNodeTypeKernel);
    if (!n) return n.status();
    // Scheduling hints (access policy window, priority) are kept and reported;
    // attributes that change what a launch means are refused, as for launches.
    switch (attr) {
      case cudaLaunchAttributeAccessPolicyWindow:
      case cudaLaunchAttributePriority:
      case cudaLaunchAttributeMemSyncDomain:
      case cudaLaunchAttributeMemSyncDomainMap:
      case cudaLaunchAttributeCooperative:  // a cooperative kernel node (checked at instantiation)
      case cudaLaunchAttributeClusterDimension:  // checked by the server at each launch
      case cudaLaunchAttributeClusterSchedulingPolicyPreference:
      case cudaLaunchAttributeSynchronizationPolicy:
      case cudaLaunchAttributePreferredSharedMemoryCarveout:
      case cudaLaunchAttributeNvlinkUtilCentricScheduling:
      case cudaLaunchAttributePreferredClusterDimension:
        (*n)->p.attrs[attr] = *value;
        return Status::ok();
      default:
        return Status(err::kNotSupported, "kernel node attribute " + std::to_string(attr) + " is not supported by rgpu");
    }
  });
}
RGPU_EXPORT cudaError_t cudaGraphKernelNodeCopyAttributes(cudaGraphNode_t hDst, cudaGraphNode_t hSrc) {
  return locked([&]() -> Status {
    auto d = nodeOfType(hDst, cudaGraphNodeTypeKernel);
    if (!d) return d.status();
    auto s = nodeOfType(hSrc, cudaGraphNodeTypeKernel);
    if (!s) return s.status();
    (*d)->p.attrs = (*s)->p.attrs;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    auto n = nodeOfType(node, cudaGraphNodeTypeMemcpy);
    if (!n) return n.status();
    *pNodeParams = (*n)->p.copy;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setParams(node, memcpyParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void* dst, const void* src, size_t count,
                                                       enum cudaMemcpyKind kind) {
  return locked([&] { return setParams(node, memcpy1DParams(dst, src, count, kind)); });
}
RGPU_EXPORT cudaError_t cudaGraphMemcpyNodeSetParamsToSymbol(cudaGraphNode_t node, const void* symbol, const void* src,
                                                             size_t count, size_t offset, enum cudaMemcpyKind kind) {
  return locked([&] { return setParams(node, symbolParams(symbol, const_cast<void*>(src), count, offset, kind, true)); });
}
RGPU_EXPORT cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void* dst, const void* symbol,
                                                               size_t count, size_t offset, enum cudaMemcpyKind kind) {
  return locked([&] { return setParams(node, symbolParams(symbol, dst, count, offset, kind, false)); });
}
RGPU_EXPORT cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    auto n = nodeOfType(node, cudaGraphNodeTypeMemset);
    if (!n) return n.status();
    *pNodeParams = (*n)->p.memset;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setParams(node, memsetParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    auto n = nodeOfType(node, cudaGraphNodeTypeHost);
    if (!n) return n.status();
    *pNodeParams = (*n)->p.host;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setParams(node, hostParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t* pGraph) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pGraph, "pGraph"));
    auto n = nodeOfType(node, cudaGraphNodeTypeGraph);
    if (!n) return n.status();
    *pGraph = (*n)->p.child.get();
    return Status::ok();
  });
}
namespace {
cudaError_t eventGet(cudaGraphNode_t node, cudaGraphNodeType t, cudaEvent_t* out) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(out, "event_out"));
    auto n = nodeOfType(node, t);
    if (!n) return n.status();
    *out = (*n)->p.event;
    return Status::ok();
  });
}
}  // namespace
RGPU_EXPORT cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event_out) {
  return eventGet(node, cudaGraphNodeTypeEventRecord, event_out);
}
RGPU_EXPORT cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event_out) {
  return eventGet(node, cudaGraphNodeTypeWaitEvent, event_out);
}
RGPU_EXPORT cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return locked([&] { return setParams(node, eventParams(cudaGraphNodeTypeEventRecord, event)); });
}
RGPU_EXPORT cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) {
  return locked([&] { return setParams(node, eventParams(cudaGraphNodeTypeWaitEvent, event)); });
}
RGPU_EXPORT cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* pHandle_out, cudaGraph_t graph,
                                                         unsigned int defaultLaunchValue, unsigned int flags) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pHandle_out, "pHandle_out"));
    auto h = conditionalHandle(graph, defaultLaunchValue, flags);
    if (!h) return h.status();
    *pHandle_out = *h;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams* nodeParams) {
  return locked([&]() -> Status {
    if (nodeParams && nodeParams->type == cudaGraphNodeTypeConditional)
      return Status(err::kInvalidValue, "a conditional node's parameters cannot be changed");
    auto p = genericParams(nodeParams);
    if (p && p->child) p->child = cloneGraph(*p->child, nullptr);
    return setParams(node, std::move(p));
  });
}

// ---- structure ---------------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    std::vector<cudaGraphNode_t> v;
    for (auto& n : graph->nodes) v.push_back(n.get());
    return fillOut(v, nodes, numNodes);
  });
}
RGPU_EXPORT cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* pRootNodes, size_t* pNumRootNodes) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    std::vector<cudaGraphNode_t> v;
    for (auto& n : graph->nodes)
      if (n->in.empty()) v.push_back(n.get());
    return fillOut(v, pRootNodes, pNumRootNodes);
  });
}
RGPU_EXPORT cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                                          cudaGraphEdgeData* edgeData, size_t* numEdges) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    RGPU_TRY(needPtr(numEdges, "numEdges"));
    std::vector<cudaGraphNode_t> f, t;
    for (auto& n : graph->nodes)
      for (auto* d : n->in) f.push_back(d), t.push_back(n.get());
    if (!from != !to) return Status(err::kInvalidValue, "from and to must both be given or both be NULL");
    size_t count = *numEdges;
    if (from) {
      RGPU_TRY(fillOut(f, from, &count));
      count = *numEdges;
      RGPU_TRY(fillOut(t, to, &count));
      if (edgeData)
        for (size_t i = 0; i < count; ++i) edgeData[i] = rgpu::client::edgeData(from[i], to[i]);
    }
    *numEdges = from ? count : f.size();
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* pDependencies,
                                                     cudaGraphEdgeData* edgeData, size_t* pNumDependencies) {
  return locked([&]() -> Status {
    RGPU_TRY(checkNode(node));
    RGPU_TRY(fillOut(node->in, pDependencies, pNumDependencies));
    if (edgeData && pDependencies)
      for (size_t i = 0; i < *pNumDependencies; ++i) edgeData[i] = rgpu::client::edgeData(pDependencies[i], node);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* pDependentNodes,
                                                       cudaGraphEdgeData* edgeData, size_t* pNumDependentNodes) {
  return locked([&]() -> Status {
    RGPU_TRY(checkNode(node));
    RGPU_TRY(fillOut(node->out, pDependentNodes, pNumDependentNodes));
    if (edgeData && pDependentNodes)
      for (size_t i = 0; i < *pNumDependentNodes; ++i) edgeData[i] = rgpu::client::edgeData(node, pDependentNodes[i]);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                                 const cudaGraphNode_t* to, const cudaGraphEdgeData* edgeData,
                                                 size_t numDependencies) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    if (numDependencies && (!from || !to)) return Status(err::kInvalidValue, "from or to is NULL");
    for (size_t i = 0; i < numDependencies; ++i) {
      RGPU_TRY(checkNode(from[i]));
      if (from[i]->graph != graph) return Status(err::kInvalidValue, "the node is not part of the graph");
      RGPU_TRY(addEdge(from[i], to[i], edgeData ? &edgeData[i] : nullptr));
    }
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                                    const cudaGraphNode_t* to, const cudaGraphEdgeData* edgeData,
                                                    size_t numDependencies) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    if (numDependencies && (!from || !to)) return Status(err::kInvalidValue, "from or to is NULL");
    for (size_t i = 0; i < numDependencies; ++i) RGPU_TRY(removeEdge(from[i], to[i]));
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  return locked([&]() -> Status {
    RGPU_TRY(checkNode(node));
    destroyNode(node);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path, unsigned int flags) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    RGPU_TRY(needPtr(path, "path"));
    FILE* f = std::fopen(path, "w");
    if (!f) return Status(err::kInvalidValue, std::string("cannot write ") + path);
    static const char* kNames[] = {"KERNEL", "MEMCPY", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT", "EVENT_RECORD"};
    std::fprintf(f, "digraph rgpu_graph {\n");
    for (auto& n : graph->nodes) {
      const char* name = n->p.type < 8 ? kNames[n->p.type] : "OTHER";
      std::fprintf(f, "  \"%p\" [label=\"%s%s%s\"];\n", static_cast<void*>(n.get()), name,
                   n->p.kernel ? "\\n" : "", n->p.kernel ? n->p.kernel->name.c_str() : "");
      for (auto* d : n->in) std::fprintf(f, "  \"%p\" -> \"%p\";\n", static_cast<void*>(d), static_cast<void*>(n.get()));
    }
    std::fprintf(f, "}\n");
    std::fclose(f);
    return Status::ok();
  });
}

// ---- executable graphs ----------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pGraphExec, "pGraphExec"));
    auto e = instantiate(graph, flags, nullptr);
    if (!e) return e.status();
    *pGraphExec = *e;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                      unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}
namespace {
Status instantiateWithParams(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams* p) {
  RGPU_TRY(needPtr(pGraphExec, "pGraphExec"));
  RGPU_TRY(needPtr(p, "instantiateParams"));
  p->errNode_out = nullptr;
  auto e = instantiate(graph, p->flags, &p->errNode_out);
  if (!e) {
    p->result_out = e.status().code() == err::kInvalidValue && e.status().message().find("cycle") != std::string::npos
                        ? cudaGraphInstantiateInvalidStructure
                        : cudaGraphInstantiateError;
    return e.status();
  }
  p->result_out = cudaGraphInstantiateSuccess;
  *pGraphExec = *e;
  return Status::ok();
}
}  // namespace
RGPU_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                       cudaGraphInstantiateParams* instantiateParams) {
  return locked([&] { return instantiateWithParams(pGraphExec, graph, instantiateParams); });
}
RGPU_EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                            cudaGraphInstantiateParams* instantiateParams) {
  return locked([&] { return instantiateWithParams(pGraphExec, graph, instantiateParams); });
}
RGPU_EXPORT cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long* flags) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(flags, "flags"));
    RGPU_TRY(checkExec(graphExec));
    *flags = graphExec->flags;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  return locked([&]() -> Status {
    RGPU_TRY(checkExec(graphExec));
    destroyExec(graphExec);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return guarded([&] { return launchExec(graphExec, stream, false); });
}
RGPU_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return guarded([&] { return launchExec(graphExec, stream, true); });
}
namespace {
// cudaGraphUpload: the graph is on the server once instantiated (or updated
// and launched); an update not yet sent goes now.
Status upload(cudaGraphExec_t e, cudaStream_t stream, bool ptsz) {
  std::lock_guard lock(graphMutex());
  RGPU_TRY(checkExec(e));
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  return Status::ok();
}
}  // namespace
RGPU_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return guarded([&] { return upload(graphExec, stream, false); });
}
RGPU_EXPORT cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return guarded([&] { return upload(graphExec, stream, true); });
}
RGPU_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                            cudaGraphExecUpdateResultInfo* resultInfo) {
  return locked([&] { return updateExec(hGraphExec, hGraph, resultInfo); });
}
RGPU_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                         const struct cudaKernelNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setExecNodeParams(hGraphExec, node, kernelParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                         const struct cudaMemcpy3DParms* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setExecNodeParams(hGraphExec, node, memcpyParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void* dst,
                                                           const void* src, size_t count, enum cudaMemcpyKind kind) {
  return locked([&]() -> Status {
    return setExecNodeParams(hGraphExec, node, memcpy1DParams(dst, src, count, kind));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                                 const void* symbol, const void* src, size_t count,
                                                                 size_t offset, enum cudaMemcpyKind kind) {
  return locked([&]() -> Status {
    return setExecNodeParams(hGraphExec, node, symbolParams(symbol, const_cast<void*>(src), count, offset, kind, true));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                                   void* dst, const void* symbol, size_t count,
                                                                   size_t offset, enum cudaMemcpyKind kind) {
  return locked([&]() -> Status {
    return setExecNodeParams(hGraphExec, node, symbolParams(symbol, dst, count, offset, kind, false));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                         const struct cudaMemsetParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setExecNodeParams(hGraphExec, node, memsetParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                       const struct cudaHostNodeParams* pNodeParams) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(pNodeParams, "pNodeParams"));
    return setExecNodeParams(hGraphExec, node, hostParams(*pNodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                             cudaGraph_t childGraph) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(childGraph));
    NodeParams p;
    p.type = cudaGraphNodeTypeGraph;
    p.child = std::shared_ptr<CUgraph_st>(childGraph, [](CUgraph_st*) {});  // copied by setExecNodeParams
    return setExecNodeParams(hGraphExec, node, std::move(p));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                             cudaEvent_t event) {
  return locked([&]() -> Status {
    return setExecNodeParams(hGraphExec, hNode, eventParams(cudaGraphNodeTypeEventRecord, event));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                           cudaEvent_t event) {
  return locked([&]() -> Status {
    return setExecNodeParams(hGraphExec, hNode, eventParams(cudaGraphNodeTypeWaitEvent, event));
  });
}
RGPU_EXPORT cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
                                                   struct cudaGraphNodeParams* nodeParams) {
  return locked([&]() -> Status {
    return setExecNodeParams(graphExec, node, genericParams(nodeParams));
  });
}
RGPU_EXPORT cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int isEnabled) {
  return locked([&] { return setExecNodeEnabled(hGraphExec, hNode, isEnabled != 0); });
}
RGPU_EXPORT cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int* isEnabled) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(isEnabled, "isEnabled"));
    auto e = execNodeEnabled(hGraphExec, hNode);
    if (!e) return e.status();
    *isEnabled = *e ? 1 : 0;
    return Status::ok();
  });
}

// ---- user objects ----------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaUserObjectCreate(cudaUserObject_t* object_out, void* ptr, cudaHostFn_t destroy,
                                             unsigned int initialRefcount, unsigned int flags) {
  return locked([&]() -> Status {
    RGPU_TRY(needPtr(object_out, "object_out"));
    if (!destroy) return Status(err::kInvalidValue, "destroy is NULL");
    if (initialRefcount == 0) return Status(err::kInvalidValue, "initialRefcount must be positive");
    if (flags != cudaUserObjectNoDestructorSync)
      return Status(err::kInvalidValue, "flags must be cudaUserObjectNoDestructorSync");
    *object_out = newUserObject(ptr, destroy, initialRefcount);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaUserObjectRetain(cudaUserObject_t object, unsigned int count) {
  return locked([&]() -> Status {
    RGPU_TRY(checkUserObject(object));
    if (count == 0) return Status(err::kInvalidValue, "count must be positive");
    retainUserObject(object, count);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count) {
  return locked([&]() -> Status {
    RGPU_TRY(checkUserObject(object));
    if (count == 0 || count > object->refs) return Status(err::kInvalidValue, "count exceeds the references held");
    releaseUserObject(object, count);
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                                  unsigned int flags) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    RGPU_TRY(checkUserObject(object));
    if (count == 0 || (flags & ~cudaGraphUserObjectMove)) return Status(err::kInvalidValue, "bad count or flags");
    // Move: the caller's references become the graph's; else the graph takes new ones.
    if (!(flags & cudaGraphUserObjectMove)) retainUserObject(object, count);
    graph->user_refs[object] += count;
    return Status::ok();
  });
}
RGPU_EXPORT cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count) {
  return locked([&]() -> Status {
    RGPU_TRY(checkGraph(graph));
    RGPU_TRY(checkUserObject(object));
    auto it = graph->user_refs.find(object);
    if (count == 0 || it == graph->user_refs.end() || it->second < count)
      return Status(err::kInvalidValue, "the graph holds fewer references");
    if ((it->second -= count) == 0) graph->user_refs.erase(it);
    releaseUserObject(object, count);
    return Status::ok();
  });
}

// ---- graph memory: what the graphs' allocation nodes hold now, and at most ----

RGPU_EXPORT cudaError_t cudaDeviceGraphMemTrim(int device) {
  return guarded([&]() -> Status { return rt().device(device).status(); });
}
RGPU_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  return guarded([&]() -> Status {
    RGPU_TRY(rt().device(device).status());
    RGPU_TRY(needPtr(value, "value"));
    switch (attr) {
      case cudaGraphMemAttrUsedMemCurrent:
      case cudaGraphMemAttrReservedMemCurrent:  // nothing is cached: reserved is what is used
        *static_cast<uint64_t*>(value) = graphMemoryUsed(device);
        return Status::ok();
      case cudaGraphMemAttrUsedMemHigh:
      case cudaGraphMemAttrReservedMemHigh:
        *static_cast<uint64_t*>(value) = graphMemoryHigh(device);
        return Status::ok();
      default:
        return Status(err::kInvalidValue, "unknown graph memory attribute");
    }
  });
}
RGPU_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  return guarded([&]() -> Status {
    RGPU_TRY(rt().device(device).status());
    RGPU_TRY(needPtr(value, "value"));
    // Only the high-water marks may be reset (to 0), as NVIDIA's allows.
    if ((attr != cudaGraphMemAttrUsedMemHigh && attr != cudaGraphMemAttrReservedMemHigh) ||
        *static_cast<uint64_t*>(value) != 0)
      return Status(err::kInvalidValue, "only a high-water mark can be set, and only to 0");
    resetGraphMemoryHigh(device);
    return Status::ok();
  });
}
