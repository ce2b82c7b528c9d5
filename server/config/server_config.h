// server.toml: listen address, TLS, users, backend and sim devices, limits.
// See docs/configuration.md for every key; examples/server.toml for a sample.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace rgpu::server {

enum class Priority { kLow = 0, kNormal = 1, kHigh = 2 };
const char* priorityName(Priority p);

inline constexpr uint32_t kDefaultMaxSessionsPerUser = 16;
inline constexpr char kDefaultWorkerUser[] = "rgpu";
// [limits] kernel_timeout_ms unless set: 10 minutes.
inline constexpr uint32_t kDefaultKernelTimeoutMs = 600000;

struct UserEntry {
  std::string name;
  std::string token;    // bearer token; empty = not accepted by token
  std::string cert_cn;  // client-certificate common name; empty = not by cert
  // Policy (the pool manager enforces it).
  std::vector<std::string> devices;  // allowed: index ("0"), UUID ("GPU-…", a prefix), model glob ("*H200*"); empty = all
  uint64_t memory_quota = 0;         // bytes per device, over all of the user's sessions; 0 = no quota
  // Bytes over every device of the pool (a server alone: of this server),
  // over all of the user's sessions; 0 = none (docs/pool.md).
  uint64_t pool_memory_quota = 0;
  // Concurrent sessions (0 = no limit). Bounded by default: one tenant's
  // sessions each hold a worker process.
  uint32_t max_sessions = kDefaultMaxSessionsPerUser;
  Priority priority = Priority::kNormal;
  double weight = 1.0;               // compute weight among sessions of a device
  bool admin = false;                // rgpu-smi shows everyone's sessions
  uint32_t mps_thread_percentage = 0; // under NVIDIA MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (0: not set)
};

// [pool]: placement and admission, monitoring.
struct PoolConfig {
  uint32_t admission_timeout_ms = 30000;  // longest a request waits in the admission queue
  std::string metrics_listen;             // host:port of the Prometheus endpoint; empty = off
  // A scrape must send "Authorization: Bearer <metrics_token>"; required
  // when metrics_listen is not a loopback address.
  std::string metrics_token;
  // "sessions": series per session (user, client host and pid as labels);
  // "aggregate": per device and in total only, no tenant names.
  std::string metrics_labels = "sessions";
  // The status page on the metrics listener (server/daemon/status_page.h):
  // "users" (a user's token or the metrics token), "open" (loopback only), "off".
  std::string status_page = "users";
  uint32_t drain_timeout_ms = 30000;      // SIGTERM: how long running sessions may go on
  // SIGTERM: "wait" (running sessions get drain_timeout_ms) or "migrate"
  // (each moves to another member of the pool first, docs/migration.md).
  std::string drain = "wait";
};

// [accounting]: one JSON line per ended session (server/accounting/), for
// billing and charge-back. Empty path: none written.
struct AccountingConfig {
  std::string path;
  uint64_t max_bytes = 64ull << 20;  // the file is rotated (path.1, path.2, ...) past this
  uint32_t keep = 8;                 // rotated files kept; older ones are deleted
};

struct SimDeviceConfig {
  std::string name = "rgpu sim device";
  uint64_t memory = 16ull << 30;
  int major = 9;
  int minor = 0;
  int sm_count = 16;
};

// Per-session limits that protect the worker. Each is named in docs/limits.md.
struct SessionLimits {
  uint64_t max_allocations = 1u << 20;  // live device allocations
  uint32_t max_streams = 1024;
  uint32_t max_events = 65536;
  uint32_t max_modules = 4096;
  uint32_t max_functions = 1u << 20;
  uint32_t max_pending_host_funcs = 4096;
  // Instantiated CUDA graphs a session keeps, and their nodes over all of them.
  uint32_t max_graphs = 4096;
  uint32_t max_graph_nodes = 1u << 20;
  // Conditional node handles (cudaGraphConditionalHandleCreate) a session makes; they last as long as it.
  uint32_t max_conditional_handles = 65536;
  // A kernel running longer than this fails with cudaErrorLaunchTimeout
  // (sticky for the session, as a GPU watchdog does); 0: no limit.
  uint32_t kernel_timeout_ms = kDefaultKernelTimeoutMs;
  // Largest cudaLimitPrintfFifoSize a session may set: the device printf
  // output one launch keeps in the worker.
  uint64_t max_printf_fifo_bytes = 16ull << 20;
  // Bytes of host-to-device copies a session may have queued and not yet
  // run (worker memory); past it a copy fails with cudaErrorMemoryAllocation.
  // At least one frame's bulk (64 MiB).
  uint64_t max_staging_bytes = 512ull << 20;
  // Sim backend: interpreter memory (registers, .local, .shared) of the
  // blocks a session's kernels run at once; a block that alone needs more
  // fails its launch with cudaErrorLaunchOutOfResources.
  uint64_t max_interpreter_bytes = 1ull << 30;
  // Per server (the daemon): connections not yet authenticated — accepted
  // sockets and workers in their TLS handshake — over all peers and per
  // source address. Past either, the oldest such connection is closed.
  uint32_t max_unauthenticated = 128;
  uint32_t max_unauthenticated_per_address = 32;
};

// [cluster]: this server as a member of a pool of servers whose registry is
// etcd (docs/pool.md). Without endpoints the server works alone.
struct ClusterConfig {
  std::vector<std::string> endpoints;  // etcd's client URLs, tried in order: "http://127.0.0.1:2379", "https://..."
  std::string prefix = "/rgpu/";       // every key of the pool starts with it
  std::string name;                    // this member's name in the pool (default: the host name)
  std::string advertise;               // host:port clients reach this server at (default: `listen`)
  uint32_t lease_ttl_s = 10;           // a member that stops renewing leaves the pool after this (2..3600)
  uint32_t load_interval_ms = 1000;    // live load is written at most this often (100..60000)
  uint32_t etcd_timeout_ms = 2000;     // per etcd call and endpoint (100..60000)
  std::string policy = "spread";       // placement across members: "spread" (least loaded) or "pack" (fill a host first)
  std::string tls_ca, tls_cert, tls_key;  // for https endpoints (the client certificate: when etcd asks)
  // http endpoints that are not loopback addresses: refused unless set (the
  // pool's registry would travel in the clear).
  bool insecure_plaintext = false;
  bool enabled() const { return !endpoints.empty(); }
};
// Parses [cluster] of `tbl` into `out`; `listen` is the default advertised address.
Status parseClusterConfig(const toml::table& tbl, const std::string& path, const std::string& listen,
                          ClusterConfig& out);

struct ServerConfig {
  std::string source;  // file it was read from ("" = defaults)
  std::string listen = "127.0.0.1:7443";
  std::string log_level = "info";
  std::string backend = "sim";
  std::string compression = "off";
  std::string tls_cert, tls_key, tls_ca;
  bool require_client_cert = false;
  bool allow_anonymous = false;  // accept clients that match no user (dev only)
  // No TLS: frames in the clear, tokens only. Refused unless `listen` is a
  // loopback address (development and tests on one machine).
  bool insecure_plaintext = false;
  int handshake_timeout_ms = 10000;
  // [session]: how long a worker keeps a session whose connection dropped,
  // waiting for the client to resume it; 0: no resume.
  uint32_t resume_grace_ms = 30000;
  // [session] max_stripes: extra connections a resumable session may stripe
  // bulk payloads over (common/stripes.h); 0: none.
  uint32_t max_stripes = 8;
  std::vector<UserEntry> users;
  PoolConfig pool;
  AccountingConfig accounting;
  ClusterConfig cluster;
  std::vector<SimDeviceConfig> sim_devices;
  std::string sim_launch_log;  // [sim] launch_log: record every kernel launch (tests)
  bool sim_hot_paths = true;   // [sim] hot_paths: the interpreter's hot paths (off: its general code only)
  // [sim] jit: "auto" (compile a kernel once the interpreter ran jit_threshold
  // thread-instructions per instruction of it), "eager" (before its first
  // launch) or "off";
  // jit_library: the JIT plugin, where it is not beside rgpu-server or in
  // <prefix>/lib/rgpu (server/sim/ptx/ptx_jit.h).
  std::string sim_jit = "auto";
  uint64_t sim_jit_threshold = 1ull << 20;
  std::string sim_jit_library;
  // [cuda]: the driver library workers load (a path for tests' fake driver),
  // NVML for inventory and health, and the idle pinned staging memory kept.
  // [security] worker_user: the user every worker runs as (the daemon starts
  // as root and drops each worker to it); "" = the daemon's own user. Unset,
  // it is kDefaultWorkerUser when that user exists (the package creates it).
  std::string worker_user = kDefaultWorkerUser;
  bool worker_user_set = false;  // named in server.toml: it must exist
  std::string cuda_driver_library = "libcuda.so.1";
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string cublas_library = "libcublas.so.13";  // NVIDIA's, loaded by a worker on its first BLAS call
  std::string cufft_library = "libcufft.so.12";    // NVIDIA's, loaded by a worker on its first cuFFT plan
  std::string cusolver_library = "libcusolver.so.12";  // NVIDIA's, loaded by a worker on its first cuSOLVER call
  std::string cusparse_library = "libcusparse.so.12";  // NVIDIA's, loaded by a worker on its first cuSPARSE call
  std::string cudnn_library = "libcudnn.so.9";  // NVIDIA's, loaded by a worker on its first cuDNN call
  std::string cublaslt_library = "libcublasLt.so.13";
  uint64_t cuda_staging_pool = 256ull << 20;
  bool cuda_scrub = true;  // [cuda] scrub: zero device memory before a session gets it (docs/security.md)
  // [checkpoint] (docs/migration.md): where the daemon writes the checkpoints
  // of sessions it moves, and the key they are encrypted with (64 hex
  // digits, readable by the daemon's user alone); both unset: sessions are
  // not moved. drain_timeout_ms: how long a checkpoint waits for the
  // session's queued work to finish before the move is abandoned.
  std::string checkpoint_dir, checkpoint_key_file;
  uint32_t checkpoint_drain_timeout_ms = 10000;
  // Pre-copy: a move between workers copies the session's device memory to
  // the new worker while the program runs, and pauses it only for what
  // changed since (docs/migration.md).
  bool checkpoint_precopy = true;
  SessionLimits limits;
};

Result<ServerConfig> loadServerConfig(const std::string& path);
// Bearer tokens as workers hold them: "sha256:" + the hex SHA-256 of the
// token. A worker checks a client's token against the digest and never
// holds another user's token (docs/security.md).
std::string tokenDigest(const std::string& token);
// `configured` (a token, or a tokenDigest) accepts `given`; constant time in
// the token's bytes.
bool tokenMatches(const std::string& configured, const std::string& given);
// The user a client is: the first of `cfg`'s users whose cert_cn is `cn`
// (a verified certificate's common name) or whose token accepts `token`;
// "anonymous" under allow_anonymous; "" when none. The worker's check and
// the daemon's binding both use it.
std::string userFor(const ServerConfig& cfg, const std::string& cn, const std::string& token);
// server.toml text with every [[users]] token and [pool] metrics_token
// replaced by its digest: what the daemon hands its workers.
Result<std::string> withTokensDigested(const std::string& text, const std::string& path);
// The same from TOML text; `path` names it in messages and anchors relative paths.
Result<ServerConfig> parseServerConfig(const std::string& text, const std::string& path);
// What a SIGHUP cannot change (the listener, the backend and its devices):
// empty when `next` keeps `running`'s, else the keys that differ.
std::string restartOnlyChanges(const ServerConfig& running, const ServerConfig& next);
using common::parseSize;

}  // namespace rgpu::server
