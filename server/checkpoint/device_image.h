// A session's device state as a checkpoint records it, and how it is written
// from one backend and rebuilt in another (docs/migration.md).
//
// What it covers: device allocations (cudaMalloc, cudaMallocPitch) with
// their bytes, each device's malloc heap (its size, and once made its memory
// and the blocks in use), conditional graph nodes' handles with their values, CUDA arrays (with their bytes) and texture and surface
// objects under the handles the program holds, loaded modules (their fatbin, and each module variable at its
// address with its bytes), registered kernels with the attributes the
// program set, streams with their flags and priorities, and events with
// their flags. The session describes what it holds (DeviceImage); the
// backend supplies the bytes and the variables' places.
//
// Invariants:
//  - write: the session's work has drained (no stream has work queued):
//    the bytes read are the bytes the program would read.
//  - restore: into a fresh backend over the same placement (same devices,
//    same address window). Every allocation and variable lands at the
//    address it had (Backend::allocateAt, loadModuleAt) or the restore fails;
//    a failed restore leaves the backend to be destroyed, not used.
//  - every count and size read is checked against DeviceImageLimits before
//    anything is allocated for it: a checkpoint is input like any other.
//
// Modules and arrays are made again in the order the old backend made them
// (Backend::placementOrder: a driver places each after what it made
// before), and texture and surface objects in ascending order of their
// handles, then Backend::objectsRestored().
//
// Events come back as they were: unrecorded, or recorded and complete with
// their completion time (CLOCK_MONOTONIC, shared by the host's processes),
// so cudaEventElapsedTime spans a move.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/backend/backend.h"
#include "server/checkpoint/checkpoint_stream.h"

namespace rgpu::server {

struct DeviceImage {
  struct Allocation {
    int32_t device = 0;
    DevPtr base = 0;
    uint64_t size = 0;  // as the program asked (the bytes saved)
  };
  struct Module {
    uint32_t id = 0;
    int32_t device = 0;
    std::string fatbin;
    std::vector<Backend::ModuleGlobal> globals;  // filled by writeDeviceImage from the backend
    uint64_t placed = 0;                         // Backend::placementOrder (filled by writeDeviceImage)
  };
  struct Function {
    uint32_t id = 0, module = 0;
    std::string name;
    std::vector<std::pair<int32_t, int32_t>> attributes;  // cudaFuncSetAttribute calls, in order
  };
  struct Stream {
    uint32_t id = 0;
    int32_t device = 0;
    uint32_t flags = 0;
    int32_t priority = 0;
  };
  struct Event {
    uint32_t id = 0;
    int32_t device = 0;
    uint32_t flags = 0;
    Backend::EventState state;  // filled by writeDeviceImage from the backend
  };
  struct Array {
    uint64_t handle = 0;
    ArraySpec spec;
    DevPtr base = 0;    // filled by writeDeviceImage from the backend
    uint64_t size = 0;  // (its levels, as one allocation)
    uint64_t bytes = 0;  // restore: what its levels hold, packed (checkArray; its quota charge)
    uint64_t placed = 0;  // Backend::placementOrder (filled by writeDeviceImage)
  };
  struct Texture {
    uint64_t handle = 0;
    TextureSpec spec;
  };
  struct Surface {
    uint64_t handle = 0;
    int32_t device = 0;
    uint64_t array = 0;
    uint32_t level = 0;
  };
  std::vector<Allocation> allocations;
  std::vector<Backend::MallocHeap> heaps;  // filled by writeDeviceImage from the backend
  struct CondHandle {
    int32_t device = 0;
    uint64_t handle = 0;  // the address of its device word
  };
  std::vector<CondHandle> cond_handles;
  std::vector<Array> arrays;
  std::vector<Texture> textures;
  std::vector<Surface> surfaces;
  std::vector<Module> modules;
  std::vector<Function> functions;
  std::vector<Stream> streams;
  std::vector<Event> events;
};

// What a restore accepts (the session's own limits).
struct DeviceImageLimits {
  uint64_t max_allocations = 1 << 20;
  uint64_t max_modules = 4096;
  uint64_t max_functions = 1 << 16;
  uint64_t max_streams = 4096;
  uint64_t max_events = 1 << 16;
  uint64_t max_fatbin_bytes = 256ull << 20;
  uint64_t max_globals_per_module = 1 << 16;
  uint64_t max_arrays = 65536, max_textures = 65536, max_surfaces = 65536;
  uint64_t max_conditional_handles = 65536;
};
inline constexpr size_t kMaxCheckpointNameBytes = 4096;

// Pieces device memory moves in between the backend and the stream.
inline constexpr uint64_t kDeviceImagePieceBytes = 4ull << 20;
// Within them, the bytes go in slices of this size, each after a word that
// says whether they follow or are unchanged since a pre-copy (below).
inline constexpr uint64_t kDeviceImageSliceBytes = 256ull << 10;

// ---- pre-copy (docs/migration.md) --------------------------------------------
// While the session still runs, its device allocations are copied to a base
// (writePrecopyBase: Backend::readWhileRunning, racing with the program's
// work) and each slice's XXH3-128 hash of the bytes copied is kept.
// The new worker places those allocations and fills them from the base
// (restorePrecopyBase), also while the program runs. The checkpoint written
// once the session drained then sends only the slices whose bytes differ
// from what the base copied (a slice written meanwhile, or one copied torn,
// hashes differently), and the restore keeps the rest as the base left them.
struct PrecopyRange {
  int32_t device = 0;
  DevPtr base = 0;
  uint64_t size = 0;
};
struct PrecopyBase {
  uint32_t span_index = 0;  // the address window the session's memory lies in
  // By (device, base): the range and its slices' hashes.
  std::map<std::pair<int32_t, DevPtr>, std::pair<PrecopyRange, std::vector<std::array<uint64_t, 2>>>> ranges;
  uint64_t bytes = 0;
};
// Copies `ranges` (in this order) to `out` as the program runs: kNotSupported
// when the backend cannot be read so.
Result<PrecopyBase> writePrecopyBase(Backend& backend, uint32_t span_index, const std::vector<PrecopyRange>& ranges,
                                     CheckpointWriter& out);
// The span index a base was written for (read first: the backend is made for it).
Result<uint32_t> readPrecopySpan(CheckpointReader& in);
// Places the base's allocations in a fresh backend, at their addresses, with
// their bytes (after readPrecopySpan); returns them.
Result<std::vector<PrecopyRange>> restorePrecopyBase(Backend& backend, CheckpointReader& in,
                                                     const DeviceImageLimits& limits);

// Writes `image` (its modules' variables taken from `backend`) and then the
// bytes of every allocation and variable; with `base`, slices of allocations
// the base holds whose bytes hash as they did there are marked unchanged
// (`unchanged_bytes`: how many bytes that spared).
Status writeDeviceImage(const DeviceImage& image, Backend& backend, CheckpointWriter& out,
                        const PrecopyBase* base = nullptr, uint64_t* unchanged_bytes = nullptr);
// Reads what writeDeviceImage wrote and rebuilds it in `backend`; returns
// the image (with the variables) for the session's own tables. `placed`:
// allocations a pre-copy placed already (restorePrecopyBase); those the
// image holds stay with their bytes (the slices marked unchanged are taken
// from them), the others are freed first.
Result<DeviceImage> restoreDeviceImage(Backend& backend, CheckpointReader& in, const DeviceImageLimits& limits,
                                       const std::vector<PrecopyRange>* placed = nullptr);

}  // namespace rgpu::server
