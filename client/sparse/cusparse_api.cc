// rgpu's libcusparse.so.12: cuSPARSE's generic SpMV and SpMM with NVIDIA's
// names and version node (libcusparse.map; all 423 exported, the ones not
// forwarded as generated stubs answering CUSPARSE_STATUS_NOT_SUPPORTED with
// one log line).
//
// Forwarded (docs/cusparse.md): handles (stream, pointer mode, version,
// status names), the legacy matrix descriptor, CSR/CSC/COO sparse matrix
// and Blocked-ELL descriptors and dense vector and matrix descriptors (const and not, with
// their getters and setters), cusparseSpMV and cusparseSpMM with their
// bufferSize and preprocess calls (SpGEMM: cusparse_spgemm.cc). Handles and descriptors are the
// client's; a call is one stream-ordered, asynchronous request carrying the
// descriptors whole (wire::Sparse), checked here as cuSPARSE checks it and
// by the server against the session's memory (an error at the next
// synchronising call). Host scalars are read when the call is made.
#include "client/sparse/cusparse_client.h"

namespace rgpu::client::sparse {

cusparseStatus_t submit(cusparseHandle_t h, sp::Args& a, bool size, size_t* bytes, const char* call) {
  return guarded(call, [&]() -> cusparseStatus_t {
    if (!live(h)) return CUSPARSE_STATUS_NOT_INITIALIZED;
    if (Status s = sp::check(a); !s) return toSparseStatus(s, call, CUSPARSE_STATUS_INVALID_VALUE);
    const rgpu::client::ExportTable* t = rgpu::client::blas::table();
    if (!t) return CUSPARSE_STATUS_NOT_INITIALIZED;
    capnp::MallocMessageBuilder msg;
    auto req = msg.initRoot<rgpu::wire::Request>();
    auto m = size ? req.initSparseBufferSize() : req.initSparse();
    if (Status s = rgpu::client::blas::setStream(m.initStream(), *t, h->stream, h->device); !s)
      return toSparseStatus(s, call, CUSPARSE_STATUS_EXECUTION_FAILED);
    sp::toWire(a, m);
    if (!size) return toSparseStatus(t->post(msg), call, CUSPARSE_STATUS_EXECUTION_FAILED);
    auto r = t->call(msg, nullptr, 0);
    if (!r) return toSparseStatus(r.status(), call, CUSPARSE_STATUS_EXECUTION_FAILED);
    *bytes = static_cast<size_t>(r->reader().getValue());
    return CUSPARSE_STATUS_SUCCESS;
  });
}

}  // namespace rgpu::client::sparse

using namespace rgpu::client::sparse;

namespace {

// One SpMV or SpMM: its scalars read, checked, then sent (`size`: its bufferSize, answered into *bytes).
cusparseStatus_t send(cusparseHandle_t h, sp::Args& a, const void* alpha, const void* beta, bool size,
                      size_t* bytes, const char* call) {
  if (!live(h)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta || (size && !bytes)) return CUSPARSE_STATUS_INVALID_VALUE;
  a.alpha = scalar(h, alpha, a.compute_type);
  a.beta = scalar(h, beta, a.compute_type);
  return submit(h, a, size, bytes, call);
}

sp::Args spmv(cusparseOperation_t op, cusparseConstSpMatDescr_t A, cusparseConstDnVecDescr_t x,
              cusparseConstDnVecDescr_t y, cudaDataType type, int alg, void* buffer, size_t buffer_size) {
  sp::Args a;
  a.op = sp::Op::kSpMV;
  a.op_a = op;
  a.compute_type = type;
  a.alg = alg;
  if (A) a.a = A->m;
  if (x) a.b = x->m;
  if (y) a.c = y->m;
  a.buffer = p(buffer);
  a.buffer_size = buffer ? buffer_size : 0;
  return a;
}

sp::Args spmm(cusparseOperation_t opA, cusparseOperation_t opB, cusparseConstSpMatDescr_t A,
              cusparseConstDnMatDescr_t B, cusparseConstDnMatDescr_t C, cudaDataType type, int alg, void* buffer,
              size_t buffer_size) {
  sp::Args a;
  a.op = sp::Op::kSpMM;
  a.op_a = opA;
  a.op_b = opB;
  a.compute_type = type;
  a.alg = alg;
  if (A) a.a = A->m;
  if (B) a.b = B->m;
  if (C) a.c = C->m;
  a.buffer = p(buffer);
  a.buffer_size = buffer ? buffer_size : 0;
  return a;
}

// What a call's buffer holds: the client does not know its size after
// bufferSize, so the server checks that the buffer is an allocation of the
// session from its start (the size of one byte), and NVIDIA's library reads
// what it asked for.
constexpr size_t kBufferCheckBytes = 1;

cusparseStatus_t makeSparse(void* out, int64_t rows, int64_t cols, int64_t nnz, const void* off, const void* ind,
                            const void* val, cusparseIndexType_t ot, cusparseIndexType_t it, cusparseIndexBase_t base,
                            cudaDataType type, sp::Format f) {
  if (!out || rows < 0 || cols < 0 || nnz < 0) return CUSPARSE_STATUS_INVALID_VALUE;
  auto* d = new cusparseSpMatDescr{};
  d->m.format = f;
  d->m.rows = rows, d->m.cols = cols, d->m.nnz = nnz;
  d->m.offsets = p(off), d->m.indices = p(ind), d->m.values = p(val);
  d->m.offset_type = ot, d->m.index_type = it, d->m.base = base, d->m.value_type = type;
  *static_cast<cusparseSpMatDescr**>(out) = d;
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t makeBlockedEll(void* out, int64_t rows, int64_t cols, int64_t block, int64_t ell_cols,
                                const void* ind, const void* val, cusparseIndexType_t it, cusparseIndexBase_t base,
                                cudaDataType type) {
  if (!out || block <= 0 || rows < 0 || ell_cols < 0 || ell_cols > cols ||
      (ell_cols > 0 && rows > sp::kMaxDim / ell_cols))
    return CUSPARSE_STATUS_INVALID_VALUE;
  if (cusparseStatus_t s = makeSparse(out, rows, cols, rows * ell_cols, nullptr, ind, val, it, it, base, type,
                                      sp::Format::kBlockedEll);
      s != CUSPARSE_STATUS_SUCCESS)
    return s;
  auto* d = *static_cast<cusparseSpMatDescr**>(out);
  d->m.block = block, d->m.ell_cols = ell_cols;
  return CUSPARSE_STATUS_SUCCESS;
}

cusparseStatus_t makeDense(void* out, int64_t rows, int64_t cols, int64_t ld, const void* values, cudaDataType type,
                           cusparseOrder_t order, bool vector) {
  if (!out || rows < 0 || cols < 0) return CUSPARSE_STATUS_INVALID_VALUE;
  sp::DnMat m{rows, cols, ld, p(values), type, order};
  if (vector) *static_cast<cusparseDnVecDescr**>(out) = new cusparseDnVecDescr{m};
  else *static_cast<cusparseDnMatDescr**>(out) = new cusparseDnMatDescr{m};
  return CUSPARSE_STATUS_SUCCESS;
}

// A sparse matrix's fields, as the three getters give them (`format` must be the matrix's).
template <typename P>
cusparseStatus_t getSparse(cusparseConstSpMatDescr_t d, sp::Format format, int64_t* rows, int64_t* cols, int64_t* nnz,
                           P* offsets, P* indices, P* values, cusparseIndexType_t* offset_type,
                           cusparseIndexType_t* index_type, cusparseIndexBase_t* base, cudaDataType* type) {
  if (!d || d->m.format != format || !rows || !cols || !nnz || !offsets || !indices || !values || !index_type ||
      !base || !type)
    return CUSPARSE_STATUS_INVALID_VALUE;
  *rows = d->m.rows, *cols = d->m.cols, *nnz = d->m.nnz;
  *offsets = reinterpret_cast<P>(d->m.offsets), *indices = reinterpret_cast<P>(d->m.indices);
  *values = reinterpret_cast<P>(d->m.values);
  if (offset_type) *offset_type = static_cast<cusparseIndexType_t>(d->m.offset_type);
  *index_type = static_cast<cusparseIndexType_t>(d->m.index_type);
  *base = static_cast<cusparseIndexBase_t>(d->m.base);
  *type = static_cast<cudaDataType>(d->m.value_type);
  return CUSPARSE_STATUS_SUCCESS;
}
template <typename P>
cusparseStatus_t getDense(cusparseConstDnMatDescr_t d, int64_t* rows, int64_t* cols, int64_t* ld, P* values,
                          cudaDataType* type, cusparseOrder_t* order) {
  if (!d || !rows || !cols || !ld || !values || !type || !order) return CUSPARSE_STATUS_INVALID_VALUE;
  *rows = d->m.rows, *cols = d->m.cols, *ld = d->m.ld, *values = reinterpret_cast<P>(d->m.values);
  *type = static_cast<cudaDataType>(d->m.value_type), *order = static_cast<cusparseOrder_t>(d->m.order);
  return CUSPARSE_STATUS_SUCCESS;
}
}  // namespace

// A stub's answer (client/sparse/cusparse_exports.txt, gen_blas_stubs.cmake).
extern "C" int rgpu_sparse_unsupported(const char* name) {
  rgpu::common::logOnce(std::string("cusparse-unsupported:") + name,
                        std::string(name) + " is not supported by rgpu's cuSPARSE (returns "
                                            "CUSPARSE_STATUS_NOT_SUPPORTED; docs/cusparse.md)");
  return CUSPARSE_STATUS_NOT_SUPPORTED;
}

extern "C" {

#define RGPU_SPARSE_API __attribute__((visibility("default")))

RGPU_SPARSE_API cusparseStatus_t cusparseCreate(cusparseHandle_t* handle) {
  return guarded("cusparseCreate", [&]() -> cusparseStatus_t {
    if (!handle) return CUSPARSE_STATUS_INVALID_VALUE;
    int device = 0;
    if (rgpu::client::blas::openSession("cusparseCreate", &device) != CUBLAS_STATUS_SUCCESS)
      return CUSPARSE_STATUS_NOT_INITIALIZED;
    auto* h = new cusparseContext;
    h->device = device;
    *handle = h;
    return CUSPARSE_STATUS_SUCCESS;
  });
}
RGPU_SPARSE_API cusparseStatus_t cusparseDestroy(cusparseHandle_t handle) {
  if (!live(handle)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  handle->magic = 0;
  delete handle;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t stream) {
  if (!live(handle)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseGetStream(cusparseHandle_t handle, cudaStream_t* stream) {
  if (!live(handle)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (!stream) return CUSPARSE_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSetPointerMode(cusparseHandle_t handle, cusparsePointerMode_t mode) {
  if (!live(handle)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (mode != CUSPARSE_POINTER_MODE_HOST && mode != CUSPARSE_POINTER_MODE_DEVICE) return CUSPARSE_STATUS_INVALID_VALUE;
  handle->mode = mode;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseGetPointerMode(cusparseHandle_t handle, cusparsePointerMode_t* mode) {
  if (!live(handle)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (!mode) return CUSPARSE_STATUS_INVALID_VALUE;
  *mode = handle->mode;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseGetVersion(cusparseHandle_t handle, int* version) {
  if (!live(handle)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (!version) return CUSPARSE_STATUS_INVALID_VALUE;
  *version = CUSPARSE_VERSION;  // the toolkit's cuSPARSE this library stands in for
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUSPARSE_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUSPARSE_VER_MAJOR; return CUSPARSE_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUSPARSE_VER_MINOR; return CUSPARSE_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUSPARSE_VER_PATCH; return CUSPARSE_STATUS_SUCCESS;
    default: return CUSPARSE_STATUS_INVALID_VALUE;
  }
}

RGPU_SPARSE_API const char* cusparseGetErrorName(cusparseStatus_t status) {
  switch (status) {
    case CUSPARSE_STATUS_SUCCESS: return "CUSPARSE_STATUS_SUCCESS";
    case CUSPARSE_STATUS_NOT_INITIALIZED: return "CUSPARSE_STATUS_NOT_INITIALIZED";
    case CUSPARSE_STATUS_ALLOC_FAILED: return "CUSPARSE_STATUS_ALLOC_FAILED";
    case CUSPARSE_STATUS_INVALID_VALUE: return "CUSPARSE_STATUS_INVALID_VALUE";
    case CUSPARSE_STATUS_ARCH_MISMATCH: return "CUSPARSE_STATUS_ARCH_MISMATCH";
    case CUSPARSE_STATUS_MAPPING_ERROR: return "CUSPARSE_STATUS_MAPPING_ERROR";
    case CUSPARSE_STATUS_EXECUTION_FAILED: return "CUSPARSE_STATUS_EXECUTION_FAILED";
    case CUSPARSE_STATUS_INTERNAL_ERROR: return "CUSPARSE_STATUS_INTERNAL_ERROR";
    case CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSPARSE_STATUS_ZERO_PIVOT: return "CUSPARSE_STATUS_ZERO_PIVOT";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "CUSPARSE_STATUS_NOT_SUPPORTED";
    case CUSPARSE_STATUS_INSUFFICIENT_RESOURCES: return "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES";
  }
  return "CUSPARSE_STATUS_UNKNOWN";
}
RGPU_SPARSE_API const char* cusparseGetErrorString(cusparseStatus_t status) {
  switch (status) {
    case CUSPARSE_STATUS_SUCCESS: return "success";
    case CUSPARSE_STATUS_NOT_INITIALIZED: return "initialization error";
    case CUSPARSE_STATUS_ALLOC_FAILED: return "out of memory";
    case CUSPARSE_STATUS_INVALID_VALUE: return "invalid value";
    case CUSPARSE_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUSPARSE_STATUS_MAPPING_ERROR: return "mapping error";
    case CUSPARSE_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUSPARSE_STATUS_INTERNAL_ERROR: return "internal error";
    case CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "matrix type not supported";
    case CUSPARSE_STATUS_ZERO_PIVOT: return "zero pivot";
    case CUSPARSE_STATUS_NOT_SUPPORTED: return "operation not supported";
    case CUSPARSE_STATUS_INSUFFICIENT_RESOURCES: return "insufficient resources";
  }
  return "unknown error";
}

// The legacy matrix descriptor (still taken by the routines that remain of the legacy API).
RGPU_SPARSE_API cusparseStatus_t cusparseCreateMatDescr(cusparseMatDescr_t* d) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  *d = new cusparseMatDescr;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseDestroyMatDescr(cusparseMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSetMatType(cusparseMatDescr_t d, cusparseMatrixType_t type) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->type = type;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseMatrixType_t cusparseGetMatType(const cusparseMatDescr_t d) {
  return d ? d->type : CUSPARSE_MATRIX_TYPE_GENERAL;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSetMatFillMode(cusparseMatDescr_t d, cusparseFillMode_t fill) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->fill = fill;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseFillMode_t cusparseGetMatFillMode(const cusparseMatDescr_t d) {
  return d ? d->fill : CUSPARSE_FILL_MODE_LOWER;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSetMatDiagType(cusparseMatDescr_t d, cusparseDiagType_t diag) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->diag = diag;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseDiagType_t cusparseGetMatDiagType(const cusparseMatDescr_t d) {
  return d ? d->diag : CUSPARSE_DIAG_TYPE_NON_UNIT;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSetMatIndexBase(cusparseMatDescr_t d, cusparseIndexBase_t base) {
  if (!d || (base != CUSPARSE_INDEX_BASE_ZERO && base != CUSPARSE_INDEX_BASE_ONE)) return CUSPARSE_STATUS_INVALID_VALUE;
  d->base = base;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseIndexBase_t cusparseGetMatIndexBase(const cusparseMatDescr_t d) {
  return d ? d->base : CUSPARSE_INDEX_BASE_ZERO;
}

// Sparse matrix descriptors.
#define RGPU_SPARSE_CREATE(name, handle_t, ptr_t, FMT)                                                      \
  RGPU_SPARSE_API cusparseStatus_t name(handle_t* d, int64_t rows, int64_t cols, int64_t nnz, ptr_t off,       \
                                        ptr_t ind, ptr_t val, cusparseIndexType_t ot, cusparseIndexType_t it,  \
                                        cusparseIndexBase_t base, cudaDataType type) {                         \
    return makeSparse(d, rows, cols, nnz, off, ind, val, ot, it, base, type, FMT);                             \
  }
RGPU_SPARSE_CREATE(cusparseCreateCsr, cusparseSpMatDescr_t, void*, sp::Format::kCsr)
RGPU_SPARSE_CREATE(cusparseCreateConstCsr, cusparseConstSpMatDescr_t, const void*, sp::Format::kCsr)
RGPU_SPARSE_CREATE(cusparseCreateCsc, cusparseSpMatDescr_t, void*, sp::Format::kCsc)
RGPU_SPARSE_CREATE(cusparseCreateConstCsc, cusparseConstSpMatDescr_t, const void*, sp::Format::kCsc)
#undef RGPU_SPARSE_CREATE
RGPU_SPARSE_API cusparseStatus_t cusparseCreateCoo(cusparseSpMatDescr_t* d, int64_t rows, int64_t cols, int64_t nnz,
                                                   void* ri, void* ci, void* val, cusparseIndexType_t it,
                                                   cusparseIndexBase_t base, cudaDataType type) {
  return makeSparse(d, rows, cols, nnz, ri, ci, val, it, it, base, type, sp::Format::kCoo);
}
RGPU_SPARSE_API cusparseStatus_t cusparseCreateConstCoo(cusparseConstSpMatDescr_t* d, int64_t rows, int64_t cols,
                                                        int64_t nnz, const void* ri, const void* ci, const void* val,
                                                        cusparseIndexType_t it, cusparseIndexBase_t base,
                                                        cudaDataType type) {
  return makeSparse(d, rows, cols, nnz, ri, ci, val, it, it, base, type, sp::Format::kCoo);
}
// Blocked-ELL (SpMM only, as cuSPARSE's): nnz is rows x ellCols, as cuSPARSE counts it.
RGPU_SPARSE_API cusparseStatus_t cusparseCreateBlockedEll(cusparseSpMatDescr_t* d, int64_t rows, int64_t cols,
                                                          int64_t block, int64_t ell_cols, void* ind, void* val,
                                                          cusparseIndexType_t it, cusparseIndexBase_t base,
                                                          cudaDataType type) {
  return makeBlockedEll(d, rows, cols, block, ell_cols, ind, val, it, base, type);
}
RGPU_SPARSE_API cusparseStatus_t cusparseCreateConstBlockedEll(cusparseConstSpMatDescr_t* d, int64_t rows,
                                                               int64_t cols, int64_t block, int64_t ell_cols,
                                                               const void* ind, const void* val,
                                                               cusparseIndexType_t it, cusparseIndexBase_t base,
                                                               cudaDataType type) {
  return makeBlockedEll(d, rows, cols, block, ell_cols, ind, val, it, base, type);
}
#define RGPU_SPARSE_ELL_GET(name, handle_t, ptr_t)                                                              \
  RGPU_SPARSE_API cusparseStatus_t name(handle_t d, int64_t* rows, int64_t* cols, int64_t* block,               \
                                        int64_t* ell_cols, ptr_t* ind, ptr_t* val, cusparseIndexType_t* it,    \
                                        cusparseIndexBase_t* base, cudaDataType* type) {                        \
    if (!d || d->m.format != sp::Format::kBlockedEll || !rows || !cols || !block || !ell_cols || !ind || !val ||  \
        !it || !base || !type)                                                                                  \
      return CUSPARSE_STATUS_INVALID_VALUE;                                                                     \
    *rows = d->m.rows, *cols = d->m.cols, *block = d->m.block, *ell_cols = d->m.ell_cols;                       \
    *ind = reinterpret_cast<ptr_t>(d->m.indices), *val = reinterpret_cast<ptr_t>(d->m.values);                  \
    *it = static_cast<cusparseIndexType_t>(d->m.index_type);                                                    \
    *base = static_cast<cusparseIndexBase_t>(d->m.base), *type = static_cast<cudaDataType>(d->m.value_type);    \
    return CUSPARSE_STATUS_SUCCESS;                                                                             \
  }
RGPU_SPARSE_ELL_GET(cusparseBlockedEllGet, cusparseSpMatDescr_t, void*)
RGPU_SPARSE_ELL_GET(cusparseConstBlockedEllGet, cusparseConstSpMatDescr_t, const void*)
#undef RGPU_SPARSE_ELL_GET
RGPU_SPARSE_API cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t d, int64_t* rows, int64_t* cols,
                                                      int64_t* nnz) {
  if (!d || !rows || !cols || !nnz) return CUSPARSE_STATUS_INVALID_VALUE;
  *rows = d->m.rows, *cols = d->m.cols, *nnz = d->m.nnz;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMatGetFormat(cusparseConstSpMatDescr_t d, cusparseFormat_t* format) {
  if (!d || !format) return CUSPARSE_STATUS_INVALID_VALUE;
  switch (d->m.format) {
    case sp::Format::kCsr: *format = CUSPARSE_FORMAT_CSR; break;
    case sp::Format::kCsc: *format = CUSPARSE_FORMAT_CSC; break;
    case sp::Format::kCoo: *format = CUSPARSE_FORMAT_COO; break;
    case sp::Format::kBlockedEll: *format = CUSPARSE_FORMAT_BLOCKED_ELL; break;
  }
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMatGetIndexBase(cusparseConstSpMatDescr_t d, cusparseIndexBase_t* base) {
  if (!d || !base) return CUSPARSE_STATUS_INVALID_VALUE;
  *base = static_cast<cusparseIndexBase_t>(d->m.base);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMatGetValues(cusparseSpMatDescr_t d, void** values) {
  if (!d || !values) return CUSPARSE_STATUS_INVALID_VALUE;
  *values = reinterpret_cast<void*>(d->m.values);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseConstSpMatGetValues(cusparseConstSpMatDescr_t d, const void** values) {
  if (!d || !values) return CUSPARSE_STATUS_INVALID_VALUE;
  *values = reinterpret_cast<const void*>(d->m.values);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMatSetValues(cusparseSpMatDescr_t d, void* values) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->m.values = p(values);
  return CUSPARSE_STATUS_SUCCESS;
}
// The three arrays of a CSR, CSC or COO matrix, set again.
#define RGPU_SPARSE_SET(name, FMT)                                                                              \
  RGPU_SPARSE_API cusparseStatus_t name(cusparseSpMatDescr_t d, void* offsets, void* indices, void* values) {   \
    if (!d || d->m.format != FMT) return CUSPARSE_STATUS_INVALID_VALUE;                                         \
    d->m.offsets = p(offsets), d->m.indices = p(indices), d->m.values = p(values);                              \
    return CUSPARSE_STATUS_SUCCESS;                                                                             \
  }
RGPU_SPARSE_SET(cusparseCsrSetPointers, sp::Format::kCsr)
RGPU_SPARSE_SET(cusparseCscSetPointers, sp::Format::kCsc)
RGPU_SPARSE_SET(cusparseCooSetPointers, sp::Format::kCoo)
#undef RGPU_SPARSE_SET

#define RGPU_SPARSE_GET(name, handle_t, ptr_t, FMT)                                                              \
  RGPU_SPARSE_API cusparseStatus_t name(handle_t d, int64_t* rows, int64_t* cols, int64_t* nnz, ptr_t* offsets,  \
                                        ptr_t* indices, ptr_t* values, cusparseIndexType_t* offset_type,         \
                                        cusparseIndexType_t* index_type, cusparseIndexBase_t* base,              \
                                        cudaDataType* type) {                                                   \
    return getSparse(d, FMT, rows, cols, nnz, offsets, indices, values, offset_type, index_type, base, type);    \
  }
RGPU_SPARSE_GET(cusparseCsrGet, cusparseSpMatDescr_t, void*, sp::Format::kCsr)
RGPU_SPARSE_GET(cusparseConstCsrGet, cusparseConstSpMatDescr_t, const void*, sp::Format::kCsr)
RGPU_SPARSE_GET(cusparseCscGet, cusparseSpMatDescr_t, void*, sp::Format::kCsc)
RGPU_SPARSE_GET(cusparseConstCscGet, cusparseConstSpMatDescr_t, const void*, sp::Format::kCsc)
#undef RGPU_SPARSE_GET
RGPU_SPARSE_API cusparseStatus_t cusparseCooGet(cusparseSpMatDescr_t d, int64_t* rows, int64_t* cols, int64_t* nnz,
                                                void** ri, void** ci, void** values, cusparseIndexType_t* index_type,
                                                cusparseIndexBase_t* base, cudaDataType* type) {
  return getSparse<void*>(d, sp::Format::kCoo, rows, cols, nnz, ri, ci, values, nullptr, index_type, base, type);
}
RGPU_SPARSE_API cusparseStatus_t cusparseConstCooGet(cusparseConstSpMatDescr_t d, int64_t* rows, int64_t* cols,
                                                     int64_t* nnz, const void** ri, const void** ci,
                                                     const void** values, cusparseIndexType_t* index_type,
                                                     cusparseIndexBase_t* base, cudaDataType* type) {
  return getSparse<const void*>(d, sp::Format::kCoo, rows, cols, nnz, ri, ci, values, nullptr, index_type, base, type);
}

// The fill mode and diagonal type (read by SpSV and SpSM, which rgpu does not
// forward): kept and given back, as cuSPARSE's.
RGPU_SPARSE_API cusparseStatus_t cusparseSpMatSetAttribute(cusparseSpMatDescr_t d, cusparseSpMatAttribute_t attribute,
                                                           void* data, size_t size) {
  if (!d || !data || size != sizeof(int32_t)) return CUSPARSE_STATUS_INVALID_VALUE;
  int32_t v;
  std::memcpy(&v, data, sizeof v);
  switch (attribute) {
    case CUSPARSE_SPMAT_FILL_MODE:
      if (v != CUSPARSE_FILL_MODE_LOWER && v != CUSPARSE_FILL_MODE_UPPER) return CUSPARSE_STATUS_INVALID_VALUE;
      d->fill = v;
      return CUSPARSE_STATUS_SUCCESS;
    case CUSPARSE_SPMAT_DIAG_TYPE:
      if (v != CUSPARSE_DIAG_TYPE_NON_UNIT && v != CUSPARSE_DIAG_TYPE_UNIT) return CUSPARSE_STATUS_INVALID_VALUE;
      d->diag = v;
      return CUSPARSE_STATUS_SUCCESS;
  }
  return CUSPARSE_STATUS_INVALID_VALUE;
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMatGetAttribute(cusparseConstSpMatDescr_t d,
                                                           cusparseSpMatAttribute_t attribute, void* data,
                                                           size_t size) {
  if (!d || !data || size != sizeof(int32_t)) return CUSPARSE_STATUS_INVALID_VALUE;
  int32_t v;
  switch (attribute) {
    case CUSPARSE_SPMAT_FILL_MODE: v = d->fill; break;
    case CUSPARSE_SPMAT_DIAG_TYPE: v = d->diag; break;
    default: return CUSPARSE_STATUS_INVALID_VALUE;
  }
  std::memcpy(data, &v, sizeof v);
  return CUSPARSE_STATUS_SUCCESS;
}

// Dense vectors and matrices.
RGPU_SPARSE_API cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t* d, int64_t size, void* values,
                                                     cudaDataType type) {
  return makeDense(d, size, 1, size > 0 ? size : 1, values, type, CUSPARSE_ORDER_COL, true);
}
RGPU_SPARSE_API cusparseStatus_t cusparseCreateConstDnVec(cusparseConstDnVecDescr_t* d, int64_t size,
                                                          const void* values, cudaDataType type) {
  return makeDense(d, size, 1, size > 0 ? size : 1, values, type, CUSPARSE_ORDER_COL, true);
}
RGPU_SPARSE_API cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseDnVecGetValues(cusparseDnVecDescr_t d, void** values) {
  if (!d || !values) return CUSPARSE_STATUS_INVALID_VALUE;
  *values = reinterpret_cast<void*>(d->m.values);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseConstDnVecGetValues(cusparseConstDnVecDescr_t d, const void** values) {
  if (!d || !values) return CUSPARSE_STATUS_INVALID_VALUE;
  *values = reinterpret_cast<const void*>(d->m.values);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseDnVecGet(cusparseDnVecDescr_t d, int64_t* size, void** values,
                                                  cudaDataType* type) {
  if (!d || !size || !values || !type) return CUSPARSE_STATUS_INVALID_VALUE;
  *size = d->m.rows, *values = reinterpret_cast<void*>(d->m.values), *type = static_cast<cudaDataType>(d->m.value_type);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseConstDnVecGet(cusparseConstDnVecDescr_t d, int64_t* size,
                                                       const void** values, cudaDataType* type) {
  if (!d || !size || !values || !type) return CUSPARSE_STATUS_INVALID_VALUE;
  *size = d->m.rows, *values = reinterpret_cast<const void*>(d->m.values);
  *type = static_cast<cudaDataType>(d->m.value_type);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseDnVecSetValues(cusparseDnVecDescr_t d, void* values) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->m.values = p(values);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* d, int64_t rows, int64_t cols, int64_t ld,
                                                     void* values, cudaDataType type, cusparseOrder_t order) {
  return makeDense(d, rows, cols, ld, values, type, order, false);
}
RGPU_SPARSE_API cusparseStatus_t cusparseCreateConstDnMat(cusparseConstDnMatDescr_t* d, int64_t rows, int64_t cols,
                                                          int64_t ld, const void* values, cudaDataType type,
                                                          cusparseOrder_t order) {
  return makeDense(d, rows, cols, ld, values, type, order, false);
}
RGPU_SPARSE_API cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseDnMatGetValues(cusparseDnMatDescr_t d, void** values) {
  if (!d || !values) return CUSPARSE_STATUS_INVALID_VALUE;
  *values = reinterpret_cast<void*>(d->m.values);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseConstDnMatGetValues(cusparseConstDnMatDescr_t d, const void** values) {
  if (!d || !values) return CUSPARSE_STATUS_INVALID_VALUE;
  *values = reinterpret_cast<const void*>(d->m.values);
  return CUSPARSE_STATUS_SUCCESS;
}
RGPU_SPARSE_API cusparseStatus_t cusparseDnMatGet(cusparseDnMatDescr_t d, int64_t* rows, int64_t* cols, int64_t* ld,
                                                  void** values, cudaDataType* type, cusparseOrder_t* order) {
  return getDense(d, rows, cols, ld, values, type, order);
}
RGPU_SPARSE_API cusparseStatus_t cusparseConstDnMatGet(cusparseConstDnMatDescr_t d, int64_t* rows, int64_t* cols,
                                                       int64_t* ld, const void** values, cudaDataType* type,
                                                       cusparseOrder_t* order) {
  return getDense(d, rows, cols, ld, values, type, order);
}
RGPU_SPARSE_API cusparseStatus_t cusparseDnMatSetValues(cusparseDnMatDescr_t d, void* values) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->m.values = p(values);
  return CUSPARSE_STATUS_SUCCESS;
}

// SpMV and SpMM. A preprocess call is the hint it is: checked, then nothing
// to keep (the next call carries everything).
RGPU_SPARSE_API cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t h, cusparseOperation_t op,
                                                         const void* alpha, cusparseConstSpMatDescr_t A,
                                                         cusparseConstDnVecDescr_t x, const void* beta,
                                                         cusparseDnVecDescr_t y, cudaDataType type,
                                                         cusparseSpMVAlg_t alg, size_t* bufferSize) {
  sp::Args a = spmv(op, A, x, y, type, alg, nullptr, 0);
  return send(h, a, alpha, beta, true, bufferSize, "cusparseSpMV_bufferSize");
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMV_preprocess(cusparseHandle_t h, cusparseOperation_t op,
                                                         const void* alpha, cusparseConstSpMatDescr_t A,
                                                         cusparseConstDnVecDescr_t x, const void* beta,
                                                         cusparseDnVecDescr_t y, cudaDataType type,
                                                         cusparseSpMVAlg_t alg, void*) {
  if (!live(h)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  sp::Args a = spmv(op, A, x, y, type, alg, nullptr, 0);
  return toSparseStatus(sp::check(a), "cusparseSpMV_preprocess", CUSPARSE_STATUS_INVALID_VALUE);
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMV(cusparseHandle_t h, cusparseOperation_t op, const void* alpha,
                                              cusparseConstSpMatDescr_t A, cusparseConstDnVecDescr_t x,
                                              const void* beta, cusparseDnVecDescr_t y, cudaDataType type,
                                              cusparseSpMVAlg_t alg, void* externalBuffer) {
  sp::Args a = spmv(op, A, x, y, type, alg, externalBuffer, kBufferCheckBytes);
  return send(h, a, alpha, beta, false, nullptr, "cusparseSpMV");
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t h, cusparseOperation_t opA,
                                                         cusparseOperation_t opB, const void* alpha,
                                                         cusparseConstSpMatDescr_t A, cusparseConstDnMatDescr_t B,
                                                         const void* beta, cusparseDnMatDescr_t C, cudaDataType type,
                                                         cusparseSpMMAlg_t alg, size_t* bufferSize) {
  sp::Args a = spmm(opA, opB, A, B, C, type, alg, nullptr, 0);
  return send(h, a, alpha, beta, true, bufferSize, "cusparseSpMM_bufferSize");
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMM_preprocess(cusparseHandle_t h, cusparseOperation_t opA,
                                                         cusparseOperation_t opB, const void*,
                                                         cusparseConstSpMatDescr_t A, cusparseConstDnMatDescr_t B,
                                                         const void*, cusparseDnMatDescr_t C, cudaDataType type,
                                                         cusparseSpMMAlg_t alg, void*) {
  if (!live(h)) return CUSPARSE_STATUS_NOT_INITIALIZED;
  sp::Args a = spmm(opA, opB, A, B, C, type, alg, nullptr, 0);
  return toSparseStatus(sp::check(a), "cusparseSpMM_preprocess", CUSPARSE_STATUS_INVALID_VALUE);
}
RGPU_SPARSE_API cusparseStatus_t cusparseSpMM(cusparseHandle_t h, cusparseOperation_t opA, cusparseOperation_t opB,
                                              const void* alpha, cusparseConstSpMatDescr_t A,
                                              cusparseConstDnMatDescr_t B, const void* beta, cusparseDnMatDescr_t C,
                                              cudaDataType type, cusparseSpMMAlg_t alg, void* externalBuffer) {
  sp::Args a = spmm(opA, opB, A, B, C, type, alg, externalBuffer, kBufferCheckBytes);
  return send(h, a, alpha, beta, false, nullptr, "cusparseSpMM");
}

}  // extern "C"
