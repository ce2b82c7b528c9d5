// The PTX JIT: a kernel's straight-line runs of hot instructions compiled to
// native code, which the interpreter runs in place of interpreting them.
//
// What is compiled. A *unit* is a run of consecutive instructions of one
// Function, each of a form the interpreter's hot paths take (ptx_fast.cc:
// integer and f32 arithmetic, moves, shifts, comparisons, selects,
// conversions, one-scalar ld/st), with no instruction inside it that control
// can reach except from the one before it: no branch target, meeting point or
// call return lies inside a unit, and every instruction the interpreter runs
// is followed by a unit's first instruction or by another it runs itself. So
// no lane can be parked inside a unit, and running a unit for the warp's
// active lanes at its first instruction is exactly what the interpreter would
// do with the same instructions one by one: the warp's scheduling, its
// reconvergence and its time slices (a unit counts as its instructions)
// are unchanged.
//
// Bit for bit. A unit computes what the hot paths compute, which compute what
// the general code computes; PtxJit.* runs kernels compiled and interpreted
// and compares every bit. Where a unit cannot vouch for an access (an address
// outside the memory range it knows and that `lookup` does not find, a
// misaligned one, shared memory of another block of the cluster, a generic
// address in the shared, local or parameter window), it stops *before* that
// instruction, having done everything before it, and returns its index: the
// interpreter runs it, and reports any fault exactly as it would have.
//
// Where the code lives. The compiler is LLVM's ORC JIT, in a plugin the
// worker loads the first time it compiles (librgpu_ptx_jit.so, beside the
// rgpu-server binary or in <prefix>/lib/rgpu): a process that never compiles
// never maps LLVM. The plugin and the interpreter share only this header and
// ptx_ir.h; kJitAbi changes whenever either changes shape.
//
// Threads. A Compiler may be called from several threads at once; a Code is
// immutable once made and its units may run on any number of threads, each
// with a Frame of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/sim/ptx/ptx_ir.h"

namespace rgpu::server::ptx::jit {

inline constexpr int kJitAbi = 2;

// What a unit sees of the warp it runs for. Filled by the interpreter before
// each call (the block's fields once per block); the code reads fields at
// their offsetof, so this must stay standard-layout.
struct Frame {
  uint64_t* regs = nullptr;         // register r of lane l at regs[r * 32 + l]
  const uint8_t* params = nullptr;  // the kernel's parameter block
  uint8_t* shared = nullptr;        // the block's shared memory
  uint64_t shared_size = 0;
  uint8_t* local = nullptr;     // this warp's .local: lane l's at local + l * local_frame
  uint64_t local_frame = 0;     // .local bytes per thread
  const uint32_t* tid[3] = {};  // per lane: %tid.x, .y, .z
  uint64_t ntid[3] = {}, ctaid[3] = {}, nctaid[3] = {};
  uint64_t warpid = 0;
  // The global memory range [cache_lo, cache_hi) the interpreter's last
  // access fell in (fastMemory, resolve).
  uint64_t cache_lo = 1, cache_hi = 0;
  // Per global access of the compiled code (Code::rangeSlots()): the range
  // [ranges[2k], ranges[2k + 1]) its last access fell in, {0, 0} at first.
  // lookup() finds the range holding [lo, lo + bytes) and puts it in `slot`
  // (true), or says false (the unit stops there).
  uint64_t* ranges = nullptr;
  bool (*lookup)(Frame* frame, uint64_t lo, uint64_t bytes, uint64_t* slot) = nullptr;
  const void* memory = nullptr;  // lookup's: the launch's MemoryRanges
  uint64_t insts = 0;            // out: thread-instructions run (added to)
};
static_assert(std::is_standard_layout_v<Frame>);

// Runs the unit for the lanes of `mask`; returns how many of its
// instructions ran (all, or where it stopped: see above).
using UnitFn = uint32_t (*)(Frame* frame, uint32_t mask);

struct Unit {
  uint32_t start = 0, count = 0;  // instructions [start, start + count) of the Function
  UnitFn fn = nullptr;
};

// A Function's compiled units. Owns their machine code (the plugin's
// subclass frees it when destroyed).
class Code {
 public:
  virtual ~Code() = default;
  // The unit that starts at instruction `pc`, or null.
  const Unit* unitAt(uint32_t pc) const {
    return pc < starts_.size() && starts_[pc] >= 0 ? &units_[static_cast<size_t>(starts_[pc])] : nullptr;
  }
  const std::vector<Unit>& units() const { return units_; }
  // Instructions inside units (of the Function's code.size()).
  uint64_t covered() const {
    uint64_t n = 0;
    for (const Unit& u : units_) n += u.count;
    return n;
  }
  // How many range slots the code uses (Frame::ranges holds twice as many words).
  uint32_t rangeSlots() const { return range_slots_; }
  double compile_ms = 0;  // what compiling took

 protected:
  uint32_t range_slots_ = 0;
  std::vector<Unit> units_;
  std::vector<int32_t> starts_;  // by pc: index into units_, or -1
};

// The plugin's compiler (one per process).
class Compiler {
 public:
  virtual ~Compiler() = default;
  // fn's units compiled; null with `error` set when compiling failed (the
  // interpreter then runs fn as before). A Function with no unit worth
  // compiling gets a Code with no units.
  virtual std::unique_ptr<Code> compile(const Function& fn, std::string& error) = 0;
};

// The plugin's one entry point: a compiler, or null when the plugin was
// built for another kJitAbi or LLVM cannot target this host.
using CreateCompilerFn = Compiler* (*)(int abi, std::string* error);
inline constexpr const char* kCreateCompilerSymbol = "rgpuPtxJitCreateCompiler";
inline constexpr const char* kPluginFile = "librgpu_ptx_jit.so";

// ---- the interpreter's side (ptx_jit_policy.cc) --------------------------------------

enum class Mode : uint8_t {
  kOff,    // interpret everything
  kAuto,   // compile a kernel once the interpreter has run `threshold` x its size in thread-instructions
  kEager,  // compile every kernel before its first launch
};

// How the process compiles (like setFastPaths, for every launch of it). An
// empty `plugin` looks beside the running executable, then in
// ../lib/rgpu/ from it, then where the build put it.
// kAuto's threshold is per instruction of the kernel, as compiling costs:
// about 1.5 ms per instruction here, what the interpreter takes for a
// million thread-instructions. So a kernel is compiled once interpreting it
// has cost about what compiling it will (it is then run 2-4x faster): never
// more than twice the better of the two choices in hindsight.
void configure(Mode mode, uint64_t threshold, std::string plugin = {});
Mode mode();
inline constexpr uint64_t kDefaultThreshold = 1ull << 20;

// fn's compiled code if it has some or the policy says to compile it now
// (on the calling thread); null: interpret it. Safe from any thread.
std::shared_ptr<const Code> codeFor(const Function& fn);
// What a launch of fn ran interpreted (for kAuto's threshold).
void noteInterpreted(const Function& fn, uint64_t thread_instructions);

// Whether the plugin can be loaded here (it is loaded to find out); `error`
// says why not.
bool available(std::string* error = nullptr);

}  // namespace rgpu::server::ptx::jit
