// cuBLAS and cuBLASLt end to end: programs built with nvcc -cudart shared
// -lcublas / -lcublasLt run unchanged against rgpu's libraries and a real
// rgpu-server on the sim backend; every implemented call is compared with a
// CPU reference inside the programs (tests/e2e/cublas_check.cu,
// cublaslt_check.cu), and the MLP example must learn.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

class Blas : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    makeCerts(dir_->path());
    server_ = new ServerProcess(dir_->path(), serverToml(dir_->path()));
    writeFile(dir_->file("client.toml"), clientToml(dir_->path(), server_->port()));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static std::string env() { return "RGPU_CONFIG=" + dir_->file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR; }
  static RunResult program(const std::string& path) { return run(path, env()); }
  static inline TempDir* dir_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
};

std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

TEST_F(Blas, ProgramsLoadRgpusCublasLibrariesNotNvidias) {
  for (const char* prog : {"cublas_check", "cublaslt_check"}) {
    RunResult r = run("ldd " + testProgram(prog), env());
    for (const char* lib : {"libcudart.so.13", prog[6] == 'l' ? "libcublasLt.so.13" : "libcublas.so.13"}) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(r.output, m, std::regex(std::string(lib) + " => (\\S+)"))) << r.output;
      EXPECT_EQ(m[1].str().rfind(RGPU_CLIENT_LIBDIR, 0), 0u) << lib << " resolves to " << m[1].str();
    }
  }
}

TEST_F(Blas, EveryImplementedCublasCallMatchesItsCpuReference) {
  RunResult r = program(testProgram("cublas_check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" checks, 0 failed"), std::string::npos) << r.output;
  // The unimplemented call is named once in the log, with the status it got.
  EXPECT_NE(r.output.find("cublasStrsm_v2 is not supported by rgpu (returns CUBLAS_STATUS_NOT_SUPPORTED)"),
            std::string::npos)
      << r.output;
  // The out-of-bounds matrix is named by the server, reported where CUDA would.
  EXPECT_NE(r.output.find("gemm: A: range"), std::string::npos) << r.output;
}

TEST_F(Blas, EveryCublasLtFormAndEpilogueMatchesItsCpuReference) {
  RunResult r = program(testProgram("cublaslt_check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" checks, 0 failed"), std::string::npos) << r.output;
}

TEST_F(Blas, TheMlpTrainingExampleLearns) {
  RunResult r = program(std::string(RGPU_EXAMPLES_DIR) + "/mlp_train 40");
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("loss ([0-9.]+) -> ([0-9.]+) over 40 epochs, accuracy ([0-9.]+)%")))
      << r.output;
  double first = std::stod(m[1].str()), last = std::stod(m[2].str()), accuracy = std::stod(m[3].str());
  EXPECT_LT(last, first / 3) << r.output;   // the loss falls (0.91 -> 0.19 when written)
  EXPECT_GT(accuracy, 90.0) << r.output;    // on three spiral arms, where chance is 33 %
  EXPECT_NE(r.output.find("epoch  40"), std::string::npos) << r.output;  // progress per epoch
}

// The same programs through the CUDA backend: the worker loads "NVIDIA's"
// cuBLAS (here the fake one, on the fake driver) and runs every call with it.
class BlasOnCuda : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    makeCerts(dir_->path());
    std::string toml = cudaServerToml(dir_->path(), "cuda", RGPU_FAKE_CUDA_LIB);
    ::setenv("RGPU_FAKE_CUDA_LOG", dir_->file("driver.log").c_str(), 1);
    server_ = new ServerProcess(dir_->path(), toml);
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
  static std::string driverLog() { return readFile(dir_->file("driver.log")); }
  static inline TempDir* dir_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
};

TEST_F(BlasOnCuda, EveryImplementedCublasCallRunsThroughNvidiasLibraryInTheSessionsStreams) {
  RunResult r = program(testProgram("cublas_check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" checks, 0 failed"), std::string::npos) << r.output;
  std::string log = driverLog();
  for (const char* call : {"cublasSaxpy_v2_64", "cublasDdot_v2_64", "cublasIsamax_v2", "cublasIsamax_v2_64",
                           "cublasSgemv_v2_64", "cublasDger_v2_64", "cublasGemmEx_64", "cublasGemmStridedBatchedEx_64",
                           "cublasGemmBatchedEx_64"})
    EXPECT_NE(log.find(call), std::string::npos) << call << " never reached the library\n" << log.substr(0, 4000);
  EXPECT_NE(server_->log().find("cuBLAS loaded"), std::string::npos) << server_->log();
}

TEST_F(BlasOnCuda, CublasLtMatmulsUseTheHeuristicsAlgorithmWhenTheLibraryAcceptsIt) {
  RunResult r = program(testProgram("cublaslt_check"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" checks, 0 failed"), std::string::npos) << r.output;
  std::string log = driverLog();
  EXPECT_NE(log.find("cublasLtMatmul algo=heuristic"), std::string::npos) << log.substr(0, 4000);
  EXPECT_NE(log.find("cublasLtMatmul algo=default"), std::string::npos);  // calls without one
}

TEST_F(BlasOnCuda, TheMlpTrainingExampleLearns) {
  RunResult r = program(std::string(RGPU_EXAMPLES_DIR) + "/mlp_train 20");
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("loss ([0-9.]+) -> ([0-9.]+) over 20 epochs"))) << r.output;
  EXPECT_LT(std::stod(m[2].str()), std::stod(m[1].str()) / 2) << r.output;
}

}  // namespace
}  // namespace rgpu::test
