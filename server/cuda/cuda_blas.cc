// CudaBackend's cuBLAS and cuBLASLt calls: NVIDIA's libraries (blas_api.h)
// in the session's primary context, on the session's streams, each call run
// as the session's kernel (launch gate, GPU time, watchdog). A reduction whose
// result goes to the client is computed into a small device buffer and copied
// back in stream order, so the dispatch thread never blocks on the GPU.
#include <climits>

#include "common/blas_types.h"
#include "common/log.h"
#include "server/cuda/cuda_backend.h"
#include "server/cuda/cuda_blas_complex.h"

namespace rgpu::server::cuda {

using namespace common::blas;

namespace {

// cuBLASLt descriptors for one matmul, destroyed with it.
struct LtDescriptors {
  BlasApi& api;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  ~LtDescriptors() {
    for (cublasLtMatrixLayout_t l : {a, b, c, d})
      if (l) api.cublasLtMatrixLayoutDestroy(l);
    if (desc) api.cublasLtMatmulDescDestroy(desc);
  }
};

Status describe(BlasApi& B, const LtArgs& a, LtDescriptors& out) {
  RGPU_TRY(BlasApi::check(B.cublasLtMatmulDescCreate(&out.desc, static_cast<cublasComputeType_t>(a.compute),
                                                     static_cast<cudaDataType_t>(a.scale_type)),
                          "cublasLtMatmulDescCreate"));
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& v) {
    return BlasApi::check(B.cublasLtMatmulDescSetAttribute(out.desc, attr, &v, sizeof v), "cublasLtMatmulDescSetAttribute");
  };
  RGPU_TRY(set(CUBLASLT_MATMUL_DESC_POINTER_MODE, static_cast<int32_t>(a.pointer_mode)));
  RGPU_TRY(set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(a.trans_a)));
  RGPU_TRY(set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(a.trans_b)));
  RGPU_TRY(set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(a.epilogue)));
  if (a.bias) {
    RGPU_TRY(set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, reinterpret_cast<void*>(a.bias)));
    RGPU_TRY(set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(a.bias_type)));
    RGPU_TRY(set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, static_cast<int64_t>(a.bias_batch_stride)));
  }
  if (a.aux) {
    RGPU_TRY(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, reinterpret_cast<void*>(a.aux)));
    RGPU_TRY(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(a.aux_ld)));
    RGPU_TRY(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, static_cast<int64_t>(a.aux_batch_stride)));
    if (a.epilogue & (lt::kGelu | 64))  // GELU input; a ReLU mask has no data type
      RGPU_TRY(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, static_cast<int32_t>(a.aux_type)));
  }
  auto layout = [&](const LtMatrix& m, cublasLtMatrixLayout_t& l) -> Status {
    RGPU_TRY(BlasApi::check(B.cublasLtMatrixLayoutCreate(&l, static_cast<cudaDataType>(m.type), m.rows, m.cols, m.ld),
                            "cublasLtMatrixLayoutCreate"));
    auto lset = [&](cublasLtMatrixLayoutAttribute_t attr, const auto& v) {
      return BlasApi::check(B.cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v), "cublasLtMatrixLayoutSetAttribute");
    };
    RGPU_TRY(lset(CUBLASLT_MATRIX_LAYOUT_ORDER, static_cast<int32_t>(m.order)));
    RGPU_TRY(lset(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(m.batch)));
    return lset(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, static_cast<int64_t>(m.batch_stride));
  };
  RGPU_TRY(layout(a.a, out.a));
  RGPU_TRY(layout(a.b, out.b));
  RGPU_TRY(layout(a.c, out.c));
  return layout(a.d, out.d);
}

// One cuBLAS call of `a` (already checked by the session).
Status runBlas(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta, uint64_t result) {
  bool f = a.a_type == kR32F;
  const char* name = blasOpName(a.op);
  auto xs = reinterpret_cast<float*>(a.x), ys = reinterpret_cast<float*>(a.y);
  auto xd = reinterpret_cast<double*>(a.x), yd = reinterpret_cast<double*>(a.y);
  auto fa = static_cast<const float*>(alpha), fb = static_cast<const float*>(beta);
  auto da = static_cast<const double*>(alpha), db = static_cast<const double*>(beta);
  auto ta = static_cast<cublasOperation_t>(a.trans_a), tb = static_cast<cublasOperation_t>(a.trans_b);
  auto check = [&](cublasStatus_t s) { return BlasApi::check(s, name); };
  if (isComplex(a.a_type) && a.op >= BlasOp::kGeam && a.op <= BlasOp::kSyr2k) return runComplexBlas(B, h, a, alpha, beta);
  if (isComplex(a.a_type) && a.op <= BlasOp::kGer) return runComplexBlas12(B, h, a, alpha, beta, result);
  switch (a.op) {
    case BlasOp::kHerk: case BlasOp::kHer2k: case BlasOp::kHemm: return runComplexBlas(B, h, a, alpha, beta);
    case BlasOp::kDotc: case BlasOp::kGerc: return runComplexBlas12(B, h, a, alpha, beta, result);
    case BlasOp::kTrmv: case BlasOp::kTrsv: case BlasOp::kSymv: case BlasOp::kHemv:
      return runLevel2More(B, h, a, alpha, beta);
    case BlasOp::kAxpy:
      return check(f ? B.cublasSaxpy_v2_64(h, a.n, fa, xs, a.incx, ys, a.incy)
                     : B.cublasDaxpy_v2_64(h, a.n, da, xd, a.incx, yd, a.incy));
    case BlasOp::kScal:
      return check(f ? B.cublasSscal_v2_64(h, a.n, fa, xs, a.incx) : B.cublasDscal_v2_64(h, a.n, da, xd, a.incx));
    case BlasOp::kCopy:
      return check(f ? B.cublasScopy_v2_64(h, a.n, xs, a.incx, ys, a.incy)
                     : B.cublasDcopy_v2_64(h, a.n, xd, a.incx, yd, a.incy));
    case BlasOp::kSwap:
      return check(f ? B.cublasSswap_v2_64(h, a.n, xs, a.incx, ys, a.incy)
                     : B.cublasDswap_v2_64(h, a.n, xd, a.incx, yd, a.incy));
    case BlasOp::kDot:
      return check(f ? B.cublasSdot_v2_64(h, a.n, xs, a.incx, ys, a.incy, reinterpret_cast<float*>(result))
                     : B.cublasDdot_v2_64(h, a.n, xd, a.incx, yd, a.incy, reinterpret_cast<double*>(result)));
    case BlasOp::kNrm2:
      return check(f ? B.cublasSnrm2_v2_64(h, a.n, xs, a.incx, reinterpret_cast<float*>(result))
                     : B.cublasDnrm2_v2_64(h, a.n, xd, a.incx, reinterpret_cast<double*>(result)));
    case BlasOp::kAsum:
      return check(f ? B.cublasSasum_v2_64(h, a.n, xs, a.incx, reinterpret_cast<float*>(result))
                     : B.cublasDasum_v2_64(h, a.n, xd, a.incx, reinterpret_cast<double*>(result)));
    case BlasOp::kIamax: case BlasOp::kIamin: {
      bool max = a.op == BlasOp::kIamax;
      if (a.result64) {
        auto r = reinterpret_cast<int64_t*>(result);
        return check(f ? (max ? B.cublasIsamax_v2_64 : B.cublasIsamin_v2_64)(h, a.n, xs, a.incx, r)
                       : (max ? B.cublasIdamax_v2_64 : B.cublasIdamin_v2_64)(h, a.n, xd, a.incx, r));
      }
      if (a.n > INT_MAX || a.incx > INT_MAX || a.incx < INT_MIN)
        return Status(err::kInvalidValue, std::string(name) + ": n or incx beyond int (use the _64 call)");
      auto r = reinterpret_cast<int*>(result);
      int n = static_cast<int>(a.n), inc = static_cast<int>(a.incx);
      return check(f ? (max ? B.cublasIsamax_v2 : B.cublasIsamin_v2)(h, n, xs, inc, r)
                     : (max ? B.cublasIdamax_v2 : B.cublasIdamin_v2)(h, n, xd, inc, r));
    }
    case BlasOp::kGemv:
      return check(f ? B.cublasSgemv_v2_64(h, ta, a.m, a.n, fa, reinterpret_cast<float*>(a.a), a.lda, xs, a.incx, fb, ys,
                                           a.incy)
                     : B.cublasDgemv_v2_64(h, ta, a.m, a.n, da, reinterpret_cast<double*>(a.a), a.lda, xd, a.incx, db,
                                           yd, a.incy));
    case BlasOp::kGer:
      return check(f ? B.cublasSger_v2_64(h, a.m, a.n, fa, xs, a.incx, ys, a.incy, reinterpret_cast<float*>(a.a), a.lda)
                     : B.cublasDger_v2_64(h, a.m, a.n, da, xd, a.incx, yd, a.incy, reinterpret_cast<double*>(a.a),
                                          a.lda));
    case BlasOp::kGemm:
      return check(B.cublasGemmEx_64(h, ta, tb, a.m, a.n, a.k, alpha, reinterpret_cast<void*>(a.a),
                                     static_cast<cudaDataType>(a.a_type), a.lda, reinterpret_cast<void*>(a.b),
                                     static_cast<cudaDataType>(a.b_type), a.ldb, beta, reinterpret_cast<void*>(a.c),
                                     static_cast<cudaDataType>(a.c_type), a.ldc,
                                     static_cast<cublasComputeType_t>(a.compute), CUBLAS_GEMM_DEFAULT));
    case BlasOp::kGemmStridedBatched:
      return check(B.cublasGemmStridedBatchedEx_64(
          h, ta, tb, a.m, a.n, a.k, alpha, reinterpret_cast<void*>(a.a), static_cast<cudaDataType>(a.a_type), a.lda,
          a.stride_a, reinterpret_cast<void*>(a.b), static_cast<cudaDataType>(a.b_type), a.ldb, a.stride_b, beta,
          reinterpret_cast<void*>(a.c), static_cast<cudaDataType>(a.c_type), a.ldc, a.stride_c, a.batch,
          static_cast<cublasComputeType_t>(a.compute), CUBLAS_GEMM_DEFAULT));
    case BlasOp::kGemmBatched:
      // The pointer arrays go to the GPU as they are: this session's process
      // and context can reach no other session's memory.
      return check(B.cublasGemmBatchedEx_64(
          h, ta, tb, a.m, a.n, a.k, alpha, reinterpret_cast<const void* const*>(a.a),
          static_cast<cudaDataType>(a.a_type), a.lda, reinterpret_cast<const void* const*>(a.b),
          static_cast<cudaDataType>(a.b_type), a.ldb, beta, reinterpret_cast<void* const*>(a.c),
          static_cast<cudaDataType>(a.c_type), a.ldc, a.batch, static_cast<cublasComputeType_t>(a.compute),
          CUBLAS_GEMM_DEFAULT));
    case BlasOp::kGeam:
      return check(f ? B.cublasSgeam_64(h, ta, tb, a.m, a.n, fa, reinterpret_cast<float*>(a.a), a.lda, fb,
                                        reinterpret_cast<float*>(a.b), a.ldb, reinterpret_cast<float*>(a.c), a.ldc)
                     : B.cublasDgeam_64(h, ta, tb, a.m, a.n, da, reinterpret_cast<double*>(a.a), a.lda, db,
                                        reinterpret_cast<double*>(a.b), a.ldb, reinterpret_cast<double*>(a.c), a.ldc));
    case BlasOp::kDgmm: {
      auto side = static_cast<cublasSideMode_t>(a.side);
      return check(f ? B.cublasSdgmm_64(h, side, a.m, a.n, reinterpret_cast<float*>(a.a), a.lda, xs, a.incx,
                                        reinterpret_cast<float*>(a.c), a.ldc)
                     : B.cublasDdgmm_64(h, side, a.m, a.n, reinterpret_cast<double*>(a.a), a.lda, xd, a.incx,
                                        reinterpret_cast<double*>(a.c), a.ldc));
    }
    case BlasOp::kTrsm: {
      auto side = static_cast<cublasSideMode_t>(a.side);
      auto uplo = static_cast<cublasFillMode_t>(a.uplo);
      auto diag = static_cast<cublasDiagType_t>(a.diag);
      return check(f ? B.cublasStrsm_v2_64(h, side, uplo, ta, diag, a.m, a.n, fa, reinterpret_cast<float*>(a.a), a.lda,
                                           reinterpret_cast<float*>(a.b), a.ldb)
                     : B.cublasDtrsm_v2_64(h, side, uplo, ta, diag, a.m, a.n, da, reinterpret_cast<double*>(a.a),
                                           a.lda, reinterpret_cast<double*>(a.b), a.ldb));
    }
    case BlasOp::kSyrk: {
      auto uplo = static_cast<cublasFillMode_t>(a.uplo);
      return check(f ? B.cublasSsyrk_v2_64(h, uplo, ta, a.n, a.k, fa, reinterpret_cast<float*>(a.a), a.lda, fb,
                                           reinterpret_cast<float*>(a.c), a.ldc)
                     : B.cublasDsyrk_v2_64(h, uplo, ta, a.n, a.k, da, reinterpret_cast<double*>(a.a), a.lda, db,
                                           reinterpret_cast<double*>(a.c), a.ldc));
    }
    case BlasOp::kTrmm: {
      auto side = static_cast<cublasSideMode_t>(a.side);
      auto uplo = static_cast<cublasFillMode_t>(a.uplo);
      auto diag = static_cast<cublasDiagType_t>(a.diag);
      return check(f ? B.cublasStrmm_v2_64(h, side, uplo, ta, diag, a.m, a.n, fa, reinterpret_cast<float*>(a.a), a.lda,
                                           reinterpret_cast<float*>(a.b), a.ldb, reinterpret_cast<float*>(a.c), a.ldc)
                     : B.cublasDtrmm_v2_64(h, side, uplo, ta, diag, a.m, a.n, da, reinterpret_cast<double*>(a.a),
                                           a.lda, reinterpret_cast<double*>(a.b), a.ldb,
                                           reinterpret_cast<double*>(a.c), a.ldc));
    }
    case BlasOp::kSymm: {
      auto side = static_cast<cublasSideMode_t>(a.side);
      auto uplo = static_cast<cublasFillMode_t>(a.uplo);
      return check(f ? B.cublasSsymm_v2_64(h, side, uplo, a.m, a.n, fa, reinterpret_cast<float*>(a.a), a.lda,
                                           reinterpret_cast<float*>(a.b), a.ldb, fb, reinterpret_cast<float*>(a.c),
                                           a.ldc)
                     : B.cublasDsymm_v2_64(h, side, uplo, a.m, a.n, da, reinterpret_cast<double*>(a.a), a.lda,
                                           reinterpret_cast<double*>(a.b), a.ldb, db,
                                           reinterpret_cast<double*>(a.c), a.ldc));
    }
    case BlasOp::kGetrfBatched: case BlasOp::kGetrsBatched: case BlasOp::kGetriBatched:
    case BlasOp::kMatinvBatched: case BlasOp::kGeqrfBatched:
      return runFactorization(B, h, a);
    case BlasOp::kSyr2k: {
      auto uplo = static_cast<cublasFillMode_t>(a.uplo);
      return check(f ? B.cublasSsyr2k_v2_64(h, uplo, ta, a.n, a.k, fa, reinterpret_cast<float*>(a.a), a.lda,
                                            reinterpret_cast<float*>(a.b), a.ldb, fb, reinterpret_cast<float*>(a.c),
                                            a.ldc)
                     : B.cublasDsyr2k_v2_64(h, uplo, ta, a.n, a.k, da, reinterpret_cast<double*>(a.a), a.lda,
                                            reinterpret_cast<double*>(a.b), a.ldb, db,
                                            reinterpret_cast<double*>(a.c), a.ldc));
    }
  }
  return Status(err::kNotSupported, "unknown cuBLAS operation");
}

}  // namespace

Result<BlasApi*> CudaBackend::blasApi() {
  if (!blas_tried_) {
    blas_tried_ = true;
    auto a = BlasApi::load(opts_.cublas_library, opts_.cublaslt_library);
    if (a) {
      blas_api_ = std::move(*a);
      RGPU_LOG_INFO("cuda: cuBLAS loaded ({}, {})", opts_.cublas_library, opts_.cublaslt_library);
    } else {
      blas_error_ = a.status();
      RGPU_LOG_WARN("cuda: {}", blas_error_.message());
    }
  }
  if (!blas_api_) return blas_error_;
  return blas_api_.get();
}

Result<cublasHandle_t> CudaBackend::blasHandle(int dev) {
  auto api = blasApi();
  if (!api) return api.status();
  RGPU_TRY(use(dev));
  Device& d = devices_[dev];
  if (!d.blas) RGPU_TRY(BlasApi::check((*api)->cublasCreate_v2(&d.blas), "cublasCreate"));
  return d.blas;
}

Result<cublasLtHandle_t> CudaBackend::ltHandle(int dev) {
  auto api = blasApi();
  if (!api) return api.status();
  RGPU_TRY(use(dev));
  Device& d = devices_[dev];
  if (!d.lt) RGPU_TRY(BlasApi::check((*api)->cublasLtCreate(&d.lt), "cublasLtCreate"));
  return d.lt;
}

void CudaBackend::releaseBlas() {
  for (size_t i = 0; i < devices_.size(); ++i) {
    Device& d = devices_[i];
    if (!d.blas && !d.lt && d.scratch_chunks.empty()) continue;
    if (!use(static_cast<int>(i))) continue;
    if (d.blas) blas_api_->cublasDestroy_v2(d.blas);
    if (d.lt) blas_api_->cublasLtDestroy(d.lt);
    for (CUdeviceptr c : d.scratch_chunks) (void)api_->cuMemFree(c);
    d.blas = nullptr;
    d.lt = nullptr;
    d.scratch_chunks.clear();
    d.scratch_free.clear();
  }
}

namespace {
constexpr uint64_t kScratchWord = 16;        // the widest result: a double or an int64 index
constexpr uint64_t kScratchChunk = 64 << 10;  // 4,096 words
}  // namespace

Result<CUdeviceptr> CudaBackend::takeScratch(int dev) {
  {
    std::lock_guard lock(mu_);
    auto& free = devices_[dev].scratch_free;
    if (!free.empty()) {
      CUdeviceptr w = free.back();
      free.pop_back();
      return w;
    }
  }
  DriverApi& api = *api_;
  CUdeviceptr chunk = 0;
  RGPU_TRY(RGPU_CU(cuMemAlloc(&chunk, kScratchChunk)));
  std::lock_guard lock(mu_);
  Device& d = devices_[dev];
  d.scratch_chunks.push_back(chunk);
  for (uint64_t off = kScratchChunk; off > kScratchWord; off -= kScratchWord) d.scratch_free.push_back(chunk + off - kScratchWord);
  return chunk;  // the first word
}

void CudaBackend::giveScratch(int dev, CUdeviceptr word) {
  std::lock_guard lock(mu_);
  devices_[dev].scratch_free.push_back(word);
}

Status CudaBackend::blas(StreamKey key, const BlasArgs& a, ReadDone done) {
  auto s = streamOf(key);
  if (!s) return s.status();
  int dev = s->first;
  auto h = blasHandle(dev);
  if (!h) return h.status();
  BlasApi& B = *blas_api_;
  size_t result_bytes = blasResultBytes(a);
  bool to_host = result_bytes && !a.result;
  CUdeviceptr word = 0;
  if (to_host) {
    auto w = takeScratch(dev);
    if (!w) return w.status();
    word = *w;
  }
  uint64_t result = to_host ? word : a.result;
  // Reductions write their result to device memory (the client's, or ours on
  // its way back); alpha and beta are where the client's pointer mode put them.
  bool device_scalars = result_bytes ? true : a.alpha.device;
  bool uses_beta = a.op == BlasOp::kGemv || (a.op >= BlasOp::kGemm && a.op != BlasOp::kDgmm && a.op != BlasOp::kTrsm &&
                                                   a.op != BlasOp::kTrmm && a.op != BlasOp::kDotc && a.op != BlasOp::kGerc &&
                                                   a.op != BlasOp::kTrmv && a.op != BlasOp::kTrsv);
  if (uses_beta && a.beta.device != a.alpha.device)
    return Status(err::kInvalidValue, "alpha and beta in different pointer modes");
  auto cs = reinterpret_cast<cudaStream_t>(s->second);
  // Host scalars are read by cuBLAS before it returns.
  const void* alpha = a.alpha.device ? reinterpret_cast<const void*>(a.alpha.ptr) : a.alpha.bytes;
  const void* beta = a.beta.device ? reinterpret_cast<const void*>(a.beta.ptr) : a.beta.bytes;
  Status st = [&]() -> Status {
    // cublasSetStream also puts back cuBLAS's own workspace pool: a workspace
    // is set only when the client gave one (setting none would disable it).
    RGPU_TRY(BlasApi::check(B.cublasSetStream_v2(*h, cs), "cublasSetStream"));
    RGPU_TRY(BlasApi::check(
        B.cublasSetPointerMode_v2(*h, device_scalars ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST),
        "cublasSetPointerMode"));
    RGPU_TRY(BlasApi::check(B.cublasSetMathMode(*h, static_cast<cublasMath_t>(a.math_mode)), "cublasSetMathMode"));
    if (a.workspace && a.workspace_size)
      RGPU_TRY(BlasApi::check(B.cublasSetWorkspace_v2(*h, reinterpret_cast<void*>(a.workspace), a.workspace_size),
                              "cublasSetWorkspace"));
    return asKernel(dev, s->second, std::string("cublas ") + blasOpName(a.op),
                    [&] { return runBlas(B, *h, a, alpha, beta, result); });
  }();
  if (!to_host) return st;
  if (!st) {
    giveScratch(dev, word);  // nothing was queued that writes it
    return st;
  }
  // On failure here the reduction may still write the word: it is not reused.
  return copyFromDevice(key, word, result_bytes,
                        [this, dev, word, done = std::move(done)](Status r, const uint8_t* d, uint64_t n, const OnWire& w) {
                          done(r, d, n, w);
                          giveScratch(dev, word);
                        });
}

Status CudaBackend::ltMatmul(StreamKey key, const LtArgs& a) {
  auto s = streamOf(key);
  if (!s) return s.status();
  int dev = s->first;
  auto lt = ltHandle(dev);
  if (!lt) return lt.status();
  BlasApi& B = *blas_api_;
  LtDescriptors d{B};
  RGPU_TRY(describe(B, a, d));
  // An algorithm from a heuristic is used only once cuBLASLt agrees it fits
  // this problem (the bytes come from the client).
  const cublasLtMatmulAlgo_t* algo = nullptr;
  cublasLtMatmulAlgo_t given;
  if (a.algo.size() == sizeof given) {
    std::memcpy(&given, a.algo.data(), sizeof given);
    cublasLtMatmulHeuristicResult_t r{};
    if (B.cublasLtMatmulAlgoCheck(*lt, d.desc, d.a, d.b, d.c, d.d, &given, &r) == CUBLAS_STATUS_SUCCESS &&
        r.workspaceSize <= a.workspace_size)
      algo = &given;
  }
  const void* alpha = a.alpha.device ? reinterpret_cast<const void*>(a.alpha.ptr) : a.alpha.bytes;
  const void* beta = a.beta.device ? reinterpret_cast<const void*>(a.beta.ptr) : a.beta.bytes;
  return asKernel(dev, s->second, "cublasLtMatmul", [&] {
    return BlasApi::check(B.cublasLtMatmul(*lt, d.desc, alpha, reinterpret_cast<void*>(a.a.ptr), d.a,
                                           reinterpret_cast<void*>(a.b.ptr), d.b, beta, reinterpret_cast<void*>(a.c.ptr),
                                           d.c, reinterpret_cast<void*>(a.d.ptr), d.d, algo,
                                           reinterpret_cast<void*>(a.workspace), a.workspace_size,
                                           reinterpret_cast<cudaStream_t>(s->second)),
                          "cublasLtMatmul");
  });
}

Result<std::vector<Backend::LtAlgo>> CudaBackend::ltHeuristic(int device, const LtArgs& a, uint32_t requested,
                                                              uint64_t max_workspace) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) return Status(err::kInvalidDevice, "invalid device");
  auto lt = ltHandle(device);
  if (!lt) return lt.status();
  BlasApi& B = *blas_api_;
  LtDescriptors d{B};
  RGPU_TRY(describe(B, a, d));
  cublasLtMatmulPreference_t pref = nullptr;
  RGPU_TRY(BlasApi::check(B.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  Status s = BlasApi::check(B.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                   &max_workspace, sizeof max_workspace),
                            "cublasLtMatmulPreferenceSetAttribute");
  std::vector<cublasLtMatmulHeuristicResult_t> results(requested);
  int found = 0;
  if (s && requested)
    s = BlasApi::check(B.cublasLtMatmulAlgoGetHeuristic(*lt, d.desc, d.a, d.b, d.c, d.d, pref,
                                                        static_cast<int>(requested), results.data(), &found),
                       "cublasLtMatmulAlgoGetHeuristic");
  B.cublasLtMatmulPreferenceDestroy(pref);
  // No algorithm fits: an empty list (the client answers NOT_SUPPORTED, as cuBLASLt does).
  if (!s && s.code() != err::kBlasStatusBase + CUBLAS_STATUS_NOT_SUPPORTED) return s;
  std::vector<LtAlgo> out;
  for (int i = 0; i < found && s; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    LtAlgo x;
    x.algo.assign(reinterpret_cast<const char*>(&results[i].algo), sizeof results[i].algo);
    x.workspace = results[i].workspaceSize;
    x.waves = results[i].wavesCount;
    out.push_back(std::move(x));
  }
  return out;
}

// cuRAND: the values do not depend on the device's memory, so they are
// computed here as NVIDIA's library computes them and written by a copy in
// the stream's order (NVIDIA's libcurand generating on the GPU is not used yet).
// In pieces of kRandPieceValues, so a large request holds little host memory.
Status CudaBackend::randFill(StreamKey s, const common::curand::Fill& f, DevPtr out, uint64_t count) {
  constexpr uint64_t kRandPieceValues = 4ull << 20;
  const uint32_t width = common::curand::valueBytes(f.dist);
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(kRandPieceValues, count - done);
    // (kRandPieceValues is even: a piece never splits a pair of normals.)
    const common::curand::Fill piece = common::curand::callPart(f, done);
    auto values = std::make_shared<std::vector<uint8_t>>(n * width);
    RGPU_TRY(common::curand::generate(piece, values->data(), n));
    RGPU_TRY(copyToDevice(s, out + done * width, values, values->size()));
    done += n;
  }
  return Status::ok();
}

}  // namespace rgpu::server::cuda
