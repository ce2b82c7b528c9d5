// The interpreter's side of the JIT (ptx_jit.h): when a Function is
// compiled, and the plugin that compiles it, loaded on first use.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <string>

#include "common/log.h"
#include "server/sim/ptx/ptx_jit.h"

namespace rgpu::server::ptx::jit {
namespace {

std::atomic<Mode> g_mode{Mode::kOff};
std::atomic<uint64_t> g_threshold{kDefaultThreshold};

struct Plugin {
  std::mutex mu;
  std::string path;              // configured; empty: look for it
  bool tried = false;            // guarded by mu
  Compiler* compiler = nullptr;  // kept for the life of the process
  std::string error;
};
Plugin& plugin() {
  static Plugin* p = new Plugin;  // never destroyed: compiled code may run until exit
  return *p;
}

std::string executableDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

Compiler* loadLocked(Plugin& p) {
  if (p.tried) return p.compiler;
  p.tried = true;
  std::vector<std::string> candidates;
  if (!p.path.empty()) {
    candidates.push_back(p.path);
  } else {
    const std::string dir = executableDir();
    candidates.push_back(dir + "/" + kPluginFile);
#ifdef RGPU_PTX_JIT_LIBDIR
    if (RGPU_PTX_JIT_LIBDIR[0] != '/') candidates.push_back(dir + "/../" + RGPU_PTX_JIT_LIBDIR + "/" + kPluginFile);
#endif
    candidates.push_back(dir + "/../lib/rgpu/" + kPluginFile);
#ifdef RGPU_PTX_JIT_BUILD_PATH
    candidates.push_back(RGPU_PTX_JIT_BUILD_PATH);
#endif
  }
  std::string tried;
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), R_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + c;
      continue;
    }
    void* handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      p.error = std::string("cannot load the JIT plugin: ") + ::dlerror();
      return nullptr;
    }
    auto create = reinterpret_cast<CreateCompilerFn>(::dlsym(handle, kCreateCompilerSymbol));
    if (!create) {
      p.error = c + " is not rgpu's JIT plugin (no " + kCreateCompilerSymbol + ")";
      return nullptr;
    }
    std::string why;
    p.compiler = create(kJitAbi, &why);
    if (!p.compiler) p.error = c + ": " + why;
    return p.compiler;
  }
  p.error = "the JIT plugin " + std::string(kPluginFile) + " was not found (looked at " + tried + ")";
  return nullptr;
}

Compiler* compiler() {
  Plugin& p = plugin();
  std::lock_guard lock(p.mu);
  Compiler* c = loadLocked(p);
  if (!c && p.tried && !p.error.empty()) {
    RGPU_LOG_WARN("sim: kernels are interpreted only: {}", p.error);
    p.error.clear();  // logged once
  }
  return c;
}

}  // namespace

void configure(Mode mode, uint64_t threshold, std::string path) {
  g_mode.store(mode, std::memory_order_relaxed);
  g_threshold.store(threshold, std::memory_order_relaxed);
  Plugin& p = plugin();
  std::lock_guard lock(p.mu);
  if (!p.tried) p.path = std::move(path);
}

Mode mode() { return g_mode.load(std::memory_order_relaxed); }

bool available(std::string* error) {
  Plugin& p = plugin();
  std::lock_guard lock(p.mu);
  Compiler* c = loadLocked(p);
  if (!c && error) *error = p.error;
  return c != nullptr;
}

std::shared_ptr<const Code> codeFor(const Function& fn) {
  const Mode m = mode();
  if (m == Mode::kOff) return nullptr;
  const JitSlot& slot = fn.jit;
  std::lock_guard lock(slot.mu);
  if (slot.code || slot.tried) return slot.code;
  const uint64_t size = std::max<uint64_t>(1, fn.code.size());
  const uint64_t threshold = g_threshold.load(std::memory_order_relaxed);
  const uint64_t due = threshold > UINT64_MAX / size ? UINT64_MAX : threshold * size;
  if (m == Mode::kAuto && slot.interpreted.load(std::memory_order_relaxed) < due) return nullptr;
  slot.tried = true;
  Compiler* c = compiler();
  if (!c) return nullptr;
  std::string error;
  std::unique_ptr<Code> code = c->compile(fn, error);
  if (!code) {
    RGPU_LOG_WARN("sim: kernel {} stays interpreted: {}", fn.name, error);
    return nullptr;
  }
  RGPU_LOG_DEBUG("sim: compiled kernel {}: {} units, {} of {} instructions, {:.1f} ms", fn.name, code->units().size(),
                 code->covered(), fn.code.size(), code->compile_ms);
  slot.code = std::move(code);
  return slot.code;
}

void noteInterpreted(const Function& fn, uint64_t thread_instructions) {
  fn.jit.interpreted.fetch_add(thread_instructions, std::memory_order_relaxed);
}

}  // namespace rgpu::server::ptx::jit
