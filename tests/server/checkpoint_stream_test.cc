#include "server/checkpoint/checkpoint_stream.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <random>

#include "tests/support/test_env.h"

namespace rgpu::server {
namespace {

CheckpointKey keyOf(uint8_t seed) {
  CheckpointKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<uint8_t>(seed + i * 7);
  return k;
}

// Writes `parts` (each put separately) plus a string and two integers; returns the stream.
std::vector<uint8_t> writeStream(const CheckpointKey& key, const std::vector<std::vector<uint8_t>>& parts,
                                 bool compress = true) {
  std::vector<uint8_t> out;
  auto w = CheckpointWriter::start(
      key,
      [&](const uint8_t* d, size_t n) {
        out.insert(out.end(), d, d + n);
        return Status::ok();
      },
      compress);
  EXPECT_TRUE(w) << w.status().message();
  EXPECT_TRUE((*w)->putString("session 42"));
  EXPECT_TRUE((*w)->putU64(0x1122334455667788ull));
  for (auto& p : parts) EXPECT_TRUE((*w)->put(p.data(), p.size()));
  EXPECT_TRUE((*w)->putI32(-7));
  EXPECT_TRUE((*w)->finish());
  EXPECT_EQ((*w)->storedBytes(), out.size());
  return out;
}

CheckpointReader::Source memorySource(const std::vector<uint8_t>& data, size_t* pos, size_t max_read = SIZE_MAX) {
  return [&data, pos, max_read](uint8_t* d, size_t n) -> Result<size_t> {
    size_t k = std::min({n, data.size() - *pos, max_read});
    if (k) std::memcpy(d, data.data() + *pos, k);
    *pos += k;
    return k;
  };
}

// Reads what writeStream wrote; the first failure's status.
Status readStream(const CheckpointKey& key, const std::vector<uint8_t>& data,
                  const std::vector<std::vector<uint8_t>>& parts) {
  size_t pos = 0;
  auto r = CheckpointReader::open(key, memorySource(data, &pos, 4097));
  if (!r) return r.status();
  auto name = (*r)->getString(64);
  if (!name) return name.status();
  EXPECT_EQ(*name, "session 42");
  auto v = (*r)->getU64();
  if (!v) return v.status();
  EXPECT_EQ(*v, 0x1122334455667788ull);
  for (auto& p : parts) {
    std::vector<uint8_t> got(p.size());
    if (auto s = (*r)->get(got.data(), got.size()); !s) return s;
    EXPECT_EQ(got, p);
  }
  auto i = (*r)->getI32();
  if (!i) return i.status();
  EXPECT_EQ(*i, -7);
  return (*r)->finish();
}

std::vector<std::vector<uint8_t>> sampleParts() {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> random(3 * kCheckpointChunkBytes + 12345), zeros(2 * kCheckpointChunkBytes + 1, 0), small(100);
  for (auto& b : random) b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<uint8_t>(i);
  return {random, zeros, small, {}};
}

TEST(CheckpointStream, RoundTripsDataAcrossChunksWithCompressionWhereItPays) {
  auto parts = sampleParts();
  auto data = writeStream(keyOf(1), parts);
  EXPECT_TRUE(readStream(keyOf(1), data, parts));
  // The random megabytes stay as they are; the zeros shrink to almost nothing.
  size_t plain = 0;
  for (auto& p : parts) plain += p.size();
  EXPECT_LT(data.size(), parts[0].size() + 64 * 1024);
  EXPECT_GT(data.size(), parts[0].size());
  EXPECT_LT(data.size(), plain);
  auto raw = writeStream(keyOf(1), parts, /*compress=*/false);
  EXPECT_GT(raw.size(), plain);
  EXPECT_TRUE(readStream(keyOf(1), raw, parts));
}

TEST(CheckpointStream, NothingOfThePlaintextAppearsInTheFile) {
  std::vector<uint8_t> secret(200000);
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>("tenant-secret"[i % 13]);
  auto data = writeStream(keyOf(2), {secret}, /*compress=*/false);
  std::string hay(data.begin(), data.end());
  EXPECT_EQ(hay.find("tenant-secret"), std::string::npos);
  EXPECT_EQ(hay.find("session 42"), std::string::npos);
  // Two checkpoints of the same state differ (a fresh salt, so a fresh key, per file).
  EXPECT_NE(writeStream(keyOf(2), {secret}, false), data);
}

TEST(CheckpointStream, AWrongKeyIsRefusedAtTheFirstChunk) {
  auto parts = sampleParts();
  auto data = writeStream(keyOf(3), parts);
  Status s = readStream(keyOf(4), data, parts);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("chunk 0 fails authentication"), std::string::npos) << s.message();
}

TEST(CheckpointStream, EveryFlippedByteIsDetected) {
  std::vector<std::vector<uint8_t>> parts = {std::vector<uint8_t>(3 * kCheckpointChunkBytes / 2, 9)};
  auto data = writeStream(keyOf(5), parts);
  // Every byte of the header, of each chunk header and tag, and a sample of the bodies.
  std::vector<size_t> where;
  for (size_t i = 0; i < data.size(); i += (i < 200 || i + 200 > data.size()) ? 1 : 997) where.push_back(i);
  for (size_t i : where) {
    auto bad = data;
    bad[i] ^= 0x20;
    EXPECT_FALSE(readStream(keyOf(5), bad, parts)) << "byte " << i << " of " << data.size();
  }
}

TEST(CheckpointStream, ACutOrExtendedFileIsDetected) {
  auto parts = sampleParts();
  auto data = writeStream(keyOf(6), parts);
  for (size_t keep : {size_t{0}, size_t{10}, kCheckpointHeaderBytes, kCheckpointHeaderBytes + 20, data.size() / 2,
                      data.size() - 1}) {
    std::vector<uint8_t> cut(data.begin(), data.begin() + static_cast<long>(keep));
    Status s = readStream(keyOf(6), cut, parts);
    EXPECT_FALSE(s) << keep;
  }
  // Dropping the end chunk (32 bytes of header and tag, 16 of body) is caught by finish().
  std::vector<uint8_t> no_end(data.begin(), data.end() - 48);
  Status s = readStream(keyOf(6), no_end, parts);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("cut short"), std::string::npos) << s.message();
  auto longer = data;
  longer.push_back(0);
  s = readStream(keyOf(6), longer, parts);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("after its end"), std::string::npos) << s.message();
}

TEST(CheckpointStream, ChunksCannotBeReorderedOrSwappedBetweenFiles) {
  std::vector<std::vector<uint8_t>> parts = {std::vector<uint8_t>(2 * kCheckpointChunkBytes)};
  std::mt19937 rng(1);
  for (auto& b : parts[0]) b = static_cast<uint8_t>(rng());
  auto a = writeStream(keyOf(7), parts, false);
  auto b = writeStream(keyOf(7), parts, false);
  // Same sizes, same key, different salts: b's second chunk in a's place fails.
  ASSERT_EQ(a.size(), b.size());
  auto mixed = a;
  std::copy(b.begin() + kCheckpointHeaderBytes, b.end(), mixed.begin() + kCheckpointHeaderBytes);
  EXPECT_FALSE(readStream(keyOf(7), mixed, parts));
  // Chunks 0 and 1 of a (both full, uncompressed: the same size) swapped.
  size_t stored = 16 + kCheckpointChunkBytes + 16;
  auto swapped = a;
  std::swap_ranges(swapped.begin() + kCheckpointHeaderBytes, swapped.begin() + kCheckpointHeaderBytes + stored,
                   swapped.begin() + kCheckpointHeaderBytes + stored);
  Status s = readStream(keyOf(7), swapped, parts);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("chunk 0 fails authentication"), std::string::npos) << s.message();
}

TEST(CheckpointStream, AForgedChunkHeaderCannotMakeTheReaderAllocate) {
  auto data = writeStream(keyOf(8), {});
  auto bad = data;
  // plain_len and stored_len of chunk 0 claim 4 GiB - 1.
  for (int i = 0; i < 8; ++i) bad[kCheckpointHeaderBytes + i] = 0xff;
  Status s = readStream(keyOf(8), bad, {});
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("malformed chunk header"), std::string::npos) << s.message();
}

TEST(CheckpointStream, AStringPastItsLimitIsRefused) {
  auto data = writeStream(keyOf(9), {});
  size_t pos = 0;
  auto r = CheckpointReader::open(keyOf(9), memorySource(data, &pos));
  ASSERT_TRUE(r);
  auto s = (*r)->getString(4);
  EXPECT_FALSE(s);
  EXPECT_NE(s.status().message().find("past its limit"), std::string::npos);
}

TEST(CheckpointStream, AFailingSinkAbortsTheWriter) {
  int calls = 0;
  auto w = CheckpointWriter::start(keyOf(10), [&](const uint8_t*, size_t) {
    return ++calls > 1 ? Status(err::kUnknown, "disk full") : Status::ok();
  });
  ASSERT_TRUE(w);
  std::vector<uint8_t> big(kCheckpointChunkBytes + 1);
  Status s = (*w)->put(big.data(), big.size());
  EXPECT_FALSE(s);
  EXPECT_EQ(s.message(), "disk full");
  EXPECT_FALSE((*w)->finish());
}

TEST(CheckpointStream, AFileKeyFromTheDaemonOpensItsOwnFileOnly) {
  auto k1 = newFileKey(keyOf(11)), k2 = newFileKey(keyOf(11));
  ASSERT_TRUE(k1 && k2);
  EXPECT_NE(k1->salt, k2->salt);
  EXPECT_NE(k1->key, k2->key);
  auto hex = fileKeyHex(*k1);
  EXPECT_EQ(hex.size(), 128u);
  auto back = fileKeyFromHex(hex);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->key, k1->key);
  EXPECT_FALSE(fileKeyFromHex(hex.substr(1)));
  EXPECT_FALSE(fileKeyFromHex(std::string(128, 'g')));
  std::vector<uint8_t> file;
  auto w = CheckpointWriter::start(*k1, [&](const uint8_t* d, size_t n) {
    file.insert(file.end(), d, d + n);
    return Status::ok();
  });
  ASSERT_TRUE(w);
  ASSERT_TRUE((*w)->putString("state"));
  ASSERT_TRUE((*w)->finish());
  // The daemon finds the file's key again from its header and the operator's key.
  auto again = fileKeyOf(keyOf(11), file.data(), file.size());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->key, k1->key);
  size_t pos = 0;
  auto r = CheckpointReader::open(*k1, memorySource(file, &pos));
  ASSERT_TRUE(r);
  auto text = (*r)->getString(16);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "state");
  EXPECT_TRUE((*r)->finish());
  // Another file's key is refused before anything is decrypted.
  pos = 0;
  auto other = CheckpointReader::open(*k2, memorySource(file, &pos));
  ASSERT_FALSE(other);
  EXPECT_NE(other.status().message().find("not the one its key was made for"), std::string::npos);
  // And the operator's key opens it too (the file's salt derives its key).
  pos = 0;
  EXPECT_TRUE(CheckpointReader::open(keyOf(11), memorySource(file, &pos)));
}

TEST(CheckpointKeyFile, NeedsSixtyFourHexDigitsReadableByItsOwnerAlone) {
  test::TempDir dir;
  std::string path = dir.path() + "/key";
  {
    std::ofstream(path) << "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\n";
  }
  ::chmod(path.c_str(), 0644);
  auto k = loadCheckpointKey(path);
  ASSERT_FALSE(k);
  EXPECT_NE(k.status().message().find("chmod 0600"), std::string::npos);
  ::chmod(path.c_str(), 0600);
  k = loadCheckpointKey(path);
  ASSERT_TRUE(k) << k.status().message();
  EXPECT_EQ(k->bytes[0], 0x00);
  EXPECT_EQ(k->bytes[15], 0xff);
  EXPECT_EQ(k->bytes[31], 0xff);
  {
    std::ofstream(path) << "0011";
  }
  k = loadCheckpointKey(path);
  ASSERT_FALSE(k);
  EXPECT_NE(k.status().message().find("64 hex digits"), std::string::npos);
  EXPECT_FALSE(loadCheckpointKey(dir.path() + "/missing"));
}

}  // namespace
}  // namespace rgpu::server
