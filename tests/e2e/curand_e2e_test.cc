// cuRAND end to end (docs/curand.md): a program built with nvcc -cudart
// shared -lcurand runs unchanged against rgpu's libcurand.so.10 and a real
// rgpu-server on the sim backend; every value its device generators wrote
// is compared, bit for bit, with what NVIDIA's own library computes for the
// same calls (its host generator runs without a GPU).
#include <curand.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <regex>
#include <vector>

#include "common/curand_cpu.h"
#include "tests/support/nvidia_curand.h"
#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string testProgram(const char* name) { return std::string(RGPU_TEST_PROGRAMS_DIR) + "/" + name; }

class Curand : public ::testing::Test {
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
  static std::string env() {
    return "RGPU_CONFIG=" + dir_->file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR +
           " RGPU_NVIDIA_CURAND=" + RGPU_NVIDIA_CURAND;
  }
  static inline TempDir* dir_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
};

// What curand_check's calls give with NVIDIA's generator, in its file's order
// (made once: NVIDIA's MT19937 takes about 5 s to set up).
std::vector<uint8_t> makeNvidiasValues();
const std::vector<uint8_t>& nvidiasValues() {
  static const std::vector<uint8_t> v = makeNvidiasValues();
  return v;
}
std::vector<uint8_t> makeNvidiasValues() {
  const rgpu::test::NvidiaCurand& nv = rgpu::test::nvidiaCurand();
  auto create = nv.create;
  auto seed = nv.seed;
  auto offset = nv.offset;
  auto bits = nv.bits;
  auto uniform = nv.uniform;
  auto normal = nv.normal;
  auto lognormal = nv.log_normal;
  auto uniform_d = nv.uniform_d;
  auto normal_d = nv.normal_d;
  std::vector<uint8_t> out;
  if (!create) return out;
  auto append = [&](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  curandGenerator_t a, b;
  create(&a, CURAND_RNG_PSEUDO_PHILOX4_32_10);
  seed(a, 1234);
  offset(a, 17);
  std::vector<unsigned> u(100003);
  std::vector<float> f(1001), n(2002), l(6);
  bits(a, u.data(), u.size());
  uniform(a, f.data(), f.size());
  normal(a, n.data(), n.size(), 1.f, 2.f);
  lognormal(a, l.data(), l.size(), 0.f, 0.5f);
  append(u.data(), u.size() * 4);
  append(f.data(), f.size() * 4);
  append(n.data(), n.size() * 4);
  append(l.data(), l.size() * 4);
  bits(a, u.data(), 512);  // the captured call
  append(u.data(), 512 * 4);
  create(&b, CURAND_RNG_PSEUDO_PHILOX4_32_10);
  seed(b, 99);
  std::vector<double> ud(70001), nd(4002);
  uniform_d(b, ud.data(), ud.size());
  normal_d(b, nd.data(), nd.size(), -1.0, 3.0);
  append(ud.data(), ud.size() * 8);
  append(nd.data(), nd.size() * 8);
  std::vector<unsigned> ub(300001);
  bits(b, ub.data(), ub.size());
  append(ub.data(), ub.size() * 4);
  curandGenerator_t c, d;
  create(&c, CURAND_RNG_PSEUDO_DEFAULT);
  seed(c, 5);
  create(&d, CURAND_RNG_PSEUDO_DEFAULT);
  seed(d, 6);
  std::vector<float> uc(50001), ncf(2002), nc(4002);
  std::vector<unsigned> bc(1001);
  std::vector<double> ndc(100);
  uniform(c, uc.data(), uc.size());
  normal(c, ncf.data(), ncf.size(), 0.f, 1.f);
  bits(c, bc.data(), bc.size());
  normal_d(c, ndc.data(), ndc.size(), 0., 1.);
  normal(d, nc.data(), 2002, 0.f, 1.f);
  normal(d, nc.data() + 2002, 2000, 0.f, 1.f);
  append(uc.data(), uc.size() * 4);
  append(ncf.data(), ncf.size() * 4);
  append(bc.data(), bc.size() * 4);
  append(ndc.data(), ndc.size() * 8);
  append(nc.data(), nc.size() * 4);
  curandGenerator_t e;
  create(&e, CURAND_RNG_PSEUDO_MRG32K3A);
  seed(e, 7);
  offset(e, 3);
  std::vector<float> ue(90001);
  std::vector<double> ne(1000);
  std::vector<unsigned> be(33);
  uniform(e, ue.data(), ue.size());
  normal_d(e, ne.data(), ne.size(), 2.0, 0.5);
  bits(e, be.data(), be.size());
  append(ue.data(), ue.size() * 4);
  append(ne.data(), ne.size() * 8);
  append(be.data(), be.size() * 4);
  curandGenerator_t m;
  create(&m, CURAND_RNG_PSEUDO_MTGP32);
  seed(m, 11);
  std::vector<float> nm(50001);
  std::vector<double> um(70001);
  std::vector<unsigned> bm(3);
  normal(m, nm.data(), nm.size(), 1.f, 3.f);
  uniform_d(m, um.data(), um.size());
  bits(m, bm.data(), bm.size());
  append(nm.data(), nm.size() * 4);
  append(um.data(), um.size() * 8);
  append(bm.data(), bm.size() * 4);
  auto dims = nv.dimensions;
  auto bits64 = nv.bits64;
  curandGenerator_t q, r;
  create(&q, CURAND_RNG_QUASI_SCRAMBLED_SOBOL32);
  dims(q, 3);
  offset(q, 4);
  std::vector<float> uq(3003);
  std::vector<double> nq(300);
  uniform(q, uq.data(), uq.size());
  normal_d(q, nq.data(), nq.size(), 0.5, 2.0);
  append(uq.data(), uq.size() * 4);
  append(nq.data(), nq.size() * 8);
  create(&r, CURAND_RNG_QUASI_SOBOL64);
  dims(r, 2);
  std::vector<unsigned long long> br(1000);
  std::vector<float> lr(500);
  bits64(r, br.data(), br.size());
  lognormal(r, lr.data(), lr.size(), 0.f, 1.f);
  append(br.data(), br.size() * 8);
  append(lr.data(), lr.size() * 4);
  dims(r, 3);
  std::vector<double> ur(30);
  uniform_d(r, ur.data(), ur.size());
  append(ur.data(), ur.size() * 8);
  auto poisson = nv.poisson;
  std::vector<unsigned> pr(300);
  poisson(r, pr.data(), pr.size(), 20.0);
  append(pr.data(), pr.size() * 4);
  curandGenerator_t p, pm;
  create(&p, CURAND_RNG_PSEUDO_XORWOW);
  seed(p, 21);
  std::vector<unsigned> pp(9099), ppm(2000);
  std::vector<float> up(1001);
  poisson(p, pp.data(), 4099, 12.5);
  uniform(p, up.data(), up.size());
  poisson(p, pp.data() + 4099, 5000, 1999.5);
  append(pp.data(), 4099 * 4);
  append(up.data(), up.size() * 4);
  append(pp.data() + 4099, 5000 * 4);
  create(&pm, CURAND_RNG_PSEUDO_MTGP32);
  seed(pm, 22);
  poisson(pm, ppm.data(), 1000, 500.0);
  poisson(pm, ppm.data() + 1000, 1000, 9000.5);
  append(ppm.data(), ppm.size() * 4);
  std::vector<unsigned> big(8193);
  std::vector<float> np(1002);
  poisson(p, big.data(), 4097, 2500.0);
  normal(p, np.data(), np.size(), 0.f, 1.f);
  poisson(p, big.data() + 4097, 4096, 100000.0);
  append(big.data(), 4097 * 4);
  append(np.data(), np.size() * 4);
  append(big.data() + 4097, 4096 * 4);
  curandGenerator_t mt;
  create(&mt, CURAND_RNG_PSEUDO_MT19937);
  seed(mt, 31);
  std::vector<float> nmt(70001);
  std::vector<double> umt(3);
  std::vector<unsigned> pmt(5), bmt(1001);
  normal(mt, nmt.data(), nmt.size(), 1.f, 2.f);
  uniform_d(mt, umt.data(), umt.size());
  poisson(mt, pmt.data(), pmt.size(), 3000.5);
  bits(mt, bmt.data(), bmt.size());
  append(nmt.data(), nmt.size() * 4);
  append(umt.data(), umt.size() * 8);
  append(pmt.data(), pmt.size() * 4);
  append(bmt.data(), bmt.size() * 4);
  curandGenerator_t sd;
  create(&sd, CURAND_RNG_PSEUDO_XORWOW);
  seed(sd, 41);
  nv.ordering(sd, CURAND_ORDERING_PSEUDO_SEEDED);
  std::vector<float> usd(5001), nsd(2);
  std::vector<unsigned> psd(4097);
  uniform(sd, usd.data(), usd.size());
  poisson(sd, psd.data(), psd.size(), 3000.0);
  normal(sd, nsd.data(), nsd.size(), 0.f, 1.f);
  append(usd.data(), usd.size() * 4);
  append(psd.data(), psd.size() * 4);
  append(nsd.data(), nsd.size() * 4);
  return out;
}

TEST_F(Curand, ProgramsLoadRgpusCurandNotNvidias) {
  RunResult r = run("ldd " + testProgram("curand_check"), env());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("libcurand.so.10 => (\\S+)"))) << r.output;
  EXPECT_EQ(m[1].str().rfind(RGPU_CLIENT_LIBDIR, 0), 0u) << m[1].str();
}

// curand_check through `env`; its values must be NVIDIA's.
void expectNvidiasValues(const std::string& env, const std::string& file) {
  RunResult r = run(testProgram("curand_check") + " " + file, env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("curand_check: done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("host generator agrees with the device generator"), std::string::npos) << r.output;
  // A range past the program's memory: refused by the server, reported at the next synchronising call.
  EXPECT_NE(r.output.find("past the end of an allocation: cudaErrorInvalidValue"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("XORWOW, 3 normals: LENGTH_NOT_MULTIPLE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MTGP32 offset: TYPE_ERROR"), std::string::npos) << r.output;
  // (NVIDIA's answers for MRG32k3a's orderings: LEGACY accepted, SEEDED out of range.)
  EXPECT_NE(r.output.find("MRG32k3a orderings: LEGACY 0, SEEDED OUT_OF_RANGE"), std::string::npos) << r.output;
  // (NVIDIA's answers for MT19937: BEST out of range, LEGACY accepted, an offset a type error.)
  EXPECT_NE(r.output.find("MT19937: ordering BEST OUT_OF_RANGE, LEGACY 0, offset TYPE_ERROR"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("XORWOW Poisson of lambda 0: OUT_OF_RANGE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a Sobol64 device generator of 1921 dimensions: ARCH_MISMATCH"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Sobol64 of 3 dimensions: 1000 values LENGTH_NOT_MULTIPLE, 32-bit values TYPE_ERROR, a seed TYPE_ERROR"),
            std::string::npos)
      << r.output;
  auto vectors = rgpu::test::nvidiaCurand().dv32;
  curandDirectionVectors32_t* v = nullptr;
  ASSERT_TRUE(vectors && vectors(&v, CURAND_DIRECTION_VECTORS_32_JOEKUO6) == CURAND_STATUS_SUCCESS);
  EXPECT_NE(r.output.find("direction vectors 32, dimension 2: " + std::to_string(v[1][0]) + " " +
                          std::to_string(v[1][1]) + " " + std::to_string(v[1][2])),
            std::string::npos)
      << r.output;
  const std::string got = readFile(file);
  const std::vector<uint8_t> want = nvidiasValues();
  ASSERT_FALSE(want.empty()) << "NVIDIA's libcurand.so.10 at " << RGPU_NVIDIA_CURAND;
  ASSERT_EQ(got.size(), want.size());
  size_t first = got.size();
  for (size_t i = 0; i < got.size() && first == got.size(); ++i)
    if (static_cast<uint8_t>(got[i]) != want[i]) first = i;
  EXPECT_EQ(first, got.size()) << "byte " << first << " of " << got.size() << " differs";

  // The device API's Poisson distributions, drawn in a kernel: lambda 7.5's
  // values are the table's for the words they came from (the table NVIDIA's
  // host generator draws with: curand_poisson_test.cc); lambda 3000's, the
  // normal form's, lie around 3000.
  EXPECT_NE(r.output.find("a Poisson distribution of lambda -1: OUT_OF_RANGE"), std::string::npos) << r.output;
  const std::string disc = readFile(file + ".discrete");
  ASSERT_EQ(disc.size(), 4 * 512 * 4u);
  std::vector<uint32_t> w(4 * 512);
  std::memcpy(w.data(), disc.data(), disc.size());
  const rgpu::common::curand::PoissonDraw draw(rgpu::common::curand::kXorwow, 7.5);
  size_t differ = 0;
  for (size_t i = 0; i < 512; ++i) differ += w[i] != draw(w[512 + i]);
  EXPECT_EQ(differ, 0u) << "of 512 values of lambda 7.5 (first: " << w[0] << " from word " << w[512] << ")";
  double sum = 0;
  for (size_t i = 1024; i < 1536; ++i) {
    sum += w[i];
    EXPECT_NEAR(w[i], 3000.0, 6 * std::sqrt(3000.0)) << i;
  }
  EXPECT_NEAR(sum / 512, 3000.0, 5 * std::sqrt(3000.0 / 512));
}

TEST_F(Curand, DeviceGeneratorsWriteNvidiasValuesBitForBitInStreamOrder) {
  expectNvidiasValues(env(), dir_->file("values.bin"));
}

// The CUDA backend (on the fake driver): the values computed on the server's
// CPU and copied to the device in stream order.
TEST(CurandCuda, DeviceGeneratorsWriteNvidiasValuesThroughTheCudaBackend) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), cudaServerToml(dir.path(), "cuda", RGPU_FAKE_CUDA_LIB));
  writeFile(dir.file("client.toml"), clientToml(dir.path(), server.port()));
  expectNvidiasValues("RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR +
                          " RGPU_NVIDIA_CURAND=" + RGPU_NVIDIA_CURAND,
                      dir.file("values.bin"));
}

}  // namespace
}  // namespace rgpu::test
