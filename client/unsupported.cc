// Every CUDA 13 runtime name is exported (programs bind lazily and would die on
// a missing one mid-run). Names rgpu does not implement resolve to weak stubs
// (generated from cudart_exports.txt) that land here: cudaErrorNotSupported,
// logged once per name, never a fake success. The error is the call's answer
// only: it does not become the thread's last error, so a program that tries an
// optional feature and goes on without it is not failed later by an unrelated
// cudaGetLastError().
#include "client/api_util.h"

extern "C" int rgpu_unsupported(const char* name) {
  rgpu::common::logOnce(std::string("unsupported:") + name,
                        std::string(name) + " is not supported by rgpu (returns cudaErrorNotSupported)");
  return cudaErrorNotSupported;
}
