// What the fake math libraries (fake_cublas.cc, fake_cufft.cc,
// fake_cusolver.cc, fake_cusparse.cc) share: the fake driver's hooks,
// reached in the libcuda.so.1 the worker loaded. `enqueue` queues work on a
// stream's executor in stream order (a nonzero return fails the stream, as a
// faulting kernel would); `record` writes a line to the driver's log.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>
#include <utility>

namespace rgpu::fake {

inline void* driver() { return dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); }

// Queues `work` (a callable returning an int, 0 for success) on `stream`,
// named `what` in the driver's log; false when the fake driver is not loaded.
template <typename Work>
bool enqueue(CUstream stream, const char* what, Work work) {
  using Enqueue = void (*)(CUstream, int (*)(void*), void*, void (*)(void*), const char*);
  static Enqueue fn = [] {
    void* drv = driver();
    auto f = drv ? reinterpret_cast<Enqueue>(dlsym(drv, "rgpu_fake_cuda_enqueue")) : nullptr;
    if (!f) std::fprintf(stderr, "fake library: the fake CUDA driver is not loaded\n");
    return f;
  }();
  if (!fn) return false;
  fn(stream, [](void* p) { return (*static_cast<Work*>(p))(); }, new Work(std::move(work)),
     [](void* p) { delete static_cast<Work*>(p); }, what);
  return true;
}

inline void record(const std::string& line) {
  using Record = void (*)(const char*);
  static Record fn = [] {
    void* drv = driver();
    return drv ? reinterpret_cast<Record>(dlsym(drv, "rgpu_fake_cuda_record")) : nullptr;
  }();
  if (fn) fn(line.c_str());
}

}  // namespace rgpu::fake
