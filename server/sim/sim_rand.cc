// cuRAND on the sim backend: the generator's values, computed on the stream's
// thread as NVIDIA's library computes them (common/curand_cpu.h), straight
// into device memory (host memory here).
#include "server/sim/sim_backend.h"

namespace rgpu::server {

Status SimBackend::randFill(StreamKey s, const common::curand::Fill& f, DevPtr out, uint64_t count) {
  return enqueue(s, [f, out, count] {
    // (The session checked the call, common::curand::check, and the range: this cannot fail.)
    (void)common::curand::generate(f, reinterpret_cast<void*>(out), count);
  });
}

}  // namespace rgpu::server
