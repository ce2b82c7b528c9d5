#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_set>

namespace rgpu::common {
namespace {
std::mutex g_mu;
// Process-wide by nature: one log stream per process. Created on first use so
// that library code may log before (or without) initLogging().
std::shared_ptr<spdlog::logger> g_logger;

std::shared_ptr<spdlog::logger> makeLogger(const std::string& component, const std::string& level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto l = std::make_shared<spdlog::logger>(component, sink);
  l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [" + component + " " + std::to_string(::getpid()) + "] [%l] %v");
  std::string lvl = level;
  if (const char* env = std::getenv("RGPU_LOG_LEVEL"); env && *env) lvl = env;
  l->set_level(spdlog::level::from_str(lvl.empty() ? "info" : lvl));
  l->flush_on(spdlog::level::info);
  return l;
}
}  // namespace

void initLogging(const std::string& component, const std::string& level) {
  std::lock_guard lock(g_mu);
  g_logger = makeLogger(component, level);
}

spdlog::logger& logger() {
  std::lock_guard lock(g_mu);
  if (!g_logger) g_logger = makeLogger("rgpu", "");
  return *g_logger;
}

void logOnce(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::unordered_set<std::string> seen;  // "once per process" is process-wide state
  {
    std::lock_guard lock(mu);
    if (!seen.insert(key).second) return;
  }
  logger().warn("{}", message);
}

}  // namespace rgpu::common
