// rgpu-server: the daemon (default), a session worker (--worker, started by the
// daemon), or a helper that writes development certificates.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include "common/dev_pki.h"
#include "common/log.h"
#include "common/config.h"
#include "server/daemon/backend_factory.h"
#include "server/daemon/config_check.h"
#include "server/daemon/systemd.h"
#include "server/config/config_snapshot.h"
#include "server/cuda/nvml.h"
#include "server/daemon/daemon.h"

int main(int argc, char** argv) {
  CLI::App app{"rgpu-server: serves CUDA calls from rgpu clients on this host's GPUs (or simulated ones)"};
  std::string config_path, listen, backend, port_file, certs_dir;
  std::vector<std::string> cert_clients{"dev"};
  std::string log_level, cuda_driver;
  bool worker = false, probe_cuda = false, list_gpus = false, restore = false;
  int fd = -1, control_fd = -1, handoff_fd = -1, snapshot_fd = -1, gate_policy_fd = -1;
  int worker_uid = -1, worker_gid = -1;
  uint64_t session_id = 0;
  app.add_option("-c,--config", config_path, "server.toml");
  app.add_option("--listen", listen, "override `listen` (host:port; port 0 picks a free one)");
  app.add_option("--backend", backend, "override `backend` (sim | cuda | auto)");
  app.add_option("--port-file", port_file, "write the bound port here once listening");
  app.add_option("--make-dev-certs", certs_dir, "write a development CA, server and client certificates to DIR and exit");
  app.add_option("--client-cert", cert_clients, "client certificate names for --make-dev-certs (default: dev)");
  app.add_option("--log-level", log_level, "override `log_level` (trace | debug | info | warn | error | off)");
  app.add_option("--cuda-driver", cuda_driver, "override [cuda] driver_library (default libcuda.so.1)");
  std::string check_config;
  app.add_option("--check-config", check_config,
                 "check a server.toml (every key, TLS files, users' devices, ...), list every problem found, print "
                 "what it would serve, and exit: 0 without errors, 1 with");
  app.add_flag("--probe-cuda", probe_cuda, "load the CUDA driver, list its GPUs and exit (what backend = \"auto\" runs)");
  app.add_flag("--list-gpus", list_gpus, "show this host's GPUs from NVML (name, UUID, memory, utilisation, temperature, power) and exit");
  app.add_flag("--worker", worker, "internal: serve one session on --fd")->group("");
  app.add_option("--fd", fd, "internal: socket of the session")->group("");
  app.add_flag("--restore", restore, "internal: the session comes from a checkpoint on --handoff-fd")->group("");
  app.add_option("--control-fd", control_fd, "internal: socket to the daemon's pool manager")->group("");
  app.add_option("--gate-policy-fd", gate_policy_fd, "internal: the launch gate's policy table (read-only)")->group("");
  app.add_option("--worker-uid", worker_uid, "internal: the user the worker runs as")->group("");
  app.add_option("--worker-gid", worker_gid, "internal: the group the worker runs as")->group("");
  app.add_option("--handoff-fd", handoff_fd, "internal: where the daemon passes resumed connections")->group("");
  app.add_option("--snapshot-fd", snapshot_fd, "internal: the configuration the daemon validated")->group("");
  app.add_option("--session-id", session_id, "internal: session id")->group("");
  CLI11_PARSE(app, argc, argv);

  if (!certs_dir.empty()) {
    rgpu::common::DevPkiOptions o;
    o.dir = certs_dir;
    o.clients = cert_clients;
    rgpu::Status s = rgpu::common::makeDevPki(o);
    if (!s) {
      std::fprintf(stderr, "rgpu-server: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("wrote development certificates to %s\n", certs_dir.c_str());
    return 0;
  }

  if (!check_config.empty()) {
    rgpu::common::initLogging("rgpu-server", "off");
    auto c = rgpu::server::checkServerConfig(check_config, std::chrono::system_clock::now());
    std::fputs(rgpu::server::formatConfigCheck(check_config, c).c_str(), stdout);
    return c.errors() ? 1 : 0;
  }

  rgpu::server::ServerConfig cfg;
  rgpu::common::TlsOptions worker_tls;
  // Before OpenSSL allocates anything: a worker keeps no freed copy of the key.
  if (worker && !rgpu::common::clearOpenSslMemoryOnFree())
    std::fprintf(stderr, "rgpu-server: OpenSSL allocated before the worker could make it clear freed memory\n");
  if (snapshot_fd >= 0) {
    // A worker: the daemon's validated configuration, never the files.
    auto snap = rgpu::server::ConfigSnapshot::fromFd(snapshot_fd);
    if (!snap) {
      std::fprintf(stderr, "rgpu-server: %s\n", snap.status().message().c_str());
      return 1;
    }
    ::close(snapshot_fd);
    cfg = std::move(snap->config);
    worker_tls = std::move(snap->tls);
  } else if (!config_path.empty()) {
    auto c = rgpu::server::loadServerConfig(config_path);
    if (!c) {
      std::fprintf(stderr, "rgpu-server: %s\n", c.status().message().c_str());
      return 1;
    }
    cfg = std::move(*c);
    worker_tls = rgpu::server::serverTlsOptions(cfg);
  } else {
    cfg.sim_devices.push_back({});
  }
  auto overrides = [=](rgpu::server::ServerConfig& c) {
    if (!listen.empty()) c.listen = listen;
    if (!backend.empty()) c.backend = backend;
    if (!log_level.empty()) c.log_level = log_level;
    if (!cuda_driver.empty()) c.cuda_driver_library = cuda_driver;
  };
  overrides(cfg);
  rgpu::common::initLogging(worker ? "rgpu-worker" : "rgpu-server", cfg.log_level);
  // Under systemd: journal entries with the component and the session as fields.
  if (rgpu::server::stderrIsJournal())
    rgpu::server::logToJournal(worker ? "rgpu-worker" : "rgpu-server", worker ? session_id : 0);
  if (!worker && !config_path.empty())
    if (auto text = rgpu::common::readTextFile(config_path))
      for (const auto& key : rgpu::server::unknownKeys(*text, config_path))
        RGPU_LOG_WARN("config {}: unknown key '{}' is ignored (rgpu-server --check-config lists every problem)",
                      config_path, key);
  if (probe_cuda) return rgpu::server::runCudaProbe(cfg);
  if (list_gpus) {
    auto nvml = rgpu::server::cuda::Nvml::load(cfg.nvml_library);
    auto gpus = nvml ? (*nvml)->sample() : rgpu::Result<std::vector<rgpu::server::cuda::GpuHealth>>(nvml.status());
    if (!gpus) {
      std::fprintf(stderr, "rgpu-server: %s\n", gpus.status().message().c_str());
      return 1;
    }
    std::fputs(rgpu::server::cuda::formatGpus(*gpus).c_str(), stdout);
    return 0;
  }

  std::signal(SIGPIPE, SIG_IGN);
  if (worker)
    return rgpu::server::runWorker(cfg, worker_tls, fd, session_id, control_fd, handoff_fd, gate_policy_fd,
                                   worker_uid, worker_gid, restore);
  rgpu::server::DaemonOptions opts;
  opts.config_path = config_path;
  opts.port_file = port_file;
  opts.overrides = overrides;
  if (!cuda_driver.empty()) opts.worker_args = {"--cuda-driver", cuda_driver};
  if (!log_level.empty()) opts.worker_args.insert(opts.worker_args.end(), {"--log-level", log_level});
  return rgpu::server::runDaemon(cfg, opts);
}
