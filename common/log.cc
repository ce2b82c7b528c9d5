#include "common/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <chrono>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace rgpu::common {
namespace {
std::mutex g_mu;
// Process-wide by nature: one log stream per process. Created on first use so
// that library code may log before (or without) initLogging().
std::shared_ptr<spdlog::logger> g_logger;

void appendEscaped(std::string_view text, spdlog::memory_buf_t& out) {
  static const char* hex = "0123456789abcdef";
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out.push_back(ch);
    } else if (c == '\n') {
      out.append(std::string_view("\\n"));
    } else if (c == '\t') {
      out.append(std::string_view("\\t"));
    } else if (c == '\r') {
      out.append(std::string_view("\\r"));
    } else {
      const char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
      out.append(esc, esc + 4);
    }
  }
}

// %Q: the message, control characters escaped.
class EscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    appendEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

std::shared_ptr<spdlog::logger> makeLogger(const std::string& component, const std::string& level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto l = std::make_shared<spdlog::logger>(component, sink);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('Q').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [" + escapeControl(component) + " " +
                                                       std::to_string(::getpid()) + "] [%l] %Q");
  l->set_formatter(std::move(formatter));
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

void logLimited(const std::string& key, const std::string& message) {
  static std::mutex mu;
  struct Seen {
    std::chrono::steady_clock::time_point last;
    uint64_t suppressed = 0;
  };
  static std::unordered_map<std::string, Seen> seen;  // per process, as the log is
  uint64_t suppressed = 0;
  {
    std::lock_guard lock(mu);
    auto now = std::chrono::steady_clock::now();
    auto [it, fresh] = seen.try_emplace(key);
    if (!fresh && now - it->second.last < std::chrono::seconds(1)) {
      ++it->second.suppressed;
      return;
    }
    it->second.last = now;
    suppressed = std::exchange(it->second.suppressed, 0);
    if (seen.size() > 4096) seen.clear();  // keys are few; never let them grow without bound
  }
  if (suppressed) logger().warn("{} ({} similar lines suppressed)", message, suppressed);
  else logger().warn("{}", message);
}

std::string escapeControl(std::string_view text) {
  spdlog::memory_buf_t buf;
  appendEscaped(text, buf);
  return std::string(buf.data(), buf.size());
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
