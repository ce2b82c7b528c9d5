// Frame header and protocol limits.
//
// A frame on the wire is: FrameHeader (32 bytes, little-endian) | Cap'n Proto
// message (messageLen bytes, flat array, multiple of 8) | bulk payload
// (bulkLen raw bytes; when kFlagBulkLz4 is set, a sequence of lz4 blocks that
// decode to bulkLen bytes, see common/bulk.h).
//
// Every length in a header is checked against a limit here before anything is
// allocated: a peer must not be able to make us reserve memory without bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rgpu::protocol {

inline constexpr uint32_t kFrameMagic = 0x55504752;  // "RGPU"
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 32;

// Limits. Named so that docs/limits.md, the code and the tests agree.
inline constexpr uint32_t kMaxMessageBytes = 1u << 20;        // one Cap'n Proto message
inline constexpr uint64_t kMaxBulkBytes = 64ull << 20;        // one frame's bulk payload
inline constexpr uint32_t kMaxParamBytes = 32764;            // kernel parameter block (CUDA 12.1+ limit)
inline constexpr uint64_t kMaxFatbinBytes = kMaxBulkBytes;   // one shipped fatbin
inline constexpr uint64_t kBulkBlockBytes = 1ull << 20;      // lz4 block size on the wire
inline constexpr uint64_t kMaxTraversalWords = kMaxMessageBytes / 8;
// Extra connections one session may stripe bulk payloads over (common/stripes.h).
inline constexpr uint32_t kMaxStripes = 16;

enum class FrameType : uint8_t {
  kHello = 1,
  kWelcome = 2,
  kRequest = 3,
  kReply = 4,
  kNotify = 5,
  // Delivery acknowledgements for session resume (wire::Ack; the header's seq
  // is 0). Sent only when both sides agreed on resume in Hello/Welcome.
  kAck = 6,
};

enum FrameFlags : uint8_t {
  kFlagBulkLz4 = 1u << 0,  // bulk payload is a sequence of lz4 blocks
  kFlagAsync = 1u << 1,    // request expects no reply (fire and forget)
  // Request: the reply carries the server's timestamps of it (Reply.serverTimes;
  // rgpu-bench --breakdown). Costs a few clock reads; asked for by benchmarks only.
  kFlagTimed = 1u << 2,
  // The bulk payload is striped over the session's stripe connections: a
  // stripe table comes first (common/stripes.h). Never with kFlagBulkLz4.
  kFlagStriped = 1u << 3,
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kWireVersion;
  FrameType type = FrameType::kRequest;
  uint8_t flags = 0;
  uint32_t message_len = 0;
  uint32_t reserved = 0;
  // Request: its sequence number, 1, 2, 3, ... without gaps (the server refuses
  // any other: a replayed or reordered frame). Reply: its request's. Notify:
  // the server's own count of notifications, 1, 2, 3, ...
  uint64_t seq = 0;
  uint64_t bulk_len = 0;  // decoded bulk bytes
};

void encodeHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);
// Sets the sequence number of an encoded header (a frame encoded before its
// number was known: the client encodes outside the lock that numbers frames).
void setHeaderSeq(uint8_t header[kFrameHeaderBytes], uint64_t seq);

// Decodes and validates a header. On failure returns false and says why in
// `why` (magic, version, type or a length past its limit).
bool decodeHeader(const uint8_t in[kFrameHeaderBytes], FrameHeader& h, std::string& why,
                  uint64_t max_bulk = kMaxBulkBytes);

}  // namespace rgpu::protocol
