// rgpu-smi: the pool of an rgpu-server, like nvidia-smi.
//
//   rgpu-smi                                  devices and sessions as tables
//   rgpu-smi --query-gpu=index,name,memory.used --format=csv[,noheader][,nounits]
//   rgpu-smi --query-sessions[=id,user,...] [--format=csv...]
//   rgpu-smi -l 2                             repeat every 2 seconds
//   rgpu-smi --pool                           every member of a pool of servers, its devices and load,
//                                             and the sessions each member shows the caller
//   rgpu-smi --pool --query-members=member,address,state,index,name,memory.used --format=csv
//   rgpu-smi --accounting FILE...             an accounting log (server.toml [accounting], with its
//                                             rotated files) summed per user and UTC day; no server
//
// It finds and authenticates to the server exactly as a CUDA program does
// (client.toml, RGPU_SERVER, ...) and asks for the pool status over the same
// TLS protocol, as a monitor session (no devices). Admins (admin = true in the
// server's [[users]]) see every session; others see their own.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "client/client_config.h"
#include "client/connection.h"
#include "common/accounting.h"
#include "common/log.h"

namespace {

using rgpu::client::Connection;

struct Format {
  bool csv = false, header = true, units = true;
};

std::string mib(uint64_t b, const Format& f) { return std::to_string(b >> 20) + (f.units ? " MiB" : ""); }
std::string known(int v, const char* unit, const Format& f, double scale = 1) {
  if (v < 0) return "[N/A]";
  char buf[32];
  std::snprintf(buf, sizeof buf, scale == 1 ? "%.0f" : "%.2f", v / scale);
  return std::string(buf) + (f.units ? unit : "");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, sep);)
    if (!x.empty()) out.push_back(x);
  return out;
}

// One device's value for a --query-gpu field; "" when the field is unknown.
template <typename Device>
std::string gpuField(Device d, const std::string& f, const Format& fmt) {
  if (f == "index") return std::to_string(d.getIndex());
  if (f == "name") return d.getName();
  if (f == "uuid") return d.getUuid();
  if (f == "memory.total") return mib(d.getMemoryTotal(), fmt);
  if (f == "memory.used") return mib(d.getMemoryUsed(), fmt);
  if (f == "memory.free") return mib(d.getMemoryTotal() - std::min(d.getMemoryUsed(), d.getMemoryTotal()), fmt);
  if (f == "utilization.gpu") return known(d.getUtilization(), " %", fmt);
  if (f == "temperature.gpu") return known(d.getTemperature(), "", fmt);
  if (f == "power.draw") return known(d.getPowerMw(), " W", fmt, 1000);
  if (f == "sessions") return std::to_string(d.getSessions());
  if (f == "compute_cap")
    return std::to_string(d.getComputeCapability() / 10) + "." + std::to_string(d.getComputeCapability() % 10);
  return "";
}

std::string sessionField(rgpu::wire::PoolSession::Reader s, const std::string& f, const Format& fmt) {
  if (f == "id") return std::to_string(s.getId());
  if (f == "user") return s.getUser();
  if (f == "host") return s.getHost();
  if (f == "pid") return std::to_string(s.getPid());
  if (f == "address") return s.getAddress();
  if (f == "devices") {
    std::string out;
    for (auto d : s.getDevices()) out += (out.empty() ? "" : " ") + std::to_string(d);
    return out.empty() ? "-" : out;
  }
  if (f == "memory") return mib(s.getMemory(), fmt);
  if (f == "priority") return s.getPriority();
  if (f == "gpu_time") {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", s.getGpuTimeNs() / 1e9);
    return std::string(buf) + (fmt.units ? " s" : "");
  }
  if (f == "calls") return std::to_string(s.getCalls());
  if (f == "state") return s.getState();
  if (f == "seconds") return std::to_string(s.getSeconds()) + (fmt.units ? " s" : "");
  return "";
}

void printCsv(const std::vector<std::string>& fields, const std::vector<std::vector<std::string>>& rows,
              const Format& fmt) {
  auto line = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
    return out;
  };
  if (fmt.header) std::cout << line(fields) << "\n";
  for (auto& r : rows) std::cout << line(r) << "\n";
}

void printTable(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
      out += (i ? "  " : "  ") + v[i];
      if (i + 1 < v.size()) out += std::string(w[i] - v[i].size(), ' ');
    }
    std::cout << out << "\n";
  };
  line(head);
  for (auto& r : rows) line(r);
}

// Prints the `fields` of every item as CSV or a table; false (and why) for an unknown field.
template <typename List, typename FieldFn>
bool printQuery(List items, const std::vector<std::string>& fields, FieldFn field, const Format& fmt,
                const char* option) {
  std::vector<std::vector<std::string>> rows;
  for (auto item : items) {
    std::vector<std::string> row;
    for (auto& f : fields) {
      std::string v = field(item, f, fmt);
      if (v.empty()) {
        std::fprintf(stderr, "rgpu-smi: unknown %s field '%s'\n", option, f.c_str());
        return false;
      }
      row.push_back(std::move(v));
    }
    rows.push_back(std::move(row));
  }
  if (fmt.csv) printCsv(fields, rows, fmt);
  else printTable(fields, rows);
  return true;
}

// One row per device of each member: the member's fields, then the device's.
std::string memberField(rgpu::wire::PoolMember::Reader m, const std::string& f) {
  if (f == "member") return m.getName();
  if (f == "address") return m.getAddress();
  if (f == "state") return m.getState();
  if (f == "member.sessions") return std::to_string(m.getSessions());
  if (f == "queued") return std::to_string(m.getQueued());
  return "";
}

// rgpu-smi --pool: the members as the server asked last read them, then each
// member's sessions (a monitor connection to each; as its own policy shows them).
int printPool(Connection& conn, const rgpu::client::ClientConfig& cfg, const Format& fmt,
              const std::vector<std::string>& member_fields, bool sessions_mode,
              const std::vector<std::string>& session_fields) {
  capnp::MallocMessageBuilder msg;
  msg.initRoot<rgpu::wire::Request>().setPoolMembers();
  auto r = conn.call(msg);
  if (!r.status) {
    std::fprintf(stderr, "rgpu-smi: %s\n", r.status.message().c_str());
    return 1;
  }
  auto members = r.reader().getPoolMembers().getMembers();
  if (!sessions_mode) {
    std::vector<std::string> fields = member_fields;
    if (fields.empty()) fields = {"member", "address", "state", "index", "name", "memory.used", "memory.total", "sessions",
                                  "compute_cap"};
    std::vector<std::vector<std::string>> rows;
    for (auto m : members)
      for (auto d : m.getDevices()) {
        std::vector<std::string> row;
        for (const auto& f : fields) {
          std::string v = memberField(m, f);
          if (v.empty()) v = gpuField(d, f, fmt);
          if (v.empty()) {
            std::fprintf(stderr, "rgpu-smi: unknown --query-members field '%s'\n", f.c_str());
            return 2;
          }
          row.push_back(std::move(v));
        }
        rows.push_back(std::move(row));
      }
    if (fmt.csv || !member_fields.empty()) {
      if (fmt.csv) printCsv(fields, rows, fmt);
      else printTable(fields, rows);
      return 0;
    }
    std::cout << "rgpu-smi " << RGPU_VERSION << "  pool as seen by " << conn.server() << "  user "
              << conn.welcome().identity << "  " << members.size() << " member(s)\n\n";
    printTable({"MEMBER", "ADDRESS", "STATE", "GPU", "NAME", "MEMORY USED", "MEMORY", "SESSIONS", "CC"}, rows);
    std::cout << "\n";
  }
  // Sessions, member by member.
  std::vector<std::string> fields = session_fields;
  if (fields.empty()) fields = {"id", "user", "host", "pid", "devices", "memory", "state", "seconds"};
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;
  for (auto m : members) {
    rgpu::client::ClientConfig one = cfg;
    one.server = m.getAddress();
    one.server_name.clear();
    one.monitor = true;
    auto c = Connection::open(one, nullptr);
    if (!c) {
      notes.push_back("member " + std::string(m.getName()) + " at " + std::string(m.getAddress()) + ": " +
                      c.status().message());
      continue;
    }
    capnp::MallocMessageBuilder q;
    q.initRoot<rgpu::wire::Request>().setPoolStatus();
    auto st = (*c)->call(q);
    if (!st.status) {
      notes.push_back("member " + std::string(m.getName()) + ": " + st.status.message());
      continue;
    }
    for (auto s : st.reader().getPoolStatus().getSessions()) {
      std::vector<std::string> row = {m.getName()};
      for (const auto& f : fields) {
        std::string v = sessionField(s, f, fmt);
        if (v.empty()) {
          std::fprintf(stderr, "rgpu-smi: unknown --query-sessions field '%s'\n", f.c_str());
          return 2;
        }
        row.push_back(std::move(v));
      }
      rows.push_back(std::move(row));
    }
    (*c)->close();
  }
  std::vector<std::string> head = {"member"};
  head.insert(head.end(), fields.begin(), fields.end());
  if (fmt.csv) {
    printCsv(head, rows, fmt);
  } else {
    for (auto& h : head)
      for (auto& ch : h) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    printTable(head, rows);
  }
  for (const auto& n : notes) std::fprintf(stderr, "rgpu-smi: %s\n", n.c_str());
  return notes.empty() ? 0 : 3;
}

}  // namespace

// rgpu-smi --accounting: the files' lines per user and day (common/accounting.h).
int printAccounting(const std::vector<std::string>& files, const std::string& format) {
  std::vector<rgpu::common::AccountingDay> days;
  size_t skipped = 0;
  for (const auto& f : files) {
    std::ifstream in(f);
    if (!in) {
      std::fprintf(stderr, "rgpu-smi: cannot read accounting log %s: %s\n", f.c_str(), std::strerror(errno));
      return 1;
    }
    skipped += rgpu::common::summariseAccounting(in, days);
  }
  std::fputs(rgpu::common::formatAccountingDays(days, format.rfind("csv", 0) == 0).c_str(), stdout);
  if (skipped) std::fprintf(stderr, "rgpu-smi: %zu malformed line(s) skipped\n", skipped);
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"rgpu-smi: devices and sessions of an rgpu-server pool"};
  std::string server, config, query_gpu, query_sessions, query_members, format;
  int loop = 0;
  bool pool = false;
  app.add_option("--server", server, "rgpu server as HOST:PORT (default: from client.toml)");
  app.add_option("--config", config, "client.toml to use (default: $RGPU_CONFIG, ~/.config/rgpu, /etc/rgpu)");
  app.add_option("--query-gpu", query_gpu,
                 "comma-separated: index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu,"
                 "temperature.gpu,power.draw,sessions,compute_cap");
  auto* qs = app.add_option("--query-sessions", query_sessions,
                            "comma-separated: id,user,host,pid,address,devices,memory,priority,gpu_time,calls,state,"
                            "seconds (default: all)");
  qs->expected(0, 1);
  app.add_option("--format", format, "csv[,noheader][,nounits]");
  app.add_option("-l,--loop", loop, "repeat every N seconds");
  app.add_flag("--pool", pool, "every member of the pool of servers this server is one of, and their sessions");
  app.add_option("--query-members", query_members,
                 "with --pool, comma-separated: member,address,state,member.sessions,queued and the --query-gpu fields");
  uint64_t migrate = 0;
  std::string migrate_to;
  app.add_option("--migrate", migrate,
                 "move session ID to a new worker, which restores it from a checkpoint while the program pauses "
                 "(admins; docs/migration.md)");
  app.add_option("--to", migrate_to, "with --migrate: the member of the pool to move it to (default: a new worker of this server)");
  std::vector<std::string> accounting;
  app.add_option("--accounting", accounting,
                 "summarise accounting log files (server.toml [accounting] path and its rotated .1, .2, ...) per "
                 "user and UTC day; reads the files, asks no server");
  CLI11_PARSE(app, argc, argv);
  if (!accounting.empty()) return printAccounting(accounting, format);

  if (!config.empty()) setenv("RGPU_CONFIG", config.c_str(), 1);
  if (!server.empty()) setenv("RGPU_SERVER", server.c_str(), 1);
  auto cfg = rgpu::client::loadClientConfig();
  if (!cfg) {
    std::fprintf(stderr, "rgpu-smi: %s\n", cfg.status().message().c_str());
    return 1;
  }
  rgpu::common::initLogging("rgpu-smi", cfg->log_level);
  cfg->monitor = true;
  auto conn = Connection::open(*cfg, nullptr);
  if (!conn) {
    std::fprintf(stderr, "rgpu-smi: %s\n", conn.status().message().c_str());
    return 1;
  }
  Format fmt;
  for (auto& opt : split(format, ',')) {
    if (opt == "csv") fmt.csv = true;
    else if (opt == "noheader") fmt.header = false;
    else if (opt == "nounits") fmt.units = false;
    else {
      std::fprintf(stderr, "rgpu-smi: unknown --format option '%s'\n", opt.c_str());
      return 2;
    }
  }
  if (migrate) {
    capnp::MallocMessageBuilder msg;
    auto m = msg.initRoot<rgpu::wire::Request>().initSessionMove();
    m.setSession(migrate);
    m.setMember(migrate_to);
    auto r = (*conn)->call(msg);
    (*conn)->close();
    if (!r.status) {
      std::fprintf(stderr, "rgpu-smi: %s\n", r.status.message().c_str());
      return 1;
    }
    std::printf("%s\n", std::string(r.reader().getMessage()).c_str());
    return 0;
  }
  bool sessions_mode = qs->count() > 0;
  std::vector<std::string> gpu_fields = split(query_gpu, ',');
  std::vector<std::string> session_fields = split(query_sessions, ',');
  if (sessions_mode && session_fields.empty())
    session_fields = {"id", "user", "host", "pid", "devices", "memory", "priority", "gpu_time", "calls", "state", "seconds"};
  if (pool) {
    for (;;) {
      int rc = printPool(**conn, *cfg, fmt, split(query_members, ','), sessions_mode,
                         sessions_mode ? session_fields : std::vector<std::string>{});
      std::cout.flush();
      if (rc == 1 || rc == 2 || loop <= 0) {
        (*conn)->close();
        return rc;
      }
      std::this_thread::sleep_for(std::chrono::seconds(loop));
      if (!fmt.csv) std::cout << "\n";
    }
  }
  for (;;) {
    capnp::MallocMessageBuilder msg;
    msg.initRoot<rgpu::wire::Request>().setPoolStatus();
    auto r = (*conn)->call(msg);
    if (!r.status) {
      std::fprintf(stderr, "rgpu-smi: %s\n", r.status.message().c_str());
      return 1;
    }
    auto st = r.reader().getPoolStatus();
    if (!gpu_fields.empty()) {
      if (!printQuery(st.getDevices(), gpu_fields, gpuField<rgpu::wire::PoolDevice::Reader>, fmt, "--query-gpu"))
        return 2;
    } else if (sessions_mode) {
      if (!printQuery(st.getSessions(), session_fields, sessionField, fmt, "--query-sessions")) return 2;
    } else {
      std::cout << "rgpu-smi " << RGPU_VERSION << "  server " << (*conn)->server() << "  user "
                << (*conn)->welcome().identity << "  " << st.getDevices().size() << " device(s), "
                << st.getSessions().size() << " session(s) shown, " << st.getQueued() << " queued\n\n";
      std::vector<std::vector<std::string>> devs;
      for (auto d : st.getDevices())
        devs.push_back({gpuField(d, "index", fmt), d.getName(), gpuField(d, "memory.used", fmt) + " / " +
                                                                    gpuField(d, "memory.total", fmt),
                        gpuField(d, "utilization.gpu", fmt), gpuField(d, "temperature.gpu", fmt),
                        gpuField(d, "power.draw", fmt), gpuField(d, "sessions", fmt), gpuField(d, "compute_cap", fmt)});
      printTable({"GPU", "NAME", "MEMORY", "UTIL", "TEMP", "POWER", "SESSIONS", "CC"}, devs);
      std::cout << "\n";
      std::vector<std::vector<std::string>> ss;
      for (auto s : st.getSessions())
        ss.push_back({sessionField(s, "id", fmt), s.getUser(), s.getHost(), sessionField(s, "pid", fmt),
                      sessionField(s, "devices", fmt), sessionField(s, "memory", fmt), s.getPriority(),
                      sessionField(s, "gpu_time", fmt), sessionField(s, "calls", fmt), s.getState(),
                      sessionField(s, "seconds", fmt)});
      printTable({"SESSION", "USER", "HOST", "PID", "GPUS", "MEMORY", "PRIORITY", "GPU-TIME", "CALLS", "STATE", "AGE"},
                 ss);
    }
    std::cout.flush();
    if (loop <= 0) break;
    std::this_thread::sleep_for(std::chrono::seconds(loop));
    if (!fmt.csv) std::cout << "\n";
  }
  (*conn)->close();
  return 0;
}
