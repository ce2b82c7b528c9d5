// CudaBackend's cuDNN: NVIDIA's library (dnn_api.h) in the session's
// primary context, one handle per device. Each call makes NVIDIA's
// descriptors of the request's tensors, filter, convolution, pooling,
// activation, op-tensor or dropout settings (host objects, cheap), sets the
// stream, runs as the session's kernel (launch gate, GPU time, watchdog) and
// destroys them; workspace, dropout states and reserve space are the
// program's. Dropout states are seeded once (cudnnSetDropoutDescriptor, a
// kernel of NVIDIA's) and restored per call (cudnnRestoreDropoutDescriptor).
#include <array>
#include <cstring>
#include <vector>

#include "common/half.h"
#include "common/log.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {

namespace dn = common::dnn;

namespace {

// NVIDIA's descriptors of one call, destroyed with it.
struct Descriptors {
  explicit Descriptors(DnnApi& a) : api(a) {}
  DnnApi& api;
  std::vector<cudnnTensorDescriptor_t> t;  // per tensor of the call (null for a filter)
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  cudnnOpTensorDescriptor_t op = nullptr;
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnReduceTensorDescriptor_t reduce = nullptr;
  cudnnLRNDescriptor_t lrn = nullptr;
  ~Descriptors() {
    if (lrn) api.cudnnDestroyLRNDescriptor(lrn);
    if (reduce) api.cudnnDestroyReduceTensorDescriptor(reduce);
    for (auto d : t)
      if (d) api.cudnnDestroyTensorDescriptor(d);
    if (filter) api.cudnnDestroyFilterDescriptor(filter);
    if (conv) api.cudnnDestroyConvolutionDescriptor(conv);
    if (pool) api.cudnnDestroyPoolingDescriptor(pool);
    if (act) api.cudnnDestroyActivationDescriptor(act);
    if (op) api.cudnnDestroyOpTensorDescriptor(op);
    if (dropout) api.cudnnDestroyDropoutDescriptor(dropout);
  }
};

// Which tensor of a convolution is its filter.
int filterIndex(dn::Op op) {
  switch (op) {
    case dn::Op::kConvFwd: return 1;
    case dn::Op::kConvBwdData: return 0;
    case dn::Op::kConvBwdFilter: return 2;
    default: return -1;
  }
}

Status describe(DnnApi& D, const dn::Args& a, Descriptors& d) {
  const int fi = filterIndex(a.op);
  d.t.assign(a.t.size(), nullptr);
  for (size_t i = 0; i < a.t.size(); ++i) {
    const dn::Tensor& t = a.t[i];
    if (t.rank <= 0) continue;  // (an absent optional tensor)
    std::array<int, dn::kMaxRank> dims{}, strides{};
    for (int k = 0; k < t.rank; ++k) dims[k] = static_cast<int>(t.dims[k]), strides[k] = static_cast<int>(t.strides[k]);
    if (static_cast<int>(i) == fi) {
      RGPU_TRY(DnnApi::check(D.cudnnCreateFilterDescriptor(&d.filter), "cudnnCreateFilterDescriptor"));
      RGPU_TRY(DnnApi::check(D.cudnnSetFilterNdDescriptor(d.filter, static_cast<cudnnDataType_t>(t.type),
                                                          static_cast<cudnnTensorFormat_t>(t.filter_format), t.rank,
                                                          dims.data()),
                             "cudnnSetFilterNdDescriptor"));
      continue;
    }
    RGPU_TRY(DnnApi::check(D.cudnnCreateTensorDescriptor(&d.t[i]), "cudnnCreateTensorDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetTensorNdDescriptor(d.t[i], static_cast<cudnnDataType_t>(t.type), t.rank,
                                                        dims.data(), strides.data()),
                           "cudnnSetTensorNdDescriptor"));
  }
  if (fi >= 0) {
    const dn::Conv& c = a.conv;
    RGPU_TRY(DnnApi::check(D.cudnnCreateConvolutionDescriptor(&d.conv), "cudnnCreateConvolutionDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetConvolutionNdDescriptor(d.conv, c.spatial, c.pad.data(), c.stride.data(),
                                                             c.dilation.data(),
                                                             static_cast<cudnnConvolutionMode_t>(c.mode),
                                                             static_cast<cudnnDataType_t>(c.compute_type)),
                           "cudnnSetConvolutionNdDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetConvolutionGroupCount(d.conv, c.groups), "cudnnSetConvolutionGroupCount"));
    RGPU_TRY(DnnApi::check(D.cudnnSetConvolutionMathType(d.conv, static_cast<cudnnMathType_t>(c.math_type)),
                           "cudnnSetConvolutionMathType"));
  }
  if (a.op == dn::Op::kPoolingFwd || a.op == dn::Op::kPoolingBwd) {
    const dn::Pooling& p = a.pool;
    RGPU_TRY(DnnApi::check(D.cudnnCreatePoolingDescriptor(&d.pool), "cudnnCreatePoolingDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetPoolingNdDescriptor(d.pool, static_cast<cudnnPoolingMode_t>(p.mode),
                                                         static_cast<cudnnNanPropagation_t>(p.nan), p.spatial,
                                                         p.window.data(), p.pad.data(), p.stride.data()),
                           "cudnnSetPoolingNdDescriptor"));
  }
  if (a.op == dn::Op::kActivationFwd || a.op == dn::Op::kActivationBwd) {
    RGPU_TRY(DnnApi::check(D.cudnnCreateActivationDescriptor(&d.act), "cudnnCreateActivationDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetActivationDescriptor(d.act, static_cast<cudnnActivationMode_t>(a.act.mode),
                                                          static_cast<cudnnNanPropagation_t>(a.act.nan), a.act.coef),
                           "cudnnSetActivationDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetActivationDescriptorSwishBeta(d.act, a.act.swish_beta),
                           "cudnnSetActivationDescriptorSwishBeta"));
  }
  if (a.op == dn::Op::kOpTensor) {
    RGPU_TRY(DnnApi::check(D.cudnnCreateOpTensorDescriptor(&d.op), "cudnnCreateOpTensorDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetOpTensorDescriptor(d.op, static_cast<cudnnOpTensorOp_t>(a.tensor_op),
                                                        static_cast<cudnnDataType_t>(a.tensor_op_type),
                                                        CUDNN_NOT_PROPAGATE_NAN),
                           "cudnnSetOpTensorDescriptor"));
  }
  if (a.op == dn::Op::kLrnFwd || a.op == dn::Op::kLrnBwd) {
    RGPU_TRY(DnnApi::check(D.cudnnCreateLRNDescriptor(&d.lrn), "cudnnCreateLRNDescriptor"));
    RGPU_TRY(DnnApi::check(D.cudnnSetLRNDescriptor(d.lrn, static_cast<unsigned>(a.lrn_n), a.lrn_alpha, a.lrn_beta,
                                                   a.lrn_k),
                           "cudnnSetLRNDescriptor"));
  }
  if (a.op == dn::Op::kReduceTensor) {
    RGPU_TRY(DnnApi::check(D.cudnnCreateReduceTensorDescriptor(&d.reduce), "cudnnCreateReduceTensorDescriptor"));
    RGPU_TRY(DnnApi::check(
        D.cudnnSetReduceTensorDescriptor(d.reduce, static_cast<cudnnReduceTensorOp_t>(a.reduce_op),
                                         static_cast<cudnnDataType_t>(a.reduce_type), CUDNN_NOT_PROPAGATE_NAN,
                                         a.reduce_indices ? CUDNN_REDUCE_TENSOR_FLATTENED_INDICES
                                                          : CUDNN_REDUCE_TENSOR_NO_INDICES,
                                         CUDNN_32BIT_INDICES),
        "cudnnSetReduceTensorDescriptor"));
  }
  if (a.op == dn::Op::kDropoutInit || a.op == dn::Op::kDropoutFwd || a.op == dn::Op::kDropoutBwd)
    RGPU_TRY(DnnApi::check(D.cudnnCreateDropoutDescriptor(&d.dropout), "cudnnCreateDropoutDescriptor"));
  return Status::ok();
}

// alpha and beta as cuDNN reads them: double for double data, float otherwise.
struct Scalar {
  float f;
  double d;
  bool wide;
  Scalar(double v, int32_t type) : f(static_cast<float>(v)), d(v), wide(type == dn::kDouble) {}
  const void* p() const { return wide ? static_cast<const void*>(&d) : static_cast<const void*>(&f); }
};

// cudnnSetTensor's value, in y's own type.
struct Value {
  uint8_t bytes[8] = {};
  Value(double v, int32_t type) {
    if (type == dn::kDouble) std::memcpy(bytes, &v, 8);
    else if (type == dn::kFloat) {
      const float f = static_cast<float>(v);
      std::memcpy(bytes, &f, 4);
    } else {
      const uint16_t h = type == dn::kHalf ? common::floatToHalf(static_cast<float>(v))
                                           : common::floatToBf16(static_cast<float>(v));
      std::memcpy(bytes, &h, 2);
    }
  }
};

void* ptr(uint64_t p) { return reinterpret_cast<void*>(p); }

}  // namespace

Result<cudnnHandle_t> CudaBackend::dnnHandle(int dev) {
  if (!dnn_tried_) {
    dnn_tried_ = true;
    auto a = DnnApi::load(opts_.cudnn_library);
    if (a) {
      dnn_api_ = std::move(*a);
      RGPU_LOG_INFO("cuda: cuDNN loaded ({})", opts_.cudnn_library);
    } else {
      dnn_error_ = a.status();
      RGPU_LOG_WARN("cuda: {}", dnn_error_.message());
    }
  }
  if (!dnn_api_) return dnn_error_;
  RGPU_TRY(use(dev));
  cudnnHandle_t& h = dnn_handles_[dev];
  if (!h) RGPU_TRY(DnnApi::check(dnn_api_->cudnnCreate(&h), "cudnnCreate"));
  return h;
}

void CudaBackend::releaseDnn() {
  for (auto& [dev, h] : dnn_handles_)
    if (h && use(dev)) dnn_api_->cudnnDestroy(h);
  dnn_handles_.clear();
}

Result<uint64_t> CudaBackend::dnnSize(int device, dn::Query q, const dn::Args& a) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Status(err::kInvalidDevice, "invalid device");
  auto h = dnnHandle(device);
  if (!h) return h.status();
  DnnApi& D = *dnn_api_;
  size_t size = 0;
  if (q == dn::Query::kDropoutStates) {
    RGPU_TRY(DnnApi::check(D.cudnnDropoutGetStatesSize(*h, &size), "cudnnDropoutGetStatesSize"));
    return uint64_t{size};
  }
  Descriptors d{D};
  RGPU_TRY(describe(D, a, d));
  switch (q) {
    case dn::Query::kDropoutReserve:
      RGPU_TRY(DnnApi::check(D.cudnnDropoutGetReserveSpaceSize(d.t[0], &size), "cudnnDropoutGetReserveSpaceSize"));
      break;
    case dn::Query::kConvFwdWorkspace:
      RGPU_TRY(DnnApi::check(D.cudnnGetConvolutionForwardWorkspaceSize(*h, d.t[0], d.filter, d.conv, d.t[2],
                                                                       static_cast<cudnnConvolutionFwdAlgo_t>(a.algo),
                                                                       &size),
                             "cudnnGetConvolutionForwardWorkspaceSize"));
      break;
    case dn::Query::kConvBwdDataWorkspace:
      RGPU_TRY(DnnApi::check(D.cudnnGetConvolutionBackwardDataWorkspaceSize(
                                 *h, d.filter, d.t[1], d.conv, d.t[2], static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
                                 &size),
                             "cudnnGetConvolutionBackwardDataWorkspaceSize"));
      break;
    case dn::Query::kConvBwdFilterWorkspace:
      RGPU_TRY(DnnApi::check(D.cudnnGetConvolutionBackwardFilterWorkspaceSize(
                                 *h, d.t[0], d.t[1], d.conv, d.filter,
                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), &size),
                             "cudnnGetConvolutionBackwardFilterWorkspaceSize"));
      break;
    case dn::Query::kReduceWorkspace:
      RGPU_TRY(DnnApi::check(D.cudnnGetReductionWorkspaceSize(*h, d.reduce, d.t[0], d.t[1], &size),
                             "cudnnGetReductionWorkspaceSize"));
      break;
    default: return Status(err::kInvalidValue, "unknown size query");
  }
  return uint64_t{size};
}

Status CudaBackend::dnn(StreamKey key, const dn::Args& a) {
  auto s = streamOf(key);
  if (!s) return s.status();
  const int dev = s->first;
  auto h = dnnHandle(dev);
  if (!h) return h.status();
  DnnApi& D = *dnn_api_;
  Descriptors d{D};
  RGPU_TRY(describe(D, a, d));
  RGPU_TRY(DnnApi::check(D.cudnnSetStream(*h, reinterpret_cast<cudaStream_t>(s->second)), "cudnnSetStream"));
  const auto& t = a.t;
  // The scalars' type: the data's (check() refused mixed types; a filter's and batch normalisation's x are t[0]).
  const int32_t type = t.empty() ? dn::kFloat : t[0].type;
  const Scalar alpha(a.alpha, type), beta(a.beta, type);
  const Scalar alpha2(a.alpha2, type), beta2(a.beta2, type);
  void* ws = ptr(a.workspace);
  return asKernel(dev, s->second, dn::opName(a.op), [&]() -> Status {
    cudnnHandle_t H = *h;
    switch (a.op) {
      case dn::Op::kConvFwd:
        return DnnApi::check(D.cudnnConvolutionForward(H, alpha.p(), d.t[0], ptr(t[0].ptr), d.filter, ptr(t[1].ptr),
                                                       d.conv, static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), ws,
                                                       a.workspace_size, beta.p(), d.t[2], ptr(t[2].ptr)),
                             "cudnnConvolutionForward");
      case dn::Op::kConvBwdData:
        return DnnApi::check(D.cudnnConvolutionBackwardData(H, alpha.p(), d.filter, ptr(t[0].ptr), d.t[1],
                                                            ptr(t[1].ptr), d.conv,
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), ws,
                                                            a.workspace_size, beta.p(), d.t[2], ptr(t[2].ptr)),
                             "cudnnConvolutionBackwardData");
      case dn::Op::kConvBwdFilter:
        return DnnApi::check(D.cudnnConvolutionBackwardFilter(H, alpha.p(), d.t[0], ptr(t[0].ptr), d.t[1],
                                                              ptr(t[1].ptr), d.conv,
                                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), ws,
                                                              a.workspace_size, beta.p(), d.filter, ptr(t[2].ptr)),
                             "cudnnConvolutionBackwardFilter");
      case dn::Op::kConvBwdBias:
        return DnnApi::check(D.cudnnConvolutionBackwardBias(H, alpha.p(), d.t[0], ptr(t[0].ptr), beta.p(), d.t[1],
                                                            ptr(t[1].ptr)),
                             "cudnnConvolutionBackwardBias");
      case dn::Op::kAddTensor:
        return DnnApi::check(D.cudnnAddTensor(H, alpha.p(), d.t[0], ptr(t[0].ptr), beta.p(), d.t[1], ptr(t[1].ptr)),
                             "cudnnAddTensor");
      case dn::Op::kOpTensor:
        return DnnApi::check(D.cudnnOpTensor(H, d.op, alpha.p(), d.t[0], ptr(t[0].ptr), alpha2.p(), d.t[1],
                                             ptr(t[1].ptr), beta.p(), d.t[2], ptr(t[2].ptr)),
                             "cudnnOpTensor");
      case dn::Op::kScaleTensor:
        return DnnApi::check(D.cudnnScaleTensor(H, d.t[0], ptr(t[0].ptr), alpha.p()), "cudnnScaleTensor");
      case dn::Op::kSetTensor: {
        const Value v(a.alpha, t[0].type);
        return DnnApi::check(D.cudnnSetTensor(H, d.t[0], ptr(t[0].ptr), v.bytes), "cudnnSetTensor");
      }
      case dn::Op::kTransformTensor:
        return DnnApi::check(D.cudnnTransformTensor(H, alpha.p(), d.t[0], ptr(t[0].ptr), beta.p(), d.t[1],
                                                    ptr(t[1].ptr)),
                             "cudnnTransformTensor");
      case dn::Op::kActivationFwd:
        return DnnApi::check(D.cudnnActivationForward(H, d.act, alpha.p(), d.t[0], ptr(t[0].ptr), beta.p(), d.t[1],
                                                      ptr(t[1].ptr)),
                             "cudnnActivationForward");
      case dn::Op::kActivationBwd:
        return DnnApi::check(D.cudnnActivationBackward(H, d.act, alpha.p(), d.t[0], ptr(t[0].ptr), d.t[1],
                                                       ptr(t[1].ptr), d.t[2], ptr(t[2].ptr), beta.p(), d.t[3],
                                                       ptr(t[3].ptr)),
                             "cudnnActivationBackward");
      case dn::Op::kSoftmaxFwd:
        return DnnApi::check(D.cudnnSoftmaxForward(H, static_cast<cudnnSoftmaxAlgorithm_t>(a.softmax_algo),
                                                   static_cast<cudnnSoftmaxMode_t>(a.softmax_mode), alpha.p(), d.t[0],
                                                   ptr(t[0].ptr), beta.p(), d.t[1], ptr(t[1].ptr)),
                             "cudnnSoftmaxForward");
      case dn::Op::kSoftmaxBwd:
        return DnnApi::check(D.cudnnSoftmaxBackward(H, static_cast<cudnnSoftmaxAlgorithm_t>(a.softmax_algo),
                                                    static_cast<cudnnSoftmaxMode_t>(a.softmax_mode), alpha.p(),
                                                    d.t[0], ptr(t[0].ptr), d.t[1], ptr(t[1].ptr), beta.p(), d.t[2],
                                                    ptr(t[2].ptr)),
                             "cudnnSoftmaxBackward");
      case dn::Op::kPoolingFwd:
        return DnnApi::check(D.cudnnPoolingForward(H, d.pool, alpha.p(), d.t[0], ptr(t[0].ptr), beta.p(), d.t[1],
                                                   ptr(t[1].ptr)),
                             "cudnnPoolingForward");
      case dn::Op::kPoolingBwd:
        return DnnApi::check(D.cudnnPoolingBackward(H, d.pool, alpha.p(), d.t[0], ptr(t[0].ptr), d.t[1],
                                                    ptr(t[1].ptr), d.t[2], ptr(t[2].ptr), beta.p(), d.t[3],
                                                    ptr(t[3].ptr)),
                             "cudnnPoolingBackward");
      case dn::Op::kBnFwdTraining:
        return DnnApi::check(D.cudnnBatchNormalizationForwardTraining(
                                 H, static_cast<cudnnBatchNormMode_t>(a.bn_mode), alpha.p(), beta.p(), d.t[0],
                                 ptr(t[0].ptr), d.t[1], ptr(t[1].ptr), d.t[2], ptr(t[2].ptr), ptr(t[3].ptr), a.factor,
                                 ptr(t[4].ptr), ptr(t[5].ptr), a.epsilon, ptr(t[6].ptr), ptr(t[7].ptr)),
                             "cudnnBatchNormalizationForwardTraining");
      case dn::Op::kBnFwdInference:
        return DnnApi::check(D.cudnnBatchNormalizationForwardInference(
                                 H, static_cast<cudnnBatchNormMode_t>(a.bn_mode), alpha.p(), beta.p(), d.t[0],
                                 ptr(t[0].ptr), d.t[1], ptr(t[1].ptr), d.t[2], ptr(t[2].ptr), ptr(t[3].ptr),
                                 ptr(t[4].ptr), ptr(t[5].ptr), a.epsilon),
                             "cudnnBatchNormalizationForwardInference");
      case dn::Op::kBnBwd:
        return DnnApi::check(D.cudnnBatchNormalizationBackward(
                                 H, static_cast<cudnnBatchNormMode_t>(a.bn_mode), alpha.p(), beta.p(), alpha2.p(),
                                 beta2.p(), d.t[0], ptr(t[0].ptr), d.t[1], ptr(t[1].ptr), d.t[2], ptr(t[2].ptr), d.t[3],
                                 ptr(t[3].ptr), ptr(t[4].ptr), ptr(t[5].ptr), a.epsilon, ptr(t[6].ptr), ptr(t[7].ptr)),
                             "cudnnBatchNormalizationBackward");
      case dn::Op::kLrnFwd:
        return DnnApi::check(D.cudnnLRNCrossChannelForward(H, d.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, alpha.p(), d.t[0],
                                                           ptr(t[0].ptr), beta.p(), d.t[1], ptr(t[1].ptr)),
                             "cudnnLRNCrossChannelForward");
      case dn::Op::kLrnBwd:
        return DnnApi::check(D.cudnnLRNCrossChannelBackward(H, d.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, alpha.p(), d.t[0],
                                                            ptr(t[0].ptr), d.t[1], ptr(t[1].ptr), d.t[2],
                                                            ptr(t[2].ptr), beta.p(), d.t[3], ptr(t[3].ptr)),
                             "cudnnLRNCrossChannelBackward");
      case dn::Op::kReduceTensor:
        return DnnApi::check(D.cudnnReduceTensor(H, d.reduce, ptr(a.indices), a.indices_size, ws, a.workspace_size,
                                                 alpha.p(), d.t[0], ptr(t[0].ptr), beta.p(), d.t[1], ptr(t[1].ptr)),
                             "cudnnReduceTensor");
      case dn::Op::kDropoutInit:
        return DnnApi::check(D.cudnnSetDropoutDescriptor(d.dropout, H, a.dropout, ptr(a.states), a.states_size, a.seed),
                             "cudnnSetDropoutDescriptor");
      case dn::Op::kDropoutFwd:
      case dn::Op::kDropoutBwd: {
        RGPU_TRY(DnnApi::check(D.cudnnRestoreDropoutDescriptor(d.dropout, H, a.dropout, ptr(a.states), a.states_size,
                                                               a.seed),
                               "cudnnRestoreDropoutDescriptor"));
        if (a.op == dn::Op::kDropoutFwd)
          return DnnApi::check(D.cudnnDropoutForward(H, d.dropout, d.t[0], ptr(t[0].ptr), d.t[1], ptr(t[1].ptr),
                                                     ptr(a.reserve), a.reserve_size),
                               "cudnnDropoutForward");
        return DnnApi::check(D.cudnnDropoutBackward(H, d.dropout, d.t[0], ptr(t[0].ptr), d.t[1], ptr(t[1].ptr),
                                                    ptr(a.reserve), a.reserve_size),
                             "cudnnDropoutBackward");
      }
    }
    return Status(err::kInvalidValue, "unknown cuDNN operation");
  });
}

}  // namespace rgpu::server::cuda
