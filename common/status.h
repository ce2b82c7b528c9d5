// Errors as values.
//
// `Status` carries a CUDA runtime error code (the numbering of cudaError_t, so it
// crosses the wire and the C ABI unchanged) and a human-readable message.
// `Result<T>` is a T or a non-ok Status. Neither throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace rgpu {

// The cudaError_t values the non-CUDA parts of rgpu produce. Mirrors
// driver_types.h (CUDA 13) so common/ and server/ need no CUDA headers.
namespace err {
inline constexpr int kSuccess = 0;
inline constexpr int kInvalidValue = 1;
inline constexpr int kMemoryAllocation = 2;
inline constexpr int kInitializationError = 3;
inline constexpr int kCudartUnloading = 4;
inline constexpr int kInvalidConfiguration = 9;
inline constexpr int kUnsupportedLimit = 215;
inline constexpr int kInvalidPitchValue = 12;
inline constexpr int kInvalidSymbol = 13;
inline constexpr int kInvalidDevicePointer = 17;
inline constexpr int kInvalidChannelDescriptor = 20;
inline constexpr int kInvalidFilterSetting = 26;
inline constexpr int kInvalidNormSetting = 27;
inline constexpr int kInvalidMemcpyDirection = 21;
inline constexpr int kInsufficientDriver = 35;
inline constexpr int kNoDevice = 100;
inline constexpr int kInvalidDevice = 101;
inline constexpr int kDevicesUnavailable = 46;
inline constexpr int kInvalidKernelImage = 200;
inline constexpr int kInvalidSource = 300;
inline constexpr int kFileNotFound = 301;
inline constexpr int kInvalidResourceHandle = 400;
inline constexpr int kNotFound = 500;
inline constexpr int kNotReady = 600;
inline constexpr int kIllegalAddress = 700;
inline constexpr int kLaunchOutOfResources = 701;
inline constexpr int kLaunchTimeout = 702;
inline constexpr int kLaunchFailure = 719;
inline constexpr int kCooperativeLaunchTooLarge = 720;
inline constexpr int kInvalidClusterSize = 912;
inline constexpr int kNotPermitted = 800;
inline constexpr int kNotSupported = 801;
inline constexpr int kIllegalState = 401;
// Stream capture and graphs (cudaErrorStreamCapture*, cudaErrorGraphExecUpdateFailure).
inline constexpr int kStreamCaptureUnsupported = 900;
inline constexpr int kStreamCaptureInvalidated = 901;
inline constexpr int kStreamCaptureMerge = 902;
inline constexpr int kStreamCaptureUnmatched = 903;
inline constexpr int kStreamCaptureUnjoined = 904;
inline constexpr int kStreamCaptureIsolation = 905;
inline constexpr int kStreamCaptureImplicit = 906;
inline constexpr int kCapturedEvent = 907;
inline constexpr int kStreamCaptureWrongThread = 908;
inline constexpr int kGraphExecUpdateFailure = 910;
inline constexpr int kSystemNotReady = 802;
inline constexpr int kInvalidDeviceFunction = 98;
inline constexpr int kUnknown = 999;

// Kernel faults that leave a GPU context unusable: every later call of the
// process fails with the same error (illegal address, assert, illegal
// instruction, misaligned address, launch failure, a kernel stopped by the
// watchdog).
inline bool isSticky(int code) { return code == 700 || code == 702 || code == 710 || code == 715 || code == 716 || code == 719; }

// A cuBLAS status travels inside rgpu as kBlasStatusBase + the cublasStatus_t
// (never a cudaError_t), so rgpu's cuBLAS hands the program the exact status.
// On the wire a reply's error is then blasCudaError() — a CUDA error that
// stands for it and is never sticky: a failed BLAS call is the call's failure,
// not the context's — and the reply's blasStatus is the status itself.
inline constexpr int kBlasStatusBase = 1 << 20;
inline bool isBlasStatus(int code) { return code > kBlasStatusBase && code < kBlasStatusBase + 1000; }
inline int blasCudaError(int code) {
  switch (code - kBlasStatusBase) {
    case 3: return kMemoryAllocation;  // CUBLAS_STATUS_ALLOC_FAILED
    case 7: return kInvalidValue;      // CUBLAS_STATUS_INVALID_VALUE
    case 8:                            // CUBLAS_STATUS_ARCH_MISMATCH
    case 15: return kNotSupported;     // CUBLAS_STATUS_NOT_SUPPORTED
    default: return kUnknown;
  }
}
}  // namespace err

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool isOk() const { return code_ == err::kSuccess; }
  explicit operator bool() const { return isOk(); }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_ = err::kSuccess;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}     // NOLINT: must not be ok
  bool isOk() const { return v_.index() == 0; }
  explicit operator bool() const { return isOk(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  Status status() const { return isOk() ? Status{} : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rgpu

// Propagates a non-ok Status from an expression returning Status.
#define RGPU_TRY(expr)                  \
  do {                                  \
    ::rgpu::Status rgpu_s_ = (expr);    \
    if (!rgpu_s_.isOk()) return rgpu_s_; \
  } while (0)

// `auto var = *(expr)` for an expression returning Result<T>, propagating
// its non-ok Status.
#define RGPU_TRY_ASSIGN(var, expr)               \
  auto var##_result_ = (expr);                   \
  if (!var##_result_) return var##_result_.status(); \
  auto var = std::move(*var##_result_)
