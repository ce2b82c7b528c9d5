#include "common/config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace rgpu::common {

Result<toml::table> loadTomlFile(const std::string& path) {
  auto text = readTextFile(path);
  if (!text) return text.status();
  return parseToml(*text, path);
}

Result<toml::table> parseToml(const std::string& text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return Status(err::kInvalidValue, "config " + path + ":" + std::to_string(e.source().begin.line) + ": " +
                                          std::string(e.description()));
  }
}

Result<std::string> readTextFile(const std::string& path) {
  if (!fileExists(path)) return Status(err::kFileNotFound, "config file " + path + " not found");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(err::kFileNotFound, "config file " + path + " cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

Result<uint64_t> parseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  uint64_t mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "KiB" || unit == "K") mul = 1ull << 10;
  else if (unit == "MiB" || unit == "M") mul = 1ull << 20;
  else if (unit == "GiB" || unit == "G") mul = 1ull << 30;
  else if (unit == "TiB" || unit == "T") mul = 1ull << 40;
  else return Status(err::kInvalidValue, "bad size '" + s + "' (use e.g. 16GiB, 512MiB)");
  if (end == s.c_str() || v < 0) return Status(err::kInvalidValue, "bad size '" + s + "'");
  return static_cast<uint64_t>(v * static_cast<double>(mul));
}

namespace {
void walkKeys(const toml::table& t, const KeySchema& schema, const std::string& section, const std::string& shown,
              std::vector<std::string>& out) {
  const auto& known = schema.at(section);
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    const std::string name = shown.empty() ? key : shown + "." + key;
    if (!known.count(key)) {
      out.push_back(name);
      continue;
    }
    const std::string sub = section.empty() ? key : section + "." + key;
    if (!schema.count(sub)) continue;
    if (const auto* tt = v.as_table()) walkKeys(*tt, schema, sub, name, out);
    if (const auto* arr = v.as_array())
      for (size_t i = 0; i < arr->size(); ++i)
        if (const auto* et = (*arr)[i].as_table()) walkKeys(*et, schema, sub, name + "[" + std::to_string(i) + "]", out);
  }
}
}  // namespace

std::vector<std::string> unknownKeys(const toml::table& t, const KeySchema& schema) {
  std::vector<std::string> out;
  walkKeys(t, schema, "", "", out);
  return out;
}

}  // namespace rgpu::common
