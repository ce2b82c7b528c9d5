// rgpu-train-bench: a training step of a 29 M-parameter model
// (tests/bench/train_step.cu: cuBLASLt matmuls, layernorm, GELU, softmax
// cross-entropy, AdamW) through rgpu on the sim backend, timed side by side in
// one run on servers with the PTX JIT (by default and compiling every kernel
// first), with the interpreter alone, and with its general code alone
// ([sim] hot_paths = false: what every instruction ran through before the hot
// paths and the JIT). Every run must print the same losses to the last
// digit: the JIT and the hot paths change the speed, never a bit.
//
//   rgpu-train-bench [--quick] [steps]   (default 4 steps, the first a warm-up)
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "tests/bench/bench_server.h"

namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string output;
  double step_ms = 0;
  std::vector<std::string> losses;
};

Run trainOn(const std::string& extra_toml, const std::string& program, int steps) {
  auto server = rgpu::bench::launchServer("rgpu-train-bench", extra_toml);
  Run r;
  const std::string cmd = "RGPU_CONFIG=" + server.dir + "/client.toml LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR + " " +
                          program + " " + std::to_string(steps) + " 2>&1";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
    int st = pclose(p);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  rgpu::bench::stopServer(server);
  std::smatch m;
  if (std::regex_search(r.output, m, std::regex("step_ms: ([0-9.]+)"))) r.step_ms = std::stod(m[1].str());
  const std::regex loss("loss ([0-9.]+)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), loss); it != std::sregex_iterator(); ++it)
    r.losses.push_back((*it)[1].str());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 4;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") quick = true;
    else steps = std::max(2, std::atoi(argv[i]));
  }
  if (quick) steps = 2;
  // Installed: train_step is beside us. In the build tree: where CMake put it.
  fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  const std::string program = fs::exists(self / "train_step") ? (self / "train_step").string() : RGPU_TRAIN_STEP_BIN;
  std::printf("rgpu-train-bench: %s %d through rgpu (sim backend, loopback TLS), median step after the first\n",
              program.c_str(), steps);
  // The same program on four servers: the default (the JIT compiles a kernel
  // once it has run enough interpreted), every kernel compiled before its
  // first launch, the interpreter alone, and its general code alone.
  struct Config {
    const char* name;
    const char* toml;
  };
  const std::vector<Config> configs = {
      {"default ([sim] jit = \"auto\")", ""},
      {"jit = \"eager\"", "[sim]\njit = \"eager\"\n"},
      {"interpreter (jit = \"off\")", "[sim]\njit = \"off\"\n"},
      {"general code (hot_paths = false)", "[sim]\nhot_paths = false\n"},
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < (quick ? 1 : configs.size()); ++i) runs.push_back(trainOn(configs[i].toml, program, steps));
  const double general_ms = quick ? 0 : runs.back().step_ms;
  std::printf("%-36s %10s %16s\n", "server", "step", "vs general code");
  bool ok = true;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::printf("%-36s %7.0f ms", configs[i].name, runs[i].step_ms);
    if (general_ms > 0 && runs[i].step_ms > 0) std::printf(" %15.2fx", general_ms / runs[i].step_ms);
    std::printf("\n");
    ok = ok && runs[i].code == 0;
    if (runs[i].losses != runs[0].losses) {
      std::printf("LOSSES DIFFER: %s against %s\n", configs[i].name, configs[0].name);
      ok = false;
    }
  }
  if (!ok)
    for (const Run& r : runs) std::printf("%s\n", r.output.c_str());
  std::printf("%s\n", ok ? "losses identical; the loss fell" : "FAILED");
  return ok ? 0 : 1;
}
