// Stream and event handles stay checked on every call: a destroyed one (by
// this thread or another, or by cudaDeviceReset) is refused even right after
// calls that used it while it was valid. (The client trusts handles a thread
// found valid lately until any handle is removed: client/runtime.cc.)
#include <cuda_runtime.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "check.h"

// A new stream and event, each used once (so this thread has found them valid).
cudaError_t createAndUse(cudaStream_t* s, cudaEvent_t* e) {
  cudaError_t err = cudaStreamCreate(s);
  if (err == cudaSuccess) err = cudaEventCreate(e);
  if (err == cudaSuccess) err = cudaEventRecord(*e, *s);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(*s, *e, 0);
  return err;
}

int main() {
  // Used while valid, then destroyed by this thread.
  cudaStream_t s;
  cudaEvent_t e;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaEventCreate(&e));
  for (int i = 0; i < 3; ++i) {
    CHECK(cudaEventRecord(e, s));
    CHECK(cudaStreamWaitEvent(s, e, 0));
  }
  CHECK(cudaEventDestroy(e));
  EXPECT_ERR(cudaStreamWaitEvent(s, e, 0), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaEventRecord(e, s), cudaErrorInvalidResourceHandle);
  cudaEvent_t e2;
  CHECK(cudaEventCreate(&e2));
  CHECK(cudaEventRecord(e2, s));
  CHECK(cudaStreamDestroy(s));
  EXPECT_ERR(cudaStreamWaitEvent(s, e2, 0), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaEventRecord(e2, s), cudaErrorInvalidResourceHandle);
  CHECK(cudaEventRecord(e2, 0));

  // More streams and events than a thread's cache has slots, in turn; then
  // one of each destroyed: only those are refused.
  std::vector<cudaStream_t> streams(20);
  std::vector<cudaEvent_t> events(20);
  for (auto& x : streams) CHECK(cudaStreamCreate(&x));
  for (auto& x : events) CHECK(cudaEventCreate(&x));
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < streams.size(); ++i) {
      CHECK(cudaEventRecord(events[i], streams[i]));
      CHECK(cudaStreamWaitEvent(streams[(i + 1) % streams.size()], events[i], 0));
    }
  CHECK(cudaStreamDestroy(streams[7]));
  CHECK(cudaEventDestroy(events[12]));
  for (size_t i = 0; i < streams.size(); ++i) {
    const cudaError_t want = i == 7 || i == 12 ? cudaErrorInvalidResourceHandle : cudaSuccess;
    EXPECT_ERR(cudaEventRecord(events[i], streams[i]), want);
  }
  CHECK(cudaDeviceSynchronize());

  // Destroyed by another thread: refused here once that thread is done.
  cudaStream_t t;
  cudaEvent_t te;
  CHECK(createAndUse(&t, &te));
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] {
    other = cudaStreamDestroy(t);
    if (other == cudaSuccess) other = cudaEventDestroy(te);
  }).join();
  CHECK(other);
  EXPECT_ERR(cudaStreamWaitEvent(t, e2, 0), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaStreamWaitEvent(0, te, 0), cudaErrorInvalidResourceHandle);

  // cudaDeviceReset ends every stream and event of the device.
  cudaStream_t r;
  cudaEvent_t re;
  CHECK(createAndUse(&r, &re));
  CHECK(cudaDeviceReset());
  EXPECT_ERR(cudaStreamWaitEvent(r, re, 0), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaEventRecord(re, 0), cudaErrorInvalidResourceHandle);
  CHECK(cudaDeviceSynchronize());
  std::printf("handles: all checks passed\n");
  return 0;
}
