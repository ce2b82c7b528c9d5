#include "common/sparse_args.h"

#include <algorithm>
#include <cstring>

namespace rgpu::common::sparse {

namespace {

Status bad(const std::string& what) { return Status(err::kInvalidValue, what); }

// A dense matrix's span in elements.
uint64_t span(const DnMat& m) {
  if (m.rows <= 0 || m.cols <= 0) return 0;
  return m.order == kOrderCol ? static_cast<uint64_t>(m.ld) * static_cast<uint64_t>(m.cols - 1) + m.rows
                              : static_cast<uint64_t>(m.ld) * static_cast<uint64_t>(m.rows - 1) + m.cols;
}

Status checkDense(const DnMat& m, const char* what) {
  if (m.rows < 0 || m.cols < 0 || m.rows > kMaxDim || m.cols > kMaxDim)
    return bad(std::string(what) + ": " + std::to_string(m.rows) + " x " + std::to_string(m.cols));
  if (m.order != kOrderCol && m.order != kOrderRow) return bad(std::string(what) + ": order " + std::to_string(m.order));
  const int64_t need = std::max<int64_t>(1, m.order == kOrderCol ? m.rows : m.cols);
  if (m.ld < need || m.ld > kMaxDim) return bad(std::string(what) + ": leading dimension " + std::to_string(m.ld));
  return Status::ok();
}

void scalarToWire(const Scalar& s, wire::BlasScalar::Builder b) {
  if (s.device) b.setDevice(s.ptr);
  else b.setHost(kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.bytes), sizeof s.bytes));
}
Scalar scalarFromWire(wire::BlasScalar::Reader r) {
  Scalar s;
  if (r.isDevice()) {
    s.device = true;
    s.ptr = r.getDevice();
  } else if (r.isHost()) {
    auto d = r.getHost();
    std::memcpy(s.bytes, d.begin(), std::min<size_t>(d.size(), sizeof s.bytes));
  }
  return s;
}

void sparseToWire(const SpMat& m, wire::SparseMatrix::Builder s) {
  s.setFormat(static_cast<uint8_t>(m.format));
  s.setRows(m.rows);
  s.setCols(m.cols);
  s.setNnz(m.nnz);
  s.setOffsets(m.offsets);
  s.setIndices(m.indices);
  s.setValues(m.values);
  s.setOffsetType(m.offset_type);
  s.setIndexType(m.index_type);
  s.setBase(m.base);
  s.setValueType(m.value_type);
  s.setBlock(m.block);
  s.setEllCols(m.ell_cols);
}
SpMat sparseFromWire(wire::SparseMatrix::Reader s) {
  SpMat m;
  m.format = static_cast<Format>(s.getFormat());
  m.rows = s.getRows();
  m.cols = s.getCols();
  m.nnz = s.getNnz();
  m.offsets = s.getOffsets();
  m.indices = s.getIndices();
  m.values = s.getValues();
  m.offset_type = s.getOffsetType();
  m.index_type = s.getIndexType();
  m.base = s.getBase();
  m.value_type = s.getValueType();
  m.block = s.getBlock();
  m.ell_cols = s.getEllCols();
  return m;
}

}  // namespace

const char* opName(Op op) {
  switch (op) {
    case Op::kSpMV: return "cusparseSpMV";
    case Op::kSpMM: return "cusparseSpMM";
    case Op::kSpGemmCount: return "cusparseSpGEMM_workEstimation";
    case Op::kSpGemmCompute: return "cusparseSpGEMM_compute";
    case Op::kSpGemmStructure: return "cusparseSpGEMMreuse_nnz";
    case Op::kSpGemmValues: return "cusparseSpGEMMreuse_compute";
  }
  return "cuSPARSE";
}

ProductLayout productLayout(const SpMat& c, int64_t nnz, bool with_values) {
  auto align = [](uint64_t v) { return (v + 255) & ~uint64_t{255}; };
  ProductLayout l;
  l.offsets = kHeaderBytes;
  l.indices = align(l.offsets + (static_cast<uint64_t>(c.rows) + 1) * indexBytes(c.offset_type));
  l.values = align(l.indices + static_cast<uint64_t>(nnz) * indexBytes(c.index_type));
  l.bytes = with_values ? align(l.values + static_cast<uint64_t>(nnz) * elementBytes(c.value_type)) : l.values;
  return l;
}

namespace {

Status checkSparse(const SpMat& s, const char* what) {
  if (static_cast<uint8_t>(s.format) > static_cast<uint8_t>(Format::kBlockedEll))
    return bad(std::string(what) + ": sparse format");
  if (s.format == Format::kBlockedEll) {
    const int64_t b = s.block;
    if (b <= 0 || b > kMaxDim || s.rows % b || s.cols % b || s.ell_cols < 0 || s.ell_cols % b ||
        s.ell_cols > s.cols || (s.ell_cols > 0 && s.rows > kMaxDim / s.ell_cols))
      return bad(std::string(what) + ": a Blocked-ELL matrix of " + std::to_string(s.rows) + " x " +
                 std::to_string(s.cols) + " in blocks of " + std::to_string(b) + ", " + std::to_string(s.ell_cols) +
                 " columns of blocks' values (rows, columns and those a multiple of the block size, at most the "
                 "columns, rows x those at most kMaxDim)");
  }
  if (s.rows < 0 || s.cols < 0 || s.nnz < 0 || s.rows > kMaxDim || s.cols > kMaxDim || s.nnz > kMaxDim)
    return bad(std::string(what) + ": a sparse matrix of " + std::to_string(s.rows) + " x " + std::to_string(s.cols) +
               " with " + std::to_string(s.nnz) + " entries");
  if (s.base != 0 && s.base != 1) return bad(std::string(what) + ": index base " + std::to_string(s.base));
  for (int32_t t : {s.offset_type, s.index_type})
    if (t != kIndex32 && t != kIndex64)
      return Status(err::kNotSupported, "index type " + std::to_string(t) + " (32- and 64-bit indices are computed)");
  return Status::ok();
}

// SpGEMM: C = alpha A B + beta C, CSR in one value type, no transposes (as cuSPARSE's).
Status checkSpGemm(const Args& a) {
  RGPU_TRY(checkSparse(a.a, "A"));
  RGPU_TRY(checkSparse(a.sb, "B"));
  RGPU_TRY(checkSparse(a.sc, "C"));
  for (const SpMat* m : {&a.a, &a.sb, &a.sc})
    if (m->format != Format::kCsr) return Status(err::kNotSupported, "SpGEMM of a matrix that is not CSR");
  for (int32_t t : {a.a.value_type, a.sb.value_type, a.sc.value_type, a.compute_type})
    if (!knownType(t)) return Status(err::kNotSupported, "data type " + std::to_string(t));
  if (a.a.value_type != a.compute_type || a.sb.value_type != a.compute_type || a.sc.value_type != a.compute_type)
    return Status(err::kNotSupported, "mixed data types (values and the computation in one type are computed)");
  if (a.op_a != kOpN || a.op_b != kOpN)
    return Status(err::kNotSupported, "SpGEMM with a transposed operand (cuSPARSE takes NON_TRANSPOSE only)");
  if (a.a.cols != a.sb.rows)
    return bad("B has " + std::to_string(a.sb.rows) + " rows, A " + std::to_string(a.a.cols) + " columns");
  if (a.sc.rows != a.a.rows || a.sc.cols != a.sb.cols)
    return bad("C is " + std::to_string(a.sc.rows) + " x " + std::to_string(a.sc.cols) + ", A B " +
               std::to_string(a.a.rows) + " x " + std::to_string(a.sb.cols));
  if (a.op != Op::kSpGemmValues && (!a.buffer || a.buffer_size < kHeaderBytes))
    return bad("an external buffer of " + std::to_string(a.buffer_size) + " bytes (at least " +
               std::to_string(kHeaderBytes) + ")");
  return Status::ok();
}

}  // namespace

Status check(const Args& a) {
  if (isSpGemm(a.op)) return checkSpGemm(a);
  if (a.op != Op::kSpMV && a.op != Op::kSpMM) return bad("unknown cuSPARSE routine");
  const SpMat& s = a.a;
  RGPU_TRY(checkSparse(s, "A"));
  if (s.format == Format::kBlockedEll && (a.op != Op::kSpMM || a.op_a != kOpN))
    return Status(err::kNotSupported, std::string(opName(a.op)) + " of a Blocked-ELL matrix" +
                                          (a.op == Op::kSpMM ? " with op(A) other than N" : "") +
                                          " (cuSPARSE's SpMM takes one, with op(A) = N)");
  for (int32_t t : {s.value_type, a.b.value_type, a.c.value_type, a.compute_type})
    if (!knownType(t)) return Status(err::kNotSupported, "data type " + std::to_string(t));
  if (s.value_type != a.compute_type || a.b.value_type != a.compute_type || a.c.value_type != a.compute_type)
    return Status(err::kNotSupported, "mixed data types (values, vectors and the computation in one type are computed)");
  if (a.op_a != kOpN && a.op_a != kOpT && a.op_a != kOpC) return bad("opA " + std::to_string(a.op_a));
  RGPU_TRY(checkDense(a.b, a.op == Op::kSpMV ? "X" : "B"));
  RGPU_TRY(checkDense(a.c, a.op == Op::kSpMV ? "Y" : "C"));
  const int64_t m = a.op_a == kOpN ? s.rows : s.cols, k = a.op_a == kOpN ? s.cols : s.rows;
  if (a.op == Op::kSpMV) {
    if (a.b.cols != 1 || a.c.cols != 1) return bad("a dense vector with more than one column");
    if (a.b.rows != k) return bad("X has " + std::to_string(a.b.rows) + " elements, op(A) " + std::to_string(k) + " columns");
    if (a.c.rows != m) return bad("Y has " + std::to_string(a.c.rows) + " elements, op(A) " + std::to_string(m) + " rows");
    return Status::ok();
  }
  if (a.op_b != kOpN && a.op_b != kOpT) return bad("opB " + std::to_string(a.op_b));
  const int64_t bk = a.op_b == kOpN ? a.b.rows : a.b.cols, bn = a.op_b == kOpN ? a.b.cols : a.b.rows;
  if (bk != k) return bad("op(B) has " + std::to_string(bk) + " rows, op(A) " + std::to_string(k) + " columns");
  if (a.c.rows != m || a.c.cols != bn)
    return bad("C is " + std::to_string(a.c.rows) + " x " + std::to_string(a.c.cols) + ", op(A) op(B) " +
               std::to_string(m) + " x " + std::to_string(bn));
  return Status::ok();
}

std::vector<Range> ranges(const Args& a) {
  std::vector<Range> out;
  auto add = [&](uint64_t ptr, uint64_t elements, uint64_t bytes, const char* what) {
    const unsigned __int128 total = static_cast<unsigned __int128>(elements) * bytes;
    if (elements) out.push_back({ptr, total > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(total), what});
  };
  const uint64_t e = elementBytes(a.compute_type);
  if (isSpGemm(a.op)) {
    // CSR throughout (check()); the values only where the step reads or writes them.
    const bool values = a.op == Op::kSpGemmCompute || a.op == Op::kSpGemmValues;
    auto csr = [&](const SpMat& m, bool with_values, const char* offsets, const char* indices, const char* vals) {
      add(m.offsets, static_cast<uint64_t>(m.rows) + 1, indexBytes(m.offset_type), offsets);
      add(m.indices, static_cast<uint64_t>(m.nnz), indexBytes(m.index_type), indices);
      if (with_values) add(m.values, static_cast<uint64_t>(m.nnz), e, vals);
    };
    csr(a.a, values, "A's row offsets", "A's column indices", "A's values");
    csr(a.sb, values, "B's row offsets", "B's column indices", "B's values");
    if (a.op == Op::kSpGemmValues) csr(a.sc, true, "C's row offsets", "C's column indices", "C's values");
    else add(a.buffer, a.buffer_size, 1, "external buffer");
    if (values && a.alpha.device) add(a.alpha.ptr, 1, e, "alpha");
    if (values && a.beta.device) add(a.beta.ptr, 1, e, "beta");
    return out;
  }
  const SpMat& s = a.a;
  switch (s.format) {
    case Format::kCsr: add(s.offsets, static_cast<uint64_t>(s.rows) + 1, indexBytes(s.offset_type), "row offsets"); break;
    case Format::kCsc: add(s.offsets, static_cast<uint64_t>(s.cols) + 1, indexBytes(s.offset_type), "column offsets"); break;
    case Format::kCoo: add(s.offsets, static_cast<uint64_t>(s.nnz), indexBytes(s.index_type), "row indices"); break;
    case Format::kBlockedEll: break;
  }
  if (s.format == Format::kBlockedEll) {  // (check(): block > 0 divides rows and ell_cols)
    add(s.indices, static_cast<uint64_t>(s.rows / s.block) * static_cast<uint64_t>(s.ell_cols / s.block),
        indexBytes(s.index_type), "block columns");
    add(s.values, static_cast<uint64_t>(s.rows) * static_cast<uint64_t>(s.ell_cols), e, "values");
  } else {
    add(s.indices, static_cast<uint64_t>(s.nnz), indexBytes(s.index_type), "indices");
    add(s.values, static_cast<uint64_t>(s.nnz), e, "values");
  }
  add(a.b.values, span(a.b), e, a.op == Op::kSpMV ? "X" : "B");
  add(a.c.values, span(a.c), e, a.op == Op::kSpMV ? "Y" : "C");
  if (a.alpha.device) add(a.alpha.ptr, 1, e, "alpha");
  if (a.beta.device) add(a.beta.ptr, 1, e, "beta");
  if (a.buffer && a.buffer_size) add(a.buffer, a.buffer_size, 1, "external buffer");
  return out;
}

void toWire(const Args& a, wire::Sparse::Builder b) {
  b.setOp(static_cast<uint8_t>(a.op));
  b.setOpA(a.op_a);
  b.setOpB(a.op_b);
  scalarToWire(a.alpha, b.initAlpha());
  scalarToWire(a.beta, b.initBeta());
  b.setComputeType(a.compute_type);
  b.setAlg(a.alg);
  sparseToWire(a.a, b.initA());
  if (isSpGemm(a.op)) {
    sparseToWire(a.sb, b.initSb());
    sparseToWire(a.sc, b.initSc());
  }
  for (auto [m, d] : {std::pair{&a.b, b.initB()}, std::pair{&a.c, b.initC()}}) {
    d.setRows(m->rows);
    d.setCols(m->cols);
    d.setLd(m->ld);
    d.setValues(m->values);
    d.setValueType(m->value_type);
    d.setOrder(m->order);
  }
  b.setBuffer(a.buffer);
  b.setBufferSize(a.buffer_size);
}

Args fromWire(wire::Sparse::Reader r) {
  Args a;
  a.op = static_cast<Op>(r.getOp());
  a.op_a = r.getOpA();
  a.op_b = r.getOpB();
  a.alpha = scalarFromWire(r.getAlpha());
  a.beta = scalarFromWire(r.getBeta());
  a.compute_type = r.getComputeType();
  a.alg = r.getAlg();
  a.a = sparseFromWire(r.getA());
  if (r.hasSb()) a.sb = sparseFromWire(r.getSb());
  if (r.hasSc()) a.sc = sparseFromWire(r.getSc());
  for (auto [m, d] : {std::pair{&a.b, r.getB()}, std::pair{&a.c, r.getC()}}) {
    m->rows = d.getRows();
    m->cols = d.getCols();
    m->ld = d.getLd();
    m->values = d.getValues();
    m->value_type = d.getValueType();
    m->order = d.getOrder();
  }
  a.buffer = r.getBuffer();
  a.buffer_size = r.getBufferSize();
  return a;
}

}  // namespace rgpu::common::sparse
