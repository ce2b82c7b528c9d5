// A fake cuSPARSE (the generic API's SpMV and SpMM) for testing the CUDA
// backend's cuSPARSE path without a GPU: the entry points rgpu's worker
// takes from NVIDIA's library (server/cuda/sparse_api.h), computed by the
// sim's executor (server/sim/sim_sparse.h) on the fake driver's memory (host
// memory) and queued on the fake driver's executor in the handle's stream
// order (rgpu_fake_cuda_enqueue, which records each call in the driver's
// log). Its external buffer is kBufferBytes, and a call without one is
// refused with CUSPARSE_STATUS_INVALID_VALUE, so the client's must travel.
#include <cuda.h>
#include <cusparse.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "server/sim/sim_sparse.h"
#include "tests/fake_driver/fake_library.h"

namespace sp = rgpu::common::sparse;

struct cusparseContext {
  cudaStream_t stream = nullptr;
  cusparsePointerMode_t mode = CUSPARSE_POINTER_MODE_HOST;
};
struct cusparseSpMatDescr {
  sp::SpMat m;
};
struct cusparseDnVecDescr {
  sp::DnMat m;
};
struct cusparseDnMatDescr {
  sp::DnMat m;
};

namespace {

constexpr size_t kBufferBytes = 256;

sp::Scalar scalar(cusparseHandle_t h, const void* p, int32_t type) {
  sp::Scalar s;
  s.device = h->mode == CUSPARSE_POINTER_MODE_DEVICE;
  if (s.device) s.ptr = reinterpret_cast<uint64_t>(p);
  else std::memcpy(s.bytes, p, sp::elementBytes(type));  // read now, as cuSPARSE does
  return s;
}

sp::SpMat sparse(int64_t rows, int64_t cols, int64_t nnz, const void* off, const void* ind, const void* val,
                 cusparseIndexType_t ot, cusparseIndexType_t it, cusparseIndexBase_t base, cudaDataType type,
                 sp::Format f) {
  sp::SpMat m;
  m.format = f;
  m.rows = rows, m.cols = cols, m.nnz = nnz;
  m.offsets = reinterpret_cast<uint64_t>(off), m.indices = reinterpret_cast<uint64_t>(ind);
  m.values = reinterpret_cast<uint64_t>(val);
  m.offset_type = ot, m.index_type = it, m.base = base, m.value_type = type;
  return m;
}

cusparseStatus_t submit(cusparseHandle_t h, sp::Args a, void* buffer, const char* name) {
  if (!buffer) return CUSPARSE_STATUS_INVALID_VALUE;
  if (!sp::check(a)) return CUSPARSE_STATUS_INVALID_VALUE;
  rgpu::fake::record(std::string(name) + (h->mode == CUSPARSE_POINTER_MODE_DEVICE ? " (device scalars)" : "") +
                     " with an external buffer");
  bool queued = rgpu::fake::enqueue(reinterpret_cast<CUstream>(h->stream), name,
                                    [a] { return rgpu::server::simsparse::run(a) ? 0 : 1; });
  return queued ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}

}  // namespace

extern "C" {

#define FAKE_API __attribute__((visibility("default")))

FAKE_API cusparseStatus_t cusparseCreate(cusparseHandle_t* h) {
  *h = new cusparseContext;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseDestroy(cusparseHandle_t h) {
  delete h;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSetStream(cusparseHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSetPointerMode(cusparseHandle_t h, cusparsePointerMode_t m) {
  h->mode = m;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz, void* off,
                                            void* ind, void* val, cusparseIndexType_t ot, cusparseIndexType_t it,
                                            cusparseIndexBase_t base, cudaDataType type) {
  *d = new cusparseSpMatDescr{sparse(rows, cols, nnz, off, ind, val, ot, it, base, type, sp::Format::kCsr)};
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseCreateCsc(cusparseSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz, void* off,
                                            void* ind, void* val, cusparseIndexType_t ot, cusparseIndexType_t it,
                                            cusparseIndexBase_t base, cudaDataType type) {
  *d = new cusparseSpMatDescr{sparse(rows, cols, nnz, off, ind, val, ot, it, base, type, sp::Format::kCsc)};
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseCreateCoo(cusparseSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz,
                                            void* ri, void* ci, void* val, cusparseIndexType_t it,
                                            cusparseIndexBase_t base, cudaDataType type) {
  *d = new cusparseSpMatDescr{sparse(rows, cols, nnz, ri, ci, val, it, it, base, type, sp::Format::kCoo)};
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t* d, int64_t size, void* values, cudaDataType type) {
  *d = new cusparseDnVecDescr{sp::DnMat{size, 1, size > 0 ? size : 1, reinterpret_cast<uint64_t>(values), type,
                                        sp::kOrderCol}};
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld,
                                              void* values, cudaDataType type, cusparseOrder_t order) {
  *d = new cusparseDnMatDescr{sp::DnMat{rows, cols, ld, reinterpret_cast<uint64_t>(values), type, order}};
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t, cusparseOperation_t, const void*,
                                                  cusparseConstSpMatDescr_t, cusparseConstDnVecDescr_t, const void*,
                                                  cusparseDnVecDescr_t, cudaDataType, cusparseSpMVAlg_t, size_t* size) {
  *size = kBufferBytes;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpMV(cusparseHandle_t h, cusparseOperation_t op, const void* alpha,
                                       cusparseConstSpMatDescr_t A, cusparseConstDnVecDescr_t x, const void* beta,
                                       cusparseDnVecDescr_t y, cudaDataType type, cusparseSpMVAlg_t alg, void* buffer) {
  sp::Args a;
  a.op = sp::Op::kSpMV;
  a.op_a = op;
  a.alpha = scalar(h, alpha, type);
  a.beta = scalar(h, beta, type);
  a.compute_type = type;
  a.alg = alg;
  a.a = A->m;
  a.b = x->m;
  a.c = y->m;
  return submit(h, a, buffer, "cusparseSpMV");
}
FAKE_API cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t, cusparseOperation_t, cusparseOperation_t,
                                                  const void*, cusparseConstSpMatDescr_t, cusparseConstDnMatDescr_t,
                                                  const void*, cusparseDnMatDescr_t, cudaDataType, cusparseSpMMAlg_t,
                                                  size_t* size) {
  *size = kBufferBytes;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpMM(cusparseHandle_t h, cusparseOperation_t opA, cusparseOperation_t opB,
                                       const void* alpha, cusparseConstSpMatDescr_t A, cusparseConstDnMatDescr_t B,
                                       const void* beta, cusparseDnMatDescr_t C, cudaDataType type,
                                       cusparseSpMMAlg_t alg, void* buffer) {
  sp::Args a;
  a.op = sp::Op::kSpMM;
  a.op_a = opA;
  a.op_b = opB;
  a.alpha = scalar(h, alpha, type);
  a.beta = scalar(h, beta, type);
  a.compute_type = type;
  a.alg = alg;
  a.a = A->m;
  a.b = B->m;
  a.c = C->m;
  return submit(h, a, buffer, "cusparseSpMM");
}

}  // extern "C"
