// Copies from pinned memory through a resumable connection (client/connection.h,
// Connection::post with `pinned`): the bytes are sent from the program's buffer
// and kept for a replay by pointer — no copy of them is made — while a
// pageable payload is copied; waitForWritesInto (cudaFreeHost's wait) returns
// once the server has acknowledged the copies that read the range.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "client/connection.h"
#include "server/session/session.h"
#include "tests/support/test_env.h"

namespace rgpu::client {
namespace {

class PinnedCopy : public ::testing::Test {
 protected:
  PinnedCopy() : certs_((test::makeCerts(dir_.path()), 0)), server_(dir_.path(), test::serverToml(dir_.path())) {}
  std::unique_ptr<Connection> open() {
    ClientConfig c;
    c.server = "127.0.0.1:" + std::to_string(server_.port());
    c.ca = dir_.file("ca.pem");
    c.cert = dir_.file("alice.pem");
    c.key = dir_.file("alice.key");
    auto conn = Connection::open(c, nullptr);
    EXPECT_TRUE(conn) << conn.status().message();
    return conn ? std::move(*conn) : nullptr;
  }
  static uint64_t deviceAlloc(Connection& c, uint64_t size) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMalloc();
    m.setDevice(0);
    m.setSize(size);
    Reply r = c.call(msg);
    EXPECT_TRUE(r.status) << r.status.message();
    return r.reader().getPtr();
  }
  static Status upload(Connection& c, uint64_t dst, const void* src, uint64_t n, bool pinned) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
    m.setDst(dst);
    m.setSize(n);
    m.initStream().setDevice(0);
    return c.post(msg, src, n, pinned);
  }
  static std::vector<uint8_t> download(Connection& c, uint64_t src, uint64_t n) {
    std::vector<uint8_t> out(n);
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMemcpyDtoH();
    m.setSrc(src);
    m.setSize(n);
    m.initStream().setDevice(0);
    Reply r = c.call(msg, nullptr, 0, out.data(), n);
    EXPECT_TRUE(r.status) << r.status.message();
    return out;
  }
  static void ping(Connection& c) {
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Request>().setPing();
    EXPECT_TRUE(c.call(msg).status);
  }
  test::TempDir dir_;
  int certs_;
  test::ServerProcess server_;
};

// The server acknowledges a stream of asynchronous calls every kAckEveryBytes
// of them (frames and bulk), not only every kAckEveryRequests: the client's
// copies for a replay stay within that much once the server has caught up,
// however large the calls.
TEST_F(PinnedCopy, AStreamOfCopiesIsAcknowledgedEveryMegabyte) {
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_GT(c->welcome().resume_grace_ms, 0u);
  constexpr uint64_t kPiece = 32 * 1024;
  const uint64_t dev = deviceAlloc(*c, kPiece);
  std::vector<uint8_t> piece(kPiece, 0x42);
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(upload(*c, dev, piece.data(), kPiece, false));  // 8 MiB, copied
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (c->keptBytes() >= server::kAckEveryBytes && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_LT(c->keptBytes(), server::kAckEveryBytes) << "256 copies: far fewer than kAckEveryRequests";
}

TEST_F(PinnedCopy, APinnedPayloadIsKeptByPointerAndAPageableOneIsCopied) {
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_GT(c->welcome().resume_grace_ms, 0u);  // a real server grants resume: requests are kept
  const uint64_t n = 256 * 1024;  // below the size the client holds instead of copying
  const uint64_t dev = deviceAlloc(*c, 2 * n);
  std::vector<uint8_t> pageable(n, 0x5a), pinned(n);
  for (uint64_t i = 0; i < n; ++i) pinned[i] = static_cast<uint8_t>(i * 7);
  ping(*c);
  EXPECT_EQ(c->keptBytes(), 0u);

  ASSERT_TRUE(upload(*c, dev, pageable.data(), n, false));
  EXPECT_GE(c->keptBytes(), n);  // the bytes, copied for a replay
  ping(*c);                      // its reply acknowledges everything before it
  EXPECT_EQ(c->keptBytes(), 0u);

  ASSERT_TRUE(upload(*c, dev + n, pinned.data(), n, true));
  EXPECT_GT(c->keptBytes(), 0u);    // the request's frame
  EXPECT_LT(c->keptBytes(), 1024u);  // and no copy of its bytes
  // cudaFreeHost's wait: returns once no unacknowledged copy reads the range.
  c->waitForWritesInto(pinned.data(), n);
  EXPECT_EQ(c->keptBytes(), 0u);

  std::vector<uint8_t> both = download(*c, dev, 2 * n);
  EXPECT_EQ(std::memcmp(both.data(), pageable.data(), n), 0);
  EXPECT_EQ(std::memcmp(both.data() + n, pinned.data(), n), 0);
  c->close();
}

}  // namespace
}  // namespace rgpu::client
