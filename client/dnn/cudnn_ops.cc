// rgpu's libcudnn.so.9, the operations other than convolutions: tensor
// arithmetic, activation, softmax, pooling, batch normalisation and dropout
// (docs/cudnn.md). Each builds common::dnn::Args from its descriptors and
// travels as cudnn_api.cc's convolutions do.
#include "client/dnn/cudnn_client.h"
#include "client/dnn/cudnn_descriptors.h"
#include "common/half.h"
#include "common/log.h"

#include <string>

namespace dn = rgpu::common::dnn;
using rgpu::client::dnn::live;
using rgpu::client::dnn::scalarOf;
using rgpu::client::dnn::send;
using rgpu::client::dnn::tensorOf;

namespace {

dn::Args args(dn::Op op, std::vector<dn::Tensor> t, const void* alpha, const void* beta, int32_t type) {
  dn::Args a;
  a.op = op;
  a.t = std::move(t);
  a.alpha = scalarOf(alpha, type);
  a.beta = scalarOf(beta, type);
  return a;
}

}  // namespace

extern "C" {

#define DNN_API __attribute__((visibility("default")))

// ---- tensors ----
DNN_API cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t ad,
                                     const void* A, const void* beta, const cudnnTensorDescriptor_t cd, void* C) {
  if (!alpha || !beta || !cd) return CUDNN_STATUS_BAD_PARAM;
  return send(h, args(dn::Op::kAddTensor, {tensorOf(ad, A), tensorOf(cd, C)}, alpha, beta, cd->t.type));
}
DNN_API cudnnStatus_t cudnnOpTensor(cudnnHandle_t h, const cudnnOpTensorDescriptor_t od, const void* alpha1,
                                    const cudnnTensorDescriptor_t ad, const void* A, const void* alpha2,
                                    const cudnnTensorDescriptor_t bd, const void* B, const void* beta,
                                    const cudnnTensorDescriptor_t cd, void* C) {
  if (!od || !alpha1 || !alpha2 || !beta || !cd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kOpTensor, {tensorOf(ad, A), tensorOf(bd, B), tensorOf(cd, C)}, alpha1, beta, cd->t.type);
  a.alpha2 = scalarOf(alpha2, cd->t.type);
  a.tensor_op = od->op, a.tensor_op_type = od->type;
  if (od->op >= CUDNN_OP_TENSOR_SQRT && !B) a.t[1] = a.t[0];  // (B is ignored by the unary operations)
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnScaleTensor(cudnnHandle_t h, const cudnnTensorDescriptor_t yd, void* y, const void* alpha) {
  if (!alpha || !yd) return CUDNN_STATUS_BAD_PARAM;
  return send(h, args(dn::Op::kScaleTensor, {tensorOf(yd, y)}, alpha, nullptr, yd->t.type));
}
DNN_API cudnnStatus_t cudnnSetTensor(cudnnHandle_t h, const cudnnTensorDescriptor_t yd, void* y, const void* value) {
  if (!value || !yd) return CUDNN_STATUS_BAD_PARAM;
  // The value is of y's own type (half and bfloat16 included).
  double v = 0;
  switch (yd->t.type) {
    case dn::kDouble: v = scalarOf(value, dn::kDouble); break;
    case dn::kHalf: v = rgpu::common::halfToFloat(*static_cast<const uint16_t*>(value)); break;
    case dn::kBf16: v = rgpu::common::bf16ToFloat(*static_cast<const uint16_t*>(value)); break;
    default: v = scalarOf(value, dn::kFloat);
  }
  dn::Args a = args(dn::Op::kSetTensor, {tensorOf(yd, y)}, nullptr, nullptr, yd->t.type);
  a.alpha = v;
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnTransformTensor(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                           const void* x, const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  if (!alpha || !beta || !yd) return CUDNN_STATUS_BAD_PARAM;
  return send(h, args(dn::Op::kTransformTensor, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta, yd->t.type));
}

// ---- activation ----
DNN_API cudnnStatus_t cudnnActivationForward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                             const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                             const cudnnTensorDescriptor_t yd, void* y) {
  if (!ad || !alpha || !beta || !yd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kActivationFwd, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta, yd->t.type);
  a.act = ad->a;
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnActivationBackward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                              const cudnnTensorDescriptor_t yd, const void* y,
                                              const cudnnTensorDescriptor_t dyd, const void* dy,
                                              const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                              const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!ad || !alpha || !beta || !dxd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kActivationBwd, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(xd, x), tensorOf(dxd, dx)},
                    alpha, beta, dxd->t.type);
  a.act = ad->a;
  return send(h, a);
}

// ---- softmax ----
DNN_API cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t h, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                          const void* alpha, const cudnnTensorDescriptor_t xd, const void* x,
                                          const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  if (!alpha || !beta || !yd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kSoftmaxFwd, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta, yd->t.type);
  a.softmax_algo = algo, a.softmax_mode = mode;
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t h, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                           const void* alpha, const cudnnTensorDescriptor_t yd, const void* y,
                                           const cudnnTensorDescriptor_t dyd, const void* dy, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!alpha || !beta || !dxd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a =
      args(dn::Op::kSoftmaxBwd, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(dxd, dx)}, alpha, beta, dxd->t.type);
  a.softmax_algo = algo, a.softmax_mode = mode;
  return send(h, a);
}

// ---- pooling ----
DNN_API cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                          const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                          const cudnnTensorDescriptor_t yd, void* y) {
  if (!pd || !alpha || !beta || !yd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kPoolingFwd, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta, yd->t.type);
  a.pool = pd->p;
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                           const cudnnTensorDescriptor_t yd, const void* y,
                                           const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!pd || !alpha || !beta || !dxd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kPoolingBwd, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(xd, x), tensorOf(dxd, dx)},
                    alpha, beta, dxd->t.type);
  a.pool = pd->p;
  return send(h, a);
}

// ---- batch normalisation ----
// Each with a descriptor for the scale and bias (and their gradients) and one
// for the statistics: the batch-normalisation calls pass one for both, the
// cudnnNormalization* calls their two.
namespace {
cudnnStatus_t bnForwardTraining(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
                                const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t yd,
                                void* y, const cudnnTensorDescriptor_t pd, const void* scale, const void* bias,
                                double factor, const cudnnTensorDescriptor_t sd, void* running_mean,
                                void* running_var, double epsilon, void* save_mean, void* save_inv_var) {
  if (!alpha || !beta || !yd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kBnFwdTraining,
                    {tensorOf(xd, x), tensorOf(yd, y), tensorOf(pd, scale), tensorOf(pd, bias),
                     tensorOf(sd, running_mean), tensorOf(sd, running_var), tensorOf(sd, save_mean),
                     tensorOf(sd, save_inv_var)},
                    alpha, beta, yd->t.type);
  a.bn_mode = mode, a.factor = factor, a.epsilon = epsilon;
  return send(h, a);
}
cudnnStatus_t bnForwardInference(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
                                 const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t yd,
                                 void* y, const cudnnTensorDescriptor_t pd, const void* scale, const void* bias,
                                 const cudnnTensorDescriptor_t sd, const void* mean, const void* var, double epsilon) {
  if (!alpha || !beta || !yd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kBnFwdInference,
                    {tensorOf(xd, x), tensorOf(yd, y), tensorOf(pd, scale), tensorOf(pd, bias), tensorOf(sd, mean),
                     tensorOf(sd, var)},
                    alpha, beta, yd->t.type);
  a.bn_mode = mode, a.epsilon = epsilon;
  return send(h, a);
}
cudnnStatus_t bnBackward(cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha_data, const void* beta_data,
                         const void* alpha_param, const void* beta_param, const cudnnTensorDescriptor_t xd,
                         const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
                         const cudnnTensorDescriptor_t dxd, void* dx, const cudnnTensorDescriptor_t pd,
                         const void* scale, void* dscale, void* dbias, double epsilon,
                         const cudnnTensorDescriptor_t sd, const void* saved_mean, const void* saved_inv_var) {
  if (!alpha_data || !beta_data || !alpha_param || !beta_param || !dxd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = args(dn::Op::kBnBwd,
                    {tensorOf(xd, x), tensorOf(dyd, dy), tensorOf(dxd, dx), tensorOf(pd, scale), tensorOf(pd, dscale),
                     tensorOf(pd, dbias), tensorOf(sd, saved_mean), tensorOf(sd, saved_inv_var)},
                    alpha_data, beta_data, dxd->t.type);
  a.alpha2 = scalarOf(alpha_param, dxd->t.type), a.beta2 = scalarOf(beta_param, dxd->t.type);
  a.bn_mode = mode, a.epsilon = epsilon;
  return send(h, a);
}
}  // namespace

DNN_API cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta, const cudnnTensorDescriptor_t xd,
    const void* x, const cudnnTensorDescriptor_t yd, void* y, const cudnnTensorDescriptor_t pd, const void* scale,
    const void* bias, double factor, void* running_mean, void* running_var, double epsilon, void* save_mean,
    void* save_inv_var) {
  return bnForwardTraining(h, mode, alpha, beta, xd, x, yd, y, pd, scale, bias, factor, pd, running_mean, running_var,
                           epsilon, save_mean, save_inv_var);
}
DNN_API cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha, const void* beta, const cudnnTensorDescriptor_t xd,
    const void* x, const cudnnTensorDescriptor_t yd, void* y, const cudnnTensorDescriptor_t pd, const void* scale,
    const void* bias, const void* mean, const void* var, double epsilon) {
  return bnForwardInference(h, mode, alpha, beta, xd, x, yd, y, pd, scale, bias, pd, mean, var, epsilon);
}
DNN_API cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, const void* alpha_data, const void* beta_data, const void* alpha_param,
    const void* beta_param, const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t dyd,
    const void* dy, const cudnnTensorDescriptor_t dxd, void* dx, const cudnnTensorDescriptor_t pd, const void* scale,
    void* dscale, void* dbias, double epsilon, const void* saved_mean, const void* saved_inv_var) {
  return bnBackward(h, mode, alpha_data, beta_data, alpha_param, beta_param, xd, x, dyd, dy, dxd, dx, pd, scale,
                    dscale, dbias, epsilon, pd, saved_mean, saved_inv_var);
}

// The Ex forms with bnOps = CUDNN_BATCHNORM_OPS_BN: the same computation as the plain calls (no workspace, no
// reserve space); the fused add and activation (OPS_BN_ACTIVATION, OPS_BN_ADD_ACTIVATION) are not built.
namespace {
cudnnStatus_t bnOpsOnly(cudnnBatchNormOps_t ops, const char* call) {
  if (ops == CUDNN_BATCHNORM_OPS_BN) return CUDNN_STATUS_SUCCESS;
  rgpu::common::logOnce(std::string("cudnn-bnops:") + call,
                        std::string(call) + ": only CUDNN_BATCHNORM_OPS_BN is built in rgpu's cuDNN (the fused add "
                                            "and activation answer CUDNN_STATUS_NOT_SUPPORTED; docs/cudnn.md)");
  return CUDNN_STATUS_NOT_SUPPORTED;
}
}  // namespace

DNN_API cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t h, cudnnBatchNormMode_t, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnActivationDescriptor_t, size_t* bytes) {
  if (!live(h) || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return bnOpsOnly(ops, "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
}
DNN_API cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t h, cudnnBatchNormMode_t, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnActivationDescriptor_t, size_t* bytes) {
  if (!live(h) || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return bnOpsOnly(ops, "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
}
DNN_API cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t h, cudnnBatchNormMode_t,
                                                                          cudnnBatchNormOps_t ops,
                                                                          const cudnnActivationDescriptor_t,
                                                                          const cudnnTensorDescriptor_t,
                                                                          size_t* bytes) {
  if (!live(h) || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return bnOpsOnly(ops, "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
}
DNN_API cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t, const void*,
    const cudnnTensorDescriptor_t yd, void* y, const cudnnTensorDescriptor_t pd, const void* scale, const void* bias,
    double factor, void* running_mean, void* running_var, double epsilon, void* save_mean, void* save_inv_var,
    cudnnActivationDescriptor_t, void*, size_t, void*, size_t) {
  if (cudnnStatus_t st = bnOpsOnly(ops, "cudnnBatchNormalizationForwardTrainingEx"); st != CUDNN_STATUS_SUCCESS) return st;
  return cudnnBatchNormalizationForwardTraining(h, mode, alpha, beta, xd, x, yd, y, pd, scale, bias, factor,
                                                running_mean, running_var, epsilon, save_mean, save_inv_var);
}
DNN_API cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void* alpha_data, const void* beta_data,
    const void* alpha_param, const void* beta_param, const cudnnTensorDescriptor_t xd, const void* x,
    const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t dyd, const void* dy,
    const cudnnTensorDescriptor_t, void*, const cudnnTensorDescriptor_t dxd, void* dx, const cudnnTensorDescriptor_t pd,
    const void* scale, const void*, void* dscale, void* dbias, double epsilon, const void* saved_mean,
    const void* saved_inv_var, cudnnActivationDescriptor_t, void*, size_t, void*, size_t) {
  if (cudnnStatus_t st = bnOpsOnly(ops, "cudnnBatchNormalizationBackwardEx"); st != CUDNN_STATUS_SUCCESS) return st;
  return cudnnBatchNormalizationBackward(h, mode, alpha_data, beta_data, alpha_param, beta_param, xd, x, dyd, dy, dxd,
                                         dx, pd, scale, dscale, dbias, epsilon, saved_mean, saved_inv_var);
}

// The cudnnNormalization* calls (deprecated in cuDNN 9, still exported):
// with normOps = CUDNN_NORM_OPS_NORM and groupCnt 1 they are batch
// normalisation -- CUDNN_NORM_PER_ACTIVATION as CUDNN_BATCHNORM_PER_ACTIVATION,
// CUDNN_NORM_PER_CHANNEL as CUDNN_BATCHNORM_SPATIAL -- with the scale and bias
// and the statistics each under their own descriptor; no workspace, no
// reserve space. The fused activation and add, and other group counts, are
// not built (CUDNN_STATUS_NOT_SUPPORTED, logged once).
namespace {
cudnnStatus_t normOnly(cudnnNormMode_t mode, cudnnNormOps_t ops, int groups, const char* call,
                       cudnnBatchNormMode_t* bn) {
  if (mode != CUDNN_NORM_PER_ACTIVATION && mode != CUDNN_NORM_PER_CHANNEL) return CUDNN_STATUS_BAD_PARAM;
  if (bn) *bn = mode == CUDNN_NORM_PER_ACTIVATION ? CUDNN_BATCHNORM_PER_ACTIVATION : CUDNN_BATCHNORM_SPATIAL;
  if (ops == CUDNN_NORM_OPS_NORM && groups == 1) return CUDNN_STATUS_SUCCESS;
  rgpu::common::logOnce(std::string("cudnn-normops:") + call,
                        std::string(call) + ": only CUDNN_NORM_OPS_NORM with groupCnt 1 is built in rgpu's cuDNN (the "
                                            "fused add and activation, and other group counts, answer "
                                            "CUDNN_STATUS_NOT_SUPPORTED; docs/cudnn.md)");
  return CUDNN_STATUS_NOT_SUPPORTED;
}
}  // namespace

DNN_API cudnnStatus_t cudnnDeriveNormTensorDescriptor(cudnnTensorDescriptor_t scale_bias, cudnnTensorDescriptor_t stats,
                                                      const cudnnTensorDescriptor_t x, cudnnNormMode_t mode,
                                                      int groups) {
  cudnnBatchNormMode_t bn;
  if (cudnnStatus_t st = normOnly(mode, CUDNN_NORM_OPS_NORM, groups, "cudnnDeriveNormTensorDescriptor", &bn);
      st != CUDNN_STATUS_SUCCESS)
    return st;
  if (cudnnStatus_t st = cudnnDeriveBNTensorDescriptor(scale_bias, x, bn); st != CUDNN_STATUS_SUCCESS) return st;
  return cudnnDeriveBNTensorDescriptor(stats, x, bn);
}
DNN_API cudnnStatus_t cudnnGetNormalizationForwardTrainingWorkspaceSize(
    cudnnHandle_t h, cudnnNormMode_t mode, cudnnNormOps_t ops, cudnnNormAlgo_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnActivationDescriptor_t, const cudnnTensorDescriptor_t, size_t* bytes, int groups) {
  if (!live(h) || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return normOnly(mode, ops, groups, "cudnnGetNormalizationForwardTrainingWorkspaceSize", nullptr);
}
DNN_API cudnnStatus_t cudnnGetNormalizationBackwardWorkspaceSize(
    cudnnHandle_t h, cudnnNormMode_t mode, cudnnNormOps_t ops, cudnnNormAlgo_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t, const cudnnActivationDescriptor_t,
    const cudnnTensorDescriptor_t, size_t* bytes, int groups) {
  if (!live(h) || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return normOnly(mode, ops, groups, "cudnnGetNormalizationBackwardWorkspaceSize", nullptr);
}
DNN_API cudnnStatus_t cudnnGetNormalizationTrainingReserveSpaceSize(cudnnHandle_t h, cudnnNormMode_t mode,
                                                                    cudnnNormOps_t ops, cudnnNormAlgo_t,
                                                                    const cudnnActivationDescriptor_t,
                                                                    const cudnnTensorDescriptor_t, size_t* bytes,
                                                                    int groups) {
  if (!live(h) || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = 0;
  return normOnly(mode, ops, groups, "cudnnGetNormalizationTrainingReserveSpaceSize", nullptr);
}
DNN_API cudnnStatus_t cudnnNormalizationForwardTraining(
    cudnnHandle_t h, cudnnNormMode_t mode, cudnnNormOps_t ops, cudnnNormAlgo_t, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t pd, const void* scale,
    const void* bias, double factor, const cudnnTensorDescriptor_t sd, void* running_mean, void* running_var,
    double epsilon, void* save_mean, void* save_inv_var, cudnnActivationDescriptor_t, const cudnnTensorDescriptor_t,
    const void*, const cudnnTensorDescriptor_t yd, void* y, void*, size_t, void*, size_t, int groups) {
  cudnnBatchNormMode_t bn;
  if (cudnnStatus_t st = normOnly(mode, ops, groups, "cudnnNormalizationForwardTraining", &bn);
      st != CUDNN_STATUS_SUCCESS)
    return st;
  return bnForwardTraining(h, bn, alpha, beta, xd, x, yd, y, pd, scale, bias, factor, sd, running_mean, running_var,
                           epsilon, save_mean, save_inv_var);
}
DNN_API cudnnStatus_t cudnnNormalizationForwardInference(
    cudnnHandle_t h, cudnnNormMode_t mode, cudnnNormOps_t ops, cudnnNormAlgo_t, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t pd, const void* scale,
    const void* bias, const cudnnTensorDescriptor_t sd, const void* mean, const void* var,
    const cudnnTensorDescriptor_t, const void*, cudnnActivationDescriptor_t, const cudnnTensorDescriptor_t yd, void* y,
    double epsilon, int groups) {
  cudnnBatchNormMode_t bn;
  if (cudnnStatus_t st = normOnly(mode, ops, groups, "cudnnNormalizationForwardInference", &bn);
      st != CUDNN_STATUS_SUCCESS)
    return st;
  return bnForwardInference(h, bn, alpha, beta, xd, x, yd, y, pd, scale, bias, sd, mean, var, epsilon);
}
DNN_API cudnnStatus_t cudnnNormalizationBackward(
    cudnnHandle_t h, cudnnNormMode_t mode, cudnnNormOps_t ops, cudnnNormAlgo_t, const void* alpha_data,
    const void* beta_data, const void* alpha_param, const void* beta_param, const cudnnTensorDescriptor_t xd,
    const void* x, const cudnnTensorDescriptor_t, const void*, const cudnnTensorDescriptor_t dyd, const void* dy,
    const cudnnTensorDescriptor_t, void*, const cudnnTensorDescriptor_t dxd, void* dx,
    const cudnnTensorDescriptor_t pd, const void* scale, const void*, void* dscale, void* dbias, double epsilon,
    const cudnnTensorDescriptor_t sd, const void* saved_mean, const void* saved_inv_var, cudnnActivationDescriptor_t,
    void*, size_t, void*, size_t, int groups) {
  cudnnBatchNormMode_t bn;
  if (cudnnStatus_t st = normOnly(mode, ops, groups, "cudnnNormalizationBackward", &bn); st != CUDNN_STATUS_SUCCESS)
    return st;
  return bnBackward(h, bn, alpha_data, beta_data, alpha_param, beta_param, xd, x, dyd, dy, dxd, dx, pd, scale, dscale,
                    dbias, epsilon, sd, saved_mean, saved_inv_var);
}

// ---- local response normalisation across channels ----
namespace {
dn::Args lrnArgs(dn::Op op, const cudnnLRNStruct* d, std::vector<dn::Tensor> t, const void* alpha, const void* beta,
                 int32_t type) {
  dn::Args a = args(op, std::move(t), alpha, beta, type);
  a.lrn_n = static_cast<int32_t>(d->n), a.lrn_alpha = d->alpha, a.lrn_beta = d->beta, a.lrn_k = d->k;
  return a;
}
}  // namespace

DNN_API cudnnStatus_t cudnnLRNCrossChannelForward(cudnnHandle_t h, cudnnLRNDescriptor_t d, cudnnLRNMode_t mode,
                                                  const void* alpha, const cudnnTensorDescriptor_t xd, const void* x,
                                                  const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  if (!d || mode != CUDNN_LRN_CROSS_CHANNEL_DIM1 || !alpha || !beta || !yd) return CUDNN_STATUS_BAD_PARAM;
  return send(h, lrnArgs(dn::Op::kLrnFwd, d, {tensorOf(xd, x), tensorOf(yd, y)}, alpha, beta, yd->t.type));
}
DNN_API cudnnStatus_t cudnnLRNCrossChannelBackward(cudnnHandle_t h, cudnnLRNDescriptor_t d, cudnnLRNMode_t mode,
                                                   const void* alpha, const cudnnTensorDescriptor_t yd, const void* y,
                                                   const cudnnTensorDescriptor_t dyd, const void* dy,
                                                   const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                                   const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!d || mode != CUDNN_LRN_CROSS_CHANNEL_DIM1 || !alpha || !beta || !dxd) return CUDNN_STATUS_BAD_PARAM;
  return send(h, lrnArgs(dn::Op::kLrnBwd, d, {tensorOf(yd, y), tensorOf(dyd, dy), tensorOf(xd, x), tensorOf(dxd, dx)},
                         alpha, beta, dxd->t.type));
}

// ---- reductions ----
namespace {
dn::Args reduction(const cudnnReduceTensorStruct* r, const cudnnTensorDescriptor_t ad, const void* A,
                   const cudnnTensorDescriptor_t cd, void* C) {
  dn::Args a;
  a.op = dn::Op::kReduceTensor;
  a.t = {tensorOf(ad, A), tensorOf(cd, C)};
  a.reduce_op = r->op, a.reduce_type = r->type, a.reduce_indices = r->indices;
  return a;
}
bool indexed(const cudnnReduceTensorStruct* r) {
  return r->indices == CUDNN_REDUCE_TENSOR_FLATTENED_INDICES &&
         (r->op == CUDNN_REDUCE_TENSOR_MIN || r->op == CUDNN_REDUCE_TENSOR_MAX || r->op == CUDNN_REDUCE_TENSOR_AMAX);
}
}  // namespace

DNN_API cudnnStatus_t cudnnGetReductionIndicesSize(cudnnHandle_t h, const cudnnReduceTensorDescriptor_t r,
                                                   const cudnnTensorDescriptor_t ad, const cudnnTensorDescriptor_t cd,
                                                   size_t* bytes) {
  if (!live(h) || !r || !ad || !cd || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = indexed(r) ? static_cast<size_t>(cd->t.elements()) * 4 : 0;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetReductionWorkspaceSize(cudnnHandle_t h, const cudnnReduceTensorDescriptor_t r,
                                                     const cudnnTensorDescriptor_t ad,
                                                     const cudnnTensorDescriptor_t cd, size_t* bytes) {
  if (!live(h) || !r) return CUDNN_STATUS_BAD_PARAM;
  return rgpu::client::dnn::size(h, dn::Query::kReduceWorkspace, reduction(r, ad, nullptr, cd, nullptr), bytes,
                                 "cudnnGetReductionWorkspaceSize");
}
DNN_API cudnnStatus_t cudnnReduceTensor(cudnnHandle_t h, const cudnnReduceTensorDescriptor_t r, void* indices,
                                        size_t indices_size, void* ws, size_t ws_size, const void* alpha,
                                        const cudnnTensorDescriptor_t ad, const void* A, const void* beta,
                                        const cudnnTensorDescriptor_t cd, void* C) {
  if (!r || !alpha || !beta || !cd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a = reduction(r, ad, A, cd, C);
  a.alpha = scalarOf(alpha, cd->t.type), a.beta = scalarOf(beta, cd->t.type);
  a.indices = reinterpret_cast<uint64_t>(indices), a.indices_size = indices ? indices_size : 0;
  a.workspace = reinterpret_cast<uint64_t>(ws), a.workspace_size = ws ? ws_size : 0;
  return send(h, a);
}

// ---- dropout ----
DNN_API cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t h, size_t* bytes) {
  if (!live(h)) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a;
  a.op = dn::Op::kDropoutInit;
  return rgpu::client::dnn::size(h, dn::Query::kDropoutStates, a, bytes, "cudnnDropoutGetStatesSize");
}
DNN_API cudnnStatus_t cudnnDropoutGetReserveSpaceSize(cudnnTensorDescriptor_t xd, size_t* bytes) {
  if (!xd) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a;
  a.op = dn::Op::kDropoutFwd;
  a.t = {tensorOf(xd, nullptr), tensorOf(xd, nullptr)};
  return rgpu::client::dnn::size(nullptr, dn::Query::kDropoutReserve, a, bytes, "cudnnDropoutGetReserveSpaceSize");
}
// Sets the descriptor and, with states, seeds them on the handle's stream (cuDNN launches a kernel for it).
DNN_API cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t h, float dropout,
                                                void* states, size_t states_size, unsigned long long seed) {
  if (!d || !live(h) || !(dropout >= 0.f && dropout < 1.f)) return CUDNN_STATUS_BAD_PARAM;
  d->dropout = dropout, d->states = states, d->states_size = states_size, d->seed = seed;
  if (!states) return CUDNN_STATUS_SUCCESS;
  dn::Args a;
  a.op = dn::Op::kDropoutInit;
  a.dropout = dropout;
  a.states = reinterpret_cast<uint64_t>(states), a.states_size = states_size, a.seed = seed;
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t h, float dropout,
                                                    void* states, size_t states_size, unsigned long long seed) {
  if (!d || !live(h) || !(dropout >= 0.f && dropout < 1.f)) return CUDNN_STATUS_BAD_PARAM;
  d->dropout = dropout, d->states = states, d->states_size = states_size, d->seed = seed;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnDropoutForward(cudnnHandle_t h, const cudnnDropoutDescriptor_t d,
                                          const cudnnTensorDescriptor_t xd, const void* x,
                                          const cudnnTensorDescriptor_t yd, void* y, void* reserve,
                                          size_t reserve_size) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a;
  a.op = dn::Op::kDropoutFwd;
  a.t = {tensorOf(xd, x), tensorOf(yd, y)};
  a.dropout = d->dropout;
  a.states = reinterpret_cast<uint64_t>(d->states), a.states_size = d->states_size, a.seed = d->seed;
  a.reserve = reinterpret_cast<uint64_t>(reserve), a.reserve_size = reserve_size;
  return send(h, a);
}
DNN_API cudnnStatus_t cudnnDropoutBackward(cudnnHandle_t h, const cudnnDropoutDescriptor_t d,
                                           const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnTensorDescriptor_t dxd, void* dx, void* reserve,
                                           size_t reserve_size) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  dn::Args a;
  a.op = dn::Op::kDropoutBwd;
  a.t = {tensorOf(dyd, dy), tensorOf(dxd, dx)};
  a.dropout = d->dropout;
  a.states = reinterpret_cast<uint64_t>(d->states), a.states_size = d->states_size, a.seed = d->seed;
  a.reserve = reinterpret_cast<uint64_t>(reserve), a.reserve_size = reserve_size;
  return send(h, a);
}

}  // extern "C"
