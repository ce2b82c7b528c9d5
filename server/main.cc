// rgpu-server: the daemon (default), a session worker (--worker, started by the
// daemon), or a helper that writes development certificates.
#include <CLI/CLI.hpp>
#include <csignal>

#include "common/dev_pki.h"
#include "common/log.h"
#include "server/backend_factory.h"
#include "server/cuda/nvml.h"
#include "server/daemon.h"

int main(int argc, char** argv) {
  CLI::App app{"rgpu-server: serves CUDA calls from rgpu clients on this host's GPUs (or simulated ones)"};
  std::string config_path, listen, backend, port_file, certs_dir;
  std::vector<std::string> cert_clients{"dev"};
  std::string log_level, cuda_driver;
  bool worker = false, probe_cuda = false, list_gpus = false;
  int fd = -1, control_fd = -1, gate_fd = -1;
  uint64_t session_id = 0;
  app.add_option("-c,--config", config_path, "server.toml");
  app.add_option("--listen", listen, "override `listen` (host:port; port 0 picks a free one)");
  app.add_option("--backend", backend, "override `backend` (sim | cuda | auto)");
  app.add_option("--port-file", port_file, "write the bound port here once listening");
  app.add_option("--make-dev-certs", certs_dir, "write a development CA, server and client certificates to DIR and exit");
  app.add_option("--client-cert", cert_clients, "client certificate names for --make-dev-certs (default: dev)");
  app.add_option("--log-level", log_level, "override `log_level` (trace | debug | info | warn | error | off)");
  app.add_option("--cuda-driver", cuda_driver, "override [cuda] driver_library (default libcuda.so.1)");
  app.add_flag("--probe-cuda", probe_cuda, "load the CUDA driver, list its GPUs and exit (what backend = \"auto\" runs)");
  app.add_flag("--list-gpus", list_gpus, "show this host's GPUs from NVML (name, UUID, memory, utilisation, temperature, power) and exit");
  app.add_flag("--worker", worker, "internal: serve one session on --fd")->group("");
  app.add_option("--fd", fd, "internal: socket of the session")->group("");
  app.add_option("--control-fd", control_fd, "internal: socket to the daemon's pool manager")->group("");
  app.add_option("--gate-fd", gate_fd, "internal: the daemon's launch gate table")->group("");
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

  rgpu::server::ServerConfig cfg;
  if (!config_path.empty()) {
    auto c = rgpu::server::loadServerConfig(config_path);
    if (!c) {
      std::fprintf(stderr, "rgpu-server: %s\n", c.status().message().c_str());
      return 1;
    }
    cfg = std::move(*c);
  } else {
    cfg.sim_devices.push_back({});
  }
  if (!listen.empty()) cfg.listen = listen;
  if (!backend.empty()) cfg.backend = backend;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!cuda_driver.empty()) cfg.cuda_driver_library = cuda_driver;
  rgpu::common::initLogging(worker ? "rgpu-worker" : "rgpu-server", cfg.log_level);
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
  if (worker) return rgpu::server::runWorker(cfg, fd, session_id, control_fd, gate_fd);
  rgpu::server::DaemonOptions opts;
  opts.config_path = config_path;
  opts.port_file = port_file;
  if (!cuda_driver.empty()) opts.worker_args = {"--cuda-driver", cuda_driver};
  return rgpu::server::runDaemon(cfg, opts);
}
