#include "client/blas/blas_client.h"

#include <cuda_runtime_api.h>

namespace rgpu::client::blas {

const ExportTable* table() {
  static const ExportTable* const t = []() -> const ExportTable* {
    const void* p = nullptr;
    if (cudaGetExportTable(&p, &kExportTableId) != cudaSuccess || !p) {
      common::initLogging("rgpu-client", "warn");
      RGPU_LOG_ERROR("rgpu's cuBLAS libraries need rgpu's libcudart.so.13, and this process loaded another one: run "
                     "the program with rgpu-run, or put rgpu's library directory first in LD_LIBRARY_PATH");
      return nullptr;
    }
    auto* table = static_cast<const ExportTable*>(p);
    if (table->size < sizeof(ExportTable)) {
      common::initLogging("rgpu-client", "warn");
      RGPU_LOG_ERROR("rgpu's cuBLAS libraries are newer than the libcudart.so.13 this process loaded: install both "
                     "from one rgpu release");
      return nullptr;
    }
    (void)table->ready();  // reads client.toml: the log level below is the configured one
    common::initLogging("rgpu-client", table->logLevel());
    return table;
  }();
  return t;
}

const char* statusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* statusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the feature required is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the license check failed";
  }
  return "unknown error";
}

cublasStatus_t toBlasStatus(const Status& s, const char* call, bool connecting) {
  cublasStatus_t st;
  switch (err::isBlasStatus(s.code()) ? -1 : s.code()) {
    case -1: st = static_cast<cublasStatus_t>(s.code() - err::kBlasStatusBase); break;  // the server's cuBLAS said so
    case err::kSuccess: return CUBLAS_STATUS_SUCCESS;
    case err::kInvalidValue: case err::kInvalidResourceHandle: case err::kInvalidDevice: st = CUBLAS_STATUS_INVALID_VALUE; break;
    case err::kNotSupported: st = CUBLAS_STATUS_NOT_SUPPORTED; break;
    case err::kMemoryAllocation: st = CUBLAS_STATUS_ALLOC_FAILED; break;
    default: st = connecting ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_EXECUTION_FAILED; break;
  }
  common::logOnce(std::string("cublas:") + call + ":" + s.message(),
                  std::string(call) + ": " + s.message() + " (" + statusName(st) + ")");
  return st;
}

cublasStatus_t unsupported(const char* name, const char* why) {
  common::logOnce(std::string("unsupported:") + name,
                  std::string(name) + " is not supported by rgpu" + (why ? std::string(" (") + why + ")" : "") +
                      " (returns CUBLAS_STATUS_NOT_SUPPORTED)");
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t openSession(const char* call, int* device) {
  const ExportTable* t = table();
  if (!t) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Status s = t->ready(); !s) return toBlasStatus(s, call, true);
  *device = t->currentDevice();
  return CUBLAS_STATUS_SUCCESS;
}

Status setStream(wire::StreamRef::Builder b, const ExportTable& t, cudaStream_t stream, int device) {
  uint32_t id = 0;
  int dev = device;
  RGPU_TRY(t.stream(stream, &id, &dev));
  b.setId(id);
  b.setDevice(id == 0 ? device : dev);  // stream 0: the handle's device's legacy stream
  return Status::ok();
}

}  // namespace rgpu::client::blas

// The generated stubs of unimplemented names (gen_blas_stubs.cmake) land here.
extern "C" int rgpu_blas_unsupported(const char* name) { return rgpu::client::blas::unsupported(name); }
