// What rgpu's libcudnn.so.9's files share (cudnn_api.cc, cudnn_ops.cc): the
// handle, and the two ways a call travels -- an operation posted in the
// handle's stream order, and a size the server's backend answers.
#pragma once

#include <cudnn.h>

#include "common/dnn_args.h"

struct cudnnContext {
  static constexpr uint32_t kMagic = 0x43444e4e;  // "CDNN"
  uint32_t magic = kMagic;
  int device = 0;
  cudaStream_t stream = nullptr;
};

namespace rgpu::client::dnn {

inline bool live(cudnnHandle_t h) { return h && h->magic == cudnnContext::kMagic; }

// One operation: checked as cuDNN would (common::dnn::check), then posted;
// its errors in device memory surface at the next synchronising call.
cudnnStatus_t send(cudnnHandle_t h, const common::dnn::Args& a);

// A size (bytes) the server's backend answers for `a` (`h` null: on the
// calling thread's device); the tensors need not point anywhere yet.
cudnnStatus_t size(cudnnHandle_t h, common::dnn::Query q, const common::dnn::Args& a, size_t* out, const char* call);

}  // namespace rgpu::client::dnn
