#include "common/accounting.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace rgpu::common {
namespace {
using json = nlohmann::json;
}  // namespace

std::string utcTimestamp(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string accountingLine(const AccountingRecord& r) {
  // In the order common/accounting.h lists them, for people reading the file.
  using ordered = nlohmann::ordered_json;
  ordered devices = ordered::array();
  for (const auto& d : r.devices) devices.push_back({{"index", d.index}, {"name", d.name}, {"uuid", d.uuid}});
  ordered j = {{"ended", r.ended},         {"member", r.member},     {"session", r.session},
            {"user", r.user},           {"host", r.host},         {"pid", r.pid},
            {"devices", devices},       {"wall_s", r.wall_s},     {"gpu_s", r.gpu_s},
            {"peak_memory", r.peak_memory}, {"gib_hours", r.gib_hours}, {"bytes_in", r.bytes_in},
            {"bytes_out", r.bytes_out}, {"calls", r.calls},       {"errors", r.errors},
            {"migrations", r.migrations}, {"reason", r.reason}};
  // Invalid UTF-8 (a client's hostname is its own to choose) is replaced, not thrown on.
  return j.dump(-1, ' ', false, ordered::error_handler_t::replace);
}

Result<AccountingRecord> parseAccountingLine(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (!j.is_object()) return Status(err::kInvalidValue, "not a JSON object");
  AccountingRecord r;
  try {
    r.ended = j.at("ended").get<std::string>();
    r.member = j.at("member").get<std::string>();
    r.session = j.at("session").get<uint64_t>();
    r.user = j.at("user").get<std::string>();
    r.host = j.at("host").get<std::string>();
    r.pid = j.at("pid").get<uint32_t>();
    for (const auto& d : j.at("devices"))
      r.devices.push_back({d.at("index").get<int>(), d.at("name").get<std::string>(), d.at("uuid").get<std::string>()});
    r.wall_s = j.at("wall_s").get<double>();
    r.gpu_s = j.at("gpu_s").get<double>();
    r.peak_memory = j.at("peak_memory").get<uint64_t>();
    r.gib_hours = j.at("gib_hours").get<double>();
    r.bytes_in = j.at("bytes_in").get<uint64_t>();
    r.bytes_out = j.at("bytes_out").get<uint64_t>();
    r.calls = j.at("calls").get<uint64_t>();
    r.errors = j.at("errors").get<uint64_t>();
    r.migrations = j.at("migrations").get<uint32_t>();
    r.reason = j.at("reason").get<std::string>();
  } catch (const json::exception& e) {
    return Status(err::kInvalidValue, e.what());
  }
  if (r.ended.size() < 10) return Status(err::kInvalidValue, "'ended' is not a UTC time");
  return r;
}

size_t summariseAccounting(std::istream& in, std::vector<AccountingDay>& days) {
  std::map<std::pair<std::string, std::string>, AccountingDay> by;
  for (auto& d : days) by[{d.day, d.user}] = d;
  size_t skipped = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto r = parseAccountingLine(line);
    if (!r) {
      ++skipped;
      continue;
    }
    AccountingDay& d = by[{r->ended.substr(0, 10), r->user}];
    d.day = r->ended.substr(0, 10);
    d.user = r->user;
    d.sessions++;
    d.wall_s += r->wall_s;
    d.gpu_s += r->gpu_s;
    d.gib_hours += r->gib_hours;
    d.peak_memory = std::max(d.peak_memory, r->peak_memory);
    d.bytes_in += r->bytes_in;
    d.bytes_out += r->bytes_out;
  }
  days.clear();
  for (auto& [key, d] : by) days.push_back(d);
  return skipped;
}

std::string formatAccountingDays(const std::vector<AccountingDay>& days, bool csv) {
  std::string out;
  char buf[512];
  const double mib = 1024.0 * 1024.0;
  if (csv) {
    out = "day, user, sessions, wall hours, GPU seconds, peak memory [MiB], GiB hours, in [MiB], out [MiB]\n";
    for (const auto& d : days) {
      std::snprintf(buf, sizeof buf, "%s, %s, %" PRIu64 ", %.4f, %.3f, %.1f, %.6f, %.1f, %.1f\n", d.day.c_str(),
                    d.user.c_str(), d.sessions, d.wall_s / 3600, d.gpu_s, d.peak_memory / mib, d.gib_hours,
                    d.bytes_in / mib, d.bytes_out / mib);
      out += buf;
    }
    return out;
  }
  std::snprintf(buf, sizeof buf, "%-10s  %-16s %8s %10s %12s %12s %10s %10s %10s\n", "day", "user", "sessions",
                "wall h", "GPU s", "peak MiB", "GiB h", "in MiB", "out MiB");
  out = buf;
  for (const auto& d : days) {
    std::snprintf(buf, sizeof buf, "%-10s  %-16s %8" PRIu64 " %10.3f %12.2f %12.1f %10.4f %10.1f %10.1f\n",
                  d.day.c_str(), d.user.c_str(), d.sessions, d.wall_s / 3600, d.gpu_s, d.peak_memory / mib,
                  d.gib_hours, d.bytes_in / mib, d.bytes_out / mib);
    out += buf;
  }
  return out;
}

}  // namespace rgpu::common
