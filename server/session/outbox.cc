#include "server/session/outbox.h"

#include "protocol/frame.h"
#include "server/checkpoint/checkpoint_stream.h"

namespace rgpu::server {

Outbox::Outbox(std::unique_ptr<common::TlsConnection> conn, common::Compression compression)
    : compression_(compression), conn_(std::move(conn)) {}

std::shared_ptr<common::TlsConnection> Outbox::connection() const {
  std::lock_guard lock(mu_);
  return conn_;
}

bool Outbox::lostFrames() const {
  std::lock_guard lock(mu_);
  return lost_;
}

Status Outbox::write(common::TlsConnection& conn, std::vector<uint8_t>& frame, const uint8_t* bulk,
                     uint64_t bulk_len, const std::function<void()>& on_wire) {
  std::lock_guard lock(wire_mu_);
  if (on_wire) on_wire();
  common::BulkSender sender;
  return sender.send(conn, frame, 0, bulk, bulk_len, compression_, stripes_);
}

void Outbox::keepLocked(std::map<uint64_t, Kept>& into, uint64_t seq, const std::vector<uint8_t>& frame,
                        const uint8_t* bulk, uint64_t bulk_len) {
  Kept& k = into[seq];
  k.frame = frame;
  if (bulk_len) k.bulk.assign(bulk, bulk + bulk_len);
  kept_bytes_ += k.frame.size() + k.bulk.size();
  while (kept_bytes_ > kMaxRetainedBytes && dropOldestLocked()) {
  }
}

bool Outbox::dropOldestLocked() {
  // Replies first: they are the larger kind (device-to-host data). A waiting
  // sender's entry stays (it holds no copy, and its sender needs it).
  for (auto* m : {&replies_, &notifications_})
    for (auto it = m->begin(); it != m->end(); ++it) {
      if (it->second.held) continue;
      kept_bytes_ -= it->second.frame.size() + it->second.bulk.size();
      m->erase(it);
      lost_ = true;
      return true;
    }
  return false;
}

void Outbox::reply(uint64_t seq, std::vector<uint8_t>& frame, const uint8_t* bulk, uint64_t bulk_len, bool may_wait,
                   const std::function<void()>& on_wire) {
  std::shared_ptr<common::TlsConnection> conn;
  bool hold = false;
  {
    std::lock_guard lock(mu_);
    hold = retain_ && !closed_ && !no_hold_ && may_wait && bulk_len >= kHoldBulkBytes;
    if (hold) {
      Kept& k = replies_[seq];
      k.frame = frame;
      k.held = bulk;
      k.held_len = bulk_len;
      kept_bytes_ += k.frame.size();
    } else if (retain_ && !closed_) {
      keepLocked(replies_, seq, frame, bulk, bulk_len);
    }
    conn = conn_;
  }
  // A failed write is not an error here: the dispatch thread notices the lost
  // connection, and a resume resends what was kept.
  (void)write(*conn, frame, bulk, bulk_len, on_wire);
  if (hold) {
    std::unique_lock lock(mu_);
    // Acknowledged, or copied for a checkpoint (copyHeld).
    acked_.wait(lock, [&] {
      auto it = replies_.find(seq);
      return closed_ || it == replies_.end() || !it->second.held;
    });
    ending_.erase(seq);
  }
}

bool Outbox::holdEnding() const {
  std::lock_guard lock(mu_);
  return !ending_.empty();
}

void Outbox::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    ending_.clear();
    replies_.clear();
    notifications_.clear();
    kept_bytes_ = 0;
  }
  acked_.notify_all();
}

void Outbox::notify(capnp::MessageBuilder& message, const uint8_t* bulk, uint64_t bulk_len) {
  std::vector<uint8_t> frame;
  std::shared_ptr<common::TlsConnection> conn;
  {
    std::lock_guard lock(mu_);
    uint64_t seq = next_notification_++;
    common::appendFrame(frame, protocol::FrameType::kNotify, 0, seq, message, bulk_len);
    if (retain_) keepLocked(notifications_, seq, frame, bulk, bulk_len);
    conn = conn_;
  }
  (void)write(*conn, frame, bulk, bulk_len);
}

Status Outbox::sendOnce(const std::vector<uint8_t>& frame) {
  auto conn = connection();
  std::lock_guard lock(wire_mu_);
  return conn->write(frame.data(), frame.size());
}

void Outbox::trimLocked(uint64_t replies, uint64_t notifications) {
  auto trim = [&](std::map<uint64_t, Kept>& m, uint64_t upto) {
    for (auto it = m.begin(); it != m.end() && it->first <= upto;) {
      if (it->second.held && &m == &replies_) ending_.insert(it->first);
      kept_bytes_ -= it->second.frame.size() + it->second.bulk.size();
      it = m.erase(it);
    }
  };
  trim(replies_, replies);
  trim(notifications_, notifications);
  acked_.notify_all();
}

void Outbox::acknowledged(uint64_t replies, uint64_t notifications) {
  std::lock_guard lock(mu_);
  trimLocked(replies, notifications);
}

Result<size_t> Outbox::resume(std::unique_ptr<common::TlsConnection> conn, const std::vector<uint8_t>& first,
                              uint64_t replies, uint64_t notifications) {
  // Held while resending: a reply made meanwhile waits, then goes to the new
  // connection after the older ones.
  std::lock_guard lock(mu_);
  conn_ = std::move(conn);
  no_hold_ = false;
  trimLocked(replies, notifications);
  {
    std::lock_guard wire(wire_mu_);
    RGPU_TRY(conn_->write(first.data(), first.size()));
  }
  size_t sent = 0;
  for (auto* m : {&replies_, &notifications_}) {
    for (auto& [seq, k] : *m) {
      std::vector<uint8_t> frame = k.frame;
      RGPU_TRY(k.held ? write(*conn_, frame, k.held, k.held_len) : write(*conn_, frame, k.bulk.data(), k.bulk.size()));
      ++sent;
    }
  }
  return sent;
}

void Outbox::copyHeld() {
  {
    std::lock_guard lock(mu_);
    no_hold_ = true;
    for (auto& [seq, k] : replies_)
      if (k.held) {
        k.bulk.assign(k.held, k.held + k.held_len);
        kept_bytes_ += k.held_len;
        k.held = nullptr;
        k.held_len = 0;
      }
  }
  acked_.notify_all();
}

Status Outbox::save(CheckpointWriter& out) const {
  std::lock_guard lock(mu_);
  RGPU_TRY(out.putU64(next_notification_));
  for (auto* m : {&replies_, &notifications_}) {
    RGPU_TRY(out.putU64(m->size()));
    for (auto& [seq, k] : *m) {
      if (k.held) return Status(err::kUnknown, "a held reply was not copied before the checkpoint");
      RGPU_TRY(out.putU64(seq));
      RGPU_TRY(out.putString(std::string(k.frame.begin(), k.frame.end())));
      RGPU_TRY(out.putString(std::string(k.bulk.begin(), k.bulk.end())));
    }
  }
  return Status::ok();
}

Status Outbox::load(CheckpointReader& in) {
  std::lock_guard lock(mu_);
  RGPU_TRY_ASSIGN(next, in.getU64());
  next_notification_ = next;
  retain_ = true;
  for (auto* m : {&replies_, &notifications_}) {
    RGPU_TRY_ASSIGN(n, in.getU64());
    for (uint64_t i = 0; i < n; ++i) {
      RGPU_TRY_ASSIGN(seq, in.getU64());
      // Never more than a resume may keep.
      RGPU_TRY_ASSIGN(frame, in.getString(kMaxRetainedBytes - kept_bytes_));
      RGPU_TRY_ASSIGN(bulk, in.getString(kMaxRetainedBytes - kept_bytes_ - frame.size()));
      Kept& k = (*m)[seq];
      k.frame.assign(frame.begin(), frame.end());
      k.bulk.assign(bulk.begin(), bulk.end());
      kept_bytes_ += k.frame.size() + k.bulk.size();
    }
  }
  return Status::ok();
}

}  // namespace rgpu::server
