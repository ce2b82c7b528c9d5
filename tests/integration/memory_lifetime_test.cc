// Memory outlives the queued work that targets it (issue: a tenant turned a
// free racing a queued operation into reads and writes of the worker's
// memory). Each test queues an operation behind a stream that a host
// function holds, frees or unloads what it targets while it waits, lets a
// later allocation take the freed place, then releases the stream: the
// queued operation must still see the memory it was queued against, and the
// later allocation must be untouched.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

constexpr char kFillFloat[] = "_Z6k_fillIfEvPT_S0_i";  // k_fill<float>(float*, float, int)

::testing::AssertionResult allAre(const std::vector<uint8_t>& got, uint8_t byte) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != byte)
      return ::testing::AssertionFailure() << "byte " << i << " of " << got.size() << " is " << int(got[i])
                                           << ", expected " << int(byte);
  if (got.empty()) return ::testing::AssertionFailure() << "no data";
  return ::testing::AssertionSuccess();
}

class MemoryLifetime : public ::testing::Test {
 protected:
  // Two sim devices: the work that outlives a free is queued on the other one.
  MemoryLifetime()
      : certs_((makeCerts(dir_.path()), 0)),
        server_(dir_.path(), "[[sim.devices]]\nname = \"second\"\nmemory = \"1GiB\"\ncompute_capability = \"9.0\"\n"
                             "sm_count = 8\n") {}

  // Creates stream `id` on `device` and parks a host function on it: the
  // stream runs nothing more until release() answers it.
  void holdStream(RawClient& c, uint32_t id, int device) {
    capnp::MallocMessageBuilder m1;
    auto sc = m1.initRoot<wire::Request>().initStreamCreate().initStream();
    sc.setId(id);
    sc.setDevice(device);
    c.send(m1, true);
    capnp::MallocMessageBuilder m2;
    auto hf = m2.initRoot<wire::Request>().initHostFuncEnqueue();
    hf.setId(id);
    hf.initStream().setId(id);
    hf.getStream().setDevice(device);
    c.send(m2, true);
    RawReply ready = c.next();
    ASSERT_EQ(ready.type, protocol::FrameType::kNotify);
  }
  void release(RawClient& c, uint32_t id) {
    capnp::MallocMessageBuilder m;
    m.initRoot<wire::Request>().initHostFuncDone().setId(id);
    c.send(m, true);
  }
  // A device-to-host copy queued on stream `id` (the reply comes when it runs).
  uint64_t queueRead(RawClient& c, uint32_t id, int device, uint64_t src, uint64_t size) {
    capnp::MallocMessageBuilder m;
    auto r = m.initRoot<wire::Request>().initMemcpyDtoH();
    r.setSrc(src);
    r.setSize(size);
    r.initStream().setId(id);
    r.getStream().setDevice(device);
    return c.send(m);
  }
  RawReply synchronize(RawClient& c) {
    return c.call([](auto r) { r.initDeviceSynchronize().setDevice(0); });
  }
  // After the free or unload: a new allocation of `size` bytes on device 0
  // is filled with `fresh`, then stream `id` goes on. The read queued on it
  // must still see `old`, and the new allocation keep `fresh`.
  void expectTheQueuedReadSeesTheOldBytes(RawClient& c, uint32_t id, uint64_t size, uint8_t old, uint8_t fresh) {
    uint64_t later = c.malloc(size, 0);
    c.write(later, std::vector<uint8_t>(size, fresh));
    EXPECT_EQ(synchronize(c).error, 0);
    release(c, id);
    RawReply data = c.next();
    ASSERT_EQ(data.error, 0) << data.message;
    EXPECT_TRUE(allAre(data.bulk, old)) << "the queued copy read memory reused after the free";
    EXPECT_TRUE(allAre(c.readBack(later, size).bulk, fresh));
  }
  void loadModule(RawClient& c, uint32_t id) {
    ASSERT_EQ(c.call([&](auto r) { r.initModuleLoad().setId(id); }, testFatbin()).error, 0);
  }

  TempDir dir_;
  int certs_;
  InProcessServer server_;
};

TEST_F(MemoryLifetime, AQueuedCopyOfAModuleVariableReadsItAfterTheModuleIsUnloaded) {
  RawClient c = authedClient(server_);
  loadModule(c, 1);
  ASSERT_EQ(c.call([](auto r) {
              auto v = r.initVarRegister();
              v.setId(1);
              v.setModule(1);
              v.setName("table");
              v.setSize(4096);
            }).error, 0);
  RawReply sym = c.call([](auto r) { r.initSymbolAddress().setId(1); });
  ASSERT_EQ(sym.error, 0) << sym.message;
  uint64_t table = sym.symbol;
  c.write(table, std::vector<uint8_t>(4096, 0xAB));

  holdStream(c, 7, 1);
  queueRead(c, 7, 1, table, 4096);
  ASSERT_EQ(c.call([](auto r) { r.initModuleUnload().setId(1); }).error, 0);
  // Gone for new requests at once.
  EXPECT_EQ(c.readBack(table, 4096).error, err::kInvalidValue);
  // The variable's place is what the next allocation of its size would take.
  expectTheQueuedReadSeesTheOldBytes(c, 7, 4096, 0xAB, 0x11);
}

TEST_F(MemoryLifetime, AFreeOnOneDeviceWaitsForACopyQueuedOnAnother) {
  RawClient c = authedClient(server_);
  uint64_t a = c.malloc(8192, 0);
  c.write(a, std::vector<uint8_t>(8192, 0x5A));
  holdStream(c, 3, 1);
  queueRead(c, 3, 1, a, 8192);
  // cudaFree waits for device 0, which is idle: it returns while the copy waits on device 1.
  ASSERT_EQ(c.call([&](auto r) { r.initFree().setPtr(a); }).error, 0);
  // (Were the free to take effect now, the next allocation would be `a`: best fit.)
  expectTheQueuedReadSeesTheOldBytes(c, 3, 8192, 0x5A, 0x22);
}

TEST_F(MemoryLifetime, AKernelQueuedBeforeAFreeNeverWritesTheMemoryThatReplacesIt) {
  RawClient c = authedClient(server_);
  loadModule(c, 1);
  ASSERT_EQ(c.call([](auto r) {
              auto f = r.initFunctionRegister();
              f.setId(1);
              f.setModule(1);
              f.setName(kFillFloat);
            }).error, 0);
  const int n = 1024;
  uint64_t a = c.malloc(n * 4, 0);
  holdStream(c, 5, 1);
  // k_fill<float>(a, 2.5f, n) on device 1's stream, behind the host function.
  std::vector<uint8_t> params(16);
  float v = 2.5f;
  std::memcpy(params.data(), &a, 8);
  std::memcpy(params.data() + 8, &v, 4);
  std::memcpy(params.data() + 12, &n, 4);
  capnp::MallocMessageBuilder m;
  auto l = m.initRoot<wire::Request>().initLaunchKernel();
  l.setFunction(1);
  auto g = l.initGrid();
  g.setX(n / 256), g.setY(1), g.setZ(1);
  auto b = l.initBlock();
  b.setX(256), b.setY(1), b.setZ(1);
  l.initStream().setId(5);
  l.getStream().setDevice(1);
  l.setParams(kj::arrayPtr(params.data(), params.size()));
  c.send(m, true);
  ASSERT_EQ(c.ping().error, 0);  // (an asynchronous error would come back here)
  ASSERT_EQ(c.call([&](auto r) { r.initFree().setPtr(a); }).error, 0);
  uint64_t later = c.malloc(n * 4, 0);
  // (Were the free to take effect now, `later` would be `a`: best fit.)
  c.write(later, std::vector<uint8_t>(n * 4, 0x33));
  EXPECT_EQ(synchronize(c).error, 0);
  release(c, 5);
  RawReply sync = c.call([](auto r) { r.initStreamSynchronize().setId(5); });
  EXPECT_EQ(sync.error, 0) << sync.message;
  EXPECT_TRUE(allAre(c.readBack(later, n * 4).bulk, 0x33))
      << "a kernel queued before the free wrote the allocation that took its place";
}

}  // namespace
}  // namespace rgpu::test
