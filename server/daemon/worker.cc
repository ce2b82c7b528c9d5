// A session's worker process: what `rgpu-server --worker` runs (the daemon
// starts one per client, docs/architecture.md), confined and dropped to the
// worker user before it reads a byte of the client's. A worker started with
// --restore takes up a session moved from another worker instead of a new
// client (docs/migration.md).
#include <fcntl.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "common/log.h"
#include "common/tls.h"
#include "server/checkpoint/checkpoint_stream.h"
#include "server/daemon/backend_factory.h"
#include "server/daemon/daemon.h"
#include "server/daemon/sandbox.h"
#include "server/pool/fd_passing.h"
#include "server/pool/pool_service.h"
#include "server/session/session.h"

namespace rgpu::server {

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

namespace {

// Waits up to `ms` for the daemon's next message on the handoff socket.
Result<std::string> awaitDaemon(int handoff_fd, int ms, int* fd) {
  pollfd p{handoff_fd, POLLIN, 0};
  int rc;
  while ((rc = ::poll(&p, 1, ms)) < 0 && errno == EINTR) {
  }
  if (rc != 1) return Status(err::kDevicesUnavailable, "no word from the daemon");
  std::string msg(512, '\0');
  int got = -1;
  ssize_t n = receiveWithFd(handoff_fd, msg, got);
  if (n <= 0) return Status(err::kDevicesUnavailable, "the daemon closed the handoff socket");
  msg.resize(std::min<size_t>(static_cast<size_t>(n), msg.size()));
  if (fd) *fd = got;
  else if (got >= 0) ::close(got);
  return msg;
}

// A file the daemon hands a restoring worker (`msg`, with `file`): `verb`,
// the file's key, and for a session placed by this daemon (a pre-copy, or a
// session from another member) "placed" and the placement. `use` reads it;
// the daemon is told `answer`, or "failed" and why.
Status takeFile(int handoff_fd, Result<std::string>& msg, int file, const std::string& verb,
                const std::string& answer, uint64_t session_id,
                const std::function<Status(CheckpointReader&, const Placement*)>& use) {
  Status s = msg ? Status::ok() : msg.status();
  auto f = msg ? splitFields(*msg, 16) : std::vector<std::string>{};
  if (s && (f.size() < 2 || f[0] != verb || file < 0)) s = Status(err::kInvalidValue, "no checkpoint to " + verb);
  auto key = s ? fileKeyFromHex(f[1]) : Result<CheckpointFileKey>(s);
  if (!key) s = key.status();
  std::optional<Placement> placed;
  if (s && f.size() > 3 && f[2] == "placed") {
    std::vector<std::string> fields(f.begin() + 2, f.end());
    fields[0] = "ok";
    auto p = placementFromFields(fields);
    if (p) placed = *p;
    else s = p.status();
  }
  auto t0 = std::chrono::steady_clock::now();
  if (s) {
    auto reader = CheckpointReader::open(*key, fdSource(file));
    s = reader ? use(**reader, placed ? &*placed : nullptr) : reader.status();
  }
  if (file >= 0) ::close(file);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  if (s) RGPU_LOG_INFO("session {}: {} done in {} ms", session_id, verb, ms);
  else RGPU_LOG_ERROR("session {}: cannot {} it here: {}", session_id, verb, s.message());
  std::string report = s ? answer : joinFields({"failed", s.message().substr(0, 400)});
  (void)::send(handoff_fd, report.data(), report.size(), MSG_NOSIGNAL);
  return s;
}

// A worker started with --restore: takes the session from the checkpoint the
// daemon hands over (after a pre-copy's base, if one comes first), tells it
// how that went, and serves the session once the daemon says "go" (the old
// worker has let go of it).
Status restoreAndServe(Session& session, int handoff_fd, uint64_t session_id) {
  int file = -1;
  auto msg = awaitDaemon(handoff_fd, 60000, &file);
  if (msg && msg->rfind("prerestore", 0) == 0) {
    // While the program still runs where it is (session_precopy.cc).
    RGPU_TRY(takeFile(handoff_fd, msg, file, "prerestore", "prerestored", session_id,
                      [&](CheckpointReader& in, const Placement* placed) {
                        return placed ? session.prerestore(in, *placed)
                                      : Status(err::kInvalidValue, "a pre-copy without a placement");
                      }));
    file = -1;
    msg = awaitDaemon(handoff_fd, 180000, &file);
  }
  RGPU_TRY(takeFile(handoff_fd, msg, file, "restore", "restored", session_id,
                    [&](CheckpointReader& in, const Placement* placed) { return session.restore(in, placed); }));
  auto verdict = awaitDaemon(handoff_fd, 120000, nullptr);
  if (!verdict || *verdict != "go") {
    RGPU_LOG_WARN("session {}: the move was called off; this worker lets the restored copy go", session_id);
    return Status(err::kDevicesUnavailable, "the move was called off");
  }
  return session.runRestored();
}

}  // namespace

int runWorker(const ServerConfig& cfg, common::TlsOptions& tls, int fd, uint64_t session_id, int control_fd,
              int handoff_fd, int gate_policy_fd, int uid, int gid, bool restore) {
  // A restored session's client is away until it resumes: the session
  // starts on a connection that is already closed (made while sockets may
  // still be made, before the system call filter).
  int restore_peer = -1;
  if (restore) {
    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
      RGPU_LOG_ERROR("session {}: socketpair: {}", session_id, std::strerror(errno));
      return 1;
    }
    fd = sp[0];
    restore_peer = sp[1];
  }
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
  auto plain = common::TlsContext::makePlaintext(true);
  auto conn = common::TlsConnection::accept(restore ? *plain : *ctx, fd,
                                            std::chrono::milliseconds(cfg.handshake_timeout_ms));
  if (restore_peer >= 0) {
    ::close(restore_peer);
    if (conn) (*conn)->shutdown();
  }
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
  Status s = restore ? restoreAndServe(session, handoff_fd, session_id) : session.run();
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
  if (session.moved()) return 0;
  return s ? 0 : 2;
}

}  // namespace rgpu::server
