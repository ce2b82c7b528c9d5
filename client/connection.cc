#include "client/connection.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/spin.h"
#include "protocol/frame.h"

namespace rgpu::client {

using protocol::FrameHeader;
using protocol::FrameType;

namespace {
// A batch larger than this is written by the posting thread itself, which
// bounds memory when the application outruns the link.
constexpr size_t kMaxBatchBytes = 256 * 1024;
constexpr size_t kMaxSpareBytes = 2 * kMaxBatchBytes;  // a written batch's buffer kept for the next
// Poll this many times, yielding the CPU in between, before sleeping on a
// reply: a loopback or LAN round trip often completes within it, and a futex
// sleep and wake cost several microseconds. The reader (the receiver thread,
// or a caller reading for itself) busy-polls the socket meanwhile (bounded,
// see TlsConnection::readSome), so the reply is picked up without a wake-up
// either.
constexpr int kSpinPolls = 50;
// How long the receiver stays out of the way after a caller read its own
// reply (Connection's read role): back-to-back calls wake no other thread, and
// frames nobody waits for are read at most this late.
constexpr auto kReceiverPark = std::chrono::milliseconds(1);
// The client acknowledges what it received this often, so the server can drop
// its copies (it keeps them for a resume).
constexpr uint64_t kAckEveryReplies = 64;
constexpr uint64_t kAckEveryBulkBytes = 256 * 1024;
constexpr uint64_t kAckEveryNotifications = 16;
// Device printf output held until the program's next flush point; past it the
// rest is dropped (a GPU's printf FIFO overflows the same way).
constexpr size_t kMaxDeviceOutput = 64u << 20;
// A posted bulk payload this large is not copied for replay: the posting call
// waits (one round trip) until the server has dispatched it, so the caller's
// buffer can serve a replay meanwhile. Smaller ones are copied.
constexpr uint64_t kHoldBulkBytes = 1 << 20;
}  // namespace

// Must match the daemon's (server/daemon/daemon.h): "rgpu-rs2" + the session's
// 16-byte resume id from the Welcome.
std::string resumePreamble(const std::string& resume_id) { return "rgpu-rs2" + resume_id; }

// The TLS settings for a connection to `host`. Plaintext sends the token in
// the clear: only to this machine (as the server only listens so on loopback).
Result<std::unique_ptr<common::TlsContext>> clientContext(const ClientConfig& cfg, const std::string& host) {
  if (cfg.insecure_plaintext) {
    if (!common::isLoopbackHost(host))
      return Status(err::kDevicesUnavailable, "insecure_plaintext is only for a server on this machine (loopback), not '" +
                                                  host + "': the token would cross the network in the clear");
    return common::TlsContext::makePlaintext(false);
  }
  common::TlsOptions tls;
  tls.ca_file = cfg.ca;
  tls.cert_file = cfg.cert;
  tls.key_file = cfg.key;
  return common::TlsContext::makeClient(tls);
}

Connection::Connection(std::unique_ptr<common::TlsConnection> conn, std::string server, common::Compression c)
    : server_(std::move(server)), compression_(c) {
  conn_.store(conn.get());
  owned_.push_back(std::move(conn));
}

// "a:1, b:2" -> {"a:1", "b:2"}
static std::vector<std::string> serverList(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= s.size();) {
    size_t comma = s.find(',', at);
    std::string one = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    while (!one.empty() && one.front() == ' ') one.erase(0, 1);
    while (!one.empty() && one.back() == ' ') one.pop_back();
    if (!one.empty()) out.push_back(one);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

Result<std::unique_ptr<Connection>> Connection::connectOne(const ClientConfig& cfg, bool redirected, bool* unreachable,
                                                          uint32_t span_index) {
  *unreachable = false;
  auto hp = common::parseHostPort(cfg.server);
  if (!hp) return Status(err::kDevicesUnavailable, hp.status().message() + " (" + describeSource(cfg) + ")");
  auto compression = common::parseCompression(cfg.compression);
  if (!compression) return compression.status();
  auto ctx = clientContext(cfg, hp->first);
  if (!ctx) return Status(err::kDevicesUnavailable, ctx.status().message() + " (" + describeSource(cfg) + ")");
  auto tc = common::TlsConnection::connect(**ctx, hp->first, hp->second, cfg.server_name,
                                           std::chrono::milliseconds(cfg.connect_timeout_ms));
  if (!tc) {
    *unreachable = true;
    return Status(err::kDevicesUnavailable, "rgpu server " + cfg.server + " unreachable within " +
                                                std::to_string(cfg.connect_timeout_ms) + " ms: " + tc.status().message());
  }
  common::tuneSocket((*tc)->fd(), cfg.dead_after_s);
  std::unique_ptr<Connection> c(new Connection(std::move(*tc), cfg.server, *compression));
  c->cfg_ = cfg;
  c->redirected_ = redirected;
  c->span_index_ = span_index;
  RGPU_TRY(c->handshake(cfg));
  return c;
}

Result<std::unique_ptr<Connection>> Connection::open(const ClientConfig& cfg, HostFuncHandler on_host_func,
                                                    std::vector<SpanPart>* span, std::string* span_from) {
  if (cfg.server.empty())
    return Status(err::kDevicesUnavailable, "no rgpu server configured: set `server` in client.toml or RGPU_SERVER (" +
                                                describeSource(cfg) + ")");
  // Members of a pool, tried in order: one that cannot be reached is passed
  // over; one that answers (accepts, redirects or refuses) decides.
  const auto servers = serverList(cfg.server);
  std::string unreachable_ones;
  Result<std::unique_ptr<Connection>> got = Status(err::kDevicesUnavailable, "no server");
  for (const auto& server : servers) {
    ClientConfig one = cfg;
    one.server = server;
    bool unreachable = false;
    got = connectOne(one, false, &unreachable);
    if (got || !unreachable) break;
    unreachable_ones += (unreachable_ones.empty() ? "" : "; ") + got.status().message();
  }
  if (!got && !unreachable_ones.empty())
    return Status(err::kDevicesUnavailable, (servers.size() > 1 ? "no rgpu server of " + cfg.server + " could be reached: "
                                                                : std::string()) +
                                                unreachable_ones + " (" + describeSource(cfg) + ")");
  if (!got) return got.status();
  std::unique_ptr<Connection> c = std::move(*got);
  if (!c->span_.empty()) {
    // The pool spread the program over several members: the caller opens a part at each.
    if (!span)
      return Status(err::kDevicesUnavailable, "the pool (asked at " + c->server_ + ") spread this program over " +
                                                  std::to_string(c->span_.size()) + " members; this client takes one");
    *span = std::move(c->span_);
    if (span_from) *span_from = c->server_;
    return std::unique_ptr<Connection>();
  }
  if (!c->redirect_.empty()) {
    // The pool places this program on another member: there, once.
    ClientConfig there = c->cfg_;
    there.server = c->redirect_;
    there.server_name.clear();  // verified as its own address says
    const std::string from = c->server_, member = c->redirect_member_;
    c.reset();
    bool unreachable = false;
    auto r = connectOne(there, true, &unreachable);
    if (!r)
      return Status(r.status().code(), "the pool (asked at " + from + ") placed this program on member '" + member +
                                           "' at " + there.server + ", which " +
                                           (unreachable ? "cannot be reached: " + r.status().message() + " (" +
                                                              describeSource(cfg) + ")"
                                                        : "failed: " + r.status().message()));  // (names its config)
    if (!(*r)->redirect_.empty() || !(*r)->span_.empty())
      return Status(err::kDevicesUnavailable, "the pool redirected this program twice (" + from + " -> member '" + member +
                                                  "' at " + there.server + " -> '" +
                                                  ((*r)->span_.empty() ? (*r)->redirect_member_ + "' at " + (*r)->redirect_
                                                                       : std::string("several members'")) +
                                                  "): a member must take a client it was sent");
    c = std::move(*r);
  }
  c->start(std::move(on_host_func));
  return c;
}

Result<std::unique_ptr<Connection>> Connection::openPart(const ClientConfig& cfg, HostFuncHandler on_host_func,
                                                        uint32_t index) {
  bool unreachable = false;
  auto r = connectOne(cfg, true, &unreachable, index);
  if (!r) return r.status();
  if (!(*r)->redirect_.empty() || !(*r)->span_.empty())
    return Status(err::kDevicesUnavailable, "member at " + cfg.server + " sent this program on again: a member must "
                                            "take a client the pool sent it");
  (*r)->start(std::move(on_host_func));
  return std::move(*r);
}

void Connection::start(HostFuncHandler on_host_func) {
  conn_.load()->setBusyPollWhile(&sync_waiters_);
  on_host_func_ = std::move(on_host_func);
  stripes_.setMinBytes(cfg_.stripe_min_bytes);
  stripes_.bind(conn_.load());
  frames_ = std::make_unique<common::FrameReader>(*conn_.load(), protocol::kMaxBulkBytes, &stripes_);
  reader_ = Reader::kReceiver;  // first it reads what came with the handshake
  flusher_ = std::thread([this] { flusherLoop(); });
  receiver_ = std::thread([this] { receiverLoop(); });
  callback_ = std::thread([this] { callbackLoop(); });
  startStripes(welcome_.generation);
}

Connection::~Connection() { close(); }

void Connection::close() {
  if (closing_.exchange(true)) return;
  {
    std::lock_guard lock(batch_mu_);
    // An orderly end: the server frees the session now instead of waiting for a resume.
    if (resume_ && broken().isOk()) acknowledgeLocked(true);
    stopping_ = true;
  }
  batch_cv_.notify_all();
  retry_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  dropStripes();
  {
    std::lock_guard wlock(write_mu_);
    conn_.load()->close();
  }
  reader_cv_.notify_all();  // a parked receiver sees the connection closed now
  if (receiver_.joinable()) receiver_.join();
  if (replay_.joinable()) replay_.join();
  if (stripe_joiner_.joinable()) stripe_joiner_.join();  // (the receiver starts joiners)
  {
    std::lock_guard lock(cb_mu_);
    callbacks_.clear();
    cb_stop_ = true;
  }
  cb_cv_.notify_all();
  if (callback_.joinable()) callback_.join();
}

void Connection::buildHello(capnp::MessageBuilder& msg, const ClientConfig& cfg, bool resume) {
  auto hello = msg.initRoot<wire::Hello>();
  hello.setProtocolVersion(wire::PROTOCOL_VERSION);
  hello.setClientVersion(RGPU_VERSION);
  hello.setToken(cfg.token);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  hello.setHostname(host);
  hello.setPid(static_cast<uint32_t>(getpid()));
  hello.setMonitor(cfg.monitor);
  hello.setResume(cfg.resume && !cfg.monitor);
  hello.setRedirected(redirected_);
  hello.setSpanIndex(span_index_);
  auto req = hello.initRequest();
  req.setCount(cfg.request_devices);
  req.setMinMemory(cfg.request_min_memory);
  req.setMinComputeCapability(cfg.request_min_cc);
  req.setModel(cfg.request_model);
  req.setWaitMs(cfg.request_wait_ms);
  if (!resume) {
    // With a certificate: proof that we hold its key, for this connection only.
    if (auto proof = common::proveClientKey(*conn_.load()))
      hello.setCertProof(kj::arrayPtr(reinterpret_cast<const kj::byte*>(proof->data()), proof->size()));
  }
  if (resume) {
    hello.setResumeToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(resume_token_.data()), resume_token_.size()));
    hello.setResumeSession(welcome_.session_id);
    auto got = hello.initReceived();
    std::lock_guard lock(batch_mu_);
    got.setReplies(repliesFloorLocked());
    got.setNotifications(notify_floor_.load());
  }
}

Status Connection::handshake(const ClientConfig& cfg) {
  common::CallMessage msg;
  buildHello(msg, cfg, false);
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kHello, 0, 0, msg, 0);
  common::TlsConnection& conn = *conn_.load();
  RGPU_TRY(conn.write(frame.data(), frame.size()));

  common::FrameReader reader(conn, 0);
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  Status s = reader.next(h, words);
  if (!s) return Status(err::kDevicesUnavailable, "rgpu server " + server_ + " closed the connection during the handshake: " + s.message());
  if (h.type != FrameType::kWelcome) return Status(err::kDevicesUnavailable, "rgpu server " + server_ + " sent no Welcome");
  try {
    capnp::FlatArrayMessageReader r(words, common::readerOptions());
    auto w = r.getRoot<wire::Welcome>();
    if (w.getError() != 0)
      return Status(w.getError(), "rgpu server " + server_ + " refused this client: " + std::string(w.getMessage()) +
                                      " (" + describeSource(cfg) + ")");
    if (w.hasSpan() && w.getSpan().size() > 0) {
      for (auto part : w.getSpan()) span_.push_back({part.getMember(), part.getAddress(), part.getCount()});
      RGPU_LOG_DEBUG("{} spreads this program over {} members", server_, span_.size());
      return Status::ok();
    }
    if (w.hasRedirect() && w.getRedirect().size() > 0) {
      redirect_ = w.getRedirect();
      redirect_member_ = w.getRedirectMember();
      RGPU_LOG_DEBUG("{} places this program on member '{}' at {}", server_, redirect_member_, redirect_);
      return Status::ok();
    }
    welcome_.identity = w.getIdentity();
    welcome_.backend = w.getBackend();
    welcome_.driver_version = w.getDriverVersion();
    welcome_.session_id = w.getSessionId();
    welcome_.resume_grace_ms = cfg.resume ? w.getResumeGraceMs() : 0;
    auto token = w.getResumeToken();
    resume_token_.assign(reinterpret_cast<const char*>(token.begin()), token.size());
    auto id = w.getResumeId();
    resume_id_.assign(reinterpret_cast<const char*>(id.begin()), id.size());
    resume_ = welcome_.resume_grace_ms > 0 && !resume_token_.empty() && resume_id_.size() == 16;
    welcome_.max_stripes = resume_ ? w.getMaxStripes() : 0;
    welcome_.generation = w.getGeneration();
    resume_buffer_ = cfg.resume_buffer;
    for (auto d : w.getDevices()) {
      Welcome::Device dev;
      dev.name = d.getName();
      auto prop = d.getProp();
      dev.prop.assign(reinterpret_cast<const char*>(prop.begin()), prop.size());
      for (auto a : d.getAttributes()) dev.attributes.push_back(a);
      dev.peer_access = d.getPeerAccess();
      dev.total_mem = d.getTotalMem();
      welcome_.devices.push_back(std::move(dev));
    }
  } catch (const kj::Exception& e) {
    return Status(err::kDevicesUnavailable, std::string("malformed Welcome: ") + e.getDescription().cStr());
  }
  RGPU_LOG_DEBUG("connected to {} as '{}' (session {}, backend {}, {} device(s), resume {})", server_, welcome_.identity,
                 welcome_.session_id, welcome_.backend, welcome_.devices.size(),
                 resume_ ? std::to_string(welcome_.resume_grace_ms) + " ms" : std::string("off"));
  return Status::ok();
}

Status Connection::broken() const {
  if (!is_broken_.load(std::memory_order_acquire)) return Status::ok();  // every asynchronous call asks
  std::lock_guard lock(slots_mu_);
  return broken_;
}

std::string Connection::takeDeviceOutput() {
  std::string out;
  if (!has_output_.load(std::memory_order_acquire)) return out;
  std::lock_guard lock(output_mu_);
  out.swap(device_output_);
  output_dropped_ = false;
  has_output_.store(false, std::memory_order_relaxed);
  return out;
}

Status Connection::takeDeferredError() {
  std::lock_guard lock(slots_mu_);
  Status s = deferred_error_;
  deferred_error_ = Status::ok();
  return s;
}

void Connection::fail(const Status& s) {
  std::vector<Slot*> waiting;
  {
    // Kept requests may point into callers' buffers: gone before they wake.
    std::lock_guard lock(batch_mu_);
    std::lock_guard slock(slots_mu_);
    if (broken_.isOk()) {
      // A session the server ended over a kernel fault keeps that fault's code.
      int code = err::isSticky(s.code()) ? s.code() : err::kDevicesUnavailable;
      broken_ = s.code() == err::kDevicesUnavailable && s.message().rfind("lost the connection", 0) == 0
                    ? s
                    : Status(code, "lost the connection to rgpu server " + server() + ": " + s.message());
      is_broken_.store(true, std::memory_order_release);
      if (!closing_.load()) RGPU_LOG_ERROR("{}", broken_.message());
    }
    for (auto& [seq, slot] : slots_) waiting.push_back(slot);
    slots_.clear();
    kept_.clear();
    kept_buf_.clear();
    kept_bytes_ = 0;
  }
  room_cv_.notify_all();
  for (Slot* slot : waiting) {
    slot->status = broken();
    if (slot->deferred) {
      endDeferred(slot);
      continue;
    }
    slot->state.store(1, std::memory_order_release);
    slot->state.notify_one();
  }
  conn_.load()->shutdown();
  dropStripes();
  {
    std::lock_guard lock(cb_mu_);
    cb_stop_ = true;
  }
  cb_cv_.notify_all();
}

Status Connection::lost(common::TlsConnection& conn, const Status& s) {
  if (resume_ && !closing_.load()) {
    // The receiver notices, reconnects and replays what this wrote.
    conn.shutdown();
    return Status::ok();
  }
  fail(s);
  return s;
}

// ---- kept requests (resume) ------------------------------------------------

void Connection::keepLocked(uint64_t seq, const uint8_t* frame, size_t len, const void* bulk, uint64_t bulk_len,
                            bool copy, bool pinned) {
  Kept k{seq, kept_base_ + kept_buf_.size(), 0, copy ? nullptr : bulk, bulk_len, copy && bulk_len > 0,
         pinned && bulk_len > 0};
  kept_buf_.insert(kept_buf_.end(), frame, frame + len);
  k.end = kept_base_ + kept_buf_.size();
  if (k.bulk_copied) {
    auto* b = static_cast<const uint8_t*>(bulk);
    kept_buf_.insert(kept_buf_.end(), b, b + bulk_len);
  }
  kept_bytes_ += len + (k.bulk_copied ? bulk_len : 0);
  kept_.push_back(k);
}

void Connection::dropKeptLocked(uint64_t upto) {
  if (kept_.empty() || kept_.front().seq > upto) return;
  while (!kept_.empty() && kept_.front().seq <= upto) {
    const Kept& k = kept_.front();
    kept_bytes_ -= (k.end - k.begin) + (k.bulk_copied ? k.bulk_len : 0);
    kept_.pop_front();
  }
  if (kept_.empty()) {
    kept_base_ += kept_buf_.size();
    kept_buf_.clear();
  } else if (uint64_t dead = kept_.front().begin - kept_base_; dead > kept_buf_.size() / 2) {
    kept_buf_.erase(kept_buf_.begin(), kept_buf_.begin() + static_cast<long>(dead));
    kept_base_ += dead;
  }
  room_cv_.notify_all();
}

uint64_t Connection::keptBytes() {
  std::lock_guard lock(batch_mu_);
  return kept_bytes_;
}

Status Connection::waitForRoomLocked(std::unique_lock<std::mutex>& lock, uint64_t bytes) {
  if ((kept_.empty() || kept_bytes_ + bytes <= resume_buffer_) && !is_broken_.load(std::memory_order_acquire))
    return Status::ok();  // room, without slots_mu_ (every asynchronous call asks)
  NeedsReceiver need(*this);  // room comes with what it reads
  room_cv_.wait(lock, [&] {
    std::lock_guard sl(slots_mu_);
    return kept_.empty() || kept_bytes_ + bytes <= resume_buffer_ || !broken_.isOk();
  });
  std::lock_guard sl(slots_mu_);
  return broken_;
}

uint64_t Connection::repliesFloorLocked() {
  std::lock_guard lock(slots_mu_);
  uint64_t floor = next_seq_ - 1;
  for (auto& [seq, slot] : slots_) floor = std::min(floor, seq - 1);
  return floor;
}

void Connection::acknowledgeLocked(bool bye, uint32_t stripe_ready) {
  common::CallMessage msg(64);
  auto a = msg.initRoot<wire::Ack>();
  a.setReplies(repliesFloorLocked());
  a.setNotifications(notify_floor_.load());
  a.setBye(bye);
  a.setStripeReady(stripe_ready);
  bool wake = batch_.empty();
  common::appendFrame(batch_, FrameType::kAck, 0, 0, msg, 0);
  if (wake) batch_cv_.notify_one();
}

// ---- sending ---------------------------------------------------------------------

namespace {
using common::monotonicNs;
// The calling thread's timed call in progress (enqueue stamps it), and its last.
thread_local CallTiming* tl_timing = nullptr;
thread_local CallTiming tl_last_timing;
thread_local bool tl_has_timing = false;
}  // namespace

Status Connection::enqueue(capnp::MessageBuilder& msg, uint8_t flags, const void* bulk, uint64_t bulk_len, bool now,
                           Slot* slot, uint64_t* seq_out, bool pinned) {
  if (Status b = broken(); !b) return b;
  if (!now) {
    // Encoded before batch_mu_ is taken, numbered under it: the flusher finds
    // the lock free more often, and then needs no wake-up through the kernel.
    // (On the stack, not in a thread_local buffer: a thread's exit may still
    // post, from destructors of other thread_locals.)
    uint8_t small[4096];
    std::vector<uint8_t> large;
    const size_t bytes = common::frameBytes(msg);
    uint8_t* frame = small;
    if (bytes > sizeof small) {
      large.resize(bytes);
      frame = large.data();
    }
    common::encodeFrame(frame, FrameType::kRequest, flags, 0, msg, 0);
    bool wake = false, self_flush = false;
    {
      std::unique_lock lock(batch_mu_);
      if (resume_) RGPU_TRY(waitForRoomLocked(lock, 0));
      wake = batch_.empty();
      uint64_t seq = next_seq_++;
      protocol::setHeaderSeq(frame, seq);
      batch_.insert(batch_.end(), frame, frame + bytes);
      if (resume_) keepLocked(seq, frame, bytes, nullptr, 0, false);
      self_flush = batch_.size() > kMaxBatchBytes;
    }
    if (!self_flush) {
      if (wake) batch_cv_.notify_one();
      return Status::ok();
    }
  }
  // An asynchronous bulk is copied for replay, or (large) held until
  // dispatched; a synchronous call's buffer stays valid until its reply,
  // which also ends the need to replay it, and pinned memory until the
  // stream has copied it (post()).
  bool copy_bulk = slot == nullptr && !pinned && bulk_len < kHoldBulkBytes;
  bool hold_bulk = resume_ && now && slot == nullptr && !pinned && bulk_len >= kHoldBulkBytes;
  uint64_t seq = 0;
  if (resume_ && now) {
    // Before write_mu_: room comes from replies, and a resume needs write_mu_
    // to replay before the receiver reads them.
    std::unique_lock lock(batch_mu_);
    RGPU_TRY(waitForRoomLocked(lock, copy_bulk ? bulk_len : 0));
  }
  std::unique_lock wlock(write_mu_);
  std::vector<uint8_t> out;
  size_t last = 0;
  {
    std::lock_guard lock(batch_mu_);
    out = takeBatchLocked();
    if (now) {
      seq = next_seq_++;
      if (slot) {
        std::lock_guard sl(slots_mu_);
        if (!broken_.isOk()) return broken_;
        slots_[seq] = slot;
      }
      if (seq_out) *seq_out = seq;
      last = out.size();
      common::appendFrame(out, FrameType::kRequest, flags, seq, msg, bulk_len);
      if (resume_) keepLocked(seq, out.data() + last, out.size() - last, bulk, bulk_len, copy_bulk, pinned);
    }
  }
  if (tl_timing) tl_timing->built = monotonicNs();
  common::TlsConnection& conn = *conn_.load();
  Status s = bulk_sender_.send(conn, out, last, bulk, now ? bulk_len : 0, compression_, &stripes_);
  if (tl_timing) tl_timing->written = monotonicNs();
  spare_ = std::move(out);
  if (!s) RGPU_TRY(lost(conn, s));
  if (hold_bulk) {
    // Through a resume too: the replay writes from the caller's buffer (and
    // needs write_mu_).
    wlock.unlock();
    NeedsReceiver need(*this);
    std::unique_lock lock(batch_mu_);
    room_cv_.wait(lock, [&] {
      std::lock_guard sl(slots_mu_);
      return kept_.empty() || kept_.front().seq > seq || !broken_.isOk();
    });
  }
  return Status::ok();
}

// The batch written next, leaving in its place the last written one's buffer
// (emptied): a batch does not grow from nothing, a reallocation at a time.
std::vector<uint8_t> Connection::takeBatchLocked() {
  std::vector<uint8_t> out = std::move(spare_);
  if (out.capacity() > kMaxSpareBytes) out = {};  // one large frame's buffer is not kept
  out.clear();
  out.swap(batch_);
  return out;
}

Status Connection::post(capnp::MessageBuilder& msg, const void* bulk, uint64_t bulk_len, bool pinned) {
  return enqueue(msg, protocol::kFlagAsync, bulk, bulk_len, bulk_len > 0, nullptr, nullptr, pinned);
}

Status Connection::postExpectingData(capnp::MessageBuilder& msg, void* in, uint64_t in_len) {
  auto* slot = new Slot;
  slot->deferred = true;
  slot->in = in;
  slot->in_len = in_len;
  {
    std::lock_guard lock(deferred_mu_);
    auto start = reinterpret_cast<uint64_t>(in);
    deferred_ranges_.emplace(start, start + in_len);
  }
  uint64_t seq = 0;
  Status s = enqueue(msg, 0, nullptr, 0, true, slot, &seq);
  // Registered (seq set), a failure went through fail(), which ended the slot.
  if (!s && seq == 0) endDeferred(slot);
  return s;
}

Status Connection::postScatter(capnp::MessageBuilder& msg, std::vector<uint8_t> bulk,
                               std::vector<std::pair<void*, uint64_t>> parts) {
  auto* slot = new Slot;
  slot->deferred = true;
  slot->own_bulk = std::move(bulk);
  uint64_t total = 0;
  for (auto& [p, n] : parts) total += n;
  slot->scratch.resize(total);
  slot->in = slot->scratch.data();
  slot->in_len = total;
  slot->parts = std::move(parts);
  {
    std::lock_guard lock(deferred_mu_);
    for (auto& [p, n] : slot->parts) {
      auto start = reinterpret_cast<uint64_t>(p);
      deferred_ranges_.emplace(start, start + n);
    }
  }
  uint64_t seq = 0;
  Status s = enqueue(msg, 0, slot->own_bulk.data(), slot->own_bulk.size(), true, slot, &seq);
  if (!s && seq == 0) endDeferred(slot);
  return s;
}

void Connection::endDeferred(Slot* slot) {
  {
    std::lock_guard lock(deferred_mu_);
    auto forget = [&](void* p, uint64_t n) {
      auto start = reinterpret_cast<uint64_t>(p);
      auto [b, e] = deferred_ranges_.equal_range(start);
      for (auto it = b; it != e; ++it)
        if (it->second == start + n) {
          deferred_ranges_.erase(it);
          break;
        }
    };
    if (slot->parts.empty()) forget(slot->in, slot->in_len);
    for (auto& [p, n] : slot->parts) forget(p, n);
  }
  deferred_cv_.notify_all();
  delete slot;
}

void Connection::waitForWritesInto(const void* p, uint64_t len) {
  auto start = reinterpret_cast<uint64_t>(p), end = start + len;
  // Kept requests that send from [p, p + len) (pinned memory, kept by pointer).
  auto readsPending = [&] {
    for (const Kept& k : kept_)
      if (k.bulk_pinned && reinterpret_cast<uint64_t>(k.bulk) < end &&
          reinterpret_cast<uint64_t>(k.bulk) + k.bulk_len > start)
        return true;
    return false;
  };
  bool pending;
  {
    std::lock_guard lock(batch_mu_);
    pending = readsPending();
  }
  if (pending) {
    // The server acknowledges kept requests only now and then: a ping's reply
    // acknowledges every request before it (or the connection is gone, and
    // fail() dropped them).
    common::CallMessage msg(64);
    msg.initRoot<wire::Request>().setPing();
    (void)call(msg);
    NeedsReceiver need(*this);
    std::unique_lock lock(batch_mu_);
    room_cv_.wait(lock, [&] { return !readsPending(); });
  }
  NeedsReceiver need(*this);  // what lands comes with what the reader reads
  std::unique_lock lock(deferred_mu_);
  deferred_cv_.wait(lock, [&] {
    for (auto it = deferred_ranges_.begin(); it != deferred_ranges_.end() && it->first < end; ++it)
      if (it->second > start) return false;
    return true;
  });
}

bool Connection::lastTiming(CallTiming* out) {
  if (!tl_has_timing) return false;
  *out = tl_last_timing;
  return true;
}

Reply Connection::call(capnp::MessageBuilder& msg, const void* bulk, uint64_t bulk_len, void* in, uint64_t in_len) {
  Reply reply;
  Slot slot;
  slot.in = in;
  slot.in_len = in_len;
  uint64_t seq = 0;
  CallTiming timing;
  slot.timed = timed_.load(std::memory_order_relaxed);
  if (slot.timed) {
    timing.entered = monotonicNs();
    tl_timing = &timing;
  }
  sync_waiters_.fetch_add(1, std::memory_order_relaxed);
  Status s = enqueue(msg, slot.timed ? protocol::kFlagTimed : 0, bulk, bulk_len, true, &slot, &seq);
  tl_timing = nullptr;
  if (!s) {
    sync_waiters_.fetch_sub(1, std::memory_order_relaxed);
    std::lock_guard lock(slots_mu_);
    slots_.erase(seq);
    reply.status = s;
    return reply;
  }
  // The reply read by this thread while nobody else reads; or else by the
  // reader: spin a little while a core is free (common/spin.h: never on a
  // busy machine), then sleep.
  if (slot.state.load(std::memory_order_acquire) == 0) (void)readFor(slot);
  if (slot.state.load(std::memory_order_acquire) == 0) {
    NeedsReceiver need(*this);
    for (int i = 0; i < kSpinPolls && slot.state.load(std::memory_order_acquire) == 0 && common::spinYield(); ++i) {
    }
    while (slot.state.load(std::memory_order_acquire) == 0) slot.state.wait(0, std::memory_order_acquire);
  }
  if (slot.timed) timing.returned = monotonicNs();
  sync_waiters_.fetch_sub(1, std::memory_order_relaxed);
  reply.status = slot.status;
  reply.words = std::move(slot.words);
  if (slot.timed && !reply.words.empty()) {
    try {
      auto times = reply.reader().getServerTimes();
      if (times.size() >= 3) {
        timing.received = slot.received;
        timing.server_read = times[0];
        timing.server_dispatch = times[1];
        timing.server_replied = times[2];
        tl_last_timing = timing;
        tl_has_timing = true;
      }
    } catch (const kj::Exception&) {
    }
  }
  if (reply.status && !reply.words.empty()) {
    try {
      auto r = reply.reader();
      if (r.getBlasStatus() != 0) reply.status = Status(err::kBlasStatusBase + r.getBlasStatus(), r.getMessage());
      else if (r.getError() != 0) reply.status = Status(r.getError(), r.getMessage());
      if (r.getAsyncError() != 0) reply.async_error = Status(r.getAsyncError(), r.getMessage());
    } catch (const kj::Exception& e) {
      reply.status = Status(err::kUnknown, std::string("malformed reply: ") + e.getDescription().cStr());
    }
  }
  return reply;
}

void Connection::flusherLoop() {
  std::unique_lock lock(batch_mu_);
  for (;;) {
    batch_cv_.wait(lock, [&] { return stopping_ || !batch_.empty(); });
    if (batch_.empty() && stopping_) return;
    // write_mu_ comes before batch_mu_; with write_mu_ free the batch is taken
    // under the lock held already (one acquisition of batch_mu_ per write, so
    // fewer callers find it taken and must wake the flusher through the kernel).
    std::unique_lock wlock(write_mu_, std::try_to_lock);
    if (!wlock.owns_lock()) {
      lock.unlock();
      wlock.lock();
      lock.lock();
    }
    std::vector<uint8_t> out = takeBatchLocked();
    lock.unlock();
    if (!out.empty()) {
      common::TlsConnection& conn = *conn_.load();
      if (Status s = conn.write(out.data(), out.size()); !s) (void)lost(conn, s);
    }
    spare_ = std::move(out);
    wlock.unlock();
    lock.lock();
  }
}

// ---- receiving ----------------------------------------------------------------------

void Connection::receiverLoop() {
  common::TlsConnection* conn = conn_.load();
  for (;;) {
    Status s = receive(*conn);  // (called and returning with the read role)
    if (closing_.load() || !resume_ || session_over_) {
      fail(s);
      return;  // (with the role: nothing reads a failed connection again)
    }
    auto next = reconnect(s);
    if (!next) {
      fail(next.status());
      return;
    }
    conn = *next;
    frames_ = std::make_unique<common::FrameReader>(*conn, protocol::kMaxBulkBytes, &stripes_);
  }
}

Status Connection::receive(common::TlsConnection& conn) {
  for (bool holding = true;;) {
    if (holding) {
      // What is there is read before the role goes back: nothing may stay
      // buffered above the socket, which is all a waiter without the role
      // sees (a closed connection's read reports why).
      Status s;
      while (s && (!conn.isOpen() || conn.readable(0))) s = readFrame(*frames_);
      if (!s) return s;
      std::lock_guard lock(reader_mu_);
      reader_ = Reader::kNone;
      holding = false;
    }
    {
      // Out of the way while a caller reads, and for kReceiverPark after one
      // did, unless someone waits on the receiver (timed waits: a caller
      // gives the role back without a wake-up).
      std::unique_lock lock(reader_mu_);
      for (;;) {
        if (!read_failed_.isOk()) {
          Status s = std::move(read_failed_);
          read_failed_ = Status::ok();
          reader_ = Reader::kReceiver;
          return s;
        }
        bool park = reader_ == Reader::kCaller ||
                    (needs_receiver_ == 0 && std::chrono::steady_clock::now() < caller_read_ + kReceiverPark);
        if (!park) break;
        reader_cv_.wait_for(lock, kReceiverPark);
      }
    }
    // Data comes (or the connection ends), waited for without the role.
    (void)conn.socketReadable(-1);
    std::lock_guard lock(reader_mu_);
    if (reader_ == Reader::kNone && read_failed_.isOk()) {  // (else a caller has it)
      reader_ = Reader::kReceiver;
      holding = true;
    }
  }
}

bool Connection::readFor(Slot& slot) {
  {
    std::lock_guard lock(reader_mu_);
    if (reader_ != Reader::kNone || !read_failed_.isOk()) return false;
    reader_ = Reader::kCaller;
  }
  Status s;
  while (s && slot.state.load(std::memory_order_acquire) == 0) s = readFrame(*frames_);
  if (s) caller_reads_.fetch_add(1, std::memory_order_relaxed);
  // Frames that came with the reply are handled too: the role goes back with
  // nothing buffered above the socket (receive()).
  while (s && frames_->connection().buffered()) s = readFrame(*frames_);
  bool wake;
  {
    std::lock_guard lock(reader_mu_);
    reader_ = Reader::kNone;
    caller_read_ = std::chrono::steady_clock::now();
    if (!s) read_failed_ = s;  // the receiver reconnects or ends the session
    wake = !s || needs_receiver_ > 0;
  }
  if (wake) reader_cv_.notify_all();
  return true;
}

Connection::NeedsReceiver::NeedsReceiver(Connection& c) : c_(c) {
  bool first;
  {
    std::lock_guard lock(c_.reader_mu_);
    first = c_.needs_receiver_++ == 0;
  }
  if (first) c_.reader_cv_.notify_all();
}

Connection::NeedsReceiver::~NeedsReceiver() {
  std::lock_guard lock(c_.reader_mu_);
  --c_.needs_receiver_;
}

Status Connection::readFrame(common::FrameReader& reader) {
  FrameHeader h;
  kj::ArrayPtr<const capnp::word> words;
  Status s = reader.next(h, words);
  if (!s) {
    if (s.code() != err::kDevicesUnavailable) session_over_ = true;  // garbage from the server
    return s;
  }
  if (h.type == FrameType::kAck) {
    try {
      capnp::FlatArrayMessageReader r(words, common::readerOptions());
      uint64_t done = r.getRoot<wire::Ack>().getDispatched();
      std::lock_guard lock(batch_mu_);
      dropKeptLocked(done);
    } catch (const kj::Exception& e) {
      session_over_ = true;
      return Status(err::kUnknown, std::string("malformed acknowledgement: ") + e.getDescription().cStr());
    }
    return Status::ok();
  }
  if (h.type == FrameType::kNotify) {
    // After a resume the server resends what it was not told arrived. A
    // notification counts as arrived once handled: one whose bulk the
    // connection lost comes again.
    const bool duplicate = resume_ && (h.seq <= notify_floor_ || notify_seen_.count(h.seq));
    auto arrived = [&] {
      if (!resume_ || duplicate) return;
      notify_seen_.insert(h.seq);
      while (notify_seen_.count(notify_floor_ + 1)) notify_seen_.erase(++notify_floor_);  // only this thread writes it
      if (++notifies_since_ack_ >= kAckEveryNotifications) {
        std::lock_guard lock(batch_mu_);
        acknowledgeLocked();
        notifies_since_ack_ = 0;
      }
    };
    bool bulk_read = false;
    if (!duplicate) {
      try {
        capnp::FlatArrayMessageReader r(words, common::readerOptions());
        auto n = r.getRoot<wire::Notify>();
        if (n.isGraphOutput()) {
          // Lost in the middle of its bytes: it comes again after a resume.
          RGPU_TRY(graphOutput(h, reader, n.getGraphOutput().getCall(), n.getGraphOutput().getOffset()));
          bulk_read = true;
        } else if (n.isHostFuncReady()) {
          {
            std::lock_guard lock(cb_mu_);
            callbacks_.push_back(n.getHostFuncReady());
          }
          cb_cv_.notify_one();
        } else if (n.isOutput()) {
          // Device printf: this program's stdout at its next flush point.
          auto text = n.getOutput();
          std::lock_guard lock(output_mu_);
          if (device_output_.size() + text.size() <= kMaxDeviceOutput) {
            device_output_.append(reinterpret_cast<const char*>(text.begin()), text.size());
            has_output_.store(true, std::memory_order_release);
          } else if (!output_dropped_) {
            output_dropped_ = true;
            RGPU_LOG_WARN("more than {} bytes of device printf output arrived without a synchronisation point; "
                          "the rest is dropped", kMaxDeviceOutput);
          }
        } else if (n.isGoodbye()) {
          session_over_ = true;
          int code = n.getGoodbyeError() ? n.getGoodbyeError() : err::kDevicesUnavailable;
          return Status(code, "server closed the session: " + std::string(n.getGoodbye()));
        }
      } catch (const kj::Exception& e) {
        session_over_ = true;
        return Status(err::kUnknown, std::string("malformed notification: ") + e.getDescription().cStr());
      }
    }
    if (h.bulk_len && !bulk_read && !reader.skipBulk(h)) {
      session_over_ = true;
      return Status(err::kUnknown, "bad notification bulk");
    }
    arrived();
    return Status::ok();
  }
  if (h.type != FrameType::kReply) {
    session_over_ = true;
    return Status(err::kUnknown, "unexpected frame type from server");
  }
  Slot* slot = nullptr;
  {
    std::lock_guard lock(slots_mu_);
    auto it = slots_.find(h.seq);
    if (it != slots_.end()) {
      slot = it->second;
      slots_.erase(it);
    }
  }
  if (!slot) {
    // A reply nobody waits for: a resent duplicate after a resume; otherwise a server bug.
    if (resume_) RGPU_LOG_DEBUG("duplicate reply for call {} from {}", h.seq, server());
    else RGPU_LOG_WARN("reply for unknown call {} from {}", h.seq, server());
    if (h.bulk_len && !reader.skipBulk(h)) return Status(err::kUnknown, "bad reply bulk");
    return Status::ok();
  }
  slot->words.assign(reinterpret_cast<const uint64_t*>(words.begin()), reinterpret_cast<const uint64_t*>(words.end()));
  if (h.bulk_len) {
    if (h.bulk_len != slot->in_len || !slot->in) {
      slot->status = Status(err::kUnknown, "reply carries " + std::to_string(h.bulk_len) + " bytes, expected " +
                                               std::to_string(slot->in_len));
      s = reader.skipBulk(h);
    } else {
      s = reader.readBulk(h, slot->in);
      if (s && !slot->parts.empty()) {
        uint64_t off = 0;
        for (size_t i = 0; i < slot->parts.size(); ++i) {
          auto [p, n] = slot->parts[i];
          if (i >= slot->delivered.size() || !slot->delivered[i]) std::memcpy(p, slot->scratch.data() + off, n);
          off += n;
        }
      }
    }
    if (!s) {
      // Lost in the middle of the data: the reply comes again after a resume.
      std::lock_guard lock(slots_mu_);
      slots_[h.seq] = slot;
      return s;
    }
  }
  if (resume_) {
    // The server dispatched this request and everything before it; the
    // kept copies go before the caller (whose buffer one may be) wakes.
    std::lock_guard lock(batch_mu_);
    dropKeptLocked(h.seq);
    bulk_since_ack_ += h.bulk_len;
    if (++replies_since_ack_ >= kAckEveryReplies || bulk_since_ack_ >= kAckEveryBulkBytes) {
      replies_since_ack_ = bulk_since_ack_ = 0;
      // This reply no longer counts as awaited once its slot is gone, so
      // the floor can pass it.
      acknowledgeLocked();
    }
  }
  if (slot->deferred) {
    // Deferred calls report through the asynchronous error channel.
    try {
      capnp::FlatArrayMessageReader r(common::asWords(slot->words), common::readerOptions());
      auto rep = r.getRoot<wire::Reply>();
      int e = rep.getError() ? rep.getError() : rep.getAsyncError();
      if (e || !slot->status) {
        std::lock_guard lock(slots_mu_);
        if (deferred_error_.isOk())
          deferred_error_ = slot->status ? Status(e, rep.getMessage()) : slot->status;
      }
    } catch (const kj::Exception&) {
    }
    endDeferred(slot);
    return Status::ok();
  }
  if (slot->timed) slot->received = monotonicNs();
  slot->state.store(1, std::memory_order_release);
  slot->state.notify_one();
  return Status::ok();
}

Result<common::TlsConnection*> Connection::reconnect(const Status& why) {
  if (replay_.joinable()) replay_.join();
  dropStripes();
  const uint32_t grace = welcome_.resume_grace_ms;
  const uint64_t session = welcome_.session_id;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace);
  RGPU_LOG_WARN("lost the connection to rgpu server {} ({}); resuming session {} (the server waits {} ms)", server_,
                why.message(), session, grace);
  auto hp = common::parseHostPort(cfg_.server);
  auto ctx = hp ? clientContext(cfg_, hp->first) : Result<std::unique_ptr<common::TlsContext>>(hp.status());
  if (!hp || !ctx) return Status(err::kDevicesUnavailable, "cannot reconnect: bad server address or TLS settings");
  std::string last = why.message();
  auto backoff = std::chrono::milliseconds(50);
  int redirects = 0;
  for (int attempt = 1;; ++attempt) {
    if (closing_.load()) return Status(err::kDevicesUnavailable, "the program is exiting");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return Status(err::kDevicesUnavailable,
                    "lost the connection to rgpu server " + server_ + " and could not resume session " +
                        std::to_string(session) + " within the server's grace period of " + std::to_string(grace) +
                        " ms (after which it frees the session): " + last + " (" + describeSource(cfg_) + ")");
    bool refused = false;
    auto tc = common::TlsConnection::connect(**ctx, hp->first, hp->second, cfg_.server_name,
                                             std::min(left, std::chrono::milliseconds(cfg_.connect_timeout_ms)),
                                             resumePreamble(resume_id_), resume_token_, &refused);
    // Nothing listens there: the daemon that holds every resumable session
    // (and outlives none of its workers) is gone, and the session with it.
    if (refused)
      return Status(err::kDevicesUnavailable, "lost the connection to rgpu server " + server_ +
                                                  ", which is no longer running (connection refused): session " +
                                                  std::to_string(session) + " is gone (" + describeSource(cfg_) + ")");
    Result<common::TlsConnection*> taken = Status(err::kDevicesUnavailable, "");
    if (tc) {
      common::tuneSocket((*tc)->fd(), cfg_.dead_after_s);
      common::CallMessage msg;
      buildHello(msg, cfg_, true);
      std::vector<uint8_t> frame;
      common::appendFrame(frame, FrameType::kHello, 0, 0, msg, 0);
      Status s = (*tc)->write(frame.data(), frame.size());
      // The Welcome must come within what is left.
      common::TlsConnection* raw = tc->get();
      FrameHeader h;
      std::vector<uint64_t> words;
      if (s) s = readFrameWithin(*raw, std::min(left, std::chrono::milliseconds(cfg_.connect_timeout_ms)), h, words);
      if (s && h.type != FrameType::kWelcome) s = Status(err::kDevicesUnavailable, "no Welcome");
      if (s) {
        uint64_t dispatched = 0;
        uint32_t generation = 0;
        try {
          capnp::FlatArrayMessageReader r(common::asWords(words), common::readerOptions());
          auto w = r.getRoot<wire::Welcome>();
          if (w.getError() != 0)
            return Status(err::kDevicesUnavailable, "lost the connection to rgpu server " + server_ +
                                                        " and it refused to resume session " + std::to_string(session) +
                                                        ": " + std::string(w.getMessage()) + " (" + describeSource(cfg_) + ")");
          if (w.hasRedirect() && w.getRedirect().size() > 0) {
            // The session moved to another member of the pool (docs/migration.md):
            // resume there, with a grace period of its own.
            std::string to = w.getRedirect(), member = w.getRedirectMember();
            auto next = common::parseHostPort(to);
            auto next_ctx = next ? clientContext(cfg_, next->first)
                                 : Result<std::unique_ptr<common::TlsContext>>(next.status());
            if (++redirects > kMaxResumeRedirects || !next || !next_ctx)
              return Status(err::kDevicesUnavailable,
                            "rgpu server " + server_ + " sent session " + std::to_string(session) + " to member '" +
                                member + "' at " + to + ", which " +
                                (redirects > kMaxResumeRedirects ? std::string("is one redirect too many")
                                                                 : "is no address this client can use") +
                                " (" + describeSource(cfg_) + ")");
            RGPU_LOG_WARN("session {} moved from rgpu server {} to member '{}' at {}; resuming it there", session,
                          server_, member, to);
            {
              std::lock_guard lock(server_mu_);
              server_ = to;
            }
            cfg_.server = to;
            cfg_.server_name.clear();  // verified as its own address says
            hp = std::move(next);
            ctx = std::move(next_ctx);
            deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace);
            backoff = std::chrono::milliseconds(50);
            last = "moved to member '" + member + "'";
            continue;
          }
          if (!w.getResumed()) return Status(err::kDevicesUnavailable, "rgpu server " + server_ + " did not resume the session");
          dispatched = w.getDispatched();
          generation = w.getGeneration();
        } catch (const kj::Exception& e) {
          return Status(err::kDevicesUnavailable, std::string("malformed Welcome: ") + e.getDescription().cStr());
        }
        raw->setBusyPollWhile(&sync_waiters_);
        {
          std::lock_guard lock(owned_mu_);
          owned_.push_back(std::move(*tc));
        }
        // The replay thread writes what the server lacks, in order and before
        // anything new (it holds write_mu_ from the swap on), while this
        // thread goes back to reading: the server may be resending replies,
        // which must be read for its writes (and so its reads) to progress.
        std::mutex latch_mu;
        std::condition_variable latch;
        bool holding = false;
        replay_ = std::thread([this, raw, dispatched, session, attempt, &latch_mu, &latch, &holding] {
          std::lock_guard wlock(write_mu_);
          std::vector<std::pair<std::vector<uint8_t>, std::pair<const void*, uint64_t>>> todo;
          uint64_t bytes = 0;
          {
            std::lock_guard lock(batch_mu_);
            batch_.clear();  // all of it is kept, and replayed below
            dropKeptLocked(dispatched);
            for (const Kept& k : kept_) {
              const uint8_t* f = kept_buf_.data() + (k.begin - kept_base_);
              std::vector<uint8_t> frame(f, f + (k.end - k.begin));
              const void* bulk = k.bulk;
              if (k.bulk_copied) {
                // Copied out too: the receiver may compact kept_buf_ meanwhile.
                frame.insert(frame.end(), f + (k.end - k.begin), f + (k.end - k.begin) + k.bulk_len);
                bulk = nullptr;
              }
              bytes += frame.size() + (bulk ? k.bulk_len : 0);
              todo.push_back({std::move(frame), {bulk, k.bulk ? k.bulk_len : 0}});
            }
            conn_.store(raw);
          }
          {
            std::lock_guard lock(latch_mu);
            holding = true;
          }
          latch.notify_all();
          common::BulkSender sender;
          for (auto& [frame, bulk] : todo) {
            // A copied bulk already follows the frame's bytes (sent raw, as stored).
            Status s = bulk.first ? sender.send(*raw, frame, 0, bulk.first, bulk.second, compression_)
                                  : raw->write(frame.data(), frame.size());
            if (!s) {
              raw->shutdown();  // the receiver notices and resumes again
              return;
            }
          }
          resumes_.fetch_add(1);
          RGPU_LOG_WARN("resumed session {} on rgpu server {} (attempt {}): {} request(s) replayed ({} bytes)", session,
                        server(), attempt, todo.size(), bytes);
        });
        std::unique_lock lock(latch_mu);
        latch.wait(lock, [&] { return holding; });
        // New stripes for the new connection (a replay goes unstriped: it
        // was kept whole).
        stripes_.bind(raw);
        startStripes(generation);
        return raw;
      }
      last = s.message();
    } else {
      last = tc.status().message();
    }
    std::unique_lock lock(retry_mu_);
    retry_cv_.wait_for(lock, std::min(backoff, left), [&] { return closing_.load(); });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

Status Connection::graphOutput(const protocol::FrameHeader& h, common::FrameReader& reader, uint64_t call,
                               uint64_t offset) {
  Slot* slot = nullptr;
  {
    std::lock_guard lock(slots_mu_);
    auto it = slots_.find(call);
    if (it != slots_.end()) slot = it->second;
  }
  // The part of the launch's device-to-host bytes that starts at `offset`.
  size_t part = slot ? slot->parts.size() : 0;
  uint64_t off = 0;
  for (size_t i = 0; slot && i < slot->parts.size(); off += slot->parts[i++].second)
    if (off == offset) {
      part = i;
      break;
    }
  if (!slot || part == slot->parts.size() || slot->parts[part].second != h.bulk_len) {
    RGPU_LOG_WARN("graph output for call {} at offset {} ({} bytes) matches no copy of a launch", call, offset,
                  h.bulk_len);
    return h.bulk_len && !reader.skipBulk(h) ? Status(err::kUnknown, "bad notification bulk") : Status::ok();
  }
  // The receiver is the only thread that touches a deferred slot's parts.
  RGPU_TRY(reader.readBulk(h, slot->parts[part].first));
  if (slot->delivered.size() < slot->parts.size()) slot->delivered.resize(slot->parts.size());
  slot->delivered[part] = true;
  return Status::ok();
}

void Connection::callbackLoop() {
  for (;;) {
    uint64_t id;
    {
      std::unique_lock lock(cb_mu_);
      cb_cv_.wait(lock, [&] { return !callbacks_.empty() || cb_stop_; });
      if (callbacks_.empty()) return;
      id = callbacks_.front();
      callbacks_.pop_front();
    }
    if (on_host_func_) on_host_func_(id);
  }
}

}  // namespace rgpu::client
