// The accounting log: one JSON object per line, one line per session that
// ended on a server, for billing and charge-back (docs/accounting.md).
//
// A line is written by the daemon when the session's worker has exited
// (server/accounting/accounting_log.h), so a crashed worker's session is
// accounted for as well. Its fields, all present on every line:
//
//   ended        UTC time the worker was reaped, "2026-12-05T15:20:56Z"
//   member       the server's [cluster] name ("" for a server alone)
//   session      the session number on that server (rgpu-smi shows it)
//   user, host, pid   who ran it: the authenticated user, the client's
//                hostname and process id as the client said them
//   devices      [{"index", "name", "uuid"}] the physical devices it held
//   wall_s       seconds from admission to the end
//   gpu_s        GPU-seconds its kernels and copies took on its devices
//   peak_memory  the most device memory it held at once, bytes
//   gib_hours    device memory held over time, GiB x hours
//   bytes_in, bytes_out   bulk bytes from and to the client
//   calls, errors         requests served, and how many failed
//   migrations   times the session moved to another worker (rgpu-smi
//                --migrate, docs/migration.md)
//   reason       why it ended: "client left", "stopped: ...", an error, or
//                the daemon's "killed by signal 9" for a worker that crashed
//
// Reading is for untrusted files: a line that does not parse or lacks a
// field is skipped and counted, never a crash.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace rgpu::common {

struct AccountingRecord {
  std::string ended, member;
  uint64_t session = 0;
  std::string user, host;
  uint32_t pid = 0;
  struct Device {
    int index = 0;
    std::string name, uuid;
  };
  std::vector<Device> devices;
  double wall_s = 0, gpu_s = 0, gib_hours = 0;
  uint64_t peak_memory = 0, bytes_in = 0, bytes_out = 0, calls = 0, errors = 0;
  uint32_t migrations = 0;
  std::string reason;
};

// One line (no newline at its end).
std::string accountingLine(const AccountingRecord& r);
Result<AccountingRecord> parseAccountingLine(const std::string& line);
// "2026-12-05T15:20:56Z" for seconds since the epoch.
std::string utcTimestamp(int64_t unix_seconds);

// Per user and UTC day (the day a session ended), as rgpu-smi --accounting shows it.
struct AccountingDay {
  std::string day, user;
  uint64_t sessions = 0;
  double wall_s = 0, gpu_s = 0, gib_hours = 0;
  uint64_t peak_memory = 0;  // the largest of one session's
  uint64_t bytes_in = 0, bytes_out = 0;
};
// Adds every line read from `in` to `days` (kept sorted by day, then user);
// returns how many lines were skipped as malformed (blank lines are not).
size_t summariseAccounting(std::istream& in, std::vector<AccountingDay>& days);
// The table rgpu-smi prints (or CSV with a header).
std::string formatAccountingDays(const std::vector<AccountingDay>& days, bool csv);

}  // namespace rgpu::common
