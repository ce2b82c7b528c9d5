// The input format of fuzz_dispatch: a sequence of records, each one request
// the harness frames with a valid header and the next sequence number.
//
//   u8  flags        bit 0: asynchronous (kFlagAsync); bit 1: lz4 bulk flag;
//                    bit 2: first answer the host functions held so far
//   u16 message_len  bytes of Cap'n Proto message (rounded down to words)
//   u32 bulk_len     raw bulk bytes that follow the message
//   message bytes, bulk bytes
//
// Lengths past the end of the input are cut to what remains. Pointers: an
// aligned 64-bit word of the message or of a launch's parameter block whose
// upper five bytes are kRelocTag becomes (the session's allocation number
// byte 2, counted in reply order) + (bytes 0-1): so mutations reach the code
// behind the pointer checks instead of always being refused by them.
// Symbol addresses and conditional node handles count as allocations too.
//
// Host functions: the harness answers each one the session asks for at once,
// except those whose id has bit 63 set (kHeldHostFunction): those hold their
// stream until a record with flags bit 2, or the end of an input of even
// length (odd: the session ends with the stream still held). While any is
// held the harness sends on without waiting for replies, as a client with
// several threads would — so frees, unloads and resets meet work queued
// behind a blocked stream.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace rgpu::fuzz {

inline constexpr uint64_t kRelocTag = 0x00EDC510A1000000ull;
inline constexpr uint64_t kRelocMask = 0xFFFFFFFFFF000000ull;
inline constexpr uint64_t kHeldHostFunction = 1ull << 63;
inline constexpr uint8_t kReleaseHeld = 4;

// A pointer the harness relocates: `offset` bytes into allocation `index`.
inline uint64_t relocated(unsigned index, unsigned offset) {
  return kRelocTag | (uint64_t{index & 0xff} << 16) | (offset & 0xffff);
}

inline void appendRecord(std::string& out, bool async, capnp::MessageBuilder& msg, const std::string& bulk = "",
                         bool lz4 = false, bool release_held = false) {
  auto words = capnp::messageToFlatArray(msg);
  auto bytes = words.asBytes();
  uint8_t flags = static_cast<uint8_t>((async ? 1 : 0) | (lz4 ? 2 : 0) | (release_held ? kReleaseHeld : 0));
  uint16_t mlen = static_cast<uint16_t>(bytes.size());
  uint32_t blen = static_cast<uint32_t>(bulk.size());
  out.push_back(static_cast<char>(flags));
  out.append(reinterpret_cast<const char*>(&mlen), 2);
  out.append(reinterpret_cast<const char*>(&blen), 4);
  out.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  out += bulk;
}

}  // namespace rgpu::fuzz
