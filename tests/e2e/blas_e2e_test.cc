// cuBLAS and cuBLASLt end to end: programs built with nvcc -cudart shared
// -lcublas / -lcublasLt run unchanged against rgpu's libraries and a real
// rgpu-server on the sim backend; every implemented call is compared with a
// CPU reference inside the programs (tests/e2e/cublas_check.cu,
// cublaslt_check.cu), and the MLP example must learn. The same programs
// through the CUDA backend are in cuda_fake_e2e_test.cc.
#include <gtest/gtest.h>

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
  EXPECT_NE(r.output.find("cublasStbmv_v2 is not supported by rgpu (returns CUBLAS_STATUS_NOT_SUPPORTED)"),
            std::string::npos)
      << r.output;
  // The out-of-bounds matrix is named by the server, reported where CUDA would.
  EXPECT_NE(r.output.find("gemm: A: range"), std::string::npos) << r.output;
}

// cublasXt's gemm on host memory, its tiles taken in turn by the two devices of a session.
TEST(BlasXt, TilesOfAHostMemoryGemmGoToEveryDeviceOfTheSession) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path(), "[[sim.devices]]\nname = \"second\"\nmemory = \"1GiB\"\n"
                                                          "compute_capability = \"9.0\"\nsm_count = 8\n"));
  writeFile(dir.file("client.toml"), clientToml(dir.path(), server.port()));
  RunResult r = run(testProgram("cublas_check"), "RGPU_DEVICES=2 RGPU_CONFIG=" + dir.file("client.toml") +
                                                     " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" checks, 0 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cublasXt Sgemm 150x200x90 on 2 device(s), 64-column tiles"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cublasXt Dgemm 150x200x90 on 2 device(s), 64-column tiles"), std::string::npos) << r.output;
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

}  // namespace
}  // namespace rgpu::test
