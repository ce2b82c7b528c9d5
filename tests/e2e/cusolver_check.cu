// cuSOLVER's dense routines through rgpu (docs/cusolver.md): each routine
// in the precisions a program would use it in, with its bufferSize call, a
// workspace and devInfo in device memory, on a stream of its own; each
// result checked against what it must satisfy, computed here in double
// precision (a solve gives back the known solution, Q^T A gives R, A v = l v,
// A = U S V^T), relative to the data's size. Then what cuSOLVER refuses, a
// name rgpu does not forward, and a routine past the end of its buffer.
//
//   cusolver_check [--no-overrun]   one line per case and "cusolver_check:
//                                   done"; exits 1 when a result is off.
//                                   --no-overrun leaves out the routine past
//                                   its buffer (natively, a GPU fault)
#include <cuComplex.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using cd = std::complex<double>;

#define CHECK(call)                                                                 \
  do {                                                                              \
    auto e_ = (call);                                                               \
    if (static_cast<int>(e_) != 0) {                                                \
      std::printf("cusolver_check: %s failed: %d\n", #call, static_cast<int>(e_));  \
      return 2;                                                                     \
    }                                                                               \
  } while (0)

static int g_failures = 0;

static void report(const char* what, double err, double tol, int info) {
  const bool ok = err <= tol && info == 0;
  std::printf("%s: relative error %.2e, devInfo %d %s\n", what, err, info, ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

static const char* statusName(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    default: return "another cusolverStatus_t";
  }
}

// Element conversions to and from complex<double>.
static cd toC(float x) { return x; }
static cd toC(double x) { return x; }
static cd toC(cuComplex x) { return {x.x, x.y}; }
static cd toC(cuDoubleComplex x) { return {x.x, x.y}; }
template <typename T>
T fromC(cd z);
template <> float fromC<float>(cd z) { return static_cast<float>(z.real()); }
template <> double fromC<double>(cd z) { return z.real(); }
template <> cuComplex fromC<cuComplex>(cd z) { return {static_cast<float>(z.real()), static_cast<float>(z.imag())}; }
template <> cuDoubleComplex fromC<cuDoubleComplex>(cd z) { return {z.real(), z.imag()}; }

// Column-major matrices in double.
struct Mat {
  int rows, cols;
  std::vector<cd> v;
  Mat(int r, int c) : rows(r), cols(c), v(static_cast<size_t>(r) * c) {}
  cd& operator()(int i, int j) { return v[i + static_cast<size_t>(j) * rows]; }
  cd operator()(int i, int j) const { return v[i + static_cast<size_t>(j) * rows]; }
};
static Mat mul(const Mat& a, const Mat& b) {
  Mat c(a.rows, b.cols);
  for (int j = 0; j < b.cols; ++j)
    for (int k = 0; k < a.cols; ++k)
      for (int i = 0; i < a.rows; ++i) c(i, j) += a(i, k) * b(k, j);
  return c;
}
static Mat adjoint(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int i = 0; i < a.rows; ++i)
    for (int j = 0; j < a.cols; ++j) t(j, i) = std::conj(a(i, j));
  return t;
}
static double norm(const Mat& a) {
  double s = 0;
  for (cd z : a.v) s += std::norm(z);
  return std::sqrt(s);
}
static double diff(const Mat& a, const Mat& b) {
  double s = 0;
  for (size_t i = 0; i < a.v.size(); ++i) s += std::norm(a.v[i] - b.v[i]);
  return std::sqrt(s) / std::max(norm(b), 1e-300);
}
// Entries uniform in [-1, 1) (full rank, in practice).
static Mat random(int r, int c, int salt, bool cplx) {
  std::mt19937 gen(static_cast<unsigned>(salt));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Mat m(r, c);
  for (int j = 0; j < c; ++j)
    for (int i = 0; i < r; ++i) {
      const double re = u(gen);
      m(i, j) = cd(re, cplx ? u(gen) : 0.0);
    }
  return m;
}

template <typename T>
static int upload(T** dev, const Mat& m, int ld = 0) {
  if (!ld) ld = m.rows;
  std::vector<T> host(static_cast<size_t>(ld) * m.cols, fromC<T>(0));
  for (int j = 0; j < m.cols; ++j)
    for (int i = 0; i < m.rows; ++i) host[i + static_cast<size_t>(j) * ld] = fromC<T>(m(i, j));
  CHECK(cudaMalloc(dev, host.size() * sizeof(T)));
  CHECK(cudaMemcpy(*dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return 0;
}
template <typename T>
static Mat download(const T* dev, int rows, int cols, int ld = 0) {
  if (!ld) ld = rows;
  std::vector<T> host(static_cast<size_t>(ld) * cols);
  Mat m(rows, cols);
  if (cudaMemcpy(host.data(), dev, host.size() * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) return m;
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) m(i, j) = toC(host[i + static_cast<size_t>(j) * ld]);
  return m;
}
static int info(const int* dev) {
  int v = -999;
  cudaMemcpy(&v, dev, sizeof v, cudaMemcpyDeviceToHost);
  return v;
}

// A Hermitian positive definite matrix: M^H M + n I.
static Mat spd(int n, int salt, bool cplx) {
  Mat m = random(n, n, salt, cplx);
  Mat a = mul(adjoint(m), m);
  for (int i = 0; i < n; ++i) a(i, i) += n;
  return a;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (whole lines between the libraries' log lines on stderr)
  const bool overrun = !(argc > 1 && std::string(argv[1]) == "--no-overrun");
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cusolverDnHandle_t h;
  CHECK(cusolverDnCreate(&h));
  CHECK(cusolverDnSetStream(h, stream));
  int* dinfo;
  CHECK(cudaMalloc(&dinfo, sizeof(int)));

  {  // Dpotrf + Dpotrs: A X = B with the known X.
    const int n = 50, nrhs = 3;
    Mat a = spd(n, 1, false), x = random(n, nrhs, 2, false), b = mul(a, x);
    double *da, *db, *work;
    if (upload(&da, a) || upload(&db, b)) return 2;
    int lwork = 0;
    CHECK(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, da, n, &lwork));
    CHECK(cudaMalloc(&work, std::max(lwork, 1) * sizeof(double)));
    CHECK(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, da, n, work, lwork, dinfo));
    CHECK(cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, nrhs, da, n, db, n, dinfo));
    CHECK(cudaStreamSynchronize(stream));
    report("Dpotrf + Dpotrs n=50 nrhs=3", diff(download(db, n, nrhs), x), 1e-12, info(dinfo));
    std::printf("Dpotrf workspace: %d elements\n", lwork);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(work));
    // A matrix that is not positive definite: devInfo names the first minor that is not.
    Mat bad = spd(8, 3, false);
    bad(4, 4) = -1000;
    float* fa;
    if (upload(&fa, bad)) return 2;
    float* fwork;
    CHECK(cusolverDnSpotrf_bufferSize(h, CUBLAS_FILL_MODE_UPPER, 8, fa, 8, &lwork));
    CHECK(cudaMalloc(&fwork, std::max(lwork, 1) * sizeof(float)));
    CHECK(cusolverDnSpotrf(h, CUBLAS_FILL_MODE_UPPER, 8, fa, 8, fwork, lwork, dinfo));
    std::printf("Spotrf of a matrix that is not positive definite: devInfo %d\n", info(dinfo));
    CHECK(cudaFree(fa));
    CHECK(cudaFree(fwork));
  }

  {  // Sgetrf + Sgetrs with pivoting, and Dgetrf + Dgetrs without.
    const int n = 40, nrhs = 2;
    Mat a = random(n, n, 4, false), x = random(n, nrhs, 5, false), b = mul(a, x);
    float *da, *db, *work;
    int* ipiv;
    if (upload(&da, a) || upload(&db, b)) return 2;
    int lwork = 0;
    CHECK(cusolverDnSgetrf_bufferSize(h, n, n, da, n, &lwork));
    CHECK(cudaMalloc(&work, std::max(lwork, 1) * sizeof(float)));
    CHECK(cudaMalloc(&ipiv, n * sizeof(int)));
    CHECK(cusolverDnSgetrf(h, n, n, da, n, work, ipiv, dinfo));
    CHECK(cusolverDnSgetrs(h, CUBLAS_OP_N, n, nrhs, da, n, ipiv, db, n, dinfo));
    std::vector<int> piv(n);
    CHECK(cudaMemcpy(piv.data(), ipiv, n * sizeof(int), cudaMemcpyDeviceToHost));
    const bool pivots_ok = std::all_of(piv.begin(), piv.end(), [&](int v) { return v >= 1 && v <= n; });
    report("Sgetrf + Sgetrs n=40 nrhs=2, pivoted", diff(download(db, n, nrhs), x), 1e-3, info(dinfo));
    std::printf("Sgetrf pivots: %s\n", pivots_ok ? "1-based, within 1..n" : "out of range");
    if (!pivots_ok) ++g_failures;
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(work));
    CHECK(cudaFree(ipiv));
    Mat dom = random(n, n, 6, false);
    for (int i = 0; i < n; ++i) dom(i, i) += 2.0 * n;  // diagonally dominant: no pivoting needed
    Mat db2 = mul(dom, x);
    double *dd, *dr, *dwork;
    if (upload(&dd, dom) || upload(&dr, db2)) return 2;
    CHECK(cusolverDnDgetrf_bufferSize(h, n, n, dd, n, &lwork));
    CHECK(cudaMalloc(&dwork, std::max(lwork, 1) * sizeof(double)));
    CHECK(cusolverDnDgetrf(h, n, n, dd, n, dwork, nullptr, dinfo));
    CHECK(cusolverDnDgetrs(h, CUBLAS_OP_N, n, nrhs, dd, n, nullptr, dr, n, dinfo));
    report("Dgetrf + Dgetrs n=40, without pivoting", diff(download(dr, n, nrhs), x), 1e-12, info(dinfo));
    CHECK(cudaFree(dd));
    CHECK(cudaFree(dr));
    CHECK(cudaFree(dwork));
  }

  {  // Zgetrf + Zgetrs solving A^H X = B.
    const int n = 20, nrhs = 2;
    Mat a = random(n, n, 7, true), x = random(n, nrhs, 8, true), b = mul(adjoint(a), x);
    cuDoubleComplex *da, *db, *work;
    int* ipiv;
    if (upload(&da, a) || upload(&db, b)) return 2;
    int lwork = 0;
    CHECK(cusolverDnZgetrf_bufferSize(h, n, n, da, n, &lwork));
    CHECK(cudaMalloc(&work, std::max(lwork, 1) * sizeof(cuDoubleComplex)));
    CHECK(cudaMalloc(&ipiv, n * sizeof(int)));
    CHECK(cusolverDnZgetrf(h, n, n, da, n, work, ipiv, dinfo));
    CHECK(cusolverDnZgetrs(h, CUBLAS_OP_C, n, nrhs, da, n, ipiv, db, n, dinfo));
    report("Zgetrf + Zgetrs n=20, conjugate transpose", diff(download(db, n, nrhs), x), 1e-11, info(dinfo));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(work));
    CHECK(cudaFree(ipiv));
  }

  {  // Dgeqrf + Dormqr: Q^T A is R (upper triangular, zeros below).
    const int m = 60, n = 20;
    Mat a = random(m, n, 9, false);
    double *da, *dc, *tau, *work;
    if (upload(&da, a) || upload(&dc, a)) return 2;
    CHECK(cudaMalloc(&tau, n * sizeof(double)));
    int lq = 0, lo = 0;
    CHECK(cusolverDnDgeqrf_bufferSize(h, m, n, da, m, &lq));
    CHECK(cusolverDnDormqr_bufferSize(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, m, n, n, da, m, tau, dc, m, &lo));
    const int lwork = std::max({lq, lo, 1});
    CHECK(cudaMalloc(&work, lwork * sizeof(double)));
    CHECK(cusolverDnDgeqrf(h, m, n, da, m, tau, work, lwork, dinfo));
    CHECK(cusolverDnDormqr(h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, m, n, n, da, m, tau, dc, m, work, lwork, dinfo));
    Mat qr = download(da, m, n), qta = download(dc, m, n);
    Mat r(m, n);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i <= j; ++i) r(i, j) = qr(i, j);
    report("Dgeqrf + Dormqr m=60 n=20: Q^T A = R", diff(qta, r), 1e-12, info(dinfo));
    CHECK(cudaFree(da));
    CHECK(cudaFree(dc));
    CHECK(cudaFree(tau));
    CHECK(cudaFree(work));
  }

  {  // Dsyevd and Cheevd: A V = V diag(W), W ascending.
    const int n = 30;
    Mat a = spd(n, 10, false);
    for (int i = 0; i < n; ++i) a(i, i) -= 1.5 * n;  // eigenvalues of both signs
    double *da, *w, *work;
    if (upload(&da, a)) return 2;
    CHECK(cudaMalloc(&w, n * sizeof(double)));
    int lwork = 0;
    CHECK(cusolverDnDsyevd_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, da, n, w, &lwork));
    CHECK(cudaMalloc(&work, std::max(lwork, 1) * sizeof(double)));
    CHECK(cusolverDnDsyevd(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, da, n, w, work, lwork, dinfo));
    Mat v = download(da, n, n), vals = download(w, n, 1);
    Mat vd(n, n);
    bool ascending = true;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) vd(i, j) = v(i, j) * vals(j, 0);
      if (j && vals(j, 0).real() < vals(j - 1, 0).real()) ascending = false;
    }
    report("Dsyevd n=30: A V = V diag(W)", diff(mul(a, v), vd), 1e-12, info(dinfo));
    std::printf("Dsyevd eigenvalues: %s\n", ascending ? "ascending" : "not ascending");
    if (!ascending) ++g_failures;
    CHECK(cudaFree(da));
    CHECK(cudaFree(w));
    CHECK(cudaFree(work));
    const int c = 16;
    Mat ha = spd(c, 11, true);
    cuComplex *dh, *cwork;
    float* cw;
    if (upload(&dh, ha)) return 2;
    CHECK(cudaMalloc(&cw, c * sizeof(float)));
    CHECK(cusolverDnCheevd_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, c, dh, c, cw, &lwork));
    CHECK(cudaMalloc(&cwork, std::max(lwork, 1) * sizeof(cuComplex)));
    CHECK(cusolverDnCheevd(h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, c, dh, c, cw, cwork, lwork, dinfo));
    Mat hv = download(dh, c, c), hw = download(cw, c, 1);
    Mat hvd(c, c);
    for (int j = 0; j < c; ++j)
      for (int i = 0; i < c; ++i) hvd(i, j) = hv(i, j) * hw(j, 0);
    report("Cheevd n=16 (Hermitian): A V = V diag(W)", diff(mul(ha, hv), hvd), 1e-5, info(dinfo));
    CHECK(cudaFree(dh));
    CHECK(cudaFree(cw));
    CHECK(cudaFree(cwork));
  }

  {  // Sgesvd (all of U and VT) and Zgesvd (the thin ones): A = U diag(S) VT.
    const int m = 30, n = 20;
    Mat a = random(m, n, 12, false);
    float *da, *s, *u, *vt, *work;
    if (upload(&da, a)) return 2;
    CHECK(cudaMalloc(&s, n * sizeof(float)));
    CHECK(cudaMalloc(&u, m * m * sizeof(float)));
    CHECK(cudaMalloc(&vt, n * n * sizeof(float)));
    int lwork = 0;
    CHECK(cusolverDnSgesvd_bufferSize(h, m, n, &lwork));
    CHECK(cudaMalloc(&work, std::max(lwork, 1) * sizeof(float)));
    CHECK(cusolverDnSgesvd(h, 'A', 'A', m, n, da, m, s, u, m, vt, n, work, lwork, nullptr, dinfo));
    Mat us = download(u, m, m), ss = download(s, n, 1), vts = download(vt, n, n);
    Mat usig(m, n);
    bool descending = true;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) usig(i, j) = us(i, j) * ss(j, 0);
      if (ss(j, 0).real() < 0 || (j && ss(j, 0).real() > ss(j - 1, 0).real())) descending = false;
    }
    report("Sgesvd m=30 n=20 jobu=A jobvt=A: A = U S VT", diff(mul(usig, vts), a), 1e-5, info(dinfo));
    std::printf("Sgesvd singular values: %s\n", descending ? "non-negative, descending" : "out of order");
    if (!descending) ++g_failures;
    CHECK(cudaFree(da));
    CHECK(cudaFree(s));
    CHECK(cudaFree(u));
    CHECK(cudaFree(vt));
    CHECK(cudaFree(work));
    const int zm = 12, zn = 8;
    Mat z = random(zm, zn, 13, true);
    cuDoubleComplex *dz, *zu, *zvt, *zwork;
    double *zs, *rwork;
    if (upload(&dz, z)) return 2;
    CHECK(cudaMalloc(&zs, zn * sizeof(double)));
    CHECK(cudaMalloc(&zu, zm * zn * sizeof(cuDoubleComplex)));
    CHECK(cudaMalloc(&zvt, zn * zn * sizeof(cuDoubleComplex)));
    CHECK(cudaMalloc(&rwork, (zn - 1) * sizeof(double)));
    CHECK(cusolverDnZgesvd_bufferSize(h, zm, zn, &lwork));
    CHECK(cudaMalloc(&zwork, std::max(lwork, 1) * sizeof(cuDoubleComplex)));
    CHECK(cusolverDnZgesvd(h, 'S', 'S', zm, zn, dz, zm, zs, zu, zm, zvt, zn, zwork, lwork, rwork, dinfo));
    Mat zus = download(zu, zm, zn), zss = download(zs, zn, 1), zvts = download(zvt, zn, zn);
    for (int j = 0; j < zn; ++j)
      for (int i = 0; i < zm; ++i) zus(i, j) *= zss(j, 0);
    report("Zgesvd m=12 n=8 jobu=S jobvt=S: A = U S VT", diff(mul(zus, zvts), z), 1e-12, info(dinfo));
    CHECK(cudaFree(dz));
    CHECK(cudaFree(zs));
    CHECK(cudaFree(zu));
    CHECK(cudaFree(zvt));
    CHECK(cudaFree(rwork));
    CHECK(cudaFree(zwork));
  }

  {  // What cuSOLVER refuses, and a name rgpu does not forward.
    double* d;
    CHECK(cudaMalloc(&d, 64 * sizeof(double)));
    int lwork = 0;
    std::printf("potrf with lda < n: %s\n",
                statusName(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, 8, d, 4, d, 8, dinfo)));
    std::printf("gesvd with m < n: %s\n",
                statusName(cusolverDnDgesvd(h, 'N', 'N', 4, 8, d, 4, d, d, 4, d, 8, d, 8, nullptr, dinfo)));
    std::printf("sytrf: %s\n", statusName(cusolverDnDsytrf_bufferSize(h, 8, d, 8, &lwork)));
    int version = 0;
    CHECK(cusolverGetVersion(&version));
    std::printf("version: %d\n", version);
    if (overrun) {
      // B past the end of its buffer: refused by the server, reported at the next synchronising call.
      double *a, *b;
      CHECK(cudaMalloc(&a, 16 * sizeof(double)));
      CHECK(cudaMalloc(&b, 8 * sizeof(double)));
      cusolverStatus_t queued = cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, 4, 4, a, 4, b, 4, dinfo);
      cudaError_t sync = cudaDeviceSynchronize();
      std::printf("past the end of an allocation: %s, then %s\n", statusName(queued), cudaGetErrorName(sync));
      CHECK(cudaFree(a));
      CHECK(cudaFree(b));
    }
    CHECK(cudaFree(d));
  }

  CHECK(cusolverDnDestroy(h));
  CHECK(cudaFree(dinfo));
  CHECK(cudaStreamDestroy(stream));
  std::printf("cusolver_check: done, %d failed\n", g_failures);
  return g_failures ? 1 : 0;
}
