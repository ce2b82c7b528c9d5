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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <deque>
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
#include "server/daemon/member_move.h"
#include "server/daemon/session_move.h"
#include "server/daemon/status_page.h"
#include "server/daemon/systemd.h"
#include "server/session/session.h"

namespace rgpu::server {
std::string resumePreamble(const std::string& resume_id) {
  return std::string(kResumeMagic, sizeof kResumeMagic) + resume_id;
}


// How a worker ended, as waitpid told (the accounting log's reason when it said none).
static std::string describeExit(int status) {
  return WIFSIGNALED(status) ? "worker killed by signal " + std::to_string(WTERMSIG(status))
                             : "worker exited with " + std::to_string(WEXITSTATUS(status));
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
  // Moves (session_move.h): workers whose session moved to another (they
  // exit on their own), workers started to restore one, and the client
  // connections held while a session moves.
  std::set<pid_t> superseded, restorers;
  std::map<uint64_t, std::vector<int>> held;
  // Sessions moved in from another member: the id their client knows.
  std::map<uint64_t, uint64_t> client_ids;
  uint64_t next_session = 1;
  bool stopping = false;
  bool migrating = false;  // SIGTERM with [pool] drain = "migrate": sessions move away first
  asio::steady_timer drain(io);  // the SIGTERM drain deadline
  std::function<void()> startMigrating;  // [pool] drain = "migrate" (set once the mover exists)

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
  // Signals are caught before anyone is told the daemon is ready: a SIGHUP
  // sent on READY=1 must reload, not kill it with the default action.
  asio::signal_set signals(io, SIGINT, SIGTERM, SIGCHLD);
  signals.add(SIGHUP);
  // Ready: tell whoever waits for the port (tests, scripts) only now.
  if (!opts.port_file.empty()) {
    std::string tmp = opts.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), opts.port_file.c_str());
  }
  notifySystemd("READY=1\nSTATUS=listening on " + hp->first + ":" + std::to_string(port) + ", backend " + backend +
                ", " + std::to_string(choice.inventory.size()) + " device(s)");
  // A worker exited (or was killed): what the daemon kept for it goes, and
  // its memory and quota return to the pool now, even after a crash.
  auto reapWorker = [&](pid_t pid, int status) {
    // A worker whose session moved on, or one started to take a session up
    // that did not: the session is not its to end.
    if (superseded.erase(pid) || restorers.erase(pid)) {
      RGPU_LOG_DEBUG("worker {} ({}) exited", pid, describeExit(status));
      workers.erase(pid);
      return;
    }
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
          // Drain: no new sessions; running ones get until the deadline to
          // finish. With [pool] drain = "migrate" they move to other members
          // first, one at a time: clients still reach this daemon to be sent
          // on, so it keeps listening (new sessions are closed) and routing
          // resumes until every worker ended.
          stopping = true;
          migrating = cfg.pool.drain == "migrate" && startMigrating;
          if (!migrating) {
            asio::error_code ignored;
            acceptor.close(ignored);
            // Nobody can reconnect now: sessions waiting for a resume end.
            for (auto& [sid, fd] : handoffs) ::close(fd);
            handoffs.clear();
            resume_ids.clear();
          }
          service.shutdown();
          if (membership) membership->draining();
          const std::string moving = migrating ? ", moving them to other members first" : "";
          notifySystemd("STOPPING=1\nSTATUS=draining " + std::to_string(workers.size()) + " session(s)" + moving);
          RGPU_LOG_INFO("signal {}: draining, no new sessions; {} session(s) running get {} ms to finish{}", sig,
                        workers.size(), cfg.pool.drain_timeout_ms, moving);
          if (migrating) startMigrating();
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

  // Forks and execs a worker for session `sid`: on the client socket `fd`
  // (taken; -1 for a worker that restores a moved session, --restore). The
  // daemon's ends of its control and handoff sockets come back.
  auto spawnWorker = [&](int fd, uint64_t sid, bool restore) -> Result<SessionMover::Restorer> {
    int ctl[2], hand[2];
    if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ctl) != 0) {
      if (fd >= 0) ::close(fd);
      return Status(err::kUnknown, std::string("socketpair: ") + std::strerror(errno));
    }
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hand) != 0) {
      if (fd >= 0) ::close(fd);
      ::close(ctl[0]);
      ::close(ctl[1]);
      return Status(err::kUnknown, std::string("socketpair: ") + std::strerror(errno));
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      // Child: the client socket becomes fd 3, then control, handoff, the
      // config snapshot and the gate policy (read-only); everything else of
      // ours closes on exec (its own gate page comes at admission). Move them
      // out of the way first, so no dup2 overwrites another.
      int client = fd >= 0 ? fd : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      int from[5] = {::fcntl(client, F_DUPFD_CLOEXEC, 10), ::fcntl(ctl[1], F_DUPFD_CLOEXEC, 10),
                     ::fcntl(hand[1], F_DUPFD_CLOEXEC, 10), ::fcntl(snapshot_fd, F_DUPFD_CLOEXEC, 10),
                     ::fcntl(gates->policyFd(), F_DUPFD_CLOEXEC, 10)};
      for (int i = 0; i < 5; ++i) ::dup2(from[i], 3 + i);
      // Confined before exec: the worker never runs unconfined (sandbox.h).
      if (!confineWorker()) _exit(126);
      std::vector<std::string> args = {"rgpu-server", "--worker", "--fd", "3", "--control-fd", "4",
                                       "--handoff-fd", "5", "--snapshot-fd", "6", "--gate-policy-fd", "7",
                                       "--session-id", std::to_string(sid)};
      if (restore) args.push_back("--restore");
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
    if (fd >= 0) ::close(fd);
    ::close(ctl[1]);
    ::close(hand[1]);
    if (pid < 0) {
      ::close(ctl[0]);
      ::close(hand[0]);
      return Status(err::kUnknown, std::strerror(errno));
    }
    return SessionMover::Restorer{pid, hand[0], ctl[0]};
  };

  // Starts a worker for the accepted socket `fd` (taking it). `guard_id`: its
  // PreAuthGuard entry, which from now on evicts by killing the worker.
  auto startWorker = [&](int fd, uint64_t guard_id) {
    uint64_t sid = next_session++;
    auto w = spawnWorker(fd, sid, false);
    if (!w) {
      RGPU_LOG_ERROR("cannot start a worker: {}", w.status().message());
      preauth.forget(guard_id);
      return;
    }
    const pid_t pid = w->pid;
    // The worker's line to the pool manager, and where resumed clients reach it.
    service.attach(sid, w->control);
    workers[pid] = sid;
    preauth_of[sid] = guard_id;
    preauth.rebind(guard_id, [pid, sid, &evicted_workers] {
      common::logLimited("preauth-evict", "session " + std::to_string(sid) +
                                              ": closed before authenticating, to make room for newer connections "
                                              "(max_unauthenticated)");
      evicted_workers.insert(pid);
      ::kill(pid, SIGKILL);
    });
    handoffs[sid] = w->handoff;
    // The session's resume id: the worker's first message on its handoff socket.
    std::string id(kResumeIdBytes, '\0');
    RAND_bytes(reinterpret_cast<unsigned char*>(id.data()), static_cast<int>(id.size()));
    if (::send(w->handoff, id.data(), id.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(id.size())) resume_ids[id] = sid;
    RGPU_LOG_DEBUG("session {}: worker {}", sid, pid);
  };

  // Moving sessions between workers ([checkpoint], session_move.h).
  std::unique_ptr<CheckpointKey> checkpoint_key;
  if (!cfg.checkpoint_key_file.empty()) {
    auto k = loadCheckpointKey(cfg.checkpoint_key_file);
    if (!k) {
      RGPU_LOG_ERROR("{}", k.status().message());
      return 1;
    }
    struct stat st {};
    if (::stat(cfg.checkpoint_dir.c_str(), &st) != 0 && ::mkdir(cfg.checkpoint_dir.c_str(), 0700) != 0) {
      RGPU_LOG_ERROR("[checkpoint] dir {}: {}", cfg.checkpoint_dir, std::strerror(errno));
      return 1;
    }
    checkpoint_key = std::make_unique<CheckpointKey>(*k);
    RGPU_LOG_INFO("sessions can be moved between workers (checkpoints in {})", cfg.checkpoint_dir);
  }
  SessionMover::Hooks move_hooks;
  move_hooks.current = [&](uint64_t sid, pid_t* pid, int* handoff) {
    auto h = handoffs.find(sid);
    if (h == handoffs.end()) return false;
    for (auto& [p, s] : workers)
      if (s == sid && !superseded.count(p)) {
        *pid = p;
        *handoff = h->second;
        return true;
      }
    return false;
  };
  move_hooks.resumable = [&](uint64_t sid) { return service.resumable(sid); };
  move_hooks.placement = [&](uint64_t sid) { return pool.placementOf(sid); };
  // A session's resume id ("": none), a worker started to restore session
  // `sid` whose clients' resumes name `id`, and one that must go.
  auto resumeIdOf = [&](uint64_t sid) {
    for (auto& [rid, s] : resume_ids)
      if (s == sid) return rid;
    return std::string();
  };
  auto startRestorer = [&](uint64_t sid, const std::string& id) -> Result<SessionMover::Restorer> {
    auto w = spawnWorker(-1, sid, true);
    if (!w) return w;
    restorers.insert(w->pid);
    (void)::send(w->handoff, id.data(), id.size(), MSG_NOSIGNAL);
    RGPU_LOG_INFO("session {}: worker {} restores it", sid, w->pid);
    return w;
  };
  auto dropRestorer = [](const SessionMover::Restorer& r) {
    ::kill(r.pid, SIGKILL);
    ::close(r.handoff);
    ::close(r.control);
  };
  move_hooks.start_restorer = [&](uint64_t sid) -> Result<SessionMover::Restorer> {
    std::string id = resumeIdOf(sid);
    if (id.empty()) return Status(err::kInvalidValue, "the session cannot be resumed, so it cannot move");
    return startRestorer(sid, id);
  };
  move_hooks.commit = [&](uint64_t sid, const SessionMover::Restorer& r, pid_t old_pid) {
    superseded.insert(old_pid);
    restorers.erase(r.pid);
    workers[r.pid] = sid;
    if (auto h = handoffs.find(sid); h != handoffs.end()) ::close(h->second);
    handoffs[sid] = r.handoff;
    service.replaceWorker(sid, r.control);
  };
  move_hooks.discard = [&](uint64_t, const SessionMover::Restorer& r) { dropRestorer(r); };
  move_hooks.release = [&](uint64_t sid) {
    auto it = held.find(sid);
    if (it == held.end()) return;
    auto h = handoffs.find(sid);
    for (int fd : it->second) {
      if (h == handoffs.end() || !sendFd(h->second, fd))
        RGPU_LOG_WARN("session {}: a client connection held during the move could not be handed on", sid);
      ::close(fd);
    }
    held.erase(it);
  };
  // Moves to other members of the pool (member_move.h).
  move_hooks.member_address = [&](const std::string& name) -> Result<std::string> {
    if (!membership)
      return Status(err::kNotSupported, "this server is not a member of a pool: its sessions move to new workers "
                                        "here only (no --to)");
    for (const auto& m : membership->view())
      if (m.name == name) {
        if (m.draining) return Status(err::kNotReady, "member '" + name + "' is draining");
        return m.address;
      }
    return Status(err::kInvalidValue, "no member '" + name + "' in the pool (rgpu-smi --pool lists them)");
  };
  move_hooks.offer = [&](uint64_t sid) -> Result<MoveOffer> {
    auto info = pool.moveInfo(sid);
    if (!info) return Status(err::kInvalidValue, "session " + std::to_string(sid) + " is not running on this server");
    MoveOffer o;
    o.resume_id = resumeIdOf(sid);
    if (o.resume_id.empty()) return Status(err::kInvalidValue, "the session cannot be resumed, so it cannot move");
    o.from = cfg.cluster.name;
    o.who = info->who;
    auto c = client_ids.find(sid);
    o.session = c == client_ids.end() ? sid : c->second;
    o.memory = info->memory;
    o.migrations = info->migrations;
    return o;
  };
  move_hooks.moved_away = [&](uint64_t sid, const std::string& member) { service.movedAway(sid, member); };
  SessionMover mover(io, cfg, std::move(checkpoint_key), move_hooks);
  service.setMover([&](uint64_t sid, const std::string& member,
                       std::function<void(Result<std::string>)> done) { mover.move(sid, member, std::move(done)); },
                   cfg.cluster.name);
  // Sessions other members move here.
  MoveReceiver::Hooks receive_hooks;
  receive_hooks.admit = [&](const MoveOffer& offer) -> Result<std::pair<uint64_t, Placement>> {
    if (stopping) return Status(err::kDevicesUnavailable, "this member is draining");
    uint64_t sid = next_session++;
    auto p = service.admitMoved(sid, offer.who, offer.memory, offer.min_cc, offer.migrations);
    if (!p) return p.status();
    return std::make_pair(sid, *p);
  };
  receive_hooks.start_restorer = [&](uint64_t sid, const std::string& id) -> Result<SessionMover::Restorer> {
    if (resume_ids.count(id)) return Status(err::kInvalidValue, "its resume id is taken here");
    return startRestorer(sid, id);
  };
  receive_hooks.adopt = [&](uint64_t sid, const SessionMover::Restorer& r, const MoveOffer& offer) {
    restorers.erase(r.pid);
    workers[r.pid] = sid;
    handoffs[sid] = r.handoff;
    resume_ids[offer.resume_id] = sid;
    client_ids[sid] = offer.session;
    service.adoptMoved(sid, r.control);
  };
  receive_hooks.discard = [&](uint64_t sid, const SessionMover::Restorer* r) {
    if (r) dropRestorer(*r);
    service.dropMoved(sid);
  };
  MoveReceiver receiver(io, cfg, mover.key(), snapshot.tls, receive_hooks);
  // [pool] drain = "migrate": the sessions running at SIGTERM, one after another.
  startMigrating = [&] {
    std::vector<uint64_t> sessions;
    for (auto& [pid, sid] : workers)
      if (!superseded.count(pid) && !restorers.count(pid)) sessions.push_back(sid);
    moveAllAway(std::move(sessions), pool, [&](const DeviceRequest& req, const std::set<std::string>& tried) {
      return membership ? membership->moveTarget(req, tried) : std::nullopt;
    }, mover);
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
      // Timed out or evicted, or the daemon is draining (one that moves its
      // sessions away still routes resumes: their old workers send them on).
      if (ec || (stopping && !migrating)) return preauth.forget(a->guard_id);
      int fd = a->sock.native_handle();
      char head[kResumePreambleBytes];
      ssize_t n = ::recv(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return route(a);
      a->timer.cancel();
      if (n <= 0) return preauth.forget(a->guard_id);  // closed before saying anything: the socket goes with `a`
      if (head[0] != kResumeMagic[0]) {
        if (stopping) return preauth.forget(a->guard_id);  // no new sessions while draining
        return startWorker(a->sock.release(), a->guard_id);
      }
      const size_t magic = std::min<size_t>(static_cast<size_t>(n), sizeof kResumeMagic);
      const bool moving_in = std::memcmp(head, kMoveMagic, magic) == 0;
      static_assert(sizeof kMoveMagic + kMoveSaltBytes == kResumePreambleBytes);
      if (!moving_in && std::memcmp(head, kResumeMagic, magic) != 0) {
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
      if (moving_in) {
        // Another member moves a session here (member_move.h): a thread of its own.
        RGPU_LOG_INFO("connection from {}: a session move offered", a->peer);
        receiver.take(a->sock.release(), a->peer, std::string(head + sizeof kMoveMagic, kMoveSaltBytes));
        return preauth.forget(a->guard_id);
      }
      auto id = resume_ids.find(std::string(head + sizeof kResumeMagic, kResumeIdBytes));
      uint64_t sid = id == resume_ids.end() ? 0 : id->second;
      if (sid && mover.holding(sid)) {
        // Moving: the connection waits for whichever worker has the session in the end.
        RGPU_LOG_INFO("session {}: client reconnects from {} while the session moves; held", sid, a->peer);
        held[sid].push_back(a->sock.release());
        return preauth.forget(a->guard_id);
      }
      auto h = handoffs.find(sid);
      if (h != handoffs.end() && sendFd(h->second, fd)) {
        RGPU_LOG_INFO("session {}: client reconnects from {}; handed to its worker", sid, a->peer);
        return preauth.forget(a->guard_id);  // the worker has its own copy (and its own cap); ours closes with `a`
      }
      // No such session (any more): a fresh worker tells the client so.
      if (stopping) return preauth.forget(a->guard_id);
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
