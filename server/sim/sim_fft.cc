#include "server/sim/sim_fft.h"

#include <fftw3.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "common/log.h"

namespace rgpu::server::simfft {

namespace fft = common::fft;

namespace {

// One FFTW plan of either precision, destroyed with the last user.
struct Plan {
  fftwf_plan f = nullptr;
  fftw_plan d = nullptr;
  ~Plan() {
    std::lock_guard lock(planner());
    if (f) fftwf_destroy_plan(f);
    if (d) fftw_destroy_plan(d);
  }
  static std::mutex& planner() {
    static std::mutex mu;
    return mu;
  }
};

struct Key {
  fft::Layout l;
  int direction;
  auto tie() const {
    return std::tuple(l.type, l.rank, l.n[0], l.n[1], l.n[2], l.is[0], l.is[1], l.is[2], l.os[0], l.os[1], l.os[2],
                      l.batch, l.idist, l.odist, l.in_place, direction);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// FFTW's guru dimensions of `l`: the transform's, and the batch's.
struct Dims {
  fftw_iodim64 dims[fft::kMaxRank];
  fftw_iodim64 batch;
};
Dims dimsOf(const fft::Layout& l) {
  Dims d{};
  for (int k = 0; k < l.rank; ++k) d.dims[k] = {l.n[k], l.is[k], l.os[k]};
  d.batch = {l.batch, l.idist, l.odist};
  return d;
}

std::shared_ptr<Plan> make(const fft::Layout& l, int direction, void* in, void* out) {
  auto p = std::make_shared<Plan>();
  Dims d = dimsOf(l);
  const unsigned flags = FFTW_ESTIMATE | FFTW_UNALIGNED;
  std::lock_guard lock(Plan::planner());
  switch (l.type) {
    case fft::kC2C:
      p->f = fftwf_plan_guru64_dft(l.rank, d.dims, 1, &d.batch, static_cast<fftwf_complex*>(in),
                                   static_cast<fftwf_complex*>(out), direction < 0 ? FFTW_FORWARD : FFTW_BACKWARD, flags);
      break;
    case fft::kR2C:
      p->f = fftwf_plan_guru64_dft_r2c(l.rank, d.dims, 1, &d.batch, static_cast<float*>(in),
                                       static_cast<fftwf_complex*>(out), flags);
      break;
    case fft::kC2R:
      p->f = fftwf_plan_guru64_dft_c2r(l.rank, d.dims, 1, &d.batch, static_cast<fftwf_complex*>(in),
                                       static_cast<float*>(out), flags);
      break;
    case fft::kZ2Z:
      p->d = fftw_plan_guru64_dft(l.rank, d.dims, 1, &d.batch, static_cast<fftw_complex*>(in),
                                  static_cast<fftw_complex*>(out), direction < 0 ? FFTW_FORWARD : FFTW_BACKWARD, flags);
      break;
    case fft::kD2Z:
      p->d = fftw_plan_guru64_dft_r2c(l.rank, d.dims, 1, &d.batch, static_cast<double*>(in),
                                      static_cast<fftw_complex*>(out), flags);
      break;
    case fft::kZ2D:
      p->d = fftw_plan_guru64_dft_c2r(l.rank, d.dims, 1, &d.batch, static_cast<fftw_complex*>(in),
                                      static_cast<double*>(out), flags);
      break;
  }
  if (!p->f && !p->d) return nullptr;
  return p;
}

// The plan for `key`, made on first use.
std::shared_ptr<Plan> planFor(const Key& key, void* in, void* out) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Plan>> plans;
  {
    std::lock_guard lock(mu);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
  }
  std::shared_ptr<Plan> p = make(key.l, key.direction, in, out);
  if (!p) return nullptr;
  std::lock_guard lock(mu);
  if (plans.size() >= kPlans) plans.clear();  // users running a plan keep it alive
  return plans.try_emplace(key, std::move(p)).first->second;
}

}  // namespace

Status execute(const fft::Layout& l, int direction, void* in, void* out) {
  const int dir = fft::isComplexToComplex(l.type) ? (direction < 0 ? -1 : 1) : 0;
  std::shared_ptr<Plan> p = planFor(Key{l, dir}, in, out);
  if (!p)
    return Status(err::kNotSupported, "FFTW cannot plan this cuFFT layout" +
                                          std::string(l.in_place ? " in place" : "") + " (docs/cufft.md)");
  switch (l.type) {
    case fft::kC2C: fftwf_execute_dft(p->f, static_cast<fftwf_complex*>(in), static_cast<fftwf_complex*>(out)); break;
    case fft::kR2C: fftwf_execute_dft_r2c(p->f, static_cast<float*>(in), static_cast<fftwf_complex*>(out)); break;
    case fft::kC2R: fftwf_execute_dft_c2r(p->f, static_cast<fftwf_complex*>(in), static_cast<float*>(out)); break;
    case fft::kZ2Z: fftw_execute_dft(p->d, static_cast<fftw_complex*>(in), static_cast<fftw_complex*>(out)); break;
    case fft::kD2Z: fftw_execute_dft_r2c(p->d, static_cast<double*>(in), static_cast<fftw_complex*>(out)); break;
    case fft::kZ2D: fftw_execute_dft_c2r(p->d, static_cast<fftw_complex*>(in), static_cast<double*>(out)); break;
  }
  return Status::ok();
}

}  // namespace rgpu::server::simfft

// The sim backend's side (sim_backend.h).
#include "server/sim/sim_backend.h"

namespace rgpu::server {

Result<uint64_t> SimBackend::fftWorkSize(int, uint64_t, const common::fft::Plan&) { return uint64_t{0}; }

Status SimBackend::fftExec(StreamKey key, uint64_t, const common::fft::Plan&, const common::fft::Layout& l,
                           int direction, DevPtr in, DevPtr out, DevPtr, uint64_t) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (gate_) gate_->queued(key.device);
  Status queued = enqueueLocked(*s, [this, key, l, direction, in, out] {
    Status st;
    runAsKernel(key.device, [&] {
      st = simfft::execute(l, direction, reinterpret_cast<void*>(in), reinterpret_cast<void*>(out));
    });
    if (!st) reportAsync(Status(st.code(), "cufftExec: " + st.message()));
  });
  if (!queued && gate_) gate_->done(key.device, 0, false);
  return queued;
}

}  // namespace rgpu::server
