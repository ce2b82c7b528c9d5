// The decoded form of a PTX module: what the interpreter executes.
//
// PTX text is parsed once per module (ptx_parser.cc) into flat instruction
// arrays with every register, label, symbol and parameter already resolved to
// an index or offset, so nothing is looked up by name at run time. All values
// live in 64-bit register slots holding the bits of the value (an f32 in the
// low 32 bits); an instruction's types say how to read them.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rgpu::server::ptx {

namespace jit {
class Code;  // ptx_jit.h
}

// A Function's compiled code (ptx_jit.h), made on demand. Not part of the
// decoded form: a copy of a Function starts with none (compiled code holds the
// addresses the original's globals were bound to).
struct JitSlot {
  JitSlot() = default;
  JitSlot(const JitSlot&) {}
  JitSlot& operator=(const JitSlot&) { return *this; }
  mutable std::mutex mu;
  mutable std::shared_ptr<const jit::Code> code;  // guarded by mu
  mutable bool tried = false;                     // compiled, or failed to (guarded by mu)
  mutable std::atomic<uint64_t> interpreted{0};   // thread-instructions run without code
};

enum class Type : uint8_t {
  kNone, kPred,
  kB8, kB16, kB32, kB64,
  kU8, kU16, kU32, kU64,
  kS8, kS16, kS32, kS64,
  kF16, kF16x2, kBF16, kBF16x2, kF32, kF64,
  kE4M3, kE5M2,  // 8-bit floats: mma.sync operands only (cvt takes them in pairs)
  kS4, kU4, kB1,  // sub-byte integers and single bits: wmma operands only, packed 8 or 32 to a register
};

inline int typeBytes(Type t) {
  switch (t) {
    case Type::kB8: case Type::kU8: case Type::kS8: case Type::kE4M3: case Type::kE5M2: return 1;
    case Type::kB16: case Type::kU16: case Type::kS16: case Type::kF16: case Type::kBF16: return 2;
    case Type::kB32: case Type::kU32: case Type::kS32: case Type::kF32: case Type::kF16x2: case Type::kBF16x2: return 4;
    case Type::kB64: case Type::kU64: case Type::kS64: case Type::kF64: return 8;
    default: return 0;
  }
}
inline bool isSigned(Type t) { return t == Type::kS8 || t == Type::kS16 || t == Type::kS32 || t == Type::kS64; }
inline bool isFloat(Type t) {
  return t == Type::kF16 || t == Type::kF16x2 || t == Type::kBF16 || t == Type::kBF16x2 || t == Type::kF32 || t == Type::kF64;
}

enum class Op : uint8_t {
  kMov, kAdd, kSub, kMul, kMad, kMul24, kMad24, kFma, kDiv, kRem, kAbs, kNeg, kMin, kMax,
  kAnd, kOr, kXor, kNot, kCnot, kShl, kShr, kShf, kBfe, kBfi, kBrev, kClz, kPopc, kPrmt, kLop3,
  kSelp, kSlct, kSetp, kSet, kCvt, kCvta, kLd, kSt, kBra, kRet, kExit, kTrap, kAtom, kRed,
  kBar, kBarWarp, kMembar, kShfl, kVote, kRedux, kActivemask, kMatch, kNanosleep,
  kRcp, kSqrt, kRsqrt, kEx2, kLg2, kSin, kCos, kTanh, kCopysign, kTestp,
  kCallPrintf, kCallAssert, kCall, kRetFunc, kNop, kBmsk, kBfind, kFns, kCallMalloc, kCallFree, kCallSetConditional,
  kCpAsync, kMbarrier, kWmma, kMma, kLdmatrix, kAddCarry, kDp4a, kDp2a, kSad, kElect, kIsspacep, kZero,
  kSzext, kMovmatrix, kAlloca, kStackSave, kStackRestore,
  kClusterArrive, kClusterWait, kMapa, kGetctarank,
  kAsyncRemote,  // st.async / red.async (Inst::carry 0 / 1): a store or reduction that completes bytes on an mbarrier
  // Texture and surface objects (ptx_texture.h: Inst::mode the geometry, layout the tex variant,
  // m the surface clamp mode, k the query or tld4's component; kTex..kSuq stay together).
  kTex, kTld4, kTxq, kSuld, kSust, kSuq,
};

enum class Space : uint8_t { kGeneric, kGlobal, kShared, kLocal, kParam, kConst };

enum class Cmp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kLo, kLs, kHi, kHs, kEqu, kNeu, kLtu, kLeu, kGtu, kGeu, kNum, kNan };
enum class BoolOp : uint8_t { kNone, kAnd, kOr, kXor };
enum class Round : uint8_t { kDefault, kRn, kRz, kRm, kRp, kRni, kRzi, kRmi, kRpi, kRna };
enum class AtomOp : uint8_t { kAdd, kMin, kMax, kExch, kCas, kAnd, kOr, kXor, kInc, kDec };

// Special registers, read per lane.
enum class Special : uint8_t {
  kTidX, kTidY, kTidZ, kNtidX, kNtidY, kNtidZ, kCtaidX, kCtaidY, kCtaidZ, kNctaidX, kNctaidY, kNctaidZ,
  kLaneid, kWarpid, kNwarpid, kLanemaskEq, kLanemaskLe, kLanemaskLt, kLanemaskGe, kLanemaskGt,
  kClock, kClock64, kGlobaltimer, kSmid, kNsmid, kGridid, kDynamicSmem, kTotalSmem,
  kEnvregHi, kEnvregLo, kEnvregOther,  // %envreg1, %envreg2, the other %envregN
  // Thread-block clusters (sm_90).
  kClusterCtaidX, kClusterCtaidY, kClusterCtaidZ, kClusterNctaidX, kClusterNctaidY, kClusterNctaidZ,
  kClusteridX, kClusteridY, kClusteridZ, kNclusteridX, kNclusteridY, kNclusteridZ,
  kClusterCtarank, kClusterNctarank, kIsExplicitCluster,
};

struct Operand {
  // kParamReg: a call-sequence .param variable, kept in a register slot
  // (address [reg + imm] within it).
  enum Kind : uint8_t { kNone, kReg, kImm, kSpecial, kAddr, kVec, kSink, kParamReg } kind = kNone;
  uint32_t reg = 0;     // kReg; kAddr base register (if has_base)
  uint64_t imm = 0;     // kImm bits; kAddr offset (added to base or symbol)
  Special special{};
  bool has_base = false;   // kAddr: [reg + imm] vs [imm]
  bool neg = false;        // kReg predicate read negated (!%p)
  Space sym_space = Space::kGeneric;  // kAddr/kImm from a symbol: which window its value lives in
  int32_t global = -1;     // symbol is Module::globals[global]: its address is added at load
  std::vector<Operand> vec;  // kVec elements
};

struct Inst {
  Op op = Op::kNop;
  Type type = Type::kNone;   // main type (source type for cvt/set/slct)
  Type dtype = Type::kNone;  // destination type (cvt, set, slct)
  Space space = Space::kGeneric;
  Round round = Round::kDefault;
  Cmp cmp = Cmp::kEq;
  BoolOp bool_op = BoolOp::kNone;
  AtomOp atom = AtomOp::kAdd;
  uint8_t mode = 0;       // lo/hi/wide (mul, mad); shfl/vote/prmt/shf mode; cvta direction
  uint8_t carry = 0;      // mad.cc / madc: kCarryIn | kCarryOut
  bool relu = false;      // cvt .relu
  uint8_t vec = 1;        // v2/v4 loads and stores
  bool ftz = false, sat = false, approx = false;
  int32_t guard = -1;     // predicate register, -1: none
  bool guard_neg = false;
  uint32_t target = 0;    // branch target instruction index; kCall: the callee's first instruction
  uint32_t callee = 0;    // kCall before linking: index into Module::callee_names
  // kCall into a recursive device function: the callee's registers (it may be
  // active already on this lane), saved at the call and restored at its return.
  uint32_t save_base = 0, save_count = 0;
  // ...whose local memory is a frame of `frame_bytes` on the lane's stack, its
  // address in the callee's register `frame_reg` (0 bytes: no frame).
  uint32_t frame_reg = 0, frame_bytes = 0;
  Operand d, d2, a, b, c, e;  // d2: second destination (setp p|q)
  uint32_t line = 0;      // source line, for error messages
  // wmma: the shape (m, n, k) and the multiplicands' element type (a and b).
  uint8_t m = 0, n = 0, k = 0;
  uint8_t layout = 0;  // wmma: bit 0 set: .col (a's, or the memory's); bit 1: b's
  // wmma.mma on .b1: bool_op kXor (.xor.popc) or kAnd (.and.popc) replaces the product.
  Type ab_type = Type::kNone, b_type = Type::kNone;  // b_type: b's, where it differs from a's (s8 x u8)
};

// cp.async modes: a copy (run at once: it completes before any wait can
// return), group bookkeeping (nothing left to wait for), an mbarrier arrive
// that tracks the copies (.noinc: counts as an arrival), a bulk copy that
// completes its bytes on an mbarrier.
inline constexpr uint8_t kCpCopy = 0, kCpNop = 1, kCpMbarArrive = 2, kCpBulk = 3;
// mbarrier operations
inline constexpr uint8_t kMbInit = 0, kMbInval = 1, kMbArrive = 2, kMbArriveDrop = 3, kMbTestWait = 4,
                         kMbPendingCount = 5, kMbExpectTx = 6, kMbCompleteTx = 7;
// Inst::sat on an mbarrier: .parity (wait on a phase parity, not a state);
// Inst::approx on an arrive: .expect_tx (its operand b is a transaction count).

// wmma operations. Fragments use rgpu's own layout (PTX leaves it
// unspecified): slot s of lane l holds element l * slots + s of the matrix in
// row-major order, whatever the memory layout the load read it from.
inline constexpr uint8_t kWmmaLoadA = 0, kWmmaLoadB = 1, kWmmaLoadC = 2, kWmmaStore = 3, kWmmaMma = 4;

// mma.sync shapes (the PTX ISA fixes each one's fragment layout), and ldmatrix/stmatrix.
inline constexpr uint8_t kMmaM16N8K16 = 0, kMmaM16N8K8 = 1, kMmaM16N8K4 = 2, kMmaM16N8K32 = 3, kMmaM8N8K4 = 4;
inline constexpr uint8_t kLdmatrixLoad = 0, kLdmatrixStore = 1;  // Inst::layout: 1 = .trans; Inst::vec: .x1/.x2/.x4

// add/sub with the carry flag: bit 0 carry (borrow) in (addc, subc), bit 1
// carry out (.cc), bit 2 subtract. dp2a: Inst::mode kModeHi = .hi (b's upper bytes).
inline constexpr uint8_t kCarryIn = 1, kCarryOut = 2, kCarrySub = 4;

// cvt to tf32 (an f32 with 10 mantissa bits, in a .b32 register); to and
// from pairs of 8-bit floats (e4m3x2, e5m2x2 in a .b16 register; Inst::layout
// 0: e4m3, 1: e5m2; Inst::relu: negative results become 0).
inline constexpr uint8_t kCvtToTf32 = 1, kCvtToFp8x2 = 2, kCvtFromFp8x2 = 3;

// mul/mad modes
inline constexpr uint8_t kModeLo = 0, kModeHi = 1, kModeWide = 2;
// shfl modes
inline constexpr uint8_t kShflUp = 0, kShflDown = 1, kShflBfly = 2, kShflIdx = 3;
// vote modes
inline constexpr uint8_t kVoteAll = 0, kVoteAny = 1, kVoteUni = 2, kVoteBallot = 3;
// shf modes (bit 0: right, bit 1: wrap)
inline constexpr uint8_t kShfRight = 1, kShfWrap = 2;
// cvta: 0 = to generic, 1 = from generic (.to)
inline constexpr uint8_t kCvtaTo = 1;
// bmsk modes; bfind: 1 = .shiftamt
inline constexpr uint8_t kBmskClamp = 0, kBmskWrap = 1, kBfindShiftAmount = 1;
// bar modes
inline constexpr uint8_t kBarSync = 0, kBarArrive = 1, kBarRedPopc = 2, kBarRedAnd = 3, kBarRedOr = 4;

struct Global {
  std::string name;
  Space space = Space::kGlobal;  // kGlobal or kConst
  uint64_t size = 0;
  uint32_t align = 1;
  std::vector<uint8_t> init;     // initial bytes (zero-filled to size)
  bool managed = false;          // .attribute(.managed): a __managed__ variable (pages of its own)
  // Initializers that hold symbol addresses (generic(sym)): offset -> symbol.
  std::vector<std::pair<uint64_t, std::string>> address_inits;
};

struct Function {
  std::string name;
  bool is_entry = false;
  std::vector<std::pair<uint32_t, uint32_t>> params;  // (offset, size) in the parameter block
  uint32_t param_bytes = 0;
  uint32_t num_regs = 0;
  uint32_t static_shared = 0;   // bytes of .shared declared (module + function scope used)
  uint32_t shared_align = 16;
  uint32_t local_bytes = 0;     // per-thread .local (with the stack, when there is one)
  // Entries whose code needs a stack (frames of recursive functions, alloca):
  // where it starts in each thread's local memory; it ends at local_bytes.
  uint32_t stack_base = 0;
  bool uses_stack = false;      // alloca / stacksave / stackrestore in its own code
  uint32_t max_threads = 0;     // .maxntid / .reqntid (__launch_bounds__): threads per block at most; 0: no bound
  // .reqnctapercluster (__cluster_dims__): the cluster every launch uses; 0: none given.
  uint32_t cluster_x = 0, cluster_y = 0, cluster_z = 0;
  bool explicit_cluster = false;  // .explicitcluster: launched in clusters only
  std::vector<Inst> code;
  // Per instruction: where a conditional branch's paths meet again
  // (ptx_reconverge.h); filled once the code is final.
  std::vector<uint32_t> reconverge;
  bool uses_malloc = false;  // calls device malloc/free (itself or through its callees)
  // .func only: parameters and return value as register slots (<= 8 bytes each).
  std::vector<uint32_t> param_regs;
  int32_t ret_reg = -1;
  bool has_calls = false;
  // Registers a thread may read before writing them (ptx_liveness.h): the
  // only ones a warp's reused register file needs zeroed.
  std::vector<uint32_t> live_in;
  JitSlot jit;
};

struct Module {
  std::vector<Global> globals;
  std::map<std::string, Function> functions;  // entries only are launchable
  // Module-scope .shared variables: offset in every block's shared memory.
  std::map<std::string, uint32_t> module_shared;
  uint32_t module_shared_bytes = 0;
  int target_sm = 0;
  std::vector<std::string> callee_names;
};

}  // namespace rgpu::server::ptx
