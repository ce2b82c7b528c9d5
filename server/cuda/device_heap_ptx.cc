// rgpu's device heap in PTX, and the rewrite that binds a module to it
// (device_heap_ptx.h says what the heap holds and why).
#include "server/cuda/device_heap_ptx.h"

#include <array>
#include <string_view>
#include <utility>
#include <vector>

#include "common/ptx_lexer.h"

namespace rgpu::server::cuda {
namespace {

// What nvcc calls, and what rgpu's allocator names them.
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kRenamed = {{
    {"malloc", "__rgpu_malloc"},
    {"free", "__rgpu_free"},
    {"__cuda_syscall_aligned_malloc", "__rgpu_aligned_malloc"},
}};

// The allocator. Registers and labels are each function's own. @HEADER@ is
// kHeapHeaderBytes, @LOWEST@ the lowest offset malloc returns (16 past it),
// @MAXCLASS@ the largest class; 1099511627775 is the 40-bit offset mask,
// 2^44 the largest request, 2^62 the mark of a freed header, 2^63 the mark
// of a free block's link. The class of a block for t bytes (t > 32):
// x = t - 1, e = floor(log2 x), k = 2e + (x >> (e - 1)) - 11; its size
// (2 + k % 2) << (4 + k / 2).
constexpr std::string_view kAllocatorTemplate = R"(
.visible .global .align 8 .u64 __rgpu_device_heap[2];

.func (.param .b64 __rgpu_take_ret) __rgpu_heap_take(.param .b64 __rgpu_take_bytes)
{
	.reg .pred 	%rhp<2>;
	.reg .b32 	%rhr<5>;
	.reg .b64 	%rh<20>;
	ld.param.u64 	%rh1, [__rgpu_take_bytes];
	mov.u64 	%rh0, 0;
	mov.u64 	%rh19, __rgpu_device_heap;
	ld.global.u64 	%rh2, [%rh19];
	ld.global.u64 	%rh3, [%rh19+8];
	setp.eq.u64 	%rhp1, %rh2, 0;
	@%rhp1 bra 	RGPU_TAKE_DONE;
	max.u64 	%rh4, %rh1, 32;
	add.u64 	%rh4, %rh4, -1;
	clz.b64 	%rhr1, %rh4;
	mov.u32 	%rhr3, 63;
	sub.u32 	%rhr3, %rhr3, %rhr1;
	mov.u32 	%rhr2, 0;
	setp.lt.u32 	%rhp1, %rhr3, 5;
	@%rhp1 bra 	RGPU_TAKE_CLASS;
	sub.u32 	%rhr4, %rhr3, 1;
	shr.u64 	%rh5, %rh4, %rhr4;
	cvt.u32.u64 	%rhr4, %rh5;
	shl.b32 	%rhr2, %rhr3, 1;
	add.u32 	%rhr2, %rhr2, %rhr4;
	sub.u32 	%rhr2, %rhr2, 11;
RGPU_TAKE_CLASS:
	setp.gt.u32 	%rhp1, %rhr2, @MAXCLASS@;
	@%rhp1 bra 	RGPU_TAKE_DONE;
	and.b32 	%rhr4, %rhr2, 1;
	add.u32 	%rhr4, %rhr4, 2;
	cvt.u64.u32 	%rh5, %rhr4;
	shr.u32 	%rhr4, %rhr2, 1;
	add.u32 	%rhr4, %rhr4, 4;
	shl.b64 	%rh5, %rh5, %rhr4;
	mul.wide.u32 	%rh6, %rhr2, 8;
	add.u64 	%rh6, %rh6, %rh2;
	add.u64 	%rh6, %rh6, 8;
	mov.u64 	%rh7, 1099511627775;
RGPU_TAKE_POP:
	ld.volatile.u64 	%rh8, [%rh6];
	and.b64 	%rh9, %rh8, %rh7;
	setp.eq.u64 	%rhp1, %rh9, 0;
	@%rhp1 bra 	RGPU_TAKE_BUMP;
	membar.gl;
	add.u64 	%rh10, %rh2, %rh9;
	ld.volatile.u64 	%rh11, [%rh10];
	and.b64 	%rh11, %rh11, %rh7;
	shr.u64 	%rh12, %rh8, 40;
	add.u64 	%rh12, %rh12, 1;
	shl.b64 	%rh12, %rh12, 40;
	or.b64 	%rh12, %rh12, %rh11;
	atom.cas.b64 	%rh13, [%rh6], %rh8, %rh12;
	setp.ne.u64 	%rhp1, %rh13, %rh8;
	@%rhp1 bra 	RGPU_TAKE_POP;
	mov.u64 	%rh0, %rh10;
	bra.uni 	RGPU_TAKE_MARK;
RGPU_TAKE_BUMP:
	ld.volatile.u64 	%rh14, [%rh2];
	add.u64 	%rh15, %rh14, %rh5;
	add.u64 	%rh16, %rh15, @HEADER@;
	setp.gt.u64 	%rhp1, %rh16, %rh3;
	@%rhp1 bra 	RGPU_TAKE_DONE;
	atom.cas.b64 	%rh17, [%rh2], %rh14, %rh15;
	setp.ne.u64 	%rhp1, %rh17, %rh14;
	@%rhp1 bra 	RGPU_TAKE_BUMP;
	add.u64 	%rh0, %rh2, %rh14;
	add.u64 	%rh0, %rh0, @HEADER@;
RGPU_TAKE_MARK:
	cvt.u64.u32 	%rh18, %rhr2;
	st.u64 	[%rh0], %rh18;
RGPU_TAKE_DONE:
	st.param.b64 	[__rgpu_take_ret], %rh0;
	ret;
}

.func (.param .b64 __rgpu_malloc_ret) __rgpu_malloc(.param .b64 __rgpu_malloc_bytes)
{
	.reg .pred 	%rmp<2>;
	.reg .b64 	%rm<5>;
	ld.param.u64 	%rm1, [__rgpu_malloc_bytes];
	mov.u64 	%rm0, 0;
	setp.eq.u64 	%rmp1, %rm1, 0;
	@%rmp1 bra 	RGPU_MALLOC_DONE;
	setp.gt.u64 	%rmp1, %rm1, 17592186044416;
	@%rmp1 bra 	RGPU_MALLOC_DONE;
	add.u64 	%rm2, %rm1, 16;
	{
	.param .b64 	rgpu_param0;
	st.param.b64 	[rgpu_param0+0], %rm2;
	.param .b64 	rgpu_retval0;
	call.uni (rgpu_retval0), __rgpu_heap_take, (rgpu_param0);
	ld.param.b64 	%rm3, [rgpu_retval0+0];
	}
	setp.eq.u64 	%rmp1, %rm3, 0;
	@%rmp1 bra 	RGPU_MALLOC_DONE;
	mov.u64 	%rm4, 16;
	st.u64 	[%rm3+8], %rm4;
	add.u64 	%rm0, %rm3, 16;
RGPU_MALLOC_DONE:
	st.param.b64 	[__rgpu_malloc_ret], %rm0;
	ret;
}

.func (.param .b64 __rgpu_aligned_ret) __rgpu_aligned_malloc(.param .b64 __rgpu_aligned_bytes, .param .b64 __rgpu_aligned_align)
{
	.reg .pred 	%rap<2>;
	.reg .b64 	%ra<12>;
	ld.param.u64 	%ra1, [__rgpu_aligned_bytes];
	ld.param.u64 	%ra2, [__rgpu_aligned_align];
	mov.u64 	%ra0, 0;
	setp.eq.u64 	%rap1, %ra2, 0;
	@%rap1 bra 	RGPU_ALIGNED_DONE;
	add.u64 	%ra3, %ra2, -1;
	and.b64 	%ra4, %ra2, %ra3;
	setp.ne.u64 	%rap1, %ra4, 0;
	@%rap1 bra 	RGPU_ALIGNED_DONE;
	setp.eq.u64 	%rap1, %ra1, 0;
	@%rap1 bra 	RGPU_ALIGNED_DONE;
	setp.gt.u64 	%rap1, %ra1, 17592186044416;
	@%rap1 bra 	RGPU_ALIGNED_DONE;
	setp.gt.u64 	%rap1, %ra2, 17592186044416;
	@%rap1 bra 	RGPU_ALIGNED_DONE;
	max.u64 	%ra2, %ra2, 16;
	add.u64 	%ra3, %ra2, -1;
	add.u64 	%ra5, %ra1, %ra2;
	{
	.param .b64 	rgpu_param0;
	st.param.b64 	[rgpu_param0+0], %ra5;
	.param .b64 	rgpu_retval0;
	call.uni (rgpu_retval0), __rgpu_heap_take, (rgpu_param0);
	ld.param.b64 	%ra6, [rgpu_retval0+0];
	}
	setp.eq.u64 	%rap1, %ra6, 0;
	@%rap1 bra 	RGPU_ALIGNED_DONE;
	ld.u64 	%ra7, [%ra6];
	add.u64 	%ra8, %ra6, 16;
	add.u64 	%ra8, %ra8, %ra3;
	not.b64 	%ra9, %ra3;
	and.b64 	%ra0, %ra8, %ra9;
	sub.u64 	%ra10, %ra0, 16;
	st.u64 	[%ra10], %ra7;
	sub.u64 	%ra11, %ra0, %ra6;
	st.u64 	[%ra10+8], %ra11;
RGPU_ALIGNED_DONE:
	st.param.b64 	[__rgpu_aligned_ret], %ra0;
	ret;
}

.func __rgpu_free(.param .b64 __rgpu_free_ptr)
{
	.reg .pred 	%rfp<2>;
	.reg .b32 	%rfr<3>;
	.reg .b64 	%rf<22>;
	ld.param.u64 	%rf1, [__rgpu_free_ptr];
	mov.u64 	%rf21, __rgpu_device_heap;
	ld.global.u64 	%rf2, [%rf21];
	ld.global.u64 	%rf3, [%rf21+8];
	setp.eq.u64 	%rfp1, %rf2, 0;
	@%rfp1 bra 	RGPU_FREE_DONE;
	sub.u64 	%rf4, %rf1, %rf2;
	setp.lt.u64 	%rfp1, %rf4, @LOWEST@;
	@%rfp1 bra 	RGPU_FREE_DONE;
	setp.ge.u64 	%rfp1, %rf4, %rf3;
	@%rfp1 bra 	RGPU_FREE_DONE;
	and.b64 	%rf5, %rf4, 15;
	setp.ne.u64 	%rfp1, %rf5, 0;
	@%rfp1 bra 	RGPU_FREE_DONE;
	sub.u64 	%rf7, %rf1, 16;
	ld.volatile.u64 	%rf6, [%rf7];
	ld.volatile.u64 	%rf8, [%rf7+8];
	setp.gt.u64 	%rfp1, %rf6, @MAXCLASS@;
	@%rfp1 bra 	RGPU_FREE_DONE;
	cvt.u32.u64 	%rfr1, %rf6;
	and.b32 	%rfr2, %rfr1, 1;
	add.u32 	%rfr2, %rfr2, 2;
	cvt.u64.u32 	%rf9, %rfr2;
	shr.u32 	%rfr2, %rfr1, 1;
	add.u32 	%rfr2, %rfr2, 4;
	shl.b64 	%rf9, %rf9, %rfr2;
	setp.lt.u64 	%rfp1, %rf8, 16;
	@%rfp1 bra 	RGPU_FREE_DONE;
	setp.gt.u64 	%rfp1, %rf8, %rf9;
	@%rfp1 bra 	RGPU_FREE_DONE;
	sub.u64 	%rf10, %rf4, %rf8;
	setp.lt.u64 	%rfp1, %rf10, @HEADER@;
	@%rfp1 bra 	RGPU_FREE_DONE;
	add.u64 	%rf11, %rf10, %rf9;
	setp.gt.u64 	%rfp1, %rf11, %rf3;
	@%rfp1 bra 	RGPU_FREE_DONE;
	or.b64 	%rf19, %rf6, 4611686018427387904;
	atom.cas.b64 	%rf20, [%rf7], %rf6, %rf19;
	setp.ne.u64 	%rfp1, %rf20, %rf6;
	@%rfp1 bra 	RGPU_FREE_DONE;
	add.u64 	%rf12, %rf2, %rf10;
	mul.lo.u64 	%rf13, %rf6, 8;
	add.u64 	%rf13, %rf13, %rf2;
	add.u64 	%rf13, %rf13, 8;
	mov.u64 	%rf14, 1099511627775;
RGPU_FREE_PUSH:
	ld.volatile.u64 	%rf15, [%rf13];
	and.b64 	%rf16, %rf15, %rf14;
	or.b64 	%rf16, %rf16, -9223372036854775808;
	st.volatile.u64 	[%rf12], %rf16;
	membar.gl;
	shr.u64 	%rf17, %rf15, 40;
	add.u64 	%rf17, %rf17, 1;
	shl.b64 	%rf17, %rf17, 40;
	or.b64 	%rf17, %rf17, %rf10;
	atom.cas.b64 	%rf18, [%rf13], %rf15, %rf17;
	setp.ne.u64 	%rfp1, %rf18, %rf15;
	@%rfp1 bra 	RGPU_FREE_PUSH;
RGPU_FREE_DONE:
	ret;
}
)";

// The module's tokens (common/ptx_lexer.h) with their places in the text.
struct Token {
  size_t at = 0, end = 0;
  std::string_view text;
};

std::vector<Token> tokens(const std::string& s) {
  std::vector<Token> out;
  common::PtxLexer lx{s};
  while (!lx.token().empty()) out.push_back({lx.start, lx.i, std::string_view(s).substr(lx.start, lx.i - lx.start)});
  return out;
}

const std::string_view* renamed(std::string_view name) {
  for (auto& [from, to] : kRenamed)
    if (name == from) return &to;
  return nullptr;
}

Status bad(const std::string& why) { return Status(err::kInvalidKernelImage, "PTX for rgpu's device heap: " + why); }

const std::string& allocator() {
  static const std::string text = [] {
    std::string t(kAllocatorTemplate);
    for (auto [name, value] : {std::pair<std::string, uint64_t>{"@HEADER@", kHeapHeaderBytes},
                               {"@LOWEST@", kHeapHeaderBytes + 16},
                               {"@MAXCLASS@", static_cast<uint64_t>(kHeapClasses - 1)}})
      for (size_t at = t.find(name); at != std::string::npos; at = t.find(name, at))
        t.replace(at, name.size(), std::to_string(value));
    return t;
  }();
  return text;
}

}  // namespace

bool namesHeapCalls(const std::string& ptx) {
  for (const Token& t : tokens(ptx))
    if (renamed(t.text)) return true;
  return false;
}

Result<std::string> withRgpuHeap(const std::string& ptx) {
  const std::vector<Token> t = tokens(ptx);
  // The spans to drop (the external declarations) and the names to rename.
  std::vector<std::pair<size_t, size_t>> drop;
  std::vector<size_t> rename;
  bool any = false;
  int depth = 0;  // of braces: module scope at 0
  for (size_t k = 0; k < t.size(); ++k) {
    const std::string_view w = t[k].text;
    if (w == "{") ++depth;
    if (w == "}") depth = std::max(0, depth - 1);
    if (w.rfind("__rgpu_", 0) == 0) return bad("it already names " + std::string(w));
    if (depth == 0 && (w == ".extern" || w == ".visible" || w == ".weak" || w == ".func")) {
      // A function's declaration or definition: [linkage] .func [(ret)] name (params) ; or { body }.
      size_t j = k;
      const bool external = w == ".extern";
      while (j < t.size() && t[j].text != ".func" && t[j].text != ";" && t[j].text != "{") ++j;
      if (j >= t.size() || t[j].text != ".func") continue;
      size_t n = j + 1;
      if (n < t.size() && t[n].text == "(") {  // the return parameter list
        while (n < t.size() && t[n].text != ")") ++n;
        ++n;
      }
      if (n >= t.size() || !renamed(t[n].text)) {
        k = j;
        continue;
      }
      any = true;
      size_t e = n + 1;
      while (e < t.size() && t[e].text != ";" && t[e].text != "{") ++e;
      if (e >= t.size() || !external || t[e].text != ";")
        return bad("it defines " + std::string(t[n].text) + " itself instead of declaring it external");
      drop.push_back({t[k].at, t[e].end});
      k = e;
      continue;
    }
    if (renamed(w)) {
      any = true;
      rename.push_back(k);
    }
  }
  if (!any) return ptx;
  if (drop.empty()) return bad("it calls " + std::string(t[rename.front()].text) + " without declaring it");
  std::string out;
  out.reserve(ptx.size() + allocator().size());
  size_t at = 0, d = 0, r = 0;
  while (d < drop.size() || r < rename.size()) {
    const bool next_drop = r >= rename.size() || (d < drop.size() && drop[d].first < t[rename[r]].at);
    if (next_drop) {
      out.append(ptx, at, drop[d].first - at);
      if (d == 0) out.append(allocator());  // where the first declaration was: before every use
      at = drop[d].second;
      ++d;
    } else {
      const Token& n = t[rename[r]];
      out.append(ptx, at, n.at - at);
      out.append(*renamed(n.text));
      at = n.end;
      ++r;
    }
  }
  out.append(ptx, at, std::string::npos);
  return out;
}

}  // namespace rgpu::server::cuda
