// common/spin.h: spinning pauses, process-wide, once a yield comes back late.
#include "common/spin.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <thread>

namespace rgpu::common {
namespace {

void pinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

TEST(Spin, AYieldThatLosesTheCoreToAHogPausesSpinningThenItResumes) {
  cpu_set_t before;
  pthread_getaffinity_np(pthread_self(), sizeof before, &before);
  pinToCpu(0);
  std::atomic<bool> stop{false};
  std::thread hog([&] {  // a busy loop on the same core: a yield hands it the core for a slice
    pinToCpu(0);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  bool late = false;
  for (int i = 0; i < 200 && !late; ++i) late = !spinYield();
  stop = true;
  hog.join();
  pthread_setaffinity_np(pthread_self(), sizeof before, &before);
  ASSERT_TRUE(late) << "no yield came back after " << kLateYield.count() << " us with a hog on the core";
  EXPECT_FALSE(spinningPays()) << "the process blocks instead of spinning for kBusyPause";
  EXPECT_FALSE(spinYield()) << "and does not yield meanwhile";
  std::this_thread::sleep_for(kBusyPause + std::chrono::milliseconds(5));
  EXPECT_TRUE(spinningPays()) << "spinning is tried again after kBusyPause";
}

}  // namespace
}  // namespace rgpu::common
