// rgpu's own device heap for the CUDA backend's sessions that may move
// (docs/migration.md): device malloc, free and __nv_aligned_device_malloc
// on memory the worker allocated itself, in the session's address window,
// with every bit of the allocator's state in that memory.
//
// NVIDIA's driver keeps its heap (where it is, and which of its blocks are
// in use) to itself, so a session whose kernels used it could not be
// checkpointed. A module whose PTX calls malloc, free or
// __cuda_syscall_aligned_malloc (what nvcc emits for the three) is loaded
// instead as that PTX with the calls bound to functions of rgpu's, written
// here in PTX. They take blocks from a heap whose base address and size are
// in the module variable kHeapVariable ({base, size}, two u64; 0: none, and
// malloc returns NULL). The heap is ordinary device memory: a checkpoint
// copies its bytes, a restore maps the same addresses and writes them back,
// and the allocator carries on from there.
//
// The heap's layout (all of it zero when fresh):
//   [0, 8)                    bytes handed out so far past the header (bump)
//   [8 + 8k, 16 + 8k)         the free list of class k, k < kHeapClasses: a
//                             tagged offset from the base (tag << 40 | offset;
//                             the tag counts pops and pushes, against ABA)
//   [kHeapHeaderBytes, size)  blocks
// A block of class k is (2 + k % 2) << (4 + k / 2) bytes: 32, 48, 64, 96,
// 128, 192, ... malloc(n) takes one of the smallest class that holds n + 16
// bytes from its free list, or past the bump; the
// 16 bytes before the pointer it returns hold the class and the distance
// back to the block's start (16 for malloc; more for an alignment above 16,
// for which n + align bytes are taken). free() pushes the block back on its
// class's list; a pointer outside the heap, or one whose header makes no
// sense, is ignored. Blocks are not split or merged: a heap can run out with
// up to a third of it in rounding, or with free blocks of another class.
// Lock-free (compare-and-swap loops that always let one lane through), so it
// is safe for every lane of every block at once, with or without
// independent thread scheduling.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace rgpu::server::cuda {

inline constexpr char kHeapVariable[] = "__rgpu_device_heap";
inline constexpr uint64_t kHeapHeaderBytes = 1024;
inline constexpr int kHeapClasses = 84;  // blocks up to 2^45 bytes (requests up to 2^44, 16 TiB)
static_assert(8 + 8 * kHeapClasses <= kHeapHeaderBytes);
// A heap smaller than this has room for no block (and is refused).
inline constexpr uint64_t kMinHeapBytes = kHeapHeaderBytes + 32;

// `ptx` (a module's PTX text) with its declarations of malloc, free and
// __cuda_syscall_aligned_malloc replaced by rgpu's allocator and every
// reference to them renamed to it. The text unchanged when it names none of
// them; kInvalidKernelImage when it names one without declaring it as an external
// function, defines one itself, or already has a symbol of rgpu's names.
Result<std::string> withRgpuHeap(const std::string& ptx);

// Whether `ptx` names malloc, free or __cuda_syscall_aligned_malloc at all (a
// module that only frees blocks must be bound to the heap that made them).
bool namesHeapCalls(const std::string& ptx);

}  // namespace rgpu::server::cuda
