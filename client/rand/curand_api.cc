// rgpu's libcurand.so.10: cuRAND's host API with NVIDIA's names and version
// node (libcurand.map), every one of the 27 defined here or, for the device
// API's distributions, in curand_discrete.cc (docs/curand.md).
//
// A generator is the client's: its type, seed, offset, stream, how many
// values it gave, and for XORWOW where each of its generators is. Its values are a function of those alone
// (common/curand_cpu.h), so a generation on a device generator is one
// stream-ordered, asynchronous request that says all of it (wire::RandFill):
// nothing to create on the server, nothing a move has to carry. A host
// generator (curandCreateGeneratorHost) computes on this CPU.
//
// The Sobol generators need NVIDIA's direction vectors and scramble
// constants, which only NVIDIA's library holds: they are read out of NVIDIA's
// libcurand.so.10 where it is installed (sobolTables) and travel with each
// generation; without it they answer as below.
//
// Poisson values are one word of the generator each (common/curand_cpu.h);
// the device API's Poisson table is curand_discrete.cc's.
//
// curandGeneratePoissonMethod answers CURAND_STATUS_ARCH_MISMATCH ("does not
// support the requested feature"), with one log line.
#include <curand.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "client/blas/blas_client.h"
#include "common/curand_cpu.h"
#include "common/log.h"

namespace {

using rgpu::Status;
namespace cr = rgpu::common::curand;
namespace err = rgpu::err;

constexpr uint32_t kMagic = 0x52414e44;  // "RAND"

struct Generator {
  uint32_t magic = kMagic;
  bool host = false;
  int device = 0;
  int32_t rng = cr::kPhilox4x32_10;
  uint64_t seed = 0, offset = 0, position = 0;
  cudaStream_t stream = nullptr;
  bool seeded = false;      // XORWOW's SEEDED ordering
  cr::SlotHistory history;  // XORWOW, MRG32k3a: where each of their generators is
  uint32_t dims = 1;        // Sobol
  // Sobol: the index each dimension gives next. It starts at the offset and
  // goes on by n / dims for a call of n values, whatever the dimensions were
  // (a change of dimensions goes on from it, as NVIDIA's does).
  uint64_t sobol_index = 0;
};

// NVIDIA's Sobol tables, read out of NVIDIA's libcurand.so.10 (host memory
// that library keeps): at RGPU_NVIDIA_CURAND, else in the toolkit at
// $CUDA_HOME, $CUDA_PATH or /usr/local/cuda (lib64/libcurand.so.10). By path:
// rgpu's own library has NVIDIA's name. Null when none is found.
struct SobolTables {
  curandDirectionVectors32_t *v32 = nullptr, *sv32 = nullptr;
  curandDirectionVectors64_t *v64 = nullptr, *sv64 = nullptr;
  unsigned* c32 = nullptr;
  unsigned long long* c64 = nullptr;
};
extern "C" curandStatus_t curandGetDirectionVectors32(curandDirectionVectors32_t**, curandDirectionVectorSet_t);
const SobolTables* sobolTables() {
  static const SobolTables* tables = []() -> const SobolTables* {
    std::vector<std::string> paths;
    if (const char* p = std::getenv("RGPU_NVIDIA_CURAND")) paths.push_back(p);
    for (const char* home : {static_cast<const char*>(std::getenv("CUDA_HOME")),
                             static_cast<const char*>(std::getenv("CUDA_PATH")), "/usr/local/cuda"})
      if (home) paths.push_back(std::string(home) + "/lib64/libcurand.so.10");
    for (const std::string& path : paths) {
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      auto dv32 = reinterpret_cast<curandStatus_t (*)(curandDirectionVectors32_t**, curandDirectionVectorSet_t)>(
          ::dlsym(h, "curandGetDirectionVectors32"));
      auto dv64 = reinterpret_cast<curandStatus_t (*)(curandDirectionVectors64_t**, curandDirectionVectorSet_t)>(
          ::dlsym(h, "curandGetDirectionVectors64"));
      auto sc32 = reinterpret_cast<curandStatus_t (*)(unsigned**)>(::dlsym(h, "curandGetScrambleConstants32"));
      auto sc64 = reinterpret_cast<curandStatus_t (*)(unsigned long long**)>(::dlsym(h, "curandGetScrambleConstants64"));
      auto* t = new SobolTables;
      if (!dv32 || dv32 == &curandGetDirectionVectors32 || !dv64 || !sc32 || !sc64 ||
          dv32(&t->v32, CURAND_DIRECTION_VECTORS_32_JOEKUO6) != CURAND_STATUS_SUCCESS ||
          dv32(&t->sv32, CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6) != CURAND_STATUS_SUCCESS ||
          dv64(&t->v64, CURAND_DIRECTION_VECTORS_64_JOEKUO6) != CURAND_STATUS_SUCCESS ||
          dv64(&t->sv64, CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6) != CURAND_STATUS_SUCCESS ||
          sc32(&t->c32) != CURAND_STATUS_SUCCESS || sc64(&t->c64) != CURAND_STATUS_SUCCESS) {
        delete t;
        continue;  // (not NVIDIA's: the library stays mapped, as a failed dlopen's would)
      }
      return t;  // (NVIDIA's library stays loaded: the tables are its memory)
    }
    return nullptr;
  }();
  return tables;
}

// The tables of generator `g`'s dimensions, as a generation carries them.
// NVIDIA's tables are rows of 32-bit (or little-endian 64-bit) words, one
// row per dimension: the words a Fill carries, in the same order.
void sobolFill(const Generator& g, const SobolTables& t, cr::Fill& f) {
  const bool scrambled = cr::isScrambled(g.rng), wide = cr::isSobol64(g.rng);
  const auto* vectors = reinterpret_cast<const uint32_t*>(
      wide ? static_cast<const void*>(scrambled ? t.sv64 : t.v64) : static_cast<const void*>(scrambled ? t.sv32 : t.v32));
  f.directions.assign(vectors, vectors + static_cast<size_t>(g.dims) * cr::directionWords(g.rng));
  if (!scrambled) return;
  const auto* constants = reinterpret_cast<const uint32_t*>(wide ? static_cast<const void*>(t.c64) : t.c32);
  f.scramble.assign(constants, constants + static_cast<size_t>(g.dims) * cr::scrambleWords(g.rng));
}

Generator* generatorOf(curandGenerator_t g) {
  auto* p = reinterpret_cast<Generator*>(g);
  return p && p->magic == kMagic ? p : nullptr;
}

// `f(generator)` for a live generator, else NOT_INITIALIZED.
template <typename F>
curandStatus_t withGenerator(curandGenerator_t gen, F&& f) {
  Generator* g = generatorOf(gen);
  return g ? f(*g) : CURAND_STATUS_NOT_INITIALIZED;
}

curandStatus_t unsupported(const std::string& what) {
  rgpu::common::logOnce("curand-unsupported:" + what, what + " is not supported by rgpu's cuRAND (returns "
                                                             "CURAND_STATUS_ARCH_MISMATCH; docs/curand.md)");
  return CURAND_STATUS_ARCH_MISMATCH;
}

// rgpu's error as a cuRAND status (logged once per text).
curandStatus_t toRandStatus(const Status& s, const char* call) {
  curandStatus_t st;
  switch (s.code()) {
    case err::kSuccess: return CURAND_STATUS_SUCCESS;
    case err::kNotSupported: st = CURAND_STATUS_ARCH_MISMATCH; break;
    case err::kMemoryAllocation: st = CURAND_STATUS_ALLOCATION_FAILED; break;
    case err::kInvalidValue: st = CURAND_STATUS_OUT_OF_RANGE; break;
    default: st = CURAND_STATUS_LAUNCH_FAILURE; break;
  }
  rgpu::common::logOnce(std::string("curand:") + call + ":" + s.message(), std::string(call) + ": " + s.message());
  return st;
}

template <typename F>
curandStatus_t guarded(const char* call, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return CURAND_STATUS_ALLOCATION_FAILED;
  } catch (...) {
    return toRandStatus(Status(err::kUnknown, "internal error"), call);
  }
}

curandStatus_t create(curandGenerator_t* out, curandRngType_t type, bool host, const char* call) {
  if (!out) return CURAND_STATUS_OUT_OF_RANGE;
  switch (type) {
    case CURAND_RNG_PSEUDO_PHILOX4_32_10: case CURAND_RNG_PSEUDO_DEFAULT: case CURAND_RNG_PSEUDO_XORWOW:
    case CURAND_RNG_PSEUDO_MRG32K3A: case CURAND_RNG_PSEUDO_MTGP32: case CURAND_RNG_PSEUDO_MT19937: break;
    case CURAND_RNG_QUASI_DEFAULT: case CURAND_RNG_QUASI_SOBOL32: case CURAND_RNG_QUASI_SCRAMBLED_SOBOL32:
    case CURAND_RNG_QUASI_SOBOL64: case CURAND_RNG_QUASI_SCRAMBLED_SOBOL64:
      if (sobolTables()) break;
      return unsupported("the Sobol generators without NVIDIA's libcurand.so.10, whose direction vectors they need "
                         "(set RGPU_NVIDIA_CURAND to its path)");
    default: return CURAND_STATUS_TYPE_ERROR;
  }
  auto g = std::make_unique<Generator>();
  g->host = host;
  g->rng = type == CURAND_RNG_QUASI_DEFAULT ? cr::kSobol32 : static_cast<int32_t>(type);
  if (!host) {
    // A device generator lives in the runtime's session, on the calling thread's device.
    const rgpu::client::ExportTable* t = rgpu::client::blas::table();
    if (!t) return CURAND_STATUS_INITIALIZATION_FAILED;
    if (Status s = t->ready(); !s) {
      toRandStatus(s, call);
      return CURAND_STATUS_INITIALIZATION_FAILED;
    }
    g->device = t->currentDevice();
  }
  *out = reinterpret_cast<curandGenerator_t>(g.release());
  return CURAND_STATUS_SUCCESS;
}

// `count` values of `dist` from `g` into `out` (device or host memory, as `g` is).
curandStatus_t generate(const char* call, curandGenerator_t gen, void* out, size_t count, cr::Dist dist,
                        double mean = 0, double stddev = 1, double lambda = 0) {
  return guarded(call, [&]() -> curandStatus_t {
    Generator* g = generatorOf(gen);
    if (!g) return CURAND_STATUS_NOT_INITIALIZED;
    if (dist == cr::Dist::kPoisson) {
      if (Status s = cr::poissonLambdaCheck(lambda); !s) return toRandStatus(s, call);
    }
    if (count == 0) return CURAND_STATUS_SUCCESS;
    if (!out) return CURAND_STATUS_OUT_OF_RANGE;
    if (count % 2 && cr::pairsOnly(g->rng, dist)) return CURAND_STATUS_LENGTH_NOT_MULTIPLE;  // as NVIDIA's
    const bool sobol = cr::isSobol(g->rng);
    if ((dist == cr::Dist::kBits64) != (sobol && cr::isSobol64(g->rng)) &&
        (dist == cr::Dist::kBits64 || dist == cr::Dist::kBits32))
      return CURAND_STATUS_TYPE_ERROR;  // (32-bit words of a 64-bit generator, or the reverse)
    if (sobol && count % g->dims) return CURAND_STATUS_LENGTH_NOT_MULTIPLE;
    cr::Fill f;
    f.rng = g->rng, f.seed = g->seed, f.offset = g->offset, f.position = g->position, f.seeded = g->seeded;
    f.dist = dist, f.mean = mean, f.stddev = stddev, f.lambda = lambda;
    if (cr::generatorsOf(g->rng)) g->history.call(dist, count, g->offset, f);
    if (sobol) {  // (a call's first index is offset + (call_start - offset) / dims)
      f.dims = g->dims, f.call_count = count;
      f.call_start = f.position = g->offset + (g->sobol_index - g->offset) * g->dims;
      sobolFill(*g, *sobolTables(), f);
    }
    if (g->host) {
      if (Status s = cr::generate(f, out, count); !s) return toRandStatus(s, call);
    } else {
      const rgpu::client::ExportTable* t = rgpu::client::blas::table();
      if (!t) return CURAND_STATUS_NOT_INITIALIZED;
      capnp::MallocMessageBuilder msg;
      auto r = msg.initRoot<rgpu::wire::Request>().initRandFill();
      if (Status s = rgpu::client::blas::setStream(r.initStream(), *t, g->stream, g->device); !s)
        return toRandStatus(s, call);
      r.setRng(f.rng);
      r.setSeed(f.seed);
      r.setSeeded(f.seeded);
      r.setOffset(f.offset);
      r.setPosition(f.position);
      r.setDist(static_cast<uint8_t>(dist));
      r.setMean(mean);
      r.setStddev(stddev);
      r.setLambda(lambda);
      r.setPtr(reinterpret_cast<uint64_t>(out));
      r.setCount(count);
      r.setSlot(f.slot);
      r.setCounted(f.counted);
      // (Runs as (value, generators) pairs.)
      auto setRuns = [](capnp::List<uint64_t>::Builder list, const std::vector<std::pair<uint64_t, uint32_t>>& runs) {
        for (size_t i = 0; i < runs.size(); ++i) {
          list.set(static_cast<unsigned>(2 * i), runs[i].first);
          list.set(static_cast<unsigned>(2 * i + 1), runs[i].second);
        }
      };
      setRuns(r.initDraws(static_cast<unsigned>(2 * f.draws.size())), f.draws);
      setRuns(r.initKept(static_cast<unsigned>(2 * f.kept.size())), f.kept);
      if (sobol) {
        r.setDims(f.dims);
        r.setCallStart(f.call_start);
        r.setCallCount(f.call_count);
        r.setDirections(kj::arrayPtr(f.directions.data(), f.directions.size()));
        r.setScramble(kj::arrayPtr(f.scramble.data(), f.scramble.size()));
      }
      // Asynchronous, as NVIDIA's kernel launch: a bad range surfaces at the next synchronising call.
      if (Status s = t->post(msg); !s) return toRandStatus(s, call);
    }
    g->position += count;
    if (sobol) g->sobol_index += count / g->dims;
    return CURAND_STATUS_SUCCESS;
  });
}

}  // namespace

extern "C" {

#define RGPU_CURAND_API __attribute__((visibility("default")))

RGPU_CURAND_API curandStatus_t curandCreateGenerator(curandGenerator_t* generator, curandRngType_t rng_type) {
  return guarded("curandCreateGenerator", [&] { return create(generator, rng_type, false, "curandCreateGenerator"); });
}

RGPU_CURAND_API curandStatus_t curandCreateGeneratorHost(curandGenerator_t* generator, curandRngType_t rng_type) {
  return guarded("curandCreateGeneratorHost",
                 [&] { return create(generator, rng_type, true, "curandCreateGeneratorHost"); });
}

RGPU_CURAND_API curandStatus_t curandDestroyGenerator(curandGenerator_t generator) {
  Generator* g = generatorOf(generator);
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  g->magic = 0;
  delete g;
  return CURAND_STATUS_SUCCESS;
}

RGPU_CURAND_API curandStatus_t curandGetVersion(int* version) {
  if (!version) return CURAND_STATUS_OUT_OF_RANGE;
  *version = CURAND_VERSION;  // the toolkit's cuRAND this library stands in for
  return CURAND_STATUS_SUCCESS;
}

RGPU_CURAND_API curandStatus_t curandGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CURAND_STATUS_OUT_OF_RANGE;
  switch (type) {
    case MAJOR_VERSION: *value = CURAND_VER_MAJOR; return CURAND_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CURAND_VER_MINOR; return CURAND_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CURAND_VER_PATCH; return CURAND_STATUS_SUCCESS;
    default: return CURAND_STATUS_OUT_OF_RANGE;
  }
}

RGPU_CURAND_API curandStatus_t curandSetStream(curandGenerator_t generator, cudaStream_t stream) {
  return withGenerator(generator, [&](Generator& g) {
    g.stream = stream;
    return CURAND_STATUS_SUCCESS;
  });
}

// The seed changes the key; what it does to a generator that has given values
// is NVIDIA's (common::curand::newSeed). A quasi-random generator has none (a
// type error, as NVIDIA's says).
RGPU_CURAND_API curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t generator, unsigned long long seed) {
  return withGenerator(generator, [&](Generator& g) {
    if (cr::isSobol(g.rng)) return CURAND_STATUS_TYPE_ERROR;
    g.seed = seed;
    cr::newSeed(g.rng, g.offset, g.position, g.history);
    return CURAND_STATUS_SUCCESS;
  });
}

// The next value is the offset's. MTGP32 and MT19937 take none (a type error, as NVIDIA's says).
RGPU_CURAND_API curandStatus_t curandSetGeneratorOffset(curandGenerator_t generator, unsigned long long offset) {
  return withGenerator(generator, [&](Generator& g) {
    if (!cr::takesOffset(g.rng)) return CURAND_STATUS_TYPE_ERROR;
    g.offset = g.position = g.sobol_index = offset;
    g.history.reset();
    return CURAND_STATUS_SUCCESS;
  });
}

// BEST, DEFAULT and LEGACY are one layout for each generator; MT19937 takes
// DEFAULT and LEGACY only. SEEDED is XORWOW's only (out of range for the
// others, as NVIDIA's says): its generators seeded one by one. A change goes
// on from the position reached, as NVIDIA's does.
RGPU_CURAND_API curandStatus_t curandSetGeneratorOrdering(curandGenerator_t generator, curandOrdering_t order) {
  return withGenerator(generator, [&](Generator& g) {
    if (cr::isSobol(g.rng)) return order == CURAND_ORDERING_QUASI_DEFAULT ? CURAND_STATUS_SUCCESS
                                                                          : CURAND_STATUS_OUT_OF_RANGE;
    const bool xorwow = g.rng == CURAND_RNG_PSEUDO_XORWOW || g.rng == CURAND_RNG_PSEUDO_DEFAULT;
    if (order == CURAND_ORDERING_PSEUDO_SEEDED && xorwow) {
      g.seeded = true;
      return CURAND_STATUS_SUCCESS;
    }
    if (order != CURAND_ORDERING_PSEUDO_BEST && order != CURAND_ORDERING_PSEUDO_DEFAULT &&
        order != CURAND_ORDERING_PSEUDO_LEGACY)
      return CURAND_STATUS_OUT_OF_RANGE;
    if (order == CURAND_ORDERING_PSEUDO_BEST && g.rng == cr::kMt19937) return CURAND_STATUS_OUT_OF_RANGE;
    g.seeded = false;
    return CURAND_STATUS_SUCCESS;
  });
}

// A Sobol generator's dimensions (1 to 20,000; every dimension goes on from
// the index the last call left, as NVIDIA's do); pseudo-random generators
// have none (a type error, as NVIDIA's says).
RGPU_CURAND_API curandStatus_t curandSetQuasiRandomGeneratorDimensions(curandGenerator_t generator, unsigned int n) {
  return withGenerator(generator, [&](Generator& g) {
    if (!cr::isSobol(g.rng)) return CURAND_STATUS_TYPE_ERROR;
    if (n < 1 || n > cr::kMaxSobolDimensions) return CURAND_STATUS_OUT_OF_RANGE;
    if (!g.host && n > cr::maxDeviceDimensions(g.rng))
      return unsupported("a Sobol device generator of more than " + std::to_string(cr::maxDeviceDimensions(g.rng)) +
                         " dimensions (its direction vectors travel with each generation; a host generator takes "
                         "20,000)");
    g.dims = n;
    return CURAND_STATUS_SUCCESS;
  });
}

// rgpu keeps no generator state to set up: nothing to do, as NVIDIA's answers.
RGPU_CURAND_API curandStatus_t curandGenerateSeeds(curandGenerator_t generator) {
  return withGenerator(generator, [](Generator&) { return CURAND_STATUS_SUCCESS; });
}

RGPU_CURAND_API curandStatus_t curandGenerate(curandGenerator_t generator, unsigned int* out, size_t num) {
  return generate("curandGenerate", generator, out, num, cr::Dist::kBits32);
}

// 64-bit values come from the 64-bit Sobol generators only (else a type error, as NVIDIA's says).
RGPU_CURAND_API curandStatus_t curandGenerateLongLong(curandGenerator_t generator, unsigned long long* out,
                                                      size_t num) {
  return generate("curandGenerateLongLong", generator, out, num, cr::Dist::kBits64);
}

RGPU_CURAND_API curandStatus_t curandGenerateUniform(curandGenerator_t generator, float* out, size_t num) {
  return generate("curandGenerateUniform", generator, out, num, cr::Dist::kUniform);
}

RGPU_CURAND_API curandStatus_t curandGenerateUniformDouble(curandGenerator_t generator, double* out, size_t num) {
  return generate("curandGenerateUniformDouble", generator, out, num, cr::Dist::kUniformDouble);
}

RGPU_CURAND_API curandStatus_t curandGenerateNormal(curandGenerator_t generator, float* out, size_t n, float mean,
                                                    float stddev) {
  return generate("curandGenerateNormal", generator, out, n, cr::Dist::kNormal, mean, stddev);
}

RGPU_CURAND_API curandStatus_t curandGenerateNormalDouble(curandGenerator_t generator, double* out, size_t n,
                                                          double mean, double stddev) {
  return generate("curandGenerateNormalDouble", generator, out, n, cr::Dist::kNormalDouble, mean, stddev);
}

RGPU_CURAND_API curandStatus_t curandGenerateLogNormal(curandGenerator_t generator, float* out, size_t n, float mean,
                                                       float stddev) {
  return generate("curandGenerateLogNormal", generator, out, n, cr::Dist::kLogNormal, mean, stddev);
}

RGPU_CURAND_API curandStatus_t curandGenerateLogNormalDouble(curandGenerator_t generator, double* out, size_t n,
                                                             double mean, double stddev) {
  return generate("curandGenerateLogNormalDouble", generator, out, n, cr::Dist::kLogNormalDouble, mean, stddev);
}

// (curandCreatePoissonDistribution and curandDestroyDistribution: curand_discrete.cc.)
RGPU_CURAND_API curandStatus_t curandGeneratePoisson(curandGenerator_t generator, unsigned int* out, size_t n,
                                                     double lambda) {
  return generate("curandGeneratePoisson", generator, out, n, cr::Dist::kPoisson, 0, 1, lambda);
}
RGPU_CURAND_API curandStatus_t curandGeneratePoissonMethod(curandGenerator_t, unsigned int*, size_t, double,
                                                           curandMethod_t) {
  return unsupported("curandGeneratePoissonMethod");
}
// NVIDIA's tables themselves (host memory of NVIDIA's library, as NVIDIA's
// calls give them): what a program passes to curand_init for the device API's
// Sobol states.
RGPU_CURAND_API curandStatus_t curandGetDirectionVectors32(curandDirectionVectors32_t** vectors,
                                                           curandDirectionVectorSet_t set) {
  const SobolTables* t = sobolTables();
  if (!t) return unsupported("curandGetDirectionVectors32 without NVIDIA's libcurand.so.10 (set RGPU_NVIDIA_CURAND)");
  if (!vectors) return CURAND_STATUS_OUT_OF_RANGE;
  if (set == CURAND_DIRECTION_VECTORS_32_JOEKUO6) *vectors = t->v32;
  else if (set == CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6) *vectors = t->sv32;
  else return CURAND_STATUS_OUT_OF_RANGE;
  return CURAND_STATUS_SUCCESS;
}
RGPU_CURAND_API curandStatus_t curandGetDirectionVectors64(curandDirectionVectors64_t** vectors,
                                                           curandDirectionVectorSet_t set) {
  const SobolTables* t = sobolTables();
  if (!t) return unsupported("curandGetDirectionVectors64 without NVIDIA's libcurand.so.10 (set RGPU_NVIDIA_CURAND)");
  if (!vectors) return CURAND_STATUS_OUT_OF_RANGE;
  if (set == CURAND_DIRECTION_VECTORS_64_JOEKUO6) *vectors = t->v64;
  else if (set == CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6) *vectors = t->sv64;
  else return CURAND_STATUS_OUT_OF_RANGE;
  return CURAND_STATUS_SUCCESS;
}
RGPU_CURAND_API curandStatus_t curandGetScrambleConstants32(unsigned int** constants) {
  const SobolTables* t = sobolTables();
  if (!t) return unsupported("curandGetScrambleConstants32 without NVIDIA's libcurand.so.10 (set RGPU_NVIDIA_CURAND)");
  if (!constants) return CURAND_STATUS_OUT_OF_RANGE;
  *constants = t->c32;
  return CURAND_STATUS_SUCCESS;
}
RGPU_CURAND_API curandStatus_t curandGetScrambleConstants64(unsigned long long** constants) {
  const SobolTables* t = sobolTables();
  if (!t) return unsupported("curandGetScrambleConstants64 without NVIDIA's libcurand.so.10 (set RGPU_NVIDIA_CURAND)");
  if (!constants) return CURAND_STATUS_OUT_OF_RANGE;
  *constants = t->c64;
  return CURAND_STATUS_SUCCESS;
}

}  // extern "C"
