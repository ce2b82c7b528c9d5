#include "common/stripes.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

namespace rgpu::common {

using protocol::kMaxStripes;

namespace {

// Pieces are cut at multiples of this (the last takes the rest).
constexpr uint64_t kPieceAlign = 64 * 1024;

struct TableEntry {
  uint32_t stripe;
  uint32_t zero;
  uint64_t len;
};
static_assert(sizeof(TableEntry) == 16);

struct PieceHeader {
  uint64_t seq;
  uint64_t len;
};
static_assert(sizeof(PieceHeader) == 16);

// Runs `jobs` (each returning a Status) on threads of their own and `own` on
// this one; the first failure shuts `involved` down (so that no piece waits
// for a peer that gave up) and is returned.
template <typename Own>
Status runPieces(std::vector<std::function<Status()>>& jobs, Own own,
                 const std::vector<TlsConnection*>& involved) {
  std::mutex mu;
  Status first;
  auto failed = [&](const Status& s) {
    {
      std::lock_guard lock(mu);
      if (first.isOk()) first = s;
    }
    for (TlsConnection* c : involved) c->shutdown();
  };
  std::vector<std::thread> threads;
  threads.reserve(jobs.size());
  for (auto& job : jobs)
    threads.emplace_back([&job, &failed] {
      if (Status s = job(); !s) failed(s);
    });
  if (Status s = own(); !s) failed(s);
  for (auto& t : threads) t.join();
  return first;
}

}  // namespace

Status readOrDrop(TlsConnection& conn, void* dst, uint64_t len) {
  if (dst) return conn.readExact(dst, static_cast<size_t>(len));
  char sink[64 * 1024];
  while (len > 0) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(len, sizeof sink));
    RGPU_TRY(conn.readExact(sink, n));
    len -= n;
  }
  return Status::ok();
}

bool Stripes::add(uint32_t index, std::shared_ptr<TlsConnection> conn, bool writable) {
  std::lock_guard lock(mu_);
  bool taken = std::any_of(stripes_.begin(), stripes_.end(), [&](const Stripe& s) { return s.index == index; });
  if (index == 0 || index > kMaxStripes || taken) {
    conn->shutdown();
    return false;
  }
  stripes_.push_back({index, std::move(conn), writable});
  return true;
}

void Stripes::bind(const TlsConnection* main) {
  {
    std::lock_guard lock(mu_);
    if (main_ == main) return;
    main_ = main;
  }
  clear();
}

void Stripes::setWritable(uint32_t index) {
  std::lock_guard lock(mu_);
  for (auto& s : stripes_)
    if (s.index == index) s.writable = true;
}

void Stripes::clear() {
  std::vector<Stripe> gone;
  {
    std::lock_guard lock(mu_);
    gone.swap(stripes_);
  }
  for (auto& s : gone) s.conn->shutdown();
}

size_t Stripes::size() const {
  std::lock_guard lock(mu_);
  return stripes_.size();
}

bool Stripes::shouldStripe(uint64_t len, const TlsConnection& main) const {
  if (min_bytes_ == 0 || len < min_bytes_) return false;
  std::lock_guard lock(mu_);
  return main_ == &main && std::any_of(stripes_.begin(), stripes_.end(), [](const Stripe& s) { return s.writable; });
}

std::shared_ptr<TlsConnection> Stripes::find(uint32_t index, const TlsConnection& main) const {
  std::lock_guard lock(mu_);
  if (main_ != &main) return nullptr;
  for (const auto& s : stripes_)
    if (s.index == index) return s.conn;
  return nullptr;
}

Status Stripes::send(TlsConnection& main, std::vector<uint8_t>& frames, size_t last_frame_offset, const void* bulk,
                     size_t len) {
  std::vector<Stripe> ws;
  {
    std::lock_guard lock(mu_);
    if (main_ == &main)
      for (const auto& s : stripes_)
        if (s.writable) ws.push_back(s);
  }
  uint64_t seq = 0;
  std::memcpy(&seq, frames.data() + last_frame_offset + 16, sizeof seq);  // the header's seq (protocol/frame.h)
  const uint64_t n = ws.size() + 1;
  const uint64_t share = std::max<uint64_t>(kPieceAlign, (len / n + kPieceAlign - 1) / kPieceAlign * kPieceAlign);
  // The main connection's piece first, then one per stripe while bytes last.
  std::vector<TableEntry> table;
  uint64_t off = 0;
  for (uint64_t i = 0; i < n && off < len; ++i) {
    uint64_t piece = (i + 1 == n) ? len - off : std::min<uint64_t>(share, len - off);
    table.push_back({i == 0 ? 0u : ws[i - 1].index, 0, piece});
    off += piece;
  }
  frames[last_frame_offset + 7] |= protocol::kFlagStriped;  // flags byte of the header
  uint32_t count[2] = {static_cast<uint32_t>(table.size()), 0};

  std::vector<TlsConnection*> involved{&main};
  std::vector<std::function<Status()>> jobs;
  const auto* src = static_cast<const uint8_t*>(bulk);
  off = table[0].len;
  for (size_t i = 1; i < table.size(); ++i) {
    TlsConnection* c = ws[i - 1].conn.get();
    involved.push_back(c);
    const uint8_t* p = src + off;
    const uint64_t piece = table[i].len;
    jobs.push_back([this, c, p, piece, seq] {
      PieceHeader ph{seq, piece};
      struct iovec v[2] = {{&ph, sizeof ph}, {const_cast<uint8_t*>(p), piece}};
      RGPU_TRY(c->writeAll(v, 2));
      sent_.fetch_add(piece);
      return Status::ok();
    });
    off += piece;
  }
  return runPieces(
      jobs,
      [&] {
        struct iovec v[4] = {{frames.data(), frames.size()},
                             {count, sizeof count},
                             {table.data(), table.size() * sizeof(TableEntry)},
                             {const_cast<void*>(bulk), table[0].len}};
        return main.writeAll(v, 4);
      },
      involved);
}

Status Stripes::read(TlsConnection& main, const protocol::FrameHeader& header, void* dst) {
  const std::string from = "striped bulk from " + main.peerAddress() + ": ";
  uint32_t count[2];
  RGPU_TRY(main.readExact(count, sizeof count));
  if (count[0] == 0 || count[0] > kMaxStripes + 1 || count[1] != 0)
    return Status(err::kInvalidValue, from + "a table of " + std::to_string(count[0]) + " pieces (1.." +
                                          std::to_string(kMaxStripes + 1) + ")");
  std::vector<TableEntry> table(count[0]);
  RGPU_TRY(main.readExact(table.data(), table.size() * sizeof(TableEntry)));
  uint64_t total = 0;
  std::vector<bool> seen(kMaxStripes + 1, false);
  std::vector<std::shared_ptr<TlsConnection>> conns(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const TableEntry& e = table[i];
    if (e.stripe > kMaxStripes || e.zero != 0 || seen[e.stripe])
      return Status(err::kInvalidValue, from + "piece " + std::to_string(i) + " names stripe " +
                                            std::to_string(e.stripe) + " (out of range or twice)");
    seen[e.stripe] = true;
    if (e.len > header.bulk_len - total)
      return Status(err::kInvalidValue, from + "pieces add up to more than the frame's " +
                                            std::to_string(header.bulk_len) + " bytes");
    total += e.len;
    if (e.stripe != 0 && !(conns[i] = find(e.stripe, main)))
      return Status(err::kInvalidValue, from + "piece " + std::to_string(i) + " names stripe " +
                                            std::to_string(e.stripe) + ", which this session does not have");
  }
  if (total != header.bulk_len)
    return Status(err::kInvalidValue, from + "pieces add up to " + std::to_string(total) + " bytes, not the frame's " +
                                          std::to_string(header.bulk_len));
  auto* out = static_cast<uint8_t*>(dst);
  std::vector<TlsConnection*> involved{&main};
  std::vector<std::function<Status()>> jobs;
  uint64_t off = 0, main_off = 0, main_len = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const uint64_t piece = table[i].len;
    if (table[i].stripe == 0) {
      main_off = off;
      main_len = piece;
    } else {
      TlsConnection* c = conns[i].get();
      involved.push_back(c);
      uint8_t* p = out ? out + off : nullptr;
      const uint64_t seq = header.seq;
      const uint32_t stripe = table[i].stripe;
      jobs.push_back([this, c, p, piece, seq, stripe] {
        PieceHeader ph{};
        RGPU_TRY(c->readExact(&ph, sizeof ph));
        if (ph.seq != seq || ph.len != piece)
          return Status(err::kInvalidValue, "striped bulk: stripe " + std::to_string(stripe) + " carries " +
                                                std::to_string(ph.len) + " bytes of frame " + std::to_string(ph.seq) +
                                                " where " + std::to_string(piece) + " of frame " +
                                                std::to_string(seq) + " were due (out of step)");
        RGPU_TRY(readOrDrop(*c, p, piece));
        received_.fetch_add(piece);
        return Status::ok();
      });
    }
    off += piece;
  }
  return runPieces(
      jobs, [&] { return readOrDrop(main, out ? out + main_off : nullptr, main_len); }, involved);
}

}  // namespace rgpu::common
