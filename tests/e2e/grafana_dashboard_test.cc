// deploy/grafana/rgpu-dashboard.json against a real rgpu-server: every query
// names metrics the server exports, groups and filters by labels those
// metrics carry, and the panels cover what operators look at (devices,
// users, sessions). A dashboard whose metric was renamed fails here, not on
// an operator's screen.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <map>
#include <regex>
#include <set>

#include "tests/e2e/pool_fixture.h"

namespace rgpu::test {
namespace {

using json = nlohmann::json;

// What one PromQL expression refers to.
struct Query {
  std::set<std::string> metrics;
  std::set<std::string> labels;  // in matchers, by (...), without (...), on (...)
};

bool identStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool identChar(char c) { return identStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// A small PromQL reader: enough for the dashboard's queries (functions,
// aggregations with by/without, binary operators, matchers, ranges, Grafana
// variables). Anything it cannot read fails the test with the query.
Query readPromQL(const std::string& q) {
  static const std::set<std::string> kKeywords = {"by", "without", "on", "ignoring", "group_left", "group_right",
                                                  "bool", "and", "or", "unless", "offset"};
  // Aggregations may be followed by a grouping before their parenthesis.
  static const std::set<std::string> kAggregations = {"sum", "avg", "min", "max", "count", "group", "stddev",
                                                      "stdvar", "topk", "bottomk", "quantile", "count_values"};
  Query out;
  size_t i = 0;
  auto skipSpace = [&] {
    while (i < q.size() && std::isspace(static_cast<unsigned char>(q[i]))) ++i;
  };
  auto ident = [&] {
    size_t b = i;
    while (i < q.size() && identChar(q[i])) ++i;
    return q.substr(b, i - b);
  };
  auto labelList = [&] {  // at '(' : (a, b, c)
    ++i;
    for (skipSpace(); i < q.size() && q[i] != ')'; skipSpace()) {
      if (q[i] == ',') {
        ++i;
        continue;
      }
      std::string l = ident();
      if (l.empty()) ADD_FAILURE() << "unreadable label list in: " << q;
      if (l.empty()) return;
      out.labels.insert(l);
    }
    ++i;
  };
  auto matchers = [&] {  // at '{' : {a="x", b=~"y"}
    ++i;
    for (skipSpace(); i < q.size() && q[i] != '}'; skipSpace()) {
      if (q[i] == ',') {
        ++i;
        continue;
      }
      std::string l = ident();
      skipSpace();
      while (i < q.size() && (q[i] == '=' || q[i] == '!' || q[i] == '~')) ++i;
      skipSpace();
      if (l.empty() || i >= q.size() || q[i] != '"') {
        ADD_FAILURE() << "unreadable matcher in: " << q;
        return;
      }
      i = q.find('"', i + 1) + 1;
      out.labels.insert(l);
    }
    ++i;
  };
  while (i < q.size()) {
    char c = q[i];
    if (std::isspace(static_cast<unsigned char>(c)) || c == '(' || c == ')' || c == ',' || c == '+' || c == '-' ||
        c == '*' || c == '/' || c == '>' || c == '<' || c == '=' || c == '!' || c == '%' || c == '^') {
      ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      while (i < q.size() && (std::isalnum(static_cast<unsigned char>(q[i])) || q[i] == '.')) ++i;
    } else if (c == '[') {  // a range: [5m], [$__rate_interval]
      i = q.find(']', i) + 1;
    } else if (c == '{') {
      matchers();
    } else if (c == '"') {
      i = q.find('"', i + 1) + 1;
    } else if (identStart(c)) {
      std::string id = ident();
      skipSpace();
      bool call = i < q.size() && q[i] == '(';
      if (id == "by" || id == "without" || id == "on" || id == "ignoring" || id == "group_left" || id == "group_right") {
        if (call) labelList();
      } else if (!call && !kKeywords.count(id) && !kAggregations.count(id)) {
        out.metrics.insert(id);
      }
    } else {
      ADD_FAILURE() << "unexpected '" << c << "' in: " << q;
      return out;
    }
    if (i == std::string::npos || i == 0) break;
  }
  return out;
}

// Families (# TYPE) and the label names seen on each one's samples.
std::map<std::string, std::set<std::string>> scrape(const std::string& text) {
  std::map<std::string, std::set<std::string>> out;
  std::smatch m;
  for (std::string rest = text; std::regex_search(rest, m, std::regex("# TYPE (\\S+) ")); rest = m.suffix())
    out[m[1].str()];
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto brace = line.find('{');
    std::string name = line.substr(0, brace == std::string::npos ? line.find(' ') : brace);
    if (brace == std::string::npos) continue;
    std::string labels = line.substr(brace, line.find('}') - brace);
    for (std::string r = labels; std::regex_search(r, m, std::regex("([A-Za-z_]+)=\"")); r = m.suffix())
      out[name].insert(m[1].str());
  }
  return out;
}

TEST_F(Pool, TheGrafanaDashboardQueriesOnlyWhatTheServerExports) {
  json dash = json::parse(readFile(std::string(RGPU_SOURCE_DIR) + "/deploy/grafana/rgpu-dashboard.json"), nullptr, false);
  ASSERT_TRUE(dash.is_object()) << "deploy/grafana/rgpu-dashboard.json is not JSON";
  start("memory_quota = \"64MiB\"\n", "", "[pool]\nmetrics_listen = \"127.0.0.1:0\"\n");
  std::smatch m;
  std::string log = server_->log();
  uint16_t port = test::metricsPort(log);
  ASSERT_NE(port, 0) << log;
  // A running session, so that per-session and per-user series have samples.
  std::thread t = holder("alice", 3 << 20, 2000, dir_.file("holder.out"));
  std::string resp = httpGet(port, "/metrics");
  t.join();
  auto exported = scrape(resp.substr(resp.find("\r\n\r\n") + 4));
  ASSERT_GE(exported.size(), 19u) << resp;
  // Device families with no sample on the sim (NVML's) carry the device labels.
  const auto device_labels = exported["rgpu_device_sessions"];
  ASSERT_TRUE(device_labels.count("Hostname")) << resp;

  // Dashboard structure Grafana needs to import it.
  EXPECT_EQ(dash["uid"], "rgpu-pool");
  EXPECT_GE(dash["schemaVersion"].get<int>(), 36);
  std::set<std::string> variables;
  for (auto& v : dash["templating"]["list"]) variables.insert(v["name"].get<std::string>());
  EXPECT_TRUE(variables.count("datasource") && variables.count("instance"));

  std::set<std::string> used;
  int queries = 0;
  for (auto& p : dash["panels"]) {
    if (p["type"] == "row") continue;
    ASSERT_TRUE(p.contains("gridPos") && p.contains("targets") && p["targets"].size() > 0) << p.dump();
    EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << p["title"];
    for (auto& target : p["targets"]) {
      ++queries;
      const std::string expr = target["expr"];
      Query q = readPromQL(expr);
      EXPECT_FALSE(q.metrics.empty()) << expr;
      std::set<std::string> carried = {"instance", "job"};  // Prometheus adds them at scrape
      for (auto& metric : q.metrics) {
        used.insert(metric);
        auto it = exported.find(metric);
        EXPECT_NE(it, exported.end()) << "panel '" << p["title"] << "' queries " << metric
                                      << ", which rgpu-server does not export: " << expr;
        if (it == exported.end()) continue;
        const auto& labels = it->second.empty() ? device_labels : it->second;
        carried.insert(labels.begin(), labels.end());
      }
      for (auto& l : q.labels)
        EXPECT_TRUE(carried.count(l)) << "panel '" << p["title"] << "' uses label " << l << ": " << expr;
      const std::string legend = target.value("legendFormat", "");
      for (std::string r = legend; std::regex_search(r, m, std::regex("\\{\\{\\s*(\\w+)\\s*\\}\\}")); r = m.suffix())
        EXPECT_TRUE(carried.count(m[1].str())) << "panel '" << p["title"] << "' legend names " << m[1] << ": " << expr;
    }
  }
  EXPECT_GE(queries, 15);
  // What operators look at: per device, per user, per session.
  for (const char* must : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                           "rgpu_device_memory_allocated_bytes", "rgpu_session_gpu_seconds_total",
                           "rgpu_user_quota_used_bytes", "rgpu_user_admissions_total",
                           "rgpu_user_admission_wait_seconds_total", "rgpu_admission_queue_length",
                           "rgpu_session_calls_total", "rgpu_session_bytes_total"})
    EXPECT_TRUE(used.count(must)) << "the dashboard shows no " << must;
}

TEST(PromQLReader, FindsMetricsAndLabelsAndRefusesWhatItCannotRead) {
  Query q = readPromQL("sum by (user) (rate(a_total{instance=~\"$instance\"}[$__rate_interval])) / max(b > 0)");
  EXPECT_EQ(q.metrics, (std::set<std::string>{"a_total", "b"}));
  EXPECT_EQ(q.labels, (std::set<std::string>{"user", "instance"}));
  EXPECT_NONFATAL_FAILURE(readPromQL("a @ 1609746000"), "unexpected '@'");
}

}  // namespace
}  // namespace rgpu::test
