// A protocol-level client for integration tests: writes frames by hand, so
// tests can send what a real client never would.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "common/frame_io.h"
#include "protocol/rgpu.capnp.h"
#include "tests/support/test_env.h"

namespace rgpu::test {

struct RawReply {
  protocol::FrameType type{};
  int error = -1;
  int async_error = 0;
  std::string message;
  uint64_t ptr = 0;
  uint64_t symbol = 0;  // a symbol's address
  int64_t value = 0;    // occupancy, query results, conditional handles
  std::vector<uint8_t> bulk;
  bool goodbye = false;
  uint8_t flags = 0;  // the frame header's (protocol/frame.h)
};

struct RawWelcome {
  int error = -1;
  std::string message;
  uint64_t session = 0;
  std::string resume_token;
  std::string resume_id;
  uint32_t grace_ms = 0;
  bool resumed = false;
  uint64_t dispatched = 0;
  uint32_t max_stripes = 0, generation = 0, stripe = 0;
};

class RawClient {
 public:
  explicit RawClient(std::unique_ptr<common::TlsConnection> c) : conn_(std::move(c)), reader_(*conn_) {}

  // Sends Hello; returns the Welcome's error (0 = accepted) and message.
  std::pair<int, std::string> hello(const std::string& token = "") {
    capnp::MallocMessageBuilder msg;
    auto h = msg.initRoot<wire::Hello>();
    h.setProtocolVersion(wire::PROTOCOL_VERSION);
    h.setToken(token);
    proveKey(h);
    std::vector<uint8_t> f;
    common::appendFrame(f, protocol::FrameType::kHello, 0, 0, msg, 0);
    if (!conn_->write(f.data(), f.size())) return {-1, "write failed"};
    protocol::FrameHeader hdr;
    kj::ArrayPtr<const capnp::word> words;
    Status s = reader_.next(hdr, words);
    if (!s) return {-1, s.message()};
    capnp::FlatArrayMessageReader r(words, common::readerOptions());
    auto w = r.getRoot<wire::Welcome>();
    return {w.getError(), w.getMessage()};
  }

  // What the client library adds to a Hello when it presented a certificate.
  void proveKey(wire::Hello::Builder& h) {
    if (auto proof = common::proveClientKey(*conn_))
      h.setCertProof(kj::arrayPtr(reinterpret_cast<const kj::byte*>(proof->data()), proof->size()));
  }

  // Sends a Hello that `fill` completes; returns the Welcome.
  RawWelcome helloWith(const std::function<void(wire::Hello::Builder&)>& fill) {
    capnp::MallocMessageBuilder msg;
    auto h = msg.initRoot<wire::Hello>();
    h.setProtocolVersion(wire::PROTOCOL_VERSION);
    proveKey(h);
    fill(h);
    std::vector<uint8_t> f;
    common::appendFrame(f, protocol::FrameType::kHello, 0, 0, msg, 0);
    RawWelcome out;
    if (!conn_->write(f.data(), f.size())) return out;
    protocol::FrameHeader hdr;
    kj::ArrayPtr<const capnp::word> words;
    Status s = reader_.next(hdr, words);
    if (!s) {
      out.message = s.message();
      return out;
    }
    capnp::FlatArrayMessageReader r(words, common::readerOptions());
    auto w = r.getRoot<wire::Welcome>();
    out.error = w.getError();
    out.message = w.getMessage();
    out.session = w.getSessionId();
    auto t = w.getResumeToken();
    out.resume_token.assign(reinterpret_cast<const char*>(t.begin()), t.size());
    auto id = w.getResumeId();
    out.resume_id.assign(reinterpret_cast<const char*>(id.begin()), id.size());
    out.grace_ms = w.getResumeGraceMs();
    out.resumed = w.getResumed();
    out.dispatched = w.getDispatched();
    out.max_stripes = w.getMaxStripes();
    out.generation = w.getGeneration();
    out.stripe = w.getStripe();
    return out;
  }
  void setNextSeq(uint64_t seq) { next_seq_ = seq; }

  uint64_t send(capnp::MessageBuilder& msg, bool async = false, const std::vector<uint8_t>& bulk = {}) {
    std::vector<uint8_t> f;
    uint64_t seq = next_seq_++;
    common::appendFrame(f, protocol::FrameType::kRequest, async ? protocol::kFlagAsync : 0, seq, msg, bulk.size());
    f.insert(f.end(), bulk.begin(), bulk.end());
    EXPECT_TRUE(conn_->write(f.data(), f.size()));
    return seq;
  }
  Status writeRaw(const void* p, size_t n) { return conn_->write(p, n); }
  // The sequence number the next request must carry (for frames built by hand).
  uint64_t takeSeq() { return next_seq_++; }

  // Reads the next frame; a transport failure gives error -1.
  RawReply next() {
    RawReply out;
    protocol::FrameHeader h;
    kj::ArrayPtr<const capnp::word> words;
    Status s = reader_.next(h, words);
    if (!s) {
      out.message = s.message();
      return out;
    }
    out.type = h.type;
    out.flags = h.flags;
    capnp::FlatArrayMessageReader r(words, common::readerOptions());
    if (h.type == protocol::FrameType::kAck) return out;
    if (h.type == protocol::FrameType::kNotify) {
      auto n = r.getRoot<wire::Notify>();
      out.goodbye = n.isGoodbye();
      if (out.goodbye) out.message = n.getGoodbye();
      return out;
    }
    auto rep = r.getRoot<wire::Reply>();
    out.error = rep.getError();
    out.async_error = rep.getAsyncError();
    out.message = rep.getMessage();
    if (rep.isPtr()) out.ptr = rep.getPtr();
    if (rep.isValue()) out.value = rep.getValue();
    if (rep.isSymbol()) out.symbol = rep.getSymbol().getAddress();
    out.bulk.resize(h.bulk_len);
    if (h.bulk_len) {
      EXPECT_TRUE(reader_.readBulk(h, out.bulk.data()));
    }
    return out;
  }

  // Convenience calls.
  uint64_t malloc(uint64_t size, int device = 0) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMalloc();
    m.setDevice(device);
    m.setSize(size);
    send(msg);
    RawReply r = next();
    EXPECT_EQ(r.error, 0) << r.message;
    return r.ptr;
  }
  RawReply readBack(uint64_t src, uint64_t size) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMemcpyDtoH();
    m.setSrc(src);
    m.setSize(size);
    m.initStream();
    send(msg);
    return next();
  }
  void write(uint64_t dst, const std::vector<uint8_t>& data, bool async = true) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
    m.setDst(dst);
    m.setSize(data.size());
    m.initStream();
    send(msg, async, data);
  }
  RawReply ping() {
    capnp::MallocMessageBuilder msg;
    msg.initRoot<wire::Request>().setPing();
    send(msg);
    return next();
  }
  // Sends `fill`'s request synchronously; its reply.
  template <typename F>
  RawReply call(F fill, const std::vector<uint8_t>& bulk = {}) {
    capnp::MallocMessageBuilder msg;
    fill(msg.initRoot<wire::Request>());
    send(msg, false, bulk);
    return next();
  }
  common::TlsConnection& conn() { return *conn_; }
  // The connection, for use without this client (which must not read again).
  std::unique_ptr<common::TlsConnection> release() { return std::move(conn_); }
  // Striped payloads' pieces come from `stripes` (common/stripes.h).
  void setStripes(common::Stripes* stripes) { reader_.setStripes(stripes); }
  // Tells the server this client reads stripe `index` (Ack.stripeReady) and
  // holds the replies to requests <= `replies`.
  void stripeReady(uint32_t index, uint64_t replies) {
    capnp::MallocMessageBuilder msg(64);
    auto a = msg.initRoot<wire::Ack>();
    a.setStripeReady(index);
    a.setReplies(replies);
    std::vector<uint8_t> f;
    common::appendFrame(f, protocol::FrameType::kAck, 0, 0, msg, 0);
    EXPECT_TRUE(conn_->write(f.data(), f.size()));
  }

 private:
  std::unique_ptr<common::TlsConnection> conn_;
  common::FrameReader reader_;
  uint64_t next_seq_ = 1;
};

// A client of `server` that said Hello and was welcomed as `cert`'s user.
inline RawClient authedClient(InProcessServer& server, const std::string& cert = "alice") {
  RawClient c(server.connect(cert));
  auto [err, msg] = c.hello();
  EXPECT_EQ(err, 0) << msg;
  return c;
}

// The test tree's PTX-only build of tests/data/kernels.cu (runs on the sim and the fake driver).
inline std::vector<uint8_t> testFatbin() {
  std::string f = readFile(std::string(RGPU_TEST_DATA_DIR) + "/kernels_ptxonly.fatbin");
  return std::vector<uint8_t>(f.begin(), f.end());
}

}  // namespace rgpu::test
