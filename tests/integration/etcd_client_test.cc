// rgpu's etcd client against a real etcd (Debian's etcd-server on loopback
// ports of the test's), and the [cluster] settings it is configured by.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/cluster/etcd_client.h"
#include "server/config/server_config.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_env.h"

namespace rgpu {
namespace {

using json = nlohmann::json;
using server::cluster::EtcdClient;
using server::cluster::EtcdOp;
using server::cluster::EtcdOptions;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using test::etcdClient;

class EtcdClientTest : public ::testing::Test {
 protected:
  test::TempDir dir_;
  test::EtcdProcess etcd_{dir_.path()};
};

TEST_F(EtcdClientTest, KeysLeasesAndTransactionsWork) {
  auto c = etcdClient({etcd_.endpoint()});
  ASSERT_TRUE(c->put("/t/a", "one"));
  ASSERT_TRUE(c->put("/t/b", std::string("two\0bytes", 9)));
  ASSERT_TRUE(c->put("/u/c", "other"));
  auto all = c->range("/t/", true);
  ASSERT_TRUE(all) << all.status().message();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "/t/a");
  EXPECT_EQ((*all)[0].value, "one");
  EXPECT_EQ((*all)[1].value, std::string("two\0bytes", 9));  // binary-safe
  EXPECT_TRUE(c->range("/t/none")->empty());

  auto lease = c->grantLease(5);
  ASSERT_TRUE(lease) << lease.status().message();
  ASSERT_TRUE(c->put("/t/leased", "x", *lease));
  EXPECT_EQ((*c->range("/t/leased"))[0].lease, *lease);
  auto left = c->keepAlive(*lease);
  ASSERT_TRUE(left) << left.status().message();
  EXPECT_GT(*left, 0);
  ASSERT_TRUE(c->revoke(*lease));
  EXPECT_TRUE(c->range("/t/leased")->empty());  // its keys went with it
  EXPECT_EQ(*c->keepAlive(*lease), 0);          // etcd no longer has it
  EXPECT_TRUE(c->revoke(*lease));               // revoking a gone lease is no error

  auto first = c->putIfAbsent("/t/once", {{EtcdOp::kPut, "/t/once", "1", 0}, {EtcdOp::kPut, "/t/with", "w", 0}});
  ASSERT_TRUE(first && *first);
  auto second = c->putIfAbsent("/t/once", {{EtcdOp::kPut, "/t/once", "2", 0}});
  ASSERT_TRUE(second);
  EXPECT_FALSE(*second);
  EXPECT_EQ((*c->range("/t/once"))[0].value, "1");
  auto l2 = c->grantLease(5);
  ASSERT_TRUE(c->put("/t/held", "a", *l2));
  EXPECT_TRUE(*c->putIfLease("/t/held", *l2, {{EtcdOp::kPut, "/t/held", "b", *l2}}));
  EXPECT_FALSE(*c->putIfLease("/t/held", *l2 + 1, {{EtcdOp::kPut, "/t/held", "c", 0}}));
  EXPECT_EQ((*c->range("/t/held"))[0].value, "b");
  ASSERT_TRUE(c->erase("/t/", true));
  EXPECT_TRUE(c->range("/t/", true)->empty());
  EXPECT_EQ(c->range("/u/", true)->size(), 1u);
}

TEST_F(EtcdClientTest, ADeadOrSilentEndpointFailsOverAndNeverHangs) {
  // A port that refuses, and one that accepts but never answers.
  uint16_t silent_port = 0;
  int silent = test::listenLoopback(&silent_port);
  uint16_t dead_port = 0;
  ::close(test::listenLoopback(&dead_port));
  auto c = etcdClient({"http://127.0.0.1:" + std::to_string(dead_port), "http://127.0.0.1:" + std::to_string(silent_port),
                       etcd_.endpoint()},
                      300ms);
  ASSERT_TRUE(c->put("/f/k", "v"));
  EXPECT_EQ(c->endpoint(), etcd_.endpoint());
  // Alone, the silent one times out within its timeout.
  auto s = etcdClient({"http://127.0.0.1:" + std::to_string(silent_port)}, 300ms);
  const auto t0 = Clock::now();
  Status st = s->put("/f/k", "v");
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("did not answer within 300 ms"), std::string::npos) << st.message();
  EXPECT_LT(Clock::now() - t0, 2s);
  ::close(silent);
  // Not an endpoint at all.
  EtcdOptions bad;
  bad.endpoints = {"127.0.0.1:2379"};
  EXPECT_FALSE(EtcdClient::create(bad));
}

TEST(EtcdClientTls, HttpsWithClientCertificatesWorksAndWithoutThemIsRefused) {
  test::TempDir certs, dir, other;
  test::makeCerts(certs.path());
  test::makeCerts(other.path());  // another CA
  test::EtcdProcess etcd(dir.path(), certs.path());
  ASSERT_EQ(etcd.endpoint().rfind("https://", 0), 0u);
  auto with = [&](const std::string& ca, const std::string& cert) {
    EtcdOptions o;
    o.endpoints = {etcd.endpoint()};
    o.timeout = 2000ms;
    o.ca_file = ca + "/ca.pem";
    if (!cert.empty()) o.cert_file = cert + "/alice.pem", o.key_file = cert + "/alice.key";
    return std::move(*EtcdClient::create(o));
  };
  auto good = with(certs.path(), certs.path());
  ASSERT_TRUE(good->put("/tls/k", "v"));
  EXPECT_EQ((*good->range("/tls/k"))[0].value, "v");
  // No client certificate: etcd refuses the handshake.
  EXPECT_FALSE(with(certs.path(), "")->put("/tls/k", "w"));
  // etcd's certificate from a CA we do not trust: we refuse it.
  Status s = with(other.path(), other.path())->put("/tls/k", "w");
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("certificate verify failed"), std::string::npos) << s.message();
  EXPECT_EQ((*good->range("/tls/k"))[0].value, "v");
  // An https endpoint without a CA to check it with is refused up front.
  EtcdOptions none;
  none.endpoints = {etcd.endpoint()};
  EXPECT_FALSE((*EtcdClient::create(none))->put("/tls/k", "x"));
}

TEST_F(EtcdClientTest, AMalformedAnswerIsAnErrorNotACrash) {
  // A server that answers every request with HTTP that is not etcd's JSON.
  uint16_t port = 0;
  int fd = test::listenLoopback(&port);
  std::atomic<bool> done{false};
  std::thread t([&] {
    const char* answers[] = {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{nope",
                             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffff\r\n{}",
                             "HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n{\"kvs\":[{\"key\":\"!!!\"}]}",
                             "garbage"};
    for (const char* a : answers) {
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) break;
      char buf[4096];
      (void)::read(c, buf, sizeof buf);
      (void)::write(c, a, std::strlen(a));
      ::close(c);
    }
    done = true;
  });
  auto c = etcdClient({"http://127.0.0.1:" + std::to_string(port)}, 1000ms);
  for (int i = 0; i < 4; ++i) {
    auto r = c->range("/k");
    EXPECT_FALSE(r) << "answer " << i;
  }
  t.join();
  ::close(fd);
}

TEST(ClusterConfig, UnsafeOrIncompleteSettingsAreRefused) {
  auto parse = [](const std::string& cluster) {
    return server::parseServerConfig("listen = \"0.0.0.0:7443\"\n[cluster]\n" + cluster, "server.toml");
  };
  auto ok = parse("endpoints = [\"http://127.0.0.1:2379\"]\nname = \"n\"\nadvertise = \"gpu01:7443\"\n");
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ(ok->cluster.prefix, "/rgpu/");
  EXPECT_EQ(ok->cluster.lease_ttl_s, 10u);
  auto message = [&](const std::string& c) {
    auto r = parse(c);
    return r ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(message("endpoints = [\"http://10.0.0.5:2379\"]\nadvertise = \"gpu01:7443\"\n").find("plaintext to another host"),
            std::string::npos);
  EXPECT_EQ(message("endpoints = [\"http://10.0.0.5:2379\"]\nadvertise = \"gpu01:7443\"\ninsecure_plaintext = true\n"),
            "accepted");
  EXPECT_NE(message("endpoints = [\"https://etcd:2379\"]\nadvertise = \"gpu01:7443\"\n").find("tls_ca"), std::string::npos);
  EXPECT_NE(message("endpoints = [\"http://127.0.0.1:2379\"]\n").find("wildcard"), std::string::npos);  // listen 0.0.0.0
  EXPECT_NE(message("endpoints = []\nadvertise = \"a:1\"\n").find("at least one"), std::string::npos);
  EXPECT_NE(message("endpoints = [\"http://127.0.0.1:2379\"]\nadvertise = \"a:1\"\nlease_ttl_s = 1\n").find("2..3600"),
            std::string::npos);
  EXPECT_NE(message("endpoints = [\"http://127.0.0.1:2379\"]\nadvertise = \"a:1\"\nprefix = \"/x\"\n").find("end with"),
            std::string::npos);
  EXPECT_NE(message("endpoints = [\"http://127.0.0.1:2379\"]\nadvertise = \"a:1\"\nname = \"a/b\"\n").find("without '/'"),
            std::string::npos);
}

}  // namespace
}  // namespace rgpu
