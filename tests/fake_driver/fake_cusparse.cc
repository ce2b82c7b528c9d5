// A fake cuSPARSE (the generic API's SpMV, SpMM and SpGEMM) for testing the CUDA
// backend's cuSPARSE path without a GPU: the entry points rgpu's worker
// takes from NVIDIA's library (server/cuda/sparse_api.h), computed by the
// sim's executor (server/sim/sim_sparse.h) on the fake driver's memory (host
// memory) and queued on the fake driver's executor in the handle's stream
// order (rgpu_fake_cuda_enqueue, which records each call in the driver's
// log). Its external buffer is kBufferBytes, and a call without one is
// refused with CUSPARSE_STATUS_INVALID_VALUE, so the client's must travel.
// SpGEMM keeps what NVIDIA's keeps in its descriptor (the count, then C in
// rgpu's own layout, computed by the sim's SpGEMM steps on the stream while
// the call waits, as NVIDIA's compute waits to learn nnz); its copy steps
// are queued.
#include <cuda.h>
#include <cusparse.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

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
struct cusparseSpGEMMDescr {
  bool estimated = false;
  int64_t products = 0, nnz = 0;
  std::shared_ptr<std::vector<uint8_t>> product;  // C (or its structure) in rgpu's layout
  bool with_values = false;
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

// Runs `a` (an SpGEMM step) on the handle's stream and waits for it.
bool runNow(cusparseHandle_t h, const sp::Args& a, const char* name) {
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> result = done->get_future();
  rgpu::fake::record(std::string(name) + " with an external buffer");
  if (!rgpu::fake::enqueue(reinterpret_cast<CUstream>(h->stream), name, [a, done] {
        const bool ok = static_cast<bool>(rgpu::server::simsparse::runSpGemm(a));
        done->set_value(ok);
        return ok ? 0 : 1;
      }))
    return false;
  return result.get();
}

sp::Args gemmArgs(sp::Op op, cusparseHandle_t h, const void* alpha, const void* beta, cusparseConstSpMatDescr_t A,
                  cusparseConstSpMatDescr_t B, cusparseConstSpMatDescr_t C, cudaDataType type, int alg) {
  sp::Args a;
  a.op = op;
  a.compute_type = type;
  a.alg = alg;
  a.a = A->m;
  a.sb = B->m;
  a.sc = C->m;
  if (alpha) a.alpha = scalar(h, alpha, type);
  if (beta) a.beta = scalar(h, beta, type);
  return a;
}

// The count, or C (or its structure) into the descriptor: C's nnz set.
cusparseStatus_t step(cusparseHandle_t h, sp::Args a, cusparseSpMatDescr_t C, cusparseSpGEMMDescr_t d,
                      const char* name) {
  if (!sp::check([&] { sp::Args probe = a; probe.buffer = 1, probe.buffer_size = sp::kHeaderBytes; return probe; }()))
    return CUSPARSE_STATUS_INVALID_VALUE;
  const bool count = a.op == sp::Op::kSpGemmCount;
  if (!count && !d->estimated) return CUSPARSE_STATUS_INVALID_VALUE;
  auto out = std::make_shared<std::vector<uint8_t>>(
      count ? sp::kHeaderBytes : sp::productLayout(a.sc, d->nnz, a.op == sp::Op::kSpGemmCompute).bytes);
  a.buffer = reinterpret_cast<uint64_t>(out->data());
  a.buffer_size = out->size();
  if (!runNow(h, a, name)) return CUSPARSE_STATUS_EXECUTION_FAILED;
  sp::ProductHeader head;
  std::memcpy(&head, out->data(), sizeof head);
  d->products = head.products;
  d->nnz = head.nnz;
  if (count) {
    d->estimated = true;
    return CUSPARSE_STATUS_SUCCESS;
  }
  d->product = out;
  d->with_values = a.op == sp::Op::kSpGemmCompute;
  C->m.nnz = head.nnz;
  return CUSPARSE_STATUS_SUCCESS;
}

// Queues copies of C's arrays out of the descriptor (`values`: its values too).
cusparseStatus_t copyOut(cusparseHandle_t h, cusparseSpMatDescr_t C, cusparseSpGEMMDescr_t d, bool offsets,
                         bool values, const char* name) {
  if (!d->product || C->m.nnz != d->nnz || (values && !d->with_values)) return CUSPARSE_STATUS_INVALID_VALUE;
  const sp::SpMat c = C->m;
  const sp::ProductLayout l = sp::productLayout(c, d->nnz, d->with_values);
  rgpu::fake::record(name);
  auto product = d->product;
  bool queued = rgpu::fake::enqueue(reinterpret_cast<CUstream>(h->stream), name, [c, l, product, offsets, values] {
    const uint8_t* from = product->data();
    const uint64_t n = static_cast<uint64_t>(c.nnz);
    if (offsets)
      std::memcpy(reinterpret_cast<void*>(c.offsets), from + l.offsets,
                  (static_cast<uint64_t>(c.rows) + 1) * sp::indexBytes(c.offset_type));
    std::memcpy(reinterpret_cast<void*>(c.indices), from + l.indices, n * sp::indexBytes(c.index_type));
    if (values) std::memcpy(reinterpret_cast<void*>(c.values), from + l.values, n * sp::elementBytes(c.value_type));
    return 0;
  });
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
FAKE_API cusparseStatus_t cusparseCreateBlockedEll(cusparseSpMatDescr_t* d, int64_t rows, int64_t cols,
                                                   int64_t block, int64_t ell_cols, void* ind, void* val,
                                                   cusparseIndexType_t it, cusparseIndexBase_t base, cudaDataType type) {
  sp::SpMat m = sparse(rows, cols, rows * ell_cols, nullptr, ind, val, it, it, base, type, sp::Format::kBlockedEll);
  m.block = block, m.ell_cols = ell_cols;
  *d = new cusparseSpMatDescr{m};
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

FAKE_API cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t d, int64_t* rows, int64_t* cols,
                                               int64_t* nnz) {
  *rows = d->m.rows, *cols = d->m.cols, *nnz = d->m.nnz;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseCsrSetPointers(cusparseSpMatDescr_t d, void* offsets, void* indices, void* values) {
  d->m.offsets = reinterpret_cast<uint64_t>(offsets), d->m.indices = reinterpret_cast<uint64_t>(indices);
  d->m.values = reinterpret_cast<uint64_t>(values);
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t* d) {
  *d = new cusparseSpGEMMDescr;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpGEMM_workEstimation(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t,
                                                        const void* alpha, cusparseConstSpMatDescr_t A,
                                                        cusparseConstSpMatDescr_t B, const void* beta,
                                                        cusparseSpMatDescr_t C, cudaDataType type,
                                                        cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d,
                                                        size_t* size1, void* buffer1) {
  if (!buffer1) {
    *size1 = kBufferBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  return step(h, gemmArgs(sp::Op::kSpGemmCount, h, alpha, beta, A, B, C, type, alg), C, d,
              "cusparseSpGEMM_workEstimation");
}
FAKE_API cusparseStatus_t cusparseSpGEMM_getNumProducts(cusparseSpGEMMDescr_t d, int64_t* products) {
  if (!d->estimated) return CUSPARSE_STATUS_INVALID_VALUE;
  *products = d->products;
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpGEMM_compute(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t,
                                                 const void* alpha, cusparseConstSpMatDescr_t A,
                                                 cusparseConstSpMatDescr_t B, const void* beta, cusparseSpMatDescr_t C,
                                                 cudaDataType type, cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d,
                                                 size_t* size2, void* buffer2) {
  if (!buffer2) {
    *size2 = kBufferBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  return step(h, gemmArgs(sp::Op::kSpGemmCompute, h, alpha, beta, A, B, C, type, alg), C, d,
              "cusparseSpGEMM_compute");
}
FAKE_API cusparseStatus_t cusparseSpGEMM_copy(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t,
                                              const void*, cusparseConstSpMatDescr_t, cusparseConstSpMatDescr_t,
                                              const void*, cusparseSpMatDescr_t C, cudaDataType, cusparseSpGEMMAlg_t,
                                              cusparseSpGEMMDescr_t d) {
  return copyOut(h, C, d, true, true, "cusparseSpGEMM_copy");
}
FAKE_API cusparseStatus_t cusparseSpGEMMreuse_workEstimation(cusparseHandle_t h, cusparseOperation_t,
                                                             cusparseOperation_t, cusparseConstSpMatDescr_t A,
                                                             cusparseConstSpMatDescr_t B, cusparseSpMatDescr_t C,
                                                             cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d,
                                                             size_t* size1, void* buffer1) {
  if (!buffer1) {
    *size1 = kBufferBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  return step(h, gemmArgs(sp::Op::kSpGemmCount, h, nullptr, nullptr, A, B, C,
                          static_cast<cudaDataType>(A->m.value_type), alg),
              C, d, "cusparseSpGEMMreuse_workEstimation");
}
FAKE_API cusparseStatus_t cusparseSpGEMMreuse_nnz(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t,
                                                  cusparseConstSpMatDescr_t A, cusparseConstSpMatDescr_t B,
                                                  cusparseSpMatDescr_t C, cusparseSpGEMMAlg_t alg,
                                                  cusparseSpGEMMDescr_t d, size_t* size2, void* buffer2,
                                                  size_t* size3, void* buffer3, size_t* size4, void* buffer4) {
  if (!buffer2 || !buffer3 || !buffer4) {
    *size2 = *size3 = *size4 = kBufferBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  cusparseStatus_t s = step(h, gemmArgs(sp::Op::kSpGemmStructure, h, nullptr, nullptr, A, B, C,
                                        static_cast<cudaDataType>(A->m.value_type), alg),
                            C, d, "cusparseSpGEMMreuse_nnz");
  if (s != CUSPARSE_STATUS_SUCCESS || !C->m.offsets) return s;
  const sp::ProductLayout l = sp::productLayout(C->m, d->nnz, false);
  std::memcpy(reinterpret_cast<void*>(C->m.offsets), d->product->data() + l.offsets,
              (static_cast<uint64_t>(C->m.rows) + 1) * sp::indexBytes(C->m.offset_type));  // (the stream was waited for)
  return CUSPARSE_STATUS_SUCCESS;
}
FAKE_API cusparseStatus_t cusparseSpGEMMreuse_copy(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t,
                                                   cusparseConstSpMatDescr_t, cusparseConstSpMatDescr_t,
                                                   cusparseSpMatDescr_t C, cusparseSpGEMMAlg_t, cusparseSpGEMMDescr_t d,
                                                   size_t* size5, void* buffer5) {
  if (!buffer5) {
    *size5 = kBufferBytes;
    return CUSPARSE_STATUS_SUCCESS;
  }
  return copyOut(h, C, d, true, false, "cusparseSpGEMMreuse_copy");
}
FAKE_API cusparseStatus_t cusparseSpGEMMreuse_compute(cusparseHandle_t h, cusparseOperation_t, cusparseOperation_t,
                                                      const void* alpha, cusparseConstSpMatDescr_t A,
                                                      cusparseConstSpMatDescr_t B, const void* beta,
                                                      cusparseSpMatDescr_t C, cudaDataType type,
                                                      cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t d) {
  if (!d->product) return CUSPARSE_STATUS_INVALID_VALUE;
  sp::Args a = gemmArgs(sp::Op::kSpGemmValues, h, alpha, beta, A, B, C, type, alg);
  if (!sp::check(a)) return CUSPARSE_STATUS_INVALID_VALUE;
  rgpu::fake::record(std::string("cusparseSpGEMMreuse_compute") +
                     (h->mode == CUSPARSE_POINTER_MODE_DEVICE ? " (device scalars)" : ""));
  bool queued = rgpu::fake::enqueue(reinterpret_cast<CUstream>(h->stream), "cusparseSpGEMMreuse_compute",
                                    [a] { return rgpu::server::simsparse::runSpGemm(a) ? 0 : 1; });
  return queued ? CUSPARSE_STATUS_SUCCESS : CUSPARSE_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
