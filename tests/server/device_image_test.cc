#include "server/checkpoint/device_image.h"

#include <gtest/gtest.h>

#include <cstring>

#include "server/backend/array_table.h"
#include "server/sim/sim_backend.h"
#include "tests/server/checkpoint_test_support.h"

namespace rgpu::server {
namespace {

std::unique_ptr<SimBackend> makeSim() {
  return std::make_unique<SimBackend>(std::vector<SimDeviceConfig>{SimDeviceConfig{"a", 64 << 20, 8, 0, 4}},
                                      SimOptions{});
}

Status launchBump(Backend& b, StreamKey s, DevPtr out) {
  std::string params(8, '\0');
  std::memcpy(params.data(), &out, 8);
  LaunchConfig cfg;
  if (auto st = b.launch(s, 3, cfg, params); !st) return st;
  return syncDevice(b);
}

uint32_t u32At(DevPtr p) {
  uint32_t v;
  std::memcpy(&v, reinterpret_cast<const void*>(p), 4);
  return v;
}

struct Written {
  std::vector<uint8_t> bytes;
  DeviceImage image;
  std::vector<std::vector<uint8_t>> contents;  // of each allocation
  DevPtr counter = 0, table = 0;
  uint64_t array = 0, texture = 0, surface = 0;
  DevPtr array_base = 0;
};

// Builds state in a sim backend, writes its checkpoint, and destroys it (so
// that the next backend gets the same address window).
Written writeSample() {
  Written w;
  auto sim = makeSim();
  DeviceImage& img = w.image;
  std::vector<DevPtr> ptrs;
  for (uint64_t size : {1000ull, 5ull << 20, 513ull, 70000ull}) {
    auto p = sim->allocate(0, size);
    EXPECT_TRUE(p);
    ptrs.push_back(*p);
    img.allocations.push_back({0, *p, size});
  }
  // A hole: the restore must place what follows where it was, not next to what precedes.
  EXPECT_TRUE(sim->release(ptrs[2]));
  img.allocations.erase(img.allocations.begin() + 2);
  for (auto& a : img.allocations) {
    std::vector<uint8_t> c(a.size);
    for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i * 31 + a.size);
    std::memcpy(reinterpret_cast<void*>(a.base), c.data(), c.size());
    w.contents.push_back(std::move(c));
  }
  EXPECT_TRUE(sim->loadModule(7, 0, kCheckpointTestPtx));
  img.modules.push_back({7, 0, kCheckpointTestPtx, {}});
  EXPECT_TRUE(sim->registerFunction(3, 7, "bump"));
  EXPECT_TRUE(sim->setFunctionAttribute(3, 8, 10000));  // cudaFuncAttributeMaxDynamicSharedMemorySize
  img.functions.push_back({3, 7, "bump", {{8, 10000}}});
  EXPECT_TRUE(sim->createStream({5, 0}, 1, -1));
  img.streams.push_back({5, 0, 1, -1});
  // A 2D float array with a pattern, and a texture and a surface object on it.
  ArraySpec spec;
  spec.format = {2, 1, 32, false};
  spec.width = 32;
  spec.height = 16;
  spec.flags = kArraySurfaceLoadStore;
  auto array = sim->createArray(spec);
  EXPECT_TRUE(array);
  w.array = *array;
  auto mem = sim->arrayMemory(w.array);
  EXPECT_TRUE(mem);
  w.array_base = mem->first;
  for (uint64_t i = 0; i < mem->second; ++i) reinterpret_cast<uint8_t*>(mem->first)[i] = static_cast<uint8_t>(i * 7);
  img.arrays.push_back({w.array, spec, 0, 0});
  TextureSpec tex;
  tex.array = w.array;
  auto texture = sim->createTexture(tex);
  EXPECT_TRUE(texture);
  w.texture = *texture;
  img.textures.push_back({w.texture, tex});
  auto surface = sim->createSurface(0, w.array, 0);
  EXPECT_TRUE(surface);
  w.surface = *surface;
  img.surfaces.push_back({w.surface, 0, w.array, 0});
  EXPECT_TRUE(sim->createEvent(9, 0, 2));
  img.events.push_back({9, 0, 2, {}});
  // A timing event recorded (and complete) before the checkpoint.
  EXPECT_TRUE(sim->createEvent(10, 0, 0));
  EXPECT_TRUE(sim->recordEvent(10, {5, 0}));
  EXPECT_TRUE(syncDevice(*sim));
  img.events.push_back({10, 0, 0, {}});
  // The kernel ran once: counter 6, written to the first allocation too.
  EXPECT_TRUE(launchBump(*sim, {5, 0}, ptrs[0]));
  w.contents[0][0] = 6, w.contents[0][1] = w.contents[0][2] = w.contents[0][3] = 0;
  auto counter = sim->globalAddress(7, "counter", 0);
  auto table = sim->globalAddress(7, "table", 0);
  EXPECT_TRUE(counter && table);
  w.counter = counter->addr;
  w.table = table->addr;
  EXPECT_EQ(u32At(w.counter), 6u);
  std::memset(reinterpret_cast<void*>(w.table), 0x77, 64);

  auto writer = CheckpointWriter::start(testKey(), [&](const uint8_t* d, size_t n) {
    w.bytes.insert(w.bytes.end(), d, d + n);
    return Status::ok();
  });
  EXPECT_TRUE(writer);
  Status s = writeDeviceImage(img, *sim, **writer);
  EXPECT_TRUE(s) << s.message();
  EXPECT_TRUE((*writer)->finish());
  sim->stopThreads();
  return w;
}

Result<DeviceImage> restore(Backend& b, const std::vector<uint8_t>& bytes, DeviceImageLimits limits = {}) {
  size_t pos = 0;
  auto reader = CheckpointReader::open(testKey(), [&](uint8_t* d, size_t n) -> Result<size_t> {
    size_t k = std::min(n, bytes.size() - pos);
    std::memcpy(d, bytes.data() + pos, k);
    pos += k;
    return k;
  });
  if (!reader) return reader.status();
  auto img = restoreDeviceImage(b, **reader, limits);
  if (!img) return img;
  if (auto s = (*reader)->finish(); !s) return s;
  return img;
}

TEST(DeviceImage, ASimSessionsStateComesBackAtTheSameAddressesWithItsBytes) {
  Written w = writeSample();
  auto sim = makeSim();
  auto img = restore(*sim, w.bytes);
  ASSERT_TRUE(img) << img.status().message();
  ASSERT_EQ(img->allocations.size(), 3u);
  for (size_t i = 0; i < img->allocations.size(); ++i) {
    auto& a = img->allocations[i];
    EXPECT_EQ(a.base, w.image.allocations[i].base);
    EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(a.base), w.contents[i].data(), a.size), 0) << i;
  }
  // The module's variables where they were, with the values they had (not their initial ones).
  auto counter = sim->globalAddress(7, "counter", 0);
  ASSERT_TRUE(counter);
  EXPECT_EQ(counter->addr, w.counter);
  EXPECT_EQ(u32At(w.counter), 6u);
  auto table = sim->globalAddress(7, "table", 0);
  ASSERT_TRUE(table);
  EXPECT_EQ(table->addr, w.table);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(w.table)[63], 0x77);
  // The kernel, its attribute, the stream and the event work as before.
  auto attrs = sim->functionAttributes(3);
  ASSERT_TRUE(attrs);
  EXPECT_EQ(attrs->max_dynamic_shared, 10000);
  ASSERT_TRUE(launchBump(*sim, {5, 0}, w.image.allocations[1].base));
  EXPECT_EQ(u32At(w.counter), 7u);
  EXPECT_EQ(u32At(w.image.allocations[1].base), 7u);
  auto done = sim->eventDone(9);
  ASSERT_TRUE(done);
  EXPECT_TRUE(*done);
  EXPECT_TRUE(sim->recordEvent(9, {5, 0}));
  // The recorded event times against one recorded after the restore.
  ASSERT_TRUE(sim->createEvent(11, 0, 0));
  ASSERT_TRUE(sim->recordEvent(11, {5, 0}));
  ASSERT_TRUE(syncDevice(*sim));
  auto ms = sim->elapsedMs(10, 11);
  ASSERT_TRUE(ms) << ms.status().message();
  EXPECT_GT(*ms, 0.f);
  EXPECT_LT(*ms, 60000.f);
  // The array at its address with its bytes, its objects under their handles.
  auto mem = sim->arrayMemory(w.array);
  ASSERT_TRUE(mem);
  EXPECT_EQ(mem->first, w.array_base);
  for (uint64_t i = 0; i < mem->second; ++i)
    ASSERT_EQ(reinterpret_cast<const uint8_t*>(mem->first)[i], static_cast<uint8_t>(i * 7)) << i;
  EXPECT_FALSE(sim->createTextureAt(w.texture, TextureSpec{})) << "the handle is taken";
  EXPECT_FALSE(sim->createSurfaceAt(w.surface, 0, w.array, 0)) << "the handle is taken";
  EXPECT_TRUE(sim->destroyTexture(0, w.texture));
  EXPECT_TRUE(sim->destroySurface(0, w.surface));
  auto next = sim->createArray(ArraySpec{});
  ASSERT_TRUE(next);
  EXPECT_GT(*next, std::max({w.array, w.texture, w.surface})) << "new handles follow the restored ones";
  // New memory never lands on restored memory.
  auto fresh = sim->allocate(0, 1 << 20);
  ASSERT_TRUE(fresh);
  for (auto& a : img->allocations) EXPECT_TRUE(*fresh >= a.base + a.size || *fresh + (1 << 20) <= a.base);
  sim->stopThreads();
}

TEST(DeviceImage, ARestoreWhereTheMemoryIsTakenFailsNamingTheRange) {
  Written w = writeSample();
  auto sim = makeSim();
  // Whatever the backend hands out first sits where the first allocation was.
  auto taken = sim->allocate(0, 4096);
  ASSERT_TRUE(taken);
  auto img = restore(*sim, w.bytes);
  ASSERT_FALSE(img);
  EXPECT_EQ(img.status().code(), err::kMemoryAllocation);
  EXPECT_NE(img.status().message().find("is taken"), std::string::npos) << img.status().message();
  sim->stopThreads();
}

TEST(DeviceImage, ARestoreRefusesCountsPastItsLimitsBeforeAllocating) {
  Written w = writeSample();
  auto sim = makeSim();
  DeviceImageLimits limits;
  limits.max_allocations = 2;
  auto img = restore(*sim, w.bytes, limits);
  ASSERT_FALSE(img);
  EXPECT_NE(img.status().message().find("3 allocations, past the limit of 2"), std::string::npos)
      << img.status().message();
  uint64_t free = 0, total = 0;
  ASSERT_TRUE(sim->memInfo(0, free, total));
  EXPECT_EQ(free, total);
  sim->stopThreads();
}

TEST(DeviceImage, ARestoreIntoFewerDevicesIsRefused) {
  Written w;
  {
    SimBackend two({SimDeviceConfig{"a", 64 << 20, 8, 0, 4}, SimDeviceConfig{"b", 64 << 20, 8, 0, 4}}, {});
    auto p = two.allocate(1, 4096);
    ASSERT_TRUE(p);
    w.image.allocations.push_back({1, *p, 4096});
    auto writer = CheckpointWriter::start(testKey(), [&](const uint8_t* d, size_t n) {
      w.bytes.insert(w.bytes.end(), d, d + n);
      return Status::ok();
    });
    ASSERT_TRUE(writer);
    ASSERT_TRUE(writeDeviceImage(w.image, two, **writer));
    ASSERT_TRUE((*writer)->finish());
    two.stopThreads();
  }
  auto one = makeSim();
  auto img = restore(*one, w.bytes);
  ASSERT_FALSE(img);
  EXPECT_EQ(img.status().code(), err::kInvalidDevice);
  one->stopThreads();
}

}  // namespace
}  // namespace rgpu::server

namespace rgpu::server {
namespace {

// A checkpoint's array and texture formats pass the check a program's
// channel descriptor passes, and nothing else does.
TEST(DeviceImage, AFormatFromACheckpointIsOneAChannelDescriptorMakes) {
  int valid = 0;
  for (int kind = 0; kind <= 16; ++kind)
    for (int bits : {8, 16, 32})
      for (int channels : {1, 2, 4}) {
        const int y = channels > 1 ? bits : 0, zw = channels > 2 ? bits : 0;
        auto f = checkFormat(bits, y, zw, zw, kind);
        if (!f) continue;
        ++valid;
        EXPECT_TRUE(checkFormat(*f)) << kind << " " << bits << " " << channels;
      }
  EXPECT_EQ(valid, 3 * 3 * 2 + 2 * 3 + 12);  // signed and unsigned, float (16, 32 bits), the normalised kinds
  EXPECT_FALSE(checkFormat(ArrayFormat{2, 1, 32, true}));   // a normalised float
  EXPECT_FALSE(checkFormat(ArrayFormat{1, 1, 32, true}));   // normalised 32-bit
  EXPECT_FALSE(checkFormat(ArrayFormat{1, 3, 8, false}));   // three channels
  EXPECT_FALSE(checkFormat(ArrayFormat{2, 1, 8, false}));   // an 8-bit float
  EXPECT_FALSE(checkFormat(ArrayFormat{7, 1, 32, false}));  // no such kind
  EXPECT_FALSE(checkFormat(ArrayFormat{0, 0, 32, false}));  // no channels
}

}  // namespace
}  // namespace rgpu::server

namespace rgpu::server {
namespace {

CheckpointReader::Source sourceOf(const std::vector<uint8_t>& bytes, size_t& pos) {
  return [&bytes, &pos](uint8_t* d, size_t n) -> Result<size_t> {
    size_t k = std::min(n, bytes.size() - pos);
    std::memcpy(d, bytes.data() + pos, k);
    pos += k;
    return k;
  };
}

CheckpointWriter::Sink sinkInto(std::vector<uint8_t>& bytes) {
  return [&bytes](const uint8_t* d, size_t n) {
    bytes.insert(bytes.end(), d, d + n);
    return Status::ok();
  };
}

void fillPattern(DevPtr p, uint64_t size, uint8_t seed) {
  for (uint64_t i = 0; i < size; ++i) reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(i * 13 + seed);
}

TEST(DeviceImage, APreCopyIsPlacedFirstAndTheImageSendsOnlyTheSlicesThatChanged) {
  std::vector<uint8_t> base_bytes, image_bytes;
  DevPtr a = 0, b = 0, c = 0;
  const uint64_t a_size = 1 << 20, b_size = 2 << 20, c_size = 300 << 10;
  std::vector<uint8_t> b_final, c_final;
  {
    auto sim = makeSim();
    a = *sim->allocate(0, a_size);
    b = *sim->allocate(0, b_size);
    fillPattern(a, a_size, 1);
    fillPattern(b, b_size, 2);
    auto w = CheckpointWriter::start(testKey(), sinkInto(base_bytes));
    ASSERT_TRUE(w);
    auto base = writePrecopyBase(*sim, 0, {{0, a, a_size}, {0, b, b_size}}, **w);
    ASSERT_TRUE(base) << base.status().message();
    ASSERT_TRUE((*w)->finish());
    EXPECT_EQ(base->bytes, a_size + b_size);
    // The program goes on: a byte of b's second slice changes, a is freed,
    // and c is allocated (where a was, likely).
    reinterpret_cast<uint8_t*>(b)[kDeviceImageSliceBytes + 5] ^= 0xff;
    ASSERT_TRUE(sim->release(a));
    c = *sim->allocate(0, c_size);
    fillPattern(c, c_size, 3);
    b_final.assign(reinterpret_cast<uint8_t*>(b), reinterpret_cast<uint8_t*>(b) + b_size);
    c_final.assign(reinterpret_cast<uint8_t*>(c), reinterpret_cast<uint8_t*>(c) + c_size);
    DeviceImage img;
    for (auto [p, size] : std::map<DevPtr, uint64_t>{{b, b_size}, {c, c_size}}) img.allocations.push_back({0, p, size});
    auto w2 = CheckpointWriter::start(testKey(), sinkInto(image_bytes));
    ASSERT_TRUE(w2);
    uint64_t unchanged = 0;
    ASSERT_TRUE(writeDeviceImage(img, *sim, **w2, &*base, &unchanged));
    ASSERT_TRUE((*w2)->finish());
    // Every slice of b but the one that changed; nothing of c, which the base does not hold.
    EXPECT_EQ(unchanged, b_size - kDeviceImageSliceBytes);
    sim->stopThreads();
  }
  auto sim = makeSim();
  size_t pos = 0;
  auto base_reader = CheckpointReader::open(testKey(), sourceOf(base_bytes, pos));
  ASSERT_TRUE(base_reader);
  auto span = readPrecopySpan(**base_reader);
  ASSERT_TRUE(span);
  EXPECT_EQ(*span, 0u);
  auto placed = restorePrecopyBase(*sim, **base_reader, {});
  ASSERT_TRUE(placed) << placed.status().message();
  ASSERT_EQ(placed->size(), 2u);
  size_t pos2 = 0;
  auto reader = CheckpointReader::open(testKey(), sourceOf(image_bytes, pos2));
  ASSERT_TRUE(reader);
  auto img = restoreDeviceImage(*sim, **reader, {}, &*placed);
  ASSERT_TRUE(img) << img.status().message();
  ASSERT_TRUE((*reader)->finish());
  EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(b), b_final.data(), b_size), 0);
  EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(c), c_final.data(), c_size), 0);
  sim->stopThreads();
  sim.reset();  // (its address window is the next backend's)
  // Without the base placed first, the image is refused: it lacks the bytes it did not send.
  auto bare = makeSim();
  auto refused = restore(*bare, image_bytes);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("unchanged since a pre-copy this restore did not have"), std::string::npos)
      << refused.status().message();
  bare->stopThreads();
}

}  // namespace
}  // namespace rgpu::server
