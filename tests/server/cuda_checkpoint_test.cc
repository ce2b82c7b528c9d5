// Checkpoints of the CUDA backend (server/cuda/cuda_checkpoint.cc) against
// the fake driver, whose virtual memory calls map real memory at the
// addresses asked: a session's state written from one backend, the backend
// destroyed, and the state rebuilt in a fresh one at the same addresses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "server/backend/array_table.h"
#include "server/checkpoint/device_image.h"
#include "server/cuda/cuda_backend.h"
#include "tests/server/checkpoint_test_support.h"
#include "tests/server/fake_cuda_hooks.h"

namespace rgpu::server::cuda {
namespace {

constexpr uint64_t G = 2ull << 20;  // the fake's granularity

std::unique_ptr<CudaBackend> backend(bool fixed = true) {
  CudaOptions o;
  o.driver_library = RGPU_FAKE_CUDA_LIB;
  o.fixed_addresses = fixed;
  auto b = CudaBackend::create(o);
  EXPECT_TRUE(b) << b.status().message();
  return b ? std::move(*b) : nullptr;
}

std::vector<uint8_t> bytesAt(DevPtr p, uint64_t n) {
  auto* b = reinterpret_cast<const uint8_t*>(p);  // the fake's device memory is this process's
  return {b, b + n};
}

using Sink = std::vector<uint8_t>;
std::unique_ptr<CheckpointWriter> writerTo(Sink& out) {
  auto w = CheckpointWriter::start(testKey(), [&out](const uint8_t* d, size_t n) {
    out.insert(out.end(), d, d + n);
    return Status::ok();
  });
  EXPECT_TRUE(w);
  return w ? std::move(*w) : nullptr;
}
std::unique_ptr<CheckpointReader> readerOf(const Sink& in, size_t& pos) {
  auto r = CheckpointReader::open(testKey(), [&in, &pos](uint8_t* d, size_t n) -> Result<size_t> {
    size_t k = std::min(n, in.size() - pos);
    std::memcpy(d, in.data() + pos, k);
    pos += k;
    return k;
  });
  EXPECT_TRUE(r);
  return r ? std::move(*r) : nullptr;
}

// The device image in `file`, restored into `b` (read to its end when it succeeds).
Result<DeviceImage> restoreFrom(Backend& b, const Sink& file) {
  size_t pos = 0;
  auto r = readerOf(file, pos);
  if (!r) return Status(err::kInvalidValue, "no reader");
  auto got = restoreDeviceImage(b, *r, DeviceImageLimits{});
  if (got) RGPU_TRY(r->finish());
  return got;
}

TEST(CudaCheckpoint, ASessionsStateComesBackAtTheSameAddressesInAFreshBackendAfterAPreCopy) {
  DeviceImage img;
  std::vector<std::vector<uint8_t>> contents;
  DevPtr counter = 0;
  Sink base_file, image_file;
  uint64_t unchanged = 0;
  int64_t recorded_ns = 0;
  {
    auto b = backend();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->notCheckpointable(), "");
    std::vector<DevPtr> ptrs;
    for (uint64_t size : {1000ull, 5ull << 20, 513ull, 70000ull}) {
      auto p = b->allocate(0, size);
      ASSERT_TRUE(p) << p.status().message();
      ptrs.push_back(*p);
      img.allocations.push_back({0, *p, size});
    }
    ASSERT_TRUE(b->release(ptrs[2]));  // a hole the restore must keep
    img.allocations.erase(img.allocations.begin() + 2);
    ASSERT_TRUE(syncDevice(*b));  // the scrubs ran
    for (auto& a : img.allocations) {
      std::vector<uint8_t> c(a.size);
      for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i * 31 + a.size);
      std::memcpy(reinterpret_cast<void*>(a.base), c.data(), c.size());
      contents.push_back(std::move(c));
    }
    ASSERT_TRUE(b->loadModule(7, 0, kCheckpointTestPtx));
    img.modules.push_back({7, 0, kCheckpointTestPtx, {}});
    ASSERT_TRUE(b->registerFunction(3, 7, "bump"));
    img.functions.push_back({3, 7, "bump", {}});
    ASSERT_TRUE(b->createStream({5, 0}, 1, -1));
    img.streams.push_back({5, 0, 1, -1});
    ASSERT_TRUE(b->createEvent(9, 0, 2));  // never recorded, timing off
    img.events.push_back({9, 0, 2, {}});
    ASSERT_TRUE(b->createEvent(10, 0, 0));
    ASSERT_TRUE(b->recordEvent(10, {5, 0}));
    img.events.push_back({10, 0, 0, {}});
    ASSERT_TRUE(b->setMallocHeap(0, 32 << 20));
    // The pre-copy, while nothing is drained yet.
    std::vector<PrecopyRange> ranges;
    for (auto& a : img.allocations) ranges.push_back({a.device, a.base, a.size});
    auto bw = writerTo(base_file);
    auto base = writePrecopyBase(*b, 0, ranges, *bw);
    ASSERT_TRUE(base) << base.status().message();
    ASSERT_TRUE(bw->finish());
    // Then the kernel runs (counter 6, written to the first allocation) and
    // one slice of the big allocation changes.
    std::string params(8, '\0');
    std::memcpy(params.data(), &ptrs[0], 8);
    ASSERT_TRUE(b->launch({5, 0}, 3, LaunchConfig{}, params));
    ASSERT_TRUE(syncDevice(*b));
    recorded_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count();
    contents[0][0] = 6, contents[0][1] = contents[0][2] = contents[0][3] = 0;
    contents[1][3 << 20] ^= 0xff;
    reinterpret_cast<uint8_t*>(ptrs[1])[3 << 20] ^= 0xff;
    auto c = b->globalAddress(7, "counter", 0);
    ASSERT_TRUE(c);
    counter = c->addr;
    EXPECT_EQ(bytesAt(counter, 4), (std::vector<uint8_t>{6, 0, 0, 0}));
    auto iw = writerTo(image_file);
    Status s = writeDeviceImage(img, *b, *iw, &*base, &unchanged);
    ASSERT_TRUE(s) << s.message();
    ASSERT_TRUE(iw->finish());
    b->stopThreads();
  }
  // Two slices changed (the first allocation's and one of the big one's); the rest was not sent again.
  const uint64_t total = 1000 + (5 << 20) + 70000;
  EXPECT_EQ(unchanged, total - 1000 - kDeviceImageSliceBytes);
  usleep(200 * 1000);  // the move's pause: the event completed this long before the new worker records it

  hooks().clear();
  auto b = backend();
  ASSERT_TRUE(b);
  size_t pos = 0;
  auto br = readerOf(base_file, pos);
  ASSERT_TRUE(readPrecopySpan(*br));
  auto placed = restorePrecopyBase(*b, *br, DeviceImageLimits{});
  ASSERT_TRUE(placed) << placed.status().message();  // (it read the base to its end)
  pos = 0;
  auto ir = readerOf(image_file, pos);
  auto got = restoreDeviceImage(*b, *ir, DeviceImageLimits{}, &*placed);
  ASSERT_TRUE(got) << got.status().message();
  ASSERT_TRUE(ir->finish());
  ASSERT_TRUE(syncDevice(*b));
  for (size_t i = 0; i < img.allocations.size(); ++i)
    EXPECT_EQ(bytesAt(img.allocations[i].base, img.allocations[i].size), contents[i]) << i;
  // The variable where the program knows it, with its value (not its initial 5).
  auto c = b->globalAddress(7, "counter", 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->addr, counter);
  EXPECT_EQ(bytesAt(counter, 4), (std::vector<uint8_t>{6, 0, 0, 0}));
  // The kernel runs again on the restored stream.
  std::string params(8, '\0');
  std::memcpy(params.data(), &img.allocations[0].base, 8);
  ASSERT_TRUE(b->launch({5, 0}, 3, LaunchConfig{}, params));
  ASSERT_TRUE(syncDevice(*b));
  EXPECT_EQ(bytesAt(counter, 4), (std::vector<uint8_t>{7, 0, 0, 0}));
  // An event recorded now is timed from when event 10 completed before the
  // move, not from when the new backend recorded it.
  ASSERT_TRUE(b->createEvent(11, 0, 0));
  ASSERT_TRUE(b->recordEvent(11, {5, 0}));
  ASSERT_TRUE(syncDevice(*b));
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch()).count();
  auto ms = b->elapsedMs(10, 11);
  ASSERT_TRUE(ms) << ms.status().message();
  EXPECT_GE(*ms, 200.f);
  // Never more than the host saw pass, but for how late a loaded host notices
  // an event's completion (56 ms once beside the rest of the suite on 2
  // cores): 150 ms still catches the 200 ms pause counted twice.
  EXPECT_LE(*ms, static_cast<float>(now_ns - recorded_ns) / 1e6f + 150.f);
  auto heaps = b->mallocHeaps();
  ASSERT_TRUE(heaps);
  ASSERT_EQ(heaps->size(), 1u);
  EXPECT_EQ((*heaps)[0].limit, 32u << 20);
  const std::string log = hooks().log();
  EXPECT_NE(log.find("at the address asked"), std::string::npos) << log;
  EXPECT_EQ(log.find(" elsewhere"), std::string::npos) << log;
  EXPECT_EQ(log.find("\ncuMemAlloc "), std::string::npos) << "no session memory from cuMemAlloc: " << log;
  b->stopThreads();
}

// The driver places module variables; where it puts one elsewhere in the
// new worker than the program knows, the restore fails (the move is called off).
TEST(CudaCheckpoint, AModuleVariableTheDriverPutsElsewhereCallsTheRestoreOff) {
  Sink file;
  {
    auto b = backend();
    ASSERT_TRUE(b);
    ASSERT_TRUE(b->loadModule(7, 0, kCheckpointTestPtx));
    DeviceImage img;
    img.modules.push_back({7, 0, kCheckpointTestPtx, {}});
    auto w = writerTo(file);
    ASSERT_TRUE(writeDeviceImage(img, *b, *w));
    ASSERT_TRUE(w->finish());
    b->stopThreads();
  }
  auto b = backend();
  ASSERT_TRUE(b);
  // Something of the driver's own first (the fake keeps arrays where it keeps module variables).
  ArraySpec spec;
  spec.format = {2, 1, 32, false};
  spec.width = 256;
  ASSERT_TRUE(b->createArray(spec));
  auto got = restoreFrom(*b, file);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.status().code(), err::kNotSupported);
  EXPECT_NE(got.status().message().find("module 7's variable "), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("the CUDA driver places module variables"), std::string::npos);
  EXPECT_FALSE(b->globalAddress(7, "counter", 0)) << "the module is unloaded again";
  b->stopThreads();
}

// The driver places arrays and module variables in memory of its own, each
// after what it made before: the restore makes them in the old order.
TEST(CudaCheckpoint, ModulesAndArraysAreMadeAgainInTheOrderTheDriverPlacedThem) {
  Sink file;
  DevPtr counter = 0;
  {
    auto b = backend();
    ASSERT_TRUE(b);
    ArraySpec spec;
    spec.format = {2, 1, 32, false};
    spec.width = 4096;
    auto a = b->createArray(spec);  // first: the module's variables lie after it
    ASSERT_TRUE(a);
    ASSERT_TRUE(b->loadModule(7, 0, kCheckpointTestPtx));
    auto c = b->globalAddress(7, "counter", 0);
    ASSERT_TRUE(c);
    counter = c->addr;
    DeviceImage img;
    img.modules.push_back({7, 0, kCheckpointTestPtx, {}});
    img.arrays.push_back({*a, spec, 0, 0});
    auto w = writerTo(file);
    ASSERT_TRUE(writeDeviceImage(img, *b, *w));
    ASSERT_TRUE(w->finish());
    ASSERT_TRUE(b->destroyArray(*a));  // as the old worker's end would (the fake driver outlives it here)
    b->stopThreads();
  }
  auto b = backend();
  ASSERT_TRUE(b);
  auto got = restoreFrom(*b, file);
  ASSERT_TRUE(got) << got.status().message();
  auto c = b->globalAddress(7, "counter", 0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->addr, counter);
  b->stopThreads();
}

TEST(CudaCheckpoint, MemoryIsPlacedOnlyWhereAnAllocationOfItsSizeCouldHaveBeen) {
  auto b = backend();
  ASSERT_TRUE(b);
  auto p = b->allocate(0, 4096);
  auto big = b->allocate(0, 3 << 20);
  ASSERT_TRUE(p && big);
  const DevPtr chunk = *p / G * G;
  ASSERT_TRUE(b->release(*p));  // its chunk stays, empty (the spare)
  ASSERT_TRUE(b->release(*big));
  // A big allocation G-aligned only, and over an empty chunk (which goes).
  EXPECT_EQ(b->allocateAt(0, chunk + 512, 3 << 20).code(), err::kMemoryAllocation);
  ASSERT_TRUE(b->allocateAt(0, chunk, 3 << 20));
  // Small ones in the chunk below them, 512-aligned, not over another.
  EXPECT_EQ(b->allocateAt(0, chunk + 512, 1000).code(), err::kMemoryAllocation);  // in the big one
  const DevPtr other = chunk + 8 * G;
  ASSERT_TRUE(b->allocateAt(0, other + 1024, 1000));
  EXPECT_EQ(b->allocateAt(0, other + 1536, 100).code(), err::kMemoryAllocation);  // overlaps it
  EXPECT_EQ(b->allocateAt(0, other + 2100, 100).code(), err::kMemoryAllocation);  // misaligned
  ASSERT_TRUE(b->allocateAt(0, other + 2048, 100));
  // Outside the window.
  EXPECT_EQ(b->allocateAt(0, 0x1000, 100).code(), err::kMemoryAllocation);
  // They are allocations like any other.
  ASSERT_TRUE(b->fill({0, 0}, other + 1024, 0x42, 1000));
  ASSERT_TRUE(syncDevice(*b));
  EXPECT_EQ(bytesAt(other + 1024, 1000), std::vector<uint8_t>(1000, 0x42));
  for (DevPtr q : {chunk, other + 1024, other + 2048}) EXPECT_TRUE(b->release(q));
  b->stopThreads();
}

// Kernels that read a 2D float texture and write a 2D float surface.
constexpr char kObjectsPtx[] = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .entry sample(.param .u64 t, .param .u64 out, .param .f32 x, .param .f32 y) {
  .reg .f32 %f<7>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [t];
  ld.param.u64 %rd2, [out];
  ld.param.f32 %f1, [x];
  ld.param.f32 %f2, [y];
  cvta.to.global.u64 %rd3, %rd2;
  tex.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f1, %f2}];
  st.global.f32 [%rd3], %f3;
  ret;
}
.visible .entry put(.param .u64 s, .param .u32 x, .param .u32 y, .param .f32 v) {
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [s];
  ld.param.u32 %r1, [x];
  ld.param.u32 %r2, [y];
  ld.param.u32 %r3, [v];
  sust.b.2d.b32.trap [%rd1, {%r1, %r2}], {%r3};
  ret;
}
)";

template <typename... T>
std::string packed(T... v) {
  std::string out;
  ((out.append(reinterpret_cast<const char*>(&v), sizeof(v))), ...);
  return out;
}

// A level's bytes through the session's copies (host to array, array to host).
Status putLevel(Backend& b, uint64_t array, uint32_t level, const ArrayLevelDims& d, uint32_t elem,
                const std::vector<uint8_t>& bytes) {
  Copy3DSpec c;
  c.dst = {CopySide::kArray, array, level};
  c.width = d.width * elem, c.height = d.height, c.depth = d.slices;
  RGPU_TRY(b.copy3D({0, 0}, c, std::make_shared<std::vector<uint8_t>>(bytes), nullptr));
  return syncDevice(b);
}
std::vector<uint8_t> getLevel(Backend& b, uint64_t array, uint32_t level, const ArrayLevelDims& d, uint32_t elem) {
  Copy3DSpec c;
  c.src = {CopySide::kArray, array, level};
  c.width = d.width * elem, c.height = d.height, c.depth = d.slices;
  std::vector<uint8_t> out;
  Status s = b.copy3D({0, 0}, c, nullptr, [&](Status st, const uint8_t* data, uint64_t size, const OnWire& on_wire) {
    if (st) out.assign(data, data + size);
    if (on_wire) on_wire();
  });
  EXPECT_TRUE(s) << s.message();
  EXPECT_TRUE(syncDevice(b));
  return out;
}

// CUDA arrays are the driver's: each comes back under its handle with its
// bytes (every level, packed, in pieces that cross rows and slices), and
// the texture and surface objects under the handles the program holds --
// the driver hands them out again when they are made in ascending order,
// with placeholders for the handles the program destroyed.
TEST(CudaCheckpoint, ArraysComeBackWithTheirBytesAndTheirObjectsUnderTheProgramsHandles) {
  struct Made {
    ArraySpec spec;
    uint64_t handle = 0;
    std::vector<std::vector<uint8_t>> levels;
  };
  auto spec = [](ArrayFormat f, uint64_t w, uint64_t h, uint64_t d, uint32_t flags, uint32_t levels) {
    ArraySpec s;
    s.format = f;
    s.width = w, s.height = h, s.depth = d, s.flags = flags, s.levels = levels;
    return s;
  };
  const ArrayFormat f32{2, 1, 32, false}, u8x2{1, 2, 8, false};
  std::vector<Made> made(4);
  made[0].spec = spec(f32, 37, 23, 0, kArraySurfaceLoadStore, 0);  // 2D, with a surface
  made[1].spec = spec(u8x2, 300, 200, 7, 0, 0);  // 3D, 840,000 bytes: slices of 256 KiB end mid-row
  made[2].spec = spec(f32, 64, 48, 0, 0, 4);     // mipmapped
  made[3].spec = spec(f32, 16, 16, 12, kArrayCubemap | kArrayLayered, 0);  // two cubes
  DeviceImage img;
  Sink file;
  DevPtr out = 0;
  std::vector<uint64_t> tex;
  uint64_t surf = 0;
  hooks().drop_objects();  // (other tests of this process made some)
  {
    auto b = backend();
    ASSERT_TRUE(b);
    uint8_t seed = 1;
    for (Made& m : made) {
      auto h = b->createArray(m.spec);
      ASSERT_TRUE(h) << h.status().message();
      m.handle = *h;
      const auto dims = arrayLevels(m.spec);
      for (uint32_t l = 0; l < dims.size(); ++l) {
        std::vector<uint8_t> bytes(dims[l].width * m.spec.format.bytes() * dims[l].height * dims[l].slices);
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 251 + seed);
        ++seed;
        ASSERT_TRUE(putLevel(*b, m.handle, l, dims[l], m.spec.format.bytes(), bytes));
        m.levels.push_back(std::move(bytes));
      }
      img.arrays.push_back({m.handle, m.spec, 0, 0});
    }
    EXPECT_EQ(b->notCheckpointable(), "");
    // Five texture objects, two destroyed, then a surface object (the driver
    // gives it the lowest free handle, the second texture's).
    TextureSpec on_a;
    on_a.array = made[0].handle;
    TextureSpec level2 = on_a;
    level2.array = made[2].handle, level2.level = 2;
    TextureSpec mip = level2;
    mip.resource = TextureSpec::kMipmapped, mip.level = 0;
    for (const TextureSpec* t : {&on_a, &on_a, &level2, &on_a, &mip}) {
      auto h = b->createTexture(*t);
      ASSERT_TRUE(h) << h.status().message();
      tex.push_back(*h);
    }
    ASSERT_TRUE(b->destroyTexture(0, tex[1]));
    ASSERT_TRUE(b->destroyTexture(0, tex[3]));
    auto s = b->createSurface(0, made[0].handle, 0);
    ASSERT_TRUE(s);
    surf = *s;
    EXPECT_EQ(surf, tex[1]) << "the fake hands out the lowest free handle";
    img.textures = {{tex[0], on_a}, {tex[2], level2}, {tex[4], mip}};
    img.surfaces = {{surf, 0, made[0].handle, 0}};
    auto w = writerTo(file);
    Status st = writeDeviceImage(img, *b, *w);
    ASSERT_TRUE(st) << st.message();
    ASSERT_TRUE(w->finish());
    b->stopThreads();
  }
  hooks().clear();
  hooks().drop_objects();  // the new worker is a new process
  auto b = backend();
  ASSERT_TRUE(b);
  auto got = restoreFrom(*b, file);
  ASSERT_TRUE(got) << got.status().message();
  for (const Made& m : made) {
    const auto dims = arrayLevels(m.spec);
    for (uint32_t l = 0; l < dims.size(); ++l)
      EXPECT_EQ(getLevel(*b, m.handle, l, dims[l], m.spec.format.bytes()), m.levels[l]) << m.handle << " level " << l;
  }
  // The objects work under the program's handles.
  ASSERT_TRUE(b->loadModule(1, 0, kObjectsPtx));
  ASSERT_TRUE(b->registerFunction(1, 1, "sample"));
  ASSERT_TRUE(b->registerFunction(2, 1, "put"));
  auto p = b->allocate(0, 64);
  ASSERT_TRUE(p);
  out = *p;
  auto texel = [&](uint64_t t, float x, float y) {
    EXPECT_TRUE(b->launch({0, 0}, 1, LaunchConfig{}, packed(t, out, x, y)));
    EXPECT_TRUE(syncDevice(*b));
    float v;
    std::memcpy(&v, reinterpret_cast<const void*>(out), 4);
    return v;
  };
  auto element = [](const std::vector<uint8_t>& level, uint64_t width, uint64_t x, uint64_t y) {
    float v;
    std::memcpy(&v, level.data() + (y * width + x) * 4, 4);
    return v;
  };
  EXPECT_EQ(texel(tex[0], 5.5f, 7.5f), element(made[0].levels[0], 37, 5, 7));
  EXPECT_EQ(texel(tex[2], 3.5f, 2.5f), element(made[2].levels[2], 16, 3, 2));
  ASSERT_TRUE(b->launch({0, 0}, 2, LaunchConfig{}, packed(surf, uint32_t{6 * 4}, uint32_t{4}, 42.f)));
  ASSERT_TRUE(syncDevice(*b));
  const auto a = getLevel(*b, made[0].handle, 0, arrayLevels(made[0].spec)[0], 4);
  EXPECT_EQ(element(a, 37, 6, 4), 42.f);
  // The placeholder for the destroyed fourth texture went again: a new object gets its handle.
  TextureSpec on_a;
  on_a.array = made[0].handle;
  auto again = b->createTexture(on_a);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, tex[3]);
  const std::string log = hooks().log();
  size_t creates = 0;
  for (size_t at = 0; (at = log.find("\ncuTexObjectCreate ", at)) != std::string::npos; ++at) ++creates;
  EXPECT_EQ(creates, 5u) << "3 objects, 1 placeholder, 1 made after: " << log;
  b->stopThreads();
}

// A handle the driver does not hand out again calls the restore off.
TEST(CudaCheckpoint, AnObjectHandleTheDriverDoesNotHandOutAgainCallsTheRestoreOff) {
  Sink file;
  {
    auto b = backend();
    ASSERT_TRUE(b);
    ArraySpec s;
    s.format = {2, 1, 32, false};
    s.width = 8, s.height = 8;
    auto a = b->createArray(s);
    ASSERT_TRUE(a);
    DeviceImage img;
    img.arrays.push_back({*a, s, 0, 0});
    TextureSpec t;
    t.array = *a;
    // One the driver hands out (after two placeholders), and one too far above it to reach.
    img.textures = {{3, t}, {kMaxObjectPlaceholders + 10, t}};
    auto w = writerTo(file);
    ASSERT_TRUE(writeDeviceImage(img, *b, *w));
    ASSERT_TRUE(w->finish());
    b->stopThreads();
  }
  hooks().drop_objects();  // the new worker is a new process
  auto b = backend();
  ASSERT_TRUE(b);
  auto got = restoreFrom(*b, file);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.status().code(), err::kNotSupported);
  EXPECT_NE(got.status().message().find("texture object 65546 would take more than 65536 objects to reach in the new worker"),
            std::string::npos)
      << got.status().message();
  b->stopThreads();
}

TEST(CudaCheckpoint, WhatTheDriverKeepsMakesASessionUncheckpointableAndSaysWhy) {
  {
    auto b = backend(false);
    ASSERT_TRUE(b);
    EXPECT_NE(b->notCheckpointable().find("where cuMemAlloc put it"), std::string::npos) << b->notCheckpointable();
    EXPECT_EQ(b->allocateAt(0, 0x200000000000ull, 4096).code(), err::kNotSupported);
    b->stopThreads();
  }
  auto b = backend();
  ASSERT_TRUE(b);
  // A kernel that calls malloc only through a function of its own, in a
  // module that cannot be bound to rgpu's heap (it names a symbol of rgpu's
  // allocator itself): the driver's heap serves it.
  constexpr char kMalloc[] = R"(
.version 8.0
.target sm_75
.address_size 64
.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.func (.param .b64 func_retval0) __rgpu_grab() {
  .reg .b64 %rd<3>;
  mov.u64 %rd2, 16;
  { .param .b64 param0; .param .b64 retval0; st.param.b64 [param0], %rd2;
    call.uni (retval0), malloc, (param0); ld.param.b64 %rd1, [retval0]; }
  st.param.b64 [func_retval0], %rd1;
  ret;
}
.visible .entry plain() { ret; }
.visible .entry grabs() {
  .reg .b64 %rd<2>;
  { .param .b64 retval0; call.uni (retval0), __rgpu_grab, (); ld.param.b64 %rd1, [retval0]; }
  ret;
}
)";
  ASSERT_TRUE(b->loadModule(1, 0, kMalloc));
  ASSERT_TRUE(b->registerFunction(1, 1, "plain"));
  ASSERT_TRUE(b->registerFunction(2, 1, "grabs"));
  LaunchConfig cfg;
  ASSERT_TRUE(b->launch({0, 0}, 1, cfg, ""));
  ASSERT_TRUE(syncDevice(*b));
  EXPECT_EQ(b->notCheckpointable(), "") << "a module that could call malloc, but no kernel that does ran";
  ASSERT_TRUE(b->launch({0, 0}, 2, cfg, ""));
  ASSERT_TRUE(syncDevice(*b));
  EXPECT_EQ(b->notCheckpointable(), "a kernel that may call device malloc ran, and the CUDA driver keeps the heap's blocks");
  b->stopThreads();
  hooks().drop_objects();  // (the driver's heap would stay in this process's context)
}

// Device malloc on rgpu's own heap (cuda_heap.cc): made at the first launch
// of a kernel that may call malloc, of the size the program set, in the
// address window; fixed from then on; and moved like memory -- the blocks
// kept before a checkpoint read back after the restore, and malloc after it
// hands out none of them.
constexpr char kHeapKernels[] = R"(
.version 8.0
.target sm_75
.address_size 64
.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.extern .func free(.param .b64 free_param_0);
// out[tid] = malloc(96), filled with (tag << 16 | tid) words; when `drop`,
// the odd threads free theirs again at once.
.visible .entry keep(.param .u64 out, .param .u32 tag, .param .u32 drop) {
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [tag];
  ld.param.u32 %r2, [drop];
  mov.u32 %r3, %tid.x;
  { .param .b64 param0; .param .b64 retval0; st.param.b64 [param0], 96;
    call.uni (retval0), malloc, (param0); ld.param.b64 %rd2, [retval0]; }
  mul.wide.u32 %rd3, %r3, 8;
  add.u64 %rd4, %rd1, %rd3;
  st.u64 [%rd4], %rd2;
  setp.eq.u64 %p1, %rd2, 0;
  @%p1 bra DONE;
  shl.b32 %r4, %r1, 16;
  or.b32 %r4, %r4, %r3;
  mov.u32 %r5, 0;
FILL:
  mul.wide.u32 %rd5, %r5, 4;
  add.u64 %rd6, %rd2, %rd5;
  st.u32 [%rd6], %r4;
  add.u32 %r5, %r5, 1;
  setp.lt.u32 %p2, %r5, 24;
  @%p2 bra FILL;
  setp.eq.u32 %p1, %r2, 0;
  @%p1 bra DONE;
  and.b32 %r6, %r3, 1;
  setp.eq.u32 %p1, %r6, 0;
  @%p1 bra DONE;
  { .param .b64 param0; st.param.b64 [param0], %rd2; call.uni free, (param0); }
  st.u64 [%rd4], 0;
DONE:
  ret;
}
)";

// A module that only frees (blocks another module's kernels made) is bound
// to the same heap: the blocks go back on its lists and are taken again.
TEST(CudaCheckpoint, AModuleThatOnlyFreesIsBoundToTheSameHeap) {
  constexpr char kFreeOnly[] = R"(
.version 8.0
.target sm_75
.address_size 64
.extern .func free(.param .b64 free_param_0);
.visible .entry give(.param .u64 out) {
  .reg .b32 %r<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 8;
  add.u64 %rd3, %rd1, %rd2;
  ld.u64 %rd4, [%rd3];
  { .param .b64 param0; st.param.b64 [param0], %rd4; call.uni free, (param0); }
  ret;
}
)";
  constexpr int kThreads = 64;
  auto b = backend();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->loadModule(1, 0, kHeapKernels));
  ASSERT_TRUE(b->loadModule(2, 0, kFreeOnly));
  ASSERT_TRUE(b->registerFunction(1, 1, "keep"));
  ASSERT_TRUE(b->registerFunction(2, 2, "give"));
  auto o = b->allocate(0, kThreads * 8);
  ASSERT_TRUE(o);
  LaunchConfig cfg;
  cfg.block = {kThreads, 1, 1};
  auto* slots = reinterpret_cast<const DevPtr*>(*o);
  ASSERT_TRUE(b->launch({0, 0}, 1, cfg, packed(*o, uint32_t{1}, uint32_t{0})));
  ASSERT_TRUE(syncDevice(*b));
  std::set<DevPtr> first(slots, slots + kThreads);
  ASSERT_EQ(first.size(), static_cast<size_t>(kThreads));
  ASSERT_FALSE(first.count(0));
  ASSERT_TRUE(b->launch({0, 0}, 2, cfg, packed(*o)));
  ASSERT_TRUE(b->launch({0, 0}, 1, cfg, packed(*o, uint32_t{2}, uint32_t{0})));
  ASSERT_TRUE(syncDevice(*b));
  EXPECT_EQ(std::set<DevPtr>(slots, slots + kThreads), first) << "the freed blocks were taken again";
  EXPECT_EQ(b->notCheckpointable(), "");
  b->stopThreads();
}

TEST(CudaCheckpoint, TheMallocHeapIsRgpusAndMovesWithTheSessionsBlocks) {
  constexpr int kThreads = 64;
  DeviceImage img;
  Sink image_file;
  DevPtr out = 0, heap_base = 0;
  std::vector<DevPtr> kept;
  hooks().drop_objects();  // a fresh process's driver: no heap of its own yet
  {
    auto b = backend();
    ASSERT_TRUE(b);
    ASSERT_TRUE(b->loadModule(4, 0, kHeapKernels));
    img.modules.push_back({4, 0, kHeapKernels, {}});
    ASSERT_TRUE(b->registerFunction(1, 4, "keep"));
    img.functions.push_back({1, 4, "keep", {}});
    auto o = b->allocate(0, kThreads * 8);
    ASSERT_TRUE(o);
    out = *o;
    img.allocations.push_back({0, out, kThreads * 8});
    ASSERT_TRUE(b->setMallocHeap(0, 1 << 20));
    auto none = b->mallocHeaps();
    ASSERT_TRUE(none);
    ASSERT_EQ(none->size(), 1u);
    EXPECT_EQ((*none)[0].base, 0u) << "no heap before a kernel that may call malloc ran";
    LaunchConfig cfg;
    cfg.block = {kThreads, 1, 1};
    ASSERT_TRUE(b->launch({0, 0}, 1, cfg, packed(out, uint32_t{1}, uint32_t{1})));
    ASSERT_TRUE(syncDevice(*b));
    EXPECT_EQ(b->notCheckpointable(), "") << "rgpu's heap moves";
    Status again = b->setMallocHeap(0, 2 << 20);
    EXPECT_EQ(again.code(), err::kInvalidValue) << again.message();
    auto heaps = b->mallocHeaps();
    ASSERT_TRUE(heaps);
    ASSERT_EQ(heaps->size(), 1u);
    heap_base = (*heaps)[0].base;
    EXPECT_NE(heap_base, 0u);
    EXPECT_EQ((*heaps)[0].limit, 1u << 20);
    EXPECT_TRUE((*heaps)[0].blocks.empty()) << "the allocator's state is in the heap's bytes";
    auto* slots = reinterpret_cast<const DevPtr*>(out);
    for (int t = 0; t < kThreads; ++t) {
      if (t % 2) {
        EXPECT_EQ(slots[t], 0u) << t;
        continue;
      }
      ASSERT_GE(slots[t], heap_base) << t;
      ASSERT_LT(slots[t], heap_base + (1 << 20)) << t;
      kept.push_back(slots[t]);
    }
    auto iw = writerTo(image_file);
    Status s = writeDeviceImage(img, *b, *iw, nullptr, nullptr);
    ASSERT_TRUE(s) << s.message();
    ASSERT_TRUE(iw->finish());
    b->stopThreads();
  }
  hooks().clear();
  hooks().drop_objects();  // the new worker is a new process
  auto b = backend();
  ASSERT_TRUE(b);
  auto got = restoreFrom(*b, image_file);
  ASSERT_TRUE(got) << got.status().message();
  ASSERT_TRUE(syncDevice(*b));
  auto heaps = b->mallocHeaps();
  ASSERT_TRUE(heaps);
  ASSERT_EQ(heaps->size(), 1u);
  EXPECT_EQ((*heaps)[0].base, heap_base);
  EXPECT_EQ(b->setMallocHeap(0, 2 << 20).code(), err::kInvalidValue) << "still fixed after the move";
  // The kept blocks hold what they held.
  for (size_t i = 0; i < kept.size(); ++i) {
    const uint32_t want = 1u << 16 | static_cast<uint32_t>(2 * i);
    for (int w = 0; w < 24; ++w)
      ASSERT_EQ(reinterpret_cast<const uint32_t*>(kept[i])[w], want) << "block " << i << " word " << w;
  }
  // The kernel runs again on the restored module: every thread gets a block,
  // the odd threads' freed ones among them, none of the kept ones.
  LaunchConfig cfg;
  cfg.block = {kThreads, 1, 1};
  ASSERT_TRUE(b->launch({0, 0}, 1, cfg, packed(out, uint32_t{2}, uint32_t{0})));
  ASSERT_TRUE(syncDevice(*b));
  auto* slots = reinterpret_cast<const DevPtr*>(out);
  std::set<DevPtr> all(kept.begin(), kept.end());
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_NE(slots[t], 0u) << t;
    all.insert(slots[t]);
  }
  EXPECT_EQ(all.size(), kept.size() + kThreads) << "a kept block was handed out again";
  for (size_t i = 0; i < kept.size(); ++i)
    EXPECT_EQ(reinterpret_cast<const uint32_t*>(kept[i])[0], 1u << 16 | static_cast<uint32_t>(2 * i)) << i;
  b->stopThreads();
  b.reset();

  // A worker whose driver will not take the module as PTX bound to the heap
  // (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) would leave it on the driver's heap,
  // whose free() would get the moved blocks: the restore fails instead.
  auto c = backend();
  ASSERT_TRUE(c);
  hooks().fail("cuModuleLoadData", CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  auto refused = restoreFrom(*c, image_file);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("cannot be bound to rgpu's heap on device 0 here"), std::string::npos)
      << refused.status().message();
  c->stopThreads();
}

}  // namespace
}  // namespace rgpu::server::cuda
