// CallMessage: a thread's scratch as first segment, zeroed between messages,
// heap segments for a second message alive at once or a large one.
#include "common/call_message.h"

#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "protocol/rgpu.capnp.h"

namespace rgpu::common {
namespace {

// The message as the server reads it (flat words, as appendFrame writes
// them); the reader reads from the array, which must outlive it.
kj::Array<capnp::word> flat(capnp::MessageBuilder& m) { return capnp::messageToFlatArray(m); }

TEST(CallMessage, TheScratchIsAllZerosForTheNextMessage) {
  {
    CallMessage a;
    ASSERT_TRUE(a.usesScratch());
    auto w = a.initRoot<wire::Request>().initStreamWaitEvent();
    w.setEvent(77);
    w.setFlags(0xdeadbeef);
    w.initStream().setId(5);
  }
  {
    // Every word of the scratch is zero again (Cap'n Proto's rule for a first
    // segment it is handed: it does not clear what it allocates).
    CallMessage peek;
    kj::ArrayPtr<capnp::word> first = peek.allocateSegment(1);
    ASSERT_EQ(first.size(), CallMessage::kScratchWords);
    size_t nonzero = 0;
    for (const capnp::word& w : first) {
      const auto* b = reinterpret_cast<const unsigned char*>(&w);
      for (size_t i = 0; i < sizeof w; ++i) nonzero += b[i] != 0;
    }
    EXPECT_EQ(nonzero, 0u);
  }
  // The same words again: a field left unset must read as its default, not
  // as what the last message wrote there.
  CallMessage b;
  ASSERT_TRUE(b.usesScratch());
  auto w = b.initRoot<wire::Request>().initStreamWaitEvent();
  EXPECT_EQ(w.getFlags(), 0u);
  EXPECT_EQ(w.getEvent(), 0u);
  w.setEvent(3);
  auto words = flat(b);
  capnp::FlatArrayMessageReader r(words);
  auto got = r.getRoot<wire::Request>().getStreamWaitEvent();
  EXPECT_EQ(got.getEvent(), 3u);
  EXPECT_EQ(got.getFlags(), 0u);
  EXPECT_FALSE(got.hasStream());
}

TEST(CallMessage, ASecondMessageAliveAtOnceTakesTheHeapAndBothStayIntact) {
  CallMessage outer;
  outer.initRoot<wire::Request>().initStreamWaitEvent().setEvent(11);
  CallMessage inner;  // a call that sends another call while building its own
  EXPECT_TRUE(outer.usesScratch());
  EXPECT_FALSE(inner.usesScratch());
  inner.initRoot<wire::Request>().initStreamWaitEvent().setEvent(22);
  auto wo = flat(outer), wi = flat(inner);
  capnp::FlatArrayMessageReader ro(wo), ri(wi);
  EXPECT_EQ(ro.getRoot<wire::Request>().getStreamWaitEvent().getEvent(), 11u);
  EXPECT_EQ(ri.getRoot<wire::Request>().getStreamWaitEvent().getEvent(), 22u);
}

TEST(CallMessage, AMessageLargerThanTheScratchGrowsOnTheHeap) {
  const std::string name(5 * CallMessage::kScratchWords * sizeof(capnp::word), 'k');
  {
    CallMessage m;
    ASSERT_TRUE(m.usesScratch());
    auto f = m.initRoot<wire::Request>().initFunctionRegister();
    f.setId(9);
    f.setName(name);
    EXPECT_GT(m.getSegmentsForOutput().size(), 1u);
    capnp::ReaderOptions big;
    big.traversalLimitInWords = 1 << 20;
    auto words = flat(m);
    capnp::FlatArrayMessageReader r(words, big);
    EXPECT_EQ(r.getRoot<wire::Request>().getFunctionRegister().getName().size(), name.size());
    EXPECT_EQ(r.getRoot<wire::Request>().getFunctionRegister().getId(), 9u);
  }
  CallMessage after;  // the scratch came back zeroed
  ASSERT_TRUE(after.usesScratch());
  EXPECT_EQ(after.initRoot<wire::Request>().initFunctionRegister().getId(), 0u);
  // Asked for a first segment larger than the scratch: the heap from the start.
  CallMessage sized(CallMessage::kScratchWords + 1);
  EXPECT_FALSE(sized.usesScratch());
}

TEST(CallMessage, EachThreadHasAScratchOfItsOwn) {
  CallMessage mine;
  ASSERT_TRUE(mine.usesScratch());
  mine.initRoot<wire::Request>().initStreamWaitEvent().setFlags(1);
  bool theirs = false;
  uint32_t flags = 99;
  std::thread t([&] {
    CallMessage m;
    theirs = m.usesScratch();
    flags = m.initRoot<wire::Request>().initStreamWaitEvent().getFlags();
  });
  t.join();
  EXPECT_TRUE(theirs);
  EXPECT_EQ(flags, 0u);
}

}  // namespace
}  // namespace rgpu::common
