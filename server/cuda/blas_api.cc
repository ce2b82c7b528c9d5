#include "server/cuda/blas_api.h"

#include <dlfcn.h>

namespace rgpu::server::cuda {

Result<std::unique_ptr<BlasApi>> BlasApi::load(const std::string& cublas, const std::string& cublaslt) {
  std::unique_ptr<BlasApi> api(new BlasApi);
  // cuBLASLt first: libcublas needs it (NVIDIA's is NEEDED by libcublas.so.13).
  api->cublaslt_ = ::dlopen(cublaslt.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->cublaslt_)
    return Status(err::kNotSupported, "cannot load cuBLASLt (" + cublaslt + "): " + ::dlerror() +
                                          " (install NVIDIA's CUDA 13 libraries on the server, or set [cuda] "
                                          "cublaslt_library)");
  api->cublas_ = ::dlopen(cublas.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api->cublas_)
    return Status(err::kNotSupported, "cannot load cuBLAS (" + cublas + "): " + ::dlerror() +
                                          " (install NVIDIA's CUDA 13 libraries on the server, or set [cuda] "
                                          "cublas_library)");
  std::string missing;
  auto take = [&](void* lib, const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
#define RGPU_TAKE(lib, name) take(api->lib, #name, api->name);
  RGPU_TAKE(cublas_, cublasCreate_v2)
  RGPU_TAKE(cublas_, cublasDestroy_v2)
  RGPU_TAKE(cublas_, cublasSetStream_v2)
  RGPU_TAKE(cublas_, cublasSetPointerMode_v2)
  RGPU_TAKE(cublas_, cublasSetMathMode)
  RGPU_TAKE(cublas_, cublasSetWorkspace_v2)
  RGPU_TAKE(cublas_, cublasSaxpy_v2_64)
  RGPU_TAKE(cublas_, cublasDaxpy_v2_64)
  RGPU_TAKE(cublas_, cublasSdot_v2_64)
  RGPU_TAKE(cublas_, cublasDdot_v2_64)
  RGPU_TAKE(cublas_, cublasSnrm2_v2_64)
  RGPU_TAKE(cublas_, cublasDnrm2_v2_64)
  RGPU_TAKE(cublas_, cublasSscal_v2_64)
  RGPU_TAKE(cublas_, cublasDscal_v2_64)
  RGPU_TAKE(cublas_, cublasSasum_v2_64)
  RGPU_TAKE(cublas_, cublasDasum_v2_64)
  RGPU_TAKE(cublas_, cublasIsamax_v2_64)
  RGPU_TAKE(cublas_, cublasIdamax_v2_64)
  RGPU_TAKE(cublas_, cublasIsamin_v2_64)
  RGPU_TAKE(cublas_, cublasIdamin_v2_64)
  RGPU_TAKE(cublas_, cublasIsamax_v2)
  RGPU_TAKE(cublas_, cublasIdamax_v2)
  RGPU_TAKE(cublas_, cublasIsamin_v2)
  RGPU_TAKE(cublas_, cublasIdamin_v2)
  RGPU_TAKE(cublas_, cublasScopy_v2_64)
  RGPU_TAKE(cublas_, cublasDcopy_v2_64)
  RGPU_TAKE(cublas_, cublasSswap_v2_64)
  RGPU_TAKE(cublas_, cublasDswap_v2_64)
  RGPU_TAKE(cublas_, cublasSgemv_v2_64)
  RGPU_TAKE(cublas_, cublasDgemv_v2_64)
  RGPU_TAKE(cublas_, cublasSger_v2_64)
  RGPU_TAKE(cublas_, cublasDger_v2_64)
  RGPU_TAKE(cublas_, cublasGemmEx_64)
  RGPU_TAKE(cublas_, cublasGemmStridedBatchedEx_64)
  RGPU_TAKE(cublas_, cublasGemmBatchedEx_64)
  RGPU_TAKE(cublas_, cublasSgeam_64)
  RGPU_TAKE(cublas_, cublasDgeam_64)
  RGPU_TAKE(cublas_, cublasSdgmm_64)
  RGPU_TAKE(cublas_, cublasDdgmm_64)
  RGPU_TAKE(cublas_, cublasStrsm_v2_64)
  RGPU_TAKE(cublas_, cublasDtrsm_v2_64)
  RGPU_TAKE(cublas_, cublasSsyrk_v2_64)
  RGPU_TAKE(cublas_, cublasDsyrk_v2_64)
  RGPU_TAKE(cublas_, cublasStrmm_v2_64)
  RGPU_TAKE(cublas_, cublasDtrmm_v2_64)
  RGPU_TAKE(cublas_, cublasSsymm_v2_64)
  RGPU_TAKE(cublas_, cublasDsymm_v2_64)
  RGPU_TAKE(cublas_, cublasSsyr2k_v2_64)
  RGPU_TAKE(cublas_, cublasDsyr2k_v2_64)
  RGPU_TAKE(cublas_, cublasStrmv_v2_64)
  RGPU_TAKE(cublas_, cublasStrsv_v2_64)
  RGPU_TAKE(cublas_, cublasSsymv_v2_64)
  RGPU_TAKE(cublas_, cublasDtrmv_v2_64)
  RGPU_TAKE(cublas_, cublasDtrsv_v2_64)
  RGPU_TAKE(cublas_, cublasDsymv_v2_64)
  RGPU_TAKE(cublas_, cublasCtrmv_v2_64)
  RGPU_TAKE(cublas_, cublasCtrsv_v2_64)
  RGPU_TAKE(cublas_, cublasCsymv_v2_64)
  RGPU_TAKE(cublas_, cublasZtrmv_v2_64)
  RGPU_TAKE(cublas_, cublasZtrsv_v2_64)
  RGPU_TAKE(cublas_, cublasZsymv_v2_64)
  RGPU_TAKE(cublas_, cublasChemv_v2_64)
  RGPU_TAKE(cublas_, cublasZhemv_v2_64)
  RGPU_TAKE(cublas_, cublasCgetrfBatched)
  RGPU_TAKE(cublas_, cublasCgetrsBatched)
  RGPU_TAKE(cublas_, cublasCgetriBatched)
  RGPU_TAKE(cublas_, cublasCmatinvBatched)
  RGPU_TAKE(cublas_, cublasCgeqrfBatched)
  RGPU_TAKE(cublas_, cublasZgetrfBatched)
  RGPU_TAKE(cublas_, cublasZgetrsBatched)
  RGPU_TAKE(cublas_, cublasZgetriBatched)
  RGPU_TAKE(cublas_, cublasZmatinvBatched)
  RGPU_TAKE(cublas_, cublasZgeqrfBatched)
  RGPU_TAKE(cublas_, cublasCaxpy_v2_64)
  RGPU_TAKE(cublas_, cublasZaxpy_v2_64)
  RGPU_TAKE(cublas_, cublasCscal_v2_64)
  RGPU_TAKE(cublas_, cublasZscal_v2_64)
  RGPU_TAKE(cublas_, cublasCsscal_v2_64)
  RGPU_TAKE(cublas_, cublasZdscal_v2_64)
  RGPU_TAKE(cublas_, cublasCcopy_v2_64)
  RGPU_TAKE(cublas_, cublasZcopy_v2_64)
  RGPU_TAKE(cublas_, cublasCswap_v2_64)
  RGPU_TAKE(cublas_, cublasZswap_v2_64)
  RGPU_TAKE(cublas_, cublasCdotu_v2_64)
  RGPU_TAKE(cublas_, cublasZdotu_v2_64)
  RGPU_TAKE(cublas_, cublasCdotc_v2_64)
  RGPU_TAKE(cublas_, cublasZdotc_v2_64)
  RGPU_TAKE(cublas_, cublasScnrm2_v2_64)
  RGPU_TAKE(cublas_, cublasDznrm2_v2_64)
  RGPU_TAKE(cublas_, cublasScasum_v2_64)
  RGPU_TAKE(cublas_, cublasDzasum_v2_64)
  RGPU_TAKE(cublas_, cublasIcamax_v2_64)
  RGPU_TAKE(cublas_, cublasIzamax_v2_64)
  RGPU_TAKE(cublas_, cublasIcamin_v2_64)
  RGPU_TAKE(cublas_, cublasIzamin_v2_64)
  RGPU_TAKE(cublas_, cublasIcamax_v2)
  RGPU_TAKE(cublas_, cublasIzamax_v2)
  RGPU_TAKE(cublas_, cublasIcamin_v2)
  RGPU_TAKE(cublas_, cublasIzamin_v2)
  RGPU_TAKE(cublas_, cublasCgemv_v2_64)
  RGPU_TAKE(cublas_, cublasZgemv_v2_64)
  RGPU_TAKE(cublas_, cublasCgeru_v2_64)
  RGPU_TAKE(cublas_, cublasZgeru_v2_64)
  RGPU_TAKE(cublas_, cublasCgerc_v2_64)
  RGPU_TAKE(cublas_, cublasZgerc_v2_64)
  RGPU_TAKE(cublas_, cublasCgeam_64)
  RGPU_TAKE(cublas_, cublasCdgmm_64)
  RGPU_TAKE(cublas_, cublasCtrsm_v2_64)
  RGPU_TAKE(cublas_, cublasCtrmm_v2_64)
  RGPU_TAKE(cublas_, cublasCsymm_v2_64)
  RGPU_TAKE(cublas_, cublasChemm_v2_64)
  RGPU_TAKE(cublas_, cublasCsyrk_v2_64)
  RGPU_TAKE(cublas_, cublasCherk_v2_64)
  RGPU_TAKE(cublas_, cublasCsyr2k_v2_64)
  RGPU_TAKE(cublas_, cublasCher2k_v2_64)
  RGPU_TAKE(cublas_, cublasZgeam_64)
  RGPU_TAKE(cublas_, cublasZdgmm_64)
  RGPU_TAKE(cublas_, cublasZtrsm_v2_64)
  RGPU_TAKE(cublas_, cublasZtrmm_v2_64)
  RGPU_TAKE(cublas_, cublasZsymm_v2_64)
  RGPU_TAKE(cublas_, cublasZhemm_v2_64)
  RGPU_TAKE(cublas_, cublasZsyrk_v2_64)
  RGPU_TAKE(cublas_, cublasZherk_v2_64)
  RGPU_TAKE(cublas_, cublasZsyr2k_v2_64)
  RGPU_TAKE(cublas_, cublasZher2k_v2_64)
  RGPU_TAKE(cublas_, cublasSgetrfBatched)
  RGPU_TAKE(cublas_, cublasDgetrfBatched)
  RGPU_TAKE(cublas_, cublasSgetrsBatched)
  RGPU_TAKE(cublas_, cublasDgetrsBatched)
  RGPU_TAKE(cublas_, cublasSgetriBatched)
  RGPU_TAKE(cublas_, cublasDgetriBatched)
  RGPU_TAKE(cublas_, cublasSmatinvBatched)
  RGPU_TAKE(cublas_, cublasDmatinvBatched)
  RGPU_TAKE(cublas_, cublasSgeqrfBatched)
  RGPU_TAKE(cublas_, cublasDgeqrfBatched)
  RGPU_TAKE(cublaslt_, cublasLtCreate)
  RGPU_TAKE(cublaslt_, cublasLtDestroy)
  RGPU_TAKE(cublaslt_, cublasLtMatmulDescCreate)
  RGPU_TAKE(cublaslt_, cublasLtMatmulDescDestroy)
  RGPU_TAKE(cublaslt_, cublasLtMatmulDescSetAttribute)
  RGPU_TAKE(cublaslt_, cublasLtMatrixLayoutCreate)
  RGPU_TAKE(cublaslt_, cublasLtMatrixLayoutDestroy)
  RGPU_TAKE(cublaslt_, cublasLtMatrixLayoutSetAttribute)
  RGPU_TAKE(cublaslt_, cublasLtMatmulPreferenceCreate)
  RGPU_TAKE(cublaslt_, cublasLtMatmulPreferenceDestroy)
  RGPU_TAKE(cublaslt_, cublasLtMatmulPreferenceSetAttribute)
  RGPU_TAKE(cublaslt_, cublasLtMatmulAlgoGetHeuristic)
  RGPU_TAKE(cublaslt_, cublasLtMatmulAlgoCheck)
  RGPU_TAKE(cublaslt_, cublasLtMatmul)
#undef RGPU_TAKE
  if (!missing.empty())
    return Status(err::kNotSupported, "cuBLAS (" + cublas + ", " + cublaslt + ") lacks entry points: " + missing);
  return api;
}

BlasApi::~BlasApi() {
  // The libraries stay mapped: handles they made may still be torn down by
  // their own atexit code.
}

Status BlasApi::check(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  // The status itself (err::kBlasStatusBase): a failed cuBLAS call fails that
  // call only, whatever the status; a real fault of the GPU surfaces through
  // the driver anyway.
  const char* name = "cuBLAS status";
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: name = "CUBLAS_STATUS_NOT_INITIALIZED"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: name = "CUBLAS_STATUS_ALLOC_FAILED"; break;
    case CUBLAS_STATUS_INVALID_VALUE: name = "CUBLAS_STATUS_INVALID_VALUE"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: name = "CUBLAS_STATUS_ARCH_MISMATCH (not on this GPU)"; break;
    case CUBLAS_STATUS_MAPPING_ERROR: name = "CUBLAS_STATUS_MAPPING_ERROR"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: name = "CUBLAS_STATUS_EXECUTION_FAILED"; break;
    case CUBLAS_STATUS_INTERNAL_ERROR: name = "CUBLAS_STATUS_INTERNAL_ERROR"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: name = "CUBLAS_STATUS_NOT_SUPPORTED"; break;
    case CUBLAS_STATUS_LICENSE_ERROR: name = "CUBLAS_STATUS_LICENSE_ERROR"; break;
    default: break;
  }
  return Status(err::kBlasStatusBase + static_cast<int>(s), std::string(call) + ": " + name + " (" +
                                                               std::to_string(static_cast<int>(s)) + ")");
}

}  // namespace rgpu::server::cuda
