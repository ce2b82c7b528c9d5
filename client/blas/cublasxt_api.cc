// rgpu's cublasXt (in libcublas.so.13, docs/cublas.md): the multi-GPU gemm
// on matrices in host (or device) memory, over the devices the program
// selects. The handle is the client's; a call tiles C by columns
// (`blockDim` wide), copies op(A) once to each selected device and each
// tile of op(B) and C to the device whose turn it is, runs rgpu's own
// cublasSgemm/Dgemm there (one session, one stream order per device) and
// copies the tile back. Devices take tiles in turn, one tile at a time, so
// a call's result is in C when it returns, as NVIDIA's cublasXt promises.
//
// Forwarded: cublasXtCreate, Destroy, DeviceSelect, MaxBoards,
// GetNumBoards, Set/GetBlockDim, Set/GetPinningMemMode, SetCpuRatio (a
// hint, kept), cublasXtSgemm, Dgemm, Cgemm and Zgemm. SetCpuRoutine and every
// other cublasXt routine answer CUBLAS_STATUS_NOT_SUPPORTED (generated stubs).
#include <cublasXt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "client/blas/blas_client.h"

struct cublasXtContext {
  static constexpr uint32_t kMagic = 0x43425854;  // "CBXT"
  uint32_t magic = kMagic;
  std::vector<int> devices;  // empty until cublasXtDeviceSelect
  int block = 1024;
  cublasXtPinnedMemMode_t pinning = CUBLASXT_PINNING_DISABLED;
  std::vector<float> cpu_ratio = std::vector<float>(CUBLASXT_ROUTINE_MAX * 4, 0.f);
};

namespace {

namespace blas = rgpu::client::blas;

bool live(cublasXtHandle_t h) { return h && h->magic == cublasXtContext::kMagic; }

cublasStatus_t cudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
  return blas::toBlasStatus(rgpu::Status(e == cudaErrorMemoryAllocation ? rgpu::err::kMemoryAllocation : e,
                                         std::string(cudaGetErrorName(e))),
                            call);
}

// One device's part of a call: its cuBLAS handle and op(A).
struct DevicePart {
  int device = 0;
  cublasHandle_t handle = nullptr;
  void* a = nullptr;
};

template <typename T>
cublasStatus_t gemm(const char* call, cublasXtHandle_t h, cublasOperation_t ta, cublasOperation_t tb, size_t m,
                    size_t n, size_t k, const T* alpha, const T* A, size_t lda, const T* B, size_t ldb, const T* beta,
                    T* C, size_t ldc) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (h->devices.empty())
    return blas::toBlasStatus(rgpu::Status(rgpu::err::kInitializationError, "no device selected (cublasXtDeviceSelect)"),
                              call, true);
  auto opOk = [](cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; };
  const size_t a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const size_t b_rows = tb == CUBLAS_OP_N ? k : n;
  if (!opOk(ta) || !opOk(tb) || !alpha || !beta || lda < std::max<size_t>(1, a_rows) ||
      ldb < std::max<size_t>(1, b_rows) || ldc < std::max<size_t>(1, m) || m > INT32_MAX || n > INT32_MAX ||
      k > INT32_MAX)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  int caller = 0;
  cudaGetDevice(&caller);
  std::vector<DevicePart> parts;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const size_t es = sizeof(T);
  void *dB = nullptr, *dC = nullptr;  // (per tile, on the tile's device)
  const size_t block = static_cast<size_t>(h->block);
  for (int d : h->devices) {
    if (st != CUBLAS_STATUS_SUCCESS) break;
    DevicePart p;
    p.device = d;
    st = cudaStatus(cudaSetDevice(d), call);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasCreate(&p.handle);
    if (st == CUBLAS_STATUS_SUCCESS && k > 0) {
      st = cudaStatus(cudaMalloc(&p.a, a_rows * a_cols * es), call);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cudaStatus(cudaMemcpy2D(p.a, a_rows * es, A, lda * es, a_rows * es, a_cols, cudaMemcpyDefault), call);
    }
    parts.push_back(p);
  }
  // Tiles of C's columns, device by device in turn.
  for (size_t first = 0, tile = 0; st == CUBLAS_STATUS_SUCCESS && first < n; first += block, ++tile) {
    const DevicePart& p = parts[tile % parts.size()];
    const size_t w = std::min(block, n - first);
    st = cudaStatus(cudaSetDevice(p.device), call);
    // op(B)'s columns first..first+w: B's columns (N) or rows (T, C)
    const size_t tb_rows = tb == CUBLAS_OP_N ? k : w, tb_cols = tb == CUBLAS_OP_N ? w : k;
    const T* b_at = tb == CUBLAS_OP_N ? B + first * ldb : B + first;
    if (st == CUBLAS_STATUS_SUCCESS && k > 0) st = cudaStatus(cudaMalloc(&dB, tb_rows * tb_cols * es), call);
    if (st == CUBLAS_STATUS_SUCCESS && k > 0)
      st = cudaStatus(cudaMemcpy2D(dB, tb_rows * es, b_at, ldb * es, tb_rows * es, tb_cols, cudaMemcpyDefault), call);
    if (st == CUBLAS_STATUS_SUCCESS) st = cudaStatus(cudaMalloc(&dC, m * w * es), call);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cudaStatus(cudaMemcpy2D(dC, m * es, C + first * ldc, ldc * es, m * es, w, cudaMemcpyDefault), call);
    if (st == CUBLAS_STATUS_SUCCESS) {
      const int im = static_cast<int>(m), iw = static_cast<int>(w), ik = static_cast<int>(k);
      const int ilda = static_cast<int>(std::max<size_t>(1, a_rows)), ildb = static_cast<int>(std::max<size_t>(1, tb_rows));
      const T* pa = static_cast<const T*>(p.a);
      const T* pb = static_cast<const T*>(dB);
      T* pc = static_cast<T*>(dC);
      if constexpr (std::is_same_v<T, float>)
        st = cublasSgemm(p.handle, ta, tb, im, iw, ik, alpha, pa, ilda, pb, ildb, beta, pc, im);
      else if constexpr (std::is_same_v<T, double>)
        st = cublasDgemm(p.handle, ta, tb, im, iw, ik, alpha, pa, ilda, pb, ildb, beta, pc, im);
      else if constexpr (std::is_same_v<T, cuComplex>)
        st = cublasCgemm(p.handle, ta, tb, im, iw, ik, alpha, pa, ilda, pb, ildb, beta, pc, im);
      else
        st = cublasZgemm(p.handle, ta, tb, im, iw, ik, alpha, pa, ilda, pb, ildb, beta, pc, im);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cudaStatus(cudaMemcpy2D(C + first * ldc, ldc * es, dC, m * es, m * es, w, cudaMemcpyDefault), call);
    if (dB) cudaFree(dB);
    if (dC) cudaFree(dC);
    dB = dC = nullptr;
  }
  for (DevicePart& p : parts) {
    cudaSetDevice(p.device);
    if (p.a) cudaFree(p.a);
    if (p.handle) cublasDestroy(p.handle);
  }
  cudaSetDevice(caller);
  return st;
}

}  // namespace

extern "C" {

#define XT_API __attribute__((visibility("default")))

XT_API cublasStatus_t cublasXtCreate(cublasXtHandle_t* out) {
  return blas::guarded("cublasXtCreate", [&]() -> cublasStatus_t {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    int device = 0;
    if (cublasStatus_t st = blas::openSession("cublasXtCreate", &device); st != CUBLAS_STATUS_SUCCESS) return st;
    *out = new cublasXtContext;
    return CUBLAS_STATUS_SUCCESS;
  });
}
XT_API cublasStatus_t cublasXtDestroy(cublasXtHandle_t h) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
XT_API cublasStatus_t cublasXtMaxBoards(int* boards) {
  if (!boards) return CUBLAS_STATUS_INVALID_VALUE;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *boards = n;
  return CUBLAS_STATUS_SUCCESS;
}
// Each of rgpu's devices is a board of its own.
XT_API cublasStatus_t cublasXtGetNumBoards(int count, int ids[], int* boards) {
  if (count < 0 || (count > 0 && !ids) || !boards) return CUBLAS_STATUS_INVALID_VALUE;
  std::vector<int> distinct(ids, ids + count);
  std::sort(distinct.begin(), distinct.end());
  *boards = static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  return CUBLAS_STATUS_SUCCESS;
}
XT_API cublasStatus_t cublasXtDeviceSelect(cublasXtHandle_t h, int count, int ids[]) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  int n = 0;
  if (count < 1 || !ids || cudaGetDeviceCount(&n) != cudaSuccess) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < count; ++i)
    if (ids[i] < 0 || ids[i] >= n) return CUBLAS_STATUS_INVALID_VALUE;
  h->devices.assign(ids, ids + count);
  return CUBLAS_STATUS_SUCCESS;
}
XT_API cublasStatus_t cublasXtSetBlockDim(cublasXtHandle_t h, int block) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (block < 1) return CUBLAS_STATUS_INVALID_VALUE;
  h->block = block;
  return CUBLAS_STATUS_SUCCESS;
}
XT_API cublasStatus_t cublasXtGetBlockDim(cublasXtHandle_t h, int* block) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!block) return CUBLAS_STATUS_INVALID_VALUE;
  *block = h->block;
  return CUBLAS_STATUS_SUCCESS;
}
XT_API cublasStatus_t cublasXtGetPinningMemMode(cublasXtHandle_t h, cublasXtPinnedMemMode_t* mode) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->pinning;
  return CUBLAS_STATUS_SUCCESS;
}
// (rgpu's transfers stage pageable memory themselves: pinning is kept as a setting)
XT_API cublasStatus_t cublasXtSetPinningMemMode(cublasXtHandle_t h, cublasXtPinnedMemMode_t mode) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLASXT_PINNING_DISABLED && mode != CUBLASXT_PINNING_ENABLED) return CUBLAS_STATUS_INVALID_VALUE;
  h->pinning = mode;
  return CUBLAS_STATUS_SUCCESS;
}
// The CPU's share of a routine: a hint (no CPU routine can be set, so none is used).
XT_API cublasStatus_t cublasXtSetCpuRatio(cublasXtHandle_t h, cublasXtBlasOp_t op, cublasXtOpType_t type,
                                          float ratio) {
  if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (op < 0 || op >= CUBLASXT_ROUTINE_MAX || type < 0 || type > CUBLASXT_DOUBLECOMPLEX || !(ratio >= 0 && ratio <= 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  h->cpu_ratio[static_cast<size_t>(op) * 4 + type] = ratio;
  return CUBLAS_STATUS_SUCCESS;
}
XT_API cublasStatus_t cublasXtSgemm(cublasXtHandle_t h, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                                    size_t k, const float* alpha, const float* A, size_t lda, const float* B,
                                    size_t ldb, const float* beta, float* C, size_t ldc) {
  return blas::guarded("cublasXtSgemm", [&] {
    return gemm<float>("cublasXtSgemm", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}
XT_API cublasStatus_t cublasXtDgemm(cublasXtHandle_t h, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                                    size_t k, const double* alpha, const double* A, size_t lda, const double* B,
                                    size_t ldb, const double* beta, double* C, size_t ldc) {
  return blas::guarded("cublasXtDgemm", [&] {
    return gemm<double>("cublasXtDgemm", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}
XT_API cublasStatus_t cublasXtCgemm(cublasXtHandle_t h, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                                    size_t k, const cuComplex* alpha, const cuComplex* A, size_t lda, const cuComplex* B,
                                    size_t ldb, const cuComplex* beta, cuComplex* C, size_t ldc) {
  return blas::guarded("cublasXtCgemm", [&] {
    return gemm<cuComplex>("cublasXtCgemm", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}
XT_API cublasStatus_t cublasXtZgemm(cublasXtHandle_t h, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                                    size_t k, const cuDoubleComplex* alpha, const cuDoubleComplex* A, size_t lda,
                                    const cuDoubleComplex* B, size_t ldb, const cuDoubleComplex* beta,
                                    cuDoubleComplex* C, size_t ldc) {
  return blas::guarded("cublasXtZgemm", [&] {
    return gemm<cuDoubleComplex>("cublasXtZgemm", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}

}  // extern "C"
