// TOML config loading shared by client and server: file lookup, `~` expansion,
// typed getters with a clear error naming the file and key.
#pragma once

#include <toml++/toml.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

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

// The keys a program reads, by table: "" the top level, "a.b" a table (or an
// array of tables) under "a". A key naming a table listed here is walked into.
using KeySchema = std::map<std::string, std::set<std::string>>;
// The keys of `t` the schema lacks, as "tls.resume", "users[1].quota".
std::vector<std::string> unknownKeys(const toml::table& t, const KeySchema& schema);

}  // namespace rgpu::common
