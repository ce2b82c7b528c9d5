// Graphs at the protocol level, as a hostile client may send them: the graph
// limits, node kinds a graph may not carry, launches that do not match their
// graph, and graphs whose memory was freed after they were sent. Each gets a
// clear error; nothing outside the session's own memory is touched; the
// session goes on.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

constexpr const char* kLimits = "[limits]\nmax_graphs = 2\nmax_graph_nodes = 6\nmax_conditional_handles = 2\n";

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

uint64_t handle(RawClient& c) {
  RawReply r = c.call([](wire::Request::Builder q) { q.initConditionalHandleCreate().setDevice(0); });
  EXPECT_EQ(r.error, 0) << r.message;
  return static_cast<uint64_t>(r.value);
}
NodeFill conditional(uint64_t h, wire::ConditionalType type, std::vector<uint64_t> bodies) {
  return [=](wire::GraphNode::Builder n) {
    auto c = n.initConditional();
    c.setHandle(h), c.setType(type);
    auto b = c.initBodies(static_cast<unsigned>(bodies.size()));
    for (size_t i = 0; i < bodies.size(); ++i) b.set(static_cast<unsigned>(i), bodies[i]);
  };
}
NodeFill reset(uint64_t h, uint32_t v) {
  return [=](wire::GraphNode::Builder n) {
    auto r = n.initConditionalReset();
    r.setHandle(h), r.setValue(v);
  };
}

TEST_F(Graphs, ConditionalNodesPickTheirBodiesByTheHandlesValue) {
  RawClient c = authedClient(server_);
  uint64_t d = c.malloc(64);
  uint64_t h = handle(c);
  // if (h) memset 7 else memset 9; the value set by the graph's reset node.
  auto ifElse = conditional(h, wire::ConditionalType::IF, {1, 1});
  ASSERT_EQ(create(c, 1, {reset(h, 1), ifElse, memset(d, 7, 64), memset(d, 9, 64), toHost(d, 64)}).error, 0);
  RawReply taken = launch(c, 1);
  ASSERT_EQ(taken.error, 0) << taken.message;
  EXPECT_EQ(taken.bulk[63], 7);
  ASSERT_EQ(create(c, 1, {reset(h, 0), ifElse, memset(d, 7, 64), memset(d, 9, 64), toHost(d, 64)}).error, 0);
  RawReply other = launch(c, 1);
  ASSERT_EQ(other.error, 0) << other.message;
  EXPECT_EQ(other.bulk[63], 9);
  // switch: value 2 of three bodies (the second one empty).
  ASSERT_EQ(create(c, 1, {reset(h, 2), conditional(h, wire::ConditionalType::SWITCH, {1, 0, 1}), memset(d, 1, 64),
                          memset(d, 4, 64), toHost(d, 64)})
                .error,
            0);
  RawReply sw = launch(c, 1);
  ASSERT_EQ(sw.error, 0) << sw.message;
  EXPECT_EQ(sw.bulk[0], 4);
  EXPECT_EQ(c.ping().error, 0);
}

TEST_F(Graphs, MalformedConditionalNodesAreRefusedAndTheSessionGoesOn) {
  RawClient c = authedClient(server_);
  uint64_t d = c.malloc(64);
  uint64_t h = handle(c);
  using T = wire::ConditionalType;
  std::vector<std::pair<std::vector<NodeFill>, std::string>> bad = {
      {{conditional(h + 4, T::IF, {1}), empty()}, "unknown conditional handle"},
      {{reset(12345, 1)}, "unknown conditional handle"},
      {{conditional(h, T::IF, {1, 1, 1}), empty(), empty(), empty()}, "with 3 bodies"},
      {{conditional(h, T::WHILE, {0, 0})}, "with 2 bodies"},
      {{conditional(h, T::SWITCH, {})}, "with 0 bodies"},
      {{conditional(h, static_cast<T>(7), {1}), empty()}, "unknown conditional node type 7"},
      // The inner node's bodies (3 nodes) do not fit in the outer body's 2.
      {{conditional(h, T::WHILE, {3}), conditional(h, T::IF, {3}), empty(), empty()}, "overrun"},
      {{conditional(h, T::IF, {1}), toDevice(d, 8)}, "may hold kernels"},
      {{conditional(h, T::IF, {1}), toHost(d, 8)}, "may hold kernels"},
      {{conditional(h, T::IF, {1}),
        [](wire::GraphNode::Builder n) { n.setHostFunc(); }}, "may hold kernels"},
  };
  for (auto& [nodes, why] : bad) {
    RawReply r = create(c, 1, nodes);
    EXPECT_EQ(r.error, err::kInvalidValue) << why;
    EXPECT_NE(r.message.find(why), std::string::npos) << why << ": " << r.message;
  }
  // A graph whose last conditional node lacks body nodes may be appended to, but not launched.
  ASSERT_EQ(create(c, 2, {conditional(h, T::IF, {2}), memset(d, 1, 64)}).error, 0);
  RawReply half = launch(c, 2);
  EXPECT_EQ(half.error, err::kInvalidValue);
  EXPECT_NE(half.message.find("lacks nodes of its bodies"), std::string::npos) << half.message;
  ASSERT_EQ(create(c, 2, {memset(d, 2, 64)}, true).error, 0);
  EXPECT_EQ(launch(c, 2).error, 0);
  // The handle limit (max_conditional_handles = 2 here).
  (void)handle(c);
  RawReply over = c.call([](wire::Request::Builder q) { q.initConditionalHandleCreate().setDevice(0); });
  EXPECT_EQ(over.error, err::kMemoryAllocation);
  EXPECT_NE(over.message.find("max_conditional_handles = 2"), std::string::npos) << over.message;
  EXPECT_EQ(c.ping().error, 0);
}

TEST(GraphsNesting, ConditionalNodesNestAtMostSixteenDeep) {
  TempDir dir;
  makeCerts(dir.path());
  InProcessServer server(dir.path(), "");
  RawClient c = authedClient(server);
  uint64_t h = handle(c);
  auto nest = [&](unsigned levels) {
    std::vector<NodeFill> nodes;
    for (unsigned k = 0; k < levels; ++k) nodes.push_back(conditional(h, wire::ConditionalType::IF, {levels - k}));
    nodes.push_back(empty());
    return nodes;
  };
  EXPECT_EQ(create(c, 1, nest(16)).error, 0);
  RawReply deep = create(c, 2, nest(17));
  EXPECT_EQ(deep.error, err::kInvalidValue);
  EXPECT_NE(deep.message.find("nested deeper than 16"), std::string::npos) << deep.message;
  EXPECT_EQ(launch(c, 1).error, 0);
  EXPECT_EQ(c.ping().error, 0);
}

TEST(GraphsWatchdog, AWhileNodeThatNeverEndsIsStoppedAsAKernelWouldBe) {
  TempDir dir;
  makeCerts(dir.path());
  InProcessServer server(dir.path(), "[limits]\nkernel_timeout_ms = 200\n");
  // The value is 1 and nothing in the body changes it: an empty body, and one
  // with a memset; each in a session of its own (the error is sticky, as a kernel's timeout).
  for (uint64_t body_nodes : {0u, 1u}) {
    RawClient c = authedClient(server);
    uint64_t d = c.malloc(64);
    uint64_t h = handle(c);
    std::vector<NodeFill> nodes = {reset(h, 1), conditional(h, wire::ConditionalType::WHILE, {body_nodes})};
    if (body_nodes) nodes.push_back(memset(d, 1, 64));
    ASSERT_EQ(create(c, 1, nodes).error, 0);
    auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(launch(c, 1).error, 0);
    RawReply sync = c.call([](wire::Request::Builder r) { r.initStreamSynchronize(); });
    EXPECT_EQ(sync.error, err::kLaunchTimeout) << sync.message;
    EXPECT_NE(sync.message.find("kernel_timeout_ms = 200"), std::string::npos) << sync.message;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  }
}

}  // namespace
}  // namespace rgpu::test
