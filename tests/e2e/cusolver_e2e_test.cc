// cuSOLVER end to end (docs/cusolver.md): a program built with nvcc -cudart
// shared -lcusolver runs unchanged against rgpu's libcusolver.so.12 and a
// real rgpu-server, on the sim backend (LAPACK) and on the CUDA backend (the
// fake driver and a fake cuSOLVER computing with the same LAPACK executor,
// which refuses a call without the workspace it asked for);
// cusolver_check checks every result against what it must satisfy.
#include <gtest/gtest.h>

#include <regex>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

RunResult expectCusolverCheckPasses(const std::string& env) {
  RunResult r = run(testProgram("cusolver_check"), env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cusolver_check: done, 0 failed"), std::string::npos) << r.output;
  for (const char* ok :
       {"Dpotrf \\+ Dpotrs n=50 nrhs=3", "Sgetrf \\+ Sgetrs n=40 nrhs=2, pivoted", "Dgetrf \\+ Dgetrs n=40, without pivoting",
        "Zgetrf \\+ Zgetrs n=20, conjugate transpose", "Dgeqrf \\+ Dormqr m=60 n=20: Q\\^T A = R",
        "Dsyevd n=30: A V = V diag\\(W\\)", "Cheevd n=16 \\(Hermitian\\): A V = V diag\\(W\\)",
        "Sgesvd m=30 n=20 jobu=A jobvt=A: A = U S VT", "Zgesvd m=12 n=8 jobu=S jobvt=S: A = U S VT"})
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::string(ok) + ": relative error [0-9.e+-]+, devInfo 0 ok")))
        << ok << "\n" << r.output;
  EXPECT_NE(r.output.find("Spotrf of a matrix that is not positive definite: devInfo 5"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Sgetrf pivots: 1-based, within 1..n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Dsyevd eigenvalues: ascending"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Sgesvd singular values: non-negative, descending"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("potrf with lda < n: CUSOLVER_STATUS_INVALID_VALUE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gesvd with m < n: CUSOLVER_STATUS_INVALID_VALUE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sytrf: CUSOLVER_STATUS_NOT_SUPPORTED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cusolverDnDsytrf_bufferSize is not supported by rgpu's cuSOLVER"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("version: 12004"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("past the end of an allocation: CUSOLVER_STATUS_SUCCESS, then cudaErrorInvalidValue"),
            std::string::npos)
      << r.output;
  return r;
}

TEST(Cusolver, ProgramsLoadRgpusCusolverNotNvidias) {
  RunResult r = run("ldd " + testProgram("cusolver_check"), std::string("LD_LIBRARY_PATH=") + RGPU_CLIENT_LIBDIR);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("libcusolver.so.12 => (\\S+)"))) << r.output;
  EXPECT_EQ(m[1].str().rfind(RGPU_CLIENT_LIBDIR, 0), 0u) << m[1].str();
}

TEST(Cusolver, DenseRoutinesGiveWhatTheyMustOnTheSim) {
  OwnServer own(false);
  RunResult r = expectCusolverCheckPasses(own.env());
  EXPECT_NE(r.output.find("Dpotrf workspace: 0 elements"), std::string::npos) << r.output;
  EXPECT_NE(own.server->log().find("cusolverDnDpotrs refused: B: range"), std::string::npos) << own.server->log();
}

// The CUDA backend: NVIDIA's cuSOLVER (here the fake), one handle per
// device, the program's workspace as bufferSize asked.
TEST(CusolverCuda, DenseRoutinesGiveWhatTheyMustThroughTheCudaBackend) {
  OwnServer own(true);
  RunResult r = expectCusolverCheckPasses(own.env());
  EXPECT_NE(r.output.find("Dpotrf workspace: 64 elements"), std::string::npos) << r.output;
  const std::string log = own.driverLog();
  for (const char* call : {"cusolverDnDpotrf with a workspace of 64", "cusolverDnDpotrs", "cusolverDnSgetrf",
                           "cusolverDnZgetrs", "cusolverDnDormqr", "cusolverDnCheevd", "cusolverDnZgesvd"})
    EXPECT_NE(log.find(call), std::string::npos) << call << "\n" << log;
}

}  // namespace
}  // namespace rgpu::test
