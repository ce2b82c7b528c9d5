// CudaBackend's cuSPARSE: NVIDIA's library (sparse_api.h) in the session's
// primary context, one handle per device. Each call makes NVIDIA's
// descriptors of the request's matrices (host objects, cheap), sets the
// stream and pointer mode, runs as the session's kernel (launch gate, GPU
// time, watchdog) and destroys them; the external buffer is the client's.
#include "common/log.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {

namespace sp = common::sparse;

namespace {

// NVIDIA's descriptors of one call, destroyed with it.
struct Descriptors {
  SparseApi& api;
  cusparseSpMatDescr_t a = nullptr;
  cusparseDnVecDescr_t x = nullptr, y = nullptr;
  cusparseDnMatDescr_t b = nullptr, c = nullptr;
  ~Descriptors() {
    if (a) api.cusparseDestroySpMat(a);
    if (x) api.cusparseDestroyDnVec(x);
    if (y) api.cusparseDestroyDnVec(y);
    if (b) api.cusparseDestroyDnMat(b);
    if (c) api.cusparseDestroyDnMat(c);
  }
};

Status describe(SparseApi& S, const sp::Args& a, Descriptors& d) {
  const sp::SpMat& m = a.a;
  auto v = [](uint64_t p) { return reinterpret_cast<void*>(p); };
  auto it = [](int32_t t) { return static_cast<cusparseIndexType_t>(t); };
  const auto base = static_cast<cusparseIndexBase_t>(m.base);
  const auto type = static_cast<cudaDataType>(m.value_type);
  cusparseStatus_t st = CUSPARSE_STATUS_SUCCESS;
  switch (m.format) {
    case sp::Format::kCsr:
      st = S.cusparseCreateCsr(&d.a, m.rows, m.cols, m.nnz, v(m.offsets), v(m.indices), v(m.values), it(m.offset_type),
                               it(m.index_type), base, type);
      break;
    case sp::Format::kCsc:
      st = S.cusparseCreateCsc(&d.a, m.rows, m.cols, m.nnz, v(m.offsets), v(m.indices), v(m.values), it(m.offset_type),
                               it(m.index_type), base, type);
      break;
    case sp::Format::kBlockedEll:
      st = S.cusparseCreateBlockedEll(&d.a, m.rows, m.cols, m.block, m.ell_cols, v(m.indices), v(m.values),
                                      it(m.index_type), base, type);
      break;
    case sp::Format::kCoo:
      st = S.cusparseCreateCoo(&d.a, m.rows, m.cols, m.nnz, v(m.offsets), v(m.indices), v(m.values), it(m.index_type),
                               base, type);
      break;
  }
  RGPU_TRY(SparseApi::check(st, "cusparseCreate (sparse matrix)"));
  if (a.op == sp::Op::kSpMV) {
    RGPU_TRY(SparseApi::check(S.cusparseCreateDnVec(&d.x, a.b.rows, v(a.b.values), type), "cusparseCreateDnVec"));
    return SparseApi::check(S.cusparseCreateDnVec(&d.y, a.c.rows, v(a.c.values), type), "cusparseCreateDnVec");
  }
  for (auto [m2, out] : {std::pair{&a.b, &d.b}, std::pair{&a.c, &d.c}})
    RGPU_TRY(SparseApi::check(S.cusparseCreateDnMat(out, m2->rows, m2->cols, m2->ld, v(m2->values), type,
                                                    static_cast<cusparseOrder_t>(m2->order)),
                              "cusparseCreateDnMat"));
  return Status::ok();
}

const void* scalarOf(const sp::Scalar& s) {
  return s.device ? reinterpret_cast<const void*>(s.ptr) : static_cast<const void*>(s.bytes);
}

}  // namespace

Result<cusparseHandle_t> CudaBackend::sparseHandle(int dev) {
  if (!sparse_tried_) {
    sparse_tried_ = true;
    auto a = SparseApi::load(opts_.cusparse_library);
    if (a) {
      sparse_api_ = std::move(*a);
      RGPU_LOG_INFO("cuda: cuSPARSE loaded ({})", opts_.cusparse_library);
    } else {
      sparse_error_ = a.status();
      RGPU_LOG_WARN("cuda: {}", sparse_error_.message());
    }
  }
  if (!sparse_api_) return sparse_error_;
  RGPU_TRY(use(dev));
  cusparseHandle_t& h = sparse_handles_[dev];
  if (!h) RGPU_TRY(SparseApi::check(sparse_api_->cusparseCreate(&h), "cusparseCreate"));
  return h;
}

void CudaBackend::releaseSparse() {
  for (auto& [dev, h] : sparse_handles_)
    if (h && use(dev)) sparse_api_->cusparseDestroy(h);
  sparse_handles_.clear();
}

// Runs `f(handle, descriptors, alpha, beta)` for `a` on `dev` with the call's pointer mode.
template <typename F>
Status CudaBackend::withSparse(int dev, const sp::Args& a, F&& f) {
  auto h = sparseHandle(dev);
  if (!h) return h.status();
  SparseApi& S = *sparse_api_;
  Descriptors d{S};
  RGPU_TRY(describe(S, a, d));
  RGPU_TRY(SparseApi::check(
      S.cusparseSetPointerMode(*h, a.alpha.device ? CUSPARSE_POINTER_MODE_DEVICE : CUSPARSE_POINTER_MODE_HOST),
      "cusparseSetPointerMode"));
  return f(*h, d);
}

Result<uint64_t> CudaBackend::sparseBufferSize(int device, const sp::Args& a) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Status(err::kInvalidDevice, "invalid device");
  if (a.alpha.device != a.beta.device) return Status(err::kInvalidValue, "alpha and beta in different pointer modes");
  size_t size = 0;
  RGPU_TRY(withSparse(device, a, [&](cusparseHandle_t h, Descriptors& d) {
    SparseApi* S = sparse_api_.get();
    const auto op = static_cast<cusparseOperation_t>(a.op_a);
    const auto type = static_cast<cudaDataType>(a.compute_type);
    if (a.op == sp::Op::kSpMV)
      return SparseApi::check(S->cusparseSpMV_bufferSize(h, op, scalarOf(a.alpha), d.a, d.x, scalarOf(a.beta), d.y,
                                                         type, static_cast<cusparseSpMVAlg_t>(a.alg), &size),
                              "cusparseSpMV_bufferSize");
    return SparseApi::check(S->cusparseSpMM_bufferSize(h, op, static_cast<cusparseOperation_t>(a.op_b),
                                                       scalarOf(a.alpha), d.a, d.b, scalarOf(a.beta), d.c, type,
                                                       static_cast<cusparseSpMMAlg_t>(a.alg), &size),
                            "cusparseSpMM_bufferSize");
  }));
  return uint64_t{size};
}

Status CudaBackend::sparse(StreamKey key, const sp::Args& a) {
  auto s = streamOf(key);
  if (!s) return s.status();
  if (sp::isSpGemm(a.op)) return spgemm(s->first, s->second, a);
  if (a.alpha.device != a.beta.device) return Status(err::kInvalidValue, "alpha and beta in different pointer modes");
  const int dev = s->first;
  return withSparse(dev, a, [&](cusparseHandle_t h, Descriptors& d) -> Status {
    SparseApi& S = *sparse_api_;
    RGPU_TRY(SparseApi::check(S.cusparseSetStream(h, reinterpret_cast<cudaStream_t>(s->second)), "cusparseSetStream"));
    const auto op = static_cast<cusparseOperation_t>(a.op_a);
    const auto type = static_cast<cudaDataType>(a.compute_type);
    void* buffer = reinterpret_cast<void*>(a.buffer);
    return asKernel(dev, s->second, sp::opName(a.op), [&] {
      if (a.op == sp::Op::kSpMV)
        return SparseApi::check(S.cusparseSpMV(h, op, scalarOf(a.alpha), d.a, d.x, scalarOf(a.beta), d.y, type,
                                               static_cast<cusparseSpMVAlg_t>(a.alg), buffer),
                                "cusparseSpMV");
      return SparseApi::check(S.cusparseSpMM(h, op, static_cast<cusparseOperation_t>(a.op_b), scalarOf(a.alpha), d.a,
                                             d.b, scalarOf(a.beta), d.c, type, static_cast<cusparseSpMMAlg_t>(a.alg),
                                             buffer),
                              "cusparseSpMM");
    });
  });
}

}  // namespace rgpu::server::cuda
