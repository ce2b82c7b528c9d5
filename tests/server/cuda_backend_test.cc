// CudaBackend against the fake driver (tests/fake_driver): the backend's own
// logic — entry points, contexts, device properties, copies through pinned
// staging, launch parameter packing, streams and events, error mapping — is
// exercised without a GPU. The real-device run is the `gpu` label.
#include "server/cuda/cuda_backend.h"
#include "server/cuda/nvml.h"
#include "tests/server/fake_cuda_hooks.h"

#include <dlfcn.h>
#include <driver_types.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>
#include <set>
#include <sstream>

#include "common/fatbin.h"

namespace rgpu::server::cuda {
namespace {

std::unique_ptr<CudaBackend> makeBackend() {
  CudaOptions o;
  o.driver_library = RGPU_FAKE_CUDA_LIB;
  auto b = CudaBackend::create(o);
  EXPECT_TRUE(b) << b.status().message();
  return b ? std::move(*b) : nullptr;
}

Status waitStream(Backend& b, StreamKey s) {
  std::promise<Status> p;
  Status e = b.whenStreamDone(s, [&](Status st) { p.set_value(st); });
  if (!e) return e;
  return p.get_future().get();
}

Staging bytes(const std::vector<uint8_t>& v) { return std::make_shared<std::vector<uint8_t>>(v); }

std::string readFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(CudaBackend, LoadsTheDriverThroughGetProcAddressAtTheHeadersAbiVersion) {
  hooks().clear();
  auto b = makeBackend();
  ASSERT_TRUE(b);
  std::string log = hooks().log();
  EXPECT_NE(log.find("cuGetProcAddress cuMemAlloc 13000 flags=1"), std::string::npos) << log;
  EXPECT_NE(log.find("cuGetProcAddress cuLaunchKernel 13000 flags=1"), std::string::npos) << log;
  EXPECT_NE(log.find("cuDevicePrimaryCtxRetain 0"), std::string::npos) << log;
  EXPECT_EQ(b->driverVersion(), 13000);
  EXPECT_EQ(b->name(), "cuda");
}

TEST(CudaBackend, MissingDriverIsAClearStartupError) {
  CudaOptions o;
  o.driver_library = "libcuda-that-does-not-exist.so.1";
  auto b = CudaBackend::create(o);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.status().code(), err::kInsufficientDriver);
  EXPECT_NE(b.status().message().find("cannot load the CUDA driver libcuda-that-does-not-exist.so.1"),
            std::string::npos)
      << b.status().message();
}

TEST(CudaBackend, DevicePropertiesComeFromDriverAttributes) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  ASSERT_EQ(b->devices().size(), 1u);
  const DeviceDescription& d = b->devices()[0];
  ASSERT_EQ(d.prop.size(), sizeof(cudaDeviceProp));
  cudaDeviceProp p;
  std::memcpy(&p, d.prop.data(), sizeof p);
  EXPECT_STREQ(p.name, "rgpu fake GPU 0");
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.minor, 0);
  EXPECT_EQ(p.multiProcessorCount, 132);
  EXPECT_EQ(p.totalGlobalMem, 1ull << 30);
  EXPECT_EQ(p.l2CacheSize, 60 * 1024 * 1024);
  EXPECT_EQ(p.sharedMemPerBlockOptin, 232448u);
  EXPECT_EQ(p.pciBusID, 0x19);
  EXPECT_EQ(static_cast<unsigned char>(p.uuid.bytes[0]), 0xf0);
  // The driver says it can map host memory and manage memory with concurrent
  // access; a remote client gets mapped memory through device aliases and
  // managed memory without concurrent access.
  EXPECT_EQ(p.canMapHostMemory, 1);
  EXPECT_EQ(p.managedMemory, 1);
  EXPECT_EQ(p.concurrentManagedAccess, 0);
  EXPECT_EQ(d.attributes[cudaDevAttrCanMapHostMemory], 1);
  EXPECT_EQ(d.attributes[cudaDevAttrMultiProcessorCount], 132);
  // rgpu has no mapped host memory (so no unified addressing with the
  // client): not reported though the driver offers it. Cooperative launches
  // go through (cuLaunchKernelEx): reported as the driver does.
  EXPECT_EQ(d.attributes[cudaDevAttrCooperativeLaunch], 1);
  EXPECT_EQ(d.attributes[cudaDevAttrUnifiedAddressing], 0);
  EXPECT_EQ(p.cooperativeLaunch, 1);
  EXPECT_EQ(p.unifiedAddressing, 0);
  // Kernels on one GPU cannot use another's memory through rgpu's CUDA backend (yet).
  EXPECT_EQ(b->peerAccess(0), 0u);
}

TEST(CudaBackend, CopiesRoundTripThroughPinnedStaging) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  hooks().clear();
  auto p = b->allocate(0, 1000);
  ASSERT_TRUE(p) << p.status().message();
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(b->copyToDevice({0, 0}, *p, bytes(data), data.size()));
  EXPECT_EQ(readBack(*b, {0, 0}, *p, 1000), data);
  // Device to device, fill, 2D.
  auto q = b->allocate(0, 1000);
  ASSERT_TRUE(q);
  ASSERT_TRUE(b->copyOnDevice({0, 0}, *q, *p, 1000));
  ASSERT_TRUE(b->fill({0, 0}, *q, 0xab, 10));
  auto back = readBack(*b, {0, 0}, *q, 1000);
  EXPECT_EQ(back[9], 0xab);
  EXPECT_EQ(back[10], data[10]);
  // 2D: 4 rows of 8 bytes into a pitch of 100.
  std::vector<uint8_t> rows(32);
  for (int i = 0; i < 32; ++i) rows[i] = static_cast<uint8_t>(100 + i);
  ASSERT_TRUE(b->copy2DToDevice({0, 0}, *q, 100, bytes(rows), 8, 4));
  std::promise<std::vector<uint8_t>> got;
  ASSERT_TRUE(b->copy2DFromDevice({0, 0}, *q, 100, 8, 4, [&](Status s, const uint8_t* d, uint64_t n, const server::OnWire&) {
    got.set_value(std::vector<uint8_t>(d, d + n));
  }));
  EXPECT_EQ(got.get_future().get(), rows);
  ASSERT_TRUE(b->fill2D({0, 0}, *q, 100, 0, 8, 4));
  auto cleared = readBack(*b, {0, 0}, *q, 400);
  EXPECT_EQ(cleared[300], 0);
  EXPECT_EQ(cleared[308], data[308]);

  std::string log = hooks().log();
  EXPECT_NE(log.find("cuMemcpyHtoDAsync 1000 pinned"), std::string::npos) << log;
  EXPECT_NE(log.find("cuMemcpyDtoHAsync 1000 pinned"), std::string::npos) << log;
  EXPECT_EQ(log.find("pageable"), std::string::npos) << "an async copy from pageable memory blocks: " << log;
  // Staging buffers are reused, not allocated per copy: 40 more copies of the
  // same size, and at most one buffer per copy that can be in flight at once.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(b->copyToDevice({0, 0}, *p, bytes(data), data.size()));
    ASSERT_EQ(readBack(*b, {0, 0}, *p, 1000), data);
  }
  log = hooks().log();
  size_t host_allocs = 0;
  for (size_t at = 0; (at = log.find("cuMemHostAlloc", at)) != std::string::npos; ++at) ++host_allocs;
  EXPECT_LE(host_allocs, 4u) << log;
  EXPECT_TRUE(b->release(*p));
  EXPECT_TRUE(b->release(*q));
}

TEST(CudaBackend, MemoryInfoAndOutOfMemory) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  uint64_t free0 = 0, total = 0;
  ASSERT_TRUE(b->memInfo(0, free0, total));
  EXPECT_EQ(total, 1ull << 30);
  auto p = b->allocate(0, 1 << 20);
  ASSERT_TRUE(p);
  uint64_t free1 = 0;
  ASSERT_TRUE(b->memInfo(0, free1, total));
  EXPECT_EQ(free0 - free1, 1u << 20);
  auto big = b->allocate(0, 2ull << 30);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.status().code(), err::kMemoryAllocation);
  EXPECT_TRUE(b->release(*p));
  EXPECT_EQ(b->release(*p).code(), err::kInvalidDevicePointer);
  EXPECT_EQ(b->allocate(3, 16).status().code(), err::kInvalidDevice);
}

TEST(CudaBackend, DriverErrorsMapToRuntimeErrorsNamingTheCall) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  auto p = b->allocate(0, 64);
  ASSERT_TRUE(p);
  hooks().fail("cuMemsetD8Async", CUDA_ERROR_ECC_UNCORRECTABLE);
  Status s = b->fill({0, 0}, *p, 1, 64);
  EXPECT_EQ(s.code(), 214);  // cudaErrorECCUncorrectable
  EXPECT_NE(s.message().find("cuMemsetD8Async"), std::string::npos) << s.message();
  hooks().fail("cuMemAlloc", CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(b->allocate(0, 64).status().code(), 201);  // cudaErrorDeviceUninitialized
  EXPECT_EQ(cudaErrorFromDriver(CUDA_ERROR_NOT_FOUND), 500);
  EXPECT_EQ(cudaErrorFromDriver(CUDA_ERROR_OUT_OF_MEMORY), 2);
  EXPECT_EQ(cudaErrorFromDriver(CUDA_ERROR_NO_BINARY_FOR_GPU), 209);
  EXPECT_EQ(cudaErrorFromDriver(CUDA_ERROR_CONTEXT_ALREADY_CURRENT), 1);
  EXPECT_EQ(cudaErrorFromDriver(static_cast<CUresult>(916)), 999);  // no runtime equivalent
  EXPECT_EQ(cudaErrorFromDriver(static_cast<CUresult>(12345)), 999);
  EXPECT_TRUE(b->release(*p));
}

TEST(CudaBackend, StreamsAndEventsMapToDriverObjects) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  hooks().clear();
  ASSERT_TRUE(b->createStream({5, 0}, cudaStreamNonBlocking, -1));
  EXPECT_EQ(b->createStream({5, 0}, 0, 0).code(), err::kInvalidValue);
  ASSERT_TRUE(b->createEvent(1, 0, 0));
  ASSERT_TRUE(b->createEvent(2, 0, 0));
  ASSERT_TRUE(b->createEvent(3, 0, cudaEventDisableTiming));
  auto p = b->allocate(0, 4096);
  ASSERT_TRUE(p);
  ASSERT_TRUE(b->recordEvent(1, {5, 0}));
  ASSERT_TRUE(b->fill({5, 0}, *p, 7, 4096));
  ASSERT_TRUE(b->recordEvent(2, {5, 0}));
  ASSERT_TRUE(b->waitEvent({0, 0}, 2));
  std::promise<Status> ev;
  ASSERT_TRUE(b->whenEventDone(2, [&](Status s) { ev.set_value(s); }));
  EXPECT_TRUE(ev.get_future().get());
  auto done = b->eventDone(2);
  ASSERT_TRUE(done);
  EXPECT_TRUE(*done);
  auto ms = b->elapsedMs(1, 2);
  ASSERT_TRUE(ms) << ms.status().message();
  EXPECT_GE(*ms, 0.0f);
  ASSERT_TRUE(b->recordEvent(3, {5, 0}));
  EXPECT_FALSE(b->elapsedMs(1, 3));  // timing disabled
  EXPECT_TRUE(waitStream(*b, {5, 0}));
  auto idle = b->streamIdle({5, 0});
  ASSERT_TRUE(idle);
  EXPECT_TRUE(*idle);
  std::promise<Status> dev;
  ASSERT_TRUE(b->whenDeviceDone(0, [&](Status s) { dev.set_value(s); }));
  EXPECT_TRUE(dev.get_future().get());
  // A host call runs in stream order.
  std::promise<void> ran;
  ASSERT_TRUE(b->hostCall({5, 0}, [&] { ran.set_value(); }));
  ran.get_future().get();
  EXPECT_EQ(b->recordEvent(99, {5, 0}).code(), err::kInvalidResourceHandle);
  EXPECT_EQ(b->fill({77, 0}, *p, 0, 1).code(), err::kInvalidResourceHandle);
  ASSERT_TRUE(b->destroyStream({5, 0}));
  ASSERT_TRUE(b->destroyEvent(1));
  EXPECT_EQ(b->destroyEvent(1).code(), err::kInvalidResourceHandle);
  std::string log = hooks().log();
  EXPECT_NE(log.find("cuStreamCreateWithPriority flags=1 priority=-1"), std::string::npos) << log;
  EXPECT_NE(log.find("cuEventCreate flags=2"), std::string::npos) << log;
  EXPECT_NE(log.find("cuStreamWaitEvent"), std::string::npos) << log;
  EXPECT_NE(log.find("cuLaunchHostFunc"), std::string::npos) << log;
  EXPECT_TRUE(b->release(*p));
}

std::string fatbin(const char* tag) {
  return readFileText(std::string(RGPU_TEST_DATA_DIR) + "/kernels_" + tag + ".fatbin");
}

TEST(CudaBackend, LaunchPassesThePackedParameterBlockAndRuns) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->loadModule(1, 0, fatbin("default")));
  auto bytes_fill = b->registerFunction(10, 1, "_Z6k_fillIfEvPT_S0_i");
  ASSERT_TRUE(bytes_fill) << bytes_fill.status().message();
  EXPECT_EQ(*bytes_fill, 16u);  // float*, float, int
  auto bytes_small = b->registerFunction(11, 1, "_Z7k_smallcbsfdxPv");
  ASSERT_TRUE(bytes_small) << bytes_small.status().message();
  EXPECT_EQ(*bytes_small, 32u);  // offsets 0,1,2,4,8,16,24
  EXPECT_EQ(b->registerFunction(12, 1, "no_such_kernel").status().code(), err::kInvalidDeviceFunction);

  auto p = b->allocate(0, 256 * sizeof(float));
  ASSERT_TRUE(p);
  std::string params(16, '\0');
  DevPtr ptr = *p;
  float v = 2.5f;
  int n = 256;
  std::memcpy(params.data(), &ptr, 8);
  std::memcpy(params.data() + 8, &v, 4);
  std::memcpy(params.data() + 12, &n, 4);
  hooks().clear();
  LaunchConfig cfg;
  cfg.grid = {2, 1, 1};
  cfg.block = {128, 1, 1};
  ASSERT_TRUE(b->launch({0, 0}, 10, cfg, params));
  auto out = readBack(*b, {0, 0}, *p, 256 * sizeof(float));
  float f[256];
  std::memcpy(f, out.data(), sizeof f);
  EXPECT_EQ(f[0], 2.5f);
  EXPECT_EQ(f[255], 2.5f);
  std::string log = hooks().log();
  EXPECT_NE(log.find("cuLaunchKernel _Z6k_fillIfEvPT_S0_i grid=2,1,1 block=128,1,1 shmem=0 params="), std::string::npos)
      << log;
  // Too many threads per block: a configuration error, as the runtime reports it.
  cfg.block = {2048, 1, 1};
  EXPECT_EQ(b->launch({0, 0}, 10, cfg, params).code(), err::kInvalidConfiguration);

  auto attrs = b->functionAttributes(10);
  ASSERT_TRUE(attrs);
  EXPECT_EQ(attrs->ptx_version, 75);
  EXPECT_EQ(attrs->max_threads_per_block, 1024);
  ASSERT_TRUE(b->setFunctionAttribute(10, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000));
  EXPECT_EQ(b->functionAttributes(10)->max_dynamic_shared, 100000);
  auto occ = b->occupancy(10, 256, 0);
  ASSERT_TRUE(occ);
  EXPECT_EQ(*occ, 8);
  EXPECT_TRUE(b->release(*p));
  ASSERT_TRUE(b->unloadModule(1));
  EXPECT_EQ(b->launch({0, 0}, 10, cfg, params).code(), err::kInvalidDeviceFunction);
}

TEST(CudaBackend, NativeGraphsCaptureDeviceWorkOnceAndLaunchItWhole) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->nativeGraphs());
  ASSERT_TRUE(b->loadModule(1, 0, fatbin("default")));
  ASSERT_TRUE(b->registerFunction(10, 1, "_Z6k_fillIfEvPT_S0_i"));
  auto p = b->allocate(0, 256 * sizeof(float));
  ASSERT_TRUE(p);
  std::string params(16, '\0');
  DevPtr ptr = *p;
  float v = 7.0f;
  int n = 256;
  std::memcpy(params.data(), &ptr, 8);
  std::memcpy(params.data() + 8, &v, 4);
  std::memcpy(params.data() + 12, &n, 4);
  LaunchConfig cfg;
  cfg.grid = {2, 1, 1};
  cfg.block = {128, 1, 1};
  ASSERT_TRUE(b->createStream({5, 0}, 0, 0));

  // Recorded, not run: the memory stays as it was until the graph is launched.
  hooks().clear();
  ASSERT_TRUE(b->fill({0, 0}, *p, 0, 256 * sizeof(float)));
  ASSERT_TRUE(waitStream(*b, {0, 0}));
  ASSERT_TRUE(b->beginNativeGraph(0));
  EXPECT_EQ(b->beginNativeGraph(0).code(), err::kStreamCaptureUnsupported);  // one at a time
  ASSERT_TRUE(b->fill({5, 0}, *p, 0xff, 256 * sizeof(float)));
  ASSERT_TRUE(b->launch({5, 0}, 10, cfg, params));
  auto id = b->endNativeGraph(true);
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(readBack(*b, {0, 0}, *p, 4), std::vector<uint8_t>(4, 0));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->launchNativeGraph({5, 0}, *id));
  auto out = readBack(*b, {5, 0}, *p, 256 * sizeof(float));
  float f[256];
  std::memcpy(f, out.data(), sizeof f);
  EXPECT_EQ(f[0], 7.0f);
  EXPECT_EQ(f[255], 7.0f);
  std::string log = hooks().log();
  EXPECT_NE(log.find("cuStreamBeginCapture mode=2"), std::string::npos) << log;  // relaxed
  EXPECT_NE(log.find("cuStreamEndCapture 2 nodes"), std::string::npos) << log;
  size_t launches = 0;
  for (size_t at = log.find("cuGraphLaunch 2 nodes"); at != std::string::npos; at = log.find("cuGraphLaunch", at + 1))
    ++launches;
  EXPECT_EQ(launches, 3u) << log;

  // Work that cannot be a node fails while capturing, and the graph is discarded.
  ASSERT_TRUE(b->beginNativeGraph(0));
  EXPECT_EQ(b->copyToDevice({0, 0}, *p, bytes({1, 2, 3, 4}), 4).code(), err::kStreamCaptureUnsupported);
  EXPECT_EQ(b->whenStreamDone({0, 0}, [](Status) {}).code(), err::kStreamCaptureUnsupported);
  EXPECT_FALSE(b->endNativeGraph(false));
  // A launch the driver refuses invalidates the capture: no graph comes of it.
  ASSERT_TRUE(b->beginNativeGraph(0));
  LaunchConfig bad = cfg;
  bad.block = {2048, 1, 1};
  EXPECT_EQ(b->launch({0, 0}, 10, bad, params).code(), err::kInvalidConfiguration);
  auto refused = b->endNativeGraph(true);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), err::kStreamCaptureInvalidated) << refused.status().message();
  // Streams are the backend's own again; the graph outlives nothing it needs.
  ASSERT_TRUE(waitStream(*b, {5, 0}));
  EXPECT_EQ(b->launchNativeGraph({0, 0}, 999).code(), err::kInvalidValue);
  b->destroyNativeGraph(*id);
  EXPECT_EQ(b->launchNativeGraph({0, 0}, *id).code(), err::kInvalidValue);
  EXPECT_TRUE(b->release(*p));
}

TEST(CudaBackend, NativeGraphsCarryHostCopiesHostCallsAndEventNodes) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  auto p = b->allocate(0, 8);
  ASSERT_TRUE(p);
  ASSERT_TRUE(b->createStream({5, 0}, 0, 0));
  ASSERT_TRUE(b->createStream({6, 0}, 0, 0));
  ASSERT_TRUE(b->createEvent(1, 0, 0));
  ASSERT_TRUE(b->createEvent(2, 0, 0));
  hooks().clear();
  // input -> p, a host call, a record of event 1, a wait for event 2, p -> output
  ASSERT_TRUE(b->beginNativeGraph(0, 8, 8));
  auto [in, out, host] = b->nativeGraphBuffers();
  EXPECT_EQ(host, nullptr);
  ASSERT_NE(in, 0u);
  ASSERT_NE(out, 0u);
  std::atomic<int> calls{0};
  ASSERT_TRUE(b->copyOnDevice({0, 0}, *p, in, 8));
  ASSERT_TRUE(b->hostCall({0, 0}, [&] { ++calls; }));
  ASSERT_TRUE(b->recordEvent(1, {0, 0}));
  ASSERT_TRUE(b->waitEvent({0, 0}, 2));
  ASSERT_TRUE(b->copyOnDevice({0, 0}, out, *p, 8));
  auto id = b->endNativeGraph(true);
  ASSERT_TRUE(id) << id.status().message();
  EXPECT_EQ(calls.load(), 0);  // recorded, not run
  EXPECT_EQ(b->nativeGraphBuffers().in, 0u);  // only while capturing

  // Launches on two streams, each after the one before: the input bytes of
  // each come back in its own output.
  std::mutex mu;
  std::vector<std::vector<uint8_t>> results(4);
  for (uint8_t i = 0; i < 4; ++i) {
    ReadDone done = [&, i](Status r, const uint8_t* d, uint64_t n, const server::OnWire& on_wire) {
      std::lock_guard lock(mu);
      results[i] = r ? std::vector<uint8_t>(d, d + n) : std::vector<uint8_t>{};
      if (on_wire) on_wire();  // the event recorded by the graph counts this reply
    };
    StreamKey s{i % 2 ? 6u : 5u, 0};
    ASSERT_TRUE(b->launchNativeGraph(s, *id, bytes(std::vector<uint8_t>(8, uint8_t(i + 1))), done));
  }
  ASSERT_TRUE(waitStream(*b, {5, 0}));
  ASSERT_TRUE(waitStream(*b, {6, 0}));
  {
    std::lock_guard lock(mu);
    for (uint8_t i = 0; i < 4; ++i) EXPECT_EQ(results[i], std::vector<uint8_t>(8, uint8_t(i + 1))) << int(i);
  }
  EXPECT_EQ(calls.load(), 4);
  // Event 1 was recorded by the last launch, whose reply is on the wire.
  auto done = b->eventDone(1);
  ASSERT_TRUE(done);
  EXPECT_TRUE(*done);
  std::string log = hooks().log();
  EXPECT_NE(log.find("cuEventRecordWithFlags external (captured)"), std::string::npos) << log;
  EXPECT_NE(log.find("cuStreamWaitEvent external (captured)"), std::string::npos) << log;
  EXPECT_NE(log.find("cuStreamEndCapture 4 nodes"), std::string::npos) << log;  // 2 copies, host call, record

  // A launch must bring its input and a reader of its output.
  EXPECT_EQ(b->launchNativeGraph({5, 0}, *id).code(), err::kInvalidValue);
  EXPECT_EQ(b->launchNativeGraph({5, 0}, *id, bytes(std::vector<uint8_t>(4, 0)), [](Status, const uint8_t*, uint64_t,
                                                                                     const server::OnWire&) {})
                .code(),
            err::kInvalidValue);
  b->destroyNativeGraph(*id);  // its buffers and host calls go once the device is idle
  ASSERT_TRUE(waitStream(*b, {5, 0}));

  // A download a host node reads: into the graph's pinned buffer, read by the
  // host call when it runs; the launch's answer comes once the graph is done.
  ASSERT_TRUE(b->beginNativeGraph(0, 8, 0, 8));
  auto bufs = b->nativeGraphBuffers();
  ASSERT_NE(bufs.host, nullptr);
  EXPECT_EQ(bufs.out, 0u);
  std::vector<std::vector<uint8_t>> seen;
  ASSERT_TRUE(b->copyOnDevice({0, 0}, *p, bufs.in, 8));
  ASSERT_TRUE(b->copyToNativeHost({0, 0}, 0, *p, 8));
  EXPECT_EQ(b->copyToNativeHost({0, 0}, 4, *p, 8).code(), err::kInvalidValue);  // past the buffer
  ASSERT_TRUE(b->hostCall({0, 0}, [&, host = bufs.host] { seen.emplace_back(host, host + 8); }));
  auto id2 = b->endNativeGraph(true);
  ASSERT_TRUE(id2) << id2.status().message();
  EXPECT_EQ(b->copyToNativeHost({0, 0}, 0, *p, 8).code(), err::kIllegalState);  // not capturing
  std::atomic<int> answered{0};
  for (uint8_t i = 0; i < 3; ++i)
    ASSERT_TRUE(b->launchNativeGraph({5, 0}, *id2, bytes(std::vector<uint8_t>(8, uint8_t(10 + i))),
                                     [&](Status r, const uint8_t*, uint64_t n, const server::OnWire& w) {
                                       if (r && n == 0) ++answered;
                                       if (w) w();
                                     }));
  ASSERT_TRUE(waitStream(*b, {5, 0}));
  ASSERT_EQ(seen.size(), 3u);
  for (uint8_t i = 0; i < 3; ++i) EXPECT_EQ(seen[i], std::vector<uint8_t>(8, uint8_t(10 + i))) << int(i);
  EXPECT_EQ(answered.load(), 3);
  b->destroyNativeGraph(*id2);
  ASSERT_TRUE(waitStream(*b, {5, 0}));
  EXPECT_TRUE(b->release(*p));
}

TEST(CudaBackend, KernelFaultsAreReportedAtTheNextSynchronisationAndAreSticky) {
  struct ResetSticky {  // later tests get a healthy fake driver whatever happens here
    ~ResetSticky() { hooks().reset_sticky(); }
  } reset;
  auto b = makeBackend();
  ASSERT_TRUE(b);
  std::mutex mu;
  std::vector<Status> async;
  b->setAsyncErrorSink([&](Status s) {
    std::lock_guard l(mu);
    async.push_back(s);
  });
  ASSERT_TRUE(b->loadModule(1, 0, fatbin("default")));
  ASSERT_TRUE(b->registerFunction(10, 1, "_Z6k_fillIfEvPT_S0_i"));
  std::string params(16, '\0');
  uint64_t wild = 0x10;  // not device memory
  int n = 4;
  std::memcpy(params.data(), &wild, 8);
  std::memcpy(params.data() + 12, &n, 4);
  LaunchConfig cfg;
  ASSERT_TRUE(b->launch({0, 0}, 10, cfg, params));  // enqueued: the fault comes later
  Status s = waitStream(*b, {0, 0});
  EXPECT_EQ(s.code(), err::kIllegalAddress) << s.message();
  {
    std::lock_guard l(mu);
    ASSERT_FALSE(async.empty());
    EXPECT_EQ(async[0].code(), err::kIllegalAddress);
  }
  EXPECT_EQ(b->allocate(0, 16).status().code(), err::kIllegalAddress);  // sticky, as on a GPU
}

TEST(CudaBackend, FatbinsWithCodeTheDriverCanUseLoad) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  // kernels_size: sm_90 SASS + PTX 90 -> loads; a PTX-only compute_80 build -> loads (JIT).
  EXPECT_TRUE(b->loadModule(1, 0, fatbin("size")));
  EXPECT_TRUE(b->loadModule(2, 0, fatbin("ptxonly")));
  EXPECT_EQ(b->loadModule(2, 0, fatbin("ptxonly")).code(), err::kInvalidValue);  // id in use
  // Garbage is refused by rgpu's own parser before the driver sees it.
  EXPECT_FALSE(b->loadModule(3, 0, std::string(64, 'x')));
}

TEST(CudaBackend, GlobalsResolveThroughTheDriver) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->loadModule(1, 0, fatbin("default")));
  EXPECT_EQ(b->globalAddress(1, "no_such_variable", 4).status().code(), err::kInvalidSymbol);
  EXPECT_EQ(b->globalAddress(9, "x", 4).status().code(), err::kInvalidResourceHandle);
}

TEST(CudaBackend, ManagedVariablesComeWithTheManagedAllocationHoldingThem) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  std::string ptx = ".version 9.0\n.target sm_80\n.address_size 64\n"
                    ".global .attribute(.managed) .align 4 .u32 counter = 5;\n"
                    ".global .attribute(.managed) .align 8 .f64 sum;\n"
                    ".global .align 4 .u32 plain;\n";
  ptx.push_back('\0');
  ASSERT_TRUE(b->loadModule(1, 0, ptx));
  auto c = b->globalAddress(1, "counter", 4), s = b->globalAddress(1, "sum", 8), p = b->globalAddress(1, "plain", 4);
  ASSERT_TRUE(c && s && p);
  // Packed by the driver: both in one managed allocation, which the client pages whole.
  EXPECT_EQ(c->managed_base % 4096, 0u);
  EXPECT_EQ(c->managed_size, 4096u);
  EXPECT_EQ(c->addr, c->managed_base);
  EXPECT_EQ(s->addr, c->managed_base + 8);
  EXPECT_EQ(s->managed_base, c->managed_base);
  EXPECT_EQ(s->managed_size, 4096u);
  EXPECT_EQ(p->managed_size, 0u);  // an ordinary variable
  EXPECT_EQ(p->size, 4u);
}

// Records what the backend tells a launch gate.
struct RecordingGate final : LaunchGate {
  void queued(int) override { ++queued_n; }
  bool acquire(int) override {
    ++acquired;
    return true;
  }
  void done(int, uint64_t ns, bool held) override {
    ++done_n;
    gpu_ns += ns;
    all_held = all_held && held;
  }
  std::atomic<int> queued_n{0}, acquired{0}, done_n{0};
  std::atomic<uint64_t> gpu_ns{0};
  std::atomic<bool> all_held{true};
};

TEST(CudaBackend, UnderALaunchGateEachKernelIsAdmittedAndChargedItsGpuTime) {
  auto b = makeBackend();
  ASSERT_TRUE(b);
  RecordingGate gate;
  b->setLaunchGate(&gate);
  ASSERT_TRUE(b->loadModule(1, 0, fatbin("default")));
  ASSERT_TRUE(b->registerFunction(10, 1, "_Z6k_fillIfEvPT_S0_i"));
  auto p = b->allocate(0, 4096 * sizeof(float));
  ASSERT_TRUE(p);
  std::string params(16, '\0');
  DevPtr ptr = *p;
  int n = 4096;
  std::memcpy(params.data(), &ptr, 8);
  std::memcpy(params.data() + 12, &n, 4);
  LaunchConfig cfg;
  cfg.grid = {16, 1, 1};
  cfg.block = {256, 1, 1};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->launch({0, 0}, 10, cfg, params));
  EXPECT_TRUE(waitStream(*b, {0, 0}));
  // The gate's done() runs from the completer: wait for all three.
  for (int i = 0; i < 2000 && gate.done_n < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(gate.queued_n, 3);
  EXPECT_EQ(gate.acquired, 3);
  EXPECT_EQ(gate.done_n, 3);
  EXPECT_TRUE(gate.all_held);
  EXPECT_GT(gate.gpu_ns.load(), 0u);
  EXPECT_EQ(b->gpuTimeNs(), gate.gpu_ns.load());
  cfg.block = {4096, 1, 1};  // refused at submission: still released
  EXPECT_FALSE(b->launch({0, 0}, 10, cfg, params));
  EXPECT_EQ(gate.done_n, 4);
  EXPECT_TRUE(b->release(*p));
}

TEST(Nvml, ReportsInventoryAndHealthWithUnknownValuesMarked) {
  auto n = Nvml::load(RGPU_FAKE_NVML_LIB);
  ASSERT_TRUE(n) << n.status().message();
  auto gpus = (*n)->sample();
  ASSERT_TRUE(gpus) << gpus.status().message();
  ASSERT_EQ(gpus->size(), 2u);
  const GpuHealth& g = (*gpus)[0];
  EXPECT_EQ(g.name, "Fake H200 0");
  EXPECT_EQ(g.uuid, "GPU-fa4e0000-0000-0000-0000-000000000000");
  EXPECT_EQ(g.memory_total, 150754820096ull);
  EXPECT_EQ(g.memory_used, 512ull << 20);
  EXPECT_EQ(g.utilization_gpu, 40);
  EXPECT_EQ(g.temperature_c, 31);
  EXPECT_EQ(g.power_mw, 75250);
  EXPECT_EQ((*gpus)[1].power_mw, -1);  // the board cannot tell
  std::string table = formatGpus(*gpus);
  EXPECT_NE(table.find("0  Fake H200 0  GPU-fa4e0000-0000-0000-0000-000000000000  512 / 143771 MiB  util 40 %  31 C  75.2 W"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("util 41 %  32 C  n/a"), std::string::npos) << table;
}

TEST(Nvml, MissingLibraryIsAClearError) {
  auto n = Nvml::load("libnvidia-ml-that-does-not-exist.so.1");
  ASSERT_FALSE(n);
  EXPECT_NE(n.status().message().find("cannot load NVML libnvidia-ml-that-does-not-exist.so.1"), std::string::npos);
}

}  // namespace
}  // namespace rgpu::server::cuda

namespace rgpu::server::cuda {
namespace {

TEST(CudaBackend, WorkThatMaySynchroniseTheDeviceNeverHoldsUpCompletions) {
  // cuMemFree and cuModuleUnload may block until the device is idle. Run on
  // the completer thread, one would hold up every other completion (and the
  // kernel watchdog) for as long; afterDeviceDone runs them on the releaser.
  auto b = makeBackend();
  ASSERT_TRUE(b);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<Status> blocking_done;
  ASSERT_TRUE(b->afterDeviceDone(
      0,
      [released] {
        released.wait();  // as a free waiting for a busy device would
        return Status::ok();
      },
      [&](Status s) { blocking_done.set_value(s); }));
  ASSERT_TRUE(b->createStream({7, 0}, 0, 0));
  auto p = b->allocate(0, 256);
  ASSERT_TRUE(p);
  ASSERT_TRUE(b->fill({7, 0}, *p, 1, 256));
  std::promise<Status> other;
  ASSERT_TRUE(b->whenStreamDone({7, 0}, [&](Status s) { other.set_value(s); }));
  auto f = other.get_future();
  EXPECT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a completion waited for blocking work queued before it";
  release.set_value();
  auto d = blocking_done.get_future();
  ASSERT_EQ(d.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(d.get());
  EXPECT_TRUE(b->destroyStream({7, 0}));
}

}  // namespace
}  // namespace rgpu::server::cuda
