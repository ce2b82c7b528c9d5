// cuSPARSE's SpGEMM on the CPU (sim_sparse.h; the four steps of
// common/sparse_args.h): Gustavson's row-by-row product of two CSR matrices.
// Row i of A B gathers, for each entry (i, k) of A, row k of B; its products
// are sorted by column (stably, so each sum adds in A's then B's order) and
// summed per column. The offsets and indices are device memory only the call
// sees, so they are checked as they are read: offsets start at the base,
// never decrease and end at most at nnz; indices lie inside their matrix. A
// product is written in two passes, the first counting it (its layout in the
// buffer depends on nnz), so nothing is written past the buffer the client
// sized from an earlier count: a product that grew since is an error.
#include <algorithm>
#include <complex>
#include <cstring>
#include <vector>

#include "server/sim/sim_sparse.h"

namespace rgpu::server::simsparse {

namespace sp = common::sparse;

namespace {

void writeIndex(uint64_t ptr, int32_t type, int64_t i, int64_t v) {
  if (type == sp::kIndex64) std::memcpy(reinterpret_cast<uint8_t*>(ptr) + 8 * i, &v, 8);
  else {
    const int32_t w = static_cast<int32_t>(v);
    std::memcpy(reinterpret_cast<uint8_t*>(ptr) + 4 * i, &w, 4);
  }
}

// A CSR matrix whose offsets were checked whole and whose indices are checked as read.
class Csr {
 public:
  Csr(const sp::SpMat& m, const char* name) : m_(m), name_(name) {}
  Status checkOffsets() const {
    int64_t prev = 0;
    for (int64_t o = 0; o <= m_.rows; ++o) {
      const int64_t at = indexAt(m_.offsets, m_.offset_type, o) - m_.base;
      if ((o == 0 && at != 0) || at < prev || at > m_.nnz)
        return Status(err::kInvalidValue, std::string(name_) + "'s row offset " + std::to_string(o) + " is " +
                                              std::to_string(at + m_.base) + " (offsets start at the base, never " +
                                              "decrease and end at most at nnz " + std::to_string(m_.nnz) + ")");
      prev = at;
    }
    return Status::ok();
  }
  int64_t begin(int64_t row) const { return indexAt(m_.offsets, m_.offset_type, row) - m_.base; }
  int64_t end(int64_t row) const { return indexAt(m_.offsets, m_.offset_type, row + 1) - m_.base; }
  Status column(int64_t p, int64_t& col) const {
    col = indexAt(m_.indices, m_.index_type, p) - m_.base;
    if (col >= 0 && col < m_.cols) return Status::ok();
    return Status(err::kInvalidValue, std::string(name_) + "'s column index " + std::to_string(col + m_.base) +
                                          " of entry " + std::to_string(p) + " lies outside its " +
                                          std::to_string(m_.cols) + " columns");
  }
  const sp::SpMat& m() const { return m_; }

 private:
  const sp::SpMat& m_;
  const char* name_;
};

template <typename T>
T scalarOf(const sp::Scalar& s) {
  T v;
  std::memcpy(&v, s.device ? reinterpret_cast<const void*>(s.ptr) : s.bytes, sizeof v);
  return v;
}

template <typename T>
struct Term {
  int64_t col;
  T value;
};

// One row of A B, summed per column in column order (values only when asked).
template <typename T>
class RowProduct {
 public:
  RowProduct(const Csr& a, const Csr& b, bool values) : a_(a), b_(b), values_(values) {}

  Status compute(int64_t row) {
    terms_.clear();
    products_ = 0;
    const int64_t pb = a_.begin(row), pe = a_.end(row);
    for (int64_t p = pb; p < pe; ++p) {  // counted first: a row past the limit allocates nothing
      int64_t k;
      RGPU_TRY(a_.column(p, k));
      products_ += b_.end(k) - b_.begin(k);
      if (products_ > sp::kMaxRowProducts)
        return Status(err::kInvalidValue, "row " + std::to_string(row) + " of A B takes more than " +
                                              std::to_string(sp::kMaxRowProducts) +
                                              " products (kMaxRowProducts, the most the sim sums in one row)");
    }
    terms_.reserve(static_cast<size_t>(products_));
    const T* av = reinterpret_cast<const T*>(a_.m().values);
    const T* bv = reinterpret_cast<const T*>(b_.m().values);
    for (int64_t p = pb; p < pe; ++p) {
      int64_t k;
      RGPU_TRY(a_.column(p, k));
      for (int64_t q = b_.begin(k), qe = b_.end(k); q < qe; ++q) {
        int64_t j;
        RGPU_TRY(b_.column(q, j));
        terms_.push_back({j, values_ ? av[p] * bv[q] : T(0)});
      }
    }
    std::stable_sort(terms_.begin(), terms_.end(), [](const Term<T>& x, const Term<T>& y) { return x.col < y.col; });
    size_t out = 0;
    for (size_t t = 0; t < terms_.size(); ++t) {
      if (out > 0 && terms_[out - 1].col == terms_[t].col) terms_[out - 1].value += terms_[t].value;
      else terms_[out++] = terms_[t];
    }
    terms_.resize(out);
    return Status::ok();
  }
  const std::vector<Term<T>>& terms() const { return terms_; }
  int64_t products() const { return products_; }

 private:
  const Csr& a_;
  const Csr& b_;
  bool values_;
  std::vector<Term<T>> terms_;
  int64_t products_ = 0;
};

void putHeader(uint64_t buffer, int64_t nnz, int64_t products, int64_t rows) {
  sp::ProductHeader h;
  h.nnz = nnz, h.products = products, h.rows = rows;
  std::memcpy(reinterpret_cast<void*>(buffer), &h, sizeof h);
}

// kSpGemmCount, kSpGemmCompute, kSpGemmStructure: A B into the buffer.
template <typename T>
Status product(const sp::Args& a, const Csr& A, const Csr& B) {
  const bool with_values = a.op == sp::Op::kSpGemmCompute;
  RowProduct<T> row(A, B, false);
  int64_t nnz = 0, products = 0;
  for (int64_t i = 0; i < A.m().rows; ++i) {
    RGPU_TRY(row.compute(i));
    nnz += static_cast<int64_t>(row.terms().size());
    products += row.products();
  }
  if (a.op == sp::Op::kSpGemmCount) {
    putHeader(a.buffer, nnz, products, A.m().rows);
    return Status::ok();
  }
  const sp::SpMat& c = a.sc;
  const sp::ProductLayout l = sp::productLayout(c, nnz, with_values);
  if (l.bytes > a.buffer_size)
    return Status(err::kInvalidValue, "the product has " + std::to_string(nnz) + " entries and takes " +
                                          std::to_string(l.bytes) + " bytes, the buffer " +
                                          std::to_string(a.buffer_size) + " (A or B changed since the buffer's size " +
                                          "was asked?)");
  const T alpha = with_values ? scalarOf<T>(a.alpha) : T(0);
  RowProduct<T> full(A, B, with_values);
  int64_t at = 0;
  writeIndex(a.buffer + l.offsets, c.offset_type, 0, c.base);
  for (int64_t i = 0; i < A.m().rows; ++i) {
    RGPU_TRY(full.compute(i));
    for (const Term<T>& t : full.terms()) {
      writeIndex(a.buffer + l.indices, c.index_type, at, t.col + c.base);
      if (with_values) {
        const T v = alpha * t.value;
        std::memcpy(reinterpret_cast<uint8_t*>(a.buffer + l.values) + at * sizeof(T), &v, sizeof v);
      }
      ++at;
    }
    writeIndex(a.buffer + l.offsets, c.offset_type, i + 1, at + c.base);
  }
  putHeader(a.buffer, nnz, products, A.m().rows);
  return Status::ok();
}

// kSpGemmValues: C = alpha A B + beta C on C's pattern.
template <typename T>
Status values(const sp::Args& a, const Csr& A, const Csr& B) {
  Csr C(a.sc, "C");
  RGPU_TRY(C.checkOffsets());
  const T alpha = scalarOf<T>(a.alpha), beta = scalarOf<T>(a.beta);
  T* cv = reinterpret_cast<T*>(a.sc.values);
  RowProduct<T> row(A, B, true);
  for (int64_t i = 0; i < A.m().rows; ++i) {
    RGPU_TRY(row.compute(i));
    const auto& terms = row.terms();
    for (int64_t p = C.begin(i), pe = C.end(i); p < pe; ++p) {
      int64_t j;
      RGPU_TRY(C.column(p, j));
      auto it = std::lower_bound(terms.begin(), terms.end(), j, [](const Term<T>& t, int64_t c) { return t.col < c; });
      const T ab = it != terms.end() && it->col == j ? it->value : T(0);
      cv[p] = alpha * ab + (beta == T(0) ? T(0) : beta * cv[p]);
    }
  }
  return Status::ok();
}

template <typename T>
Status runTyped(const sp::Args& a) {
  Csr A(a.a, "A"), B(a.sb, "B");
  RGPU_TRY(A.checkOffsets());
  RGPU_TRY(B.checkOffsets());
  return a.op == sp::Op::kSpGemmValues ? values<T>(a, A, B) : product<T>(a, A, B);
}

}  // namespace

Status runSpGemm(const sp::Args& a) {
  return withValueType(a.compute_type, [&](auto t) { return runTyped<decltype(t)>(a); });
}

}  // namespace rgpu::server::simsparse
