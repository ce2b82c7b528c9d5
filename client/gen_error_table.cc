// Build-time generator of the client libraries' error name/text tables, from
// the behaviour of NVIDIA's own libraries (part of the CUDA toolkit rgpu
// builds against): every code the library names, with its exact name and text,
// and what it says for a code it does not know. NVIDIA's libraries answer
// these without a driver or GPU.
//
//   rgpu_gen_error_table LIBRARY NAME_FN TEXT_FN PREFIX MAX_CODE
// e.g. libcudart.so.13 cudaGetErrorName cudaGetErrorString kCudart 20000.
// Writes, to stdout, the ErrorTable PREFIX (client/error_table.h), for
// inclusion after that header.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
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
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s LIBRARY NAME_FN TEXT_FN PREFIX MAX_CODE\n", argv[0]);
    return 2;
  }
  const char* prefix = argv[4];
  int max_code = std::atoi(argv[5]);
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
    return 1;
  }
  auto name = reinterpret_cast<Lookup>(dlsym(lib, argv[2]));
  auto text = reinterpret_cast<Lookup>(dlsym(lib, argv[3]));
  if (!name || !text) {
    std::fprintf(stderr, "%s lacks %s/%s\n", argv[1], argv[2], argv[3]);
    return 1;
  }
  const char* unknown = name(-1);  // what it says for a code it does not know
  std::printf("// Generated at build time from %s (%s, %s) by client/gen_error_table.cc. Do not edit.\n",
              std::strrchr(argv[1], '/') ? std::strrchr(argv[1], '/') + 1 : argv[1], argv[2], argv[3]);
  std::printf("static const rgpu::client::ErrorEntry %sEntries[] = {\n", prefix);
  int n = 0;
  for (int code = 0; code <= max_code; ++code) {
    const char* nm = name(code);
    if (!nm || !std::strcmp(nm, unknown)) continue;
    std::printf("    {%d, %s, %s},\n", code, quoted(nm).c_str(), quoted(text(code)).c_str());
    ++n;
  }
  std::printf("};\n");
  std::printf("static const rgpu::client::ErrorTable %s = {%sEntries, %d, %s, %s};\n", prefix, prefix, n,
              quoted(unknown).c_str(), quoted(text(-1)).c_str());
  if (n < 5) {
    std::fprintf(stderr, "%s named only %d codes\n", argv[1], n);
    return 1;
  }
  return 0;
}
