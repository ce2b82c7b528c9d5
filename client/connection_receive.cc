// The receiving side of the client's Connection (client/connection.h): the
// read role — the receiver thread, or a synchronous caller reading for itself —
// each frame's handling, the reconnection that resumes a session, and the
// callback thread that runs host functions.
#include <algorithm>
#include <cstring>

#include "client/connection.h"
#include "common/log.h"
#include "common/spin.h"
#include "protocol/frame.h"

namespace rgpu::client {

using common::monotonicNs;
using protocol::FrameHeader;
using protocol::FrameType;

namespace {
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
}  // namespace

void Connection::receiverLoop() {
  for (;;) {
    Status s = receive();  // (called and returning with the read role)
    if (closing_.load() || !resume_ || session_over_) {
      fail(s);
      return;  // (with the role: nothing reads a failed connection again)
    }
    auto next = reconnect(s);
    if (!next) {
      fail(next.status());
      return;
    }
    frames_ = std::make_unique<common::FrameReader>(**next, protocol::kMaxBulkBytes, &stripes_);
  }
}

Status Connection::receive() {
  common::TlsConnection& conn = frames_->connection();
  for (bool holding = true;;) {
    if (holding) {
      // What is there is read before the role goes back: nothing may stay
      // buffered above the socket, which is all a waiter without the role
      // sees (a closed connection's read reports why).
      Status s;
      while (s && (!conn.isOpen() || conn.readable(0))) s = readFrame();
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
  while (s && slot.state.load(std::memory_order_acquire) == 0) s = readFrame();
  if (s) caller_reads_.fetch_add(1, std::memory_order_relaxed);
  // Frames that came with the reply are handled too: the role goes back with
  // nothing buffered above the socket (receive()).
  while (s && frames_->connection().buffered()) s = readFrame();
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

Status Connection::readFrame() {
  common::FrameReader& reader = *frames_;
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
            for (size_t i = 0; i < kept_.size(); ++i) {
              const Kept& k = kept_.at(i);
              std::vector<uint8_t> frame(k.frame, k.frame + k.frame_len);
              const void* bulk = k.bulk;
              if (k.bulk_copied) {
                // Copied out too: the receiver may drop it meanwhile.
                frame.insert(frame.end(), k.copiedBulk(), k.copiedBulk() + k.bulk_len);
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
  // Only the read role's holder touches a deferred slot's parts.
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
