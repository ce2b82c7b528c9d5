#include "common/frame_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

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

TEST_F(FrameIo, CompressibleBulkTravelsAsLz4BlocksUnderAuto) {
  std::vector<uint8_t> bulk(3 * protocol::kBulkBlockBytes + 12345, 0);
  for (size_t i = 0; i < bulk.size(); i += 4096) bulk[i] = static_cast<uint8_t>(i / 4096);
  auto f = frame(1, bulk.size());
  BulkSender sender;
  ASSERT_TRUE(sender.send(*a_, f, 0, bulk.data(), bulk.size(), Compression::kAuto));
  FrameReader reader(*b_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  EXPECT_NE(h.flags & protocol::kFlagBulkLz4, 0);
  std::vector<uint8_t> got(h.bulk_len);
  ASSERT_TRUE(reader.readBulk(h, got.data()));
  EXPECT_EQ(got, bulk);
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
