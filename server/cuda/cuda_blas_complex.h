// cuBLAS's complex level 3 beyond gemm through NVIDIA's library
// (cuda_blas_complex.cc): level 1 and 2, the batched factorizations (S, D too), and geam, dgmm, trsm, trmm, symm, syrk, syr2k, herk,
// her2k and hemm in C and Z, for a call the session has checked.
#pragma once

#include "server/backend/blas.h"
#include "server/cuda/blas_api.h"

namespace rgpu::server::cuda {

Status runComplexBlas(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta);
// The batched factorizations (getrf, getrs, getri, matinv, geqrf) in S, D, C and Z.
Status runFactorization(BlasApi& B, cublasHandle_t h, const BlasArgs& a);
// trmv, trsv, symv (S, D, C, Z) and hemv (C, Z) (cuda_blas_level2.cc).
Status runLevel2More(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta);
// Level 1 and 2 (a reduction writes to `result`).
Status runComplexBlas12(BlasApi& B, cublasHandle_t h, const BlasArgs& a, const void* alpha, const void* beta,
                        uint64_t result);

}  // namespace rgpu::server::cuda
