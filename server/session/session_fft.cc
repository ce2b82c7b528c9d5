// cuFFT (client/fft, docs/cufft.md): a plan's work area, its transforms in
// stream order, its end. Each request carries the plan whole
// (common/fft_plan.h); the session checks it and every range a transform
// reads or writes against the session's allocations.
#include "common/fft_plan.h"
#include "common/log.h"
#include "server/session/session.h"

namespace rgpu::server {

namespace fft = common::fft;

namespace {

Result<fft::Plan> decodePlan(wire::FftDesc::Reader d) {
  fft::Plan p;
  p.type = d.getType();
  p.rank = d.getRank();
  p.advanced = d.getAdvanced();
  p.istride = d.getIstride();
  p.idist = d.getIdist();
  p.ostride = d.getOstride();
  p.odist = d.getOdist();
  p.batch = d.getBatch();
  auto n = d.getN();
  auto in = d.getInembed(), on = d.getOnembed();
  if (p.rank < 1 || p.rank > fft::kMaxRank || n.size() != static_cast<unsigned>(p.rank) ||
      (p.advanced && (in.size() != n.size() || on.size() != n.size())))
    return Status(err::kInvalidValue, "a cuFFT plan of rank " + std::to_string(p.rank) + " with " +
                                          std::to_string(n.size()) + " sizes");
  for (int k = 0; k < p.rank; ++k) {
    p.n[k] = n[k];
    if (p.advanced) {
      p.inembed[k] = in[k];
      p.onembed[k] = on[k];
    }
  }
  if (fft::Verdict v = fft::check(p); !v) return Status(err::kInvalidValue, "cuFFT plan: " + v.why);
  return p;
}

}  // namespace

Status Session::onFftPlan(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getFftPlan();
  auto p = decodePlan(m.getDesc());
  Status s = p.status();
  if (s) s = checkDevice(m.getDevice());
  Result<uint64_t> size = s ? backend_->fftWorkSize(m.getDevice(), m.getPlan(), *p) : Result<uint64_t>(s);
  if (!size) {
    RGPU_LOG_WARN("session {}: cuFFT plan refused: {}", session_id_, size.status().message());
    finish(h, size.status());
    return Status::ok();
  }
  finish(h, Status::ok(), [n = *size](auto& r) { r.setValue(static_cast<int64_t>(n)); });
  return Status::ok();
}

Status Session::onFftExec(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getFftExec();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  auto p = decodePlan(m.getDesc());
  if (s) s = p.status();
  const uint64_t in = m.getInput(), out = m.getOutput(), work = m.getWork(), work_size = m.getWorkSize();
  const int direction = m.getDirection();
  if (s && fft::isComplexToComplex(p->type) && direction != -1 && direction != 1)
    s = Status(err::kInvalidValue, "cuFFT direction " + std::to_string(direction));
  fft::Layout l;
  if (s) l = fft::layoutOf(*p, in == out);
  // Every range on the stream's device.
  auto within = [&](uint64_t ptr, uint64_t bytes, const char* what) -> Status {
    int dev = -1;
    if (bytes > fft::kMaxSpanBytes) return Status(err::kInvalidValue, std::string("the cuFFT ") + what + " spans too much");
    RGPU_TRY(allocs_.check(ptr, bytes, &dev));
    if (dev != key.device)
      return Status(err::kInvalidValue, std::string("the cuFFT ") + what + " is on device " + std::to_string(dev) +
                                            ", the stream on device " + std::to_string(key.device));
    return Status::ok();
  };
  if (s) s = within(in, fft::inputBytes(l), "input");
  if (s) s = within(out, fft::outputBytes(l), "output");
  if (s && work) s = within(work, work_size, "work area");
  if (s) s = backend_->fftExec(key, m.getPlan(), *p, l, direction, in, out, work, work ? work_size : 0);
  if (!s) RGPU_LOG_WARN("session {}: cuFFT transform refused: {}", session_id_, s.message());
  finish(h, s);
  return Status::ok();
}

Status Session::onFftRelease(const protocol::FrameHeader& h, wire::Request::Reader req) {
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getFftRelease();
  if (checkDevice(m.getDevice())) backend_->fftRelease(m.getDevice(), m.getPlan());
  finish(h, Status::ok());
  return Status::ok();
}

}  // namespace rgpu::server
