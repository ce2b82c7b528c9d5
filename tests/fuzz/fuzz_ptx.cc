// Fuzz target: the PTX parser and linker the sim backend runs on the PTX of
// every shipped module.
#include <string>

#include "server/sim/ptx/ptx_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)rgpu::server::ptx::parsePtx(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
