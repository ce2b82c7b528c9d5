// The rgpu-server daemon: listens, hands each accepted connection to a fresh
// worker process (exec'd, socket on fd 3), reaps workers, shuts down cleanly on
// SIGINT/SIGTERM. It never initialises CUDA and never parses client bytes: a
// bad client can only take down its own worker.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "server/server_config.h"

namespace rgpu::server {

struct DaemonOptions {
  std::string config_path;
  std::string port_file;  // written with the bound port once listening
  std::vector<std::string> worker_args;  // extra arguments for each worker
};

// Runs until SIGINT/SIGTERM. Returns the process exit code.
int runDaemon(const ServerConfig& cfg, const DaemonOptions& opts);

// Worker side: serves one session on `fd` and returns the exit code.
// `control_fd`: the socket to the daemon's pool manager (-1: a private pool).
// `gate_fd`: the launch gate table (priorities, weights; -1: none).
int runWorker(const ServerConfig& cfg, int fd, uint64_t session_id, int control_fd = -1, int gate_fd = -1);

}  // namespace rgpu::server
