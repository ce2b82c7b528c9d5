// rgpu-train-bench: a training step of a 29 M-parameter model
// (tests/bench/train_step.cu: cuBLASLt matmuls, layernorm, GELU, softmax
// cross-entropy, AdamW) through rgpu on the sim backend, timed on a server
// with the interpreter's hot paths and on one without them ([sim] hot_paths =
// false: its general code, what every instruction ran through before the hot
// paths), side by side in one run. Both runs must print the same losses to
// the last digit: the hot paths change the speed, never a bit.
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
  Run hot = trainOn("", program, steps);
  Run general = quick ? Run{} : trainOn("[sim]\nhot_paths = false\n", program, steps);
  std::printf("%-34s %12s\n", "interpreter", "step");
  std::printf("%-34s %9.0f ms\n", "hot paths (default)", hot.step_ms);
  bool ok = hot.code == 0;
  if (!quick) {
    std::printf("%-34s %9.0f ms\n", "general code only (hot_paths=false)", general.step_ms);
    if (hot.step_ms > 0) std::printf("speed-up: %.2fx\n", general.step_ms / hot.step_ms);
    ok = ok && general.code == 0;
    if (hot.losses != general.losses) {
      std::printf("LOSSES DIFFER between the two runs\n");
      ok = false;
    }
  }
  if (!ok) std::printf("%s\n%s\n", hot.output.c_str(), general.output.c_str());
  std::printf("%s\n", ok ? "losses identical; the loss fell" : "FAILED");
  return ok ? 0 : 1;
}
