// Stripe connections at the protocol level, against the real daemon
// (common/stripes.h, docs/architecture.md#striped-bulk-transfer): who may
// join a session as a stripe (its own client, with the session's token, to
// the main connection that is live), how many, and what a striped payload
// that does not fit does to the session (it ends, naming why; the server
// serves others).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "server/daemon/daemon.h"
#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

class StripeProtocol : public ::testing::Test {
 protected:
  void start(const std::string& extra) {
    makeCerts(dir_.path());
    server_ = std::make_unique<ServerProcess>(dir_.path(), serverToml(dir_.path(), extra));
  }
  std::unique_ptr<common::TlsConnection> connect(const std::string& resume_id = "", const std::string& secret = "") {
    common::TlsOptions o = common::TlsOptions::files(dir_.file("ca.pem"), dir_.file("alice.pem"), dir_.file("alice.key"));
    auto ctx = common::TlsContext::makeClient(o);
    auto c = common::TlsConnection::connect(**ctx, "127.0.0.1", server_->port(), "", std::chrono::milliseconds(5000),
                                            resume_id.empty() ? "" : server::resumePreamble(resume_id), secret);
    EXPECT_TRUE(c) << c.status().message();
    return std::move(*c);
  }
  // A stripe join of session `w` naming main connection `generation`, with `token`.
  RawWelcome join(RawClient& c, const RawWelcome& w, uint32_t generation, const std::string& token) {
    return c.helloWith([&](wire::Hello::Builder& h) {
      h.setResumeSession(w.session);
      h.setResumeToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(token.data()), token.size()));
      h.setStripe(true);
      h.setGeneration(generation);
    });
  }
  // A copy back to the host; the server's acknowledgements of dispatched
  // requests (one per MiB of bulk) may come first.
  static RawReply readBack(RawClient& c, uint64_t src, uint64_t size) {
    RawReply r = c.readBack(src, size);
    while (r.type == protocol::FrameType::kAck) r = c.next();
    return r;
  }
  bool logSays(const std::string& what) {
    for (int i = 0; i < 1000; ++i) {  // polls the log; there is no event to wait on
      if (server_->log().find(what) != std::string::npos) return true;
      usleep(5000);
    }
    return false;
  }
  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(StripeProtocol, OnlyTheSessionsClientJoinsTheLiveConnectionAndPiecesFlowBothWays) {
  start("[session]\nresume_grace_ms = 10000\nmax_stripes = 2\n");
  RawClient a(connect());
  RawWelcome w = a.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(w.error, 0) << w.message;
  EXPECT_EQ(w.max_stripes, 2u);
  EXPECT_EQ(w.generation, 1u);
  const uint64_t bytes = 8 << 20;
  uint64_t p = a.malloc(bytes);

  {
    RawClient s(connect(w.resume_id, w.resume_token));
    RawWelcome r = join(s, w, 2, w.resume_token);
    EXPECT_EQ(r.error, err::kNotPermitted);
    EXPECT_NE(r.message.find("stripe refused: it joins connection 2 of the session, which is gone"), std::string::npos)
        << r.message;
  }
  {
    RawClient s(connect(w.resume_id, w.resume_token));
    RawWelcome r = join(s, w, 1, std::string(16, 'x'));
    EXPECT_EQ(r.error, err::kNotPermitted);
    EXPECT_NE(r.message.find("wrong resume token"), std::string::npos) << r.message;
  }
  std::vector<std::shared_ptr<common::TlsConnection>> stripes;
  for (uint32_t k = 1; k <= 3; ++k) {
    RawClient s(connect(w.resume_id, w.resume_token));
    RawWelcome r = join(s, w, 1, w.resume_token);
    if (k <= 2) {
      ASSERT_EQ(r.error, 0) << r.message;
      EXPECT_EQ(r.stripe, k);
      stripes.push_back(std::shared_ptr<common::TlsConnection>(s.release()));
    } else {
      EXPECT_EQ(r.error, err::kNotPermitted);
      EXPECT_NE(r.message.find("the session has [session] max_stripes = 2 stripe connection(s)"), std::string::npos)
          << r.message;
    }
  }
  common::Stripes mine;
  mine.bind(&a.conn());
  mine.setMinBytes(1);
  for (uint32_t k = 1; k <= 2; ++k) ASSERT_TRUE(mine.add(k, stripes[k - 1], true));

  // Up: a striped copy.
  std::vector<uint8_t> data(bytes);
  std::mt19937 rng(5);
  for (auto& x : data) x = static_cast<uint8_t>(rng());
  capnp::MallocMessageBuilder msg;
  auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
  m.setDst(p);
  m.setSize(bytes);
  m.initStream();
  std::vector<uint8_t> frame;
  common::appendFrame(frame, protocol::FrameType::kRequest, protocol::kFlagAsync, a.takeSeq(), msg, bytes);
  common::BulkSender sender;
  ASSERT_TRUE(sender.send(a.conn(), frame, 0, data.data(), bytes, common::Compression::kOff, &mine));
  EXPECT_TRUE(frame[7] & protocol::kFlagStriped);
  EXPECT_GT(mine.bytesSent(), bytes / 2);

  // Down: on the main connection alone until the client says it reads the stripes.
  RawReply back = readBack(a, p, bytes);
  ASSERT_EQ(back.error, 0) << back.message;
  EXPECT_FALSE(back.flags & protocol::kFlagStriped);
  EXPECT_TRUE(back.bulk == data);
  // (A large reply's sender waits for the client to hold it: request 3's.)
  a.stripeReady(1, 3);
  a.stripeReady(2, 3);
  a.setStripes(&mine);
  back = readBack(a, p, bytes);
  ASSERT_EQ(back.error, 0) << back.message;
  EXPECT_TRUE(back.flags & protocol::kFlagStriped);
  EXPECT_TRUE(back.bulk == data);
  EXPECT_GT(mine.bytesReceived(), bytes / 2);

  // Once the main connection is gone, so is the generation its stripes joined.
  a.conn().shutdown();
  ASSERT_TRUE(logSays("keeping the session 10000 ms for the client to resume")) << server_->log();
  RawClient late(connect(w.resume_id, w.resume_token));
  RawWelcome r = join(late, w, 1, w.resume_token);
  EXPECT_EQ(r.error, err::kNotPermitted);
  EXPECT_NE(r.message.find("which is gone"), std::string::npos) << r.message;
}

TEST_F(StripeProtocol, APayloadNamingAStripeTheSessionLacksEndsItAndTheServerServesOthers) {
  start("[session]\nresume_grace_ms = 10000\n");
  RawClient a(connect());
  RawWelcome w = a.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(w.error, 0) << w.message;
  uint64_t p = a.malloc(4096);
  capnp::MallocMessageBuilder msg;
  auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
  m.setDst(p);
  m.setSize(200);
  m.initStream();
  std::vector<uint8_t> frame;
  common::appendFrame(frame, protocol::FrameType::kRequest, protocol::kFlagAsync, a.takeSeq(), msg, 200);
  frame[7] |= protocol::kFlagStriped;
  uint32_t count[2] = {2, 0};
  uint32_t e0[4] = {0, 0, 100, 0}, e1[4] = {5, 0, 100, 0};  // {stripe, 0, u64 len}
  std::vector<uint8_t> piece(100, 1);
  for (auto [ptr, n] : std::vector<std::pair<const void*, size_t>>{
           {frame.data(), frame.size()}, {count, 8}, {e0, 16}, {e1, 16}, {piece.data(), piece.size()}})
    ASSERT_TRUE(a.writeRaw(ptr, n));
  RawReply bye = a.next();
  EXPECT_TRUE(bye.goodbye);
  EXPECT_NE(bye.message.find("names stripe 5, which this session does not have"), std::string::npos) << bye.message;
  EXPECT_TRUE(logSays("names stripe 5, which this session does not have")) << server_->log();
  RawClient b(connect());
  ASSERT_EQ(b.helloWith([](wire::Hello::Builder&) {}).error, 0);
  EXPECT_EQ(b.ping().error, 0);
}

}  // namespace
}  // namespace rgpu::test
