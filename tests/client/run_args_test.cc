#include "client/run_args.h"

#include <gtest/gtest.h>

namespace rgpu::client {
namespace {

Result<RunArgs> parse(std::vector<std::string> words) {
  words.insert(words.begin(), "rgpu-run");
  std::vector<const char*> argv;
  for (auto& w : words) argv.push_back(w.c_str());
  return parseRunArgs(static_cast<int>(argv.size()), argv.data());
}

using Words = std::vector<std::string>;

TEST(RunArgs, TheProgramGetsEveryWordAfterItInOrder) {
  auto a = parse({"--local", "--", "./prog", "-s", "256", "-v"});
  ASSERT_TRUE(a) << a.status().message();
  EXPECT_TRUE(a->local);
  EXPECT_EQ(a->command, (Words{"./prog", "-s", "256", "-v"}));  // no stray "--"
  auto b = parse({"--local", "./prog", "-s", "256", "-v"});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->command, (Words{"./prog", "-s", "256", "-v"}));  // not reordered
  auto c = parse({"./prog", "--", "-", "--n=5", "", "a b", "\xff", "--local", "--server", "x"});
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->local);
  EXPECT_EQ(c->server, "");
  EXPECT_EQ(c->command, (Words{"./prog", "--", "-", "--n=5", "", "a b", "\xff", "--local", "--server", "x"}));
}

TEST(RunArgs, OwnOptionsComeBeforeTheProgram) {
  auto a = parse({"--server", "gpu1:7443", "prog"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->server, "gpu1:7443");
  auto b = parse({"--server=gpu1:7443", "--", "-prog-with-a-dash"});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->server, "gpu1:7443");
  EXPECT_EQ(b->command, (Words{"-prog-with-a-dash"}));
  EXPECT_TRUE(parse({"--help"})->help);
  EXPECT_TRUE(parse({"--version"})->version);
}

TEST(RunArgs, DevicesAreAskedForWithDashN) {
  auto a = parse({"-n", "3", "prog", "-n", "7"});
  ASSERT_TRUE(a) << a.status().message();
  EXPECT_EQ(a->devices, 3u);
  EXPECT_EQ(a->command, (Words{"prog", "-n", "7"}));  // the program's own -n is its own
  EXPECT_EQ(parse({"--devices=64", "prog"})->devices, 64u);
  EXPECT_EQ(parse({"--devices", "2", "prog"})->devices, 2u);
  EXPECT_EQ(parse({"prog"})->devices, 0u);
  for (const Words& bad : {Words{"-n", "0", "prog"}, Words{"-n", "65", "prog"}, Words{"-n", "x", "prog"},
                           Words{"-n", "-1", "prog"}, Words{"--devices=", "prog"}, Words{"-n"}, Words{"-n", "2x", "p"}})
    EXPECT_FALSE(parse(bad)) << bad[0] << " " << (bad.size() > 1 ? bad[1] : "");
}

TEST(RunArgs, MistakesAreRefusedNotGuessedAt) {
  auto unknown = parse({"--lcoal", "prog"});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.status().message().find("unknown option '--lcoal'"), std::string::npos);
  EXPECT_FALSE(parse({}));
  EXPECT_FALSE(parse({"--local"}));
  EXPECT_FALSE(parse({"--", }));
  EXPECT_FALSE(parse({"--server"}));
  EXPECT_FALSE(parse({"--server=", "prog"}));
  EXPECT_FALSE(parse({"--server", "h:1", "--local", "prog"}));
}

}  // namespace
}  // namespace rgpu::client
