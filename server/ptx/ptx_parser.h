// Parses PTX text (as nvcc embeds it in a fatbin) into the decoded form of
// ptx_ir.h. Untrusted input: every token is checked, every index bounded, and
// anything the interpreter cannot execute — an unknown instruction, type or
// directive — is an error naming it and its line, never a silently wrong result.
#pragma once

#include <string>

#include "common/status.h"
#include "server/ptx/ptx_ir.h"

namespace rgpu::server::ptx {

// Limits on untrusted PTX, checked while parsing.
inline constexpr size_t kMaxPtxBytes = 64ull << 20;
inline constexpr uint32_t kMaxRegsPerFunction = 1u << 16;
inline constexpr uint32_t kMaxInstsPerFunction = 1u << 22;
inline constexpr uint64_t kMaxGlobalBytes = 256ull << 20;
inline constexpr uint32_t kMaxSharedBytes = 228u * 1024;
inline constexpr uint32_t kMaxLocalBytes = 512u * 1024;
inline constexpr uint32_t kMaxCallDepth = 64;

// cudaErrorInvalidPtx: the PTX could not be parsed or uses what we cannot run.
inline constexpr int kErrInvalidPtx = 218;

Result<Module> parsePtx(const std::string& text);

// Places the module's variables: `addrs[i]` is where globals[i] now lives
// (host memory of its size, already holding its initial bytes). Writes the
// addresses that initialisers refer to and resolves symbol operands.
void bindGlobals(Module& m, const std::vector<uint64_t>& addrs);

}  // namespace rgpu::server::ptx
