// cuSPARSE end to end (docs/cusparse.md): a program built with nvcc -cudart
// shared -lcusparse runs unchanged against rgpu's libcusparse.so.12 and a
// real rgpu-server, on the sim backend and on the CUDA backend (the fake
// driver and a fake cuSPARSE computing with the same executor, which refuses
// a call without the external buffer it asked for); cusparse_check compares
// every product with one it computes in double precision.
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

// `bad_index`: whether the indices are checked where they are read (the sim's
// executor; NVIDIA's library reads what it is given, and its fake faults).
void expectCusparseCheckPasses(const std::string& env, bool bad_index) {
  RunResult r = run(testProgram("cusparse_check") + (bad_index ? "" : " --no-bad-index"), env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cusparse_check: done, 0 failed"), std::string::npos) << r.output;
  for (const char* ok : {"SpMV CSR f32 1000x800, N", "SpMV CSR f64, 64-bit indices from 1, T, device scalars",
                         "SpMV COO c32, C \\(conjugate transpose\\)", "SpMV CSC f64 600x400, N",
                         "SpMV const CSR descriptors f32", "SpMM CSR f32 200x150 times 150x16, column-major",
                         "SpMM COO f64, op\\(B\\) = T, row-major",
                         "SpMM Blocked-ELL f32 64x48, blocks of 8, column-major",
                         "SpMM Blocked-ELL f64, 64-bit indices from 1, row-major", "SpGEMM CSR f32 300x200 times 200x250",
                         "SpGEMM CSR f64, 64-bit indices from 1, device scalars", "SpGEMM CSR c64 100x120 times 120x90",
                         "SpGEMM reuse CSR c32, values", "SpGEMM reuse CSR c32, new values of A, beta != 0",
                         "SpGEMM reuse CSR f32, 64-bit indices, values",
                         "SpGEMM reuse CSR f32, 64-bit indices, new values of A, beta != 0"})
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::string(ok) + ": relative error [0-9.e+-]+ ok")))
        << ok << "\n" << r.output;
  EXPECT_NE(r.output.find("x of the wrong length: CUSPARSE_STATUS_INVALID_VALUE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("half-precision x: CUSPARSE_STATUS_NOT_SUPPORTED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SpSV: CUSPARSE_STATUS_NOT_SUPPORTED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cusparseSpSV_createDescr is not supported by rgpu's cuSPARSE"), std::string::npos)
      << r.output;
  for (const char* ell : {"SpMM Blocked-ELL f32 64x48, blocks of 8, column-major",
                          "SpMM Blocked-ELL f64, 64-bit indices from 1, row-major"}) {
    EXPECT_NE(r.output.find(std::string(ell) + ": getters give what it was made with"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(std::string(ell) +
                            ": SpMV CUSPARSE_STATUS_NOT_SUPPORTED, SpMM of op(A) = T CUSPARSE_STATUS_NOT_SUPPORTED"),
              std::string::npos)
        << r.output;
  }
  // SpGEMM: the pattern exactly the product's, the products counted, and what cuSPARSE refuses.
  for (const char* pattern :
       {"SpGEMM CSR f32 300x200 times 200x250: [0-9]+ products, nnz\\(C\\) [0-9]+, pattern the product's",
        "SpGEMM CSR f64, 64-bit indices from 1, device scalars: [0-9]+ products, nnz\\(C\\) [0-9]+, pattern the "
        "product's",
        "SpGEMM CSR c64 100x120 times 120x90: [0-9]+ products, nnz\\(C\\) [0-9]+, pattern the product's",
        "SpGEMM reuse CSR c32: nnz\\(C\\) [0-9]+, pattern the product's",
        "SpGEMM reuse CSR f32, 64-bit indices: nnz\\(C\\) [0-9]+, pattern the product's"})
    EXPECT_TRUE(std::regex_search(r.output, std::regex(pattern))) << pattern << "\n" << r.output;
  for (const char* line : {"SpGEMM of op(A) = T: CUSPARSE_STATUS_NOT_SUPPORTED",
                           "SpGEMM with beta 1: CUSPARSE_STATUS_NOT_SUPPORTED",
                           "SpGEMM of a COO matrix: CUSPARSE_STATUS_NOT_SUPPORTED",
                           "SpGEMM into a C of the wrong shape: CUSPARSE_STATUS_INVALID_VALUE",
                           "SpGEMM compute before the work estimation: CUSPARSE_STATUS_INVALID_VALUE"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  EXPECT_NE(r.output.find("version: 12603"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("getters: what the descriptors were made with"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CooGet on a CSR matrix: CUSPARSE_STATUS_INVALID_VALUE"), std::string::npos) << r.output;
  if (bad_index) {
    EXPECT_NE(r.output.find("a column index outside the matrix: CUSPARSE_STATUS_SUCCESS, then cudaErrorInvalidValue"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("column index 9 of entry 1 lies outside the matrix's 2"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("SpGEMM with a column index outside B: CUSPARSE_STATUS_EXECUTION_FAILED"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("B's column index 7 of entry 2 lies outside its 2 columns"), std::string::npos)
        << r.output;
  }
  EXPECT_NE(r.output.find("past the end of an allocation: CUSPARSE_STATUS_SUCCESS, then cudaErrorInvalidValue"),
            std::string::npos)
      << r.output;
}

TEST(Cusparse, ProgramsLoadRgpusCusparseNotNvidias) {
  RunResult r = run("ldd " + testProgram("cusparse_check"), std::string("LD_LIBRARY_PATH=") + RGPU_CLIENT_LIBDIR);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("libcusparse.so.12 => (\\S+)"))) << r.output;
  EXPECT_EQ(m[1].str().rfind(RGPU_CLIENT_LIBDIR, 0), 0u) << m[1].str();
}

TEST(Cusparse, SpMVSpMMAndSpGEMMMatchTheProductOnTheSim) {
  OwnServer own(false);
  expectCusparseCheckPasses(own.env(), true);
}

// The CUDA backend: NVIDIA's cuSPARSE (here the fake), its descriptors made
// per call, the program's external buffer and pointer mode.
TEST(CusparseCuda, SpMVSpMMAndSpGEMMMatchTheProductThroughTheCudaBackend) {
  OwnServer own(true);
  expectCusparseCheckPasses(own.env(),
                            false);
  const std::string log = own.driverLog();
  EXPECT_NE(log.find("cusparseSpMV with an external buffer"), std::string::npos) << log;
  EXPECT_NE(log.find("cusparseSpMV (device scalars) with an external buffer"), std::string::npos) << log;
  EXPECT_NE(log.find("cusparseSpMM with an external buffer"), std::string::npos) << log;
  for (const char* step : {"cusparseSpGEMM_workEstimation with an external buffer",
                           "cusparseSpGEMM_compute with an external buffer", "cusparseSpGEMM_copy",
                           "cusparseSpGEMMreuse_workEstimation with an external buffer",
                           "cusparseSpGEMMreuse_nnz with an external buffer", "cusparseSpGEMMreuse_copy",
                           "cusparseSpGEMMreuse_compute"})
    EXPECT_NE(log.find(step), std::string::npos) << step << "\n" << log;
}

}  // namespace
}  // namespace rgpu::test
