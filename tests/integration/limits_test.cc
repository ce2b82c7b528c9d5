// Every per-session limit and every kind of bad size, at the protocol level:
// each gets a clear error naming what was refused, nothing is allocated for
// it, and the session (and any other) goes on. docs/limits.md lists them.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

struct Dim3Like {
  uint32_t x, y, z;
};

constexpr const char* kLimits =
    "[limits]\nmax_allocations = 16\nmax_streams = 4\nmax_events = 6\nmax_modules = 2\nmax_functions = 3\n"
    "max_pending_host_funcs = 3\nmax_staging_bytes = \"64MiB\"\n";

class Limits : public ::testing::Test {
 protected:
  Limits() : certs_((makeCerts(dir_.path()), 0)), server_(dir_.path(), kLimits) {}
  RawClient authed() { return authedClient(server_); }
  template <typename F>
  static RawReply call(RawClient& c, F fill, const std::vector<uint8_t>& bulk = {}) {
    return c.call(fill, bulk);
  }
  static std::vector<uint8_t> fatbin() { return testFatbin(); }
  TempDir dir_;
  int certs_;
  InProcessServer server_;
};

#define EXPECT_REFUSED(reply, code, text)                                                      \
  do {                                                                                         \
    RawReply r_ = (reply);                                                                     \
    EXPECT_EQ(r_.error, code) << r_.message;                                                   \
    EXPECT_NE(r_.message.find(text), std::string::npos) << "message: " << r_.message;          \
  } while (0)

TEST_F(Limits, TooManyAllocationsAreRefusedUntilOneIsFreed) {
  RawClient c = authed();
  std::vector<uint64_t> ptrs;
  for (int i = 0; i < 16; ++i) ptrs.push_back(c.malloc(256));
  EXPECT_REFUSED(call(c, [](auto r) { r.initMalloc().setSize(256); }), err::kMemoryAllocation, "max_allocations = 16");
  EXPECT_EQ(call(c, [&](auto r) { r.initFree().setPtr(ptrs.back()); }).error, 0);
  EXPECT_NE(c.malloc(256), 0u);  // room again
}

TEST_F(Limits, HugeAndNegativeAllocationSizesAreRefusedWithoutAllocating) {
  RawClient c = authed();
  // A size_t of -1 from the client, 2^63, and one byte more than the device has.
  for (uint64_t size : {~uint64_t{0}, uint64_t{1} << 63, (uint64_t{1} << 30) + 1})
    EXPECT_REFUSED(call(c, [&](auto r) { r.initMalloc().setSize(size); }), err::kMemoryAllocation, "bytes");
  RawReply info = call(c, [](auto r) { r.initMemGetInfo().setDevice(0); });
  ASSERT_EQ(info.error, 0);
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Limits, CopyAndFillSizesThatOverflowOrRunPastTheEndAreRefused) {
  RawClient c = authed();
  uint64_t p = c.malloc(4096);
  auto stream = [](auto b) { b.initStream(); };
  // 1D: a size of -1, an offset plus size that wraps around.
  EXPECT_REFUSED(call(c, [&](auto r) {
                   auto m = r.initMemset();
                   m.setDst(p);
                   m.setSize(~uint64_t{0});
                   stream(m);
                 }), err::kInvalidValue, "");
  EXPECT_REFUSED(call(c, [&](auto r) {
                   auto m = r.initMemcpyDtoD();
                   m.setDst(p + 8);
                   m.setSrc(p);
                   m.setSize(~uint64_t{0} - 4);
                   stream(m);
                 }), err::kInvalidValue, "");
  // 2D: width x height that overflows 64 bits, a pitch smaller than the width,
  // rows that end past the allocation.
  EXPECT_REFUSED(call(c, [&](auto r) {
                   auto m = r.initMemset2D();
                   m.setDst(p);
                   m.setPitch(uint64_t{1} << 33);
                   m.setWidth(uint64_t{1} << 33);
                   m.setHeight(uint64_t{1} << 33);
                   stream(m);
                 }), err::kInvalidValue, "");
  EXPECT_REFUSED(call(c, [&](auto r) {
                   auto m = r.initMemset2D();
                   m.setDst(p);
                   m.setPitch(16);
                   m.setWidth(64);
                   m.setHeight(2);
                   stream(m);
                 }), 12 /* cudaErrorInvalidPitchValue */, "pitch");
  EXPECT_REFUSED(call(c, [&](auto r) {
                   auto m = r.initMemcpy2D();
                   m.setKind(2);
                   m.setSrc(p);
                   m.setSpitch(1024);
                   m.setWidth(512);
                   m.setHeight(5);  // the 5th row starts at 4096
                   stream(m);
                 }), err::kInvalidValue, "");
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Limits, EventLimitIsEnforcedAndADestroyedEventMakesRoom) {
  RawClient c = authed();
  for (uint32_t i = 1; i <= 6; ++i) EXPECT_EQ(call(c, [&](auto r) { r.initEventCreate().setId(i); }).error, 0);
  EXPECT_REFUSED(call(c, [](auto r) { r.initEventCreate().setId(7); }), err::kLaunchOutOfResources, "max_events = 6");
  EXPECT_EQ(call(c, [](auto r) { r.initEventDestroy().setId(3); }).error, 0);
  EXPECT_EQ(call(c, [](auto r) { r.initEventCreate().setId(7); }).error, 0);
}

TEST_F(Limits, AHandleIdAlreadyInUseIsRefused) {
  RawClient c = authed();
  EXPECT_EQ(call(c, [](auto r) { r.initEventCreate().setId(1); }).error, 0);
  EXPECT_REFUSED(call(c, [](auto r) { r.initEventCreate().setId(1); }), err::kInvalidValue, "in use");
  EXPECT_EQ(call(c, [](auto r) { r.initStreamCreate().initStream().setId(1); }).error, 0);
  EXPECT_REFUSED(call(c, [](auto r) { r.initStreamCreate().initStream().setId(1); }), err::kInvalidValue, "in use");
  EXPECT_EQ(call(c, [&](auto r) { r.initModuleLoad().setId(1); }, fatbin()).error, 0);
  EXPECT_REFUSED(call(c, [&](auto r) { r.initModuleLoad().setId(1); }, fatbin()), err::kInvalidValue, "in use");
}

TEST_F(Limits, ModuleAndFunctionLimitsAreEnforced) {
  RawClient c = authed();
  for (uint32_t m = 1; m <= 2; ++m)
    EXPECT_EQ(call(c, [&](auto r) { r.initModuleLoad().setId(m); }, fatbin()).error, 0);
  EXPECT_REFUSED(call(c, [&](auto r) { r.initModuleLoad().setId(3); }, fatbin()), err::kLaunchOutOfResources,
                 "max_modules = 2");
  auto reg = [&](uint32_t id) {
    return call(c, [&](auto r) {
      auto f = r.initFunctionRegister();
      f.setId(id);
      f.setModule(1);
      f.setName("_Z8k_vecaddPKfS0_Pfi");
    });
  };
  for (uint32_t f = 1; f <= 3; ++f) EXPECT_EQ(reg(f).error, 0);
  EXPECT_REFUSED(reg(4), err::kLaunchOutOfResources, "max_functions = 3");
  EXPECT_REFUSED(call(c, [](auto r) {
                   auto v = r.initVarRegister();
                   v.setId(9);
                   v.setModule(1);
                   v.setName("nothing");
                   v.setSize(4);
                 }), err::kLaunchOutOfResources, "max_functions = 3");
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Limits, KernelLaunchesWithBadConfigurationsOrParameterBlocksAreRefused) {
  RawClient c = authed();
  ASSERT_EQ(call(c, [&](auto r) { r.initModuleLoad().setId(1); }, fatbin()).error, 0);
  ASSERT_EQ(call(c, [](auto r) {
              auto f = r.initFunctionRegister();
              f.setId(1);
              f.setModule(1);
              f.setName("_Z8k_vecaddPKfS0_Pfi");
            }).error, 0);
  auto launch = [&](Dim3Like grid, Dim3Like block, size_t param_bytes, uint64_t shmem) {
    return call(c, [&](auto r) {
      auto l = r.initLaunchKernel();
      l.setFunction(1);
      auto g = l.initGrid();
      g.setX(grid.x), g.setY(grid.y), g.setZ(grid.z);
      auto b = l.initBlock();
      b.setX(block.x), b.setY(block.y), b.setZ(block.z);
      l.setSharedMem(shmem);
      l.initStream();
      std::vector<uint8_t> params(param_bytes, 0);
      l.setParams(kj::arrayPtr(params.data(), params.size()));
    });
  };
  EXPECT_REFUSED(launch({0, 1, 1}, {32, 1, 1}, 28, 0), err::kInvalidConfiguration, "");
  EXPECT_REFUSED(launch({1, 1, 1}, {2048, 1, 1}, 28, 0), err::kInvalidConfiguration, "");
  EXPECT_REFUSED(launch({1, 70000, 1}, {32, 1, 1}, 28, 0), err::kInvalidConfiguration, "");
  EXPECT_REFUSED(launch({1, 1, 1}, {32, 1, 1}, 20, 0), err::kInvalidValue, "the kernel takes 28");
  EXPECT_REFUSED(launch({1, 1, 1}, {32, 1, 1}, 28, uint64_t{1} << 40), err::kInvalidValue, "shared memory");
  EXPECT_REFUSED(launch({1, 1, 1}, {32, 1, 1}, protocol::kMaxParamBytes + 1, 0), err::kInvalidValue, "");
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Limits, PendingHostFunctionsAreLimited) {
  RawClient c = authed();
  auto enqueue = [&](uint64_t id) {
    return call(c, [&](auto r) { r.initHostFuncEnqueue().setId(id); });
  };
  // The first is handed to the client (a notification) and holds the stream;
  // the next ones wait behind it.
  for (uint64_t id = 1; id <= 3; ++id) {
    RawReply r = enqueue(id);
    if (r.type == protocol::FrameType::kNotify) r = c.next();  // hostFuncReady came first
    EXPECT_EQ(r.error, 0) << r.message;
  }
  RawReply over = enqueue(4);
  if (over.type == protocol::FrameType::kNotify) over = c.next();
  EXPECT_EQ(over.error, err::kLaunchOutOfResources) << over.message;
  EXPECT_NE(over.message.find("max_pending_host_funcs = 3"), std::string::npos) << over.message;
}

TEST_F(Limits, OversizeFatbinsAreRefusedBeforeTheirBytesAreRead) {
  RawClient c = authed();
  capnp::MallocMessageBuilder msg;
  msg.initRoot<wire::Request>().initModuleLoad().setId(1);
  std::vector<uint8_t> f;
  common::appendFrame(f, protocol::FrameType::kRequest, 0, c.takeSeq(), msg, protocol::kMaxFatbinBytes + 1);
  ASSERT_TRUE(c.writeRaw(f.data(), f.size()));  // only the header: the bulk never comes
  RawReply r = c.next();
  EXPECT_TRUE(r.goodbye) << r.message;
  EXPECT_NE(r.message.find("bulk length"), std::string::npos) << r.message;
  RawClient other = authed();  // the server takes new sessions
  EXPECT_EQ(other.ping().error, 0);
}

TEST_F(Limits, UnloadingAModuleEndsItsKernelsButLaunchesAlreadyQueuedStillRun) {
  RawClient c = authed();
  uint64_t p = c.malloc(1024);
  ASSERT_EQ(call(c, [&](auto r) { r.initModuleLoad().setId(1); }, fatbin()).error, 0);
  ASSERT_EQ(call(c, [](auto r) {
              auto f = r.initFunctionRegister();
              f.setId(1);
              f.setModule(1);
              f.setName("_Z6k_fillIfEvPT_S0_i");  // k_fill<float>(float* p, float v, int n)
            }).error, 0);
  // Stream 1 waits on a host function, and a launch waits behind it.
  ASSERT_EQ(call(c, [](auto r) { r.initStreamCreate().initStream().setId(1); }).error, 0);
  capnp::MallocMessageBuilder hf;
  auto e = hf.initRoot<wire::Request>().initHostFuncEnqueue();
  e.setId(5);
  e.initStream().setId(1);
  c.send(hf, true);
  ASSERT_EQ(c.next().type, protocol::FrameType::kNotify);  // run host function 5 (we wait)
  auto launch = [&](uint32_t stream) {
    capnp::MallocMessageBuilder msg;
    auto l = msg.initRoot<wire::Request>().initLaunchKernel();
    l.setFunction(1);
    auto g = l.initGrid();
    g.setX(1), g.setY(1), g.setZ(1);
    auto b = l.initBlock();
    b.setX(256), b.setY(1), b.setZ(1);
    l.initStream().setId(stream);
    float v = 2.5f;
    int n = 256;
    uint8_t params[16];
    std::memcpy(params, &p, 8);
    std::memcpy(params + 8, &v, 4);
    std::memcpy(params + 12, &n, 4);
    l.setParams(kj::arrayPtr(params, sizeof params));
    c.send(msg, stream == 1);
  };
  launch(1);  // queued
  ASSERT_EQ(call(c, [](auto r) { r.initModuleUnload().setId(1); }).error, 0);
  // The module's kernels are gone...
  EXPECT_EQ(call(c, [](auto r) { r.initFuncGetAttributes().setId(1); }).error, err::kInvalidDeviceFunction);
  launch(0);
  EXPECT_EQ(c.next().error, err::kInvalidDeviceFunction);
  // ...but the launch queued before the unload runs once its stream moves on.
  capnp::MallocMessageBuilder done;
  done.initRoot<wire::Request>().initHostFuncDone().setId(5);
  c.send(done, true);
  EXPECT_EQ(call(c, [](auto r) { r.initStreamSynchronize().setId(1); }).error, 0);
  RawReply back = c.readBack(p, 1024);
  ASSERT_EQ(back.error, 0) << back.message;
  float first, last;
  std::memcpy(&first, back.bulk.data(), 4);
  std::memcpy(&last, back.bulk.data() + 1020, 4);
  EXPECT_EQ(first, 2.5f);
  EXPECT_EQ(last, 2.5f);
}

TEST_F(Limits, ASessionThatEndsWithAFreeStillWaitingForTheDeviceTearsDownCleanly) {
  // Found by fuzz_dispatch: the free's completion fired while the session
  // destroyed its backend, and called into it through a pointer already reset.
  {
    RawClient c = authed();
    uint64_t p = c.malloc(4096);
    ASSERT_EQ(call(c, [](auto r) { r.initStreamCreate().initStream().setId(1); }).error, 0);
    capnp::MallocMessageBuilder hf;
    auto e = hf.initRoot<wire::Request>().initHostFuncEnqueue();
    e.setId(1);
    e.initStream().setId(1);
    c.send(hf, true);
    ASSERT_EQ(c.next().type, protocol::FrameType::kNotify);  // the host function holds stream 1
    capnp::MallocMessageBuilder fr;
    fr.initRoot<wire::Request>().initFree().setPtr(p);
    c.send(fr, true);  // waits for the device, so for the host function
    EXPECT_EQ(c.ping().error, 0);
  }  // the client leaves without answering
  RawClient next = authed();  // the server (this process) is alive and serving
  EXPECT_EQ(next.ping().error, 0);
}

TEST_F(Limits, CopiesQueuedBehindABlockedStreamAreBoundedByTheStagingBudget) {
  RawClient c = authed();
  const uint64_t chunk = 16ull << 20;
  uint64_t dst = c.malloc(chunk);
  ASSERT_EQ(call(c, [](auto r) { r.initStreamCreate().initStream().setId(1); }).error, 0);
  capnp::MallocMessageBuilder hold;
  auto hf = hold.initRoot<wire::Request>().initHostFuncEnqueue();
  hf.setId(1);
  hf.initStream().setId(1);
  c.send(hold, true);
  ASSERT_EQ(c.next().type, protocol::FrameType::kNotify);  // the host function holds stream 1
  auto copy = [&](bool async) {
    capnp::MallocMessageBuilder m;
    auto h = m.initRoot<wire::Request>().initMemcpyHtoD();
    h.setDst(dst);
    h.setSize(chunk);
    h.initStream().setId(1);
    c.send(m, async, std::vector<uint8_t>(chunk, 0x3c));
  };
  for (int i = 0; i < 4; ++i) copy(true);  // 64 MiB queued: the whole budget
  copy(false);
  RawReply over = c.next();
  EXPECT_EQ(over.error, err::kMemoryAllocation) << over.message;
  EXPECT_NE(over.message.find("max_staging_bytes = 67108864"), std::string::npos) << over.message;
  // Once the queued copies ran, their staging is free again.
  capnp::MallocMessageBuilder done;
  done.initRoot<wire::Request>().initHostFuncDone().setId(1);
  c.send(done, true);
  EXPECT_EQ(call(c, [](auto r) { r.initStreamSynchronize().setId(1); }).error, 0);
  copy(false);
  EXPECT_EQ(c.next().error, 0);
}

}  // namespace
}  // namespace rgpu::test
