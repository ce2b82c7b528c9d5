#include "server/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "common/log.h"
#include "common/tls.h"
#include "server/backend_factory.h"
#include "server/cuda/nvml.h"
#include "server/launch_gate.h"
#include "server/metrics.h"
#include "server/pool_service.h"
#include "server/session.h"

namespace rgpu::server {
namespace {

common::TlsOptions tlsOptions(const ServerConfig& cfg) {
  common::TlsOptions o;
  o.cert_file = cfg.tls_cert;
  o.key_file = cfg.tls_key;
  o.ca_file = cfg.tls_ca;
  o.require_client_cert = cfg.require_client_cert;
  return o;
}

}  // namespace

namespace {
// The session's socket, for the SIGTERM handler: shutting it down ends the
// session's read loop, so the worker tears down in order and exits 0.
volatile sig_atomic_t g_worker_fd = -1;
void onWorkerTerm(int) {
  if (g_worker_fd >= 0) ::shutdown(g_worker_fd, SHUT_RDWR);
}
}  // namespace

int runWorker(const ServerConfig& cfg, int fd, uint64_t session_id, int control_fd, int gate_fd) {
  g_worker_fd = fd;
  struct sigaction sa {};
  sa.sa_handler = onWorkerTerm;
  sigaction(SIGTERM, &sa, nullptr);
  auto ctx = common::TlsContext::makeServer(tlsOptions(cfg));
  if (!ctx) {
    RGPU_LOG_ERROR("worker: {}", ctx.status().message());
    ::close(fd);
    return 1;
  }
  auto conn = common::TlsConnection::accept(**ctx, fd, std::chrono::milliseconds(cfg.handshake_timeout_ms));
  if (!conn) {
    RGPU_LOG_WARN("session {}: {}", session_id, conn.status().message());
    return 1;
  }
  // The pool manager lives in the daemon; a worker started by hand gets a private one.
  std::unique_ptr<PoolLink> pool;
  if (control_fd >= 0) {
    pool = std::make_unique<ControlSocketLink>(control_fd, gate_fd, std::chrono::seconds(30));
  } else {
    pool = std::make_unique<LocalPool>(std::make_shared<PoolManager>(simInventory(cfg), cfg.users, cfg.pool),
                                       std::make_shared<std::mutex>(), session_id);
  }
  Session session(
      std::move(*conn), cfg,
      [&cfg, session_id](const Placement& p) {
        // Under MPS the MPS server enforces the policy too; it reads these at cuInit.
        if (cfg.backend != "sim" && mpsDaemonRunning())
          for (auto& [key, value] : mpsEnvironment(p)) {
            ::setenv(key.c_str(), value.c_str(), 1);
            RGPU_LOG_INFO("session {}: MPS {}={}", session_id, key, value);
          }
        return makeBackend(cfg, p.devices);
      },
      *pool, session_id);
  Status s = session.run();
  return s ? 0 : 2;
}

static int serve(const ServerConfig& cfg, const DaemonOptions& opts, const BackendChoice& choice);

int runDaemon(const ServerConfig& cfg, const DaemonOptions& opts) {
  // Fail at start, not per connection, when the TLS material is wrong.
  if (auto ctx = common::TlsContext::makeServer(tlsOptions(cfg)); !ctx) {
    RGPU_LOG_ERROR("{}", ctx.status().message());
    return 1;
  }
  // Resolve `auto` once, here, without initialising CUDA in this process;
  // workers are told the outcome.
  auto chosen = chooseBackend(cfg, "/proc/self/exe", opts.config_path);
  if (!chosen) {
    RGPU_LOG_ERROR("{}", chosen.status().message());
    return 1;
  }
  DaemonOptions run_opts = opts;
  run_opts.worker_args.insert(run_opts.worker_args.end(), {"--backend", chosen->backend});
  return serve(cfg, run_opts, *chosen);
}

static int serve(const ServerConfig& cfg, const DaemonOptions& opts, const BackendChoice& choice) {
  const std::string& backend = choice.backend;
  // Health (utilisation, temperature, power) from NVML, matched to the pool's devices by UUID.
  std::unique_ptr<cuda::Nvml> nvml;
  if (backend == "cuda") {
    auto n = cuda::Nvml::load(cfg.nvml_library);
    auto gpus = n ? (*n)->sample() : Result<std::vector<cuda::GpuHealth>>(n.status());
    if (!gpus) RGPU_LOG_INFO("GPU health unavailable: {}", gpus.status().message());
    else
      for (auto& g : *gpus) {
        std::string line = cuda::formatGpus({g});
        RGPU_LOG_INFO("gpu {}", line.substr(0, line.size() - 1));
      }
    if (n) nvml = std::move(*n);
  }
  PoolService::HealthFn health = [&]() {
    std::vector<DeviceHealth> out(choice.inventory.size());
    if (!nvml) return out;
    auto gpus = nvml->sample();
    if (!gpus) return out;
    for (size_t i = 0; i < choice.inventory.size(); ++i)
      for (auto& g : *gpus)
        if (g.uuid == choice.inventory[i].uuid) out[i] = {g.utilization_gpu, g.temperature_c, g.power_mw};
    return out;
  };
  PoolManager pool(choice.inventory, cfg.users, cfg.pool);
  for (size_t i = 0; i < choice.inventory.size(); ++i)
    RGPU_LOG_INFO("pool device {}: {} ({}), {} MiB, compute capability {}.{}", i, choice.inventory[i].name,
                  choice.inventory[i].uuid, choice.inventory[i].total >> 20, choice.inventory[i].cc / 10,
                  choice.inventory[i].cc % 10);
  auto hp = common::parseHostPort(cfg.listen);
  if (!hp) {
    RGPU_LOG_ERROR("listen: {}", hp.status().message());
    return 1;
  }
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io);
  try {
    asio::ip::tcp::resolver resolver(io);
    auto ep = *resolver.resolve(hp->first, std::to_string(hp->second)).begin();
    acceptor.open(ep.endpoint().protocol());
    acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
    acceptor.bind(ep.endpoint());
    acceptor.listen(128);
  } catch (const std::exception& e) {
    RGPU_LOG_ERROR("cannot listen on {}: {}", cfg.listen, e.what());
    return 1;
  }
  uint16_t port = acceptor.local_endpoint().port();
  RGPU_LOG_INFO("rgpu-server {} listening on {}:{} (backend {}, {} user(s), config {})", RGPU_VERSION, hp->first, port,
                backend, cfg.users.size(), cfg.source.empty() ? "(defaults)" : cfg.source);

  std::map<pid_t, uint64_t> workers;  // pid -> session id
  uint64_t next_session = 1;
  bool stopping = false;
  asio::steady_timer drain(io);  // the SIGTERM drain deadline

  auto gates = GateTableOwner::create();
  if (!gates) {
    RGPU_LOG_ERROR("launch gate: {}", gates.status().message());
    return 1;
  }
  PoolService service(io, pool, health, &*gates);
  std::unique_ptr<MetricsServer> metrics;
  if (!cfg.pool.metrics_listen.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string hostname = host;
    auto m = MetricsServer::start(io, cfg.pool.metrics_listen, [&pool, &health, hostname] {
      return renderMetrics(pool.snapshot(PoolManager::Clock::now()), health(), hostname);
    });
    if (!m) {
      RGPU_LOG_ERROR("{}", m.status().message());
      return 1;
    }
    metrics = std::move(*m);
    RGPU_LOG_INFO("Prometheus metrics on http://{}:{}/metrics", common::parseHostPort(cfg.pool.metrics_listen)->first,
                  metrics->port());
  }
  // Ready: tell whoever waits for the port (tests, scripts) only now.
  if (!opts.port_file.empty()) {
    std::string tmp = opts.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), opts.port_file.c_str());
  }
  asio::signal_set signals(io, SIGINT, SIGTERM, SIGCHLD);
  signals.add(SIGHUP);
  std::function<void()> waitSignal = [&] {
    signals.async_wait([&](const asio::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        int status = 0;
        pid_t pid;
        while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
          auto it = workers.find(pid);
          uint64_t sid = it == workers.end() ? 0 : it->second;
          if (WIFSIGNALED(status) && !(stopping && WTERMSIG(status) == SIGTERM))
            RGPU_LOG_WARN("worker {} (session {}) killed by signal {}", pid, sid, WTERMSIG(status));
          else
            RGPU_LOG_DEBUG("worker {} (session {}) exited with {}", pid, sid, WEXITSTATUS(status));
          workers.erase(pid);
          // Its memory and quota return to the pool now, even after a crash.
          if (sid) service.detach(sid);
        }
        if (stopping && workers.empty()) io.stop();
      } else if (sig == SIGHUP) {
        // Policy reload: users, quotas, priorities, [pool]. Running sessions keep their devices.
        if (opts.config_path.empty()) {
          RGPU_LOG_WARN("SIGHUP: no config file to reload");
        } else if (auto c = loadServerConfig(opts.config_path); !c) {
          RGPU_LOG_ERROR("SIGHUP: policy not reloaded, keeping the old one: {}", c.status().message());
        } else {
          pool.setPolicy(c->users, c->pool);
          service.policyChanged();
          RGPU_LOG_INFO("SIGHUP: policy reloaded from {} ({} user(s)); {} session(s) keep running", opts.config_path,
                        c->users.size(), workers.size());
        }
      } else {
        if (stopping) {
          // A second signal: no more grace.
          RGPU_LOG_INFO("signal {} again: ending {} session(s) now", sig, workers.size());
          for (auto& [pid, sid] : workers) ::kill(pid, SIGTERM);
        } else {
          // Drain: no new sessions; running ones get until the deadline to finish.
          stopping = true;
          asio::error_code ignored;
          acceptor.close(ignored);
          service.shutdown();
          RGPU_LOG_INFO("signal {}: draining, no new sessions; {} session(s) running get {} ms to finish", sig,
                        workers.size(), cfg.pool.drain_timeout_ms);
          drain.expires_after(std::chrono::milliseconds(cfg.pool.drain_timeout_ms));
          drain.async_wait([&](const asio::error_code& e) {
            if (e) return;
            RGPU_LOG_INFO("drain deadline: ending {} session(s)", workers.size());
            for (auto& [pid, sid] : workers) ::kill(pid, SIGTERM);
            drain.expires_after(std::chrono::seconds(5));
            drain.async_wait([&](const asio::error_code& e2) {
              if (e2) return;
              for (auto& [pid, sid] : workers) ::kill(pid, SIGKILL);
              io.stop();
            });
          });
        }
        if (workers.empty()) io.stop();
      }
      waitSignal();
    });
  };
  waitSignal();

  std::function<void()> acceptNext = [&] {
    acceptor.async_accept([&](const asio::error_code& ec, asio::ip::tcp::socket sock) {
      if (ec) {
        if (!stopping) {
          RGPU_LOG_WARN("accept: {}", ec.message());
          acceptNext();
        }
        return;
      }
      int fd = sock.release();
      uint64_t sid = next_session++;
      // The worker's line to the pool manager.
      int ctl[2];
      if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ctl) != 0) {
        RGPU_LOG_ERROR("cannot start a worker: socketpair: {}", std::strerror(errno));
        ::close(fd);
        acceptNext();
        return;
      }
      pid_t pid = ::fork();
      if (pid == 0) {
        // Child: the client socket becomes fd 3, the control socket fd 4;
        // everything else of ours closes on exec. Move both out of the way
        // first, so neither dup2 overwrites the other.
        int client = ::fcntl(fd, F_DUPFD_CLOEXEC, 10), control = ::fcntl(ctl[1], F_DUPFD_CLOEXEC, 10),
            gate = ::fcntl(gates->fd(), F_DUPFD_CLOEXEC, 10);
        ::dup2(client, 3);
        ::dup2(control, 4);
        ::dup2(gate, 5);
        std::vector<std::string> args = {"rgpu-server", "--worker", "--fd", "3", "--control-fd", "4",
                                         "--gate-fd", "5", "--session-id", std::to_string(sid)};
        if (!opts.config_path.empty()) {
          args.push_back("--config");
          args.push_back(opts.config_path);
        }
        args.insert(args.end(), opts.worker_args.begin(), opts.worker_args.end());
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv("/proc/self/exe", argv.data());
        _exit(127);
      }
      ::close(fd);
      ::close(ctl[1]);
      if (pid < 0) {
        RGPU_LOG_ERROR("cannot start a worker: {}", std::strerror(errno));
        ::close(ctl[0]);
      } else {
        service.attach(sid, ctl[0]);
        workers[pid] = sid;
        RGPU_LOG_DEBUG("session {}: worker {}", sid, pid);
      }
      acceptNext();
    });
  };
  acceptNext();

  io.run();
  // Bounded drain: give workers a moment to finish, then stop them hard.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!workers.empty() && std::chrono::steady_clock::now() < deadline) {
    int status;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) workers.erase(pid);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& [pid, sid] : workers) ::kill(pid, SIGKILL);
  RGPU_LOG_INFO("rgpu-server stopped");
  return 0;
}

}  // namespace rgpu::server
