// The worker's session logic over real TLS, driven frame by frame: the
// protocol paths and every kind of bad input a peer can send.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() : certs_((makeCerts(dir_.path()), 0)), server_(dir_.path(), "[limits]\nmax_streams = 8\n") {}
  RawClient client(const std::string& cert = "alice") { return RawClient(server_.connect(cert)); }
  RawClient authed(const std::string& cert = "alice") { return authedClient(server_, cert); }
  TempDir dir_;
  int certs_;
  InProcessServer server_;
};

TEST_F(SessionTest, CertificateUserIsWelcomedWithDevices) {
  RawClient c = client("alice");
  auto [err, msg] = c.hello();
  EXPECT_EQ(err, 0) << msg;
}

TEST_F(SessionTest, TokenUserIsWelcomed) {
  RawClient c = client("");
  auto [err, msg] = c.hello("bob-token");
  EXPECT_EQ(err, 0) << msg;
}

TEST_F(SessionTest, UnauthenticatedClientIsRefusedWithAReason) {
  RawClient c = client("");
  auto [err, msg] = c.hello();
  EXPECT_EQ(err, err::kNotPermitted);
  EXPECT_NE(msg.find("authentication failed"), std::string::npos) << msg;
  RawClient d = client("");
  auto [err2, msg2] = d.hello("wrong-token");
  EXPECT_EQ(err2, err::kNotPermitted);
  EXPECT_NE(msg2.find("token matches no user"), std::string::npos) << msg2;
}

TEST_F(SessionTest, CertificateNotInTheUserTableIsRefused) {
  // "bob" has a valid certificate but is only known by token.
  RawClient c = client("bob");
  auto [err, msg] = c.hello();
  EXPECT_EQ(err, err::kNotPermitted);
  EXPECT_NE(msg.find("'bob' is not a known user"), std::string::npos) << msg;
}

TEST_F(SessionTest, OtherProtocolVersionIsRefusedInTheWelcome) {
  RawClient c = client("alice");
  capnp::MallocMessageBuilder msg;
  auto h = msg.initRoot<wire::Hello>();
  h.setProtocolVersion(wire::PROTOCOL_VERSION + 1);
  std::vector<uint8_t> f;
  common::appendFrame(f, protocol::FrameType::kHello, 0, 0, msg, 0);
  ASSERT_TRUE(c.writeRaw(f.data(), f.size()));
  common::FrameReader reader(c.conn());
  protocol::FrameHeader hdr;
  kj::ArrayPtr<const capnp::word> words;
  ASSERT_TRUE(reader.next(hdr, words));
  capnp::FlatArrayMessageReader r(words, common::readerOptions());
  auto w = r.getRoot<wire::Welcome>();
  EXPECT_EQ(w.getError(), err::kInsufficientDriver);
  EXPECT_NE(std::string(w.getMessage()).find("protocol version"), std::string::npos);
}

TEST_F(SessionTest, FirstFrameMustBeAHello) {
  RawClient c = client("alice");
  capnp::MallocMessageBuilder msg;
  msg.initRoot<wire::Request>().setPing();
  c.send(msg);
  EXPECT_EQ(c.next().error, -1);  // closed without serving the call
}

TEST_F(SessionTest, CopiesRoundTripThroughDeviceMemory) {
  RawClient c = authed();
  uint64_t p = c.malloc(4096);
  ASSERT_NE(p, 0u);
  std::vector<uint8_t> data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  c.write(p, data);
  RawReply r = c.readBack(p, 4096);
  ASSERT_EQ(r.error, 0) << r.message;
  EXPECT_EQ(r.bulk, data);
}

TEST_F(SessionTest, SizesPastTheAllocationAreRefused) {
  RawClient c = authed();
  uint64_t p = c.malloc(100);
  RawReply r = c.readBack(p, 101);
  EXPECT_EQ(r.error, err::kInvalidValue);
  EXPECT_NE(r.message.find("runs past the end"), std::string::npos) << r.message;
  r = c.readBack(p + 50, 51);
  EXPECT_EQ(r.error, err::kInvalidValue);
  EXPECT_EQ(c.ping().error, 0);  // the session goes on
}

TEST_F(SessionTest, ForeignPointersAreRefused) {
  RawClient a = authed("alice");
  RawClient b = authed("alice");
  uint64_t pa = a.malloc(64);
  a.write(pa, std::vector<uint8_t>(64, 0x5a));
  EXPECT_EQ(a.ping().error, 0);
  // Session b names session a's pointer (a valid address in a's worker).
  RawReply r = b.readBack(pa, 64);
  EXPECT_EQ(r.error, err::kInvalidValue);
  EXPECT_NE(r.message.find("not inside an allocation of this session"), std::string::npos) << r.message;
  // And a's data is untouched.
  r = a.readBack(pa, 64);
  ASSERT_EQ(r.error, 0);
  EXPECT_EQ(r.bulk, std::vector<uint8_t>(64, 0x5a));
}

TEST_F(SessionTest, FreedPointersAreRefused) {
  RawClient c = authed();
  uint64_t p = c.malloc(64);
  capnp::MallocMessageBuilder msg;
  msg.initRoot<wire::Request>().initFree().setPtr(p);
  c.send(msg);
  EXPECT_EQ(c.next().error, 0);
  EXPECT_EQ(c.readBack(p, 8).error, err::kInvalidValue);
  c.send(msg);  // double free
  EXPECT_EQ(c.next().error, err::kInvalidValue);
}

TEST_F(SessionTest, AsynchronousErrorsSurfaceAtTheNextSynchronousCall) {
  RawClient c = authed();
  c.write(0xdead0000, std::vector<uint8_t>(16, 1), /*async=*/true);  // no reply for async calls
  RawReply r = c.ping();
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(r.async_error, err::kInvalidValue);
  EXPECT_NE(r.message.find("not inside an allocation"), std::string::npos) << r.message;
  EXPECT_EQ(c.ping().async_error, 0);  // reported once
}

TEST_F(SessionTest, UnknownHandlesAreRefused) {
  RawClient c = authed();
  capnp::MallocMessageBuilder m1;
  auto ss = m1.initRoot<wire::Request>().initStreamSynchronize();
  ss.setId(12345);
  c.send(m1);
  EXPECT_EQ(c.next().error, err::kInvalidResourceHandle);
  capnp::MallocMessageBuilder m2;
  m2.initRoot<wire::Request>().initEventSynchronize().setId(77);
  c.send(m2);
  EXPECT_EQ(c.next().error, err::kInvalidResourceHandle);
  capnp::MallocMessageBuilder m3;
  auto lk = m3.initRoot<wire::Request>().initLaunchKernel();
  lk.setFunction(5);
  lk.initStream();
  c.send(m3);
  EXPECT_EQ(c.next().error, err::kInvalidDeviceFunction);
  capnp::MallocMessageBuilder m4;
  m4.initRoot<wire::Request>().initMalloc().setDevice(9);
  c.send(m4);
  EXPECT_EQ(c.next().error, err::kInvalidDevice);
}

TEST_F(SessionTest, UnknownCallIsRefusedAndTheSessionContinues) {
  RawClient c = authed();
  capnp::MallocMessageBuilder msg;
  msg.initRoot<wire::Request>().setPing();
  std::vector<uint8_t> f;
  common::appendFrame(f, protocol::FrameType::kRequest, 0, c.takeSeq(), msg, 0);
  // The union discriminant is the root struct's first data field: make it a
  // call from a newer protocol revision.
  size_t root = protocol::kFrameHeaderBytes + 8;  // after the one-segment table
  uint64_t ptr;
  std::memcpy(&ptr, f.data() + root, 8);
  size_t data_at = root + 8 + static_cast<size_t>((ptr >> 2) & 0x3fffffff) * 8;
  uint16_t which = 999;
  std::memcpy(f.data() + data_at, &which, 2);
  ASSERT_TRUE(c.writeRaw(f.data(), f.size()));
  RawReply r = c.next();
  EXPECT_EQ(r.error, err::kNotSupported);
  EXPECT_NE(r.message.find("not supported by this server"), std::string::npos) << r.message;
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(SessionTest, AReplayedRequestEndsTheSessionNamingItsSequenceNumber) {
  RawClient c = authed();
  EXPECT_EQ(c.ping().error, 0);  // request 1
  c.setNextSeq(1);               // the same frame again
  RawReply r = c.ping();
  EXPECT_TRUE(r.goodbye);
  EXPECT_NE(r.message.find("request sequence number 1 where 2 was due (a replayed or reordered frame)"),
            std::string::npos)
      << r.message;
  EXPECT_EQ(authed().ping().error, 0);  // other sessions go on
}

TEST_F(SessionTest, ASkippedSequenceNumberEndsTheSession) {
  RawClient c = authed();
  c.setNextSeq(7);
  RawReply r = c.ping();
  EXPECT_TRUE(r.goodbye);
  EXPECT_NE(r.message.find("request sequence number 7 where 1 was due"), std::string::npos) << r.message;
}

TEST_F(SessionTest, OversizedCopyIsRefusedBeforeAllocating) {
  RawClient c = authed();
  uint64_t p = c.malloc(64);
  RawReply r = c.readBack(p, protocol::kMaxBulkBytes + 1);
  EXPECT_EQ(r.error, err::kInvalidValue);
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(SessionTest, WrongMagicEndsOnlyThatSession) {
  RawClient good = authed();
  RawClient bad = authed();
  char junk[64];
  std::memset(junk, 'x', sizeof junk);
  ASSERT_TRUE(bad.writeRaw(junk, sizeof junk));
  RawReply r = bad.next();
  EXPECT_TRUE(r.goodbye);
  EXPECT_NE(r.message.find("bad frame magic"), std::string::npos) << r.message;
  EXPECT_EQ(good.ping().error, 0);
}

TEST_F(SessionTest, TruncatedFrameEndsOnlyThatSession) {
  RawClient good = authed();
  {
    RawClient bad = authed();
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Request>().setPing();
    std::vector<uint8_t> f;
    common::appendFrame(f, protocol::FrameType::kRequest, 0, 1, msg, 0);
    ASSERT_TRUE(bad.writeRaw(f.data(), f.size() - 5));
  }  // connection closes mid-frame
  EXPECT_EQ(good.ping().error, 0);
}

TEST_F(SessionTest, BulkLengthThatDisagreesWithTheCallEndsTheSession) {
  RawClient c = authed();
  uint64_t p = c.malloc(64);
  capnp::MallocMessageBuilder msg;
  auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
  m.setDst(p);
  m.setSize(64);
  m.initStream();
  c.send(msg, true, std::vector<uint8_t>(32, 1));  // says 64, carries 32
  RawReply r = c.next();
  EXPECT_TRUE(r.goodbye || r.error == -1);
}

TEST_F(SessionTest, ClientSilentAfterConnectIsDroppedAfterTheHandshakeTimeout) {
  RawClient c = client();
  // No Hello: the worker gives up after handshake_timeout_ms (2 s in tests).
  RawReply r = c.next();
  EXPECT_EQ(r.error, -1);
}

TEST_F(SessionTest, HostFunctionBlocksItsStreamUntilTheClientAnswers) {
  RawClient c = authed();
  capnp::MallocMessageBuilder m1;
  auto sc = m1.initRoot<wire::Request>().initStreamCreate();
  sc.initStream().setId(4);
  c.send(m1, true);
  capnp::MallocMessageBuilder m2;
  auto hf = m2.initRoot<wire::Request>().initHostFuncEnqueue();
  hf.setId(1);
  hf.initStream().setId(4);
  c.send(m2, true);
  RawReply ready = c.next();
  ASSERT_EQ(ready.type, protocol::FrameType::kNotify);
  // Meanwhile other calls are served: the host function only holds stream 4.
  EXPECT_EQ(c.ping().error, 0);
  capnp::MallocMessageBuilder m3;
  m3.initRoot<wire::Request>().initStreamQuery().setId(4);
  c.send(m3);
  EXPECT_EQ(c.next().error, err::kNotReady);
  capnp::MallocMessageBuilder m4;
  m4.initRoot<wire::Request>().initHostFuncDone().setId(1);
  c.send(m4, true);
  capnp::MallocMessageBuilder m5;
  m5.initRoot<wire::Request>().initStreamSynchronize().setId(4);
  c.send(m5);
  EXPECT_EQ(c.next().error, 0);
}

TEST_F(SessionTest, StreamLimitIsEnforced) {
  RawClient c = authed();
  uint32_t limit = server_.config().limits.max_streams;
  for (uint32_t i = 1; i <= limit; ++i) {
    capnp::MallocMessageBuilder m;
    m.initRoot<wire::Request>().initStreamCreate().initStream().setId(i);
    c.send(m, true);
  }
  capnp::MallocMessageBuilder m;
  m.initRoot<wire::Request>().initStreamCreate().initStream().setId(limit + 1);
  c.send(m);
  RawReply r = c.next();
  EXPECT_EQ(r.error, err::kLaunchOutOfResources);
  EXPECT_NE(r.message.find("max_streams"), std::string::npos) << r.message;
}

TEST_F(SessionTest, MalformedFatbinIsRefusedAndTheSessionContinues) {
  RawClient c = authed();
  capnp::MallocMessageBuilder msg;
  auto ml = msg.initRoot<wire::Request>().initModuleLoad();
  ml.setId(64);
  c.send(msg, false, std::vector<uint8_t>(500, 0x42));
  RawReply r = c.next();
  EXPECT_EQ(r.error, err::kInvalidKernelImage);
  EXPECT_NE(r.message.find("invalid fatbin"), std::string::npos) << r.message;
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(SessionTest, AStreamIsIdleOnceTheClientHasTheReplyOfTheCopyItWaitedFor) {
  // Found under ASan: the reply of a device-to-host copy left before its
  // stream counted the copy done, so a query right after it could say
  // "not ready" for a stream that implicitly waits for the legacy stream.
  RawClient c = authed();
  uint64_t p = c.malloc(64);
  capnp::MallocMessageBuilder create;
  create.initRoot<wire::Request>().initStreamCreate().initStream().setId(1);  // blocking: waits for stream 0
  c.send(create, true);
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(c.readBack(p, 64).error, 0);  // on the legacy stream
    capnp::MallocMessageBuilder q;
    q.initRoot<wire::Request>().initStreamQuery().setId(1);
    c.send(q);
    RawReply r = c.next();
    ASSERT_EQ(r.error, 0) << "iteration " << i << ": " << r.message;
  }
}

}  // namespace
}  // namespace rgpu::test
