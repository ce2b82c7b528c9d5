#include "server/daemon/sandbox.h"

#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace rgpu::server {

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "rgpu's worker sandbox knows x86_64 and aarch64"
#endif

Result<WorkerIdentity> resolveWorkerUser(const std::string& user, bool named) {
  WorkerIdentity who;
  if (user.empty()) return who;
  passwd* pw = ::getpwnam(user.c_str());
  if (!named && (!pw || ::geteuid() != 0)) return who;  // the default, where it cannot apply
  if (!pw)
    return Status(err::kInvalidValue, "[security] worker_user '" + user +
                                          "' does not exist (create it: useradd --system --no-create-home " + user + ")");
  if (::geteuid() != 0 && pw->pw_uid != ::geteuid())
    return Status(err::kInvalidValue, "[security] worker_user '" + user +
                                          "' needs rgpu-server to start as root (it drops to that user per worker)");
  who.change = pw->pw_uid != ::geteuid() || pw->pw_gid != ::getegid();
  who.uid = pw->pw_uid;
  who.gid = pw->pw_gid;
  who.name = user;
  return who;
}

std::vector<std::string> secretsReadableBy(const WorkerIdentity& who, const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  if (!who.change) return out;
  for (const auto& p : paths) {
    struct stat st {};
    if (p.empty() || ::stat(p.c_str(), &st) != 0) continue;
    bool readable = st.st_uid == who.uid   ? (st.st_mode & S_IRUSR) != 0
                    : st.st_gid == who.gid ? (st.st_mode & S_IRGRP) != 0
                                           : (st.st_mode & S_IROTH) != 0;
    if (readable || who.uid == 0) out.push_back(p);
  }
  return out;
}

uint64_t workerAddressLimit(const std::string& backend, const std::vector<uint64_t>& device_memory,
                            uint64_t interpreter_bytes, uint64_t staging_bytes) {
  if (RGPU_ASAN || RGPU_TSAN || backend != "sim") return 0;
  uint64_t total = (64ull << 20) + interpreter_bytes + staging_bytes + kWorkerAddressSlack;
  for (uint64_t m : device_memory) total += 2 * m;
  return total;
}

namespace {

#define RGPU_STMT(code, k) sock_filter{static_cast<uint16_t>(code), 0, 0, static_cast<uint32_t>(k)}
#define RGPU_JUMP(code, k, jt, jf) sock_filter{static_cast<uint16_t>(code), jt, jf, static_cast<uint32_t>(k)}

bool installFilter(pid_t self) {
  constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
  constexpr uint32_t kDeny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  // Layout: [0-2] arch check; [3] load nr; then the lists; the arg check and
  // the verdicts at the end (jump offsets are counted from the next insn).
  sock_filter f[] = {
      /* 0 */ RGPU_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      /* 1 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
      /* 2 */ RGPU_STMT(BPF_RET | BPF_K, kDeny),  // another ABI: nothing
      /* 3 */ RGPU_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      // Signals: allowed to this process only (arg 0 is the target pid / tgid).
      /* 4 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kill, 12, 0),
      /* 5 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_tgkill, 11, 0),
      /* 6 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigqueueinfo, 10, 0),
      /* 7 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_tgsigqueueinfo, 9, 0),
      // Reaching into other processes: never.
      /* 8 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_tkill, 11, 0),
      /* 9 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kSandboxAllowsPtrace ? ~0u : SYS_ptrace, 10, 0),
      /* 10 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 9, 0),
      /* 11 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 8, 0),
      /* 12 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kcmp, 7, 0),
      /* 13 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 424 /* pidfd_send_signal */, 6, 0),
      /* 14 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 434 /* pidfd_open */, 5, 0),
      /* 15 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 438 /* pidfd_getfd */, 4, 0),
      /* 16 */ RGPU_STMT(BPF_RET | BPF_K, kAllow),
      // Signal: arg 0 (low 32 bits, a pid_t) must be this process.
      /* 17 */ RGPU_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      /* 18 */ RGPU_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(self), 0, 1),
      /* 19 */ RGPU_STMT(BPF_RET | BPF_K, kAllow),
      /* 20 */ RGPU_STMT(BPF_RET | BPF_K, kDeny),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof f / sizeof f[0]), f};
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

#undef RGPU_STMT
#undef RGPU_JUMP

}  // namespace

bool dropPrivileges(uid_t uid, gid_t gid) {
  // (A worker_user of uid 0 changes groups only.)
  if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) return false;
  if (uid != 0 && ::setuid(0) == 0) {  // the drop must be for good
    errno = EPERM;
    return false;
  }
  return true;
}

bool confineWorker() {
  rlimit no_core{0, 0};
  if (::setrlimit(RLIMIT_CORE, &no_core) != 0) return false;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur > kWorkerMaxFiles) {
    files.rlim_cur = kWorkerMaxFiles;
    if (files.rlim_max > kWorkerMaxFiles) files.rlim_max = kWorkerMaxFiles;
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0) return false;
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return installFilter(::getpid());
}

void markNotDumpable() { ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }

}  // namespace rgpu::server
