#include "protocol/frame.h"

#include <cstddef>
#include <cstring>

namespace rgpu::protocol {
namespace {
template <typename T>
void put(uint8_t*& p, T v) {
  std::memcpy(p, &v, sizeof v);  // x86-64 and aarch64 hosts are little-endian
  p += sizeof v;
}
template <typename T>
T get(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}
}  // namespace

void encodeHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  uint8_t* p = out;
  put(p, h.magic);
  put(p, h.version);
  put(p, static_cast<uint8_t>(h.type));
  put(p, h.flags);
  put(p, h.message_len);
  put(p, h.reserved);
  put(p, h.seq);
  put(p, h.bulk_len);
}

void setHeaderSeq(uint8_t header[kFrameHeaderBytes], uint64_t seq) {
  constexpr size_t kSeqAt = 4 + 2 + 1 + 1 + 4 + 4;  // after magic, version, type, flags, length, reserved
  std::memcpy(header + kSeqAt, &seq, sizeof seq);
}

bool decodeHeader(const uint8_t in[kFrameHeaderBytes], FrameHeader& h, std::string& why,
                  uint64_t max_bulk) {
  const uint8_t* p = in;
  h.magic = get<uint32_t>(p);
  h.version = get<uint16_t>(p);
  h.type = static_cast<FrameType>(get<uint8_t>(p));
  h.flags = get<uint8_t>(p);
  h.message_len = get<uint32_t>(p);
  h.reserved = get<uint32_t>(p);
  h.seq = get<uint64_t>(p);
  h.bulk_len = get<uint64_t>(p);
  if (h.magic != kFrameMagic) {
    why = "bad frame magic (not an rgpu peer?)";
    return false;
  }
  if (h.version != kWireVersion) {
    why = "unsupported wire version " + std::to_string(h.version) + " (this side speaks " +
          std::to_string(kWireVersion) + ")";
    return false;
  }
  auto t = static_cast<uint8_t>(h.type);
  if (t < static_cast<uint8_t>(FrameType::kHello) || t > static_cast<uint8_t>(FrameType::kAck)) {
    why = "unknown frame type " + std::to_string(t);
    return false;
  }
  if (h.message_len == 0 || h.message_len > kMaxMessageBytes || h.message_len % 8 != 0) {
    why = "message length " + std::to_string(h.message_len) + " outside (0, " +
          std::to_string(kMaxMessageBytes) + "] or not a multiple of 8";
    return false;
  }
  if (h.bulk_len > max_bulk) {
    why = "bulk length " + std::to_string(h.bulk_len) + " exceeds limit " + std::to_string(max_bulk);
    return false;
  }
  if ((h.flags & ~(kFlagBulkLz4 | kFlagAsync | kFlagTimed | kFlagStriped)) != 0) {
    why = "unknown frame flags";
    return false;
  }
  if ((h.flags & kFlagBulkLz4) && (h.flags & kFlagStriped)) {
    why = "a bulk payload both compressed and striped";
    return false;
  }
  return true;
}

}  // namespace rgpu::protocol
