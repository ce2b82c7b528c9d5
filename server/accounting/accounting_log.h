// The daemon's accounting log ([accounting] in server.toml; the line format
// is common/accounting.h): one line appended per admitted session once its
// worker has exited, whatever ended it.
//
// Invariants:
//   - A line is written whole with one write(2) to a file opened O_APPEND, so
//     readers (rgpu-smi --accounting, a billing job tailing it) never see half
//     a line from us, and a line is never lost to a rotation.
//   - Rotation happens before a line that would take the file past
//     max_bytes: path.(keep-1) -> path.keep (the oldest beyond it deleted),
//     ..., path -> path.1, then a fresh path. keep = 0: the file is truncated.
//   - The file is created mode 0640: the server's user (and group) alone.
//   - A failure (disk full, a directory gone) is logged, rate-limited, and the
//     line dropped: accounting never stops the server or a session.
// Used from the daemon's event loop thread only.
#pragma once

#include <string>

#include "common/accounting.h"
#include "server/config/server_config.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

class AccountingLog {
 public:
  explicit AccountingLog(AccountingConfig cfg);
  ~AccountingLog();
  AccountingLog(const AccountingLog&) = delete;
  AccountingLog& operator=(const AccountingLog&) = delete;

  // Appends `line` and a newline; false when it could not (logged).
  bool append(const std::string& line);

 private:
  bool open();
  void rotate();

  AccountingConfig cfg_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The line for a session the pool manager ended: `member` is the server's
// [cluster] name, `reason` why it ended, `unix_now` the time it did.
common::AccountingRecord accountingRecord(const SessionRecord& rec, const std::vector<PoolDeviceInfo>& devices,
                                          const std::string& member, const std::string& reason, int64_t unix_now);

}  // namespace rgpu::server
