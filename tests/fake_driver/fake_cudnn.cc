// A fake cuDNN (the legacy API's descriptors and operations) for testing
// the CUDA backend's cuDNN path without a GPU: the entry points rgpu's
// worker takes from NVIDIA's library (server/cuda/dnn_api.h). Descriptors
// are rgpu's own (client/dnn/cudnn_descriptors.cc, built in here), so the
// worker's descriptors read back as the program's were; operations are
// computed by the sim's executor (server/sim/sim_dnn.h) on the fake
// driver's memory (host memory), queued on the fake driver's executor in
// the handle's stream order and recorded in the driver's log.
// Convolutions ask for kWorkspaceBytes of workspace and refuse a call
// without it (CUDNN_STATUS_BAD_PARAM), so the program's must travel.
#include <cuda.h>
#include <cudnn.h>

#include <cstring>
#include <string>

#include "client/dnn/cudnn_descriptors.h"
#include "common/half.h"
#include "server/sim/sim_dnn.h"
#include "tests/fake_driver/fake_library.h"

namespace dn = rgpu::common::dnn;
using rgpu::client::dnn::scalarOf;
using rgpu::client::dnn::tensorOf;

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace {

constexpr size_t kWorkspaceBytes = 256;

cudnnStatus_t submit(cudnnHandle_t h, const dn::Args& a, const std::string& what) {
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  if (rgpu::Status s = dn::check(a); !s) return rgpu::client::dnn::toDnnStatus(s);
  rgpu::fake::record(what);
  bool queued = rgpu::fake::enqueue(reinterpret_cast<CUstream>(h->stream), dn::opName(a.op),
                                    [a] { return rgpu::server::simdnn::run(a) ? 0 : 1; });
  return queued ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

cudnnStatus_t conv(cudnnHandle_t h, dn::Op op, const cudnnConvolutionStruct* c, int algo, void* ws, size_t ws_size,
                   std::vector<dn::Tensor> t, const void* alpha, const void* beta) {
  if (!c || !ws || ws_size < kWorkspaceBytes) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a;
  a.op = op;
  a.conv = c->c;
  a.algo = algo;
  a.t = std::move(t);
  a.alpha = scalarOf(alpha, a.t[0].type), a.beta = scalarOf(beta, a.t[0].type);
  return submit(h, a, std::string(dn::opName(op)) + " with a workspace");
}

dn::Args args(dn::Op op, std::vector<dn::Tensor> t, const void* alpha, const void* beta) {
  dn::Args a;
  a.op = op;
  a.t = std::move(t);
  a.alpha = scalarOf(alpha, a.t[0].type), a.beta = scalarOf(beta, a.t[0].type);
  return a;
}

}  // namespace

extern "C" {

#define FAKE_API __attribute__((visibility("default")))

FAKE_API cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  *h = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t, size_t* bytes) {
  *bytes = dn::kSimDropoutStateBytes;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnDropoutGetReserveSpaceSize(cudnnTensorDescriptor_t x, size_t* bytes) {
  *bytes = dn::simDropoutReserveBytes(x->t);
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                               const cudnnFilterDescriptor_t,
                                                               const cudnnConvolutionDescriptor_t,
                                                               const cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t,
                                                               size_t* bytes) {
  *bytes = kWorkspaceBytes;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                                    const cudnnTensorDescriptor_t,
                                                                    const cudnnConvolutionDescriptor_t,
                                                                    const cudnnTensorDescriptor_t,
                                                                    cudnnConvolutionBwdDataAlgo_t, size_t* bytes) {
  *bytes = kWorkspaceBytes;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                                      const cudnnTensorDescriptor_t,
                                                                      const cudnnConvolutionDescriptor_t,
                                                                      const cudnnFilterDescriptor_t,
                                                                      cudnnConvolutionBwdFilterAlgo_t, size_t* bytes) {
  *bytes = kWorkspaceBytes;
  return CUDNN_STATUS_SUCCESS;
}

FAKE_API cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                               const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                               const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                                               void* ws, size_t ws_size, const void* beta,
                                               const cudnnTensorDescriptor_t yd, void* y) {
  return conv(h, dn::Op::kConvFwd, cd, algo, ws, ws_size, {tensorOf(xd, x), tensorOf(wd, w), tensorOf(yd, y)}, alpha,
              beta);
}
FAKE_API cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha,
                                                    const cudnnFilterDescriptor_t wd, const void* w,
                                                    const cudnnTensorDescriptor_t dyd, const void* dy,
                                                    const cudnnConvolutionDescriptor_t cd,
                                                    cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t ws_size,
                                                    const void* beta, const cudnnTensorDescriptor_t dxd, void* dx) {
  return conv(h, dn::Op::kConvBwdData, cd, algo, ws, ws_size, {tensorOf(wd, w), tensorOf(dyd, dy), tensorOf(dxd, dx)},
              alpha, beta);
}
FAKE_API cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha,
                                                      const cudnnTensorDescriptor_t xd, const void* x,
                                                      const cudnnTensorDescriptor_t dyd, const void* dy,
                                                      const cudnnConvolutionDescriptor_t cd,
                                                      cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_size,
                                                      const void* beta, const cudnnFilterDescriptor_t dwd, void* dw) {
  return conv(h, dn::Op::kConvBwdFilter, cd, algo, ws, ws_size,
              {tensorOf(xd, x), tensorOf(dyd, dy), tensorOf(dwd, dw)}, alpha, beta);
}
FAKE_API cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void* alpha,
                                                    const cudnnTensorDescriptor_t dyd, const void* dy,
                                                    const void* beta, const cudnnTensorDescriptor_t dbd, void* db) {
  return submit(h, args(dn::Op::kConvBwdBias, {tensorOf(dyd, dy), tensorOf(dbd, db)}, alpha, beta),
                "cudnnConvolutionBackwardBias");
}
FAKE_API cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t ad,
                                      const void* A, const void* beta, const cudnnTensorDescriptor_t cd, void* C) {
  return submit(h, args(dn::Op::kAddTensor, {tensorOf(ad, A), tensorOf(cd, C)}, alpha, beta), "cudnnAddTensor");
}
FAKE_API cudnnStatus_t cudnnOpTensor(cudnnHandle_t h, const cudnnOpTensorDescriptor_t od, const void* alpha1,
                                     const cudnnTensorDescriptor_t ad, const void* A, const void* alpha2,
                                     const cudnnTensorDescriptor_t bd, const void* B, const void* beta,
                                     const cudnnTensorDescriptor_t cd, void* C) {
  dn::Args a = args(dn::Op::kOpTensor, {tensorOf(ad, A), tensorOf(bd, B), tensorOf(cd, C)}, alpha1, beta);
  a.alpha2 = scalarOf(alpha2, a.t[0].type);
  a.tensor_op = od->op, a.tensor_op_type = od->type;
  return submit(h, a, "cudnnOpTensor");
}
FAKE_API cudnnStatus_t cudnnScaleTensor(cudnnHandle_t h, const cudnnTensorDescriptor_t yd, void* y, const void* alpha) {
  return submit(h, args(dn::Op::kScaleTensor, {tensorOf(yd, y)}, alpha, nullptr), "cudnnScaleTensor");
}
FAKE_API cudnnStatus_t cudnnSetTensor(cudnnHandle_t h, const cudnnTensorDescriptor_t yd, void* y, const void* value) {
  dn::Args a = args(dn::Op::kSetTensor, {tensorOf(yd, y)}, nullptr, nullptr);
  const int32_t t = yd->t.type;
  a.alpha = t == dn::kHalf   ? rgpu::common::halfToFloat(*static_cast<const uint16_t*>(value))
            : t == dn::kBf16 ? rgpu::common::bf16ToFloat(*static_cast<const uint16_t*>(value))
                             : scalarOf(value, t);
  return submit(h, a, "cudnnSetTensor");
}
FAKE_API cudnnStatus_t cudnnTransformTensor(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                            const void* x, const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  return submit(h, args(dn::Op::kTransformTensor, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta),
                "cudnnTransformTensor");
}
FAKE_API cudnnStatus_t cudnnActivationForward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                              const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                              const cudnnTensorDescriptor_t yd, void* y) {
  dn::Args a = args(dn::Op::kActivationFwd, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta);
  a.act = ad->a;
  return submit(h, a, "cudnnActivationForward");
}
FAKE_API cudnnStatus_t cudnnActivationBackward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                               const cudnnTensorDescriptor_t yd, const void* y,
                                               const cudnnTensorDescriptor_t dyd, const void* dy,
                                               const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                               const cudnnTensorDescriptor_t dxd, void* dx) {
  dn::Args a = args(dn::Op::kActivationBwd, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(xd, x), tensorOf(dxd, dx)},
                    alpha, beta);
  a.act = ad->a;
  return submit(h, a, "cudnnActivationBackward");
}
FAKE_API cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t h, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                           const void* alpha, const cudnnTensorDescriptor_t xd, const void* x,
                                           const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  dn::Args a = args(dn::Op::kSoftmaxFwd, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta);
  a.softmax_algo = algo, a.softmax_mode = mode;
  return submit(h, a, "cudnnSoftmaxForward");
}
FAKE_API cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t h, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                            const void* alpha, const cudnnTensorDescriptor_t yd, const void* y,
                                            const cudnnTensorDescriptor_t dyd, const void* dy, const void* beta,
                                            const cudnnTensorDescriptor_t dxd, void* dx) {
  dn::Args a = args(dn::Op::kSoftmaxBwd, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(dxd, dx)}, alpha, beta);
  a.softmax_algo = algo, a.softmax_mode = mode;
  return submit(h, a, "cudnnSoftmaxBackward");
}
FAKE_API cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                           const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                           const cudnnTensorDescriptor_t yd, void* y) {
  dn::Args a = args(dn::Op::kPoolingFwd, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta);
  a.pool = pd->p;
  return submit(h, a, "cudnnPoolingForward");
}
FAKE_API cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                            const cudnnTensorDescriptor_t yd, const void* y,
                                            const cudnnTensorDescriptor_t dyd, const void* dy,
                                            const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                            const cudnnTensorDescriptor_t dxd, void* dx) {
  dn::Args a = args(dn::Op::kPoolingBwd, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(xd, x), tensorOf(dxd, dx)},
                    alpha, beta);
  a.pool = pd->p;
  return submit(h, a, "cudnnPoolingBackward");
}
FAKE_API cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta, const cudnnTensorDescriptor_t xd,
    const void* x, const cudnnTensorDescriptor_t yd, void* y, const cudnnTensorDescriptor_t pd, const void* scale,
    const void* bias, double factor, void* rm, void* rv, double eps, void* sm, void* sv) {
  dn::Args a = args(dn::Op::kBnFwdTraining,
                    {tensorOf(xd, x), tensorOf(yd, y), tensorOf(pd, scale), tensorOf(pd, bias), tensorOf(pd, rm),
                     tensorOf(pd, rv), tensorOf(pd, sm), tensorOf(pd, sv)},
                    alpha, beta);
  a.bn_mode = mode, a.factor = factor, a.epsilon = eps;
  return submit(h, a, "cudnnBatchNormalizationForwardTraining");
}
FAKE_API cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta, const cudnnTensorDescriptor_t xd,
    const void* x, const cudnnTensorDescriptor_t yd, void* y, const cudnnTensorDescriptor_t pd, const void* scale,
    const void* bias, const void* mean, const void* var, double eps) {
  dn::Args a = args(dn::Op::kBnFwdInference,
                    {tensorOf(xd, x), tensorOf(yd, y), tensorOf(pd, scale), tensorOf(pd, bias), tensorOf(pd, mean),
                     tensorOf(pd, var)},
                    alpha, beta);
  a.bn_mode = mode, a.epsilon = eps;
  return submit(h, a, "cudnnBatchNormalizationForwardInference");
}
FAKE_API cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* ad, const void* bd, const void* ap, const void* bp,
    const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
    const cudnnTensorDescriptor_t dxd, void* dx, const cudnnTensorDescriptor_t pd, const void* scale, void* ds,
    void* db, double eps, const void* sm, const void* sv) {
  dn::Args a = args(dn::Op::kBnBwd,
                    {tensorOf(xd, x), tensorOf(dyd, dy), tensorOf(dxd, dx), tensorOf(pd, scale), tensorOf(pd, ds),
                     tensorOf(pd, db), tensorOf(pd, sm), tensorOf(pd, sv)},
                    ad, bd);
  a.alpha2 = scalarOf(ap, a.t[0].type), a.beta2 = scalarOf(bp, a.t[0].type);
  a.bn_mode = mode, a.epsilon = eps;
  return submit(h, a, "cudnnBatchNormalizationBackward");
}
FAKE_API cudnnStatus_t cudnnLRNCrossChannelForward(cudnnHandle_t h, cudnnLRNDescriptor_t d, cudnnLRNMode_t,
                                                   const void* alpha, const cudnnTensorDescriptor_t xd, const void* x,
                                                   const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  dn::Args a = args(dn::Op::kLrnFwd, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta);
  a.lrn_n = static_cast<int32_t>(d->n), a.lrn_alpha = d->alpha, a.lrn_beta = d->beta, a.lrn_k = d->k;
  return submit(h, a, "cudnnLRNCrossChannelForward");
}
FAKE_API cudnnStatus_t cudnnLRNCrossChannelBackward(cudnnHandle_t h, cudnnLRNDescriptor_t d, cudnnLRNMode_t,
                                                    const void* alpha, const cudnnTensorDescriptor_t yd, const void* y,
                                                    const cudnnTensorDescriptor_t dyd, const void* dy,
                                                    const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                                    const cudnnTensorDescriptor_t dxd, void* dx) {
  dn::Args a = args(dn::Op::kLrnBwd, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(xd, x), tensorOf(dxd, dx)}, alpha,
                    beta);
  a.lrn_n = static_cast<int32_t>(d->n), a.lrn_alpha = d->alpha, a.lrn_beta = d->beta, a.lrn_k = d->k;
  return submit(h, a, "cudnnLRNCrossChannelBackward");
}
FAKE_API cudnnStatus_t cudnnGetReductionWorkspaceSize(cudnnHandle_t, const cudnnReduceTensorDescriptor_t,
                                                      const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
                                                      size_t* bytes) {
  *bytes = kWorkspaceBytes;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnReduceTensor(cudnnHandle_t h, const cudnnReduceTensorDescriptor_t r, void* indices,
                                         size_t indices_size, void* ws, size_t ws_size, const void* alpha,
                                         const cudnnTensorDescriptor_t ad, const void* A, const void* beta,
                                         const cudnnTensorDescriptor_t cd, void* C) {
  if (!ws || ws_size < kWorkspaceBytes) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kReduceTensor, {tensorOf(ad, A), tensorOf(cd, C)}, alpha, beta);
  a.reduce_op = r->op, a.reduce_type = r->type, a.reduce_indices = r->indices;
  a.indices = reinterpret_cast<uint64_t>(indices), a.indices_size = indices_size;
  return submit(h, a, "cudnnReduceTensor with a workspace");
}
FAKE_API cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t h, float p, void* states,
                                                 size_t size, unsigned long long seed) {
  d->dropout = p, d->states = states, d->states_size = size, d->seed = seed;
  dn::Args a;
  a.op = dn::Op::kDropoutInit;
  a.dropout = p;
  a.states = reinterpret_cast<uint64_t>(states), a.states_size = size, a.seed = seed;
  return submit(h, a, "cudnnSetDropoutDescriptor (states seeded)");
}
FAKE_API cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t, float p, void* states,
                                                     size_t size, unsigned long long seed) {
  d->dropout = p, d->states = states, d->states_size = size, d->seed = seed;
  return CUDNN_STATUS_SUCCESS;
}
FAKE_API cudnnStatus_t cudnnDropoutForward(cudnnHandle_t h, const cudnnDropoutDescriptor_t d,
                                           const cudnnTensorDescriptor_t xd, const void* x,
                                           const cudnnTensorDescriptor_t yd, void* y, void* reserve, size_t size) {
  dn::Args a = args(dn::Op::kDropoutFwd, {tensorOf(xd, x), tensorOf(yd, y)}, nullptr, nullptr);
  a.dropout = d->dropout;
  a.states = reinterpret_cast<uint64_t>(d->states), a.states_size = d->states_size, a.seed = d->seed;
  a.reserve = reinterpret_cast<uint64_t>(reserve), a.reserve_size = size;
  return submit(h, a, "cudnnDropoutForward (restored states)");
}
FAKE_API cudnnStatus_t cudnnDropoutBackward(cudnnHandle_t h, const cudnnDropoutDescriptor_t d,
                                            const cudnnTensorDescriptor_t dyd, const void* dy,
                                            const cudnnTensorDescriptor_t dxd, void* dx, void* reserve, size_t size) {
  dn::Args a = args(dn::Op::kDropoutBwd, {tensorOf(dyd, dy), tensorOf(dxd, dx)}, nullptr, nullptr);
  a.dropout = d->dropout;
  a.states = reinterpret_cast<uint64_t>(d->states), a.states_size = d->states_size, a.seed = d->seed;
  a.reserve = reinterpret_cast<uint64_t>(reserve), a.reserve_size = size;
  return submit(h, a, "cudnnDropoutBackward");
}

}  // extern "C"
