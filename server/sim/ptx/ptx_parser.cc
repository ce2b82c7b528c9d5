#include "server/sim/ptx/ptx_parser.h"

#include "server/sim/ptx/ptx_liveness.h"
#include "server/sim/ptx/ptx_reconverge.h"
#include "server/sim/ptx/ptx_texture.h"

#include <cctype>
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <functional>
#include <unordered_map>

namespace rgpu::server::ptx {
namespace {

struct Token {
  std::string text;
  uint32_t line = 0;
};

// Splits PTX into tokens: identifiers/numbers (with '.', '$', '%', '_'),
// punctuation, and string literals. Comments are dropped.
Result<std::vector<Token>> tokenize(const std::string& s) {
  std::vector<Token> out;
  uint32_t line = 1;
  size_t i = 0;
  auto identChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' || c == '.';
  };
  while (i < s.size()) {
    if (out.size() > kMaxPtxTokens)
      return Status(kErrInvalidPtx, "PTX has more than " + std::to_string(kMaxPtxTokens) + " tokens (line " +
                                        std::to_string(line) + ")");
    char c = s[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == '\0') {
      ++i;
    } else if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (s.compare(i, 2, "/*") == 0) {
      size_t e = s.find("*/", i + 2);
      if (e == std::string::npos) return Status(kErrInvalidPtx, "unterminated comment");
      for (size_t k = i; k < e; ++k) line += s[k] == '\n';
      i = e + 2;
    } else if (c == '"') {
      size_t e = s.find('"', i + 1);
      if (e == std::string::npos) return Status(kErrInvalidPtx, "unterminated string at line " + std::to_string(line));
      out.push_back({s.substr(i, e - i + 1), line});
      i = e + 1;
    } else if (identChar(c) || c == '-' ) {
      size_t st = i;
      ++i;
      for (;;) {
        while (i < s.size() && identChar(s[i])) ++i;
        // Scoped qualifiers stay one token: .shared::cta, .mbarrier::complete_tx::bytes.
        if (i + 2 < s.size() && s[i] == ':' && s[i + 1] == ':' && identChar(s[i + 2])) {
          i += 2;
          continue;
        }
        break;
      }
      out.push_back({s.substr(st, i - st), line});
    } else {
      out.push_back({std::string(1, c), line});
      ++i;
    }
  }
  return out;
}

Status bad(uint32_t line, const std::string& what) {
  return Status(kErrInvalidPtx, "PTX line " + std::to_string(line) + ": " + what);
}

bool parseType(const std::string& m, Type& t) {
  static const std::unordered_map<std::string, Type> kTypes = {
      {"pred", Type::kPred}, {"b8", Type::kB8},     {"b16", Type::kB16},   {"b32", Type::kB32},
      {"b64", Type::kB64},   {"u8", Type::kU8},     {"u16", Type::kU16},   {"u32", Type::kU32},
      {"u64", Type::kU64},   {"s8", Type::kS8},     {"s16", Type::kS16},   {"s32", Type::kS32},
      {"s64", Type::kS64},   {"f16", Type::kF16},   {"f16x2", Type::kF16x2}, {"bf16", Type::kBF16},
      {"bf16x2", Type::kBF16x2}, {"f32", Type::kF32}, {"f64", Type::kF64},
  };
  auto it = kTypes.find(m);
  if (it == kTypes.end()) return false;
  t = it->second;
  return true;
}

bool parseSpecial(const std::string& n, Special& s) {
  static const std::unordered_map<std::string, Special> kSpecial = {
      {"%tid.x", Special::kTidX}, {"%tid.y", Special::kTidY}, {"%tid.z", Special::kTidZ},
      {"%ntid.x", Special::kNtidX}, {"%ntid.y", Special::kNtidY}, {"%ntid.z", Special::kNtidZ},
      {"%ctaid.x", Special::kCtaidX}, {"%ctaid.y", Special::kCtaidY}, {"%ctaid.z", Special::kCtaidZ},
      {"%nctaid.x", Special::kNctaidX}, {"%nctaid.y", Special::kNctaidY}, {"%nctaid.z", Special::kNctaidZ},
      {"%laneid", Special::kLaneid}, {"%warpid", Special::kWarpid}, {"%nwarpid", Special::kNwarpid},
      {"%lanemask_eq", Special::kLanemaskEq}, {"%lanemask_le", Special::kLanemaskLe},
      {"%lanemask_lt", Special::kLanemaskLt}, {"%lanemask_ge", Special::kLanemaskGe},
      {"%lanemask_gt", Special::kLanemaskGt}, {"%clock", Special::kClock}, {"%clock64", Special::kClock64},
      {"%globaltimer", Special::kGlobaltimer}, {"%smid", Special::kSmid}, {"%nsmid", Special::kNsmid},
      {"%gridid", Special::kGridid}, {"%dynamic_smem_size", Special::kDynamicSmem},
      {"%total_smem_size", Special::kTotalSmem},
      {"%cluster_ctaid.x", Special::kClusterCtaidX}, {"%cluster_ctaid.y", Special::kClusterCtaidY},
      {"%cluster_ctaid.z", Special::kClusterCtaidZ}, {"%cluster_nctaid.x", Special::kClusterNctaidX},
      {"%cluster_nctaid.y", Special::kClusterNctaidY}, {"%cluster_nctaid.z", Special::kClusterNctaidZ},
      {"%clusterid.x", Special::kClusteridX}, {"%clusterid.y", Special::kClusteridY},
      {"%clusterid.z", Special::kClusteridZ}, {"%nclusterid.x", Special::kNclusteridX},
      {"%nclusterid.y", Special::kNclusteridY}, {"%nclusterid.z", Special::kNclusteridZ},
      {"%cluster_ctarank", Special::kClusterCtarank}, {"%cluster_nctarank", Special::kClusterNctarank},
      {"%is_explicit_cluster", Special::kIsExplicitCluster},
  };
  auto it = kSpecial.find(n);
  if (it == kSpecial.end()) {
    // %envreg0..31: driver-defined; 1 and 2 hold the cooperative grid's workspace.
    if (n.rfind("%envreg", 0) == 0 && n.size() > 7 && n.size() <= 9 &&
        n.find_first_not_of("0123456789", 7) == std::string::npos && std::stoi(n.substr(7)) < 32) {
      int i = std::stoi(n.substr(7));
      s = i == 1 ? Special::kEnvregHi : i == 2 ? Special::kEnvregLo : Special::kEnvregOther;
      return true;
    }
    return false;
  }
  s = it->second;
  return true;
}

// Integer or float immediate: 123, -5, 0x1F, 0f3F800000 (f32 bits), 0d... (f64 bits), 1.5.
bool parseImmediate(const std::string& t, uint64_t& bits) {
  if (t.empty()) return false;
  const char* p = t.c_str();
  bool neg = *p == '-';
  if (neg) ++p;
  if ((p[0] == '0') && (p[1] == 'f' || p[1] == 'F' || p[1] == 'd' || p[1] == 'D') && p[2]) {
    char* end = nullptr;
    uint64_t v = std::strtoull(p + 2, &end, 16);
    if (*end) return false;
    bits = v;
    if (neg) bits ^= (p[1] == 'f' || p[1] == 'F') ? 0x80000000ull : 0x8000000000000000ull;
    return true;
  }
  if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
  char* end = nullptr;
  if (std::strchr(p, '.') || ((std::strchr(p, 'e') || std::strchr(p, 'E')) && !(p[0] == '0' && (p[1] == 'x' || p[1] == 'X')))) {
    double d = std::strtod(p, &end);
    if (*end) return false;
    if (neg) d = -d;
    std::memcpy(&bits, &d, 8);
    return true;
  }
  bool hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
  uint64_t v = std::strtoull(p, &end, hex ? 16 : (p[0] == '0' && p[1] ? 8 : 10));
  if (*end == 'U') ++end;  // 123U
  if (*end) return false;
  bits = neg ? 0 - v : v;  // two's complement, in unsigned arithmetic (-2^63 and wraps are defined)
  return true;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}
  Result<Module> run();

 private:
  bool atEnd() const { return i_ >= t_.size(); }
  const std::string& peek(size_t ahead = 0) const {
    static const std::string kEmpty;
    return i_ + ahead < t_.size() ? t_[i_ + ahead].text : kEmpty;
  }
  uint32_t line() const { return i_ < t_.size() ? t_[i_].line : (t_.empty() ? 0 : t_.back().line); }
  std::string next() { return atEnd() ? std::string() : t_[i_++].text; }
  Status expect(const std::string& s) {
    if (peek() != s) return bad(line(), "expected '" + s + "', found '" + peek() + "'");
    ++i_;
    return Status::ok();
  }
  void skipLine() {
    uint32_t l = line();
    while (!atEnd() && t_[i_].line == l) ++i_;
  }
  void skipTo(const std::string& s) {
    while (!atEnd() && peek() != s) ++i_;
  }

  Status parseGlobalVar(Space space, bool is_extern);
  Status parseFunction(bool is_entry);
  Status parseParamList(Function& f, bool kernel);
  Status parseBody(Function& f);
  Status parseInstruction(Function& f, Inst& inst);
  Status parseOperand(Function& f, Operand& o, bool allow_label = false, uint32_t* label = nullptr);
  Status declareRegs(Type type, Function& f);
  Result<uint64_t> parseArraySize();
  // The value after `.align`: a power of two up to 4096.
  Result<uint32_t> parseAlign();
  Status link();
  Status checkOperands(const Inst& in, const std::string& opcode);
  Status asyncModifiers(Inst& in, const std::vector<std::string>& parts, const std::string& opcode);
  Status parseOperands(Function& f, Inst& in, const std::string& opcode);
  Status wmmaModifiers(Inst& in, const std::vector<std::string>& parts, const std::string& opcode);
  Status mmaModifiers(Inst& in, const std::vector<std::string>& parts, const std::string& opcode);
  // tex, tld4, txq, suld, sust, suq (texture and surface objects: unified mode).
  Status textureInstruction(Function& f, Inst& in, const std::vector<std::string>& parts, const std::string& opcode);
  // [handle] or [handle, {coordinates}]: the handle into in.a, the coordinates into in.b.
  Status textureAddress(Function& f, Inst& in, const std::string& opcode);

  // Scoped register names (blocks `{ }` may redeclare names).
  std::vector<std::unordered_map<std::string, uint32_t>> scopes_;
  std::unordered_map<std::string, uint32_t> param_regs_;  // call-sequence .param names (scoped with scopes_)
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> kparams_;  // kernel param name -> (offset, size)
  std::unordered_map<std::string, uint32_t> labels_;
  std::vector<std::pair<uint32_t, std::string>> fixups_;  // instruction index -> label
  uint64_t module_insts_ = 0;  // decoded so far, linked copies included
  static std::string moduleTooLarge() {
    return "module has more than " + std::to_string(kMaxInstsPerModule) +
           " instructions (device functions count once per kernel that calls them)";
  }
  std::unordered_map<std::string, uint32_t> fn_shared_;   // function-scope .shared name -> offset
  std::string local_depot_;
  uint32_t fn_shared_end_ = 0;
  bool has_dynamic_shared_ = false;
  std::string dynamic_shared_name_;
  std::unordered_map<std::string, uint32_t> module_dyn_shared_;  // name -> alignment
  std::vector<std::string> pending_params_;  // .func parameters, bound to registers by parseBody
  std::string pending_ret_;                  // .func return value name

  std::vector<Token> t_;
  size_t i_ = 0;
  Module m_;
  std::unordered_map<std::string, int32_t> global_index_;
};

Result<uint32_t> Parser::parseAlign() {
  uint64_t a = 0;
  if (!parseImmediate(next(), a) || a == 0 || a > 4096 || (a & (a - 1))) return bad(line(), "bad .align");
  return static_cast<uint32_t>(a);
}

Result<uint64_t> Parser::parseArraySize() {
  if (peek() != "[") return uint64_t{1};
  ++i_;
  if (peek() == "]") {
    ++i_;
    return uint64_t{0};  // unsized (extern shared / initialised)
  }
  uint64_t n = 0;
  if (!parseImmediate(next(), n)) return bad(line(), "bad array size");
  RGPU_TRY(expect("]"));
  return n;
}

Status Parser::parseGlobalVar(Space space, bool is_extern) {
  uint32_t l = line();
  Global g;
  g.space = space;
  Type type = Type::kNone;
  while (!atEnd() && peek()[0] == '.') {
    std::string m = next();
    if (m == ".align") {
      auto a = parseAlign();
      if (!a) return a.status();
      g.align = *a;
    } else if (m == ".attribute") {  // .attribute(.managed)
      RGPU_TRY(expect("("));
      std::string attr = next();
      RGPU_TRY(expect(")"));
      if (attr != ".managed") return bad(l, "unknown variable attribute " + attr);
      g.managed = true;
    } else if (m == ".v2" || m == ".v4") {
      return bad(l, "vector-typed module variables are not supported");
    } else if (!parseType(m.substr(1), type)) {
      if (m == ".texref" || m == ".surfref" || m == ".samplerref") return bad(l, "textures and surfaces are not supported");
      return bad(l, "unknown variable qualifier " + m);
    }
  }
  g.name = next();
  if (g.name.empty()) return bad(l, "variable without a name");
  uint64_t count = 1;
  int elem = typeBytes(type);
  if (elem == 0) return bad(l, "variable " + g.name + " has no size type");
  // Possibly multi-dimensional: [a][b]
  bool unsized = false;
  while (peek() == "[") {
    auto n = parseArraySize();
    if (!n) return n.status();
    if (*n == 0) unsized = true;
    else count *= *n;
    if (count > kMaxGlobalBytes) return bad(l, "variable " + g.name + " too large");
  }
  std::vector<uint64_t> values;
  if (peek() == "=") {
    ++i_;
    auto value = [&]() -> Status {
      std::string v = next();
      uint64_t bits = 0;
      if (parseImmediate(v, bits)) {
        values.push_back(bits);
        return Status::ok();
      }
      if (v == "generic" && peek() == "(") {  // generic(sym)
        ++i_;
        std::string sym = next();
        RGPU_TRY(expect(")"));
        g.address_inits.emplace_back(values.size() * static_cast<uint64_t>(elem), sym);
        values.push_back(0);
        return Status::ok();
      }
      if (global_index_.count(v)) {
        g.address_inits.emplace_back(values.size() * static_cast<uint64_t>(elem), v);
        values.push_back(0);
        return Status::ok();
      }
      return bad(l, "unsupported initializer '" + v + "' for " + g.name);
    };
    if (peek() == "{") {
      int depth = 0;
      do {
        std::string p = peek();
        if (p == "{") {
          ++depth;
          ++i_;
        } else if (p == "}") {
          --depth;
          ++i_;
        } else if (p == ",") {
          ++i_;
        } else {
          RGPU_TRY(value());
        }
        if (values.size() > kMaxGlobalBytes) return bad(l, "initializer too large");
      } while (depth > 0 && !atEnd());
    } else {
      RGPU_TRY(value());
    }
    if (unsized) count = values.size();
  }
  RGPU_TRY(expect(";"));
  if (is_extern) return Status::ok();  // defined elsewhere: we cannot resolve it
  g.size = count * static_cast<uint64_t>(elem);
  if (g.size > kMaxGlobalBytes) return bad(l, "variable " + g.name + " too large");
  if (space == Space::kShared) {
    uint32_t off = (m_.module_shared_bytes + g.align - 1) & ~(g.align - 1);
    if (off + g.size > kMaxSharedBytes) return bad(l, "shared memory beyond " + std::to_string(kMaxSharedBytes) + " bytes");
    m_.module_shared[g.name] = off;
    m_.module_shared_bytes = off + static_cast<uint32_t>(g.size);
    return Status::ok();
  }
  g.init.assign(g.size, 0);
  for (size_t k = 0; k < values.size() && (k + 1) * elem <= g.size; ++k)
    std::memcpy(g.init.data() + k * elem, &values[k], static_cast<size_t>(elem));
  global_index_[g.name] = static_cast<int32_t>(m_.globals.size());
  m_.globals.push_back(std::move(g));
  return Status::ok();
}

Status Parser::parseParamList(Function& f, bool kernel) {
  RGPU_TRY(expect("("));
  uint32_t end = 0;
  while (peek() != ")") {
    if (atEnd()) return bad(line(), "unterminated parameter list");
    RGPU_TRY(expect(".param"));
    uint32_t elem = 0, align = 0;
    bool after_ptr = false;
    Type type = Type::kNone;
    while (peek()[0] == '.') {
      std::string m = next();
      if (m == ".align") {
        auto a = parseAlign();
        if (!a) return a.status();
        if (!after_ptr) align = *a;
      } else if (m == ".ptr") {
        after_ptr = true;
      } else if (parseType(m.substr(1), type)) {
        elem = static_cast<uint32_t>(typeBytes(type));
      }
    }
    std::string name = next();
    auto n = parseArraySize();
    if (!n) return n.status();
    if (elem == 0 || *n == 0 || *n > 65536) return bad(line(), "unsupported parameter " + name);
    if (align == 0) align = elem;
    uint32_t off = (end + align - 1) & ~(align - 1);
    uint32_t size = elem * static_cast<uint32_t>(*n);
    if (kernel) {
      f.params.emplace_back(off, size);
      kparams_[name] = {off, size};
    } else {
      if (size > 8) return bad(line(), "device function parameter " + name + " larger than 8 bytes is not supported yet");
      pending_params_.push_back(name);
    }
    end = off + size;
    if (end > 65536) return bad(line(), "parameter block too large");
    if (peek() == ",") ++i_;
  }
  ++i_;
  f.param_bytes = end;
  return Status::ok();
}

Status Parser::declareRegs(Type type, Function& f) {
  // .reg .b32 %r<10>;   .reg .pred p, q;   .reg .b64 x;
  for (;;) {
    std::string name = next();
    if (name.empty()) return bad(line(), "bad .reg");
    uint64_t count = 0;
    bool ranged = false;
    if (peek() == "<") {
      ++i_;
      if (!parseImmediate(next(), count) || count > kMaxRegsPerFunction) return bad(line(), "bad register count");
      RGPU_TRY(expect(">"));
      ranged = true;
    }
    if (ranged) {
      for (uint64_t k = 0; k < count; ++k) scopes_.back()[name + std::to_string(k)] = f.num_regs++;
    } else {
      scopes_.back()[name] = f.num_regs++;
    }
    if (f.num_regs > kMaxRegsPerFunction) return bad(line(), "too many registers");
    (void)type;
    if (peek() == ",") {
      ++i_;
      continue;
    }
    return expect(";");
  }
}

Status Parser::parseOperand(Function& f, Operand& o, bool allow_label, uint32_t* label) {
  std::string tok = peek();
  if (tok == "{") {  // vector
    ++i_;
    o.kind = Operand::kVec;
    while (peek() != "}") {
      if (atEnd()) return bad(line(), "unterminated vector operand");
      Operand e;
      RGPU_TRY(parseOperand(f, e));
      o.vec.push_back(std::move(e));
      if (peek() == ",") ++i_;
    }
    ++i_;
    if (o.vec.empty() || o.vec.size() > 8) return bad(line(), "bad vector operand");
    return Status::ok();
  }
  if (tok == "[") {
    ++i_;
    o.kind = Operand::kAddr;
    std::string base = next();
    auto lookupReg = [&](const std::string& n, uint32_t& r) {
      for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
        auto f2 = it->find(n);
        if (f2 != it->end()) {
          r = f2->second;
          return true;
        }
      }
      return false;
    };
    uint64_t imm = 0;
    uint32_t r = 0;
    if (lookupReg(base, r)) {
      o.has_base = true;
      o.reg = r;
    } else if (param_regs_.count(base)) {
      o.kind = Operand::kParamReg;
      o.reg = param_regs_[base];
    } else if (auto kp = kparams_.find(base); kp != kparams_.end()) {
      o.sym_space = Space::kParam;
      o.imm = kp->second.first;
    } else if (auto g = global_index_.find(base); g != global_index_.end()) {
      o.sym_space = m_.globals[g->second].space;
      o.global = g->second;
    } else if (auto ms = m_.module_shared.find(base); ms != m_.module_shared.end()) {
      o.sym_space = Space::kShared;
      o.imm = ms->second;
    } else if (auto fs = fn_shared_.find(base); fs != fn_shared_.end()) {
      o.sym_space = Space::kShared;
      o.imm = fs->second;
    } else if ((base == dynamic_shared_name_ && has_dynamic_shared_) || module_dyn_shared_.count(base)) {
      o.sym_space = Space::kShared;
      o.imm = UINT32_MAX;  // patched: the end of static shared memory
    } else if (base == local_depot_ && !local_depot_.empty()) {
      o.sym_space = Space::kLocal;
      o.imm = 0;
    } else if (parseImmediate(base, imm)) {
      o.imm = imm;
    } else {
      return bad(line(), "unknown address '" + base + "'");
    }
    if (peek() == "+" || (peek().size() > 1 && peek()[0] == '-')) {
      if (peek() == "+") ++i_;
      uint64_t off = 0;
      if (!parseImmediate(next(), off)) return bad(line(), "bad address offset");
      o.imm += off;
    }
    return expect("]");
  }
  ++i_;
  if (tok == "_") {
    o.kind = Operand::kSink;
    return Status::ok();
  }
  // Register (scoped), special register, immediate, symbol, label.
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto r = it->find(tok);
    if (r != it->end()) {
      o.kind = Operand::kReg;
      o.reg = r->second;
      return Status::ok();
    }
  }
  if (tok == "WARP_SZ") {  // the predefined constant (warpSize in CUDA C++)
    o.kind = Operand::kImm;
    o.imm = 32;
    return Status::ok();
  }
  if (tok == "!") {
    RGPU_TRY(parseOperand(f, o));
    if (o.kind != Operand::kReg) return bad(line(), "'!' applies to predicate registers only");
    o.neg = true;
    return Status::ok();
  }
  if (auto pr = param_regs_.find(tok); pr != param_regs_.end()) {
    o.kind = Operand::kParamReg;
    o.reg = pr->second;
    return Status::ok();
  }
  Special sp;
  if (parseSpecial(tok, sp)) {
    o.kind = Operand::kSpecial;
    o.special = sp;
    return Status::ok();
  }
  uint64_t imm = 0;
  if (parseImmediate(tok, imm)) {
    o.kind = Operand::kImm;
    o.imm = imm;
    return Status::ok();
  }
  o.kind = Operand::kImm;
  if (auto g = global_index_.find(tok); g != global_index_.end()) {
    o.sym_space = m_.globals[g->second].space;
    o.global = g->second;
    return Status::ok();
  }
  if (auto ms = m_.module_shared.find(tok); ms != m_.module_shared.end()) {
    o.sym_space = Space::kShared;
    o.imm = ms->second;
    return Status::ok();
  }
  if (auto fs = fn_shared_.find(tok); fs != fn_shared_.end()) {
    o.sym_space = Space::kShared;
    o.imm = fs->second;
    return Status::ok();
  }
  if ((tok == dynamic_shared_name_ && has_dynamic_shared_) || module_dyn_shared_.count(tok)) {
    o.sym_space = Space::kShared;
    o.imm = UINT32_MAX;
    auto a = module_dyn_shared_.find(tok);
    if (a != module_dyn_shared_.end()) f.shared_align = std::max(f.shared_align, a->second);
    return Status::ok();
  }
  if (tok == local_depot_ && !local_depot_.empty()) {
    o.sym_space = Space::kLocal;
    o.imm = 0;
    return Status::ok();
  }
  if (auto kp = kparams_.find(tok); kp != kparams_.end()) {
    // The parameter's address in the param window (__grid_constant__).
    o.sym_space = Space::kParam;
    o.imm = kp->second.first;
    return Status::ok();
  }
  if (allow_label && label) {
    fixups_.emplace_back(*label, tok);
    o.kind = Operand::kNone;
    return Status::ok();
  }
  return bad(line(), "unknown operand '" + tok + "'");
}

Status Parser::parseInstruction(Function& f, Inst& in) {
  in.line = line();
  if (peek() == "@") {
    ++i_;
    if (peek() == "!") {
      in.guard_neg = true;
      ++i_;
    }
    Operand g;
    RGPU_TRY(parseOperand(f, g));
    if (g.kind != Operand::kReg) return bad(in.line, "bad guard predicate");
    in.guard = static_cast<int32_t>(g.reg);
  }
  std::string opcode = next();
  std::vector<std::string> parts;
  size_t st = 0;
  while (st <= opcode.size()) {
    size_t dot = opcode.find('.', st);
    if (dot == std::string::npos) dot = opcode.size();
    parts.push_back(opcode.substr(st, dot - st));
    st = dot + 1;
  }
  const std::string& base = parts[0];
  static const std::unordered_map<std::string, Op> kOps = {
      {"mov", Op::kMov}, {"add", Op::kAdd}, {"sub", Op::kSub}, {"mul", Op::kMul}, {"mad", Op::kMad},
      {"mul24", Op::kMul24}, {"mad24", Op::kMad24}, {"fma", Op::kFma}, {"div", Op::kDiv}, {"rem", Op::kRem},
      {"abs", Op::kAbs}, {"neg", Op::kNeg}, {"min", Op::kMin}, {"max", Op::kMax}, {"and", Op::kAnd},
      {"or", Op::kOr}, {"xor", Op::kXor}, {"not", Op::kNot}, {"cnot", Op::kCnot}, {"shl", Op::kShl},
      {"shr", Op::kShr}, {"shf", Op::kShf}, {"bfe", Op::kBfe}, {"bfi", Op::kBfi}, {"brev", Op::kBrev},
      {"clz", Op::kClz}, {"popc", Op::kPopc}, {"bmsk", Op::kBmsk}, {"bfind", Op::kBfind}, {"fns", Op::kFns}, {"prmt", Op::kPrmt}, {"lop3", Op::kLop3}, {"selp", Op::kSelp},
      {"slct", Op::kSlct}, {"setp", Op::kSetp}, {"set", Op::kSet}, {"cvt", Op::kCvt}, {"cvta", Op::kCvta},
      {"ld", Op::kLd}, {"ldu", Op::kLd}, {"st", Op::kSt}, {"bra", Op::kBra}, {"ret", Op::kRet},
      {"exit", Op::kExit}, {"trap", Op::kTrap}, {"atom", Op::kAtom}, {"red", Op::kRed}, {"bar", Op::kBar},
      {"barrier", Op::kBar}, {"membar", Op::kMembar}, {"fence", Op::kMembar}, {"shfl", Op::kShfl},
      {"vote", Op::kVote}, {"redux", Op::kRedux}, {"activemask", Op::kActivemask}, {"match", Op::kMatch},
      {"nanosleep", Op::kNanosleep}, {"rcp", Op::kRcp}, {"sqrt", Op::kSqrt}, {"rsqrt", Op::kRsqrt},
      {"ex2", Op::kEx2}, {"lg2", Op::kLg2}, {"sin", Op::kSin}, {"cos", Op::kCos}, {"tanh", Op::kTanh},
      {"copysign", Op::kCopysign}, {"testp", Op::kTestp}, {"call", Op::kCallPrintf}, {"prefetch", Op::kNop},
      {"prefetchu", Op::kNop}, {"pmevent", Op::kNop}, {"cp", Op::kCpAsync}, {"mbarrier", Op::kMbarrier},
      {"wmma", Op::kWmma}, {"mma", Op::kMma}, {"addc", Op::kAddCarry}, {"subc", Op::kAddCarry},
      {"dp4a", Op::kDp4a}, {"dp2a", Op::kDp2a}, {"sad", Op::kSad}, {"elect", Op::kElect},
      {"isspacep", Op::kIsspacep}, {"createpolicy", Op::kZero}, {"griddepcontrol", Op::kNop},
      {"setmaxnreg", Op::kNop}, {"discard", Op::kNop}, {"applypriority", Op::kNop}, {"ldmatrix", Op::kLdmatrix}, {"stmatrix", Op::kLdmatrix},
      {"madc", Op::kMad}, {"szext", Op::kSzext}, {"movmatrix", Op::kMovmatrix},
      {"alloca", Op::kAlloca}, {"stacksave", Op::kStackSave}, {"stackrestore", Op::kStackRestore},
      {"mapa", Op::kMapa}, {"getctarank", Op::kGetctarank},
      {"tex", Op::kTex}, {"tld4", Op::kTld4}, {"txq", Op::kTxq}, {"suld", Op::kSuld}, {"sust", Op::kSust},
      {"suq", Op::kSuq},
  };
  auto op = kOps.find(base);
  if (op == kOps.end()) return bad(in.line, "instruction '" + opcode + "' is not supported by the rgpu PTX interpreter");
  in.op = op->second;
  if (in.op == Op::kAlloca || in.op == Op::kStackSave || in.op == Op::kStackRestore) f.uses_stack = true;
  if (in.op == Op::kCpAsync || in.op == Op::kMbarrier) {
    RGPU_TRY(asyncModifiers(in, parts, opcode));
    return parseOperands(f, in, opcode);
  }
  if (in.op == Op::kWmma) {
    RGPU_TRY(wmmaModifiers(in, parts, opcode));
    return parseOperands(f, in, opcode);
  }
  if (in.op == Op::kMma || in.op == Op::kLdmatrix) {
    RGPU_TRY(mmaModifiers(in, parts, opcode));
    return parseOperands(f, in, opcode);
  }
  if (in.op >= Op::kTex && in.op <= Op::kSuq) return textureInstruction(f, in, parts, opcode);
  // Hints with nothing to do on the host, whatever their qualifiers: programmatic
  // dependent launch (griddepcontrol: the previous grid has finished when this one
  // runs here), register reallocation, L2 discard/priority; createpolicy makes a
  // cache policy (an opaque 64-bit value, 0 here) for .L2::cache_hint accesses.
  if (in.op == Op::kNop && (base == "griddepcontrol" || base == "setmaxnreg" || base == "discard" ||
                            base == "applypriority")) {
    while (peek() != ";" && !atEnd()) ++i_;
    return expect(";");
  }
  if (in.op == Op::kZero) return parseOperands(f, in, opcode);
  if (in.op == Op::kElect) return parseOperands(f, in, opcode);  // elect.sync d|p, membermask
  if (in.op == Op::kIsspacep) {
    static const std::unordered_map<std::string, Space> kSpaces = {
        {"global", Space::kGlobal}, {"shared", Space::kShared}, {"shared::cta", Space::kShared},
        {"local", Space::kLocal}, {"param", Space::kParam}, {"const", Space::kConst}};
    if (parts.size() != 2 || !kSpaces.count(parts[1])) return bad(in.line, "instruction '" + opcode + "' is not supported");
    in.space = kSpaces.at(parts[1]);
    return parseOperands(f, in, opcode);
  }
  if (in.op == Op::kBar && parts.size() > 1 && parts[1] == "warp") in.op = Op::kBarWarp;
  // st.async / red.async ... .mbarrier::complete_tx::bytes [addr], value, [mbar]: the store (or
  // reduction) as st/red; the mbarrier named by the third operand then completes its bytes.
  bool async_remote = false;
  if ((in.op == Op::kSt || in.op == Op::kRed) && parts.size() > 1 && parts[1] == "async") {
    async_remote = true;
    parts.erase(parts.begin() + 1);
    auto tx = std::find(parts.begin(), parts.end(), "mbarrier::complete_tx::bytes");
    if (tx == parts.end()) return bad(in.line, "instruction '" + opcode + "' without .mbarrier::complete_tx::bytes is not supported");
    parts.erase(tx);
    parts.erase(std::remove(parts.begin(), parts.end(), std::string("weak")), parts.end());
  }
  if (in.op == Op::kBar && parts.size() > 1 && parts[1] == "cluster") {  // barrier.cluster.arrive|wait{.relaxed|.acquire}{.aligned}
    if (parts.size() < 3 || (parts[2] != "arrive" && parts[2] != "wait"))
      return bad(in.line, "instruction '" + opcode + "' is not supported");
    for (size_t k = 3; k < parts.size(); ++k)
      if (parts[k] != "relaxed" && parts[k] != "acquire" && parts[k] != "release" && parts[k] != "aligned")
        return bad(in.line, "modifier ." + parts[k] + " of '" + opcode + "' is not supported");
    in.op = parts[2] == "arrive" ? Op::kClusterArrive : Op::kClusterWait;
    return parseOperands(f, in, opcode);
  }
  // Extended-precision integer arithmetic: add.cc / addc{.cc} / sub.cc / subc{.cc}.
  if (in.op == Op::kAddCarry) in.mode = kCarryIn | (base == "subc" ? kCarrySub : 0);
  if (base == "madc") in.carry = kCarryIn;  // madc{.hi,.lo}{.cc}: plus the carry flag
  if ((in.op == Op::kAdd || in.op == Op::kSub) && std::find(parts.begin(), parts.end(), "cc") != parts.end())
    in.mode = in.op == Op::kSub ? kCarrySub : 0, in.op = Op::kAddCarry;

  // Modifiers.
  std::vector<Type> types;
  for (size_t k = 1; k < parts.size(); ++k) {
    // Scoped forms: .shared::cta is this block's shared memory (a block is its
    // own cluster here, so .shared::cluster is too); L1::/L2:: cache hints
    // change nothing on the host (a cache-policy operand is read and ignored).
    std::string m = parts[k];
    if (m == "shared::cta" || m == "shared::cluster") m = "shared";
    if (in.op == Op::kCvt && m == "tf32") {  // cvt.{rna,rn,rz}{.satfinite}.tf32.f32
      in.mode = kCvtToTf32;
      types.push_back(Type::kB32);
      continue;
    }
    if (in.op == Op::kCvt && (m == "e4m3x2" || m == "e5m2x2")) {  // 8-bit float pairs (sm_89+)
      in.mode = types.empty() ? kCvtToFp8x2 : kCvtFromFp8x2;
      in.layout = m == "e5m2x2" ? 1 : 0;
      types.push_back(Type::kB16);
      continue;
    }
    if (in.op == Op::kCvt && m == "relu") {
      in.relu = true;
      continue;
    }
    if (in.op == Op::kCvt && m == "rna") {
      in.round = Round::kRna;
      continue;
    }
    if (m.rfind("L1::", 0) == 0 || m.rfind("L2::", 0) == 0) continue;
    Type t;
    if (parseType(m, t)) {
      types.push_back(t);
      continue;
    }
    static const std::unordered_map<std::string, Cmp> kCmp = {
        {"eq", Cmp::kEq}, {"ne", Cmp::kNe}, {"lt", Cmp::kLt}, {"le", Cmp::kLe}, {"gt", Cmp::kGt},
        {"ge", Cmp::kGe}, {"lo", Cmp::kLo}, {"ls", Cmp::kLs}, {"hi", Cmp::kHi}, {"hs", Cmp::kHs},
        {"equ", Cmp::kEqu}, {"neu", Cmp::kNeu}, {"ltu", Cmp::kLtu}, {"leu", Cmp::kLeu}, {"gtu", Cmp::kGtu},
        {"geu", Cmp::kGeu}, {"num", Cmp::kNum}, {"nan", Cmp::kNan}};
    bool compare_op = in.op == Op::kSetp || in.op == Op::kSet || in.op == Op::kSlct;
    if (compare_op && kCmp.count(m)) {
      in.cmp = kCmp.at(m);
      continue;
    }
    if (m == "lo" || m == "hi" || m == "wide") {
      in.mode = m == "lo" ? kModeLo : m == "hi" ? kModeHi : kModeWide;
      continue;
    }
    if (compare_op && (m == "and" || m == "or" || m == "xor")) {
      in.bool_op = m == "and" ? BoolOp::kAnd : m == "or" ? BoolOp::kOr : BoolOp::kXor;
      continue;
    }
    static const std::unordered_map<std::string, Round> kRound = {
        {"rn", Round::kRn}, {"rz", Round::kRz}, {"rm", Round::kRm}, {"rp", Round::kRp},
        {"rni", Round::kRni}, {"rzi", Round::kRzi}, {"rmi", Round::kRmi}, {"rpi", Round::kRpi}};
    if (kRound.count(m)) {
      in.round = kRound.at(m);
      continue;
    }
    static const std::unordered_map<std::string, Space> kSpace = {
        {"global", Space::kGlobal}, {"shared", Space::kShared}, {"local", Space::kLocal},
        {"param", Space::kParam}, {"const", Space::kConst}, {"generic", Space::kGeneric}};
    if (kSpace.count(m) && in.op != Op::kMembar) {
      in.space = kSpace.at(m);
      continue;
    }
    bool atomic = in.op == Op::kAtom || in.op == Op::kRed || in.op == Op::kRedux;
    static const std::unordered_map<std::string, AtomOp> kAtom = {
        {"add", AtomOp::kAdd}, {"min", AtomOp::kMin}, {"max", AtomOp::kMax}, {"exch", AtomOp::kExch},
        {"cas", AtomOp::kCas}, {"and", AtomOp::kAnd}, {"or", AtomOp::kOr}, {"xor", AtomOp::kXor},
        {"inc", AtomOp::kInc}, {"dec", AtomOp::kDec}};
    if (atomic && kAtom.count(m)) {
      in.atom = kAtom.at(m);
      continue;
    }
    if (in.op == Op::kShfl && (m == "up" || m == "down" || m == "bfly" || m == "idx")) {
      in.mode = m == "up" ? kShflUp : m == "down" ? kShflDown : m == "bfly" ? kShflBfly : kShflIdx;
      continue;
    }
    if (in.op == Op::kVote && (m == "all" || m == "any" || m == "uni" || m == "ballot")) {
      in.mode = m == "all" ? kVoteAll : m == "any" ? kVoteAny : m == "uni" ? kVoteUni : kVoteBallot;
      continue;
    }
    if (in.op == Op::kBar && (m == "arrive" || m == "red" || m == "popc")) {
      if (m == "arrive") in.mode = kBarArrive;
      if (m == "popc") in.mode = kBarRedPopc;
      if (m == "red" && in.mode == kBarSync) in.mode = kBarRedOr;  // refined by .and/.or/.popc
      continue;
    }
    if (in.op == Op::kBar && (m == "and" || m == "or")) {
      in.mode = m == "and" ? kBarRedAnd : kBarRedOr;
      continue;
    }
    if (in.op == Op::kMatch && (m == "any" || m == "all")) {
      in.mode = m == "all" ? 1 : 0;
      continue;
    }
    if (in.op == Op::kShf && (m == "l" || m == "r" || m == "wrap" || m == "clamp")) {
      if (m == "r") in.mode |= kShfRight;
      if (m == "wrap") in.mode |= kShfWrap;
      continue;
    }
    if (in.op == Op::kBarWarp && m == "warp") continue;  // bar.warp.sync (__syncwarp)
    if (in.op == Op::kMembar && m == "gl") continue;     // membar.gl: membar.cta/.sys's device-wide sibling
    if (in.op == Op::kAddCarry && m == "cc") {
      in.mode |= kCarryOut;
      continue;
    }
    if (in.op == Op::kMad && m == "cc") {  // mad.cc / madc.cc: carry out into the next madc/addc
      in.carry |= kCarryOut;
      continue;
    }
    if (in.op == Op::kSzext && (m == "clamp" || m == "wrap")) {
      in.mode = m == "wrap" ? kBmskWrap : kBmskClamp;
      continue;
    }
    if (in.op == Op::kMovmatrix && (m == "m8n8" || m == "trans")) continue;  // its only shape

    if (in.op == Op::kBmsk && (m == "clamp" || m == "wrap")) {
      in.mode = m == "wrap" ? kBmskWrap : kBmskClamp;
      continue;
    }
    if (in.op == Op::kBfind && m == "shiftamt") {
      in.mode = kBfindShiftAmount;
      continue;
    }
    if (in.op == Op::kCvta && m == "to") {
      in.mode = kCvtaTo;
      continue;
    }
    if (m == "v2" || m == "v4") {
      in.vec = m == "v2" ? 2 : 4;
      continue;
    }
    if (m == "ftz") {
      in.ftz = true;
      continue;
    }
    if (m == "sat" || m == "satfinite") {
      in.sat = true;
      continue;
    }
    if (m == "approx" || m == "full") {
      in.approx = m == "approx";
      continue;
    }
    if (in.op == Op::kPrmt && (m == "f4e" || m == "b4e" || m == "rc8" || m == "ecl" || m == "ecr" || m == "rc16")) {
      static const char* kModes[] = {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
      for (uint8_t k = 0; k < 6; ++k)
        if (m == kModes[k]) in.mode = static_cast<uint8_t>(k + 1);
      continue;
    }
    if (in.op == Op::kTestp && (m == "finite" || m == "infinite" || m == "number" || m == "notanumber" ||
                                m == "normal" || m == "subnormal")) {
      static const char* kModes[] = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"};
      for (uint8_t k = 0; k < 6; ++k)
        if (m == kModes[k]) in.mode = k;
      continue;
    }
    // Qualifiers with no effect on a single-machine interpreter.
    static const char* kIgnored[] = {"uni", "sync", "aligned", "volatile", "relaxed", "acquire", "release",
                                     "acq_rel", "sc", "cta", "gpu", "sys", "nc", "ca", "cg", "cs", "lu", "cv",
                                     "wb", "wt", "shiftamt", "noftz", "L1", "L2", "evict_normal", "evict_last",
                                     "evict_first", "no_allocate", "64B", "128B", "256B", "red", "arrive", "u",
                                     "cluster", "mmio", "proxy", "async", "noinc", "b128"};
    bool ignored = false;
    for (const char* ig : kIgnored) ignored |= m == ig;
    if (ignored) continue;
    return bad(in.line, "modifier ." + m + " of '" + opcode + "' is not supported");
  }
  if (!types.empty()) in.type = types.back();
  if ((in.op == Op::kCvt || in.op == Op::kSet || in.op == Op::kSlct || in.op == Op::kDp4a || in.op == Op::kDp2a) &&
      types.size() == 2) {
    in.dtype = types[0];
    in.type = types[1];
  } else {
    in.dtype = in.type;
  }
  if (in.op == Op::kSetp && in.type == Type::kNone) return bad(in.line, "setp without a type");

  // Operands.
  if (in.op == Op::kCallPrintf) {
    // call[.uni] (ret), name, (args);   call name, (args);
    std::vector<Operand> rets, args;
    std::string callee;
    if (peek() == "(") {
      ++i_;
      while (peek() != ")") {
        if (atEnd()) return bad(in.line, "bad call");
        Operand o;
        RGPU_TRY(parseOperand(f, o));
        rets.push_back(o);
        if (peek() == ",") ++i_;
      }
      ++i_;
      RGPU_TRY(expect(","));
    }
    callee = next();
    if (peek() == ",") {
      ++i_;
      RGPU_TRY(expect("("));
      while (peek() != ")") {
        if (atEnd()) return bad(in.line, "bad call");
        std::string a = next();
        auto pr = param_regs_.find(a);
        if (pr == param_regs_.end()) return bad(in.line, "call argument " + a + " is not a .param");
        Operand o;
        o.kind = Operand::kParamReg;
        o.reg = pr->second;
        args.push_back(o);
        if (peek() == ",") ++i_;
      }
      ++i_;
    }
    if (callee == "vprintf") {
      if (args.size() != 2) return bad(in.line, "vprintf takes 2 arguments");
      in.op = Op::kCallPrintf;
      in.a = args[0];
      in.b = args[1];
      if (!rets.empty()) in.d = rets[0];
    } else if (callee == "malloc" || callee == "free") {
      // The device heap (cudaLimitMallocHeapSize): malloc(size) -> pointer, free(pointer).
      bool is_malloc = callee == "malloc";
      if (args.size() != 1 || (is_malloc && rets.size() != 1))
        return bad(in.line, callee + " takes one argument" + (is_malloc ? " and returns a pointer" : ""));
      in.op = is_malloc ? Op::kCallMalloc : Op::kCallFree;
      in.a = args[0];
      if (is_malloc) in.d = rets[0];
    } else if (callee == "__cuda_syscall_aligned_malloc") {
      // __nv_aligned_device_malloc(size, align) -> pointer, on the same heap (free() releases it).
      if (args.size() != 2 || rets.size() != 1)
        return bad(in.line, callee + " takes two arguments and returns a pointer");
      in.op = Op::kCallMalloc;
      in.a = args[0];
      in.b = args[1];
      in.d = rets[0];
    } else if (callee == "cudaGraphSetConditional") {
      // cudaGraphSetConditional(handle, value): the handle is the address of the value's device word.
      if (args.size() != 2) return bad(in.line, "cudaGraphSetConditional takes 2 arguments");
      in.op = Op::kCallSetConditional;
      in.a = args[0];
      in.b = args[1];
    } else if (callee == "__assertfail") {
      if (args.size() < 4) return bad(in.line, "__assertfail takes 5 arguments");
      in.op = Op::kCallAssert;
      in.a = args[0];
      in.b = args[1];
      in.c = args[2];
      in.e = args[3];
    } else {
      in.op = Op::kCall;
      in.a.kind = Operand::kVec;
      in.a.vec = args;
      if (!rets.empty()) in.d = rets[0];
      auto it = std::find(m_.callee_names.begin(), m_.callee_names.end(), callee);
      in.callee = static_cast<uint32_t>(it - m_.callee_names.begin());
      if (it == m_.callee_names.end()) m_.callee_names.push_back(callee);
      f.has_calls = true;
    }
    return expect(";");
  }
  if (in.op == Op::kBra) {
    uint32_t idx = static_cast<uint32_t>(f.code.size());
    std::string label = next();
    fixups_.emplace_back(idx, label);
    return expect(";");
  }
  RGPU_TRY(parseOperands(f, in, opcode));
  if (async_remote) {
    if (in.b.kind != Operand::kAddr) return bad(in.line, opcode + ": the third operand must be the mbarrier's address");
    in.carry = in.op == Op::kRed ? 1 : 0;  // what the remote access is (see Op::kAsyncRemote)
    in.op = Op::kAsyncRemote;
  }
  return Status::ok();
}

// cp.async and mbarrier: their many qualifiers (state spaces with ::cta or
// ::cluster scopes, cache hints, memory orders) mostly change nothing in one
// block on one host thread; those that do set the instruction's mode.
Status Parser::asyncModifiers(Inst& in, const std::vector<std::string>& parts, const std::string& opcode) {
  auto has = [&](const char* m) { return std::find(parts.begin() + 1, parts.end(), m) != parts.end(); };
  auto unsupported = [&] { return bad(in.line, "instruction '" + opcode + "' is not supported by the rgpu PTX interpreter"); };
  if (in.op == Op::kCpAsync) {
    if (parts.size() < 2 || parts[1] != "async") return unsupported();
    if (has("commit_group") || has("wait_group") || has("wait_all")) {
      in.mode = kCpNop;
    } else if (parts.size() > 2 && parts[2] == "mbarrier") {
      in.mode = has("noinc") ? kCpMbarArrive : kCpNop;  // without .noinc: a net change of zero
    } else if (parts.size() > 2 && parts[2] == "bulk") {
      // Only global to this block's shared memory, completing on an mbarrier (TMA's 1D form).
      bool to_shared = parts.size() > 3 && parts[3].rfind("shared", 0) == 0;
      if (!to_shared || !has("global") || !has("mbarrier::complete_tx::bytes") || has("tensor")) return unsupported();
      in.mode = kCpBulk;
    } else if (has("ca") || has("cg")) {
      in.mode = kCpCopy;
    } else {
      return unsupported();
    }
    return Status::ok();
  }
  if (parts.size() < 2) return unsupported();
  const std::string& what = parts[1];
  if (what == "init") in.mode = kMbInit;
  else if (what == "inval") in.mode = kMbInval;
  else if (what == "arrive") in.mode = kMbArrive;
  else if (what == "arrive_drop") in.mode = kMbArriveDrop;
  else if (what == "test_wait" || what == "try_wait") in.mode = kMbTestWait;
  else if (what == "pending_count") in.mode = kMbPendingCount;
  else if (what == "expect_tx") in.mode = kMbExpectTx;
  else if (what == "complete_tx") in.mode = kMbCompleteTx;
  else return unsupported();
  in.sat = has("parity");
  in.approx = (in.mode == kMbArrive || in.mode == kMbArriveDrop) && has("expect_tx");
  if (has("shared::cluster") && in.mode != kMbArrive) return unsupported();  // other blocks' barriers: no clusters here
  return Status::ok();
}

// wmma.load.{a,b,c} / wmma.store.d / wmma.mma: the shape, the types, and the
// space of a load or store. Layouts (.row/.col) are read where the memory is
// touched; shapes and types outside the PTX ISA's list are refused.
Status Parser::wmmaModifiers(Inst& in, const std::vector<std::string>& parts, const std::string& opcode) {
  auto unsupported = [&](const std::string& why) {
    return bad(in.line, "instruction '" + opcode + "' is not supported by the rgpu PTX interpreter (" + why + ")");
  };
  if (parts.size() < 3) return unsupported("incomplete");
  if (parts[1] == "load" && (parts[2] == "a" || parts[2] == "b" || parts[2] == "c"))
    in.mode = parts[2] == "a" ? kWmmaLoadA : parts[2] == "b" ? kWmmaLoadB : kWmmaLoadC;
  else if (parts[1] == "store" && parts[2] == "d") in.mode = kWmmaStore;
  else if (parts[1] == "mma") in.mode = kWmmaMma;
  else return unsupported("unknown operation");
  std::vector<Type> types;
  int layouts = 0;
  for (size_t k = 2; k < parts.size(); ++k) {
    std::string m = parts[k];
    if (m == "shared::cta") m = "shared";
    unsigned a = 0, b = 0, c = 0;
    Type t;
    if (std::sscanf(m.c_str(), "m%un%uk%u", &a, &b, &c) == 3 && m == "m" + std::to_string(a) + "n" + std::to_string(b) + "k" + std::to_string(c)) {
      in.m = static_cast<uint8_t>(a), in.n = static_cast<uint8_t>(b), in.k = static_cast<uint8_t>(c);
    } else if (m == "tf32") {
      types.push_back(Type::kF32);  // tf32 operands live in f32 registers
    } else if (m == "s4" || m == "u4" || m == "b1") {  // sub-byte multiplicands (nvcuda::wmma::experimental)
      types.push_back(m == "s4" ? Type::kS4 : m == "u4" ? Type::kU4 : Type::kB1);
    } else if ((m == "xor" || m == "and") && in.mode == kWmmaMma) {
      in.bool_op = m == "xor" ? BoolOp::kXor : BoolOp::kAnd;
    } else if (m == "popc" && in.mode == kWmmaMma) {
    } else if (parseType(m, t)) {
      types.push_back(t);
    } else if (m == "row" || m == "col") {
      if (m == "col") in.layout |= static_cast<uint8_t>(1u << layouts);
      ++layouts;
    } else if (m == "global" || m == "shared" || m == "generic") {
      in.space = m == "global" ? Space::kGlobal : m == "shared" ? Space::kShared : Space::kGeneric;
    } else if (m == "satfinite") {
      in.sat = true;
    } else if (m == "rn") {  // f64: products and sums rounded to nearest, as the host's double arithmetic does
    } else if (m == "a" || m == "b" || m == "c" || m == "d" || m == "sync" || m == "aligned") {
    } else {
      return unsupported("modifier ." + m);
    }
  }
  struct Shape { uint8_t m, n, k; };
  static const Shape kShapes[] = {{16, 16, 16}, {32, 8, 16}, {8, 32, 16}, {16, 16, 8}, {8, 8, 4}, {8, 8, 32}, {8, 8, 128}};
  bool known = false;
  for (const Shape& s : kShapes) known |= s.m == in.m && s.n == in.n && s.k == in.k;
  if (!known) return unsupported("shape m" + std::to_string(in.m) + "n" + std::to_string(in.n) + "k" + std::to_string(in.k));
  auto allowed = [](Type t) {
    return t == Type::kF16 || t == Type::kBF16 || t == Type::kF32 || t == Type::kF64 || t == Type::kS8 ||
           t == Type::kU8 || t == Type::kS32 || t == Type::kS4 || t == Type::kU4 || t == Type::kB1;
  };
  for (Type t : types)
    if (!allowed(t)) return unsupported("element type");
  // Sub-byte shapes take their own types only: m8n8k32 s4/u4, m8n8k128 b1 (with .xor.popc or .and.popc).
  const bool sub_byte_shape = in.m == 8 && in.n == 8 && (in.k == 32 || in.k == 128);
  for (Type t : types) {
    const bool sub = t == Type::kS4 || t == Type::kU4 || t == Type::kB1;
    if (sub && (!sub_byte_shape || (t == Type::kB1) != (in.k == 128)))
      return unsupported("element type for shape m" + std::to_string(in.m) + "n" + std::to_string(in.n) + "k" +
                         std::to_string(in.k));
  }
  if (in.mode == kWmmaMma && (in.k == 128) != (in.bool_op != BoolOp::kNone))
    return unsupported(in.k == 128 ? "a .b1 wmma.mma needs .xor.popc or .and.popc" : "modifier .popc");
  if (in.mode == kWmmaMma) {
    // .dtype.ctype (f16 multiplicands), or .dtype.atype.btype.ctype.
    if (types.size() == 2) {
      in.dtype = types[0], in.type = types[1];
      in.ab_type = in.m == 8 && in.k == 4 ? Type::kF64 : Type::kF16;
    } else if (types.size() == 4) {
      in.dtype = types[0], in.ab_type = types[1], in.b_type = types[2], in.type = types[3];
    } else {
      return unsupported("types");
    }
    if (in.b_type == Type::kNone) in.b_type = in.ab_type;
    const bool sub = in.ab_type == Type::kS4 || in.ab_type == Type::kU4 || in.ab_type == Type::kB1;
    if (sub && (in.b_type != in.ab_type || in.dtype != Type::kS32 || in.type != Type::kS32))
      return unsupported("types");
  } else {
    if (types.size() != 1) return unsupported("types");
    in.type = types[0];
  }
  return Status::ok();
}

// mma.sync (the shapes and types below, each with the fragment layout the PTX
// ISA defines) and ldmatrix/stmatrix (m8n8 b16 matrices).
Status Parser::mmaModifiers(Inst& in, const std::vector<std::string>& parts, const std::string& opcode) {
  auto unsupported = [&](const std::string& why) {
    return bad(in.line, "instruction '" + opcode + "' is not supported by the rgpu PTX interpreter (" + why + ")");
  };
  std::vector<Type> types;
  bool shape_seen = false;
  for (size_t k = 1; k < parts.size(); ++k) {
    const std::string& m = parts[k];
    Type t;
    if (m == "sync" || m == "aligned" || m == "row" || m == "col" || m == "shared" || m == "shared::cta") continue;
    if (in.op == Op::kLdmatrix) {
      if (m == "m8n8") shape_seen = true;
      else if (m == "x1" || m == "x2" || m == "x4") in.vec = static_cast<uint8_t>(m[1] - '0');
      else if (m == "trans") in.layout = 1;
      else if (m != "b16") return unsupported("modifier ." + m);
      continue;
    }
    static const std::pair<const char*, uint8_t> kShapes[] = {{"m16n8k16", kMmaM16N8K16}, {"m16n8k8", kMmaM16N8K8},
                                                              {"m16n8k4", kMmaM16N8K4}, {"m16n8k32", kMmaM16N8K32},
                                                              {"m8n8k4", kMmaM8N8K4}};
    bool shape = false;
    for (auto& [name, id] : kShapes)
      if (m == name) in.mode = id, shape = shape_seen = true;
    if (shape) continue;
    if (m == "satfinite") in.sat = true;
    else if (m == "tf32") types.push_back(Type::kB32);  // tf32 operands: f32 bits in .b32 registers
    else if (m == "rn") continue;                        // f64: round to nearest, as the host does
    else if (m == "e4m3") types.push_back(Type::kE4M3);  // 8-bit floats (sm_89+)
    else if (m == "e5m2") types.push_back(Type::kE5M2);
    else if (parseType(m, t)) types.push_back(t);
    else return unsupported("modifier ." + m);
  }
  if (!shape_seen) return unsupported("shape");
  if (in.op == Op::kLdmatrix) {
    in.mode = parts[0] == "stmatrix" ? kLdmatrixStore : kLdmatrixLoad;
    if (in.vec != 1 && in.vec != 2 && in.vec != 4) in.vec = 1;
    return Status::ok();
  }
  if (types.size() != 4) return unsupported("types");
  in.dtype = types[0], in.ab_type = types[1], in.b_type = types[2], in.type = types[3];
  auto is16 = [](Type t) { return t == Type::kF16 || t == Type::kBF16; };
  auto is8 = [](Type t) { return t == Type::kS8 || t == Type::kU8; };
  auto isF8 = [](Type t) { return t == Type::kE4M3 || t == Type::kE5M2; };
  // 8-bit floats: f32 (or f16) accumulators, either format for A and for B.
  const bool f8 = isF8(in.ab_type) && isF8(in.b_type) && (in.type == Type::kF32 || in.type == Type::kF16) &&
                  in.dtype == in.type;
  bool ok = false;
  switch (in.mode) {
    case kMmaM16N8K16:
      ok = (is16(in.ab_type) && in.ab_type == in.b_type) || (is8(in.ab_type) && is8(in.b_type)) || f8;
      break;
    case kMmaM16N8K8: ok = (is16(in.ab_type) && in.ab_type == in.b_type) || (in.ab_type == Type::kB32 && in.b_type == Type::kB32); break;
    case kMmaM16N8K4: ok = in.ab_type == Type::kB32 && in.b_type == Type::kB32; break;
    case kMmaM16N8K32: ok = (is8(in.ab_type) && is8(in.b_type)) || f8; break;
    case kMmaM8N8K4: ok = in.ab_type == Type::kF64 && in.b_type == Type::kF64 && in.dtype == Type::kF64; break;
  }
  if (!ok) return unsupported("shape and types");
  return Status::ok();
}

Status Parser::textureAddress(Function& f, Inst& in, const std::string& opcode) {
  RGPU_TRY(expect("["));
  RGPU_TRY(parseOperand(f, in.a));
  if (in.a.kind != Operand::kReg && in.a.kind != Operand::kImm)
    return bad(in.line, opcode + ": the texture or surface must be a .u64 register (texture references are not supported)");
  if (peek() == ",") {
    ++i_;
    RGPU_TRY(parseOperand(f, in.b));
    if (in.b.kind != Operand::kVec && in.b.kind != Operand::kReg) return bad(in.line, opcode + ": bad coordinates");
    if (peek() == ",") return bad(in.line, opcode + ": separate samplers (independent mode) are not supported");
  }
  return expect("]");
}

Status Parser::textureInstruction(Function& f, Inst& in, const std::vector<std::string>& parts, const std::string& opcode) {
  auto unsupported = [&] { return bad(in.line, "instruction '" + opcode + "' is not supported by the rgpu PTX interpreter"); };
  static const std::unordered_map<std::string, uint8_t> kGeo = {
      {"1d", kGeo1D}, {"2d", kGeo2D}, {"3d", kGeo3D}, {"a1d", kGeoA1D}, {"a2d", kGeoA2D}, {"cube", kGeoCube},
      {"acube", kGeoACube}};
  static const std::unordered_map<std::string, uint8_t> kQueries = {
      {"width", kQWidth}, {"height", kQHeight}, {"depth", kQDepth}, {"channel_data_type", kQChannelDataType},
      {"channel_order", kQChannelOrder}, {"normalized_coords", kQNormalizedCoords}, {"array_size", kQArraySize},
      {"num_mipmap_levels", kQNumMipmapLevels}, {"num_samples", kQNumSamples}, {"filter_mode", kQFilterMode},
      {"addr_mode_0", kQAddrMode0}, {"addr_mode_1", kQAddrMode1}, {"addr_mode_2", kQAddrMode2},
      {"force_unnormalized_coords", kQForceUnnormalizedCoords}, {"memory_layout", kQMemoryLayout}};
  size_t k = 1;
  if (in.op == Op::kTxq || in.op == Op::kSuq) {  // txq{.level}.query.b32 d, [a]{, lod}; suq.query.b32 d, [a]
    if (in.op == Op::kTxq && k < parts.size() && parts[k] == "level") in.layout = kTexLevel, ++k;
    if (k + 2 != parts.size() || !kQueries.count(parts[k]) || parts[k + 1] != "b32") return unsupported();
    in.k = kQueries.at(parts[k]);
    in.type = Type::kB32;
    RGPU_TRY(parseOperand(f, in.d));
    RGPU_TRY(expect(","));
    RGPU_TRY(textureAddress(f, in, opcode));
    if (in.b.kind != Operand::kNone) return bad(in.line, opcode + ": takes no coordinates");
    if (in.layout == kTexLevel) {
      RGPU_TRY(expect(","));
      RGPU_TRY(parseOperand(f, in.c));
    }
  } else if (in.op == Op::kSuld || in.op == Op::kSust) {
    // su{ld,st}.b.geom{.v2,.v4}.btype{.trap,.clamp,.zero}: formatted (.p) stores are not supported.
    if (k >= parts.size() || parts[k++] != "b") return unsupported();
    if (k >= parts.size() || !kGeo.count(parts[k]) || kGeo.at(parts[k]) >= kGeoCube) return unsupported();
    in.mode = kGeo.at(parts[k++]);
    if (k < parts.size() && (parts[k] == "v2" || parts[k] == "v4")) in.vec = parts[k++] == "v2" ? 2 : 4;
    if (k >= parts.size() || !parseType(parts[k], in.type) || (in.type != Type::kB8 && in.type != Type::kB16 &&
                                                               in.type != Type::kB32 && in.type != Type::kB64))
      return unsupported();
    ++k;
    in.m = kSurfTrap;
    if (k < parts.size()) {
      if (parts[k] == "clamp") in.m = kSurfClamp;
      else if (parts[k] == "zero") in.m = kSurfZero;
      else if (parts[k] != "trap") return unsupported();
      ++k;
    }
    if (k != parts.size()) return unsupported();
    if (in.op == Op::kSuld) {
      RGPU_TRY(parseOperand(f, in.d));
      RGPU_TRY(expect(","));
      RGPU_TRY(textureAddress(f, in, opcode));
    } else {
      RGPU_TRY(textureAddress(f, in, opcode));
      RGPU_TRY(expect(","));
      RGPU_TRY(parseOperand(f, in.c));
    }
  } else {
    // tex{.base,.level,.grad}.geom.v4.dtype.ctype d, [a, c]{, lod | , ddx, ddy};
    // tld4.comp.2d.v4.dtype.f32 d, [a, c].
    if (in.op == Op::kTld4) {
      static const std::unordered_map<std::string, uint8_t> kComp = {{"r", 0}, {"g", 1}, {"b", 2}, {"a", 3}};
      if (k >= parts.size() || !kComp.count(parts[k])) return unsupported();
      in.k = kComp.at(parts[k++]);
    } else if (k < parts.size() && (parts[k] == "base" || parts[k] == "level" || parts[k] == "grad")) {
      in.layout = parts[k] == "base" ? kTexBase : parts[k] == "level" ? kTexLevel : kTexGrad;
      ++k;
    }
    if (k >= parts.size() || !kGeo.count(parts[k])) return unsupported();
    in.mode = kGeo.at(parts[k++]);
    if (in.op == Op::kTld4 && in.mode != kGeo2D && in.mode != kGeoA2D) return unsupported();
    if (k >= parts.size() || parts[k++] != "v4") return unsupported();
    if (k + 2 != parts.size() || !parseType(parts[k], in.type) || !parseType(parts[k + 1], in.dtype)) return unsupported();
    if ((in.type != Type::kF32 && in.type != Type::kS32 && in.type != Type::kU32) ||
        (in.dtype != Type::kF32 && in.dtype != Type::kS32))
      return unsupported();
    RGPU_TRY(parseOperand(f, in.d));
    if (peek() == "|") return bad(in.line, opcode + ": sparse texture fetches (a residency predicate) are not supported");
    RGPU_TRY(expect(","));
    RGPU_TRY(textureAddress(f, in, opcode));
    if (in.layout == kTexLevel) {
      RGPU_TRY(expect(","));
      RGPU_TRY(parseOperand(f, in.c));
    } else if (in.layout == kTexGrad) {
      RGPU_TRY(expect(","));
      RGPU_TRY(parseOperand(f, in.c));
      RGPU_TRY(expect(","));
      RGPU_TRY(parseOperand(f, in.e));
      if (in.c.kind != Operand::kVec || in.e.kind != Operand::kVec) return bad(in.line, opcode + ": gradients must be vectors");
    }
    if (peek() == ",") return bad(in.line, opcode + ": texel offsets and depth compares are not supported");
  }
  RGPU_TRY(expect(";"));
  // Coordinates: as many as the geometry takes (vectors of 2 or 4 elements hold 3 or 1 as PTX pads them).
  static const uint8_t kCoords[] = {1, 2, 3, 2, 3, 3, 4};
  if (in.op != Op::kTxq && in.op != Op::kSuq) {
    size_t have = in.b.kind == Operand::kVec ? in.b.vec.size() : in.b.kind == Operand::kReg ? 1 : 0;
    if (have < kCoords[in.mode]) return bad(in.line, opcode + ": too few coordinates for its geometry");
  }
  auto regs = [](const Operand& o) {
    if (o.kind == Operand::kReg) return true;
    if (o.kind != Operand::kVec) return false;
    for (auto& e : o.vec)
      if (e.kind != Operand::kReg && e.kind != Operand::kSink) return false;
    return true;
  };
  if (in.op == Op::kSust) return Status::ok();
  const size_t want = in.op == Op::kTex || in.op == Op::kTld4 ? 4 : in.op == Op::kSuld ? in.vec : 1;
  const size_t got = in.d.kind == Operand::kVec ? in.d.vec.size() : 1;
  if (!regs(in.d) || got != want) return bad(in.line, opcode + ": the destination must be " + std::to_string(want) + " register(s)");
  return Status::ok();
}

Status Parser::parseOperands(Function& f, Inst& in, const std::string& opcode) {
  std::vector<Operand*> slots = {&in.d, &in.a, &in.b, &in.c, &in.e};
  size_t n = 0;
  while (peek() != ";") {
    if (atEnd()) return bad(in.line, "missing ';'");
    if (n >= slots.size()) return bad(in.line, "too many operands for " + opcode);
    RGPU_TRY(parseOperand(f, *slots[n]));
    if (n == 0 && peek() == "|") {  // setp p|q
      ++i_;
      RGPU_TRY(parseOperand(f, in.d2));
    }
    ++n;
    if (peek() == ",") ++i_;
  }
  ++i_;
  return checkOperands(in, opcode);
}

// Untrusted PTX: an instruction that writes a result must name a register to
// write (the interpreter writes through it without further checks).
Status Parser::checkOperands(const Inst& in, const std::string& opcode) {
  auto isReg = [](const Operand& o) { return o.kind == Operand::kReg; };
  // ld and mov may write a vector of registers (or `_` sinks).
  auto checkDest = [&]() -> Status {
    if (in.d.kind == Operand::kVec) {
      for (auto& e : in.d.vec)
        if (e.kind != Operand::kReg && e.kind != Operand::kSink) return bad(in.line, opcode + ": vector elements must be registers");
      return Status::ok();
    }
    if (!isReg(in.d)) return bad(in.line, opcode + ": the destination must be a register");
    return Status::ok();
  };
  switch (in.op) {
    case Op::kSt:
      if (in.d.kind != Operand::kAddr && in.d.kind != Operand::kParamReg) return bad(in.line, opcode + ": the first operand must be an address");
      return Status::ok();
    case Op::kRed:
      if (in.d.kind != Operand::kAddr) return bad(in.line, opcode + ": the first operand must be an address");
      return Status::ok();
    case Op::kLd:
      if (in.a.kind != Operand::kAddr && in.a.kind != Operand::kParamReg) return bad(in.line, opcode + ": the source must be an address");
      return checkDest();
    case Op::kAtom:
      if (in.a.kind != Operand::kAddr) return bad(in.line, opcode + ": the second operand must be an address");
      if (!isReg(in.d)) return bad(in.line, opcode + ": the destination must be a register");
      return Status::ok();
    case Op::kMov:
      return checkDest();
    case Op::kBar:
      if (in.mode >= kBarRedPopc && !isReg(in.d)) return bad(in.line, opcode + ": the destination must be a register");
      return Status::ok();
    case Op::kBra: case Op::kRet: case Op::kExit: case Op::kTrap: case Op::kBarWarp: case Op::kMembar:
    case Op::kNanosleep: case Op::kNop: case Op::kCallPrintf: case Op::kCallAssert: case Op::kCall: case Op::kRetFunc:
    case Op::kCallMalloc: case Op::kCallFree: case Op::kCallSetConditional: case Op::kClusterArrive: case Op::kClusterWait:
      return Status::ok();
    case Op::kElect:
      if (!isReg(in.d) && in.d.kind != Operand::kSink) return bad(in.line, opcode + ": the destination must be a register");
      if (in.d2.kind != Operand::kNone && !isReg(in.d2)) return bad(in.line, opcode + ": the predicate must be a register");
      return Status::ok();
    case Op::kMma:
    case Op::kLdmatrix:
    case Op::kWmma: {
      auto regs = [&](const Operand& o) {
        if (o.kind != Operand::kVec) return false;
        for (auto& e : o.vec)
          if (e.kind != Operand::kReg) return false;
        return true;
      };
      if (in.op == Op::kMma) {
        if (!regs(in.d) || !regs(in.a) || !regs(in.b) || !regs(in.c)) return bad(in.line, opcode + ": mma takes four register vectors");
        return Status::ok();
      }
      if (in.op == Op::kLdmatrix) {
        const Operand& r = in.mode == kLdmatrixStore ? in.a : in.d;
        const Operand& addr = in.mode == kLdmatrixStore ? in.d : in.a;
        if (!regs(r) || r.vec.size() != in.vec || addr.kind != Operand::kAddr)
          return bad(in.line, opcode + ": takes {" + std::to_string(in.vec) + " registers} and [address]");
        return Status::ok();
      }
      if (in.mode == kWmmaStore) {
        if (in.d.kind != Operand::kAddr || !regs(in.a)) return bad(in.line, opcode + ": wmma.store takes [address], {registers}");
      } else if (in.mode == kWmmaMma) {
        if (!regs(in.d) || !regs(in.a) || !regs(in.b) || !regs(in.c)) return bad(in.line, opcode + ": wmma.mma takes four register vectors");
      } else if (!regs(in.d) || in.a.kind != Operand::kAddr) {
        return bad(in.line, opcode + ": wmma.load takes {registers}, [address]");
      }
      return Status::ok();
    }
    case Op::kCpAsync:
      if ((in.mode == kCpCopy || in.mode == kCpBulk) && (in.d.kind != Operand::kAddr || in.a.kind != Operand::kAddr))
        return bad(in.line, opcode + ": destination and source must be addresses");
      if (in.mode == kCpBulk && in.c.kind != Operand::kAddr) return bad(in.line, opcode + ": the mbarrier must be an address");
      if (in.mode == kCpMbarArrive && in.d.kind != Operand::kAddr) return bad(in.line, opcode + ": the mbarrier must be an address");
      return Status::ok();
    case Op::kMbarrier:
      switch (in.mode) {
        case kMbInit: case kMbInval: case kMbExpectTx: case kMbCompleteTx:
          if (in.d.kind != Operand::kAddr) return bad(in.line, opcode + ": the mbarrier must be an address");
          return Status::ok();
        case kMbPendingCount:
          if (!isReg(in.d)) return bad(in.line, opcode + ": the destination must be a register");
          return Status::ok();
        default:  // arrive, arrive_drop (state or `_`), test_wait/try_wait (a predicate)
          if (!isReg(in.d) && in.d.kind != Operand::kSink) return bad(in.line, opcode + ": the destination must be a register");
          if (in.a.kind != Operand::kAddr) return bad(in.line, opcode + ": the mbarrier must be an address");
          return Status::ok();
      }
    default:
      if (!isReg(in.d)) return bad(in.line, opcode + ": the destination must be a register");
      if (in.d2.kind != Operand::kNone && !isReg(in.d2)) return bad(in.line, opcode + ": the second destination must be a register");
      return Status::ok();
  }
}

Status Parser::parseBody(Function& f) {
  RGPU_TRY(expect("{"));
  scopes_.clear();
  scopes_.emplace_back();
  param_regs_.clear();
  labels_.clear();
  fixups_.clear();
  fn_shared_.clear();
  local_depot_.clear();
  has_dynamic_shared_ = false;
  dynamic_shared_name_.clear();
  fn_shared_end_ = m_.module_shared_bytes;
  for (auto& n : pending_params_) {
    param_regs_[n] = f.num_regs;
    f.param_regs.push_back(f.num_regs++);
  }
  if (!pending_ret_.empty()) {
    param_regs_[pending_ret_] = f.num_regs;
    f.ret_reg = static_cast<int32_t>(f.num_regs++);
  }
  int depth = 1;
  while (depth > 0) {
    if (atEnd()) return bad(line(), "unterminated function " + f.name);
    std::string tok = peek();
    if (tok == "{") {
      ++i_;
      ++depth;
      scopes_.emplace_back();
      continue;
    }
    if (tok == "}") {
      ++i_;
      --depth;
      if (depth > 0) scopes_.pop_back();
      continue;
    }
    if (tok == ".reg") {
      ++i_;
      Type t = Type::kNone;
      while (peek()[0] == '.') {
        std::string m = next();
        if (m == ".v2" || m == ".v4") return bad(line(), "vector registers are not supported");
        parseType(m.substr(1), t);
      }
      RGPU_TRY(declareRegs(t, f));
      continue;
    }
    if (tok == ".param") {  // call-sequence parameter: a register slot
      ++i_;
      uint32_t elem = 0;
      Type t;
      while (peek()[0] == '.') {
        std::string m = next();
        if (m == ".align") next();
        else if (parseType(m.substr(1), t)) elem = static_cast<uint32_t>(typeBytes(t));
      }
      std::string name = next();
      auto cnt = parseArraySize();
      if (!cnt) return cnt.status();
      if (elem * *cnt > 8) return bad(line(), "call parameter " + name + " larger than 8 bytes is not supported yet");
      param_regs_[name] = f.num_regs++;
      RGPU_TRY(expect(";"));
      continue;
    }
    if (tok == ".local" || tok == ".shared" || (tok == ".extern" && peek(1) == ".shared")) {
      bool ext = tok == ".extern";
      ++i_;
      if (ext) ++i_;
      uint32_t align = 1, elem = 0;
      Type t;
      while (peek()[0] == '.') {
        std::string m = next();
        if (m == ".align") {
          auto a = parseAlign();
          if (!a) return a.status();
          align = *a;
        } else if (parseType(m.substr(1), t)) {
          elem = static_cast<uint32_t>(typeBytes(t));
        }
      }
      std::string name = next();
      uint64_t count = 1;
      while (peek() == "[") {
        auto c = parseArraySize();
        if (!c) return c.status();
        count *= *c;
      }
      RGPU_TRY(expect(";"));
      uint64_t bytes = count * elem;
      if (tok == ".local") {
        if (!local_depot_.empty() || bytes > kMaxLocalBytes) return bad(line(), "unsupported .local declaration " + name);
        local_depot_ = name;
        f.local_bytes = static_cast<uint32_t>(bytes);
      } else if (ext || bytes == 0) {
        has_dynamic_shared_ = true;
        dynamic_shared_name_ = name;
        f.shared_align = std::max(f.shared_align, align);
      } else {
        uint32_t off = (fn_shared_end_ + align - 1) & ~(align - 1);
        if (off + bytes > kMaxSharedBytes) return bad(line(), "shared memory beyond the limit");
        fn_shared_[name] = off;
        fn_shared_end_ = off + static_cast<uint32_t>(bytes);
      }
      continue;
    }
    if (tok == ".pragma") {
      skipTo(";");
      ++i_;
      continue;
    }
    if (tok[0] == '.' ) return bad(line(), "directive " + tok + " inside a function is not supported");
    if (peek(1) == ":") {  // label
      labels_[tok] = static_cast<uint32_t>(f.code.size());
      i_ += 2;
      continue;
    }
    Inst in;
    RGPU_TRY(parseInstruction(f, in));
    f.code.push_back(std::move(in));
    if (f.code.size() > kMaxInstsPerFunction) return bad(line(), "function too long");
    if (++module_insts_ > kMaxInstsPerModule) return bad(line(), moduleTooLarge());
  }
  for (auto& [idx, label] : fixups_) {
    auto it = labels_.find(label);
    if (it == labels_.end()) return bad(f.code[idx].line, "unknown label " + label);
    f.code[idx].target = it->second;
  }
  // Every path must end: a final exit guards against running off the end.
  Inst end;
  end.op = Op::kExit;
  f.code.push_back(end);
  f.static_shared = fn_shared_end_;
  // Dynamic shared memory starts after the static part, aligned.
  uint32_t dyn = (f.static_shared + f.shared_align - 1) & ~(f.shared_align - 1);
  auto patch = [&](Operand& o) {
    if (o.sym_space == Space::kShared && o.imm >= UINT32_MAX && (o.kind == Operand::kImm || o.kind == Operand::kAddr))
      o.imm = dyn + (o.imm - UINT32_MAX);
  };
  for (auto& in : f.code) {
    for (Operand* o : {&in.d, &in.a, &in.b, &in.c, &in.e}) {
      patch(*o);
      for (auto& v : o->vec) patch(v);
    }
  }
  f.static_shared = dyn;
  return Status::ok();
}

Status Parser::parseFunction(bool is_entry) {
  Function f;
  f.is_entry = is_entry;
  kparams_.clear();
  pending_params_.clear();
  pending_ret_.clear();
  if (!is_entry && peek() == "(") {  // return value list
    Function dummy;
    RGPU_TRY(parseParamList(dummy, false));
    if (pending_params_.size() > 1) return bad(line(), "multiple return values are not supported");
    if (!pending_params_.empty()) pending_ret_ = pending_params_[0];
    pending_params_.clear();
  }
  f.name = next();
  if (f.name.empty()) return bad(line(), "function without a name");
  if (peek() == "(") RGPU_TRY(parseParamList(f, is_entry));
  // Performance directives up to the body. .maxntid (__launch_bounds__) and
  // .reqntid bound the threads of a block; .reqnctapercluster
  // (__cluster_dims__) fixes the cluster and .explicitcluster asks for one;
  // .minnctapersm, .maxnreg, .maxclusterrank and .noreturn only guide code generation.
  while (!atEnd() && peek() != "{" && peek() != ";") {
    std::string d = next();
    if (d == ".explicitcluster") {
      f.explicit_cluster = true;
      continue;
    }
    if (d == ".reqnctapercluster") {
      uint32_t dims[3] = {1, 1, 1};
      for (int dim = 0; dim < 3 && !atEnd(); ++dim) {
        char* end = nullptr;
        std::string n = peek();
        unsigned long v = std::strtoul(n.c_str(), &end, 10);
        if (n.empty() || *end || v == 0 || v > 16) return bad(line(), ".reqnctapercluster needs dimensions from 1 to 16");
        dims[dim] = static_cast<uint32_t>(v);
        ++i_;
        if (peek() != ",") break;
        ++i_;
      }
      f.cluster_x = dims[0], f.cluster_y = dims[1], f.cluster_z = dims[2];
      f.explicit_cluster = true;
      continue;
    }
    if (d != ".maxntid" && d != ".reqntid") continue;
    uint64_t threads = 1;
    for (int dim = 0; dim < 3 && !atEnd(); ++dim) {
      char* end = nullptr;
      std::string n = peek();
      unsigned long v = std::strtoul(n.c_str(), &end, 10);
      if (n.empty() || *end || v == 0 || v > 1024) return bad(line(), d + " needs block dimensions from 1 to 1024");
      threads *= v;
      ++i_;
      if (peek() != ",") break;
      ++i_;
    }
    f.max_threads = static_cast<uint32_t>(std::min<uint64_t>(threads, 1024));
  }
  if (peek() == ";") {  // declaration only
    ++i_;
    return Status::ok();
  }
  RGPU_TRY(parseBody(f));
  std::string name = f.name;
  m_.functions[name] = std::move(f);
  return Status::ok();
}

Result<Module> Parser::run() {
  while (!atEnd()) {
    std::string tok = peek();
    if (tok == ".version" || tok == ".target" || tok == ".address_size") {
      if (tok == ".target") {
        std::string sm = peek(1);
        if (sm.rfind("sm_", 0) == 0) m_.target_sm = std::atoi(sm.c_str() + 3);
      }
      if (tok == ".address_size" && peek(1) != "64") return bad(line(), "only 64-bit PTX is supported");
      skipLine();
      continue;
    }
    if (tok == ".visible" || tok == ".weak" || tok == ".common") {
      ++i_;
      continue;
    }
    if (tok == ".extern") {
      ++i_;
      if (peek() == ".func" || peek() == ".entry") {
        skipTo(";");
        ++i_;
        continue;
      }
      if (peek() == ".shared") {
        // Module-scope dynamic shared memory: `extern __shared__ T s[];`
        ++i_;
        uint32_t align = 1;
        while (peek()[0] == '.') {
          std::string m = next();
          if (m == ".align") {
            auto a = parseAlign();
            if (!a) return a.status();
            align = *a;
          }
        }
        module_dyn_shared_[next()] = align;
        while (peek() == "[") {
          auto c = parseArraySize();
          if (!c) return c.status();
        }
        RGPU_TRY(expect(";"));
        continue;
      }
      if (peek() == ".global" || peek() == ".const") {
        std::string sp = next();
        RGPU_TRY(parseGlobalVar(sp == ".global" ? Space::kGlobal : sp == ".const" ? Space::kConst : Space::kShared, true));
        continue;
      }
      return bad(line(), "unsupported .extern " + peek());
    }
    if (tok == ".entry" || tok == ".func") {
      ++i_;
      RGPU_TRY(parseFunction(tok == ".entry"));
      continue;
    }
    if (tok == ".global" || tok == ".const" || tok == ".shared") {
      ++i_;
      RGPU_TRY(parseGlobalVar(tok == ".global" ? Space::kGlobal : tok == ".const" ? Space::kConst : Space::kShared, false));
      continue;
    }
    if (tok == ".file" || tok == ".section" || tok == ".loc") {
      // Debug information: skip the directive (and a section's braces).
      ++i_;
      if (tok == ".section") {
        skipTo("{");
        int depth = 0;
        do {
          if (peek() == "{") ++depth;
          if (peek() == "}") --depth;
          ++i_;
        } while (depth > 0 && !atEnd());
      } else {
        skipLine();
      }
      continue;
    }
    return bad(line(), "unexpected '" + tok + "' at module scope");
  }
  RGPU_TRY(link());
  for (auto& kv : m_.functions) {
    Function& fn = kv.second;
    fn.reconverge = reconvergencePoints(fn.code);
    fn.live_in = liveInRegisters(fn);
    for (const Inst& in : fn.code) fn.uses_malloc |= in.op == Op::kCallMalloc || in.op == Op::kCallFree;
  }
  return std::move(m_);
}

// Gives each kernel that calls device functions one flat instruction array:
// every function it reaches is appended once, with its registers renumbered
// past the caller's and its branch targets shifted. A function that can reach
// itself (directly or through others) has one register set too: every call to
// it saves that set on the calling lane's stack and its return restores it, so
// each activation sees its own registers. Its local memory (a stack frame) is
// not placed: each call takes a frame of its own from the thread's stack, at
// the address an extra register of the function holds, and every reference to
// the function's local depot becomes relative to that register. alloca takes
// from the same stack; a call's return gives back what its callee took.
Status Parser::link() {
  // The functions on a call cycle.
  std::set<std::string> recursive;
  {
    std::map<std::string, std::set<std::string>> calls;
    for (auto& [name, fn] : m_.functions)
      for (const Inst& in : fn.code)
        if (in.op == Op::kCall) calls[name].insert(m_.callee_names.at(in.callee));
    for (auto& [name, direct] : calls) {
      std::set<std::string> seen;
      std::vector<std::string> todo(direct.begin(), direct.end());
      while (!todo.empty()) {
        std::string f = todo.back();
        todo.pop_back();
        if (!seen.insert(f).second) continue;
        if (f == name) {
          recursive.insert(name);
          break;
        }
        auto c = calls.find(f);
        if (c != calls.end()) todo.insert(todo.end(), c->second.begin(), c->second.end());
      }
    }
  }
  for (auto& kv : m_.functions) {
    const std::string& name = kv.first;
    Function& entry = kv.second;
    if (!entry.is_entry || (!entry.has_calls && !entry.uses_stack)) continue;
    std::map<std::string, std::pair<uint32_t, uint32_t>> placed;  // name -> (pc base, reg base)
    std::vector<Inst> code = entry.code;
    uint32_t regs = entry.num_regs;
    uint32_t local = entry.local_bytes;
    bool needs_stack = entry.uses_stack, uses_alloca = entry.uses_stack;
    uint32_t max_frame = 0;  // the largest frame of a recursive function
    std::vector<std::string> stack;
    std::function<Status(size_t, size_t)> resolve = [&](size_t from, size_t to) -> Status {
      for (size_t k = from; k < to; ++k) {
        if (code[k].op != Op::kCall) continue;
        const std::string& callee = m_.callee_names.at(code[k].callee);
        auto fit = m_.functions.find(callee);
        if (fit == m_.functions.end() || fit->second.is_entry)
          return bad(code[k].line, "call to unknown device function " + callee);
        const Function& fn = fit->second;
        const bool framed = recursive.count(callee) && fn.local_bytes;
        if (fn.static_shared > m_.module_shared_bytes)
          return bad(code[k].line, "shared memory declared inside device function " + callee + " is not supported");
        if (code[k].a.vec.size() != fn.param_regs.size())
          return bad(code[k].line, "call to " + callee + " with the wrong number of arguments");
        auto pl = placed.find(callee);
        if (pl == placed.end()) {
          uint32_t pc_base = static_cast<uint32_t>(code.size()), reg_base = regs;
          uint32_t local_base = (local + 15) & ~15u;
          // A framed function's depot is on the stack, its address in one more register.
          const uint32_t frame_reg = reg_base + fn.num_regs;
          regs += fn.num_regs + (framed ? 1 : 0);
          if (!framed) local = local_base + fn.local_bytes;
          needs_stack |= framed || fn.uses_stack;
          uses_alloca |= fn.uses_stack;
          if (framed) max_frame = std::max(max_frame, (fn.local_bytes + 15) & ~15u);
          if (regs > kMaxRegsPerFunction || local > kMaxLocalBytes || code.size() + fn.code.size() > kMaxInstsPerFunction)
            return bad(code[k].line, "kernel " + name + " with its device functions is too large");
          pl = placed.emplace(callee, std::make_pair(pc_base, reg_base)).first;
          for (size_t idx = 0; idx < fn.code.size(); ++idx) {
            Inst in = fn.code[idx];
            auto shift = [&](Operand& o) {
              if (o.kind == Operand::kReg || o.kind == Operand::kParamReg || (o.kind == Operand::kAddr && o.has_base))
                o.reg += reg_base;
              if (o.sym_space == Space::kLocal && (o.kind == Operand::kImm || o.kind == Operand::kAddr) && !o.has_base)
                o.imm += local_base;
            };
            // In a framed function: the depot as an offset from the frame register.
            auto toFrame = [&](Operand& o) -> Status {
              if (!framed || o.sym_space != Space::kLocal || o.has_base) return Status::ok();
              if (o.kind == Operand::kAddr) {
                o.has_base = true;
                o.reg = frame_reg;
                return Status::ok();
              }
              if (o.kind != Operand::kImm) return Status::ok();
              if (in.op != Op::kMov || &o != &in.a)
                return bad(in.line, "the local depot of recursive device function " + callee +
                                        " used other than by mov or an address is not supported");
              in.op = Op::kAdd;  // mov d, __local_depot+k  ->  add d, frame, k
              in.b = o;
              in.b.sym_space = Space::kGeneric;
              o = Operand();
              o.kind = Operand::kReg;
              o.reg = frame_reg;
              return Status::ok();
            };
            for (Operand* o : {&in.d, &in.d2, &in.a, &in.b, &in.c, &in.e}) {
              RGPU_TRY(toFrame(*o));
              for (auto& v : o->vec) RGPU_TRY(toFrame(v));
            }
            for (Operand* o : {&in.d, &in.d2, &in.a, &in.b, &in.c, &in.e}) {
              if (o->has_base && o->reg == frame_reg && framed) continue;  // already this kernel's numbering
              if (o->kind == Operand::kReg && o->reg == frame_reg && framed) continue;
              shift(*o);
              for (auto& v : o->vec) shift(v);
            }
            if (in.guard >= 0) in.guard += static_cast<int32_t>(reg_base);
            if (in.op == Op::kBra) in.target += pc_base;
            if (in.op == Op::kRet) in.op = Op::kRetFunc;
            // The guard appended after every body returns; a written exit ends the thread.
            if (in.op == Op::kExit && idx + 1 == fn.code.size()) in.op = Op::kRetFunc;
            if (++module_insts_ > kMaxInstsPerModule) return bad(in.line, moduleTooLarge());
            code.push_back(in);
          }
          stack.push_back(callee);
          RGPU_TRY(resolve(pc_base, code.size()));
          stack.pop_back();
        }
        // Bind the call: target, the callee's parameter and return registers.
        Inst& call = code[k];
        call.target = pl->second.first;
        if (recursive.count(callee)) call.save_base = pl->second.second, call.save_count = fn.num_regs;
        if (framed) {
          call.save_count += 1;  // the frame register too
          call.frame_reg = pl->second.second + fn.num_regs;
          call.frame_bytes = (fn.local_bytes + 15) & ~15u;
        }
        call.b.kind = Operand::kVec;
        call.b.vec.clear();
        for (uint32_t r : fn.param_regs) {
          Operand o;
          o.kind = Operand::kParamReg;
          o.reg = r + pl->second.second;
          call.b.vec.push_back(o);
        }
        call.c = Operand();
        if (fn.ret_reg >= 0) {
          call.c.kind = Operand::kParamReg;
          call.c.reg = static_cast<uint32_t>(fn.ret_reg) + pl->second.second;
        }
      }
      return Status::ok();
    };
    RGPU_TRY(resolve(0, code.size()));
    if (needs_stack) {
      // Each thread's stack: a frame per call as deep as calls may go, and
      // kAllocaStackBytes where alloca is used.
      entry.stack_base = (local + 15) & ~15u;
      uint64_t end = uint64_t{entry.stack_base} + uint64_t{kMaxCallDepth} * max_frame + (uses_alloca ? kAllocaStackBytes : 0);
      if (end > kMaxLocalBytes)
        return bad(entry.code.empty() ? 0 : entry.code[0].line,
                   "kernel " + name + " needs a stack of " + std::to_string(end - entry.stack_base) +
                       " bytes per thread (recursive frames of " + std::to_string(max_frame) + " bytes, " +
                       std::to_string(kMaxCallDepth) + " calls deep); the limit is " + std::to_string(kMaxLocalBytes));
      local = static_cast<uint32_t>(end);
    }
    entry.code = std::move(code);
    entry.num_regs = regs;
    entry.local_bytes = local;
  }
  return Status::ok();
}

}  // namespace

Result<Module> parsePtx(const std::string& text) {
  if (text.size() > kMaxPtxBytes) return Status(kErrInvalidPtx, "PTX larger than " + std::to_string(kMaxPtxBytes) + " bytes");
  auto toks = tokenize(text);
  if (!toks) return toks.status();
  Parser p(std::move(*toks));
  return p.run();
}

uint64_t instructionCount(const Module& m) {
  uint64_t n = 0;
  for (auto& [name, fn] : m.functions) n += fn.code.size();
  return n;
}

void bindGlobals(Module& m, const std::vector<uint64_t>& addrs) {
  std::map<std::string, uint64_t> by_name;
  for (size_t i = 0; i < m.globals.size() && i < addrs.size(); ++i) by_name[m.globals[i].name] = addrs[i];
  for (size_t gi = 0; gi < m.globals.size() && gi < addrs.size(); ++gi) {
    for (auto& [off, sym] : m.globals[gi].address_inits) {
      auto it = by_name.find(sym);
      if (it != by_name.end() && off + 8 <= m.globals[gi].size)
        std::memcpy(reinterpret_cast<uint8_t*>(addrs[gi]) + off, &it->second, 8);
    }
  }
  for (auto& [name, fn] : m.functions) {
    for (auto& in : fn.code) {
      for (Operand* o : {&in.d, &in.a, &in.b, &in.c, &in.e}) {
        if (o->global >= 0) o->imm += addrs[static_cast<size_t>(o->global)];
        for (auto& v : o->vec)
          if (v.global >= 0) v.imm += addrs[static_cast<size_t>(v.global)];
      }
    }
  }
}

}  // namespace rgpu::server::ptx
