// rgpu's libcublasLt.so.13: cuBLASLt forwarded to the session's server.
// Implemented: handles, version and status strings, matmul descriptors,
// matrix layouts and preferences with their attributes (kept in the client, in
// the semi-opaque storage NVIDIA's headers give them, so the *Init forms work
// on the caller's memory), cublasLtMatmulAlgoGetHeuristic (asks the server) and
// cublasLtMatmul (queued in stream order) for f32, f16, bf16 and f64 with the
// bias, ReLU and GELU epilogues and their gradient forms. Every other exported
// name is a stub returning CUBLAS_STATUS_NOT_SUPPORTED with one log line.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>

#include "client/blas/blas_client.h"
#include "common/blas_types.h"

namespace cb = rgpu::common::blas;
using rgpu::Status;
using rgpu::client::blas::addr;
using rgpu::client::blas::guarded;
using rgpu::client::blas::setScalar;
using rgpu::client::blas::table;
using rgpu::client::blas::toBlasStatus;
namespace wire = rgpu::wire;

struct cublasLtContext {
  static constexpr uint64_t kMagic = 0x746c'7361'6c62'7572ull;  // "rublaslt"
  uint64_t magic = kMagic;
  int device = 0;
};

namespace {

constexpr uint32_t kDescMagic = 0x6c746d64;    // "dmtl"
constexpr uint32_t kLayoutMagic = 0x6c746c79;  // "ylfl"
constexpr uint32_t kPrefMagic = 0x6c747072;    // "rptl"

// A matmul descriptor, inside cublasLtMatmulDescOpaque_t.
struct Desc {
  uint32_t magic;
  int32_t compute, scale_type, pointer_mode, trans_a, trans_b, trans_c, fill_mode;
  uint32_t epilogue;
  int32_t sm_count, aux_type, bias_type;
  int32_t a_scale_mode, b_scale_mode, c_scale_mode, d_scale_mode, aux_scale_mode, d_out_scale_mode;
  int8_t fast_accum;
  uint64_t bias, aux, a_scale, b_scale, c_scale, d_scale, amax_d, aux_scale, aux_amax, d_out_scale, emulation;
  int64_t bias_batch_stride, aux_ld, aux_batch_stride, alpha_vector_batch_stride;
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));

// A matrix layout, inside cublasLtMatrixLayoutOpaque_t.
struct Layout {
  uint32_t magic;
  uint32_t type;
  int32_t order, batch;
  uint64_t rows, cols;
  int64_t ld, batch_stride, plane_offset;
  uint32_t batch_mode;
};
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));

// Preferences, inside cublasLtMatmulPreferenceOpaque_t.
struct Pref {
  uint32_t magic;
  uint32_t search_mode, reduction_mask, align_a, align_b, align_c, align_d;
  float max_waves;
  uint64_t max_workspace, impl_mask;
};
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

Desc* desc(cublasLtMatmulDesc_t d) {
  auto* p = reinterpret_cast<Desc*>(d);
  return p && p->magic == kDescMagic ? p : nullptr;
}
Layout* layout(cublasLtMatrixLayout_t l) {
  auto* p = reinterpret_cast<Layout*>(l);
  return p && p->magic == kLayoutMagic ? p : nullptr;
}
Pref* pref(cublasLtMatmulPreference_t p) {
  auto* q = reinterpret_cast<Pref*>(p);
  return q && q->magic == kPrefMagic ? q : nullptr;
}

// One attribute: where it lives in its descriptor and how many bytes it is.
struct Field {
  int attr;
  size_t offset, size;
};
#define FIELD(ATTR, S, MEMBER) Field{ATTR, offsetof(S, MEMBER), sizeof(S::MEMBER)}

const Field kDescFields[] = {
    FIELD(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, Desc, compute),
    FIELD(CUBLASLT_MATMUL_DESC_SCALE_TYPE, Desc, scale_type),
    FIELD(CUBLASLT_MATMUL_DESC_POINTER_MODE, Desc, pointer_mode),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSA, Desc, trans_a),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSB, Desc, trans_b),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSC, Desc, trans_c),
    FIELD(CUBLASLT_MATMUL_DESC_FILL_MODE, Desc, fill_mode),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE, Desc, epilogue),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_POINTER, Desc, bias),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, Desc, bias_batch_stride),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, Desc, aux),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, Desc, aux_ld),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, Desc, aux_batch_stride),
    FIELD(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, Desc, alpha_vector_batch_stride),
    FIELD(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, Desc, sm_count),
    FIELD(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, Desc, a_scale),
    FIELD(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, Desc, b_scale),
    FIELD(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, Desc, c_scale),
    FIELD(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, Desc, d_scale),
    FIELD(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, Desc, amax_d),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, Desc, aux_type),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, Desc, aux_scale),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, Desc, aux_amax),
    FIELD(CUBLASLT_MATMUL_DESC_FAST_ACCUM, Desc, fast_accum),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, Desc, bias_type),
    FIELD(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, Desc, a_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, Desc, b_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_C_SCALE_MODE, Desc, c_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_D_SCALE_MODE, Desc, d_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, Desc, aux_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, Desc, d_out_scale),
    FIELD(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, Desc, d_out_scale_mode),
    FIELD(CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, Desc, emulation),
};

const Field kLayoutFields[] = {
    FIELD(CUBLASLT_MATRIX_LAYOUT_TYPE, Layout, type),
    FIELD(CUBLASLT_MATRIX_LAYOUT_ORDER, Layout, order),
    FIELD(CUBLASLT_MATRIX_LAYOUT_ROWS, Layout, rows),
    FIELD(CUBLASLT_MATRIX_LAYOUT_COLS, Layout, cols),
    FIELD(CUBLASLT_MATRIX_LAYOUT_LD, Layout, ld),
    FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, Layout, batch),
    FIELD(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, Layout, batch_stride),
    FIELD(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, Layout, plane_offset),
    FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, Layout, batch_mode),
};

const Field kPrefFields[] = {
    FIELD(CUBLASLT_MATMUL_PREF_SEARCH_MODE, Pref, search_mode),
    FIELD(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, Pref, max_workspace),
    FIELD(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, Pref, reduction_mask),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, Pref, align_a),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, Pref, align_b),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, Pref, align_c),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, Pref, align_d),
    FIELD(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, Pref, max_waves),
    FIELD(CUBLASLT_MATMUL_PREF_IMPL_MASK, Pref, impl_mask),
};

template <size_t N>
const Field* find(const Field (&fields)[N], int attr) {
  for (const Field& f : fields)
    if (f.attr == attr) return &f;
  return nullptr;
}

// cuBLASLt's rule: the buffer must be exactly the attribute's size.
template <size_t N>
cublasStatus_t setField(const Field (&fields)[N], void* obj, int attr, const void* buf, size_t size) {
  const Field* f = find(fields, attr);
  if (!f) return rgpu::client::blas::unsupported("cublasLt*SetAttribute", "an attribute rgpu does not know");
  if (!buf || size != f->size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(static_cast<char*>(obj) + f->offset, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

template <size_t N>
cublasStatus_t getField(const Field (&fields)[N], const void* obj, int attr, void* buf, size_t size, size_t* written) {
  const Field* f = find(fields, attr);
  if (!f) return rgpu::client::blas::unsupported("cublasLt*GetAttribute", "an attribute rgpu does not know");
  if (size == 0 && written) {  // the size query
    *written = f->size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || size < f->size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, static_cast<const char*>(obj) + f->offset, f->size);
  if (written) *written = f->size;
  return CUBLAS_STATUS_SUCCESS;
}

void initDesc(cublasLtMatmulDescOpaque_t* o, cublasComputeType_t compute, cudaDataType_t scale) {
  std::memset(o, 0, sizeof(*o));
  auto* d = reinterpret_cast<Desc*>(o);
  d->magic = kDescMagic;
  d->compute = compute;
  d->scale_type = scale;
  d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  d->trans_a = d->trans_b = d->trans_c = CUBLAS_OP_N;
  d->fill_mode = CUBLAS_FILL_MODE_FULL;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->aux_type = d->bias_type = -1;  // as D
}

void initLayout(cublasLtMatrixLayoutOpaque_t* o, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  std::memset(o, 0, sizeof(*o));
  auto* l = reinterpret_cast<Layout*>(o);
  l->magic = kLayoutMagic;
  l->type = type;
  l->order = CUBLASLT_ORDER_COL;
  l->batch = 1;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
}

void initPref(cublasLtMatmulPreferenceOpaque_t* o) {
  std::memset(o, 0, sizeof(*o));
  auto* p = reinterpret_cast<Pref*>(o);
  p->magic = kPrefMagic;
  p->reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  p->align_a = p->align_b = p->align_c = p->align_d = 256;
  p->impl_mask = ~uint64_t{0};
}

// Create, Init_internal and Destroy are alike for the three descriptor kinds:
// `fill` initialises one in place; `contents` is null when the magic is wrong.
template <class Opaque, class Fill>
cublasStatus_t createDescriptor(Opaque** out, Fill fill) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  auto* o = new Opaque;
  fill(o);
  *out = o;
  return CUBLAS_STATUS_SUCCESS;
}
template <class Opaque, class Fill>
cublasStatus_t initDescriptor(Opaque* o, size_t size, Fill fill) {
  if (!o || size < sizeof(Opaque)) return CUBLAS_STATUS_INVALID_VALUE;
  fill(o);
  return CUBLAS_STATUS_SUCCESS;
}
template <class Opaque, class Contents>
cublasStatus_t destroyDescriptor(Opaque* o, Contents* contents) {
  if (!contents) return CUBLAS_STATUS_INVALID_VALUE;
  contents->magic = 0;
  delete o;
  return CUBLAS_STATUS_SUCCESS;
}

bool valid(cublasLtHandle_t h) { return h && h->magic == cublasLtContext::kMagic; }

void setMatrix(wire::LtMatrix::Builder b, const Layout& l, const void* ptr) {
  b.setPtr(addr(ptr));
  b.setType(static_cast<int32_t>(l.type));
  b.setRows(l.rows);
  b.setCols(l.cols);
  b.setLd(l.ld);
  b.setOrder(l.order);
  b.setBatchCount(l.batch);
  b.setBatchStride(l.batch_stride);
}

// Fills an ltMatmul/ltHeuristic request from the descriptors; the checks
// cuBLASLt makes before any work (INVALID_VALUE, NOT_SUPPORTED).
cublasStatus_t describe(const char* name, wire::LtMatmul::Builder m, const Desc& d, const Layout& a, const Layout& b,
                        const Layout& c, const Layout& dl, const void* alpha, const void* A, const void* B,
                        const void* beta, const void* C, void* D) {
  if (d.a_scale || d.b_scale || d.c_scale || d.d_scale || d.amax_d || d.aux_scale || d.aux_amax || d.d_out_scale ||
      d.a_scale_mode || d.b_scale_mode || d.c_scale_mode || d.d_scale_mode || d.aux_scale_mode || d.d_out_scale_mode)
    return rgpu::client::blas::unsupported(name, "FP8 scaling");
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST && d.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    return rgpu::client::blas::unsupported(name, "vector pointer modes");
  if (d.trans_c != CUBLAS_OP_N) return CUBLAS_STATUS_INVALID_VALUE;
  for (const Layout* l : {&a, &b, &c, &dl}) {
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
      return rgpu::client::blas::unsupported(name, "tiled matrix orders");
    if (l->plane_offset || l->batch_mode) return rgpu::client::blas::unsupported(name, "planar and pointer-array batches");
    if (l->batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!cb::gemmSupported(static_cast<int32_t>(a.type), static_cast<int32_t>(b.type), static_cast<int32_t>(c.type),
                         d.compute, /*complex_ok=*/false) ||
      dl.type != c.type || d.scale_type != cb::scalarType(d.compute))
    return rgpu::client::blas::unsupported(name, "this combination of matrix, compute and scale types");
  bool device = d.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  size_t scalar = cb::elementSize(d.scale_type);
  m.setComputeType(d.compute);
  m.setScaleType(d.scale_type);
  m.setPointerMode(d.pointer_mode);
  m.setTransA(d.trans_a);
  m.setTransB(d.trans_b);
  m.setEpilogue(d.epilogue);
  m.setBias(d.bias);
  m.setBiasType(d.bias_type < 0 ? static_cast<int32_t>(dl.type) : d.bias_type);
  m.setBiasBatchStride(d.bias_batch_stride);
  m.setAux(d.aux);
  m.setAuxLd(d.aux_ld);
  m.setAuxBatchStride(d.aux_batch_stride);
  m.setAuxType(d.aux_type < 0 ? static_cast<int32_t>(dl.type) : d.aux_type);
  if (alpha) setScalar(m.initAlpha(), alpha, scalar, device);
  if (beta) setScalar(m.initBeta(), beta, scalar, device);
  setMatrix(m.initA(), a, A);
  setMatrix(m.initB(), b, B);
  setMatrix(m.initC(), c, C);
  setMatrix(m.initD(), dl, D);
  // The problem must be a matrix product: op(A) m x k, op(B) k x n, C and D m x n.
  auto rows = [](const Layout& l, int32_t t) { return t == CUBLAS_OP_N ? l.rows : l.cols; };
  auto cols = [](const Layout& l, int32_t t) { return t == CUBLAS_OP_N ? l.cols : l.rows; };
  if (rows(a, d.trans_a) != dl.rows || cols(b, d.trans_b) != dl.cols || cols(a, d.trans_a) != rows(b, d.trans_b) ||
      c.rows != dl.rows || c.cols != dl.cols)
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

std::atomic<size_t> g_cache_capacity{8192};
std::atomic<cublasLtLoggerCallback_t> g_logger{nullptr};

}  // namespace

#define API RGPU_BLAS_API
#define RUN RGPU_BLAS_RUN

// ---- handles, versions, strings ------------------------------------------------------

API(cublasLtCreate, cublasLtHandle_t* handle) {
  RUN(cublasLtCreate, return rgpu::client::blas::createHandle("cublasLtCreate", handle));
}

API(cublasLtDestroy, cublasLtHandle_t handle) { RUN(cublasLtDestroy, return rgpu::client::blas::destroyHandle(handle)); }

RGPU_BLAS_EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
RGPU_BLAS_EXPORT size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }
RGPU_BLAS_EXPORT const char* cublasLtGetStatusName(cublasStatus_t status) { return rgpu::client::blas::ltStatusName(status); }
RGPU_BLAS_EXPORT const char* cublasLtGetStatusString(cublasStatus_t status) {
  return rgpu::client::blas::ltStatusString(status);
}

API(cublasLtGetProperty, libraryPropertyType type, int* value) {
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

API(cublasLtHeuristicsCacheGetCapacity, size_t* capacity) {
  if (!capacity) return CUBLAS_STATUS_INVALID_VALUE;
  *capacity = g_cache_capacity.load();
  return CUBLAS_STATUS_SUCCESS;
}

API(cublasLtHeuristicsCacheSetCapacity, size_t capacity) {
  g_cache_capacity.store(capacity);  // the server's library keeps its own cache
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLASLt's own API log: rgpu logs through RGPU_LOG_LEVEL / client.toml instead.
API(cublasLtLoggerSetCallback, cublasLtLoggerCallback_t callback) {
  g_logger.store(callback);
  return CUBLAS_STATUS_SUCCESS;
}
API(cublasLtLoggerSetFile, FILE* file) { return CUBLAS_STATUS_SUCCESS; }
API(cublasLtLoggerOpenFile, const char* logFile) { return CUBLAS_STATUS_SUCCESS; }
API(cublasLtLoggerSetLevel, int level) { return level < 0 || level > 5 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS; }
API(cublasLtLoggerSetMask, int mask) { return CUBLAS_STATUS_SUCCESS; }
API(cublasLtLoggerForceDisable) { return CUBLAS_STATUS_SUCCESS; }

// ---- descriptors ------------------------------------------------------------------

API(cublasLtMatmulDescCreate, cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
    cudaDataType_t scaleType) {
  RUN(cublasLtMatmulDescCreate,
      return createDescriptor(matmulDesc, [&](auto* o) { initDesc(o, computeType, scaleType); }));
}

API(cublasLtMatmulDescInit_internal, cublasLtMatmulDesc_t matmulDesc, size_t size, cublasComputeType_t computeType,
    cudaDataType_t scaleType) {
  return initDescriptor(matmulDesc, size, [&](auto* o) { initDesc(o, computeType, scaleType); });
}

API(cublasLtMatmulDescDestroy, cublasLtMatmulDesc_t matmulDesc) { return destroyDescriptor(matmulDesc, desc(matmulDesc)); }

API(cublasLtMatmulDescSetAttribute, cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
    const void* buf, size_t sizeInBytes) {
  Desc* d = desc(matmulDesc);
  return d ? setField(kDescFields, d, attr, buf, sizeInBytes) : CUBLAS_STATUS_INVALID_VALUE;
}

API(cublasLtMatmulDescGetAttribute, cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, void* buf,
    size_t sizeInBytes, size_t* sizeWritten) {
  Desc* d = desc(matmulDesc);
  return d ? getField(kDescFields, d, attr, buf, sizeInBytes, sizeWritten) : CUBLAS_STATUS_INVALID_VALUE;
}

API(cublasLtMatrixLayoutCreate, cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows, uint64_t cols,
    int64_t ld) {
  RUN(cublasLtMatrixLayoutCreate,
      return createDescriptor(matLayout, [&](auto* o) { initLayout(o, type, rows, cols, ld); }));
}

API(cublasLtMatrixLayoutInit_internal, cublasLtMatrixLayout_t matLayout, size_t size, cudaDataType type, uint64_t rows,
    uint64_t cols, int64_t ld) {
  return initDescriptor(matLayout, size, [&](auto* o) { initLayout(o, type, rows, cols, ld); });
}

API(cublasLtMatrixLayoutDestroy, const cublasLtMatrixLayout_t matLayout) {
  return destroyDescriptor(matLayout, layout(matLayout));
}

API(cublasLtMatrixLayoutSetAttribute, cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
    const void* buf, size_t sizeInBytes) {
  Layout* l = layout(matLayout);
  return l ? setField(kLayoutFields, l, attr, buf, sizeInBytes) : CUBLAS_STATUS_INVALID_VALUE;
}

API(cublasLtMatrixLayoutGetAttribute, cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, void* buf,
    size_t sizeInBytes, size_t* sizeWritten) {
  Layout* l = layout(matLayout);
  return l ? getField(kLayoutFields, l, attr, buf, sizeInBytes, sizeWritten) : CUBLAS_STATUS_INVALID_VALUE;
}

API(cublasLtMatmulPreferenceCreate, cublasLtMatmulPreference_t* p) {
  RUN(cublasLtMatmulPreferenceCreate, return createDescriptor(p, initPref));
}

API(cublasLtMatmulPreferenceInit_internal, cublasLtMatmulPreference_t p, size_t size) {
  return initDescriptor(p, size, initPref);
}

API(cublasLtMatmulPreferenceDestroy, cublasLtMatmulPreference_t p) { return destroyDescriptor(p, pref(p)); }

API(cublasLtMatmulPreferenceSetAttribute, cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
    const void* buf, size_t sizeInBytes) {
  Pref* q = pref(p);
  return q ? setField(kPrefFields, q, attr, buf, sizeInBytes) : CUBLAS_STATUS_INVALID_VALUE;
}

API(cublasLtMatmulPreferenceGetAttribute, cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
    void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  Pref* q = pref(p);
  return q ? getField(kPrefFields, q, attr, buf, sizeInBytes, sizeWritten) : CUBLAS_STATUS_INVALID_VALUE;
}

// ---- heuristics and matmul ------------------------------------------------------------

API(cublasLtMatmulAlgoGetHeuristic, cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  RUN(cublasLtMatmulAlgoGetHeuristic, {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    Desc* d = desc(operationDesc);
    Layout *a = layout(Adesc), *b = layout(Bdesc), *c = layout(Cdesc), *dl = layout(Ddesc);
    Pref* p = pref(preference);
    if (!d || !a || !b || !c || !dl || !p || requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount)
      return CUBLAS_STATUS_INVALID_VALUE;
    const rgpu::client::ExportTable* t = table();
    if (!t) return CUBLAS_STATUS_NOT_INITIALIZED;
    capnp::MallocMessageBuilder msg(512);
    auto m = msg.initRoot<wire::Request>().initLtHeuristic();
    if (Status s = rgpu::client::blas::setStream(m.initStream(), *t, nullptr, handle->device); !s)
      return toBlasStatus(s, "cublasLtMatmulAlgoGetHeuristic");
    if (cublasStatus_t st = describe("cublasLtMatmulAlgoGetHeuristic", m, *d, *a, *b, *c, *dl, nullptr, nullptr,
                                     nullptr, nullptr, nullptr, nullptr);
        st != CUBLAS_STATUS_SUCCESS)
      return st;
    m.setRequestedAlgos(static_cast<uint32_t>(requestedAlgoCount));
    m.setMaxWorkspace(p->max_workspace);
    auto r = t->call(msg, nullptr, 0);
    if (!r) return toBlasStatus(r.status(), "cublasLtMatmulAlgoGetHeuristic");
    auto algos = r->reader().getLtAlgos();
    int n = 0;
    for (auto algo : algos) {
      if (n >= requestedAlgoCount) break;
      cublasLtMatmulHeuristicResult_t& out = heuristicResultsArray[n++];
      std::memset(&out, 0, sizeof out);
      auto bytes = algo.getAlgo();
      std::memcpy(&out.algo, bytes.begin(), std::min(bytes.size(), sizeof out.algo));
      out.workspaceSize = algo.getWorkspaceSize();
      out.state = CUBLAS_STATUS_SUCCESS;
      out.wavesCount = algo.getWavesCount();
    }
    *returnAlgoCount = n;
    return n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;  // as cuBLASLt: no algorithm fits
  });
}

API(cublasLtMatmul, cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A,
    cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
    cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
    void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  RUN(cublasLtMatmul, {
    if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    Desc* d = desc(computeDesc);
    Layout *a = layout(Adesc), *b = layout(Bdesc), *c = layout(Cdesc), *dl = layout(Ddesc);
    if (!d || !a || !b || !c || !dl || !alpha || !beta || (!workspace && workspaceSizeInBytes))
      return CUBLAS_STATUS_INVALID_VALUE;
    const rgpu::client::ExportTable* t = table();
    if (!t) return CUBLAS_STATUS_NOT_INITIALIZED;
    capnp::MallocMessageBuilder msg(512);
    auto m = msg.initRoot<wire::Request>().initLtMatmul();
    if (Status s = rgpu::client::blas::setStream(m.initStream(), *t, stream, handle->device); !s)
      return toBlasStatus(s, "cublasLtMatmul");
    if (cublasStatus_t st = describe("cublasLtMatmul", m, *d, *a, *b, *c, *dl, alpha, A, B, beta, C, D);
        st != CUBLAS_STATUS_SUCCESS)
      return st;
    m.setWorkspace(addr(workspace));
    m.setWorkspaceSize(workspaceSizeInBytes);
    if (algo) m.setAlgo(kj::arrayPtr(reinterpret_cast<const kj::byte*>(algo), sizeof *algo));
    if (dl->rows == 0 || dl->cols == 0) return CUBLAS_STATUS_SUCCESS;
    return toBlasStatus(t->post(msg), "cublasLtMatmul");
  });
}
