// rgpu-server --check-config (server/daemon/config_check.h): every problem of
// a server.toml at once, unknown keys included.
#include "server/daemon/config_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <regex>
#include <sstream>

#include "tests/support/test_env.h"

namespace rgpu::server {
namespace {

using std::chrono::hours;

bool has(const ConfigCheck& c, bool error, const std::string& text) {
  for (const auto& p : c.problems)
    if (p.error == error && p.text.find(text) != std::string::npos) return true;
  return false;
}

std::string listed(const ConfigCheck& c) { return formatConfigCheck("server.toml", c); }

TEST(ConfigCheck, TheSampleChecksCleanAndEveryKeyItShowsCommentedOutIsKnown) {
  test::TempDir dir;
  test::makeCerts(dir.path());
  const std::string sample = test::readFile(std::string(RGPU_SOURCE_DIR) + "/examples/server.toml");
  ASSERT_FALSE(sample.empty());
  test::writeFile(dir.file("server.toml"), sample);
  ConfigCheck c = checkServerConfig(dir.file("server.toml"), std::chrono::system_clock::now());
  EXPECT_EQ(c.errors(), 0) << listed(c);
  EXPECT_NE(c.summary.find("listen 0.0.0.0:7443 over TLS 1.3"), std::string::npos) << c.summary;
  EXPECT_NE(c.summary.find("alice: certificate CN 'alice'"), std::string::npos) << c.summary;
  // The keys it shows commented out, as a user would uncomment them; and
  // those of the sample the server package installs.
  const std::string packaged = test::readFile(std::string(RGPU_SOURCE_DIR) + "/packaging/etc/server.toml");
  ASSERT_FALSE(packaged.empty());
  for (const std::string* text : {&sample, &packaged}) {
    std::string all;
    std::istringstream in(*text);
    const std::regex key(R"(^# ?([a-z_]+ = .*)$)"), table(R"(^# ?(\[\[?[a-z_.]+\]\]?)\s*(#.*)?$)");
    size_t uncommented = 0;
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_match(line, m, key) || std::regex_match(line, m, table)) {
        line = m[1].str();
        ++uncommented;
      }
      all += line + "\n";
    }
    EXPECT_GT(uncommented, 5u);
    auto unknown = unknownKeys(all, "server.toml");
    EXPECT_TRUE(unknown.empty()) << unknown.front();
  }
}

TEST(ConfigCheck, ListsEveryProblemAtOnce) {
  test::TempDir dir;
  test::makeCerts(dir.path());
  const std::string d = dir.path();
  test::writeFile(dir.file("server.toml"),
                  "listne = \"127.0.0.1:1\"\n"
                  "[tls]\ncert = \"" + d + "/server.pem\"\nkey = \"" + d + "/alice.key\"\nca = \"" + d + "/ca.pem\"\n"
                  "resume = false\n"
                  "[accounting]\npath = \"/nonexistent-dir/accounting.jsonl\"\n"
                  "[[users]]\nname = \"alice\"\ncert_cn = \"alice\"\ndevices = [\"*V100*\", \"0\"]\n"
                  "[[users]]\nname = \"alice\"\ntoken = \"t\"\nquota = \"1GiB\"\n"
                  "[[sim.devices]]\nname = \"rgpu sim H100\"\nmemory = \"1GiB\"\n");
  ConfigCheck c = checkServerConfig(dir.file("server.toml"), std::chrono::system_clock::now());
  EXPECT_TRUE(has(c, true, "unknown key 'listne'")) << listed(c);
  EXPECT_TRUE(has(c, true, "unknown key 'tls.resume'")) << listed(c);
  EXPECT_TRUE(has(c, true, "unknown key 'users[1].quota'")) << listed(c);
  EXPECT_TRUE(has(c, true, "[tls] cert: key does not match " + d + "/server.pem")) << listed(c);
  EXPECT_TRUE(has(c, true, "devices entry '*V100*' names none of the server's devices")) << listed(c);
  EXPECT_FALSE(has(c, true, "devices entry '0'")) << listed(c);
  EXPECT_TRUE(has(c, true, "[[users]] 'alice' appears twice")) << listed(c);
  EXPECT_TRUE(has(c, true, "[accounting] path: cannot write in /nonexistent-dir")) << listed(c);
  EXPECT_EQ(c.errors(), 7) << listed(c);
  // (Warnings: the test certificates expire in 30 days, "29 day(s)" once a second has passed.)
  EXPECT_NE(listed(c).find("server.toml: 7 error(s), "), std::string::npos) << listed(c);
}

TEST(ConfigCheck, ACheckpointKeyOthersCanReadIsAnError) {
  test::TempDir dir;
  test::writeFile(dir.file("ck.key"), std::string(64, 'a') + "\n");
  ::chmod(dir.file("ck.key").c_str(), 0644);
  test::writeFile(dir.file("server.toml"), "insecure_plaintext = true\n[checkpoint]\ndir = \"ck\"\nkey_file = \"ck.key\"\n");
  ConfigCheck c = checkServerConfig(dir.file("server.toml"), std::chrono::system_clock::now());
  EXPECT_TRUE(has(c, true, "is readable by others than its owner (chmod 0600 it)")) << listed(c);
  ::chmod(dir.file("ck.key").c_str(), 0600);
  c = checkServerConfig(dir.file("server.toml"), std::chrono::system_clock::now());
  EXPECT_EQ(c.errors(), 0) << listed(c);
  EXPECT_NE(c.summary.find("sessions can be moved (rgpu-smi --migrate), checkpoints in " + dir.file("ck")),
            std::string::npos)
      << c.summary;
}

TEST(ConfigCheck, ABadValueIsNamedAndUnknownKeysStillListed) {
  test::TempDir dir;
  test::writeFile(dir.file("server.toml"), "backend = \"gpu\"\ninsecure_plaintext = true\nlisten_on = 1\n");
  ConfigCheck c = checkServerConfig(dir.file("server.toml"), std::chrono::system_clock::now());
  EXPECT_TRUE(has(c, true, "backend must be sim, cuda or auto")) << listed(c);
  EXPECT_TRUE(has(c, true, "unknown key 'listen_on'")) << listed(c);
  ConfigCheck missing = checkServerConfig(dir.file("nothing.toml"), std::chrono::system_clock::now());
  EXPECT_EQ(missing.errors(), 1);
  ConfigCheck broken = (test::writeFile(dir.file("b.toml"), "[tls\n"),
                        checkServerConfig(dir.file("b.toml"), std::chrono::system_clock::now()));
  EXPECT_EQ(broken.errors(), 1) << listed(broken);
}

TEST(ConfigCheck, EveryBadValueIsListedNotOnlyTheFirst) {
  test::TempDir dir;
  test::writeFile(dir.file("server.toml"),
                  "backend = \"gpu\"\ninsecure_plaintext = true\nlisten = \"127.0.0.1:0\"\n"
                  "[pool]\nmetrics_labels = \"all\"\nstatus_page = \"everyone\"\n"
                  "[[users]]\nname = \"a\"\ntoken = \"t\"\n"
                  "[[users]]\nname = \"b\"\ntoken = \"u\"\nweight = -1\npriority = \"urgent\"\n"
                  "[limits]\nmax_staging_bytes = \"lots\"\n");
  ConfigCheck c = checkServerConfig(dir.file("server.toml"), std::chrono::system_clock::now());
  for (const char* e : {"backend must be sim, cuda or auto", "metrics_labels", "status_page", "weight must be in",
                        "priority must be high, normal or low", "max_staging_bytes"})
    EXPECT_TRUE(has(c, true, e)) << e << " not listed:\n" << listed(c);
  EXPECT_EQ(c.errors(), 6) << listed(c);
  // A file with one bad value: that one, once.
  EXPECT_EQ(valueErrors("backend = \"gpu\"\n", "s.toml").size(), 1u);
  EXPECT_TRUE(valueErrors("backend = \"sim\"\n", "s.toml").empty());
  // Bounded: a file of a thousand bad values lists kMaxValueErrors.
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "[[users]]\nname = \"u" + std::to_string(i) + "\"\ntoken = \"t" + std::to_string(i) + "\"\nweight = -1\n";
  EXPECT_EQ(valueErrors(many, "s.toml").size(), kMaxValueErrors);
}

TEST(ConfigCheck, CertificatesNearTheirEndWarnAndExpiredOnesFail) {
  test::TempDir dir;
  // The clock read first: the certificates' 30 days then count from at
  // least this instant, however slowly a busy machine makes them.
  auto now = std::chrono::system_clock::now();
  test::makeCerts(dir.path());  // valid for 30 days
  test::writeFile(dir.file("server.toml"), test::serverToml(dir.path()));
  ConfigCheck soon = checkServerConfig(dir.file("server.toml"), now + hours(24 * 20));
  EXPECT_EQ(soon.errors(), 0) << listed(soon);
  EXPECT_TRUE(has(soon, false, "server.pem expires in 10 day(s)")) << listed(soon);
  ConfigCheck late = checkServerConfig(dir.file("server.toml"), now + hours(24 * 40));
  EXPECT_TRUE(has(late, true, "server.pem has expired")) << listed(late);
  EXPECT_TRUE(has(late, true, "ca.pem has expired")) << listed(late);
  ConfigCheck early = checkServerConfig(dir.file("server.toml"), now - hours(24 * 2));
  EXPECT_TRUE(has(early, true, "is not valid yet")) << listed(early);
}

}  // namespace
}  // namespace rgpu::server
