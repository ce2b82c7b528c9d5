#include "server/daemon/status_page.h"

#include <nlohmann/json.hpp>

namespace rgpu::server {

Result<StatusViewer> statusViewer(const ServerConfig& cfg, const std::string& bearer,
                                  const std::function<bool(const std::string&)>& is_admin) {
  if (cfg.pool.status_page == "open") return StatusViewer{"", true, true};
  if (!bearer.empty() && tokenMatches(cfg.pool.metrics_token, bearer))
    return StatusViewer{"", cfg.pool.metrics_labels == "sessions", cfg.pool.metrics_labels == "sessions"};
  // A user's token only: the status page asks for no certificate.
  std::string user;
  if (!bearer.empty())
    for (auto& u : cfg.users)
      if (tokenMatches(u.token, bearer)) {
        user = u.name;
        break;
      }
  if (user.empty())
    return Status(err::kNotPermitted, bearer.empty() ? "the status needs a user's token (Authorization: Bearer)"
                                                     : "the token matches no user");
  return StatusViewer{user, is_admin(user), true};
}

std::string statusJson(const PoolSnapshot& s, const std::vector<DeviceHealth>& health, const StatusViewer& viewer,
                       const StatusServerInfo& server) {
  using json = nlohmann::ordered_json;
  json out;
  out["server"] = {{"version", server.version}, {"host", server.host}, {"member", server.member},
                   {"backend", server.backend}};
  out["viewer"] = {{"user", viewer.user}, {"all_sessions", viewer.all && viewer.sessions}};
  json devices = json::array();
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const auto& d = s.devices[i];
    DeviceHealth h = i < health.size() ? health[i] : DeviceHealth{};
    json dj = {{"index", i},
               {"name", d.info.name},
               {"uuid", d.info.uuid},
               {"compute_capability", std::to_string(d.info.cc / 10) + "." + std::to_string(d.info.cc % 10)},
               {"memory_total", d.info.total},
               {"memory_used", d.used},
               {"sessions", d.sessions}};
    // Unknown (no NVML, the sim backend): null, which the page shows as "–".
    dj["utilization"] = h.utilization >= 0 ? json(h.utilization) : json(nullptr);
    dj["temperature"] = h.temperature >= 0 ? json(h.temperature) : json(nullptr);
    dj["power_w"] = h.power_mw >= 0 ? json(h.power_mw / 1000.0) : json(nullptr);
    devices.push_back(std::move(dj));
  }
  out["devices"] = std::move(devices);
  json sessions = json::array();
  uint64_t queued = 0, hidden = 0;
  for (const auto& x : s.sessions) {
    queued += x.queued ? 1 : 0;
    if (!viewer.sessions || (!viewer.all && x.client.user != viewer.user)) {
      ++hidden;
      continue;
    }
    sessions.push_back({{"id", x.id},
                        {"user", x.client.user},
                        {"client_host", x.client.host},
                        {"client_pid", x.client.pid},
                        {"state", x.queued ? "queued" : "running"},
                        {"devices", x.devices},
                        {"memory", x.memory},
                        {"priority", priorityName(x.priority)},
                        {"gpu_seconds", static_cast<double>(x.usage.gpu_ns) / 1e9},
                        {"calls", x.usage.calls},
                        {"bytes_in", x.usage.bytes_in},
                        {"bytes_out", x.usage.bytes_out},
                        {"seconds", x.seconds}});
  }
  out["sessions"] = std::move(sessions);
  out["queued"] = queued;
  out["hidden"] = hidden;  // sessions (running or queued) the viewer may not see
  return out.dump();
}

const std::string& statusPageHtml() {
  static const std::string page = R"RGPU(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rgpu-server status</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2433; background: #f6f7f9; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; }
  h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
  #server { color: #566; }
  #state { margin-top: .3em; color: #566; }
  #state.error { color: #b3261e; font-weight: 600; }
  table { border-collapse: collapse; width: 100%; background: #fff; }
  th, td { text-align: left; padding: .35em .6em; border-bottom: 1px solid #e3e6ea; white-space: nowrap; }
  th { font-weight: 600; color: #445; background: #eef0f3; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .bar { position: relative; width: 12em; height: 1.1em; background: #e3e6ea; border-radius: 3px; overflow: hidden; }
  .bar > span { position: absolute; left: 0; top: 0; bottom: 0; background: #3a7bd5; }
  .bar.memory > span { background: #2e9d6a; }
  .bar > em { position: relative; font-style: normal; font-size: .85em; padding-left: .4em; }
  .empty { color: #889; font-style: italic; }
  form { margin: 1em 0; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<h1>rgpu-server</h1>
<div id="server"></div>
<div id="state">loading…</div>
<form id="token-form" hidden>
  <label>Token of your rgpu user (or the metrics token): <input id="token" type="password" autocomplete="off"></label>
  <button type="submit">Show</button>
</form>
<h2>Devices</h2>
<table id="devices"><thead><tr><th>#</th><th>Device</th><th>CC</th><th>Utilisation</th><th>Memory</th>
<th>Temp</th><th>Power</th><th>Sessions</th></tr></thead><tbody></tbody></table>
<h2>Sessions <span id="session-note"></span></h2>
<table id="sessions"><thead><tr><th>Session</th><th>User</th><th>Client</th><th>State</th><th>Devices</th>
<th>Memory</th><th>GPU-seconds</th><th>Calls</th><th>Age</th><th>Priority</th></tr></thead><tbody></tbody></table>
<h2>Admission queue</h2>
<div id="queue"></div>
<script>
"use strict";
const KEY = "rgpu-status-token";
const fragment = location.hash.match(/(?:^#|&)token=([^&]*)/);
if (fragment) {
  sessionStorage.setItem(KEY, decodeURIComponent(fragment[1]));
  history.replaceState(null, "", location.pathname);  // the token leaves the address bar
}
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);  // text only: names come from clients
  if (cls) e.className = cls;
  return e;
}
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : n) + " " + units[i];
}
function age(s) {
  s = Math.floor(s);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
}
function bar(fraction, label, cls) {
  const b = el("div", undefined, "bar " + cls);
  const fill = el("span");
  fill.style.width = Math.max(0, Math.min(100, fraction * 100)).toFixed(1) + "%";
  b.append(fill, el("em", label));
  return b;
}
function cell(row, content, cls) {
  const td = el("td", typeof content === "object" ? undefined : content, cls);
  if (typeof content === "object") td.append(content);
  row.append(td);
}
function render(s) {
  $("server").textContent = "version " + s.server.version + " · host " + s.server.host +
      (s.server.member ? " · member " + s.server.member : "") + " · backend " + s.server.backend;
  const devices = $("devices").tBodies[0];
  devices.replaceChildren();
  for (const d of s.devices) {
    const r = el("tr");
    r.dataset.device = d.index;
    cell(r, d.index);
    cell(r, d.name);
    cell(r, d.compute_capability);
    cell(r, d.utilization === null ? el("span", "–", "empty") : bar(d.utilization / 100, d.utilization + " %", "util"));
    cell(r, bar(d.memory_total ? d.memory_used / d.memory_total : 0,
                bytes(d.memory_used) + " / " + bytes(d.memory_total), "memory"));
    cell(r, d.temperature === null ? "–" : d.temperature + " °C", "num");
    cell(r, d.power_w === null ? "–" : d.power_w.toFixed(0) + " W", "num");
    cell(r, d.sessions, "num");
    devices.append(r);
  }
  const sessions = $("sessions").tBodies[0];
  sessions.replaceChildren();
  const running = s.sessions.filter((x) => x.state === "running");
  for (const x of running) {
    const r = el("tr");
    r.dataset.session = x.id;
    cell(r, x.id, "num");
    cell(r, x.user);
    cell(r, x.client_host + " (pid " + x.client_pid + ")");
    cell(r, x.state);
    cell(r, x.devices.join(", "));
    cell(r, bytes(x.memory), "num");
    cell(r, x.gpu_seconds.toFixed(2), "num");
    cell(r, x.calls, "num");
    cell(r, age(x.seconds), "num");
    cell(r, x.priority);
    sessions.append(r);
  }
  if (!running.length) {
    const r = el("tr");
    const td = el("td", "no sessions you may see", "empty");
    td.colSpan = 10;
    r.append(td);
    sessions.append(r);
  }
  $("session-note").textContent = s.hidden ? "(" + s.hidden + " of other users not shown)" : "";
  const queue = $("queue");
  queue.replaceChildren();
  const waiting = s.sessions.filter((x) => x.state === "queued");
  queue.append(el("div", s.queued + " request" + (s.queued === 1 ? "" : "s") + " waiting"));
  for (const x of waiting) {
    const d = el("div", "session " + x.id + " of " + x.user + " from " + x.client_host + ", waiting " + age(x.seconds));
    d.dataset.queued = x.id;
    queue.append(d);
  }
}
async function refresh() {
  const state = $("state");
  try {
    const token = sessionStorage.getItem(KEY);
    const response = await fetch("status.json", {
      headers: token ? { "Authorization": "Bearer " + token } : {}, cache: "no-store" });
    if (response.status === 401) {
      state.textContent = token ? "that token is not accepted" : "this server asks who you are";
      state.className = "error";
      $("token-form").hidden = false;
      return;  // no refresh until a token is given
    }
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    $("token-form").hidden = true;
    state.textContent = "updated " + new Date().toLocaleTimeString();
    state.className = "";
  } catch (e) {
    state.textContent = "cannot reach the server: " + e.message;
    state.className = "error";
  }
  setTimeout(refresh, 2000);
}
$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("token").value);
  $("token").value = "";
  refresh();
});
refresh();
</script>
</body>
</html>
)RGPU";
  return page;
}

}  // namespace rgpu::server
