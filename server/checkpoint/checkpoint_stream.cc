#include "server/checkpoint/checkpoint_stream.h"

#include <lz4.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/config.h"

namespace rgpu::server {
namespace {

constexpr char kMagic[8] = {'R', 'G', 'P', 'U', 'C', 'K', 'P', 'T'};
constexpr size_t kChunkHeaderBytes = 16;
constexpr size_t kTagBytes = 16;
constexpr uint32_t kKindRaw = 0, kKindLz4 = 1, kKindEnd = 2;
constexpr char kKdfLabel[] = "rgpu checkpoint v1";

void storeU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t loadU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// The file's key: HMAC-SHA-256(operator key, label || salt). A fresh salt per
// checkpoint gives every file its own key, so chunk indices may serve as nonces.
bool deriveKey(const CheckpointKey& key, const uint8_t* salt, uint8_t out[32]) {
  uint8_t msg[sizeof kKdfLabel + 32];
  std::memcpy(msg, kKdfLabel, sizeof kKdfLabel);
  std::memcpy(msg + sizeof kKdfLabel, salt, 32);
  unsigned len = 32;
  return HMAC(EVP_sha256(), key.bytes.data(), static_cast<int>(key.bytes.size()), msg, sizeof msg, out, &len) !=
             nullptr &&
         len == 32;
}

void nonceOf(uint64_t index, uint8_t nonce[12]) {
  std::memset(nonce, 0, 12);
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<uint8_t>(index >> (8 * i));
}

// Exactly 2n hex digits (either case) into n bytes; false otherwise.
bool fromHexDigits(const std::string& hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  auto nib = [](char c) -> int {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < n; ++i) {
    int hi = nib(hex[2 * i]), lo = nib(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

uint64_t storedBound() { return static_cast<uint64_t>(LZ4_compressBound(static_cast<int>(kCheckpointChunkBytes))); }

}  // namespace

Result<CheckpointKey> loadCheckpointKey(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status(err::kInvalidValue, "[checkpoint] key_file " + path + ": " + std::strerror(errno));
  if ((st.st_mode & 077) != 0)
    return Status(err::kInvalidValue, "[checkpoint] key_file " + path +
                                          " is readable by others than its owner (chmod 0600 it)");
  auto text = common::readTextFile(path);
  if (!text) return text.status();
  std::string hex;
  for (char c : *text)
    if (!std::isspace(static_cast<unsigned char>(c))) hex.push_back(c);
  std::fill(text->begin(), text->end(), '\0');
  CheckpointKey key;
  const bool good = fromHexDigits(hex, key.bytes.data(), key.bytes.size());
  OPENSSL_cleanse(hex.data(), hex.size());
  if (!good)
    return Status(err::kInvalidValue, "[checkpoint] key_file " + path +
                                          " must hold 64 hex digits (make one: openssl rand -hex 32)");
  return key;
}

Result<CheckpointFileKey> newFileKey(const CheckpointKey& key) {
  CheckpointFileKey k;
  if (RAND_bytes(k.salt.data(), static_cast<int>(k.salt.size())) != 1 || !deriveKey(key, k.salt.data(), k.key.data()))
    return Status(err::kUnknown, "checkpoint: no randomness or key derivation failed");
  return k;
}

Result<CheckpointFileKey> fileKeyOf(const CheckpointKey& key, const uint8_t* header, size_t len) {
  if (len < kCheckpointHeaderBytes || std::memcmp(header, kMagic, 8) != 0)
    return Status(err::kInvalidValue, "not an rgpu checkpoint (bad magic)");
  CheckpointFileKey k;
  std::memcpy(k.salt.data(), header + 16, 32);
  if (!deriveKey(key, k.salt.data(), k.key.data())) return Status(err::kUnknown, "checkpoint: key derivation failed");
  return k;
}

std::string fileKeyHex(const CheckpointFileKey& k) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (auto* part : {&k.salt, &k.key})
    for (uint8_t b : *part) {
      out.push_back(kDigits[b >> 4]);
      out.push_back(kDigits[b & 15]);
    }
  return out;
}

Result<CheckpointFileKey> fileKeyFromHex(const std::string& hex) {
  CheckpointFileKey k;
  if (hex.size() != 128 || !fromHexDigits(hex.substr(0, 64), k.salt.data(), 32) ||
      !fromHexDigits(hex.substr(64), k.key.data(), 32))
    return Status(err::kInvalidValue, "a checkpoint file key is 128 hex digits");
  return k;
}

// ---------------------------------------------------------------------------
// Writer

struct CheckpointWriter::Impl {
  Sink sink;
  bool compress = true;
  uint8_t header[kCheckpointHeaderBytes];
  uint8_t file_key[32];
  EVP_CIPHER_CTX* ctx = nullptr;
  std::vector<uint8_t> packed, out;
  ~Impl() {
    OPENSSL_cleanse(file_key, sizeof file_key);
    EVP_CIPHER_CTX_free(ctx);
  }
};

CheckpointWriter::CheckpointWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointWriter::~CheckpointWriter() = default;

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::start(const CheckpointKey& key, Sink sink,
                                                                  bool compress) {
  auto k = newFileKey(key);
  if (!k) return k.status();
  return start(*k, std::move(sink), compress);
}

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::start(const CheckpointFileKey& key, Sink sink,
                                                                  bool compress) {
  auto impl = std::make_unique<Impl>();
  impl->sink = std::move(sink);
  impl->compress = compress;
  std::memcpy(impl->header, kMagic, 8);
  storeU32(impl->header + 8, kCheckpointVersion);
  storeU32(impl->header + 12, 0);
  std::memcpy(impl->header + 16, key.salt.data(), 32);
  std::memcpy(impl->file_key, key.key.data(), 32);
  impl->ctx = EVP_CIPHER_CTX_new();
  if (!impl->ctx) return Status(err::kMemoryAllocation, "checkpoint: EVP_CIPHER_CTX_new failed");
  if (auto s = impl->sink(impl->header, sizeof impl->header); !s) return s;
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter(std::move(impl)));
  w->stored_total_ = kCheckpointHeaderBytes;
  w->chunk_.reserve(kCheckpointChunkBytes);
  return w;
}

Status CheckpointWriter::seal(uint32_t kind, const uint8_t* plain, size_t len) {
  Impl& m = *impl_;
  const uint8_t* body = plain;
  size_t body_len = len;
  if (kind == kKindRaw && m.compress && len >= 256) {
    m.packed.resize(storedBound());
    int n = LZ4_compress_default(reinterpret_cast<const char*>(plain), reinterpret_cast<char*>(m.packed.data()),
                                 static_cast<int>(len), static_cast<int>(m.packed.size()));
    if (n > 0 && static_cast<size_t>(n) < len - len / 16) {  // at least 1/16 smaller, else not worth decoding
      kind = kKindLz4;
      body = m.packed.data();
      body_len = static_cast<size_t>(n);
    }
  }
  m.out.resize(kChunkHeaderBytes + body_len + kTagBytes);
  uint8_t* head = m.out.data();
  storeU32(head, static_cast<uint32_t>(len));
  storeU32(head + 4, static_cast<uint32_t>(body_len));
  storeU32(head + 8, kind);
  storeU32(head + 12, 0);
  uint8_t nonce[12];
  nonceOf(chunks_, nonce);
  int outl = 0;
  EVP_CIPHER_CTX* c = m.ctx;
  bool ok = EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) == 1 &&
            EVP_EncryptInit_ex(c, nullptr, nullptr, m.file_key, nonce) == 1 &&
            EVP_EncryptUpdate(c, nullptr, &outl, m.header, sizeof m.header) == 1 &&
            EVP_EncryptUpdate(c, nullptr, &outl, head, kChunkHeaderBytes) == 1 &&
            (body_len == 0 ||
             EVP_EncryptUpdate(c, head + kChunkHeaderBytes, &outl, body, static_cast<int>(body_len)) == 1) &&
            EVP_EncryptFinal_ex(c, head + kChunkHeaderBytes + body_len, &outl) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kTagBytes, head + kChunkHeaderBytes + body_len) == 1;
  if (!ok) return failed_ = Status(err::kUnknown, "checkpoint: AES-GCM failed");
  if (auto s = m.sink(m.out.data(), m.out.size()); !s) return failed_ = s;
  ++chunks_;
  stored_total_ += m.out.size();
  return Status::ok();
}

Status CheckpointWriter::flushChunk() {
  if (chunk_.empty()) return Status::ok();
  Status s = seal(kKindRaw, chunk_.data(), chunk_.size());
  chunk_.clear();
  return s;
}

Status CheckpointWriter::put(const void* data, size_t len) {
  if (!failed_) return failed_;
  if (finished_) return failed_ = Status(err::kUnknown, "checkpoint: written after finish()");
  auto p = static_cast<const uint8_t*>(data);
  plain_total_ += len;
  while (len > 0) {
    size_t room = kCheckpointChunkBytes - chunk_.size();
    size_t n = std::min(room, len);
    chunk_.insert(chunk_.end(), p, p + n);
    p += n;
    len -= n;
    if (chunk_.size() == kCheckpointChunkBytes)
      if (auto s = flushChunk(); !s) return s;
  }
  return Status::ok();
}

Status CheckpointWriter::putString(const std::string& s) {
  if (auto st = putU64(s.size()); !st) return st;
  return put(s.data(), s.size());
}

Status CheckpointWriter::putStatus(const Status& s) {
  RGPU_TRY(putI32(s.code()));
  return putString(s.message());
}

Status CheckpointWriter::finish() {
  if (!failed_) return failed_;
  if (finished_) return Status::ok();
  if (auto s = flushChunk(); !s) return s;
  uint8_t end[16];
  uint64_t data_chunks = chunks_;
  std::memcpy(end, &plain_total_, 8);
  std::memcpy(end + 8, &data_chunks, 8);
  if (auto s = seal(kKindEnd, end, sizeof end); !s) return s;
  finished_ = true;
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Reader

struct CheckpointReader::Impl {
  Source source;
  uint8_t header[kCheckpointHeaderBytes];
  uint8_t file_key[32];
  EVP_CIPHER_CTX* ctx = nullptr;
  ~Impl() {
    OPENSSL_cleanse(file_key, sizeof file_key);
    EVP_CIPHER_CTX_free(ctx);
  }
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;

Status CheckpointReader::readExactly(uint8_t* data, size_t len, const char* what) {
  size_t got = 0;
  while (got < len) {
    auto n = impl_->source(data + got, len - got);
    if (!n) return n.status();
    if (*n == 0)
      return Status(err::kInvalidValue, std::string("checkpoint is cut short (in ") + what + " " +
                                            std::to_string(chunks_) + ")");
    got += *n;
  }
  return Status::ok();
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::open(const CheckpointKey& key, Source source) {
  return open(&key, nullptr, std::move(source));
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::open(const CheckpointFileKey& key, Source source) {
  return open(nullptr, &key, std::move(source));
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::open(const CheckpointKey* key, const CheckpointFileKey* file,
                                                                 Source source) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::move(source);
  impl->ctx = EVP_CIPHER_CTX_new();
  if (!impl->ctx) return Status(err::kMemoryAllocation, "checkpoint: EVP_CIPHER_CTX_new failed");
  std::unique_ptr<CheckpointReader> r(new CheckpointReader(std::move(impl)));
  Impl& m = *r->impl_;
  if (auto s = r->readExactly(m.header, sizeof m.header, "the header"); !s) return s;
  if (std::memcmp(m.header, kMagic, 8) != 0) return Status(err::kInvalidValue, "not an rgpu checkpoint (bad magic)");
  if (uint32_t v = loadU32(m.header + 8); v != kCheckpointVersion)
    return Status(err::kInvalidValue, "checkpoint version " + std::to_string(v) + " (this server reads version " +
                                          std::to_string(kCheckpointVersion) + ")");
  if (file) {
    if (std::memcmp(file->salt.data(), m.header + 16, 32) != 0)
      return Status(err::kInvalidValue, "the checkpoint is not the one its key was made for");
    std::memcpy(m.file_key, file->key.data(), 32);
  } else if (!deriveKey(*key, m.header + 16, m.file_key)) {
    return Status(err::kUnknown, "checkpoint: key derivation failed");
  }
  return r;
}

Status CheckpointReader::nextChunk(uint32_t* kind) {
  Impl& m = *impl_;
  uint8_t head[kChunkHeaderBytes];
  if (auto s = readExactly(head, sizeof head, "chunk"); !s) return s;
  uint32_t plain_len = loadU32(head), stored_len = loadU32(head + 4);
  *kind = loadU32(head + 8);
  std::string where = "checkpoint chunk " + std::to_string(chunks_);
  // Refuse what no writer makes before allocating for it: a forged header
  // must not make us allocate (or read) without bound.
  bool sane = loadU32(head + 12) == 0 &&
              ((*kind == kKindRaw && stored_len == plain_len && plain_len <= kCheckpointChunkBytes) ||
               (*kind == kKindLz4 && plain_len <= kCheckpointChunkBytes && stored_len <= storedBound()) ||
               (*kind == kKindEnd && plain_len == 16 && stored_len == 16));
  if (!sane) return Status(err::kInvalidValue, where + ": malformed chunk header");
  stored_.resize(stored_len + kTagBytes);
  if (auto s = readExactly(stored_.data(), stored_.size(), "chunk"); !s) return s;
  uint8_t nonce[12];
  nonceOf(chunks_, nonce);
  std::vector<uint8_t>& plain = *kind == kKindLz4 ? scratch_ : chunk_;
  plain.resize(stored_len);
  int outl = 0;
  EVP_CIPHER_CTX* c = m.ctx;
  bool ok = EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) == 1 &&
            EVP_DecryptInit_ex(c, nullptr, nullptr, m.file_key, nonce) == 1 &&
            EVP_DecryptUpdate(c, nullptr, &outl, m.header, sizeof m.header) == 1 &&
            EVP_DecryptUpdate(c, nullptr, &outl, head, sizeof head) == 1 &&
            (stored_len == 0 ||
             EVP_DecryptUpdate(c, plain.data(), &outl, stored_.data(), static_cast<int>(stored_len)) == 1) &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kTagBytes, stored_.data() + stored_len) == 1 &&
            EVP_DecryptFinal_ex(c, plain.data() + stored_len, &outl) == 1;
  if (!ok)
    return Status(err::kInvalidValue, where + " fails authentication: the file was changed or cut, or the key is "
                                              "not the one it was written with");
  if (*kind == kKindLz4) {
    chunk_.resize(plain_len);
    int n = LZ4_decompress_safe(reinterpret_cast<const char*>(scratch_.data()), reinterpret_cast<char*>(chunk_.data()),
                                static_cast<int>(stored_len), static_cast<int>(plain_len));
    if (n < 0 || static_cast<uint32_t>(n) != plain_len) return Status(err::kInvalidValue, where + ": corrupt lz4 data");
  }
  ++chunks_;
  pos_ = 0;
  return Status::ok();
}

Status CheckpointReader::get(void* data, size_t len) {
  if (!failed_) return failed_;
  auto p = static_cast<uint8_t*>(data);
  while (len > 0) {
    if (pos_ == chunk_.size()) {
      if (ended_) return failed_ = Status(err::kInvalidValue, "checkpoint ends before its data does");
      uint32_t kind = 0;
      if (auto s = nextChunk(&kind); !s) return failed_ = s;
      if (kind == kKindEnd) {
        ended_ = true;
        chunk_.clear();
        pos_ = 0;
        return failed_ = Status(err::kInvalidValue, "checkpoint ends before its data does");
      }
    }
    size_t n = std::min(len, chunk_.size() - pos_);
    std::memcpy(p, chunk_.data() + pos_, n);
    pos_ += n;
    p += n;
    len -= n;
    plain_total_ += n;
  }
  return Status::ok();
}

Result<uint32_t> CheckpointReader::getU32() {
  uint32_t v = 0;
  if (auto s = get(&v, sizeof v); !s) return s;
  return v;
}
Result<uint64_t> CheckpointReader::getU64() {
  uint64_t v = 0;
  if (auto s = get(&v, sizeof v); !s) return s;
  return v;
}
Result<int32_t> CheckpointReader::getI32() {
  int32_t v = 0;
  if (auto s = get(&v, sizeof v); !s) return s;
  return v;
}

Result<std::string> CheckpointReader::getString(size_t max) {
  auto n = getU64();
  if (!n) return n.status();
  if (*n > max)
    return failed_ = Status(err::kInvalidValue, "checkpoint: a string of " + std::to_string(*n) +
                                                    " bytes, past its limit of " + std::to_string(max));
  std::string s(*n, '\0');
  if (auto st = get(s.data(), s.size()); !st) return st;
  return s;
}

Result<uint64_t> CheckpointReader::getCount(uint64_t max, const char* what) {
  RGPU_TRY_ASSIGN(n, getU64());
  if (n > max)
    return failed_ = Status(err::kInvalidValue, "checkpoint holds " + std::to_string(n) + " " + what +
                                                    ", past the limit of " + std::to_string(max));
  return n;
}

Status CheckpointReader::getStatus(Status* out) {
  RGPU_TRY_ASSIGN(code, getI32());
  RGPU_TRY_ASSIGN(message, getString(4096));
  *out = Status(code, message);
  return Status::ok();
}

Status CheckpointReader::finish() {
  if (!failed_) return failed_;
  if (pos_ != chunk_.size()) return failed_ = Status(err::kInvalidValue, "checkpoint has data nobody read");
  uint32_t kind = 0;
  uint64_t data_chunks = chunks_;
  if (auto s = nextChunk(&kind); !s) return failed_ = s;
  if (kind != kKindEnd) return failed_ = Status(err::kInvalidValue, "checkpoint has data nobody read");
  uint64_t total = 0, count = 0;
  std::memcpy(&total, chunk_.data(), 8);
  std::memcpy(&count, chunk_.data() + 8, 8);
  chunk_.clear();
  pos_ = 0;
  ended_ = true;
  if (total != plain_total_ || count != data_chunks)
    return failed_ = Status(err::kInvalidValue, "checkpoint's end does not match its data");
  uint8_t extra = 0;
  auto n = impl_->source(&extra, 1);
  if (!n) return failed_ = n.status();
  if (*n != 0) return failed_ = Status(err::kInvalidValue, "checkpoint has bytes after its end");
  return Status::ok();
}

CheckpointWriter::Sink fdSink(int fd) {
  return [fd](const uint8_t* data, size_t len) -> Status {
    while (len > 0) {
      ssize_t n = ::write(fd, data, len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status(err::kUnknown, std::string("writing the checkpoint: ") + std::strerror(errno));
      data += n;
      len -= static_cast<size_t>(n);
    }
    return Status::ok();
  };
}

CheckpointReader::Source fdSource(int fd) {
  return [fd](uint8_t* data, size_t len) -> Result<size_t> {
    for (;;) {
      ssize_t n = ::read(fd, data, len);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status(err::kUnknown, std::string("reading the checkpoint: ") + std::strerror(errno));
      return static_cast<size_t>(n);
    }
  };
}

}  // namespace rgpu::server
