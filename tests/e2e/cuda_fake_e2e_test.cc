// End to end through the CUDA backend: rgpu-server with backend = "cuda" on the
// fake driver (tests/fake_driver), unchanged CUDA programs on the client. The
// same programs run on a real GPU under the `gpu` label (tests/gpu/).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>
#include <cstring>
#include <regex>
#include <sstream>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string example(const char* name) { return std::string(RGPU_EXAMPLES_DIR) + "/" + name; }
std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

class CudaFakeE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    makeCerts(dir_->path());
    ::setenv("RGPU_FAKE_CUDA_LOG", dir_->file("driver.log").c_str(), 1);
    server_ = new ServerProcess(dir_->path(), cudaServerToml(dir_->path(), "cuda", RGPU_FAKE_CUDA_LIB));
    ::unsetenv("RGPU_FAKE_CUDA_LOG");
    writeFile(dir_->file("client.toml"), clientToml(dir_->path(), server_->port()));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static RunResult program(const std::string& path) {
    return run(path, "RGPU_CONFIG=" + dir_->file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  }
  static inline TempDir* dir_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
};

TEST_F(CudaFakeE2E, DeviceQueryReportsTheDriversDevice) {
  RunResult r = program(example("device_query"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("1 device(s), runtime 13000, driver 13000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rgpu fake GPU 0, compute capability 9.0, 132 SMs, 1.0 GiB"), std::string::npos) << r.output;
  EXPECT_NE(server_->log().find("CUDA driver 13000"), std::string::npos) << server_->log();
}

TEST_F(CudaFakeE2E, ExamplesPassTheirChecks) {
  for (const char* name : {"memory", "streams", "vector_add", "matmul", "reduction"}) {
    RunResult r = program(example(name));
    EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(name) + ": all checks passed"), std::string::npos) << r.output;
  }
}

TEST_F(CudaFakeE2E, KernelFeaturesAndOtherBuildsPass) {
  RunResult k = program(testProgram("kernels"));
  EXPECT_EQ(k.code, 0) << k.output;
  EXPECT_NE(k.output.find("kernels: all checks passed"), std::string::npos) << k.output;
  // Device printf, written by the driver to the worker's stdout, reaches the program's stdout.
  EXPECT_NE(k.output.find("hello from thread 2 of block 1: 42 1.00 ok"), std::string::npos) << k.output;
  for (const char* name : {"streams_ptds", "memory_ptds", "ptx_only_matmul"}) {
    RunResult r = program(testProgram(name));
    EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
  }
}

TEST_F(CudaFakeE2E, GraphsRunThroughTheDriversStreams) {
  // Every node kind, host copies and patterned memsets (cuMemsetD2D32Async) included.
  RunResult r = program(testProgram("graphs"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("graphs: all checks passed"), std::string::npos) << r.output;
}

TEST_F(CudaFakeE2E, AGraphIsOneCUgraphExecAndEachLaunchOneCuGraphLaunch) {
  std::string before = readFile(dir_->file("driver.log"));
  RunResult r = program(testProgram("graph_native"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("graph_native: 51 launches of a 23-node graph, all checks passed"), std::string::npos)
      << r.output;
  std::string log = readFile(dir_->file("driver.log")).substr(before.size());
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  // Captured twice (once more after a cudaFree elsewhere), each time whole:
  // memset, 20 kernels, the device copy and cuBLAS's axpy.
  EXPECT_EQ(count("cuStreamEndCapture 23 nodes\n"), 2u) << log;
  EXPECT_EQ(count("cuGraphInstantiateWithFlags 23 nodes"), 2u) << log;
  EXPECT_EQ(count("cuGraphLaunch 23 nodes"), 51u) << log;
  // The second graph: native for its first launch; after its memory was
  // freed the rebuild is refused and the launch runs node by node.
  EXPECT_EQ(count("cuGraphLaunch 2 nodes"), 1u) << log;
  // The graph with host copies and a host function: upload from the graph's
  // input buffer, kernel, host node, download into its output buffer.
  EXPECT_EQ(count("cuStreamEndCapture 4 nodes\n"), 1u) << log;
  EXPECT_EQ(count("cuGraphLaunch 4 nodes"), 10u) << log;
  // The explicit graph's event record and wait nodes are the driver's
  // external event nodes; 40 launches of a one-kernel graph alternate streams
  // and are each one cuGraphLaunch; so are the 55 launches of the captured
  // fork-join graph (upload, memset, device copy, three kernels, a download
  // into the graph's pinned buffer, the host function that sends it first).
  before = readFile(dir_->file("driver.log"));
  RunResult g = program(testProgram("graphs"));
  ASSERT_EQ(g.code, 0) << g.output;
  log = readFile(dir_->file("driver.log")).substr(before.size());
  EXPECT_EQ(count("(invalidated)"), 0u) << log;
  EXPECT_EQ(count("cuEventRecord on a capturing stream"), 0u) << log;
  EXPECT_GE(count("cuGraphLaunch 1 nodes"), 40u) << log;
  EXPECT_GE(count("cuGraphLaunch 8 nodes"), 55u) << log;
  EXPECT_GE(count("cuEventRecordWithFlags external (captured)"), 1u) << log;
  EXPECT_GE(count("cuStreamWaitEvent external (captured)"), 1u) << log;
}

TEST_F(CudaFakeE2E, ManagedMemoryTravelsThroughTheDriversCopies) {
  RunResult r = run(testProgram("managed"),
                    "RGPU_MANAGED_STATS=1 RGPU_CONFIG=" + dir_->file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("all checks passed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rgpu managed memory: 2097152 bytes to the device, 3211264 bytes to the host"), std::string::npos)
      << r.output;
}

TEST_F(CudaFakeE2E, MappedHostMemoryTravelsThroughTheDriversCopies) {
  RunResult r = program(testProgram("mapped"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("all checks passed"), std::string::npos) << r.output;
}

TEST_F(CudaFakeE2E, ArraysTexturesAndSurfacesAreTheDriversOwn) {
  // The driver's objects, sampled and written by the programs' kernels (the
  // fake runs them on rgpu's interpreter, reading the driver's own arrays).
  RunResult r = program(testProgram("arrays"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("surfaces read, written, clamped and zeroed in 2D, 3D and layered arrays"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("arrays: every format and shape round-tripped through every copy form, all checks passed"),
            std::string::npos)
      << r.output;
  RunResult t = program(testProgram("textures"));
  EXPECT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("every address mode and filter, formats, shapes, mipmaps, gathers and a rotated image match the "
                         "model"),
            std::string::npos)
      << t.output;
  EXPECT_NE(t.output.find("textures: all checks passed"), std::string::npos) << t.output;
  std::string log = readFile(dir_->file("driver.log"));
  EXPECT_NE(log.find("cuArray3DCreate 64x64x0 flags=2"), std::string::npos) << log;
  EXPECT_NE(log.find("cuArray3DCreate 16x1x0 flags=0 format=194x4"), std::string::npos) << log;  // CU_AD_FORMAT_UNORM_INT8X4
  EXPECT_NE(log.find("cuArray3DCreate 9x7x5 flags=0 format=203x4"), std::string::npos) << log;   // CU_AD_FORMAT_SNORM_INT16X4
  EXPECT_NE(log.find("cuMipmappedArrayCreate levels=7"), std::string::npos) << log;
  EXPECT_NE(log.find("cuMemcpy3DAsync"), std::string::npos) << log;
  EXPECT_NE(log.find("cuTexObjectCreate resType=0 flags=1 filter=1"), std::string::npos) << log;  // array, read as integer, linear
  EXPECT_NE(log.find("cuTexObjectCreate resType=2"), std::string::npos) << log;  // linear memory
  EXPECT_NE(log.find("cuArrayDestroy"), std::string::npos) << log;
}

TEST_F(CudaFakeE2E, ArrayCopyNodesRunInTheDriversGraphs) {
  std::string before = readFile(dir_->file("driver.log"));
  RunResult r = program(testProgram("array_graphs"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("array_graphs: all checks passed"), std::string::npos) << r.output;
  std::string log = readFile(dir_->file("driver.log")).substr(before.size());
  EXPECT_EQ(log.find("(invalidated)"), std::string::npos) << log;
  // Native graphs' nodes: the 24x10x3 float array copies, and the captured layer copies.
  EXPECT_NE(log.find("cuMemcpy3DAsync 96x10x3 (captured)"), std::string::npos) << log;
  EXPECT_NE(log.find("cuMemcpy3DAsync 66x7x1 (captured)"), std::string::npos) << log;
  EXPECT_NE(log.find("cuGraphLaunch 65 nodes"), std::string::npos) << log;
}

TEST_F(CudaFakeE2E, ManagedVariablesArePagedInTheDriversManagedAllocation) {
  // The driver packs a module's __managed__ variables into one managed
  // allocation, off page boundaries; the client pages that allocation whole.
  RunResult r = program(testProgram("managed_var"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("managed_var: initial value, kernel, host and symbol updates, all checks passed"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("managed_var: table at page offset 4\n"), std::string::npos) << r.output;  // after counter
}

TEST_F(CudaFakeE2E, ConditionalHandlesAreRefusedAsUnsupported) {
  // The driver's handles belong to the driver graph that will hold the node,
  // which the server makes only at the graph's first launch (docs/limits.md).
  RunResult r = program(testProgram("conditional"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("conditional: cudaGraphConditionalHandleCreate -> cudaErrorNotSupported"), std::string::npos)
      << r.output;
}

TEST_F(CudaFakeE2E, ALibrarysPtxGoesToTheDriverAsItCame) {
  std::string before = readFile(dir_->file("driver.log"));
  RunResult r = program(testProgram("library"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("library: NVRTC kernels loaded, launched and unloaded, all checks passed"), std::string::npos)
      << r.output;
  std::string log = readFile(dir_->file("driver.log")).substr(before.size());
  // NVRTC's compute_80 PTX, loaded twice (from memory and from a file) and unloaded twice.
  size_t loads = 0, unloads = 0;
  for (size_t at = log.find("cuModuleLoadData ptx=80"); at != std::string::npos; at = log.find("cuModuleLoadData ptx=80", at + 1))
    ++loads;
  for (size_t at = log.find("cuModuleUnload"); at != std::string::npos; at = log.find("cuModuleUnload", at + 1)) ++unloads;
  EXPECT_EQ(loads, 2u) << log;
  EXPECT_GE(unloads, 2u) << log;
}

TEST_F(CudaFakeE2E, ClusterLaunchesReachTheDriverWithTheirClusterDimension) {
  std::string before = readFile(dir_->file("driver.log"));
  RunResult r = program(testProgram("clusters"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("clusters: distributed shared memory, cluster barriers, cluster launches: all checks passed"),
            std::string::npos)
      << r.output;
  std::string log = readFile(dir_->file("driver.log")).substr(before.size());
  // The launch attribute as CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; __cluster_dims__ from the kernel itself.
  EXPECT_NE(log.find("cuLaunchKernelEx cluster=4,1,1 _Z10clusterSumPKiPi grid=12,1,1"), std::string::npos) << log;
  EXPECT_NE(log.find("cuLaunchKernel cluster=2,1,1 _Z4ringPi grid=8,1,1"), std::string::npos) << log;
}

TEST_F(CudaFakeE2E, CooperativeLaunchesGoThroughCuLaunchKernelExWithTheAttribute) {
  RunResult r = program(testProgram("cooperative"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cooperative: all checks passed"), std::string::npos) << r.output;
}

// Without [checkpoint] device malloc is the driver's: the limit goes to
// cuCtxSetLimit, and the driver refuses it once a kernel used the heap.
TEST_F(CudaFakeE2E, DeviceMallocUsesTheDriversHeapOfTheLimitSet) {
  RunResult r = program(testProgram("device_malloc"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("device_malloc: all checks passed"), std::string::npos) << r.output;
  const std::string driver = readFile(dir_->file("driver.log"));
  EXPECT_NE(driver.find("cuCtxSetLimit 2=16777216"), std::string::npos) << driver;
  EXPECT_EQ(server_->log().find("malloc heap:"), std::string::npos) << "not rgpu's heap:\n" << server_->log();
}

TEST_F(CudaFakeE2E, LaunchesReachTheDriverWithTheirPackedParameterBlocks) {
  RunResult r = program(testProgram("launch_check"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("oversized block: cudaErrorInvalidConfiguration"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kernel wrote: 1"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("pointer: 0x([0-9a-f]+)")));
  uint64_t ptr = std::stoull(m[1].str(), nullptr, 16);
  unsigned char block[40] = {0};  // k_params('x', -7, 2.5, float4(1,2,3,4), ptr)
  block[0] = 'x';
  int i = -7;
  double d = 2.5;
  float v[4] = {1, 2, 3, 4};
  std::memcpy(block + 4, &i, 4);
  std::memcpy(block + 8, &d, 8);
  std::memcpy(block + 16, v, 16);
  std::memcpy(block + 32, &ptr, 8);
  std::string hex;
  char b[3];
  for (unsigned char c : block) {
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  std::string log = readFile(dir_->file("driver.log"));
  EXPECT_NE(log.find("cuLaunchKernel _Z8k_paramscid6float4Pi grid=3,2,1 block=32,4,2 shmem=0 params=" + hex),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("cuLaunchKernel _Z7k_shmemPf grid=5,1,1 block=128,1,1 shmem=4096"), std::string::npos) << log;
  EXPECT_EQ(log.find("pageable"), std::string::npos) << "copies must go through pinned staging";
}

TEST_F(CudaFakeE2E, IllegalAddressIsStickyForThatClientOnly) {
  RunResult r = program(testProgram("faults") + " illegal");
  EXPECT_NE(r.output.find("synchronize: cudaErrorIllegalAddress"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("later call: cudaErrorIllegalAddress"), std::string::npos) << r.output;
  RunResult after = program(example("vector_add"));  // a new session, a new worker and context
  EXPECT_EQ(after.code, 0) << after.output;
}

TEST_F(CudaFakeE2E, FailedDeviceAssertIsStickyAndItsMessageReachesTheClient) {
  RunResult r = program(testProgram("faults") + " assert");
  EXPECT_NE(r.output.find("Assertion `n > 100` failed."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("synchronize: cudaErrorAssert"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("later call: cudaErrorAssert"), std::string::npos) << r.output;
}

TEST_F(CudaFakeE2E, FatbinWithoutCodeForTheGpuGetsARebuildHint) {
  // -rdc=true for the default sm_75: SASS only, which an sm_90 device cannot run.
  RunResult r = program(testProgram("rdc_vecadd"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("has no code for device 0 (sm_90)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rebuild with -arch=sm_90"), std::string::npos) << r.output;
}

TEST_F(CudaFakeE2E, GpuBenchmarkProgramRuns) {
  RunResult r = program(testProgram("gpu_bench") + " --quick");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* f : {"figure sync_roundtrip_us ", "figure launch_rate ", "figure h2d_bandwidth ",
                        "figure d2h_bandwidth ", "gpu_bench: done"})
    EXPECT_NE(r.output.find(f), std::string::npos) << r.output;
}

// cuBLAS on the CUDA backend: the worker loads "NVIDIA's" cuBLAS (here the
// fake one, on the fake driver) and runs every call with it.
TEST_F(CudaFakeE2E, EveryImplementedCublasCallRunsThroughNvidiasLibraryInTheSessionsStreams) {
  RunResult r = program(testProgram("cublas_check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" checks, 0 failed"), std::string::npos) << r.output;
  std::string log = readFile(dir_->file("driver.log"));
  for (const char* call : {"cublasSaxpy_v2_64", "cublasDdot_v2_64", "cublasIsamax_v2", "cublasIsamax_v2_64",
                           "cublasSgemv_v2_64", "cublasDger_v2_64", "cublasGemmEx_64", "cublasGemmStridedBatchedEx_64",
                           "cublasGemmBatchedEx_64"})
    EXPECT_NE(log.find(call), std::string::npos) << call << " never reached the library\n" << log.substr(0, 4000);
  EXPECT_NE(server_->log().find("cuBLAS loaded"), std::string::npos) << server_->log();
}

TEST_F(CudaFakeE2E, CublasLtMatmulsUseTheHeuristicsAlgorithmWhenTheLibraryAcceptsIt) {
  RunResult r = program(testProgram("cublaslt_check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" checks, 0 failed"), std::string::npos) << r.output;
  std::string log = readFile(dir_->file("driver.log"));
  EXPECT_NE(log.find("cublasLtMatmul algo=heuristic"), std::string::npos) << log.substr(0, 4000);
  EXPECT_NE(log.find("cublasLtMatmul algo=default"), std::string::npos);  // calls without one
}

TEST_F(CudaFakeE2E, TheMlpTrainingExampleLearnsWithNvidiasCublas) {
  RunResult r = program(std::string(RGPU_EXAMPLES_DIR) + "/mlp_train 20");
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("loss ([0-9.]+) -> ([0-9.]+) over 20 epochs"))) << r.output;
  EXPECT_LT(std::stod(m[2].str()), std::stod(m[1].str()) / 2) << r.output;
}

// Which backend the daemon picks.
TEST(BackendChoice, AutoUsesCudaWhenTheDriverSeesAGpu) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), cudaServerToml(dir.path(), "auto", RGPU_FAKE_CUDA_LIB));
  EXPECT_NE(server.log().find("backend = \"auto\": CUDA driver 13000"), std::string::npos) << server.log();
  EXPECT_NE(server.log().find("(backend cuda,"), std::string::npos) << server.log();
}

TEST(BackendChoice, TheDaemonLogsGpuHealthFromNvmlAndListGpusPrintsIt) {
  TempDir dir;
  makeCerts(dir.path());
  std::string toml = cudaServerToml(dir.path(), "cuda", RGPU_FAKE_CUDA_LIB) + "nvml_library = \"" +
                     RGPU_FAKE_NVML_LIB + "\"\n";
  {
    ServerProcess server(dir.path(), toml);
    EXPECT_NE(server.log().find("gpu 0  Fake H200 0  GPU-fa4e0000"), std::string::npos) << server.log();
  }
  RunResult r = run(std::string(RGPU_SERVER_BIN) + " --config " + dir.file("server.toml") + " --list-gpus");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("1  Fake H200 1  GPU-fa4e0000-0000-0000-0000-000000000001  1024 / 143771 MiB  util 41 %"),
            std::string::npos)
      << r.output;
  RunResult none = run(std::string(RGPU_SERVER_BIN) + " --list-gpus");  // NVIDIA's NVML: absent here, or real
  if (none.code != 0) {
    EXPECT_NE(none.output.find("cannot load NVML libnvidia-ml.so.1"), std::string::npos) << none.output;
  }
}

TEST(BackendChoice, AutoFallsBackToSimAndSaysWhy) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), cudaServerToml(dir.path(), "auto", dir.file("no-libcuda.so.1")));
  EXPECT_NE(server.log().find("backend = \"auto\": using the sim backend, because cannot load the CUDA driver"),
            std::string::npos)
      << server.log();
  EXPECT_NE(server.log().find("(backend sim,"), std::string::npos) << server.log();
  writeFile(dir.file("client.toml"), clientToml(dir.path(), server.port()));
  RunResult r = run(example("device_query"),
                    "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rgpu test device"), std::string::npos) << r.output;
}

TEST(BackendChoice, CudaWithoutAGpuFailsAtStartWithAClearMessage) {
  TempDir dir;
  makeCerts(dir.path());
  ::setenv("RGPU_FAKE_CUDA_DEVICES", "0", 1);
  std::string why;
  try {
    ServerProcess server(dir.path(), cudaServerToml(dir.path(), "cuda", RGPU_FAKE_CUDA_LIB));
  } catch (const std::exception& e) {
    why = e.what();
  }
  ::unsetenv("RGPU_FAKE_CUDA_DEVICES");
  EXPECT_NE(why.find("backend = \"cuda\", but no GPU is usable: the CUDA driver sees no GPU"), std::string::npos)
      << why;
}

}  // namespace
}  // namespace rgpu::test

namespace rgpu::test {
namespace {

// Device memory one session leaves — freed, left allocated at exit, or held
// by a worker that was killed — is never what the next session's allocation
// shows. The fake driver keeps device memory in a file across processes
// (RGPU_FAKE_CUDA_VRAM) and hands it out unzeroed, as a GPU may; with
// [cuda] scrub off the leftovers show, which is what the check would catch.
// The scrub is not waited for: the session's streams wait for it instead.
// With the fake driver running each operation after a random delay, a copy
// into fresh memory on a stream of the program's own must still land after
// the zeroing (else the program reads back zeroes).
TEST(CudaScrub, AScrubAlwaysRunsBeforeTheProgramsFirstUseOfTheMemory) {
  TempDir dir;
  makeCerts(dir.path());
  ::setenv("RGPU_FAKE_CUDA_JITTER_US", "3000", 1);
  ServerProcess server(dir.path(), cudaServerToml(dir.path(), "cuda", RGPU_FAKE_CUDA_LIB));
  ::unsetenv("RGPU_FAKE_CUDA_JITTER_US");
  writeFile(dir.file("client.toml"), clientToml(dir.path(), server.port()));
  RunResult r = run(testProgram("scrub_client") + " race 65536 40",
                    "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("race: 0 of 40 rounds lost bytes"), std::string::npos) << r.output;
  server.stop();
  std::smatch m;
  const std::string log = server.log();
  EXPECT_TRUE(std::regex_search(log, m, std::regex("scrub: 2 MiB of fresh device memory zeroed before the session used it"))) << log;
}

TEST(CudaScrub, NoSessionSeesWhatAnotherLeftInDeviceMemory) {
  TempDir dir;
  makeCerts(dir.path());
  const std::string program = testProgram("scrub_client");
  const std::string bytes = std::to_string(4u << 20);
  auto server = [&](bool scrub) {
    std::string toml = cudaServerToml(dir.path(), "cuda", RGPU_FAKE_CUDA_LIB);
    toml.replace(toml.find("[cuda]\n"), 7, std::string("[cuda]\nscrub = ") + (scrub ? "true" : "false") + "\n");
    ::setenv("RGPU_FAKE_CUDA_VRAM", dir.file("vram").c_str(), 1);
    auto s = std::make_unique<ServerProcess>(dir.path(), toml);
    ::unsetenv("RGPU_FAKE_CUDA_VRAM");
    writeFile(dir.file("client.toml"), clientToml(dir.path(), s->port()));
    return s;
  };
  auto as = [&](const std::string& args) {
    return run(program + " " + args, "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  };
  const std::string none = "scan: 0 of " + bytes + " bytes hold another session's pattern";
  {
    auto s = server(false);
    ASSERT_EQ(as("fill " + bytes + " free").code, 0);
    RunResult scan = as("scan " + bytes);
    EXPECT_NE(scan.output.find("scan: " + bytes + " of " + bytes), std::string::npos)
        << "without scrubbing the next session sees the bytes:\n" << scan.output;
    // An array's memory too (the fake keeps arrays in its device memory, as a GPU does).
    ASSERT_EQ(as("fillarray 1024 1024 free").code, 0);
    RunResult array = as("scanarray 1024 1024");
    EXPECT_NE(array.output.find("scan: 1048576 of 1048576 array bytes"), std::string::npos) << array.output;
  }
  auto s = server(true);
  ASSERT_EQ(as("fill " + bytes + " free").code, 0);
  RunResult after_free = as("scan " + bytes);
  EXPECT_NE(after_free.output.find(none), std::string::npos) << after_free.output;
  ASSERT_EQ(as("fill " + bytes + " leave").code, 0);
  RunResult after_exit = as("scan " + bytes);
  EXPECT_NE(after_exit.output.find(none), std::string::npos) << after_exit.output;
  // A worker killed while its session holds the memory: nothing of it can scrub.
  std::string out = dir.file("holder.out");
  std::thread holder([&] { as("fill " + bytes + " hold >" + out + " 2>&1"); });
  for (int i = 0; i < 2000 && readFile(out).find("holding") == std::string::npos; ++i) usleep(5000);
  std::ifstream children("/proc/" + std::to_string(s->pid()) + "/task/" + std::to_string(s->pid()) + "/children");
  std::vector<pid_t> workers;
  for (pid_t p; children >> p;) workers.push_back(p);
  ASSERT_EQ(workers.size(), 1u) << s->log();
  ::kill(workers[0], SIGKILL);
  holder.join();
  for (int i = 0; i < 2000 && s->log().find("killed by signal 9") == std::string::npos; ++i) usleep(5000);
  RunResult after_kill = as("scan " + bytes);
  EXPECT_NE(after_kill.output.find(none), std::string::npos) << after_kill.output;
  // Arrays are zeroed as well (the killed holder left its pattern where they go).
  const std::string no_array = "scan: 0 of 1048576 array bytes hold another session's pattern";
  RunResult before = as("scanarray 1024 1024");
  EXPECT_NE(before.output.find(no_array), std::string::npos) << before.output;
  for (const char* end : {"free", "leave"}) {
    ASSERT_EQ(as(std::string("fillarray 1024 1024 ") + end).code, 0);
    RunResult array = as("scanarray 1024 1024");
    EXPECT_NE(array.output.find(no_array), std::string::npos) << end << ": " << array.output;
  }
  // Each worker says what scrubbing cost it (here the fake driver's memset of host memory).
  std::smatch m;
  const std::string log = s->log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("scrub: 4 MiB of fresh device memory zeroed [^\n]*"))) << log;
  std::printf("%s\n", m[0].str().c_str());
}

}  // namespace
}  // namespace rgpu::test
