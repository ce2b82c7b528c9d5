#include "server/launch_gate.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace rgpu::server {
namespace {

TEST(LaunchGate, NewcomersStartAtTheLeastVirtualTimeOfTheirDevices) {
  auto owner = GateTableOwner::create();
  ASSERT_TRUE(owner) << owner.status().message();
  int a = owner->assign(1, {0}, 1, 1.0);
  ASSERT_GE(a, 0);
  owner->table().slots[a].gpu_ns = 50'000'000;  // 50 ms used
  int b = owner->assign(2, {0}, 1, 2.0);
  EXPECT_EQ(virtualTime(owner->policy().slots[b], owner->table().slots[b]), 50'000'000u);  // not owed 50 ms of catching up
  int c = owner->assign(3, {1}, 1, 1.0);                           // another device: starts at 0
  EXPECT_EQ(virtualTime(owner->policy().slots[c], owner->table().slots[c]), 0u);
  // A weight change keeps a session's place in virtual time.
  owner->table().slots[b].gpu_ns = 10'000'000;  // 10 ms at weight 2 -> 5 ms of virtual time
  uint64_t before = virtualTime(owner->policy().slots[b], owner->table().slots[b]);
  owner->update(b, 2, 4.0);
  EXPECT_EQ(virtualTime(owner->policy().slots[b], owner->table().slots[b]), before);
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
  EXPECT_FALSE(SharedLaunchGate::map(owner->fd(), owner->fd(), 0, {0}));
}

TEST(LaunchGate, HigherClassHoldsLowerBackAndACrashedHolderFreesTheDevice) {
  auto owner = GateTableOwner::create();
  ASSERT_TRUE(owner);
  int low = owner->assign(1, {0}, 0, 1.0), high = owner->assign(2, {0}, 2, 1.0);
  auto lg = SharedLaunchGate::map(owner->fd(), owner->policyFd(), low, {0});
  auto hg = SharedLaunchGate::map(owner->fd(), owner->policyFd(), high, {0});
  ASSERT_TRUE(lg && hg);
  // The high session holds the device; the low one's kernel waits until it is done
  // and its holdover has passed.
  (*hg)->queued(0);
  EXPECT_TRUE((*hg)->acquire(0));
  EXPECT_EQ(owner->table().devices[0].owner.load(), 2u);
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
  EXPECT_EQ(owner->table().slots[high].gpu_ns.load(), 2000u);
  EXPECT_EQ(owner->table().devices[0].owner.load(), 0u);
  // A worker that dies holding the device: the daemon's clear() frees it.
  (*lg)->queued(0);
  EXPECT_TRUE((*lg)->acquire(0));
  owner->clear(low);
  EXPECT_EQ(owner->table().devices[0].owner.load(), 0u);
}

}  // namespace
}  // namespace rgpu::server
