#include "common/config.h"

#include <sys/stat.h>

#include <cstdlib>

namespace rgpu::common {

Result<toml::table> loadTomlFile(const std::string& path) {
  if (!fileExists(path)) return Status(err::kFileNotFound, "config file " + path + " not found");
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return Status(err::kInvalidValue, "config " + path + ":" + std::to_string(e.source().begin.line) + ": " +
                                          std::string(e.description()));
  }
}

std::string expandHome(const std::string& path) {
  if (path.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (home) return std::string(home) + path.substr(1);
  }
  return path;
}

std::string resolveRelative(const std::string& config_file, const std::string& path) {
  std::string p = expandHome(path);
  if (p.empty() || p[0] == '/') return p;
  auto slash = config_file.rfind('/');
  return slash == std::string::npos ? p : config_file.substr(0, slash + 1) + p;
}

std::optional<std::string> envString(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

bool fileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace rgpu::common
