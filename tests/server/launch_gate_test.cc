#include "server/pool/launch_gate.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace rgpu::server {
namespace {

// What a worker of `slot` gets: its own page (a descriptor of its own, as the
// admission reply carries one) and the daemon's answer for other pages.
Result<std::unique_ptr<SharedLaunchGate>> gateOf(GateTableOwner& owner, int slot, std::vector<int> physical) {
  return SharedLaunchGate::map(::fcntl(owner.activityFd(slot), F_DUPFD_CLOEXEC, 0), owner.policyFd(), slot,
                               std::move(physical), [&owner](int s, uint64_t session) {
                                 auto fd = owner.peerFd(s, session);
                                 return fd ? *fd : -1;
                               });
}

TEST(LaunchGate, NewcomersStartAtTheLeastVirtualTimeOfTheirDevices) {
  auto owner = GateTableOwner::create();
  ASSERT_TRUE(owner) << owner.status().message();
  int a = owner->assign(1, {0}, 1, 1.0);
  ASSERT_GE(a, 0);
  owner->activity(a)->gpu_ns = 50'000'000;  // 50 ms used
  int b = owner->assign(2, {0}, 1, 2.0);
  EXPECT_EQ(virtualTime(owner->policy().slots[b], *owner->activity(b)), 50'000'000u);  // not owed 50 ms of catching up
  int c = owner->assign(3, {1}, 1, 1.0);                           // another device: starts at 0
  EXPECT_EQ(virtualTime(owner->policy().slots[c], *owner->activity(c)), 0u);
  // A weight change keeps a session's place in virtual time.
  owner->activity(b)->gpu_ns = 10'000'000;  // 10 ms at weight 2 -> 5 ms of virtual time
  uint64_t before = virtualTime(owner->policy().slots[b], *owner->activity(b));
  owner->update(b, 2, 4.0);
  EXPECT_EQ(virtualTime(owner->policy().slots[b], *owner->activity(b)), before);
  EXPECT_EQ(owner->policy().slots[b].priority.load(), 2);
}

TEST(LaunchGate, AWorkerCannotWriteThePolicyTable) {
  auto owner = GateTableOwner::create();
  ASSERT_TRUE(owner) << owner.status().message();
  // What a worker gets: a descriptor opened read-only. Mapping it writable fails...
  void* w = ::mmap(nullptr, sizeof(GatePolicyTable), PROT_READ | PROT_WRITE, MAP_SHARED, owner->policyFd(), 0);
  EXPECT_EQ(w, MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  // ...a read-only mapping cannot be made writable...
  void* r = ::mmap(nullptr, sizeof(GatePolicyTable), PROT_READ, MAP_SHARED, owner->policyFd(), 0);
  ASSERT_NE(r, MAP_FAILED);
  EXPECT_NE(::mprotect(r, sizeof(GatePolicyTable), PROT_READ | PROT_WRITE), 0);
  ::munmap(r, sizeof(GatePolicyTable));
  // ...and reopening it through /proc for writing gives no writable mapping
  // either: the table is sealed against future writes.
  int again = ::open(("/proc/self/fd/" + std::to_string(owner->policyFd())).c_str(), O_RDWR);
  if (again >= 0) {
    EXPECT_EQ(::mmap(nullptr, sizeof(GatePolicyTable), PROT_READ | PROT_WRITE, MAP_SHARED, again, 0), MAP_FAILED);
    uint64_t x = 7;
    EXPECT_LT(::pwrite(again, &x, sizeof x, 0), 0);
    ::close(again);
  }
  // The daemon's own mapping still writes.
  int slot = owner->assign(5, {0}, 2, 1.0);
  EXPECT_EQ(owner->policy().slots[slot].priority.load(), 2);
  // A gate refuses a policy descriptor it could write through.
  EXPECT_FALSE(SharedLaunchGate::map(::fcntl(owner->activityFd(slot), F_DUPFD_CLOEXEC, 0),
                                     owner->activityFd(slot), slot, {0}, nullptr));
}

TEST(LaunchGate, AWorkerWritesOnlyItsOwnSessionsPage) {
  auto owner = GateTableOwner::create();
  ASSERT_TRUE(owner);
  int a = owner->assign(1, {0}, 1, 1.0), b = owner->assign(2, {0}, 1, 1.0);
  // b's page is not handed to others before b's worker mapped and sealed it:
  // until then a reopened descriptor could still be mapped writable.
  auto early = owner->peerFd(b, 2);
  ASSERT_FALSE(early);
  EXPECT_EQ(early.status().code(), err::kNotReady);
  auto gb = gateOf(*owner, b, {0});
  ASSERT_TRUE(gb) << gb.status().message();
  // Now a's worker gets b's page read-only, and by no route can write it:
  // not by mapping, mprotect, reopening it for writing, nor pwrite.
  EXPECT_FALSE(owner->peerFd(b, 3)) << "the page of another session number";
  auto fd = owner->peerFd(b, 2);
  ASSERT_TRUE(fd) << fd.status().message();
  EXPECT_EQ(::fcntl(*fd, F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(::mmap(nullptr, sizeof(GateActivity), PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0), MAP_FAILED);
  void* r = ::mmap(nullptr, sizeof(GateActivity), PROT_READ, MAP_SHARED, *fd, 0);
  ASSERT_NE(r, MAP_FAILED);
  EXPECT_NE(::mprotect(r, sizeof(GateActivity), PROT_READ | PROT_WRITE), 0);
  ::munmap(r, sizeof(GateActivity));
  int again = ::open(("/proc/self/fd/" + std::to_string(*fd)).c_str(), O_RDWR);
  ASSERT_GE(again, 0);  // (a memfd may be reopened; the seal is what holds)
  EXPECT_EQ(::mmap(nullptr, sizeof(GateActivity), PROT_READ | PROT_WRITE, MAP_SHARED, again, 0), MAP_FAILED);
  uint64_t x = 7;
  EXPECT_LT(::pwrite(again, &x, sizeof x, 0), 0);
  ::close(again);
  ::close(*fd);
  // b's own gate writes its page; a's gate reads it.
  auto ga = gateOf(*owner, a, {0});
  ASSERT_TRUE(ga);
  (*gb)->queued(0);
  EXPECT_EQ(owner->activity(b)->pending.load(), 1u);
  EXPECT_TRUE((*gb)->acquire(0));
  EXPECT_NE(owner->activity(b)->holding_since[0].load(), 0u);
  (*gb)->done(0, 500, true);
  EXPECT_EQ(owner->activity(b)->holding_since[0].load(), 0u);
  EXPECT_EQ(owner->activity(b)->gpu_ns.load(), 500u);
  EXPECT_EQ(owner->activity(a)->gpu_ns.load(), 0u);
}

TEST(LaunchGate, HigherClassHoldsLowerBackAndACrashedHolderFreesTheDevice) {
  auto owner = GateTableOwner::create();
  ASSERT_TRUE(owner);
  int low = owner->assign(1, {0}, 0, 1.0), high = owner->assign(2, {0}, 2, 1.0);
  auto lg = gateOf(*owner, low, {0});
  auto hg = gateOf(*owner, high, {0});
  ASSERT_TRUE(lg && hg);
  // The high session holds the device; the low one's kernel waits until it is done
  // and its holdover has passed.
  (*hg)->queued(0);
  EXPECT_TRUE((*hg)->acquire(0));
  EXPECT_NE(owner->activity(high)->holding_since[0].load(), 0u);
  std::atomic<bool> low_ran{false};
  (*lg)->queued(0);
  std::thread t([&] {
    bool held = (*lg)->acquire(0);
    low_ran = true;
    (*lg)->done(0, 1000, held);
  });
  (*hg)->queued(0);
  EXPECT_TRUE((*hg)->acquire(0));  // joins its own hold
  EXPECT_FALSE(low_ran);
  (*hg)->done(0, 1000, true);
  (*hg)->done(0, 1000, true);
  t.join();  // after kHoldoverNs
  EXPECT_TRUE(low_ran);
  EXPECT_EQ(owner->activity(high)->gpu_ns.load(), 2000u);
  EXPECT_EQ(owner->activity(high)->holding_since[0].load(), 0u);
  // A worker that dies holding the device: the daemon's clear() frees it for the others.
  std::this_thread::sleep_for(std::chrono::nanoseconds(kHoldoverNs));
  (*hg)->queued(0);
  EXPECT_TRUE((*hg)->acquire(0));
  owner->clear(high);
  (*lg)->queued(0);
  EXPECT_TRUE((*lg)->acquire(0));  // would wait for ever on a holder that is gone
  (*lg)->done(0, 0, true);
}

TEST(LaunchGate, KernelsOfTwoSessionsNeverShareTheDevice) {
  // Several threads of two sessions of one class take the device over and
  // over: at no moment do both sessions hold it.
  auto owner = GateTableOwner::create();
  ASSERT_TRUE(owner);
  int a = owner->assign(1, {0}, 1, 1.0), b = owner->assign(2, {0}, 1, 1.0);
  auto ga = gateOf(*owner, a, {0});
  auto gb = gateOf(*owner, b, {0});
  ASSERT_TRUE(ga && gb);
  std::atomic<int> inside[2] = {0, 0};
  std::atomic<int> overlaps{0}, runs{0};
  auto worker = [&](LaunchGate& g, int me) {
    for (int i = 0; i < 300; ++i) {
      g.queued(0);
      bool held = g.acquire(0);
      inside[me]++;
      if (inside[1 - me].load() > 0) overlaps++;
      std::this_thread::sleep_for(std::chrono::microseconds(20));  // the kernel
      if (inside[1 - me].load() > 0) overlaps++;
      runs++;
      inside[me]--;
      g.done(0, 20'000, held);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back(worker, std::ref(**ga), 0);
    threads.emplace_back(worker, std::ref(**gb), 1);
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(runs.load(), 1200);
  EXPECT_EQ(overlaps.load(), 0);
}

}  // namespace
}  // namespace rgpu::server
