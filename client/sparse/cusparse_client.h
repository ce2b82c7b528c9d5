// What rgpu's libcusparse.so.12 keeps on the client (cusparse_api.cc,
// cusparse_spgemm.cc): handles and descriptors are host objects of the
// program's process; a call travels as one wire::Sparse request built by
// submit(), checked here as cuSPARSE checks it (common::sparse::check) and
// again by the server against the session's memory.
#pragma once

#include <cusparse.h>

#include <cstring>
#include <string>

#include "client/blas/blas_client.h"
#include "common/log.h"
#include "common/sparse_args.h"

namespace sp = rgpu::common::sparse;

struct cusparseContext {
  static constexpr uint32_t kMagic = 0x53505253;  // "SPRS"
  uint32_t magic = kMagic;
  int device = 0;
  cudaStream_t stream = nullptr;
  cusparsePointerMode_t mode = CUSPARSE_POINTER_MODE_HOST;
};
struct cusparseSpMatDescr {
  sp::SpMat m;
  int32_t fill = CUSPARSE_FILL_MODE_LOWER, diag = CUSPARSE_DIAG_TYPE_NON_UNIT;  // (attributes)
};
struct cusparseDnVecDescr {
  sp::DnMat m;
};
struct cusparseDnMatDescr {
  sp::DnMat m;
};
struct cusparseMatDescr {
  cusparseMatrixType_t type = CUSPARSE_MATRIX_TYPE_GENERAL;
  cusparseFillMode_t fill = CUSPARSE_FILL_MODE_LOWER;
  cusparseDiagType_t diag = CUSPARSE_DIAG_TYPE_NON_UNIT;
  cusparseIndexBase_t base = CUSPARSE_INDEX_BASE_ZERO;
};

namespace rgpu::client::sparse {

using rgpu::Status;
namespace err = rgpu::err;

inline bool live(cusparseHandle_t h) { return h && h->magic == cusparseContext::kMagic; }

inline cusparseStatus_t toSparseStatus(const Status& s, const char* call, cusparseStatus_t otherwise) {
  if (s) return CUSPARSE_STATUS_SUCCESS;
  rgpu::common::logOnce(std::string("cusparse:") + call + ":" + s.message(), std::string(call) + ": " + s.message());
  switch (s.code()) {
    case err::kInvalidValue: return CUSPARSE_STATUS_INVALID_VALUE;
    case err::kMemoryAllocation: return CUSPARSE_STATUS_ALLOC_FAILED;
    case err::kNotSupported: return CUSPARSE_STATUS_NOT_SUPPORTED;
    default: return otherwise;
  }
}

template <typename F>
cusparseStatus_t guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return CUSPARSE_STATUS_ALLOC_FAILED;
  } catch (...) {
    return toSparseStatus(Status(err::kUnknown, "internal error"), call, CUSPARSE_STATUS_INTERNAL_ERROR);
  }
}

inline uint64_t p(const void* x) { return reinterpret_cast<uint64_t>(x); }

inline sp::Scalar scalar(cusparseHandle_t h, const void* v, int32_t type) {
  sp::Scalar s;
  s.device = h->mode == CUSPARSE_POINTER_MODE_DEVICE;
  if (s.device) s.ptr = p(v);
  else if (v && sp::knownType(type)) std::memcpy(s.bytes, v, sp::elementBytes(type));
  return s;
}

// One call `a` (its scalars set), checked, then posted in the handle's
// stream order, or (`size`) sent synchronously with its answer in *bytes.
cusparseStatus_t submit(cusparseHandle_t h, sp::Args& a, bool size, size_t* bytes, const char* call);

}  // namespace rgpu::client::sparse
