// Parses PTX text (as nvcc embeds it in a fatbin) into the decoded form of
// ptx_ir.h. Untrusted input: every token is checked, every index bounded, and
// anything the interpreter cannot execute — an unknown instruction, type or
// directive — is an error naming it and its line, never a silently wrong result.
#pragma once

#include <string>

#include "common/status.h"
#include "server/sim/ptx/ptx_ir.h"

namespace rgpu::server::ptx {

// Limits on untrusted PTX, checked while parsing. The decoded form is larger
// than the text (a token takes ~40 bytes, an instruction ~330), so the token
// and instruction counts are bounded as well as the bytes: a module can make a
// worker hold at most ~0.3 GB of tokens (transiently) and ~0.7 GB of code.
inline constexpr size_t kMaxPtxBytes = 32ull << 20;
inline constexpr size_t kMaxPtxTokens = 8u << 20;
inline constexpr uint32_t kMaxRegsPerFunction = 1u << 16;
inline constexpr uint32_t kMaxInstsPerFunction = 1u << 20;
// Over all functions, counting the copies of device functions linked into
// each kernel that calls them.
inline constexpr uint64_t kMaxInstsPerModule = 2u << 20;
inline constexpr uint64_t kMaxGlobalBytes = 256ull << 20;
inline constexpr uint32_t kMaxSharedBytes = 228u * 1024;
inline constexpr uint32_t kMaxLocalBytes = 512u * 1024;
// Per thread, for alloca (and VLAs), in kernels that use it: what CUDA's
// default cudaLimitStackSize gives a GPU thread (1 KiB) would fail programs
// that size their VLAs by the data, so more.
inline constexpr uint32_t kAllocaStackBytes = 16u * 1024;
inline constexpr uint32_t kMaxCallDepth = 64;

// cudaErrorInvalidPtx: the PTX could not be parsed or uses what we cannot run.
inline constexpr int kErrInvalidPtx = 218;

Result<Module> parsePtx(const std::string& text);

// Decoded instructions of a parsed module (what it costs to keep loaded).
uint64_t instructionCount(const Module& m);

// Places the module's variables: `addrs[i]` is where globals[i] now lives
// (host memory of its size, already holding its initial bytes). Writes the
// addresses that initialisers refer to and resolves symbol operands.
void bindGlobals(Module& m, const std::vector<uint64_t>& addrs);

}  // namespace rgpu::server::ptx
