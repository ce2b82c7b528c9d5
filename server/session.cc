#include "server/session.h"

#include <capnp/serialize.h>
#include <kj/exception.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>

#include "common/log.h"
#include "protocol/frame.h"
#include "server/fd_passing.h"

namespace rgpu::server {

using protocol::FrameHeader;
using protocol::FrameType;

// Reusable buffers for incoming bulk data. Large host buffers are expensive to
// fault in fresh (first touch is slower than the TLS link), so they are kept.
class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  static constexpr uint64_t kMaxIdleBytes = 256ull << 20;

  Staging acquire(uint64_t size) {
    std::unique_ptr<std::vector<uint8_t>> buf;
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i]->capacity() >= size && free_[i]->capacity() <= 4 * size + (1 << 20)) {
          buf = std::move(free_[i]);
          free_.erase(free_.begin() + static_cast<long>(i));
          idle_ -= buf->capacity();
          break;
        }
      }
    }
    if (!buf) buf = std::make_unique<std::vector<uint8_t>>();
    buf->resize(size);
    std::weak_ptr<StagingPool> weak = weak_from_this();
    return Staging(buf.release(), [weak](std::vector<uint8_t>* b) {
      if (auto pool = weak.lock()) pool->giveBack(b);
      else delete b;
    });
  }

 private:
  void giveBack(std::vector<uint8_t>* b) {
    std::lock_guard lock(mu_);
    if (idle_ + b->capacity() > kMaxIdleBytes) {
      delete b;
      return;
    }
    idle_ += b->capacity();
    free_.emplace_back(b);
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> free_;
  uint64_t idle_ = 0;
};

namespace {

bool constantTimeEquals(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Device memory is accounted in cudaMalloc's 256-byte granules.
uint64_t chargedBytes(uint64_t size) { return (size + 255) / 256 * 256; }

common::Compression compressionOf(const ServerConfig& cfg) {
  auto c = common::parseCompression(cfg.compression);
  return c ? *c : common::Compression::kOff;
}

// Reads the first frame of a connection, which must be a Hello, within
// `timeout_ms`: a client that connects and stays silent must not hold a
// worker (or its resume thread) forever. The message is copied out of the
// reader, which does not outlive this call.
Status readHello(common::TlsConnection& conn, int timeout_ms, uint64_t session_id, FrameHeader& h,
                 kj::Array<capnp::word>& out) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done; })) {
      RGPU_LOG_WARN("session {}: no Hello from {} within {} ms, closing", session_id, conn.peerAddress(), timeout_ms);
      conn.shutdown();
    }
  });
  common::FrameReader reader(conn, 0);
  kj::ArrayPtr<const capnp::word> msg;
  Status s = reader.next(h, msg);
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  if (!s) return s;
  if (h.type != FrameType::kHello) return Status(err::kInvalidValue, "first frame is not a Hello");
  out = kj::heapArray<capnp::word>(msg.size());
  std::memcpy(out.begin(), msg.begin(), msg.size() * sizeof(capnp::word));
  return Status::ok();
}

std::string hexPtr(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Session::Session(std::unique_ptr<common::TlsConnection> conn, const ServerConfig& cfg, BackendFactory make_backend,
                 PoolLink& pool, uint64_t session_id, ResumeSource resume)
    : outbox_(std::move(conn), compressionOf(cfg)),
      cfg_(cfg),
      make_backend_(std::move(make_backend)),
      pool_(pool),
      session_id_(session_id),
      staging_(std::make_shared<StagingPool>()),
      allocs_(cfg.limits.max_allocations),
      resume_source_(resume) {}

void Session::attachBackend(std::unique_ptr<Backend> backend) {
  backend_ = std::move(backend);
  backend_->setAsyncErrorSink([this](Status s) { recordAsyncError(s); });
  backend_->setFatalSink([this](Status s) {
    wedged_.store(true);
    stop(s.message(), s.code());
  });
  backend_->setOutputSink([this](std::string text) {
    sendNotify([&](wire::Notify::Builder& n) {
      n.setOutput(kj::arrayPtr(reinterpret_cast<const kj::byte*>(text.data()), text.size()));
    });
  });
}

Session::~Session() {
  {
    std::lock_guard lock(host_mu_);
    closing_ = true;
  }
  host_cv_.notify_all();
  stopResumeThread();
  outbox_.close();
  outbox_.connection()->shutdown();
  // The backend's threads call back into this session and into the backend
  // through backend_: stop them while backend_ still names it.
  if (backend_) backend_->stopThreads();
  backend_.reset();
}

void Session::stopResumeThread() {
  if (resume_thread_.joinable()) {
    uint64_t one = 1;
    [[maybe_unused]] auto w = ::write(resume_stop_fd_, &one, sizeof one);
    resume_thread_.join();
    ::close(resume_stop_fd_);
    resume_stop_fd_ = -1;
  }
  // Closed, so the daemon can no longer hand us a connection: it gives a late
  // resume attempt to a fresh worker, which says the session is gone.
  if (resume_source_.fd >= 0) {
    ::close(resume_source_.fd);
    resume_source_.fd = -1;
  }
}

Status Session::run() {
  Status s = handshake();
  if (!s) {
    RGPU_LOG_WARN("session {} from {}: {}", session_id_, outbox_.connection()->peerAddress(), s.message());
    return s;
  }
  RGPU_LOG_INFO("session {} started: user '{}' from {}{}", session_id_, identity_, outbox_.connection()->peerAddress(),
                resume_ ? " (resumable)" : "");
  if (resume_) {
    resume_stop_fd_ = eventfd(0, EFD_CLOEXEC);
    resume_thread_ = std::thread([this] { acceptResumes(); });
  }
  s = serve();
  stopResumeThread();
  outbox_.close();  // backend threads waiting for the client's acknowledgement return
  reportUsage(true);
  {
    std::lock_guard lock(host_mu_);
    closing_ = true;
  }
  host_cv_.notify_all();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  RGPU_LOG_INFO("session {} ended ({} allocations released, worker peak RSS {} MiB): {}", session_id_, allocs_.count(),
                usage.ru_maxrss / 1024, s ? "client left" : s.message());
  return s;
}

std::string Session::authenticate(const common::TlsConnection& conn, const std::string& token) const {
  std::string cn = conn.peerCommonName();
  for (auto& u : cfg_.users)
    if ((!cn.empty() && !u.cert_cn.empty() && u.cert_cn == cn) ||
        (!token.empty() && !u.token.empty() && constantTimeEquals(u.token, token)))
      return u.name;
  return cfg_.allow_anonymous ? "anonymous" : "";
}

Status Session::handshake() {
  auto conn = outbox_.connection();
  FrameHeader h;
  kj::Array<capnp::word> msg;
  Status s = readHello(*conn, cfg_.handshake_timeout_ms, session_id_, h, msg);
  if (!s) return s;

  capnp::MallocMessageBuilder out;
  auto welcome = out.initRoot<wire::Welcome>();
  welcome.setProtocolVersion(wire::PROTOCOL_VERSION);
  welcome.setServerVersion(RGPU_VERSION);
  welcome.setSessionId(session_id_);
  auto reject = [&](int code, const std::string& why) {
    welcome.setError(code);
    welcome.setMessage(why);
    std::vector<uint8_t> frame;
    common::appendFrame(frame, FrameType::kWelcome, 0, h.seq, out, 0);
    (void)outbox_.sendOnce(frame);
    return Status(code, why);
  };
  try {
    capnp::FlatArrayMessageReader r(msg, common::readerOptions());
    auto hello = r.getRoot<wire::Hello>();
    if (hello.getProtocolVersion() != wire::PROTOCOL_VERSION)
      return reject(err::kInsufficientDriver, "protocol version " + std::to_string(hello.getProtocolVersion()) +
                                                  " not supported (server speaks " +
                                                  std::to_string(wire::PROTOCOL_VERSION) + ")");
    std::string token = hello.getToken();
    identity_ = authenticate(*conn, token);
    if (identity_.empty()) {
      std::string cn = conn->peerCommonName();
      std::string why = "authentication failed: ";
      why += cn.empty() ? "no client certificate" : "certificate CN '" + cn + "' is not a known user";
      why += token.empty() ? " and no token" : " and the token matches no user";
      RGPU_LOG_WARN("session {}: rejected client {} (pid {} on '{}'): {}", session_id_, conn->peerAddress(),
                    hello.getPid(), std::string(hello.getHostname()), why);
      return reject(err::kNotPermitted, why);
    }
    if (hello.hasResumeToken() && hello.getResumeToken().size() > 0) {
      // The daemon found no live session of that number and gave the
      // connection to a fresh worker: the session is gone for good.
      std::string why = "session " + std::to_string(hello.getResumeSession()) +
                        " cannot be resumed: it has ended (a session waits [session] resume_grace_ms = " +
                        std::to_string(cfg_.resume_grace_ms) + " ms for its client) or never existed on this server";
      RGPU_LOG_WARN("session {}: client {} (user '{}'): {}", session_id_, conn->peerAddress(), identity_, why);
      return reject(err::kDevicesUnavailable, why);
    }
    welcome.setIdentity(identity_);
    if (hello.getMonitor()) {
      monitor_ = true;
    } else {
      ClientInfo who{identity_, hello.getHostname(), conn->peerAddress(), hello.getPid()};
      DeviceRequest want;
      if (hello.hasRequest()) {
        auto r = hello.getRequest();
        want.count = r.getCount();
        want.min_memory = r.getMinMemory();
        want.min_cc = r.getMinComputeCapability();
        want.model = r.getModel();
        want.wait_ms = r.getWaitMs();
      }
      auto placed = pool_.admit(who, want);
      if (!placed) return reject(placed.status().code(), placed.status().message());
      auto backend = make_backend_(*placed);
      if (!backend) return reject(backend.status().code(), backend.status().message());
      placement_ = *placed;
      attachBackend(std::move(*backend));
      gate_ = pool_.gateFor(placement_);
      if (gate_) backend_->setLaunchGate(gate_.get());
      std::string devs;
      for (int d : placement_.devices) devs += (devs.empty() ? "" : ",") + std::to_string(d);
      RGPU_LOG_INFO("session {}: user '{}' placed on device(s) {} (priority {}, quota {})", session_id_, identity_,
                    devs, priorityName(placement_.priority),
                    placement_.quota ? formatBytes(placement_.quota) + " per device" : std::string("none"));
    }
    resume_ = !monitor_ && hello.getResume() && cfg_.resume_grace_ms > 0 && resume_source_.fd >= 0 &&
              resume_source_.tls;
    uint8_t token_bytes[16];
    RAND_bytes(token_bytes, sizeof token_bytes);
    resume_token_.assign(reinterpret_cast<const char*>(token_bytes), sizeof token_bytes);
    welcome.setResumeToken(kj::arrayPtr(token_bytes, sizeof token_bytes));
    welcome.setResumeGraceMs(resume_ ? cfg_.resume_grace_ms : 0);
    welcome.setBackend(monitor_ ? "monitor" : backend_->name());
    welcome.setDriverVersion(monitor_ ? 0 : backend_->driverVersion());
    auto limits = welcome.initLimits();
    limits.setMaxBulkBytes(protocol::kMaxBulkBytes);
    limits.setMaxMessageBytes(protocol::kMaxMessageBytes);
    limits.setMaxParamBytes(protocol::kMaxParamBytes);
    static const std::vector<DeviceDescription> kNone;
    const auto& devs = monitor_ ? kNone : backend_->devices();
    auto list = welcome.initDevices(static_cast<unsigned>(devs.size()));
    for (size_t i = 0; i < devs.size(); ++i) {
      auto d = list[static_cast<unsigned>(i)];
      d.setName(devs[i].name);
      d.setTotalMem(devs[i].total_mem);
      d.setMajor(devs[i].major);
      d.setMinor(devs[i].minor);
      d.setMultiProcessorCount(devs[i].sm_count);
      d.setUuid(kj::arrayPtr(reinterpret_cast<const kj::byte*>(devs[i].uuid.data()), devs[i].uuid.size()));
      d.setProp(kj::arrayPtr(reinterpret_cast<const kj::byte*>(devs[i].prop.data()), devs[i].prop.size()));
      d.setPeerAccess(monitor_ ? 0 : backend_->peerAccess(static_cast<int>(i)));
      auto attrs = d.initAttributes(static_cast<unsigned>(devs[i].attributes.size()));
      for (size_t a = 0; a < devs[i].attributes.size(); ++a) attrs.set(static_cast<unsigned>(a), devs[i].attributes[a]);
    }
  } catch (const kj::Exception& e) {
    return reject(err::kInvalidValue, std::string("malformed Hello: ") + e.getDescription().cStr());
  }
  // Retention starts before the first reply can be sent.
  if (resume_) outbox_.retainUntilAcknowledged();
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kWelcome, 0, h.seq, out, 0);
  return outbox_.sendOnce(frame);
}

void Session::stop(const std::string& why, int code) {
  stopped_.store(true);
  {
    std::lock_guard lock(resume_mu_);
  }
  resume_cv_.notify_all();
  RGPU_LOG_INFO("session {}: stopping: {}", session_id_, why);
  sendNotify([&](wire::Notify::Builder& n) {
    n.setGoodbye(why);
    n.setGoodbyeError(code);
  });
  outbox_.connection()->shutdown();
}

Status Session::serve() {
  for (;;) {
    auto conn = outbox_.connection();
    Status s = serveConnection(*conn);
    if (stopped_.load()) return Status::ok();
    if (s || fatal_ || !resume_) return s;
    if (outbox_.lostFrames()) {
      RGPU_LOG_WARN("session {}: connection lost ({}) and more than {} of unacknowledged replies were dropped: "
                    "the session cannot be resumed",
                    session_id_, s.message(), formatBytes(kMaxRetainedBytes));
      return s;
    }
    RGPU_TRY(awaitResume(s));
  }
}

Status Session::serveConnection(common::TlsConnection& conn) {
  dispatch_thread_ = std::this_thread::get_id();
  common::FrameReader reader(conn);
  // A transport failure, a goodbye, or (without resume) the client leaving.
  auto ended = [&](const Status& s) -> Status {
    if (bye_ || conn.closedCleanly()) return Status::ok();
    if (resume_) return s;
    bool left = s.message().find("closed by") != std::string::npos || s.message().find("dropped by") != std::string::npos;
    if (!left && conn.isOpen()) {
      RGPU_LOG_WARN("session {}: {}", session_id_, s.message());
      // Tell the peer why before hanging up (best effort).
      sendNotify([&](wire::Notify::Builder& n) { n.setGoodbye(s.message()); });
    }
    return left ? Status::ok() : s;
  };
  // A protocol violation: tell the client and end the session for good.
  auto violation = [&](const Status& s) -> Status {
    fatal_ = true;
    RGPU_LOG_WARN("session {}: {}", session_id_, s.message());
    sendNotify([&](wire::Notify::Builder& n) { n.setGoodbye(s.message()); });
    return s;
  };
  for (;;) {
    FrameHeader h;
    kj::ArrayPtr<const capnp::word> msg;
    Status s = reader.next(h, msg);
    if (!s) return s.code() == err::kDevicesUnavailable ? ended(s) : violation(s);
    if (h.type == FrameType::kAck) {
      if (h.bulk_len) return violation(Status(err::kInvalidValue, "acknowledgement with a bulk payload"));
      try {
        capnp::FlatArrayMessageReader r(msg, common::readerOptions());
        auto a = r.getRoot<wire::Ack>();
        if (a.getBye()) bye_ = true;
        outbox_.acknowledged(a.getReplies(), a.getNotifications());
      } catch (const kj::Exception& e) {
        return violation(Status(err::kInvalidValue, std::string("malformed acknowledgement: ") + e.getDescription().cStr()));
      }
      continue;
    }
    if (h.type != FrameType::kRequest)
      return violation(Status(err::kInvalidValue, "protocol error: unexpected frame type " +
                                                      std::to_string(static_cast<int>(h.type))));
    if (h.seq != next_seq_)
      return violation(Status(err::kInvalidValue, "protocol error: request sequence number " + std::to_string(h.seq) +
                                                      " where " + std::to_string(next_seq_) +
                                                      " was due (a replayed or reordered frame)"));
    reader_ = &reader;
    try {
      capnp::FlatArrayMessageReader r(msg, common::readerOptions());
      Status d = dispatch(h, r.getRoot<wire::Request>());
      if (!d) return d.code() == err::kDevicesUnavailable ? ended(d) : violation(d);
    } catch (const kj::Exception& e) {
      std::string why = std::string("malformed request: ") + e.getDescription().cStr();
      // The bulk (if any) was not consumed: the stream position is lost.
      if (h.bulk_len) return violation(Status(err::kInvalidValue, why));
      RGPU_LOG_WARN("session {}: {}", session_id_, why);
      finish(h, Status(err::kInvalidValue, why));
    }
    ++next_seq_;
    if (resume_ && (++unacked_requests_ >= kAckEveryRequests || (unacked_bulk_ += h.bulk_len) >= kAckEveryBulkBytes)) {
      // The client keeps every request until told it was carried out.
      unacked_requests_ = unacked_bulk_ = 0;
      capnp::MallocMessageBuilder a(64);
      a.initRoot<wire::Ack>().setDispatched(h.seq);
      std::vector<uint8_t> frame;
      common::appendFrame(frame, FrameType::kAck, 0, 0, a, 0);
      (void)outbox_.sendOnce(frame);
    }
  }
}

Status Session::awaitResume(const Status& why) {
  auto lost_at = std::chrono::steady_clock::now();
  RGPU_LOG_WARN("session {}: connection lost ({}); keeping the session {} ms for the client to resume", session_id_,
                why.message(), cfg_.resume_grace_ms);
  Pending p;
  {
    std::unique_lock lock(resume_mu_);
    bool woken = resume_cv_.wait_for(lock, std::chrono::milliseconds(cfg_.resume_grace_ms),
                                     [&] { return pending_.conn != nullptr || stopped_.load() || resume_closed_; });
    if (stopped_.load()) return Status::ok();
    if (!pending_.conn && resume_closed_) {
      RGPU_LOG_INFO("session {}: rgpu-server is shutting down: no resume; ending the session", session_id_);
      return Status(err::kDevicesUnavailable, "rgpu-server is shutting down (" + why.message() + ")");
    }
    if (!woken) {
      RGPU_LOG_WARN("session {}: the client did not resume within {} ms; ending the session and freeing its memory",
                    session_id_, cfg_.resume_grace_ms);
      return Status(err::kDevicesUnavailable, "the client did not resume within [session] resume_grace_ms = " +
                                                  std::to_string(cfg_.resume_grace_ms) + " ms (" + why.message() + ")");
    }
    p.conn = std::move(pending_.conn);
    p.replies = pending_.replies;
    p.notifications = pending_.notifications;
  }
  capnp::MallocMessageBuilder out;
  auto w = out.initRoot<wire::Welcome>();
  w.setProtocolVersion(wire::PROTOCOL_VERSION);
  w.setServerVersion(RGPU_VERSION);
  w.setSessionId(session_id_);
  w.setIdentity(identity_);
  w.setResumed(true);
  w.setDispatched(next_seq_ - 1);
  w.setResumeGraceMs(cfg_.resume_grace_ms);
  w.setResumeToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(resume_token_.data()), resume_token_.size()));
  if (backend_) {
    w.setBackend(backend_->name());
    w.setDriverVersion(backend_->driverVersion());
  }
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kWelcome, 0, 0, out, 0);
  std::string peer = p.conn->peerAddress();
  auto resent = outbox_.resume(std::move(p.conn), frame, p.replies, p.notifications);
  unacked_requests_ = unacked_bulk_ = 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - lost_at).count();
  if (!resent) {
    RGPU_LOG_WARN("session {}: resumed connection from {} failed at once: {}", session_id_, peer, resent.status().message());
  } else {
    RGPU_LOG_INFO("session {}: resumed by {} after {} ms: requests up to {} were carried out, {} reply/notification "
                  "frame(s) resent",
                  session_id_, peer, ms, next_seq_ - 1, *resent);
  }
  return Status::ok();
}

void Session::acceptResumes() {
  // The daemon is draining or gone: no client can come back.
  auto daemonGone = [&] {
    {
      std::lock_guard lock(resume_mu_);
      resume_closed_ = true;
    }
    resume_cv_.notify_all();
  };
  for (;;) {
    pollfd p[2] = {{resume_source_.fd, POLLIN, 0}, {resume_stop_fd_, POLLIN, 0}};
    int rc = ::poll(p, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || p[1].revents) return;
    int fd = receiveFd(resume_source_.fd);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return daemonGone();
    }
    auto conn = common::TlsConnection::accept(*resume_source_.tls, fd, std::chrono::milliseconds(cfg_.handshake_timeout_ms));
    if (!conn) {
      RGPU_LOG_WARN("session {}: resume attempt: {}", session_id_, conn.status().message());
      continue;
    }
    FrameHeader h;
    kj::Array<capnp::word> msg;
    if (Status s = readHello(**conn, cfg_.handshake_timeout_ms, session_id_, h, msg); !s) {
      RGPU_LOG_WARN("session {}: resume attempt from {}: {}", session_id_, (*conn)->peerAddress(), s.message());
      continue;
    }
    std::string why;
    uint64_t replies = 0, notifications = 0;
    try {
      capnp::FlatArrayMessageReader r(msg, common::readerOptions());
      auto hello = r.getRoot<wire::Hello>();
      auto token = hello.getResumeToken();
      std::string given(reinterpret_cast<const char*>(token.begin()), token.size());
      std::string user = authenticate(**conn, hello.getToken());
      if (hello.getProtocolVersion() != wire::PROTOCOL_VERSION) why = "protocol version differs";
      else if (hello.getResumeSession() != session_id_) why = "it names session " + std::to_string(hello.getResumeSession());
      else if (!constantTimeEquals(given, resume_token_)) why = "wrong resume token";
      else if (user != identity_) why = user.empty() ? "authentication failed" : "user '" + user + "' does not own the session";
      replies = hello.getReceived().getReplies();
      notifications = hello.getReceived().getNotifications();
    } catch (const kj::Exception& e) {
      why = std::string("malformed Hello: ") + e.getDescription().cStr();
    }
    if (!why.empty()) {
      RGPU_LOG_WARN("session {}: resume attempt from {} refused: {}", session_id_, (*conn)->peerAddress(), why);
      capnp::MallocMessageBuilder out;
      auto w = out.initRoot<wire::Welcome>();
      w.setError(err::kNotPermitted);
      w.setMessage("resume refused: " + why);
      std::vector<uint8_t> frame;
      common::appendFrame(frame, FrameType::kWelcome, 0, h.seq, out, 0);
      (void)(*conn)->write(frame.data(), frame.size());
      continue;
    }
    // The old connection may still look open (a half-dead link): shut it, so
    // the dispatch thread moves to the new one.
    auto old = outbox_.connection();
    {
      std::lock_guard lock(resume_mu_);
      pending_.conn = std::move(*conn);
      pending_.replies = replies;
      pending_.notifications = notifications;
    }
    resume_cv_.notify_all();
    old->shutdown();
  }
}

Status Session::consumeBulk(const FrameHeader& h, uint64_t expected, Staging* into) {
  if (h.bulk_len != expected) {
    // The frame's lengths disagree: we cannot trust where the next frame starts.
    return Status(err::kInvalidValue, "bulk length " + std::to_string(h.bulk_len) + " does not match the call's size " +
                                          std::to_string(expected));
  }
  if (!into) return reader_->skipBulk(h);
  *into = staging_->acquire(expected);
  return reader_->readBulk(h, (*into)->data());
}


void Session::reportUsage(bool force) {
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_usage_report_ < std::chrono::milliseconds(250)) return;
  last_usage_report_ = now;
  SessionUsage u;
  u.calls = calls_.load(std::memory_order_relaxed);
  u.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  u.bytes_out = bytes_out_.load(std::memory_order_relaxed);
  u.errors = errors_.load(std::memory_order_relaxed);
  u.gpu_ns = backend_ ? backend_->gpuTimeNs() : 0;
  pool_.usage(u);
}

void Session::recordAsyncError(const Status& s) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  bool sticky = err::isSticky(s.code());
  if (sticky) RGPU_LOG_WARN("session {}: {}", session_id_, s.message());
  else RGPU_LOG_DEBUG("session {}: asynchronous error {}: {}", session_id_, s.code(), s.message());
  std::lock_guard lock(async_mu_);
  if (async_error_.isOk()) async_error_ = s;
  if (sticky && sticky_.isOk()) {
    sticky_ = s;
    has_sticky_.store(true, std::memory_order_release);
  }
}

void Session::finish(const FrameHeader& h, const Status& s, const Fill& fill) {
  if (h.flags & protocol::kFlagAsync) {
    if (!s) recordAsyncError(s);
    return;
  }
  sendReply(h.seq, s, fill);
}

void Session::sendReply(uint64_t seq, const Status& status, const Fill& fill, const uint8_t* bulk, uint64_t bulk_len,
                        const OnWire& on_wire) {
  capnp::MallocMessageBuilder out(256);
  auto r = out.initRoot<wire::Reply>();
  Status s = status;
  bool fault = false;
  {
    std::lock_guard lock(async_mu_);
    if (!sticky_.isOk() && s) s = sticky_;
    if (!s && err::isSticky(s.code()) && sticky_.isOk()) {
      // A fault the backend reported directly (not through the async sink): sticky all the same.
      sticky_ = s;
      has_sticky_.store(true, std::memory_order_release);
    }
    fault = !sticky_.isOk();
    r.setError(err::isBlasStatus(s.code()) ? err::blasCudaError(s.code()) : s.code());
    if (err::isBlasStatus(s.code())) r.setBlasStatus(s.code() - err::kBlasStatusBase);
    if (!s) r.setMessage(s.message());
    if (!async_error_.isOk()) {
      int a = async_error_.code();
      r.setAsyncError(err::isBlasStatus(a) ? err::blasCudaError(a) : a);
      if (s) r.setMessage(async_error_.message());
      async_error_ = Status::ok();
    }
  }
  if (fault && backend_ && !fault_output_flushed_.exchange(true)) backend_->flushOutput();
  if (fill && s) fill(r);
  if (!s) {
    bulk_len = 0;
    errors_.fetch_add(1, std::memory_order_relaxed);
  }
  bytes_out_.fetch_add(bulk_len, std::memory_order_relaxed);
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kReply, 0, seq, out, bulk_len);
  outbox_.reply(seq, frame, bulk, bulk_len, std::this_thread::get_id() != dispatch_thread_, on_wire);
}

void Session::sendNotify(const std::function<void(wire::Notify::Builder&)>& fill) {
  capnp::MallocMessageBuilder out(128);
  auto n = out.initRoot<wire::Notify>();
  fill(n);
  outbox_.notify(out);
}

void Session::forgetModule(uint32_t id) {
  for (auto it = vars_.begin(); it != vars_.end();) {
    if (it->second.module != id) {
      ++it;
      continue;
    }
    if (it->second.addr) allocs_.forget(it->second.addr);
    it = vars_.erase(it);
  }
  // Its kernels go with it.
  std::erase_if(functions_, [id](const auto& f) { return f.second.module == id; });
  modules_.erase(id);
  module_errors_.erase(id);
}

Status Session::usableFunction(uint32_t id) const {
  auto f = functions_.find(id);
  return f == functions_.end() ? Status(err::kInvalidDeviceFunction, "unknown function") : f->second.unusable;
}

Status Session::checkDevice(int device) const {
  if (device < 0 || static_cast<size_t>(device) >= backend_->devices().size())
    return Status(err::kInvalidDevice, "invalid device ordinal " + std::to_string(device));
  return Status::ok();
}

Status Session::checkStream(wire::StreamRef::Reader s, StreamKey& key) const {
  key.id = s.getId();
  key.device = s.getDevice();
  if (key.id == 0) return checkDevice(key.device);
  auto it = streams_.find(key.id);
  if (it == streams_.end()) return Status(err::kInvalidResourceHandle, "unknown stream handle " + std::to_string(key.id));
  key.device = it->second;
  return Status::ok();
}

Status Session::dispatch(const FrameHeader& h, wire::Request::Reader req) {
  using R = wire::Request;
  const uint64_t seq = h.seq;
  const auto& L = cfg_.limits;
  // Requests that carry bulk bytes must consume them whatever the outcome.
  auto bulkNotExpected = [&]() -> Status {
    if (h.bulk_len) return Status(err::kInvalidValue, "unexpected bulk payload");
    return Status::ok();
  };
  // A kernel or a variable may be registered: its module exists and the session has room.
  auto canRegister = [&](uint64_t module) -> Status {
    if (!modules_.count(module)) return Status(err::kInvalidResourceHandle, "unknown module");
    if (functions_.size() + vars_.size() >= L.max_functions)
      return Status(err::kLaunchOutOfResources, "session limit of kernels and variables reached (max_functions = " +
                                                    std::to_string(L.max_functions) + ")");
    return Status::ok();
  };
  // A copy to the device: a synchronous one (cudaMemcpy) is answered once the
  // copy is done, with any error of the work before it, as NVIDIA's returns.
  auto finishCopyIn = [&](StreamKey key, Status s) {
    if (s && !(h.flags & protocol::kFlagAsync)) {
      s = backend_->whenStreamDone(key, [this, seq](Status st) { sendReply(seq, st, nullptr); });
      if (s) return;
    }
    finish(h, s);
  };
  uint64_t calls = calls_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(h.bulk_len, std::memory_order_relaxed);
  if (calls < 64 || (calls & 63) == 0) reportUsage(false);  // keeps the clock read off most calls
  if (monitor_ && req.which() != R::POOL_STATUS && req.which() != R::PING && req.which() != R::NOOP) {
    if (h.bulk_len) RGPU_TRY(reader_->skipBulk(h));
    finish(h, Status(err::kNotPermitted, "a monitor session (rgpu-smi) only asks for the pool status"));
    return Status::ok();
  }
  if (has_sticky_.load(std::memory_order_acquire) && req.which() != R::HOST_FUNC_DONE) {
    // After a kernel fault the session only answers with that fault
    // (sendReply substitutes it).
    if (h.bulk_len) RGPU_TRY(reader_->skipBulk(h));
    if (!(h.flags & protocol::kFlagAsync)) sendReply(seq, Status::ok(), nullptr);
    return Status::ok();
  }
  switch (req.which()) {
    case R::NOOP:
    case R::PING:
      RGPU_TRY(bulkNotExpected());
      finish(h, Status::ok());
      return Status::ok();

    case R::MALLOC: {
      auto m = req.getMalloc();
      Status s = checkDevice(m.getDevice());
      bool pitched = m.getPitchHeight() > 0;
      uint64_t w = m.getPitchWidth(), rows = m.getPitchHeight();
      // cudaMallocPitch: the pitch is the backend's, at most a 4 KiB multiple of the width.
      if (s && pitched && (w == 0 || w > (1ull << 40) || rows > (1ull << 40) / ((w + 4095) / 4096 * 4096)))
        s = Status(err::kInvalidValue, "pitched allocation of " + std::to_string(w) + " x " + std::to_string(rows) +
                                           " bytes is out of range");
      uint64_t bytes = pitched ? (w + 4095) / 4096 * 4096 * rows : m.getSize();
      if (s && bytes == 0) {
        finish(h, Status::ok(), [](auto& r) { r.setPtr(0); });
        return Status::ok();
      }
      if (!s) return finish(h, s), Status::ok();
      // The pool accounts (and, under a quota, first allows) every byte.
      uint64_t charge = chargedBytes(bytes);
      int phys = physical(m.getDevice());
      if (Status q = pool_.reserve(phys, charge, placement_.quota > 0); !q) {
        RGPU_LOG_INFO("session {}: cudaMalloc of {} bytes refused: {}", session_id_, bytes, q.message());
        return finish(h, q), Status::ok();
      }
      uint64_t pitch = 0;
      Result<DevPtr> p = Status(err::kUnknown, "");
      if (pitched) {
        auto pp = backend_->allocatePitch(m.getDevice(), w, rows);
        if (pp) {
          p = pp->first;
          pitch = pp->second;
          bytes = pitch * rows;
          pool_.release(phys, charge - chargedBytes(bytes));  // reserved for the widest pitch
          charge = chargedBytes(bytes);
        } else {
          p = pp.status();
        }
      } else {
        p = backend_->allocate(m.getDevice(), bytes);
      }
      if (!p) {
        pool_.release(phys, charge);
        return finish(h, p.status()), Status::ok();
      }
      if (Status a = allocs_.add(*p, bytes, m.getDevice()); !a) {
        uint64_t ptr = *p;
        (void)backend_->afterDeviceDone(m.getDevice(), [this, ptr] { return backend_->release(ptr); },
                                        [this, phys, charge](Status) { pool_.release(phys, charge); });
        return finish(h, a), Status::ok();
      }
      uint64_t ptr = *p;
      if (pitched) {
        finish(h, Status::ok(), [ptr, pitch](auto& r) {
          auto out = r.initPitched();
          out.setPtr(ptr);
          out.setPitch(pitch);
        });
      } else {
        finish(h, Status::ok(), [ptr](auto& r) { r.setPtr(ptr); });
      }
      return Status::ok();
    }
    case R::FREE: {
      uint64_t ptr = req.getFree().getPtr();
      if (ptr == 0) return finish(h, Status::ok()), Status::ok();
      auto e = allocs_.remove(ptr);
      if (!e) {
        RGPU_LOG_WARN("session {}: cudaFree of {}: {}", session_id_, hexPtr(ptr), e.status().message());
        return finish(h, e.status()), Status::ok();
      }
      // cudaFree waits for the device: work still queued may use the memory.
      bool async = h.flags & protocol::kFlagAsync;
      int phys = physical(e->device);
      uint64_t charge = chargedBytes(e->size);
      Status s = backend_->afterDeviceDone(
          e->device, [this, ptr] { return backend_->release(ptr); },
          [this, seq, async, phys, charge](Status r) {
            if (r) pool_.release(phys, charge);  // credited the moment it is free
            if (async) {
              if (!r) recordAsyncError(r);
            } else {
              sendReply(seq, r, nullptr);
            }
          });
      if (!s) finish(h, s);
      return Status::ok();
    }

    case R::MEMCPY_HTO_D: {
      auto m = req.getMemcpyHtoD();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      if (s && m.getSize() > protocol::kMaxBulkBytes)
        s = Status(err::kInvalidValue, "copy larger than the frame limit");
      if (s) s = allocs_.check(m.getDst(), m.getSize());
      if (!s) {
        RGPU_LOG_WARN("session {}: host-to-device copy rejected: {}", session_id_, s.message());
        RGPU_TRY(consumeBulk(h, m.getSize(), nullptr));
        return finish(h, s), Status::ok();
      }
      if (uint8_t* direct = backend_->directWriteTarget(key, m.getDst()); direct && h.bulk_len == m.getSize()) {
        RGPU_TRY(reader_->readBulk(h, direct));
        finish(h, Status::ok());
        return Status::ok();
      }
      Staging data;
      RGPU_TRY(consumeBulk(h, m.getSize(), &data));
      finishCopyIn(key, backend_->copyToDevice(key, m.getDst(), std::move(data), m.getSize()));
      return Status::ok();
    }
    case R::MEMCPY_DTO_H: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getMemcpyDtoH();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      if (s && m.getSize() > protocol::kMaxBulkBytes)
        s = Status(err::kInvalidValue, "copy larger than the frame limit");
      if (s) s = allocs_.check(m.getSrc(), m.getSize());
      if (!s) {
        RGPU_LOG_WARN("session {}: device-to-host copy rejected: {}", session_id_, s.message());
        return finish(h, s), Status::ok();
      }
      s = backend_->copyFromDevice(key, m.getSrc(), m.getSize(), replyWith(seq));
      if (!s) finish(h, s);
      return Status::ok();
    }
    case R::MEMCPY_DTO_D: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getMemcpyDtoD();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      if (s) s = allocs_.check(m.getDst(), m.getSize());
      if (s) s = allocs_.check(m.getSrc(), m.getSize());
      if (s) s = backend_->copyOnDevice(key, m.getDst(), m.getSrc(), m.getSize());
      finish(h, s);
      return Status::ok();
    }
    case R::MEMCPY_PEER: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getMemcpyPeer();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      int dd = -1, sd = -1;
      if (s) s = allocs_.check(m.getDst(), m.getSize(), &dd);
      if (s) s = allocs_.check(m.getSrc(), m.getSize(), &sd);
      if (s && (dd != m.getDstDevice() || sd != m.getSrcDevice()))
        s = Status(err::kInvalidValue, "peer copy pointers are not on the devices named");
      if (s) s = backend_->copyPeer(key, m.getDst(), dd, m.getSrc(), sd, m.getSize(), m.getSerialize());
      finish(h, s);
      return Status::ok();
    }
    case R::MEMSET: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getMemset();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      if (s) s = allocs_.check(m.getDst(), m.getSize());
      if (s) s = backend_->fill(key, m.getDst(), m.getValue(), m.getSize());
      finish(h, s);
      return Status::ok();
    }
    case R::MEMSET2_D: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getMemset2D();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      if (s) s = allocs_.check2D(m.getDst(), m.getPitch(), m.getWidth(), m.getHeight());
      if (s) s = backend_->fill2D(key, m.getDst(), m.getPitch(), m.getValue(), m.getWidth(), m.getHeight());
      finish(h, s);
      return Status::ok();
    }
    case R::MEMCPY2_D: {
      auto m = req.getMemcpy2D();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      uint64_t w = m.getWidth(), ht = m.getHeight();
      bool h2d = m.getKind() == 1, d2h = m.getKind() == 2, d2d = m.getKind() == 3;
      if (s && !(h2d || d2h || d2d)) s = Status(err::kInvalidMemcpyDirection, "bad 2D copy kind");
      if (s && (h2d || d2h) && (ht != 0 && w > protocol::kMaxBulkBytes / ht))
        s = Status(err::kInvalidValue, "2D copy larger than the frame limit");
      if (s && (h2d || d2d)) s = allocs_.check2D(m.getDst(), m.getDpitch(), w, ht);
      if (s && (d2h || d2d)) s = allocs_.check2D(m.getSrc(), m.getSpitch(), w, ht);
      if (h2d) {
        if (!s) {
          RGPU_TRY(consumeBulk(h, h.bulk_len, nullptr));
          return finish(h, s), Status::ok();
        }
        Staging data;
        RGPU_TRY(consumeBulk(h, w * ht, &data));
        finishCopyIn(key, backend_->copy2DToDevice(key, m.getDst(), m.getDpitch(), std::move(data), w, ht));
        return Status::ok();
      }
      RGPU_TRY(bulkNotExpected());
      if (s && d2h) {
        s = backend_->copy2DFromDevice(key, m.getSrc(), m.getSpitch(), w, ht, replyWith(seq));
        if (!s) finish(h, s);
        return Status::ok();
      }
      if (s) s = backend_->copy2DOnDevice(key, m.getDst(), m.getDpitch(), m.getSrc(), m.getSpitch(), w, ht);
      finish(h, s);
      return Status::ok();
    }

    case R::STREAM_CREATE: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getStreamCreate();
      uint32_t id = m.getStream().getId();
      int dev = m.getStream().getDevice();
      Status s = checkDevice(dev);
      if (s && id == 0) s = Status(err::kInvalidValue, "stream id 0 is reserved");
      if (s && streams_.count(id)) s = Status(err::kInvalidValue, "stream id " + std::to_string(id) + " in use");
      if (s && streams_.size() >= L.max_streams)
        s = Status(err::kLaunchOutOfResources, "session stream limit reached (max_streams = " + std::to_string(L.max_streams) + ")");
      if (s) s = backend_->createStream({id, dev}, m.getFlags(), m.getPriority());
      if (s) streams_[id] = dev;
      finish(h, s);
      return Status::ok();
    }
    case R::STREAM_DESTROY: {
      RGPU_TRY(bulkNotExpected());
      StreamKey key;
      Status s = checkStream(req.getStreamDestroy(), key);
      if (s && key.id == 0) s = Status(err::kInvalidResourceHandle, "cannot destroy the default stream");
      if (s) s = backend_->destroyStream(key);
      if (s) streams_.erase(key.id);
      finish(h, s);
      return Status::ok();
    }
    case R::STREAM_SYNCHRONIZE: {
      RGPU_TRY(bulkNotExpected());
      StreamKey key;
      Status s = checkStream(req.getStreamSynchronize(), key);
      if (s) s = backend_->whenStreamDone(key, [this, seq](Status st) { sendReply(seq, st, nullptr); });
      if (!s) finish(h, s);
      return Status::ok();
    }
    case R::STREAM_QUERY: {
      RGPU_TRY(bulkNotExpected());
      StreamKey key;
      Status s = checkStream(req.getStreamQuery(), key);
      if (s) {
        auto idle = backend_->streamIdle(key);
        s = !idle ? idle.status() : *idle ? Status::ok() : Status(err::kNotReady, "stream busy");
      }
      finish(h, s);
      return Status::ok();
    }
    case R::STREAM_WAIT_EVENT: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getStreamWaitEvent();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      if (s && !events_.count(m.getEvent())) s = Status(err::kInvalidResourceHandle, "unknown event");
      if (s) s = backend_->waitEvent(key, m.getEvent());
      finish(h, s);
      return Status::ok();
    }

    case R::EVENT_CREATE: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getEventCreate();
      Status s = checkDevice(m.getDevice());
      if (s && (m.getId() == 0 || events_.count(m.getId()))) s = Status(err::kInvalidValue, "event id in use");
      if (s && events_.size() >= L.max_events)
        s = Status(err::kLaunchOutOfResources, "session event limit reached (max_events = " + std::to_string(L.max_events) + ")");
      if (s) s = backend_->createEvent(m.getId(), m.getDevice(), m.getFlags());
      if (s) events_[m.getId()] = m.getDevice();
      finish(h, s);
      return Status::ok();
    }
    case R::EVENT_RECORD: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getEventRecord();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      if (s && !events_.count(m.getId())) s = Status(err::kInvalidResourceHandle, "unknown event");
      if (s) s = backend_->recordEvent(m.getId(), key);
      finish(h, s);
      return Status::ok();
    }
    case R::EVENT_SYNCHRONIZE: {
      RGPU_TRY(bulkNotExpected());
      uint32_t id = req.getEventSynchronize().getId();
      Status s = events_.count(id) ? Status::ok() : Status(err::kInvalidResourceHandle, "unknown event");
      if (s) s = backend_->whenEventDone(id, [this, seq](Status st) { sendReply(seq, st, nullptr); });
      if (!s) finish(h, s);
      return Status::ok();
    }
    case R::EVENT_QUERY: {
      RGPU_TRY(bulkNotExpected());
      uint32_t id = req.getEventQuery().getId();
      Status s = events_.count(id) ? Status::ok() : Status(err::kInvalidResourceHandle, "unknown event");
      if (s) {
        auto d = backend_->eventDone(id);
        s = !d ? d.status() : *d ? Status::ok() : Status(err::kNotReady, "event not completed");
      }
      finish(h, s);
      return Status::ok();
    }
    case R::EVENT_ELAPSED_TIME: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getEventElapsedTime();
      Status s = events_.count(m.getStart()) && events_.count(m.getEnd())
                     ? Status::ok()
                     : Status(err::kInvalidResourceHandle, "unknown event");
      float ms = 0;
      if (s) {
        auto r = backend_->elapsedMs(m.getStart(), m.getEnd());
        if (r) ms = *r;
        else s = r.status();
      }
      finish(h, s, [ms](auto& r) { r.setElapsedMs(ms); });
      return Status::ok();
    }
    case R::EVENT_DESTROY: {
      RGPU_TRY(bulkNotExpected());
      uint32_t id = req.getEventDestroy().getId();
      Status s = events_.count(id) ? backend_->destroyEvent(id) : Status(err::kInvalidResourceHandle, "unknown event");
      if (s) events_.erase(id);
      finish(h, s);
      return Status::ok();
    }

    case R::DEVICE_SYNCHRONIZE: {
      RGPU_TRY(bulkNotExpected());
      int dev = req.getDeviceSynchronize().getDevice();
      Status s = checkDevice(dev);
      if (s) s = backend_->whenDeviceDone(dev, [this, seq](Status st) { sendReply(seq, st, nullptr); });
      if (!s) finish(h, s);
      return Status::ok();
    }
    case R::DEVICE_RESET: {
      RGPU_TRY(bulkNotExpected());
      int dev = req.getDeviceReset().getDevice();
      Status s = checkDevice(dev);
      if (!s) return finish(h, s), Status::ok();
      // As NVIDIA's runtime: everything the device's context held goes.
      // Requests from now on no longer find it; the memory and the modules
      // (whose __device__ variables start from their initial values when
      // loaded again) are released once the device's queued work is done.
      std::vector<uint64_t> mine;
      for (uint64_t b : allocs_.bases()) {
        const AllocationTable::Entry* e = allocs_.find(b);
        if (e->device == dev && !e->is_symbol) mine.push_back(b);
      }
      uint64_t charge = 0;
      for (uint64_t b : mine) {
        auto e = allocs_.remove(b);
        if (e) charge += chargedBytes(e->size);
      }
      std::vector<uint32_t> mods;
      for (auto& [id, d] : modules_)
        if (d == dev) mods.push_back(id);
      for (uint32_t id : mods) forgetModule(id);
      for (auto it = streams_.begin(); it != streams_.end();) {
        if (it->second != dev) {
          ++it;
          continue;
        }
        (void)backend_->destroyStream({it->first, dev});
        it = streams_.erase(it);
      }
      for (auto it = events_.begin(); it != events_.end();) {
        if (it->second != dev) {
          ++it;
          continue;
        }
        (void)backend_->destroyEvent(it->first);
        it = events_.erase(it);
      }
      int phys = physical(dev);
      s = backend_->afterDeviceDone(
          dev,
          [this, mine, mods] {
            for (uint64_t b : mine) (void)backend_->release(b);
            for (uint32_t id : mods) (void)backend_->unloadModule(id);  // (one that never loaded: unknown, ignored)
            return Status::ok();
          },
          [this, seq, phys, charge](Status) {
            pool_.release(phys, charge);
            sendReply(seq, Status::ok(), nullptr);
          });
      if (!s) finish(h, s);
      return Status::ok();
    }
    case R::MEM_GET_INFO: {
      RGPU_TRY(bulkNotExpected());
      int dev = req.getMemGetInfo().getDevice();
      uint64_t free = 0, total = 0;
      Status s = checkDevice(dev);
      if (s) s = backend_->memInfo(dev, free, total);
      if (s && placement_.quota) {
        // The quota-limited view: what this user may still allocate here.
        auto [quota, used] = pool_.quotaView(physical(dev));
        if (quota) {
          total = std::min(total, quota);
          free = std::min(free, quota > used ? quota - used : 0);
        }
      }
      finish(h, s, [free, total](auto& r) {
        auto mi = r.initMemInfo();
        mi.setFree(free);
        mi.setTotal(total);
      });
      return Status::ok();
    }

    case R::MODULE_LOAD: {
      auto m = req.getModuleLoad();
      Status s = checkDevice(m.getDevice());
      if (s && (m.getId() == 0 || modules_.count(m.getId()))) s = Status(err::kInvalidValue, "module id in use");
      if (s && modules_.size() >= L.max_modules)
        s = Status(err::kLaunchOutOfResources, "session module limit reached (max_modules = " + std::to_string(L.max_modules) + ")");
      if (s && h.bulk_len > protocol::kMaxFatbinBytes) s = Status(err::kInvalidKernelImage, "fatbin too large");
      if (!s) {
        RGPU_TRY(consumeBulk(h, h.bulk_len, nullptr));
        return finish(h, s), Status::ok();
      }
      Staging data;
      RGPU_TRY(consumeBulk(h, h.bulk_len, &data));
      s = backend_->loadModule(m.getId(), m.getDevice(), std::string(data->begin(), data->end()));
      modules_[m.getId()] = m.getDevice();
      if (!s) {
        // As NVIDIA's lazy loading: the error belongs to the module's kernels
        // and variables, and is the answer of whatever first uses them (a
        // launch, cudaFuncGetAttributes, a symbol copy), not of an unrelated
        // later call. (A synchronous load is answered with it as well.)
        RGPU_LOG_WARN("session {}: module {} rejected: {}", session_id_, m.getId(), s.message());
        module_errors_[m.getId()] = s;
      }
      finish(h, h.flags & protocol::kFlagAsync ? Status::ok() : s);
      return Status::ok();
    }
    case R::MODULE_UNLOAD: {
      RGPU_TRY(bulkNotExpected());
      uint32_t id = req.getModuleUnload().getId();
      auto mod = modules_.find(id);
      if (mod == modules_.end()) return finish(h, Status(err::kInvalidResourceHandle, "unknown module")), Status::ok();
      int dev = mod->second;
      bool loaded = !module_errors_.count(id);
      forgetModule(id);
      if (!loaded) return finish(h, Status::ok()), Status::ok();
      // Unloading may synchronise the device: it happens once the device's
      // queued work is done (launches already queued still run), off the
      // dispatch thread, which a pending host function may be waiting for.
      Status s = backend_->afterDeviceDone(dev, [this, id] { return backend_->unloadModule(id); },
                                           [this](Status r) {
                                             if (!r) recordAsyncError(r);
                                           });
      finish(h, s);
      return Status::ok();
    }
    case R::FUNCTION_REGISTER: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getFunctionRegister();
      Status s = canRegister(m.getModule());
      if (s) {
        // A kernel that cannot run (its module failed to load, or the module
        // lacks it) stays registered with that error: its launches and
        // attribute queries answer with it.
        auto bad = module_errors_.find(m.getModule());
        Result<uint32_t> bytes = bad != module_errors_.end()
                                     ? Result<uint32_t>(bad->second)
                                     : backend_->registerFunction(m.getId(), m.getModule(), m.getName());
        functions_[m.getId()] = {m.getModule(), bytes ? *bytes : 0, bytes.status()};
      }
      finish(h, s);
      return Status::ok();
    }
    case R::VAR_REGISTER: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getVarRegister();
      Status s = canRegister(m.getModule());
      if (s) vars_[m.getId()] = {m.getModule(), m.getName(), m.getSize(), 0};
      finish(h, s);
      return Status::ok();
    }
    case R::SYMBOL_ADDRESS: {
      RGPU_TRY(bulkNotExpected());
      auto it = vars_.find(req.getSymbolAddress().getId());
      if (it == vars_.end()) return finish(h, Status(err::kInvalidSymbol, "unknown symbol")), Status::ok();
      if (auto bad = module_errors_.find(it->second.module); bad != module_errors_.end())
        return finish(h, bad->second), Status::ok();
      auto g = backend_->globalAddress(it->second.module, it->second.name, it->second.size);
      if (!g) return finish(h, g.status()), Status::ok();
      uint64_t addr = g->first, size = g->second;
      if (!allocs_.find(addr)) {
        Status a = allocs_.add(addr, size, modules_[it->second.module], true);
        if (!a) return finish(h, a), Status::ok();
      }
      it->second.addr = addr;
      finish(h, Status::ok(), [addr, size](auto& r) {
        auto sym = r.initSymbol();
        sym.setAddress(addr);
        sym.setSize(size);
      });
      return Status::ok();
    }
    case R::LAUNCH_KERNEL: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getLaunchKernel();
      auto f = functions_.find(m.getFunction());
      StreamKey key;
      Status s = f == functions_.end() ? Status(err::kInvalidDeviceFunction, "unknown function") : f->second.unusable;
      if (s) s = checkStream(m.getStream(), key);
      auto params = m.getParams();
      if (s && params.size() != f->second.param_bytes)
        s = Status(err::kInvalidValue, "parameter block of " + std::to_string(params.size()) + " bytes; the kernel takes " +
                                           std::to_string(f->second.param_bytes));
      if (s) {
        LaunchConfig cfg;
        cfg.grid = {m.getGrid().getX(), m.getGrid().getY(), m.getGrid().getZ()};
        cfg.block = {m.getBlock().getX(), m.getBlock().getY(), m.getBlock().getZ()};
        cfg.shared_mem = m.getSharedMem();
        s = backend_->launch(key, m.getFunction(), cfg, std::string(params.begin(), params.end()));
      }
      finish(h, s);
      return Status::ok();
    }
    case R::FUNC_GET_ATTRIBUTES: {
      RGPU_TRY(bulkNotExpected());
      uint32_t id = req.getFuncGetAttributes().getId();
      if (Status u = usableFunction(id); !u) return finish(h, u), Status::ok();
      auto a = backend_->functionAttributes(id);
      if (!a) return finish(h, a.status()), Status::ok();
      FunctionAttributes fa = *a;
      finish(h, Status::ok(), [fa](auto& r) {
        auto o = r.initFuncAttributes();
        o.setSharedSizeBytes(fa.shared_size);
        o.setConstSizeBytes(fa.const_size);
        o.setLocalSizeBytes(fa.local_size);
        o.setMaxThreadsPerBlock(fa.max_threads_per_block);
        o.setNumRegs(fa.num_regs);
        o.setPtxVersion(fa.ptx_version);
        o.setBinaryVersion(fa.binary_version);
        o.setMaxDynamicSharedSizeBytes(fa.max_dynamic_shared);
        o.setPreferredShmemCarveout(fa.preferred_carveout);
      });
      return Status::ok();
    }
    case R::FUNC_SET_ATTRIBUTE: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getFuncSetAttribute();
      Status s = usableFunction(m.getId());
      if (s) s = backend_->setFunctionAttribute(m.getId(), m.getAttr(), m.getValue());
      finish(h, s);
      return Status::ok();
    }
    case R::OCCUPANCY: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getOccupancy();
      if (Status u = usableFunction(m.getId()); !u) return finish(h, u), Status::ok();
      auto n = backend_->occupancy(m.getId(), m.getBlockSize(), m.getDynamicSmem());
      if (!n) return finish(h, n.status()), Status::ok();
      int64_t v = *n;
      finish(h, Status::ok(), [v](auto& r) { r.setValue(v); });
      return Status::ok();
    }
    case R::HOST_FUNC_ENQUEUE: {
      RGPU_TRY(bulkNotExpected());
      auto m = req.getHostFuncEnqueue();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      uint64_t id = m.getId();
      if (s) {
        std::lock_guard lock(host_mu_);
        if (host_pending_.size() >= L.max_pending_host_funcs)
          s = Status(err::kLaunchOutOfResources, "too many pending host functions (max_pending_host_funcs = " +
                                                     std::to_string(L.max_pending_host_funcs) + ")");
        else if (!host_pending_.insert(id).second) s = Status(err::kInvalidValue, "host function id in use");
      }
      if (s) {
        s = backend_->hostCall(key, [this, id] {
          sendNotify([id](wire::Notify::Builder& n) { n.setHostFuncReady(id); });
          std::unique_lock lock(host_mu_);
          host_cv_.wait(lock, [&] { return closing_ || !host_pending_.count(id); });
        });
      }
      finish(h, s);
      return Status::ok();
    }
    case R::HOST_FUNC_DONE: {
      RGPU_TRY(bulkNotExpected());
      {
        std::lock_guard lock(host_mu_);
        host_pending_.erase(req.getHostFuncDone().getId());
      }
      host_cv_.notify_all();
      finish(h, Status::ok());
      return Status::ok();
    }
    case R::POOL_STATUS: {
      RGPU_TRY(bulkNotExpected());
      auto st = pool_.status(identity_);
      if (!st) return finish(h, st.status()), Status::ok();
      // Copy into words: the datagram bytes carry no alignment guarantee.
      kj::Array<capnp::word> words = kj::heapArray<capnp::word>(st->size() / sizeof(capnp::word));
      std::memcpy(words.begin(), st->data(), words.size() * sizeof(capnp::word));
      capnp::FlatArrayMessageReader pr(words, common::readerOptions());
      auto status = pr.getRoot<wire::PoolStatus>();
      finish(h, Status::ok(), [&](auto& r) { r.setPoolStatus(status); });
      return Status::ok();
    }
    case R::POINTER_ATTRIBUTES: {
      RGPU_TRY(bulkNotExpected());
      uint64_t base = 0;
      const AllocationTable::Entry* e = allocs_.find(req.getPointerAttributes().getPtr(), &base);
      if (!e) return finish(h, Status(err::kInvalidValue, "not a device pointer of this session")), Status::ok();
      int dev = e->device;
      uint64_t size = e->size;
      finish(h, Status::ok(), [dev, base, size](auto& r) {
        auto p = r.initPointer();
        p.setDevice(dev);
        p.setBase(base);
        p.setSize(size);
      });
      return Status::ok();
    }
    case R::BLAS:
    case R::LT_MATMUL:
    case R::LT_HEURISTIC:
      return dispatchBlas(h, req);
  }
  // A call this server does not know (a newer client): refuse it, keep serving.
  RGPU_LOG_WARN("session {}: unknown call {} from client", session_id_, static_cast<int>(req.which()));
  if (h.bulk_len) RGPU_TRY(reader_->skipBulk(h));
  finish(h, Status(err::kNotSupported, "call " + std::to_string(static_cast<int>(req.which())) +
                                          " is not supported by this server (version " RGPU_VERSION ")"));
  return Status::ok();
}

}  // namespace rgpu::server
