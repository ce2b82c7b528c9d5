// End to end: CUDA programs compiled by nvcc with -cudart shared run unchanged
// against rgpu's libcudart.so.13 and a real rgpu-server over TLS.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <regex>
#include <sstream>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

class E2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    makeCerts(dir_->path());
    server_ = new ServerProcess(dir_->path(), serverToml(dir_->path(), "", "launch_log = \"" + dir_->file("launches.log") + "\""));
    writeFile(dir_->file("client.toml"), clientToml(dir_->path(), server_->port()));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static std::string env() {
    return "RGPU_CONFIG=" + dir_->file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR;
  }
  static RunResult program(const std::string& path) { return run(path, env()); }
  static inline TempDir* dir_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
};

std::string example(const char* name) { return std::string(RGPU_EXAMPLES_DIR) + "/" + name; }
std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

TEST_F(E2E, DeviceQueryReportsTheServersDevices) {
  RunResult r = program(example("device_query"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("1 device(s), runtime 13000, driver 13000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rgpu test device, compute capability 9.0, 8 SMs, 1.0 GiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1024 MiB free of 1024 MiB"), std::string::npos) << r.output;
}

TEST_F(E2E, MemoryExamplePassesAllChecks) {
  RunResult r = program(example("memory"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("memory: all checks passed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("copy from a pointer never allocated: cudaErrorInvalidValue"), std::string::npos) << r.output;
}

TEST_F(E2E, StreamsExamplePassesAllChecks) {
  RunResult r = program(example("streams"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("streams: all checks passed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cudaStreamLegacy and cudaStreamPerThread: work"), std::string::npos) << r.output;
}

TEST_F(E2E, PerThreadDefaultStreamBuildsWork) {
  RunResult s = program(testProgram("streams_ptds"));
  EXPECT_EQ(s.code, 0) << s.output;
  RunResult m = program(testProgram("memory_ptds"));
  EXPECT_EQ(m.code, 0) << m.output;
}

std::string hexOf(const void* p, size_t n) {
  std::string out;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<const unsigned char*>(p)[i]);
    out += b;
  }
  return out;
}

TEST_F(E2E, LaunchesDeliverKernelGridBlockSharedMemoryAndParameterBytes) {
  std::remove(dir_->file("launches.log").c_str());
  RunResult r = program(testProgram("launch_check"));
  ASSERT_EQ(r.code, 0) << r.output;
  // NVIDIA's library must not have been picked up instead of ours.
  EXPECT_NE(r.output.find(std::string("libcudart: ") + RGPU_CLIENT_LIBDIR), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("launch 1: cudaSuccess"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("launch 4 (cudaLaunchKernel): cudaSuccess"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("oversized block: cudaErrorInvalidConfiguration"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("synchronize after launches: cudaSuccess"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kernel wrote: 1"), std::string::npos) << r.output;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("pointer: 0x([0-9a-f]+)")));
  uint64_t ptr = std::stoull(m[1].str(), nullptr, 16);
  // k_params('x', -7, 2.5, float4(1,2,3,4), ptr): offsets 0, 4, 8, 16, 32.
  unsigned char block[40] = {0};
  block[0] = 'x';
  int i = -7;
  double d = 2.5;
  float v[4] = {1, 2, 3, 4};
  std::memcpy(block + 4, &i, 4);
  std::memcpy(block + 8, &d, 8);
  std::memcpy(block + 16, v, 16);
  std::memcpy(block + 32, &ptr, 8);
  std::string params = hexOf(block, sizeof block);
  double eighth = 0.125;
  uint64_t tmpl_ptr = ptr + 100 * sizeof(double), shmem_ptr = ptr + 256 * sizeof(float);
  std::string tmpl_params = hexOf(&tmpl_ptr, 8) + hexOf(&eighth, 8);
  std::string ptr_hex = hexOf(&shmem_ptr, 8);

  std::string log = readFile(dir_->file("launches.log"));
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << log;
  EXPECT_NE(lines[0].find("name=_Z8k_paramscid6float4Pi grid=3,2,1 block=32,4,2 shmem=0 stream=0"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("params=" + params), std::string::npos) << lines[0] << "\nwant " << params;
  EXPECT_NE(lines[1].find("name=_Z7k_shmemPf grid=5,1,1 block=128,1,1 shmem=4096"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("params=" + ptr_hex), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1].find("stream=0 "), std::string::npos) << "launched on a created stream: " << lines[1];
  EXPECT_NE(lines[2].find("name=_Z6k_tmplIdEvPT_S0_ grid=1,1,1 block=1,1,1"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("params=" + tmpl_params), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("name=_Z8k_paramscid6float4Pi grid=7,1,1 block=64,1,1"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("params=" + params), std::string::npos) << lines[3];
}

TEST_F(E2E, UnsupportedCallsFailWithNotSupportedAndLogOnce) {
  RunResult r = program(testProgram("unsupported"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cudaIpcGetMemHandle: cudaErrorNotSupported, again: cudaErrorNotSupported"), std::string::npos) << r.output;
  // The answer of the call only: a later cudaGetLastError() is not failed by it.
  EXPECT_NE(r.output.find("last error: cudaSuccess"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cudaMallocArray(sparse): cudaErrorNotSupported"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cudaMalloc: cudaSuccess"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("names: cudaSuccess cudaErrorMemoryAllocation cudaErrorIllegalAddress cudaErrorStreamCaptureUnsupported"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("strings: out of memory | invalid argument | operation not supported"), std::string::npos) << r.output;
  // NVIDIA's texts, unknown codes included (client/gen_error_table.cc).
  EXPECT_NE(r.output.find("unknown code: unrecognized error code | unrecognized error code"), std::string::npos) << r.output;
  std::string line = "cudaIpcGetMemHandle is not supported by rgpu";
  size_t first = r.output.find(line);
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(line, first + 1), std::string::npos) << "logged twice:\n" << r.output;
}

// Every name NVIDIA's library exports, each with its version node, and no other.
void expectNvidiasExports(const std::string& lib) {
  std::string ours = std::string(RGPU_CLIENT_LIBDIR) + "/" + lib;
  std::string nvidia = std::string(RGPU_CUDA_HOME) + "/lib64/" + lib;
  auto names = [](const std::string& path) {
    return run("nm -D --defined-only --with-symbol-versions " + path + " | awk '{print $3}' | sort").output;
  };
  std::string a = names(ours), b = names(nvidia);
  ASSERT_GT(b.size(), 1000u) << "NVIDIA's library not found at " << nvidia;
  EXPECT_EQ(a, b) << lib;
  EXPECT_NE(run("readelf -d " + ours).output.find("Library soname: [" + lib + "]"), std::string::npos) << lib;
}

TEST(Exports, EveryNameOfNvidiasRuntimeWithItsVersionNode) { expectNvidiasExports("libcudart.so.13"); }
TEST(Exports, EveryNameOfNvidiasCurandWithItsVersionNode) { expectNvidiasExports("libcurand.so.10"); }
TEST(Exports, EveryNameOfNvidiasCufftWithItsVersionNode) { expectNvidiasExports("libcufft.so.12"); }
TEST(Exports, EveryNameOfNvidiasCusolverWithItsVersionNode) { expectNvidiasExports("libcusolver.so.12"); }
TEST(Exports, EveryNameOfNvidiasCusparseWithItsVersionNode) { expectNvidiasExports("libcusparse.so.12"); }
TEST(Exports, EveryNameOfNvidiasCudnnWithItsVersionNode) { expectNvidiasExports("libcudnn.so.9"); }
TEST(Exports, EveryNameOfNvidiasCublasAndCublasLtWithTheirVersionNodes) {
  expectNvidiasExports("libcublas.so.13");
  expectNvidiasExports("libcublasLt.so.13");
}

TEST_F(E2E, ProgramsStartWithEagerBindingSoNoNameIsMissing) {
  RunResult r = run(example("device_query"), env() + " LD_BIND_NOW=1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("no version information"), std::string::npos) << r.output;
}

TEST_F(E2E, KernelExamplesMatchTheirCpuReferences) {
  for (const char* name : {"vector_add", "matmul", "reduction"}) {
    RunResult r = program(example(name));
    EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string(name) + ": all checks passed"), std::string::npos) << r.output;
  }
}

TEST_F(E2E, KernelFeaturesMatchTheirCpuReferences) {
  RunResult r = program(testProgram("kernels"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("kernels: all checks passed"), std::string::npos) << r.output;
  // Device printf reaches the program's stdout.
  EXPECT_NE(r.output.find("hello from thread 2 of block 1: 42 1.00 ok"), std::string::npos) << r.output;
}

TEST_F(E2E, PtxOnlyBuildsRun) {
  RunResult r = program(testProgram("ptx_only_matmul"));
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(E2E, FailedDeviceAssertIsStickyAndPrintsItsMessage) {
  RunResult r = program(testProgram("faults") + " assert");
  EXPECT_NE(r.output.find("Assertion `n > 100` failed."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("synchronize: cudaErrorAssert"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("later call: cudaErrorAssert"), std::string::npos) << r.output;
}

TEST_F(E2E, IllegalAddressFailsTheLaunchNotTheServer) {
  RunResult r = program(testProgram("faults") + " illegal");
  EXPECT_NE(r.output.find("synchronize: cudaErrorIllegalAddress"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("later call: cudaErrorIllegalAddress"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("illegal address 0x"), std::string::npos) << r.output;  // the client log says where
  RunResult after = program(example("device_query"));  // the server is still serving
  EXPECT_EQ(after.code, 0) << after.output;
}

TEST_F(E2E, TrapIsALaunchFailure) {
  RunResult r = program(testProgram("faults") + " trap");
  EXPECT_NE(r.output.find("synchronize: cudaErrorLaunchFailure"), std::string::npos) << r.output;
}

TEST_F(E2E, FatbinWithoutPtxGetsAClearRebuildMessage) {
  RunResult r = program(testProgram("rdc_vecadd"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("has no PTX"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Rebuild with -arch=sm_XX"), std::string::npos) << r.output;
}

TEST_F(E2E, RgpuRunLocalPassesTheExitStatusThrough) {
  RunResult r = run(std::string(RGPU_RUN_BIN) + " --local " + testProgram("exit_code"));
  EXPECT_EQ(r.code, 3) << r.output;
}

// Runs argv (no shell in between) and returns its standard output.
std::string outputOf(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe(out) != 0) return "";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    _exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  ::waitpid(pid, nullptr, 0);
  return text;
}

std::string hexLines(const std::vector<std::string>& words) {
  std::string text;
  char b[3];
  for (size_t i = 0; i < words.size(); ++i) {
    text += "arg" + std::to_string(i + 1) + ":";
    for (unsigned char c : words[i]) {
      std::snprintf(b, sizeof b, "%02x", c);
      text += b;
    }
    text += "\n";
  }
  return text + "argc=" + std::to_string(words.size() + 1) + "\n";
}

TEST_F(E2E, RgpuRunPassesTheProgramItsArgumentsExactly) {
  const std::vector<std::string> words = {"-s", "256", "-v", "--", "-", "--n=5", "", "two words", "\xff\xfe", "--local"};
  std::string expected = hexLines(words);
  std::vector<std::vector<std::string>> forms = {
      {RGPU_RUN_BIN, "--local", "--", testProgram("print_args")},  // with --
      {RGPU_RUN_BIN, "--local", testProgram("print_args")},        // without
      {RGPU_RUN_BIN, "--server=127.0.0.1:" + std::to_string(server_->port()), testProgram("print_args")},
  };
  ::setenv("RGPU_CONFIG", dir_->file("client.toml").c_str(), 1);  // (--server's TLS settings)
  for (auto form : forms) {
    form.insert(form.end(), words.begin(), words.end());
    EXPECT_EQ(outputOf(form), expected) << form[1];
  }
  ::unsetenv("RGPU_CONFIG");
  // An option rgpu-run does not know, before the program, is refused rather than guessed at.
  RunResult r = run(std::string(RGPU_RUN_BIN) + " --lcoal " + testProgram("print_args"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown option '--lcoal'"), std::string::npos) << r.output;
}

TEST_F(E2E, HintsAndQueriesAreAcceptedAsNvidiasRuntimeAcceptsThem) {
  RunResult r = program(testProgram("hints"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("hints: all checks passed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not supported by rgpu"), std::string::npos) << r.output;
}

// A destroyed stream or event is refused even right after calls that used it
// (the client's per-thread cache of valid handles lapses with any removal).
TEST_F(E2E, DestroyedStreamsAndEventsAreRefusedRightAfterUse) {
  RunResult r = program(testProgram("handles"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("handles: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, CodeShapesTheCompilerEmitsRunAsOnAGpu) {
  RunResult r = program(testProgram("compiled_ptx"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("compiled_ptx: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, DeviceMallocNewAndDeleteUseTheHeapTheProgramSized) {
  RunResult r = program(testProgram("device_malloc"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("device_malloc: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, StreamOrderedAllocationWithMemoryPools) {
  RunResult r = program(testProgram("mempool"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("mempool: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, GraphsCapturedAndBuiltRunAsNvidiasDoWithOneMessagePerLaunch) {
  RunResult r = program(testProgram("graphs"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("graphs: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, ManagedMemoryIsOnePointerForHostAndKernelsAndOnlyTouchedPagesTravel) {
  RunResult r = run(testProgram("managed"), "RGPU_MANAGED_STATS=1 " + env());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("managed: host-initialised arrays, kernels, host reads, copies, hints and queries, all checks passed"),
            std::string::npos)
      << r.output;
  // Up: the two arrays the host initialised (2 MiB). Down: the result array read
  // after the kernel (1 MiB: 64 KiB, then read-ahead doubling to the end: 5
  // fetches), one 64 KiB block of the memset array, the array four threads
  // read at once (1 MiB), and the result array prefetched to the host (1 MiB,
  // one fetch). What only kernels and copies touched: nothing.
  EXPECT_NE(r.output.find("rgpu managed memory: 2097152 bytes to the device, 3211264 bytes to the host, "),
            std::string::npos)
      << r.output;
}

TEST_F(E2E, ManagedVariablesAreOneNameForHostCodeAndKernels) {
  RunResult r = program(testProgram("managed_var"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("managed_var: initial value, kernel, host and symbol updates, all checks passed"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("managed_var: table at page offset 0\n"), std::string::npos) << r.output;  // pages of its own
}

TEST_F(E2E, MappedHostMemoryIsReachedByKernelsThroughItsDeviceAlias) {
  RunResult r = program(testProgram("mapped"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("mapped: zero-copy kernels, registered pages, copies and attributes, all checks passed"),
            std::string::npos)
      << r.output;
}

TEST_F(E2E, ArraysOfEveryFormatAndShapeRoundTripThroughEveryCopyFormAndSurfaces) {
  RunResult r = program(testProgram("arrays"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("arrays: surfaces read, written, clamped and zeroed in 2D, 3D and layered arrays"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("arrays: batches of 1D and 3D copies"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("arrays: every format and shape round-tripped through every copy form, all checks passed"),
            std::string::npos)
      << r.output;
}

TEST_F(E2E, ArrayCopiesAreGraphNodesBuiltAndCaptured) {
  RunResult r = program(testProgram("array_graphs"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("array_graphs: explicit copy nodes host -> array -> array -> pitched -> host, 3 launches"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("array_graphs: captured 2D, 3D and 1D array copies, 2 launches"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("array_graphs: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, TextureFetchesMatchAHostModelOfTheHardwareBitForBit) {
  RunResult r = program(testProgram("textures"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("textures: every address mode and filter, formats, shapes, mipmaps, gathers and a rotated image "
                          "match the model"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("textures: an unknown texture object faults the kernel"), std::string::npos) << r.output;
}

TEST_F(E2E, ConditionalNodesRunIfElseWhileAndSwitchBodiesAsKernelsDecide) {
  RunResult r = program(testProgram("conditional"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("conditional: if/else, while, switch, nested and captured conditional nodes, all checks passed"),
            std::string::npos)
      << r.output;
}

TEST_F(E2E, ThreadBlockClustersShareTheirBlocksSharedMemoryAndSynchronise) {
  RunResult r = program(testProgram("clusters"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("clusters: distributed shared memory, cluster barriers, cluster launches: all checks passed"),
            std::string::npos)
      << r.output;
}

TEST_F(E2E, EightBitFloatsConvertExactlyAsNvidiasHostCodeDoes) {
  RunResult r = program(testProgram("fp8"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, RecursiveDeviceFunctionsRunWithEveryActivationsOwnRegisters) {
  RunResult r = program(testProgram("recursion"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("recursion: fib, mutual recursion, tree sums, ackermann, frames, alloca: all checks passed"), std::string::npos)
      << r.output;
}

TEST_F(E2E, KernelsCompiledAtRunTimeLoadAsLibrariesAndLaunchByHandle) {
  RunResult r = program(testProgram("library"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("library: NVRTC kernels loaded, launched and unloaded, all checks passed"), std::string::npos)
      << r.output;
}

TEST_F(E2E, ALaunchBoundGraphWithCublasRunsRightAtEveryLaunchAndRefusesFreedMemory) {
  RunResult r = program(testProgram("graph_native"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("graph_native: 51 launches of a 23-node graph, all checks passed"), std::string::npos)
      << r.output;
}

TEST_F(E2E, CooperativeLaunchesSynchroniseTheWholeGridAndGroupsWork) {
  RunResult r = program(testProgram("cooperative"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cooperative: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, AsynchronousCopiesIntoSharedMemoryWithPipelinesAndBarriers) {
  RunResult r = program(testProgram("async_copy"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("async_copy: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, TensorCoreMatrixOperationsMatchTheHostForEveryTypeAndShape) {
  RunResult r = program(testProgram("tensor_cores"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tensor_cores: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, WarpMmaWithLdmatrixComputesWhatTheHostDoes) {
  RunResult r = program(testProgram("mma_sync"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("mma_sync: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, ThrustAndCubAlgorithmsOnAMillionKeysMatchTheHost) {
  RunResult r = program(testProgram("thrust_cub") + " 1000000");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("thrust_cub: 0 failed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAIL "), std::string::npos) << r.output;
}

TEST_F(E2E, RgpuRunLocalRunsAProgramWithoutAnyConfiguration) {
  RunResult r = run(std::string(RGPU_RUN_BIN) + " --local " + example("memory"), "RGPU_CONFIG= RGPU_SERVER=");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("memory: all checks passed"), std::string::npos) << r.output;
}

TEST_F(E2E, RgpuRunServerPointsTheProgramAtAServer) {
  RunResult r = run(std::string(RGPU_RUN_BIN) + " --server 127.0.0.1:" + std::to_string(server_->port()) + " -- " +
                        example("device_query"),
                    "RGPU_CONFIG=" + dir_->file("client.toml"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rgpu test device"), std::string::npos) << r.output;
}

TEST_F(E2E, UnreachableServerFailsQuicklyWithAClearMessage) {
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = run(example("device_query"), env() + " RGPU_SERVER=127.0.0.1:1 RGPU_CONNECT_TIMEOUT_MS=2000");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("cudaErrorDevicesUnavailable"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:1 unreachable"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("config " + dir_->file("client.toml")), std::string::npos) << r.output;
}

TEST_F(E2E, RefusedClientIsToldWhy) {
  writeFile(dir_->file("nocert.toml"), clientToml(dir_->path(), server_->port(), ""));
  RunResult r = run(example("device_query"), "RGPU_CONFIG=" + dir_->file("nocert.toml") +
                                                 " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("authentication failed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace rgpu::test
