// Fuzz target: the fatbin container parser the worker runs on shipped modules
// (entry walking, zstd and lz4 decompression, .nv.info and PTX signatures).
#include "common/fatbin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)rgpu::common::parseFatbin(data, size);
  return 0;
}
