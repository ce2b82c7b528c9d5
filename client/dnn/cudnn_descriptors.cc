#include "client/dnn/cudnn_descriptors.h"

#include <algorithm>
#include <cstring>

namespace dn = rgpu::common::dnn;

namespace rgpu::client::dnn {

dn::Tensor tensorOf(const cudnnTensorStruct* d, const void* ptr) {
  dn::Tensor t = d ? d->t : dn::Tensor{};
  t.ptr = reinterpret_cast<uint64_t>(ptr);
  return t;
}
dn::Tensor tensorOf(const cudnnFilterStruct* d, const void* ptr) {
  dn::Tensor t = d ? d->t : dn::Tensor{};
  t.ptr = reinterpret_cast<uint64_t>(ptr);
  return t;
}

double scalarOf(const void* p, int32_t type) {
  if (!p) return 0;
  if (type == dn::kDouble) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

cudnnStatus_t toDnnStatus(const Status& s, cudnnStatus_t otherwise) {
  if (s) return CUDNN_STATUS_SUCCESS;
  switch (s.code()) {
    case err::kInvalidValue: return CUDNN_STATUS_BAD_PARAM;
    case err::kNotSupported: return CUDNN_STATUS_NOT_SUPPORTED;
    case err::kMemoryAllocation: return CUDNN_STATUS_ALLOC_FAILED;
    default: return otherwise;
  }
}

}  // namespace rgpu::client::dnn

namespace {

using rgpu::client::dnn::toDnnStatus;

bool validType(cudnnDataType_t t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }

cudnnStatus_t setTensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int rank, const int* dims,
                        const int* strides, int format) {
  if (!d || !dims || rank < 3 || rank > dn::kMaxRank || !validType(type)) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < rank; ++i)
    if (dims[i] <= 0 || (strides && strides[i] <= 0)) return CUDNN_STATUS_BAD_PARAM;
  int64_t d64[dn::kMaxRank];
  for (int i = 0; i < rank; ++i) d64[i] = dims[i];
  dn::Tensor t = dn::packed(type, rank, d64, strides ? 0 : format);
  if (strides)
    for (int i = 0; i < rank; ++i) t.strides[i] = strides[i];
  d->t = t;
  d->format = format;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setFilter(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format, int rank,
                        const int* dims) {
  if (!d || !dims || rank < 3 || rank > dn::kMaxRank || !validType(type) ||
      (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC))
    return CUDNN_STATUS_BAD_PARAM;
  int64_t d64[dn::kMaxRank];
  for (int i = 0; i < rank; ++i) {
    if (dims[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
    d64[i] = dims[i];
  }
  d->t = dn::packed(type, rank, d64, format);
  d->t.filter_format = format;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setConv(cudnnConvolutionDescriptor_t d, int n, const int* pad, const int* stride, const int* dil,
                      cudnnConvolutionMode_t mode, cudnnDataType_t type) {
  if (!d || !pad || !stride || !dil || n < 1 || n > 3 || (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) ||
      !validType(type))
    return CUDNN_STATUS_BAD_PARAM;
  if (n == 1) return CUDNN_STATUS_NOT_SUPPORTED;  // (rgpu's cuDNN convolves in 2 and 3 dimensions)
  for (int i = 0; i < n; ++i)
    if (pad[i] < 0 || stride[i] <= 0 || dil[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->c.spatial = n;
  for (int i = 0; i < 3; ++i) {
    d->c.pad[i] = i < n ? pad[i] : 0;
    d->c.stride[i] = i < n ? stride[i] : 1;
    d->c.dilation[i] = i < n ? dil[i] : 1;
  }
  d->c.mode = mode;
  d->c.compute_type = type;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setPool(cudnnPoolingDescriptor_t d, cudnnPoolingMode_t mode, cudnnNanPropagation_t nan, int n,
                      const int* window, const int* pad, const int* stride) {
  if (!d || !window || !pad || !stride || n < 1 || n > 3 || mode < CUDNN_POOLING_MAX ||
      mode > CUDNN_POOLING_MAX_DETERMINISTIC)
    return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < n; ++i)
    if (window[i] <= 0 || pad[i] < 0 || stride[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->p.mode = mode;
  d->p.nan = nan;
  d->p.spatial = n;
  for (int i = 0; i < 3; ++i) {
    d->p.window[i] = i < n ? window[i] : 1;
    d->p.pad[i] = i < n ? pad[i] : 0;
    d->p.stride[i] = i < n ? stride[i] : 1;
  }
  return CUDNN_STATUS_SUCCESS;
}

template <typename T>
cudnnStatus_t make(T** out) {
  if (!out) return CUDNN_STATUS_BAD_PARAM;
  try {
    *out = new T{};
  } catch (...) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}
template <typename T>
cudnnStatus_t destroy(T* d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

#define DNN_API __attribute__((visibility("default")))

// ---- tensors ----
DNN_API cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                                 cudnnDataType_t type, int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
    return format == CUDNN_TENSOR_NCHW_VECT_C ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
  const int dims[4] = {n, c, h, w};
  return setTensor(d, type, 4, dims, nullptr, format);
}
DNN_API cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t d, cudnnDataType_t type, int n, int c,
                                                   int h, int w, int ns, int cs, int hs, int ws) {
  const int dims[4] = {n, c, h, w}, strides[4] = {ns, cs, hs, ws};
  return setTensor(d, type, 4, dims, strides, 0);
}
DNN_API cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t d, cudnnDataType_t* type, int* n, int* c,
                                                 int* h, int* w, int* ns, int* cs, int* hs, int* ws) {
  if (!d || d->t.rank < 4 || !type || !n || !c || !h || !w || !ns || !cs || !hs || !ws) return CUDNN_STATUS_BAD_PARAM;
  const dn::Tensor& t = d->t;
  *type = static_cast<cudnnDataType_t>(t.type);
  *n = static_cast<int>(t.dims[0]), *c = static_cast<int>(t.dims[1]);
  *h = static_cast<int>(t.dims[2]), *w = static_cast<int>(t.dims[3]);
  *ns = static_cast<int>(t.strides[0]), *cs = static_cast<int>(t.strides[1]);
  *hs = static_cast<int>(t.strides[2]), *ws = static_cast<int>(t.strides[3]);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int rank,
                                                 const int dims[], const int strides[]) {
  if (!strides) return CUDNN_STATUS_BAD_PARAM;
  if (rank > dn::kMaxRank) return CUDNN_STATUS_NOT_SUPPORTED;
  return setTensor(d, type, rank, dims, strides, 0);
}
DNN_API cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                                   cudnnDataType_t type, int rank, const int dims[]) {
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_NOT_SUPPORTED;
  if (rank > dn::kMaxRank) return CUDNN_STATUS_NOT_SUPPORTED;
  return setTensor(d, type, rank, dims, nullptr, format);
}
DNN_API cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t d, int requested,
                                                 cudnnDataType_t* type, int* rank, int dims[], int strides[]) {
  if (!d || !type || !rank || requested < 0 || (requested > 0 && (!dims || !strides))) return CUDNN_STATUS_BAD_PARAM;
  *type = static_cast<cudnnDataType_t>(d->t.type);
  *rank = d->t.rank;
  for (int i = 0; i < std::min(requested, d->t.rank); ++i)
    dims[i] = static_cast<int>(d->t.dims[i]), strides[i] = static_cast<int>(d->t.strides[i]);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t d, size_t* size) {
  if (!d || !size) return CUDNN_STATUS_BAD_PARAM;
  *size = d->t.spanBytes();
  return CUDNN_STATUS_SUCCESS;
}

// ---- filters ----
DNN_API cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                                 cudnnTensorFormat_t format, int k, int c, int h, int w) {
  const int dims[4] = {k, c, h, w};
  return setFilter(d, type, format, 4, dims);
}
DNN_API cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t d, cudnnDataType_t* type,
                                                 cudnnTensorFormat_t* format, int* k, int* c, int* h, int* w) {
  if (!d || d->t.rank != 4 || !type || !format || !k || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM;
  *type = static_cast<cudnnDataType_t>(d->t.type);
  *format = static_cast<cudnnTensorFormat_t>(d->t.filter_format);
  *k = static_cast<int>(d->t.dims[0]), *c = static_cast<int>(d->t.dims[1]);
  *h = static_cast<int>(d->t.dims[2]), *w = static_cast<int>(d->t.dims[3]);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                                 cudnnTensorFormat_t format, int rank, const int dims[]) {
  if (rank > dn::kMaxRank) return CUDNN_STATUS_NOT_SUPPORTED;
  return setFilter(d, type, format, rank, dims);
}
DNN_API cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t d, int requested, cudnnDataType_t* type,
                                                 cudnnTensorFormat_t* format, int* rank, int dims[]) {
  if (!d || !type || !format || !rank || requested < 0 || (requested > 0 && !dims)) return CUDNN_STATUS_BAD_PARAM;
  *type = static_cast<cudnnDataType_t>(d->t.type);
  *format = static_cast<cudnnTensorFormat_t>(d->t.filter_format);
  *rank = d->t.rank;
  for (int i = 0; i < std::min(requested, d->t.rank); ++i) dims[i] = static_cast<int>(d->t.dims[i]);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetFilterSizeInBytes(const cudnnFilterDescriptor_t d, size_t* size) {
  if (!d || !size) return CUDNN_STATUS_BAD_PARAM;
  *size = d->t.spanBytes();
  return CUDNN_STATUS_SUCCESS;
}

// ---- convolutions ----
DNN_API cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v,
                                                      int dh, int dw, cudnnConvolutionMode_t mode,
                                                      cudnnDataType_t type) {
  const int pad[2] = {ph, pw}, stride[2] = {u, v}, dil[2] = {dh, dw};
  return setConv(d, 2, pad, stride, dil, mode, type);
}
DNN_API cudnnStatus_t cudnnGetConvolution2dDescriptor(const cudnnConvolutionDescriptor_t d, int* ph, int* pw, int* u,
                                                      int* v, int* dh, int* dw, cudnnConvolutionMode_t* mode,
                                                      cudnnDataType_t* type) {
  if (!d || d->c.spatial != 2 || !ph || !pw || !u || !v || !dh || !dw || !mode || !type) return CUDNN_STATUS_BAD_PARAM;
  *ph = d->c.pad[0], *pw = d->c.pad[1], *u = d->c.stride[0], *v = d->c.stride[1];
  *dh = d->c.dilation[0], *dw = d->c.dilation[1];
  *mode = static_cast<cudnnConvolutionMode_t>(d->c.mode);
  *type = static_cast<cudnnDataType_t>(d->c.compute_type);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int n, const int pad[],
                                                      const int stride[], const int dil[], cudnnConvolutionMode_t mode,
                                                      cudnnDataType_t type) {
  return setConv(d, n, pad, stride, dil, mode, type);
}
DNN_API cudnnStatus_t cudnnGetConvolutionNdDescriptor(const cudnnConvolutionDescriptor_t d, int requested, int* n,
                                                      int pad[], int stride[], int dil[], cudnnConvolutionMode_t* mode,
                                                      cudnnDataType_t* type) {
  if (!d || !n || !mode || !type || requested < 0 || (requested > 0 && (!pad || !stride || !dil)))
    return CUDNN_STATUS_BAD_PARAM;
  *n = d->c.spatial;
  for (int i = 0; i < std::min(requested, d->c.spatial); ++i)
    pad[i] = d->c.pad[i], stride[i] = d->c.stride[i], dil[i] = d->c.dilation[i];
  *mode = static_cast<cudnnConvolutionMode_t>(d->c.mode);
  *type = static_cast<cudnnDataType_t>(d->c.compute_type);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  if (!d || m < CUDNN_DEFAULT_MATH || m > CUDNN_FMA_MATH) return CUDNN_STATUS_BAD_PARAM;
  d->c.math_type = m;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t* m) {
  if (!d || !m) return CUDNN_STATUS_BAD_PARAM;
  *m = static_cast<cudnnMathType_t>(d->c.math_type);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (!d || groups < 1) return CUDNN_STATUS_BAD_PARAM;
  d->c.groups = groups;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int* groups) {
  if (!d || !groups) return CUDNN_STATUS_BAD_PARAM;
  *groups = d->c.groups;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetConvolutionReorderType(cudnnConvolutionDescriptor_t d, cudnnReorderType_t r) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->reorder = r;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetConvolutionReorderType(cudnnConvolutionDescriptor_t d, cudnnReorderType_t* r) {
  if (!d || !r) return CUDNN_STATUS_BAD_PARAM;
  *r = static_cast<cudnnReorderType_t>(d->reorder);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t d,
                                                            const cudnnTensorDescriptor_t x,
                                                            const cudnnFilterDescriptor_t w, int rank, int out[]) {
  if (!d || !x || !w || !out) return CUDNN_STATUS_BAD_PARAM;
  auto y = dn::convOutput(d->c, x->t, w->t);
  if (!y) return toDnnStatus(y.status());
  if (rank != y->rank) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < rank; ++i) out[i] = static_cast<int>(y->dims[i]);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t d,
                                                            const cudnnTensorDescriptor_t x,
                                                            const cudnnFilterDescriptor_t w, int* n, int* c, int* h,
                                                            int* wd) {
  if (!n || !c || !h || !wd) return CUDNN_STATUS_BAD_PARAM;
  int out[4];
  cudnnStatus_t st = cudnnGetConvolutionNdForwardOutputDim(d, x, w, 4, out);
  if (st == CUDNN_STATUS_SUCCESS) *n = out[0], *c = out[1], *h = out[2], *wd = out[3];
  return st;
}

// ---- pooling ----
DNN_API cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d, cudnnPoolingMode_t mode,
                                                  cudnnNanPropagation_t nan, int wh, int ww, int ph, int pw, int sh,
                                                  int sw) {
  const int window[2] = {wh, ww}, pad[2] = {ph, pw}, stride[2] = {sh, sw};
  return setPool(d, mode, nan, 2, window, pad, stride);
}
DNN_API cudnnStatus_t cudnnGetPooling2dDescriptor(const cudnnPoolingDescriptor_t d, cudnnPoolingMode_t* mode,
                                                  cudnnNanPropagation_t* nan, int* wh, int* ww, int* ph, int* pw,
                                                  int* sh, int* sw) {
  if (!d || d->p.spatial != 2 || !mode || !nan || !wh || !ww || !ph || !pw || !sh || !sw) return CUDNN_STATUS_BAD_PARAM;
  *mode = static_cast<cudnnPoolingMode_t>(d->p.mode);
  *nan = static_cast<cudnnNanPropagation_t>(d->p.nan);
  *wh = d->p.window[0], *ww = d->p.window[1], *ph = d->p.pad[0], *pw = d->p.pad[1];
  *sh = d->p.stride[0], *sw = d->p.stride[1];
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetPoolingNdDescriptor(cudnnPoolingDescriptor_t d, const cudnnPoolingMode_t mode,
                                                  const cudnnNanPropagation_t nan, int n, const int window[],
                                                  const int pad[], const int stride[]) {
  return setPool(d, mode, nan, n, window, pad, stride);
}
DNN_API cudnnStatus_t cudnnGetPoolingNdDescriptor(const cudnnPoolingDescriptor_t d, int requested,
                                                  cudnnPoolingMode_t* mode, cudnnNanPropagation_t* nan, int* n,
                                                  int window[], int pad[], int stride[]) {
  if (!d || !mode || !nan || !n || requested < 0 || (requested > 0 && (!window || !pad || !stride)))
    return CUDNN_STATUS_BAD_PARAM;
  *mode = static_cast<cudnnPoolingMode_t>(d->p.mode);
  *nan = static_cast<cudnnNanPropagation_t>(d->p.nan);
  *n = d->p.spatial;
  for (int i = 0; i < std::min(requested, d->p.spatial); ++i)
    window[i] = d->p.window[i], pad[i] = d->p.pad[i], stride[i] = d->p.stride[i];
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetPoolingNdForwardOutputDim(const cudnnPoolingDescriptor_t d,
                                                        const cudnnTensorDescriptor_t x, int rank, int out[]) {
  if (!d || !x || !out) return CUDNN_STATUS_BAD_PARAM;
  auto y = dn::poolOutput(d->p, x->t);
  if (!y) return toDnnStatus(y.status());
  if (rank != y->rank) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < rank; ++i) out[i] = static_cast<int>(y->dims[i]);
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t d,
                                                        const cudnnTensorDescriptor_t x, int* n, int* c, int* h,
                                                        int* w) {
  if (!n || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM;
  int out[4];
  cudnnStatus_t st = cudnnGetPoolingNdForwardOutputDim(d, x, 4, out);
  if (st == CUDNN_STATUS_SUCCESS) *n = out[0], *c = out[1], *h = out[2], *w = out[3];
  return st;
}

// ---- activations ----
DNN_API cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                                   cudnnNanPropagation_t nan, double coef) {
  if (!d || mode < CUDNN_ACTIVATION_SIGMOID || mode > CUDNN_ACTIVATION_SWISH) return CUDNN_STATUS_BAD_PARAM;
  d->a.mode = mode;
  d->a.nan = nan;
  d->a.coef = coef;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetActivationDescriptor(const cudnnActivationDescriptor_t d, cudnnActivationMode_t* mode,
                                                   cudnnNanPropagation_t* nan, double* coef) {
  if (!d || !mode || !nan || !coef) return CUDNN_STATUS_BAD_PARAM;
  *mode = static_cast<cudnnActivationMode_t>(d->a.mode);
  *nan = static_cast<cudnnNanPropagation_t>(d->a.nan);
  *coef = d->a.coef;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnSetActivationDescriptorSwishBeta(cudnnActivationDescriptor_t d, double beta) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->a.swish_beta = beta;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetActivationDescriptorSwishBeta(cudnnActivationDescriptor_t d, double* beta) {
  if (!d || !beta) return CUDNN_STATUS_BAD_PARAM;
  *beta = d->a.swish_beta;
  return CUDNN_STATUS_SUCCESS;
}

// ---- op tensor ----
DNN_API cudnnStatus_t cudnnCreateOpTensorDescriptor(cudnnOpTensorDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyOpTensorDescriptor(cudnnOpTensorDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetOpTensorDescriptor(cudnnOpTensorDescriptor_t d, cudnnOpTensorOp_t op,
                                                 cudnnDataType_t type, cudnnNanPropagation_t nan) {
  if (!d || op < CUDNN_OP_TENSOR_ADD || op > CUDNN_OP_TENSOR_NOT || !validType(type)) return CUDNN_STATUS_BAD_PARAM;
  d->op = op, d->type = type, d->nan = nan;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetOpTensorDescriptor(const cudnnOpTensorDescriptor_t d, cudnnOpTensorOp_t* op,
                                                 cudnnDataType_t* type, cudnnNanPropagation_t* nan) {
  if (!d || !op || !type || !nan) return CUDNN_STATUS_BAD_PARAM;
  *op = static_cast<cudnnOpTensorOp_t>(d->op);
  *type = static_cast<cudnnDataType_t>(d->type);
  *nan = static_cast<cudnnNanPropagation_t>(d->nan);
  return CUDNN_STATUS_SUCCESS;
}

// ---- reductions ----
DNN_API cudnnStatus_t cudnnCreateReduceTensorDescriptor(cudnnReduceTensorDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyReduceTensorDescriptor(cudnnReduceTensorDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetReduceTensorDescriptor(cudnnReduceTensorDescriptor_t d, cudnnReduceTensorOp_t op,
                                                     cudnnDataType_t type, cudnnNanPropagation_t nan,
                                                     cudnnReduceTensorIndices_t indices,
                                                     cudnnIndicesType_t indices_type) {
  if (!d || op < CUDNN_REDUCE_TENSOR_ADD || op > CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS || !validType(type) ||
      (indices != CUDNN_REDUCE_TENSOR_NO_INDICES && indices != CUDNN_REDUCE_TENSOR_FLATTENED_INDICES))
    return CUDNN_STATUS_BAD_PARAM;
  if (indices_type != CUDNN_32BIT_INDICES) return CUDNN_STATUS_NOT_SUPPORTED;  // (cuDNN computes 32-bit indices only)
  d->op = op, d->type = type, d->nan = nan, d->indices = indices, d->indices_type = indices_type;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetReduceTensorDescriptor(const cudnnReduceTensorDescriptor_t d, cudnnReduceTensorOp_t* op,
                                                     cudnnDataType_t* type, cudnnNanPropagation_t* nan,
                                                     cudnnReduceTensorIndices_t* indices,
                                                     cudnnIndicesType_t* indices_type) {
  if (!d || !op || !type || !nan || !indices || !indices_type) return CUDNN_STATUS_BAD_PARAM;
  *op = static_cast<cudnnReduceTensorOp_t>(d->op);
  *type = static_cast<cudnnDataType_t>(d->type);
  *nan = static_cast<cudnnNanPropagation_t>(d->nan);
  *indices = static_cast<cudnnReduceTensorIndices_t>(d->indices);
  *indices_type = static_cast<cudnnIndicesType_t>(d->indices_type);
  return CUDNN_STATUS_SUCCESS;
}

// ---- local response normalisation ----
DNN_API cudnnStatus_t cudnnCreateLRNDescriptor(cudnnLRNDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyLRNDescriptor(cudnnLRNDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnSetLRNDescriptor(cudnnLRNDescriptor_t d, unsigned n, double alpha, double beta, double k) {
  if (!d || n < CUDNN_LRN_MIN_N || n > CUDNN_LRN_MAX_N || !(k >= CUDNN_LRN_MIN_K) || !(beta >= CUDNN_LRN_MIN_BETA))
    return CUDNN_STATUS_BAD_PARAM;
  d->n = n, d->alpha = alpha, d->beta = beta, d->k = k;
  return CUDNN_STATUS_SUCCESS;
}
DNN_API cudnnStatus_t cudnnGetLRNDescriptor(cudnnLRNDescriptor_t d, unsigned* n, double* alpha, double* beta,
                                            double* k) {
  if (!d || !n || !alpha || !beta || !k) return CUDNN_STATUS_BAD_PARAM;
  *n = d->n, *alpha = d->alpha, *beta = d->beta, *k = d->k;
  return CUDNN_STATUS_SUCCESS;
}

// ---- dropout (the descriptor's fields; initialising states is the library's call) ----
DNN_API cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t* d) { return make(d); }
DNN_API cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t d) { return destroy(d); }
DNN_API cudnnStatus_t cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t d, cudnnHandle_t, float* dropout,
                                                void** states, unsigned long long* seed) {
  if (!d || !dropout || !states || !seed) return CUDNN_STATUS_BAD_PARAM;
  *dropout = d->dropout, *states = d->states, *seed = d->seed;
  return CUDNN_STATUS_SUCCESS;
}

// ---- batch normalisation's parameter tensor ----
DNN_API cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t out, const cudnnTensorDescriptor_t x,
                                                    cudnnBatchNormMode_t mode) {
  if (!out || !x || x->t.rank < 4 || mode < CUDNN_BATCHNORM_PER_ACTIVATION || mode > CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
    return CUDNN_STATUS_BAD_PARAM;
  int64_t dims[dn::kMaxRank];
  for (int i = 0; i < x->t.rank; ++i)
    dims[i] = i == 0 ? 1 : i == 1 || mode == CUDNN_BATCHNORM_PER_ACTIVATION ? x->t.dims[i] : 1;
  out->t = dn::packed(x->t.type == dn::kDouble ? dn::kDouble : dn::kFloat, x->t.rank, dims, 0);
  out->format = 0;
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
