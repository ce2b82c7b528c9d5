// Graphs at the protocol level, as a hostile client may send them: the graph
// limits, node kinds a graph may not carry, launches that do not match their
// graph, and graphs whose memory was freed after they were sent. Each gets a
// clear error; nothing outside the session's own memory is touched; the
// session goes on.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

constexpr const char* kLimits = "[limits]\nmax_graphs = 2\nmax_graph_nodes = 6\n";

class Graphs : public ::testing::Test {
 protected:
  Graphs() : certs_((makeCerts(dir_.path()), 0)), server_(dir_.path(), kLimits) {}
  TempDir dir_;
  int certs_;
  InProcessServer server_;
};

using NodeFill = std::function<void(wire::GraphNode::Builder)>;

RawReply create(RawClient& c, uint32_t id, const std::vector<NodeFill>& nodes, bool append = false) {
  return c.call([&](wire::Request::Builder r) {
    auto g = r.initGraphCreate();
    g.setId(id);
    g.setAppend(append);
    auto list = g.initNodes(static_cast<unsigned>(nodes.size()));
    for (size_t i = 0; i < nodes.size(); ++i) nodes[i](list[static_cast<unsigned>(i)]);
  });
}

RawReply launch(RawClient& c, uint32_t id, const std::vector<uint8_t>& bulk = {}, unsigned host_funcs = 0) {
  return c.call(
      [&](wire::Request::Builder r) {
        auto l = r.initGraphLaunch();
        l.setId(id);
        l.initStream();
        l.initHostFuncs(host_funcs);
      },
      bulk);
}

NodeFill empty() {
  return [](wire::GraphNode::Builder n) { n.setEmpty(); };
}
NodeFill memset(uint64_t dst, uint8_t v, uint64_t size) {
  return [=](wire::GraphNode::Builder n) {
    auto m = n.initRequest().initMemset();
    m.setDst(dst), m.setValue(v), m.setSize(size);
    m.initStream();
  };
}
NodeFill toDevice(uint64_t dst, uint64_t size) {
  return [=](wire::GraphNode::Builder n) {
    auto c = n.initHostToDevice();
    c.setDevice(dst), c.setSize(size);
  };
}
NodeFill toHost(uint64_t src, uint64_t size) {
  return [=](wire::GraphNode::Builder n) {
    auto c = n.initDeviceToHost();
    c.setDevice(src), c.setSize(size);
  };
}

TEST_F(Graphs, HostCopiesTravelInTheLaunchAndItsOneReply) {
  RawClient c = authedClient(server_);
  uint64_t d = c.malloc(64);
  // host -> device, a memset of the second half, device -> host.
  ASSERT_EQ(create(c, 1, {toDevice(d, 64), memset(d + 32, 7, 32), toHost(d, 64)}).error, 0);
  std::vector<uint8_t> in(64);
  for (int i = 0; i < 64; ++i) in[i] = static_cast<uint8_t>(i);
  RawReply r = launch(c, 1, in);
  ASSERT_EQ(r.error, 0) << r.message;
  ASSERT_EQ(r.bulk.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(r.bulk[i], i < 32 ? i : 7) << i;
}

TEST_F(Graphs, GraphAndNodeLimitsAreEnforcedAndDestroyingMakesRoom) {
  RawClient c = authedClient(server_);
  EXPECT_EQ(create(c, 1, {empty(), empty()}).error, 0);
  EXPECT_EQ(create(c, 2, {empty(), empty()}).error, 0);
  RawReply over = create(c, 3, {empty()});
  EXPECT_EQ(over.error, err::kMemoryAllocation);
  EXPECT_NE(over.message.find("max_graphs = 2"), std::string::npos) << over.message;
  // Six nodes in all: two more fit, three do not (also when appended).
  RawReply nodes = create(c, 2, {empty(), empty(), empty()}, true);
  EXPECT_EQ(nodes.error, err::kMemoryAllocation);
  EXPECT_NE(nodes.message.find("max_graph_nodes = 6"), std::string::npos) << nodes.message;
  // The graph lost a part: later parts and launches fail with the same error.
  EXPECT_EQ(create(c, 2, {empty()}, true).error, err::kMemoryAllocation);
  EXPECT_EQ(launch(c, 2).error, err::kMemoryAllocation);
  // Replacing a graph (cudaGraphExecUpdate) gives its nodes back first.
  EXPECT_EQ(create(c, 2, {empty(), empty(), empty(), empty()}).error, 0);
  EXPECT_EQ(c.call([](auto r) { r.initGraphDestroy().setId(1); }).error, 0);
  EXPECT_EQ(create(c, 3, {empty(), empty()}).error, 0);
  EXPECT_EQ(c.call([](auto r) { r.initGraphDestroy().setId(1); }).error, err::kInvalidValue);
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Graphs, NodesThatAreNotStreamOrderedDeviceWorkAreRefused) {
  RawClient c = authedClient(server_);
  uint64_t d = c.malloc(64);
  std::vector<std::pair<NodeFill, std::string>> bad = {
      {[](wire::GraphNode::Builder n) { n.initRequest().initMalloc().setSize(64); }, "cannot be a graph node"},
      {[](wire::GraphNode::Builder n) { n.initRequest().initGraphLaunch().setId(1); }, "cannot be a graph node"},
      {[](wire::GraphNode::Builder n) { n.initRequest().initStreamSynchronize(); }, "cannot be a graph node"},
      {[=](wire::GraphNode::Builder n) {
         auto m = n.initRequest().initMemcpyDtoH();
         m.setSrc(d), m.setSize(8);
       }, "cannot be a graph node"},
      {[=](wire::GraphNode::Builder n) {
         auto b = n.initRequest().initBlas();
         b.setOp(wire::BlasOp::DOT);
       }, "host memory"},
      {[](wire::GraphNode::Builder n) { n.initHostToDevice().setSize(uint64_t{1} << 40); }, "bulk limit"},
  };
  for (auto& [fill, why] : bad) {
    RawReply r = create(c, 1, {empty(), fill});
    EXPECT_EQ(r.error, err::kInvalidValue) << why;
    EXPECT_NE(r.message.find(why), std::string::npos) << r.message;
  }
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Graphs, LaunchesThatDoNotMatchTheirGraphAreRefusedAndTheSessionGoesOn) {
  RawClient c = authedClient(server_);
  uint64_t d = c.malloc(64);
  EXPECT_EQ(launch(c, 9).error, err::kInvalidValue);  // never created
  ASSERT_EQ(create(c, 1, {toDevice(d, 16)}).error, 0);
  RawReply short_bulk = launch(c, 1, std::vector<uint8_t>(8));
  EXPECT_EQ(short_bulk.error, err::kInvalidValue);
  EXPECT_NE(short_bulk.message.find("its host copies need 16"), std::string::npos) << short_bulk.message;
  RawReply funcs = launch(c, 1, std::vector<uint8_t>(16), 2);
  EXPECT_EQ(funcs.error, err::kInvalidValue);
  EXPECT_NE(funcs.message.find("host functions"), std::string::npos) << funcs.message;
  RawReply stream = c.call([](wire::Request::Builder r) {
    auto l = r.initGraphLaunch();
    l.setId(1);
    l.initStream().setId(77);
  });
  EXPECT_EQ(stream.error, err::kInvalidResourceHandle);
  EXPECT_EQ(create(c, 5, {empty()}, true).error, err::kInvalidValue);  // appending to no graph
  EXPECT_EQ(launch(c, 1, std::vector<uint8_t>(16, 3)).error, 0);
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Graphs, MemoryFreedAfterTheGraphWasSentIsRefusedAtEachLaunchNeverTouched) {
  RawClient c = authedClient(server_);
  uint64_t d = c.malloc(256);
  ASSERT_EQ(create(c, 1, {memset(d, 9, 256), toHost(d, 256)}).error, 0);
  RawReply ok = launch(c, 1);
  ASSERT_EQ(ok.error, 0) << ok.message;
  EXPECT_EQ(ok.bulk[255], 9);
  EXPECT_EQ(c.call([&](auto r) { r.initFree().setPtr(d); }).error, 0);
  RawReply late = launch(c, 1);
  EXPECT_EQ(late.error, err::kInvalidValue) << late.message;  // the copy names memory the session no longer has
  EXPECT_TRUE(late.bulk.empty());
  // The memset node was refused too: its error comes as the launch's reply's
  // asynchronous error (an earlier node's), as CUDA reports it at the next synchronising call.
  EXPECT_EQ(late.async_error, err::kInvalidValue);
  EXPECT_EQ(c.ping().error, 0);
}

}  // namespace
}  // namespace rgpu::test
