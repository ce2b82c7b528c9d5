// The session's Outbox (server/session/outbox.h): a reply with a large bulk
// holds its sender until the client acknowledges it (no copy is kept), and
// holdEnding() (an acknowledged sender that has not returned yet) is false
// before the acknowledgement and once the sender returned.
#include "server/session/outbox.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/frame_io.h"
#include "server/checkpoint/checkpoint_stream.h"
#include "protocol/rgpu.capnp.h"
#include "tests/support/test_env.h"

namespace rgpu::server {
namespace {

// An Outbox that keeps what it sends, on one end of a loopback TLS pair.
class OutboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::makeCerts(dir_.path());
    auto pair = test::makeTlsPair(dir_.path());
    ASSERT_TRUE(pair.client && pair.server);
    client_ = std::move(*pair.client);
    out_ = std::make_unique<Outbox>(std::move(*pair.server), common::Compression::kOff);
    out_->retainUntilAcknowledged();
  }
  // A reply frame to request `seq` with `bulk_len` bulk bytes.
  static std::vector<uint8_t> replyFrame(uint64_t seq, uint64_t bulk_len) {
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Reply>();
    std::vector<uint8_t> frame;
    common::appendFrame(frame, protocol::FrameType::kReply, 0, seq, msg, bulk_len);
    return frame;
  }
  test::TempDir dir_;
  std::unique_ptr<common::TlsConnection> client_;
  std::unique_ptr<Outbox> out_;
};

TEST_F(OutboxTest, ALargeReplyHoldsItsSenderUntilAcknowledgedAndNoHoldIsEndingOnceItReturned) {
  Outbox& out = *out_;
  std::vector<uint8_t> bulk(kHoldBulkBytes * 2, 7);
  std::vector<uint8_t> frame = replyFrame(5, bulk.size());
  std::atomic<bool> returned{false};
  std::thread sender([&] {
    out.reply(5, frame, bulk.data(), bulk.size(), /*may_wait=*/true);
    returned.store(true);
  });
  common::FrameReader reader(*client_);
  protocol::FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));
  EXPECT_EQ(h.seq, 5u);
  std::vector<uint8_t> got(h.bulk_len);
  ASSERT_TRUE(reader.readBulk(h, got.data()));
  EXPECT_EQ(got, bulk);
  // Delivered but not acknowledged: the sender still holds its buffer.
  usleep(50000);
  EXPECT_FALSE(returned.load());
  EXPECT_FALSE(out.holdEnding());
  // An acknowledgement of an earlier request does not release it.
  out.acknowledged(4, 0);
  usleep(20000);
  EXPECT_FALSE(returned.load());
  out.acknowledged(5, 0);
  sender.join();
  EXPECT_TRUE(returned.load());
  EXPECT_FALSE(out.holdEnding());  // it returned
  out.close();
}

TEST_F(OutboxTest, CloseReleasesAHeldSender) {
  Outbox& out = *out_;
  std::vector<uint8_t> bulk(kHoldBulkBytes, 1);
  std::vector<uint8_t> frame = replyFrame(9, bulk.size());
  std::thread drain([&] {
    std::vector<uint8_t> sink(frame.size() + bulk.size());
    (void)client_->readExact(sink.data(), sink.size());
  });
  std::thread sender([&] { out.reply(9, frame, bulk.data(), bulk.size(), true); });
  drain.join();
  out.close();
  sender.join();
  EXPECT_FALSE(out.holdEnding());
}

TEST_F(OutboxTest, ACheckpointCopiesHeldRepliesReleasesTheirSendersAndAnotherOutboxResendsThem) {
  Outbox& out = *out_;
  std::vector<uint8_t> bulk(kHoldBulkBytes * 2, 3), small(100, 4);
  std::vector<uint8_t> frame = replyFrame(7, bulk.size()), frame2 = replyFrame(8, small.size());
  std::thread drain([&] {
    std::vector<uint8_t> sink(frame.size() + bulk.size() + frame2.size() + small.size());
    (void)client_->readExact(sink.data(), sink.size());
  });
  std::atomic<bool> returned{false};
  std::thread sender([&] {
    out.reply(7, frame, bulk.data(), bulk.size(), /*may_wait=*/true);
    returned.store(true);
  });
  out.reply(8, frame2, small.data(), small.size(), false);
  drain.join();
  usleep(20000);
  EXPECT_FALSE(returned.load()) << "held until acknowledged";
  // The sender returns without an acknowledgement once its bytes are copied...
  out.copyHeld();
  sender.join();
  std::fill(bulk.begin(), bulk.end(), 0);  // (its buffer may go now)
  // ...and a large reply sent from now on is copied, not held.
  std::vector<uint8_t> later(kHoldBulkBytes, 5), frame3 = replyFrame(9, later.size());
  std::thread late([&] {
    std::vector<uint8_t> sink(frame3.size() + later.size());
    (void)client_->readExact(sink.data(), sink.size());
  });
  out.reply(9, frame3, later.data(), later.size(), /*may_wait=*/true);
  late.join();
  CheckpointKey key;
  std::vector<uint8_t> saved;
  auto w = CheckpointWriter::start(key, [&](const uint8_t* d, size_t n) {
    saved.insert(saved.end(), d, d + n);
    return Status::ok();
  });
  ASSERT_TRUE(w);
  ASSERT_TRUE(out.save(**w));
  ASSERT_TRUE((*w)->finish());
  out.close();

  // A restored session's Outbox resends what the client lacks (it has reply 7 only).
  auto pair = test::makeTlsPair(dir_.path());
  ASSERT_TRUE(pair.client && pair.server);
  auto dead = test::makeTlsPair(dir_.path());
  Outbox restored(std::move(*dead.server), common::Compression::kOff);
  size_t pos = 0;
  auto r = CheckpointReader::open(key, [&](uint8_t* d, size_t n) -> Result<size_t> {
    size_t k = std::min(n, saved.size() - pos);
    std::memcpy(d, saved.data() + pos, k);
    pos += k;
    return k;
  });
  ASSERT_TRUE(r);
  ASSERT_TRUE(restored.load(**r));
  ASSERT_TRUE((*r)->finish());
  std::vector<uint8_t> welcome = replyFrame(0, 0);
  std::thread resend([&] {
    auto n = restored.resume(std::move(*pair.server), welcome, 7, 0);
    ASSERT_TRUE(n);
    EXPECT_EQ(*n, 2u);
  });
  common::FrameReader reader(**pair.client);
  protocol::FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(h, words));  // the welcome
  for (uint64_t want : {8u, 9u}) {
    ASSERT_TRUE(reader.next(h, words));
    EXPECT_EQ(h.seq, want);
    std::vector<uint8_t> got(h.bulk_len);
    ASSERT_TRUE(reader.readBulk(h, got.data()));
    EXPECT_EQ(got, want == 8 ? small : later);
  }
  resend.join();
  restored.close();
}

}  // namespace
}  // namespace rgpu::server
