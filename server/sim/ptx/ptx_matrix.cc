// Asynchronous copies into shared memory (cp.async, cp.async.bulk), mbarriers,
// and the warp-matrix instructions (wmma, mma.sync, ldmatrix/stmatrix) of
// the PTX interpreter's block runner (server/sim/ptx/ptx_block.h).
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "server/sim/ptx/ptx_block.h"

namespace rgpu::server::ptx::detail {

bool BlockRunner::operandAddress(const Inst& in, const Operand& op, Space space, uint32_t size, Warp& w, int lane,
                                 uint8_t*& out) {
  uint64_t a = (op.has_base ? w.regs[static_cast<size_t>(op.reg) * 32 + static_cast<size_t>(lane)] : 0) + op.imm;
  if (!op.has_base && op.sym_space != Space::kGeneric) space = op.sym_space;
  if (space == Space::kShared) {
    if ((a & kWindowMask) == kSharedWindow) a &= ~kWindowMask;
    a = static_cast<uint32_t>(a);
  }
  if (resolve(space, a, size, w, lane, out)) return true;
  char buf[64];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
  fault(kErrIllegalAddress, std::string("illegal address ") + buf + " (" + std::to_string(size) + " bytes)", in, w, lane);
  return false;
}

// cp.async copies at once: the copy may complete at any time before the wait
// that covers it returns, so completing it at issue is one valid schedule (a
// program that touches the destination before waiting has a race on a GPU too).
bool BlockRunner::execAsyncCopy(const Inst& in, Warp& w, uint32_t m) {
  if (in.mode == kCpNop) return true;
  uint64_t tb[32], tc[32];
  if (in.mode == kCpMbarArrive) {  // .noinc: the tracked copies are done, so it arrives now
    LANES(m)
      uint8_t* bar;
      if (!operandAddress(in, in.d, Space::kShared, 8, w, l, bar)) return false;
      mbarrierArrive(bar, 1, false, 0);
    END_LANES
    return true;
  }
  const uint64_t* size = src(in.b, w, tb);
  const uint64_t* src_size = in.mode == kCpCopy && in.c.kind != Operand::kNone ? src(in.c, w, tc) : nullptr;
  LANES(m)
    uint32_t n = static_cast<uint32_t>(size[l]);
    uint32_t from = src_size ? static_cast<uint32_t>(std::min<uint64_t>(src_size[l], n)) : n;
    if (in.mode == kCpCopy && n != 4 && n != 8 && n != 16) {
      fault(kErrLaunchFailure, "cp.async copies 4, 8 or 16 bytes", in, w, l);
      return false;
    }
    if (in.mode == kCpBulk && (n % 16 != 0)) {
      fault(kErrMisaligned, "cp.async.bulk copies a multiple of 16 bytes", in, w, l);
      return false;
    }
    uint8_t *dst, *s = nullptr;
    if (!operandAddress(in, in.d, Space::kShared, n, w, l, dst)) return false;
    if (from && !operandAddress(in, in.a, Space::kGlobal, from, w, l, s)) return false;
    if (reinterpret_cast<uintptr_t>(dst) % std::min<uint32_t>(n, 16) != 0) {
      fault(kErrMisaligned, "misaligned cp.async destination", in, w, l);
      return false;
    }
    for (uint32_t k = 0; k < from; ++k) dst[k] = loadBytes(s + k, 1);
    std::memset(dst + from, 0, n - from);  // src-size < cp-size: the rest is zero-filled
    if (in.mode == kCpBulk) {
      uint8_t* bar;
      if (!operandAddress(in, in.c, Space::kShared, 8, w, l, bar)) return false;
      mbarrierArrive(bar, 0, false, -static_cast<int64_t>(n));  // complete_tx of the copied bytes
    }
  END_LANES
  return true;
}

// An mbarrier in shared memory, in rgpu's own layout (the hardware's is
// opaque to programs): bits 0-20 arrivals still pending in the current phase,
// 21-41 arrivals expected per phase, 42-62 transaction bytes still pending
// (signed), 63 the current phase's parity. A phase completes when no arrival
// and no transaction byte is pending; the next begins with the expected count.
namespace {
constexpr uint64_t kMbCountMask = (1ull << 21) - 1;
struct Mbar {
  uint64_t pending, expected;
  int64_t tx;
  uint64_t phase;
  static Mbar read(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    int64_t tx = static_cast<int64_t>((v >> 42) & kMbCountMask);
    if (tx & (1ll << 20)) tx -= 1ll << 21;
    return {v & kMbCountMask, (v >> 21) & kMbCountMask, tx, v >> 63};
  }
  void write(uint8_t* p) const {
    uint64_t v = (pending & kMbCountMask) | (expected & kMbCountMask) << 21 |
                 (static_cast<uint64_t>(tx) & kMbCountMask) << 42 | phase << 63;
    std::memcpy(p, &v, 8);
  }
};
}  // namespace

uint64_t BlockRunner::mbarrierArrive(uint8_t* bar, uint32_t count, bool drop, int64_t tx) {
  Mbar b = Mbar::read(bar);
  uint64_t arrived_in = b.phase;
  b.tx += tx;
  b.pending = count > b.pending ? 0 : b.pending - count;
  if (drop) b.expected = count > b.expected ? 0 : b.expected - count;
  if (b.pending == 0 && b.tx == 0) {
    b.phase ^= 1;
    b.pending = b.expected;
  }
  b.write(bar);
  return arrived_in << 63;  // the state token: the phase it arrived in
}

bool BlockRunner::execMbarrier(const Inst& in, Warp& w, uint32_t m) {
  uint64_t ta[32], tb[32];
  if (in.mode == kMbPendingCount) {
    const uint64_t* state = src(in.a, w, ta);
    uint64_t* D = &w.regs[static_cast<size_t>(in.d.reg) * 32];
    LANES(m) D[l] = state[l] & kMbCountMask;  // (tokens carry no count: 0)
    END_LANES
    return true;
  }
  const Operand& addr = (in.mode == kMbInit || in.mode == kMbInval || in.mode == kMbExpectTx || in.mode == kMbCompleteTx)
                            ? in.d : in.a;
  const Operand& arg = &addr == &in.d ? in.a : in.b;
  const uint64_t* A = arg.kind == Operand::kNone ? nullptr : src(arg, w, tb);
  uint64_t* D = in.d.kind == Operand::kReg ? &w.regs[static_cast<size_t>(in.d.reg) * 32] : nullptr;
  LANES(m)
    uint8_t* bar;
    if (!operandAddress(in, addr, Space::kShared, 8, w, l, bar)) return false;
    if (reinterpret_cast<uintptr_t>(bar) % 8 != 0) {
      fault(kErrMisaligned, "misaligned mbarrier", in, w, l);
      return false;
    }
    switch (in.mode) {
      case kMbInit: {
        uint64_t count = A ? A[l] : 1;
        if (count == 0 || count > kMbCountMask) {
          fault(kErrLaunchFailure, "mbarrier.init count out of range", in, w, l);
          return false;
        }
        Mbar{count, count, 0, 0}.write(bar);
        break;
      }
      case kMbInval:
        std::memset(bar, 0, 8);
        break;
      case kMbExpectTx:
      case kMbCompleteTx: {  // transaction bytes without an arrival
        int64_t n = static_cast<int64_t>(A ? A[l] : 0);
        mbarrierArrive(bar, 0, false, in.mode == kMbExpectTx ? n : -n);
        break;
      }
      case kMbArrive:
      case kMbArriveDrop: {
        // arrive.expect_tx: one arrival that first expects `b` bytes; else `b` arrivals (1 without).
        uint32_t count = in.approx ? 1 : static_cast<uint32_t>(A ? A[l] : 1);
        int64_t tx = in.approx ? static_cast<int64_t>(A ? A[l] : 0) : 0;
        uint64_t token = mbarrierArrive(bar, count, in.mode == kMbArriveDrop, tx);
        if (D) D[l] = token;
        break;
      }
      case kMbTestWait: {
        // Done when the phase named (by a state token, or by its parity) has completed.
        uint64_t parity = in.sat ? (A ? A[l] & 1 : 0) : (A ? A[l] >> 63 : 0);
        if (D) D[l] = Mbar::read(bar).phase != parity;
        break;
      }
      default:
        break;
    }
  END_LANES
  return true;
}

namespace {
// Elements of a wmma fragment: bits each and how many share one register
// (sub-byte elements packed from the low bits up, in memory and in registers).
int wmmaBits(Type t) {
  return t == Type::kF16 || t == Type::kBF16                                                 ? 16
         : t == Type::kS8 || t == Type::kU8 || t == Type::kE4M3 || t == Type::kE5M2 ? 8
         : t == Type::kS4 || t == Type::kU4                                          ? 4
         : t == Type::kB1                                                            ? 1
         : t == Type::kF64                                                           ? 64
                                                                                     : 32;
}
int wmmaPerReg(Type t) { return t == Type::kF64 ? 1 : 32 / wmmaBits(t); }
int wmmaBytes(Type t) { return wmmaBits(t) / 8; }  // whole-byte types
// One fragment, gathered from (or scattered to) the warp's registers.
struct Fragment {
  const std::vector<Operand>* regs;
  Type t;
  int slots;  // per lane
  uint64_t bits(const std::vector<uint64_t>& file, uint32_t e) const {
    uint32_t lane = e / static_cast<uint32_t>(slots), s = e % static_cast<uint32_t>(slots);
    int per = wmmaPerReg(t), width = wmmaBits(t);
    uint64_t v = file[static_cast<size_t>((*regs)[static_cast<size_t>(s / per)].reg) * 32 + lane];
    return width == 64 ? v : (v >> ((s % per) * width)) & ((1ull << width) - 1);
  }
  void set(std::vector<uint64_t>& file, uint32_t e, uint64_t bits) const {
    uint32_t lane = e / static_cast<uint32_t>(slots), s = e % static_cast<uint32_t>(slots);
    int per = wmmaPerReg(t), width = wmmaBits(t);
    uint64_t& v = file[static_cast<size_t>((*regs)[static_cast<size_t>(s / per)].reg) * 32 + lane];
    if (width == 64) {
      v = bits;
      return;
    }
    int shift = (s % per) * width;
    uint64_t mask = ((1ull << width) - 1) << shift;
    v = (v & ~mask & 0xffffffffull) | ((bits << shift) & mask);
  }
  double value(const std::vector<uint64_t>& file, uint32_t e) const {
    uint64_t b = bits(file, e);
    switch (t) {
      case Type::kS4: return static_cast<int>(b & 0xf) - (b & 8 ? 16 : 0);  // a signed nibble
      case Type::kU4: case Type::kB1: return static_cast<double>(b);
      case Type::kS8: return static_cast<int8_t>(b);
      case Type::kU8: return static_cast<uint8_t>(b);
      case Type::kS32: return static_cast<int32_t>(b);
      default: return readF(b, t);
    }
  }
};
}  // namespace

bool BlockRunner::execWmma(const Inst& in, Warp& w, uint32_t m) {
  const uint32_t M = in.m, N = in.n, K = in.k;
  auto dims = [&](uint8_t which, uint32_t& rows, uint32_t& cols) {
    rows = which == kWmmaLoadB ? K : M;
    cols = which == kWmmaLoadA ? K : N;
  };
  auto fragment = [&](const Operand& o, Type t, uint32_t rows, uint32_t cols, Fragment& f) {
    f.regs = &o.vec;
    f.t = t;
    f.slots = static_cast<int>(o.vec.size()) * wmmaPerReg(t);
    if (static_cast<uint64_t>(f.slots) * 32 < uint64_t{rows} * cols) {
      fault(kErrLaunchFailure, "wmma fragment of " + std::to_string(o.vec.size()) + " registers cannot hold the matrix", in, w,
            __builtin_ctz(m));
      return false;
    }
    return true;
  };
  if (in.mode == kWmmaMma) {
    Fragment fa, fb, fc, fd;
    if (!fragment(in.a, in.ab_type, M, K, fa) || !fragment(in.b, in.b_type, K, N, fb) ||
        !fragment(in.c, in.type, M, N, fc) || !fragment(in.d, in.dtype, M, N, fd))
      return false;
    // The whole warp's fragments: gathered before D (often C's registers) is written.
    std::vector<double> a(M * K), b(K * N), c(M * N);
    for (uint32_t e = 0; e < M * K; ++e) a[e] = fa.value(w.regs, e);
    for (uint32_t e = 0; e < K * N; ++e) b[e] = fb.value(w.regs, e);
    for (uint32_t e = 0; e < M * N; ++e) c[e] = fc.value(w.regs, e);
    bool integer = in.dtype == Type::kS32;
    for (uint32_t i = 0; i < M; ++i)
      for (uint32_t j = 0; j < N; ++j) {
        double acc = c[i * N + j];
        if (integer) {
          int64_t s = static_cast<int64_t>(acc);
          if (in.bool_op == BoolOp::kXor)  // .b1: popc of the row of A xor the column of B
            for (uint32_t k = 0; k < K; ++k) s += a[i * K + k] != b[k * N + j];
          else if (in.bool_op == BoolOp::kAnd)
            for (uint32_t k = 0; k < K; ++k) s += a[i * K + k] != 0 && b[k * N + j] != 0;
          else
            for (uint32_t k = 0; k < K; ++k) s += static_cast<int64_t>(a[i * K + k]) * static_cast<int64_t>(b[k * N + j]);
          if (in.sat) s = std::clamp<int64_t>(s, INT32_MIN, INT32_MAX);
          fd.set(w.regs, i * N + j, static_cast<uint32_t>(s));
        } else {
          for (uint32_t k = 0; k < K; ++k) acc += a[i * K + k] * b[k * N + j];
          fd.set(w.regs, i * N + j, writeF(acc, in.dtype));
        }
      }
    // Slots past the matrix (a fragment larger than it) read as zero.
    for (uint32_t e = M * N; e < static_cast<uint32_t>(fd.slots) * 32; ++e) fd.set(w.regs, e, 0);
    return true;
  }
  // Loads and stores: each lane moves its own slots; `.col`: column-major memory.
  uint32_t rows, cols;
  dims(in.mode == kWmmaStore ? kWmmaLoadC : in.mode, rows, cols);
  const bool col = in.layout & 1;
  const Operand& addr = in.mode == kWmmaStore ? in.d : in.a;
  const Operand& frag = in.mode == kWmmaStore ? in.a : in.d;
  const Operand& stride_op = in.b;
  Fragment f;
  if (!fragment(frag, in.type, rows, cols, f)) return false;
  uint64_t ts[32];
  const uint64_t* S = stride_op.kind == Operand::kNone ? nullptr : src(stride_op, w, ts);
  const int width = wmmaBits(in.type);  // the stride counts elements, sub-byte ones too
  LANES(m)
    uint64_t stride = S ? static_cast<uint32_t>(S[l]) : (col ? rows : cols);
    uint64_t span = ((col ? (uint64_t{cols} - 1) * stride + rows : (uint64_t{rows} - 1) * stride + cols) * width + 7) / 8;
    if (stride < (col ? rows : cols) || span > (1ull << 31)) {
      fault(kErrLaunchFailure, "wmma stride smaller than the matrix", in, w, l);
      return false;
    }
    uint8_t* p;
    if (!operandAddress(in, addr, in.space, static_cast<uint32_t>(span), w, l, p)) return false;
    for (int s = 0; s < f.slots; ++s) {
      uint32_t e = static_cast<uint32_t>(l) * static_cast<uint32_t>(f.slots) + static_cast<uint32_t>(s);
      uint64_t at = 0;
      bool inside = e < rows * cols;
      if (inside) {
        uint32_t r = e / cols, c = e % cols;
        at = (col ? uint64_t{c} * stride + r : uint64_t{r} * stride + c) * width;  // in bits
      }
      // A lane's part of the fragment: its own slots only (Fragment indexes the warp's).
      if (in.mode == kWmmaStore) {  // stores are of s32, f16, f32 or f64 accumulators
        if (inside) storeBytes(p + at / 8, f.bits(w.regs, e), width / 8);
      } else if (width < 8) {
        f.set(w.regs, e, inside ? (loadBytes(p + at / 8, 1) >> (at % 8)) & ((1u << width) - 1) : 0);
      } else {
        f.set(w.regs, e, inside ? loadBytes(p + at / 8, width / 8) : 0);
      }
    }
  END_LANES
  return true;
}

namespace {
// Where element i of a lane's mma.sync fragment sits in its matrix (the PTX
// ISA's "Matrix Fragments for mma.m16n8k*" tables): gid = lane / 4, tig = lane % 4.
void mmaCoord(uint8_t shape, char which, Type t, int lane, int i, uint32_t& row, uint32_t& col) {
  const int gid = lane >> 2, tig = lane & 3;
  // 8-bit floats have the 8-bit integers' fragments.
  const bool tf32 = t == Type::kB32, i8 = t == Type::kS8 || t == Type::kU8 || t == Type::kE4M3 || t == Type::kE5M2;
  if (which == 'c') {
    if (shape == kMmaM8N8K4) row = gid, col = tig * 2 + i;
    else row = gid + 8 * (i >= 2), col = tig * 2 + (i & 1);
    return;
  }
  if (which == 'a') {
    switch (shape) {
      case kMmaM16N8K16:
        if (i8) row = gid + 8 * (i >= 4), col = tig * 4 + (i & 3);
        else row = gid + 8 * ((i >> 1) & 1), col = tig * 2 + (i & 1) + 8 * (i >= 4);
        return;
      case kMmaM16N8K8:
        if (tf32) row = gid + 8 * (i & 1), col = tig + 4 * (i >= 2);
        else row = gid + 8 * (i >= 2), col = tig * 2 + (i & 1);
        return;
      case kMmaM16N8K4: row = gid + 8 * i, col = tig; return;
      case kMmaM16N8K32: row = gid + 8 * ((i >> 2) & 1), col = tig * 4 + (i & 3) + 16 * (i >= 8); return;
      default: row = gid, col = tig; return;  // m8n8k4 f64
    }
  }
  switch (shape) {  // b
    case kMmaM16N8K16:
      if (i8) row = tig * 4 + i, col = gid;
      else row = tig * 2 + (i & 1) + 8 * (i >= 2), col = gid;
      return;
    case kMmaM16N8K8:
      if (tf32) row = tig + 4 * i, col = gid;
      else row = tig * 2 + i, col = gid;
      return;
    case kMmaM16N8K4: row = tig, col = gid; return;
    case kMmaM16N8K32: row = tig * 4 + (i & 3) + 16 * (i >= 4), col = gid; return;
    default: row = tig, col = gid; return;  // m8n8k4 f64
  }
}
}  // namespace

bool BlockRunner::execMma(const Inst& in, Warp& w, uint32_t m) {
  static const uint32_t kDims[][3] = {{16, 8, 16}, {16, 8, 8}, {16, 8, 4}, {16, 8, 32}, {8, 8, 4}};
  const uint32_t M = kDims[in.mode][0], N = kDims[in.mode][1], K = kDims[in.mode][2];
  auto valueOf = [](uint64_t bits, Type t) -> double {
    switch (t) {
      case Type::kS8: return static_cast<int8_t>(bits);
      case Type::kU8: return static_cast<uint8_t>(bits);
      case Type::kS32: return static_cast<int32_t>(bits);
      case Type::kB32: return f32(bits);  // tf32: f32 bits (the low 13 mantissa bits count as the GPU may ignore them)
      case Type::kE4M3: return fromFp8(static_cast<uint8_t>(bits), false);
      case Type::kE5M2: return fromFp8(static_cast<uint8_t>(bits), true);
      default: return readF(bits, t);
    }
  };
  // Every lane's elements: registers of `op` hold per-register `per` elements of `bytes` each.
  auto walk = [&](const Operand& op, Type t, char which, uint32_t rows, uint32_t cols, auto&& visit) -> bool {
    int bytes = wmmaBytes(t == Type::kB32 ? Type::kF32 : t), per = t == Type::kF64 ? 1 : 4 / bytes;
    size_t count = op.vec.size() * static_cast<size_t>(per);
    for (int lane = 0; lane < 32; ++lane)
      for (size_t i = 0; i < count; ++i) {
        uint32_t r, c;
        mmaCoord(in.mode, which, t, lane, static_cast<int>(i), r, c);
        if (r >= rows || c >= cols) {
          fault(kErrLaunchFailure, "mma fragment with more registers than its shape has elements", in, w, lane);
          return false;
        }
        uint64_t& reg = w.regs[static_cast<size_t>(op.vec[i / static_cast<size_t>(per)].reg) * 32 + static_cast<size_t>(lane)];
        int shift = bytes == 8 ? 0 : static_cast<int>(i % static_cast<size_t>(per)) * bytes * 8;
        uint64_t mask = bytes == 8 ? ~0ull : ((1ull << (bytes * 8)) - 1) << shift;
        visit(reg, shift, mask, r * cols + c);
      }
    return true;
  };
  std::vector<double> a(M * K), b(K * N), c(M * N);
  auto gather = [&](std::vector<double>& into, Type t) {
    return [&into, t, &valueOf](uint64_t& reg, int shift, uint64_t mask, uint32_t e) { into[e] = valueOf((reg & mask) >> shift, t); };
  };
  if (!walk(in.a, in.ab_type, 'a', M, K, gather(a, in.ab_type)) || !walk(in.b, in.b_type, 'b', K, N, gather(b, in.b_type)) ||
      !walk(in.c, in.type, 'c', M, N, gather(c, in.type)))
    return false;
  std::vector<uint64_t> d(M * N);
  for (uint32_t i = 0; i < M; ++i)
    for (uint32_t j = 0; j < N; ++j) {
      if (in.dtype == Type::kS32) {
        int64_t s = static_cast<int64_t>(c[i * N + j]);
        for (uint32_t k = 0; k < K; ++k) s += static_cast<int64_t>(a[i * K + k]) * static_cast<int64_t>(b[k * N + j]);
        if (in.sat) s = std::clamp<int64_t>(s, INT32_MIN, INT32_MAX);
        d[i * N + j] = static_cast<uint32_t>(s);
      } else {
        double s = c[i * N + j];
        for (uint32_t k = 0; k < K; ++k) s += a[i * K + k] * b[k * N + j];
        d[i * N + j] = writeF(s, in.dtype);
      }
    }
  return walk(in.d, in.dtype, 'c', M, N, [&](uint64_t& reg, int shift, uint64_t mask, uint32_t e) {
    reg = mask == ~0ull ? d[e] : ((reg & ~mask & 0xffffffffull) | ((d[e] << shift) & mask));
  });
}

// ldmatrix/stmatrix .m8n8.b16: lane l names row l % 8 of matrix l / 8; each
// lane holds in register j two neighbouring elements of matrix j (row l / 4,
// columns 2 (l % 4) and one more; .trans: the transposed matrix's).
bool BlockRunner::execLdmatrix(const Inst& in, Warp& w, uint32_t m) {
  const int mats = in.vec;
  const bool store = in.mode == kLdmatrixStore, trans = in.layout & 1;
  const Operand& addr = store ? in.d : in.a;
  const Operand& regs = store ? in.a : in.d;
  uint8_t* rows[4][8];
  for (int j = 0; j < mats; ++j)
    for (int r = 0; r < 8; ++r) {
      int lane = j * 8 + r;
      if (!operandAddress(in, addr, Space::kShared, 16, w, lane, rows[j][r])) return false;
      if (reinterpret_cast<uintptr_t>(rows[j][r]) % 16 != 0) {
        fault(kErrMisaligned, "ldmatrix/stmatrix row address not 16-byte aligned", in, w, lane);
        return false;
      }
    }
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < mats; ++j) {
      uint64_t& reg = w.regs[static_cast<size_t>(regs.vec[static_cast<size_t>(j)].reg) * 32 + static_cast<size_t>(lane)];
      for (int h = 0; h < 2; ++h) {
        int r = lane / 4, c = (lane % 4) * 2 + h;
        if (trans) std::swap(r, c);
        uint8_t* p = rows[j][r] + c * 2;
        if (store) storeBytes(p, (reg >> (16 * h)) & 0xffff, 2);
        else reg = (reg & ~(0xffffull << (16 * h)) & 0xffffffffull) | (loadBytes(p, 2) << (16 * h));
      }
    }
  return true;
}

}  // namespace rgpu::server::ptx::detail
