// The accounting log: the line format and its summary (common/accounting.h),
// the daemon's rotating file (server/accounting/accounting_log.h), and what
// the pool manager records of a session's memory over its life.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "common/accounting.h"
#include "server/accounting/accounting_log.h"
#include "server/pool/pool_manager.h"
#include "tests/support/test_env.h"

namespace rgpu::server {
namespace {

using common::AccountingDay;
using common::AccountingRecord;

AccountingRecord sample(const std::string& user, const std::string& ended, double gpu_s) {
  AccountingRecord r;
  r.ended = ended;
  r.member = "gpu01";
  r.session = 7;
  r.user = user;
  r.host = "laptop";
  r.pid = 4242;
  r.devices = {{0, "rgpu sim H100", "GPU-aaaa"}};
  r.wall_s = 3600;
  r.gpu_s = gpu_s;
  r.peak_memory = 1ull << 30;
  r.gib_hours = 0.5;
  r.bytes_in = 3ull << 20;
  r.bytes_out = 1ull << 20;
  r.calls = 100;
  r.errors = 1;
  r.reason = "client left";
  return r;
}

TEST(Accounting, ALineReadsBackAsWritten) {
  AccountingRecord r = sample("alice", "2026-12-05T10:00:00Z", 12.5);
  const std::string line = common::accountingLine(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  auto back = common::parseAccountingLine(line);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->user, "alice");
  EXPECT_EQ(back->ended, "2026-12-05T10:00:00Z");
  EXPECT_EQ(back->session, 7u);
  ASSERT_EQ(back->devices.size(), 1u);
  EXPECT_EQ(back->devices[0].uuid, "GPU-aaaa");
  EXPECT_DOUBLE_EQ(back->gpu_s, 12.5);
  EXPECT_EQ(back->peak_memory, 1ull << 30);
  EXPECT_EQ(back->reason, "client left");
  EXPECT_EQ(common::utcTimestamp(0), "1970-01-01T00:00:00Z");
}

TEST(Accounting, TheSummarySumsPerUserAndDayAndSkipsWhatDoesNotParse) {
  std::stringstream in;
  in << common::accountingLine(sample("alice", "2026-12-05T10:00:00Z", 10)) << "\n"
     << common::accountingLine(sample("alice", "2026-12-05T23:59:59Z", 5)) << "\n"
     << common::accountingLine(sample("bob", "2026-12-05T11:00:00Z", 1)) << "\n"
     << common::accountingLine(sample("alice", "2026-12-06T00:00:01Z", 2)) << "\n"
     << "\n"                                     // blank: not counted
     << "{\"user\": \"mallory\"}\n"              // fields missing
     << "not json at all\n"
     << "{\"ended\": 5, \"user\": []}\n";        // wrong types
  std::vector<AccountingDay> days;
  EXPECT_EQ(common::summariseAccounting(in, days), 3u);
  ASSERT_EQ(days.size(), 3u);
  EXPECT_EQ(days[0].day, "2026-12-05");
  EXPECT_EQ(days[0].user, "alice");
  EXPECT_EQ(days[0].sessions, 2u);
  EXPECT_DOUBLE_EQ(days[0].gpu_s, 15);
  EXPECT_DOUBLE_EQ(days[0].wall_s, 7200);
  EXPECT_EQ(days[0].bytes_in, 6ull << 20);
  EXPECT_EQ(days[1].user, "bob");
  EXPECT_EQ(days[2].day, "2026-12-06");
  const std::string table = common::formatAccountingDays(days, false);
  EXPECT_NE(table.find("2026-12-05  alice"), std::string::npos) << table;
  const std::string csv = common::formatAccountingDays(days, true);
  EXPECT_NE(csv.find("2026-12-05, alice, 2, 2.0000, 15.000, 1024.0, 1.000000, 6.0, 2.0"), std::string::npos) << csv;
}

TEST(AccountingLog, RotatesPastItsSizeKeepingWholeLinesAndNoMoreFilesThanAsked) {
  test::TempDir dir;
  AccountingConfig cfg;
  cfg.path = dir.file("accounting.jsonl");
  cfg.max_bytes = 4096;
  cfg.keep = 2;
  AccountingLog log(cfg);
  const std::string line = common::accountingLine(sample("alice", "2026-12-05T10:00:00Z", 1));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(log.append(line));
  struct stat st {};
  ASSERT_EQ(::stat(cfg.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  size_t lines = 0;
  for (const std::string& f : {cfg.path, cfg.path + ".1", cfg.path + ".2"}) {
    std::ifstream in(f);
    ASSERT_TRUE(in) << f;
    in.seekg(0, std::ios::end);
    EXPECT_LE(static_cast<uint64_t>(in.tellg()), cfg.max_bytes) << f;
    in.seekg(0);
    std::string l;
    while (std::getline(in, l)) {
      EXPECT_TRUE(common::parseAccountingLine(l)) << f << ": " << l;
      ++lines;
    }
  }
  EXPECT_FALSE(std::ifstream(cfg.path + ".3"));
  // Every line the three files can hold is there: the newest ones.
  const size_t per_file = cfg.max_bytes / (line.size() + 1);
  EXPECT_GE(lines, 2 * per_file + 1);
}

TEST(AccountingLog, AFileThatCannotBeWrittenDropsTheLineAndTheServerGoesOn) {
  AccountingConfig cfg;
  cfg.path = "/nonexistent-directory/accounting.jsonl";
  AccountingLog log(cfg);
  EXPECT_FALSE(log.append("{}"));
}

TEST(AccountingConfig, KeysAreReadAndBadValuesNamed) {
  auto c = parseServerConfig("[accounting]\npath = \"/var/log/rgpu/a.jsonl\"\nmax_bytes = \"1MiB\"\nkeep = 3\n", "t.toml");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->accounting.path, "/var/log/rgpu/a.jsonl");
  EXPECT_EQ(c->accounting.max_bytes, 1u << 20);
  EXPECT_EQ(c->accounting.keep, 3u);
  auto off = parseServerConfig("", "t.toml");
  ASSERT_TRUE(off);
  EXPECT_TRUE(off->accounting.path.empty());
  auto small = parseServerConfig("[accounting]\nmax_bytes = 100\n", "t.toml");
  ASSERT_FALSE(small);
  EXPECT_NE(small.status().message().find("accounting.max_bytes"), std::string::npos) << small.status().message();
  auto many = parseServerConfig("[accounting]\nkeep = 5000\n", "t.toml");
  ASSERT_FALSE(many);
  EXPECT_NE(many.status().message().find("accounting.keep"), std::string::npos) << many.status().message();
  auto words = parseServerConfig("[accounting]\nmax_bytes = \"lots\"\n", "t.toml");
  EXPECT_FALSE(words);
}

// A pool of one device on a clock the test moves, with alice's session 1 admitted.
struct AliceOnOneDevice {
  AliceOnOneDevice() : pool({{"rgpu sim H100", "GPU-aaaa", 16ull << 30, 90}}, {alice()}, {}) {
    pool.setClock([this] { return now; });
    DeviceRequest one;
    one.count = 1;
    auto a = pool.admit(1, {"alice", "laptop", "127.0.0.1:1", 9}, one, now);
    admitted = a && *a;
  }
  static UserEntry alice() {
    UserEntry u;
    u.name = u.token = "alice";
    return u;
  }
  PoolManager::Clock::time_point now = PoolManager::Clock::now();
  PoolManager pool;
  bool admitted = false;
};

// A reservation of 2^63 bytes (one the backend then refuses) and its release
// leave the memory the session holds as it was (it is counted unsigned), and
// one that would wrap the counts is refused.
TEST(PoolManagerAccounting, AHugeReservationAndItsReleaseLeaveTheMemoryHeldAsItWas) {
  AliceOnOneDevice t;
  ASSERT_TRUE(t.admitted);
  PoolManager& pool = t.pool;
  auto& now = t.now;
  ASSERT_TRUE(pool.reserve(1, 0, 1ull << 30));
  ASSERT_TRUE(pool.reserve(1, 0, uint64_t{1} << 63));  // no quota: allowed here, the backend would refuse it
  pool.release(1, 0, uint64_t{1} << 63);
  // One that would wrap the counts is refused.
  Status wraps = pool.reserve(1, 0, ~uint64_t{0});
  EXPECT_EQ(wraps.code(), err::kMemoryAllocation);
  EXPECT_NE(wraps.message().find("more than can be held"), std::string::npos) << wraps.message();
  ASSERT_TRUE(pool.reserve(1, 0, 1ull << 30));
  now += std::chrono::hours(1);  // 2 GiB for an hour
  auto rec = pool.end(1);
  ASSERT_TRUE(rec);
  EXPECT_NEAR(rec->byte_seconds / (1ull << 30) / 3600, 2.0, 1e-9);
}

TEST(PoolManagerAccounting, ASessionsRecordHasItsPeakAndMemoryTime) {
  AliceOnOneDevice t;
  ASSERT_TRUE(t.admitted);
  PoolManager& pool = t.pool;
  auto& now = t.now;
  ASSERT_TRUE(pool.reserve(1, 0, 1ull << 30));      // 1 GiB for an hour
  now += std::chrono::hours(1);
  ASSERT_TRUE(pool.reserve(1, 0, 1ull << 30));      // 2 GiB for half an hour
  now += std::chrono::minutes(30);
  pool.release(1, 0, 2ull << 30);                   // nothing for half an hour
  now += std::chrono::minutes(30);
  pool.usage(1, {10, 20, 30, 2'500'000'000, 1});
  auto rec = pool.end(1);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->client.user, "alice");
  EXPECT_EQ(rec->peak_memory, 2ull << 30);
  EXPECT_NEAR(rec->byte_seconds / (1ull << 30) / 3600, 2.0, 1e-9);  // GiB-hours: 1 x 1 + 2 x 0.5
  EXPECT_NEAR(rec->seconds, 7200, 1e-6);
  EXPECT_EQ(rec->usage.gpu_ns, 2'500'000'000u);
  auto line = accountingRecord(*rec, pool.devices(), "gpu01", "client left", 0);
  EXPECT_DOUBLE_EQ(line.gib_hours, 2.0);
  EXPECT_DOUBLE_EQ(line.gpu_s, 2.5);
  ASSERT_EQ(line.devices.size(), 1u);
  EXPECT_EQ(line.devices[0].name, "rgpu sim H100");
  EXPECT_FALSE(pool.end(1));  // once
  EXPECT_FALSE(pool.end(99));  // never admitted: no record
}

}  // namespace
}  // namespace rgpu::server
