#include "common/fatbin.h"

#include <elf.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include "common/ptx_lexer.h"

namespace rgpu::common {
namespace {

constexpr uint64_t kFlagZstd = 0x8000;
constexpr uint64_t kFlagLz4 = 0x2000;

Status bad(const std::string& why) { return Status(err::kInvalidKernelImage, "invalid fatbin: " + why); }

template <typename T>
bool readAt(const uint8_t* base, size_t len, uint64_t off, T& out) {
  if (off > len || len - off < sizeof(T)) return false;
  std::memcpy(&out, base + off, sizeof(T));
  return true;
}

}  // namespace

Result<std::string> fatbinFromWrapper(const void* wrapper) {
  struct Wrapper {
    int magic;
    int version;
    const uint64_t* data;
    void* filename_or_fatbins;
  };
  auto* w = static_cast<const Wrapper*>(wrapper);
  if (!w || static_cast<uint32_t>(w->magic) != kFatbinWrapperMagic || !w->data)
    return bad("not a fatbin wrapper");
  struct Header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
  } h;
  std::memcpy(&h, w->data, sizeof h);
  if (h.magic != kFatbinMagic) return bad("bad fatbin magic");
  if (h.header_size < 16 || h.fat_size > (1ull << 32)) return bad("implausible fatbin size");
  return std::string(reinterpret_cast<const char*>(w->data), h.header_size + h.fat_size);
}

Result<FatbinImage> parseFatbin(const void* data, size_t len) {
  auto* base = static_cast<const uint8_t*>(data);
  uint32_t magic;
  uint16_t header_size;
  uint64_t fat_size;
  if (!readAt(base, len, 0, magic) || !readAt(base, len, 6, header_size) || !readAt(base, len, 8, fat_size))
    return bad("shorter than its header");
  if (magic != kFatbinMagic) return bad("bad magic");
  if (header_size < 16 || header_size > len || fat_size > len - header_size)
    return bad("sizes exceed the " + std::to_string(len) + " bytes received");
  FatbinImage image;
  uint64_t off = header_size, end = header_size + fat_size;
  int count = 0;
  while (off < end) {
    if (++count > 4096) return bad("too many entries");
    uint16_t kind;
    uint32_t ehsize, compressed_size, arch;
    uint64_t size, flags, decompressed_size;
    if (!readAt(base, end, off, kind) || !readAt(base, end, off + 4, ehsize) ||
        !readAt(base, end, off + 8, size) || !readAt(base, end, off + 16, compressed_size) ||
        !readAt(base, end, off + 28, arch) || !readAt(base, end, off + 40, flags) ||
        !readAt(base, end, off + 56, decompressed_size))
      return bad("truncated entry header at offset " + std::to_string(off));
    if (ehsize < 64 || ehsize > end - off || size > end - off - ehsize)
      return bad("entry at offset " + std::to_string(off) + " overruns the fatbin");
    const uint8_t* payload = base + off + ehsize;
    FatbinEntry e;
    e.kind = kind;
    e.arch = arch;
    e.flags = flags;
    if (flags & (kFlagZstd | kFlagLz4)) {
      uint64_t stored = compressed_size ? compressed_size : size;
      if (stored > size || decompressed_size == 0 || decompressed_size > kMaxFatbinEntryBytes)
        return bad("compressed entry sizes out of range");
      e.payload.resize(decompressed_size);
      if (flags & kFlagZstd) {
        size_t n = ZSTD_decompress(e.payload.data(), e.payload.size(), payload, stored);
        if (ZSTD_isError(n) || n != decompressed_size) return bad("corrupt zstd entry");
      } else {
        int n = LZ4_decompress_safe(reinterpret_cast<const char*>(payload), e.payload.data(),
                                    static_cast<int>(stored), static_cast<int>(decompressed_size));
        if (n < 0) return bad("corrupt lz4 entry");
        e.payload.resize(static_cast<size_t>(n));
      }
    } else {
      e.payload.assign(reinterpret_cast<const char*>(payload), size);
    }
    if (kind == FatbinEntry::kPtx) {
      // PTX is NUL-terminated and padded; keep the text only.
      e.payload.resize(strnlen(e.payload.data(), e.payload.size()));
      image.has_ptx = true;
    }
    if (kind == FatbinEntry::kPtx || kind == FatbinEntry::kElf) image.entries.push_back(std::move(e));
    off += ehsize + size;
  }
  // Layouts: from a cubin when there is one (offsets are the same for every SM),
  // else from PTX.
  for (auto& e : image.entries) {
    if (e.kind != FatbinEntry::kElf) continue;
    auto k = kernelsFromElf(e.payload);
    if (!k) return k.status();
    for (auto& [name, info] : *k) image.kernels.emplace(name, info);
  }
  for (auto& e : image.entries) {
    if (e.kind != FatbinEntry::kPtx) continue;
    auto k = kernelsFromPtx(e.payload);
    if (!k) return k.status();
    for (auto& [name, info] : *k) image.kernels.emplace(name, info);
  }
  return image;
}

Result<std::map<std::string, KernelInfo>> kernelsFromElf(const std::string& elf) {
  auto* b = reinterpret_cast<const uint8_t*>(elf.data());
  size_t len = elf.size();
  Elf64_Ehdr eh;
  if (!readAt(b, len, 0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64)
    return bad("cubin is not a 64-bit ELF image");
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum)
    return bad("cubin section table malformed");
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  for (size_t i = 0; i < sh.size(); ++i)
    if (!readAt(b, len, eh.e_shoff + i * sizeof(Elf64_Shdr), sh[i])) return bad("cubin section table truncated");
  const Elf64_Shdr& strtab = sh[eh.e_shstrndx];
  if (strtab.sh_offset > len || strtab.sh_size > len - strtab.sh_offset) return bad("cubin string table truncated");
  auto sectionName = [&](const Elf64_Shdr& s) -> std::string {
    if (s.sh_name >= strtab.sh_size) return {};
    const char* p = elf.data() + strtab.sh_offset + s.sh_name;
    return std::string(p, strnlen(p, strtab.sh_size - s.sh_name));
  };
  std::map<std::string, KernelInfo> out;
  for (auto& s : sh) {
    std::string name = sectionName(s);
    if (name.rfind(".text.", 0) == 0) {
      out.try_emplace(name.substr(6));
      continue;
    }
    if (name.rfind(".nv.info.", 0) != 0) continue;
    if (s.sh_offset > len || s.sh_size > len - s.sh_offset) return bad("cubin section " + name + " truncated");
    KernelInfo& k = out[name.substr(9)];
    const uint8_t* p = b + s.sh_offset;
    size_t n = s.sh_size, at = 0;
    while (at + 2 <= n) {
      uint8_t fmt = p[at], attr = p[at + 1];
      at += 2;
      if (fmt == 4) {  // EIFMT_SVAL: u16 length + bytes
        uint16_t vlen;
        if (!readAt(p, n, at, vlen) || vlen > n - at - 2) return bad("truncated attribute in " + name);
        const uint8_t* v = p + at + 2;
        if ((attr == 0x17 || attr == 0x45) && vlen >= 12) {
          uint16_t ordinal, offset;
          uint32_t size;
          std::memcpy(&ordinal, v + 4, 2);
          std::memcpy(&offset, v + 6, 2);
          if (attr == 0x17) {
            uint32_t packed;
            std::memcpy(&packed, v + 8, 4);
            size = packed >> 18;
          } else {
            uint16_t s16;
            std::memcpy(&s16, v + 8, 2);
            size = s16;
          }
          if (ordinal >= 4096) return bad("parameter ordinal out of range in " + name);
          if (k.params.size() <= ordinal) k.params.resize(ordinal + 1u);
          k.params[ordinal] = {offset, size};
        }
        at += 2u + vlen;
      } else {  // NVAL/BVAL/HVAL carry a 2-byte value
        if (at + 2 > n) break;
        if (attr == 0x19) {  // EIATTR_CBANK_PARAM_SIZE
          uint16_t v;
          std::memcpy(&v, p + at, 2);
          k.param_bytes = v;
        }
        at += 2;
      }
    }
  }
  for (auto& [name, k] : out)
    for (auto& prm : k.params) k.param_bytes = std::max(k.param_bytes, prm.offset + prm.size);
  return out;
}

namespace {

uint32_t ptxTypeSize(const std::string& t) {
  if (t == ".u8" || t == ".s8" || t == ".b8") return 1;
  if (t == ".u16" || t == ".s16" || t == ".b16" || t == ".f16" || t == ".bf16") return 2;
  if (t == ".u32" || t == ".s32" || t == ".b32" || t == ".f32" || t == ".f16x2" || t == ".bf16x2") return 4;
  if (t == ".u64" || t == ".s64" || t == ".b64" || t == ".f64") return 8;
  return 0;
}

}  // namespace

namespace {

void ptxVariables(const std::string& ptx, std::set<std::string>& out) {
  PtxLexer lx{ptx};
  int depth = 0;  // inside a function's parameters or body
  bool declares = false, external = false;
  for (std::string t = lx.token(); !t.empty(); t = lx.token()) {
    if (t == "{" || t == "(") {
      ++depth;
    } else if (t == "}" || t == ")") {
      depth = std::max(0, depth - 1);
      if (depth == 0) declares = external = false;
    } else if (t == ";") {
      if (depth == 0) declares = external = false;
    } else if (depth == 0) {
      if (t == ".extern") external = true;
      else if (t == ".global" || t == ".const") declares = true;
      else if (t == ".entry" || t == ".func") declares = false;
      else if (declares && t[0] != '.' && !std::isdigit(static_cast<unsigned char>(t[0]))) {
        std::string name = t.substr(0, t.find('='));
        if (!external && !name.empty()) out.insert(name);
        declares = false;  // the rest is its initialiser
      }
    }
  }
}

void elfVariables(const std::string& elf, std::set<std::string>& out) {
  auto* b = reinterpret_cast<const uint8_t*>(elf.data());
  const size_t len = elf.size();
  Elf64_Ehdr eh;
  if (!readAt(b, len, 0, eh) || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum) return;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  for (size_t i = 0; i < sh.size(); ++i)
    if (!readAt(b, len, eh.e_shoff + i * sizeof(Elf64_Shdr), sh[i])) return;
  auto str = [&](const Elf64_Shdr& table, uint64_t at) -> std::string {
    if (table.sh_offset > len || table.sh_size > len - table.sh_offset || at >= table.sh_size) return {};
    const char* p = elf.data() + table.sh_offset + at;
    return std::string(p, strnlen(p, table.sh_size - at));
  };
  for (const Elf64_Shdr& symtab : sh) {
    if (symtab.sh_type != SHT_SYMTAB || symtab.sh_link >= sh.size()) continue;
    if (symtab.sh_offset > len || symtab.sh_size > len - symtab.sh_offset) continue;
    for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      if (!readAt(b, len, symtab.sh_offset + at, sym)) break;
      if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_shndx >= sh.size()) continue;
      const std::string section = str(sh[eh.e_shstrndx], sh[sym.st_shndx].sh_name);
      if (section.rfind(".nv.global", 0) != 0 && section.rfind(".nv.constant", 0) != 0 &&
          section.rfind(".nv.managed", 0) != 0)
        continue;
      std::string name = str(sh[symtab.sh_link], sym.st_name);
      if (!name.empty()) out.insert(name);
    }
  }
}

}  // namespace

std::set<std::string> kernelsCallingMalloc(const FatbinImage& image) {
  std::set<std::string> out;
  bool any_ptx = false;
  for (auto& e : image.entries) {
    if (e.kind != FatbinEntry::kPtx) continue;
    any_ptx = true;
    // Each function's callees; "" stands for an indirect call.
    std::map<std::string, std::set<std::string>> calls;
    std::set<std::string> entries;
    PtxLexer lx{e.payload};
    int depth = 0;
    bool header = false, is_entry = false, after_call = false;
    int call_depth = 0;  // a call's return list is in parentheses: its callee is after them
    std::string fn, current;
    for (std::string t = lx.token(); !t.empty(); t = lx.token()) {
      if (t == "{" || t == "(") {
        if (t == "{" && depth == 0 && !fn.empty()) current = fn;
        ++depth;
        continue;
      }
      if (t == "}" || t == ")") {
        depth = std::max(0, depth - 1);
        if (depth == 0 && t == "}") current.clear(), fn.clear();
        continue;
      }
      if (depth == 0) {
        if (t == ".entry" || t == ".func") header = true, is_entry = t == ".entry", fn.clear();
        else if (t == ";") header = false, fn.clear();
        else if (header && t[0] != '.') {
          fn = t;
          header = false;
          if (is_entry) entries.insert(fn);
        }
        continue;
      }
      if (current.empty()) continue;
      if (t.rfind("call", 0) == 0 && (t.size() == 4 || t[4] == '.')) {
        after_call = true;
        call_depth = depth;
      } else if (after_call && depth == call_depth && t != ",") {
        if (t[0] == '%') calls[current].insert("");  // through a register
        else calls[current].insert(t);
        after_call = false;
      }
    }
    // Functions that reach malloc, to a fixed point.
    // (__nv_aligned_device_malloc is __cuda_syscall_aligned_malloc in PTX.)
    std::set<std::string> reach = {"malloc", "__cuda_syscall_aligned_malloc", ""};
    for (bool grew = true; grew;) {
      grew = false;
      for (auto& [f, callees] : calls)
        if (!reach.count(f))
          for (auto& c : callees)
            if (reach.count(c)) {
              reach.insert(f);
              grew = true;
              break;
            }
    }
    for (auto& k : entries)
      if (reach.count(k)) out.insert(k);
  }
  if (!any_ptx)
    for (auto& e : image.entries)
      if (e.payload.find("malloc") != std::string::npos)
        for (auto& [name, k] : image.kernels) out.insert(name);
  return out;
}

std::vector<std::string> moduleVariables(const FatbinImage& image) {
  std::set<std::string> names;
  for (auto& e : image.entries) {
    if (e.kind == FatbinEntry::kPtx) ptxVariables(e.payload, names);
    else if (e.kind == FatbinEntry::kElf) elfVariables(e.payload, names);
  }
  return {names.begin(), names.end()};
}

Result<FatbinImage> parseImage(const void* data, size_t len) {
  auto* b = static_cast<const uint8_t*>(data);
  uint32_t magic = 0;
  if (len >= 4) std::memcpy(&magic, b, 4);
  if (magic == kFatbinMagic) return parseFatbin(data, len);
  FatbinImage image;
  FatbinEntry e;
  if (len >= SELFMAG && std::memcmp(b, ELFMAG, SELFMAG) == 0) {
    e.kind = FatbinEntry::kElf;
    e.payload.assign(reinterpret_cast<const char*>(b), len);
    auto k = kernelsFromElf(e.payload);
    if (!k) return k.status();
    image.kernels = std::move(*k);
  } else {
    e.kind = FatbinEntry::kPtx;
    e.payload.assign(reinterpret_cast<const char*>(b), strnlen(reinterpret_cast<const char*>(b), len));
    size_t target = e.payload.find(".target");
    if (e.payload.find(".version") == std::string::npos || target == std::string::npos)
      return bad("the image is neither a fatbin, an ELF cubin nor PTX text (no .version and .target)");
    size_t sm = e.payload.find("sm_", target);
    if (sm == std::string::npos || sm > target + 64) return bad("PTX .target names no sm_XX");
    e.arch = static_cast<uint32_t>(std::strtoul(e.payload.c_str() + sm + 3, nullptr, 10));
    auto k = kernelsFromPtx(e.payload);
    if (!k) return k.status();
    image.kernels = std::move(*k);
    image.has_ptx = true;
  }
  image.entries.push_back(std::move(e));
  return image;
}

size_t imageLength(const void* image) {
  auto* b = static_cast<const uint8_t*>(image);
  uint32_t magic;
  std::memcpy(&magic, b, 4);
  if (magic == kFatbinMagic) {
    uint16_t header_size;
    uint64_t fat_size;
    std::memcpy(&header_size, b + 6, 2);
    std::memcpy(&fat_size, b + 8, 8);
    return header_size + fat_size;
  }
  if (std::memcmp(b, ELFMAG, SELFMAG) == 0) {
    Elf64_Ehdr eh;
    std::memcpy(&eh, b, sizeof eh);
    uint64_t end = std::max<uint64_t>(sizeof eh, eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize);
    end = std::max<uint64_t>(end, eh.e_phoff + uint64_t{eh.e_phnum} * eh.e_phentsize);
    for (unsigned i = 0; i < eh.e_shnum && eh.e_shentsize == sizeof(Elf64_Shdr); ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, b + eh.e_shoff + uint64_t{i} * sizeof sh, sizeof sh);
      if (sh.sh_type != SHT_NOBITS) end = std::max<uint64_t>(end, sh.sh_offset + sh.sh_size);
    }
    return end;
  }
  return std::strlen(reinterpret_cast<const char*>(b)) + 1;
}

Result<std::map<std::string, KernelInfo>> kernelsFromPtx(const std::string& ptx) {
  std::map<std::string, KernelInfo> out;
  PtxLexer lx{ptx};
  for (;;) {
    std::string t = lx.token();
    if (t.empty()) break;
    if (t != ".entry") continue;
    std::string name = lx.token();
    if (name.empty()) return bad("PTX .entry without a name");
    KernelInfo k;
    std::string tok = lx.token();
    if (tok == "(") {
      uint32_t end = 0;
      for (;;) {
        tok = lx.token();
        if (tok == ")") break;
        if (tok != ".param") return bad("unexpected '" + tok + "' in the signature of " + name);
        uint32_t elem = 0, align = 0, count = 1;
        bool after_ptr = false;
        for (;;) {
          tok = lx.token();
          if (tok.empty()) return bad("unterminated signature of " + name);
          if (tok == ".ptr") {
            after_ptr = true;
          } else if (tok == ".align") {
            uint32_t a = static_cast<uint32_t>(std::strtoul(lx.token().c_str(), nullptr, 10));
            if (!after_ptr) align = a;  // `.ptr .align N` is the pointee's alignment
          } else if (uint32_t sz = ptxTypeSize(tok)) {
            elem = sz;
          } else if (tok[0] == '.') {
            // state space of a .ptr (.global, .shared, ...): nothing to record
          } else {
            break;  // the parameter name
          }
        }
        tok = lx.token();
        if (tok == "[") {
          count = static_cast<uint32_t>(std::strtoul(lx.token().c_str(), nullptr, 10));
          if (lx.token() != "]") return bad("bad array parameter in " + name);
          tok = lx.token();
        }
        if (elem == 0 || count == 0 || count > 65536) return bad("unsupported parameter type in " + name);
        if (align == 0) align = elem;
        if ((align & (align - 1)) != 0 || align > 4096) return bad("bad parameter alignment in " + name);
        uint32_t offset = (end + align - 1) & ~(align - 1);
        k.params.push_back({offset, elem * count});
        end = offset + elem * count;
        if (end > 65536) return bad("parameter block too large in " + name);
        if (tok == ")") break;
        if (tok != ",") return bad("unexpected '" + tok + "' in the signature of " + name);
      }
      k.param_bytes = end;
    }
    out[name] = std::move(k);
  }
  return out;
}

}  // namespace rgpu::common
