#include "common/dnn_args.h"

#include <algorithm>

namespace rgpu::common::dnn {

namespace {

constexpr const char* kNames[kOpCount] = {
    "cudnnConvolutionForward",  "cudnnConvolutionBackwardData",  "cudnnConvolutionBackwardFilter",
    "cudnnConvolutionBackwardBias", "cudnnAddTensor",            "cudnnOpTensor",
    "cudnnScaleTensor",         "cudnnSetTensor",                "cudnnTransformTensor",
    "cudnnActivationForward",   "cudnnActivationBackward",       "cudnnSoftmaxForward",
    "cudnnSoftmaxBackward",     "cudnnPoolingForward",           "cudnnPoolingBackward",
    "cudnnBatchNormalizationForwardTraining", "cudnnBatchNormalizationForwardInference",
    "cudnnBatchNormalizationBackward", "cudnnSetDropoutDescriptor", "cudnnDropoutForward", "cudnnDropoutBackward",
    "cudnnReduceTensor", "cudnnLRNCrossChannelForward", "cudnnLRNCrossChannelBackward"};
constexpr uint8_t kCounts[kOpCount] = {3, 3, 3, 2, 2, 3, 1, 1, 2, 2, 4, 2, 3, 2, 4, 8, 6, 8, 0, 2, 2, 2, 2, 4};

// Each tensor's name in a call, for errors (the table in the header).
const char* roleName(Op op, size_t i) {
  static const char* const kRoles[kOpCount][8] = {
      {"x", "w", "y"}, {"w", "dy", "dx"}, {"x", "dy", "dw"}, {"dy", "db"}, {"A", "C"}, {"A", "B", "C"}, {"y"}, {"y"},
      {"x", "y"}, {"x", "y"}, {"y", "dy", "x", "dx"}, {"x", "y"}, {"y", "dy", "dx"}, {"x", "y"},
      {"y", "dy", "x", "dx"},
      {"x", "y", "bnScale", "bnBias", "resultRunningMean", "resultRunningVariance", "resultSaveMean",
       "resultSaveInvVariance"},
      {"x", "y", "bnScale", "bnBias", "estimatedMean", "estimatedVariance"},
      {"x", "dy", "dx", "bnScale", "dBnScaleResult", "dBnBiasResult", "savedMean", "savedInvVariance"},
      {}, {"x", "y"}, {"dy", "dx"}, {"A", "C"}, {"x", "y"}, {"y", "dy", "x", "dx"}};
  const char* r = i < 8 ? kRoles[static_cast<size_t>(op)][i] : nullptr;
  return r ? r : "tensor";
}

Status bad(const std::string& why) { return Status(err::kInvalidValue, why); }
Status unsupported(const std::string& why) { return Status(err::kNotSupported, why); }

std::string dimsText(const Tensor& t) {
  std::string s;
  for (int i = 0; i < t.rank; ++i) s += (i ? "x" : "") + std::to_string(t.dims[i]);
  return s;
}

bool sameDims(const Tensor& a, const Tensor& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

// `a`'s dimensions each equal `c`'s or 1 (cuDNN's broadcasting).
bool broadcasts(const Tensor& a, const Tensor& c) {
  if (a.rank != c.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != c.dims[i] && a.dims[i] != 1) return false;
  return true;
}

Status tensorOk(const Tensor& t, const char* name) {
  if (t.rank == 0) return bad(std::string(name) + ": its descriptor was never set");
  if (t.rank < 0 || t.rank > kMaxRank) return bad(std::string(name) + ": more than 8 dimensions");
  if (!knownType(t.type))
    return unsupported(std::string(name) + ": data type " + std::to_string(t.type) +
                       " (rgpu's cuDNN computes float, double, half and bfloat16)");
  if (t.rank < 3) return unsupported(std::string(name) + ": fewer than 3 dimensions");
  for (int i = 0; i < t.rank; ++i) {
    if (t.dims[i] <= 0 || t.dims[i] > kMaxDim) return bad(std::string(name) + ": dimension " + std::to_string(i) +
                                                          " is " + std::to_string(t.dims[i]));
    if (t.strides[i] <= 0 || t.strides[i] > kMaxDim) return bad(std::string(name) + ": stride " + std::to_string(i) +
                                                                " is " + std::to_string(t.strides[i]));
  }
  if (t.spanBytes() / elementBytes(t.type) > static_cast<uint64_t>(kMaxElements))
    return bad(std::string(name) + ": spans more than 2^40 elements");
  return Status::ok();
}

// The computation's type for tensors of type `t`: float for the 16-bit ones.
int32_t paramType(int32_t t) { return t == kDouble ? kDouble : kFloat; }

Status convShapes(const Args& a, const Tensor& x, const Tensor& w, const Tensor& y, const char* xn, const char* yn) {
  const Conv& c = a.conv;
  if (c.spatial != 2 && c.spatial != 3) return bad("the convolution descriptor was never set");
  if (w.filter_format < 0) return bad("the filter is not a filter descriptor");
  if (x.rank != c.spatial + 2 || w.rank != x.rank || y.rank != x.rank)
    return bad(std::string("a ") + std::to_string(c.spatial) + "-D convolution takes " +
               std::to_string(c.spatial + 2) + "-D tensors");
  if (x.type != w.type || x.type != y.type)
    return unsupported(std::string("mixed data types (") + typeName(x.type) + ", " + typeName(w.type) + ", " +
                       typeName(y.type) + ")");
  if (c.compute_type != paramType(x.type) && !(c.compute_type == kHalf && x.type == kHalf))
    return unsupported(std::string("compute type ") + typeName(c.compute_type) + " for " + typeName(x.type) +
                       " tensors");
  auto out = convOutput(c, x, w);
  if (!out) return out.status();
  if (!sameDims(*out, y))
    return bad(std::string(yn) + " is " + dimsText(y) + " but convolving " + xn + " " + dimsText(x) + " by " +
               dimsText(w) + " gives " + dimsText(*out));
  return Status::ok();
}

Status bnShapes(const Args& a, const Tensor& x, const std::vector<const Tensor*>& params) {
  if (a.bn_mode < 0 || a.bn_mode > 2) return bad("batch normalization mode " + std::to_string(a.bn_mode));
  if (a.epsilon < 0) return bad("epsilon below CUDNN_BN_MIN_EPSILON");
  for (const Tensor* p : params) {
    if (p->ptr == 0 && p->rank == 0) continue;
    if (p->rank != x.rank) return bad("the scale/bias/mean/variance descriptor has another rank than x");
    if (p->type != paramType(x.type))
      return bad(std::string("scale/bias/mean/variance of type ") + typeName(p->type) + " for " +
                 typeName(x.type) + " data");
    for (int i = 0; i < x.rank; ++i) {
      const int64_t want = i == 0 ? 1 : i == 1 || a.bn_mode == 0 ? x.dims[i] : 1;
      if (p->dims[i] != want)
        return bad("the scale/bias/mean/variance tensor is " + dimsText(*p) + ", not the derived " +
                   (a.bn_mode == 0 ? "1xCxHxW" : "1xCx1x1"));
    }
  }
  return Status::ok();
}

}  // namespace

const char* opName(Op op) {
  const auto i = static_cast<size_t>(op);
  return i < kOpCount ? kNames[i] : "cudnn (unknown operation)";
}
size_t tensorCount(Op op) {
  const auto i = static_cast<size_t>(op);
  return i < kOpCount ? kCounts[i] : 0;
}

const char* typeName(int32_t t) {
  switch (t) {
    case kFloat: return "CUDNN_DATA_FLOAT";
    case kDouble: return "CUDNN_DATA_DOUBLE";
    case kHalf: return "CUDNN_DATA_HALF";
    case kBf16: return "CUDNN_DATA_BFLOAT16";
    default: return "another cudnnDataType_t";
  }
}

int64_t Tensor::elements() const {
  int64_t n = rank > 0 ? 1 : 0;
  for (int i = 0; i < rank && i < kMaxRank; ++i) n *= dims[i];
  return n;
}

uint64_t Tensor::spanBytes() const {
  if (rank <= 0 || rank > kMaxRank) return 0;
  unsigned __int128 span = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] <= 0) return 0;
    span += static_cast<unsigned __int128>(dims[i] - 1) * static_cast<uint64_t>(std::max<int64_t>(strides[i], 0));
  }
  span *= elementBytes(type);
  return span > UINT64_MAX / 2 ? UINT64_MAX / 2 : static_cast<uint64_t>(span);
}

Tensor packed(int32_t type, int rank, const int64_t* dims, int32_t format) {
  Tensor t;
  t.type = type;
  t.rank = rank;
  for (int i = 0; i < rank; ++i) t.dims[i] = dims[i];
  if (format == 1 && rank >= 3) {  // NHWC: C innermost, then the spatial dimensions, then N
    int64_t s = 1;
    t.strides[1] = s;
    s *= dims[1];
    for (int i = rank - 1; i >= 2; --i) t.strides[i] = s, s *= dims[i];
    t.strides[0] = s;
  } else {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; --i) t.strides[i] = s, s *= dims[i];
  }
  return t;
}

Result<Tensor> convOutput(const Conv& c, const Tensor& x, const Tensor& w) {
  if (c.spatial != 2 && c.spatial != 3) return bad("the convolution descriptor was never set");
  if (x.rank != c.spatial + 2 || w.rank != x.rank) return bad("the tensors' ranks do not match the convolution's");
  if (c.groups < 1 || x.dims[1] != w.dims[1] * c.groups)
    return bad("x has " + std::to_string(x.dims[1]) + " channels but the filter takes " + std::to_string(w.dims[1]) +
               " in each of " + std::to_string(c.groups) + " groups");
  if (w.dims[0] % c.groups != 0) return bad("the filter's output channels are not a multiple of the group count");
  Tensor y = x;
  y.dims[1] = w.dims[0];
  for (int i = 0; i < c.spatial; ++i) {
    if (c.pad[i] < 0 || c.stride[i] < 1 || c.dilation[i] < 1)
      return bad("padding, stride or dilation out of range in the convolution descriptor");
    const int64_t extent = (w.dims[i + 2] - 1) * c.dilation[i] + 1;
    const int64_t room = x.dims[i + 2] + 2 * int64_t{c.pad[i]} - extent;
    if (room < 0) return bad("the filter is larger than the padded input");
    y.dims[i + 2] = 1 + room / c.stride[i];
  }
  return packed(y.type, y.rank, y.dims.data(), 0);
}

Result<Tensor> poolOutput(const Pooling& p, const Tensor& x) {
  if (p.spatial < 1 || p.spatial > 3 || x.rank != p.spatial + 2)
    return bad("the pooling descriptor's dimensions do not match x's");
  Tensor y = x;
  for (int i = 0; i < p.spatial; ++i) {
    if (p.window[i] < 1 || p.pad[i] < 0 || p.stride[i] < 1) return bad("window, padding or stride out of range");
    if (p.pad[i] >= p.window[i]) return bad("padding not smaller than the pooling window");
    const int64_t room = x.dims[i + 2] + 2 * int64_t{p.pad[i]} - p.window[i];
    if (room < 0) return bad("the pooling window is larger than the padded input");
    y.dims[i + 2] = 1 + room / p.stride[i];
  }
  return packed(y.type, y.rank, y.dims.data(), 0);
}

uint64_t simDropoutReserveBytes(const Tensor& x) { return static_cast<uint64_t>(std::max<int64_t>(x.elements(), 0)); }

Status check(const Args& a) {
  if (static_cast<size_t>(a.op) >= kOpCount) return bad("unknown operation");
  const size_t n = tensorCount(a.op);
  if (a.t.size() != n) return bad(std::string(opName(a.op)) + " takes " + std::to_string(n) + " tensors");
  const bool bn = a.op == Op::kBnFwdTraining || a.op == Op::kBnFwdInference || a.op == Op::kBnBwd;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = a.t[i];
    const bool optional = bn && ((a.op == Op::kBnFwdTraining && i >= 4) || (a.op == Op::kBnBwd && i >= 6));
    if (optional && t.ptr == 0) continue;
    RGPU_TRY(tensorOk(t, roleName(a.op, i)));
    if (t.ptr == 0) return bad(std::string(roleName(a.op, i)) + " is a null pointer");
  }
  auto same = [&](size_t i, size_t j) -> Status {
    if (!sameDims(a.t[i], a.t[j]))
      return bad(std::string(roleName(a.op, i)) + " is " + dimsText(a.t[i]) + " but " + roleName(a.op, j) + " is " +
                 dimsText(a.t[j]));
    if (a.t[i].type != a.t[j].type)
      return unsupported(std::string(roleName(a.op, i)) + " and " + roleName(a.op, j) + " of different types");
    return Status::ok();
  };
  switch (a.op) {
    case Op::kConvFwd: return convShapes(a, a.t[0], a.t[1], a.t[2], "x", "y");
    case Op::kConvBwdData: return convShapes(a, a.t[2], a.t[0], a.t[1], "dx", "dy");
    case Op::kConvBwdFilter: return convShapes(a, a.t[0], a.t[2], a.t[1], "x", "dy");
    case Op::kConvBwdBias: {
      const Tensor &dy = a.t[0], &db = a.t[1];
      if (db.rank != dy.rank || db.type != dy.type) return bad("db must be a 1xKx1x1 tensor of dy's type");
      for (int i = 0; i < db.rank; ++i)
        if (db.dims[i] != (i == 1 ? dy.dims[1] : 1)) return bad("db is " + dimsText(db) + ", not 1xKx1x1");
      return Status::ok();
    }
    case Op::kAddTensor:
      if (!broadcasts(a.t[0], a.t[1])) return bad("A " + dimsText(a.t[0]) + " does not broadcast to C " + dimsText(a.t[1]));
      return Status::ok();
    case Op::kOpTensor:
      if (a.tensor_op < 0 || a.tensor_op > 5) return bad("op tensor operation " + std::to_string(a.tensor_op));
      RGPU_TRY(same(0, 2));
      if (a.tensor_op < 4 && !broadcasts(a.t[1], a.t[2]))
        return bad("B " + dimsText(a.t[1]) + " does not broadcast to C " + dimsText(a.t[2]));
      return Status::ok();
    case Op::kScaleTensor:
    case Op::kSetTensor: return Status::ok();
    case Op::kTransformTensor:
      if (!sameDims(a.t[0], a.t[1])) return bad("x and y of different dimensions");
      return Status::ok();
    case Op::kActivationFwd:
    case Op::kSoftmaxFwd:
      if (a.op == Op::kActivationFwd && (a.act.mode < 0 || a.act.mode > 6))
        return bad("activation mode " + std::to_string(a.act.mode));
      if (a.op == Op::kActivationFwd && a.act.mode == 5) return bad("CUDNN_ACTIVATION_IDENTITY is for fused calls only");
      if (a.op == Op::kSoftmaxFwd && (a.softmax_algo < 0 || a.softmax_algo > 2 || a.softmax_mode < 0 ||
                                      a.softmax_mode > 1))
        return bad("softmax algorithm or mode out of range");
      return same(0, 1);
    case Op::kActivationBwd:
      if (a.act.mode < 0 || a.act.mode > 6 || a.act.mode == 5) return bad("activation mode " + std::to_string(a.act.mode));
      RGPU_TRY(same(0, 1));
      RGPU_TRY(same(0, 2));
      return same(0, 3);
    case Op::kSoftmaxBwd:
      if (a.softmax_algo < 0 || a.softmax_algo > 2 || a.softmax_mode < 0 || a.softmax_mode > 1)
        return bad("softmax algorithm or mode out of range");
      RGPU_TRY(same(0, 1));
      return same(0, 2);
    case Op::kPoolingFwd:
    case Op::kPoolingBwd: {
      if (a.pool.mode < 0 || a.pool.mode > 3) return bad("pooling mode " + std::to_string(a.pool.mode));
      const Tensor& x = a.op == Op::kPoolingFwd ? a.t[0] : a.t[2];
      const Tensor& y = a.op == Op::kPoolingFwd ? a.t[1] : a.t[0];
      auto out = poolOutput(a.pool, x);
      if (!out) return out.status();
      if (!sameDims(*out, y)) return bad("y is " + dimsText(y) + " but pooling x gives " + dimsText(*out));
      if (x.type != y.type) return unsupported("x and y of different types");
      if (a.op == Op::kPoolingBwd) {
        RGPU_TRY(same(0, 1));
        RGPU_TRY(same(2, 3));
      }
      return Status::ok();
    }
    case Op::kBnFwdTraining:
    case Op::kBnFwdInference:
      RGPU_TRY(same(0, 1));
      if (a.op == Op::kBnFwdTraining && (a.t[4].ptr == 0) != (a.t[5].ptr == 0))
        return bad("resultRunningMean and resultRunningVariance must both be given or both be null");
      if (a.op == Op::kBnFwdTraining && (a.t[6].ptr == 0) != (a.t[7].ptr == 0))
        return bad("resultSaveMean and resultSaveInvVariance must both be given or both be null");
      return bnShapes(a, a.t[0], {&a.t[2], &a.t[3], &a.t[4], &a.t[5]});
    case Op::kBnBwd:
      RGPU_TRY(same(0, 1));
      RGPU_TRY(same(0, 2));
      if ((a.t[6].ptr == 0) != (a.t[7].ptr == 0))
        return bad("savedMean and savedInvVariance must both be given or both be null");
      return bnShapes(a, a.t[0], {&a.t[3], &a.t[4], &a.t[5], &a.t[6], &a.t[7]});
    case Op::kReduceTensor: {
      if (a.reduce_op < 0 || a.reduce_op > 8) return bad("reduce tensor operation " + std::to_string(a.reduce_op));
      if (a.t[0].rank != a.t[1].rank || !broadcasts(a.t[1], a.t[0]))
        return bad("C " + dimsText(a.t[1]) + " is not A " + dimsText(a.t[0]) + " with some dimensions reduced to 1");
      if (a.t[0].type != a.t[1].type) return unsupported("A and C of different types");
      const bool indexed = a.reduce_indices != 0 && (a.reduce_op == 2 || a.reduce_op == 3 || a.reduce_op == 4);
      if (indexed && (a.indices == 0 || a.indices_size < static_cast<uint64_t>(a.t[1].elements()) * 4))
        return bad("the indices need " + std::to_string(a.t[1].elements() * 4) + " bytes");
      return Status::ok();
    }
    case Op::kLrnFwd:
    case Op::kLrnBwd:
      if (a.lrn_n < 1 || a.lrn_n > 16 || !(a.lrn_k >= 1e-5) || !(a.lrn_beta >= 0.01))
        return bad("LRN window, k or beta out of cuDNN's range (n 1..16, k >= 1e-5, beta >= 0.01)");
      RGPU_TRY(same(0, 1));
      if (a.op == Op::kLrnBwd) {
        RGPU_TRY(same(0, 2));
        RGPU_TRY(same(0, 3));
      }
      return Status::ok();
    case Op::kDropoutInit:
    case Op::kDropoutFwd:
    case Op::kDropoutBwd:
      if (!(a.dropout >= 0.f && a.dropout < 1.f)) return bad("dropout probability outside [0, 1)");
      if (a.states == 0 && (a.op == Op::kDropoutInit || a.dropout > 0.f)) return bad("no dropout states");
      if (a.op == Op::kDropoutInit) return Status::ok();
      if (a.reserve == 0) return bad("no reserve space");
      return same(0, 1);
  }
  return bad("unknown operation");
}

Status checkShapes(Args a) {
  for (auto& t : a.t)
    if (!t.ptr) t.ptr = 1;
  if (a.op == Op::kDropoutFwd) a.states = a.reserve = 1;
  a.reduce_indices = 0;
  return check(a);
}

std::vector<Range> ranges(const Args& a) {
  std::vector<Range> r;
  for (size_t i = 0; i < a.t.size(); ++i)
    if (a.t[i].ptr && a.t[i].rank > 0) r.push_back({a.t[i].ptr, a.t[i].spanBytes(), roleName(a.op, i)});
  if (a.states && (a.op == Op::kDropoutInit || a.op == Op::kDropoutFwd || a.op == Op::kDropoutBwd))
    r.push_back({a.states, a.states_size, "the dropout states"});
  if (a.reserve) r.push_back({a.reserve, a.reserve_size, "the reserve space"});
  if (a.workspace && a.workspace_size) r.push_back({a.workspace, a.workspace_size, "the workspace"});
  if (a.op == Op::kReduceTensor && a.indices && a.indices_size) r.push_back({a.indices, a.indices_size, "the indices"});
  return r;
}

namespace {

template <typename L>
void listToWire(L b, const std::array<int32_t, 3>& v) {
  for (unsigned i = 0; i < 3; ++i) b.set(i, v[i]);
}
template <typename L>
std::array<int32_t, 3> listFromWire(L l) {
  std::array<int32_t, 3> v{};
  for (unsigned i = 0; i < 3 && i < l.size(); ++i) v[i] = l[i];
  return v;
}

}  // namespace

void toWire(const Args& a, wire::Dnn::Builder b) {
  b.setOp(static_cast<uint8_t>(a.op));
  b.setAlpha(a.alpha);
  b.setBeta(a.beta);
  b.setAlpha2(a.alpha2);
  b.setBeta2(a.beta2);
  auto ts = b.initTensors(static_cast<unsigned>(a.t.size()));
  for (unsigned i = 0; i < a.t.size(); ++i) {
    const Tensor& t = a.t[i];
    auto w = ts[i];
    w.setType(t.type);
    const unsigned rank = static_cast<unsigned>(std::clamp(t.rank, 0, kMaxRank));
    auto d = w.initDims(rank);
    auto s = w.initStrides(rank);
    for (unsigned j = 0; j < rank; ++j) d.set(j, t.dims[j]), s.set(j, t.strides[j]);
    w.setPtr(t.ptr);
    w.setFilterFormat(t.filter_format);
  }
  b.setConvSpatial(a.conv.spatial);
  listToWire(b.initConvPad(3), a.conv.pad);
  listToWire(b.initConvStride(3), a.conv.stride);
  listToWire(b.initConvDilation(3), a.conv.dilation);
  b.setConvMode(a.conv.mode);
  b.setComputeType(a.conv.compute_type);
  b.setGroups(a.conv.groups);
  b.setMathType(a.conv.math_type);
  b.setAlgo(a.algo);
  b.setPoolMode(a.pool.mode);
  b.setPoolNan(a.pool.nan);
  b.setPoolSpatial(a.pool.spatial);
  listToWire(b.initPoolWindow(3), a.pool.window);
  listToWire(b.initPoolPad(3), a.pool.pad);
  listToWire(b.initPoolStride(3), a.pool.stride);
  b.setActMode(a.act.mode);
  b.setActNan(a.act.nan);
  b.setActCoef(a.act.coef);
  b.setSwishBeta(a.act.swish_beta);
  b.setSoftmaxAlgo(a.softmax_algo);
  b.setSoftmaxMode(a.softmax_mode);
  b.setTensorOp(a.tensor_op);
  b.setTensorOpType(a.tensor_op_type);
  b.setBnMode(a.bn_mode);
  b.setEpsilon(a.epsilon);
  b.setFactor(a.factor);
  b.setDropout(a.dropout);
  b.setStates(a.states);
  b.setStatesSize(a.states_size);
  b.setSeed(a.seed);
  b.setWorkspace(a.workspace);
  b.setWorkspaceSize(a.workspace_size);
  b.setReserve(a.reserve);
  b.setReserveSize(a.reserve_size);
  b.setReduceOp(a.reduce_op);
  b.setReduceType(a.reduce_type);
  b.setReduceIndices(a.reduce_indices);
  b.setIndices(a.indices);
  b.setIndicesSize(a.indices_size);
  b.setLrnN(a.lrn_n);
  b.setLrnAlpha(a.lrn_alpha);
  b.setLrnBeta(a.lrn_beta);
  b.setLrnK(a.lrn_k);
}

Args fromWire(wire::Dnn::Reader r) {
  Args a;
  a.op = static_cast<Op>(r.getOp());
  a.alpha = r.getAlpha();
  a.beta = r.getBeta();
  a.alpha2 = r.getAlpha2();
  a.beta2 = r.getBeta2();
  auto ts = r.getTensors();
  a.t.resize(std::min<size_t>(ts.size(), 16));
  for (unsigned i = 0; i < a.t.size(); ++i) {
    auto w = ts[i];
    Tensor& t = a.t[i];
    t.type = w.getType();
    auto d = w.getDims();
    auto s = w.getStrides();
    if (d.size() > static_cast<unsigned>(kMaxRank) || s.size() != d.size()) {
      t.rank = -1;  // refused by check()
    } else {
      t.rank = static_cast<int32_t>(d.size());
      for (unsigned j = 0; j < d.size(); ++j) t.dims[j] = d[j], t.strides[j] = s[j];
    }
    t.ptr = w.getPtr();
    t.filter_format = w.getFilterFormat();
  }
  a.conv.spatial = r.getConvSpatial();
  a.conv.pad = listFromWire(r.getConvPad());
  a.conv.stride = listFromWire(r.getConvStride());
  a.conv.dilation = listFromWire(r.getConvDilation());
  a.conv.mode = r.getConvMode();
  a.conv.compute_type = r.getComputeType();
  a.conv.groups = r.getGroups();
  a.conv.math_type = r.getMathType();
  a.algo = r.getAlgo();
  a.pool.mode = r.getPoolMode();
  a.pool.nan = r.getPoolNan();
  a.pool.spatial = r.getPoolSpatial();
  a.pool.window = listFromWire(r.getPoolWindow());
  a.pool.pad = listFromWire(r.getPoolPad());
  a.pool.stride = listFromWire(r.getPoolStride());
  a.act.mode = r.getActMode();
  a.act.nan = r.getActNan();
  a.act.coef = r.getActCoef();
  a.act.swish_beta = r.getSwishBeta();
  a.softmax_algo = r.getSoftmaxAlgo();
  a.softmax_mode = r.getSoftmaxMode();
  a.tensor_op = r.getTensorOp();
  a.tensor_op_type = r.getTensorOpType();
  a.bn_mode = r.getBnMode();
  a.epsilon = r.getEpsilon();
  a.factor = r.getFactor();
  a.dropout = r.getDropout();
  a.states = r.getStates();
  a.states_size = r.getStatesSize();
  a.seed = r.getSeed();
  a.workspace = r.getWorkspace();
  a.workspace_size = r.getWorkspaceSize();
  a.reserve = r.getReserve();
  a.reserve_size = r.getReserveSize();
  a.reduce_op = r.getReduceOp();
  a.reduce_type = r.getReduceType();
  a.reduce_indices = r.getReduceIndices();
  a.indices = r.getIndices();
  a.indices_size = r.getIndicesSize();
  a.lrn_n = r.getLrnN();
  a.lrn_alpha = r.getLrnAlpha();
  a.lrn_beta = r.getLrnBeta();
  a.lrn_k = r.getLrnK();
  return a;
}

}  // namespace rgpu::common::dnn
