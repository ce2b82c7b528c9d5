// Placement across a pool's members (server/cluster/placement.h): the view
// parsed from what etcd holds (untrusted), and the choice by policy.
#include "server/cluster/placement.h"

#include <gtest/gtest.h>

#include "server/cluster/etcd_client.h"

namespace rgpu::server::cluster {
namespace {

// A request for `count` devices, the rest as a client leaves it.
DeviceRequest requestFor(uint32_t count) {
  DeviceRequest r;
  r.count = count;
  return r;
}

EtcdKv kv(const std::string& key, const std::string& value) { return EtcdKv{key, value, 0, 0, 0}; }

std::string record(const std::string& name, const std::string& devices, const std::string& state = "ready") {
  return "{\"name\":\"" + name + "\",\"address\":\"" + name + ".example:7443\",\"state\":\"" + state +
         "\",\"devices\":[" + devices + "]}";
}
std::string device(const std::string& name, uint64_t gib, const std::string& cc) {
  return "{\"name\":\"" + name + "\",\"memory\":" + std::to_string(gib << 30) + ",\"cc\":\"" + cc + "\"}";
}
std::string load(const std::string& devices) { return "{\"sessions\":1,\"devices\":[" + devices + "]}"; }
std::string dload(int index, uint64_t free_gib, int sessions) {
  return "{\"index\":" + std::to_string(index) + ",\"free\":" + std::to_string(free_gib << 30) +
         ",\"sessions\":" + std::to_string(sessions) + "}";
}

TEST(Placement, TheViewLeavesOutWhatDoesNotParseAndAppliesLoads) {
  std::vector<EtcdKv> members = {
      kv("/p/members/a", record("a", device("Sim H100", 80, "9.0") + "," + device("Sim H100", 80, "9.0"))),
      kv("/p/members/b", "{not json"),
      kv("/p/members/c", record("someone-else", device("X", 1, "9.0"))),     // names another member
      kv("/p/members/d", "{\"name\":\"d\",\"address\":\"nowhere\",\"devices\":[]}"),  // no port
      kv("/p/members/e", record("e", "{\"memory\":5}")),                    // a device without a name
      kv("/p/members/f", record("f", device("Sim L4", 24, "8.9"), "draining")),
      kv("/q/members/g", record("g", device("Sim L4", 24, "8.9"))),        // another prefix
  };
  std::vector<EtcdKv> loads = {kv("/p/load/a", load(dload(1, 10, 3) + "," + dload(7, 1, 1))),  // index 7: none
                               kv("/p/load/f", "[]"), kv("/p/load/zz", load(dload(0, 1, 1)))};
  std::vector<std::string> skipped;
  auto view = parseView("/p/", members, loads, &skipped);
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[0].name, "a");
  EXPECT_EQ(view[0].address, "a.example:7443");
  EXPECT_EQ(view[0].devices[0].free, 80ull << 30);  // no load for it: idle
  EXPECT_EQ(view[0].devices[1].free, 10ull << 30);
  EXPECT_EQ(view[0].devices[1].sessions, 3u);
  EXPECT_EQ(view[0].devices[0].cc, 90u);
  EXPECT_TRUE(view[1].draining);
  EXPECT_EQ(skipped.size(), 4u);  // b, c, d, e
}

std::vector<MemberView> pool() {
  std::vector<EtcdKv> members = {
      kv("/p/members/big", record("big", device("Sim H100", 80, "9.0") + "," + device("Sim H100", 80, "9.0"))),
      kv("/p/members/mid", record("mid", device("Sim A100", 40, "8.0") + "," + device("Sim A100", 40, "8.0"))),
      kv("/p/members/small", record("small", device("Sim L4", 24, "8.9"))),
  };
  std::vector<EtcdKv> loads = {kv("/p/load/big", load(dload(0, 70, 1) + "," + dload(1, 80, 0))),
                               kv("/p/load/mid", load(dload(0, 40, 0) + "," + dload(1, 40, 0))),
                               kv("/p/load/small", load(dload(0, 4, 2)))};
  return parseView("/p/", members, loads);
}

std::string chosen(const std::vector<MemberView>& v, DeviceRequest r, PoolPolicy p, const std::string& self = "") {
  auto i = choose(v, r, p, self);
  return i ? v[*i].name : "none";
}

TEST(Placement, RequestsGoWhereTheyFitByPolicy) {
  auto v = pool();
  DeviceRequest any;
  any.count = 1;
  // spread: the least loaded (mid: 0 sessions per device); pack: the most loaded that fits (small: 2).
  EXPECT_EQ(chosen(v, any, PoolPolicy::kSpread), "mid");
  EXPECT_EQ(chosen(v, any, PoolPolicy::kPack), "small");
  DeviceRequest mem = any;
  mem.min_memory = 30ull << 30;
  EXPECT_EQ(chosen(v, mem, PoolPolicy::kPack), "big");  // small has 4 GiB free; big is busier than mid
  EXPECT_EQ(chosen(v, mem, PoolPolicy::kSpread), "mid");
  DeviceRequest cc = any;
  cc.min_cc = 89;
  EXPECT_EQ(chosen(v, cc, PoolPolicy::kSpread), "big");  // 0.5 sessions per device against small's 2
  DeviceRequest model = any;
  model.model = "*L4*";
  EXPECT_EQ(chosen(v, model, PoolPolicy::kSpread), "small");
  DeviceRequest two = any;
  two.count = 2;
  two.min_memory = 50ull << 30;
  EXPECT_EQ(chosen(v, two, PoolPolicy::kSpread), "big");
  two.count = 3;
  EXPECT_EQ(chosen(v, two, PoolPolicy::kSpread), "none");
  // A tie stays with the member asked.
  DeviceRequest a100 = any;
  a100.model = "Sim A100";
  EXPECT_EQ(chosen(v, a100, PoolPolicy::kPack, "mid"), "mid");
  // A draining member takes nothing.
  v[1].draining = true;
  EXPECT_EQ(chosen(v, a100, PoolPolicy::kSpread), "none");
  EXPECT_FALSE(parsePoolPolicy("random"));
}

std::string spanOf(const std::vector<MemberView>& v, DeviceRequest r, PoolPolicy p, const std::string& self = "") {
  std::string out;
  for (const auto& part : chooseSpan(v, r, p, self))
    out += (out.empty() ? "" : " ") + part.member + ":" + std::to_string(part.count) + "@" + part.address;
  return out.empty() ? "none" : out;
}

TEST(Placement, AProgramNoMemberHoldsIsSpreadOverTheFewestMembers) {
  auto v = pool();
  DeviceRequest r;
  r.count = 4;
  // Members with the most fitting devices first (big and mid have two each; spread: mid is idler).
  EXPECT_EQ(spanOf(v, r, PoolPolicy::kSpread), "mid:2@mid.example:7443 big:2@big.example:7443");
  EXPECT_EQ(spanOf(v, r, PoolPolicy::kPack), "big:2@big.example:7443 mid:2@mid.example:7443");
  r.count = 5;
  EXPECT_EQ(spanOf(v, r, PoolPolicy::kSpread), "mid:2@mid.example:7443 big:2@big.example:7443 small:1@small.example:7443");
  r.count = 3;  // the last part takes what is left
  EXPECT_EQ(spanOf(v, r, PoolPolicy::kPack), "big:2@big.example:7443 mid:1@mid.example:7443");
  // Only fitting devices count: 30 GiB free leaves small out, and 6 are more than the pool has.
  r.min_memory = 30ull << 30;
  r.count = 4;
  EXPECT_EQ(spanOf(v, r, PoolPolicy::kSpread), "mid:2@mid.example:7443 big:2@big.example:7443");
  r.count = 5;
  EXPECT_EQ(spanOf(v, r, PoolPolicy::kSpread), "none");
  EXPECT_TRUE(couldSpan(v, requestFor(5)));
  EXPECT_FALSE(couldSpan(v, requestFor(6)));
  // One device is never a span; a draining member gives none.
  EXPECT_EQ(spanOf(v, requestFor(1), PoolPolicy::kSpread), "none");
  v[0].draining = true;
  r = DeviceRequest{};
  r.count = 4;
  EXPECT_EQ(spanOf(v, r, PoolPolicy::kSpread), "none");
}

TEST(Placement, NamesAndAddressesWithControlCharactersAreRefused) {
  std::vector<EtcdKv> members = {
      kv("/p/members/a\x1e" "b", "{\"name\":\"a\\u001eb\",\"address\":\"h:1\",\"devices\":[]}"),
      kv("/p/members/y", "{\"name\":\"y\",\"address\":\"h:1\\u001d\",\"devices\":[]}"),
      kv("/p/members/z", "{\"name\":\"z\",\"address\":\"h:1\",\"devices\":[]}"),
  };
  std::vector<std::string> skipped;
  auto view = parseView("/p/", members, {}, &skipped);
  ASSERT_EQ(view.size(), 1u);
  EXPECT_EQ(view[0].name, "z");
  EXPECT_EQ(skipped.size(), 2u);
}

}  // namespace
}  // namespace rgpu::server::cluster
