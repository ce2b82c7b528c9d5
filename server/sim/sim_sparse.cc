#include "server/sim/sim_sparse.h"

#include <complex>
#include <cstring>
#include <vector>

namespace rgpu::server::simsparse {

namespace sp = common::sparse;

namespace {

template <typename T>
T conjOf(T v) {
  if constexpr (std::is_floating_point_v<T>) return v;
  else return std::conj(v);
}

template <typename T>
T scalar(const sp::Scalar& s) {
  T v;
  std::memcpy(&v, s.device ? reinterpret_cast<const void*>(s.ptr) : s.bytes, sizeof v);
  return v;
}

// A stored entry: row, column, position in values.
struct Entry {
  int64_t row, col, at;
};

// A Blocked-ELL matrix's entries: every value of every block that has a
// block column (-1: none), each block checked to lie inside the matrix.
Status blockedEllEntries(const sp::SpMat& s, std::vector<Entry>& out) {
  const int64_t b = s.block, slots = s.ell_cols / b, block_cols = s.cols / b;
  for (int64_t br = 0; br < s.rows / b; ++br)
    for (int64_t slot = 0; slot < slots; ++slot) {
      const int64_t raw = indexAt(s.indices, s.index_type, br * slots + slot);
      if (raw == -1) continue;
      const int64_t bc = raw - s.base;
      if (bc < 0 || bc >= block_cols)
        return Status(err::kInvalidValue, "block column " + std::to_string(raw) + " of block " +
                                              std::to_string(br * slots + slot) + " lies outside the matrix's " +
                                              std::to_string(block_cols) + " (-1 marks no block)");
      for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < b; ++j)
          out.push_back({br * b + i, bc * b + j, (br * b + i) * s.ell_cols + slot * b + j});
    }
  return Status::ok();
}

// The matrix's entries, each checked to lie inside it.
Status entries(const sp::SpMat& s, std::vector<Entry>& out) {
  if (s.format == sp::Format::kBlockedEll) return blockedEllEntries(s, out);
  out.reserve(static_cast<size_t>(s.nnz));
  if (s.format == sp::Format::kCoo) {
    for (int64_t p = 0; p < s.nnz; ++p) {
      const int64_t r = indexAt(s.offsets, s.index_type, p) - s.base, c = indexAt(s.indices, s.index_type, p) - s.base;
      if (r < 0 || r >= s.rows || c < 0 || c >= s.cols)
        return Status(err::kInvalidValue, "entry " + std::to_string(p) + " at (" + std::to_string(r) + ", " +
                                              std::to_string(c) + ") lies outside the " + std::to_string(s.rows) +
                                              " x " + std::to_string(s.cols) + " matrix");
      out.push_back({r, c, p});
    }
    return Status::ok();
  }
  const bool csr = s.format == sp::Format::kCsr;
  const int64_t major = csr ? s.rows : s.cols, minor = csr ? s.cols : s.rows;
  int64_t prev = 0;
  for (int64_t o = 0; o <= major; ++o) {
    const int64_t at = indexAt(s.offsets, s.offset_type, o) - s.base;
    if ((o == 0 && at != 0) || at < prev || at > s.nnz)
      return Status(err::kInvalidValue, std::string(csr ? "row" : "column") + " offset " + std::to_string(o) + " is " +
                                            std::to_string(at + s.base) + " (offsets start at the base, never " +
                                            "decrease and end at most at nnz " + std::to_string(s.nnz) + ")");
    if (o > 0)
      for (int64_t p = prev; p < at; ++p) {
        const int64_t i = indexAt(s.indices, s.index_type, p) - s.base;
        if (i < 0 || i >= minor)
          return Status(err::kInvalidValue, std::string(csr ? "column" : "row") + " index " +
                                                std::to_string(i + s.base) + " of entry " + std::to_string(p) +
                                                " lies outside the matrix's " + std::to_string(minor));
        out.push_back(csr ? Entry{o - 1, i, p} : Entry{i, o - 1, p});
      }
    prev = at;
  }
  return Status::ok();
}

template <typename T>
T& at(const sp::DnMat& m, int64_t r, int64_t c) {
  T* v = reinterpret_cast<T*>(m.values);
  return m.order == sp::kOrderCol ? v[c * m.ld + r] : v[r * m.ld + c];
}

template <typename T>
Status runTyped(const sp::Args& a) {
  std::vector<Entry> list;
  RGPU_TRY(entries(a.a, list));
  const T alpha = scalar<T>(a.alpha), beta = scalar<T>(a.beta);
  const T* values = reinterpret_cast<const T*>(a.a.values);
  const sp::DnMat &b = a.b, &c = a.c;
  // C = beta C (exactly 0 when beta is: C may hold anything then, as in BLAS).
  for (int64_t j = 0; j < c.cols; ++j)
    for (int64_t i = 0; i < c.rows; ++i) at<T>(c, i, j) = beta == T(0) ? T(0) : beta * at<T>(c, i, j);
  const int64_t n = c.cols;
  for (const Entry& e : list) {
    T v = values[e.at];
    int64_t out = e.row, in = e.col;
    if (a.op_a != sp::kOpN) {
      std::swap(out, in);
      if (a.op_a == sp::kOpC) v = conjOf(v);
    }
    const T av = alpha * v;
    for (int64_t t = 0; t < n; ++t)
      at<T>(c, out, t) += av * (a.op_b == sp::kOpN ? at<T>(b, in, t) : at<T>(b, t, in));
  }
  return Status::ok();
}

}  // namespace

Status run(const sp::Args& a) {
  if (sp::isSpGemm(a.op)) return runSpGemm(a);
  return withValueType(a.compute_type, [&](auto t) { return runTyped<decltype(t)>(a); });
}

}  // namespace rgpu::server::simsparse

// The sim backend's side (sim_backend.h).
#include "server/sim/sim_backend.h"

namespace rgpu::server {

Result<uint64_t> SimBackend::sparseBufferSize(int, const common::sparse::Args&) { return uint64_t{0}; }

Status SimBackend::sparse(StreamKey key, const common::sparse::Args& a) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (gate_) gate_->queued(key.device);
  Status queued = enqueueLocked(*s, [this, key, a] {
    Status st;
    runAsKernel(key.device, [&] { st = simsparse::run(a); });
    if (!st) reportAsync(Status(st.code(), std::string(common::sparse::opName(a.op)) + ": " + st.message()));
  });
  if (!queued && gate_) gate_->done(key.device, 0, false);
  return queued;
}

}  // namespace rgpu::server
