// What the checkpoint tests of both backends share (device_image_test.cc,
// cuda_checkpoint_test.cc): a module with variables, a file key, and a wait
// for a device's queued work.
#pragma once

#include <condition_variable>
#include <mutex>

#include "server/backend/backend.h"
#include "server/checkpoint/checkpoint_stream.h"

namespace rgpu::server {

// A module with two variables (one initialised) and a kernel `bump` that
// counts in one and writes the count to its argument.
inline constexpr char kCheckpointTestPtx[] = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .global .align 4 .u32 counter = 5;
.visible .global .align 8 .b8 table[64];
.visible .entry bump(.param .u64 out) {
  .reg .u64 %rd<3>;
  .reg .b32 %r<3>;
  ld.param.u64 %rd1, [out];
  ld.global.u32 %r1, [counter];
  add.u32 %r1, %r1, 1;
  st.global.u32 [counter], %r1;
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
)";

inline CheckpointKey testKey() {
  CheckpointKey k;
  k.bytes.fill(0x5a);
  return k;
}

// Waits until device 0 has run what was queued on it.
inline Status syncDevice(Backend& b) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status out;
  RGPU_TRY(b.whenDeviceDone(0, [&](Status st) {
    std::lock_guard lock(mu);
    out = st;
    done = true;
    cv.notify_all();
  }));
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  return out;
}

}  // namespace rgpu::server
