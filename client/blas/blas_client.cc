#include "client/blas/blas_client.h"

#include <cuda_runtime_api.h>

#include "client/error_table.h"

namespace rgpu::client::blas {

const ExportTable* table() {
  static const ExportTable* const t = []() -> const ExportTable* {
    const void* p = nullptr;
    if (cudaGetExportTable(&p, &kExportTableId) != cudaSuccess || !p) {
      common::initLogging("rgpu-client", "warn");
      RGPU_LOG_ERROR("rgpu's math libraries (cuBLAS, cuRAND, cuFFT, cuSOLVER, cuSPARSE, cuDNN) need rgpu's "
                     "libcudart.so.13, and this process loaded another one: run the program with rgpu-run, or put "
                     "rgpu's library directory first in LD_LIBRARY_PATH");
      return nullptr;
    }
    auto* table = static_cast<const ExportTable*>(p);
    if (table->size < sizeof(ExportTable)) {
      common::initLogging("rgpu-client", "warn");
      RGPU_LOG_ERROR("rgpu's math libraries are newer than the libcudart.so.13 this process loaded: "
                     "install them from one rgpu release");
      return nullptr;
    }
    (void)table->ready();  // reads client.toml: the log level below is the configured one
    common::initLogging("rgpu-client", table->logLevel());
    return table;
  }();
  return t;
}

namespace {
// NVIDIA's names and texts: kCublas and kCublasLt, generated from its
// libcublas.so.13 and libcublasLt.so.13 (client/gen_error_table.cc).
#include "cublas_status_table.inc"
#include "cublaslt_status_table.inc"
}  // namespace

const char* statusName(cublasStatus_t s) { return errorName(kCublas, s); }
const char* statusString(cublasStatus_t s) { return errorText(kCublas, s); }
const char* ltStatusName(cublasStatus_t s) { return errorName(kCublasLt, s); }
const char* ltStatusString(cublasStatus_t s) { return errorText(kCublasLt, s); }

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
