// rgpu's error and status names and texts against NVIDIA's (cudaGetErrorName/
// String, cublasGetStatusName/String, cublasLtGetStatusName/String): both
// libraries loaded side by side (each by its path), every code compared,
// unknown ones too.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace {

using Lookup = const char* (*)(int);

struct Lib {
  void* handle = nullptr;
  Lookup name = nullptr, text = nullptr;
  Lib(const std::string& path, const char* name_fn = "cudaGetErrorName", const char* text_fn = "cudaGetErrorString") {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    name = reinterpret_cast<Lookup>(dlsym(handle, name_fn));
    text = reinterpret_cast<Lookup>(dlsym(handle, text_fn));
  }
};

TEST(ErrorTable, EveryNameAndTextIsNvidias) {
  Lib ours(std::string(RGPU_CLIENT_LIBDIR) + "/libcudart.so.13");
  Lib nvidia(RGPU_NVIDIA_CUDART);
  ASSERT_TRUE(ours.name && ours.text) << dlerror();
  ASSERT_TRUE(nvidia.name && nvidia.text) << dlerror();
  ASSERT_NE(ours.name, nvidia.name) << "the same library was loaded twice";
  int known = 0;
  for (int code : {-1000, -1, 12345, 20001, 1 << 30}) {
    EXPECT_STREQ(ours.name(code), nvidia.name(code)) << code;
    EXPECT_STREQ(ours.text(code), nvidia.text(code)) << code;
  }
  for (int code = 0; code <= 20000; ++code) {
    EXPECT_STREQ(ours.name(code), nvidia.name(code)) << code;
    EXPECT_STREQ(ours.text(code), nvidia.text(code)) << code;
    known += std::string(nvidia.name(code)) != nvidia.name(-1);
  }
  EXPECT_GT(known, 100);
}

void expectSameStatuses(const char* lib, const char* nvidia_path, const char* name_fn, const char* text_fn) {
  Lib ours(std::string(RGPU_CLIENT_LIBDIR) + "/" + lib, name_fn, text_fn);
  Lib nvidia(nvidia_path, name_fn, text_fn);
  ASSERT_TRUE(ours.name && ours.text) << lib;
  ASSERT_TRUE(nvidia.name && nvidia.text) << nvidia_path;
  ASSERT_NE(ours.name, nvidia.name) << "the same library was loaded twice";
  for (int code = -2; code <= 1000; ++code) {
    EXPECT_STREQ(ours.name(code), nvidia.name(code)) << lib << " " << code;
    EXPECT_STREQ(ours.text(code), nvidia.text(code)) << lib << " " << code;
  }
}

TEST(ErrorTable, CublasAndCublasLtStatusNamesAndTextsAreNvidias) {
  expectSameStatuses("libcublas.so.13", RGPU_NVIDIA_CUBLAS, "cublasGetStatusName", "cublasGetStatusString");
  expectSameStatuses("libcublasLt.so.13", RGPU_NVIDIA_CUBLASLT, "cublasLtGetStatusName", "cublasLtGetStatusString");
}

}  // namespace
