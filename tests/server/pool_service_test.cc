// The daemon's side of the control sockets binds each session to the user
// the daemon itself finds for the client's credential: a worker (which a
// tenant may have taken over) cannot be admitted as another user, nor see
// the admin view of the pool, by naming one.
#include "server/pool/pool_service.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "server/pool/pool_link.h"

namespace rgpu::server {
namespace {

class PoolServiceIdentity : public ::testing::Test {
 protected:
  PoolServiceIdentity() : pool_(devices(), users(), {}), service_(io_, pool_, nullptr, nullptr) {
    service_.setAuthenticator([](const ClientCredential& c) -> Result<std::string> {
      const std::string& token = c.token;
      if (token == "alice-token") return std::string("alice");
      if (token == "root-token") return std::string("root");
      return Status(err::kNotPermitted, "the credential matches no user");
    });
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    service_.attach(7, sv[0]);
    link_ = std::make_unique<ControlSocketLink>(sv[1], -1, std::chrono::seconds(5));
    work_ = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(io_.get_executor());
    thread_ = std::thread([this] { io_.run(); });
  }
  ~PoolServiceIdentity() override {
    link_.reset();
    work_.reset();
    io_.stop();
    thread_.join();
  }
  static std::vector<PoolDeviceInfo> devices() { return {{"rgpu sim H100", "GPU-aaaa0000", 16ull << 30, 90}}; }
  static std::vector<UserEntry> users() {
    UserEntry alice, root;
    alice.name = "alice";
    root.name = "root";
    root.admin = true;
    return {alice, root};
  }
  ClientInfo as(const std::string& user) { return {user, "host", "127.0.0.1:1", 42}; }

  asio::io_context io_;
  PoolManager pool_;
  PoolService service_;
  std::unique_ptr<ControlSocketLink> link_;
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread thread_;
};

TEST_F(PoolServiceIdentity, AWorkerThatProvedNoIdentityIsNotAdmitted) {
  auto p = link_->admit(as("alice"), {});
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("no identity bound"), std::string::npos) << p.status().message();
  EXPECT_FALSE(link_->status("root"));
}

TEST_F(PoolServiceIdentity, AWorkerCannotClaimAUserItsClientsCredentialIsNot) {
  Status s = link_->bindIdentity("root", {"alice-token", "", "", ""});
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("belongs to user 'alice'"), std::string::npos) << s.message();
  EXPECT_FALSE(link_->bindIdentity("root", {"guessed", "", "", ""}));
}

TEST_F(PoolServiceIdentity, OnceBoundTheSessionActsAsItsUserWhateverTheWorkerNames) {
  ASSERT_TRUE(link_->bindIdentity("alice", {"alice-token", "", "", ""}));
  EXPECT_FALSE(link_->bindIdentity("root", {"root-token", "", "", ""})) << "a session is bound once";
  auto p = link_->admit(as("root"), {});  // names root: admitted as alice
  ASSERT_TRUE(p) << p.status().message();
  auto snap = pool_.snapshot(PoolManager::Clock::now());
  ASSERT_EQ(snap.sessions.size(), 1u);
  EXPECT_EQ(snap.sessions[0].client.user, "alice");
}

TEST(PoolLink, APlacementWithASpanCrossesTheControlSocketIntact) {
  Placement p;
  p.devices = {0};
  p.quota = 7;
  p.span = {{"b", "10.0.0.2:7443", 2}, {"a", "[::1]:7443", 1}};
  p.pool_quota = 3ull << 30;
  std::vector<std::string> fields = placementFields(p);
  fields.insert(fields.begin(), "ok");  // as the pool manager's answer starts
  auto back = placementFromFields(fields);
  ASSERT_TRUE(back) << back.status().message();
  ASSERT_EQ(back->span.size(), 2u);
  EXPECT_EQ(back->span[0].member, "b");
  EXPECT_EQ(back->span[0].address, "10.0.0.2:7443");
  EXPECT_EQ(back->span[0].count, 2u);
  EXPECT_EQ(back->span[1].address, "[::1]:7443");
  EXPECT_EQ(back->quota, 7u);
  EXPECT_EQ(back->pool_quota, 3ull << 30);
  // Without a span, none comes back; a malformed one is an error, not a guess.
  std::vector<std::string> plain = placementFields(Placement{});
  plain.insert(plain.begin(), "ok");
  EXPECT_TRUE(placementFromFields(plain)->span.empty());
  fields[9] = "2\x1dno-member-field";
  EXPECT_FALSE(placementFromFields(fields));
}

}  // namespace
}  // namespace rgpu::server
