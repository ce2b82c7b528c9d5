// client/kept_log.h: what is kept comes back byte for byte, in order, until
// dropped; a kept frame never moves; dropped chunks are recycled.
#include "client/kept_log.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace rgpu::client {
namespace {

std::vector<uint8_t> frameOf(uint64_t seq, size_t len) {
  std::vector<uint8_t> f(len);
  for (size_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(seq * 31 + i);
  return f;
}

TEST(KeptLog, KeepsFramesAndBulkInOrderUntilDropped) {
  KeptLog log;
  std::vector<uint8_t> bulk(1000, 0xab), pinned(64, 0xcd);
  uint64_t expect_bytes = 0;
  for (uint64_t seq = 1; seq <= 5000; ++seq) {
    auto f = frameOf(seq, 40 + seq % 200);
    if (seq % 7 == 0) {
      log.push(seq, f.data(), f.size(), bulk.data(), bulk.size(), true, false);
      expect_bytes += f.size() + bulk.size();
    } else if (seq % 11 == 0) {
      log.push(seq, f.data(), f.size(), pinned.data(), pinned.size(), false, true);
      expect_bytes += f.size();
    } else {
      log.push(seq, f.data(), f.size(), nullptr, 0, false, false);
      expect_bytes += f.size();
    }
  }
  EXPECT_EQ(log.size(), 5000u);
  EXPECT_EQ(log.bytes(), expect_bytes);
  // Every entry as kept: sequence, frame bytes, bulk copied or by pointer.
  for (size_t i = 0; i < log.size(); ++i) {
    const auto& e = log.at(i);
    const uint64_t seq = i + 1;
    ASSERT_EQ(e.seq, seq);
    auto f = frameOf(seq, 40 + seq % 200);
    ASSERT_EQ(e.frame_len, f.size());
    ASSERT_EQ(std::memcmp(e.frame, f.data(), f.size()), 0) << "seq " << seq;
    if (seq % 7 == 0) {
      ASSERT_TRUE(e.bulk_copied);
      ASSERT_EQ(e.bulk, nullptr);
      ASSERT_EQ(std::memcmp(e.copiedBulk(), bulk.data(), bulk.size()), 0);
    } else if (seq % 11 == 0) {
      ASSERT_TRUE(e.bulk_pinned);
      ASSERT_EQ(e.bulk, pinned.data());
    }
  }
  // Dropping through a sequence number drops exactly those at or below it,
  // and the bytes with them.
  log.dropThrough(2999);
  ASSERT_EQ(log.size(), 2001u);
  EXPECT_EQ(log.front().seq, 3000u);
  uint64_t left = 0;
  for (size_t i = 0; i < log.size(); ++i) left += log.at(i).frame_len + (log.at(i).bulk_copied ? bulk.size() : 0);
  EXPECT_EQ(log.bytes(), left);
  log.dropThrough(100);  // already gone: nothing changes
  EXPECT_EQ(log.size(), 2001u);
  EXPECT_TRUE(log.any([](const KeptLog::Entry& e) { return e.bulk_pinned; }));
  log.dropThrough(1u << 30);
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(log.bytes(), 0u);
}

TEST(KeptLog, AKeptFrameNeverMovesWhileMoreAreKept) {
  KeptLog log;
  auto first = frameOf(1, 100);
  const uint8_t* where = log.push(1, first.data(), first.size(), nullptr, 0, false, false).frame;
  // Far more than a chunk and the ring's first size after it, some dropped
  // on the way (never the first).
  for (uint64_t seq = 2; seq < 40000; ++seq) {
    auto f = frameOf(seq, 64);
    log.push(seq, f.data(), f.size(), nullptr, 0, false, false);
  }
  ASSERT_EQ(log.front().frame, where);
  EXPECT_EQ(std::memcmp(log.front().frame, first.data(), first.size()), 0);
}

TEST(KeptLog, DroppedChunksAreRecycledAndLargeFramesGetAChunkOfTheirOwn) {
  KeptLog log;
  uint64_t seq = 0;
  auto f = frameOf(7, 1000);
  // A steady stream, dropped every 1,000 frames (about 1 MB): a few chunks at
  // most, however long it runs.
  size_t most = 0;
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 1000; ++i) log.push(++seq, f.data(), f.size(), nullptr, 0, false, false);
    most = std::max(most, log.chunks());
    log.dropThrough(seq);
    EXPECT_LE(log.chunks(), 1u) << "round " << round << ": only the spare is left";
  }
  EXPECT_LE(most, 1000 * f.size() / KeptLog::kChunkBytes + 2);
  // A frame with a copied bulk larger than a chunk: kept whole.
  std::vector<uint8_t> big(3 * KeptLog::kChunkBytes + 5, 0x5a);
  const auto& e = log.push(++seq, f.data(), f.size(), big.data(), big.size(), true, false);
  EXPECT_EQ(std::memcmp(e.copiedBulk(), big.data(), big.size()), 0);
  EXPECT_EQ(log.bytes(), f.size() + big.size());
  log.clear();
  EXPECT_TRUE(log.empty());
  EXPECT_LE(log.chunks(), 1u);
}

}  // namespace
}  // namespace rgpu::client
