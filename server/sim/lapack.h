// LAPACK (OpenBLAS's, LP64) as gfortran compiles it: the routines the sim
// backend's cuSOLVER (sim_solver.cc) and batched cuBLAS factorizations
// (sim_blas_batched.cc) call, declared once. Character arguments carry
// gfortran's hidden lengths (size_t, after the other arguments).
#pragma once

#include <complex>
#include <cstddef>

namespace rgpu::server::lapack {
using cfloat = std::complex<float>;
using cdouble = std::complex<double>;
using L = size_t;  // gfortran's hidden lengths of character arguments

// LAPACK's getrs and getri swap rows (columns) by the pivots without checking
// them: a pivot outside 1..n reads and writes outside the matrix. The pivots
// are the program's device memory, so each is checked first: the index of the
// first one outside 1..n, or -1.
inline int badPivot(const int* ipiv, int n) {
  for (int i = 0; i < n; ++i)
    if (ipiv[i] < 1 || ipiv[i] > n) return i;
  return -1;
}
}  // namespace rgpu::server::lapack

extern "C" {
#define RGPU_LAPACK_FOR(X, T, R) \
  void X##potrf_(const char*, const int*, T*, const int*, int*, size_t); \
  void X##potrs_(const char*, const int*, const int*, const T*, const int*, T*, const int*, int*, size_t); \
  void X##getrf_(const int*, const int*, T*, const int*, int*, int*); \
  void X##getrs_(const char*, const int*, const int*, const T*, const int*, const int*, T*, const int*, int*, size_t); \
  void X##geqrf_(const int*, const int*, T*, const int*, T*, T*, const int*, int*); \
  void X##getri_(const int*, T*, const int*, const int*, T*, const int*, int*);
RGPU_LAPACK_FOR(s, float, float)
RGPU_LAPACK_FOR(d, double, double)
RGPU_LAPACK_FOR(c, rgpu::server::lapack::cfloat, float)
RGPU_LAPACK_FOR(z, rgpu::server::lapack::cdouble, double)
#undef RGPU_LAPACK_FOR
void sormqr_(const char*, const char*, const int*, const int*, const int*, const float*, const int*, const float*,
             float*, const int*, float*, const int*, int*, size_t, size_t);
void dormqr_(const char*, const char*, const int*, const int*, const int*, const double*, const int*, const double*,
             double*, const int*, double*, const int*, int*, size_t, size_t);
void cunmqr_(const char*, const char*, const int*, const int*, const int*, const rgpu::server::lapack::cfloat*, const int*, const rgpu::server::lapack::cfloat*,
             rgpu::server::lapack::cfloat*, const int*, rgpu::server::lapack::cfloat*, const int*, int*, size_t, size_t);
void zunmqr_(const char*, const char*, const int*, const int*, const int*, const rgpu::server::lapack::cdouble*, const int*, const rgpu::server::lapack::cdouble*,
             rgpu::server::lapack::cdouble*, const int*, rgpu::server::lapack::cdouble*, const int*, int*, size_t, size_t);
void ssyevd_(const char*, const char*, const int*, float*, const int*, float*, float*, const int*, int*, const int*,
             int*, size_t, size_t);
void dsyevd_(const char*, const char*, const int*, double*, const int*, double*, double*, const int*, int*, const int*,
             int*, size_t, size_t);
void cheevd_(const char*, const char*, const int*, rgpu::server::lapack::cfloat*, const int*, float*, rgpu::server::lapack::cfloat*, const int*, float*, const int*,
             int*, const int*, int*, size_t, size_t);
void zheevd_(const char*, const char*, const int*, rgpu::server::lapack::cdouble*, const int*, double*, rgpu::server::lapack::cdouble*, const int*, double*,
             const int*, int*, const int*, int*, size_t, size_t);
void sgesvd_(const char*, const char*, const int*, const int*, float*, const int*, float*, float*, const int*, float*,
             const int*, float*, const int*, int*, size_t, size_t);
void dgesvd_(const char*, const char*, const int*, const int*, double*, const int*, double*, double*, const int*,
             double*, const int*, double*, const int*, int*, size_t, size_t);
void cgesvd_(const char*, const char*, const int*, const int*, rgpu::server::lapack::cfloat*, const int*, float*, rgpu::server::lapack::cfloat*, const int*,
             rgpu::server::lapack::cfloat*, const int*, rgpu::server::lapack::cfloat*, const int*, float*, int*, size_t, size_t);
void zgesvd_(const char*, const char*, const int*, const int*, rgpu::server::lapack::cdouble*, const int*, double*, rgpu::server::lapack::cdouble*, const int*,
             rgpu::server::lapack::cdouble*, const int*, rgpu::server::lapack::cdouble*, const int*, double*, int*, size_t, size_t);
}
