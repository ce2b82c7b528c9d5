// Who gets in, against the real daemon: TLS 1.3 certificates that are expired,
// not yet valid, from another CA or missing; tokens that match no one; what
// the log says (the reason, never a secret); certificates and users reloaded
// by SIGHUP (a broken reload changes nothing); plaintext only where allowed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include "client/connection.h"
#include "common/dev_pki.h"
#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

class Identity : public ::testing::Test {
 protected:
  void start(const std::string& extra = "", const std::string& toml = "") {
    makeCerts(dir_.path());
    server_ = std::make_unique<ServerProcess>(dir_.path(), toml.empty() ? serverToml(dir_.path(), extra) : toml);
  }
  client::ClientConfig config(const std::string& ca, const std::string& cert_dir, const std::string& cert) {
    client::ClientConfig c;
    c.server = "127.0.0.1:" + std::to_string(server_->port());
    c.ca = ca;
    if (!cert.empty()) {
      c.cert = cert_dir + "/" + cert + ".pem";
      c.key = cert_dir + "/" + cert + ".key";
    }
    c.connect_timeout_ms = 3000;
    c.resume = false;
    return c;
  }
  // Connects and makes one synchronous call; the error, if any.
  Status ping(const client::ClientConfig& cfg) {
    auto c = client::Connection::open(cfg, nullptr);
    if (!c) return c.status();
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Request>().setPing();
    return (*c)->call(msg).status;
  }
  bool logSays(const std::string& what) {
    // Polls the log the server writes; there is no event to wait on.
    for (int i = 0; i < 1000; ++i) {
      if (server_->log().find(what) != std::string::npos) return true;
      usleep(5000);
    }
    return false;
  }
  // A second PKI (another CA) in `dir`, valid from `offset_s` for `days`.
  static void otherPki(const std::string& dir, long offset_s = -60, int days = 30) {
    common::DevPkiOptions o;
    o.dir = dir;
    o.clients = {"alice", "bob"};
    o.valid_days = days;
    o.not_before_offset_s = offset_s;
    ASSERT_TRUE(common::makeDevPki(o));
  }
  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(Identity, ExpiredAndNotYetValidClientCertificatesAreRefusedWithTheReasonLogged) {
  TempDir expired, future;
  otherPki(expired.path(), -10L * 86400, 1);
  otherPki(future.path(), 10L * 86400, 30);
  makeCerts(dir_.path());
  // The server trusts all three CAs: only the validity dates can refuse.
  writeFile(dir_.file("cas.pem"), readFile(dir_.file("ca.pem")) + readFile(expired.file("ca.pem")) +
                                      readFile(future.file("ca.pem")));
  std::string toml = serverToml(dir_.path());
  toml.replace(toml.find(dir_.path() + "/ca.pem"), (dir_.path() + "/ca.pem").size(), dir_.file("cas.pem"));
  server_ = std::make_unique<ServerProcess>(dir_.path(), toml);
  Status old_cert = ping(config(dir_.file("ca.pem"), expired.path(), "alice"));
  EXPECT_EQ(old_cert.code(), err::kDevicesUnavailable) << old_cert.message();
  EXPECT_TRUE(logSays("certificate has expired")) << server_->log();
  Status new_cert = ping(config(dir_.file("ca.pem"), future.path(), "alice"));
  EXPECT_EQ(new_cert.code(), err::kDevicesUnavailable) << new_cert.message();
  EXPECT_TRUE(logSays("certificate is not yet valid")) << server_->log();
  EXPECT_TRUE(ping(config(dir_.file("ca.pem"), dir_.path(), "alice")));  // a valid one gets in
}

// A handshake by plain OpenSSL offering only TLS 1.2 (with a valid client
// certificate): what the server makes of it, as OpenSSL's error text.
std::string handshakeWithTls12(uint16_t port, const std::string& dir) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_load_verify_locations(ctx, (dir + "/ca.pem").c_str(), nullptr);
  SSL_CTX_use_certificate_chain_file(ctx, (dir + "/alice.pem").c_str());
  SSL_CTX_use_PrivateKey_file(ctx, (dir + "/alice.key").c_str(), SSL_FILETYPE_PEM);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out = "connect failed";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1) {
      out = std::string("connected with ") + SSL_get_version(ssl);
    } else {
      char buf[256];
      ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
      out = buf;
    }
    SSL_free(ssl);
  }
  ::close(fd);
  SSL_CTX_free(ctx);
  return out;
}

TEST_F(Identity, OnlyTls13IsSpokenAnOlderVersionIsRefusedAndLogged) {
  start();
  std::string r = handshakeWithTls12(server_->port(), dir_.path());
  EXPECT_EQ(r.find("connected"), std::string::npos) << r;
  EXPECT_NE(r.find("protocol version"), std::string::npos) << r;  // the server's alert
  EXPECT_TRUE(logSays("unsupported protocol")) << server_->log();
  EXPECT_TRUE(ping(config(dir_.file("ca.pem"), dir_.path(), "alice")));  // TLS 1.3 clients are served
}

TEST_F(Identity, AServerFromAnotherCaIsRefusedByTheClient) {
  start();
  TempDir other;
  otherPki(other.path());
  Status s = ping(config(other.file("ca.pem"), dir_.path(), "alice"));
  EXPECT_EQ(s.code(), err::kDevicesUnavailable);
  EXPECT_NE(s.message().find("certificate verify failed"), std::string::npos) << s.message();
  EXPECT_TRUE(logSays("TLS handshake with")) << server_->log();  // the server says why it hung up
}

TEST_F(Identity, AMissingClientCertificateIsRefusedWhenRequired) {
  std::string toml = serverToml(dir_.path());
  toml.insert(toml.find("handshake_timeout_ms"), "require_client_cert = true\n");
  start("", toml);
  client::ClientConfig c = config(dir_.file("ca.pem"), dir_.path(), "");
  c.token = "bob-token";  // a token does not replace the required certificate
  Status s = ping(c);
  EXPECT_EQ(s.code(), err::kDevicesUnavailable) << s.message();
  EXPECT_TRUE(logSays("peer did not return a certificate")) << server_->log();
  EXPECT_TRUE(ping(config(dir_.file("ca.pem"), dir_.path(), "alice")));
}

TEST_F(Identity, AWrongTokenIsRefusedAndNoSecretReachesTheLog) {
  std::string toml = serverToml(dir_.path());
  toml.replace(toml.find("log_level = \"info\""), 18, "log_level = \"trace\"");
  start("", toml);
  client::ClientConfig c = config(dir_.file("ca.pem"), dir_.path(), "");
  c.token = "not-bobs-secret-token";
  Status s = ping(c);
  EXPECT_EQ(s.code(), err::kNotPermitted) << s.message();
  EXPECT_NE(s.message().find("the token matches no user"), std::string::npos) << s.message();
  c.token = "bob-token";
  EXPECT_TRUE(ping(c));
  ASSERT_TRUE(logSays("rejected client"));
  std::string log = server_->log();
  EXPECT_EQ(log.find("not-bobs-secret-token"), std::string::npos) << log;
  EXPECT_EQ(log.find("bob-token"), std::string::npos) << log;
  std::string key = readFile(dir_.file("server.key"));
  EXPECT_EQ(log.find(key.substr(key.find('\n') + 1, 40)), std::string::npos);  // no key material either
}

TEST_F(Identity, CertificatesAndUsersReloadOnSighupAndABrokenReloadChangesNothing) {
  start();
  client::ClientConfig old_ca = config(dir_.file("ca.pem"), dir_.path(), "alice");
  // A session that runs across the reloads.
  auto running = client::Connection::open(old_ca, nullptr);
  ASSERT_TRUE(running) << running.status().message();

  // New server certificate from another CA, and a new user by token.
  TempDir next;
  otherPki(next.path());
  std::filesystem::copy_file(next.file("server.pem"), dir_.file("server.pem"), std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(next.file("server.key"), dir_.file("server.key"), std::filesystem::copy_options::overwrite_existing);
  writeFile(dir_.file("server.toml"), serverToml(dir_.path(), "[[users]]\nname = \"carol\"\ntoken = \"carol-token\"\n"));
  ::kill(server_->pid(), SIGHUP);
  ASSERT_TRUE(logSays("SIGHUP: configuration reloaded")) << server_->log();
  Status refused = ping(old_ca);  // the old CA no longer vouches for the server
  EXPECT_NE(refused.message().find("certificate verify failed"), std::string::npos) << refused.message();
  client::ClientConfig carol = config(next.file("ca.pem"), dir_.path(), "");
  carol.token = "carol-token";
  EXPECT_TRUE(ping(carol));
  capnp::MallocMessageBuilder msg;
  msg.initRoot<wire::Request>().setPing();
  EXPECT_TRUE((*running)->call(msg).status);  // the running session keeps its connection

  // A key that does not match its certificate: refused as a whole.
  std::filesystem::copy_file(dir_.file("alice.key"), dir_.file("server.key"), std::filesystem::copy_options::overwrite_existing);
  writeFile(dir_.file("server.toml"), serverToml(dir_.path()));  // (and carol would go)
  ::kill(server_->pid(), SIGHUP);
  ASSERT_TRUE(logSays("SIGHUP: not reloaded, new sessions keep the previous configuration")) << server_->log();
  EXPECT_TRUE(ping(carol));  // still the last good certificate and users

  // A key that needs a restart: refused too, saying which.
  std::filesystem::copy_file(next.file("server.key"), dir_.file("server.key"), std::filesystem::copy_options::overwrite_existing);
  std::string moved = serverToml(dir_.path());
  moved.replace(moved.find("backend = \"sim\""), 15, "backend = \"auto\"");
  writeFile(dir_.file("server.toml"), moved);
  ::kill(server_->pid(), SIGHUP);
  ASSERT_TRUE(logSays("SIGHUP: not reloaded: backend changed, which needs a restart")) << server_->log();
  EXPECT_TRUE(ping(carol));
}

TEST_F(Identity, PlaintextIsOnlyForLoopbackAndOnlyWithBothSidesSayingSo) {
  makeCerts(dir_.path());
  std::string wide = "listen = \"0.0.0.0:0\"\ninsecure_plaintext = true\nbackend = \"sim\"\n[[users]]\nname = \"bob\"\ntoken = \"bob-token\"\n";
  writeFile(dir_.file("wide.toml"), wide);
  RunResult refused = run(std::string(RGPU_SERVER_BIN) + " --config " + dir_.file("wide.toml"));
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("plaintext is only allowed on a loopback `listen` address"), std::string::npos)
      << refused.output;
  // Nor by moving the listener on the command line.
  std::string local = "listen = \"127.0.0.1:0\"\ninsecure_plaintext = true\nbackend = \"sim\"\n[[users]]\nname = \"bob\"\ntoken = \"bob-token\"\n";
  writeFile(dir_.file("local.toml"), local);
  RunResult moved = run(std::string(RGPU_SERVER_BIN) + " --config " + dir_.file("local.toml") + " --listen 0.0.0.0:0");
  EXPECT_EQ(moved.code, 1) << moved.output;
  EXPECT_NE(moved.output.find("only allowed on a loopback listen address"), std::string::npos) << moved.output;

  server_ = std::make_unique<ServerProcess>(dir_.path(), local);
  EXPECT_TRUE(logSays("insecure_plaintext: no TLS")) << server_->log();
  client::ClientConfig c = config("", "", "");
  c.token = "bob-token";
  c.insecure_plaintext = true;
  EXPECT_TRUE(ping(c));
  c.insecure_plaintext = false;  // a TLS client does not talk to it
  c.ca = dir_.file("ca.pem");
  Status tls = ping(c);
  EXPECT_EQ(tls.code(), err::kDevicesUnavailable) << tls.message();
}

TEST_F(Identity, APlaintextClientIsRefusedByATlsServer) {
  start();
  client::ClientConfig c = config("", "", "");
  c.token = "bob-token";
  c.insecure_plaintext = true;
  Status s = ping(c);
  EXPECT_EQ(s.code(), err::kDevicesUnavailable) << s.message();
  EXPECT_TRUE(logSays("TLS handshake with")) << server_->log();
}

}  // namespace
}  // namespace rgpu::test
