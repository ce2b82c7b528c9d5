// Bulk payloads striped over several TLS connections (common/stripes.h):
// pieces arrive where the table says, in frame order on every stripe, in both
// directions at once; a reader refuses a table or a piece that does not fit,
// naming it, and a broken stripe fails the frame without a hang.
#include "common/stripes.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "common/frame_io.h"
#include "protocol/rgpu.capnp.h"
#include "tests/support/test_env.h"

namespace rgpu::common {
namespace {

using protocol::FrameHeader;
using protocol::FrameType;

std::vector<uint8_t> randomBytes(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

class StripesTest : public ::testing::Test {
 protected:
  static constexpr int kStripes = 3;
  void SetUp() override {
    test::makeCerts(dir_.path());
    for (int i = 0; i <= kStripes; ++i) {
      auto pair = test::makeTlsPair(dir_.path());
      ASSERT_TRUE(pair.client && pair.server);
      a_.push_back(std::shared_ptr<TlsConnection>(std::move(*pair.client)));
      b_.push_back(std::shared_ptr<TlsConnection>(std::move(*pair.server)));
    }
    // Connection 0 is each side's main connection; 1..3 its stripes.
    sa_.bind(a_[0].get());
    sb_.bind(b_[0].get());
    for (uint32_t i = 1; i <= kStripes; ++i) {
      ASSERT_TRUE(sa_.add(i, a_[i], true));
      ASSERT_TRUE(sb_.add(i, b_[i], true));
    }
    sa_.setMinBytes(1 << 20);
    sb_.setMinBytes(1 << 20);
  }
  std::vector<uint8_t> frame(uint64_t seq, uint64_t bulk_len) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
    m.setDst(0x1000 + seq);
    m.setSize(bulk_len);
    std::vector<uint8_t> out;
    appendFrame(out, FrameType::kRequest, 0, seq, msg, bulk_len);
    return out;
  }
  // Sends `bulk` as frame `seq` from `from` (0: a, 1: b).
  Status send(int from, uint64_t seq, const std::vector<uint8_t>& bulk) {
    auto f = frame(seq, bulk.size());
    BulkSender sender;
    return sender.send(from ? *b_[0] : *a_[0], f, 0, bulk.data(), bulk.size(), Compression::kOff, from ? &sb_ : &sa_);
  }
  // Writes raw bytes on connection `i` of side a.
  void raw(int i, const void* p, size_t n) { ASSERT_TRUE(a_[i]->write(p, n)); }
  // A frame header with kFlagStriped and `total` bulk bytes, then `table`.
  void stripedHeader(uint64_t seq, uint64_t total, const std::vector<std::pair<uint32_t, uint64_t>>& table) {
    auto f = frame(seq, total);
    f[7] |= protocol::kFlagStriped;
    raw(0, f.data(), f.size());
    uint32_t count[2] = {static_cast<uint32_t>(table.size()), 0};
    raw(0, count, sizeof count);
    for (auto [stripe, len] : table) {
      uint32_t head[2] = {stripe, 0};
      raw(0, head, sizeof head);
      raw(0, &len, sizeof len);
    }
  }
  test::TempDir dir_;
  std::vector<std::shared_ptr<TlsConnection>> a_, b_;
  Stripes sa_, sb_;
};

TEST_F(StripesTest, ALargePayloadArrivesIntactInBothDirectionsAtOnceAndFramesStayInOrder) {
  // Three frames each way, of sizes that do not divide evenly, sent at the same time.
  const std::vector<size_t> sizes = {(10 << 20) + 12345, 3 << 20, (1 << 20) + 1};
  std::vector<std::vector<uint8_t>> ab, ba;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ab.push_back(randomBytes(sizes[i], 10 + static_cast<unsigned>(i)));
    ba.push_back(randomBytes(sizes[i], 20 + static_cast<unsigned>(i)));
  }
  auto receiveAll = [&](TlsConnection& main, Stripes& s, const std::vector<std::vector<uint8_t>>& want, bool* ok) {
    FrameReader reader(main, protocol::kMaxBulkBytes, &s);
    *ok = true;
    for (size_t i = 0; i < want.size(); ++i) {
      FrameHeader h;
      kj::ArrayPtr<const capnp::word> words;
      if (!reader.next(h, words) || h.seq != i + 1 || !(h.flags & protocol::kFlagStriped)) *ok = false;
      std::vector<uint8_t> got(h.bulk_len);
      Status st = reader.readBulk(h, got.data());
      EXPECT_TRUE(st) << st.message();
      if (got != want[i]) *ok = false;
    }
  };
  bool a_got = false, b_got = false;
  std::thread at([&] { receiveAll(*a_[0], sa_, ba, &a_got); });
  std::thread bt([&] { receiveAll(*b_[0], sb_, ab, &b_got); });
  std::thread sender_b([&] {
    for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(send(1, i + 1, ba[i]));
  });
  for (size_t i = 0; i < ab.size(); ++i) ASSERT_TRUE(send(0, i + 1, ab[i]));
  sender_b.join();
  at.join();
  bt.join();
  EXPECT_TRUE(b_got) << "a to b";
  EXPECT_TRUE(a_got) << "b to a";
}

TEST_F(StripesTest, SkippingAStripedPayloadConsumesEveryPieceAndTheNextFrameReadsIntact) {
  auto first = randomBytes(5 << 20, 1), second = randomBytes(6 << 20, 2);
  std::thread t([&] {
    EXPECT_TRUE(send(0, 1, first));
    EXPECT_TRUE(send(0, 2, second));
  });
  FrameReader reader(*b_[0], protocol::kMaxBulkBytes, &sb_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  ASSERT_TRUE(reader.skipBulk(h));
  ASSERT_TRUE(reader.next(h, words));
  EXPECT_EQ(h.seq, 2u);
  std::vector<uint8_t> got(h.bulk_len);
  ASSERT_TRUE(reader.readBulk(h, got.data()));
  EXPECT_EQ(got, second);
  t.join();
}

TEST_F(StripesTest, SmallPayloadsStayOnTheMainConnectionAndSoDoesAWriterOfAnotherConnection) {
  EXPECT_FALSE(sa_.shouldStripe((1 << 20) - 1, *a_[0]));
  EXPECT_TRUE(sa_.shouldStripe(1 << 20, *a_[0]));
  // A writer still holding a replaced connection puts nothing on these stripes.
  EXPECT_FALSE(sa_.shouldStripe(8 << 20, *a_[1]));
  // Without a writable stripe nothing is striped.
  Stripes none;
  none.setMinBytes(1);
  none.bind(a_[0].get());
  ASSERT_TRUE(none.add(1, a_[1], false));
  EXPECT_FALSE(none.shouldStripe(8 << 20, *a_[0]));
  none.setWritable(1);
  EXPECT_TRUE(none.shouldStripe(8 << 20, *a_[0]));
  EXPECT_FALSE(none.add(1, a_[2])) << "an index given twice";
  EXPECT_FALSE(none.add(protocol::kMaxStripes + 1, a_[2])) << "an index past kMaxStripes";
}

TEST_F(StripesTest, AReaderRefusesATableThatDoesNotFitNamingWhy) {
  struct Case {
    std::vector<std::pair<uint32_t, uint64_t>> table;
    uint64_t total;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{{0, 100}, {7, 100}}, 200, "names stripe 7, which this session does not have"},
      {{{0, 100}, {1, 50}}, 200, "add up to 150 bytes, not the frame's 200"},
      {{{0, 150}, {1, 100}}, 200, "more than the frame's 200 bytes"},
      {{{0, 100}, {0, 100}}, 200, "names stripe 0 (out of range or twice)"},
      {{{99, 200}}, 200, "names stripe 99 (out of range or twice)"},
      {{}, 200, "a table of 0 pieces"},
  };
  for (const auto& c : cases) {
    // Fresh connections for each: a refused frame leaves its stream where it stopped.
    auto pair = test::makeTlsPair(dir_.path());
    ASSERT_TRUE(pair.client && pair.server);
    a_[0] = std::shared_ptr<TlsConnection>(std::move(*pair.client));
    std::shared_ptr<TlsConnection> server(std::move(*pair.server));
    sb_.bind(server.get());  // (clears them: this test needs stripe 1 only for the table's sake)
    ASSERT_TRUE(sb_.add(1, b_[1], true));
    stripedHeader(5, c.total, c.table);
    FrameReader reader(*server, protocol::kMaxBulkBytes, &sb_);
    FrameHeader h;
    kj::ArrayPtr<const capnp::word> words;
    ASSERT_TRUE(reader.next(h, words));
    std::vector<uint8_t> got(h.bulk_len);
    Status s = reader.readBulk(h, got.data());
    EXPECT_FALSE(s);
    EXPECT_EQ(s.code(), err::kInvalidValue);
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
}

TEST_F(StripesTest, APieceOfAnotherFrameOnAStripeIsOutOfStep) {
  std::vector<uint8_t> bytes(1000, 0x5a);
  stripedHeader(5, 1000, {{0, 500}, {2, 500}});
  raw(0, bytes.data(), 500);
  uint64_t piece[2] = {4, 500};  // frame 4's piece where frame 5's is due
  raw(2, piece, sizeof piece);
  raw(2, bytes.data(), 500);
  FrameReader reader(*b_[0], protocol::kMaxBulkBytes, &sb_);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  std::vector<uint8_t> got(h.bulk_len);
  Status s = reader.readBulk(h, got.data());
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("stripe 2 carries 500 bytes of frame 4 where 500 of frame 5 were due"), std::string::npos)
      << s.message();
  // The session's connections are shut: nothing else is read in the wrong place.
  EXPECT_FALSE(b_[0]->isOpen());
}

TEST_F(StripesTest, AStripeThatBreaksFailsTheFrameOnBothSidesWithoutAHang) {
  auto bulk = randomBytes(32 << 20, 3);
  // The reader takes the frame and its first pieces, then stripe 2 breaks under it.
  std::thread reader_thread([&] {
    FrameReader reader(*b_[0], protocol::kMaxBulkBytes, &sb_);
    FrameHeader h;
    kj::ArrayPtr<const capnp::word> words;
    ASSERT_TRUE(reader.next(h, words));
    b_[2]->shutdown();
    std::vector<uint8_t> got(h.bulk_len);
    EXPECT_FALSE(reader.readBulk(h, got.data()));
  });
  Status s = send(0, 1, bulk);
  reader_thread.join();
  // The writer either failed itself or wrote into buffers the reader dropped;
  // either way the reader shut its main connection, and the next write fails.
  if (s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s = send(0, 2, bulk);
  }
  EXPECT_FALSE(s);
  EXPECT_FALSE(b_[0]->isOpen());
}

TEST_F(StripesTest, AStripedFrameWithoutStripesMayNameOnlyItsOwnConnection) {
  // What a peer without stripes reads: a one-piece table on the main connection.
  std::vector<uint8_t> bytes = randomBytes(4096, 4);
  stripedHeader(1, bytes.size(), {{0, bytes.size()}});
  raw(0, bytes.data(), bytes.size());
  FrameReader reader(*b_[0]);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  std::vector<uint8_t> got(h.bulk_len);
  ASSERT_TRUE(reader.readBulk(h, got.data()));
  EXPECT_EQ(got, bytes);
  // And a decoder refuses a payload both compressed and striped.
  uint8_t head[protocol::kFrameHeaderBytes];
  FrameHeader bad;
  bad.flags = protocol::kFlagStriped | protocol::kFlagBulkLz4;
  bad.message_len = 8;
  protocol::encodeHeader(bad, head);
  std::string why;
  EXPECT_FALSE(protocol::decodeHeader(head, bad, why));
  EXPECT_NE(why.find("both compressed and striped"), std::string::npos) << why;
}

}  // namespace
}  // namespace rgpu::common
