// The client's Connection against real servers: authentication, threading,
// asynchronous error reporting, and a server that goes away.
#include "client/connection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "tests/support/test_env.h"

namespace rgpu::client {
namespace {

class ClientConnection : public ::testing::Test {
 protected:
  ClientConnection() : certs_((test::makeCerts(dir_.path()), 0)), server_(dir_.path()) {}
  ClientConfig config(const std::string& cert = "alice") {
    ClientConfig c;
    c.server = "127.0.0.1:" + std::to_string(server_.port());
    c.ca = dir_.file("ca.pem");
    if (!cert.empty()) {
      c.cert = dir_.file(cert + ".pem");
      c.key = dir_.file(cert + ".key");
    }
    return c;
  }
  test::TempDir dir_;
  int certs_;
  test::InProcessServer server_;
};

TEST_F(ClientConnection, WelcomeCarriesIdentityAndDevices) {
  auto c = Connection::open(config(), nullptr);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ((*c)->welcome().identity, "alice");
  EXPECT_EQ((*c)->welcome().backend, "sim");
  ASSERT_EQ((*c)->welcome().devices.size(), 1u);
  EXPECT_EQ((*c)->welcome().devices[0].name, "rgpu test device");
  EXPECT_EQ((*c)->welcome().devices[0].prop.size(), 1008u);
}

TEST_F(ClientConnection, TokenAuthentication) {
  ClientConfig cfg = config("");
  cfg.token = "bob-token";
  auto c = Connection::open(cfg, nullptr);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ((*c)->welcome().identity, "bob");
  cfg.token = "nope";
  auto d = Connection::open(cfg, nullptr);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.status().code(), err::kNotPermitted);
  EXPECT_NE(d.status().message().find("refused this client"), std::string::npos);
}

TEST_F(ClientConnection, PlaintextIsRefusedToAnythingButThisMachine) {
  ClientConfig cfg = config("");
  cfg.token = "bob-token";
  cfg.insecure_plaintext = true;
  cfg.server = "192.0.2.7:7443";  // (TEST-NET-1: nothing is sent; the check comes before connecting)
  auto c = Connection::open(cfg, nullptr);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.status().code(), err::kDevicesUnavailable);
  EXPECT_NE(c.status().message().find("insecure_plaintext is only for a server on this machine"), std::string::npos)
      << c.status().message();
}

TEST_F(ClientConnection, UnreachableServerFailsWithinTheTimeoutNamingAddressAndConfig) {
  ClientConfig cfg = config();
  cfg.server = "127.0.0.1:1";
  cfg.connect_timeout_ms = 2000;
  auto t0 = std::chrono::steady_clock::now();
  auto c = Connection::open(cfg, nullptr);
  ASSERT_FALSE(c);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(c.status().code(), err::kDevicesUnavailable);
  EXPECT_NE(c.status().message().find("127.0.0.1:1"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("config"), std::string::npos) << c.status().message();
}

TEST_F(ClientConnection, ABlockingCallDoesNotStallOtherThreads) {
  std::promise<void> release;
  auto released = release.get_future().share();
  Connection* conn_ptr = nullptr;
  auto c = Connection::open(config(), [&](uint64_t id) {
    released.wait();  // the host function "runs" until the test releases it
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Request>().initHostFuncDone().setId(id);
    (void)conn_ptr->post(msg);
  });
  ASSERT_TRUE(c) << c.status().message();
  conn_ptr = c->get();
  Connection& conn = **c;
  {
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Request>().initStreamCreate().initStream().setId(9);
    ASSERT_TRUE(conn.post(msg));
    capnp::MallocMessageBuilder hf;
    auto h = hf.initRoot<wire::Request>().initHostFuncEnqueue();
    h.setId(1);
    h.initStream().setId(9);
    ASSERT_TRUE(conn.post(hf));
  }
  std::atomic<bool> sync_returned{false};
  std::thread blocked([&] {
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Request>().initStreamSynchronize().setId(9);
    Reply r = conn.call(msg);
    EXPECT_TRUE(r.status) << r.status.message();
    sync_returned = true;
  });
  // While that thread waits on stream 9, this one allocates and pings.
  for (int i = 0; i < 20; ++i) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMalloc();
    m.setSize(1024);
    Reply r = conn.call(msg);
    ASSERT_TRUE(r.status) << r.status.message();
  }
  EXPECT_FALSE(sync_returned.load());
  release.set_value();
  blocked.join();
  EXPECT_TRUE(sync_returned.load());
}

TEST_F(ClientConnection, AsyncErrorIsReportedByTheNextCall) {
  auto c = Connection::open(config(), nullptr);
  ASSERT_TRUE(c);
  capnp::MallocMessageBuilder bad;
  auto m = bad.initRoot<wire::Request>().initMemset();
  m.setDst(0x1000);
  m.setSize(10);
  m.initStream();
  ASSERT_TRUE((*c)->post(bad));  // fire and forget: no error yet
  capnp::MallocMessageBuilder ping;
  ping.initRoot<wire::Request>().setPing();
  Reply r = (*c)->call(ping);
  ASSERT_TRUE(r.status);
  EXPECT_EQ(r.async_error.code(), err::kInvalidValue);
}

TEST_F(ClientConnection, ManyAsyncCallsFromManyThreadsAllArrive) {
  auto c = Connection::open(config(), nullptr);
  ASSERT_TRUE(c);
  capnp::MallocMessageBuilder mm;
  auto ma = mm.initRoot<wire::Request>().initMalloc();
  ma.setSize(8 * 4 * 1000);
  Reply mr = (*c)->call(mm);
  ASSERT_TRUE(mr.status);
  uint64_t base = mr.reader().getPtr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        capnp::MallocMessageBuilder msg;
        auto m = msg.initRoot<wire::Request>().initMemset();
        m.setDst(base + (t * 1000 + i) * 4);
        m.setValue(static_cast<uint8_t>(t + 1));
        m.setSize(4);
        m.initStream();
        ASSERT_TRUE((*c)->post(msg));
      }
    });
  }
  for (auto& t : threads) t.join();
  capnp::MallocMessageBuilder rd;
  auto d = rd.initRoot<wire::Request>().initMemcpyDtoH();
  d.setSrc(base);
  d.setSize(32000);
  d.initStream();
  std::vector<uint8_t> out(32000);
  Reply r = (*c)->call(rd, nullptr, 0, out.data(), out.size());
  ASSERT_TRUE(r.status) << r.status.message();
  EXPECT_TRUE(r.async_error.isOk()) << r.async_error.message();
  for (int t = 0; t < 8; ++t)
    for (int i = 0; i < 4000; ++i) ASSERT_EQ(out[t * 4000 + i], t + 1) << t << " " << i;
}

TEST(ClientConnectionDeadServer, CallsFailCleanlyWhenTheServerGoesAway) {
  test::TempDir dir;
  test::makeCerts(dir.path());
  auto server = std::make_unique<test::ServerProcess>(dir.path(), test::serverToml(dir.path(), "[pool]\ndrain_timeout_ms = 200\n"));
  ClientConfig cfg;
  cfg.server = "127.0.0.1:" + std::to_string(server->port());
  cfg.ca = dir.file("ca.pem");
  cfg.cert = dir.file("alice.pem");
  cfg.key = dir.file("alice.key");
  auto c = Connection::open(cfg, nullptr);
  ASSERT_TRUE(c) << c.status().message();
  server.reset();  // SIGTERM: the daemon stops its workers
  capnp::MallocMessageBuilder ping;
  ping.initRoot<wire::Request>().setPing();
  auto t0 = std::chrono::steady_clock::now();
  Reply r = (*c)->call(ping);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  ASSERT_FALSE(r.status);
  EXPECT_EQ(r.status.code(), err::kDevicesUnavailable);
  EXPECT_NE(r.status.message().find(cfg.server), std::string::npos) << r.status.message();
  // Later calls fail at once with the same error.
  EXPECT_FALSE((*c)->call(ping).status);
}

}  // namespace
}  // namespace rgpu::client
