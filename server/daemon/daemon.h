// The rgpu-server daemon: listens, hands each accepted connection to a fresh
// worker process (exec'd; fds 3 client socket, 4 pool control, 5 launch gate,
// 6 resume handoff, 7 config snapshot, 8 launch gate policy, read-only), reaps workers, reloads on SIGHUP,
// drains on SIGINT/SIGTERM. It never initialises CUDA and never parses client
// bytes beyond a peek at the first ones: a connection that opens with the
// 24-byte resume preamble ("rgpu-rs2" + the session's 128-bit resume id,
// before TLS) goes to the worker still holding that session (SCM_RIGHTS over
// its handoff socket), or to a fresh worker that tells the client the session
// is gone. The resume id is random, drawn by the daemon for each worker and
// sent to it as the first message of its handoff socket: a peer cannot aim
// handshakes at a session it does not know the id of (session numbers are
// sequential and shown by rgpu-smi). A bad client can only take down its own
// worker.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tls.h"
#include "server/config/server_config.h"

namespace rgpu::server {

struct DaemonOptions {
  std::string config_path;
  std::string port_file;  // written with the bound port once listening
  std::vector<std::string> worker_args;  // extra arguments for each worker
  // Command-line overrides, applied to the config at start and at each reload.
  std::function<void(ServerConfig&)> overrides;
};

// The resume preamble a reconnecting client writes before TLS.
inline constexpr char kResumeMagic[8] = {'r', 'g', 'p', 'u', '-', 'r', 's', '2'};
inline constexpr size_t kResumeIdBytes = 16;
inline constexpr size_t kResumePreambleBytes = sizeof kResumeMagic + kResumeIdBytes;
std::string resumePreamble(const std::string& resume_id);

// Runs until SIGINT/SIGTERM. Returns the process exit code.
int runDaemon(const ServerConfig& cfg, const DaemonOptions& opts);

// Worker side: serves one session on `fd` and returns the exit code.
// `control_fd`: the socket to the daemon's pool manager (-1: a private pool).
// `gate_policy_fd`: the launch gate's policy table (priorities and weights,
// read-only; -1: none); the session's own gate page comes with admission.
// `handoff_fd`: where the daemon passes a resuming client's socket (-1: no resume).
// `tls`: the server's certificate and key; the key is wiped (here and in the
// TLS context) as soon as the client's handshake ran.
// `restore`: the session comes from a checkpoint the daemon hands over on
// `handoff_fd` (docs/migration.md), not from a client on `fd`.
int runWorker(const ServerConfig& cfg, common::TlsOptions& tls, int fd, uint64_t session_id,
              int control_fd = -1, int handoff_fd = -1, int gate_policy_fd = -1, int uid = -1,
              int gid = -1, bool restore = false);

}  // namespace rgpu::server
