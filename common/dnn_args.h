// cuDNN's legacy API (client/dnn, docs/cudnn.md): one call with its
// descriptors, whether cuDNN would accept it, and the device memory it reads
// and writes -- the ranges the server checks each call against.
//
// Every tensor travels as cuDNN keeps it after cudnnSet*Descriptor: a data
// type, 3 to 8 dimensions and a stride per dimension (in elements), so NCHW,
// NHWC and any strided layout are one case; a filter is a tensor whose
// strides its format gave (KCRS for NCHW, KRSC for NHWC), `filter_format`
// kept for NVIDIA's library. A tensor of dimensions d and strides s spans
// elementBytes * (1 + sum (d_i - 1) s_i) bytes from its pointer.
//
// Each operation takes its tensors in a fixed order (Args::t, `roles`):
//   conv forward        x w y            y  = a conv(x, w) + b y
//   conv backward data  w dy dx          dx = a conv^T(dy, w) + b dx
//   conv backward filt  x dy dw          dw = a corr(x, dy) + b dw
//   conv backward bias  dy db            db = a sum(dy) + b db
//   add tensor          A C              C  = a A + b C  (A broadcast)
//   op tensor           A B C            C  = op(a A, a2 B) + b C
//   scale / set         y                y  = a y  /  y = a
//   transform           x y              y  = a x + b y  (another layout)
//   activation fwd      x y;  bwd  y dy x dx
//   softmax fwd         x y;  bwd  y dy dx
//   pooling fwd         x y;  bwd  y dy x dx
//   bn forward train    x y scale bias runMean runVar saveMean saveInvVar
//   bn forward infer    x y scale bias estMean estVar
//   bn backward         x dy dx scale dScale dBias saveMean saveInvVar
//   dropout fwd / bwd   x y  /  dy dx   (+ states and reserve space)
//   dropout init        (states only: seeded)
//   reduce tensor       A C              C  = a reduce(A) + b C  (C's 1-sized dimensions reduced;
//                                        + the indices of MIN/MAX/AMAX, 32-bit, when asked)
//   LRN fwd / bwd       x y  /  y dy x dx   (across channels: y = x (k + alpha/n sum x^2)^-beta)
// A tensor with pointer 0 is absent (bn's optional running and saved values).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/device_range.h"
#include "common/status.h"
#include "protocol/rgpu.capnp.h"

namespace rgpu::common::dnn {

enum class Op : uint8_t {
  kConvFwd, kConvBwdData, kConvBwdFilter, kConvBwdBias, kAddTensor, kOpTensor, kScaleTensor, kSetTensor,
  kTransformTensor, kActivationFwd, kActivationBwd, kSoftmaxFwd, kSoftmaxBwd, kPoolingFwd, kPoolingBwd,
  kBnFwdTraining, kBnFwdInference, kBnBwd, kDropoutInit, kDropoutFwd, kDropoutBwd, kReduceTensor,
  kLrnFwd, kLrnBwd,
};
inline constexpr uint8_t kOpCount = 24;
const char* opName(Op op);  // cuDNN's name, e.g. "cudnnConvolutionForward"
size_t tensorCount(Op op);  // how many tensors the operation takes (the table above)

// What a size query (wire::Request dnnSize) asks.
enum class Query : uint8_t { kConvFwdWorkspace, kConvBwdDataWorkspace, kConvBwdFilterWorkspace, kDropoutStates,
                             kDropoutReserve, kReduceWorkspace };
inline constexpr uint8_t kLastQuery = static_cast<uint8_t>(Query::kReduceWorkspace);

// cudnnDataType_t values computed (others are CUDNN_STATUS_NOT_SUPPORTED).
inline constexpr int32_t kFloat = 0, kDouble = 1, kHalf = 2, kBf16 = 9;
inline bool knownType(int32_t t) { return t == kFloat || t == kDouble || t == kHalf || t == kBf16; }
inline uint32_t elementBytes(int32_t t) { return t == kDouble ? 8 : t == kFloat ? 4 : 2; }
const char* typeName(int32_t t);

inline constexpr int kMaxRank = 8;  // CUDNN_DIM_MAX
// One dimension or stride: at most this, and a tensor at most kMaxElements elements.
inline constexpr int64_t kMaxDim = INT32_MAX;
inline constexpr int64_t kMaxElements = int64_t{1} << 40;

struct Tensor {
  int32_t type = kFloat;
  int32_t rank = 0;  // 0: not set
  std::array<int64_t, kMaxRank> dims{}, strides{};
  uint64_t ptr = 0;
  int32_t filter_format = -1;  // a filter's cudnnTensorFormat_t; -1 for a tensor
  int64_t elements() const;
  uint64_t spanBytes() const;  // 0 for an empty tensor
};

// A fully packed tensor of `dims` in NCHW (format 0) or NHWC (format 1) order
// (for NHWC the channel is the innermost dimension; dims stay N, C, spatial...).
Tensor packed(int32_t type, int rank, const int64_t* dims, int32_t format);

struct Conv {
  int32_t spatial = 0;  // 2 or 3 (0: not set)
  std::array<int32_t, 3> pad{}, stride{1, 1, 1}, dilation{1, 1, 1};
  int32_t mode = 1;  // cudnnConvolutionMode_t: 0 convolution (flipped), 1 cross-correlation
  int32_t compute_type = kFloat;
  int32_t groups = 1;
  int32_t math_type = 0;
};

struct Pooling {
  int32_t mode = 0;  // cudnnPoolingMode_t
  int32_t nan = 0;
  int32_t spatial = 0;
  std::array<int32_t, 3> window{}, pad{}, stride{1, 1, 1};
};

struct Activation {
  int32_t mode = 1;  // cudnnActivationMode_t
  int32_t nan = 0;
  double coef = 0;  // clipped ReLU's ceiling, ELU's alpha
  double swish_beta = 1;
};

struct Args {
  Op op = Op::kConvFwd;
  double alpha = 1, beta = 0;    // bn backward: alphaDataDiff, betaDataDiff
  double alpha2 = 1, beta2 = 0;  // op tensor: alpha2; bn backward: alphaParamDiff, betaParamDiff
  std::vector<Tensor> t;
  Conv conv;
  int32_t algo = 0;
  Pooling pool;
  Activation act;
  int32_t softmax_algo = 0, softmax_mode = 0;
  int32_t tensor_op = 0, tensor_op_type = kFloat;  // cudnnOpTensorOp_t and its compute type
  int32_t bn_mode = 1;
  double epsilon = 1e-5, factor = 1;  // bn: epsilon and the running average's factor
  float dropout = 0;
  uint64_t states = 0, states_size = 0, seed = 0;
  uint64_t workspace = 0, workspace_size = 0, reserve = 0, reserve_size = 0;
  // reduce tensor: cudnnReduceTensorOp_t, its computation's type, whether MIN/MAX/AMAX write indices (32-bit)
  int32_t reduce_op = 0, reduce_type = kFloat, reduce_indices = 0;
  uint64_t indices = 0, indices_size = 0;
  // LRN across channels: the window's width n (1..16), alpha, beta, k
  int32_t lrn_n = 5;
  double lrn_alpha = 1e-4, lrn_beta = 0.75, lrn_k = 2;
};

// The output dimensions of a convolution of `x` by filter `w` (N, K, spatial...).
Result<Tensor> convOutput(const Conv& c, const Tensor& x, const Tensor& w);
// The output dimensions of pooling `x`.
Result<Tensor> poolOutput(const Pooling& p, const Tensor& x);

// Which argument cuDNN would refuse, with the reason (err::kInvalidValue for
// CUDNN_STATUS_BAD_PARAM, err::kNotSupported for what rgpu does not compute:
// int8 and fp8 types, mixed types, tensors of other ranks); ok when none.
Status check(const Args& a);
// check() of a size query's call: its descriptors only (the tensors, dropout
// states, reserve space and indices it names need not exist yet).
Status checkShapes(Args a);

// The sim's sizes (bytes): dropout states (a seed and a counter) and reserve
// space (one byte per element); workspaces are 0 (the sim needs none).
inline constexpr uint64_t kSimDropoutStateBytes = 64;
uint64_t simDropoutReserveBytes(const Tensor& x);

using Range = DeviceRange;
// Every range of a call check() accepted (tensors, states, reserve, workspace).
std::vector<Range> ranges(const Args& a);

void toWire(const Args& a, wire::Dnn::Builder b);
Args fromWire(wire::Dnn::Reader r);

}  // namespace rgpu::common::dnn
