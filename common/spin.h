// Busy-waiting that stops while the machine is busy.
//
// A waiter that spins (yielding) answers sooner than one that blocks, but only
// while a core is free: with every core taken (a compiler, a training job
// beside it), sched_yield hands the core to the other task until the next
// scheduler tick — 4 ms at HZ=250, on every call — while a blocked waiter is
// woken ahead of CPU hogs. So each yield is timed: one that came back after
// kLateYield means the cores are busy, and no thread of the process spins for
// kBusyPause after it (it blocks at once); then spinning is tried again.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace rgpu::common {

// A yield that took this long: another task held the core for a time slice.
inline constexpr std::chrono::microseconds kLateYield{1000};
// How long the process blocks instead of spinning after one.
inline constexpr std::chrono::milliseconds kBusyPause{50};

namespace detail {
inline std::atomic<int64_t> g_busy_until{0};  // steady_clock ticks; spinning resumes after
inline int64_t nowTicks() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
}  // namespace detail

// Whether spinning may help now (no late yield in the last kBusyPause).
inline bool spinningPays() {
  return detail::nowTicks() >= detail::g_busy_until.load(std::memory_order_relaxed);
}

// One round of a spin-wait: yields once if spinning pays now. False: block
// instead (the cores are busy, or this yield came back late, which pauses
// spinning process-wide).
inline bool spinYield() {
  if (!spinningPays()) return false;
  const int64_t t = detail::nowTicks();
  std::this_thread::yield();
  const int64_t now = detail::nowTicks();
  if (now - t < std::chrono::duration_cast<std::chrono::steady_clock::duration>(kLateYield).count()) return true;
  detail::g_busy_until.store(now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(kBusyPause).count(),
                             std::memory_order_relaxed);
  return false;
}

// Spins (spinYield) until done() or `limit` has passed or spinning stops
// paying; returns done(). For waits that are usually over within a wake-up.
template <typename Done>
bool spinFor(std::chrono::microseconds limit, Done&& done) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until || !spinYield()) return done();
  }
  return true;
}

// Nanoseconds of steady_clock (CLOCK_MONOTONIC: one clock for every process of
// the host, so a client's and a server's stamps on loopback compare).
inline uint64_t monotonicNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace rgpu::common
