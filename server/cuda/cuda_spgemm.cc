// CudaBackend's SpGEMM steps (common/sparse_args.h) on NVIDIA's cuSPARSE.
// The server keeps no SpGEMM state, so each step runs NVIDIA's whole
// sequence for it on the session's stream, as the session's kernel:
//   count, compute, structure: workEstimation and compute (their buffers the
//     worker's own, allocated for the step), then copy with C's arrays at
//     their places in the request's buffer (values into a buffer of the
//     worker's for the structure), then the header (nnz, products);
//   values: the reuse sequence (workEstimation, nnz, copy) into buffers of the
//     worker's, then reuse_compute into C's values with the request's alpha
//     and beta (C's pattern is the one rgpu's structure step gave, which is
//     NVIDIA's: one whose nnz differs is refused).
// The step waits for its stream before it frees the worker's buffers, as
// NVIDIA's compute itself waits to learn nnz; those buffers are not charged
// to the session's quota (they live for one step). A step cannot be captured
// into a native graph (NVIDIA's compute synchronises).
#include <vector>

#include "common/log.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {

namespace sp = common::sparse;

namespace {

void* v(uint64_t p) { return reinterpret_cast<void*>(p); }

// The worker's buffers and NVIDIA's descriptors of one step, released after the stream is idle.
struct Step {
  DriverApi& api;
  SparseApi& S;
  CUstream stream;
  std::vector<CUdeviceptr> buffers;
  std::vector<cusparseSpMatDescr_t> mats;
  cusparseSpGEMMDescr_t descr = nullptr;
  bool idle = false;  // the stream was waited for since the last work was queued

  Status wait() {
    if (idle) return Status::ok();
    CUevent e = nullptr;
    RGPU_TRY(RGPU_CU(cuEventCreate(&e, CU_EVENT_DEFAULT)));
    Status s = RGPU_CU(cuEventRecord(e, stream));
    if (s) s = RGPU_CU(cuEventSynchronize(e));
    (void)api.cuEventDestroy(e);
    idle = static_cast<bool>(s);
    return s;
  }
  ~Step() {
    (void)wait();
    for (CUdeviceptr b : buffers) (void)api.cuMemFree(b);
    for (cusparseSpMatDescr_t m : mats) S.cusparseDestroySpMat(m);
    if (descr) S.cusparseSpGEMM_destroyDescr(descr);
  }
  // A buffer of the worker's of `bytes` (null for none).
  Result<void*> buffer(size_t bytes) {
    if (!bytes) return static_cast<void*>(nullptr);
    CUdeviceptr p = 0;
    RGPU_TRY(RGPU_CU(cuMemAlloc(&p, bytes)));
    buffers.push_back(p);
    return v(p);
  }
  Result<cusparseSpMatDescr_t> csr(const sp::SpMat& m, int64_t nnz, uint64_t offsets, uint64_t indices,
                                   uint64_t values) {
    cusparseSpMatDescr_t d = nullptr;
    RGPU_TRY(SparseApi::check(S.cusparseCreateCsr(&d, m.rows, m.cols, nnz, v(offsets), v(indices), v(values),
                                                  static_cast<cusparseIndexType_t>(m.offset_type),
                                                  static_cast<cusparseIndexType_t>(m.index_type),
                                                  static_cast<cusparseIndexBase_t>(m.base),
                                                  static_cast<cudaDataType>(m.value_type)),
                              "cusparseCreateCsr"));
    mats.push_back(d);
    return d;
  }
};

const void* scalarOf(const sp::Scalar& s) {
  return s.device ? reinterpret_cast<const void*>(s.ptr) : static_cast<const void*>(s.bytes);
}

// alpha = 1 and beta = 0 of a value type, for the steps whose values are not kept.
struct Unit {
  uint8_t one[16] = {}, zero[16] = {};
  explicit Unit(int32_t type) {
    if (type == sp::kR32F || type == sp::kC32F) {
      const float f = 1.0f;
      std::memcpy(one, &f, sizeof f);
    } else {
      const double d = 1.0;
      std::memcpy(one, &d, sizeof d);
    }
  }
};

// count, compute, structure: NVIDIA's SpGEMM of A and B, C into the request's buffer.
Status product(Step& st, cusparseHandle_t h, const sp::Args& a) {
  SparseApi& S = st.S;
  DriverApi& api = st.api;
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const auto type = static_cast<cudaDataType>(a.compute_type);
  const auto alg = static_cast<cusparseSpGEMMAlg_t>(a.alg);
  const Unit unit(a.compute_type);
  const bool values = a.op == sp::Op::kSpGemmCompute;
  const void* alpha = values ? scalarOf(a.alpha) : unit.one;
  const void* beta = values ? scalarOf(a.beta) : unit.zero;
  auto A = st.csr(a.a, a.a.nnz, a.a.offsets, a.a.indices, a.a.values);
  auto B = A ? st.csr(a.sb, a.sb.nnz, a.sb.offsets, a.sb.indices, a.sb.values) : A;
  auto C = B ? st.csr(a.sc, 0, 0, 0, 0) : B;
  if (!C) return C.status();
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMM_createDescr(&st.descr), "cusparseSpGEMM_createDescr"));
  size_t size1 = 0, size2 = 0;
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMM_workEstimation(h, N, N, alpha, *A, *B, beta, *C, type, alg, st.descr,
                                                            &size1, nullptr),
                            "cusparseSpGEMM_workEstimation"));
  auto b1 = st.buffer(size1);
  if (!b1) return b1.status();
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMM_workEstimation(h, N, N, alpha, *A, *B, beta, *C, type, alg, st.descr,
                                                            &size1, *b1),
                            "cusparseSpGEMM_workEstimation"));
  sp::ProductHeader head;
  head.rows = a.a.rows;
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMM_getNumProducts(st.descr, &head.products), "cusparseSpGEMM_getNumProducts"));
  RGPU_TRY(SparseApi::check(
      S.cusparseSpGEMM_compute(h, N, N, alpha, *A, *B, beta, *C, type, alg, st.descr, &size2, nullptr),
      "cusparseSpGEMM_compute"));
  auto b2 = st.buffer(size2);
  if (!b2) return b2.status();
  RGPU_TRY(SparseApi::check(
      S.cusparseSpGEMM_compute(h, N, N, alpha, *A, *B, beta, *C, type, alg, st.descr, &size2, *b2),
      "cusparseSpGEMM_compute"));
  int64_t rows = 0, cols = 0;
  RGPU_TRY(SparseApi::check(S.cusparseSpMatGetSize(*C, &rows, &cols, &head.nnz), "cusparseSpMatGetSize"));
  if (a.op != sp::Op::kSpGemmCount) {
    const sp::ProductLayout l = sp::productLayout(a.sc, head.nnz, values);
    if (l.bytes > a.buffer_size)
      return Status(err::kInvalidValue, "the product has " + std::to_string(head.nnz) + " entries and takes " +
                                            std::to_string(l.bytes) + " bytes, the buffer " +
                                            std::to_string(a.buffer_size));
    uint64_t vals = a.buffer + l.values;
    if (!values) {
      auto t = st.buffer(static_cast<size_t>(head.nnz) * sp::elementBytes(a.compute_type));
      if (!t) return t.status();
      vals = reinterpret_cast<uint64_t>(*t);
    }
    RGPU_TRY(SparseApi::check(S.cusparseCsrSetPointers(*C, v(a.buffer + l.offsets), v(a.buffer + l.indices), v(vals)),
                              "cusparseCsrSetPointers"));
    RGPU_TRY(SparseApi::check(S.cusparseSpGEMM_copy(h, N, N, alpha, *A, *B, beta, *C, type, alg, st.descr),
                              "cusparseSpGEMM_copy"));
  }
  // The header last, from this frame: the copy is waited for before it returns.
  RGPU_TRY(RGPU_CU(cuMemcpyHtoDAsync(a.buffer, &head, sizeof head, st.stream)));
  return st.wait();
}

// values: C = alpha A B + beta C on C's pattern, by NVIDIA's reuse sequence.
Status values(Step& st, cusparseHandle_t h, const sp::Args& a) {
  SparseApi& S = st.S;
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const auto alg = static_cast<cusparseSpGEMMAlg_t>(a.alg);
  auto offsets = st.buffer((static_cast<size_t>(a.sc.rows) + 1) * sp::indexBytes(a.sc.offset_type));
  if (!offsets) return offsets.status();
  auto A = st.csr(a.a, a.a.nnz, a.a.offsets, a.a.indices, a.a.values);
  auto B = A ? st.csr(a.sb, a.sb.nnz, a.sb.offsets, a.sb.indices, a.sb.values) : A;
  auto C = B ? st.csr(a.sc, 0, reinterpret_cast<uint64_t>(*offsets), 0, 0) : B;
  if (!C) return C.status();
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMM_createDescr(&st.descr), "cusparseSpGEMM_createDescr"));
  size_t size1 = 0, size2 = 0, size3 = 0, size4 = 0, size5 = 0;
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMMreuse_workEstimation(h, N, N, *A, *B, *C, alg, st.descr, &size1, nullptr),
                            "cusparseSpGEMMreuse_workEstimation"));
  auto b1 = st.buffer(size1);
  if (!b1) return b1.status();
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMMreuse_workEstimation(h, N, N, *A, *B, *C, alg, st.descr, &size1, *b1),
                            "cusparseSpGEMMreuse_workEstimation"));
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMMreuse_nnz(h, N, N, *A, *B, *C, alg, st.descr, &size2, nullptr, &size3,
                                                      nullptr, &size4, nullptr),
                            "cusparseSpGEMMreuse_nnz"));
  auto b2 = st.buffer(size2);
  auto b3 = b2 ? st.buffer(size3) : b2;
  auto b4 = b3 ? st.buffer(size4) : b3;
  if (!b4) return b4.status();
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMMreuse_nnz(h, N, N, *A, *B, *C, alg, st.descr, &size2, *b2, &size3, *b3,
                                                      &size4, *b4),
                            "cusparseSpGEMMreuse_nnz"));
  int64_t rows = 0, cols = 0, nnz = 0;
  RGPU_TRY(SparseApi::check(S.cusparseSpMatGetSize(*C, &rows, &cols, &nnz), "cusparseSpMatGetSize"));
  if (nnz != a.sc.nnz)
    return Status(err::kInvalidValue, "C has " + std::to_string(a.sc.nnz) + " entries, A B " + std::to_string(nnz) +
                                          " (C's pattern is not the product's)");
  auto cols_at = st.buffer(static_cast<size_t>(nnz) * sp::indexBytes(a.sc.index_type));
  auto vals_at = cols_at ? st.buffer(static_cast<size_t>(nnz) * sp::elementBytes(a.compute_type)) : cols_at;
  if (!vals_at) return vals_at.status();
  RGPU_TRY(SparseApi::check(S.cusparseCsrSetPointers(*C, *offsets, *cols_at, *vals_at), "cusparseCsrSetPointers"));
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMMreuse_copy(h, N, N, *A, *B, *C, alg, st.descr, &size5, nullptr),
                            "cusparseSpGEMMreuse_copy"));
  auto b5 = st.buffer(size5);
  if (!b5) return b5.status();
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMMreuse_copy(h, N, N, *A, *B, *C, alg, st.descr, &size5, *b5),
                            "cusparseSpGEMMreuse_copy"));
  // NVIDIA's pattern in the worker's arrays, the program's values (beta reads them).
  RGPU_TRY(SparseApi::check(S.cusparseCsrSetPointers(*C, *offsets, *cols_at, v(a.sc.values)),
                            "cusparseCsrSetPointers"));
  RGPU_TRY(SparseApi::check(S.cusparseSpGEMMreuse_compute(h, N, N, scalarOf(a.alpha), *A, *B, scalarOf(a.beta), *C,
                                                          static_cast<cudaDataType>(a.compute_type), alg, st.descr),
                            "cusparseSpGEMMreuse_compute"));
  return st.wait();
}

}  // namespace

Status CudaBackend::spgemm(int dev, CUstream stream, const sp::Args& a) {
  if (capture_.active)
    return Status(err::kNotSupported, std::string(sp::opName(a.op)) + " cannot be captured into a native graph");
  auto h = sparseHandle(dev);
  if (!h) return h.status();
  SparseApi& S = *sparse_api_;
  RGPU_TRY(SparseApi::check(S.cusparseSetStream(*h, reinterpret_cast<cudaStream_t>(stream)), "cusparseSetStream"));
  RGPU_TRY(SparseApi::check(
      S.cusparseSetPointerMode(*h, a.alpha.device ? CUSPARSE_POINTER_MODE_DEVICE : CUSPARSE_POINTER_MODE_HOST),
      "cusparseSetPointerMode"));
  if (a.op == sp::Op::kSpGemmValues && a.alpha.device != a.beta.device)
    return Status(err::kInvalidValue, "alpha and beta in different pointer modes");
  return asKernel(dev, stream, sp::opName(a.op), [&] {
    Step st{*api_, S, stream, {}, {}, nullptr, false};
    return a.op == sp::Op::kSpGemmValues ? values(st, *h, a) : product(st, *h, a);
  });
}

}  // namespace rgpu::server::cuda
