// Session resume at the protocol level, against the real daemon: who may take
// a session up again (its own user, with its token, naming it), what the
// server tells a resumed client, what becomes of a session nobody resumes, and
// the sequence numbers every request must carry.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "server/daemon/daemon.h"
#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

class ResumeProtocol : public ::testing::Test {
 protected:
  void start(const std::string& extra = "[session]\nresume_grace_ms = 10000\n") {
    makeCerts(dir_.path());
    server_ = std::make_unique<ServerProcess>(dir_.path(), serverToml(dir_.path(), extra));
  }
  // A TLS connection as `cert` (alice, bob, or "" for none), optionally
  // opening with the resume preamble naming `resume_id` (a Welcome's) and
  // offering the resume PSK of `secret` (a Welcome's resume token).
  std::unique_ptr<common::TlsConnection> connect(const std::string& cert, const std::string& resume_id = "",
                                                 const std::string& secret = "") {
    auto c = tryConnect(cert, resume_id, secret);
    EXPECT_TRUE(c) << c.status().message();
    return std::move(*c);
  }
  Result<std::unique_ptr<common::TlsConnection>> tryConnect(const std::string& cert, const std::string& resume_id,
                                                            const std::string& secret = "") {
    common::TlsOptions o = common::TlsOptions::files(dir_.file("ca.pem"));
    if (!cert.empty()) {
      o.cert_file = dir_.file(cert + ".pem");
      o.key_file = dir_.file(cert + ".key");
    }
    auto ctx = common::TlsContext::makeClient(o);
    auto c = common::TlsConnection::connect(**ctx, "127.0.0.1", server_->port(), "", std::chrono::milliseconds(5000),
                                            resume_id.empty() ? "" : server::resumePreamble(resume_id), secret);
    return c;
  }
  RawWelcome resumeAs(RawClient& c, uint64_t session, const std::string& token, uint64_t replies,
                      const std::string& bearer = "") {
    return c.helloWith([&](wire::Hello::Builder& h) {
      h.setToken(bearer);
      h.setResumeSession(session);
      h.setResumeToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(token.data()), token.size()));
      h.initReceived().setReplies(replies);
    });
  }
  bool logSays(const std::string& what) {
    // Polls the log the server writes; there is no event to wait on.
    for (int i = 0; i < 1000; ++i) {
      if (server_->log().find(what) != std::string::npos) return true;
      usleep(5000);
    }
    return false;
  }
  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ResumeProtocol, OnlyTheOwnerWithItsTokenTakesASessionUpAndCarriesOnInSequence) {
  start();
  RawClient a(connect("alice"));
  RawWelcome w = a.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(w.error, 0) << w.message;
  EXPECT_EQ(w.grace_ms, 10000u);
  ASSERT_EQ(w.resume_token.size(), 16u);
  ASSERT_EQ(w.resume_id.size(), 16u);
  uint64_t p = a.malloc(64);  // request 1
  a.write(p, std::vector<uint8_t>(64, 7));  // request 2 (asynchronous)
  EXPECT_EQ(a.ping().error, 0);  // request 3

  {
    RawClient wrong(connect("alice", w.resume_id, w.resume_token));
    RawWelcome r = resumeAs(wrong, w.session, std::string(16, 'x'), 3);
    EXPECT_EQ(r.error, err::kNotPermitted);
    EXPECT_NE(r.message.find("resume refused: wrong resume token"), std::string::npos) << r.message;
  }
  {
    RawClient thief(connect("", w.resume_id, w.resume_token));  // bob, by token, with alice's resume token
    RawWelcome r = resumeAs(thief, w.session, w.resume_token, 3, "bob-token");
    EXPECT_EQ(r.error, err::kNotPermitted);
    EXPECT_NE(r.message.find("user 'bob' does not own the session"), std::string::npos) << r.message;
  }
  {
    // Knowing the resume id (it crosses the network in the clear) is not
    // enough: the worker holds no certificate key any more, so TLS completes
    // only with the PSK of the session's resume token.
    auto without = tryConnect("alice", w.resume_id);
    EXPECT_FALSE(without);
    auto guessed = tryConnect("alice", w.resume_id, std::string(16, 'x'));
    EXPECT_FALSE(guessed);
    EXPECT_TRUE(logSays("session 1: resume attempt: TLS handshake")) << server_->log();
  }
  EXPECT_EQ(a.ping().error, 0);  // request 4: refused attempts leave the session alone

  a.conn().shutdown();  // the connection drops (no TLS close, no goodbye)
  ASSERT_TRUE(logSays("keeping the session 10000 ms for the client to resume")) << server_->log();
  RawClient b(connect("alice", w.resume_id, w.resume_token));
  RawWelcome r = resumeAs(b, w.session, w.resume_token, 4);
  ASSERT_EQ(r.error, 0) << r.message;
  EXPECT_TRUE(r.resumed);
  EXPECT_EQ(r.dispatched, 4u);
  b.setNextSeq(5);
  RawReply back = b.readBack(p, 64);  // the session's memory is still there
  ASSERT_EQ(back.error, 0) << back.message;
  EXPECT_EQ(back.bulk, std::vector<uint8_t>(64, 7));
  std::string log = server_->log();
  EXPECT_NE(log.find("refused: wrong resume token"), std::string::npos) << log;
  EXPECT_NE(log.find("refused: user 'bob' does not own the session"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed by"), std::string::npos) << log;
}

TEST_F(ResumeProtocol, ASessionNobodyResumesIsFreedAndCannotBeTakenUpLater) {
  start("[session]\nresume_grace_ms = 300\n");
  RawClient a(connect("alice"));
  RawWelcome w = a.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(w.error, 0) << w.message;
  a.malloc(4096);
  a.conn().shutdown();
  ASSERT_TRUE(logSays("did not resume within 300 ms")) << server_->log();
  ASSERT_TRUE(logSays("session 1 ended (1 allocations released")) << server_->log();
  RawClient late(connect("alice", w.resume_id, w.resume_token));
  RawWelcome r = resumeAs(late, w.session, w.resume_token, 1);
  EXPECT_EQ(r.error, err::kDevicesUnavailable);
  EXPECT_NE(r.message.find("session 1 cannot be resumed: it has ended"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("resume_grace_ms = 300 ms"), std::string::npos) << r.message;
}

TEST_F(ResumeProtocol, WithoutResumeInTheHelloADroppedConnectionEndsTheSessionAtOnce) {
  start();
  RawClient a(connect("alice"));
  ASSERT_EQ(a.hello().first, 0);
  a.malloc(4096);
  a.conn().shutdown();
  ASSERT_TRUE(logSays("session 1 ended (1 allocations released")) << server_->log();
  EXPECT_EQ(server_->log().find("keeping the session"), std::string::npos) << server_->log();
}

TEST_F(ResumeProtocol, AGarbledPreambleIsClosedWithALogLine) {
  start();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  uint16_t port = server_->port();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::write(fd, "rgpu-xyzzy..............", 24), 24);
  char c;
  EXPECT_LE(::read(fd, &c, 1), 0);  // closed without an answer
  ::close(fd);
  EXPECT_TRUE(logSays("neither TLS nor an rgpu resume preamble")) << server_->log();
}

// A plain TCP connection to the server that writes `bytes` and then stays silent.
int silentConnection(uint16_t port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  return fd;
}

TEST_F(ResumeProtocol, APreambleMustNameTheSessionsRandomIdNotItsNumber) {
  start();
  RawClient a(connect("alice"));
  RawWelcome w = a.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(w.error, 0) << w.message;
  RawClient b(connect("alice"));
  RawWelcome wb = b.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(wb.error, 0) << wb.message;
  EXPECT_NE(w.resume_id, wb.resume_id);
  // A peer that knows only the session number (rgpu-smi shows it) reaches no worker of it.
  std::string guess(16, '\0');
  std::memcpy(guess.data(), &w.session, sizeof w.session);
  RawClient intruder(connect("alice", guess));
  RawWelcome r = resumeAs(intruder, w.session, w.resume_token, 0);
  EXPECT_EQ(r.error, err::kDevicesUnavailable) << r.message;
  EXPECT_TRUE(logSays("asks to resume a session that is not running")) << server_->log();
  EXPECT_EQ(server_->log().find("session 1: resume attempt"), std::string::npos) << server_->log();
  EXPECT_EQ(a.ping().error, 0);
}

TEST_F(ResumeProtocol, StalledResumeHandshakesAreCappedAndTheOwnerStillResumes) {
  start();  // (handshake_timeout_ms = 2000 in tests)
  RawClient a(connect("alice"));
  RawWelcome w = a.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(w.error, 0) << w.message;
  EXPECT_EQ(a.ping().error, 0);  // request 1
  a.conn().shutdown();
  ASSERT_TRUE(logSays("keeping the session")) << server_->log();
  // Twenty connections with the right preamble that never start TLS.
  std::vector<int> stalled;
  for (int i = 0; i < 20; ++i) stalled.push_back(silentConnection(server_->port(), server::resumePreamble(w.resume_id)));
  ASSERT_TRUE(logSays("resume handshakes are running already")) << server_->log();
  // The owner keeps trying, as the client library does, and gets through once a slot frees.
  auto t0 = std::chrono::steady_clock::now();
  RawWelcome r;
  for (int attempt = 0; attempt < 100 && r.error != 0; ++attempt) {
    auto conn = tryConnect("alice", w.resume_id, w.resume_token);
    if (!conn) {
      usleep(100000);
      continue;
    }
    RawClient b(std::move(*conn));
    r = resumeAs(b, w.session, w.resume_token, 1);
    if (r.error == 0) {
      EXPECT_TRUE(r.resumed);
      b.setNextSeq(r.dispatched + 1);
      EXPECT_EQ(b.ping().error, 0);
      break;
    }
    usleep(100000);
  }
  EXPECT_EQ(r.error, 0) << r.message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  for (int fd : stalled) ::close(fd);
}

}  // namespace
}  // namespace rgpu::test
