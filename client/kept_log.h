// The requests a connection keeps for replay until the server says it has
// dispatched them (client/connection.h: resume after a dropped connection).
//
// Every request is kept, in the order of its sequence number, from the moment
// it is numbered until an acknowledgement names it or a later one
// (dropThrough). A stream of asynchronous calls keeps a frame per call, and
// the server acknowledges every kAckEveryBytes or kAckEveryRequests
// (server/session/session.h) — thousands of frames at once, dropped by the
// receiver while the program's threads wait for the same lock. So neither
// keeping nor dropping moves a kept byte:
//  - frames (and a copied bulk payload after its frame) are copied into
//    chunks that never reallocate: a frame stays where it was put until
//    dropped, and a chunk is recycled once every frame in it is dropped;
//  - entries live in a ring, found by binary search on the sequence number;
//    dropping N of them moves two indices.
// One chunk is kept spare for reuse, so a steady stream allocates nothing.
//
// Not thread-safe: the connection's batch_mu_ guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace rgpu::client {

class KeptLog {
 public:
  struct Entry {
    uint64_t seq;
    const uint8_t* frame;  // header + message, then the bulk if copied
    size_t frame_len;
    const void* bulk;  // not copied: a synchronous caller's buffer (valid until its reply) or pinned memory; else null
    uint64_t bulk_len;
    bool bulk_copied;  // the bulk follows the frame (copiedBulk())
    bool bulk_pinned;  // `bulk` is the program's pinned memory (Connection::waitForWritesInto)

    const uint8_t* copiedBulk() const { return frame + frame_len; }

   private:
    friend class KeptLog;
    uint64_t chunk_;   // the chunk holding the frame
    uint64_t before_;  // bytes kept before this entry (the log's running total)
  };

  // Chunks hold this much, or one frame and its copied bulk if larger. Room
  // for any copied bulk (the client copies less than 1 MiB, and holds larger
  // payloads by pointer) and its frame: a stream of them reuses the spare.
  static constexpr size_t kChunkBytes = 2 * 1024 * 1024;

  // Keeps request `seq` (larger than any kept): its frame, and `bulk` —
  // copied after it with `copy`, else by pointer (marked pinned with `pinned`).
  const Entry& push(uint64_t seq, const uint8_t* frame, size_t len, const void* bulk, uint64_t bulk_len, bool copy,
                    bool pinned);
  // Drops every entry whose sequence number is <= `seq`.
  void dropThrough(uint64_t seq);
  void clear();

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  const Entry& front() const { return at(0); }
  const Entry& at(size_t i) const { return ring_[(head_ + i) & (ring_.size() - 1)]; }
  // Bytes kept: frames and copied bulk.
  uint64_t bytes() const { return count_ ? pushed_ - front().before_ : 0; }
  // Chunks allocated now, the spare included (tests).
  size_t chunks() const { return chunks_.size() + (spare_ ? 1 : 0); }

  template <typename Pred>
  bool any(Pred&& pred) const {
    for (size_t i = 0; i < count_; ++i)
      if (pred(at(i))) return true;
    return false;
  }

 private:
  struct Chunk {
    uint64_t id;
    std::unique_ptr<uint8_t[]> data;
    size_t cap, used;
  };
  uint8_t* room(size_t need, uint64_t* chunk_id);
  void retireFront();
  Entry& slot(size_t i) { return ring_[(head_ + i) & (ring_.size() - 1)]; }

  std::vector<Entry> ring_ = std::vector<Entry>(64);  // a power of two
  size_t head_ = 0, count_ = 0;
  uint64_t pushed_ = 0;  // bytes ever kept
  std::deque<Chunk> chunks_;
  std::unique_ptr<uint8_t[]> spare_;  // a retired chunk of kChunkBytes
  uint64_t next_chunk_ = 0;
};

}  // namespace rgpu::client
