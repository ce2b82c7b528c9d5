// NVIDIA's cuSPARSE (the generic API's SpMV, SpMM and SpGEMM), loaded by a worker at
// run time like cuBLAS (blas_api.h): dlopen of libcusparse.so.12 ([cuda]
// cusparse_library; tests point it at a fake) on the session's first
// cuSPARSE call, and dlsym of each entry point, typed by NVIDIA's header.
#pragma once

#include <cusparse.h>

#include <memory>
#include <string>

#include "common/status.h"

#define RGPU_SPARSE_FUNCTIONS(X)                                                                              \
  X(cusparseCreate) X(cusparseDestroy) X(cusparseSetStream) X(cusparseSetPointerMode) X(cusparseCreateCsr)   \
  X(cusparseCreateCsc) X(cusparseCreateCoo) X(cusparseCreateBlockedEll) X(cusparseDestroySpMat)              \
  X(cusparseCreateDnVec) X(cusparseDestroyDnVec) X(cusparseCreateDnMat) X(cusparseDestroyDnMat)              \
  X(cusparseSpMV_bufferSize) X(cusparseSpMV) X(cusparseSpMM_bufferSize) X(cusparseSpMM)                      \
  X(cusparseSpMatGetSize) X(cusparseCsrSetPointers)                                                          \
  X(cusparseSpGEMM_createDescr) X(cusparseSpGEMM_destroyDescr) X(cusparseSpGEMM_workEstimation)                 \
  X(cusparseSpGEMM_getNumProducts) X(cusparseSpGEMM_compute) X(cusparseSpGEMM_copy)                             \
  X(cusparseSpGEMMreuse_workEstimation) X(cusparseSpGEMMreuse_nnz) X(cusparseSpGEMMreuse_copy)                  \
  X(cusparseSpGEMMreuse_compute)

namespace rgpu::server::cuda {

class SparseApi {
 public:
  static Result<std::unique_ptr<SparseApi>> load(const std::string& cusparse);
  ~SparseApi() = default;  // (the library stays mapped, as cuBLAS's does)
  SparseApi(const SparseApi&) = delete;
  SparseApi& operator=(const SparseApi&) = delete;

  // A cusparseStatus_t as a Status naming the call.
  static Status check(cusparseStatus_t s, const char* call);

#define RGPU_SPARSE_FN(name) decltype(&::name) name = nullptr;
  RGPU_SPARSE_FUNCTIONS(RGPU_SPARSE_FN)
#undef RGPU_SPARSE_FN

 private:
  SparseApi() = default;
  void* lib_ = nullptr;
};

}  // namespace rgpu::server::cuda
