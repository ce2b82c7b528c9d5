// What the case-per-process test programs (ordering.cu, blas_threads.cu)
// share: the case being run, and failing it with a reason.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cases {

inline const char* g_case = "";

// Prints "FAIL CASE: why" and ends the process (exit 1).
[[noreturn]] inline void fail(const std::string& why) {
  std::printf("FAIL %s: %s\n", g_case, why.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorName(e));
}

inline void expect(cudaError_t got, cudaError_t want, const char* what) {
  if (got != want) fail(std::string(what) + ": " + cudaGetErrorName(got) + ", expected " + cudaGetErrorName(want));
}

}  // namespace cases
