// cuDNN's descriptors as rgpu keeps them (client/dnn, docs/cudnn.md): host
// objects made and read without a round trip, each holding what
// common::dnn::Args carries -- a tensor's type, dimensions and strides, a
// filter's format, a convolution's padding, strides, dilations, mode, group
// count and math type, and so on. cudnn_descriptors.cc defines every
// cudnnCreate/Set/Get/Destroy*Descriptor call of these kinds, answering as
// cuDNN does (CUDNN_STATUS_BAD_PARAM for what it refuses).
//
// The same file is built into the fake cuDNN the CUDA backend's tests load
// (tests/fake_driver/fake_cudnn.cc), so the descriptors rgpu's worker makes
// with NVIDIA's calls are read back exactly as a program's were.
#pragma once

#include <cudnn.h>

#include "common/dnn_args.h"

struct cudnnTensorStruct {
  rgpu::common::dnn::Tensor t;
  int32_t format = 0;  // how the strides were made (cudnnTensorFormat_t), for Get*
};
struct cudnnFilterStruct {
  rgpu::common::dnn::Tensor t;  // strides from its format; filter_format set
};
struct cudnnConvolutionStruct {
  rgpu::common::dnn::Conv c;
  int32_t reorder = 0;  // cudnnReorderType_t
};
struct cudnnPoolingStruct {
  rgpu::common::dnn::Pooling p;
};
struct cudnnActivationStruct {
  rgpu::common::dnn::Activation a;
};
struct cudnnOpTensorStruct {
  int32_t op = 0, type = 0, nan = 0;
};
struct cudnnReduceTensorStruct {
  int32_t op = 0, type = 0, nan = 0, indices = 0, indices_type = 0;
};
struct cudnnLRNStruct {
  unsigned n = 5;  // cuDNN's defaults
  double alpha = 1e-4, beta = 0.75, k = 2.0;
};
struct cudnnDropoutStruct {
  float dropout = 0;
  void* states = nullptr;
  size_t states_size = 0;
  unsigned long long seed = 0;
};

namespace rgpu::client::dnn {

namespace dn = common::dnn;

// A descriptor's tensor with the call's pointer (null descriptor: an unset tensor, refused by dn::check).
dn::Tensor tensorOf(const cudnnTensorStruct* d, const void* ptr);
dn::Tensor tensorOf(const cudnnFilterStruct* d, const void* ptr);

// A host scalar for a call on tensors of `type`: double for double, float otherwise (cuDNN's rule).
double scalarOf(const void* p, int32_t type);

// rgpu's error as a cuDNN status (kInvalidValue: BAD_PARAM, kNotSupported: NOT_SUPPORTED, ...).
cudnnStatus_t toDnnStatus(const Status& s, cudnnStatus_t otherwise = CUDNN_STATUS_EXECUTION_FAILED);

}  // namespace rgpu::client::dnn
