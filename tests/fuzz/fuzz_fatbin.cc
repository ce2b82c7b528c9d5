// Fuzz target: the module image parser the worker runs on shipped modules
// (parseImage: a fatbin's entry walking, zstd and lz4 decompression, .nv.info
// and PTX signatures; a library's bare cubin or PTX text).
#include "common/fatbin.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)rgpu::common::parseImage(data, size);
  return 0;
}
