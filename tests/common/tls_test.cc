#include "common/tls.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/dev_pki.h"
#include "tests/support/test_env.h"

namespace rgpu::common {
namespace {

class Tls : public ::testing::Test {
 protected:
  void SetUp() override { test::makeCerts(dir_.path()); }
  test::TempDir dir_;
};

TEST_F(Tls, HandshakeVerifiesTheServerAndReportsTheClientName) {
  auto pair = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(pair.client) << pair.client.status().message();
  ASSERT_TRUE(pair.server) << pair.server.status().message();
  EXPECT_EQ((*pair.server)->peerCommonName(), "alice");
  const char msg[] = "hello over TLS 1.3";
  ASSERT_TRUE((*pair.client)->write(msg, sizeof msg));
  char buf[sizeof msg];
  ASSERT_TRUE((*pair.server)->readExact(buf, sizeof buf));
  EXPECT_STREQ(buf, msg);
}

TEST_F(Tls, TheDaemonVerifiesACertificateAWorkerPassesOnAgainstItsOwnCa) {
  auto pair = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(pair.server) << pair.server.status().message();
  std::string pem = (*pair.server)->peerCertificatePem();
  ASSERT_NE(pem.find("BEGIN CERTIFICATE"), std::string::npos);
  std::string ca = test::readFile(dir_.file("ca.pem"));
  auto cn = verifiedCommonName(pem, ca);
  ASSERT_TRUE(cn) << cn.status().message();
  EXPECT_EQ(*cn, "alice");
  // A certificate of another CA (one a worker made up) does not verify.
  test::TempDir other;
  test::makeCerts(other.path());
  auto forged = verifiedCommonName(test::readFile(other.file("alice.pem")), ca);
  ASSERT_FALSE(forged);
  EXPECT_NE(forged.status().message().find("does not verify"), std::string::npos) << forged.status().message();
  EXPECT_FALSE(verifiedCommonName("not a certificate", ca));
}

TEST_F(Tls, ClientWithoutCertificateHasNoName) {
  auto pair = test::makeTlsPair(dir_.path(), "");
  ASSERT_TRUE(pair.client) << pair.client.status().message();
  ASSERT_TRUE(pair.server);
  EXPECT_EQ((*pair.server)->peerCommonName(), "");
}

TEST_F(Tls, ClientRefusesAServerSignedByAnotherCa) {
  test::TempDir other;
  test::makeCerts(other.path());
  auto pair = test::makeTlsPair(dir_.path(), "alice", other.file("ca.pem"));
  ASSERT_FALSE(pair.client);
  EXPECT_NE(pair.client.status().message().find("certificate"), std::string::npos) << pair.client.status().message();
}

TEST_F(Tls, ServerRefusesAClientCertificateFromAnotherCa) {
  test::TempDir other;
  test::makeCerts(other.path());
  // Present "alice" from the other PKI, trusting our server CA.
  std::string ca = dir_.file("ca.pem");
  std::rename(other.file("alice.pem").c_str(), dir_.file("mallory.pem").c_str());
  std::rename(other.file("alice.key").c_str(), dir_.file("mallory.key").c_str());
  auto pair = test::makeTlsPair(dir_.path(), "mallory", ca);
  EXPECT_FALSE(pair.server && pair.client && !(*pair.server)->peerCommonName().empty());
}

TEST_F(Tls, RequiredClientCertificateIsEnforced) {
  auto pair = test::makeTlsPair(dir_.path(), "", "", /*require_client_cert=*/true);
  EXPECT_FALSE(pair.server);
}

TEST_F(Tls, ExpiredServerCertificateIsRefused) {
  test::TempDir old;
  DevPkiOptions o;
  o.dir = old.path();
  o.clients = {"alice"};
  o.valid_days = 1;
  o.not_before_offset_s = -10L * 86400;  // valid from 10 days ago for 1 day
  ASSERT_TRUE(makeDevPki(o));
  auto pair = test::makeTlsPair(old.path(), "alice");
  ASSERT_FALSE(pair.client);
  EXPECT_NE(pair.client.status().message().find("expired"), std::string::npos) << pair.client.status().message();
}

TEST_F(Tls, ConnectToAClosedPortFailsFastNamingTheAddress) {
  auto ctx = TlsContext::makeClient(common::TlsOptions::files(dir_.file("ca.pem"), "", "", false));
  ASSERT_TRUE(ctx);
  auto c = TlsConnection::connect(**ctx, "127.0.0.1", 1, "", std::chrono::milliseconds(2000));
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("127.0.0.1:1"), std::string::npos);
}

TEST_F(Tls, HandshakeTimesOutAgainstASilentPeer) {
  // A listener that accepts TCP but never speaks TLS.
  uint16_t port = 0;
  int lfd = test::listenLoopback(&port);
  auto ctx = TlsContext::makeClient(common::TlsOptions::files(dir_.file("ca.pem"), "", "", false));
  auto t0 = std::chrono::steady_clock::now();
  auto c = TlsConnection::connect(**ctx, "127.0.0.1", port, "", std::chrono::milliseconds(300));
  auto waited = std::chrono::steady_clock::now() - t0;
  ::close(lfd);
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("timed out"), std::string::npos) << c.status().message();
  EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST_F(Tls, ShutdownWakesABlockedReader) {
  auto pair = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(pair.client && pair.server);
  std::thread reader([&] {
    char b;
    EXPECT_FALSE((*pair.server)->readExact(&b, 1));
  });
  (*pair.server)->shutdown();
  reader.join();
}

// A record OpenSSL read ahead into its own buffer (the socket then has nothing
// more to say) counts as buffered and readable: the client's read role goes
// back only with nothing buffered, or a reply would sit there unread while the
// receiver waits on the socket.
TEST_F(Tls, ReadableCountsRecordsOpenSslReadAheadOfTheSocket) {
  auto pair = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(pair.client && pair.server);
  TlsConnection& rx = **pair.client;
  const std::string a(100, 'a'), b(200, 'b');
  ASSERT_TRUE((*pair.server)->write(a.data(), a.size()));  // two records
  ASSERT_TRUE((*pair.server)->write(b.data(), b.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both in the client's socket
  std::string got(a.size(), 0);
  ASSERT_TRUE(rx.readExact(got.data(), got.size()));
  EXPECT_EQ(got, a);
  // The first record is taken whole; the second waits in OpenSSL's buffer.
  pollfd p{rx.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "the socket still holds bytes: the test shows nothing";
  EXPECT_FALSE(rx.socketReadable(0));
  EXPECT_TRUE(rx.buffered());
  EXPECT_TRUE(rx.readable(0));
  got.assign(b.size(), 0);
  ASSERT_TRUE(rx.readExact(got.data(), got.size()));
  EXPECT_EQ(got, b);
  EXPECT_FALSE(rx.buffered());
  EXPECT_FALSE(rx.readable(50));  // nothing more: a timeout
  ASSERT_TRUE((*pair.server)->write(a.data(), 1));
  EXPECT_TRUE(rx.readable(2000));
  rx.shutdown();
  EXPECT_FALSE(rx.readable(-1));  // shut down: false at once, data or not
}

TEST_F(Tls, PeerCloseIsReportedAsClosed) {
  auto pair = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(pair.client && pair.server);
  pair.client = Status(err::kUnknown, "dropped");  // destroys the client connection
  char b;
  Status s = (*pair.server)->readExact(&b, 1);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), err::kDevicesUnavailable);
}

// One connection to a server context the test keeps (as a worker keeps its
// own): the client as `cert` ("" none), offering the resume PSK of `secret`.
struct Accepted {
  Result<std::unique_ptr<TlsConnection>> server = Status(err::kUnknown, "not run");
  Result<std::unique_ptr<TlsConnection>> client = Status(err::kUnknown, "not run");
};
Accepted connectTo(TlsContext& server_ctx, const std::string& dir, const std::string& cert, const std::string& secret) {
  uint16_t port = 0;
  int lfd = test::listenLoopback(&port);
  Accepted out;
  std::thread srv([&] {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    out.server = TlsConnection::accept(server_ctx, fd, std::chrono::milliseconds(3000));
  });
  TlsOptions o = TlsOptions::files(dir + "/ca.pem");
  if (!cert.empty()) {
    o.cert_file = dir + "/" + cert + ".pem";
    o.key_file = dir + "/" + cert + ".key";
  }
  auto ctx = TlsContext::makeClient(o);
  out.client = TlsConnection::connect(**ctx, "127.0.0.1", port, "", std::chrono::milliseconds(3000), "", secret);
  srv.join();
  ::close(lfd);
  return out;
}

TEST_F(Tls, AServerThatForgotItsKeyCompletesOnlyHandshakesWithTheResumePsk) {
  auto ctx = TlsContext::makeServer(TlsOptions::files(dir_.file("ca.pem"), dir_.file("server.pem"), dir_.file("server.key")));
  ASSERT_TRUE(ctx) << ctx.status().message();
  const std::string secret(16, '\x5a');
  (*ctx)->setResumeSecret(secret);
  Accepted first = connectTo(**ctx, dir_.path(), "alice", "");
  ASSERT_TRUE(first.server) << first.server.status().message();
  EXPECT_FALSE((*first.server)->resumedByPsk());
  EXPECT_EQ((*first.server)->peerCommonName(), "alice");
  EXPECT_TRUE((*ctx)->holdsPrivateKey());
  (*ctx)->forgetPrivateKey();
  EXPECT_FALSE((*ctx)->holdsPrivateKey());
  // A full handshake needs the key: it fails now, with or without a certificate of the client's.
  EXPECT_FALSE(connectTo(**ctx, dir_.path(), "alice", "").server);
  EXPECT_FALSE(connectTo(**ctx, dir_.path(), "", "").server);
  // So does a PSK of another secret.
  EXPECT_FALSE(connectTo(**ctx, dir_.path(), "alice", std::string(16, 'x')).server);
  // The session's own PSK completes it, and the link carries data.
  Accepted again = connectTo(**ctx, dir_.path(), "alice", secret);
  ASSERT_TRUE(again.server) << again.server.status().message();
  ASSERT_TRUE(again.client) << again.client.status().message();
  EXPECT_TRUE((*again.server)->resumedByPsk());
  EXPECT_TRUE((*again.client)->resumedByPsk());
  const char msg[] = "after the key is gone";
  ASSERT_TRUE((*again.client)->write(msg, sizeof msg));
  char buf[sizeof msg];
  ASSERT_TRUE((*again.server)->readExact(buf, sizeof buf));
  EXPECT_STREQ(buf, msg);
}

TEST_F(Tls, AClientSignatureOverTheExporterVerifiesOnlyWithItsOwnCertificate) {
  auto pair = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(pair.client && pair.server);
  std::string c = (*pair.client)->exportKeyingMaterial("EXPORTER-test", 32);
  std::string s = (*pair.server)->exportKeyingMaterial("EXPORTER-test", 32);
  ASSERT_EQ(c.size(), 32u);
  EXPECT_EQ(c, s);
  auto sig = (*pair.client)->signWithOwnKey(c);
  ASSERT_TRUE(sig) << sig.status().message();
  std::string alice = (*pair.server)->peerCertificatePem();
  EXPECT_TRUE(signatureVerifies(alice, s, *sig));
  EXPECT_FALSE(signatureVerifies(alice, s + "x", *sig));
  EXPECT_FALSE(signatureVerifies(test::readFile(dir_.file("bob.pem")), s, *sig));
  EXPECT_FALSE(signatureVerifies("not a certificate", s, *sig));
  // Another connection derives other material.
  auto other = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(other.server);
  EXPECT_NE((*other.server)->exportKeyingMaterial("EXPORTER-test", 32), s);
}

}  // namespace
}  // namespace rgpu::common
