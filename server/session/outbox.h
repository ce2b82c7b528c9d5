// Everything a session sends to its client, and — when the session may be
// resumed after a dropped connection — what it keeps until the client has
// acknowledged it.
//
// Replies are kept by their request's sequence number, notifications by their
// own (assigned here). After the client reconnects, resume() swaps in the new
// connection and resends, in order, whatever the client said it lacks.
// Retention is bounded by kMaxRetainedBytes: past it the oldest frames are
// dropped and the session can no longer be resumed (lostFrames()). A reply's
// bulk data of kHoldBulkBytes or more is not copied: the sending thread (a
// backend thread, whose buffer stays valid while it waits) waits until the
// client acknowledges it — one round trip per large copy instead of a copy
// of every byte.
//
// Thread-safe: the dispatch thread and the backend's completion threads all
// send. A frame is recorded and the connection chosen under one lock, so a
// frame is either resent by resume() or written to the new connection, never
// neither. Frames never interleave on the wire, not even a compressed bulk
// written block by block.
#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <functional>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "common/frame_io.h"
#include "common/tls.h"

namespace rgpu::server {

// Largest total of unacknowledged replies and notifications one session keeps
// for resume (device-to-host data included). The client acknowledges within a
// few replies, so only a stalled client comes near it.
inline constexpr uint64_t kMaxRetainedBytes = 512ull << 20;
inline constexpr uint64_t kHoldBulkBytes = 1ull << 20;

class Outbox {
 public:
  Outbox(std::unique_ptr<common::TlsConnection> conn, common::Compression compression);

  // From now on, keep what is sent until acknowledged.
  void retainUntilAcknowledged() { retain_ = true; }
  // Large bulk payloads go striped over these (the session's; they outlive
  // the Outbox). Set before the first frame is sent.
  void stripeOver(common::Stripes* stripes) { stripes_ = stripes; }

  // A reply to request `seq`: header and message already in `frame`, then
  // `bulk_len` bulk bytes (which the caller keeps valid during the call).
  // `may_wait`: the caller may block until the client has a large bulk (not
  // the dispatch thread, which reads the acknowledgement). `on_wire` runs as
  // the frame takes its place on the connection: whatever is sent after it
  // has run follows this frame.
  void reply(uint64_t seq, std::vector<uint8_t>& frame, const uint8_t* bulk, uint64_t bulk_len, bool may_wait,
             const std::function<void()>& on_wire = nullptr);
  // The session is over: waiting senders return, nothing more is kept.
  void close();
  // A notification, with `bulk_len` bulk bytes; its sequence number is assigned here.
  void notify(capnp::MessageBuilder& message, const uint8_t* bulk = nullptr, uint64_t bulk_len = 0);
  // A frame that is never resent (Welcome, acknowledgements, goodbye).
  Status sendOnce(const std::vector<uint8_t>& frame);

  // The client holds every reply to requests <= `replies` and every
  // notification <= `notifications`.
  void acknowledged(uint64_t replies, uint64_t notifications);

  // Takes up `conn`: writes `first` (the resume Welcome), then every kept frame
  // the client lacks. Returns how many frames were resent.
  Result<size_t> resume(std::unique_ptr<common::TlsConnection> conn, const std::vector<uint8_t>& first,
                        uint64_t replies, uint64_t notifications);

  // A sender held by a large reply (reply(), may_wait) was acknowledged and
  // has not returned yet: the stream it holds is about to go idle.
  bool holdEnding() const;

  // Frames were dropped past kMaxRetainedBytes: a resume would lose them.
  bool lostFrames() const;

  // Checkpoint (server/session/session_checkpoint.cc), with the connection
  // lost: copies the bulk of every held reply, so that its sender returns
  // (its stream can drain) and the frame can be saved; until the next
  // resume, large replies are copied rather than held.
  void copyHeld();
  // Writes what a resume would resend (after copyHeld), and the next
  // notification's number; load() takes it up in a restored session, whose
  // Outbox retains from then on.
  Status save(class CheckpointWriter& out) const;
  Status load(class CheckpointReader& in);
  // The current connection (kept alive by the caller's copy).
  std::shared_ptr<common::TlsConnection> connection() const;

 private:
  struct Kept {
    std::vector<uint8_t> frame;
    std::vector<uint8_t> bulk;
    const uint8_t* held = nullptr;  // a waiting sender's bulk, instead of a copy
    uint64_t held_len = 0;
  };
  void keepLocked(std::map<uint64_t, Kept>& into, uint64_t seq, const std::vector<uint8_t>& frame,
                  const uint8_t* bulk, uint64_t bulk_len);
  bool dropOldestLocked();
  void trimLocked(uint64_t replies, uint64_t notifications);
  // One frame and its bulk, contiguous on the wire (a compressed bulk takes
  // several writes); `on_wire` runs first, under the same lock.
  Status write(common::TlsConnection& conn, std::vector<uint8_t>& frame, const uint8_t* bulk, uint64_t bulk_len,
               const std::function<void()>& on_wire = nullptr);

  common::Compression compression_;
  common::Stripes* stripes_ = nullptr;
  bool retain_ = false;  // set before the first frame is sent, never cleared
  bool no_hold_ = false;  // copyHeld() ran: copy large replies until resume()
  mutable std::mutex mu_;
  // One frame at a time on the wire, bulk included (taken after mu_, never before).
  std::mutex wire_mu_;
  std::shared_ptr<common::TlsConnection> conn_;  // shared: writers hold it across a swap
  std::map<uint64_t, Kept> replies_, notifications_;
  std::set<uint64_t> ending_;  // held replies acknowledged whose senders have not returned (holdEnding)
  uint64_t next_notification_ = 1;
  uint64_t kept_bytes_ = 0;
  bool lost_ = false;
  bool closed_ = false;
  std::condition_variable acked_;  // with mu_: kept frames were dropped, or close()
};

}  // namespace rgpu::server
