// rgpu's cudaGetErrorName/cudaGetErrorString against NVIDIA's: both libraries
// loaded side by side (each by its path), every code compared, unknown ones too.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace {

using Lookup = const char* (*)(int);

struct Lib {
  void* handle = nullptr;
  Lookup name = nullptr, text = nullptr;
  explicit Lib(const std::string& path) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return;
    name = reinterpret_cast<Lookup>(dlsym(handle, "cudaGetErrorName"));
    text = reinterpret_cast<Lookup>(dlsym(handle, "cudaGetErrorString"));
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

}  // namespace
