// rgpu's libcudnn.so.9: cuDNN 9's legacy API with NVIDIA's names and version
// node (libcudnn.map; all 224 exported, the ones not forwarded as generated
// stubs answering CUDNN_STATUS_NOT_SUPPORTED with one log line).
//
// Forwarded (docs/cudnn.md): handles, the descriptors of
// cudnn_descriptors.cc, convolution forward / backward data / backward
// filter / backward bias with their algorithm queries (Get_v7, Find, FindEx,
// MaxCount) and workspace sizes, tensor add / op / scale / set / transform,
// activation, softmax, pooling and batch normalisation forward and backward,
// dropout with its states and reserve space. Descriptors are the client's;
// a call is one stream-ordered, asynchronous request carrying them whole
// (wire::Dnn), checked here as cuDNN checks it and by the server against
// the session's memory (an error at the next synchronising call); sizes are
// synchronous queries the server's backend answers (NVIDIA's library on the
// CUDA backend). alpha and beta are host values read when the call is made.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "client/blas/blas_client.h"
#include "client/dnn/cudnn_client.h"
#include "client/dnn/cudnn_descriptors.h"
#include "common/log.h"

namespace dn = rgpu::common::dnn;
using rgpu::client::dnn::scalarOf;
using rgpu::client::dnn::live;
using rgpu::client::dnn::send;
using rgpu::client::dnn::size;
using rgpu::client::dnn::tensorOf;

namespace {

using rgpu::Status;
namespace err = rgpu::err;

cudnnStatus_t toStatus(const Status& s, const char* call, cudnnStatus_t otherwise = CUDNN_STATUS_EXECUTION_FAILED) {
  if (s) return CUDNN_STATUS_SUCCESS;
  rgpu::common::logOnce(std::string("cudnn:") + call + ":" + s.message(), std::string(call) + ": " + s.message());
  return rgpu::client::dnn::toDnnStatus(s, otherwise);
}

template <typename F>
cudnnStatus_t guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  } catch (...) {
    return toStatus(Status(err::kUnknown, "internal error"), call, CUDNN_STATUS_INTERNAL_ERROR);
  }
}

// The stream a handle's calls go to (`h` null: the current device's legacy stream).
Status streamOf(const rgpu::client::ExportTable& t, cudnnHandle_t h, rgpu::wire::StreamRef::Builder b) {
  return rgpu::client::blas::setStream(b, t, h ? h->stream : nullptr, h ? h->device : t.currentDevice());
}

// Waits for the handle's stream (an asynchronous error of its calls is the answer).
Status synchronize(cudnnHandle_t h) {
  const rgpu::client::ExportTable* t = rgpu::client::blas::table();
  if (!t) return Status(err::kInitializationError, "rgpu's CUDA runtime is not loaded");
  capnp::MallocMessageBuilder msg;
  RGPU_TRY(streamOf(*t, h, msg.initRoot<rgpu::wire::Request>().initStreamSynchronize()));
  auto r = t->call(msg, nullptr, 0);
  return r ? Status::ok() : r.status();
}

dn::Args convArgs(dn::Op op, const cudnnConvolutionStruct* c, int algo, void* ws, size_t ws_size) {
  dn::Args a;
  a.op = op;
  if (c) a.conv = c->c;
  a.algo = algo;
  a.workspace = reinterpret_cast<uint64_t>(ws);
  a.workspace_size = ws ? ws_size : 0;
  return a;
}

// ---- algorithm queries ----

constexpr int kFwdAlgos = CUDNN_CONVOLUTION_FWD_ALGO_COUNT, kBwdDataAlgos = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
              kBwdFilterAlgos = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;

dn::Query workspaceQuery(dn::Op op) {
  return op == dn::Op::kConvFwd ? dn::Query::kConvFwdWorkspace
         : op == dn::Op::kConvBwdData ? dn::Query::kConvBwdDataWorkspace
                                      : dn::Query::kConvBwdFilterWorkspace;
}
int algoCount(dn::Op op) {
  return op == dn::Op::kConvFwd ? kFwdAlgos : op == dn::Op::kConvBwdData ? kBwdDataAlgos : kBwdFilterAlgos;
}
// NVIDIA's documented determinism: backward data algorithm 0 and backward filter 0 and 3 accumulate atomically.
bool deterministic(dn::Op op, int algo) {
  if (op == dn::Op::kConvBwdData) return algo != 0;
  if (op == dn::Op::kConvBwdFilter) return algo != 0 && algo != 3;
  return true;
}

// Every algorithm's workspace, as the backend answers (an algorithm it refuses: NOT_SUPPORTED), supported
// ones first; `run` (FindEx) times each supported one on the program's buffers and orders them by time.
template <typename Perf>
cudnnStatus_t algorithms(cudnnHandle_t h, dn::Args a, int requested, int* returned, Perf* perf, bool timed,
                         const char* call) {
  return guarded(call, [&]() -> cudnnStatus_t {
    if (!live(h) || !returned || !perf || requested < 1) return CUDNN_STATUS_BAD_PARAM;
    std::vector<Perf> all;
    for (int algo = 0; algo < algoCount(a.op); ++algo) {
      Perf p{};
      p.algo = static_cast<decltype(p.algo)>(algo);
      p.determinism = deterministic(a.op, algo) ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
      p.mathType = static_cast<cudnnMathType_t>(a.conv.math_type);
      p.time = -1;
      size_t ws = 0;
      a.algo = algo;
      p.status = size(h, workspaceQuery(a.op), a, &ws, call);
      p.memory = ws;
      if (p.status == CUDNN_STATUS_BAD_PARAM) return p.status;  // (the shapes themselves are wrong)
      if (timed && p.status == CUDNN_STATUS_SUCCESS) {
        if (ws > a.workspace_size) {
          p.status = CUDNN_STATUS_NOT_SUPPORTED;  // (more workspace than the program gave)
        } else {
          dn::Args run = a;
          run.alpha = 1, run.beta = 0;
          run.workspace_size = a.workspace ? a.workspace_size : 0;
          const auto start = std::chrono::steady_clock::now();
          cudnnStatus_t st = send(h, run);
          if (st == CUDNN_STATUS_SUCCESS) st = toStatus(synchronize(h), call);
          p.time = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - start).count();
          p.status = st;
        }
      }
      all.push_back(p);
    }
    std::stable_sort(all.begin(), all.end(), [&](const Perf& x, const Perf& y) {
      if ((x.status == CUDNN_STATUS_SUCCESS) != (y.status == CUDNN_STATUS_SUCCESS)) return x.status == CUDNN_STATUS_SUCCESS;
      return timed && x.time < y.time;
    });
    *returned = std::min<int>(requested, static_cast<int>(all.size()));
    std::copy(all.begin(), all.begin() + *returned, perf);
    return CUDNN_STATUS_SUCCESS;
  });
}

// cudnnFind*Algorithm (without Ex): the same on buffers of the program's runtime, freed afterwards.
template <typename Perf>
cudnnStatus_t findWithOwnBuffers(cudnnHandle_t h, dn::Args a, int requested, int* returned, Perf* perf,
                                 const char* call) {
  using Malloc = int (*)(void**, size_t);
  using Free = int (*)(void*);
  static auto cuda_malloc = reinterpret_cast<Malloc>(dlsym(RTLD_DEFAULT, "cudaMalloc"));
  static auto cuda_free = reinterpret_cast<Free>(dlsym(RTLD_DEFAULT, "cudaFree"));
  if (!cuda_malloc || !cuda_free) return CUDNN_STATUS_NOT_INITIALIZED;
  std::vector<void*> buffers;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  for (dn::Tensor& t : a.t) {
    void* p = nullptr;
    if (cuda_malloc(&p, std::max<uint64_t>(t.spanBytes(), 1)) != 0) {
      st = CUDNN_STATUS_ALLOC_FAILED;
      break;
    }
    buffers.push_back(p);
    t.ptr = reinterpret_cast<uint64_t>(p);
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    // The workspace: the largest any algorithm asks for.
    size_t most = 0;
    for (int algo = 0; algo < algoCount(a.op); ++algo) {
      size_t ws = 0;
      a.algo = algo;
      if (size(h, workspaceQuery(a.op), a, &ws, call) == CUDNN_STATUS_SUCCESS) most = std::max(most, ws);
    }
    void* ws = nullptr;
    if (most && cuda_malloc(&ws, most) != 0) st = CUDNN_STATUS_ALLOC_FAILED;
    if (ws) buffers.push_back(ws);
    a.workspace = reinterpret_cast<uint64_t>(ws);
    a.workspace_size = most;
    // Zeroed inputs: cudnnSetTensor on each (Find's results do not depend on values).
    for (size_t i = 0; st == CUDNN_STATUS_SUCCESS && i < a.t.size(); ++i) {
      dn::Args zero;
      zero.op = dn::Op::kSetTensor;
      zero.alpha = 0;
      zero.t = {a.t[i]};
      zero.t[0].filter_format = -1;
      st = send(h, zero);
    }
    if (st == CUDNN_STATUS_SUCCESS) st = algorithms(h, a, requested, returned, perf, true, call);
  }
  // The trials must be done before their buffers are freed; an error of theirs is the answer.
  if (Status s = synchronize(h); !s && st == CUDNN_STATUS_SUCCESS) st = toStatus(s, call);
  for (void* p : buffers) cuda_free(p);
  return st;
}

}  // namespace

namespace rgpu::client::dnn {

// One operation: checked, then posted in the handle's stream order.
cudnnStatus_t send(cudnnHandle_t h, const dn::Args& a) {
  const char* call = dn::opName(a.op);
  return guarded(call, [&]() -> cudnnStatus_t {
    if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
    if (Status s = dn::check(a); !s) return toStatus(s, call);
    const rgpu::client::ExportTable* t = rgpu::client::blas::table();
    if (!t) return CUDNN_STATUS_NOT_INITIALIZED;
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<rgpu::wire::Request>().initDnn();
    if (Status s = streamOf(*t, h, m.initStream()); !s) return toStatus(s, call);
    dn::toWire(a, m);
    return toStatus(t->post(msg), call);
  });
}

// A size the server's backend answers (its tensors need not point anywhere yet).
cudnnStatus_t size(cudnnHandle_t h, dn::Query q, const dn::Args& a, size_t* out, const char* call) {
  return guarded(call, [&]() -> cudnnStatus_t {
    if (!out) return CUDNN_STATUS_BAD_PARAM;
    if (h && !live(h)) return CUDNN_STATUS_BAD_PARAM;
    if (q != dn::Query::kDropoutStates)
      if (Status s = dn::checkShapes(a); !s) return toStatus(s, call);
    const rgpu::client::ExportTable* t = rgpu::client::blas::table();
    if (!t) return CUDNN_STATUS_NOT_INITIALIZED;
    if (Status s = t->ready(); !s) return toStatus(s, call, CUDNN_STATUS_NOT_INITIALIZED);
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<rgpu::wire::Request>().initDnnSize();
    if (Status s = streamOf(*t, h, m.initStream()); !s) return toStatus(s, call);
    dn::toWire(a, m);
    m.setQuery(static_cast<uint8_t>(q));
    auto r = t->call(msg, nullptr, 0);
    if (!r) return toStatus(r.status(), call);
    *out = static_cast<size_t>(r->reader().getValue());
    return CUDNN_STATUS_SUCCESS;
  });
}

}  // namespace rgpu::client::dnn

// The generated stubs of unimplemented names land here.
extern "C" int rgpu_dnn_unsupported(const char* name) {
  rgpu::common::logOnce(std::string("cudnn-unsupported:") + name,
                        std::string(name) + " is not supported by rgpu's cuDNN (returns "
                                            "CUDNN_STATUS_NOT_SUPPORTED; docs/cudnn.md)");
  return CUDNN_STATUS_NOT_SUPPORTED;
}

extern "C" {

#define DNN_API __attribute__((visibility("default")))

// ---- library and handles ----
DNN_API size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
DNN_API size_t cudnnGetMaxDeviceVersion(void) { return 1210; }  // (the newest architecture cuDNN 9.19 knows: sm_121)
DNN_API size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }
DNN_API cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}
DNN_API const char* cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
#define NAME(x) \
  case x: return #x;
    NAME(CUDNN_STATUS_SUCCESS) NAME(CUDNN_STATUS_NOT_INITIALIZED) NAME(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    NAME(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH) NAME(CUDNN_STATUS_DEPRECATED) NAME(CUDNN_STATUS_LICENSE_ERROR)
    NAME(CUDNN_STATUS_RUNTIME_IN_PROGRESS) NAME(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    NAME(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED) NAME(CUDNN_STATUS_BAD_PARAM) NAME(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    NAME(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER) NAME(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    NAME(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND) NAME(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    NAME(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH) NAME(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    NAME(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES) NAME(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    NAME(CUDNN_STATUS_NOT_SUPPORTED) NAME(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    NAME(CUDNN_STATUS_NOT_SUPPORTED_SHAPE) NAME(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    NAME(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT) NAME(CUDNN_STATUS_INTERNAL_ERROR) NAME(CUDNN_STATUS_EXECUTION_FAILED)
    NAME(CUDNN_STATUS_ALLOC_FAILED) NAME(CUDNN_STATUS_ARCH_MISMATCH) NAME(CUDNN_STATUS_MAPPING_ERROR)
    NAME(CUDNN_STATUS_INVALID_VALUE)
#undef NAME
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}
DNN_API void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message && max_size) message[0] = '\0';  // (rgpu logs each refusal's reason instead)
}
DNN_API cudnnStatus_t cudnnCreate(cudnnHandle_t* out) {
  return guarded("cudnnCreate", [&]() -> cudnnStatus_t {
    if (!out) return CUDNN_STATUS_BAD_PARAM;
    const rgpu::client::ExportTable* t = rgpu::client::blas::table();
    if (!t) return CUDNN_STATUS_NOT_INITIALIZED;
    if (Status s = t->ready(); !s) return toStatus(s, "cudnnCreate", CUDNN_STATUS_NOT_INITIALIZED);
    auto* h = new cudnnContext;
    h->device = t->currentDevice();
    *out = h;
    return CUDNN_STATUS_SUCCESS;
  });
}
DNN_API cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  h->magic = 0;
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t* s) {
  if (!live(h) || !s) return CUDNN_STATUS_BAD_PARAM;
  *s = h->stream;
  return CUDNN_STATUS_SUCCESS;
}
// The sub-libraries' version checks: rgpu's cuDNN is one library, always consistent with itself.
DNN_API cudnnStatus_t cudnnGraphVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
DNN_API cudnnStatus_t cudnnOpsVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
DNN_API cudnnStatus_t cudnnCnnVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }

// ---- convolutions ----
DNN_API cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                              const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                              const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                                              void* ws, size_t ws_size, const void* beta,
                                              const cudnnTensorDescriptor_t yd, void* y) {
  dn::Args a = convArgs(dn::Op::kConvFwd, cd, algo, ws, ws_size);
  a.t = {tensorOf(xd, x), tensorOf(wd, w), tensorOf(yd, y)};
  if (!alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
  a.alpha = scalarOf(alpha, a.t[2].type), a.beta = scalarOf(beta, a.t[2].type);
  return send(h, a);
}
// y = act(alpha1 conv(x, w) + alpha2 z + bias), as the operations it is made of, in the handle's stream order:
// y = alpha2 z (z other than y), the convolution accumulating into y, the bias added, the activation in place.
DNN_API cudnnStatus_t cudnnConvolutionBiasActivationForward(
    cudnnHandle_t h, const void* alpha1, const cudnnTensorDescriptor_t xd, const void* x, const cudnnFilterDescriptor_t wd,
    const void* w, const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_size,
    const void* alpha2, const cudnnTensorDescriptor_t zd, const void* z, const cudnnTensorDescriptor_t bd,
    const void* bias, const cudnnActivationDescriptor_t ad, const cudnnTensorDescriptor_t yd, void* y) {
  if (!live(h) || !alpha1 || !alpha2 || !ad || !yd || !zd || !bd) return CUDNN_STATUS_BAD_PARAM;
  if (ad->a.mode != CUDNN_ACTIVATION_RELU && ad->a.mode != CUDNN_ACTIVATION_IDENTITY) {
    rgpu::common::logOnce("cudnn:biasact-mode", "cudnnConvolutionBiasActivationForward: only CUDNN_ACTIVATION_RELU and "
                                                "CUDNN_ACTIVATION_IDENTITY are fused (as in cuDNN)");
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  const int32_t type = yd->t.type;
  const double a2 = scalarOf(alpha2, type);
  // The whole call is checked before any of it is sent: the convolution and the bias as cuDNN shapes them.
  dn::Args conv = convArgs(dn::Op::kConvFwd, cd, algo, ws, ws_size);
  conv.t = {tensorOf(xd, x), tensorOf(wd, w), tensorOf(yd, y)};
  conv.alpha = scalarOf(alpha1, type);
  conv.beta = a2;
  dn::Args add;
  add.op = dn::Op::kAddTensor;
  add.t = {tensorOf(bd, bias), tensorOf(yd, y)};
  add.alpha = 1, add.beta = 1;
  dn::Args scaled_z;
  scaled_z.op = dn::Op::kTransformTensor;
  scaled_z.t = {tensorOf(zd, z), tensorOf(yd, y)};
  scaled_z.alpha = a2, scaled_z.beta = 0;
  const bool separate_z = a2 != 0 && z != y;
  for (const dn::Args* part : {&conv, &add, separate_z ? &scaled_z : nullptr})
    if (part)
      if (rgpu::Status s = dn::check(*part); !s) return toStatus(s, "cudnnConvolutionBiasActivationForward");
  if (separate_z) {
    if (cudnnStatus_t st = send(h, scaled_z); st != CUDNN_STATUS_SUCCESS) return st;
    conv.beta = 1;
  }
  if (cudnnStatus_t st = send(h, conv); st != CUDNN_STATUS_SUCCESS) return st;
  if (cudnnStatus_t st = send(h, add); st != CUDNN_STATUS_SUCCESS) return st;
  if (ad->a.mode == CUDNN_ACTIVATION_IDENTITY) return CUDNN_STATUS_SUCCESS;
  dn::Args act;
  act.op = dn::Op::kActivationFwd;
  act.t = {tensorOf(yd, y), tensorOf(yd, y)};
  act.act = ad->a;
  act.alpha = 1, act.beta = 0;
  return send(h, act);
}
DNN_API cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha, const cudnnFilterDescriptor_t wd,
                                                   const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
                                                   const cudnnConvolutionDescriptor_t cd,
                                                   cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t ws_size,
                                                   const void* beta, const cudnnTensorDescriptor_t dxd, void* dx) {
  dn::Args a = convArgs(dn::Op::kConvBwdData, cd, algo, ws, ws_size);
  a.t = {tensorOf(wd, w), tensorOf(dyd, dy), tensorOf(dxd, dx)};
  if (!alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
  a.alpha = scalarOf(alpha, a.t[2].type), a.beta = scalarOf(beta, a.t[2].type);
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha,
                                                     const cudnnTensorDescriptor_t xd, const void* x,
                                                     const cudnnTensorDescriptor_t dyd, const void* dy,
                                                     const cudnnConvolutionDescriptor_t cd,
                                                     cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_size,
                                                     const void* beta, const cudnnFilterDescriptor_t dwd, void* dw) {
  dn::Args a = convArgs(dn::Op::kConvBwdFilter, cd, algo, ws, ws_size);
  a.t = {tensorOf(xd, x), tensorOf(dyd, dy), tensorOf(dwd, dw)};
  if (!alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
  a.alpha = scalarOf(alpha, a.t[2].type), a.beta = scalarOf(beta, a.t[2].type);
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t dyd,
                                                   const void* dy, const void* beta, const cudnnTensorDescriptor_t dbd,
                                                   void* db) {
  dn::Args a;
  a.op = dn::Op::kConvBwdBias;
  a.t = {tensorOf(dyd, dy), tensorOf(dbd, db)};
  if (!alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
  a.alpha = scalarOf(alpha, a.t[1].type), a.beta = scalarOf(beta, a.t[1].type);
  return send(h, a);
}

DNN_API cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                              const cudnnFilterDescriptor_t wd,
                                                              const cudnnConvolutionDescriptor_t cd,
                                                              const cudnnTensorDescriptor_t yd,
                                                              cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = convArgs(dn::Op::kConvFwd, cd, algo, nullptr, 0);
  a.t = {tensorOf(xd, nullptr), tensorOf(wd, nullptr), tensorOf(yd, nullptr)};
  return size(h, dn::Query::kConvFwdWorkspace, a, bytes, "cudnnGetConvolutionForwardWorkspaceSize");
}
DNN_API cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                                   const cudnnTensorDescriptor_t dyd,
                                                                   const cudnnConvolutionDescriptor_t cd,
                                                                   const cudnnTensorDescriptor_t dxd,
                                                                   cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = convArgs(dn::Op::kConvBwdData, cd, algo, nullptr, 0);
  a.t = {tensorOf(wd, nullptr), tensorOf(dyd, nullptr), tensorOf(dxd, nullptr)};
  return size(h, dn::Query::kConvBwdDataWorkspace, a, bytes, "cudnnGetConvolutionBackwardDataWorkspaceSize");
}
DNN_API cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                                     const cudnnTensorDescriptor_t dyd,
                                                                     const cudnnConvolutionDescriptor_t cd,
                                                                     const cudnnFilterDescriptor_t dwd,
                                                                     cudnnConvolutionBwdFilterAlgo_t algo,
                                                                     size_t* bytes) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = convArgs(dn::Op::kConvBwdFilter, cd, algo, nullptr, 0);
  a.t = {tensorOf(xd, nullptr), tensorOf(dyd, nullptr), tensorOf(dwd, nullptr)};
  return size(h, dn::Query::kConvBwdFilterWorkspace, a, bytes, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
}

DNN_API cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t h, int* count) {
  if (!live(h) || !count) return CUDNN_STATUS_BAD_PARAM;
  *count = kFwdAlgos;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t h, int* count) {
  if (!live(h) || !count) return CUDNN_STATUS_BAD_PARAM;
  *count = kBwdDataAlgos;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t h, int* count) {
  if (!live(h) || !count) return CUDNN_STATUS_BAD_PARAM;
  *count = kBwdFilterAlgos;
  return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                             const cudnnFilterDescriptor_t wd,
                                                             const cudnnConvolutionDescriptor_t cd,
                                                             const cudnnTensorDescriptor_t yd, const int requested,
                                                             int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  dn::Args a = convArgs(dn::Op::kConvFwd, cd, 0, nullptr, 0);
  a.t = {tensorOf(xd, nullptr), tensorOf(wd, nullptr), tensorOf(yd, nullptr)};
  return algorithms(h, a, requested, returned, perf, false, "cudnnGetConvolutionForwardAlgorithm_v7");
}
DNN_API cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                                  const cudnnTensorDescriptor_t dyd,
                                                                  const cudnnConvolutionDescriptor_t cd,
                                                                  const cudnnTensorDescriptor_t dxd,
                                                                  const int requested, int* returned,
                                                                  cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  dn::Args a = convArgs(dn::Op::kConvBwdData, cd, 0, nullptr, 0);
  a.t = {tensorOf(wd, nullptr), tensorOf(dyd, nullptr), tensorOf(dxd, nullptr)};
  return algorithms(h, a, requested, returned, perf, false, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
}
DNN_API cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                                    const cudnnTensorDescriptor_t dyd,
                                                                    const cudnnConvolutionDescriptor_t cd,
                                                                    const cudnnFilterDescriptor_t dwd,
                                                                    const int requested, int* returned,
                                                                    cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  dn::Args a = convArgs(dn::Op::kConvBwdFilter, cd, 0, nullptr, 0);
  a.t = {tensorOf(xd, nullptr), tensorOf(dyd, nullptr), tensorOf(dwd, nullptr)};
  return algorithms(h, a, requested, returned, perf, false, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
}

DNN_API cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                             const void* x, const cudnnFilterDescriptor_t wd,
                                                             const void* w, const cudnnConvolutionDescriptor_t cd,
                                                             const cudnnTensorDescriptor_t yd, void* y,
                                                             const int requested, int* returned,
                                                             cudnnConvolutionFwdAlgoPerf_t* perf, void* ws,
                                                             size_t ws_size) {
  dn::Args a = convArgs(dn::Op::kConvFwd, cd, 0, ws, ws_size);
  a.t = {tensorOf(xd, x), tensorOf(wd, w), tensorOf(yd, y)};
  return algorithms(h, a, requested, returned, perf, true, "cudnnFindConvolutionForwardAlgorithmEx");
}
DNN_API cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
    const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd, void* dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf, void* ws, size_t ws_size) {
  dn::Args a = convArgs(dn::Op::kConvBwdData, cd, 0, ws, ws_size);
  a.t = {tensorOf(wd, w), tensorOf(dyd, dy), tensorOf(dxd, dx)};
  return algorithms(h, a, requested, returned, perf, true, "cudnnFindConvolutionBackwardDataAlgorithmEx");
}
DNN_API cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
    const cudnnConvolutionDescriptor_t cd, const cudnnFilterDescriptor_t dwd, void* dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* ws, size_t ws_size) {
  dn::Args a = convArgs(dn::Op::kConvBwdFilter, cd, 0, ws, ws_size);
  a.t = {tensorOf(xd, x), tensorOf(dyd, dy), tensorOf(dwd, dw)};
  return algorithms(h, a, requested, returned, perf, true, "cudnnFindConvolutionBackwardFilterAlgorithmEx");
}
DNN_API cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                           const cudnnFilterDescriptor_t wd,
                                                           const cudnnConvolutionDescriptor_t cd,
                                                           const cudnnTensorDescriptor_t yd, const int requested,
                                                           int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = convArgs(dn::Op::kConvFwd, cd, 0, nullptr, 0);
  a.t = {tensorOf(xd, nullptr), tensorOf(wd, nullptr), tensorOf(yd, nullptr)};
  return findWithOwnBuffers(h, a, requested, returned, perf, "cudnnFindConvolutionForwardAlgorithm");
}
DNN_API cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                                const cudnnTensorDescriptor_t dyd,
                                                                const cudnnConvolutionDescriptor_t cd,
                                                                const cudnnTensorDescriptor_t dxd, const int requested,
                                                                int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = convArgs(dn::Op::kConvBwdData, cd, 0, nullptr, 0);
  a.t = {tensorOf(wd, nullptr), tensorOf(dyd, nullptr), tensorOf(dxd, nullptr)};
  return findWithOwnBuffers(h, a, requested, returned, perf, "cudnnFindConvolutionBackwardDataAlgorithm");
}
DNN_API cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                                  const cudnnTensorDescriptor_t dyd,
                                                                  const cudnnConvolutionDescriptor_t cd,
                                                                  const cudnnFilterDescriptor_t dwd,
                                                                  const int requested, int* returned,
                                                                  cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = convArgs(dn::Op::kConvBwdFilter, cd, 0, nullptr, 0);
  a.t = {tensorOf(xd, nullptr), tensorOf(dyd, nullptr), tensorOf(dwd, nullptr)};
  return findWithOwnBuffers(h, a, requested, returned, perf, "cudnnFindConvolutionBackwardFilterAlgorithm");
}

}  // extern "C"
