// CudaBackend's cuFFT: NVIDIA's library (fft_api.h) in the session's primary
// context. Each client plan gets NVIDIA's plan of it on its first use
// (cufftMakePlanMany64 without auto-allocation: the work area is always the
// client's, allocated in its session and charged to its quota), kept until
// the client destroys its plan; a transform sets the request's stream and
// work area and runs as the session's kernel (launch gate, GPU time,
// watchdog). A worker that has not made a plan (after a move) makes it again
// from the description every request carries.
#include "common/log.h"
#include "server/cuda/cuda_backend.h"

namespace rgpu::server::cuda {

namespace fft = common::fft;

namespace {

bool samePlan(const fft::Plan& a, const fft::Plan& b) {
  auto dims = [](const int64_t* v, const fft::Plan& p) { return std::vector<int64_t>(v, v + p.rank); };
  return a.type == b.type && a.rank == b.rank && dims(a.n, a) == dims(b.n, b) && a.advanced == b.advanced &&
         a.batch == b.batch &&
         (!a.advanced || (dims(a.inembed, a) == dims(b.inembed, b) && dims(a.onembed, a) == dims(b.onembed, b) &&
                          a.istride == b.istride && a.idist == b.idist && a.ostride == b.ostride &&
                          a.odist == b.odist));
}

}  // namespace

Result<CudaBackend::FftPlan*> CudaBackend::fftPlan(int dev, uint64_t plan, const fft::Plan& p) {
  if (!fft_tried_) {
    fft_tried_ = true;
    auto a = FftApi::load(opts_.cufft_library);
    if (a) {
      fft_api_ = std::move(*a);
      RGPU_LOG_INFO("cuda: cuFFT loaded ({})", opts_.cufft_library);
    } else {
      fft_error_ = a.status();
      RGPU_LOG_WARN("cuda: {}", fft_error_.message());
    }
  }
  if (!fft_api_) return fft_error_;
  FftApi& F = *fft_api_;
  auto key = std::pair{dev, plan};
  if (auto it = fft_plans_.find(key); it != fft_plans_.end()) {
    if (samePlan(it->second.desc, p)) return &it->second;
    fftRelease(dev, plan);  // (a client reusing a name for another plan)
  }
  RGPU_TRY(use(dev));
  FftPlan made;
  made.desc = p;
  cufftHandle h = 0;
  RGPU_TRY(FftApi::check(F.cufftCreate(&h), "cufftCreate"));
  made.handle = h;
  long long n[fft::kMaxRank], in[fft::kMaxRank], on[fft::kMaxRank];
  for (int k = 0; k < p.rank; ++k) {
    n[k] = p.n[k];
    in[k] = p.inembed[k];
    on[k] = p.onembed[k];
  }
  size_t work = 0;
  Status s = FftApi::check(F.cufftSetAutoAllocation(h, 0), "cufftSetAutoAllocation");
  if (s)
    s = FftApi::check(F.cufftMakePlanMany64(h, p.rank, n, p.advanced ? in : nullptr, p.istride, p.idist,
                                            p.advanced ? on : nullptr, p.ostride, p.odist,
                                            static_cast<cufftType>(p.type), p.batch, &work),
                      "cufftMakePlanMany64");
  if (!s) {
    F.cufftDestroy(h);
    return s;
  }
  made.work_size = work;
  return &fft_plans_.insert_or_assign(key, made).first->second;
}

Result<uint64_t> CudaBackend::fftWorkSize(int device, uint64_t plan, const fft::Plan& p) {
  auto made = fftPlan(device, plan, p);
  if (!made) return made.status();
  return (*made)->work_size;
}

Status CudaBackend::fftExec(StreamKey key, uint64_t plan, const fft::Plan& p, const fft::Layout& l, int direction,
                            DevPtr in, DevPtr out, DevPtr work, uint64_t work_size) {
  auto s = streamOf(key);
  if (!s) return s.status();
  const int dev = s->first;
  auto made = fftPlan(dev, plan, p);
  if (!made) return made.status();
  FftPlan& fp = **made;
  if (fp.work_size > 0 && (!work || work_size < fp.work_size))
    return Status(err::kInvalidValue, "the cuFFT plan needs a work area of " + std::to_string(fp.work_size) +
                                          " bytes, and was given " + std::to_string(work ? work_size : 0));
  FftApi& F = *fft_api_;
  auto stream = reinterpret_cast<cudaStream_t>(s->second);
  RGPU_TRY(FftApi::check(F.cufftSetStream(fp.handle, stream), "cufftSetStream"));
  if (fp.work_size > 0)
    RGPU_TRY(FftApi::check(F.cufftSetWorkArea(fp.handle, reinterpret_cast<void*>(work)), "cufftSetWorkArea"));
  return asKernel(dev, s->second, "cufftExec", [&] {
    auto i = reinterpret_cast<void*>(in);
    auto o = reinterpret_cast<void*>(out);
    switch (l.type) {
      case fft::kC2C:
        return FftApi::check(F.cufftExecC2C(fp.handle, static_cast<cufftComplex*>(i), static_cast<cufftComplex*>(o),
                                            direction),
                             "cufftExecC2C");
      case fft::kR2C:
        return FftApi::check(F.cufftExecR2C(fp.handle, static_cast<cufftReal*>(i), static_cast<cufftComplex*>(o)),
                             "cufftExecR2C");
      case fft::kC2R:
        return FftApi::check(F.cufftExecC2R(fp.handle, static_cast<cufftComplex*>(i), static_cast<cufftReal*>(o)),
                             "cufftExecC2R");
      case fft::kZ2Z:
        return FftApi::check(F.cufftExecZ2Z(fp.handle, static_cast<cufftDoubleComplex*>(i),
                                            static_cast<cufftDoubleComplex*>(o), direction),
                             "cufftExecZ2Z");
      case fft::kD2Z:
        return FftApi::check(F.cufftExecD2Z(fp.handle, static_cast<cufftDoubleReal*>(i),
                                            static_cast<cufftDoubleComplex*>(o)),
                             "cufftExecD2Z");
      case fft::kZ2D:
        return FftApi::check(F.cufftExecZ2D(fp.handle, static_cast<cufftDoubleComplex*>(i),
                                            static_cast<cufftDoubleReal*>(o)),
                             "cufftExecZ2D");
    }
    return Status(err::kInvalidValue, "cuFFT transform type " + std::to_string(l.type));
  });
}

// NVIDIA's plan holds device memory of its own (its tables), which
// transforms still queued read: it is destroyed on the releaser thread once
// the device is done with the work queued so far (as memory is freed).
void CudaBackend::fftRelease(int device, uint64_t plan) {
  auto it = fft_plans_.find({device, plan});
  if (it == fft_plans_.end()) return;
  const int handle = it->second.handle;
  fft_plans_.erase(it);
  Status s = afterDeviceDone(
      device,
      [this, device, handle] {
        RGPU_TRY(use(device));
        return FftApi::check(fft_api_->cufftDestroy(handle), "cufftDestroy");
      },
      [](Status r) {
        if (!r) RGPU_LOG_WARN("cuda: {}", r.message());
      });
  if (!s) RGPU_LOG_WARN("cuda: a cuFFT plan is not destroyed: {}", s.message());
}

// Teardown (the threads stopped, the device idle): every plan left.
void CudaBackend::releaseFft() {
  for (auto& [key, p] : fft_plans_)
    if (use(key.first)) fft_api_->cufftDestroy(p.handle);
  fft_plans_.clear();
}

}  // namespace rgpu::server::cuda
