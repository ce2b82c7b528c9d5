// Bulk payloads striped over several TLS connections of one session, so that
// several cores encrypt and decrypt one large copy at once (one TLS stream is
// bound by one core's AES-GCM and the kernel's copies).
//
// A session's main connection carries every frame; "stripes" are extra
// connections of the same session (joined like a resume: the resume preamble,
// the session's PSK, a Hello with `stripe` set; docs/architecture.md), each
// known to both ends by the index the server gave it (1..kMaxStripes; 0 is
// the main connection).
//
// Wire: a frame with kFlagStriped carries, where its bulk would be, a table
//   u32 count | u32 0 | count x { u32 stripe, u32 0, u64 len }
// then the bytes of every piece whose stripe is 0. Piece i holds the bulk's
// bytes after pieces 0..i-1; the lengths add up to the header's bulk_len;
// no stripe appears twice. A piece on stripe j != 0 travels on that
// connection as { u64 seq, u64 len } and its bytes, which the reader checks
// against the frame that named it.
//
// Order: a stripe carries the pieces of frames in the order of those frames
// on the main connection. Both ends keep it the same way: a writer holds its
// frames' order (the client's write lock, the Outbox's wire lock) until every
// piece of a frame is written, and the one reader of a main connection
// returns from a striped frame only when every piece of it was read.
//
// Lifetime: stripes belong to one main connection. When it is lost both ends
// clear() theirs (pieces in flight fail; the frame is replayed or resent
// whole on the next connection, never striped across two) and the client
// joins new ones after resuming.
//
// Thread-safe. Each piece moves on a thread of its own while the caller
// moves the main connection's piece.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "common/tls.h"
#include "protocol/frame.h"

namespace rgpu::common {

class Stripes {
 public:
  Stripes() = default;
  ~Stripes() { clear(); }
  Stripes(const Stripes&) = delete;
  Stripes& operator=(const Stripes&) = delete;

  // Takes `conn` as stripe `index` (1..kMaxStripes): the reader may be named
  // it at once; it carries our pieces once setWritable(index) says the peer
  // reads it too. False (conn shut down) when the index is taken or out of range.
  bool add(uint32_t index, std::shared_ptr<TlsConnection> conn, bool writable = false);
  // The main connection the stripes belong to (null: none); another one
  // clears them. send() and read() on any other connection use no stripe, so
  // a writer still holding a replaced connection never puts pieces on the
  // new one's stripes.
  void bind(const TlsConnection* main);
  void setWritable(uint32_t index);
  // Shuts every stripe down and forgets it; pieces in flight fail.
  void clear();
  size_t size() const;
  // The bytes from which a payload is striped; 0: never (the default).
  void setMinBytes(uint64_t n) { min_bytes_ = n; }
  bool shouldStripe(uint64_t len, const TlsConnection& main) const;

  // Writes `frames` (appendFrame's output; the last frame starts at
  // `last_frame_offset` and carries `len` bulk bytes) on `main` with the bulk
  // striped over every writable stripe. Marks the frame kFlagStriped.
  Status send(TlsConnection& main, std::vector<uint8_t>& frames, size_t last_frame_offset, const void* bulk,
              size_t len);
  // Reads a kFlagStriped frame's bulk (header.bulk_len bytes) into `dst`;
  // null: reads and drops it.
  Status read(TlsConnection& main, const protocol::FrameHeader& header, void* dst);

  // Bulk bytes the stripes (not the main connection) carried, each way, over
  // every stripe this object had.
  uint64_t bytesSent() const { return sent_.load(); }
  uint64_t bytesReceived() const { return received_.load(); }

 private:
  struct Stripe {
    uint32_t index = 0;
    std::shared_ptr<TlsConnection> conn;
    bool writable = false;
  };
  std::shared_ptr<TlsConnection> find(uint32_t index, const TlsConnection& main) const;

  mutable std::mutex mu_;
  const TlsConnection* main_ = nullptr;
  std::vector<Stripe> stripes_;
  uint64_t min_bytes_ = 0;
  std::atomic<uint64_t> sent_{0}, received_{0};
};

// Reads exactly `len` bytes from `conn` into `dst`, or drops them (`dst` null).
Status readOrDrop(TlsConnection& conn, void* dst, uint64_t len);

}  // namespace rgpu::common
