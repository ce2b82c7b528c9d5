// A span the pool sends (client/servers.h) is untrusted: checked before any
// part is opened.
#include "client/servers.h"

#include <gtest/gtest.h>

namespace rgpu::client {
namespace {

TEST(ServerSet, ASpanPastTheProgramDeviceLimitOrWithEmptyPartsIsRefused) {
  EXPECT_TRUE(ServerSet::checkSpan({{"a", "h:1", 2}, {"b", "h:2", 62}}, "h:1"));  // 64: the limit
  Status over = ServerSet::checkSpan({{"a", "h:1", 2}, {"b", "h:2", 63}}, "h:1");
  EXPECT_EQ(over.code(), err::kDevicesUnavailable);
  EXPECT_NE(over.message().find("65 devices: more than 64"), std::string::npos) << over.message();
  EXPECT_FALSE(ServerSet::checkSpan({{"a", "h:1", 1}, {"b", "h:2", 0xffffffffu}}, "h:1"));  // no wrap-around
  EXPECT_FALSE(ServerSet::checkSpan(std::vector<SpanPart>(65, SpanPart{"a", "h:1", 1}), "h:1"));
  Status empty = ServerSet::checkSpan({{"a", "h:1", 1}, {"b", "h:2", 0}}, "h:1");
  EXPECT_NE(empty.message().find("malformed span part for member 'b'"), std::string::npos) << empty.message();
  EXPECT_FALSE(ServerSet::checkSpan({{"a", "", 1}}, "h:1"));
}

}  // namespace
}  // namespace rgpu::client
