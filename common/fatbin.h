// The CUDA fatbinary container: walking entries, decompressing them, and
// reading each kernel's parameter layout.
//
// Used by the client (to pack launch parameters without a round trip) and by
// the server (on untrusted bytes: every offset and length is bounds-checked, a
// malformed fatbin yields an error, never an out-of-bounds read).
// Layout facts: ../shared/research/cuda13-abi.md §3 and §4.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::common {

inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;
// Entry payloads larger than this after decompression are refused.
inline constexpr uint64_t kMaxFatbinEntryBytes = 256ull << 20;

struct FatbinEntry {
  enum Kind : uint16_t { kPtx = 1, kElf = 2 };
  uint16_t kind = 0;
  uint32_t arch = 0;       // sm_XX / compute_XX
  uint64_t flags = 0;
  std::string payload;     // decompressed bytes (PTX text or ELF image)
};

struct ParamInfo {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct KernelInfo {
  std::vector<ParamInfo> params;  // by ordinal
  uint32_t param_bytes = 0;       // size of the packed parameter block
};

struct FatbinImage {
  std::vector<FatbinEntry> entries;
  std::map<std::string, KernelInfo> kernels;  // by mangled name
  bool has_ptx = false;
};

// The bytes a __fatBinC_Wrapper_t points at (header + entries), for shipping.
// Only for wrappers in this process's own image (trusted memory).
Result<std::string> fatbinFromWrapper(const void* wrapper);

// Parses a fatbin (header + entries). Decompresses zstd (0x8000) and the lz4
// scheme (0x2000) entries. Kernel layouts come from any cubin's .nv.info, else
// from the PTX .entry signatures.
Result<FatbinImage> parseFatbin(const void* data, size_t len);

// Parameter layouts from an ELF cubin's .nv.info.<kernel> sections (KPARAM_INFO
// 0x17 / KPARAM_INFO_V2 0x45 / CBANK_PARAM_SIZE 0x19). Names of kernels with no
// parameters are included (from .text.<kernel>).
Result<std::map<std::string, KernelInfo>> kernelsFromElf(const std::string& elf);

// Parameter layouts from PTX `.entry` signatures.
Result<std::map<std::string, KernelInfo>> kernelsFromPtx(const std::string& ptx);

// The module-scope variables an image declares (__device__, __constant__,
// __managed__: PTX `.global`/`.const` declarations outside functions, and a
// cubin's data objects), sorted and without repeats. Names the driver may
// not know (a cubin's internal objects) can be among them: ask it.
std::vector<std::string> moduleVariables(const FatbinImage& image);

// The kernels of an image that may call device malloc or
// __nv_aligned_device_malloc (directly or through
// the functions they call; an indirect call counts as one that may). From
// the PTX's call graph; an image without PTX: every kernel, if any of its
// code names malloc.
std::set<std::string> kernelsCallingMalloc(const FatbinImage& image);

// A module image as cuModuleLoadData and cudaLibraryLoadData take it: a fatbin,
// an ELF cubin or PTX text (up to its first NUL), as one FatbinImage (a cubin
// is one kElf entry, PTX one kPtx entry of the arch of its `.target`).
// Untrusted bytes: checked like parseFatbin's.
Result<FatbinImage> parseImage(const void* data, size_t len);

// The length of an image in this process's own memory (trusted: the program's
// argument to cudaLibraryLoadData): a fatbin's header and entries, a cubin up
// to the end of its last section or table, PTX up to and with its NUL.
size_t imageLength(const void* image);

}  // namespace rgpu::common
