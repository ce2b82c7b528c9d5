#include "common/tls.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>

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

TEST_F(Tls, PeerCloseIsReportedAsClosed) {
  auto pair = test::makeTlsPair(dir_.path(), "alice");
  ASSERT_TRUE(pair.client && pair.server);
  pair.client = Status(err::kUnknown, "dropped");  // destroys the client connection
  char b;
  Status s = (*pair.server)->readExact(&b, 1);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), err::kDevicesUnavailable);
}

}  // namespace
}  // namespace rgpu::common
