// Two primitives for threads that hand each other work all the time — a
// program's thread posting calls and its connection's flusher writing them
// (client/connection.h) — where every system call and context switch is paid
// per batch by the very threads the program is waiting for, and, on a busy
// host, by a core the program shares with others.
//
// AdaptiveMutex: lock() spins briefly before it sleeps in the kernel (glibc's
// adaptive mutex: at most about a hundred `pause` rounds, a few microseconds,
// busy host or not). For a lock held for well under a microsecond: a waiter
// that sleeps costs itself a system call and a context switch, and the holder
// a system call to wake it. Wait on it with std::condition_variable_any, not
// std::condition_variable (whose wake-up takes the mutex back marked
// contended, so that the next unlock enters the kernel whether anyone waits
// or not) — or with a Doorbell.
//
// Doorbell: one thread sleeps, others ring. The sleeper reads ticket(),
// releases whatever lock guards the state it waits on, and calls wait(ticket);
// a ring() after that ticket was read ends the wait at once or wakes it, so no
// wake-up is lost between the release and the sleep. Unlike a condition
// variable it takes no mutex of its own on either side: a ring is one atomic
// increment and one FUTEX_WAKE, and the sleeper comes back without touching
// the kernel's view of any mutex. Whether to ring at all (is anyone asleep?)
// is the caller's state, decided under its own lock.
#pragma once

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rgpu::common {

class AdaptiveMutex {
 public:
  AdaptiveMutex() = default;
  AdaptiveMutex(const AdaptiveMutex&) = delete;
  AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;
  ~AdaptiveMutex() { pthread_mutex_destroy(&m_); }

  void lock() { pthread_mutex_lock(&m_); }
  bool try_lock() { return pthread_mutex_trylock(&m_) == 0; }
  void unlock() { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_ = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
};

class Doorbell {
 public:
  static constexpr std::chrono::nanoseconds kForever{-1};

  uint32_t ticket() const { return word_.load(std::memory_order_acquire); }

  // Sleeps until a ring() after `ticket` was read, or `timeout` (kForever: no
  // limit). May return sooner (a signal); callers check their state again.
  void wait(uint32_t ticket, std::chrono::nanoseconds timeout = kForever) {
    timespec ts{};
    timespec* limit = nullptr;
    if (timeout >= std::chrono::nanoseconds::zero()) {
      ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
      ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
      limit = &ts;
    }
    syscall(SYS_futex, word(), FUTEX_WAIT_PRIVATE, ticket, limit, nullptr, 0);
  }

  void ring() {
    word_.fetch_add(1, std::memory_order_acq_rel);
    syscall(SYS_futex, word(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }

 private:
  uint32_t* word() { return reinterpret_cast<uint32_t*>(&word_); }
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  std::atomic<uint32_t> word_{0};
};

}  // namespace rgpu::common
