// cuFFT end to end (docs/cufft.md): a program built with nvcc -cudart shared
// -lcufft runs unchanged against rgpu's libcufft.so.12 and a real
// rgpu-server, on the sim backend (FFTW) and on the CUDA backend (the fake
// driver and a fake cuFFT computing with the same FFTW executor, which
// checks the work area arrives); cufft_check compares every result with a
// direct DFT in double precision.
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

// cufft_check through `env`: every transform within its tolerance, every refusal cuFFT's.
RunResult expectCufftCheckPasses(const std::string& env) {
  RunResult r = run(testProgram("cufft_check"), env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cufft_check: done, 0 failed"), std::string::npos) << r.output;
  for (const char* ok : {"c2c 1d n=1000 batch 3, forward", "c2c 1d inverse in place gives n x",
                         "r2c 1d n=998 batch 2, out of place", "c2r 1d in place gives n x", "r2c 2d 24x20, in place",
                         "c2c 3d 8x6x5, inverse", "z2z 1d n=777 batch 2, in place",
                         "d2z 2d 16x15 (cufftPlanMany, basic layout)", "z2d 2d gives n x",
                         "c2c advanced layout, interleaved batches, own work area",
                         "cufftXtMakePlanMany r2c n=128, cufftXtExec"})
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::regex_replace(ok, std::regex(R"([()])"), R"(\$&)") +
                                                       ": relative error [0-9.e+-]+ ok")))
        << ok << "\n" << r.output;
  EXPECT_NE(r.output.find("c2c captured in a graph: the same bits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("half precision: CUFFT_NOT_SUPPORTED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("size 0: CUFFT_INVALID_SIZE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("type 7: CUFFT_INVALID_TYPE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("c2c on an r2c plan: CUFFT_INVALID_VALUE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("destroyed plan: CUFFT_INVALID_PLAN"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("version: 12000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("past the end of an allocation: CUFFT_SUCCESS, then cudaErrorInvalidValue"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cufftXtMakePlanMany with data types other than 32- and 64-bit floats is not supported by "
                          "rgpu's cuFFT"),
            std::string::npos)
      << r.output;
  return r;
}

TEST(Cufft, ProgramsLoadRgpusCufftNotNvidias) {
  RunResult r = run("ldd " + testProgram("cufft_check"), std::string("LD_LIBRARY_PATH=") + RGPU_CLIENT_LIBDIR);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("libcufft.so.12 => (\\S+)"))) << r.output;
  EXPECT_EQ(m[1].str().rfind(RGPU_CLIENT_LIBDIR, 0), 0u) << m[1].str();
}

TEST(Cufft, EveryTransformTypeAndLayoutMatchesADirectDftOnTheSim) {
  OwnServer own(false);
  RunResult r = expectCufftCheckPasses(own.env());
  EXPECT_NE(r.output.find("work area: 0 bytes (cufftGetSize agrees)"), std::string::npos) << r.output;
  EXPECT_NE(own.server->log().find("cuFFT transform refused"), std::string::npos) << own.server->log();
}

// The CUDA backend: NVIDIA's plan of each client plan (here the fake's),
// made without auto-allocation, given the program's work area.
TEST(CufftCuda, EveryTransformTypeAndLayoutMatchesADirectDftThroughTheCudaBackend) {
  OwnServer own(true);
  RunResult r = expectCufftCheckPasses(own.env());
  EXPECT_NE(r.output.find("work area: 4096 bytes (cufftGetSize agrees)"), std::string::npos) << r.output;
  const std::string log = own.driverLog();
  EXPECT_NE(log.find("without auto-allocation"), std::string::npos) << log;
  EXPECT_EQ(log.find(" auto-allocated"), std::string::npos) << log;
  EXPECT_NE(log.find("cufftExecC2C plan"), std::string::npos) << log;
  EXPECT_NE(log.find("in place with a work area"), std::string::npos) << log;
  EXPECT_NE(log.find("cufftDestroy plan"), std::string::npos) << log;
}

}  // namespace
}  // namespace rgpu::test
