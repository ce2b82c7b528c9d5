// rgpu's libcudnn.so.9, the backend (graph) API (docs/cudnn.md): its
// descriptors are made, given attributes, read back and destroyed as cuDNN
// does, so a program or cudnn-frontend gets as far as finalizing its
// operation graph; rgpu runs no operation graphs, and that finalize answers
// cuDNN's own CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, logging the pattern
// it was given ("matmul, pointwise mul, reduction, ...") once per pattern.
// Execution plans therefore never finalize, and cudnnBackendExecute and the
// CUDA-graph calls answer CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED.
//
// A descriptor keeps each attribute as the bytes it was given (its type,
// element count and elements); the element sizes are the header's types'.
#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"

namespace {

struct Attribute {
  cudnnBackendAttributeType_t type;
  int64_t count;
  std::vector<uint8_t> bytes;
};

struct Descriptor {
  static constexpr uint32_t kMagic = 0x43444247;  // "CDBG"
  uint32_t magic = kMagic;
  cudnnBackendDescriptorType_t type;
  bool finalized = false;
  std::map<int, Attribute> attributes;
};

Descriptor* live(cudnnBackendDescriptor_t d) {
  auto* p = static_cast<Descriptor*>(d);
  return p && p->magic == Descriptor::kMagic ? p : nullptr;
}

// Bytes of one element of an attribute type; 0 for a type this header does not name.
size_t elementBytes(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void*);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_CHAR: return 1;
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE: return 8;
    case CUDNN_TYPE_FRACTION: return sizeof(cudnnFraction_t);
    case CUDNN_TYPE_FLOAT:
    case CUDNN_TYPE_INT32: return 4;
    default: return t >= CUDNN_TYPE_DATA_TYPE && t <= CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE ? 4 : 0;  // (enums)
  }
}

const char* pointwiseName(int mode) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD: return "pointwise add";
    case CUDNN_POINTWISE_MUL: return "pointwise mul";
    case CUDNN_POINTWISE_SUB: return "pointwise sub";
    case CUDNN_POINTWISE_DIV: return "pointwise div";
    case CUDNN_POINTWISE_MAX: return "pointwise max";
    case CUDNN_POINTWISE_MIN: return "pointwise min";
    case CUDNN_POINTWISE_EXP: return "pointwise exp";
    case CUDNN_POINTWISE_LOG: return "pointwise log";
    case CUDNN_POINTWISE_RSQRT: return "pointwise rsqrt";
    case CUDNN_POINTWISE_IDENTITY: return "pointwise identity";
    case CUDNN_POINTWISE_RELU_FWD: return "pointwise relu";
    case CUDNN_POINTWISE_GELU_FWD: return "pointwise gelu";
    case CUDNN_POINTWISE_BINARY_SELECT: return "pointwise select";
    case CUDNN_POINTWISE_GEN_INDEX: return "pointwise gen-index";
    default: return "pointwise";
  }
}

// An operation's name in a pattern (its pointwise mode when it has one).
std::string operationName(const Descriptor& op) {
  switch (op.type) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: return "convolution forward";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: return "convolution backward filter";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: return "convolution backward data";
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
      auto pw = op.attributes.find(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
      if (pw != op.attributes.end() && pw->second.count == 1 && pw->second.bytes.size() == sizeof(void*)) {
        void* d;
        std::memcpy(&d, pw->second.bytes.data(), sizeof d);
        if (const Descriptor* p = live(d)) {
          auto mode = p->attributes.find(CUDNN_ATTR_POINTWISE_MODE);
          if (mode != p->attributes.end() && mode->second.bytes.size() >= 4) {
            int32_t m;
            std::memcpy(&m, mode->second.bytes.data(), 4);
            return pointwiseName(m);
          }
        }
      }
      return "pointwise";
    }
    case CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR: return "gen stats";
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return "matmul";
    case CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR: return "bn finalize statistics";
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return "reduction";
    case CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR: return "bn backward weights";
    case CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR: return "resample forward";
    case CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR: return "resample backward";
    case CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR: return "concat";
    case CUDNN_BACKEND_OPERATION_SIGNAL_DESCRIPTOR: return "signal";
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR: return "norm forward";
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR: return "norm backward";
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return "reshape";
    case CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR: return "rng";
    case CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR: return "paged cache load";
    case CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR: return "block-scale quantize";
    case CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR: return "block-scale dequantize";
    case CUDNN_BACKEND_OPERATION_EXPAND_BAND_MATRIX_DESCRIPTOR: return "expand band matrix";
    case CUDNN_BACKEND_OPERATION_CONTRACT_BAND_MATRIX_DESCRIPTOR: return "contract band matrix";
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR: return "sdpa forward";
    case CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR: return "moe grouped matmul";
    case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR: return "sdpa backward";
    default: return "descriptor type " + std::to_string(static_cast<int>(op.type));
  }
}

// An operation graph's finalize: its operations named, refused.
cudnnStatus_t finalizeGraph(Descriptor& g) {
  auto ops = g.attributes.find(CUDNN_ATTR_OPERATIONGRAPH_OPS);
  if (ops == g.attributes.end() || ops->second.count < 1 || ops->second.type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
    return CUDNN_STATUS_BAD_PARAM;
  std::string pattern;
  for (int64_t i = 0; i < ops->second.count; ++i) {
    void* d;
    std::memcpy(&d, ops->second.bytes.data() + i * sizeof(void*), sizeof d);
    const Descriptor* op = live(d);
    if (!op) return CUDNN_STATUS_BAD_PARAM;
    pattern += (i ? ", " : "") + operationName(*op);
  }
  rgpu::common::logOnce("cudnn-graph:" + pattern,
                        "rgpu's cuDNN runs no operation graphs of the backend API: a graph of " + pattern +
                            " is refused with CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN (the legacy API's "
                            "convolutions, pooling, normalisation, activations and softmax are forwarded; "
                            "docs/cudnn.md)");
  return CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
}

}  // namespace

extern "C" {

#define DNN_API __attribute__((visibility("default")))

DNN_API cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* out) {
  if (!out || type < CUDNN_BACKEND_POINTWISE_DESCRIPTOR || type > CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR)
    return CUDNN_STATUS_BAD_PARAM;
  try {
    auto* d = new Descriptor;
    d->type = type;
    *out = d;
  } catch (...) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  Descriptor* p = live(d);
  if (!p) return CUDNN_STATUS_BAD_PARAM;
  p->magic = 0;
  delete p;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t d) {
  return live(d) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}
DNN_API cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                               cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  Descriptor* p = live(d);
  const size_t size = elementBytes(type);
  if (!p || size == 0 || count < 0 || count > (int64_t{1} << 20) || (count > 0 && !elements))
    return CUDNN_STATUS_BAD_PARAM;
  if (p->finalized) return CUDNN_STATUS_NOT_INITIALIZED;  // (cuDNN: attributes of a finalized descriptor are fixed)
  Attribute a{type, count, std::vector<uint8_t>(static_cast<size_t>(count) * size)};
  if (count) std::memcpy(a.bytes.data(), elements, a.bytes.size());
  p->attributes[name] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t name,
                                               cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                               void* elements) {
  const Descriptor* p = live(d);
  if (!p || requested < 0 || (requested > 0 && !elements)) return CUDNN_STATUS_BAD_PARAM;
  auto it = p->attributes.find(name);
  if (it == p->attributes.end() || it->second.type != type) return CUDNN_STATUS_BAD_PARAM;
  if (count) *count = it->second.count;
  const int64_t n = std::min(requested, it->second.count);
  if (n > 0) std::memcpy(elements, it->second.bytes.data(), static_cast<size_t>(n) * elementBytes(type));
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  Descriptor* p = live(d);
  if (!p) return CUDNN_STATUS_BAD_PARAM;
  if (p->finalized) return CUDNN_STATUS_BAD_PARAM;
  switch (p->type) {
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return finalizeGraph(*p);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;  // (their operation graph never is)
    default:
      p->finalized = true;
      return CUDNN_STATUS_SUCCESS;
  }
}
DNN_API cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t) {
  return live(plan) ? CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED : CUDNN_STATUS_BAD_PARAM;
}
DNN_API cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t, cudnnBackendDescriptor_t plan,
                                                    cudnnBackendDescriptor_t, cudaGraph_t) {
  return live(plan) ? CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED : CUDNN_STATUS_BAD_PARAM;
}
DNN_API cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t, cudnnBackendDescriptor_t plan,
                                                  cudnnBackendDescriptor_t, cudaGraph_t) {
  return live(plan) ? CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED : CUDNN_STATUS_BAD_PARAM;
}

}  // extern "C"
