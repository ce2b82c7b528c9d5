#include "protocol/frame.h"

#include <gtest/gtest.h>

namespace rgpu::protocol {
namespace {

FrameHeader valid() {
  FrameHeader h;
  h.type = FrameType::kRequest;
  h.flags = kFlagAsync;
  h.message_len = 64;
  h.seq = 42;
  h.bulk_len = 1000;
  return h;
}

bool decodes(const FrameHeader& h, std::string* why = nullptr) {
  uint8_t raw[kFrameHeaderBytes];
  encodeHeader(h, raw);
  FrameHeader out;
  std::string w;
  bool ok = decodeHeader(raw, out, w);
  if (why) *why = w;
  return ok;
}

TEST(FrameHeader, SetHeaderSeqNumbersAnEncodedFrameAndNothingElse) {
  FrameHeader h = valid();
  h.seq = 0;
  uint8_t raw[kFrameHeaderBytes];
  encodeHeader(h, raw);
  setHeaderSeq(raw, 0x0102030405060708ull);
  FrameHeader out;
  std::string why;
  ASSERT_TRUE(decodeHeader(raw, out, why)) << why;
  EXPECT_EQ(out.seq, 0x0102030405060708ull);
  EXPECT_EQ(out.type, FrameType::kRequest);
  EXPECT_EQ(out.flags, kFlagAsync);
  EXPECT_EQ(out.message_len, 64u);
  EXPECT_EQ(out.bulk_len, 1000u);
}

TEST(FrameHeader, RoundTripsEveryField) {
  uint8_t raw[kFrameHeaderBytes];
  encodeHeader(valid(), raw);
  FrameHeader out;
  std::string why;
  ASSERT_TRUE(decodeHeader(raw, out, why)) << why;
  EXPECT_EQ(out.type, FrameType::kRequest);
  EXPECT_EQ(out.flags, kFlagAsync);
  EXPECT_EQ(out.message_len, 64u);
  EXPECT_EQ(out.seq, 42u);
  EXPECT_EQ(out.bulk_len, 1000u);
}

TEST(FrameHeader, RejectsWrongMagic) {
  FrameHeader h = valid();
  h.magic = 0x12345678;
  std::string why;
  EXPECT_FALSE(decodes(h, &why));
  EXPECT_NE(why.find("magic"), std::string::npos);
}

TEST(FrameHeader, RejectsOtherWireVersion) {
  FrameHeader h = valid();
  h.version = kWireVersion + 1;
  std::string why;
  EXPECT_FALSE(decodes(h, &why));
  EXPECT_NE(why.find("version"), std::string::npos);
}

TEST(FrameHeader, RejectsUnknownType) {
  FrameHeader h = valid();
  h.type = static_cast<FrameType>(77);
  EXPECT_FALSE(decodes(h));
}

TEST(FrameHeader, RejectsMessageLengthsOutsideTheLimit) {
  FrameHeader h = valid();
  h.message_len = 0;
  EXPECT_FALSE(decodes(h));
  h.message_len = kMaxMessageBytes + 8;
  EXPECT_FALSE(decodes(h));
  h.message_len = 12;  // not a whole number of words
  EXPECT_FALSE(decodes(h));
  h.message_len = kMaxMessageBytes;
  EXPECT_TRUE(decodes(h));
}

TEST(FrameHeader, RejectsBulkLargerThanTheLimit) {
  FrameHeader h = valid();
  h.bulk_len = kMaxBulkBytes;
  EXPECT_TRUE(decodes(h));
  h.bulk_len = kMaxBulkBytes + 1;
  std::string why;
  EXPECT_FALSE(decodes(h, &why));
  EXPECT_NE(why.find("bulk"), std::string::npos);
}

TEST(FrameHeader, RejectsUnknownFlags) {
  FrameHeader h = valid();
  h.flags = 0x80;
  EXPECT_FALSE(decodes(h));
}

}  // namespace
}  // namespace rgpu::protocol
