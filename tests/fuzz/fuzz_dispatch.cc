// Fuzz target: request decoding and dispatch into a live session. Each input
// is a sequence of requests (tests/fuzz/dispatch_input.h) that the harness
// frames with valid headers and sequence numbers and feeds, after a valid
// Hello, to a real Session — the worker's code, a SimBackend with its PTX
// interpreter, the pool's admission and quota accounting — over a socket pair
// in plaintext. Requests run in lockstep: a synchronous one waits for its
// reply (host functions the server asks for are answered), so pointers from
// earlier cudaMalloc replies can be relocated into later requests. Host
// functions the input marks held block their streams for a while
// (dispatch_input.h), so frees and unloads race work queued behind them.
//
// The session must answer or end on every input, never crash, leak, touch
// memory it does not own or hang: an input the session takes longer than
// kHangSeconds to answer aborts the process (a hang is a finding too).
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/frame_io.h"
#include "common/log.h"
#include "common/sanitizers.h"
#include "common/tls.h"
#include "protocol/rgpu.capnp.h"
#include "server/daemon/backend_factory.h"
#include "server/pool/pool_link.h"
#include "server/pool/pool_manager.h"
#include "server/session/session.h"
#include "tests/fuzz/dispatch_input.h"

namespace {

using namespace rgpu;
// ThreadSanitizer runs some host-side math far slower (cuRAND's MT19937
// jump-ahead, once per process: 0.1 s here, about 260 s under TSan), which is
// not a hang.
constexpr int kHangSeconds = RGPU_TSAN ? 600 : 20;

// Small limits, so that mutations reach them quickly.
server::ServerConfig fuzzConfig() {
  server::ServerConfig c;
  c.insecure_plaintext = true;
  c.resume_grace_ms = 0;
  c.handshake_timeout_ms = 2000;
  server::UserEntry u;
  u.name = "fuzz";
  u.token = "fuzz-token";
  u.memory_quota = 48ull << 20;
  c.users.push_back(u);
  server::SimDeviceConfig d;
  d.name = "fuzz device";
  d.memory = 64ull << 20;
  d.sm_count = 2;
  c.sim_devices = {d, d};  // two, for peer copies
  c.limits.max_allocations = 64;
  c.limits.max_streams = 8;
  c.limits.max_events = 16;
  c.limits.max_modules = 4;
  c.limits.max_functions = 64;
  c.limits.max_pending_host_funcs = 16;
  c.limits.kernel_timeout_ms = 200;
  c.pool.admission_timeout_ms = 1000;
  return c;
}

struct Harness {
  Harness() {
    const char* level = std::getenv("RGPU_FUZZ_LOG");  // e.g. "debug" to see what the session says
    common::initLogging("fuzz_dispatch", level ? level : "off");
    pool = std::make_shared<server::PoolManager>(server::simInventory(cfg), cfg.users, cfg.pool);
  }
  server::ServerConfig cfg = fuzzConfig();
  // shared_ptr: the manager and its lock outlive every session's LocalPool, as in the daemon.
  std::shared_ptr<server::PoolManager> pool;
  std::shared_ptr<std::mutex> pool_mu = std::make_shared<std::mutex>();
  std::unique_ptr<common::TlsContext> server_ctx = common::TlsContext::makePlaintext(true);
  std::unique_ptr<common::TlsContext> client_ctx = common::TlsContext::makePlaintext(false);
  uint64_t next_session = 1;
};

// Aborts the process when an input takes longer than kHangSeconds.
class HangWatch {
 public:
  HangWatch() : t_([this] {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(kHangSeconds), [&] { return done_; })) {
      std::fprintf(stderr, "fuzz_dispatch: the session did not answer within %d s: a hang\n", kHangSeconds);
      std::abort();
    }
  }) {}
  ~HangWatch() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread t_;
};

// The client side: the fuzzer's thread sends, a reader thread drains every
// frame the session writes (so the session never blocks on a full socket),
// collects replies and queues the host functions the session asks to run; the
// sending thread answers those before it sends anything else or while it waits.
class Client {
 public:
  explicit Client(common::TlsConnection& conn) : conn_(conn), reader_(conn) {}
  ~Client() {
    conn_.shutdown();
    if (reading_.joinable()) reading_.join();
  }

  bool hello() {
    capnp::MallocMessageBuilder msg;
    auto h = msg.initRoot<wire::Hello>();
    h.setProtocolVersion(wire::PROTOCOL_VERSION);
    h.setToken("fuzz-token");
    h.setHostname("fuzz");
    std::vector<uint8_t> f;
    common::appendFrame(f, protocol::FrameType::kHello, 0, 0, msg, 0);
    if (!conn_.write(f.data(), f.size())) return false;
    protocol::FrameHeader hdr;
    kj::ArrayPtr<const capnp::word> words;
    if (!reader_.next(hdr, words)) return false;
    capnp::FlatArrayMessageReader r(words, common::readerOptions());
    if (r.getRoot<wire::Welcome>().getError() != 0) return false;
    reading_ = std::thread([this] { readLoop(); });
    return true;
  }

  // Frames and sends one record's request; waits for its reply when it is
  // synchronous. False once the session has ended.
  bool send(uint8_t flags, std::vector<uint64_t>& message, const uint8_t* bulk, uint64_t bulk_len) {
    if (flags & fuzz::kReleaseHeld) releaseHeld();
    if (!answerHostFunctions()) return false;
    relocate(message);
    protocol::FrameHeader h;
    h.type = protocol::FrameType::kRequest;
    h.flags = static_cast<uint8_t>(((flags & 1) ? protocol::kFlagAsync : 0) | ((flags & 2) ? protocol::kFlagBulkLz4 : 0));
    h.message_len = static_cast<uint32_t>(message.size() * 8);
    h.seq = next_seq_++;
    h.bulk_len = (flags & 2) ? decodedLength(bulk, bulk_len) : bulk_len;
    uint8_t head[protocol::kFrameHeaderBytes];
    protocol::encodeHeader(h, head);
    iovec v[3] = {{head, sizeof head}, {message.data(), message.size() * 8}, {const_cast<uint8_t*>(bulk), bulk_len}};
    if (!conn_.writeAll(v, bulk_len ? 3 : 2)) return false;
    // lz4 blocks that decode to less than bulk_len make the session wait for
    // bytes this client never sends (as a real peer's would): from here on
    // the input only streams, it no longer waits for replies.
    if (flags & 2) lockstep_ = false;
    if ((flags & 1) || !lockstep_) return true;
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return ended_ || replied_ >= h.seq || !host_functions_.empty() || !held_.empty(); });
      if (replied_ >= h.seq || !held_.empty()) return true;  // (a held stream may be what it waits for)
      if (ended_) return false;
      lock.unlock();
      if (!answerHostFunctions()) return false;
      lock.lock();
    }
  }

  // The held host functions run now (their streams go on).
  void releaseHeld() {
    std::lock_guard lock(mu_);
    host_functions_.insert(host_functions_.end(), held_.begin(), held_.end());
    held_.clear();
  }
  bool finish(bool release) {
    if (release) releaseHeld();
    return answerHostFunctions();
  }

 private:
  // What lz4 bulk blocks (u32 raw_len | u32 stored_len | stored bytes) claim to
  // decode to: the header's bulk length for them.
  static uint64_t decodedLength(const uint8_t* p, uint64_t n) {
    uint64_t total = 0;
    for (uint64_t at = 0; at + 8 <= n;) {
      uint32_t raw, stored;
      std::memcpy(&raw, p + at, 4);
      std::memcpy(&stored, p + at + 4, 4);
      total += raw;
      at += 8 + uint64_t{stored};
    }
    return std::min<uint64_t>(total, protocol::kMaxBulkBytes);
  }

  // Words tagged as pointers become addresses inside this session's allocations.
  void relocate(std::vector<uint64_t>& message) {
    std::lock_guard lock(mu_);
    if (allocations_.empty()) return;
    for (uint64_t& w : message)
      if ((w & fuzz::kRelocMask) == fuzz::kRelocTag)
        w = allocations_[((w >> 16) & 0xff) % allocations_.size()] + (w & 0xffff);
  }

  void readLoop() {
    for (;;) {
      protocol::FrameHeader h;
      kj::ArrayPtr<const capnp::word> words;
      bool ok = static_cast<bool>(reader_.next(h, words));
      if (ok) {
        try {
          capnp::FlatArrayMessageReader r(words, common::readerOptions());
          std::lock_guard lock(mu_);
          if (h.type == protocol::FrameType::kNotify) {
            auto n = r.getRoot<wire::Notify>();
            if (n.isGoodbye()) ok = false;
            if (n.isHostFuncReady()) {
              uint64_t id = n.getHostFuncReady();
              (id & fuzz::kHeldHostFunction ? held_ : host_functions_).push_back(id);
            }
          } else if (h.type == protocol::FrameType::kReply) {
            auto rep = r.getRoot<wire::Reply>();
            if (rep.getError() == 0 && rep.isPtr() && allocations_.size() < 256) allocations_.push_back(rep.getPtr());
            if (rep.getError() == 0 && rep.isSymbol() && allocations_.size() < 256)
              allocations_.push_back(rep.getSymbol().getAddress());
            // A conditional handle (the sim's are device addresses; counts and small values are not).
            if (rep.getError() == 0 && rep.isValue() && rep.getValue() > (1 << 20) && allocations_.size() < 256)
              allocations_.push_back(static_cast<uint64_t>(rep.getValue()));
            replied_ = std::max(replied_, h.seq);
          }
        } catch (const kj::Exception&) {
          ok = false;  // the server never sends malformed messages
        }
      }
      if (ok && h.bulk_len) ok = static_cast<bool>(reader_.skipBulk(h));
      if (!ok) {
        std::lock_guard lock(mu_);
        ended_ = true;
        cv_.notify_all();
        return;
      }
      cv_.notify_all();
    }
  }

  bool answerHostFunctions() {
    std::vector<uint64_t> ids;
    {
      std::lock_guard lock(mu_);
      ids.swap(host_functions_);
    }
    for (uint64_t id : ids) {
      capnp::MallocMessageBuilder msg;
      msg.initRoot<wire::Request>().initHostFuncDone().setId(id);
      std::vector<uint8_t> f;
      common::appendFrame(f, protocol::FrameType::kRequest, protocol::kFlagAsync, next_seq_++, msg, 0);
      if (!conn_.write(f.data(), f.size())) return false;
    }
    return true;
  }

  common::TlsConnection& conn_;
  common::FrameReader reader_;
  uint64_t next_seq_ = 1;  // the sending thread's
  bool lockstep_ = true;
  std::thread reading_;
  std::mutex mu_;  // guards what the reader thread shares
  std::condition_variable cv_;
  std::vector<uint64_t> allocations_;
  std::vector<uint64_t> host_functions_;
  std::vector<uint64_t> held_;  // kHeldHostFunction ids, not answered yet
  uint64_t replied_ = 0;
  bool ended_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* harness = new Harness();  // lives for the process, as libFuzzer expects
  Harness& H = *harness;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  auto server_conn = common::TlsConnection::accept(*H.server_ctx, sv[0], std::chrono::seconds(1));
  auto client_conn = common::TlsConnection::accept(*H.client_ctx, sv[1], std::chrono::seconds(1));
  if (!server_conn || !client_conn) std::abort();
  HangWatch watch;
  uint64_t id = H.next_session++;
  server::LocalPool link(H.pool, H.pool_mu, id);
  const server::ServerConfig& cfg = H.cfg;
  server::Session session(
      std::move(*server_conn), cfg, [&cfg](const server::Placement& p) { return server::makeBackend(cfg, p.devices); },
      link, id);
  std::thread served([&] { (void)session.run(); });
  {
    Client client(**client_conn);
    if (client.hello()) {
      size_t at = 0;
      std::vector<uint64_t> message;
      while (at + 7 <= size) {
        uint8_t flags = data[at];
        uint16_t mlen;
        uint32_t blen;
        std::memcpy(&mlen, data + at + 1, 2);
        std::memcpy(&blen, data + at + 3, 4);
        at += 7;
        size_t m = std::min<size_t>(mlen, size - at) / 8 * 8;
        message.assign(m / 8, 0);
        if (m) std::memcpy(message.data(), data + at, m);
        at += m;
        size_t b = std::min<size_t>(blen, size - at);
        if (!client.send(flags, message, data + at, b)) break;
        at += b;
      }
      (void)client.finish(size % 2 == 0);
    }
    (*client_conn)->close();  // the client leaves; the session ends
  }  // (the reader thread ends with the connection)
  served.join();
  return 0;
}
