// The session's Outbox (server/session/outbox.h): a reply with a large bulk
// holds its sender until the client acknowledges it (no copy is kept), and
// holdEnding() (an acknowledged sender that has not returned yet) is false
// before the acknowledgement and once the sender returned.
#include "server/session/outbox.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "common/frame_io.h"
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

}  // namespace
}  // namespace rgpu::server
