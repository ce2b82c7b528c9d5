// cuSPARSE's generic SpMV, SpMM and SpGEMM through rgpu (docs/cusparse.md): CSR,
// CSC and COO matrices with 32- and 64-bit indices from 0 and 1, real and
// complex values, each operation (N, T, C), host and device scalars,
// column- and row-major dense matrices, the const descriptors, SpGEMM's
// steps and its structure-reuse form (cusparse_check_spgemm.h) -- each result
// compared with the same product computed here in double precision,
// relative to its largest magnitude. Then what cuSPARSE refuses, a name rgpu
// does not forward, an index outside its matrix and a buffer past its end.
//
//   cusparse_check [--no-overrun | --no-bad-index]
//       one line per case and "cusparse_check: done"; exits 1 when a result
//       is off. --no-overrun leaves out the short buffer and the bad index
//       (natively, GPU faults); --no-bad-index the bad index only (NVIDIA's
//       library does not check indices: on the CUDA backend it faults)
#include <cuComplex.h>
#include <cuda_runtime.h>
#include <cusparse.h>

#include <algorithm>
#include <complex>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using cd = std::complex<double>;

#define CHECK(call)                                                                 \
  do {                                                                              \
    auto e_ = (call);                                                               \
    if (static_cast<int>(e_) != 0) {                                                \
      std::printf("cusparse_check: %s failed: %d\n", #call, static_cast<int>(e_));  \
      return 2;                                                                     \
    }                                                                               \
  } while (0)

static int g_failures = 0;

static void report(const char* what, double err, double tol) {
  const bool ok = err <= tol;
  std::printf("%s: relative error %.2e %s\n", what, err, ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

static cd toC(float x) { return x; }
static cd toC(double x) { return x; }
static cd toC(cuComplex x) { return {x.x, x.y}; }
template <typename T>
T fromC(cd z);
template <> float fromC<float>(cd z) { return static_cast<float>(z.real()); }
template <> double fromC<double>(cd z) { return z.real(); }
template <> cuComplex fromC<cuComplex>(cd z) { return {static_cast<float>(z.real()), static_cast<float>(z.imag())}; }

// A random sparse matrix: its entries sorted by row then column.
struct Entry {
  int r, c;
  cd v;
};
static std::vector<Entry> randomSparse(int rows, int cols, double density, int salt, bool cplx) {
  std::mt19937 gen(static_cast<unsigned>(salt));
  std::uniform_real_distribution<double> u(-1, 1), pick(0, 1);
  std::vector<Entry> e;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (pick(gen) < density) e.push_back({r, c, cd(u(gen), cplx ? u(gen) : 0.0)});
  return e;
}
static std::vector<cd> randomDense(size_t n, int salt, bool cplx) {
  std::mt19937 gen(static_cast<unsigned>(salt));
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<cd> v(n);
  for (cd& z : v) z = cd(u(gen), cplx ? u(gen) : 0.0);
  return v;
}

template <typename T>
static T* upload(const std::vector<cd>& host) {
  std::vector<T> t(host.size());
  for (size_t i = 0; i < host.size(); ++i) t[i] = fromC<T>(host[i]);
  T* d = nullptr;
  cudaMalloc(&d, std::max<size_t>(1, t.size()) * sizeof(T));
  cudaMemcpy(d, t.data(), t.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
template <typename I>
static I* uploadIndex(const std::vector<long long>& host) {
  std::vector<I> t(host.begin(), host.end());
  I* d = nullptr;
  cudaMalloc(&d, std::max<size_t>(1, t.size()) * sizeof(I));
  cudaMemcpy(d, t.data(), t.size() * sizeof(I), cudaMemcpyHostToDevice);
  return d;
}
template <typename T>
static std::vector<cd> download(const T* d, size_t n) {
  std::vector<T> t(n);
  cudaMemcpy(t.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  std::vector<cd> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = toC(t[i]);
  return out;
}

// The three arrays of a format (0: CSR, 1: CSC, 2: COO) with `base`.
struct Arrays {
  std::vector<long long> offsets, indices;
  std::vector<cd> values;
};
static Arrays arrays(std::vector<Entry> e, int rows, int cols, int format, int base) {
  Arrays a;
  if (format == 1) std::stable_sort(e.begin(), e.end(), [](const Entry& x, const Entry& y) { return x.c < y.c; });
  const int major = format == 1 ? cols : rows;
  if (format != 2) a.offsets.assign(major + 1, 0);
  for (const Entry& x : e) {
    if (format == 0) ++a.offsets[x.r + 1];
    if (format == 1) ++a.offsets[x.c + 1];
    if (format == 2) a.offsets.push_back(x.r + base);
    a.indices.push_back((format == 1 ? x.r : x.c) + base);
    a.values.push_back(x.v);
  }
  if (format != 2)
    for (int i = 0; i < major; ++i) a.offsets[i + 1] += a.offsets[i];
  if (format != 2)
    for (auto& o : a.offsets) o += base;
  return a;
}

// y = alpha op(A) x + beta y, or C = alpha op(A) op(B) + beta C, in double.
static std::vector<cd> reference(const std::vector<Entry>& e, int op, int m, int n, const std::vector<cd>& b, bool b_t,
                                 int k, std::vector<cd> c, cd alpha, cd beta, bool row_major) {
  for (cd& z : c) z *= beta;
  for (const Entry& x : e) {
    int out = x.r, in = x.c;
    cd v = x.v;
    if (op != 0) {
      std::swap(out, in);
      if (op == 2) v = std::conj(v);
    }
    for (int t = 0; t < n; ++t) {
      // B is k x n (b_t: stored n x k); C is m x n; both column-major unless row_major.
      const cd bv = b_t ? (row_major ? b[static_cast<size_t>(t) * k + in] : b[static_cast<size_t>(in) * n + t])
                        : (row_major ? b[static_cast<size_t>(in) * n + t] : b[static_cast<size_t>(t) * k + in]);
      cd& cv = row_major ? c[static_cast<size_t>(out) * n + t] : c[static_cast<size_t>(t) * m + out];
      cv += alpha * v * bv;
    }
  }
  return c;
}

static double relative(const std::vector<cd>& got, const std::vector<cd>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? worst / scale : 1;
}

// One SpMV of `format` and types, checked against the reference.
template <typename T, typename I>
static int spmv(cusparseHandle_t h, const char* what, int format, int base, int op, int rows, int cols, bool cplx,
                bool device_scalars, bool const_api, cudaDataType type, cusparseIndexType_t itype, double tol) {
  auto e = randomSparse(rows, cols, 0.05, rows + cols + format, cplx);
  Arrays a = arrays(e, rows, cols, format, base);
  const int m = op == 0 ? rows : cols, k = op == 0 ? cols : rows;
  auto x = randomDense(k, 7, cplx), y = randomDense(m, 8, cplx);
  const cd alpha(2.0, cplx ? 0.5 : 0.0), beta(0.5, 0);
  I* off = uploadIndex<I>(a.offsets);
  I* ind = uploadIndex<I>(a.indices);
  T* val = upload<T>(a.values);
  T* dx = upload<T>(x);
  T* dy = upload<T>(y);
  const long long nnz = static_cast<long long>(a.values.size());
  cusparseSpMatDescr_t A = nullptr;
  cusparseConstSpMatDescr_t cA = nullptr;
  const auto b = static_cast<cusparseIndexBase_t>(base);
  if (const_api) {
    CHECK(cusparseCreateConstCsr(&cA, rows, cols, nnz, off, ind, val, itype, itype, b, type));
  } else if (format == 0) {
    CHECK(cusparseCreateCsr(&A, rows, cols, nnz, off, ind, val, itype, itype, b, type));
  } else if (format == 1) {
    CHECK(cusparseCreateCsc(&A, rows, cols, nnz, off, ind, val, itype, itype, b, type));
  } else {
    CHECK(cusparseCreateCoo(&A, rows, cols, nnz, off, ind, val, itype, b, type));
  }
  cusparseConstSpMatDescr_t useA = const_api ? cA : A;
  cusparseDnVecDescr_t X, Y;
  CHECK(cusparseCreateDnVec(&X, k, dx, type));
  CHECK(cusparseCreateDnVec(&Y, m, dy, type));
  T ha = fromC<T>(alpha), hb = fromC<T>(beta);
  T* dscal = nullptr;
  const void *pa = &ha, *pb = &hb;
  if (device_scalars) {
    dscal = upload<T>({alpha, beta});
    CHECK(cusparseSetPointerMode(h, CUSPARSE_POINTER_MODE_DEVICE));
    pa = dscal;
    pb = dscal + 1;
  }
  const auto o = static_cast<cusparseOperation_t>(op);
  size_t size = 0;
  CHECK(cusparseSpMV_bufferSize(h, o, pa, useA, X, pb, Y, type, CUSPARSE_SPMV_ALG_DEFAULT, &size));
  void* buffer = nullptr;
  if (size) CHECK(cudaMalloc(&buffer, size));
  CHECK(cusparseSpMV(h, o, pa, useA, X, pb, Y, type, CUSPARSE_SPMV_ALG_DEFAULT, buffer));
  CHECK(cusparseSetPointerMode(h, CUSPARSE_POINTER_MODE_HOST));
  auto got = download(dy, m);
  report(what, relative(got, reference(e, op, m, 1, x, false, k, y, alpha, beta, false)), tol);
  CHECK(cusparseDestroySpMat(useA));
  CHECK(cusparseDestroyDnVec(X));
  CHECK(cusparseDestroyDnVec(Y));
  for (void* ptr : {static_cast<void*>(off), static_cast<void*>(ind), static_cast<void*>(val), static_cast<void*>(dx),
                    static_cast<void*>(dy), static_cast<void*>(dscal), buffer})
    if (ptr) CHECK(cudaFree(ptr));
  return 0;
}

// One SpMM (opA N): C (m x n) = alpha A op(B) + beta C.
template <typename T, typename I>
static int spmm(cusparseHandle_t h, const char* what, int format, int rows, int cols, int n, bool b_t, bool row_major,
                cudaDataType type, cusparseIndexType_t itype, double tol) {
  auto e = randomSparse(rows, cols, 0.08, 31 + format, false);
  Arrays a = arrays(e, rows, cols, format, 0);
  const int m = rows, k = cols;
  auto bv = randomDense(static_cast<size_t>(k) * n, 9, false), cv = randomDense(static_cast<size_t>(m) * n, 10, false);
  const cd alpha(1.5, 0), beta(-0.25, 0);
  I* off = uploadIndex<I>(a.offsets);
  I* ind = uploadIndex<I>(a.indices);
  T* val = upload<T>(a.values);
  T* db = upload<T>(bv);
  T* dc = upload<T>(cv);
  const long long nnz = static_cast<long long>(a.values.size());
  cusparseSpMatDescr_t A;
  if (format == 0) CHECK(cusparseCreateCsr(&A, rows, cols, nnz, off, ind, val, itype, itype, CUSPARSE_INDEX_BASE_ZERO, type));
  else CHECK(cusparseCreateCoo(&A, rows, cols, nnz, off, ind, val, itype, CUSPARSE_INDEX_BASE_ZERO, type));
  const auto order = row_major ? CUSPARSE_ORDER_ROW : CUSPARSE_ORDER_COL;
  // B as stored: k x n, or n x k when op(B) is its transpose.
  const int brows = b_t ? n : k, bcols = b_t ? k : n;
  cusparseDnMatDescr_t B, C;
  CHECK(cusparseCreateDnMat(&B, brows, bcols, row_major ? bcols : brows, db, type, order));
  CHECK(cusparseCreateDnMat(&C, m, n, row_major ? n : m, dc, type, order));
  T ha = fromC<T>(alpha), hb = fromC<T>(beta);
  const auto ob = b_t ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE;
  size_t size = 0;
  CHECK(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, ob, &ha, A, B, &hb, C, type,
                                CUSPARSE_SPMM_ALG_DEFAULT, &size));
  void* buffer = nullptr;
  if (size) CHECK(cudaMalloc(&buffer, size));
  CHECK(cusparseSpMM_preprocess(h, CUSPARSE_OPERATION_NON_TRANSPOSE, ob, &ha, A, B, &hb, C, type,
                                CUSPARSE_SPMM_ALG_DEFAULT, buffer));
  CHECK(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, ob, &ha, A, B, &hb, C, type, CUSPARSE_SPMM_ALG_DEFAULT,
                     buffer));
  auto got = download(dc, static_cast<size_t>(m) * n);
  report(what, relative(got, reference(e, 0, m, n, bv, b_t, k, cv, alpha, beta, row_major)), tol);
  CHECK(cusparseDestroySpMat(A));
  CHECK(cusparseDestroyDnMat(B));
  CHECK(cusparseDestroyDnMat(C));
  for (void* ptr : {static_cast<void*>(off), static_cast<void*>(ind), static_cast<void*>(val), static_cast<void*>(db),
                    static_cast<void*>(dc), buffer})
    if (ptr) CHECK(cudaFree(ptr));
  return 0;
}

// One SpMM of a Blocked-ELL A (rows x cols in blocks of `block`, `slots` blocks per block-row, the
// last one of every other block-row none: -1), C (m x n) = alpha A B + beta C.
template <typename T, typename I>
static int spmmBlockedEll(cusparseHandle_t h, const char* what, int rows, int cols, int block, int slots, int n,
                          int base, bool row_major, cudaDataType type, cusparseIndexType_t itype, double tol) {
  std::mt19937 gen(77);
  std::uniform_real_distribution<double> u(-1, 1);
  const int block_rows = rows / block, block_cols = cols / block, ell_cols = slots * block;
  std::vector<long long> colind;
  std::vector<cd> values(static_cast<size_t>(rows) * ell_cols, 0);
  std::vector<Entry> e;
  for (int br = 0; br < block_rows; ++br)
    for (int s = 0; s < slots; ++s) {
      const bool none = s == slots - 1 && br % 2;
      const int bc = (br + 2 * s) % block_cols;  // distinct for slots <= block_cols / 2
      colind.push_back(none ? -1 : bc + base);
      if (none) continue;
      for (int i = 0; i < block; ++i)
        for (int j = 0; j < block; ++j) {
          const cd v(u(gen), 0);
          values[static_cast<size_t>(br * block + i) * ell_cols + s * block + j] = v;
          e.push_back({br * block + i, bc * block + j, v});
        }
    }
  const int m = rows, k = cols;
  auto bv = randomDense(static_cast<size_t>(k) * n, 19, false), cv = randomDense(static_cast<size_t>(m) * n, 20, false);
  const cd alpha(0.5, 0), beta(2, 0);
  I* ind = uploadIndex<I>(colind);
  T* val = upload<T>(values);
  T* db = upload<T>(bv);
  T* dc = upload<T>(cv);
  cusparseSpMatDescr_t A;
  CHECK(cusparseCreateBlockedEll(&A, rows, cols, block, ell_cols, ind, val, itype,
                                 base ? CUSPARSE_INDEX_BASE_ONE : CUSPARSE_INDEX_BASE_ZERO, type));
  {  // The getters give back what it was made with.
    int64_t r, c, b, ec;
    void *gi, *gv;
    cusparseIndexType_t it;
    cusparseIndexBase_t ib;
    cudaDataType vt;
    cusparseFormat_t format;
    CHECK(cusparseBlockedEllGet(A, &r, &c, &b, &ec, &gi, &gv, &it, &ib, &vt));
    CHECK(cusparseSpMatGetFormat(A, &format));
    const bool same = r == rows && c == cols && b == block && ec == ell_cols && gi == ind && gv == val &&
                      it == itype && vt == type && format == CUSPARSE_FORMAT_BLOCKED_ELL;
    std::printf("%s: getters %s\n", what, same ? "give what it was made with" : "differ");
    if (!same) ++g_failures;
  }
  const auto order = row_major ? CUSPARSE_ORDER_ROW : CUSPARSE_ORDER_COL;
  cusparseDnMatDescr_t B, C;
  CHECK(cusparseCreateDnMat(&B, k, n, row_major ? n : k, db, type, order));
  CHECK(cusparseCreateDnMat(&C, m, n, row_major ? n : m, dc, type, order));
  T ha = fromC<T>(alpha), hb = fromC<T>(beta);
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  size_t size = 0;
  CHECK(cusparseSpMM_bufferSize(h, N, N, &ha, A, B, &hb, C, type, CUSPARSE_SPMM_BLOCKED_ELL_ALG1, &size));
  void* buffer = nullptr;
  if (size) CHECK(cudaMalloc(&buffer, size));
  CHECK(cusparseSpMM(h, N, N, &ha, A, B, &hb, C, type, CUSPARSE_SPMM_BLOCKED_ELL_ALG1, buffer));
  auto got = download(dc, static_cast<size_t>(m) * n);
  report(what, relative(got, reference(e, 0, m, n, bv, false, k, cv, alpha, beta, row_major)), tol);
  // SpMV and a transposed A are not Blocked-ELL's (cuSPARSE's SpMM takes one with op(A) = N).
  cusparseDnVecDescr_t x, y;
  CHECK(cusparseCreateDnVec(&x, k, db, type));
  CHECK(cusparseCreateDnVec(&y, m, dc, type));
  std::printf("%s: SpMV %s, SpMM of op(A) = T %s\n", what,
              cusparseGetErrorName(cusparseSpMV(h, N, &ha, A, x, &hb, y, type, CUSPARSE_SPMV_ALG_DEFAULT, buffer)),
              cusparseGetErrorName(cusparseSpMM(h, CUSPARSE_OPERATION_TRANSPOSE, N, &ha, A, B, &hb, C, type,
                                                CUSPARSE_SPMM_ALG_DEFAULT, buffer)));
  CHECK(cusparseDestroyDnVec(x));
  CHECK(cusparseDestroyDnVec(y));
  CHECK(cusparseDestroySpMat(A));
  CHECK(cusparseDestroyDnMat(B));
  CHECK(cusparseDestroyDnMat(C));
  for (void* ptr : {static_cast<void*>(ind), static_cast<void*>(val), static_cast<void*>(db), static_cast<void*>(dc),
                    buffer})
    if (ptr) CHECK(cudaFree(ptr));
  return 0;
}

#include "cusparse_check_spgemm.h"

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (whole lines between the libraries' log lines on stderr)
  const std::string flag = argc > 1 ? argv[1] : "";
  const bool overrun = flag != "--no-overrun", bad_index = overrun && flag != "--no-bad-index";
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cusparseHandle_t h;
  CHECK(cusparseCreate(&h));
  CHECK(cusparseSetStream(h, stream));
  const auto i32 = CUSPARSE_INDEX_32I, i64 = CUSPARSE_INDEX_64I;
  if (spmv<float, int>(h, "SpMV CSR f32 1000x800, N", 0, 0, 0, 1000, 800, false, false, false, CUDA_R_32F, i32, 1e-5) ||
      spmv<double, long long>(h, "SpMV CSR f64, 64-bit indices from 1, T, device scalars", 0, 1, 1, 700, 900, false,
                              true, false, CUDA_R_64F, i64, 1e-12) ||
      spmv<cuComplex, int>(h, "SpMV COO c32, C (conjugate transpose)", 2, 0, 2, 300, 500, true, false, false,
                           CUDA_C_32F, i32, 1e-5) ||
      spmv<double, int>(h, "SpMV CSC f64 600x400, N", 1, 0, 0, 600, 400, false, false, false, CUDA_R_64F, i32, 1e-12) ||
      spmv<float, int>(h, "SpMV const CSR descriptors f32", 0, 0, 0, 256, 256, false, false, true, CUDA_R_32F, i32,
                       1e-5) ||
      spmm<float, int>(h, "SpMM CSR f32 200x150 times 150x16, column-major", 0, 200, 150, 16, false, false,
                       CUDA_R_32F, i32, 1e-5) ||
      spmm<double, long long>(h, "SpMM COO f64, op(B) = T, row-major", 2, 120, 90, 7, true, true, CUDA_R_64F, i64,
                              1e-12) ||
      spmmBlockedEll<float, int>(h, "SpMM Blocked-ELL f32 64x48, blocks of 8, column-major", 64, 48, 8, 3, 10, 0,
                                 false, CUDA_R_32F, i32, 1e-5) ||
      spmmBlockedEll<double, long long>(h, "SpMM Blocked-ELL f64, 64-bit indices from 1, row-major", 96, 96, 16, 2,
                                        5, 1, true, CUDA_R_64F, i64, 1e-12) ||
      spgemm<float, int>(h, "SpGEMM CSR f32 300x200 times 200x250", 300, 200, 250, 0.03, 0, false, false, CUDA_R_32F,
                         i32, 1e-5) ||
      spgemm<double, long long>(h, "SpGEMM CSR f64, 64-bit indices from 1, device scalars", 150, 180, 120, 0.05, 1,
                                false, true, CUDA_R_64F, i64, 1e-12) ||
      spgemm<double2, int>(h, "SpGEMM CSR c64 100x120 times 120x90", 100, 120, 90, 0.06, 0, true, false, CUDA_C_64F,
                           i32, 1e-12) ||
      spgemmReuse<cuComplex, int>(h, "SpGEMM reuse CSR c32", 200, 150, 180, 0.04, true, CUDA_C_32F, i32, 1e-5) ||
      spgemmReuse<float, long long>(h, "SpGEMM reuse CSR f32, 64-bit indices", 120, 160, 140, 0.05, false, CUDA_R_32F,
                                    i64, 1e-5) ||
      spgemmRefusals(h, bad_index))
    return 2;

  {  // What cuSPARSE refuses, and a name rgpu does not forward.
    float* d;
    CHECK(cudaMalloc(&d, 64 * sizeof(float)));
    int* idx;
    CHECK(cudaMalloc(&idx, 64 * sizeof(int)));
    CHECK(cudaMemset(idx, 0, 64 * sizeof(int)));
    cusparseSpMatDescr_t A;
    cusparseDnVecDescr_t X, Y, H;
    CHECK(cusparseCreateCsr(&A, 4, 4, 0, idx, idx, d, i32, i32, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    CHECK(cusparseCreateDnVec(&X, 3, d, CUDA_R_32F));
    CHECK(cusparseCreateDnVec(&Y, 4, d + 8, CUDA_R_32F));
    CHECK(cusparseCreateDnVec(&H, 4, d, CUDA_R_16F));
    float one = 1, zero = 0;
    size_t size = 0;
    std::printf("x of the wrong length: %s\n",
                cusparseGetErrorName(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, X, &zero,
                                                             Y, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &size)));
    std::printf("half-precision x: %s\n",
                cusparseGetErrorName(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, H, &zero, Y,
                                                  CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, nullptr)));
    cusparseSpSVDescr_t sv;
    std::printf("SpSV: %s\n", cusparseGetErrorName(cusparseSpSV_createDescr(&sv)));
    {  // The getters give back what the descriptors were made with.
      int64_t rows, cols, nnz, size;
      void *o, *i, *v, *xv;
      cusparseIndexType_t ot, it;
      cusparseIndexBase_t base;
      cudaDataType vt, xt;
      CHECK(cusparseCsrGet(A, &rows, &cols, &nnz, &o, &i, &v, &ot, &it, &base, &vt));
      CHECK(cusparseDnVecGet(Y, &size, &xv, &xt));
      cusparseFillMode_t fill = CUSPARSE_FILL_MODE_UPPER, got = CUSPARSE_FILL_MODE_LOWER;
      CHECK(cusparseSpMatSetAttribute(A, CUSPARSE_SPMAT_FILL_MODE, &fill, sizeof fill));
      CHECK(cusparseSpMatGetAttribute(A, CUSPARSE_SPMAT_FILL_MODE, &got, sizeof got));
      const bool same = rows == 4 && cols == 4 && nnz == 0 && o == idx && i == idx && v == d && ot == i32 &&
                        it == i32 && base == CUSPARSE_INDEX_BASE_ZERO && vt == CUDA_R_32F && size == 4 &&
                        xv == d + 8 && xt == CUDA_R_32F && got == CUSPARSE_FILL_MODE_UPPER;
      std::printf("getters: %s\n", same ? "what the descriptors were made with" : "differ");
      if (!same) ++g_failures;
      std::printf("CooGet on a CSR matrix: %s\n",
                  cusparseGetErrorName(cusparseCooGet(A, &rows, &cols, &nnz, &o, &i, &v, &it, &base, &vt)));
    }
    int version = 0;
    CHECK(cusparseGetVersion(h, &version));
    std::printf("version: %d\n", version);
    CHECK(cusparseDestroySpMat(A));
    CHECK(cusparseDestroyDnVec(X));
    CHECK(cusparseDestroyDnVec(Y));
    CHECK(cusparseDestroyDnVec(H));
    if (overrun) {
      // Values past the end of their buffer: refused by the server, reported at the next synchronising call.
      std::vector<int> offsets = {0, 1, 2}, columns = {0, 9};
      CHECK(cudaMemcpy(idx, offsets.data(), 3 * sizeof(int), cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(idx + 8, columns.data(), 2 * sizeof(int), cudaMemcpyHostToDevice));
      CHECK(cusparseCreateDnVec(&X, 2, d + 16, CUDA_R_32F));
      CHECK(cusparseCreateDnVec(&Y, 2, d + 24, CUDA_R_32F));
      CHECK(cusparseCreateCsr(&A, 2, 2, 100, idx, idx + 8, d, i32, i32, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
      cusparseStatus_t queued = cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, X, &zero, Y, CUDA_R_32F,
                                             CUSPARSE_SPMV_ALG_DEFAULT, d + 32);
      cudaError_t sync = cudaDeviceSynchronize();
      std::printf("past the end of an allocation: %s, then %s\n", cusparseGetErrorName(queued), cudaGetErrorName(sync));
      CHECK(cusparseDestroySpMat(A));
      if (bad_index) {
        // A column index outside the matrix: never read past it; reported at the next synchronising call.
        CHECK(cusparseCreateCsr(&A, 2, 2, 2, idx, idx + 8, d, i32, i32, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
        queued = cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, X, &zero, Y, CUDA_R_32F,
                              CUSPARSE_SPMV_ALG_DEFAULT, d + 32);
        sync = cudaDeviceSynchronize();
        std::printf("a column index outside the matrix: %s, then %s\n", cusparseGetErrorName(queued),
                    cudaGetErrorName(sync));
        CHECK(cusparseDestroySpMat(A));
      }
      CHECK(cusparseDestroyDnVec(X));
      CHECK(cusparseDestroyDnVec(Y));
    }
    CHECK(cudaFree(d));
    CHECK(cudaFree(idx));
  }

  CHECK(cusparseDestroy(h));
  CHECK(cudaStreamDestroy(stream));
  std::printf("cusparse_check: done, %d failed\n", g_failures);
  return g_failures ? 1 : 0;
}
