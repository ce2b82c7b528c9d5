#include "common/frame_io.h"

#include <lz4.h>

#include <chrono>
#include <cstring>

namespace rgpu::common {

using protocol::FrameHeader;
using protocol::kBulkBlockBytes;
using protocol::kFrameHeaderBytes;

Result<Compression> parseCompression(const std::string& s) {
  if (s == "off") return Compression::kOff;
  if (s == "auto") return Compression::kAuto;
  if (s == "on") return Compression::kOn;
  return Status(err::kInvalidValue, "compression must be off, auto or on (got '" + s + "')");
}

namespace {
// The segment table's words: u32 count-1, u32 sizes, padded to a word.
size_t tableWords(size_t segments) { return (segments + 2) / 2; }
// The flat message's words: the table and every segment.
size_t messageWords(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  size_t words = tableWords(segments.size());
  for (auto& s : segments) words += s.size();
  return words;
}
}  // namespace

size_t frameBytes(capnp::MessageBuilder& message) {
  return kFrameHeaderBytes + messageWords(message.getSegmentsForOutput()) * 8;
}

void encodeFrame(uint8_t* out, protocol::FrameType type, uint8_t flags, uint64_t seq, capnp::MessageBuilder& message,
                 uint64_t bulk_len) {
  auto segments = message.getSegmentsForOutput();
  const size_t table_words = tableWords(segments.size()), words = messageWords(segments);
  FrameHeader h;
  h.type = type;
  h.flags = flags;
  h.message_len = static_cast<uint32_t>(words * 8);
  h.seq = seq;
  h.bulk_len = bulk_len;
  uint8_t* p = out;
  protocol::encodeHeader(h, p);
  p += kFrameHeaderBytes;
  auto* table = reinterpret_cast<uint32_t*>(p);
  table[0] = static_cast<uint32_t>(segments.size() - 1);
  for (size_t i = 0; i < segments.size(); ++i) table[i + 1] = static_cast<uint32_t>(segments[i].size());
  if (segments.size() % 2 == 0) table[segments.size() + 1] = 0;
  p += table_words * 8;
  for (auto& s : segments) {
    std::memcpy(p, s.begin(), s.size() * 8);
    p += s.size() * 8;
  }
}

void appendFrame(std::vector<uint8_t>& out, protocol::FrameType type, uint8_t flags, uint64_t seq,
                 capnp::MessageBuilder& message, uint64_t bulk_len) {
  size_t at = out.size();
  out.resize(at + frameBytes(message));
  encodeFrame(out.data() + at, type, flags, seq, message, bulk_len);
}

bool worthCompressing(double ratio, double compress, double link) {
  if (!(ratio > 1.0) || !(compress > 0)) return false;
  if (!(link > 0)) return false;  // the first large payload times the link
  return 1.0 / compress + 1.0 / (ratio * link) <= 0.9 / link;
}

bool shouldCompress(Compression mode, const void* data, size_t len, double link) {
  if (mode == Compression::kOff || len < 4096) return false;
  if (mode == Compression::kOn) return true;
  size_t sample = std::min<size_t>(len, 64 * 1024);
  thread_local std::vector<char> out;
  out.resize(static_cast<size_t>(LZ4_compressBound(static_cast<int>(sample))));
  const auto start = std::chrono::steady_clock::now();
  int n = LZ4_compress_default(static_cast<const char*>(data), out.data(), static_cast<int>(sample),
                               static_cast<int>(out.size()));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (n <= 0) return false;
  return worthCompressing(static_cast<double>(sample) / n, static_cast<double>(sample) / std::max(secs, 1e-9), link);
}

Status BulkSender::send(TlsConnection& conn, std::vector<uint8_t>& frames, size_t last_frame_offset,
                        const void* bulk, size_t len, Compression mode, Stripes* stripes) {
  bool compress = len > 0 && shouldCompress(mode, bulk, len, conn.writeRate());
  if (!compress && stripes && stripes->shouldStripe(len, conn)) return stripes->send(conn, frames, last_frame_offset, bulk, len);
  if (!compress) {
    struct iovec v[2] = {{frames.data(), frames.size()}, {const_cast<void*>(bulk), len}};
    return conn.writeAll(v, len ? 2 : 1);
  }
  frames[last_frame_offset + 7] |= protocol::kFlagBulkLz4;  // flags byte of the header
  scratch_.resize(8 + static_cast<size_t>(LZ4_compressBound(static_cast<int>(kBulkBlockBytes))));
  // The frame itself goes out with the first block; blocks follow one write each.
  bool first = true;
  auto* src = static_cast<const char*>(bulk);
  for (size_t off = 0; off < len; off += kBulkBlockBytes) {
    uint32_t raw = static_cast<uint32_t>(std::min<size_t>(kBulkBlockBytes, len - off));
    int n = LZ4_compress_default(src + off, reinterpret_cast<char*>(scratch_.data() + 8),
                                 static_cast<int>(raw), static_cast<int>(scratch_.size() - 8));
    uint32_t stored = (n > 0 && static_cast<uint32_t>(n) < raw) ? static_cast<uint32_t>(n) : raw;
    if (stored == raw) std::memcpy(scratch_.data() + 8, src + off, raw);
    std::memcpy(scratch_.data(), &raw, 4);
    std::memcpy(scratch_.data() + 4, &stored, 4);
    struct iovec v[2] = {{frames.data(), frames.size()}, {scratch_.data(), 8 + stored}};
    RGPU_TRY(first ? conn.writeAll(v, 2) : conn.writeAll(&v[1], 1));
    first = false;
  }
  return Status::ok();
}

Status FrameReader::next(FrameHeader& header, kj::ArrayPtr<const capnp::word>& message) {
  uint8_t raw[kFrameHeaderBytes];
  RGPU_TRY(conn_.readExact(raw, sizeof raw));
  std::string why;
  if (!protocol::decodeHeader(raw, header, why, max_bulk_))
    return Status(err::kInvalidValue, "bad frame from " + conn_.peerAddress() + ": " + why);
  size_t words = header.message_len / 8;
  if (buf_.size() < words) buf_.resize(words);
  RGPU_TRY(conn_.readExact(buf_.data(), header.message_len));
  message = kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(buf_.data()), words);
  Status s = validateSegmentTable(message);
  if (!s) return Status(s.code(), "bad frame from " + conn_.peerAddress() + ": " + s.message());
  return Status::ok();
}

Status validateSegmentTable(kj::ArrayPtr<const capnp::word> message) {
  size_t words = message.size();
  if (words == 0) return Status(err::kInvalidValue, "empty message");
  auto* table = reinterpret_cast<const uint32_t*>(message.begin());
  uint64_t nseg = uint64_t{table[0]} + 1;
  uint64_t table_words = (nseg + 2) / 2;
  if (nseg > 64 || table_words > words) return Status(err::kInvalidValue, "bad segment table");
  uint64_t total = table_words;
  for (uint64_t i = 0; i < nseg; ++i) total += table[i + 1];
  if (total != words) return Status(err::kInvalidValue, "segment sizes do not match the message length");
  return Status::ok();
}

Status FrameReader::readBulk(const FrameHeader& header, void* dst) {
  auto* out = static_cast<char*>(dst);
  if (header.flags & protocol::kFlagStriped) return striped(header, dst);
  if (!(header.flags & protocol::kFlagBulkLz4)) return conn_.readExact(out, header.bulk_len);
  uint64_t left = header.bulk_len;
  while (left > 0) {
    uint32_t hdr[2];
    RGPU_TRY(conn_.readExact(hdr, sizeof hdr));
    uint32_t raw = hdr[0], stored = hdr[1];
    if (raw == 0 || raw > kBulkBlockBytes || raw > left || stored > raw)
      return Status(err::kInvalidValue, "bad compressed block from " + conn_.peerAddress() +
                                            " (raw " + std::to_string(raw) + ", stored " +
                                            std::to_string(stored) + ", " + std::to_string(left) + " left)");
    if (stored == raw) {
      RGPU_TRY(conn_.readExact(out, raw));
    } else {
      block_.resize(kBulkBlockBytes);
      RGPU_TRY(conn_.readExact(block_.data(), stored));
      int n = LZ4_decompress_safe(reinterpret_cast<const char*>(block_.data()), out,
                                  static_cast<int>(stored), static_cast<int>(raw));
      if (n != static_cast<int>(raw))
        return Status(err::kInvalidValue, "corrupt lz4 block from " + conn_.peerAddress());
    }
    out += raw;
    left -= raw;
  }
  return Status::ok();
}

Status FrameReader::striped(const FrameHeader& header, void* dst) {
  if (stripes_) return stripes_->read(conn_, header, dst);
  Stripes none;  // every piece must then be this connection's
  return none.read(conn_, header, dst);
}

Status FrameReader::skipBulk(const FrameHeader& header) {
  if (header.flags & protocol::kFlagStriped) return striped(header, nullptr);
  // Decode through a bounded buffer: skipping must not allocate bulk_len bytes.
  if (!(header.flags & protocol::kFlagBulkLz4)) {
    std::vector<uint8_t> sink(std::min<uint64_t>(header.bulk_len, 1 << 16));
    uint64_t left = header.bulk_len;
    while (left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, sink.size()));
      RGPU_TRY(conn_.readExact(sink.data(), n));
      left -= n;
    }
    return Status::ok();
  }
  std::vector<uint8_t> sink(kBulkBlockBytes);
  uint64_t left = header.bulk_len;
  while (left > 0) {
    uint32_t hdr[2];
    RGPU_TRY(conn_.readExact(hdr, sizeof hdr));
    if (hdr[0] == 0 || hdr[0] > kBulkBlockBytes || hdr[0] > left || hdr[1] > hdr[0])
      return Status(err::kInvalidValue, "bad compressed block from " + conn_.peerAddress());
    RGPU_TRY(conn_.readExact(sink.data(), hdr[1]));
    left -= hdr[0];
  }
  return Status::ok();
}

}  // namespace rgpu::common
