// NVIDIA's cuSOLVER (dense), loaded by a worker at run time like cuBLAS
// (blas_api.h): dlopen of libcusolver.so.12 ([cuda] cusolver_library; tests
// point it at a fake) on the session's first cuSOLVER call, and dlsym of
// each entry point rgpu forwards, typed by NVIDIA's own header. Its static
// runtime works in the context current on the calling thread: the worker's
// primary context.
#pragma once

#include <cusolverDn.h>

#include <memory>
#include <string>

#include "common/status.h"

// Every routine rgpu forwards, in each precision (X(name)).
#define RGPU_SOLVER_ROUTINES(X)                                                                                \
  X(cusolverDnSpotrf_bufferSize) X(cusolverDnDpotrf_bufferSize) X(cusolverDnCpotrf_bufferSize)                  \
  X(cusolverDnZpotrf_bufferSize) X(cusolverDnSpotrf) X(cusolverDnDpotrf) X(cusolverDnCpotrf) X(cusolverDnZpotrf) \
  X(cusolverDnSpotrs) X(cusolverDnDpotrs) X(cusolverDnCpotrs) X(cusolverDnZpotrs)                               \
  X(cusolverDnSgetrf_bufferSize) X(cusolverDnDgetrf_bufferSize) X(cusolverDnCgetrf_bufferSize)                  \
  X(cusolverDnZgetrf_bufferSize) X(cusolverDnSgetrf) X(cusolverDnDgetrf) X(cusolverDnCgetrf) X(cusolverDnZgetrf) \
  X(cusolverDnSgetrs) X(cusolverDnDgetrs) X(cusolverDnCgetrs) X(cusolverDnZgetrs)                               \
  X(cusolverDnSgeqrf_bufferSize) X(cusolverDnDgeqrf_bufferSize) X(cusolverDnCgeqrf_bufferSize)                  \
  X(cusolverDnZgeqrf_bufferSize) X(cusolverDnSgeqrf) X(cusolverDnDgeqrf) X(cusolverDnCgeqrf) X(cusolverDnZgeqrf) \
  X(cusolverDnSormqr_bufferSize) X(cusolverDnDormqr_bufferSize) X(cusolverDnCunmqr_bufferSize)                  \
  X(cusolverDnZunmqr_bufferSize) X(cusolverDnSormqr) X(cusolverDnDormqr) X(cusolverDnCunmqr) X(cusolverDnZunmqr) \
  X(cusolverDnSsyevd_bufferSize) X(cusolverDnDsyevd_bufferSize) X(cusolverDnCheevd_bufferSize)                  \
  X(cusolverDnZheevd_bufferSize) X(cusolverDnSsyevd) X(cusolverDnDsyevd) X(cusolverDnCheevd) X(cusolverDnZheevd) \
  X(cusolverDnSgesvd_bufferSize) X(cusolverDnDgesvd_bufferSize) X(cusolverDnCgesvd_bufferSize)                  \
  X(cusolverDnZgesvd_bufferSize) X(cusolverDnSgesvd) X(cusolverDnDgesvd) X(cusolverDnCgesvd) X(cusolverDnZgesvd)

namespace rgpu::server::cuda {

class SolverApi {
 public:
  static Result<std::unique_ptr<SolverApi>> load(const std::string& cusolver);
  ~SolverApi() = default;  // (the library stays mapped, as cuBLAS's does)
  SolverApi(const SolverApi&) = delete;
  SolverApi& operator=(const SolverApi&) = delete;

  // A cusolverStatus_t as a Status naming the call.
  static Status check(cusolverStatus_t s, const char* call);

#define RGPU_SOLVER_FN(name) decltype(&::name) name = nullptr;
  RGPU_SOLVER_FN(cusolverDnCreate)
  RGPU_SOLVER_FN(cusolverDnDestroy)
  RGPU_SOLVER_FN(cusolverDnSetStream)
  RGPU_SOLVER_ROUTINES(RGPU_SOLVER_FN)
#undef RGPU_SOLVER_FN

 private:
  SolverApi() = default;
  void* lib_ = nullptr;
};

}  // namespace rgpu::server::cuda
