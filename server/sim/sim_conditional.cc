// Conditional graph nodes on the sim backend (backend.h): handles are device
// words, bodies are recorded operations, and a conditional node is one
// operation of its stream that reads the word and runs the bodies it picks.
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "server/sim/sim_backend.h"

namespace rgpu::server {

struct Backend::Body {
  std::vector<std::function<void()>> ops;
};

Result<uint64_t> SimBackend::conditionalHandle(int device) {
  std::lock_guard lock(mu_);
  auto p = allocateLocked(device, sizeof(uint32_t));
  if (!p) return p.status();
  std::memset(reinterpret_cast<void*>(*p), 0, sizeof(uint32_t));
  return *p;
}

Status SimBackend::restoreConditionalHandle(int device, uint64_t handle) {
  std::lock_guard lock(mu_);
  return allocateAtLocked(device, handle, sizeof(uint32_t));
}

Status SimBackend::beginBody() {
  std::lock_guard lock(mu_);
  recording_.emplace_back();
  return Status::ok();
}

Result<std::shared_ptr<Backend::Body>> SimBackend::endBody() {
  std::lock_guard lock(mu_);
  if (recording_.empty()) return Status(err::kUnknown, "endBody without beginBody");
  auto body = std::make_shared<Body>();
  body->ops = std::move(recording_.back());
  recording_.pop_back();
  return body;
}

Status SimBackend::conditional(StreamKey key, uint64_t handle, int type, std::vector<std::shared_ptr<Body>> bodies) {
  if (type < 0 || type > 2 || bodies.empty() || (type == 1 && bodies.size() != 1) || (type == 0 && bodies.size() > 2))
    return Status(err::kInvalidValue, "malformed conditional node");
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  return enqueueLocked(*s, [this, handle, type, bodies = std::move(bodies)] {
    const uint64_t faults = faults_.load();
    // As a kernel: stopped past [limits] kernel_timeout_ms (a while node whose value never becomes 0).
    const auto start = std::chrono::steady_clock::now();
    auto overdue = [&] {
      return opts_.kernel_timeout_ms &&
             std::chrono::steady_clock::now() - start > std::chrono::milliseconds(opts_.kernel_timeout_ms);
    };
    auto value = [&] {
      uint32_t v;
      std::memcpy(&v, reinterpret_cast<const void*>(handle), sizeof v);
      return v;
    };
    // False once the session ends or a kernel faulted (the stream's later work is moot).
    auto run = [&](const Body& b) {
      for (const auto& op : b.ops) {
        if (cancel_.load() || faults_.load() != faults) return false;
        op();
      }
      return !cancel_.load() && faults_.load() == faults;
    };
    switch (type) {
      case 0:  // if (/else)
        if (value()) (void)run(*bodies[0]);
        else if (bodies.size() > 1) (void)run(*bodies[1]);
        break;
      case 1:  // while
        while (value() && run(*bodies[0])) {
          if (overdue()) {
            reportAsync(Status(err::kLaunchTimeout, "a conditional while node looped longer than [limits] "
                                                    "kernel_timeout_ms = " + std::to_string(opts_.kernel_timeout_ms) +
                                                    " ms"));
            break;
          }
          // Spins as the GPU would until the value changes (a kernel of another stream may set it).
          if (bodies[0]->ops.empty()) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        break;
      default:  // switch
        if (uint32_t v = value(); v < bodies.size()) (void)run(*bodies[v]);
        break;
    }
  });
}

}  // namespace rgpu::server
