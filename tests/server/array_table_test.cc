#include "server/backend/array_table.h"

#include <gtest/gtest.h>

namespace rgpu::server {
namespace {

ArrayTable::Object on(int device) {
  ArrayTable::Object o;
  o.device = device;
  o.texture.device = device;
  return o;
}

// A driver may give each device's context its own object values: the same
// value on two devices names two objects, each destroyed by naming its device.
TEST(ArrayTable, TwoDevicesObjectsMayHaveTheSameValue) {
  ArrayTable t;
  ASSERT_TRUE(t.addObject(ArrayTable::kTexture, 1, on(0)));
  ASSERT_TRUE(t.addObject(ArrayTable::kTexture, 1, on(1)));
  ASSERT_TRUE(t.addObject(ArrayTable::kSurface, 1, on(1)));  // surfaces are a table of their own
  Status twice = t.addObject(ArrayTable::kTexture, 1, on(0));
  EXPECT_FALSE(twice);
  EXPECT_NE(twice.message().find("texture object 1 of device 0 is already one of this session's"), std::string::npos)
      << twice.message();
  EXPECT_EQ(t.objects(ArrayTable::kTexture).size(), 2u);

  auto gone = t.removeObject(ArrayTable::kTexture, 1, 1);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->device, 1);
  Status again = t.removeObject(ArrayTable::kTexture, 1, 1).status();
  EXPECT_FALSE(again);
  EXPECT_NE(again.message().find("texture object 1 of device 1 is not one of this session's"), std::string::npos)
      << again.message();
  EXPECT_FALSE(t.removeObject(ArrayTable::kTexture, 2, 1));  // a device that never had it
  ASSERT_EQ(t.objects(ArrayTable::kTexture).count({1, 0}), 1u);  // device 0's is still there

  // A device reset takes that device's objects only.
  ArrayTable::Dropped d = t.dropDevice(0);
  EXPECT_EQ(d.textures, std::vector<uint64_t>{1});
  EXPECT_TRUE(d.surfaces.empty());
  EXPECT_TRUE(t.objects(ArrayTable::kTexture).empty());
  EXPECT_EQ(t.objects(ArrayTable::kSurface).size(), 1u);
}

// A checkpoint lists the objects in ascending order of their values, over all
// devices (the order a restore makes them in).
TEST(ArrayTable, ObjectsAreListedInAscendingOrderOfTheirValues) {
  ArrayTable t;
  ASSERT_TRUE(t.addObject(ArrayTable::kTexture, 7, on(0)));
  ASSERT_TRUE(t.addObject(ArrayTable::kTexture, 3, on(1)));
  ASSERT_TRUE(t.addObject(ArrayTable::kTexture, 3, on(0)));
  ASSERT_TRUE(t.addObject(ArrayTable::kTexture, 5, on(1)));
  std::vector<std::pair<uint64_t, int>> seen;
  for (auto& [key, o] : t.objects(ArrayTable::kTexture)) {
    EXPECT_EQ(key.second, o.device);
    seen.push_back(key);
  }
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, int>>{{3, 0}, {3, 1}, {5, 1}, {7, 0}}));
}

// kMaxTextureObjects and kMaxSurfaceObjects per session, over all devices.
TEST(ArrayTable, ASessionHoldsAtMostItsLimitOfObjects) {
  ArrayTable t;
  for (uint64_t i = 0; i < kMaxTextureObjects; ++i)
    ASSERT_TRUE(t.addObject(ArrayTable::kTexture, i + 1, on(static_cast<int>(i % 2))));
  Status over = t.addObject(ArrayTable::kTexture, kMaxTextureObjects + 1, on(0));
  EXPECT_FALSE(over);
  EXPECT_EQ(over.code(), err::kMemoryAllocation);
  EXPECT_NE(over.message().find("65536 texture objects, its limit"), std::string::npos) << over.message();
  EXPECT_TRUE(t.addObject(ArrayTable::kSurface, 1, on(0)));  // surfaces count apart
  ASSERT_TRUE(t.removeObject(ArrayTable::kTexture, 0, 1));  // value 1 is device 0's
  EXPECT_TRUE(t.addObject(ArrayTable::kTexture, kMaxTextureObjects + 1, on(0)));
}

}  // namespace
}  // namespace rgpu::server
