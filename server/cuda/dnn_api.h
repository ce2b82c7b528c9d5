// NVIDIA's cuDNN (the legacy API's descriptors and operations), loaded by a
// worker at run time like cuBLAS (blas_api.h): dlopen of libcudnn.so.9
// ([cuda] cudnn_library; tests point it at a fake) on the session's first
// cuDNN call, and dlsym of each entry point, typed by NVIDIA's header.
#pragma once

#include <cudnn.h>

#include <memory>
#include <string>

#include "common/status.h"

#define RGPU_DNN_FUNCTIONS(X)                                                                                   \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnCreateTensorDescriptor)                               \
  X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptor) X(cudnnCreateFilterDescriptor)                  \
  X(cudnnDestroyFilterDescriptor) X(cudnnSetFilterNdDescriptor) X(cudnnCreateConvolutionDescriptor)             \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor) X(cudnnSetConvolutionGroupCount)      \
  X(cudnnSetConvolutionMathType) X(cudnnCreatePoolingDescriptor) X(cudnnDestroyPoolingDescriptor)               \
  X(cudnnSetPoolingNdDescriptor) X(cudnnCreateActivationDescriptor) X(cudnnDestroyActivationDescriptor)         \
  X(cudnnSetActivationDescriptor) X(cudnnSetActivationDescriptorSwishBeta) X(cudnnCreateOpTensorDescriptor)     \
  X(cudnnDestroyOpTensorDescriptor) X(cudnnSetOpTensorDescriptor) X(cudnnCreateDropoutDescriptor)               \
  X(cudnnDestroyDropoutDescriptor) X(cudnnSetDropoutDescriptor) X(cudnnRestoreDropoutDescriptor)                \
  X(cudnnDropoutGetStatesSize) X(cudnnDropoutGetReserveSpaceSize) X(cudnnGetConvolutionForwardWorkspaceSize)    \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnGetConvolutionBackwardFilterWorkspaceSize)             \
  X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData) X(cudnnConvolutionBackwardFilter)                  \
  X(cudnnConvolutionBackwardBias) X(cudnnAddTensor) X(cudnnOpTensor) X(cudnnScaleTensor) X(cudnnSetTensor)      \
  X(cudnnTransformTensor) X(cudnnActivationForward) X(cudnnActivationBackward) X(cudnnSoftmaxForward)           \
  X(cudnnSoftmaxBackward) X(cudnnPoolingForward) X(cudnnPoolingBackward)                                         \
  X(cudnnBatchNormalizationForwardTraining) X(cudnnBatchNormalizationForwardInference)                          \
  X(cudnnBatchNormalizationBackward) X(cudnnDropoutForward) X(cudnnDropoutBackward)                           \
  X(cudnnCreateReduceTensorDescriptor) X(cudnnDestroyReduceTensorDescriptor) X(cudnnSetReduceTensorDescriptor)  \
  X(cudnnGetReductionWorkspaceSize) X(cudnnReduceTensor) X(cudnnCreateLRNDescriptor) X(cudnnDestroyLRNDescriptor)    \
  X(cudnnSetLRNDescriptor) X(cudnnLRNCrossChannelForward) X(cudnnLRNCrossChannelBackward)

namespace rgpu::server::cuda {

class DnnApi {
 public:
  static Result<std::unique_ptr<DnnApi>> load(const std::string& cudnn);
  ~DnnApi() = default;  // (the library stays mapped, as cuBLAS's does)
  DnnApi(const DnnApi&) = delete;
  DnnApi& operator=(const DnnApi&) = delete;

  // A cudnnStatus_t as a Status naming the call.
  static Status check(cudnnStatus_t s, const char* call);

#define RGPU_DNN_FN(name) decltype(&::name) name = nullptr;
  RGPU_DNN_FUNCTIONS(RGPU_DNN_FN)
#undef RGPU_DNN_FN

 private:
  DnnApi() = default;
  void* lib_ = nullptr;
};

}  // namespace rgpu::server::cuda
