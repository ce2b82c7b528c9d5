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

}  // namespace

const char* opName(Op op) { return op == Op::kSpMV ? "cusparseSpMV" : "cusparseSpMM"; }

Status check(const Args& a) {
  if (a.op != Op::kSpMV && a.op != Op::kSpMM) return bad("unknown cuSPARSE routine");
  const SpMat& s = a.a;
  if (static_cast<uint8_t>(s.format) > static_cast<uint8_t>(Format::kCoo)) return bad("sparse format");
  if (s.rows < 0 || s.cols < 0 || s.nnz < 0 || s.rows > kMaxDim || s.cols > kMaxDim || s.nnz > kMaxDim)
    return bad("a sparse matrix of " + std::to_string(s.rows) + " x " + std::to_string(s.cols) + " with " +
               std::to_string(s.nnz) + " entries");
  if (s.base != 0 && s.base != 1) return bad("index base " + std::to_string(s.base));
  for (int32_t t : {s.offset_type, s.index_type})
    if (t != kIndex32 && t != kIndex64)
      return Status(err::kNotSupported, "index type " + std::to_string(t) + " (32- and 64-bit indices are computed)");
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
  const SpMat& s = a.a;
  const uint64_t e = elementBytes(a.compute_type);
  switch (s.format) {
    case Format::kCsr: add(s.offsets, static_cast<uint64_t>(s.rows) + 1, indexBytes(s.offset_type), "row offsets"); break;
    case Format::kCsc: add(s.offsets, static_cast<uint64_t>(s.cols) + 1, indexBytes(s.offset_type), "column offsets"); break;
    case Format::kCoo: add(s.offsets, static_cast<uint64_t>(s.nnz), indexBytes(s.index_type), "row indices"); break;
  }
  add(s.indices, static_cast<uint64_t>(s.nnz), indexBytes(s.index_type), "indices");
  add(s.values, static_cast<uint64_t>(s.nnz), e, "values");
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
  auto s = b.initA();
  s.setFormat(static_cast<uint8_t>(a.a.format));
  s.setRows(a.a.rows);
  s.setCols(a.a.cols);
  s.setNnz(a.a.nnz);
  s.setOffsets(a.a.offsets);
  s.setIndices(a.a.indices);
  s.setValues(a.a.values);
  s.setOffsetType(a.a.offset_type);
  s.setIndexType(a.a.index_type);
  s.setBase(a.a.base);
  s.setValueType(a.a.value_type);
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
  auto s = r.getA();
  a.a.format = static_cast<Format>(s.getFormat());
  a.a.rows = s.getRows();
  a.a.cols = s.getCols();
  a.a.nnz = s.getNnz();
  a.a.offsets = s.getOffsets();
  a.a.indices = s.getIndices();
  a.a.values = s.getValues();
  a.a.offset_type = s.getOffsetType();
  a.a.index_type = s.getIndexType();
  a.a.base = s.getBase();
  a.a.value_type = s.getValueType();
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
