#include "server/session/session.h"

#include <capnp/serialize.h>
#include <kj/exception.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>

#include "common/call_message.h"
#include "common/log.h"
#include "common/spin.h"
#include "protocol/frame.h"
#include "server/pool/fd_passing.h"

namespace rgpu::server {

using protocol::FrameHeader;
using protocol::FrameType;

// Reusable buffers for incoming bulk data. Large host buffers are expensive to
// fault in fresh (first touch is slower than the TLS link), so they are kept.
class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  static constexpr uint64_t kMaxIdleBytes = 256ull << 20;
  // `budget`: bytes of staging the session may hold at once ([limits]
  // max_staging_bytes). A buffer counts until the copy it carries has run
  // (the backend keeps the Staging until then, even once it has copied the
  // bytes elsewhere), so copies queued behind a blocked stream are bounded.
  explicit StagingPool(uint64_t budget) : budget_(budget) {}

  // nullptr when `size` more bytes would pass the budget.
  Staging acquire(uint64_t size) {
    std::unique_ptr<std::vector<uint8_t>> buf;
    {
      std::lock_guard lock(mu_);
      if (in_use_ + size > budget_) return nullptr;
      in_use_ += size;
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
    return Staging(buf.release(), [weak, size](std::vector<uint8_t>* b) {
      if (auto pool = weak.lock()) pool->giveBack(b, size);
      else delete b;
    });
  }
  uint64_t inUse() {
    std::lock_guard lock(mu_);
    return in_use_;
  }
  uint64_t budget() const { return budget_; }

 private:
  void giveBack(std::vector<uint8_t>* b, uint64_t charged) {
    std::lock_guard lock(mu_);
    in_use_ -= charged;
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
  const uint64_t budget_;
  uint64_t in_use_ = 0;  // acquired and not given back
};

namespace {

bool constantTimeEquals(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}


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

}  // namespace

Session::Session(std::unique_ptr<common::TlsConnection> conn, const ServerConfig& cfg, BackendFactory make_backend,
                 PoolLink& pool, uint64_t session_id, ResumeSource resume)
    : outbox_(std::move(conn), compressionOf(cfg)),
      cfg_(cfg),
      make_backend_(std::move(make_backend)),
      pool_(pool),
      session_id_(session_id),
      staging_(std::make_shared<StagingPool>(cfg.limits.max_staging_bytes)),
      allocs_(cfg.limits.max_allocations),
      resume_source_(resume) {
  client_session_id_ = session_id;
  stripes_.setMinBytes(kStripeReplyMinBytes);
  outbox_.stripeOver(&stripes_);
}

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
  joinPrecopy();  // (it reads the backend's memory)
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
  if (!redirected_.empty()) {
    RGPU_LOG_INFO("session {}: user '{}' from {} sent to member {}", session_id_, identity_,
                  outbox_.connection()->peerAddress(), redirected_);
    return Status::ok();
  }
  RGPU_LOG_INFO("session {} started: user '{}' from {}{}", session_id_, identity_, outbox_.connection()->peerAddress(),
                resume_ ? " (resumable)" : "");
  if (resume_) {
    resume_stop_fd_ = eventfd(0, EFD_CLOEXEC);
    resume_thread_ = std::thread([this] { acceptResumes(); });
  }
  s = serve();
  return endRun(s);
}

Status Session::endRun(Status s) {
  joinPrecopy();
  if (moved_) awaitForwarded();
  stopResumeThread();
  outbox_.close();  // backend threads waiting for the client's acknowledgement return
  if (moved_) {
    // The pool's record and the client are the new worker's now.
    {
      std::lock_guard lock(host_mu_);
      closing_ = true;
    }
    host_cv_.notify_all();
    return Status::ok();
  }
  reportUsage(true);
  {
    std::lock_guard lock(host_mu_);
    closing_ = true;
  }
  host_cv_.notify_all();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const std::string why = s ? "client left" : s.message();
  std::string stopped;
  {
    std::lock_guard lock(resume_mu_);
    stopped = stop_reason_;
  }
  pool_.ended(stopped.empty() ? why : "stopped: " + stopped);  // (a datagram to the daemon: not under the lock)
  std::string striped;
  if (stripes_.bytesReceived() || stripes_.bytesSent())
    striped = ", stripe connections carried " + formatBytes(stripes_.bytesReceived()) + " in and " +
              formatBytes(stripes_.bytesSent()) + " out";
  RGPU_LOG_INFO("session {} ended ({} allocations released, worker peak RSS {} MiB{}): {}", session_id_,
                allocs_.count(), usage.ru_maxrss / 1024, striped, why);
  return s;
}

std::string Session::authenticate(const common::TlsConnection& conn, const std::string& token) const {
  return userFor(cfg_, conn.peerCommonName(), token);
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
    // The daemon checks the credential itself and binds the session to its
    // user: a worker's word alone admits no one.
    ClientCredential credential{token, conn->peerCertificatePem(), common::clientBinding(*conn), ""};
    if (hello.hasCertProof()) {
      auto proof = hello.getCertProof();
      credential.proof.assign(reinterpret_cast<const char*>(proof.begin()), proof.size());
    }
    if (Status b = pool_.bindIdentity(identity_, credential); !b) {
      RGPU_LOG_WARN("session {}: the pool did not accept user '{}': {}", session_id_, identity_, b.message());
      return reject(err::kNotPermitted, "authentication failed: " + b.message());
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
      want.no_redirect = hello.getRedirected();
      auto placed = pool_.admit(who, want);
      if (!placed) return reject(placed.status().code(), placed.status().message());
      if (!placed->redirect.empty() || !placed->span.empty()) {
        // The pool places this client on another member, or on several: it
        // goes there (no session here).
        welcome.setRedirect(placed->redirect);
        welcome.setRedirectMember(placed->redirect_member);
        if (placed->span.empty()) redirected_ = placed->redirect_member + " at " + placed->redirect;
        if (!placed->span.empty()) {
          auto parts = welcome.initSpan(static_cast<unsigned>(placed->span.size()));
          for (size_t i = 0; i < placed->span.size(); ++i) {
            const SpanPart& p = placed->span[i];
            parts[static_cast<unsigned>(i)].setMember(p.member);
            parts[static_cast<unsigned>(i)].setAddress(p.address);
            parts[static_cast<unsigned>(i)].setCount(p.count);
            redirected_ += (redirected_.empty() ? "" : ", ") + p.member + " at " + p.address;
          }
        }
        std::vector<uint8_t> frame;
        common::appendFrame(frame, FrameType::kWelcome, 0, h.seq, out, 0);
        (void)outbox_.sendOnce(frame);
        return Status::ok();
      }
      // Part of a program spread over several members: its own address window.
      if (hello.getRedirected()) placed->span_index = hello.getSpanIndex();
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
              resume_source_.tls && !resume_source_.id.empty();
    if (resume_) pool_.resumable();
    if (resume_)
      welcome.setResumeId(kj::arrayPtr(reinterpret_cast<const kj::byte*>(resume_source_.id.data()), resume_source_.id.size()));
    uint8_t token_bytes[16];
    RAND_bytes(token_bytes, sizeof token_bytes);
    resume_token_.assign(reinterpret_cast<const char*>(token_bytes), sizeof token_bytes);
    OPENSSL_cleanse(token_bytes, sizeof token_bytes);
    // A resuming client's TLS handshake authenticates by a PSK derived from
    // the token (this worker holds no certificate key any more).
    if (resume_) resume_source_.tls->setResumeSecret(resume_token_);
    welcome.setResumeToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(resume_token_.data()), resume_token_.size()));
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
  // Stripes may join once the client has this Welcome.
  welcome.setMaxStripes(resume_ ? cfg_.max_stripes : 0);
  welcome.setGeneration(takeUpConnection(*outbox_.connection()));
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kWelcome, 0, h.seq, out, 0);
  return outbox_.sendOnce(frame);
}

void Session::stop(const std::string& why, int code) {
  {
    std::lock_guard lock(resume_mu_);
    if (stop_reason_.empty()) stop_reason_ = why;
  }
  stopped_.store(true);
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
    {
      // Its stripes go with it, and joins for it are refused from now on.
      std::lock_guard lock(resume_mu_);
      live_ = false;
      ++generation_;
    }
    stripes_.bind(nullptr);
    if (stopped_.load()) return Status::ok();
    if (s || fatal_ || !resume_) return s;
    if (outbox_.lostFrames()) {
      RGPU_LOG_WARN("session {}: connection lost ({}) and more than {} of unacknowledged replies were dropped: "
                    "the session cannot be resumed",
                    session_id_, s.message(), formatBytes(kMaxRetainedBytes));
      return s;
    }
    RGPU_TRY(awaitResume(s));
    if (moved_) return Status::ok();
  }
}

Status Session::serveConnection(common::TlsConnection& conn) {
  dispatch_thread_ = std::this_thread::get_id();
  common::FrameReader reader(conn, protocol::kMaxBulkBytes, &stripes_);
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
    // A pre-copy the daemon asked for starts between two requests (session_precopy.cc).
    if (precopy_wanted_.load(std::memory_order_relaxed)) startPrecopy();
    if (h.flags & protocol::kFlagTimed) timed_read_ns_ = common::monotonicNs();
    if (h.type == FrameType::kAck) {
      if (h.bulk_len) return violation(Status(err::kInvalidValue, "acknowledgement with a bulk payload"));
      try {
        capnp::FlatArrayMessageReader r(msg, common::readerOptions());
        auto a = r.getRoot<wire::Ack>();
        if (a.getBye()) bye_ = true;
        if (a.getStripeReady()) stripes_.setWritable(a.getStripeReady());
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
    if (!resume_) continue;
    // The client keeps every request until told it was carried out.
    unacked_bytes_ += protocol::kFrameHeaderBytes + h.message_len + h.bulk_len;
    if (++unacked_requests_ >= kAckEveryRequests || unacked_bytes_ >= kAckEveryBytes) {
      unacked_requests_ = unacked_bytes_ = 0;
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
  auto deadline = lost_at + std::chrono::milliseconds(cfg_.resume_grace_ms);
  {
    std::unique_lock lock(resume_mu_);
    bool woken = false;
    for (;;) {
      woken = resume_cv_.wait_until(lock, deadline, [&] {
        return pending_.conn != nullptr || stopped_.load() || resume_closed_ || move_request_.has_value();
      });
      if (!woken || !move_request_ || pending_.conn || stopped_.load()) break;
      // The daemon moves the session: checkpoint it here, between two requests.
      MoveRequest req = std::move(*move_request_);
      move_request_.reset();
      lock.unlock();
      bool moved = checkpointForMove(std::move(req));
      lock.lock();
      if (moved) return Status::ok();
      // Called off: the client (held by the daemon meanwhile) gets a full grace period.
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg_.resume_grace_ms);
    }
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
  w.setSessionId(client_session_id_);
  w.setIdentity(identity_);
  w.setResumed(true);
  w.setDispatched(next_seq_ - 1);
  w.setResumeGraceMs(cfg_.resume_grace_ms);
  w.setResumeToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(resume_token_.data()), resume_token_.size()));
  if (backend_) {
    w.setBackend(backend_->name());
    w.setDriverVersion(backend_->driverVersion());
  }
  w.setMaxStripes(cfg_.max_stripes);
  w.setGeneration(takeUpConnection(*p.conn));
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kWelcome, 0, 0, out, 0);
  std::string peer = p.conn->peerAddress();
  auto resent = outbox_.resume(std::move(p.conn), frame, p.replies, p.notifications);
  unacked_requests_ = unacked_bytes_ = 0;
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
  // Handshakes run side by side (a stalled one must not hold up the real
  // client), at most kMaxResumeHandshakes at once.
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Running> running;
  auto reap = [&](bool all) {
    std::erase_if(running, [all](Running& r) {
      if (!all && !r.done->load()) return false;
      r.thread.join();
      return true;
    });
  };
  for (;;) {
    pollfd p[2] = {{resume_source_.fd, POLLIN, 0}, {resume_stop_fd_, POLLIN, 0}};
    int rc = ::poll(p, 2, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || p[1].revents) break;
    std::string msg(512, '\0');
    int fd = -1;
    ssize_t n = receiveWithFd(resume_source_.fd, msg, fd);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      daemonGone();
      break;
    }
    msg.resize(std::min<size_t>(static_cast<size_t>(n), msg.size()));
    // The daemon's word on moving the session (session_checkpoint.cc).
    auto f = splitFields(msg, 4);
    if (f[0] == "checkpoint" && f.size() >= 2 && fd >= 0) {
      {
        std::lock_guard lock(resume_mu_);
        if (move_request_ && move_request_->fd >= 0) ::close(move_request_->fd);
        move_request_ = MoveRequest{fd, f[1], f.size() >= 3 && f[2] == "base"};
        verdict_ = Verdict::kNone;
      }
      resume_cv_.notify_all();
      // The dispatch thread leaves the connection between two requests.
      outbox_.connection()->shutdown();
      continue;
    }
    if (f[0] == "precopy" && f.size() >= 2 && fd >= 0) {
      requestPrecopy(fd, f[1]);
      continue;
    }
    if (f[0] == "commit" || f[0] == "abort" || (f[0] == "forward" && f.size() >= 3)) {
      if (fd >= 0) ::close(fd);
      {
        std::lock_guard lock(resume_mu_);
        verdict_ = f[0] == "commit" ? Verdict::kCommit : f[0] == "abort" ? Verdict::kAbort : Verdict::kForward;
        if (verdict_ == Verdict::kForward) forward_ = {f[1], f[2], false};
        // A request the dispatch thread has not taken up yet is void too.
        if (verdict_ == Verdict::kAbort && move_request_) {
          if (move_request_->fd >= 0) ::close(move_request_->fd);
          move_request_.reset();
        }
      }
      resume_cv_.notify_all();
      continue;
    }
    if (f[0] != "F" || fd < 0) {
      if (fd >= 0) ::close(fd);
      RGPU_LOG_WARN("session {}: unknown message from the daemon on the handoff socket", session_id_);
      continue;
    }
    reap(false);
    if (running.size() >= static_cast<size_t>(kMaxResumeHandshakes)) {
      ::close(fd);
      common::logLimited("resume-cap", "session " + std::to_string(session_id_) + ": a resume attempt closed: " +
                                           std::to_string(running.size()) + " resume handshakes are running already");
      continue;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    running.push_back({std::thread([this, fd, done] {
                         resumeHandshake(fd);
                         done->store(true);
                       }),
                       done});
  }
  reap(true);
}

void Session::resumeHandshake(int fd) {
  auto conn = common::TlsConnection::accept(*resume_source_.tls, fd, std::chrono::milliseconds(cfg_.handshake_timeout_ms));
  if (!conn) {
    RGPU_LOG_WARN("session {}: resume attempt: {}", session_id_, conn.status().message());
    return;
  }
  FrameHeader h;
  kj::Array<capnp::word> msg;
  if (Status s = readHello(**conn, cfg_.handshake_timeout_ms, session_id_, h, msg); !s) {
    RGPU_LOG_WARN("session {}: resume attempt from {}: {}", session_id_, (*conn)->peerAddress(), s.message());
    return;
  }
  std::string why;
  uint64_t replies = 0, notifications = 0;
  bool stripe = false;
  uint32_t generation = 0;
  try {
    capnp::FlatArrayMessageReader r(msg, common::readerOptions());
    auto hello = r.getRoot<wire::Hello>();
    stripe = hello.getStripe();
    generation = hello.getGeneration();
    auto token = hello.getResumeToken();
    std::string given(reinterpret_cast<const char*>(token.begin()), token.size());
    std::string user = authenticate(**conn, hello.getToken());
    // Over TLS the handshake succeeded only by the PSK derived from this
    // session's resume token, which only its client received: that is who it
    // is (a certificate is not sent again). A token it sends must still match.
    bool by_psk = (*conn)->resumedByPsk();
    if (hello.getProtocolVersion() != wire::PROTOCOL_VERSION) why = "protocol version differs";
    else if (hello.getResumeSession() != client_session_id_)
      why = "it names session " + std::to_string(hello.getResumeSession());
    else if (!constantTimeEquals(given, resume_token_)) why = "wrong resume token";
    else if (user.empty() && !by_psk) why = "authentication failed";
    else if (!user.empty() && user != identity_) why = "user '" + user + "' does not own the session";
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
    return;
  }
  if (forwardResume(**conn, stripe, h.seq)) return;
  if (stripe) return joinStripe(std::move(*conn), generation, h.seq);
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

Status Session::stagingRefused(uint64_t bytes) const {
  return Status(err::kMemoryAllocation, "the session's queued host-to-device copies already hold " +
                                            std::to_string(staging_->inUse()) + " bytes; " + std::to_string(bytes) +
                                            " more would pass the server's max_staging_bytes = " +
                                            std::to_string(staging_->budget()) + " (synchronise first)");
}

Staging Session::stage(uint64_t size) { return staging_->acquire(size); }

Status Session::consumeBulk(const FrameHeader& h, uint64_t expected, Staging* into) {
  if (h.bulk_len != expected) {
    // The frame's lengths disagree: we cannot trust where the next frame starts.
    return Status(err::kInvalidValue, "bulk length " + std::to_string(h.bulk_len) + " does not match the call's size " +
                                          std::to_string(expected));
  }
  if (!into) return reader_->skipBulk(h);
  *into = staging_->acquire(expected);
  if (!*into) {
    RGPU_LOG_WARN("session {}: {} bytes refused: queued copies hold {} of max_staging_bytes = {}", session_id_,
                  expected, staging_->inUse(), staging_->budget());
    return reader_->skipBulk(h);
  }
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
  u.gpu_ns = gpu_ns_base_ + (backend_ ? backend_->gpuTimeNs() : 0);
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
  if (graph_build_ && std::this_thread::get_id() == graph_build_thread_) {
    if (!s && graph_build_->isOk()) *graph_build_ = s;
    return;
  }
  if (h.flags & protocol::kFlagAsync) {
    if (!s) recordAsyncError(s);
    return;
  }
  sendReply(h.seq, s, fill);
}

void Session::sendReply(uint64_t seq, const Status& status, const Fill& fill, const uint8_t* bulk, uint64_t bulk_len,
                        const OnWire& on_wire) {
  common::CallMessage out(256);  // (a scratch segment of this thread's: no allocation)
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
  if (seq == timed_seq_.load(std::memory_order_acquire)) {
    auto times = r.initServerTimes(3);
    times.set(0, timed_read_ns_);
    times.set(1, timed_dispatch_ns_);
    times.set(2, common::monotonicNs());
  }
  if (!s) {
    bulk_len = 0;
    errors_.fetch_add(1, std::memory_order_relaxed);
  }
  bytes_out_.fetch_add(bulk_len, std::memory_order_relaxed);
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kReply, 0, seq, out, bulk_len);
  outbox_.reply(seq, frame, bulk, bulk_len, std::this_thread::get_id() != dispatch_thread_, on_wire);
}

void Session::sendNotify(const std::function<void(wire::Notify::Builder&)>& fill, const uint8_t* bulk,
                         uint64_t bulk_len) {
  capnp::MallocMessageBuilder out(128);
  auto n = out.initRoot<wire::Notify>();
  fill(n);
  bytes_out_.fetch_add(bulk_len, std::memory_order_relaxed);
  outbox_.notify(out, bulk, bulk_len);
}

Status Session::checkDevice(int device) const {
  if (device < 0 || static_cast<size_t>(device) >= backend_->devices().size())
    return Status(err::kInvalidDevice, "invalid device ordinal " + std::to_string(device));
  return Status::ok();
}

Status Session::checkStream(wire::StreamRef::Reader s, StreamKey& key) const {
  if (graph_stream_) {
    key = *graph_stream_;
    return Status::ok();
  }
  key.id = s.getId();
  key.device = s.getDevice();
  if (key.id == 0) return checkDevice(key.device);
  auto it = streams_.find(key.id);
  if (it == streams_.end()) return Status(err::kInvalidResourceHandle, "unknown stream handle " + std::to_string(key.id));
  key.device = it->second;
  return Status::ok();
}

// One handler per request kind (by its union ordinal), each in the file of
// its subsystem: session_memory.cc, session_streams.cc, session_modules.cc,
// session_blas.cc, and here.
const Session::Handlers& Session::handlers() {
  using R = wire::Request;
  static const Handlers table = [] {
    Handlers t{};
    t[R::NOOP] = &Session::onPing;
    t[R::PING] = &Session::onPing;
    t[R::MALLOC] = &Session::onMalloc;
    t[R::FREE] = &Session::onFree;
    t[R::MEMCPY_HTO_D] = &Session::onMemcpyHtoD;
    t[R::MEMCPY_DTO_H] = &Session::onMemcpyDtoH;
    t[R::MEMCPY_DTO_D] = &Session::onMemcpyDtoD;
    t[R::MEMCPY_PEER] = &Session::onMemcpyPeer;
    t[R::MEMSET] = &Session::onMemset;
    t[R::MEMSET2_D] = &Session::onMemset2D;
    t[R::MEMCPY2_D] = &Session::onMemcpy2D;
    t[R::MEM_GET_INFO] = &Session::onMemGetInfo;
    t[R::POINTER_ATTRIBUTES] = &Session::onPointerAttributes;
    t[R::STREAM_CREATE] = &Session::onStreamCreate;
    t[R::STREAM_DESTROY] = &Session::onStreamDestroy;
    t[R::STREAM_SYNCHRONIZE] = &Session::onStreamSynchronize;
    t[R::STREAM_QUERY] = &Session::onStreamQuery;
    t[R::STREAM_WAIT_EVENT] = &Session::onStreamWaitEvent;
    t[R::EVENT_CREATE] = &Session::onEventCreate;
    t[R::EVENT_RECORD] = &Session::onEventRecord;
    t[R::EVENT_SYNCHRONIZE] = &Session::onEventSynchronize;
    t[R::EVENT_QUERY] = &Session::onEventQuery;
    t[R::EVENT_ELAPSED_TIME] = &Session::onEventElapsedTime;
    t[R::EVENT_DESTROY] = &Session::onEventDestroy;
    t[R::DEVICE_SYNCHRONIZE] = &Session::onDeviceSynchronize;
    t[R::DEVICE_RESET] = &Session::onDeviceReset;
    t[R::HOST_FUNC_ENQUEUE] = &Session::onHostFuncEnqueue;
    t[R::HOST_FUNC_DONE] = &Session::onHostFuncDone;
    t[R::SET_LIMIT] = &Session::onSetLimit;
    t[R::MODULE_LOAD] = &Session::onModuleLoad;
    t[R::MODULE_UNLOAD] = &Session::onModuleUnload;
    t[R::FUNCTION_REGISTER] = &Session::onFunctionRegister;
    t[R::VAR_REGISTER] = &Session::onVarRegister;
    t[R::SYMBOL_ADDRESS] = &Session::onSymbolAddress;
    t[R::LAUNCH_KERNEL] = &Session::onLaunchKernel;
    t[R::FUNC_GET_ATTRIBUTES] = &Session::onFuncGetAttributes;
    t[R::FUNC_SET_ATTRIBUTE] = &Session::onFuncSetAttribute;
    t[R::OCCUPANCY] = &Session::onOccupancy;
    t[R::POOL_STATUS] = &Session::onPoolStatus;
    t[R::POOL_MEMBERS] = &Session::onPoolMembers;
    t[R::SESSION_MOVE] = &Session::onSessionMove;
    t[R::BLAS] = &Session::dispatchBlas;
    t[R::LT_MATMUL] = &Session::dispatchBlas;
    t[R::LT_HEURISTIC] = &Session::dispatchBlas;
    t[R::RAND_FILL] = &Session::onRandFill;
    t[R::FFT_PLAN] = &Session::onFftPlan;
    t[R::FFT_EXEC] = &Session::onFftExec;
    t[R::FFT_RELEASE] = &Session::onFftRelease;
    t[R::SOLVER] = &Session::onSolver;
    t[R::SOLVER_BUFFER_SIZE] = &Session::onSolverBufferSize;
    t[R::SPARSE] = &Session::onSparse;
    t[R::SPARSE_BUFFER_SIZE] = &Session::onSparseBufferSize;
    t[R::DNN] = &Session::onDnn;
    t[R::DNN_SIZE] = &Session::onDnnSize;
    static_assert(static_cast<size_t>(R::DNN_SIZE) < std::tuple_size_v<Handlers>, "grow Handlers");
    t[R::GRAPH_CREATE] = &Session::onGraphCreate;
    t[R::GRAPH_LAUNCH] = &Session::onGraphLaunch;
    t[R::GRAPH_DESTROY] = &Session::onGraphDestroy;
    t[R::CONDITIONAL_HANDLE_CREATE] = &Session::onConditionalHandleCreate;
    t[R::ARRAY_CREATE] = &Session::onArrayCreate;
    t[R::ARRAY_DESTROY] = &Session::onArrayDestroy;
    t[R::COPY3_D] = &Session::onCopy3D;
    t[R::TEXTURE_CREATE] = &Session::onTextureCreate;
    t[R::TEXTURE_DESTROY] = &Session::onTextureDestroy;
    t[R::SURFACE_CREATE] = &Session::onSurfaceCreate;
    t[R::SURFACE_DESTROY] = &Session::onSurfaceDestroy;
    return t;
  }();
  return table;
}

Status Session::dispatch(const FrameHeader& h, wire::Request::Reader req) {
  using R = wire::Request;
  uint64_t calls = calls_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(h.bulk_len, std::memory_order_relaxed);
  if (calls < 64 || (calls & 63) == 0) reportUsage(false);  // keeps the clock read off most calls
  if (monitor_ && req.which() != R::POOL_STATUS && req.which() != R::POOL_MEMBERS && req.which() != R::PING &&
      req.which() != R::NOOP && req.which() != R::SESSION_MOVE) {
    if (h.bulk_len) RGPU_TRY(reader_->skipBulk(h));
    finish(h, Status(err::kNotPermitted, "a monitor session (rgpu-smi) only asks for the pool status"));
    return Status::ok();
  }
  if (has_sticky_.load(std::memory_order_acquire) && req.which() != R::HOST_FUNC_DONE) {
    // After a kernel fault the session only answers with that fault
    // (sendReply substitutes it).
    if (h.bulk_len) RGPU_TRY(reader_->skipBulk(h));
    if (!(h.flags & protocol::kFlagAsync)) sendReply(h.seq, Status::ok(), nullptr);
    return Status::ok();
  }
  auto which = static_cast<size_t>(req.which());
  if (h.flags & protocol::kFlagTimed) {
    timed_dispatch_ns_ = common::monotonicNs();
    timed_seq_.store(h.seq, std::memory_order_release);
  }
  if (which < handlers().size() && handlers()[which]) return (this->*handlers()[which])(h, req);
  // A call this server does not know (a newer client): refuse it, keep serving.
  RGPU_LOG_WARN("session {}: unknown call {} from client", session_id_, static_cast<int>(req.which()));
  if (h.bulk_len) RGPU_TRY(reader_->skipBulk(h));
  finish(h, Status(err::kNotSupported, "call " + std::to_string(static_cast<int>(req.which())) +
                                          " is not supported by this server (version " RGPU_VERSION ")"));
  return Status::ok();
}

Status Session::bulkNotExpected(const FrameHeader& h) const {
  // Requests that carry bulk bytes must consume them whatever the outcome.
  if (h.bulk_len) return Status(err::kInvalidValue, "unexpected bulk payload");
  return Status::ok();
}

Status Session::onPing(const FrameHeader& h, wire::Request::Reader) {
  RGPU_TRY(bulkNotExpected(h));
  finish(h, Status::ok());
  return Status::ok();
}

Status Session::onPoolStatus(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
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

Status Session::onPoolMembers(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = pool_.members();
  if (!m) return finish(h, m.status()), Status::ok();
  if (m->size() % sizeof(capnp::word)) return finish(h, Status(err::kUnknown, "malformed members answer")), Status::ok();
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(m->size() / sizeof(capnp::word));
  std::memcpy(words.begin(), m->data(), words.size() * sizeof(capnp::word));
  capnp::FlatArrayMessageReader pr(words, common::readerOptions());
  auto members = pr.getRoot<wire::PoolMembers>();
  finish(h, Status::ok(), [&](auto& r) { r.setPoolMembers(members); });
  return Status::ok();
}

Status Session::onSessionMove(const FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getSessionMove();
  if (!monitor_) return finish(h, Status(err::kNotPermitted, "sessions are moved from rgpu-smi")), Status::ok();
  // (Blocks this monitor session while the daemon moves the other.)
  auto r = pool_.moveSession(m.getSession(), m.getMember());
  if (!r) return finish(h, r.status()), Status::ok();
  finish(h, Status::ok(), [&](auto& reply) { reply.setMessage(*r); });
  return Status::ok();
}

}  // namespace rgpu::server
