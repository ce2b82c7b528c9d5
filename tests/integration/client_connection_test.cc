// The client's Connection against real servers: authentication, threading,
// asynchronous error reporting, and a server that goes away.
#include "client/connection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
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
  // A connection that runs host functions as the runtime does: `ran(id)`,
  // then their end goes back at once (postNow).
  Result<std::unique_ptr<Connection>> openWithHostFuncs(std::function<void(uint64_t)> ran) {
    auto conn = std::make_shared<Connection*>(nullptr);
    auto c = Connection::open(config(), [ran = std::move(ran), conn](uint64_t id) {
      ran(id);
      capnp::MallocMessageBuilder msg;
      msg.initRoot<wire::Request>().initHostFuncDone().setId(id);
      (void)(*conn)->postNow(msg);
    });
    if (c) *conn = c->get();
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
  // The host function "runs" until the test releases it.
  auto c = openWithHostFuncs([&](uint64_t) { released.wait(); });
  ASSERT_TRUE(c) << c.status().message();
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

// Back-to-back synchronous calls: each caller reads its own reply (the read
// role, client/connection.h), no other thread woken between reply and caller.
TEST_F(ClientConnection, ASynchronousCallerReadsItsOwnReply) {
  auto c = Connection::open(config(), nullptr);
  ASSERT_TRUE(c) << c.status().message();
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) {
    capnp::MallocMessageBuilder ping;
    ping.initRoot<wire::Request>().setPing();
    ASSERT_TRUE((*c)->call(ping).status);
  }
  // The receiver may hold the role when a call begins (say, reading what
  // arrived after the handshake); then that call's reply comes through it.
  EXPECT_GE((*c)->callerReads(), static_cast<uint64_t>(kCalls / 2));
  EXPECT_LE((*c)->callerReads(), static_cast<uint64_t>(kCalls));
}

// Synchronous calls of many threads at once, each with reply data of its own:
// whichever thread holds the read role delivers the others' replies (data
// straight into each caller's buffer), and each thread gets its own bytes.
TEST_F(ClientConnection, ManySynchronousCallersEachGetTheirOwnBytes) {
  auto c = Connection::open(config(), nullptr);
  ASSERT_TRUE(c) << c.status().message();
  constexpr int kThreads = 6, kRounds = 150;
  constexpr uint64_t kBytes = 4096;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      capnp::MallocMessageBuilder mm;
      mm.initRoot<wire::Request>().initMalloc().setSize(kBytes);
      Reply mr = (*c)->call(mm);
      ASSERT_TRUE(mr.status) << mr.status.message();
      const uint64_t ptr = mr.reader().getPtr();
      std::vector<uint8_t> in(kBytes), out(kBytes);
      for (int i = 0; i < kRounds; ++i) {
        for (uint64_t k = 0; k < kBytes; ++k) in[k] = static_cast<uint8_t>(t * 31 + i * 7 + k);
        capnp::MallocMessageBuilder up;
        auto h = up.initRoot<wire::Request>().initMemcpyHtoD();
        h.setDst(ptr);
        h.setSize(kBytes);
        h.initStream();
        ASSERT_TRUE((*c)->call(up, in.data(), kBytes).status);
        capnp::MallocMessageBuilder down;
        auto d = down.initRoot<wire::Request>().initMemcpyDtoH();
        d.setSrc(ptr);
        d.setSize(kBytes);
        d.initStream();
        Reply r = (*c)->call(down, nullptr, 0, out.data(), kBytes);
        ASSERT_TRUE(r.status) << r.status.message();
        if (out != in) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// After a caller read its own reply the receiver stays out of the way only
// briefly: a notification that comes while no call waits still arrives.
TEST_F(ClientConnection, ANotificationArrivesWhileNoCallWaits) {
  std::promise<uint64_t> ran;
  auto c = openWithHostFuncs([&](uint64_t id) { ran.set_value(id); });
  ASSERT_TRUE(c) << c.status().message();
  capnp::MallocMessageBuilder ping;
  ping.initRoot<wire::Request>().setPing();
  ASSERT_TRUE((*c)->call(ping).status);  // read by this thread: the receiver parks
  capnp::MallocMessageBuilder msg;
  msg.initRoot<wire::Request>().initStreamCreate().initStream().setId(5);
  ASSERT_TRUE((*c)->post(msg));
  capnp::MallocMessageBuilder hf;
  auto h = hf.initRoot<wire::Request>().initHostFuncEnqueue();
  h.setId(77);
  h.initStream().setId(5);
  ASSERT_TRUE((*c)->post(hf));
  auto f = ran.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(f.get(), 77u);
}

// A stream of asynchronous calls goes out in few writes: after each write the
// flusher naps (Connection::kFlusherNap) while the next batch gathers, and
// the posting thread does not wake it. So it writes at most once per nap,
// besides batches that filled kNapWakeBytes. (Before the nap it wrote
// whenever it found calls: every few calls, 1,000s of writes here.)
TEST_F(ClientConnection, AStreamOfAsynchronousCallsIsWrittenAtMostOncePerNap) {
  auto c = Connection::open(config(), nullptr);
  ASSERT_TRUE(c) << c.status().message();
  capnp::MallocMessageBuilder noop;
  noop.initRoot<wire::Request>().setNoop();
  const uint64_t frame_bytes = common::frameBytes(noop);
  using Clock = std::chrono::steady_clock;
  const uint64_t before = (*c)->flusherWrites();
  const auto t0 = Clock::now();
  uint64_t calls = 0;
  // 30 ms of calls, 10 us apart (as a program's launches
  // between bits of host work): the flusher always finds some.
  while (Clock::now() - t0 < std::chrono::milliseconds(30)) {
    ASSERT_TRUE((*c)->post(noop));
    ++calls;
    for (auto t = Clock::now(); Clock::now() - t < std::chrono::microseconds(10);) {
    }
  }
  capnp::MallocMessageBuilder ping;
  ping.initRoot<wire::Request>().setPing();
  ASSERT_TRUE((*c)->call(ping).status);  // writes what is left itself
  const auto elapsed = Clock::now() - t0;
  const uint64_t writes = (*c)->flusherWrites() - before;
  const uint64_t naps = static_cast<uint64_t>(elapsed / Connection::kFlusherNap);
  const uint64_t full = calls * frame_bytes / Connection::kNapWakeBytes;
  EXPECT_LE(writes, 2 + naps + full) << calls << " calls in " << std::chrono::duration<double, std::micro>(elapsed).count()
                                     << " us";
}

// A call that finds the flusher asleep rings it awake and marks it woken, so
// the calls after it, from any thread, do not ring again before it has run:
// at most one ring per sleep. (Without the mark, every call between the ring
// and the flusher's coming back rang again: several rings per sleep here,
// each a system call on a posting thread.)
TEST_F(ClientConnection, TheFlusherIsRungAtMostOncePerSleep) {
  auto c = Connection::open(config(), nullptr);
  ASSERT_TRUE(c) << c.status().message();
  capnp::MallocMessageBuilder noop;
  noop.initRoot<wire::Request>().setNoop();
  const uint64_t rings0 = (*c)->flusherRings(), sleeps0 = (*c)->flusherSleeps();
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      // Bursts with gaps far longer than a nap: a burst often finds the
      // flusher asleep, and its own later calls (and other threads') meet it
      // there before it has run.
      for (int burst = 0; burst < 50; ++burst) {
        for (int i = 0; i < 8; ++i)
          if (!(*c)->post(noop)) failed = true;
        std::this_thread::sleep_for(Connection::kFlusherNap * 20);
      }
    });
  for (auto& t : threads) t.join();
  ASSERT_FALSE(failed.load());
  capnp::MallocMessageBuilder ping;
  ping.initRoot<wire::Request>().setPing();
  ASSERT_TRUE((*c)->call(ping).status);
  const uint64_t rings = (*c)->flusherRings() - rings0, sleeps = (*c)->flusherSleeps() - sleeps0;
  EXPECT_GT(rings, 0u) << "the bursts found the flusher asleep";
  EXPECT_LE(rings, sleeps);
}

// Calls posted while the flusher naps reach the server when the nap ends,
// without a synchronous call to carry them (a host function's notification
// comes back by itself).
TEST_F(ClientConnection, CallsPostedDuringTheFlushersNapAreWrittenWhenItEnds) {
  std::promise<uint64_t> ran;
  auto c = openWithHostFuncs([&](uint64_t id) { ran.set_value(id); });
  ASSERT_TRUE(c) << c.status().message();
  capnp::MallocMessageBuilder msg;
  msg.initRoot<wire::Request>().initStreamCreate().initStream().setId(5);
  const uint64_t before = (*c)->flusherWrites();
  ASSERT_TRUE((*c)->post(msg));
  // The flusher wrote it and naps now (or soon): the next call only joins
  // the batch.
  while ((*c)->flusherWrites() == before) std::this_thread::yield();
  capnp::MallocMessageBuilder hf;
  auto h = hf.initRoot<wire::Request>().initHostFuncEnqueue();
  h.setId(78);
  h.initStream().setId(5);
  ASSERT_TRUE((*c)->post(hf));
  auto f = ran.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(f.get(), 78u);
  EXPECT_GE((*c)->flusherWrites(), before + 2);
}

// A host function's end (which its stream waits for) goes out with
// postNow(), written by the thread that ends it, not after a flusher's nap:
// through a chain of host functions the flusher writes only acknowledgements
// (one per 16 notifications), where with post() it wrote every end.
TEST_F(ClientConnection, AHostFunctionsEndIsWrittenAtOnceByItsThread) {
  constexpr uint64_t kChain = 64;
  std::promise<void> all_ran;
  std::atomic<uint64_t> ran{0};
  auto c = openWithHostFuncs([&](uint64_t) {
    if (++ran == kChain) all_ran.set_value();
  });
  ASSERT_TRUE(c) << c.status().message();
  capnp::MallocMessageBuilder sc;
  sc.initRoot<wire::Request>().initStreamCreate().initStream().setId(5);
  ASSERT_TRUE((*c)->post(sc));
  for (uint64_t i = 1; i <= kChain; ++i) {
    capnp::MallocMessageBuilder hf;
    auto h = hf.initRoot<wire::Request>().initHostFuncEnqueue();
    h.setId(100 + i);
    h.initStream().setId(5);
    ASSERT_TRUE((*c)->post(hf));
  }
  capnp::MallocMessageBuilder ping;
  ping.initRoot<wire::Request>().setPing();
  ASSERT_TRUE((*c)->call(ping).status);  // every request is on the wire now
  const uint64_t before = (*c)->flusherWrites();
  auto f = all_ran.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  capnp::MallocMessageBuilder sync;
  sync.initRoot<wire::Request>().initStreamSynchronize().setId(5);
  ASSERT_TRUE((*c)->call(sync).status);
  EXPECT_LE((*c)->flusherWrites() - before, kChain / 16 + 2);
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
