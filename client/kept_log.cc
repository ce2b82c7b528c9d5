#include "client/kept_log.h"

#include <algorithm>
#include <cstring>

namespace rgpu::client {

uint8_t* KeptLog::room(size_t need, uint64_t* chunk_id) {
  if (chunks_.empty() || chunks_.back().cap - chunks_.back().used < need) {
    Chunk c{next_chunk_++, nullptr, std::max(need, kChunkBytes), 0};
    if (c.cap == kChunkBytes && spare_) {
      c.data = std::move(spare_);
    } else {
      c.data.reset(new uint8_t[c.cap]);  // (not zeroed: every byte is written before it is read)
    }
    chunks_.push_back(std::move(c));
  }
  Chunk& c = chunks_.back();
  *chunk_id = c.id;
  uint8_t* at = c.data.get() + c.used;
  c.used += need;
  return at;
}

const KeptLog::Entry& KeptLog::push(uint64_t seq, const uint8_t* frame, size_t len, const void* bulk,
                                    uint64_t bulk_len, bool copy, bool pinned) {
  if (count_ == ring_.size()) {
    std::vector<Entry> bigger(ring_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = at(i);
    ring_.swap(bigger);
    head_ = 0;
  }
  Entry& e = slot(count_);
  ++count_;
  const bool copied = copy && bulk_len > 0;
  const size_t need = len + (copied ? bulk_len : 0);
  uint8_t* p = room(need, &e.chunk_);
  std::memcpy(p, frame, len);
  if (copied) std::memcpy(p + len, bulk, bulk_len);
  e.seq = seq;
  e.frame = p;
  e.frame_len = len;
  e.bulk = copy ? nullptr : bulk;
  e.bulk_len = bulk_len;
  e.bulk_copied = copied;
  e.bulk_pinned = pinned && bulk_len > 0;
  e.before_ = pushed_;
  pushed_ += need;
  return e;
}

void KeptLog::dropThrough(uint64_t seq) {
  if (count_ == 0 || front().seq > seq) return;
  // The first entry past `seq` (entries are in sequence order).
  size_t lo = 0, hi = count_;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (at(mid).seq <= seq) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  head_ = (head_ + lo) & (ring_.size() - 1);
  count_ -= lo;
  while (!chunks_.empty() && (count_ == 0 || chunks_.front().id < front().chunk_)) retireFront();
}

void KeptLog::clear() {
  head_ = count_ = 0;
  while (!chunks_.empty()) retireFront();
}

void KeptLog::retireFront() {
  Chunk& c = chunks_.front();
  if (c.cap == kChunkBytes && !spare_) spare_ = std::move(c.data);
  chunks_.pop_front();
}

}  // namespace rgpu::client
