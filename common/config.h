// TOML config loading shared by client and server: file lookup, `~` expansion,
// typed getters with a clear error naming the file and key.
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>

#include "common/status.h"

namespace rgpu::common {

Result<toml::table> loadTomlFile(const std::string& path);
// `text` as TOML; `path` names it in messages.
Result<toml::table> parseToml(const std::string& text, const std::string& path);
Result<std::string> readTextFile(const std::string& path);
std::string expandHome(const std::string& path);
// Resolves `path` relative to the directory of the config file it came from.
std::string resolveRelative(const std::string& config_file, const std::string& path);
std::optional<std::string> envString(const char* name);
bool fileExists(const std::string& path);
// "16GiB", "512MiB", "1048576" -> bytes.
Result<uint64_t> parseSize(const std::string& s);

}  // namespace rgpu::common
