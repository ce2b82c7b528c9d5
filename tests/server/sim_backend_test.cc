#include "server/sim/sim_backend.h"

#include <driver_types.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <sstream>
#include <future>
#include <thread>

namespace rgpu::server {
namespace {

class Sim : public ::testing::Test {
 protected:
  Sim() : sim_({SimDeviceConfig{"a", 1 << 20, 9, 0, 4}, SimDeviceConfig{"b", 1 << 20, 8, 0, 2}}, {}) {}
  Staging bytes(std::vector<uint8_t> v) { return std::make_shared<std::vector<uint8_t>>(std::move(v)); }
  // Waits for a completion callback.
  void waitDone(const std::function<Status(Done)>& arm) {
    std::promise<void> p;
    ASSERT_TRUE(arm([&](Status) { p.set_value(); }));
    ASSERT_EQ(p.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }
  SimBackend sim_;
};

TEST_F(Sim, DescribesConfiguredDevices) {
  ASSERT_EQ(sim_.devices().size(), 2u);
  EXPECT_EQ(sim_.devices()[0].prop.size(), 1008u);
  EXPECT_EQ(sim_.devices()[1].major, 8);
  EXPECT_EQ(sim_.devices()[0].attributes[16], 4);  // cudaDevAttrMultiProcessorCount
}

TEST_F(Sim, AllocationsCountAgainstDeviceMemory) {
  uint64_t free = 0, total = 0;
  auto p = sim_.allocate(0, 1000);
  ASSERT_TRUE(p);
  ASSERT_TRUE(sim_.memInfo(0, free, total));
  EXPECT_EQ(total, 1u << 20);
  EXPECT_EQ(free, (1u << 20) - 1024);  // rounded to the 256-byte allocation granule
  auto big = sim_.allocate(0, 1 << 20);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.status().code(), err::kMemoryAllocation);
  ASSERT_TRUE(sim_.release(*p));
  ASSERT_TRUE(sim_.memInfo(0, free, total));
  EXPECT_EQ(free, total);
}

TEST_F(Sim, ReleasedMemoryIsFreedOnlyAfterTheWorkQueuedBeforeItOnAnyDeviceHasRun) {
  auto p = sim_.allocate(0, 4096);
  ASSERT_TRUE(p);
  StreamKey other{3, 1};
  ASSERT_TRUE(sim_.createStream(other, 0, 0));
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  ASSERT_TRUE(sim_.hostCall(other, [gate] { gate.wait(); }));
  std::promise<std::vector<uint8_t>> got;
  ASSERT_TRUE(sim_.fill(StreamKey{0, 0}, *p, 7, 4096));
  ASSERT_TRUE(sim_.copyFromDevice(other, *p, 4096, [&](Status, const uint8_t* d, uint64_t n, const OnWire&) {
    got.set_value({d, d + n});
  }));
  waitDone([&](Done d) { return sim_.whenDeviceDone(0, std::move(d)); });
  ASSERT_TRUE(sim_.release(*p));
  EXPECT_FALSE(sim_.release(*p)) << "released twice";
  uint64_t free = 0, total = 0;
  ASSERT_TRUE(sim_.memInfo(0, free, total));
  EXPECT_EQ(free, total - 4096) << "freed while a copy queued on device 1 still reads it";
  auto later = sim_.allocate(0, 4096);
  ASSERT_TRUE(later);
  EXPECT_NE(*later, *p);
  go.set_value();
  EXPECT_EQ(got.get_future().get(), std::vector<uint8_t>(4096, 7));
  waitDone([&](Done d) { return sim_.whenStreamDone(other, std::move(d)); });
  ASSERT_TRUE(sim_.release(*later));
  ASSERT_TRUE(sim_.memInfo(0, free, total));
  EXPECT_EQ(free, total);
}

TEST_F(Sim, CopiesRunInStreamOrder) {
  auto p = sim_.allocate(0, 4);
  ASSERT_TRUE(p);
  StreamKey s{7, 0};
  ASSERT_TRUE(sim_.createStream(s, 0, 0));
  ASSERT_TRUE(sim_.copyToDevice(s, *p, bytes({1, 2, 3, 4}), 4));
  ASSERT_TRUE(sim_.fill(s, *p + 2, 9, 2));
  std::promise<std::vector<uint8_t>> got;
  ASSERT_TRUE(sim_.copyFromDevice(s, *p, 4, [&](Status, const uint8_t* d, uint64_t n, const OnWire&) { got.set_value({d, d + n}); }));
  EXPECT_EQ(got.get_future().get(), (std::vector<uint8_t>{1, 2, 9, 9}));
}

TEST_F(Sim, HostCallHoldsItsStreamUntilItReturns) {
  StreamKey s{3, 0};
  ASSERT_TRUE(sim_.createStream(s, 0, 0));
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  ASSERT_TRUE(sim_.hostCall(s, [&] {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return release; });
  }));
  std::atomic<bool> done{false};
  ASSERT_TRUE(sim_.whenStreamDone(s, [&](Status) { done = true; }));
  auto idle = sim_.streamIdle(s);
  ASSERT_TRUE(idle);
  EXPECT_FALSE(*idle);
  EXPECT_FALSE(done.load());
  {
    std::lock_guard l(mu);
    release = true;
  }
  cv.notify_all();
  waitDone([&](Done d) { return sim_.whenStreamDone(s, d); });
  EXPECT_TRUE(done.load());
}

TEST_F(Sim, LegacyStreamWaitsForBlockingStreamsButNotNonBlockingOnes) {
  StreamKey blocking{1, 0}, nonblocking{2, 0}, legacy{0, 0};
  ASSERT_TRUE(sim_.createStream(blocking, 0, 0));
  ASSERT_TRUE(sim_.createStream(nonblocking, 1, 0));  // cudaStreamNonBlocking
  std::promise<void> gate_b, gate_n;
  auto fb = gate_b.get_future().share();
  auto fn = gate_n.get_future().share();
  ASSERT_TRUE(sim_.hostCall(blocking, [fb] { fb.wait(); }));
  ASSERT_TRUE(sim_.hostCall(nonblocking, [fn] { fn.wait(); }));
  std::atomic<bool> legacy_ran{false};
  ASSERT_TRUE(sim_.hostCall(legacy, [&] { legacy_ran = true; }));
  // Release the blocking stream only: the legacy op may now run although the
  // non-blocking stream is still held.
  gate_b.set_value();
  waitDone([&](Done d) { return sim_.whenStreamDone(legacy, d); });
  EXPECT_TRUE(legacy_ran.load());
  gate_n.set_value();
}

TEST_F(Sim, StreamWaitEventOrdersAcrossStreams) {
  auto p = sim_.allocate(0, 1);
  StreamKey a{1, 0}, b{2, 0};
  ASSERT_TRUE(sim_.createStream(a, 1, 0));
  ASSERT_TRUE(sim_.createStream(b, 1, 0));
  ASSERT_TRUE(sim_.createEvent(5, 0, 0));
  std::promise<void> gate;
  auto g = gate.get_future().share();
  ASSERT_TRUE(sim_.hostCall(a, [g] { g.wait(); }));
  ASSERT_TRUE(sim_.fill(a, *p, 1, 1));
  ASSERT_TRUE(sim_.recordEvent(5, a));
  ASSERT_TRUE(sim_.waitEvent(b, 5));
  ASSERT_TRUE(sim_.fill(b, *p, 2, 1));
  auto q = sim_.eventDone(5);
  ASSERT_TRUE(q);
  EXPECT_FALSE(*q);
  gate.set_value();
  waitDone([&](Done d) { return sim_.whenStreamDone(b, d); });
  EXPECT_EQ(*reinterpret_cast<uint8_t*>(*p), 2);  // b's fill ran after a's
}

TEST_F(Sim, ElapsedTimeNeedsTwoCompletedTimedEvents) {
  StreamKey s{0, 0};
  ASSERT_TRUE(sim_.createEvent(1, 0, 0));
  ASSERT_TRUE(sim_.createEvent(2, 0, 0));
  ASSERT_TRUE(sim_.createEvent(3, 0, 2));  // cudaEventDisableTiming
  EXPECT_EQ(sim_.elapsedMs(1, 2).status().code(), err::kInvalidResourceHandle);  // never recorded
  ASSERT_TRUE(sim_.recordEvent(1, s));
  ASSERT_TRUE(sim_.hostCall(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }));
  ASSERT_TRUE(sim_.recordEvent(2, s));
  ASSERT_TRUE(sim_.recordEvent(3, s));
  waitDone([&](Done d) { return sim_.whenEventDone(3, d); });
  auto ms = sim_.elapsedMs(1, 2);
  ASSERT_TRUE(ms);
  EXPECT_GE(*ms, 19.0f);
  EXPECT_EQ(sim_.elapsedMs(1, 3).status().code(), err::kInvalidResourceHandle);
}

TEST_F(Sim, DeviceDoneWaitsForEveryStreamOfTheDevice) {
  StreamKey a{1, 0}, other_dev{2, 1};
  ASSERT_TRUE(sim_.createStream(a, 1, 0));
  ASSERT_TRUE(sim_.createStream(other_dev, 1, 0));
  std::promise<void> gate, other_gate;
  auto g = gate.get_future().share();
  auto og = other_gate.get_future().share();
  ASSERT_TRUE(sim_.hostCall(a, [g] { g.wait(); }));
  ASSERT_TRUE(sim_.hostCall(other_dev, [og] { og.wait(); }));
  std::atomic<bool> done{false};
  ASSERT_TRUE(sim_.whenDeviceDone(0, [&](Status) { done = true; }));
  EXPECT_FALSE(done.load());
  gate.set_value();  // device 1 stays busy: device 0's sync must still complete
  waitDone([&](Done d) { return sim_.whenDeviceDone(0, d); });
  EXPECT_TRUE(done.load());
  other_gate.set_value();
}

TEST_F(Sim, LaunchOfAnUnknownFunctionIsRefused) {
  EXPECT_EQ(sim_.launch({0, 0}, 99, {}, "").code(), err::kInvalidDeviceFunction);
}

TEST(SimDevices, EachReportsAndSchedulesByTheLimitsOfItsArchitecture) {
  SimBackend sim({SimDeviceConfig{"h", 1 << 20, 9, 0, 4}, SimDeviceConfig{"a", 1 << 20, 8, 0, 4},
                  SimDeviceConfig{"g", 1 << 20, 8, 6, 4}, SimDeviceConfig{"t", 1 << 20, 7, 5, 4}},
                 {});
  struct Want {
    int smem_sm_kib, optin_kib, threads, blocks, l2_mib, domains;
  };
  const Want want[] = {{228, 227, 2048, 32, 50, 4}, {164, 163, 2048, 32, 40, 1}, {100, 99, 1536, 16, 6, 1},
                       {64, 64, 1024, 16, 4, 1}};
  for (int d = 0; d < 4; ++d) {
    cudaDeviceProp p;
    std::memcpy(&p, sim.devices()[d].prop.data(), sizeof p);
    const auto& a = sim.devices()[d].attributes;
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.sharedMemPerMultiprocessor, want[d].smem_sm_kib * 1024u);
    EXPECT_EQ(p.sharedMemPerBlockOptin, want[d].optin_kib * 1024u);
    EXPECT_EQ(p.maxThreadsPerMultiProcessor, want[d].threads);
    EXPECT_EQ(p.maxBlocksPerMultiProcessor, want[d].blocks);
    EXPECT_EQ(p.l2CacheSize, want[d].l2_mib * 1024 * 1024);
    EXPECT_EQ(a[cudaDevAttrMemSyncDomainCount], want[d].domains);
    // What a data-centre GPU reports, and what works through rgpu.
    EXPECT_EQ(p.ECCEnabled, 1);
    EXPECT_EQ(p.cooperativeLaunch, 1);
    EXPECT_EQ(p.memoryPoolsSupported, 1);
    EXPECT_EQ(p.concurrentKernels, 1);
    EXPECT_EQ(p.streamPrioritiesSupported, 1);
    EXPECT_EQ(p.sharedMemPerBlock, 48u * 1024);
    EXPECT_EQ(p.reservedSharedMemPerBlock, 1024u);
    // Not offered to a remote client (yet): reported absent, never pretended.
    EXPECT_EQ(p.canMapHostMemory, 1);
    EXPECT_EQ(p.managedMemory, 1);
    EXPECT_EQ(p.concurrentManagedAccess, 0);
    EXPECT_EQ(p.clusterLaunch, d == 0 ? 1 : 0);  // 9.0 and later
  }
  std::ifstream in(std::string(RGPU_TEST_DATA_DIR) + "/kernels_ptxonly.fatbin", std::ios::binary);
  std::stringstream fatbin;
  fatbin << in.rdbuf();
  // Occupancy: resident blocks per multiprocessor by threads, shared memory and the block cap.
  const int by_threads_1024[] = {2, 2, 1, 1}, by_threads_256[] = {8, 8, 6, 4}, by_smem_50k[] = {4, 3, 1, 1};
  for (int d = 0; d < 4; ++d) {
    ASSERT_TRUE(sim.loadModule(1 + d, d, fatbin.str()));
    ASSERT_TRUE(sim.registerFunction(10 + d, 1 + d, "_Z6k_fillIfEvPT_S0_i"));
    EXPECT_EQ(*sim.occupancy(10 + d, 1024, 0), by_threads_1024[d]) << d;
    EXPECT_EQ(*sim.occupancy(10 + d, 256, 0), by_threads_256[d]) << d;
    EXPECT_EQ(*sim.occupancy(10 + d, 32, 0), want[d].blocks) << d;
    EXPECT_EQ(*sim.occupancy(10 + d, 64, 50 * 1024), by_smem_50k[d]) << d;
    // The opt-in limit for dynamic shared memory is the device's.
    EXPECT_TRUE(sim.setFunctionAttribute(10 + d, cudaFuncAttributeMaxDynamicSharedMemorySize, want[d].optin_kib * 1024));
    EXPECT_EQ(sim.setFunctionAttribute(10 + d, cudaFuncAttributeMaxDynamicSharedMemorySize, want[d].optin_kib * 1024 + 1).code(),
              err::kInvalidValue);
  }
}

TEST(SimModules, TheSessionsDecodedInstructionsAreBoundedAndUnloadingReturnsThem) {
  std::ifstream in(std::string(RGPU_TEST_DATA_DIR) + "/kernels_ptxonly.fatbin", std::ios::binary);
  std::stringstream fatbin;
  fatbin << in.rdbuf();
  // Learn one module's size, then allow a little more than that.
  uint64_t one = 0;
  {
    SimBackend probe({SimDeviceConfig{}}, {});
    ASSERT_TRUE(probe.loadModule(1, 0, fatbin.str()));
    SimOptions tiny;
    tiny.max_module_instructions = 1;
    SimBackend none({SimDeviceConfig{}}, tiny);
    Status s = none.loadModule(1, 0, fatbin.str());
    ASSERT_EQ(s.code(), err::kMemoryAllocation);
    auto at = s.message().find("(this one has ");
    ASSERT_NE(at, std::string::npos) << s.message();
    one = std::stoull(s.message().substr(at + 14));
  }
  ASSERT_GT(one, 0u);
  SimOptions o;
  o.max_module_instructions = one + one / 2;
  SimBackend sim({SimDeviceConfig{}}, o);
  EXPECT_TRUE(sim.loadModule(1, 0, fatbin.str()));
  Status second = sim.loadModule(2, 0, fatbin.str());
  EXPECT_EQ(second.code(), err::kMemoryAllocation);
  EXPECT_NE(second.message().find("decoded PTX instructions"), std::string::npos) << second.message();
  EXPECT_TRUE(sim.unloadModule(1));
  EXPECT_TRUE(sim.loadModule(2, 0, fatbin.str()));  // room again
}

}  // namespace
}  // namespace rgpu::server
