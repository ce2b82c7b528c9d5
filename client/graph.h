// CUDA graphs in the client: graphs, nodes, executable graphs and stream capture.
//
// A graph lives here, in the program's process: building one (explicitly with
// cudaGraphAdd*Node, or by capturing a stream) sends nothing. Instantiating
// it flattens it — child graphs inlined, nodes in an order that respects every
// edge — into wire nodes (protocol/rgpu.capnp GraphNode) that go to the server
// once (graphCreate); each cudaGraphLaunch is then ONE message (graphLaunch)
// carrying the bytes of the graph's host-to-device copies, read from the
// program's memory at launch, and, when the graph copies to the host, answered
// by one reply whose bytes land in the program's buffers before the stream
// passes that point. Host nodes run here, as cudaLaunchHostFunc does.
//
// Invariants:
// - Every node belongs to exactly one graph; a child graph node owns its
//   graph. Handles are checked against the registry: a destroyed or foreign
//   handle is refused with cudaErrorInvalidValue, never dereferenced.
// - An executable graph holds its own copy of the graph (`shape`), so the
//   program may change or destroy the original; cudaGraphExec*SetParams and
//   cudaGraphExecUpdate change the copy, and the next launch sends it again.
// - Capture: a stream in a capture adds a node for each stream-ordered call
//   instead of sending it, depending on the stream's current tips. Other
//   streams join by waiting on an event recorded in the capture and must be
//   joined back into the origin stream before cudaStreamEndCapture. What a
//   capture cannot record invalidates it, as NVIDIA's runtime does.
// - One mutex (graphMutex()) guards all of it: CUDA graph objects are not
//   meant to be used from two threads at once, but capture state is global.
#pragma once

#include <cuda_runtime_api.h>

#include <capnp/message.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/runtime.h"

struct CUgraph_st;
struct CUgraphNode_st;

namespace rgpu::client {

struct Capture;

// Device memory of a graph's allocation node (cudaGraphAddMemAllocNode,
// cudaMallocAsync while capturing): allocated when the node is made — its
// address is the node's for the graph's life, as CUDA's is — and counted
// against the user's quota like cudaMalloc's; freed when the last graph or
// executable graph holding the node goes. Free nodes free nothing early.
// (Also an executable graph's staging buffer for an array copy with a host
// side: then not graph memory, `graph_memory` false.)
struct GraphAllocation {
  uint64_t ptr = 0, size = 0;
  int device = 0;
  bool graph_memory = true;
  ~GraphAllocation();
};

// A node's parameters as the program gave them.
struct NodeParams {
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  int device = 0;  // the device a kernel, copy or memset runs on
  // kernel
  const KernelRecord* kernel = nullptr;
  dim3 grid, block;
  unsigned shmem = 0;
  std::string params;            // the packed parameter block
  std::vector<void*> arg_ptrs;   // into `params`: cudaGraphKernelNodeGetParams's kernelParams
  std::map<int, cudaLaunchAttributeValue> attrs;  // cudaGraphKernelNodeSetAttribute (hints: kept, reported)
  // memcpy
  cudaMemcpy3DParms copy{};
  // memset
  cudaMemsetParams memset{};
  // host
  cudaHostNodeParams host{};
  // child graph (owned)
  std::shared_ptr<CUgraph_st> child;
  // event record / wait
  cudaEvent_t event = nullptr;
  // A captured call kept in its wire form (cuBLAS): no parameters to get or set.
  std::vector<capnp::word> request;
  // memory allocation node: its memory; memory free node: the address it frees
  std::shared_ptr<GraphAllocation> alloc;
  cudaMemAllocNodeParams alloc_params{};
  void* free_ptr = nullptr;
  // conditional: its handle and type, and its bodies (owned, graphs of the
  // program's like child graphs; `body_handles` is the array the program's
  // phGraph_out points to, kept by pointArgs)
  cudaGraphConditionalHandle cond_handle = 0;
  cudaGraphConditionalNodeType cond_type = cudaGraphCondTypeIf;
  std::vector<std::shared_ptr<CUgraph_st>> bodies;
  std::vector<cudaGraph_t> body_handles;
};

}  // namespace rgpu::client

struct CUgraphNode_st {
  CUgraph_st* graph = nullptr;
  rgpu::client::NodeParams p;
  std::vector<CUgraphNode_st*> in, out;  // dependencies, dependents
  // Edge data of dependencies whose edge is not the default (all zero) one.
  // The server runs every edge as a full dependency: a schedule each kind permits.
  std::map<const CUgraphNode_st*, cudaGraphEdgeData> in_data;
  bool enabled = true;                   // cudaGraphNodeSetEnabled (executable graphs' copies)
  const CUgraphNode_st* origin = nullptr;  // the node this one was cloned from
};

// A user object (cudaUserObjectCreate): the program's pointer and destructor,
// run (on a thread of its own, never under rgpu's locks) when the last
// reference — the program's, a graph's, an executable graph's — goes.
struct CUuserObject_st {
  void* ptr = nullptr;
  cudaHostFn_t destroy = nullptr;
  unsigned refs = 0;  // graphMutex
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in creation order
  // Conditional handles made for this graph (cudaGraphConditionalHandleCreate):
  // those with cudaGraphCondAssignDefault take their default value each time
  // the graph (a body: each time it runs) starts.
  struct CondHandle {
    cudaGraphConditionalHandle handle;
    unsigned default_value, flags;
  };
  std::vector<CondHandle> cond_handles;
  std::map<CUuserObject_st*, unsigned> user_refs;       // references this graph holds
  rgpu::client::Capture* capturing = nullptr;           // a capture adds to it now
  int mem_execs = 0;  // executable graphs of a graph with memory nodes (CUDA allows one at a time)
};

struct CUgraphExec_st {
  uint32_t id = 0;
  CUgraph_st* mem_source = nullptr;  // the graph with memory nodes it came from (its mem_execs)
  int device = 0;
  unsigned long long flags = 0;
  std::shared_ptr<CUgraph_st> shape;
  std::map<const CUgraphNode_st*, CUgraphNode_st*> by_origin;  // program's node -> its copy in `shape`
  bool sent = false;  // the server has `shape` as it is now
  // What each launch needs, in the flattened order the server runs.
  std::vector<std::pair<const void*, uint64_t>> host_in;
  std::vector<std::pair<void*, uint64_t>> host_out;
  // Host functions in order: the program's, or a host-to-host copy node's
  // copy (run on the client when the stream reaches it, as a host function).
  struct HostFn {
    cudaHostNodeParams fn{};
    std::shared_ptr<const cudaMemcpy3DParms> copy;
  };
  std::vector<HostFn> host_fns;
  std::map<CUuserObject_st*, unsigned> user_refs;  // the graph's, taken at instantiation
  // Device buffers its array copies with a host side go through (flattenArrayCopy).
  std::vector<std::shared_ptr<rgpu::client::GraphAllocation>> staging;
};

namespace rgpu::client {

// Recursive: a graph call sends messages, which consult the capture state.
std::recursive_mutex& graphMutex();
// Points a kernel node's argument pointers into its own parameter block (and
// a conditional node's body handles at its own bodies).
void pointArgs(NodeParams& p);

// ---- graphs (graph.cc) --------------------------------------------------------
Status checkGraph(cudaGraph_t g);          // graphMutex held
Status checkNode(cudaGraphNode_t n);       // graphMutex held
Status checkExec(cudaGraphExec_t e);       // graphMutex held
cudaGraph_t newGraph();
// Registers `g` (a clone) as a graph of the program's.
cudaGraph_t adoptGraph(std::shared_ptr<CUgraph_st> g);
void destroyGraph(cudaGraph_t g);
// Adds a node depending on `deps` (checked: nodes of `g`, no duplicates).
Result<cudaGraphNode_t> addNode(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n, NodeParams p);
Status addEdge(cudaGraphNode_t from, cudaGraphNode_t to, const cudaGraphEdgeData* data = nullptr);
// NVIDIA's rules for an edge's data (`to_type`: the downstream node's type):
// to_port 0, reserved bytes 0, non-zero from ports only on kernel nodes, a
// programmatic edge between kernel nodes from the programmatic or
// launch-completion port.
Status checkEdgeData(const cudaGraphEdgeData& d, const CUgraphNode_st* from, cudaGraphNodeType to_type);
// The data of the edge from -> to (all zero unless set).
cudaGraphEdgeData edgeData(const CUgraphNode_st* from, const CUgraphNode_st* to);
Status removeEdge(cudaGraphNode_t from, cudaGraphNode_t to);
void destroyNode(cudaGraphNode_t n);
// A deep copy; `map` (optional) receives original -> copy for every node.
std::shared_ptr<CUgraph_st> cloneGraph(const CUgraph_st& g, std::map<const CUgraphNode_st*, CUgraphNode_st*>* map);
// Nodes in an order that respects every edge (creation order among equals).
std::vector<CUgraphNode_st*> topoOrder(const CUgraph_st& g);

// Parameters from the program's structures, checked.
Result<NodeParams> kernelParams(const cudaKernelNodeParams& k);
Result<NodeParams> memcpyParams(const cudaMemcpy3DParms& c);
Result<NodeParams> memcpy1DParams(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
Result<NodeParams> memsetParams(const cudaMemsetParams& m);
Result<NodeParams> hostParams(const cudaHostNodeParams& h);
Result<NodeParams> eventParams(cudaGraphNodeType type, cudaEvent_t e);
// A memory allocation node (allocates now, on `device` when the parameters
// name none) and a memory free node (of a live graph allocation).
Result<NodeParams> memAllocParams(const cudaMemAllocNodeParams& p, int device = -1);
Result<NodeParams> memFreeParams(void* dptr);
bool hasMemoryNodes(const CUgraph_st& g);
// Conditional nodes (cudaGraphAddNode with cudaGraphNodeTypeConditional): a
// node with `size` empty bodies, its handle one the server made
// (conditionalHandle) for this program. A graph with one cannot be cloned or
// be a child graph, and has one executable graph at a time (as CUDA's).
// A switch node's bodies travel as one list of sizes in one message (docs/limits.md).
inline constexpr unsigned kMaxSwitchBodies = 65536;
Result<NodeParams> conditionalParams(const cudaConditionalNodeParams& c);
Result<cudaGraphConditionalHandle> conditionalHandle(cudaGraph_t g, unsigned default_value, unsigned flags);
bool hasConditionalNodes(const CUgraph_st& g);
// cudaDeviceGetGraphMemAttribute's figures for `device`.
uint64_t graphMemoryUsed(int device);
void noteGraphMemory(int device, int64_t delta);
uint64_t graphMemoryHigh(int device);
void resetGraphMemoryHigh(int device);
// cudaGraphKernelNodeGetParams: `p`'s kernel as the program sees it.
void kernelOut(NodeParams& p, cudaKernelNodeParams* out);

// User objects (graphMutex held): references taken and given back; the last
// one runs the destructor.
Status checkUserObject(cudaUserObject_t o);
cudaUserObject_t newUserObject(void* ptr, cudaHostFn_t destroy, unsigned refs);
void retainUserObject(cudaUserObject_t o, unsigned n);
void releaseUserObject(cudaUserObject_t o, unsigned n);

// ---- executable graphs (graph_exec.cc) ----------------------------------------------
// Flattens and checks `g`; `err_node` names the node at fault.
Result<cudaGraphExec_t> instantiate(cudaGraph_t g, unsigned long long flags, cudaGraphNode_t* err_node);
void destroyExec(cudaGraphExec_t e);
Status launchExec(cudaGraphExec_t e, cudaStream_t stream, bool ptsz);
// cudaGraphExecUpdate: `g` must have `e`'s topology; on a mismatch `why` says which.
Status updateExec(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info);
// Replaces the parameters of the copy of `node` in `e` (same node type only).
Status setExecNodeParams(cudaGraphExec_t e, cudaGraphNode_t node, Result<NodeParams> params);
Status setExecNodeEnabled(cudaGraphExec_t e, cudaGraphNode_t node, bool enabled);
Result<bool> execNodeEnabled(cudaGraphExec_t e, cudaGraphNode_t node);

// ---- stream capture (capture.cc) -----------------------------------------------------
// Non-zero while any stream of the process is capturing (a relaxed load: the
// fast path of every stream-ordered call).
bool capturesActive();
// The stream a request is ordered on, if it is stream-ordered.
std::optional<StreamRef> requestStream(wire::Request::Reader req);

// A request for stream `s` that a capture takes instead of the wire: true
// when it was captured (or refused: `st` says so); false: send it.
bool captureRequest(StreamRef s, wire::Request::Reader req, Status* st);
// A synchronous request: refused when a capture forbids it (the capture is
// invalidated, as NVIDIA's runtime does); ok otherwise.
Status captureAllowsCall(wire::Request::Reader req);
// When `s` is capturing: adds the node `make` builds (it runs only then) and
// returns true (`st` says how it went, `node` is the node); also true, with
// cudaErrorStreamCaptureImplicit, for the legacy stream while a blocking
// stream of its device captures; else false. Host copies, host functions,
// graph launches and memory nodes are captured so, as requests are
// (captureRequest).
bool captureNodeOn(StreamRef s, const std::function<Result<NodeParams>()>& make, Status* st, cudaGraphNode_t* node);
// Set while the graph code itself allocates (a capture must not refuse it).
bool& captureInternalCall();
bool captureEventRecord(StreamRef s, cudaEvent_t e, uint32_t event_id, unsigned flags, Status* st);
bool captureEventWait(StreamRef s, cudaEvent_t e, uint32_t event_id, unsigned flags, Status* st);
// cudaDeviceReset, cudaStreamDestroy: captures on the stream(s) end.
void forgetCaptureStream(uint32_t stream_id);

Status beginCapture(cudaStream_t stream, bool ptsz, cudaStreamCaptureMode mode, cudaGraph_t into,
                    const cudaGraphNode_t* deps, size_t ndeps);
Status endCapture(cudaStream_t stream, bool ptsz, cudaGraph_t* out);
Status captureInfo(cudaStream_t stream, bool ptsz, cudaStreamCaptureStatus* status, unsigned long long* id,
                   cudaGraph_t* graph, const cudaGraphNode_t** deps, size_t* ndeps);
Status updateCaptureDependencies(cudaStream_t stream, bool ptsz, cudaGraphNode_t* deps, size_t n, unsigned flags);
cudaStreamCaptureMode& threadCaptureMode();

}  // namespace rgpu::client
