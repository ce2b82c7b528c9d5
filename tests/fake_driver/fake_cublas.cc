// A fake cuBLAS and cuBLASLt (one library for both) for testing the CUDA
// backend's BLAS path without a GPU: the entry points rgpu's worker takes from
// NVIDIA's libraries (server/cuda/blas_api.h), computed by rgpu's own CPU
// implementation (server/sim_blas) on the fake driver's memory (host memory)
// and queued on the fake driver's executor in stream order
// (rgpu_fake_cuda_enqueue, which also records each call in the driver's log).
// Scalars in host memory are copied when the call is made, as cuBLAS reads
// them before it returns.
//
// As NVIDIA's: cublasSetStream puts back the library's own workspace pool,
// and cublasSetWorkspace(h, NULL, 0) disables the workspace (both recorded in
// the driver's log). $RGPU_FAKE_CUBLAS_FAIL="name=status,..." makes every
// call of those names fail with that cublasStatus_t, doing nothing.
#include <cuda.h>
#include <cublasLt.h>
#include <cublas_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>

#include "server/sim/sim_blas.h"
#include "tests/fake_driver/fake_library.h"

using rgpu::server::BlasArgs;
using rgpu::server::BlasOp;
using rgpu::server::BlasScalar;
using rgpu::server::LtArgs;
using rgpu::server::LtMatrix;

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pm = CUBLAS_POINTER_MODE_HOST;
  bool workspace_disabled = false;
};
struct cublasLtContext {
  int unused = 0;
};

namespace {

using rgpu::fake::record;

// The status $RGPU_FAKE_CUBLAS_FAIL gives calls of `name`; SUCCESS for none.
cublasStatus_t injected(const char* name) {
  static const std::map<std::string, int> fails = [] {
    std::map<std::string, int> m;
    const char* env = std::getenv("RGPU_FAKE_CUBLAS_FAIL");
    std::string s = env ? env : "";
    for (size_t at = 0; at < s.size();) {
      size_t end = s.find(',', at), eq = s.find('=', at);
      if (end == std::string::npos) end = s.size();
      if (eq != std::string::npos && eq < end) m[s.substr(at, eq - at)] = std::atoi(s.substr(eq + 1, end - eq - 1).c_str());
      at = end + 1;
    }
    return m;
  }();
  auto it = fails.find(name);
  if (it == fails.end()) return CUBLAS_STATUS_SUCCESS;
  record(std::string(name) + " -> injected cuBLAS status " + std::to_string(it->second));
  return static_cast<cublasStatus_t>(it->second);
}

// Queues `work` (returning Status) on the stream.
template <typename Work>
cublasStatus_t submit(cudaStream_t stream, const char* what, Work work) {
  bool queued = rgpu::fake::enqueue(reinterpret_cast<CUstream>(stream), what,
                                    [work = std::move(work)]() mutable { return work() ? 0 : 1; });
  return queued ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

BlasScalar scalar(const void* p, size_t bytes, bool device) {
  BlasScalar s;
  s.device = device;
  if (device) s.ptr = reinterpret_cast<uint64_t>(p);
  else if (p) std::memcpy(s.bytes, p, bytes);
  return s;
}

cublasStatus_t blas(cublasHandle_t h, const char* name, BlasArgs a) {
  if (cublasStatus_t s = injected(name)) return s;
  return submit(h->stream, name, [a] { return rgpu::server::simblas::run(a, [](uint64_t, uint64_t) { return true; }, nullptr); });
}

template <typename T>
constexpr int32_t typeOf() {
  if constexpr (std::is_same_v<T, cuComplex>) return CUDA_C_32F;
  else if constexpr (std::is_same_v<T, cuDoubleComplex>) return CUDA_C_64F;
  else return sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_64F;
}

template <typename T, typename S = T>
cublasStatus_t level1(cublasHandle_t h, const char* name, BlasOp op, int64_t n, const std::type_identity_t<S>* alpha,
                      const T* x,
                      int64_t incx, const T* y, int64_t incy, void* result, bool result64 = false) {
  BlasArgs a;
  a.op = op;
  a.a_type = a.b_type = typeOf<T>();
  a.c_type = typeOf<S>();  // (a complex scal's alpha type)
  a.n = n;
  a.x = reinterpret_cast<uint64_t>(x);
  a.incx = incx;
  a.y = reinterpret_cast<uint64_t>(y);
  a.incy = incy;
  a.alpha = scalar(alpha, sizeof(S), h->pm == CUBLAS_POINTER_MODE_DEVICE);
  a.result = reinterpret_cast<uint64_t>(result);
  a.result64 = result64;
  return blas(h, name, a);
}

template <typename T>
cublasStatus_t ger(cublasHandle_t h, const char* name, BlasOp op, int64_t m, int64_t n, const T* alpha, const T* x,
                   int64_t incx, const T* y, int64_t incy, T* A, int64_t lda) {
  BlasArgs a;
  a.op = op;
  a.a_type = a.b_type = typeOf<T>();
  a.m = m, a.n = n, a.lda = lda, a.incx = incx, a.incy = incy;
  a.a = reinterpret_cast<uint64_t>(A), a.x = reinterpret_cast<uint64_t>(x), a.y = reinterpret_cast<uint64_t>(y);
  a.alpha = scalar(alpha, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);
  return blas(h, name, a);
}

struct LtDesc {
  int32_t compute, scale, pm = 0, ta = 0, tb = 0, aux_type = -1, bias_type = -1;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint64_t bias = 0, aux = 0;
  int64_t bias_stride = 0, aux_ld = 0, aux_stride = 0;
};
struct LtLayout {
  LtMatrix m;
};
const char kAlgoMark[] = "fake-cublasLt-algo";

}  // namespace

#define API extern "C" __attribute__((visibility("default"))) cublasStatus_t

API cublasCreate_v2(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasDestroy_v2(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  h->workspace_disabled = false;  // back to the library's own workspace pool
  return CUBLAS_STATUS_SUCCESS;
}
API cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t m) {
  h->pm = m;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
API cublasSetWorkspace_v2(cublasHandle_t h, void* w, size_t size) {
  h->workspace_disabled = !w || !size;
  record(h->workspace_disabled ? std::string("cublasSetWorkspace_v2 disabled")
                               : "cublasSetWorkspace_v2 " + std::to_string(size));
  return CUBLAS_STATUS_SUCCESS;
}

#define L1(P, T)                                                                                                  \
  API cublas##P##axpy_v2_64(cublasHandle_t h, int64_t n, const T* al, const T* x, int64_t ix, T* y, int64_t iy) { \
    return level1<T>(h, "cublas" #P "axpy_v2_64", BlasOp::kAxpy, n, al, x, ix, y, iy, nullptr);                   \
  }                                                                                                               \
  API cublas##P##scal_v2_64(cublasHandle_t h, int64_t n, const T* al, T* x, int64_t ix) {                         \
    return level1<T>(h, "cublas" #P "scal_v2_64", BlasOp::kScal, n, al, x, ix, nullptr, 1, nullptr);              \
  }                                                                                                               \
  API cublas##P##copy_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, T* y, int64_t iy) {              \
    return level1<T>(h, "cublas" #P "copy_v2_64", BlasOp::kCopy, n, nullptr, x, ix, y, iy, nullptr);              \
  }                                                                                                               \
  API cublas##P##swap_v2_64(cublasHandle_t h, int64_t n, T* x, int64_t ix, T* y, int64_t iy) {                    \
    return level1<T>(h, "cublas" #P "swap_v2_64", BlasOp::kSwap, n, nullptr, x, ix, y, iy, nullptr);              \
  }                                                                                                               \
  API cublas##P##dot_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, const T* y, int64_t iy, T* r) {   \
    return level1<T>(h, "cublas" #P "dot_v2_64", BlasOp::kDot, n, nullptr, x, ix, y, iy, r);                      \
  }                                                                                                               \
  API cublas##P##nrm2_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, T* r) {                          \
    return level1<T>(h, "cublas" #P "nrm2_v2_64", BlasOp::kNrm2, n, nullptr, x, ix, nullptr, 1, r);               \
  }                                                                                                               \
  API cublas##P##asum_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, T* r) {                          \
    return level1<T>(h, "cublas" #P "asum_v2_64", BlasOp::kAsum, n, nullptr, x, ix, nullptr, 1, r);               \
  }
L1(S, float)
L1(D, double)

#define IAM(NAME, T, OP)                                                                              \
  API NAME##_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, int64_t* r) {               \
    return level1<T>(h, #NAME "_v2_64", OP, n, nullptr, x, ix, nullptr, 1, r, true);                \
  }                                                                                                 \
  API NAME##_v2(cublasHandle_t h, int n, const T* x, int ix, int* r) {                              \
    return level1<T>(h, #NAME "_v2", OP, n, nullptr, x, ix, nullptr, 1, r, false);                  \
  }
IAM(cublasIsamax, float, BlasOp::kIamax)
IAM(cublasIdamax, double, BlasOp::kIamax)
IAM(cublasIsamin, float, BlasOp::kIamin)
IAM(cublasIdamin, double, BlasOp::kIamin)

#define L2(P, T)                                                                                                    \
  API cublas##P##gemv_v2_64(cublasHandle_t h, cublasOperation_t t, int64_t m, int64_t n, const T* al, const T* A,   \
                            int64_t lda, const T* x, int64_t ix, const T* be, T* y, int64_t iy) {                   \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kGemv;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.trans_a = t;                                                                                                  \
    a.m = m, a.n = n, a.lda = lda, a.incx = ix, a.incy = iy;                                                        \
    a.a = reinterpret_cast<uint64_t>(A), a.x = reinterpret_cast<uint64_t>(x), a.y = reinterpret_cast<uint64_t>(y);  \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "gemv_v2_64", a);                                                                    \
  }                                                                                                                 \
  API cublas##P##ger_v2_64(cublasHandle_t h, int64_t m, int64_t n, const T* al, const T* x, int64_t ix, const T* y, \
                           int64_t iy, T* A, int64_t lda) {                                                         \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kGer;                                                                                            \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.m = m, a.n = n, a.lda = lda, a.incx = ix, a.incy = iy;                                                        \
    a.a = reinterpret_cast<uint64_t>(A), a.x = reinterpret_cast<uint64_t>(x), a.y = reinterpret_cast<uint64_t>(y);  \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    return blas(h, "cublas" #P "ger_v2_64", a);                                                                     \
  }
L2(S, float)
L2(D, double)

// Complex level 1 and 2 (R: the real type of nrm2, asum and Csscal/Zdscal's alpha).
#define CL12(P, T, R, RP, SS, p)                                                                                    \
  API cublas##P##axpy_v2_64(cublasHandle_t h, int64_t n, const T* al, const T* x, int64_t ix, T* y, int64_t iy) {   \
    return level1<T>(h, "cublas" #P "axpy_v2_64", BlasOp::kAxpy, n, al, x, ix, y, iy, nullptr);                     \
  }                                                                                                                 \
  API cublas##P##scal_v2_64(cublasHandle_t h, int64_t n, const T* al, T* x, int64_t ix) {                           \
    return level1<T>(h, "cublas" #P "scal_v2_64", BlasOp::kScal, n, al, x, ix, nullptr, 1, nullptr);                \
  }                                                                                                                 \
  API cublas##SS##scal_v2_64(cublasHandle_t h, int64_t n, const R* al, T* x, int64_t ix) {                          \
    return level1<T, R>(h, "cublas" #SS "scal_v2_64", BlasOp::kScal, n, al, x, ix, nullptr, 1, nullptr);            \
  }                                                                                                                 \
  API cublas##P##copy_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, T* y, int64_t iy) {                \
    return level1<T>(h, "cublas" #P "copy_v2_64", BlasOp::kCopy, n, nullptr, x, ix, y, iy, nullptr);                \
  }                                                                                                                 \
  API cublas##P##swap_v2_64(cublasHandle_t h, int64_t n, T* x, int64_t ix, T* y, int64_t iy) {                      \
    return level1<T>(h, "cublas" #P "swap_v2_64", BlasOp::kSwap, n, nullptr, x, ix, y, iy, nullptr);                \
  }                                                                                                                 \
  API cublas##P##dotu_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, const T* y, int64_t iy, T* r) {    \
    return level1<T>(h, "cublas" #P "dotu_v2_64", BlasOp::kDot, n, nullptr, x, ix, y, iy, r);                       \
  }                                                                                                                 \
  API cublas##P##dotc_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, const T* y, int64_t iy, T* r) {    \
    return level1<T>(h, "cublas" #P "dotc_v2_64", BlasOp::kDotc, n, nullptr, x, ix, y, iy, r);                      \
  }                                                                                                                 \
  API cublas##RP##nrm2_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, R* r) {                           \
    return level1<T>(h, "cublas" #RP "nrm2_v2_64", BlasOp::kNrm2, n, nullptr, x, ix, nullptr, 1, r);                \
  }                                                                                                                 \
  API cublas##RP##asum_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, R* r) {                           \
    return level1<T>(h, "cublas" #RP "asum_v2_64", BlasOp::kAsum, n, nullptr, x, ix, nullptr, 1, r);                \
  }                                                                                                                 \
  API cublasI##p##amax_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, int64_t* r) {                     \
    return level1<T>(h, "cublasI" #p "amax_v2_64", BlasOp::kIamax, n, nullptr, x, ix, nullptr, 1, r, true);         \
  }                                                                                                                 \
  API cublasI##p##amin_v2_64(cublasHandle_t h, int64_t n, const T* x, int64_t ix, int64_t* r) {                     \
    return level1<T>(h, "cublasI" #p "amin_v2_64", BlasOp::kIamin, n, nullptr, x, ix, nullptr, 1, r, true);         \
  }                                                                                                                 \
  API cublasI##p##amax_v2(cublasHandle_t h, int n, const T* x, int ix, int* r) {                                    \
    return level1<T>(h, "cublasI" #p "amax_v2", BlasOp::kIamax, n, nullptr, x, ix, nullptr, 1, r, false);           \
  }                                                                                                                 \
  API cublasI##p##amin_v2(cublasHandle_t h, int n, const T* x, int ix, int* r) {                                    \
    return level1<T>(h, "cublasI" #p "amin_v2", BlasOp::kIamin, n, nullptr, x, ix, nullptr, 1, r, false);           \
  }                                                                                                                 \
  API cublas##P##gemv_v2_64(cublasHandle_t h, cublasOperation_t t, int64_t m, int64_t n, const T* al, const T* A,   \
                            int64_t lda, const T* x, int64_t ix, const T* be, T* y, int64_t iy) {                   \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kGemv;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.trans_a = t;                                                                                                  \
    a.m = m, a.n = n, a.lda = lda, a.incx = ix, a.incy = iy;                                                        \
    a.a = reinterpret_cast<uint64_t>(A), a.x = reinterpret_cast<uint64_t>(x), a.y = reinterpret_cast<uint64_t>(y);  \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "gemv_v2_64", a);                                                                    \
  }                                                                                                                 \
  API cublas##P##geru_v2_64(cublasHandle_t h, int64_t m, int64_t n, const T* al, const T* x, int64_t ix,            \
                            const T* y, int64_t iy, T* A, int64_t lda) {                                            \
    return ger<T>(h, "cublas" #P "geru_v2_64", BlasOp::kGer, m, n, al, x, ix, y, iy, A, lda);                       \
  }                                                                                                                 \
  API cublas##P##gerc_v2_64(cublasHandle_t h, int64_t m, int64_t n, const T* al, const T* x, int64_t ix,            \
                            const T* y, int64_t iy, T* A, int64_t lda) {                                            \
    return ger<T>(h, "cublas" #P "gerc_v2_64", BlasOp::kGerc, m, n, al, x, ix, y, iy, A, lda);                      \
  }
// trmv, trsv, symv (S, D, C, Z) and hemv (C, Z).
template <typename T>
cublasStatus_t level2More(cublasHandle_t h, const char* name, BlasOp op, cublasFillMode_t uplo, cublasOperation_t t,
                          cublasDiagType_t diag, int64_t n, const T* al, const T* A, int64_t lda, const T* x,
                          int64_t ix, const T* be, T* y, int64_t iy) {
  BlasArgs a;
  a.op = op;
  a.a_type = a.b_type = typeOf<T>();
  a.uplo = uplo, a.trans_a = t, a.diag = diag, a.n = n, a.lda = lda, a.incx = ix, a.incy = iy;
  a.a = reinterpret_cast<uint64_t>(A), a.x = reinterpret_cast<uint64_t>(x), a.y = reinterpret_cast<uint64_t>(y);
  a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);
  a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);
  return blas(h, name, a);
}
#define L2MORE(P, T)                                                                                                \
  API cublas##P##trmv_v2_64(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t t, cublasDiagType_t diag,   \
                            int64_t n, const T* A, int64_t lda, T* x, int64_t ix) {                                 \
    return level2More<T>(h, "cublas" #P "trmv_v2_64", BlasOp::kTrmv, uplo, t, diag, n, nullptr, A, lda, x, ix,      \
                         nullptr, nullptr, 1);                                                                      \
  }                                                                                                                 \
  API cublas##P##trsv_v2_64(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t t, cublasDiagType_t diag,   \
                            int64_t n, const T* A, int64_t lda, T* x, int64_t ix) {                                 \
    return level2More<T>(h, "cublas" #P "trsv_v2_64", BlasOp::kTrsv, uplo, t, diag, n, nullptr, A, lda, x, ix,      \
                         nullptr, nullptr, 1);                                                                      \
  }                                                                                                                 \
  API cublas##P##symv_v2_64(cublasHandle_t h, cublasFillMode_t uplo, int64_t n, const T* al, const T* A,           \
                            int64_t lda, const T* x, int64_t ix, const T* be, T* y, int64_t iy) {                   \
    return level2More<T>(h, "cublas" #P "symv_v2_64", BlasOp::kSymv, uplo, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, al, \
                         A, lda, x, ix, be, y, iy);                                                                 \
  }
L2MORE(S, float)
L2MORE(D, double)
L2MORE(C, cuComplex)
L2MORE(Z, cuDoubleComplex)
#undef L2MORE
API cublasChemv_v2_64(cublasHandle_t h, cublasFillMode_t uplo, int64_t n, const cuComplex* al, const cuComplex* A,
                      int64_t lda, const cuComplex* x, int64_t ix, const cuComplex* be, cuComplex* y, int64_t iy) {
  return level2More<cuComplex>(h, "cublasChemv_v2_64", BlasOp::kHemv, uplo, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, al, A,
                               lda, x, ix, be, y, iy);
}
API cublasZhemv_v2_64(cublasHandle_t h, cublasFillMode_t uplo, int64_t n, const cuDoubleComplex* al,
                      const cuDoubleComplex* A, int64_t lda, const cuDoubleComplex* x, int64_t ix,
                      const cuDoubleComplex* be, cuDoubleComplex* y, int64_t iy) {
  return level2More<cuDoubleComplex>(h, "cublasZhemv_v2_64", BlasOp::kHemv, uplo, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n,
                                     al, A, lda, x, ix, be, y, iy);
}

CL12(C, cuComplex, float, Sc, Cs, c)
CL12(Z, cuDoubleComplex, double, Dz, Zd, z)
#undef CL12

#define U64(p) reinterpret_cast<uint64_t>(p)
#define L3X(P, T)                                                                                                   \
  API cublas##P##geam_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,        \
                         const T* al, const T* A, int64_t lda, const T* be, const T* B, int64_t ldb, T* C,          \
                         int64_t ldc) {                                                                             \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kGeam;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.trans_a = ta, a.trans_b = tb, a.m = m, a.n = n, a.lda = lda, a.ldb = ldb, a.ldc = ldc;                        \
    a.a = U64(A), a.b = U64(B), a.c = U64(C);                                                                       \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "geam_64", a);                                                                       \
  }                                                                                                                 \
  API cublas##P##dgmm_64(cublasHandle_t h, cublasSideMode_t side, int64_t m, int64_t n, const T* A, int64_t lda,    \
                         const T* x, int64_t ix, T* C, int64_t ldc) {                                               \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kDgmm;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.side = side, a.m = m, a.n = n, a.lda = lda, a.incx = ix, a.ldc = ldc;                                         \
    a.a = U64(A), a.x = U64(x), a.c = U64(C);                                                                       \
    return blas(h, "cublas" #P "dgmm_64", a);                                                                       \
  }                                                                                                                 \
  API cublas##P##trsm_v2_64(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t t,    \
                            cublasDiagType_t diag, int64_t m, int64_t n, const T* al, const T* A, int64_t lda, T* B, \
                            int64_t ldb) {                                                                          \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kTrsm;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.side = side, a.uplo = uplo, a.trans_a = t, a.diag = diag, a.m = m, a.n = n, a.lda = lda, a.ldb = ldb;         \
    a.a = U64(A), a.b = U64(B);                                                                                     \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    return blas(h, "cublas" #P "trsm_v2_64", a);                                                                    \
  }                                                                                                                 \
  API cublas##P##syrk_v2_64(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t t, int64_t n, int64_t k,     \
                            const T* al, const T* A, int64_t lda, const T* be, T* C, int64_t ldc) {                 \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kSyrk;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.uplo = uplo, a.trans_a = t, a.n = n, a.k = k, a.lda = lda, a.ldc = ldc;                                       \
    a.a = U64(A), a.c = U64(C);                                                                                     \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "syrk_v2_64", a);                                                                    \
  }                                                                                                                 \
  API cublas##P##trmm_v2_64(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t t,    \
                            cublasDiagType_t diag, int64_t m, int64_t n, const T* al, const T* A, int64_t lda,      \
                            const T* B, int64_t ldb, T* C, int64_t ldc) {                                           \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kTrmm;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.side = side, a.uplo = uplo, a.trans_a = t, a.diag = diag, a.m = m, a.n = n, a.lda = lda, a.ldb = ldb;         \
    a.ldc = ldc, a.a = U64(A), a.b = U64(B), a.c = U64(C);                                                          \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    return blas(h, "cublas" #P "trmm_v2_64", a);                                                                    \
  }                                                                                                                 \
  API cublas##P##symm_v2_64(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, int64_t m, int64_t n,   \
                            const T* al, const T* A, int64_t lda, const T* B, int64_t ldb, const T* be, T* C,       \
                            int64_t ldc) {                                                                          \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kSymm;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.side = side, a.uplo = uplo, a.m = m, a.n = n, a.lda = lda, a.ldb = ldb, a.ldc = ldc;                          \
    a.a = U64(A), a.b = U64(B), a.c = U64(C);                                                                       \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "symm_v2_64", a);                                                                    \
  }                                                                                                                 \
  API cublas##P##syr2k_v2_64(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t t, int64_t n, int64_t k,    \
                             const T* al, const T* A, int64_t lda, const T* B, int64_t ldb, const T* be, T* C,      \
                             int64_t ldc) {                                                                         \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kSyr2k;                                                                                          \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.uplo = uplo, a.trans_a = t, a.n = n, a.k = k, a.lda = lda, a.ldb = ldb, a.ldc = ldc;                          \
    a.a = U64(A), a.b = U64(B), a.c = U64(C);                                                                       \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "syr2k_v2_64", a);                                                                   \
  }
L3X(S, float)
L3X(D, double)
L3X(C, cuComplex)
L3X(Z, cuDoubleComplex)
#undef L3X

// herk (real alpha and beta: R), her2k (real beta), hemm.
#define HERM(P, T, R)                                                                                                \
  API cublas##P##herk_v2_64(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t t, int64_t n, int64_t k,     \
                            const R* al, const T* A, int64_t lda, const R* be, T* C, int64_t ldc) {                 \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kHerk;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.uplo = uplo, a.trans_a = t, a.n = n, a.k = k, a.lda = lda, a.ldc = ldc;                                       \
    a.a = U64(A), a.c = U64(C);                                                                                     \
    a.alpha = scalar(al, sizeof(R), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(R), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "herk_v2_64", a);                                                                    \
  }                                                                                                                 \
  API cublas##P##her2k_v2_64(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t t, int64_t n, int64_t k,    \
                             const T* al, const T* A, int64_t lda, const T* B, int64_t ldb, const R* be, T* C,      \
                             int64_t ldc) {                                                                         \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kHer2k;                                                                                          \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.uplo = uplo, a.trans_a = t, a.n = n, a.k = k, a.lda = lda, a.ldb = ldb, a.ldc = ldc;                          \
    a.a = U64(A), a.b = U64(B), a.c = U64(C);                                                                       \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(R), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "her2k_v2_64", a);                                                                   \
  }                                                                                                                 \
  API cublas##P##hemm_v2_64(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, int64_t m, int64_t n,   \
                            const T* al, const T* A, int64_t lda, const T* B, int64_t ldb, const T* be, T* C,       \
                            int64_t ldc) {                                                                          \
    BlasArgs a;                                                                                                     \
    a.op = BlasOp::kHemm;                                                                                           \
    a.a_type = a.b_type = typeOf<T>();                                                                              \
    a.side = side, a.uplo = uplo, a.m = m, a.n = n, a.lda = lda, a.ldb = ldb, a.ldc = ldc;                          \
    a.a = U64(A), a.b = U64(B), a.c = U64(C);                                                                       \
    a.alpha = scalar(al, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                           \
    a.beta = scalar(be, sizeof(T), h->pm == CUBLAS_POINTER_MODE_DEVICE);                                            \
    return blas(h, "cublas" #P "hemm_v2_64", a);                                                                    \
  }
HERM(C, cuComplex, float)
HERM(Z, cuDoubleComplex, double)
#undef HERM

// The batched factorizations (a host info is the arguments', checked by rgpu's client: 0 here).
#define FACT(P, T)                                                                                                   \
  API cublas##P##getrfBatched(cublasHandle_t h, int n, T* const A[], int lda, int* piv, int* info, int batch) {     \
    BlasArgs a;                                                                                                      \
    a.op = BlasOp::kGetrfBatched;                                                                                    \
    a.a_type = a.b_type = typeOf<T>();                                                                               \
    a.m = a.n = n, a.lda = lda, a.a = U64(A), a.x = U64(piv), a.c = U64(info), a.batch = batch;                      \
    return blas(h, "cublas" #P "getrfBatched", a);                                                                   \
  }                                                                                                                  \
  API cublas##P##getrsBatched(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const T* const A[], int lda,   \
                              const int* piv, T* const B[], int ldb, int* info, int batch) {                         \
    BlasArgs a;                                                                                                      \
    a.op = BlasOp::kGetrsBatched;                                                                                    \
    a.a_type = a.b_type = typeOf<T>();                                                                               \
    a.trans_a = t, a.m = a.n = n, a.k = nrhs, a.lda = lda, a.ldb = ldb, a.a = U64(A), a.b = U64(B), a.x = U64(piv);  \
    a.batch = batch;                                                                                                 \
    *info = 0;                                                                                                       \
    return blas(h, "cublas" #P "getrsBatched", a);                                                                   \
  }                                                                                                                  \
  API cublas##P##getriBatched(cublasHandle_t h, int n, const T* const A[], int lda, const int* piv, T* const C[],     \
                              int ldc, int* info, int batch) {                                                       \
    BlasArgs a;                                                                                                      \
    a.op = BlasOp::kGetriBatched;                                                                                    \
    a.a_type = a.b_type = typeOf<T>();                                                                               \
    a.m = a.n = n, a.lda = lda, a.ldb = ldc, a.a = U64(A), a.b = U64(C), a.x = U64(piv), a.c = U64(info);            \
    a.batch = batch;                                                                                                 \
    return blas(h, "cublas" #P "getriBatched", a);                                                                   \
  }                                                                                                                  \
  API cublas##P##matinvBatched(cublasHandle_t h, int n, const T* const A[], int lda, T* const Ainv[], int ldi,       \
                               int* info, int batch) {                                                               \
    BlasArgs a;                                                                                                      \
    a.op = BlasOp::kMatinvBatched;                                                                                   \
    a.a_type = a.b_type = typeOf<T>();                                                                               \
    a.m = a.n = n, a.lda = lda, a.ldb = ldi, a.a = U64(A), a.b = U64(Ainv), a.c = U64(info), a.batch = batch;        \
    return blas(h, "cublas" #P "matinvBatched", a);                                                                  \
  }                                                                                                                  \
  API cublas##P##geqrfBatched(cublasHandle_t h, int m, int n, T* const A[], int lda, T* const tau[], int* info,      \
                              int batch) {                                                                           \
    BlasArgs a;                                                                                                      \
    a.op = BlasOp::kGeqrfBatched;                                                                                    \
    a.a_type = a.b_type = typeOf<T>();                                                                               \
    a.m = m, a.n = n, a.lda = lda, a.ldb = 1, a.a = U64(A), a.b = U64(tau), a.batch = batch;                         \
    *info = 0;                                                                                                       \
    return blas(h, "cublas" #P "geqrfBatched", a);                                                                   \
  }
FACT(S, float)
FACT(D, double)
FACT(C, cuComplex)
FACT(Z, cuDoubleComplex)
#undef FACT
#undef U64

namespace {
BlasArgs gemmArgs(cublasHandle_t h, BlasOp op, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                  int64_t k, const void* alpha, const void* A, cudaDataType at, int64_t lda, const void* B,
                  cudaDataType bt, int64_t ldb, const void* beta, const void* C, cudaDataType ct, int64_t ldc,
                  cublasComputeType_t compute) {
  BlasArgs a;
  a.op = op;
  a.trans_a = ta, a.trans_b = tb;
  a.m = m, a.n = n, a.k = k;
  a.a = reinterpret_cast<uint64_t>(A), a.b = reinterpret_cast<uint64_t>(B), a.c = reinterpret_cast<uint64_t>(C);
  a.a_type = at, a.b_type = bt, a.c_type = ct, a.compute = compute;
  a.lda = lda, a.ldb = ldb, a.ldc = ldc;
  size_t bytes = compute == CUBLAS_COMPUTE_64F ? 8 : compute == CUBLAS_COMPUTE_16F ? 2 : 4;
  if (ct == CUDA_C_32F || ct == CUDA_C_64F) bytes *= 2;  // (complex alpha and beta)
  bool device = h->pm == CUBLAS_POINTER_MODE_DEVICE;
  a.alpha = scalar(alpha, bytes, device);
  a.beta = scalar(beta, bytes, device);
  return a;
}
}  // namespace

API cublasGemmEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                    const void* alpha, const void* A, cudaDataType at, int64_t lda, const void* B, cudaDataType bt,
                    int64_t ldb, const void* beta, void* C, cudaDataType ct, int64_t ldc, cublasComputeType_t compute,
                    cublasGemmAlgo_t) {
  return blas(h, "cublasGemmEx_64",
              gemmArgs(h, BlasOp::kGemm, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute));
}

API cublasGemmStridedBatchedEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                                  int64_t k, const void* alpha, const void* A, cudaDataType at, int64_t lda,
                                  long long sa, const void* B, cudaDataType bt, int64_t ldb, long long sb,
                                  const void* beta, void* C, cudaDataType ct, int64_t ldc, long long sc, int64_t batch,
                                  cublasComputeType_t compute, cublasGemmAlgo_t) {
  BlasArgs a = gemmArgs(h, BlasOp::kGemmStridedBatched, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct,
                        ldc, compute);
  a.stride_a = sa, a.stride_b = sb, a.stride_c = sc, a.batch = batch;
  return blas(h, "cublasGemmStridedBatchedEx_64", a);
}

API cublasGemmBatchedEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                           int64_t k, const void* alpha, const void* const A[], cudaDataType at, int64_t lda,
                           const void* const B[], cudaDataType bt, int64_t ldb, const void* beta, void* const C[],
                           cudaDataType ct, int64_t ldc, int64_t batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  BlasArgs a =
      gemmArgs(h, BlasOp::kGemmBatched, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute);
  a.batch = batch;
  return blas(h, "cublasGemmBatchedEx_64", a);
}

// ---- cuBLASLt -----------------------------------------------------------------------

API cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

API cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  auto* x = new LtDesc;
  x->compute = compute;
  x->scale = scale;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(x);
  return CUBLAS_STATUS_SUCCESS;
}
API cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<LtDesc*>(d);
  return CUBLAS_STATUS_SUCCESS;
}
API cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                   size_t size) {
  auto* x = reinterpret_cast<LtDesc*>(d);
  auto get = [&](auto& field) {
    if (size != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return get(x->pm);
    case CUBLASLT_MATMUL_DESC_TRANSA: return get(x->ta);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get(x->tb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(x->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get(x->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return get(x->bias_type);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return get(x->bias_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return get(x->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return get(x->aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return get(x->aux_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return get(x->aux_type);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

API cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  auto* x = new LtLayout;
  x->m.type = type;
  x->m.rows = rows;
  x->m.cols = cols;
  x->m.ld = ld;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(x);
  return CUBLAS_STATUS_SUCCESS;
}
API cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<LtLayout*>(l);
  return CUBLAS_STATUS_SUCCESS;
}
API cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                     size_t size) {
  auto& m = reinterpret_cast<LtLayout*>(l)->m;
  auto get = [&](auto& field) {
    if (size != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return get(m.order);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return get(m.batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return get(m.batch_stride);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

API cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new uint64_t(0));
  return CUBLAS_STATUS_SUCCESS;
}
API cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<uint64_t*>(p);
  return CUBLAS_STATUS_SUCCESS;
}
API cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                         const void* buf, size_t size) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == 8) std::memcpy(p, buf, 8);
  return CUBLAS_STATUS_SUCCESS;
}

API cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                   cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                   cublasLtMatmulPreference_t, int requested, cublasLtMatmulHeuristicResult_t results[],
                                   int* found) {
  *found = 0;
  if (cublasStatus_t s = injected("cublasLtMatmulAlgoGetHeuristic")) return s;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(&results[0], 0, sizeof results[0]);
  std::memcpy(&results[0].algo, kAlgoMark, sizeof kAlgoMark);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 0.5f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

API cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t* algo,
                            cublasLtMatmulHeuristicResult_t* result) {
  std::memset(result, 0, sizeof *result);
  return std::memcmp(algo, kAlgoMark, sizeof kAlgoMark) == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

API cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                   cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta, const void* C,
                   cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t* algo,
                   void*, size_t, cudaStream_t stream) {
  auto* d = reinterpret_cast<LtDesc*>(desc);
  LtArgs a;
  a.compute = d->compute;
  a.scale_type = d->scale;
  a.pointer_mode = d->pm;
  a.trans_a = d->ta;
  a.trans_b = d->tb;
  a.epilogue = d->epilogue;
  a.bias = d->bias;
  a.bias_batch_stride = d->bias_stride;
  a.aux = d->aux;
  a.aux_ld = d->aux_ld;
  a.aux_batch_stride = d->aux_stride;
  a.a = reinterpret_cast<LtLayout*>(la)->m;
  a.b = reinterpret_cast<LtLayout*>(lb)->m;
  a.c = reinterpret_cast<LtLayout*>(lc)->m;
  a.d = reinterpret_cast<LtLayout*>(ld)->m;
  a.a.ptr = reinterpret_cast<uint64_t>(A);
  a.b.ptr = reinterpret_cast<uint64_t>(B);
  a.c.ptr = reinterpret_cast<uint64_t>(C);
  a.d.ptr = reinterpret_cast<uint64_t>(D);
  a.bias_type = d->bias_type < 0 ? a.d.type : d->bias_type;
  a.aux_type = d->aux_type < 0 ? a.d.type : d->aux_type;
  size_t bytes = d->scale == CUDA_R_64F ? 8 : 4;
  a.alpha = scalar(alpha, bytes, d->pm == CUBLASLT_POINTER_MODE_DEVICE);
  a.beta = scalar(beta, bytes, d->pm == CUBLASLT_POINTER_MODE_DEVICE);
  const char* what = algo && std::memcmp(algo, kAlgoMark, sizeof kAlgoMark) == 0 ? "cublasLtMatmul algo=heuristic"
                                                                                  : "cublasLtMatmul algo=default";
  return submit(stream, what, [a] { return rgpu::server::simblas::runLt(a); });
}
