// cuBLAS and cuBLASLt on the CPU for the sim backend: the same calls on host
// memory (the sim's device memory), with OpenBLAS for f32 and f64 and f16/bf16
// converted to f32 around it (computed in f32, rounded once on the way out).
// Called from a stream's executor thread, in stream order; the session has
// already checked every range the call names (server/backend/blas.h), except the
// matrices a gemmBatched pointer array names, which `valid` checks here.
#pragma once

#include <functional>
#include <string>

#include "server/backend/blas.h"

namespace rgpu::server::simblas {

// Whether [ptr, ptr + bytes) is memory of the session (the sim's allocations).
using Valid = std::function<bool(uint64_t ptr, uint64_t bytes)>;

// Runs one cuBLAS call. A reduction whose result goes back to the client
// (a.result == 0) leaves its bytes in *result.
Status run(const BlasArgs& a, const Valid& valid, std::string* result);

// The batched factorizations (getrf, getrs, getri, matinv, geqrf; S and D) on
// the matrices their pointer arrays name, each checked by `valid` first
// (sim_blas_batched.cc). Per-matrix infos are LAPACK's.
Status runBatchedFactorization(const BlasArgs& a, const Valid& valid);

// Complex level 1 and 2 (a reduction's result as run() leaves it), and geam,
// dgmm, trsm, trmm, symm, syrk, syr2k, herk, her2k and hemm in C and Z
// (sim_blas_complex.cc).
Status runComplexLevel12(const BlasArgs& a, std::string* result);
Status runComplexLevel3(const BlasArgs& a);

// trmv, trsv, symv (S, D, C, Z) and hemv (C, Z) (sim_blas_level2.cc).
Status runLevel2More(const BlasArgs& a);

// Runs one cublasLtMatmul: D = epilogue(alpha * op(A) op(B) + beta * C), with
// the bias, auxiliary (ReLU mask, GELU input) and bias-gradient outputs the
// epilogue names.
Status runLt(const LtArgs& a);

// GELU as cuBLASLt computes it (the tanh approximation) and its derivative.
double gelu(double x);
double geluGrad(double x);

}  // namespace rgpu::server::simblas
