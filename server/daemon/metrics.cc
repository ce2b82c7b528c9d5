#include "server/daemon/metrics.h"


#include <algorithm>
#include <cctype>
#include <sstream>

#include "common/tls.h"
#include "common/log.h"
#include "server/daemon/status_page.h"

namespace rgpu::server {
namespace {

std::string esc(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  // `base`: labels every sample carries (the pool member's `server`), or "".
  explicit Writer(std::string base) : base_(std::move(base)) {}
  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  template <typename V>
  void sample(const char* name, const std::string& labels, V value) {
    out_ << name << "{" << base_ << (base_.empty() || labels.empty() ? "" : ",") << labels << "} " << value << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  std::string base_;
  std::ostringstream out_;
};

}  // namespace

std::string renderMetrics(const PoolSnapshot& s, const std::vector<DeviceHealth>& health, const std::string& host,
                          bool per_session, const std::string& server) {
  Writer w(server.empty() ? "" : "server=\"" + esc(server) + "\"");
  std::vector<std::string> dl;  // device labels
  for (size_t i = 0; i < s.devices.size(); ++i)
    dl.push_back("gpu=\"" + std::to_string(i) + "\",UUID=\"" + esc(s.devices[i].info.uuid) + "\",modelName=\"" +
                 esc(s.devices[i].info.name) + "\",Hostname=\"" + esc(host) + "\"");
  auto health_of = [&](size_t i) { return i < health.size() ? health[i] : DeviceHealth{}; };
  w.family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).");
  for (size_t i = 0; i < s.devices.size(); ++i)
    if (health_of(i).utilization >= 0) w.sample("DCGM_FI_DEV_GPU_UTIL", dl[i], health_of(i).utilization);
  w.family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory allocated by rgpu sessions (in MiB).");
  for (size_t i = 0; i < s.devices.size(); ++i) w.sample("DCGM_FI_DEV_FB_USED", dl[i], s.devices[i].used >> 20);
  w.family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free for rgpu sessions (in MiB).");
  for (size_t i = 0; i < s.devices.size(); ++i)
    w.sample("DCGM_FI_DEV_FB_FREE", dl[i], (s.devices[i].info.total - s.devices[i].used) >> 20);
  w.family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).");
  for (size_t i = 0; i < s.devices.size(); ++i)
    if (health_of(i).temperature >= 0) w.sample("DCGM_FI_DEV_GPU_TEMP", dl[i], health_of(i).temperature);
  w.family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).");
  for (size_t i = 0; i < s.devices.size(); ++i)
    if (health_of(i).power_mw >= 0) w.sample("DCGM_FI_DEV_POWER_USAGE", dl[i], health_of(i).power_mw / 1000.0);
  w.family("rgpu_device_memory_total_bytes", "gauge", "Device memory.");
  for (size_t i = 0; i < s.devices.size(); ++i) w.sample("rgpu_device_memory_total_bytes", dl[i], s.devices[i].info.total);
  w.family("rgpu_device_memory_allocated_bytes", "gauge", "Device memory allocated by rgpu sessions (exact).");
  for (size_t i = 0; i < s.devices.size(); ++i) w.sample("rgpu_device_memory_allocated_bytes", dl[i], s.devices[i].used);
  w.family("rgpu_device_sessions", "gauge", "Sessions placed on the device.");
  for (size_t i = 0; i < s.devices.size(); ++i) w.sample("rgpu_device_sessions", dl[i], s.devices[i].sessions);

  uint64_t queued = 0;
  for (auto& x : s.sessions) queued += x.queued ? 1 : 0;
  w.family("rgpu_admission_queue_length", "gauge", "Requests waiting in the admission queue.");
  w.sample("rgpu_admission_queue_length", "", queued);

  if (!per_session) {
    // Totals only: what the pool does, not who does it.
    uint64_t running = 0, calls = 0, in = 0, out = 0, errors = 0, gpu_ns = 0, admissions = 0, refusals = 0;
    for (auto& x : s.sessions) {
      if (x.queued) continue;
      ++running;
      calls += x.usage.calls, in += x.usage.bytes_in, out += x.usage.bytes_out, errors += x.usage.errors;
      gpu_ns += x.usage.gpu_ns;
    }
    for (auto& [user, u] : s.users) admissions += u.admissions, refusals += u.refusals;
    w.family("rgpu_sessions", "gauge", "Sessions running.");
    w.sample("rgpu_sessions", "", running);
    w.family("rgpu_calls_total", "counter", "CUDA calls served by running sessions.");
    w.sample("rgpu_calls_total", "", calls);
    w.family("rgpu_bytes_total", "counter", "Bulk bytes moved by running sessions.");
    w.sample("rgpu_bytes_total", "direction=\"in\"", in);
    w.sample("rgpu_bytes_total", "direction=\"out\"", out);
    w.family("rgpu_gpu_seconds_total", "counter", "Kernel time of running sessions.");
    w.sample("rgpu_gpu_seconds_total", "", gpu_ns / 1e9);
    w.family("rgpu_errors_total", "counter", "Calls of running sessions that returned an error.");
    w.sample("rgpu_errors_total", "", errors);
    w.family("rgpu_admissions_total", "counter", "Sessions admitted.");
    w.sample("rgpu_admissions_total", "", admissions);
    w.family("rgpu_refusals_total", "counter", "Sessions refused (policy, no fit, timeout).");
    w.sample("rgpu_refusals_total", "", refusals);
    return w.str();
  }

  auto sl = [](const PoolSnapshot::Session& x) {
    return "session=\"" + std::to_string(x.id) + "\",user=\"" + esc(x.client.user) + "\",client_host=\"" +
           esc(x.client.host) + "\",client_pid=\"" + std::to_string(x.client.pid) + "\"";
  };
  w.family("rgpu_session_calls_total", "counter", "CUDA calls served.");
  for (auto& x : s.sessions)
    if (!x.queued) w.sample("rgpu_session_calls_total", sl(x), x.usage.calls);
  w.family("rgpu_session_bytes_total", "counter", "Bulk bytes moved (in: client to server, out: server to client).");
  for (auto& x : s.sessions) {
    if (x.queued) continue;
    w.sample("rgpu_session_bytes_total", sl(x) + ",direction=\"in\"", x.usage.bytes_in);
    w.sample("rgpu_session_bytes_total", sl(x) + ",direction=\"out\"", x.usage.bytes_out);
  }
  w.family("rgpu_session_gpu_seconds_total", "counter", "Kernel time on the backend.");
  for (auto& x : s.sessions)
    if (!x.queued) w.sample("rgpu_session_gpu_seconds_total", sl(x), x.usage.gpu_ns / 1e9);
  w.family("rgpu_session_errors_total", "counter", "Calls that returned an error.");
  for (auto& x : s.sessions)
    if (!x.queued) w.sample("rgpu_session_errors_total", sl(x), x.usage.errors);
  w.family("rgpu_session_memory_bytes", "gauge", "Device memory the session has allocated.");
  for (auto& x : s.sessions)
    if (!x.queued) w.sample("rgpu_session_memory_bytes", sl(x), x.memory);

  w.family("rgpu_user_quota_bytes", "gauge", "Memory quota per device (0: none).");
  for (auto& [user, u] : s.users) w.sample("rgpu_user_quota_bytes", "user=\"" + esc(user) + "\"", u.quota);
  w.family("rgpu_user_quota_used_bytes", "gauge", "Memory the user's sessions have allocated, per device.");
  for (auto& [user, u] : s.users)
    for (size_t i = 0; i < u.quota_used.size(); ++i)
      w.sample("rgpu_user_quota_used_bytes", "user=\"" + esc(user) + "\",gpu=\"" + std::to_string(i) + "\"",
               u.quota_used[i]);
  w.family("rgpu_user_admissions_total", "counter", "Sessions admitted.");
  for (auto& [user, u] : s.users) w.sample("rgpu_user_admissions_total", "user=\"" + esc(user) + "\"", u.admissions);
  w.family("rgpu_user_refusals_total", "counter", "Sessions refused (policy, no fit, timeout).");
  for (auto& [user, u] : s.users) w.sample("rgpu_user_refusals_total", "user=\"" + esc(user) + "\"", u.refusals);
  w.family("rgpu_user_admission_wait_seconds_total", "counter", "Time admitted sessions waited in the queue.");
  for (auto& [user, u] : s.users)
    w.sample("rgpu_user_admission_wait_seconds_total", "user=\"" + esc(user) + "\"", u.admission_wait_s);
  return w.str();
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(asio::io_context& io, const std::string& listen,
                                                           Render render, std::string token, StatusJson status) {
  auto hp = common::parseHostPort(listen);
  if (!hp) return Status(err::kInvalidValue, "[pool] metrics_listen: " + hp.status().message());
  std::unique_ptr<MetricsServer> m(new MetricsServer(io, std::move(render), std::move(token), std::move(status)));
  try {
    asio::ip::tcp::resolver resolver(io);
    auto ep = *resolver.resolve(hp->first, std::to_string(hp->second)).begin();
    m->acceptor_.open(ep.endpoint().protocol());
    m->acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true));
    m->acceptor_.bind(ep.endpoint());
    m->acceptor_.listen(16);
  } catch (const std::exception& e) {
    return Status(err::kInvalidValue, "cannot serve metrics on " + listen + ": " + e.what());
  }
  m->port_ = m->acceptor_.local_endpoint().port();
  m->acceptNext();
  return m;
}

namespace {

// The token of the request's "Authorization: Bearer <token>" header, or "".
std::string bearerOf(std::istream& headers) {
  std::string line;
  std::getline(headers, line);  // the rest of the request line
  while (std::getline(headers, line) && line != "\r" && !line.empty()) {
    if (line.back() == '\r') line.pop_back();
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name != "authorization") continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    return value.rfind("Bearer ", 0) == 0 ? value.substr(7) : "";
  }
  return "";
}
}  // namespace

MetricsServer::Response MetricsServer::respond(const std::string& method, const std::string& path,
                                               const std::string& bearer) const {
  Response r;
  const std::string route = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    r.status = "405 Method Not Allowed";
    r.body = "rgpu-server answers GET only\n";
  } else if (route == "/metrics") {
    if (!token_.empty() && !tokenMatches(token_, bearer)) {  // the token, or its sha256: digest
      r.status = "401 Unauthorized";
      r.headers = "WWW-Authenticate: Bearer realm=\"rgpu\"\r\n";
      r.body = "rgpu-server: /metrics needs Authorization: Bearer <[pool] metrics_token>\n";
    } else {
      r.type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = render_();
    }
  } else if (status_ && (route == "/" || route == "/index.html")) {
    r.type = "text/html; charset=utf-8";
    r.headers = std::string("Content-Security-Policy: ") + kStatusPagePolicy +
                "\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n";
    r.body = statusPageHtml();
  } else if (status_ && route == "/status.json") {
    auto json = status_(bearer);
    r.headers = "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n";
    if (json) {
      r.type = "application/json";
      r.body = std::move(*json);
    } else if (json.status().code() == err::kNotPermitted) {
      r.status = "401 Unauthorized";
      r.headers += "WWW-Authenticate: Bearer realm=\"rgpu\"\r\n";
      r.body = "rgpu-server: " + json.status().message() + "\n";
    } else {
      r.status = "404 Not Found";
      r.body = "rgpu-server: " + json.status().message() + "\n";
    }
  } else {
    r.status = "404 Not Found";
    r.body = status_ ? "rgpu-server serves /metrics, / and /status.json\n" : "rgpu-server serves /metrics\n";
  }
  return r;
}

void MetricsServer::acceptNext() {
  acceptor_.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket sock) {
    if (ec) return;
    // One request, read with a bound: a client that sends nothing or too much is dropped.
    auto s = std::make_shared<asio::ip::tcp::socket>(std::move(sock));
    auto buf = std::make_shared<asio::streambuf>(8192);
    auto timer = std::make_shared<asio::steady_timer>(acceptor_.get_executor(), std::chrono::seconds(5));
    timer->async_wait([s](const asio::error_code& e) {
      if (!e) {
        asio::error_code ignored;
        s->close(ignored);
      }
    });
    asio::async_read_until(*s, *buf, "\r\n\r\n", [this, s, buf, timer](const asio::error_code& e, size_t) {
      timer->cancel();
      if (e) return;
      std::istream in(buf.get());
      std::string method, path;
      in >> method >> path;
      Response r = respond(method, path, bearerOf(in));
      auto out = std::make_shared<std::string>("HTTP/1.0 " + r.status + "\r\n" + r.headers + "Content-Type: " + r.type +
                                               "\r\nContent-Length: " + std::to_string(r.body.size()) +
                                               "\r\nConnection: close\r\n\r\n" + (method == "HEAD" ? "" : r.body));
      asio::async_write(*s, asio::buffer(*out), [s, out](const asio::error_code&, size_t) {
        asio::error_code ignored;
        s->close(ignored);
      });
    });
    acceptNext();
  });
}

}  // namespace rgpu::server
