// Frames over a TlsConnection: encoding a Cap'n Proto message behind a header,
// reading and validating frames, and moving bulk payloads (optionally lz4).
//
// Bulk bytes never pass through a Cap'n Proto builder: the sender writes them
// straight from the caller's buffer, the reader decodes them straight into the
// caller's destination. Compressed bulk is a sequence of blocks
//   u32 raw_len (<= kBulkBlockBytes) | u32 stored_len | stored bytes
// where stored_len == raw_len means "stored uncompressed". Every block length is
// checked against what remains before a byte is written.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/stripes.h"
#include "common/tls.h"
#include "protocol/frame.h"

namespace rgpu::common {

enum class Compression { kOff, kAuto, kOn };
Result<Compression> parseCompression(const std::string& s);

// Appends header + flat-array message to `out`. `flags` may include kFlagAsync;
// the bulk flag is decided later by sendBulk().
void appendFrame(std::vector<uint8_t>& out, protocol::FrameType type, uint8_t flags, uint64_t seq,
                 capnp::MessageBuilder& message, uint64_t bulk_len);
// The same into `out`, which holds frameBytes(message) bytes.
size_t frameBytes(capnp::MessageBuilder& message);
void encodeFrame(uint8_t* out, protocol::FrameType type, uint8_t flags, uint64_t seq, capnp::MessageBuilder& message,
                 uint64_t bulk_len);

// Whether lz4 pays on a link: sending `ratio` times fewer bytes at `link`
// bytes/s after compressing at `compress` bytes/s must take at most 0.9 of
// sending them all. Over an unknown link (0: nothing timed yet) nothing is
// compressed, so `auto` is never slower than `off`. The receiver decompresses while the sender goes on
// (several GB/s: lz4 decodes 3x as fast as it encodes), so it is not counted.
bool worthCompressing(double ratio, double compress, double link);

// Whether `data` should travel lz4-compressed under `mode` over a link of
// `link` bytes/s (TlsConnection::writeRate; 0: unknown): kAuto trial-compresses
// a 64 KiB sample, times it, and asks worthCompressing. Dense float data does
// not shrink; sparse data shrinks but lz4 takes it at about 1 GB/s, slower than
// loopback and faster than most networks.
bool shouldCompress(Compression mode, const void* data, size_t len, double link = 0);

// Sends one frame whose message bytes are already in `frame` (from appendFrame,
// possibly preceded by other queued frames) followed by `len` bulk bytes.
// Patches the bulk flag of the last frame's header when compressing.
// With `stripes`, a payload they take (Stripes::shouldStripe) and that is not
// to be compressed is striped over them.
class BulkSender {
 public:
  Status send(TlsConnection& conn, std::vector<uint8_t>& frames, size_t last_frame_offset,
              const void* bulk, size_t len, Compression mode, Stripes* stripes = nullptr);

 private:
  std::vector<uint8_t> scratch_;
};

class FrameReader {
 public:
  // `stripes`: where the pieces of a striped payload come from (none: such a
  // payload may name only this connection).
  explicit FrameReader(TlsConnection& conn, uint64_t max_bulk = protocol::kMaxBulkBytes, Stripes* stripes = nullptr)
      : conn_(conn), max_bulk_(max_bulk), stripes_(stripes) {}
  // Reads the next header and message. The message stays valid until the next call.
  Status next(protocol::FrameHeader& header, kj::ArrayPtr<const capnp::word>& message);
  // Consumes the bulk payload of the current frame into dst (header.bulk_len bytes).
  Status readBulk(const protocol::FrameHeader& header, void* dst);
  // Consumes and drops the bulk payload of the current frame.
  Status skipBulk(const protocol::FrameHeader& header);
  void setStripes(Stripes* stripes) { stripes_ = stripes; }
  TlsConnection& connection() const { return conn_; }

 private:
  Status striped(const protocol::FrameHeader& header, void* dst);
  TlsConnection& conn_;
  uint64_t max_bulk_;
  Stripes* stripes_;
  std::vector<uint64_t> buf_;  // message words (capnp::word is not copyable under clang)
  std::vector<uint8_t> block_;
};

// Checks a flat-array message's segment table against the message length, so a
// bad peer gets a clear error rather than an exception from inside Cap'n Proto.
Status validateSegmentTable(kj::ArrayPtr<const capnp::word> message);

// A view of word-aligned storage as a Cap'n Proto message.
inline kj::ArrayPtr<const capnp::word> asWords(const std::vector<uint64_t>& v) {
  return kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(v.data()), v.size());
}

inline capnp::ReaderOptions readerOptions() {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = protocol::kMaxTraversalWords;
  o.nestingLimit = 16;
  return o;
}

}  // namespace rgpu::common
