// What the CUDA backend's tests on the fake driver (tests/fake_driver) share:
// the driver's test hooks, from the same library CudaBackend dlopens, and a
// device-to-host read through a backend.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "server/backend/backend.h"

namespace rgpu::server::cuda {

struct FakeHooks {
  FakeHooks() {
    void* h = ::dlopen(RGPU_FAKE_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
    log = reinterpret_cast<const char* (*)()>(::dlsym(h, "rgpu_fake_cuda_log"));
    clear = reinterpret_cast<void (*)()>(::dlsym(h, "rgpu_fake_cuda_clear_log"));
    fail = reinterpret_cast<void (*)(const char*, int)>(::dlsym(h, "rgpu_fake_cuda_fail"));
    reset_sticky = reinterpret_cast<void (*)()>(::dlsym(h, "rgpu_fake_cuda_reset_sticky"));
    drop_objects = reinterpret_cast<void (*)()>(::dlsym(h, "rgpu_fake_cuda_drop_objects"));
  }
  const char* (*log)() = nullptr;
  void (*clear)() = nullptr;
  void (*fail)(const char*, int) = nullptr;
  void (*reset_sticky)() = nullptr;
  void (*drop_objects)() = nullptr;  // texture and surface objects: a new process's start afresh
};

inline FakeHooks& hooks() {
  static FakeHooks h;
  return h;
}

// `n` bytes at `src`, read on stream `s` (`st`: the read's status).
inline std::vector<uint8_t> readBack(Backend& b, StreamKey s, DevPtr src, uint64_t n, Status* st = nullptr) {
  std::promise<std::vector<uint8_t>> p;
  Status e = b.copyFromDevice(s, src, n, [&](Status r, const uint8_t* d, uint64_t size, const server::OnWire&) {
    if (st) *st = r;
    p.set_value(std::vector<uint8_t>(d, d + (r ? size : 0)));
  });
  EXPECT_TRUE(e) << e.message();
  return p.get_future().get();
}

}  // namespace rgpu::server::cuda
