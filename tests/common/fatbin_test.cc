#include "common/fatbin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "tests/support/test_env.h"

namespace rgpu::common {
namespace {

std::string fatbin(const std::string& tag) { return test::readFile(std::string(RGPU_TEST_DATA_DIR) + "/kernels_" + tag + ".fatbin"); }

void expectLayout(const FatbinImage& img, const std::string& name, std::vector<std::pair<uint32_t, uint32_t>> params,
                  uint32_t bytes) {
  auto it = img.kernels.find(name);
  ASSERT_NE(it, img.kernels.end()) << name;
  ASSERT_EQ(it->second.params.size(), params.size()) << name;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(it->second.params[i].offset, params[i].first) << name << " param " << i;
    EXPECT_EQ(it->second.params[i].size, params[i].second) << name << " param " << i;
  }
  EXPECT_EQ(it->second.param_bytes, bytes) << name;
}

void expectAllLayouts(const FatbinImage& img) {
  expectLayout(img, "_Z8k_vecaddPKfS0_Pfi", {{0, 8}, {8, 8}, {16, 8}, {24, 4}}, 28);
  expectLayout(img, "_Z7k_smallcbsfdxPv", {{0, 1}, {1, 1}, {2, 2}, {4, 4}, {8, 8}, {16, 8}, {24, 8}}, 32);
  expectLayout(img, "_Z5k_vec4Vec4dS_c", {{0, 16}, {16, 8}, {32, 16}, {48, 1}}, 49);
  expectLayout(img, "_Z5k_bigi3BigPd", {{0, 4}, {4, 4000}, {4008, 8}}, 4016);
  expectLayout(img, "_Z10k_noparamsv", {}, 0);
  expectLayout(img, "_Z6k_fillIfEvPT_S0_i", {{0, 8}, {8, 4}, {12, 4}}, 16);
  expectLayout(img, "_Z6k_fillIdEvPT_S0_i", {{0, 8}, {8, 8}, {16, 4}}, 20);
}

TEST(Fatbin, ParsesDefaultBuildWithCubinAndZstdPtx) {
  std::string f = fatbin("default");
  auto img = parseFatbin(f.data(), f.size());
  ASSERT_TRUE(img) << img.status().message();
  EXPECT_TRUE(img->has_ptx);
  bool elf = false;
  for (auto& e : img->entries) elf |= e.kind == FatbinEntry::kElf && e.arch == 75;
  EXPECT_TRUE(elf);
  expectAllLayouts(*img);
}

TEST(Fatbin, DecodesTheLz4SchemeOfCompressModeSpeed) {
  std::string f = fatbin("speed");
  auto img = parseFatbin(f.data(), f.size());
  ASSERT_TRUE(img) << img.status().message();
  std::string ptx;
  for (auto& e : img->entries)
    if (e.kind == FatbinEntry::kPtx) ptx = e.payload;
  EXPECT_NE(ptx.find(".entry _Z8k_vecaddPKfS0_Pfi"), std::string::npos);
  expectAllLayouts(*img);
}

TEST(Fatbin, TakesLayoutsFromPtxWhenThereIsNoCubin) {
  std::string f = fatbin("ptxonly");
  auto img = parseFatbin(f.data(), f.size());
  ASSERT_TRUE(img) << img.status().message();
  for (auto& e : img->entries) EXPECT_EQ(e.kind, FatbinEntry::kPtx);
  expectAllLayouts(*img);
}

TEST(Fatbin, DecompressesZstdCubins) {
  std::string f = fatbin("size");
  auto img = parseFatbin(f.data(), f.size());
  ASSERT_TRUE(img) << img.status().message();
  expectAllLayouts(*img);
}

TEST(Fatbin, PtxAndCubinLayoutsAgree) {
  std::string f = fatbin("default");
  auto img = parseFatbin(f.data(), f.size());
  ASSERT_TRUE(img);
  for (auto& e : img->entries) {
    if (e.kind != FatbinEntry::kPtx) continue;
    auto ptx = kernelsFromPtx(e.payload);
    ASSERT_TRUE(ptx);
    for (auto& [name, k] : *ptx) {
      auto& c = img->kernels.at(name);
      ASSERT_EQ(k.params.size(), c.params.size()) << name;
      for (size_t i = 0; i < k.params.size(); ++i) {
        EXPECT_EQ(k.params[i].offset, c.params[i].offset) << name;
        EXPECT_EQ(k.params[i].size, c.params[i].size) << name;
      }
    }
  }
}

TEST(Fatbin, RejectsTruncatedInputAtEveryLength) {
  std::string f = fatbin("default");
  for (size_t len = 0; len < f.size(); len += (len < 256 ? 1 : 97)) {
    auto img = parseFatbin(f.data(), len);
    EXPECT_FALSE(img) << "accepted " << len << " of " << f.size() << " bytes";
  }
}

TEST(Fatbin, SurvivesRandomCorruption) {
  // Untrusted on the server: a corrupted fatbin must give an error, never a crash.
  for (const char* tag : {"default", "speed", "size"}) {
    std::string f = fatbin(tag);
    std::mt19937 rng(1234);
    for (int iter = 0; iter < 1500; ++iter) {
      std::string g = f;
      int flips = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < flips; ++k) g[rng() % g.size()] = static_cast<char>(rng());
      (void)parseFatbin(g.data(), g.size());
    }
  }
  SUCCEED();
}

TEST(Fatbin, RejectsGarbageWithAClearMessage) {
  std::string junk(100, 'x');
  auto img = parseFatbin(junk.data(), junk.size());
  ASSERT_FALSE(img);
  EXPECT_EQ(img.status().code(), err::kInvalidKernelImage);
  EXPECT_NE(img.status().message().find("invalid fatbin"), std::string::npos);
}

TEST(Image, TakesAFatbinACubinOrPtxTextAndKnowsEachLength) {
  std::string f = fatbin("default");
  auto whole = parseImage(f.data(), f.size());
  ASSERT_TRUE(whole) << whole.status().message();
  EXPECT_EQ(imageLength(f.data()), f.size());
  expectAllLayouts(*whole);
  // Its cubin alone, and its PTX alone (as cudaLibraryLoadData gets them).
  std::string cubin, ptx;
  for (auto& e : whole->entries) {
    if (e.kind == FatbinEntry::kElf && cubin.empty()) cubin = e.payload;
    if (e.kind == FatbinEntry::kPtx && ptx.empty()) ptx = e.payload;
  }
  ASSERT_FALSE(cubin.empty());
  ASSERT_FALSE(ptx.empty());
  EXPECT_EQ(imageLength(cubin.data()), cubin.size());
  auto c = parseImage(cubin.data(), cubin.size());
  ASSERT_TRUE(c) << c.status().message();
  ASSERT_EQ(c->entries.size(), 1u);
  EXPECT_EQ(c->entries[0].kind, FatbinEntry::kElf);
  EXPECT_FALSE(c->has_ptx);
  expectAllLayouts(*c);
  EXPECT_EQ(imageLength(ptx.c_str()), ptx.size() + 1);  // with its NUL
  auto p = parseImage(ptx.c_str(), ptx.size() + 1);
  ASSERT_TRUE(p) << p.status().message();
  ASSERT_EQ(p->entries.size(), 1u);
  EXPECT_EQ(p->entries[0].kind, FatbinEntry::kPtx);
  EXPECT_EQ(p->entries[0].payload, ptx);  // up to the NUL
  EXPECT_GT(p->entries[0].arch, 0u);
  EXPECT_TRUE(p->has_ptx);
  expectAllLayouts(*p);
  // Text that is not PTX, PTX without a target, a truncated cubin: refused, never read past.
  for (std::string bad : {std::string(100, 'x'), std::string(".version 9.0\n.entry k() { ret; }"),
                          cubin.substr(0, cubin.size() / 2)}) {
    auto r = parseImage(bad.data(), bad.size());
    EXPECT_FALSE(r) << bad.substr(0, 40);
    if (!r) {
      EXPECT_EQ(r.status().code(), err::kInvalidKernelImage);
    }
  }
}

// What a checkpoint of the CUDA backend relies on (server/cuda/cuda_checkpoint.cc):
// the variables a module declares, from its PTX and from its cubin alike,
// and which kernels may call device malloc.
TEST(Image, NamesItsModuleVariablesAndTheKernelsThatMayCallMalloc) {
  std::string f = fatbin("default");
  auto whole = parseImage(f.data(), f.size());
  ASSERT_TRUE(whole) << whole.status().message();
  std::string cubin, ptx;
  for (auto& e : whole->entries) {
    if (e.kind == FatbinEntry::kElf && cubin.empty()) cubin = e.payload;
    if (e.kind == FatbinEntry::kPtx && ptx.empty()) ptx = e.payload;
  }
  auto c = parseImage(cubin.data(), cubin.size());
  auto p = parseImage(ptx.c_str(), ptx.size() + 1);
  ASSERT_TRUE(c && p);
  for (const FatbinImage* img : {&*whole, &*c, &*p}) {
    auto vars = moduleVariables(*img);
    for (const char* name : {"k_calls", "k_scale"})
      EXPECT_NE(std::find(vars.begin(), vars.end(), name), vars.end()) << name << " of " << img->entries.size();
  }
  // From the PTX's call graph: only the kernel that reaches malloc through k_grab.
  EXPECT_EQ(kernelsCallingMalloc(*whole), std::set<std::string>{"_Z9k_mallocsPPv"});
  EXPECT_EQ(kernelsCallingMalloc(*p), std::set<std::string>{"_Z9k_mallocsPPv"});
  // A cubin alone: every kernel, since one of them names malloc.
  EXPECT_TRUE(kernelsCallingMalloc(*c).count("_Z8k_vecaddPKfS0_Pfi"));
  // Declarations are not definitions; an indirect call may reach malloc.
  const std::string src = R"(
.version 8.0
.target sm_80
.address_size 64
.extern .global .align 4 .u32 elsewhere;
.global .align 4 .b8 inited[8] = {1, 2, 3, 4, 5, 6, 7, 8};
.visible .const .align 4 .f32 scale;
.visible .entry indirect(.param .u64 .ptr .global .align 8 fn) {
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [fn];
  { .param .b64 retval0; prototype_0 : .callprototype (.param .b64 _) _ ();
    call (retval0), %rd1, (), prototype_0; }
  ret;
}
.visible .entry direct() { ret; }
.extern .func (.param .b64 func_retval0) __cuda_syscall_aligned_malloc(.param .b64 s, .param .b64 a);
.visible .entry aligned() {
  { .param .b64 param0; st.param.b64 [param0+0], 64; .param .b64 param1; st.param.b64 [param1+0], 256;
    .param .b64 retval0;
    call.uni (retval0), __cuda_syscall_aligned_malloc, (param0, param1); }
  ret;
}
)";
  auto text = parseImage(src.c_str(), src.size() + 1);
  ASSERT_TRUE(text) << text.status().message();
  EXPECT_EQ(moduleVariables(*text), (std::vector<std::string>{"inited", "scale"}));
  // __nv_aligned_device_malloc draws on the same heap.
  EXPECT_EQ(kernelsCallingMalloc(*text), (std::set<std::string>{"aligned", "indirect"}));
}

TEST(PtxSignature, HandlesAlignmentArraysAndPointerAttributes) {
  auto k = kernelsFromPtx(R"(
.visible .entry f(
  .param .u8 f_param_0,
  .param .u64 .ptr .global .align 1 f_param_1,
  .param .align 16 .b8 f_param_2[20],
  .param .f32 f_param_3
)
{ ret; }
.visible .entry g()
{ ret; }
)");
  ASSERT_TRUE(k) << k.status().message();
  auto& f = k->at("f");
  ASSERT_EQ(f.params.size(), 4u);
  EXPECT_EQ(f.params[1].offset, 8u);   // .ptr .align 1 is the pointee's alignment
  EXPECT_EQ(f.params[2].offset, 16u);
  EXPECT_EQ(f.params[2].size, 20u);
  EXPECT_EQ(f.params[3].offset, 36u);
  EXPECT_EQ(f.param_bytes, 40u);
  EXPECT_TRUE(k->at("g").params.empty());
}

TEST(PtxSignature, RejectsMalformedSignatures) {
  EXPECT_FALSE(kernelsFromPtx(".entry f( .param .u32 a, .param .weird b )"));
  EXPECT_FALSE(kernelsFromPtx(".entry f( .param .u32 a"));
  EXPECT_FALSE(kernelsFromPtx(".entry f( .param .align 3 .b8 a[4] )"));
}

TEST(Fatbin, AnEntryClaimingMoreThanTheEntryLimitIsRefusedBeforeAllocating) {
  std::string f = fatbin("ptxonly");
  ASSERT_GE(f.size(), 16u + 64u);
  // The first entry header follows the 16-byte fatbin header; its decompressed
  // size is at offset 56 (the PTX entry of this build is zstd-compressed).
  uint64_t claim = kMaxFatbinEntryBytes + 1;
  std::memcpy(&f[16 + 56], &claim, 8);
  auto img = parseFatbin(f.data(), f.size());
  ASSERT_FALSE(img);
  EXPECT_NE(img.status().message().find("compressed entry sizes out of range"), std::string::npos)
      << img.status().message();
}

}  // namespace
}  // namespace rgpu::common
