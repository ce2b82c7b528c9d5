// Build-time generator of the client's cudaGetErrorName/cudaGetErrorString
// table, from the behaviour of NVIDIA's own libcudart.so.13 (part of the CUDA
// toolkit rgpu builds against): every code it names, with its exact name and
// text. Run as `rgpu_gen_error_table <path of NVIDIA's libcudart.so.13>`; the
// table goes to stdout. NVIDIA's runtime answers these without a driver or GPU.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {
using Lookup = const char* (*)(int);

std::string quoted(const char* s) {
  std::string out = "\"";
  for (; *s; ++s) {
    unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  return out + "\"";
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <NVIDIA's libcudart.so.13>\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
    return 1;
  }
  auto name = reinterpret_cast<Lookup>(dlsym(lib, "cudaGetErrorName"));
  auto text = reinterpret_cast<Lookup>(dlsym(lib, "cudaGetErrorString"));
  if (!name || !text) {
    std::fprintf(stderr, "%s lacks cudaGetErrorName/cudaGetErrorString\n", argv[1]);
    return 1;
  }
  const char* unknown = name(-1);  // what it says for a code it does not know
  std::printf("// Generated at build time from NVIDIA's libcudart.so.13 by client/gen_error_table.cc. Do not edit.\n");
  std::printf("static const char* const kUnrecognizedName = %s;\n", quoted(unknown).c_str());
  std::printf("static const char* const kUnrecognizedText = %s;\n", quoted(text(-1)).c_str());
  std::printf("static const ErrorEntry kErrors[] = {\n");
  int n = 0;
  for (int code = 0; code <= 20000; ++code) {
    const char* nm = name(code);
    if (!nm || !std::strcmp(nm, unknown)) continue;
    std::printf("    {%d, %s, %s},\n", code, quoted(nm).c_str(), quoted(text(code)).c_str());
    ++n;
  }
  std::printf("};\n");
  if (n < 50) {
    std::fprintf(stderr, "%s named only %d error codes\n", argv[1], n);
    return 1;
  }
  return 0;
}
