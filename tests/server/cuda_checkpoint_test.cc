// Checkpoints of the CUDA backend (server/cuda/cuda_checkpoint.cc) against
// the fake driver, whose virtual memory calls map real memory at the
// addresses asked: a session's state written from one backend, the backend
// destroyed, and the state rebuilt in a fresh one at the same addresses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

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
  size_t pos = 0;
  auto r = readerOf(file, pos);
  auto got = restoreDeviceImage(*b, *r, DeviceImageLimits{});
  ASSERT_FALSE(got);
  EXPECT_EQ(got.status().code(), err::kNotSupported);
  EXPECT_NE(got.status().message().find("module 7's variable "), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("the CUDA driver places module variables"), std::string::npos);
  EXPECT_FALSE(b->globalAddress(7, "counter", 0)) << "the module is unloaded again";
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
  // A kernel that calls malloc only through a function of its own.
  constexpr char kMalloc[] = R"(
.version 8.0
.target sm_75
.address_size 64
.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.func (.param .b64 func_retval0) grab() {
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
  { .param .b64 retval0; call.uni (retval0), grab, (); ld.param.b64 %rd1, [retval0]; }
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
}

}  // namespace
}  // namespace rgpu::server::cuda
