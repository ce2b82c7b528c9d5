// rgpu-ptx-bench: the sim backend's kernels (compiled by the PTX JIT, and
// interpreted with and without the interpreter's hot paths) against the same
// kernels written as native C++ loops, measured side by side in one run.
// Prints thread-instructions per second per core (one thread here, and two)
// and the slowdown against native code, plus peak RSS after the matmul.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "server/sim/ptx/ptx_interp.h"
#include "server/sim/ptx/ptx_jit.h"
#include "server/sim/ptx/ptx_parser.h"

using namespace rgpu::server::ptx;
using Clock = std::chrono::steady_clock;

namespace {
double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

template <typename F>
double best(int reps, F f) {
  double b = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t = Clock::now();
    f();
    b = std::min(b, secondsSince(t));
  }
  return b;
}

struct Params {
  std::vector<uint8_t> bytes;
  template <typename T>
  Params& add(T v) {
    size_t a = alignof(T) > 8 ? 8 : alignof(T);
    bytes.resize((bytes.size() + a - 1) / a * a);
    size_t at = bytes.size();
    bytes.resize(at + sizeof v);
    std::memcpy(bytes.data() + at, &v, sizeof v);
    return *this;
  }
};

MemoryRanges ranges(std::initializer_list<std::pair<const void*, size_t>> bufs) {
  MemoryRanges r;
  for (auto& [p, n] : bufs) r.emplace_back(reinterpret_cast<uint64_t>(p), reinterpret_cast<uint64_t>(p) + n);
  std::sort(r.begin(), r.end());
  return r;
}

long peakRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}
}  // namespace

int main(int argc, char** argv) {
  // --quick: small sizes, one repetition (a smoke test); --only NAME: one
  // kernel (vecadd, matmul, reduce), for profiling it alone; --jit-only: the
  // compiled code only (for profiling it).
  bool quick = false, jit_only = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") quick = true;
    else if (std::string(argv[i]) == "--jit-only") jit_only = true;
    else if (std::string(argv[i]) == "--only" && i + 1 < argc) only = argv[++i];
  }
  auto want = [&](const char* name) { return only.empty() || only == name; };
  std::ifstream in(RGPU_PTX_BENCH_PTX);
  std::stringstream ss;
  ss << in.rdbuf();
  auto mod = parsePtx(ss.str());
  if (!mod) {
    std::fprintf(stderr, "rgpu-ptx-bench: %s\n", mod.status().message().c_str());
    return 1;
  }
  Interpreter interp(1);  // one core: the per-core figure
  Interpreter interp2(2);  // two worker threads
  const int reps = quick ? 1 : 3;
  std::printf("rgpu-ptx-bench: the sim backend's kernels on 1 thread vs native C++ (-O2) on 1 thread, best of %d%s\n",
              reps, quick ? " (--quick: smoke test)" : "");
  std::printf("  jit: compiled by the PTX JIT ([sim] jit; the per-core figure), then on 2 threads (scaling: against 1;\n"
              "       1 and 2 threads alternate, best of %d each)\n"
              "  interp: the interpreter with its hot paths (jit = \"off\"); general: its general code only (hot_paths = false)\n"
              "  compile: what compiling the kernel took (once per kernel and session)\n",
              2 * reps - 1);
  std::printf("%-28s %10s %13s %13s %7s %13s %13s %8s %10s %9s %9s\n", "kernel", "jit time", "jit", "jit 2 thr",
              "scaling", "interp", "general", "jit/int", "compile", "native", "slowdown");
  bool ok = true;
  // Figures for one launch: compiled on 1 and 2 threads, interpreted with and without the hot paths.
  struct Figures {
    double t1 = 0, t2 = 0, ti = 0, tg = 0, compile_ms = 0;
    uint64_t insts = 0;
  };
  auto measure = [&](const Launch& L, const std::function<void()>& before) {
    Figures f;
    auto timed = [&](Interpreter& in) {
      return best(reps, [&] {
        before();
        f.insts = in.run(L).thread_instructions;
      });
    };
    jit::configure(jit::Mode::kOff, jit::kDefaultThreshold);
    if (!jit_only) {
      setFastPaths(false);
      f.tg = timed(interp);
      setFastPaths(true);
      f.ti = timed(interp);
    }
    jit::configure(jit::Mode::kEager, jit::kDefaultThreshold);
    before();
    interp.run(L);  // compiles it
    {
      std::lock_guard lock(L.fn->jit.mu);
      f.compile_ms = L.fn->jit.code ? L.fn->jit.code->compile_ms : -1;
    }
    // One and two threads in alternation (this host's load drifts between
    // runs: best-of figures taken in separate stretches made the scaling
    // swing from 1.5x to 2.7x), two threads first so that the last run, whose
    // results are checked below, is the compiled code's on one thread.
    f.t1 = f.t2 = 1e30;
    for (int i = 0; i < 2 * reps - 1; ++i) {
      f.t2 = std::min(f.t2, best(1, [&] {
                        before();
                        f.insts = interp2.run(L).thread_instructions;
                      }));
      f.t1 = std::min(f.t1, best(1, [&] {
                        before();
                        f.insts = interp.run(L).thread_instructions;
                      }));
    }
    return f;
  };
  auto line = [](const std::string& name, const Figures& f, double tn) {
    std::printf("%-28s %7.1f ms %11.1f M %11.1f M %6.2fx %11.1f M %11.1f M %7.2fx %7.0f ms %6.2f ms %8.1fx\n", name.c_str(),
                f.t1 * 1e3, f.insts / f.t1 / 1e6, f.insts / f.t2 / 1e6, f.t1 / f.t2, f.insts / f.ti / 1e6,
                f.insts / f.tg / 1e6, f.ti / f.t1, f.compile_ms, tn * 1e3, f.t1 / tn);
  };

  if (want("vecadd")) {  // vector add
    int n = quick ? (1 << 16) : (1 << 22);
    std::vector<float> a(n), b(n), c(n), ref(n);
    for (int i = 0; i < n; ++i) a[i] = i * 0.5f, b[i] = i * 0.25f;
    auto mem = ranges({{a.data(), n * 4ul}, {b.data(), n * 4ul}, {c.data(), n * 4ul}});
    Params p;
    p.add(a.data()).add(b.data()).add(c.data()).add(n);
    Launch L;
    L.fn = &mod->functions.at("vecadd");
    L.grid = {static_cast<uint32_t>((n + 255) / 256), 1, 1};
    L.block = {256, 1, 1};
    L.params = p.bytes.data();
    L.memory = &mem;
    Figures fi = measure(L, [] {});
    volatile float sink = 0;
    double tn = best(reps, [&] {
      for (int i = 0; i < n; ++i) ref[i] = a[i] + b[i];
      sink = ref[n - 1];
    });
    ok &= c == ref;
    line("vector add (4M floats)", fi, tn);
  }
  long rss_before = peakRssKiB();
  if (want("matmul")) {  // tiled matmul
    int n = quick ? 64 : 256;
    std::vector<float> A(n * n), B(n * n), C(n * n), R(n * n);
    for (int i = 0; i < n * n; ++i) A[i] = (i % 7) * 0.5f, B[i] = (i % 5) * 0.25f;
    auto mem = ranges({{A.data(), A.size() * 4}, {B.data(), B.size() * 4}, {C.data(), C.size() * 4}});
    Params p;
    p.add(A.data()).add(B.data()).add(C.data()).add(n);
    Launch L;
    L.fn = &mod->functions.at("matmul");
    L.grid = {static_cast<uint32_t>(n / 16), static_cast<uint32_t>(n / 16), 1};
    L.block = {16, 16, 1};
    L.params = p.bytes.data();
    L.memory = &mem;
    Figures fi = measure(L, [] {});
    double tn = best(reps, [&] {
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          float acc = 0;
          for (int k = 0; k < n; ++k) acc += A[i * n + k] * B[k * n + j];
          R[i * n + j] = acc;
        }
    });
    double worst = 0;
    for (int i = 0; i < n * n; ++i) worst = std::max(worst, std::fabs(static_cast<double>(C[i] - R[i])) / std::max(1.0f, std::fabs(R[i])));
    ok &= worst < 1e-4;
    line("tiled matmul " + std::to_string(n) + "^2", fi, tn);
  }
  long rss_after = peakRssKiB();
  if (want("reduce")) {  // reduction with shuffles and atomics
    int n = quick ? (1 << 16) : (1 << 22);
    std::vector<int> v(n);
    long long ref = 0;
    for (int i = 0; i < n; ++i) v[i] = (i % 1000) - 500, ref += v[i];
    unsigned long long out = 0;
    auto mem = ranges({{v.data(), n * 4ul}, {&out, 8}});
    Params p;
    p.add(v.data()).add(&out).add(n);
    Launch L;
    L.fn = &mod->functions.at("reduce");
    L.grid = {64, 1, 1};
    L.block = {256, 1, 1};
    L.params = p.bytes.data();
    L.memory = &mem;
    Figures fi = measure(L, [&] { out = 0; });
    volatile long long sink = 0;
    double tn = best(reps, [&] {
      long long s = 0;
      for (int i = 0; i < n; ++i) s += v[i];
      sink = s;
    });
    ok &= static_cast<long long>(out) == ref;
    line("reduction (shfl + atomics)", fi, tn);
  }
  const Function& mm = mod->functions.at("matmul");
  std::printf("peak RSS: %ld MiB before the matmul, %ld MiB after; decoded matmul: %zu instructions x %zu bytes; "
              "per-warp registers: %u x 256 bytes = %u KiB\n",
              rss_before / 1024, rss_after / 1024, mm.code.size(), sizeof(Inst), mm.num_regs, mm.num_regs * 256 / 1024);
  std::printf("%s\n", ok ? "results match the native loops" : "RESULTS DIFFER");
  return ok ? 0 : 1;
}
