// The library management API: modules a program holds as data (NVRTC's PTX or
// cubin, a fatbin it built or read) loaded with cudaLibraryLoadData or
// cudaLibraryLoadFromFile, their kernels found by name and launched through
// cudaLaunchKernel/cudaLaunchKernelEx with the cudaKernel_t as the function,
// their variables found by name. A library is a module like the program's
// own (Runtime::loadLibrary): checked when loaded, shipped to a device on its
// first use there, unloaded on the server by cudaLibraryUnload.
#include <fstream>
#include <iterator>

#include "client/api_util.h"
#include "protocol/frame.h"

using namespace rgpu;
using namespace rgpu::client;

namespace {
Status load(cudaLibrary_t* library, std::string image) {
  if (image.size() > protocol::kMaxFatbinBytes)
    return Status(err::kInvalidKernelImage, "library image larger than " + std::to_string(protocol::kMaxFatbinBytes) +
                                                " bytes");
  auto m = rt().loadLibrary(std::move(image));
  if (!m) return m.status();
  *library = rt().libraryHandle(*m);
  return Status::ok();
}

Result<std::vector<cudaKernel_t>> kernelsOf(cudaLibrary_t lib) {
  auto m = rt().libraryOf(lib);
  if (!m) return m.status();
  return rt().libraryKernels(*m);
}
}  // namespace

// JIT and library options are hints to NVIDIA's JIT and loader; the server's
// own loader needs none of them.
RGPU_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, enum cudaJitOption*, void**,
                                            unsigned int, enum cudaLibraryOption*, void**, unsigned int) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(library, "library"));
    RGPU_TRY(needPtr(code, "code"));
    return load(library, std::string(static_cast<const char*>(code), common::imageLength(code)));
  });
}

RGPU_EXPORT cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* fileName, enum cudaJitOption*,
                                                void**, unsigned int, enum cudaLibraryOption*, void**, unsigned int) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(library, "library"));
    RGPU_TRY(needPtr(fileName, "fileName"));
    std::ifstream in(fileName, std::ios::binary);
    if (!in) return Status(err::kFileNotFound, std::string("cannot open ") + fileName);
    std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (image.empty()) return Status(err::kInvalidKernelImage, std::string(fileName) + " is empty");
    // PTX from a file has no NUL of its own; a binary image keeps its length.
    return load(library, std::move(image));
  });
}

RGPU_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  return guarded([&]() -> Status {
    auto m = rt().libraryOf(library);
    if (!m) return m.status();
    return rt().unloadLibrary(*m);
  });
}

RGPU_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t* pKernel, cudaLibrary_t library, const char* name) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pKernel, "pKernel"));
    RGPU_TRY(needPtr(name, "name"));
    auto m = rt().libraryOf(library);
    if (!m) return m.status();
    auto k = rt().libraryKernel(*m, name);
    if (!k) return k.status();
    *pKernel = *k;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaLibraryGetKernelCount(unsigned int* count, cudaLibrary_t lib) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(count, "count"));
    auto ks = kernelsOf(lib);
    if (!ks) return ks.status();
    *count = static_cast<unsigned>(ks->size());
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaLibraryEnumerateKernels(cudaKernel_t* kernels, unsigned int numKernels, cudaLibrary_t lib) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(kernels, "kernels"));
    auto ks = kernelsOf(lib);
    if (!ks) return ks.status();
    for (unsigned i = 0; i < numKernels && i < ks->size(); ++i) kernels[i] = (*ks)[i];
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaLibraryGetGlobal(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(name, "name"));
    auto m = rt().libraryOf(library);
    if (!m) return m.status();
    auto g = rt().libraryGlobal(*m, name, rt().currentDevice());
    if (!g) return g.status();
    if (dptr) *dptr = reinterpret_cast<void*>(g->first);
    if (bytes) *bytes = g->second;
    return Status::ok();
  });
}
