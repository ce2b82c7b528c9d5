// Sessions on the CUDA backend (the fake driver, in this process), at the
// protocol level: what only shows when the driver synchronises as the real
// one may.
#include <gtest/gtest.h>

#include <future>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

class CudaSession : public ::testing::Test {
 protected:
  CudaSession() : certs_((makeCerts(dir_.path()), 0)), server_(dir_.path(), "", true) {}
  RawClient authed() { return authedClient(server_); }
  TempDir dir_;
  int certs_;
  InProcessServer server_;
};

TEST_F(CudaSession, UnloadingAModuleWhileAHostFunctionWaitsForTheClientDoesNotDeadlock) {
  // cuModuleUnload may wait for the device, and the device waits for a host
  // function, which waits for the client's answer, which the dispatch thread
  // reads: an unload on the dispatch thread never returned.
  RawClient c = authed();
  ASSERT_EQ(c.call([&](auto r) { r.initModuleLoad().setId(1); }, testFatbin()).error, 0);
  ASSERT_EQ(c.call([](auto r) { r.initStreamCreate().initStream().setId(1); }).error, 0);
  capnp::MallocMessageBuilder hf;
  auto e = hf.initRoot<wire::Request>().initHostFuncEnqueue();
  e.setId(5);
  e.initStream().setId(1);
  c.send(hf, true);
  ASSERT_EQ(c.next().type, protocol::FrameType::kNotify);  // run host function 5: we answer later
  auto unload = std::async(std::launch::async, [&] { return c.call([](auto r) { r.initModuleUnload().setId(1); }); });
  ASSERT_EQ(unload.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "the unload never returned";
  EXPECT_EQ(unload.get().error, 0);
  capnp::MallocMessageBuilder done;
  done.initRoot<wire::Request>().initHostFuncDone().setId(5);
  c.send(done, true);
  EXPECT_EQ(c.call([](auto r) { r.initDeviceSynchronize(); }).error, 0);
  EXPECT_EQ(c.ping().error, 0);
}

}  // namespace
}  // namespace rgpu::test
