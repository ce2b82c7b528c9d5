// NVIDIA's cuBLAS and cuBLASLt, loaded by a worker at run time, like the
// driver (driver_api.h): dlopen of libcublas.so.13 and libcublasLt.so.13
// (tests point them at a fake) and dlsym of each entry point, typed by
// NVIDIA's own headers. Loaded on a session's first BLAS call, so sessions
// that never use it do not map these (large) libraries.
//
// The libraries bring their own static CUDA runtime, which works in the
// context current on the calling thread: the worker's primary context.
#pragma once

#include <cublasLt.h>
#include <cublas_api.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace rgpu::server::cuda {

class BlasApi {
 public:
  static Result<std::unique_ptr<BlasApi>> load(const std::string& cublas, const std::string& cublaslt);
  ~BlasApi();
  BlasApi(const BlasApi&) = delete;
  BlasApi& operator=(const BlasApi&) = delete;

  // A cuBLAS status as a Status naming the call (CUDA's error codes).
  static Status check(cublasStatus_t s, const char* call);

#define RGPU_BLAS_FN(name) decltype(&::name) name = nullptr;
  RGPU_BLAS_FN(cublasCreate_v2)
  RGPU_BLAS_FN(cublasDestroy_v2)
  RGPU_BLAS_FN(cublasSetStream_v2)
  RGPU_BLAS_FN(cublasSetPointerMode_v2)
  RGPU_BLAS_FN(cublasSetMathMode)
  RGPU_BLAS_FN(cublasSetWorkspace_v2)
  RGPU_BLAS_FN(cublasSaxpy_v2_64)
  RGPU_BLAS_FN(cublasDaxpy_v2_64)
  RGPU_BLAS_FN(cublasSdot_v2_64)
  RGPU_BLAS_FN(cublasDdot_v2_64)
  RGPU_BLAS_FN(cublasSnrm2_v2_64)
  RGPU_BLAS_FN(cublasDnrm2_v2_64)
  RGPU_BLAS_FN(cublasSscal_v2_64)
  RGPU_BLAS_FN(cublasDscal_v2_64)
  RGPU_BLAS_FN(cublasSasum_v2_64)
  RGPU_BLAS_FN(cublasDasum_v2_64)
  RGPU_BLAS_FN(cublasIsamax_v2_64)
  RGPU_BLAS_FN(cublasIdamax_v2_64)
  RGPU_BLAS_FN(cublasIsamin_v2_64)
  RGPU_BLAS_FN(cublasIdamin_v2_64)
  RGPU_BLAS_FN(cublasIsamax_v2)
  RGPU_BLAS_FN(cublasIdamax_v2)
  RGPU_BLAS_FN(cublasIsamin_v2)
  RGPU_BLAS_FN(cublasIdamin_v2)
  RGPU_BLAS_FN(cublasScopy_v2_64)
  RGPU_BLAS_FN(cublasDcopy_v2_64)
  RGPU_BLAS_FN(cublasSswap_v2_64)
  RGPU_BLAS_FN(cublasDswap_v2_64)
  RGPU_BLAS_FN(cublasSgemv_v2_64)
  RGPU_BLAS_FN(cublasDgemv_v2_64)
  RGPU_BLAS_FN(cublasSger_v2_64)
  RGPU_BLAS_FN(cublasDger_v2_64)
  RGPU_BLAS_FN(cublasGemmEx_64)
  RGPU_BLAS_FN(cublasGemmStridedBatchedEx_64)
  RGPU_BLAS_FN(cublasGemmBatchedEx_64)
  RGPU_BLAS_FN(cublasSgeam_64)
  RGPU_BLAS_FN(cublasDgeam_64)
  RGPU_BLAS_FN(cublasSdgmm_64)
  RGPU_BLAS_FN(cublasDdgmm_64)
  RGPU_BLAS_FN(cublasStrsm_v2_64)
  RGPU_BLAS_FN(cublasDtrsm_v2_64)
  RGPU_BLAS_FN(cublasSsyrk_v2_64)
  RGPU_BLAS_FN(cublasDsyrk_v2_64)
  RGPU_BLAS_FN(cublasStrmm_v2_64)
  RGPU_BLAS_FN(cublasDtrmm_v2_64)
  RGPU_BLAS_FN(cublasSsymm_v2_64)
  RGPU_BLAS_FN(cublasDsymm_v2_64)
  RGPU_BLAS_FN(cublasSsyr2k_v2_64)
  RGPU_BLAS_FN(cublasDsyr2k_v2_64)
  RGPU_BLAS_FN(cublasStrmv_v2_64)
  RGPU_BLAS_FN(cublasStrsv_v2_64)
  RGPU_BLAS_FN(cublasSsymv_v2_64)
  RGPU_BLAS_FN(cublasDtrmv_v2_64)
  RGPU_BLAS_FN(cublasDtrsv_v2_64)
  RGPU_BLAS_FN(cublasDsymv_v2_64)
  RGPU_BLAS_FN(cublasCtrmv_v2_64)
  RGPU_BLAS_FN(cublasCtrsv_v2_64)
  RGPU_BLAS_FN(cublasCsymv_v2_64)
  RGPU_BLAS_FN(cublasZtrmv_v2_64)
  RGPU_BLAS_FN(cublasZtrsv_v2_64)
  RGPU_BLAS_FN(cublasZsymv_v2_64)
  RGPU_BLAS_FN(cublasChemv_v2_64)
  RGPU_BLAS_FN(cublasZhemv_v2_64)
  RGPU_BLAS_FN(cublasCgetrfBatched)
  RGPU_BLAS_FN(cublasCgetrsBatched)
  RGPU_BLAS_FN(cublasCgetriBatched)
  RGPU_BLAS_FN(cublasCmatinvBatched)
  RGPU_BLAS_FN(cublasCgeqrfBatched)
  RGPU_BLAS_FN(cublasZgetrfBatched)
  RGPU_BLAS_FN(cublasZgetrsBatched)
  RGPU_BLAS_FN(cublasZgetriBatched)
  RGPU_BLAS_FN(cublasZmatinvBatched)
  RGPU_BLAS_FN(cublasZgeqrfBatched)
  RGPU_BLAS_FN(cublasCaxpy_v2_64)
  RGPU_BLAS_FN(cublasZaxpy_v2_64)
  RGPU_BLAS_FN(cublasCscal_v2_64)
  RGPU_BLAS_FN(cublasZscal_v2_64)
  RGPU_BLAS_FN(cublasCsscal_v2_64)
  RGPU_BLAS_FN(cublasZdscal_v2_64)
  RGPU_BLAS_FN(cublasCcopy_v2_64)
  RGPU_BLAS_FN(cublasZcopy_v2_64)
  RGPU_BLAS_FN(cublasCswap_v2_64)
  RGPU_BLAS_FN(cublasZswap_v2_64)
  RGPU_BLAS_FN(cublasCdotu_v2_64)
  RGPU_BLAS_FN(cublasZdotu_v2_64)
  RGPU_BLAS_FN(cublasCdotc_v2_64)
  RGPU_BLAS_FN(cublasZdotc_v2_64)
  RGPU_BLAS_FN(cublasScnrm2_v2_64)
  RGPU_BLAS_FN(cublasDznrm2_v2_64)
  RGPU_BLAS_FN(cublasScasum_v2_64)
  RGPU_BLAS_FN(cublasDzasum_v2_64)
  RGPU_BLAS_FN(cublasIcamax_v2_64)
  RGPU_BLAS_FN(cublasIzamax_v2_64)
  RGPU_BLAS_FN(cublasIcamin_v2_64)
  RGPU_BLAS_FN(cublasIzamin_v2_64)
  RGPU_BLAS_FN(cublasIcamax_v2)
  RGPU_BLAS_FN(cublasIzamax_v2)
  RGPU_BLAS_FN(cublasIcamin_v2)
  RGPU_BLAS_FN(cublasIzamin_v2)
  RGPU_BLAS_FN(cublasCgemv_v2_64)
  RGPU_BLAS_FN(cublasZgemv_v2_64)
  RGPU_BLAS_FN(cublasCgeru_v2_64)
  RGPU_BLAS_FN(cublasZgeru_v2_64)
  RGPU_BLAS_FN(cublasCgerc_v2_64)
  RGPU_BLAS_FN(cublasZgerc_v2_64)
  RGPU_BLAS_FN(cublasCgeam_64)
  RGPU_BLAS_FN(cublasCdgmm_64)
  RGPU_BLAS_FN(cublasCtrsm_v2_64)
  RGPU_BLAS_FN(cublasCtrmm_v2_64)
  RGPU_BLAS_FN(cublasCsymm_v2_64)
  RGPU_BLAS_FN(cublasChemm_v2_64)
  RGPU_BLAS_FN(cublasCsyrk_v2_64)
  RGPU_BLAS_FN(cublasCherk_v2_64)
  RGPU_BLAS_FN(cublasCsyr2k_v2_64)
  RGPU_BLAS_FN(cublasCher2k_v2_64)
  RGPU_BLAS_FN(cublasZgeam_64)
  RGPU_BLAS_FN(cublasZdgmm_64)
  RGPU_BLAS_FN(cublasZtrsm_v2_64)
  RGPU_BLAS_FN(cublasZtrmm_v2_64)
  RGPU_BLAS_FN(cublasZsymm_v2_64)
  RGPU_BLAS_FN(cublasZhemm_v2_64)
  RGPU_BLAS_FN(cublasZsyrk_v2_64)
  RGPU_BLAS_FN(cublasZherk_v2_64)
  RGPU_BLAS_FN(cublasZsyr2k_v2_64)
  RGPU_BLAS_FN(cublasZher2k_v2_64)
  RGPU_BLAS_FN(cublasSgetrfBatched)
  RGPU_BLAS_FN(cublasDgetrfBatched)
  RGPU_BLAS_FN(cublasSgetrsBatched)
  RGPU_BLAS_FN(cublasDgetrsBatched)
  RGPU_BLAS_FN(cublasSgetriBatched)
  RGPU_BLAS_FN(cublasDgetriBatched)
  RGPU_BLAS_FN(cublasSmatinvBatched)
  RGPU_BLAS_FN(cublasDmatinvBatched)
  RGPU_BLAS_FN(cublasSgeqrfBatched)
  RGPU_BLAS_FN(cublasDgeqrfBatched)
  RGPU_BLAS_FN(cublasLtCreate)
  RGPU_BLAS_FN(cublasLtDestroy)
  RGPU_BLAS_FN(cublasLtMatmulDescCreate)
  RGPU_BLAS_FN(cublasLtMatmulDescDestroy)
  RGPU_BLAS_FN(cublasLtMatmulDescSetAttribute)
  RGPU_BLAS_FN(cublasLtMatrixLayoutCreate)
  RGPU_BLAS_FN(cublasLtMatrixLayoutDestroy)
  RGPU_BLAS_FN(cublasLtMatrixLayoutSetAttribute)
  RGPU_BLAS_FN(cublasLtMatmulPreferenceCreate)
  RGPU_BLAS_FN(cublasLtMatmulPreferenceDestroy)
  RGPU_BLAS_FN(cublasLtMatmulPreferenceSetAttribute)
  RGPU_BLAS_FN(cublasLtMatmulAlgoGetHeuristic)
  RGPU_BLAS_FN(cublasLtMatmulAlgoCheck)
  RGPU_BLAS_FN(cublasLtMatmul)
#undef RGPU_BLAS_FN

 private:
  BlasApi() = default;
  void* cublas_ = nullptr;
  void* cublaslt_ = nullptr;
};

}  // namespace rgpu::server::cuda
