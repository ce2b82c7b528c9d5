#include "client/connection.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "protocol/frame.h"

namespace rgpu::client {

using protocol::FrameHeader;
using protocol::FrameType;

namespace {
// A batch larger than this is written by the posting thread itself, which
// bounds memory when the application outruns the link.
constexpr size_t kMaxBatchBytes = 256 * 1024;
// Poll this many times, yielding the CPU in between, before sleeping on a
// reply: a loopback or LAN round trip often completes within it, and a futex
// sleep and wake cost several microseconds. The receiver thread busy-polls the
// socket meanwhile (bounded, see TlsConnection::readSome), so the reply is
// picked up without a wake-up either.
constexpr int kSpinPolls = 50;
}  // namespace

wire::Reply::Reader Reply::reader() const {
  if (!msg_)
    msg_ = std::make_unique<capnp::FlatArrayMessageReader>(common::asWords(words), common::readerOptions());
  return msg_->getRoot<wire::Reply>();
}

Connection::Connection(std::unique_ptr<common::TlsConnection> conn, std::string server, common::Compression c)
    : conn_(std::move(conn)), server_(std::move(server)), compression_(c) {}

Result<std::unique_ptr<Connection>> Connection::open(const ClientConfig& cfg, HostFuncHandler on_host_func) {
  if (cfg.server.empty())
    return Status(err::kDevicesUnavailable, "no rgpu server configured: set `server` in client.toml or RGPU_SERVER (" +
                                                describeSource(cfg) + ")");
  auto hp = common::parseHostPort(cfg.server);
  if (!hp) return Status(err::kDevicesUnavailable, hp.status().message() + " (" + describeSource(cfg) + ")");
  auto compression = common::parseCompression(cfg.compression);
  if (!compression) return compression.status();
  common::TlsOptions tls;
  tls.ca_file = cfg.ca;
  tls.cert_file = cfg.cert;
  tls.key_file = cfg.key;
  auto ctx = common::TlsContext::makeClient(tls);
  if (!ctx) return Status(err::kDevicesUnavailable, ctx.status().message() + " (" + describeSource(cfg) + ")");
  auto tc = common::TlsConnection::connect(**ctx, hp->first, hp->second, cfg.server_name,
                                           std::chrono::milliseconds(cfg.connect_timeout_ms));
  if (!tc)
    return Status(err::kDevicesUnavailable, "rgpu server " + cfg.server + " unreachable within " +
                                                std::to_string(cfg.connect_timeout_ms) + " ms: " + tc.status().message() +
                                                " (" + describeSource(cfg) + ")");
  common::tuneSocket((*tc)->fd(), cfg.dead_after_s);
  std::unique_ptr<Connection> c(new Connection(std::move(*tc), cfg.server, *compression));
  c->conn_->setBusyPollWhile(&c->sync_waiters_);
  c->on_host_func_ = std::move(on_host_func);
  RGPU_TRY(c->handshake(cfg));
  c->flusher_ = std::thread([p = c.get()] { p->flusherLoop(); });
  c->receiver_ = std::thread([p = c.get()] { p->receiverLoop(); });
  c->callback_ = std::thread([p = c.get()] { p->callbackLoop(); });
  return c;
}

Connection::~Connection() { close(); }

void Connection::close() {
  if (closing_.exchange(true)) return;
  {
    std::lock_guard lock(batch_mu_);
    stopping_ = true;
  }
  batch_cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  conn_->close();
  if (receiver_.joinable()) receiver_.join();
  {
    std::lock_guard lock(cb_mu_);
    callbacks_.clear();
  }
  cb_cv_.notify_all();
  if (callback_.joinable()) callback_.join();
}

Status Connection::handshake(const ClientConfig& cfg) {
  capnp::MallocMessageBuilder msg;
  auto hello = msg.initRoot<wire::Hello>();
  hello.setProtocolVersion(wire::PROTOCOL_VERSION);
  hello.setClientVersion(RGPU_VERSION);
  hello.setToken(cfg.token);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  hello.setHostname(host);
  hello.setPid(static_cast<uint32_t>(getpid()));
  hello.setMonitor(cfg.monitor);
  auto req = hello.initRequest();
  req.setCount(cfg.request_devices);
  req.setMinMemory(cfg.request_min_memory);
  req.setMinComputeCapability(cfg.request_min_cc);
  req.setModel(cfg.request_model);
  req.setWaitMs(cfg.request_wait_ms);
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kHello, 0, 0, msg, 0);
  RGPU_TRY(conn_->write(frame.data(), frame.size()));

  common::FrameReader reader(*conn_, 0);
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
    welcome_.identity = w.getIdentity();
    welcome_.backend = w.getBackend();
    welcome_.driver_version = w.getDriverVersion();
    welcome_.session_id = w.getSessionId();
    for (auto d : w.getDevices()) {
      Welcome::Device dev;
      dev.name = d.getName();
      auto prop = d.getProp();
      dev.prop.assign(reinterpret_cast<const char*>(prop.begin()), prop.size());
      for (auto a : d.getAttributes()) dev.attributes.push_back(a);
      dev.total_mem = d.getTotalMem();
      welcome_.devices.push_back(std::move(dev));
    }
  } catch (const kj::Exception& e) {
    return Status(err::kDevicesUnavailable, std::string("malformed Welcome: ") + e.getDescription().cStr());
  }
  RGPU_LOG_DEBUG("connected to {} as '{}' (session {}, backend {}, {} device(s))", server_, welcome_.identity,
                 welcome_.session_id, welcome_.backend, welcome_.devices.size());
  return Status::ok();
}

Status Connection::broken() const {
  std::lock_guard lock(slots_mu_);
  return broken_;
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
    std::lock_guard lock(slots_mu_);
    if (broken_.isOk()) {
      broken_ = Status(err::kDevicesUnavailable, "lost the connection to rgpu server " + server_ + ": " + s.message());
      if (!closing_.load()) RGPU_LOG_ERROR("{}", broken_.message());
    }
    for (auto& [seq, slot] : slots_) waiting.push_back(slot);
    slots_.clear();
  }
  for (Slot* slot : waiting) {
    slot->status = broken();
    if (slot->deferred) {
      delete slot;
      continue;
    }
    slot->state.store(1, std::memory_order_release);
    slot->state.notify_one();
  }
  conn_->shutdown();
  cb_cv_.notify_all();
}

Status Connection::enqueue(capnp::MessageBuilder& msg, uint8_t flags, const void* bulk, uint64_t bulk_len, bool now,
                           Slot* slot, uint64_t* seq_out) {
  if (Status b = broken(); !b) return b;
  if (!now) {
    bool wake = false, self_flush = false;
    {
      std::lock_guard lock(batch_mu_);
      wake = batch_.empty();
      common::appendFrame(batch_, FrameType::kRequest, flags, next_seq_++, msg, 0);
      self_flush = batch_.size() > kMaxBatchBytes;
    }
    if (!self_flush) {
      if (wake) batch_cv_.notify_one();
      return Status::ok();
    }
  }
  std::lock_guard wlock(write_mu_);
  std::vector<uint8_t> out;
  size_t last = 0;
  {
    std::lock_guard lock(batch_mu_);
    out.swap(batch_);
    if (now) {
      uint64_t seq = next_seq_++;
      if (slot) {
        std::lock_guard sl(slots_mu_);
        if (!broken_.isOk()) return broken_;
        slots_[seq] = slot;
      }
      if (seq_out) *seq_out = seq;
      last = out.size();
      common::appendFrame(out, FrameType::kRequest, flags, seq, msg, bulk_len);
    }
  }
  Status s = bulk_sender_.send(*conn_, out, last, bulk, now ? bulk_len : 0, compression_);
  if (!s) fail(s);
  return s;
}

Status Connection::post(capnp::MessageBuilder& msg, const void* bulk, uint64_t bulk_len) {
  return enqueue(msg, protocol::kFlagAsync, bulk, bulk_len, bulk_len > 0, nullptr, nullptr);
}

Status Connection::postExpectingData(capnp::MessageBuilder& msg, void* in, uint64_t in_len) {
  auto* slot = new Slot;
  slot->deferred = true;
  slot->in = in;
  slot->in_len = in_len;
  Status s = enqueue(msg, 0, nullptr, 0, true, slot, nullptr);
  if (!s) {
    std::lock_guard lock(slots_mu_);
    for (auto it = slots_.begin(); it != slots_.end(); ++it)
      if (it->second == slot) {
        slots_.erase(it);
        delete slot;
        break;
      }
  }
  return s;
}

Reply Connection::call(capnp::MessageBuilder& msg, const void* bulk, uint64_t bulk_len, void* in, uint64_t in_len) {
  Reply reply;
  Slot slot;
  slot.in = in;
  slot.in_len = in_len;
  uint64_t seq = 0;
  sync_waiters_.fetch_add(1, std::memory_order_relaxed);
  Status s = enqueue(msg, 0, bulk, bulk_len, true, &slot, &seq);
  if (!s) {
    sync_waiters_.fetch_sub(1, std::memory_order_relaxed);
    std::lock_guard lock(slots_mu_);
    slots_.erase(seq);
    reply.status = s;
    return reply;
  }
  for (int i = 0; i < kSpinPolls && slot.state.load(std::memory_order_acquire) == 0; ++i) std::this_thread::yield();
  while (slot.state.load(std::memory_order_acquire) == 0) slot.state.wait(0, std::memory_order_acquire);
  sync_waiters_.fetch_sub(1, std::memory_order_relaxed);
  reply.status = slot.status;
  reply.words = std::move(slot.words);
  if (reply.status && !reply.words.empty()) {
    try {
      auto r = reply.reader();
      if (r.getError() != 0) reply.status = Status(r.getError(), r.getMessage());
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
    lock.unlock();
    {
      std::lock_guard wlock(write_mu_);
      std::vector<uint8_t> out;
      {
        std::lock_guard l(batch_mu_);
        out.swap(batch_);
      }
      if (!out.empty()) {
        Status s = conn_->write(out.data(), out.size());
        if (!s) fail(s);
      }
    }
    lock.lock();
  }
}

void Connection::receiverLoop() {
  common::FrameReader reader(*conn_);
  for (;;) {
    FrameHeader h;
    kj::ArrayPtr<const capnp::word> words;
    Status s = reader.next(h, words);
    if (!s) {
      fail(s);
      return;
    }
    if (h.type == FrameType::kNotify) {
      try {
        capnp::FlatArrayMessageReader r(words, common::readerOptions());
        auto n = r.getRoot<wire::Notify>();
        if (n.isHostFuncReady()) {
          {
            std::lock_guard lock(cb_mu_);
            callbacks_.push_back(n.getHostFuncReady());
          }
          cb_cv_.notify_one();
        } else if (n.isOutput()) {
          // Device printf: this program's stdout, as with a local GPU.
          auto text = n.getOutput();
          std::fwrite(text.begin(), 1, text.size(), stdout);
          std::fflush(stdout);
        } else if (n.isGoodbye()) {
          fail(Status(err::kDevicesUnavailable, "server closed the session: " + std::string(n.getGoodbye())));
          return;
        }
      } catch (const kj::Exception& e) {
        fail(Status(err::kUnknown, std::string("malformed notification: ") + e.getDescription().cStr()));
        return;
      }
      if (h.bulk_len && !reader.skipBulk(h)) return fail(Status(err::kUnknown, "bad notification bulk"));
      continue;
    }
    if (h.type != FrameType::kReply) {
      fail(Status(err::kUnknown, "unexpected frame type from server"));
      return;
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
      // A reply nobody waits for would desynchronise nothing, but it is a server bug.
      RGPU_LOG_WARN("reply for unknown call {} from {}", h.seq, server_);
      if (h.bulk_len && !reader.skipBulk(h)) return fail(Status(err::kUnknown, "bad reply bulk"));
      continue;
    }
    slot->words.assign(reinterpret_cast<const uint64_t*>(words.begin()), reinterpret_cast<const uint64_t*>(words.end()));
    if (h.bulk_len) {
      if (h.bulk_len != slot->in_len || !slot->in) {
        slot->status = Status(err::kUnknown, "reply carries " + std::to_string(h.bulk_len) + " bytes, expected " +
                                                 std::to_string(slot->in_len));
        s = reader.skipBulk(h);
      } else {
        s = reader.readBulk(h, slot->in);
      }
      if (!s) {
        slot->status = s;
        if (slot->deferred) delete slot;
        else {
          slot->state.store(1, std::memory_order_release);
          slot->state.notify_one();
        }
        fail(s);
        return;
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
      delete slot;
      continue;
    }
    slot->state.store(1, std::memory_order_release);
    slot->state.notify_one();
  }
}

void Connection::callbackLoop() {
  for (;;) {
    uint64_t id;
    {
      std::unique_lock lock(cb_mu_);
      cb_cv_.wait(lock, [&] { return !callbacks_.empty() || !conn_->isOpen(); });
      if (callbacks_.empty()) return;
      id = callbacks_.front();
      callbacks_.pop_front();
    }
    if (on_host_func_) on_host_func_(id);
  }
}

}  // namespace rgpu::client
