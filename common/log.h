// Logging: one spdlog logger per process, to stderr, prefixed with the component
// ("rgpu-client", "rgpu-server", "rgpu-worker") so mixed output stays readable.
// Level comes from config or RGPU_LOG_LEVEL (trace|debug|info|warn|error|off).
// Secrets (tokens, keys) are never passed to these functions.
//
// Every message is written with its control characters escaped ("\n" as
// "\\n", ESC as "\\x1b"): much of what is logged comes from peers (a
// client's hostname, kernel and variable names, PTX text in a parse error),
// and a peer must not be able to forge a log line or drive a terminal.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

namespace rgpu::common {

void initLogging(const std::string& component, const std::string& level);
// rgpu's own logger (never spdlog's default: an application may use spdlog too).
spdlog::logger& logger();
// Logs `message` at warn level the first time `key` is seen in this process.
void logOnce(const std::string& key, const std::string& message);
// Logs `message` at warn level at most once per second for `key`; the first
// line after a quiet spell says how many were suppressed. For lines a peer
// can cause at will (a flood of connections must not become a flood of log).
void logLimited(const std::string& key, const std::string& message);
// `text` with control characters escaped, as log lines carry it.
std::string escapeControl(std::string_view text);

}  // namespace rgpu::common

#define RGPU_LOG_DEBUG(...) ::rgpu::common::logger().debug(__VA_ARGS__)
#define RGPU_LOG_INFO(...) ::rgpu::common::logger().info(__VA_ARGS__)
#define RGPU_LOG_WARN(...) ::rgpu::common::logger().warn(__VA_ARGS__)
#define RGPU_LOG_ERROR(...) ::rgpu::common::logger().error(__VA_ARGS__)
