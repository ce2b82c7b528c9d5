// cuRAND (client/rand, docs/curand.md): a device generator's values written
// into the session's memory in stream order. The request carries the whole
// generator (common/curand_cpu.h), so the session keeps nothing for it.
#include "common/curand_cpu.h"
#include "common/log.h"
#include "server/session/session.h"

namespace rgpu::server {

Status Session::onRandFill(const protocol::FrameHeader& h, wire::Request::Reader req) {
  namespace cr = common::curand;
  RGPU_TRY(bulkNotExpected(h));
  auto m = req.getRandFill();
  StreamKey key;
  Status s = checkStream(m.getStream(), key);
  cr::Fill f;
  f.rng = m.getRng(), f.seed = m.getSeed(), f.offset = m.getOffset(), f.position = m.getPosition();
  f.seeded = m.getSeeded();
  f.dist = static_cast<cr::Dist>(m.getDist()), f.mean = m.getMean(), f.stddev = m.getStddev();
  f.lambda = m.getLambda();
  f.slot = m.getSlot();
  f.counted = m.getCounted();
  // Runs of (value, generators) pairs: bounded before anything is made of
  // them; cr::check() checks the rest.
  auto takeRuns = [&s](capnp::List<uint64_t>::Reader list, const char* what,
                       std::vector<std::pair<uint64_t, uint32_t>>& runs) {
    if (s && (list.size() % 2 || list.size() > 2 * cr::kMaxDrawRuns))
      s = Status(err::kInvalidValue, std::string("cuRAND ") + what + " of " + std::to_string(list.size()) + " words");
    for (unsigned i = 0; s && i + 1 < list.size(); i += 2)
      runs.push_back({list[i], static_cast<uint32_t>(std::min<uint64_t>(list[i + 1], UINT32_MAX))});
  };
  takeRuns(m.getDraws(), "draw counts", f.draws);
  takeRuns(m.getKept(), "kept normals", f.kept);
  f.dims = m.getDims(), f.call_start = m.getCallStart(), f.call_count = m.getCallCount();
  auto directions = m.getDirections(), scramble = m.getScramble();
  if (s && (directions.size() > cr::kMaxSobolDimensions * 128 || scramble.size() > cr::kMaxSobolDimensions * 2))
    s = Status(err::kInvalidValue, "Sobol tables of " + std::to_string(directions.size()) + " words");
  if (s) {
    f.directions.reserve(directions.size()), f.scramble.reserve(scramble.size());
    for (uint32_t w : directions) f.directions.push_back(w);
    for (uint32_t w : scramble) f.scramble.push_back(w);
  }
  if (s) s = cr::check(f);
  const uint64_t count = m.getCount();
  const uint32_t width = s ? cr::valueBytes(f.dist) : 4;
  if (s && count > UINT64_MAX / width) s = Status(err::kInvalidValue, "too many cuRAND values");
  int dev = -1;
  if (s) s = allocs_.check(m.getPtr(), count * width, &dev);
  if (s && dev != key.device)
    s = Status(err::kInvalidValue, "the cuRAND output is on device " + std::to_string(dev) + ", the stream on device " +
                                       std::to_string(key.device));
  if (s) s = backend_->randFill(key, f, m.getPtr(), count);
  if (!s) RGPU_LOG_WARN("session {}: cuRAND generation refused: {}", session_id_, s.message());
  finish(h, s);
  return Status::ok();
}

}  // namespace rgpu::server
