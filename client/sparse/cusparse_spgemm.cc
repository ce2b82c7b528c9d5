// cuSPARSE's SpGEMM (C = alpha A B, A, B and C CSR) and its structure-reuse
// form, with every size query and step of NVIDIA's API.
//
// The server keeps nothing between steps (common/sparse_args.h): what a step
// computes lands in the external buffer the program allocated for it, and
// the client reads its header after synchronising the handle's stream, as
// NVIDIA's library synchronises to learn nnz(C):
//   workEstimation (buffer 1)  counts the products and nnz(C) into buffer 1
//                              and keeps them in the SpGEMM descriptor;
//   compute (buffer 2)         computes C whole into buffer 2, sized from the
//                              count, and sets C's nnz;
//   copy                       copies C's three arrays out of buffer 2 (three
//                              device-to-device copies in stream order), so
//                              buffer 2 must live until copy, as NVIDIA's must;
//   reuse_nnz (buffer 3)       computes C's structure into buffer 3 and its
//                              row offsets into C; reuse_copy copies the
//                              column indices out of it; reuse_compute
//                              computes C's values on C's own pattern and may
//                              run again whenever A's and B's values change.
// The descriptor remembers the counts and which buffer holds what; freeing a
// buffer before the step that reads it gives a range error at that step.
// SpGEMM's beta must be 0 (C's old values are not read; any other beta is
// CUSPARSE_STATUS_NOT_SUPPORTED, logged once); reuse_compute takes any beta.
#include <cuda_runtime_api.h>

#include "client/sparse/cusparse_client.h"

using namespace rgpu::client::sparse;

struct cusparseSpGEMMDescr {
  static constexpr uint32_t kMagic = 0x53504745;  // "SPGE"
  uint32_t magic = kMagic;
  bool counted = false;  // workEstimation ran with its buffer
  int64_t products = 0, nnz = 0;
  uint64_t product = 0;    // compute's buffer 2, holding C (0 until compute ran)
  sp::SpMat product_c;     // C as compute laid it out
  uint64_t structure = 0;  // reuse_nnz's buffer 3, holding C's structure
  sp::SpMat structure_c;
};

namespace {

bool liveDescr(cusparseSpGEMMDescr* d) { return d && d->magic == cusparseSpGEMMDescr::kMagic; }

sp::Args gemm(sp::Op op, cusparseOperation_t opA, cusparseOperation_t opB, cusparseConstSpMatDescr_t A,
              cusparseConstSpMatDescr_t B, cusparseConstSpMatDescr_t C, cudaDataType type, int alg) {
  sp::Args a;
  a.op = op;
  a.op_a = opA;
  a.op_b = opB;
  a.compute_type = type;
  a.alg = alg;
  if (A) a.a = A->m;
  if (B) a.sb = B->m;
  if (C) a.sc = C->m;
  return a;
}

// Whether cuSPARSE would take `a` at all (size queries carry no buffer yet).
cusparseStatus_t accept(cusparseHandle_t h, cusparseSpGEMMDescr* d, const sp::Args& a, const char* call) {
  if (!live(h)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (!liveDescr(d)) return CUSPARSE_STATUS_INVALID_VALUE;
  sp::Args probe = a;
  probe.buffer = 1, probe.buffer_size = sp::kHeaderBytes;
  return toSparseStatus(sp::check(probe), call, CUSPARSE_STATUS_INVALID_VALUE);
}

// A value that is exactly zero (host or device scalar, as the pointer mode says).
bool zero(cusparseHandle_t h, const void* v, int32_t type) {
  uint8_t bytes[16] = {};
  const uint32_t n = sp::elementBytes(type);
  if (h->mode == CUSPARSE_POINTER_MODE_DEVICE) {
    if (cudaMemcpy(bytes, v, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  } else {
    std::memcpy(bytes, v, n);
  }
  const bool single = type == sp::kR32F || type == sp::kC32F;
  for (uint32_t at = 0; at < n; at += single ? 4 : 8) {  // each real part (-0.0 is zero too)
    float f;
    double g;
    if (single ? (std::memcpy(&f, bytes + at, 4), f != 0.0f) : (std::memcpy(&g, bytes + at, 8), g != 0.0)) return false;
  }
  return true;
}

// Posts step `a` into `buffer` and reads back the header it wrote.
cusparseStatus_t runStep(cusparseHandle_t h, sp::Args& a, void* buffer, size_t bytes, sp::ProductHeader& out,
                         const char* call) {
  a.buffer = p(buffer);
  a.buffer_size = bytes;
  if (cusparseStatus_t s = submit(h, a, false, nullptr, call); s != CUSPARSE_STATUS_SUCCESS) return s;
  cudaError_t e = cudaMemcpyAsync(&out, buffer, sizeof out, cudaMemcpyDeviceToHost, h->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(h->stream);
  if (e != cudaSuccess)
    return toSparseStatus(Status(rgpu::err::kUnknown, std::string("the step failed on the device: ") +
                                                          cudaGetErrorString(e)),
                          call, CUSPARSE_STATUS_EXECUTION_FAILED);
  if (out.magic != sp::ProductHeader::kMagic || out.nnz < 0 || out.rows != a.a.rows)
    return toSparseStatus(Status(rgpu::err::kUnknown, "the buffer does not hold the step's answer"), call,
                          CUSPARSE_STATUS_EXECUTION_FAILED);
  return CUSPARSE_STATUS_SUCCESS;
}

// Copies `bytes` from `from` to `to` in the handle's stream order.
cusparseStatus_t copyOut(cusparseHandle_t h, uint64_t to, uint64_t from, uint64_t bytes, const char* call) {
  if (!bytes) return CUSPARSE_STATUS_SUCCESS;
  if (!to) return toSparseStatus(Status(rgpu::err::kInvalidValue, "C's arrays are not set (cusparseCsrSetPointers)"),
                                 call, CUSPARSE_STATUS_INVALID_VALUE);
  const cudaError_t e = cudaMemcpyAsync(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), bytes,
                                        cudaMemcpyDeviceToDevice, h->stream);
  return e == cudaSuccess ? CUSPARSE_STATUS_SUCCESS
                          : toSparseStatus(Status(rgpu::err::kUnknown, cudaGetErrorString(e)), call,
                                           CUSPARSE_STATUS_EXECUTION_FAILED);
}

// What a step that computed C (or its structure) into `buffer` leaves: the
// descriptor's note of where, and C's nnz (what cusparseSpMatGetSize now
// gives, as NVIDIA's compute and reuse_nnz set it).
void keep(cusparseSpGEMMDescr* d, cusparseSpMatDescr_t C, const sp::SpMat& c, const sp::ProductHeader& head,
          void* buffer, bool structure) {
  (structure ? d->structure : d->product) = p(buffer);
  (structure ? d->structure_c : d->product_c) = c;
  d->nnz = head.nnz;
  d->products = head.products;
  C->m.nnz = head.nnz;
}

bool sameShape(const sp::SpMat& x, const sp::SpMat& y) {
  return x.rows == y.rows && x.cols == y.cols && x.offset_type == y.offset_type && x.index_type == y.index_type &&
         x.base == y.base && x.value_type == y.value_type;
}

// workEstimation of either form, `a` accepted: a size query, or the count into buffer 1.
cusparseStatus_t estimate(cusparseHandle_t h, cusparseSpGEMMDescr* d, sp::Args a, size_t* size, void* buffer,
                          const char* call) {
  return guarded(call, [&]() -> cusparseStatus_t {
    if (!size) return CUSPARSE_STATUS_INVALID_VALUE;
    if (!buffer) {
      *size = sp::kHeaderBytes;
      return CUSPARSE_STATUS_SUCCESS;
    }
    a.op = sp::Op::kSpGemmCount;
    sp::ProductHeader head;
    if (cusparseStatus_t s = runStep(h, a, buffer, sp::kHeaderBytes, head, call); s != CUSPARSE_STATUS_SUCCESS)
      return s;
    d->counted = true;
    d->products = head.products;
    d->nnz = head.nnz;
    return CUSPARSE_STATUS_SUCCESS;
  });
}

cusparseStatus_t needCount(cusparseSpGEMMDescr* d, const char* call) {
  if (d->counted) return CUSPARSE_STATUS_SUCCESS;
  return toSparseStatus(Status(rgpu::err::kInvalidValue, "the work estimation has not run with its buffer"), call,
                        CUSPARSE_STATUS_INVALID_VALUE);
}

cusparseStatus_t betaMustBeZero(cusparseHandle_t h, const void* beta, int32_t type, const char* call) {
  if (zero(h, beta, type)) return CUSPARSE_STATUS_SUCCESS;
  return toSparseStatus(Status(rgpu::err::kNotSupported, "beta other than 0 (C's old values are not added; "
                                                         "cusparseSpGEMMreuse_compute adds them)"),
                        call, CUSPARSE_STATUS_NOT_SUPPORTED);
}

}  // namespace

extern "C" {

#define RGPU_SPARSE_API __attribute__((visibility("default")))

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t* descr) {
  if (!descr) return CUSPARSE_STATUS_INVALID_VALUE;
  *descr = new cusparseSpGEMMDescr;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t descr) {
  if (!descr) return CUSPARSE_STATUS_SUCCESS;
  if (!liveDescr(descr)) return CUSPARSE_STATUS_INVALID_VALUE;
  descr->magic = 0;
  delete descr;
  return CUSPARSE_STATUS_SUCCESS;
}

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMM_workEstimation(
    cusparseHandle_t h, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
    cusparseConstSpMatDescr_t A, cusparseConstSpMatDescr_t B, const void* beta, cusparseSpMatDescr_t C,
    cudaDataType type, cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d, size_t* bufferSize1,
    void* externalBuffer1) {
  constexpr const char* kCall = "cusparseSpGEMM_workEstimation";
  if (!alpha || !beta) return CUSPARSE_STATUS_INVALID_VALUE;
  sp::Args a = gemm(sp::Op::kSpGemmCount, opA, opB, A, B, C, type, alg);
  if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  if (cusparseStatus_t s = betaMustBeZero(h, beta, type, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  return estimate(h, d, a, bufferSize1, externalBuffer1, kCall);
}

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMM_getNumProducts(cusparseSpGEMMDescr_t d, int64_t* num_prods) {
  if (!liveDescr(d) || !num_prods) return CUSPARSE_STATUS_INVALID_VALUE;
  if (cusparseStatus_t s = needCount(d, "cusparseSpGEMM_getNumProducts"); s != CUSPARSE_STATUS_SUCCESS) return s;
  *num_prods = d->products;
  return CUSPARSE_STATUS_SUCCESS;
}

// For ALG2 and ALG3 NVIDIA's library computes C in chunks and asks for
// buffer 3 here; rgpu's compute takes C whole, so buffer 3 is the smallest and
// buffer 2 is what compute will ask for (chunk_fraction has nothing to size).
RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMM_estimateMemory(
    cusparseHandle_t h, cusparseOperation_t opA, cusparseOperation_t opB, const void* alpha,
    cusparseConstSpMatDescr_t A, cusparseConstSpMatDescr_t B, const void* beta, cusparseSpMatDescr_t C,
    cudaDataType type, cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d, float chunk_fraction, size_t* bufferSize3,
    void* externalBuffer3, size_t* bufferSize2) {
  constexpr const char* kCall = "cusparseSpGEMM_estimateMemory";
  if (!alpha || !beta || !bufferSize3 || !(chunk_fraction > 0.0f && chunk_fraction <= 1.0f))
    return CUSPARSE_STATUS_INVALID_VALUE;
  sp::Args a = gemm(sp::Op::kSpGemmCompute, opA, opB, A, B, C, type, alg);
  if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  if (cusparseStatus_t s = needCount(d, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  *bufferSize3 = sp::kHeaderBytes;
  if (externalBuffer3) {
    if (!bufferSize2) return CUSPARSE_STATUS_INVALID_VALUE;
    *bufferSize2 = sp::productLayout(a.sc, d->nnz, true).bytes;
  }
  return CUSPARSE_STATUS_SUCCESS;
}

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMM_compute(cusparseHandle_t h, cusparseOperation_t opA,
                                                        cusparseOperation_t opB, const void* alpha,
                                                        cusparseConstSpMatDescr_t A, cusparseConstSpMatDescr_t B,
                                                        const void* beta, cusparseSpMatDescr_t C, cudaDataType type,
                                                        cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d,
                                                        size_t* bufferSize2, void* externalBuffer2) {
  constexpr const char* kCall = "cusparseSpGEMM_compute";
  return guarded(kCall, [&]() -> cusparseStatus_t {
    if (!alpha || !beta || !bufferSize2) return CUSPARSE_STATUS_INVALID_VALUE;
    sp::Args a = gemm(sp::Op::kSpGemmCompute, opA, opB, A, B, C, type, alg);
    if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
    if (cusparseStatus_t s = betaMustBeZero(h, beta, type, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
    if (cusparseStatus_t s = needCount(d, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
    if (!externalBuffer2) {
      *bufferSize2 = sp::productLayout(a.sc, d->nnz, true).bytes;
      return CUSPARSE_STATUS_SUCCESS;
    }
    a.alpha = scalar(h, alpha, type);
    a.beta = scalar(h, beta, type);
    sp::ProductHeader head;
    if (cusparseStatus_t s = runStep(h, a, externalBuffer2, *bufferSize2, head, kCall); s != CUSPARSE_STATUS_SUCCESS)
      return s;
    keep(d, C, a.sc, head, externalBuffer2, false);
    return CUSPARSE_STATUS_SUCCESS;
  });
}

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMM_copy(cusparseHandle_t h, cusparseOperation_t opA,
                                                     cusparseOperation_t opB, const void* alpha,
                                                     cusparseConstSpMatDescr_t A, cusparseConstSpMatDescr_t B,
                                                     const void* beta, cusparseSpMatDescr_t C, cudaDataType type,
                                                     cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d) {
  constexpr const char* kCall = "cusparseSpGEMM_copy";
  if (!alpha || !beta || !C) return CUSPARSE_STATUS_INVALID_VALUE;
  sp::Args a = gemm(sp::Op::kSpGemmCompute, opA, opB, A, B, C, type, alg);
  if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  if (!d->product || !sameShape(d->product_c, C->m) || C->m.nnz != d->nnz)
    return toSparseStatus(Status(rgpu::err::kInvalidValue, "cusparseSpGEMM_compute has not computed this C"), kCall,
                          CUSPARSE_STATUS_INVALID_VALUE);
  const sp::ProductLayout l = sp::productLayout(C->m, d->nnz, true);
  const uint64_t rows = static_cast<uint64_t>(C->m.rows) + 1, n = static_cast<uint64_t>(d->nnz);
  cusparseStatus_t s = copyOut(h, C->m.offsets, d->product + l.offsets, rows * sp::indexBytes(C->m.offset_type), kCall);
  if (s == CUSPARSE_STATUS_SUCCESS)
    s = copyOut(h, C->m.indices, d->product + l.indices, n * sp::indexBytes(C->m.index_type), kCall);
  if (s == CUSPARSE_STATUS_SUCCESS)
    s = copyOut(h, C->m.values, d->product + l.values, n * sp::elementBytes(C->m.value_type), kCall);
  return s;
}

// The structure-reuse form: the structure once, the values as often as A's
// and B's values change.
RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMMreuse_workEstimation(
    cusparseHandle_t h, cusparseOperation_t opA, cusparseOperation_t opB, cusparseConstSpMatDescr_t A,
    cusparseConstSpMatDescr_t B, cusparseSpMatDescr_t C, cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d,
    size_t* bufferSize1, void* externalBuffer1) {
  constexpr const char* kCall = "cusparseSpGEMMreuse_workEstimation";
  const cudaDataType type = A ? static_cast<cudaDataType>(A->m.value_type) : CUDA_R_32F;
  sp::Args a = gemm(sp::Op::kSpGemmCount, opA, opB, A, B, C, type, alg);
  if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  return estimate(h, d, a, bufferSize1, externalBuffer1, kCall);
}

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMMreuse_nnz(cusparseHandle_t h, cusparseOperation_t opA,
                                                         cusparseOperation_t opB, cusparseConstSpMatDescr_t A,
                                                         cusparseConstSpMatDescr_t B, cusparseSpMatDescr_t C,
                                                         cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d,
                                                         size_t* bufferSize2, void* externalBuffer2,
                                                         size_t* bufferSize3, void* externalBuffer3,
                                                         size_t* bufferSize4, void* externalBuffer4) {
  constexpr const char* kCall = "cusparseSpGEMMreuse_nnz";
  return guarded(kCall, [&]() -> cusparseStatus_t {
    if (!bufferSize2 || !bufferSize3 || !bufferSize4) return CUSPARSE_STATUS_INVALID_VALUE;
    const cudaDataType type = A ? static_cast<cudaDataType>(A->m.value_type) : CUDA_R_32F;
    sp::Args a = gemm(sp::Op::kSpGemmStructure, opA, opB, A, B, C, type, alg);
    if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
    if (cusparseStatus_t s = needCount(d, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
    if (!externalBuffer2 || !externalBuffer3 || !externalBuffer4) {
      *bufferSize2 = sp::kHeaderBytes;
      *bufferSize3 = sp::productLayout(a.sc, d->nnz, false).bytes;
      *bufferSize4 = sp::kHeaderBytes;
      return CUSPARSE_STATUS_SUCCESS;
    }
    sp::ProductHeader head;
    if (cusparseStatus_t s = runStep(h, a, externalBuffer3, *bufferSize3, head, kCall); s != CUSPARSE_STATUS_SUCCESS)
      return s;
    keep(d, C, a.sc, head, externalBuffer3, true);
    const sp::ProductLayout l = sp::productLayout(C->m, head.nnz, false);
    if (!C->m.offsets) return CUSPARSE_STATUS_SUCCESS;  // (reuse_copy writes them)
    return copyOut(h, C->m.offsets, d->structure + l.offsets,
                   (static_cast<uint64_t>(C->m.rows) + 1) * sp::indexBytes(C->m.offset_type), kCall);
  });
}

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMMreuse_copy(cusparseHandle_t h, cusparseOperation_t opA,
                                                          cusparseOperation_t opB, cusparseConstSpMatDescr_t A,
                                                          cusparseConstSpMatDescr_t B, cusparseSpMatDescr_t C,
                                                          cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d,
                                                          size_t* bufferSize5, void* externalBuffer5) {
  constexpr const char* kCall = "cusparseSpGEMMreuse_copy";
  if (!bufferSize5 || !C) return CUSPARSE_STATUS_INVALID_VALUE;
  const cudaDataType type = A ? static_cast<cudaDataType>(A->m.value_type) : CUDA_R_32F;
  sp::Args a = gemm(sp::Op::kSpGemmStructure, opA, opB, A, B, C, type, alg);
  if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  if (!externalBuffer5) {
    *bufferSize5 = sp::kHeaderBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  if (!d->structure || !sameShape(d->structure_c, C->m) || C->m.nnz != d->nnz)
    return toSparseStatus(Status(rgpu::err::kInvalidValue, "cusparseSpGEMMreuse_nnz has not computed this C"), kCall,
                          CUSPARSE_STATUS_INVALID_VALUE);
  const sp::ProductLayout l = sp::productLayout(C->m, d->nnz, false);
  cusparseStatus_t s = copyOut(h, C->m.offsets, d->structure + l.offsets,
                               (static_cast<uint64_t>(C->m.rows) + 1) * sp::indexBytes(C->m.offset_type), kCall);
  if (s == CUSPARSE_STATUS_SUCCESS)
    s = copyOut(h, C->m.indices, d->structure + l.indices,
                static_cast<uint64_t>(d->nnz) * sp::indexBytes(C->m.index_type), kCall);
  return s;
}

RGPU_SPARSE_API cusparseStatus_t cusparseSpGEMMreuse_compute(cusparseHandle_t h, cusparseOperation_t opA,
                                                             cusparseOperation_t opB, const void* alpha,
                                                             cusparseConstSpMatDescr_t A, cusparseConstSpMatDescr_t B,
                                                             const void* beta, cusparseSpMatDescr_t C,
                                                             cudaDataType type, cusparseSpGEMMAlg_t alg,
                                                             cusparseSpGEMMDescr_t d) {
  constexpr const char* kCall = "cusparseSpGEMMreuse_compute";
  if (!alpha || !beta) return CUSPARSE_STATUS_INVALID_VALUE;
  sp::Args a = gemm(sp::Op::kSpGemmValues, opA, opB, A, B, C, type, alg);
  if (cusparseStatus_t s = accept(h, d, a, kCall); s != CUSPARSE_STATUS_SUCCESS) return s;
  a.alpha = scalar(h, alpha, type);
  a.beta = scalar(h, beta, type);
  return submit(h, a, false, nullptr, kCall);
}

}  // extern "C"
