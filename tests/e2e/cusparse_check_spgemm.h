// cusparse_check's SpGEMM cases (included by cusparse_check.cu after its
// helpers): C = alpha A B of two random CSR matrices through NVIDIA's steps
// (workEstimation, getNumProducts, compute, copy) and through the
// structure-reuse form (reuse_workEstimation, reuse_nnz, reuse_copy,
// reuse_compute twice, the second time with new values of A and beta != 0),
// each compared with the product computed here: the number of products,
// nnz(C), each row's columns (sorted, exactly the product's pattern) and the
// values relative to their largest magnitude.
#pragma once

static cd toC(double2 x) { return {x.x, x.y}; }
template <> double2 fromC<double2>(cd z) { return {z.real(), z.imag()}; }

// The product's pattern and values (alpha A B + beta c0 on it), and its products.
struct Product {
  std::vector<cd> dense;  // m x n, row-major
  std::vector<char> set;
  long long products = 0, nnz = 0;
};
static Product product(const std::vector<Entry>& ea, const std::vector<Entry>& eb, int m, int k, int n, cd alpha) {
  std::vector<std::vector<const Entry*>> rows_b(static_cast<size_t>(k));
  for (const Entry& e : eb) rows_b[e.r].push_back(&e);
  Product p;
  p.dense.assign(static_cast<size_t>(m) * n, 0);
  p.set.assign(static_cast<size_t>(m) * n, 0);
  for (const Entry& a : ea)
    for (const Entry* b : rows_b[a.c]) {
      p.dense[static_cast<size_t>(a.r) * n + b->c] += alpha * a.v * b->v;
      p.set[static_cast<size_t>(a.r) * n + b->c] = 1;
      ++p.products;
    }
  for (char s : p.set) p.nnz += s;
  return p;
}

// C's arrays read back, checked against the product's pattern; its values scattered to m x n.
template <typename T, typename I>
static bool readC(const I* off, const I* col, const T* val, int m, int n, long long nnz, int base, const Product& want,
                  std::vector<cd>& dense) {
  std::vector<I> o(static_cast<size_t>(m) + 1), c(static_cast<size_t>(nnz));
  cudaMemcpy(o.data(), off, o.size() * sizeof(I), cudaMemcpyDeviceToHost);
  cudaMemcpy(c.data(), col, c.size() * sizeof(I), cudaMemcpyDeviceToHost);
  std::vector<cd> v = download(val, static_cast<size_t>(nnz));
  dense.assign(static_cast<size_t>(m) * n, 0);
  if (o[0] != base || o[m] != nnz + base) return false;
  for (int r = 0; r < m; ++r) {
    long long count = 0;
    for (int j = 0; j < n; ++j) count += want.set[static_cast<size_t>(r) * n + j];
    if (o[r + 1] - o[r] != count) return false;
    for (long long p = o[r] - base; p < o[r + 1] - base; ++p) {
      const long long j = c[p] - base;
      if (j < 0 || j >= n || !want.set[static_cast<size_t>(r) * n + j]) return false;
      if (p > o[r] - base && c[p] <= c[p - 1]) return false;  // sorted, no repeats
      dense[static_cast<size_t>(r) * n + j] = v[p];
    }
  }
  return true;
}

template <typename T>
static const void* scalarArg(bool device, const T* dev, const T& host) {
  return device ? static_cast<const void*>(dev) : static_cast<const void*>(&host);
}

// C = alpha A B (A m x k, B k x n) through NVIDIA's four steps.
template <typename T, typename I>
static int spgemm(cusparseHandle_t h, const char* what, int m, int k, int n, double density, int base, bool cplx,
                  bool device_scalars, cudaDataType type, cusparseIndexType_t itype, double tol) {
  auto ea = randomSparse(m, k, density, 41, cplx), eb = randomSparse(k, n, density, 43, cplx);
  Arrays a = arrays(ea, m, k, 0, base), b = arrays(eb, k, n, 0, base);
  const cd alpha(1.25, cplx ? -0.5 : 0);
  I *aoff = uploadIndex<I>(a.offsets), *aind = uploadIndex<I>(a.indices);
  I *boff = uploadIndex<I>(b.offsets), *bind = uploadIndex<I>(b.indices);
  T *aval = upload<T>(a.values), *bval = upload<T>(b.values);
  T* dscal = upload<T>({alpha, cd(0)});
  const auto ib = base ? CUSPARSE_INDEX_BASE_ONE : CUSPARSE_INDEX_BASE_ZERO;
  cusparseSpMatDescr_t A, B, C;
  CHECK(cusparseCreateCsr(&A, m, k, static_cast<int64_t>(a.values.size()), aoff, aind, aval, itype, itype, ib, type));
  CHECK(cusparseCreateCsr(&B, k, n, static_cast<int64_t>(b.values.size()), boff, bind, bval, itype, itype, ib, type));
  CHECK(cusparseCreateCsr(&C, m, n, 0, nullptr, nullptr, nullptr, itype, itype, ib, type));
  const T ha = fromC<T>(alpha), hb = fromC<T>(0);
  if (device_scalars) CHECK(cusparseSetPointerMode(h, CUSPARSE_POINTER_MODE_DEVICE));
  const void* pa = scalarArg(device_scalars, dscal, ha);
  const void* pb = scalarArg(device_scalars, dscal + 1, hb);
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const auto alg = CUSPARSE_SPGEMM_DEFAULT;
  cusparseSpGEMMDescr_t g;
  CHECK(cusparseSpGEMM_createDescr(&g));
  size_t size1 = 0, size2 = 0;
  void *b1 = nullptr, *b2 = nullptr;
  CHECK(cusparseSpGEMM_workEstimation(h, N, N, pa, A, B, pb, C, type, alg, g, &size1, nullptr));
  CHECK(cudaMalloc(&b1, size1));
  CHECK(cusparseSpGEMM_workEstimation(h, N, N, pa, A, B, pb, C, type, alg, g, &size1, b1));
  int64_t products = 0;
  CHECK(cusparseSpGEMM_getNumProducts(g, &products));
  CHECK(cusparseSpGEMM_compute(h, N, N, pa, A, B, pb, C, type, alg, g, &size2, nullptr));
  CHECK(cudaMalloc(&b2, size2));
  CHECK(cusparseSpGEMM_compute(h, N, N, pa, A, B, pb, C, type, alg, g, &size2, b2));
  int64_t rows = 0, cols = 0, nnz = 0;
  CHECK(cusparseSpMatGetSize(C, &rows, &cols, &nnz));
  I *coff, *cind;
  T* cval;
  CHECK(cudaMalloc(&coff, (static_cast<size_t>(m) + 1) * sizeof(I)));
  CHECK(cudaMalloc(&cind, std::max<int64_t>(1, nnz) * sizeof(I)));
  CHECK(cudaMalloc(&cval, std::max<int64_t>(1, nnz) * sizeof(T)));
  CHECK(cusparseCsrSetPointers(C, coff, cind, cval));
  CHECK(cusparseSpGEMM_copy(h, N, N, pa, A, B, pb, C, type, alg, g));
  CHECK(cusparseSetPointerMode(h, CUSPARSE_POINTER_MODE_HOST));
  const Product want = product(ea, eb, m, k, n, alpha);
  std::vector<cd> got;
  const bool pattern = rows == m && cols == n && nnz == want.nnz && products == want.products &&
                       readC(coff, cind, cval, m, n, nnz, base, want, got);
  std::printf("%s: %lld products, nnz(C) %lld, pattern %s\n", what, static_cast<long long>(products),
              static_cast<long long>(nnz), pattern ? "the product's" : "WRONG");
  if (!pattern) ++g_failures;
  report(what, relative(got, want.dense), tol);
  CHECK(cusparseSpGEMM_destroyDescr(g));
  for (cusparseSpMatDescr_t d : {A, B, C}) CHECK(cusparseDestroySpMat(d));
  for (void* ptr : {static_cast<void*>(aoff), static_cast<void*>(aind), static_cast<void*>(aval),
                    static_cast<void*>(boff), static_cast<void*>(bind), static_cast<void*>(bval),
                    static_cast<void*>(dscal), static_cast<void*>(coff), static_cast<void*>(cind),
                    static_cast<void*>(cval), b1, b2})
    CHECK(cudaFree(ptr));
  return 0;
}

// The structure once, then the values twice: C = alpha A B, then C = alpha2 A' B + beta C with new values of A.
template <typename T, typename I>
static int spgemmReuse(cusparseHandle_t h, const char* what, int m, int k, int n, double density, bool cplx,
                       cudaDataType type, cusparseIndexType_t itype, double tol) {
  auto ea = randomSparse(m, k, density, 47, cplx), eb = randomSparse(k, n, density, 53, cplx);
  Arrays a = arrays(ea, m, k, 0, 0), b = arrays(eb, k, n, 0, 0);
  I *aoff = uploadIndex<I>(a.offsets), *aind = uploadIndex<I>(a.indices);
  I *boff = uploadIndex<I>(b.offsets), *bind = uploadIndex<I>(b.indices);
  T *aval = upload<T>(a.values), *bval = upload<T>(b.values);
  I* coff;
  CHECK(cudaMalloc(&coff, (static_cast<size_t>(m) + 1) * sizeof(I)));
  const auto i0 = CUSPARSE_INDEX_BASE_ZERO;
  cusparseSpMatDescr_t A, B, C;
  CHECK(cusparseCreateCsr(&A, m, k, static_cast<int64_t>(a.values.size()), aoff, aind, aval, itype, itype, i0, type));
  CHECK(cusparseCreateCsr(&B, k, n, static_cast<int64_t>(b.values.size()), boff, bind, bval, itype, itype, i0, type));
  CHECK(cusparseCreateCsr(&C, m, n, 0, coff, nullptr, nullptr, itype, itype, i0, type));
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  const auto alg = CUSPARSE_SPGEMM_DEFAULT;
  cusparseSpGEMMDescr_t g;
  CHECK(cusparseSpGEMM_createDescr(&g));
  size_t s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0;
  void *b1, *b2, *b3, *b4, *b5;
  CHECK(cusparseSpGEMMreuse_workEstimation(h, N, N, A, B, C, alg, g, &s1, nullptr));
  CHECK(cudaMalloc(&b1, s1));
  CHECK(cusparseSpGEMMreuse_workEstimation(h, N, N, A, B, C, alg, g, &s1, b1));
  CHECK(cusparseSpGEMMreuse_nnz(h, N, N, A, B, C, alg, g, &s2, nullptr, &s3, nullptr, &s4, nullptr));
  CHECK(cudaMalloc(&b2, s2));
  CHECK(cudaMalloc(&b3, s3));
  CHECK(cudaMalloc(&b4, s4));
  CHECK(cusparseSpGEMMreuse_nnz(h, N, N, A, B, C, alg, g, &s2, b2, &s3, b3, &s4, b4));
  CHECK(cudaFree(b1));
  CHECK(cudaFree(b2));
  int64_t rows, cols, nnz;
  CHECK(cusparseSpMatGetSize(C, &rows, &cols, &nnz));
  I* cind;
  T* cval;
  CHECK(cudaMalloc(&cind, std::max<int64_t>(1, nnz) * sizeof(I)));
  CHECK(cudaMalloc(&cval, std::max<int64_t>(1, nnz) * sizeof(T)));
  CHECK(cusparseCsrSetPointers(C, coff, cind, cval));
  CHECK(cusparseSpGEMMreuse_copy(h, N, N, A, B, C, alg, g, &s5, nullptr));
  CHECK(cudaMalloc(&b5, s5));
  CHECK(cusparseSpGEMMreuse_copy(h, N, N, A, B, C, alg, g, &s5, b5));
  CHECK(cudaFree(b3));
  const cd alpha(0.75, cplx ? 0.25 : 0), alpha2(-1.5, 0), beta(0.5, cplx ? -1.0 : 0);
  const T ha = fromC<T>(alpha), ha2 = fromC<T>(alpha2), hb0 = fromC<T>(0), hb = fromC<T>(beta);
  CHECK(cusparseSpGEMMreuse_compute(h, N, N, &ha, A, B, &hb0, C, type, alg, g));
  const Product first = product(ea, eb, m, k, n, alpha);
  std::vector<cd> got;
  bool pattern = nnz == first.nnz && readC(coff, cind, cval, m, n, nnz, 0, first, got);
  report((std::string(what) + ", values").c_str(), relative(got, first.dense), tol);
  // New values of A on the same pattern; C keeps its own (beta reads it).
  auto ea2 = ea;
  for (size_t i = 0; i < ea2.size(); ++i) ea2[i].v = cd(std::cos(0.37 * i), cplx ? std::sin(0.11 * i) : 0);
  std::vector<cd> values2;
  for (const Entry& e : ea2) values2.push_back(e.v);  // (CSR order: entries are sorted by row then column)
  T* aval2 = upload<T>(values2);
  CHECK(cudaMemcpy(aval, aval2, values2.size() * sizeof(T), cudaMemcpyDeviceToDevice));
  CHECK(cusparseSpGEMMreuse_compute(h, N, N, &ha2, A, B, &hb, C, type, alg, g));
  Product second = product(ea2, eb, m, k, n, alpha2);
  for (size_t i = 0; i < second.dense.size(); ++i) second.dense[i] += beta * first.dense[i];
  std::vector<cd> got2;
  pattern = pattern && readC(coff, cind, cval, m, n, nnz, 0, first, got2);
  std::printf("%s: nnz(C) %lld, pattern %s\n", what, static_cast<long long>(nnz), pattern ? "the product's" : "WRONG");
  if (!pattern) ++g_failures;
  report((std::string(what) + ", new values of A, beta != 0").c_str(), relative(got2, second.dense), tol);
  CHECK(cusparseSpGEMM_destroyDescr(g));
  for (cusparseSpMatDescr_t d : {A, B, C}) CHECK(cusparseDestroySpMat(d));
  for (void* ptr : {static_cast<void*>(aoff), static_cast<void*>(aind), static_cast<void*>(aval),
                    static_cast<void*>(aval2), static_cast<void*>(boff), static_cast<void*>(bind),
                    static_cast<void*>(bval), static_cast<void*>(coff), static_cast<void*>(cind),
                    static_cast<void*>(cval), b4, b5})
    CHECK(cudaFree(ptr));
  return 0;
}

// What cuSPARSE's SpGEMM refuses, and (`bad_index`) an index outside B.
static int spgemmRefusals(cusparseHandle_t h, bool bad_index) {
  int* idx;
  float* val;
  CHECK(cudaMalloc(&idx, 64 * sizeof(int)));
  CHECK(cudaMalloc(&val, 64 * sizeof(float)));
  const std::vector<int> offsets = {0, 1, 2}, columns = {1, 0, 7};
  CHECK(cudaMemcpy(idx, offsets.data(), 3 * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(idx + 8, columns.data(), 3 * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(val, 0, 64 * sizeof(float)));
  const auto i32 = CUSPARSE_INDEX_32I;
  const auto i0 = CUSPARSE_INDEX_BASE_ZERO;
  const auto N = CUSPARSE_OPERATION_NON_TRANSPOSE;
  cusparseSpMatDescr_t A, B, C, W, K;
  CHECK(cusparseCreateCsr(&A, 2, 2, 2, idx, idx + 8, val, i32, i32, i0, CUDA_R_32F));
  CHECK(cusparseCreateCsr(&B, 2, 2, 2, idx, idx + 8, val, i32, i32, i0, CUDA_R_32F));
  CHECK(cusparseCreateCsr(&C, 2, 2, 0, nullptr, nullptr, nullptr, i32, i32, i0, CUDA_R_32F));
  CHECK(cusparseCreateCsr(&W, 3, 2, 0, nullptr, nullptr, nullptr, i32, i32, i0, CUDA_R_32F));
  CHECK(cusparseCreateCoo(&K, 2, 2, 2, idx, idx + 8, val, i32, i0, CUDA_R_32F));
  cusparseSpGEMMDescr_t g;
  CHECK(cusparseSpGEMM_createDescr(&g));
  const float one = 1, zero = 0;
  size_t size = 0;
  const auto alg = CUSPARSE_SPGEMM_DEFAULT;
  std::printf("SpGEMM of op(A) = T: %s\n",
              cusparseGetErrorName(cusparseSpGEMM_workEstimation(h, CUSPARSE_OPERATION_TRANSPOSE, N, &one, A, B, &zero,
                                                                 C, CUDA_R_32F, alg, g, &size, nullptr)));
  std::printf("SpGEMM with beta 1: %s\n",
              cusparseGetErrorName(cusparseSpGEMM_workEstimation(h, N, N, &one, A, B, &one, C, CUDA_R_32F, alg, g,
                                                                 &size, nullptr)));
  std::printf("SpGEMM of a COO matrix: %s\n",
              cusparseGetErrorName(cusparseSpGEMM_workEstimation(h, N, N, &one, K, B, &zero, C, CUDA_R_32F, alg, g,
                                                                 &size, nullptr)));
  std::printf("SpGEMM into a C of the wrong shape: %s\n",
              cusparseGetErrorName(cusparseSpGEMM_workEstimation(h, N, N, &one, A, B, &zero, W, CUDA_R_32F, alg, g,
                                                                 &size, nullptr)));
  std::printf("SpGEMM compute before the work estimation: %s\n",
              cusparseGetErrorName(cusparseSpGEMM_compute(h, N, N, &one, A, B, &zero, C, CUDA_R_32F, alg, g, &size,
                                                          nullptr)));
  if (bad_index) {
    // B's column index 7 (entry 2 once B has 3 entries): checked as read, before anything is written.
    cusparseSpMatDescr_t B3;
    const std::vector<int> offsets3 = {0, 1, 3};
    CHECK(cudaMemcpy(idx + 16, offsets3.data(), 3 * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cusparseCreateCsr(&B3, 2, 2, 3, idx + 16, idx + 8, val, i32, i32, i0, CUDA_R_32F));
    void* b1;
    CHECK(cudaMalloc(&b1, 256));
    std::printf("SpGEMM with a column index outside B: %s\n",
                cusparseGetErrorName(cusparseSpGEMM_workEstimation(h, N, N, &one, A, B3, &zero, C, CUDA_R_32F, alg, g,
                                                                   &size, b1)));
    std::printf("then: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    CHECK(cusparseDestroySpMat(B3));
    CHECK(cudaFree(b1));
  }
  CHECK(cusparseSpGEMM_destroyDescr(g));
  for (cusparseSpMatDescr_t d : {A, B, C, W, K}) CHECK(cusparseDestroySpMat(d));
  CHECK(cudaFree(idx));
  CHECK(cudaFree(val));
  return 0;
}
