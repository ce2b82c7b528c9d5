#include "server/daemon/daemon.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/tls.h"
#include "server/accounting/accounting_log.h"
#include "server/daemon/backend_factory.h"
#include "server/config/config_snapshot.h"
#include "server/pool/fd_passing.h"
#include "server/cuda/nvml.h"
#include "server/pool/launch_gate.h"
#include "server/daemon/metrics.h"
#include "server/daemon/pool_membership.h"
#include "server/pool/pool_service.h"
#include "server/daemon/preauth_guard.h"
#include "server/daemon/sandbox.h"
#include "server/daemon/status_page.h"
#include "server/daemon/systemd.h"
#include "server/session/session.h"

namespace rgpu::server {
std::string resumePreamble(const std::string& resume_id) {
  return std::string(kResumeMagic, sizeof kResumeMagic) + resume_id;
}

namespace {
// The worker's resume id: the first message the daemon sent on the handoff
// socket (it is there before the worker starts). "" when none: no resume.
std::string readResumeId(int handoff_fd) {
  if (handoff_fd < 0) return "";
  pollfd p{handoff_fd, POLLIN, 0};
  if (::poll(&p, 1, 5000) != 1) return "";
  std::string id(kResumeIdBytes, '\0');
  ssize_t n = ::recv(handoff_fd, id.data(), id.size(), MSG_DONTWAIT);
  return n == static_cast<ssize_t>(id.size()) ? id : "";
}

// SIGTERM in a worker: until its session runs, shutting the client socket
// down ends the handshake; then a thread tells the session to stop (the client
// gets a goodbye, so it does not try to resume), and the worker tears down in
// order and exits 0.
// Longest a worker's teardown may take once its session ended.
constexpr auto kTeardownLimit = std::chrono::seconds(10);
volatile sig_atomic_t g_worker_fd = -1;
volatile sig_atomic_t g_session_running = 0;
int g_term_fd = -1;  // eventfd the handler writes
void onWorkerTerm(int) {
  uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(g_term_fd, &one, sizeof one);
  if (!g_session_running && g_worker_fd >= 0) ::shutdown(g_worker_fd, SHUT_RDWR);
}
}  // namespace

// How a worker ended, as waitpid told (the accounting log's reason when it said none).
static std::string describeExit(int status) {
  return WIFSIGNALED(status) ? "worker killed by signal " + std::to_string(WTERMSIG(status))
                             : "worker exited with " + std::to_string(WEXITSTATUS(status));
}

int runWorker(const ServerConfig& cfg, common::TlsOptions& tls, int fd, uint64_t session_id, int control_fd,
              int handoff_fd, int gate_policy_fd, int uid, int gid) {
  // The daemon confined us before exec (sandbox.h); the user comes before
  // the first byte from the client.
  if (uid >= 0 && !dropPrivileges(static_cast<uid_t>(uid), static_cast<gid_t>(gid))) {
    RGPU_LOG_ERROR("session {}: cannot switch to uid {}: {}", session_id, uid, std::strerror(errno));
    ::close(fd);
    return 126;
  }
  markNotDumpable();
  std::vector<uint64_t> device_memory;
  for (const auto& d : cfg.sim_devices) device_memory.push_back(d.memory);
  if (uint64_t as = workerAddressLimit(cfg.backend, device_memory, cfg.limits.max_interpreter_bytes,
                                       cfg.limits.max_staging_bytes)) {
    rlimit limit{as, as};
    if (::setrlimit(RLIMIT_AS, &limit) != 0)
      RGPU_LOG_WARN("session {}: cannot bound the worker's address space: {}", session_id, std::strerror(errno));
  }
  if (!restrictWorkerSyscalls()) {
    RGPU_LOG_ERROR("session {}: cannot install the worker's system call filter: {}", session_id, std::strerror(errno));
    ::close(fd);
    return 126;
  }
  g_worker_fd = fd;
  g_term_fd = eventfd(0, EFD_CLOEXEC);
  struct sigaction sa {};
  sa.sa_handler = onWorkerTerm;
  sigaction(SIGTERM, &sa, nullptr);
  // A worker outlives no daemon: its death is a SIGTERM here, which also ends
  // a wait for admission (a daemon gone before that fails the first request).
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  std::unique_ptr<common::TlsContext> ctx;
  if (cfg.insecure_plaintext) {
    ctx = common::TlsContext::makePlaintext(true);
  } else {
    auto c = common::TlsContext::makeServer(tls);
    if (!c) {
      RGPU_LOG_ERROR("worker: {}", c.status().message());
      ::close(fd);
      return 1;
    }
    ctx = std::move(*c);
  }
  common::wipeSecret(tls.key_pem);
  auto conn = common::TlsConnection::accept(*ctx, fd, std::chrono::milliseconds(cfg.handshake_timeout_ms));
  // The one full handshake is over: the server's private key leaves this
  // process before any rgpu code reads a byte of the client's (tls.h). A
  // resuming client proves itself by the session's PSK instead.
  ctx->forgetPrivateKey();
  if (!conn) {
    RGPU_LOG_WARN("session {}: {}", session_id, conn.status().message());
    return 1;
  }
  // The pool manager lives in the daemon; a worker started by hand gets a private one.
  std::unique_ptr<PoolLink> pool;
  if (control_fd >= 0) {
    pool = std::make_unique<ControlSocketLink>(control_fd, gate_policy_fd, std::chrono::seconds(30), g_term_fd);
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
        return makeBackend(cfg, p.devices, p.span_index);
      },
      *pool, session_id, ResumeSource{handoff_fd, ctx.get(), readResumeId(handoff_fd)});
  std::atomic<bool> done{false};
  std::thread terminator([&] {
    pollfd p{g_term_fd, POLLIN, 0};
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    if (!done.load()) session.stop("rgpu-server is shutting down");
  });
  g_session_running = 1;
  Status s = session.run();
  done.store(true);
  uint64_t one = 1;
  [[maybe_unused]] auto w = ::write(g_term_fd, &one, sizeof one);
  terminator.join();
  if (session.backendWedged()) {
    // A kernel the GPU cannot stop: tearing the backend down would wait for
    // it. Exiting ends it (the driver frees the context); the daemon reaps us
    // and returns the session's memory and quota to the pool.
    RGPU_LOG_WARN("session {}: exiting without teardown to end a kernel that does not finish", session_id);
    common::logger().flush();
    std::_Exit(3);
  }
  // Teardown stops the backend's threads; should anything still hang there,
  // the worker exits anyway rather than hold its memory and quota for ever.
  std::thread([session_id] {
    std::this_thread::sleep_for(kTeardownLimit);
    RGPU_LOG_ERROR("session {}: teardown did not finish within {} s: exiting", session_id,
                   std::chrono::duration_cast<std::chrono::seconds>(kTeardownLimit).count());
    common::logger().flush();
    std::_Exit(4);
  }).detach();
  return s ? 0 : 2;
}

static int serve(ConfigSnapshot snapshot, const DaemonOptions& opts, const BackendChoice& choice);

int runDaemon(const ServerConfig& cfg, const DaemonOptions& opts) {
  // Room for every pre-auth connection the caps allow and every session's
  // sockets: the soft descriptor limit goes up to the hard one (workers
  // inherit it, exec resets nothing).
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 1u << 20);
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // Fail at start, not per connection, when the TLS material is wrong.
  auto snap = ConfigSnapshot::take(opts.config_path, cfg);
  if (!snap) {
    RGPU_LOG_ERROR("{}", snap.status().message());
    return 1;
  }
  snap->config = cfg;  // with the command line's overrides
  if (cfg.insecure_plaintext) {
    auto hp = common::parseHostPort(cfg.listen);
    if (!hp || !common::isLoopbackHost(hp->first)) {
      RGPU_LOG_ERROR("insecure_plaintext is only allowed on a loopback listen address, not '{}'", cfg.listen);
      return 1;
    }
    RGPU_LOG_WARN("insecure_plaintext: no TLS on {} (loopback only); clients authenticate by token", cfg.listen);
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
  return serve(std::move(*snap), run_opts, *chosen);
}

static int serve(ConfigSnapshot snapshot, const DaemonOptions& opts, const BackendChoice& choice) {
  // `cfg` is the configuration the daemon started with (what a reload may not
  // change); `snapshot` the last good one, which new workers get.
  const ServerConfig cfg = snapshot.config;
  auto worker_identity = resolveWorkerUser(cfg.worker_user, cfg.worker_user_set);
  if (!worker_identity) {
    RGPU_LOG_ERROR("{}", worker_identity.status().message());
    return 1;
  }
  if (::geteuid() == 0 && !worker_identity->change)
    RGPU_LOG_WARN("workers run as root: create the user 'rgpu' (the default [security] worker_user) or name another "
                  "(docs/security.md), so that a tenant who breaks its worker does not hold root");
  for (const auto& path : secretsReadableBy(*worker_identity, {cfg.tls_key, opts.config_path}))
    RGPU_LOG_WARN("the worker user '{}' can read {}: a tenant who broke its worker could too (chmod 0600 it, owned "
                  "by the daemon's user; docs/security.md)",
                  worker_identity->name, path);
  int snapshot_fd = -1;
  if (auto fd = snapshot.toMemfd(); !fd) {
    RGPU_LOG_ERROR("{}", fd.status().message());
    return 1;
  } else {
    snapshot_fd = *fd;
  }
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
  std::map<uint64_t, int> handoffs;   // session id -> the daemon's end of its worker's resume socket
  std::map<std::string, uint64_t> resume_ids;  // a worker's random resume id -> its session id
  uint64_t next_session = 1;
  bool stopping = false;
  asio::steady_timer drain(io);  // the SIGTERM drain deadline

  auto gates = GateTableOwner::create();
  if (!gates) {
    RGPU_LOG_ERROR("launch gate: {}", gates.status().message());
    return 1;
  }
  PoolService service(io, pool, health, &*gates);
  // Connections that have not authenticated: capped, the oldest closed first.
  PreAuthGuard preauth({cfg.limits.max_unauthenticated, cfg.limits.max_unauthenticated_per_address});
  std::map<uint64_t, uint64_t> preauth_of;  // session id -> its worker's PreAuthGuard entry, until authenticated
  std::set<pid_t> evicted_workers;          // killed by the guard: their end is no surprise
  service.setAuthenticator([&snapshot](const ClientCredential& c) -> Result<std::string> {
    // As a worker does (Session::authenticate), from the daemon's own copy of
    // the users and the CA: a certificate that verifies and whose key the
    // client proved it holds on this very connection, or a token.
    std::string cn;
    if (!c.cert_pem.empty()) {
      auto v = common::verifiedCommonName(c.cert_pem, snapshot.tls.ca_pem);
      if (!v) return v.status();
      if (!common::clientKeyProofVerifies(c.cert_pem, c.binding, c.proof))
        return Status(err::kNotPermitted, "the client did not prove it holds the key of certificate '" + *v + "'");
      cn = *v;
    }
    std::string user = userFor(snapshot.config, cn, c.token);
    if (user.empty()) return Status(err::kNotPermitted, "the credential matches no user");
    return user;
  });
  // [accounting]: a line per admitted session, once its worker has exited.
  std::unique_ptr<AccountingLog> accounting;
  if (!cfg.accounting.path.empty()) {
    accounting = std::make_unique<AccountingLog>(cfg.accounting);
    RGPU_LOG_INFO("accounting: a line per ended session in {} (rotated past {}, {} kept)", cfg.accounting.path,
                  formatBytes(cfg.accounting.max_bytes), cfg.accounting.keep);
    service.onEnded([&](const SessionRecord& rec, const std::string& reason) {
      const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
      accounting->append(
          common::accountingLine(accountingRecord(rec, pool.devices(), cfg.cluster.name, reason, now)));
    });
  }
  service.onAuthenticated([&](uint64_t sid) {
    if (auto it = preauth_of.find(sid); it != preauth_of.end()) {
      preauth.forget(it->second);
      preauth_of.erase(it);
    }
  });
  std::unique_ptr<MetricsServer> metrics;
  if (!cfg.pool.metrics_listen.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string hostname = host;
    bool per_session = cfg.pool.metrics_labels == "sessions";
    const std::string member_name = cfg.cluster.enabled() ? cfg.cluster.name : "";
    auto m = MetricsServer::start(
        io, cfg.pool.metrics_listen,
        [&pool, &health, hostname, per_session, member_name] {
          return renderMetrics(pool.snapshot(PoolManager::Clock::now()), health(), hostname, per_session, member_name);
        },
        cfg.pool.metrics_token,
        cfg.pool.status_page == "off"
            ? MetricsServer::StatusJson()
            : [&pool, &health, &snapshot, hostname, member_name, backend](const std::string& bearer) -> Result<std::string> {
                // The users and their tokens as last reloaded; who is an admin as the pool's policy says.
                auto viewer = statusViewer(snapshot.config, bearer, [&pool](const std::string& u) { return pool.isAdmin(u); });
                if (!viewer) {
                  common::logLimited("status-401", "status page: " + viewer.status().message());
                  return viewer.status();
                }
                return statusJson(pool.snapshot(PoolManager::Clock::now()), health(), *viewer,
                                  {RGPU_VERSION, hostname, member_name, backend});
              });
    if (!m) {
      RGPU_LOG_ERROR("{}", m.status().message());
      return 1;
    }
    metrics = std::move(*m);
    RGPU_LOG_INFO("Prometheus metrics on http://{}:{}/metrics", common::parseHostPort(cfg.pool.metrics_listen)->first,
                  metrics->port());
    if (cfg.pool.status_page != "off")
      RGPU_LOG_INFO("status page on http://{}:{}/ ({})", common::parseHostPort(cfg.pool.metrics_listen)->first,
                    metrics->port(),
                    cfg.pool.status_page == "open" ? "open to anyone who reaches it"
                                                   : "for a user's token, or the metrics token");
  }
  // A member of a pool on etcd ([cluster]): registered on its own thread.
  std::unique_ptr<PoolMembership> membership;
  if (cfg.cluster.enabled()) {
    auto m = PoolMembership::join(cfg, port, choice.inventory, io, pool, service, health);
    if (!m) {
      RGPU_LOG_ERROR("[cluster]: {}", m.status().message());
      return 1;
    }
    membership = std::move(*m);
  }
  // Ready: tell whoever waits for the port (tests, scripts) only now.
  if (!opts.port_file.empty()) {
    std::string tmp = opts.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), opts.port_file.c_str());
  }
  notifySystemd("READY=1\nSTATUS=listening on " + hp->first + ":" + std::to_string(port) + ", backend " + backend +
                ", " + std::to_string(choice.inventory.size()) + " device(s)");
  asio::signal_set signals(io, SIGINT, SIGTERM, SIGCHLD);
  signals.add(SIGHUP);
  // A worker exited (or was killed): what the daemon kept for it goes, and
  // its memory and quota return to the pool now, even after a crash.
  auto reapWorker = [&](pid_t pid, int status) {
    auto it = workers.find(pid);
    uint64_t sid = it == workers.end() ? 0 : it->second;
    if (auto it = preauth_of.find(sid); it != preauth_of.end()) {
      preauth.forget(it->second);
      preauth_of.erase(it);
    }
    if (evicted_workers.erase(pid))
      RGPU_LOG_DEBUG("worker {} (session {}) closed before its client authenticated", pid, sid);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 126)
      RGPU_LOG_ERROR("worker {} (session {}) could not be confined (user, rlimits, seccomp) and did not start", pid, sid);
    else if (WIFSIGNALED(status) && !(stopping && WTERMSIG(status) == SIGTERM))
      RGPU_LOG_WARN("worker {} (session {}) killed by signal {}", pid, sid, WTERMSIG(status));
    else
      RGPU_LOG_DEBUG("worker {} (session {}) exited with {}", pid, sid, WEXITSTATUS(status));
    workers.erase(pid);
    if (auto h = handoffs.find(sid); h != handoffs.end()) {
      ::close(h->second);
      handoffs.erase(h);
    }
    std::erase_if(resume_ids, [sid](const auto& r) { return r.second == sid; });
    if (sid) service.detach(sid, describeExit(status));
  };
  std::function<void()> waitSignal = [&] {
    signals.async_wait([&](const asio::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        int status = 0;
        pid_t pid;
        while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) reapWorker(pid, status);
        if (stopping && workers.empty()) io.stop();
      } else if (sig == SIGHUP) {
        // Reload: users and policy, [pool], limits, TLS certificates and keys.
        // Running sessions keep their devices and their TLS connection.
        notifySystemd("RELOADING=1\nSTATUS=reloading " + opts.config_path);
        if (opts.config_path.empty()) {
          RGPU_LOG_WARN("SIGHUP: no config file to reload");
        } else if (auto next = ConfigSnapshot::take(opts.config_path, cfg); !next) {
          RGPU_LOG_ERROR("SIGHUP: not reloaded, new sessions keep the previous configuration: {}",
                         next.status().message());
        } else {
          if (opts.overrides) opts.overrides(next->config);
          std::string fixed = restartOnlyChanges(cfg, next->config);
          auto fd = fixed.empty() ? next->toMemfd() : Result<int>(Status(err::kInvalidValue, ""));
          if (!fixed.empty()) {
            RGPU_LOG_ERROR("SIGHUP: not reloaded: {} changed, which needs a restart of rgpu-server; new sessions keep "
                           "the previous configuration", fixed);
          } else if (!fd) {
            RGPU_LOG_ERROR("SIGHUP: not reloaded: {}", fd.status().message());
          } else {
            ::close(snapshot_fd);
            snapshot_fd = *fd;
            snapshot = std::move(*next);
            pool.setPolicy(snapshot.config.users, snapshot.config.pool);
            service.policyChanged();
            RGPU_LOG_INFO("SIGHUP: configuration reloaded from {} ({} user(s), TLS certificate {}); {} session(s) keep "
                          "running",
                          opts.config_path, snapshot.config.users.size(),
                          snapshot.config.insecure_plaintext ? "none (plaintext)" : snapshot.config.tls_cert,
                          workers.size());
          }
        }
        notifySystemd("READY=1\nSTATUS=listening on " + hp->first + ":" + std::to_string(port) + ", " +
                      std::to_string(workers.size()) + " session(s)");
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
          // Nobody can reconnect now: sessions waiting for a resume end.
          for (auto& [sid, fd] : handoffs) ::close(fd);
          handoffs.clear();
          resume_ids.clear();
          service.shutdown();
          if (membership) membership->draining();
          notifySystemd("STOPPING=1\nSTATUS=draining " + std::to_string(workers.size()) + " session(s)");
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

  // Starts a worker for the accepted socket `fd` (taking it). `guard_id`: its
  // PreAuthGuard entry, which from now on evicts by killing the worker.
  auto startWorker = [&](int fd, uint64_t guard_id) {
    uint64_t sid = next_session++;
    // The worker's line to the pool manager, and where resumed clients reach it.
    int ctl[2], hand[2];
    if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ctl) != 0) {
      RGPU_LOG_ERROR("cannot start a worker: socketpair: {}", std::strerror(errno));
      ::close(fd);
      return;
    }
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hand) != 0) {
      RGPU_LOG_ERROR("cannot start a worker: socketpair: {}", std::strerror(errno));
      ::close(fd);
      ::close(ctl[0]);
      ::close(ctl[1]);
      return;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      // Child: the client socket becomes fd 3, then control, handoff, the
      // config snapshot and the gate policy (read-only); everything else of
      // ours closes on exec (its own gate page comes at admission). Move them
      // out of the way first, so no dup2 overwrites another.
      int from[5] = {::fcntl(fd, F_DUPFD_CLOEXEC, 10), ::fcntl(ctl[1], F_DUPFD_CLOEXEC, 10),
                     ::fcntl(hand[1], F_DUPFD_CLOEXEC, 10), ::fcntl(snapshot_fd, F_DUPFD_CLOEXEC, 10),
                     ::fcntl(gates->policyFd(), F_DUPFD_CLOEXEC, 10)};
      for (int i = 0; i < 5; ++i) ::dup2(from[i], 3 + i);
      // Confined before exec: the worker never runs unconfined (sandbox.h).
      if (!confineWorker()) _exit(126);
      std::vector<std::string> args = {"rgpu-server", "--worker", "--fd", "3", "--control-fd", "4",
                                       "--handoff-fd", "5", "--snapshot-fd", "6", "--gate-policy-fd", "7",
                                       "--session-id", std::to_string(sid)};
      if (worker_identity->change)
        args.insert(args.end(), {"--worker-uid", std::to_string(worker_identity->uid), "--worker-gid",
                                 std::to_string(worker_identity->gid)});
      args.insert(args.end(), opts.worker_args.begin(), opts.worker_args.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    ::close(fd);
    ::close(ctl[1]);
    ::close(hand[1]);
    if (pid < 0) {
      RGPU_LOG_ERROR("cannot start a worker: {}", std::strerror(errno));
      ::close(ctl[0]);
      ::close(hand[0]);
      preauth.forget(guard_id);
      return;
    }
    service.attach(sid, ctl[0]);
    workers[pid] = sid;
    preauth_of[sid] = guard_id;
    preauth.rebind(guard_id, [pid, sid, &evicted_workers] {
      common::logLimited("preauth-evict", "session " + std::to_string(sid) +
                                              ": closed before authenticating, to make room for newer connections "
                                              "(max_unauthenticated)");
      evicted_workers.insert(pid);
      ::kill(pid, SIGKILL);
    });
    handoffs[sid] = hand[0];
    // The session's resume id: the worker's first message on its handoff socket.
    std::string id(kResumeIdBytes, '\0');
    RAND_bytes(reinterpret_cast<unsigned char*>(id.data()), static_cast<int>(id.size()));
    if (::send(hand[0], id.data(), id.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(id.size())) resume_ids[id] = sid;
    RGPU_LOG_DEBUG("session {}: worker {}", sid, pid);
  };

  // A new connection either starts a session (TLS or, insecure, a frame) or
  // resumes one: only the first bytes are looked at, within the handshake
  // timeout (the timer closes a connection that sends nothing).
  struct Arrival {
    asio::ip::tcp::socket sock;
    asio::steady_timer timer;
    std::string peer;
    uint64_t guard_id = 0;  // its PreAuthGuard entry
  };
  std::function<void(std::shared_ptr<Arrival>)> route = [&](std::shared_ptr<Arrival> a) {
    a->sock.async_wait(asio::socket_base::wait_read, [&, a](const asio::error_code& ec) {
      if (ec || stopping) return preauth.forget(a->guard_id);  // timed out or evicted, or the daemon is draining
      int fd = a->sock.native_handle();
      char head[kResumePreambleBytes];
      ssize_t n = ::recv(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return route(a);
      a->timer.cancel();
      if (n <= 0) return preauth.forget(a->guard_id);  // closed before saying anything: the socket goes with `a`
      if (head[0] != kResumeMagic[0]) return startWorker(a->sock.release(), a->guard_id);
      if (std::memcmp(head, kResumeMagic, std::min<size_t>(static_cast<size_t>(n), sizeof kResumeMagic)) != 0) {
        common::logLimited("preamble", "connection from " + a->peer + ": neither TLS nor an rgpu resume preamble; closed");
        return preauth.forget(a->guard_id);
      }
      if (static_cast<size_t>(n) < sizeof head) {  // the rest is on its way
        a->timer.expires_after(std::chrono::milliseconds(cfg.handshake_timeout_ms));
        a->timer.async_wait([a](const asio::error_code& e) {
          if (e) return;
          asio::error_code ignored;
          a->sock.close(ignored);
        });
        return route(a);
      }
      (void)::recv(fd, head, sizeof head, 0);
      auto id = resume_ids.find(std::string(head + sizeof kResumeMagic, kResumeIdBytes));
      uint64_t sid = id == resume_ids.end() ? 0 : id->second;
      auto h = handoffs.find(sid);
      if (h != handoffs.end() && sendFd(h->second, fd)) {
        RGPU_LOG_INFO("session {}: client reconnects from {}; handed to its worker", sid, a->peer);
        return preauth.forget(a->guard_id);  // the worker has its own copy (and its own cap); ours closes with `a`
      }
      // No such session (any more): a fresh worker tells the client so.
      common::logLimited("resume-unknown", "connection from " + a->peer + " asks to resume a session that is not running");
      startWorker(a->sock.release(), a->guard_id);
    });
  };

  asio::steady_timer accept_backoff(io);
  std::function<void()> acceptNext = [&] {
    acceptor.async_accept([&](const asio::error_code& ec, asio::ip::tcp::socket sock) {
      if (ec) {
        if (stopping) return;
        if (ec == asio::error::no_descriptors || ec.value() == ENFILE || ec == asio::error::no_buffer_space) {
          // Out of descriptors: do not spin on accept. The oldest
          // unauthenticated connection gives one back; try again shortly.
          common::logLimited("accept-fds", "accept: " + ec.message() + "; closing the oldest unauthenticated "
                                               "connection and pausing accept for 50 ms");
          preauth.evictOldest();
          accept_backoff.expires_after(std::chrono::milliseconds(50));
          accept_backoff.async_wait([&](const asio::error_code& te) {
            if (!te && !stopping) acceptNext();
          });
          return;
        }
        common::logLimited("accept", "accept: " + ec.message());
        acceptNext();
        return;
      }
      asio::error_code e;
      auto ep = sock.remote_endpoint(e);
      std::string address = e ? std::string("?") : ep.address().to_string();
      std::string peer = e ? std::string("?") : address + ":" + std::to_string(ep.port());
      auto a = std::make_shared<Arrival>(Arrival{std::move(sock), asio::steady_timer(io), std::move(peer)});
      a->guard_id = preauth.admit(address, [w = std::weak_ptr<Arrival>(a)] {
        auto victim = w.lock();
        if (!victim) return;
        common::logLimited("preauth-evict-socket", "connection from " + victim->peer +
                                                       ": closed before saying anything, to make room for newer "
                                                       "connections (max_unauthenticated)");
        victim->timer.cancel();
        asio::error_code ignored;
        victim->sock.close(ignored);
      });
      a->timer.expires_after(std::chrono::milliseconds(cfg.handshake_timeout_ms));
      a->timer.async_wait([a](const asio::error_code& te) {
        if (te) return;
        common::logLimited("silent", "connection from " + a->peer + ": nothing received within the handshake timeout; closed");
        asio::error_code ignored;
        a->sock.close(ignored);  // (route's wait ends with an error and forgets it)
      });
      route(a);
      acceptNext();
    });
  };
  acceptNext();

  io.run();
  // Bounded drain: give workers a moment to finish, then stop them hard.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  // (Reaped as from SIGCHLD: each session still gets its accounting line.)
  while (!workers.empty() && std::chrono::steady_clock::now() < deadline) {
    int status;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) reapWorker(pid, status);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& [pid, sid] : workers) ::kill(pid, SIGKILL);
  for (auto [pid, sid] : std::map<pid_t, uint64_t>(workers)) {
    int status = 0;
    if (::waitpid(pid, &status, 0) == pid) reapWorker(pid, status);
  }
  RGPU_LOG_INFO("rgpu-server stopped");
  return 0;
}

}  // namespace rgpu::server
