// Ordering guarantees and error semantics of the runtime (tests/e2e/ordering.cu,
// one process per case), through both backends: the sim, and the CUDA backend
// on the fake driver, which runs streams concurrently and with jitter so that
// an ordering the runtime does not enforce shows up as wrong data. Each server
// has two devices (cudaMemcpyPeer needs them).
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string ordering(const char* build = "ordering") { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + build; }

const char* kSecondSimDevice =
    "[[sim.devices]]\nname = \"rgpu test device\"\nmemory = \"1GiB\"\ncompute_capability = \"9.0\"\nsm_count = 8\n";

class Ordering : public ::testing::TestWithParam<const char*> {
 protected:
  struct Server {
    TempDir dir;
    std::unique_ptr<ServerProcess> process;
  };
  static void SetUpTestSuite() {
    sim_ = new Server;
    makeCerts(sim_->dir.path());
    sim_->process = std::make_unique<ServerProcess>(sim_->dir.path(), serverToml(sim_->dir.path(), kSecondSimDevice));
    writeFile(sim_->dir.file("client.toml"), clientToml(sim_->dir.path(), sim_->process->port()));

    cuda_ = new Server;
    makeCerts(cuda_->dir.path());
    ::setenv("RGPU_FAKE_CUDA_DEVICES", "2", 1);
    ::setenv("RGPU_FAKE_CUDA_JITTER_US", "50", 1);
    ::setenv("RGPU_FAKE_CUDA_LOG", cuda_->dir.file("driver.log").c_str(), 1);
    // A cuBLAS that fails a heuristic query (CUBLAS_STATUS_INTERNAL_ERROR), as a real one may.
    ::setenv("RGPU_FAKE_CUBLAS_FAIL", "cublasLtMatmulAlgoGetHeuristic=14", 1);
    cuda_->process = std::make_unique<ServerProcess>(cuda_->dir.path(),
                                                     cudaServerToml(cuda_->dir.path(), "cuda", RGPU_FAKE_CUDA_LIB));
    ::unsetenv("RGPU_FAKE_CUDA_DEVICES");
    ::unsetenv("RGPU_FAKE_CUDA_JITTER_US");
    ::unsetenv("RGPU_FAKE_CUDA_LOG");
    ::unsetenv("RGPU_FAKE_CUBLAS_FAIL");
    writeFile(cuda_->dir.file("client.toml"), clientToml(cuda_->dir.path(), cuda_->process->port()));
  }
  static void TearDownTestSuite() {
    delete sim_;
    delete cuda_;
  }
  // Runs `ordering CASE` against the backend of this instance.
  static RunResult runCase(const std::string& backend, const std::string& name, const char* build = "ordering") {
    Server* s = backend == "sim" ? sim_ : cuda_;
    return run("timeout 120 " + ordering(build) + " " + name,
               "RGPU_CONFIG=" + s->dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  }
  static void expectPass(const std::string& backend, const std::string& name, const char* build = "ordering") {
    RunResult r = runCase(backend, name, build);
    EXPECT_EQ(r.code, 0) << backend << " backend, case " << name << ":\n" << r.output;
    EXPECT_NE(r.output.find("ok " + name), std::string::npos) << r.output;
  }
  static inline Server* sim_ = nullptr;
  static inline Server* cuda_ = nullptr;
};

TEST_P(Ordering, FreeingPinnedMemoryWaitsForCopiesStillQueuedIntoIt) { expectPass(GetParam(), "freehost"); }
TEST_P(Ordering, AQueryThatSaysDoneVouchesForTheCopiedBytes) { expectPass(GetParam(), "query"); }
TEST_P(Ordering, PeerCopiesAreOrderedOnTheSourceAndDestinationDevices) { expectPass(GetParam(), "peer"); }
TEST_P(Ordering, DeviceSynchronizeWaitsForADestroyedStreamsWork) { expectPass(GetParam(), "destroy"); }
TEST_P(Ordering, AKernelFaultIsStickyOnEveryCallAndThread) { expectPass(GetParam(), "sticky"); }
TEST_P(Ordering, BadLaunchesFailTheLaunchItselfAndAttributesHonourLaunchBounds) { expectPass(GetParam(), "launch"); }
TEST_P(Ordering, AKernelWithoutAnImageFailsItsLaunchAndNothingLater) {
  // Built with -rdc=true for sm_75: no PTX for the sim, no SASS for the (sm_90) fake GPU.
  expectPass(GetParam(), "noimage", "ordering_rdc");
}
TEST_P(Ordering, UnsupportedCallsLeaveNoLastErrorAndHintsAndQueriesSucceed) { expectPass(GetParam(), "stubs"); }
TEST_P(Ordering, PerThreadDefaultStreamsEndWithTheirThreads) { expectPass(GetParam(), "ptds"); }
TEST_P(Ordering, AHostFunctionSeesTheDownloadQueuedBeforeIt) { expectPass(GetParam(), "hostfn"); }
TEST_P(Ordering, EveryWayOfWaitingVouchesForTheCopiesBeforeIt) { expectPass(GetParam(), "sync"); }
TEST_P(Ordering, AGraphsCopyToAnotherDeviceLandsAtEachLaunch) {
  std::string before = std::string(GetParam()) == "cuda" ? readFile(cuda_->dir.file("driver.log")) : "";
  expectPass(GetParam(), "graphpeer");
  if (std::string(GetParam()) != "cuda") return;
  // On the CUDA backend the graph, its copy to device 1 included, is one CUgraphExec.
  std::string log = readFile(cuda_->dir.file("driver.log")).substr(before.size());
  EXPECT_NE(log.find("cuGraphLaunch 2 nodes"), std::string::npos) << log;
}
TEST_P(Ordering, ASynchronousHostToDeviceCopyReturnsAnEarlierFault) { expectPass(GetParam(), "syncfault"); }
TEST_P(Ordering, DeviceResetReinitialisesDeviceVariables) { expectPass(GetParam(), "reset"); }
TEST_P(Ordering, DeviceAddressesAreUnmistakableForHostMemory) { expectPass(GetParam(), "classify"); }
TEST_P(Ordering, PitchesComeFromTheServerAnd2DCopiesAreExact) {
  RunResult r = runCase(GetParam(), "pitch");
  ASSERT_EQ(r.code, 0) << r.output;
  auto at = r.output.find("pitch ");
  ASSERT_NE(at, std::string::npos) << r.output;
  std::string pitch = r.output.substr(at + 6, r.output.find('\n', at) - at - 6);
  if (std::string(GetParam()) == "sim") {
    EXPECT_EQ(pitch, "1024");
  } else {
    // The driver's own pitch (the fake picks 256-byte rows), and its 2D copies
    // took it; the program's own (packed) pitch was copied row by row.
    std::string log = readFile(cuda_->dir.file("driver.log"));
    EXPECT_NE(log.find("cuMemAllocPitch 600x37 pitch=" + pitch), std::string::npos) << pitch << "\n" << log;
    EXPECT_EQ(pitch, "768");
    EXPECT_NE(log.find("cuMemcpy2DAsync 600x37"), std::string::npos) << log;
    EXPECT_NE(log.find("cuMemcpy2DAsync refused"), std::string::npos) << "the packed copy should have needed rows:\n" << log;
  }
}
TEST_P(Ordering, DevicesReportOnlyWhatWorks) {
  RunResult r = runCase(GetParam(), "attrs");
  ASSERT_EQ(r.code, 0) << r.output;
  // The sim's devices share the worker's memory; the CUDA backend does not enable peer access (yet).
  EXPECT_NE(r.output.find(std::string("canAccessPeer ") + (std::string(GetParam()) == "sim" ? "1" : "0")),
            std::string::npos) << r.output;
}
TEST_P(Ordering, AForkedChildLeavesTheParentsSessionAlone) { expectPass(GetParam(), "fork"); }

TEST_P(Ordering, DevicePrintfAppearsAtTheNextSynchronisationPoint) {
  RunResult r = runCase(GetParam(), "printf");
  ASSERT_EQ(r.code, 0) << r.output;
  size_t host = r.output.find("host after the kernel"), kernel = r.output.find("kernel says 1"),
         after = r.output.find("host after synchronising");
  ASSERT_NE(kernel, std::string::npos) << r.output;
  EXPECT_LT(host, kernel) << "device output was printed before the program synchronised:\n" << r.output;
  EXPECT_LT(kernel, after) << "device output was not printed by cudaDeviceSynchronize:\n" << r.output;
}

// `device_printf CASE` against a sim server of its own (the cases test the
// sim's printf: its formatting and its FIFO).
RunResult devicePrintf(const std::string& name) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path()));
  writeFile(dir.file("client.toml"), clientToml(dir.path(), server.port()));
  std::string env = "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR;
  return run("timeout 120 " + ordering("device_printf") + " " + name, env);
}

TEST(DevicePrintf, StarWidthsAndPrecisionsComeFromTheKernelsArguments) {
  RunResult r = devicePrintf("star");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[    7][3   ][3.14][abc][     2.8][9   ]"), std::string::npos) << r.output;
}

TEST(DevicePrintf, ALaunchKeepsTheNewestOutputThatFitsTheFifoTheProgramSet) {
  RunResult r = devicePrintf("fifo");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ok fifo"), std::string::npos) << r.output;
  size_t lines = 0, bytes = 0;
  for (size_t at = r.output.find("line "); at != std::string::npos; at = r.output.find("line ", at + 1)) {
    ++lines;
    bytes += 11;
  }
  EXPECT_LE(bytes, 4096u + 11) << lines << " lines printed";
  EXPECT_GE(bytes, 4096u - 2 * 11) << lines << " lines printed";
}

TEST_P(Ordering, ReductionsOnSeveralStreamsEachGetTheirOwnResult) { expectPass(GetParam(), "dots", "blas_threads"); }

TEST_P(Ordering, AFailedCublasCallFailsThatCallOnly) {
  RunResult r = runCase(GetParam(), "heuristic", "blas_threads");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ok heuristic"), std::string::npos) << r.output;
  // The fake cuBLAS behind the CUDA backend fails it with INTERNAL_ERROR (14): the program gets exactly that.
  EXPECT_NE(r.output.find(std::string("heuristic status ") + (std::string(GetParam()) == "sim" ? "0" : "14")),
            std::string::npos) << r.output;
}

TEST_P(Ordering, CublasKeepsItsOwnWorkspaceUnlessTheProgramGivesOne) {
  expectPass(GetParam(), "workspace", "blas_threads");
  if (std::string(GetParam()) != "cuda") return;
  std::string log = readFile(cuda_->dir.file("driver.log"));
  EXPECT_EQ(log.find("cublasSetWorkspace_v2 disabled"), std::string::npos) << log;
  EXPECT_NE(log.find("cublasSetWorkspace_v2 1048576"), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(Backends, Ordering, ::testing::Values("sim", "cuda"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
}  // namespace rgpu::test
