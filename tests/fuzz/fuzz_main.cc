// Standalone driver for the fuzz targets when they are not linked with
// libFuzzer (the regular g++ build and CI): runs every seed file, then
// deterministic mutations of them (byte flips, truncations, splices), and
// reports how many inputs ran. Any crash, hang (ctest timeout) or sanitizer
// report fails the test. With clang, scripts/test.sh --fuzz links libFuzzer
// instead (see docs/hardening.md). With RGPU_FUZZ_LAST=FILE set, each input
// is written there before it runs, so a crash or hang leaves it behind.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
void runOne(const std::string& s) {
  if (const char* last = std::getenv("RGPU_FUZZ_LAST")) std::ofstream(last, std::ios::binary | std::ios::trunc) << s;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> seeds;
  uint64_t iterations = 2000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--iterations=", 0) == 0) {
      iterations = std::strtoull(a.c_str() + 13, nullptr, 10);
      continue;
    }
    std::filesystem::path p(a);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p)) {
      for (auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (std::filesystem::exists(p)) {
      files.push_back(p);
    }
    for (auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      seeds.push_back(ss.str());
    }
  }
  if (seeds.empty()) seeds.push_back(std::string());
  uint64_t runs = 0;
  for (auto& s : seeds) {
    runOne(s);
    ++runs;
  }
  std::mt19937_64 rng(20261202);
  for (uint64_t it = 0; it < iterations; ++it) {
    std::string s = seeds[rng() % seeds.size()];
    switch (rng() % 4) {
      case 0:  // flip a few bytes
        for (int k = 0, n = 1 + static_cast<int>(rng() % 8); k < n && !s.empty(); ++k) s[rng() % s.size()] = static_cast<char>(rng());
        break;
      case 1:  // truncate
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 2: {  // splice another seed's tail
        const std::string& o = seeds[rng() % seeds.size()];
        size_t at = s.empty() ? 0 : rng() % s.size();
        size_t from = o.empty() ? 0 : rng() % o.size();
        s = s.substr(0, at) + o.substr(from);
        break;
      }
      default:  // insert interesting values (lengths, limits)
        if (s.size() >= 8) {
          static const uint64_t kValues[] = {0, 1, 0x7fffffff, 0xffffffff, 0xffffffffffffffffull, 1ull << 32, 64ull << 20};
          uint64_t v = kValues[rng() % 7];
          size_t at = rng() % (s.size() - 7);
          for (int b = 0; b < 8; ++b) s[at + b] = static_cast<char>(v >> (8 * b));
        }
        break;
    }
    runOne(s);
    ++runs;
  }
  std::printf("%llu inputs ran (%zu seeds), no crash\n", static_cast<unsigned long long>(runs), seeds.size());
  return 0;
}
