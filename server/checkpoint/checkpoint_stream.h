// A checkpoint stream: how a session's state is written to a file (or sent
// to another member) and read back, without ever holding the whole state in
// memory. Writers and readers see a plain byte stream with typed helpers;
// what travels is a sequence of encrypted chunks.
//
// Layout (all integers little-endian):
//   header  48 bytes: "RGPUCKPT", u32 version, u32 reserved (0), salt[32]
//   chunk   16-byte chunk header: u32 plain_len, u32 stored_len, u32 kind,
//           u32 reserved (0); then stored_len bytes of AES-256-GCM ciphertext
//           and its 16-byte tag
//   ...     the last chunk is kind kEnd: its plaintext is the number of
//           plaintext bytes and data chunks before it (two u64)
//
// Confidentiality and integrity: every chunk is sealed with AES-256-GCM
// under a key derived from the operator's key ([checkpoint] key_file) and
// the file's random salt (HMAC-SHA-256), with the chunk's index as its nonce
// and the file header plus its own chunk header as associated data. A chunk
// that was changed, moved, dropped or taken from another checkpoint, a file
// cut short, or the wrong key, fail authentication: the reader says which
// chunk and stops. A data chunk is lz4-compressed first when that shrinks it.
//
// Limits: a chunk holds at most kCheckpointChunkBytes of plaintext, and a
// reader refuses a chunk header that claims more (or more stored bytes than
// lz4's bound for it) before it allocates anything; strings are read with a
// caller's maximum.
//
// Not thread-safe: one writer or reader per stream.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::server {

inline constexpr uint64_t kCheckpointChunkBytes = 1ull << 20;
inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr size_t kCheckpointHeaderBytes = 48;

// The operator's checkpoint key: 32 bytes, from a file holding 64 hex digits
// (whitespace around them ignored). The file must be readable by its owner
// alone: a key others can read protects nothing.
struct CheckpointKey {
  std::array<uint8_t, 32> bytes{};
};
Result<CheckpointKey> loadCheckpointKey(const std::string& path);

// The key of one checkpoint file, derived from the operator's key and the
// file's salt. The daemon, which alone holds the operator's key, hands a
// worker the key of the one file it writes or reads: a tenant who broke its
// worker learns no other checkpoint's key.
struct CheckpointFileKey {
  std::array<uint8_t, 32> salt{}, key{};
};
// A fresh salt and its key (a new checkpoint).
Result<CheckpointFileKey> newFileKey(const CheckpointKey& key);
// The key of the checkpoint whose first kCheckpointHeaderBytes are `header`.
Result<CheckpointFileKey> fileKeyOf(const CheckpointKey& key, const uint8_t* header, size_t len);
// As hex (salt then key, 128 digits) for the daemon's message to a worker, and back.
std::string fileKeyHex(const CheckpointFileKey& k);
Result<CheckpointFileKey> fileKeyFromHex(const std::string& hex);

class CheckpointWriter {
 public:
  // Receives the stream's bytes in order; non-ok aborts the checkpoint.
  using Sink = std::function<Status(const uint8_t* data, size_t len)>;
  // Writes the header at once. `compress`: lz4 data chunks where it pays.
  static Result<std::unique_ptr<CheckpointWriter>> start(const CheckpointKey& key, Sink sink, bool compress = true);
  static Result<std::unique_ptr<CheckpointWriter>> start(const CheckpointFileKey& key, Sink sink, bool compress = true);
  ~CheckpointWriter();

  Status put(const void* data, size_t len);
  Status putU32(uint32_t v) { return put(&v, sizeof v); }
  Status putU64(uint64_t v) { return put(&v, sizeof v); }
  Status putI32(int32_t v) { return put(&v, sizeof v); }
  Status putString(const std::string& s);
  Status putStatus(const Status& s);  // its code and message
  // Seals the last data chunk and the end chunk. Nothing may be put after.
  Status finish();

  uint64_t plainBytes() const { return plain_total_; }
  uint64_t storedBytes() const { return stored_total_; }

 private:
  struct Impl;
  explicit CheckpointWriter(std::unique_ptr<Impl> impl);
  Status seal(uint32_t kind, const uint8_t* plain, size_t len);
  Status flushChunk();

  std::unique_ptr<Impl> impl_;
  std::vector<uint8_t> chunk_;  // plaintext not yet sealed
  uint64_t plain_total_ = 0, stored_total_ = 0, chunks_ = 0;
  bool finished_ = false;
  Status failed_;  // the first failure: every later call returns it
};

class CheckpointReader {
 public:
  // Reads up to `len` bytes into `data`; 0 at the end of the stream.
  using Source = std::function<Result<size_t>(uint8_t* data, size_t len)>;
  // Reads and checks the header.
  static Result<std::unique_ptr<CheckpointReader>> open(const CheckpointKey& key, Source source);
  // With a file's own key: the header's salt must be the key's.
  static Result<std::unique_ptr<CheckpointReader>> open(const CheckpointFileKey& key, Source source);
  ~CheckpointReader();

  // Exactly `len` bytes, or an error (the stream ended, a chunk failed authentication).
  Status get(void* data, size_t len);
  Result<uint32_t> getU32();
  Result<uint64_t> getU64();
  Result<int32_t> getI32();
  // A string written by putString, refused past `max` bytes.
  Result<std::string> getString(size_t max);
  // A count of `what` (a u64), refused past `max` before anything is made for it.
  Result<uint64_t> getCount(uint64_t max, const char* what);
  // A Status written by putStatus (its message at most 4 KiB).
  Status getStatus(Status* out);
  // The end chunk must come next (all data read), agree with what was read,
  // and nothing may follow it.
  Status finish();

  uint64_t plainBytes() const { return plain_total_; }

 private:
  struct Impl;
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<CheckpointReader>> open(const CheckpointKey* key, const CheckpointFileKey* file,
                                                        Source source);
  // Reads, authenticates and decompresses the next chunk into chunk_.
  Status nextChunk(uint32_t* kind);
  Status readExactly(uint8_t* data, size_t len, const char* what);

  std::unique_ptr<Impl> impl_;
  std::vector<uint8_t> chunk_, stored_, scratch_;  // scratch_: an lz4 chunk before decoding
  size_t pos_ = 0;  // in chunk_
  uint64_t plain_total_ = 0, chunks_ = 0;
  bool ended_ = false;
  Status failed_;
};

// Sink and source over a file descriptor (the caller keeps it open).
CheckpointWriter::Sink fdSink(int fd);
CheckpointReader::Source fdSource(int fd);

}  // namespace rgpu::server
