// The status page: what the metrics listener ([pool] metrics_listen) serves
// besides /metrics.
//
// - `/` is one self-contained HTML page (its script and style inline, no
//   external asset: the Content-Security-Policy it is served with forbids any)
//   that shows the devices with utilisation and memory bars, the sessions and
//   the admission queue, and refreshes itself every 2 s from /status.json.
//   The page carries no data of its own, so anyone who reaches it may load it.
// - `/status.json` is the data: the pool's snapshot, as rgpu-smi shows it and
//   with rgpu-smi's visibility rule — a viewer sees every session when its
//   user is an admin, else only its own sessions (the queue length and the
//   devices are for everyone who may look at all).
//
// Who may look is `[pool] status_page`:
// - "users" (default): a request must carry "Authorization: Bearer <token>"
//   with a [[users]] token (the viewer is that user), or the metrics_token
//   (the viewer sees what /metrics shows: every session with metrics_labels =
//   "sessions", none with "aggregate"). Without one: 401.
// - "open": no token asked; every session is shown (as unauthenticated
//   metrics on loopback do). Refused off loopback, as metrics without a token are.
// - "off": neither path is served (404).
// The page asks for the token once (or takes it from its URL's fragment,
// `/#token=…`, which browsers never send to the server) and keeps it in the
// tab's sessionStorage. Every name shown comes from a client (user names,
// host names): the page inserts text only (textContent), never markup.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/config/server_config.h"
#include "server/pool/pool_link.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

// Who is looking at /status.json.
struct StatusViewer {
  std::string user;       // "" when the viewer is not a user (metrics token, open page)
  bool all = false;       // sees every session (an admin, the open page, the metrics token with session labels)
  bool sessions = true;   // false: no session at all (the metrics token with aggregate labels)
};

// The viewer a request's bearer token ("" none) makes under `cfg`, or
// kNotPermitted (401). `is_admin` answers for a user (the pool's policy).
Result<StatusViewer> statusViewer(const ServerConfig& cfg, const std::string& bearer,
                                  const std::function<bool(const std::string&)>& is_admin);

// What the server says about itself at the top of the page.
struct StatusServerInfo {
  std::string version, host, member, backend;
};

// /status.json for `viewer`: {"server", "viewer", "devices", "sessions", "queued", "hidden"}.
std::string statusJson(const PoolSnapshot& s, const std::vector<DeviceHealth>& health, const StatusViewer& viewer,
                       const StatusServerInfo& server);

// The page served at `/`.
const std::string& statusPageHtml();

// The Content-Security-Policy the page is served with: its own inline script
// and style, requests to its own origin, nothing else.
inline constexpr const char* kStatusPagePolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:";

}  // namespace rgpu::server
