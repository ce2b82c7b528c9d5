#include "server/accounting/accounting_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace rgpu::server {

AccountingLog::AccountingLog(AccountingConfig cfg) : cfg_(std::move(cfg)) { (void)open(); }

AccountingLog::~AccountingLog() {
  if (fd_ >= 0) ::close(fd_);
}

bool AccountingLog::open() {
  fd_ = ::open(cfg_.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd_ < 0) {
    common::logLimited("accounting-open", "accounting log " + cfg_.path + ": cannot open: " + std::strerror(errno) +
                                              " (lines are dropped until it can)");
    return false;
  }
  struct stat st {};
  size_ = ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  return true;
}

void AccountingLog::rotate() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  auto name = [&](uint32_t k) { return k == 0 ? cfg_.path : cfg_.path + "." + std::to_string(k); };
  if (cfg_.keep == 0) {
    ::unlink(cfg_.path.c_str());
  } else {
    ::unlink(name(cfg_.keep).c_str());
    for (uint32_t k = cfg_.keep; k >= 1; --k) ::rename(name(k - 1).c_str(), name(k).c_str());
  }
  RGPU_LOG_INFO("accounting log {} rotated ({} kept)", cfg_.path, cfg_.keep);
}

bool AccountingLog::append(const std::string& line) {
  const std::string out = line + "\n";
  if (fd_ >= 0 && size_ > 0 && size_ + out.size() > cfg_.max_bytes) rotate();
  if (fd_ < 0 && !open()) return false;
  ssize_t n = ::write(fd_, out.data(), out.size());
  if (n != static_cast<ssize_t>(out.size())) {
    common::logLimited("accounting-write", "accounting log " + cfg_.path + ": a line was not written: " +
                                               (n < 0 ? std::strerror(errno) : "short write"));
    if (n > 0) size_ += static_cast<uint64_t>(n);
    return false;
  }
  size_ += out.size();
  return true;
}

common::AccountingRecord accountingRecord(const SessionRecord& rec, const std::vector<PoolDeviceInfo>& devices,
                                          const std::string& member, const std::string& reason, int64_t unix_now) {
  common::AccountingRecord r;
  r.ended = common::utcTimestamp(unix_now);
  r.member = member;
  r.session = rec.session;
  r.user = rec.client.user;
  r.host = rec.client.host;
  r.pid = rec.client.pid;
  for (int d : rec.devices)
    if (d >= 0 && static_cast<size_t>(d) < devices.size())
      r.devices.push_back({d, devices[static_cast<size_t>(d)].name, devices[static_cast<size_t>(d)].uuid});
  r.wall_s = rec.seconds;
  r.gpu_s = static_cast<double>(rec.usage.gpu_ns) / 1e9;
  r.peak_memory = rec.peak_memory;
  r.gib_hours = rec.byte_seconds / (1024.0 * 1024.0 * 1024.0) / 3600.0;
  r.bytes_in = rec.usage.bytes_in;
  r.bytes_out = rec.usage.bytes_out;
  r.calls = rec.usage.calls;
  r.errors = rec.usage.errors;
  r.migrations = rec.migrations;
  r.reason = reason;
  return r;
}

}  // namespace rgpu::server
