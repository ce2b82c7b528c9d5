#include "common/frame_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "protocol/rgpu.capnp.h"
#include "tests/support/test_env.h"

namespace rgpu::common {
namespace {

using protocol::FrameHeader;
using protocol::FrameType;

class FrameIo : public ::testing::Test {
 protected:
  void SetUp() override {
    test::makeCerts(dir_.path());
    auto pair = test::makeTlsPair(dir_.path());
    ASSERT_TRUE(pair.client && pair.server);
    a_ = std::move(*pair.client);
    b_ = std::move(*pair.server);
  }
  std::vector<uint8_t> frame(uint64_t seq, uint64_t bulk_len, uint64_t dst = 0x1000) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
    m.setDst(dst);
    m.setSize(bulk_len);
    std::vector<uint8_t> out;
    appendFrame(out, FrameType::kRequest, 0, seq, msg, bulk_len);
    return out;
  }
  test::TempDir dir_;
  std::unique_ptr<TlsConnection> a_, b_;
};

TEST_F(FrameIo, MessageAndRawBulkArriveIntact) {
  std::vector<uint8_t> bulk(300000);
  std::mt19937 rng(7);
  for (auto& x : bulk) x = static_cast<uint8_t>(rng());
  auto f = frame(9, bulk.size(), 0xabc);
  BulkSender sender;
  ASSERT_TRUE(sender.send(*a_, f, 0, bulk.data(), bulk.size(), Compression::kAuto));
  FrameReader reader(*b_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  EXPECT_EQ(h.seq, 9u);
  EXPECT_EQ(h.flags & protocol::kFlagBulkLz4, 0);  // random data is not worth compressing
  capnp::FlatArrayMessageReader r(words, readerOptions());
  EXPECT_EQ(r.getRoot<wire::Request>().getMemcpyHtoD().getDst(), 0xabcu);
  std::vector<uint8_t> got(h.bulk_len);
  ASSERT_TRUE(reader.readBulk(h, got.data()));
  EXPECT_EQ(got, bulk);
}

TEST_F(FrameIo, CompressibleBulkGoesAsItIsOverAnUntimedLinkAndAsLz4BlocksWhenCompressed) {
  std::vector<uint8_t> bulk(3 * protocol::kBulkBlockBytes + 12345, 0);
  for (size_t i = 0; i < bulk.size(); i += 4096) bulk[i] = static_cast<uint8_t>(i / 4096);
  BulkSender sender;
  FrameReader reader(*b_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  std::vector<uint8_t> got(bulk.size());
  // `auto` over a link nothing has timed yet: as it is (the write times it).
  auto f = frame(1, bulk.size());
  std::thread first([&] { ASSERT_TRUE(sender.send(*a_, f, 0, bulk.data(), bulk.size(), Compression::kAuto)); });
  ASSERT_TRUE(reader.next(h, words));
  EXPECT_EQ(h.flags & protocol::kFlagBulkLz4, 0);
  ASSERT_TRUE(reader.readBulk(h, got.data()));
  first.join();
  EXPECT_EQ(got, bulk);
  EXPECT_GT(a_->writeRate(), 0.0);
  // Compressed (what `auto` then decides by the timings: Lz4Auto), block by block.
  f = frame(2, bulk.size());
  ASSERT_TRUE(sender.send(*a_, f, 0, bulk.data(), bulk.size(), Compression::kOn));
  ASSERT_TRUE(reader.next(h, words));
  EXPECT_NE(h.flags & protocol::kFlagBulkLz4, 0);
  std::fill(got.begin(), got.end(), 0xff);
  ASSERT_TRUE(reader.readBulk(h, got.data()));
  EXPECT_EQ(got, bulk);
}

TEST(Lz4Auto, CompressesOnlyWhereCompressingAndSendingLessBeatsSendingAll) {
  // Nothing timed on the link yet: sent as it is (the write times the link).
  EXPECT_FALSE(worthCompressing(100.0, 10e9, 0));
  // Loopback (1 GB/s): sparse floats shrink 5x but lz4 takes them at 0.9 GB/s.
  EXPECT_FALSE(worthCompressing(5.0, 0.9e9, 1e9));
  // ... zeros shrink 100x at 10 GB/s: they pay there too.
  EXPECT_TRUE(worthCompressing(100.0, 10e9, 1e9));
  // 1 Gb Ethernet (125 MB/s): the sparse floats pay.
  EXPECT_TRUE(worthCompressing(5.0, 0.9e9, 125e6));
  // Nothing shrinks, or no speed measured: never.
  EXPECT_FALSE(worthCompressing(1.0, 10e9, 125e6));
  EXPECT_FALSE(worthCompressing(0.0, 10e9, 125e6));
  EXPECT_FALSE(worthCompressing(5.0, 0, 125e6));
}

TEST_F(FrameIo, LargeWritesTimeTheLinkAndAutoWeighsIt) {
  EXPECT_EQ(a_->writeRate(), 0.0);
  std::vector<uint8_t> bulk(TlsConnection::kRateSampleBytes * 2, 0);
  for (size_t i = 0; i < bulk.size(); i += 4096) bulk[i] = static_cast<uint8_t>(i / 4096);
  std::thread drain([&] {
    std::vector<uint8_t> sink(bulk.size());
    (void)b_->readExact(sink.data(), sink.size());
  });
  ASSERT_TRUE(a_->write(bulk.data(), bulk.size()));
  drain.join();
  EXPECT_GT(a_->writeRate(), 0.0);
  // Zeros with a byte in 4096 pay on a 1 MB/s link (unless taking 64 KiB
  // took lz4 60 ms), and on no link of 1e18 bytes/s.
  EXPECT_TRUE(shouldCompress(Compression::kAuto, bulk.data(), bulk.size(), 1e6));
  EXPECT_FALSE(shouldCompress(Compression::kAuto, bulk.data(), bulk.size(), 1e18));
  EXPECT_FALSE(shouldCompress(Compression::kOff, bulk.data(), bulk.size(), 1.0));
  EXPECT_TRUE(shouldCompress(Compression::kOn, bulk.data(), bulk.size(), 1e18));
}

TEST_F(FrameIo, SkipBulkLeavesTheStreamAtTheNextFrame) {
  std::vector<uint8_t> bulk(100000, 5);
  auto f1 = frame(1, bulk.size());
  BulkSender sender;
  ASSERT_TRUE(sender.send(*a_, f1, 0, bulk.data(), bulk.size(), Compression::kOn));
  auto f2 = frame(2, 0);
  ASSERT_TRUE(a_->write(f2.data(), f2.size()));
  FrameReader reader(*b_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  ASSERT_TRUE(reader.skipBulk(h));
  ASSERT_TRUE(reader.next(h, words));
  EXPECT_EQ(h.seq, 2u);
}

TEST_F(FrameIo, RejectsACompressedBlockThatClaimsTooMuch) {
  auto f = frame(1, 1000);
  f[7] |= protocol::kFlagBulkLz4;
  uint32_t block[2] = {5000, 10};  // more raw bytes than the frame's bulk
  ASSERT_TRUE(a_->write(f.data(), f.size()));
  ASSERT_TRUE(a_->write(block, sizeof block));
  FrameReader reader(*b_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  std::vector<uint8_t> got(h.bulk_len);
  Status s = reader.readBulk(h, got.data());
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("compressed block"), std::string::npos);
}

TEST_F(FrameIo, RejectsCorruptLz4Data) {
  auto f = frame(1, 1000);
  f[7] |= protocol::kFlagBulkLz4;
  uint32_t block[2] = {1000, 16};
  uint8_t junk[16];
  std::memset(junk, 0xff, sizeof junk);
  ASSERT_TRUE(a_->write(f.data(), f.size()));
  ASSERT_TRUE(a_->write(block, sizeof block));
  ASSERT_TRUE(a_->write(junk, sizeof junk));
  FrameReader reader(*b_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  std::vector<uint8_t> got(h.bulk_len);
  EXPECT_FALSE(reader.readBulk(h, got.data()));
}

TEST_F(FrameIo, RejectsASegmentTableThatDisagreesWithTheLength) {
  auto f = frame(1, 0);
  // First segment size lies: claims more words than the message holds.
  uint32_t* table = reinterpret_cast<uint32_t*>(f.data() + protocol::kFrameHeaderBytes);
  table[1] += 1000;
  ASSERT_TRUE(a_->write(f.data(), f.size()));
  FrameReader reader(*b_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  Status s = reader.next(h, words);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("segment"), std::string::npos);
}

TEST_F(FrameIo, RejectsAnOversizedFrameBeforeAllocating) {
  auto f = frame(1, 0);
  FrameHeader h;
  std::string why;
  ASSERT_TRUE(protocol::decodeHeader(f.data(), h, why));
  h.bulk_len = protocol::kMaxBulkBytes * 16;
  protocol::encodeHeader(h, f.data());
  ASSERT_TRUE(a_->write(f.data(), f.size()));
  FrameReader reader(*b_);
  kj::ArrayPtr<const capnp::word> words;
  Status s = reader.next(h, words);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("exceeds limit"), std::string::npos);
}

TEST(Compression, ParsesModes) {
  EXPECT_EQ(*parseCompression("off"), Compression::kOff);
  EXPECT_EQ(*parseCompression("auto"), Compression::kAuto);
  EXPECT_EQ(*parseCompression("on"), Compression::kOn);
  EXPECT_FALSE(parseCompression("max"));
}

}  // namespace
}  // namespace rgpu::common
