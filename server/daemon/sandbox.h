// Confinement of a worker process: what one tenant's worker may do to the
// host and to the other workers, even if a bug hands it to its tenant.
//
// The daemon applies the rest in the forked child, before exec, so it covers
// the worker from its first instruction; the worker then takes its user
// before it reads a byte from its client:
//   - the worker's user and group ([security] worker_user; the daemon must
//     start as root for it), with no supplementary groups: server.toml, the
//     TLS key files and other workers' /proc entries are not its to read
//     (a worker never reads them: it gets a validated snapshot, see
//     config_snapshot.h). Taken after exec (dropPrivileges), so the binary
//     and its libraries need not be readable by that user's path;
//   - PR_SET_NO_NEW_PRIVS: nothing it executes gains privileges;
//   - a seccomp filter: signals (kill, tgkill, rt_sigqueueinfo, ...) only to
//     its own process, no tkill, pidfd signals, ptrace, process_vm_* or kcmp,
//     and no syscalls of another ABI (x86 int 0x80): a worker cannot stop,
//     signal or read another worker, whatever user they share;
//   - rlimits: no core dumps (a dump would hold tenant data and the key),
//     a bounded number of descriptors.
// After exec the worker also marks itself not dumpable (markNotDumpable), so
// processes of its own user cannot ptrace it or read its memory through /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/sanitizers.h"
#include "common/status.h"

namespace rgpu::server {

inline constexpr uint64_t kWorkerMaxFiles = 8192;

// LeakSanitizer checks a process at exit by ptrace-attaching a helper to its
// threads: builds with AddressSanitizer let a worker ptrace (and nothing else
// more), so that leaks in workers are still found. Release builds never do.
inline constexpr bool kSandboxAllowsPtrace = RGPU_ASAN;

struct WorkerIdentity {
  bool change = false;  // setuid/setgid to uid/gid
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;
};

// Resolves [security] worker_user ("" = keep the daemon's). Fails when the
// user does not exist, or the daemon is not root and the user is not its own
// — unless it was not `named` (the built-in default, "rgpu"): then workers
// keep the daemon's user (the daemon warns when that is root).
Result<WorkerIdentity> resolveWorkerUser(const std::string& user, bool named = true);

// Of `paths` (the TLS key, server.toml), those the worker user could read by
// their owner, group and mode (it has no supplementary groups): secrets a
// tenant who broke its worker would hold. Empty when workers keep the
// daemon's user (then nothing is apart).
std::vector<std::string> secretsReadableBy(const WorkerIdentity& who, const std::vector<std::string>& paths);

// In the forked child: sets the rlimits, NO_NEW_PRIVS and the seccomp
// filter. Async-signal-safe (no allocation, no locks): returns false with
// errno set when a step fails; the child must not exec then.
bool confineWorker();
// In the worker, first thing after exec: for good, no way back.
bool dropPrivileges(uid_t uid, gid_t gid);

// In the worker after exec.
void markNotDumpable();

// The address space a sim-backend worker may reserve (RLIMIT_AS): its
// devices' arena (twice their memory), the interpreter and staging budgets,
// and kWorkerAddressSlack for code, heaps and thread stacks. 0 (no limit)
// for the CUDA backend — NVIDIA's driver reserves very large ranges — and in
// sanitizer builds, whose shadow memory does too.
inline constexpr uint64_t kWorkerAddressSlack = 8ull << 30;
uint64_t workerAddressLimit(const std::string& backend, const std::vector<uint64_t>& device_memory,
                            uint64_t interpreter_bytes, uint64_t staging_bytes);

// In the worker, once it has its user and before it reads a byte from its
// client: a second seccomp filter (stacked on confineWorker's), an allow list
// of what a worker does (worker_syscalls.cc). Anything else fails with
// ENOSYS and the worker logs "the sandbox refused system call N" once per
// number; exec, fork, the set*id calls, ptrace, namespaces, mounts, module
// and keyring calls, bpf, io_uring, userfaultfd and non-AF_UNIX sockets are
// among what is not on it. Not async-signal-safe (it allocates).
bool restrictWorkerSyscalls();

}  // namespace rgpu::server
