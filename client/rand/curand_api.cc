// rgpu's libcurand.so.10: cuRAND's host API with NVIDIA's names and version
// node (libcurand.map), every one of the 27 defined here (docs/curand.md).
//
// A generator is the client's: its type, seed, offset, stream, how many
// values it gave, and for XORWOW where each of its generators is. Its values are a function of those alone
// (common/curand_cpu.h), so a generation on a device generator is one
// stream-ordered, asynchronous request that says all of it (wire::RandFill):
// nothing to create on the server, nothing a move has to carry. A host
// generator (curandCreateGeneratorHost) computes on this CPU.
//
// Generators rgpu does not compute (MT19937 and the quasi-random ones), the
// SEEDED ordering, Poisson and the quasi-random tables answer
// CURAND_STATUS_ARCH_MISMATCH ("does not support the requested feature"),
// with one log line naming them.
#include <curand.h>

#include <atomic>
#include <memory>
#include <string>

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
  cr::SlotHistory history;  // XORWOW, MRG32k3a: where each of their generators is
};

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
    case CURAND_RNG_PSEUDO_MRG32K3A: case CURAND_RNG_PSEUDO_MTGP32: break; case CURAND_RNG_PSEUDO_MT19937: case CURAND_RNG_QUASI_DEFAULT:
    case CURAND_RNG_QUASI_SOBOL32: case CURAND_RNG_QUASI_SCRAMBLED_SOBOL32: case CURAND_RNG_QUASI_SOBOL64:
    case CURAND_RNG_QUASI_SCRAMBLED_SOBOL64:
      return unsupported("generator type " + std::to_string(type) +
                         " (XORWOW, the default, MRG32K3A, MTGP32 and PHILOX4_32_10 are)");
    default: return CURAND_STATUS_TYPE_ERROR;
  }
  auto g = std::make_unique<Generator>();
  g->host = host;
  g->rng = static_cast<int32_t>(type);
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
                        double mean = 0, double stddev = 1) {
  return guarded(call, [&]() -> curandStatus_t {
    Generator* g = generatorOf(gen);
    if (!g) return CURAND_STATUS_NOT_INITIALIZED;
    if (count == 0) return CURAND_STATUS_SUCCESS;
    if (!out) return CURAND_STATUS_OUT_OF_RANGE;
    if (count % 2 && cr::pairsOnly(g->rng, dist)) return CURAND_STATUS_LENGTH_NOT_MULTIPLE;  // as NVIDIA's
    cr::Fill f;
    f.rng = g->rng, f.seed = g->seed, f.offset = g->offset, f.position = g->position;
    f.dist = dist, f.mean = mean, f.stddev = stddev;
    if (cr::generatorsOf(g->rng)) g->history.call(dist, count, g->offset, f);
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
      r.setOffset(f.offset);
      r.setPosition(f.position);
      r.setDist(static_cast<uint8_t>(dist));
      r.setMean(mean);
      r.setStddev(stddev);
      r.setPtr(reinterpret_cast<uint64_t>(out));
      r.setCount(count);
      r.setSlot(f.slot);
      r.setCounted(f.counted);
      auto draws = r.initDraws(static_cast<unsigned>(2 * f.draws.size()));
      for (size_t i = 0; i < f.draws.size(); ++i) {
        draws.set(static_cast<unsigned>(2 * i), f.draws[i].first);
        draws.set(static_cast<unsigned>(2 * i + 1), f.draws[i].second);
      }
      // Asynchronous, as NVIDIA's kernel launch: a bad range surfaces at the next synchronising call.
      if (Status s = t->post(msg); !s) return toRandStatus(s, call);
    }
    g->position += count;
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

// The seed changes the key; the generator goes on from where it was (as NVIDIA's does).
RGPU_CURAND_API curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t generator, unsigned long long seed) {
  return withGenerator(generator, [&](Generator& g) {
    g.seed = seed;
    return CURAND_STATUS_SUCCESS;
  });
}

// The next value is the offset's. MTGP32 takes none (a type error, as NVIDIA's says).
RGPU_CURAND_API curandStatus_t curandSetGeneratorOffset(curandGenerator_t generator, unsigned long long offset) {
  return withGenerator(generator, [&](Generator& g) {
    if (!cr::takesOffset(g.rng)) return CURAND_STATUS_TYPE_ERROR;
    g.offset = g.position = offset;
    g.history.reset();
    return CURAND_STATUS_SUCCESS;
  });
}

// BEST, DEFAULT and LEGACY are one layout for each generator (nothing to
// keep). SEEDED is XORWOW's only (out of range for the others, as NVIDIA's
// says), and not computed.
RGPU_CURAND_API curandStatus_t curandSetGeneratorOrdering(curandGenerator_t generator, curandOrdering_t order) {
  return withGenerator(generator, [&](Generator& g) {
    const bool xorwow = g.rng == CURAND_RNG_PSEUDO_XORWOW || g.rng == CURAND_RNG_PSEUDO_DEFAULT;
    if (order == CURAND_ORDERING_PSEUDO_SEEDED && xorwow) return unsupported("CURAND_ORDERING_PSEUDO_SEEDED");
    if (order != CURAND_ORDERING_PSEUDO_BEST && order != CURAND_ORDERING_PSEUDO_DEFAULT &&
        order != CURAND_ORDERING_PSEUDO_LEGACY)
      return CURAND_STATUS_OUT_OF_RANGE;
    return CURAND_STATUS_SUCCESS;
  });
}

// Pseudo-random generators have no dimensions (a type error, as NVIDIA's says).
RGPU_CURAND_API curandStatus_t curandSetQuasiRandomGeneratorDimensions(curandGenerator_t generator, unsigned int) {
  return withGenerator(generator, [](Generator&) { return CURAND_STATUS_TYPE_ERROR; });
}

// rgpu keeps no generator state to set up: nothing to do, as NVIDIA's answers.
RGPU_CURAND_API curandStatus_t curandGenerateSeeds(curandGenerator_t generator) {
  return withGenerator(generator, [](Generator&) { return CURAND_STATUS_SUCCESS; });
}

RGPU_CURAND_API curandStatus_t curandGenerate(curandGenerator_t generator, unsigned int* out, size_t num) {
  return generate("curandGenerate", generator, out, num, cr::Dist::kBits32);
}

// 64-bit values come from the 64-bit quasi-random generators only.
RGPU_CURAND_API curandStatus_t curandGenerateLongLong(curandGenerator_t generator, unsigned long long*, size_t) {
  return withGenerator(generator, [](Generator&) { return CURAND_STATUS_TYPE_ERROR; });
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

RGPU_CURAND_API curandStatus_t curandCreatePoissonDistribution(double, curandDiscreteDistribution_t*) {
  return unsupported("curandCreatePoissonDistribution");
}
RGPU_CURAND_API curandStatus_t curandDestroyDistribution(curandDiscreteDistribution_t) {
  return unsupported("curandDestroyDistribution");
}
RGPU_CURAND_API curandStatus_t curandGeneratePoisson(curandGenerator_t, unsigned int*, size_t, double) {
  return unsupported("curandGeneratePoisson");
}
RGPU_CURAND_API curandStatus_t curandGeneratePoissonMethod(curandGenerator_t, unsigned int*, size_t, double,
                                                           curandMethod_t) {
  return unsupported("curandGeneratePoissonMethod");
}
RGPU_CURAND_API curandStatus_t curandGetDirectionVectors32(curandDirectionVectors32_t**, curandDirectionVectorSet_t) {
  return unsupported("curandGetDirectionVectors32");
}
RGPU_CURAND_API curandStatus_t curandGetDirectionVectors64(curandDirectionVectors64_t**, curandDirectionVectorSet_t) {
  return unsupported("curandGetDirectionVectors64");
}
RGPU_CURAND_API curandStatus_t curandGetScrambleConstants32(unsigned int**) {
  return unsupported("curandGetScrambleConstants32");
}
RGPU_CURAND_API curandStatus_t curandGetScrambleConstants64(unsigned long long**) {
  return unsupported("curandGetScrambleConstants64");
}

}  // extern "C"
