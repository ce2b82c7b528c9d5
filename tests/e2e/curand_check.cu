// cuRAND's host API through rgpu (docs/curand.md): device generators write
// into device memory in stream order, and the values are written to a file
// for the test to compare with NVIDIA's own generator, bit for bit.
//
//   curand_check OUT
//
// Two Philox4x32-10 device generators:
//   A: seed 1234, offset 17, on a stream of its own: 100003 32-bit values,
//      1001 uniform floats, 2002 normal floats (mean 1, stddev 2), 6
//      log-normal floats (mean 0, stddev 0.5), then 512 32-bit values from a
//      CUDA graph that captured the call, launched twice;
//   B: seed 99 (the default ordering set explicitly): 70001 uniform doubles
//      and 4002 normal doubles (mean -1, stddev 3), then 300001 32-bit values;
//   C, D: the default type (XORWOW), seeds 5 and 6: from C, 50001 uniform
//      floats, 2002 normal floats, 1001 32-bit values and 100 normal doubles;
//      from D, 2002 and 2000 normal floats (an odd count of its normals is
//      refused, as NVIDIA's);
//   E: MRG32k3a, seed 7, offset 3: 90001 uniform floats (past its 81920
//      generators), 1000 normal doubles (mean 2, stddev 0.5) and 33 32-bit
//      values, each kind going on from where the last left its generators;
//   F: MTGP32, seed 11: 50001 normal floats (mean 1, stddev 3), 70001
//      uniform doubles and 3 32-bit values; an offset is a type error;
//   G: scrambled Sobol32, 3 dimensions, offset 4: 3003 uniform floats, then
//      300 normal doubles (mean 0.5, stddev 2) -- in two calls the second of
//      which goes on in each dimension;
//   H: Sobol64 (the quasi default ordering set), 2 dimensions: 1000 64-bit
//      values and 500 log-normal floats (mean 0, stddev 1), then 3 dimensions
//      and 30 uniform doubles (going on from index 750); a count that is not a multiple of
//      its 3 dimensions, 32-bit values of it and a seed are refused, as NVIDIA's;
//      then 300 Poisson values (lambda 20: inversion of its 64-bit words);
//   P: XORWOW, seed 21: 4099 Poisson values (lambda 12.5), 1001 uniform
//      floats, 5000 Poisson values (lambda 1999.5); lambda 0 is refused with
//      OUT_OF_RANGE (as NVIDIA's);
//   Q: MTGP32, seed 22: 1000 Poisson values of lambda 500 (inversion) and
//      1000 of lambda 9000.5 (normal approximation);
//   P again: 4097 Poisson values of lambda 2500 (each generator's own
//      normals), 1002 normal floats, 4096 Poisson values of lambda 100000
//      (taking the halves the first call kept);
//   M: MT19937, seed 31 (the LEGACY ordering set; BEST is out of range and an
//      offset a type error, as NVIDIA's): 70001 normal floats (mean 1, stddev
//      2), 3 uniform doubles, 5 Poisson values of lambda 3000.5 and 1001
//      32-bit values;
//   S: XORWOW, seed 41, the SEEDED ordering: 5001 uniform floats, 4097
//      Poisson values of lambda 3000 and 2 normal floats.
// Then curandCreatePoissonDistribution's tables, drawn from in a kernel by
// curand_discrete: each value with the word it came from, to OUT.discrete.
// curandGetDirectionVectors32 gives NVIDIA's table (its first words are printed).
// A host generator with A's settings must give A's first values too.
#include <cuda_runtime.h>
#include <curand.h>
#include <curand_kernel.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    auto e_ = (call);                                                                            \
    if (static_cast<int>(e_) != 0) {                                                             \
      std::printf("curand_check: %s failed: %d\n", #call, static_cast<int>(e_));                 \
      return 2;                                                                                  \
    }                                                                                            \
  } while (0)

// The device API's discrete distribution: each thread draws two values from
// `d` and, from a copy of its state, the two words they were drawn from.
__global__ void discrete(curandDiscreteDistribution_t d, unsigned* values, unsigned* words, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  curandState s;
  curand_init(77, i, 0, &s);
  curandState t = s;
  values[2 * i] = curand_discrete(&s, d);
  values[2 * i + 1] = curand_discrete(&s, d);
  words[2 * i] = curand(&t);
  words[2 * i + 1] = curand(&t);
}

template <typename T>
static int fetch(std::FILE* out, const T* dev, size_t n) {
  std::vector<T> host(n);
  CHECK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::fwrite(host.data(), sizeof(T), n, out);
  return 0;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (whole lines between the libraries' log lines on stderr)
  if (argc < 2) return 2;
  std::FILE* out = std::fopen(argv[1], "wb");
  if (!out) return 2;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  curandGenerator_t a, b;
  CHECK(curandCreateGenerator(&a, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CHECK(curandSetPseudoRandomGeneratorSeed(a, 1234));
  CHECK(curandSetGeneratorOffset(a, 17));
  CHECK(curandSetStream(a, stream));
  unsigned* bits;
  float *uniform, *normal, *lognormal;
  CHECK(cudaMalloc(&bits, 100003 * sizeof(unsigned)));
  CHECK(cudaMalloc(&uniform, 1001 * sizeof(float)));
  CHECK(cudaMalloc(&normal, 2002 * sizeof(float)));
  CHECK(cudaMalloc(&lognormal, 6 * sizeof(float)));
  CHECK(curandGenerate(a, bits, 100003));
  CHECK(curandGenerateUniform(a, uniform, 1001));
  CHECK(curandGenerateNormal(a, normal, 2002, 1.f, 2.f));
  CHECK(curandGenerateLogNormal(a, lognormal, 6, 0.f, 0.5f));
  CHECK(cudaStreamSynchronize(stream));
  if (fetch(out, bits, 100003) || fetch(out, uniform, 1001) || fetch(out, normal, 2002) || fetch(out, lognormal, 6))
    return 2;
  // Captured into a graph: the generator moves on at the capture, and each
  // launch writes the values the captured call stood for.
  unsigned* captured;
  CHECK(cudaMalloc(&captured, 512 * sizeof(unsigned)));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(curandGenerate(a, captured, 512));
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 2; ++launch) {
    CHECK(cudaMemsetAsync(captured, 0, 512 * sizeof(unsigned), stream));
    CHECK(cudaGraphLaunch(exec, stream));
  }
  CHECK(cudaStreamSynchronize(stream));
  if (fetch(out, captured, 512)) return 2;

  CHECK(curandCreateGenerator(&b, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CHECK(curandSetPseudoRandomGeneratorSeed(b, 99));
  CHECK(curandSetGeneratorOrdering(b, CURAND_ORDERING_PSEUDO_DEFAULT));
  double *uniform_d, *normal_d;
  CHECK(cudaMalloc(&uniform_d, 70001 * sizeof(double)));
  CHECK(cudaMalloc(&normal_d, 4002 * sizeof(double)));
  CHECK(curandGenerateUniformDouble(b, uniform_d, 70001));
  CHECK(curandGenerateNormalDouble(b, normal_d, 4002, -1.0, 3.0));
  if (fetch(out, uniform_d, 70001) || fetch(out, normal_d, 4002)) return 2;
  unsigned* bits_b;  // 32-bit values after doubles, past the first row of its threads
  CHECK(cudaMalloc(&bits_b, 300001 * sizeof(unsigned)));
  CHECK(curandGenerate(b, bits_b, 300001));
  if (fetch(out, bits_b, 300001)) return 2;

  // C and D: the default generator (XORWOW), seeds 5 and 6: from C, 50001
  // uniform floats, 2002 normal floats, 1001 32-bit values and 100 normal
  // doubles (each kind going on from where the last left each of its
  // generators); from D, 2002 and 2000 normal floats (its normals come in pairs).
  curandGenerator_t c, d;
  CHECK(curandCreateGenerator(&c, CURAND_RNG_PSEUDO_DEFAULT));
  CHECK(curandSetPseudoRandomGeneratorSeed(c, 5));
  CHECK(curandCreateGenerator(&d, CURAND_RNG_PSEUDO_DEFAULT));
  CHECK(curandSetPseudoRandomGeneratorSeed(d, 6));
  float *uniform_c, *normal_d1;
  CHECK(cudaMalloc(&uniform_c, 50001 * sizeof(float)));
  CHECK(cudaMalloc(&normal_d1, 4002 * sizeof(float)));
  float* normal_c;
  unsigned* bits_c;
  double* normal_dc;
  CHECK(cudaMalloc(&normal_c, 2002 * sizeof(float)));
  CHECK(cudaMalloc(&bits_c, 1001 * sizeof(unsigned)));
  CHECK(cudaMalloc(&normal_dc, 100 * sizeof(double)));
  CHECK(curandGenerateUniform(c, uniform_c, 50001));
  CHECK(curandGenerateNormal(c, normal_c, 2002, 0.f, 1.f));
  CHECK(curandGenerate(c, bits_c, 1001));
  CHECK(curandGenerateNormalDouble(c, normal_dc, 100, 0., 1.));
  CHECK(curandGenerateNormal(d, normal_d1, 2002, 0.f, 1.f));
  CHECK(curandGenerateNormal(d, normal_d1 + 2002, 2000, 0.f, 1.f));
  if (fetch(out, uniform_c, 50001) || fetch(out, normal_c, 2002) || fetch(out, bits_c, 1001) ||
      fetch(out, normal_dc, 100) || fetch(out, normal_d1, 4002))
    return 2;
  std::printf("XORWOW, 3 normals: %s\n", curandGenerateNormal(d, normal_d1, 3, 0.f, 1.f) == CURAND_STATUS_LENGTH_NOT_MULTIPLE
                                                ? "LENGTH_NOT_MULTIPLE"
                                                : "accepted");
  CHECK(curandDestroyGenerator(c));
  CHECK(curandDestroyGenerator(d));

  curandGenerator_t e;
  CHECK(curandCreateGenerator(&e, CURAND_RNG_PSEUDO_MRG32K3A));
  CHECK(curandSetPseudoRandomGeneratorSeed(e, 7));
  CHECK(curandSetGeneratorOffset(e, 3));
  float* uniform_e;
  double* normal_e;
  unsigned* bits_e;
  CHECK(cudaMalloc(&uniform_e, 90001 * sizeof(float)));
  CHECK(cudaMalloc(&normal_e, 1000 * sizeof(double)));
  CHECK(cudaMalloc(&bits_e, 33 * sizeof(unsigned)));
  CHECK(curandGenerateUniform(e, uniform_e, 90001));
  CHECK(curandGenerateNormalDouble(e, normal_e, 1000, 2.0, 0.5));
  CHECK(curandGenerate(e, bits_e, 33));
  if (fetch(out, uniform_e, 90001) || fetch(out, normal_e, 1000) || fetch(out, bits_e, 33)) return 2;
  std::printf("MRG32k3a orderings: LEGACY %d, SEEDED %s\n", curandSetGeneratorOrdering(e, CURAND_ORDERING_PSEUDO_LEGACY),
              curandSetGeneratorOrdering(e, CURAND_ORDERING_PSEUDO_SEEDED) == CURAND_STATUS_OUT_OF_RANGE ? "OUT_OF_RANGE"
                                                                                                  : "accepted");
  CHECK(curandDestroyGenerator(e));

  curandGenerator_t m;
  CHECK(curandCreateGenerator(&m, CURAND_RNG_PSEUDO_MTGP32));
  CHECK(curandSetPseudoRandomGeneratorSeed(m, 11));
  std::printf("MTGP32 offset: %s\n",
              curandSetGeneratorOffset(m, 5) == CURAND_STATUS_TYPE_ERROR ? "TYPE_ERROR" : "accepted");
  float* normal_m;
  double* uniform_m;
  unsigned* bits_m;
  CHECK(cudaMalloc(&normal_m, 50001 * sizeof(float)));
  CHECK(cudaMalloc(&uniform_m, 70001 * sizeof(double)));
  CHECK(cudaMalloc(&bits_m, 3 * sizeof(unsigned)));
  CHECK(curandGenerateNormal(m, normal_m, 50001, 1.f, 3.f));
  CHECK(curandGenerateUniformDouble(m, uniform_m, 70001));
  CHECK(curandGenerate(m, bits_m, 3));
  if (fetch(out, normal_m, 50001) || fetch(out, uniform_m, 70001) || fetch(out, bits_m, 3)) return 2;
  CHECK(curandDestroyGenerator(m));

  curandGenerator_t q, r;
  CHECK(curandCreateGenerator(&q, CURAND_RNG_QUASI_SCRAMBLED_SOBOL32));
  CHECK(curandSetQuasiRandomGeneratorDimensions(q, 3));
  CHECK(curandSetGeneratorOffset(q, 4));
  float* uniform_q;
  double* normal_q;
  CHECK(cudaMalloc(&uniform_q, 3003 * sizeof(float)));
  CHECK(cudaMalloc(&normal_q, 300 * sizeof(double)));
  CHECK(curandGenerateUniform(q, uniform_q, 3003));
  CHECK(curandGenerateNormalDouble(q, normal_q, 300, 0.5, 2.0));
  if (fetch(out, uniform_q, 3003) || fetch(out, normal_q, 300)) return 2;
  CHECK(curandCreateGenerator(&r, CURAND_RNG_QUASI_SOBOL64));
  CHECK(curandSetGeneratorOrdering(r, CURAND_ORDERING_QUASI_DEFAULT));
  CHECK(curandSetQuasiRandomGeneratorDimensions(r, 2));
  unsigned long long* bits_r;
  float* lognormal_r;
  CHECK(cudaMalloc(&bits_r, 1000 * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&lognormal_r, 500 * sizeof(float)));
  CHECK(curandGenerateLongLong(r, bits_r, 1000));
  CHECK(curandGenerateLogNormal(r, lognormal_r, 500, 0.f, 1.f));
  if (fetch(out, bits_r, 1000) || fetch(out, lognormal_r, 500)) return 2;
  CHECK(curandSetQuasiRandomGeneratorDimensions(r, 3));  // every dimension goes on from index 750
  double* uniform_r;
  CHECK(cudaMalloc(&uniform_r, 30 * sizeof(double)));
  CHECK(curandGenerateUniformDouble(r, uniform_r, 30));
  if (fetch(out, uniform_r, 30)) return 2;
  unsigned* poisson_r;
  CHECK(cudaMalloc(&poisson_r, 300 * sizeof(unsigned)));
  CHECK(curandGeneratePoisson(r, poisson_r, 300, 20.0));
  if (fetch(out, poisson_r, 300)) return 2;
  std::printf("Sobol64 of 3 dimensions: 1000 values %s, 32-bit values %s, a seed %s\n",
              curandGenerateLongLong(r, bits_r, 1000) == CURAND_STATUS_LENGTH_NOT_MULTIPLE ? "LENGTH_NOT_MULTIPLE" : "accepted",
              curandGenerate(r, reinterpret_cast<unsigned*>(bits_r), 2) == CURAND_STATUS_TYPE_ERROR ? "TYPE_ERROR" : "accepted",
              curandSetPseudoRandomGeneratorSeed(r, 5) == CURAND_STATUS_TYPE_ERROR ? "TYPE_ERROR" : "accepted");
  curandDirectionVectors32_t* vectors = nullptr;
  CHECK(curandGetDirectionVectors32(&vectors, CURAND_DIRECTION_VECTORS_32_JOEKUO6));
  std::printf("direction vectors 32, dimension 2: %u %u %u\n", vectors[1][0], vectors[1][1], vectors[1][2]);
  std::printf("a Sobol64 device generator of 1921 dimensions: %s\n",
              curandSetQuasiRandomGeneratorDimensions(r, 1921) == CURAND_STATUS_ARCH_MISMATCH ? "ARCH_MISMATCH"
                                                                                                : "accepted");
  CHECK(curandDestroyGenerator(q));
  CHECK(curandDestroyGenerator(r));

  // Poisson: XORWOW's table between uniforms, MTGP32's inversion and normal approximation.
  curandGenerator_t p, pm;
  CHECK(curandCreateGenerator(&p, CURAND_RNG_PSEUDO_XORWOW));
  CHECK(curandSetPseudoRandomGeneratorSeed(p, 21));
  unsigned *poisson_p, *poisson_m;
  float* uniform_p;
  CHECK(cudaMalloc(&poisson_p, 9099 * sizeof(unsigned)));
  CHECK(cudaMalloc(&uniform_p, 1001 * sizeof(float)));
  CHECK(curandGeneratePoisson(p, poisson_p, 4099, 12.5));
  CHECK(curandGenerateUniform(p, uniform_p, 1001));
  CHECK(curandGeneratePoisson(p, poisson_p + 4099, 5000, 1999.5));
  if (fetch(out, poisson_p, 4099) || fetch(out, uniform_p, 1001) || fetch(out, poisson_p + 4099, 5000)) return 2;
  std::printf("XORWOW Poisson of lambda 0: %s\n",
              curandGeneratePoisson(p, poisson_p, 10, 0.0) == CURAND_STATUS_OUT_OF_RANGE ? "OUT_OF_RANGE" : "accepted");
  CHECK(curandCreateGenerator(&pm, CURAND_RNG_PSEUDO_MTGP32));
  CHECK(curandSetPseudoRandomGeneratorSeed(pm, 22));
  CHECK(cudaMalloc(&poisson_m, 2000 * sizeof(unsigned)));
  CHECK(curandGeneratePoisson(pm, poisson_m, 1000, 500.0));
  CHECK(curandGeneratePoisson(pm, poisson_m + 1000, 1000, 9000.5));
  if (fetch(out, poisson_m, 2000)) return 2;
  unsigned* poisson_big;
  float* normal_p;
  CHECK(cudaMalloc(&poisson_big, 8193 * sizeof(unsigned)));
  CHECK(cudaMalloc(&normal_p, 1002 * sizeof(float)));
  CHECK(curandGeneratePoisson(p, poisson_big, 4097, 2500.0));
  CHECK(curandGenerateNormal(p, normal_p, 1002, 0.f, 1.f));
  CHECK(curandGeneratePoisson(p, poisson_big + 4097, 4096, 100000.0));
  if (fetch(out, poisson_big, 4097) || fetch(out, normal_p, 1002) || fetch(out, poisson_big + 4097, 4096)) return 2;
  CHECK(curandDestroyGenerator(p));
  CHECK(curandDestroyGenerator(pm));

  curandGenerator_t mt;
  CHECK(curandCreateGenerator(&mt, CURAND_RNG_PSEUDO_MT19937));
  CHECK(curandSetPseudoRandomGeneratorSeed(mt, 31));
  std::printf("MT19937: ordering BEST %s, LEGACY %d, offset %s\n",
              curandSetGeneratorOrdering(mt, CURAND_ORDERING_PSEUDO_BEST) == CURAND_STATUS_OUT_OF_RANGE ? "OUT_OF_RANGE"
                                                                                                    : "accepted",
              curandSetGeneratorOrdering(mt, CURAND_ORDERING_PSEUDO_LEGACY),
              curandSetGeneratorOffset(mt, 5) == CURAND_STATUS_TYPE_ERROR ? "TYPE_ERROR" : "accepted");
  float* normal_mt;
  double* uniform_mt;
  unsigned *poisson_mt, *bits_mt;
  CHECK(cudaMalloc(&normal_mt, 70001 * sizeof(float)));
  CHECK(cudaMalloc(&uniform_mt, 3 * sizeof(double)));
  CHECK(cudaMalloc(&poisson_mt, 5 * sizeof(unsigned)));
  CHECK(cudaMalloc(&bits_mt, 1001 * sizeof(unsigned)));
  CHECK(curandGenerateNormal(mt, normal_mt, 70001, 1.f, 2.f));
  CHECK(curandGenerateUniformDouble(mt, uniform_mt, 3));
  CHECK(curandGeneratePoisson(mt, poisson_mt, 5, 3000.5));
  CHECK(curandGenerate(mt, bits_mt, 1001));
  if (fetch(out, normal_mt, 70001) || fetch(out, uniform_mt, 3) || fetch(out, poisson_mt, 5) ||
      fetch(out, bits_mt, 1001))
    return 2;
  CHECK(curandDestroyGenerator(mt));

  curandGenerator_t sd;
  CHECK(curandCreateGenerator(&sd, CURAND_RNG_PSEUDO_XORWOW));
  CHECK(curandSetPseudoRandomGeneratorSeed(sd, 41));
  CHECK(curandSetGeneratorOrdering(sd, CURAND_ORDERING_PSEUDO_SEEDED));
  float* values_sd;
  unsigned* poisson_sd;
  CHECK(cudaMalloc(&values_sd, 5003 * sizeof(float)));
  CHECK(cudaMalloc(&poisson_sd, 4097 * sizeof(unsigned)));
  CHECK(curandGenerateUniform(sd, values_sd, 5001));
  CHECK(curandGeneratePoisson(sd, poisson_sd, 4097, 3000.0));
  CHECK(curandGenerateNormal(sd, values_sd + 5001, 2, 0.f, 1.f));
  if (fetch(out, values_sd, 5001) || fetch(out, poisson_sd, 4097) || fetch(out, values_sd + 5001, 2)) return 2;
  CHECK(curandDestroyGenerator(sd));
  std::fclose(out);

  // The device API's Poisson distributions (lambda 7.5: NVIDIA's table;
  // 3000: the normal form), drawn by a kernel: values and words to OUT.discrete.
  std::FILE* disc = std::fopen((std::string(argv[1]) + ".discrete").c_str(), "wb");
  for (double lambda : {7.5, 3000.0}) {
    curandDiscreteDistribution_t d;
    CHECK(curandCreatePoissonDistribution(lambda, &d));
    unsigned *values, *words;
    CHECK(cudaMalloc(&values, 2 * 256 * sizeof(unsigned)));
    CHECK(cudaMalloc(&words, 2 * 256 * sizeof(unsigned)));
    discrete<<<2, 128>>>(d, values, words, 256);
    CHECK(cudaGetLastError());
    if (fetch(disc, values, 512) || fetch(disc, words, 512)) return 2;
    CHECK(curandDestroyDistribution(d));
    CHECK(cudaFree(values));
    CHECK(cudaFree(words));
  }
  std::fclose(disc);
  curandDiscreteDistribution_t bad;
  std::printf("a Poisson distribution of lambda -1: %s\n",
              curandCreatePoissonDistribution(-1.0, &bad) == CURAND_STATUS_OUT_OF_RANGE ? "OUT_OF_RANGE" : "accepted");

  // A host generator with A's settings: the same first values.
  curandGenerator_t h;
  CHECK(curandCreateGeneratorHost(&h, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CHECK(curandSetPseudoRandomGeneratorSeed(h, 1234));
  CHECK(curandSetGeneratorOffset(h, 17));
  std::vector<unsigned> host(64), dev(64);
  CHECK(curandGenerate(h, host.data(), 64));
  CHECK(cudaMemcpy(dev.data(), bits, 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
  std::printf("host generator %s the device generator\n", host == dev ? "agrees with" : "DIFFERS from");

  // Out of the program's memory: refused by the server, reported at the next synchronising call.
  CHECK(curandGenerate(a, bits + 100000, 16));
  cudaError_t late = cudaStreamSynchronize(stream);
  std::printf("past the end of an allocation: %s\n", cudaGetErrorName(late));

  int version = 0;
  CHECK(curandGetVersion(&version));
  std::printf("version %d\n", version);
  CHECK(curandDestroyGenerator(a));
  CHECK(curandDestroyGenerator(b));
  CHECK(curandDestroyGenerator(h));
  std::printf("curand_check: done\n");
  return 0;
}
