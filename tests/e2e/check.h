// The checks the self-checking end-to-end programs share: each failure
// prints its line and what failed, and main returns 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::printf("FAILED line %d: %s -> %s\n", __LINE__, #x, cudaGetErrorName(e_));    \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)
#define EXPECT(c)                                          \
  do {                                                     \
    if (!(c)) {                                            \
      std::printf("FAILED line %d: %s\n", __LINE__, #c);   \
      return 1;                                            \
    }                                                      \
  } while (0)
// A call must fail with exactly `want`.
#define EXPECT_ERR(x, want)                                                                             \
  do {                                                                                                  \
    cudaError_t e_ = (x);                                                                               \
    if (e_ != (want)) {                                                                                 \
      std::printf("FAILED line %d: %s -> %s, expected %s\n", __LINE__, #x, cudaGetErrorName(e_), #want); \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)
