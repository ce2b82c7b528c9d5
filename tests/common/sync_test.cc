// common/sync.h: a Doorbell loses no ring between ticket() and wait(), wakes
// its sleeper, and times out; an AdaptiveMutex excludes, and works with
// std::condition_variable_any.
#include "common/sync.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace rgpu::common {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(Doorbell, ARingAfterTheTicketWasReadEndsTheWaitAtOnce) {
  Doorbell bell;
  const uint32_t ticket = bell.ticket();
  bell.ring();  // between the ticket and the sleep: e.g. while the sleeper released its lock
  const auto t0 = Clock::now();
  bell.wait(ticket, std::chrono::seconds(10));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1)) << "the ring was lost: the wait ran to its timeout";
  EXPECT_NE(bell.ticket(), ticket);
}

TEST(Doorbell, ARingWakesTheSleeper) {
  Doorbell bell;
  std::mutex mu;
  bool rung = false;  // mu: the state a sleeper checks, as the flusher checks its batch
  std::thread sleeper([&] {
    std::unique_lock lock(mu);
    while (!rung) {
      const uint32_t ticket = bell.ticket();
      lock.unlock();
      bell.wait(ticket);  // no timeout: only the ring ends it
      lock.lock();
    }
  });
  std::this_thread::sleep_for(milliseconds(20));  // (asleep by now, most likely)
  {
    std::lock_guard lock(mu);
    rung = true;
  }
  const auto t0 = Clock::now();
  bell.ring();
  sleeper.join();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(Doorbell, AnUnrungWaitEndsAtItsTimeout) {
  Doorbell bell;
  const auto t0 = Clock::now();
  bell.wait(bell.ticket(), milliseconds(30));
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, milliseconds(29));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(AdaptiveMutex, ExcludesAndWorksWithConditionVariableAny) {
  AdaptiveMutex mu;
  std::condition_variable_any cv;
  uint64_t counter = 0;  // mu
  constexpr int kThreads = 4, kEach = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        std::lock_guard lock(mu);
        ++counter;
      }
      cv.notify_all();
    });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return counter == uint64_t{kThreads} * kEach; }));
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

}  // namespace
}  // namespace rgpu::common
