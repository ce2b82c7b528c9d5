// The status page (server/daemon/status_page.h) against a real rgpu-server
// with two clients: its JSON with rgpu-smi's visibility rules, and the page
// itself in a real browser (headless Chromium), whose DOM must show both
// sessions. The browser's screenshot is kept as a test artifact.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <regex>

#include "tests/e2e/pool_fixture.h"

namespace rgpu::test {
namespace {

using json = nlohmann::json;

class StatusPage : public Pool {
 protected:
  void SetUp() override {
    // alice: an admin who also has a token (the page takes tokens); bob: a user.
    start("admin = true\ntoken = \"alice-token\"\n", "", "[pool]\nmetrics_listen = \"127.0.0.1:0\"\n");
    std::smatch m;
    std::string log = server_->log();
    ASSERT_TRUE(std::regex_search(log, m, std::regex("status page on http://127.0.0.1:(\\d+)/"))) << log;
    port_ = static_cast<uint16_t>(std::stoi(m[1].str()));
  }
  std::string body(const std::string& resp) {
    auto at = resp.find("\r\n\r\n");
    return at == std::string::npos ? "" : resp.substr(at + 4);
  }
  json status(const std::string& token) {
    std::string resp = httpGet(port_, "/status.json", "Authorization: Bearer " + token + "\r\n");
    EXPECT_NE(resp.find("HTTP/1.0 200 OK"), std::string::npos) << resp;
    EXPECT_NE(resp.find("Content-Type: application/json"), std::string::npos) << resp;
    return json::parse(body(resp), nullptr, false);
  }
  // Headless Chromium on the page with `token` in its fragment; `flags` say
  // what it does (--dump-dom, --screenshot=...). Returns its stdout. The
  // browser gets none of the sanitizer runtime a --sanitize run preloads
  // into rgpu's processes, and at most 60 s.
  RunResult browse(const std::string& token, const std::string& flags) {
    return run("env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS timeout 60 chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" + dir_.file("chromium") +
               " --virtual-time-budget=4000 " + flags + " 'http://127.0.0.1:" + std::to_string(port_) +
               "/#token=" + token + "' 2>" + dir_.file("chromium.err"));
  }
  uint16_t port_ = 0;
};

TEST_F(StatusPage, TheBrowserShowsBothSessionsToAnAdminAndTheJsonFollowsRgpuSmisRules) {
  std::thread a = holder("alice", 3 << 20, 20000, dir_.file("alice.out"));
  std::thread b = holder("bob", 5 << 20, 20000, dir_.file("bob.out"));

  // The data: none without a token, a user's own sessions, an admin's all.
  EXPECT_NE(httpGet(port_, "/status.json").find("401 Unauthorized"), std::string::npos);
  EXPECT_NE(httpGet(port_, "/status.json", "Authorization: Bearer wrong\r\n").find("401 Unauthorized"),
            std::string::npos);
  json bob = status("bob-token");
  ASSERT_TRUE(bob.is_object());
  ASSERT_EQ(bob["sessions"].size(), 1u) << bob.dump(2);
  EXPECT_EQ(bob["sessions"][0]["user"], "bob");
  EXPECT_EQ(bob["sessions"][0]["memory"], 5 << 20);
  EXPECT_EQ(bob["hidden"], 1);
  EXPECT_EQ(bob["viewer"]["user"], "bob");
  json admin = status("alice-token");
  ASSERT_EQ(admin["sessions"].size(), 2u) << admin.dump(2);
  EXPECT_EQ(admin["hidden"], 0);
  EXPECT_EQ(admin["devices"].size(), 2u);
  EXPECT_EQ(admin["devices"][0]["name"], "rgpu sim H100");
  EXPECT_EQ(admin["devices"][0]["memory_total"], 1ull << 30);
  EXPECT_EQ(admin["devices"][0]["utilization"], nullptr);  // the sim has no NVML
  EXPECT_EQ(admin["server"]["backend"], "sim");
  EXPECT_EQ(admin["queued"], 0);
  uint64_t used = 0;
  for (auto& d : admin["devices"]) used += d["memory_used"].get<uint64_t>();
  EXPECT_EQ(used, 8u << 20);

  // The page: self-contained, served with a policy that forbids anything else.
  std::string page = httpGet(port_, "/");
  EXPECT_NE(page.find("HTTP/1.0 200 OK"), std::string::npos);
  EXPECT_NE(page.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(page.find("Content-Security-Policy: default-src 'none'"), std::string::npos) << page;
  EXPECT_EQ(body(page).find("http://"), std::string::npos) << "an external asset in the page";
  EXPECT_EQ(body(page).find("https://"), std::string::npos) << "an external asset in the page";
  EXPECT_EQ(body(page).find("innerHTML"), std::string::npos) << "client-supplied names must go in as text";

  // A real browser runs the page's script against the server.
  RunResult dom = browse("alice-token", "--dump-dom");
  ASSERT_EQ(dom.code, 0) << dom.output << readFile(dir_.file("chromium.err"));
  std::smatch m;
  std::vector<std::string> rows;
  for (std::string rest = dom.output; std::regex_search(rest, m, std::regex("<tr data-session=\"(\\d+)\">(.*?)</tr>"));
       rest = m.suffix())
    rows.push_back(m[2].str());
  ASSERT_EQ(rows.size(), 2u) << "the page's sessions:\n" << dom.output;
  const std::string both = rows[0] + rows[1];
  EXPECT_NE(both.find("<td>alice</td>"), std::string::npos) << both;
  EXPECT_NE(both.find("<td>bob</td>"), std::string::npos) << both;
  EXPECT_NE(dom.output.find("3.0 MiB"), std::string::npos) << dom.output;
  EXPECT_NE(dom.output.find("5.0 MiB"), std::string::npos);
  EXPECT_NE(dom.output.find("data-device=\"1\""), std::string::npos);
  EXPECT_NE(dom.output.find("rgpu sim A100"), std::string::npos);
  EXPECT_NE(dom.output.find("0 requests waiting"), std::string::npos);
  EXPECT_EQ(dom.output.find("id=\"token-form\" hidden=\"\""), dom.output.find("id=\"token-form\"")) << dom.output;

  // The user's view in the browser: their session only, the other counted.
  RunResult bobs = browse("bob-token", "--dump-dom");
  ASSERT_EQ(bobs.code, 0) << bobs.output;
  EXPECT_EQ(bobs.output.find("<td>alice</td>"), std::string::npos) << bobs.output;
  EXPECT_NE(bobs.output.find("<td>bob</td>"), std::string::npos) << bobs.output;
  EXPECT_NE(bobs.output.find("1 of other users not shown"), std::string::npos) << bobs.output;

  // Without a token the page asks for one and shows no session.
  RunResult anon = browse("", "--dump-dom");
  EXPECT_EQ(anon.output.find("data-session="), std::string::npos) << anon.output;
  EXPECT_NE(anon.output.find("this server asks who you are"), std::string::npos) << anon.output;

  // The artifact: what an operator would see.
  std::filesystem::create_directories(RGPU_TEST_ARTIFACTS_DIR);
  const std::string shot = std::string(RGPU_TEST_ARTIFACTS_DIR) + "/status_page.png";
  std::filesystem::remove(shot);
  RunResult png = browse("alice-token", "--window-size=1280,720 --screenshot=" + shot);
  EXPECT_EQ(png.code, 0) << png.output;
  EXPECT_GT(std::filesystem::exists(shot) ? std::filesystem::file_size(shot) : 0, 10000u) << shot;
  a.join();
  b.join();
}

TEST_F(Pool, TheStatusPageCanBeTurnedOff) {
  start("", "", "[pool]\nmetrics_listen = \"127.0.0.1:0\"\nstatus_page = \"off\"\n");
  std::string log = server_->log();
  uint16_t port = test::metricsPort(log);
  ASSERT_NE(port, 0) << log;
  EXPECT_EQ(log.find("status page on"), std::string::npos) << log;
  EXPECT_NE(httpGet(port, "/").find("404 Not Found"), std::string::npos);
  EXPECT_NE(httpGet(port, "/status.json", "Authorization: Bearer bob-token\r\n").find("404 Not Found"),
            std::string::npos);
  EXPECT_NE(httpGet(port, "/metrics").find("HTTP/1.0 200 OK"), std::string::npos);
}

TEST_F(Pool, AMetricsTokenGivenAsItsDigestIsAcceptedForMetricsAndStatus) {
  start("", "", "[pool]\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_token = \"" + server::tokenDigest("scrape-secret") +
                    "\"\n");
  std::string log = server_->log();
  uint16_t port = test::metricsPort(log);
  ASSERT_NE(port, 0) << log;
  EXPECT_NE(httpGet(port, "/metrics").find("401 Unauthorized"), std::string::npos);
  EXPECT_NE(httpGet(port, "/metrics", "Authorization: Bearer " + server::tokenDigest("scrape-secret") + "\r\n")
                .find("401 Unauthorized"),
            std::string::npos)
      << "the digest itself must not be a token";
  EXPECT_NE(httpGet(port, "/metrics", "Authorization: Bearer scrape-secret\r\n").find("HTTP/1.0 200 OK"),
            std::string::npos);
  EXPECT_NE(httpGet(port, "/status.json", "Authorization: Bearer scrape-secret\r\n").find("HTTP/1.0 200 OK"),
            std::string::npos);
}

}  // namespace
}  // namespace rgpu::test
