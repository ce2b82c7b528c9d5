// Prometheus metrics of the pool, served over plain HTTP by the daemon
// ([pool] metrics_listen). Device metrics carry DCGM-exporter names where they
// fit (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_FB_FREE,
// DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_POWER_USAGE); the rest are rgpu_* per
// device, user and session. FB_USED/FB_FREE count what rgpu sessions have
// allocated (exact), in MiB as DCGM does.
#pragma once

#include <asio.hpp>
#include <functional>
#include <memory>
#include <string>

#include "server/pool/pool_link.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

// The text exposition format (version 0.0.4). `per_session`: series per
// session, labelled with its user, client host and pid; otherwise only per
// device and pool-wide totals (no tenant names at all). `server`: a pool
// member's name, carried by every series as the label server="..." ("": none).
std::string renderMetrics(const PoolSnapshot& s, const std::vector<DeviceHealth>& health, const std::string& host,
                          bool per_session = true, const std::string& server = "");

// GET /metrics on `listen`; one short request per connection. With a
// `token`, a request without "Authorization: Bearer <token>" gets 401.
// With a `status` function it also serves the status page (status_page.h):
// `/` and `/status.json`.
class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  // /status.json for a request's bearer token ("" when it sent none): the
  // JSON, or an error — kNotPermitted answers 401, anything else 404.
  using StatusJson = std::function<Result<std::string>(const std::string& bearer)>;
  static Result<std::unique_ptr<MetricsServer>> start(asio::io_context& io, const std::string& listen, Render render,
                                                      std::string token = "", StatusJson status = nullptr);
  uint16_t port() const { return port_; }

 private:
  MetricsServer(asio::io_context& io, Render render, std::string token, StatusJson status)
      : acceptor_(io), render_(std::move(render)), token_(std::move(token)), status_(std::move(status)) {}
  void acceptNext();
  struct Response {
    std::string status = "200 OK", type = "text/plain", headers, body;
  };
  Response respond(const std::string& method, const std::string& path, const std::string& bearer) const;
  asio::ip::tcp::acceptor acceptor_;
  Render render_;
  std::string token_;
  StatusJson status_;
  uint16_t port_ = 0;
};

}  // namespace rgpu::server
