#include "client/connection.h"

#include <sys/prctl.h>
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
// A posted bulk payload this large is not copied for replay: the posting call
// waits (one round trip) until the server has dispatched it, so the caller's
// buffer can serve a replay meanwhile. Smaller ones are copied.
constexpr uint64_t kHoldBulkBytes = 1 << 20;
// A stream of copied payloads reuses the kept log's spare chunk.
static_assert(KeptLog::kChunkBytes >= kHoldBulkBytes + 64 * 1024, "a copied bulk and its frame fit one kept chunk");
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
  flusher_bell_.ring();
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

void Connection::dropKeptLocked(uint64_t upto) {
  if (kept_.empty() || kept_.front().seq > upto) return;
  kept_.dropThrough(upto);
  room_cv_.notify_all();
}

uint64_t Connection::keptBytes() {
  std::lock_guard lock(batch_mu_);
  return kept_.bytes();
}

Status Connection::waitForRoomLocked(std::unique_lock<common::AdaptiveMutex>& lock, uint64_t bytes) {
  if ((kept_.empty() || kept_.bytes() + bytes <= resume_buffer_) && !is_broken_.load(std::memory_order_acquire))
    return Status::ok();  // room, without slots_mu_ (every asynchronous call asks)
  NeedsReceiver need(*this);  // room comes with what it reads
  room_cv_.wait(lock, [&] {
    std::lock_guard sl(slots_mu_);
    return kept_.empty() || kept_.bytes() + bytes <= resume_buffer_ || !broken_.isOk();
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
  const size_t before = batch_.size();
  common::appendFrame(batch_, FrameType::kAck, 0, 0, msg, 0);
  // Urgent: the server may be waiting for it (a large reply's sender is held
  // until acknowledged, server/session/outbox.h).
  flush_now_ = true;
  if (claimFlusherWakeLocked(before)) flusher_bell_.ring();  // (batch_mu_ held: the caller's)
}

bool Connection::claimFlusherWakeLocked(size_t before) {
  // A napping flusher comes back by itself (a wake-up costs the calling
  // thread a system call, and the flusher a context switch, per batch),
  // unless the batch filled or holds an urgent frame; a busy one finds the
  // batch when it looks next.
  const bool wake = flusher_state_ == Flusher::kIdle ||
                    (flusher_state_ == Flusher::kNapping &&
                     (flush_now_ || (before < kNapWakeBytes && batch_.size() >= kNapWakeBytes)));
  if (wake) flusher_state_ = Flusher::kBusy;
  return wake;
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
      const size_t before = batch_.size();
      uint64_t seq = next_seq_++;
      protocol::setHeaderSeq(frame, seq);
      batch_.insert(batch_.end(), frame, frame + bytes);
      wake = claimFlusherWakeLocked(before);  // (rung below, whoever writes this batch)
      if (resume_) kept_.push(seq, frame, bytes, nullptr, 0, false, false);
      self_flush = batch_.size() > kMaxBatchBytes;
    }
    if (wake) flusher_bell_.ring();
    if (!self_flush) return Status::ok();
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
      if (resume_) kept_.push(seq, out.data() + last, out.size() - last, bulk, bulk_len, copy_bulk, pinned);
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
  flush_now_ = false;
  return out;
}

Status Connection::post(capnp::MessageBuilder& msg, const void* bulk, uint64_t bulk_len, bool pinned) {
  return enqueue(msg, protocol::kFlagAsync, bulk, bulk_len, bulk_len > 0, nullptr, nullptr, pinned);
}

Status Connection::postNow(capnp::MessageBuilder& msg) {
  return enqueue(msg, protocol::kFlagAsync, nullptr, 0, true, nullptr, nullptr, false);
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
    return kept_.any([&](const Kept& k) {
      return k.bulk_pinned && reinterpret_cast<uint64_t>(k.bulk) < end &&
             reinterpret_cast<uint64_t>(k.bulk) + k.bulk_len > start;
    });
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
  // The nap is short: keep the kernel from stretching it by its default
  // 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 5000UL, 0, 0, 0);
  std::unique_lock lock(batch_mu_);
  for (;;) {
    while (!stopping_ && batch_.empty()) flusherSleepLocked(lock, Flusher::kIdle, common::Doorbell::kForever);
    if (batch_.empty() && stopping_) return;
    // write_mu_ comes before batch_mu_; with write_mu_ free the batch is taken
    // under the lock held already (one acquisition of batch_mu_ per write, so
    // fewer callers find it taken).
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
      flusher_writes_.fetch_add(1, std::memory_order_relaxed);
    }
    spare_ = std::move(out);
    wlock.unlock();
    lock.lock();
    if (!flush_now_ && batch_.size() < kNapWakeBytes && !stopping_) {
      // More of a burst of asynchronous calls is likely coming: gather it for
      // kFlusherNap rather than write (and be woken) every few calls. A
      // call's wait for the wire is bounded by the nap, or ends at once with
      // the next synchronous call (which writes the batch itself).
      flusherSleepLocked(lock, Flusher::kNapping, kFlusherNap);
    }
  }
}

void Connection::flusherSleepLocked(std::unique_lock<common::AdaptiveMutex>& lock, Flusher why,
                                    std::chrono::nanoseconds timeout) {
  flusher_state_ = why;
  flusher_sleeps_.fetch_add(1, std::memory_order_relaxed);
  const uint32_t ticket = flusher_bell_.ticket();
  lock.unlock();
  flusher_bell_.wait(ticket, timeout);
  lock.lock();
  flusher_state_ = Flusher::kBusy;
}

}  // namespace rgpu::client
