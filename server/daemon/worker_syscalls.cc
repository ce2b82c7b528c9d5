// The worker's system call allow list (sandbox.h restrictWorkerSyscalls).
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <vector>

#include "server/daemon/sandbox.h"

namespace rgpu::server {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#endif

// What a worker does after exec: serve a TLS connection, run backend threads
// (the PTX interpreter, or NVIDIA's driver and libraries through ioctl and
// mmap on /dev/nvidia*), log. The most frequent come first (the filter is a
// list). Not here, so refused: exec, fork, the set*id family, ptrace and
// process_vm_*, mount/namespaces/chroot, kernel modules and keyrings, bpf,
// perf_event_open, io_uring, userfaultfd, sockets other than AF_UNIX (NVIDIA's
// MPS), binding or listening.
const long kAllowed[] = {
    SYS_read, SYS_write, SYS_futex, SYS_ppoll, SYS_recvfrom, SYS_sendto, SYS_recvmsg, SYS_sendmsg, SYS_readv,
    SYS_writev, SYS_pread64, SYS_pwrite64, SYS_mmap, SYS_munmap, SYS_madvise, SYS_mprotect, SYS_mremap, SYS_brk,
    SYS_sched_yield, SYS_nanosleep, SYS_clock_nanosleep, SYS_clock_gettime, SYS_clock_getres, SYS_gettimeofday,
    SYS_getpid, SYS_gettid, SYS_getppid, SYS_ioctl, SYS_close, SYS_openat, SYS_fstat, SYS_newfstatat, SYS_statx,
    SYS_lseek, SYS_fcntl, SYS_dup, SYS_dup3, SYS_pipe2, SYS_eventfd2, SYS_epoll_create1, SYS_epoll_ctl,
    SYS_epoll_pwait, SYS_pselect6, SYS_timerfd_create, SYS_timerfd_settime, SYS_timerfd_gettime, SYS_getdents64,
    SYS_readlinkat, SYS_faccessat, SYS_unlinkat, SYS_fstatfs, SYS_statfs, SYS_ftruncate, SYS_fallocate, SYS_fsync,
    SYS_fdatasync, SYS_flock, SYS_memfd_create, SYS_mlock, SYS_munlock, SYS_mlockall, SYS_munlockall, SYS_mincore,
    SYS_msync, SYS_membarrier, SYS_mbind, SYS_get_mempolicy, SYS_set_mempolicy, SYS_move_pages, SYS_shutdown,
    SYS_getsockopt, SYS_setsockopt, SYS_getsockname, SYS_getpeername, SYS_connect, SYS_recvmmsg, SYS_sendmmsg,
    SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_sigaltstack, SYS_rt_sigtimedwait, SYS_rt_sigpending,
    SYS_rt_sigsuspend, SYS_restart_syscall, SYS_set_robust_list, SYS_get_robust_list, SYS_set_tid_address,
    SYS_rseq, SYS_exit, SYS_exit_group, SYS_prctl, SYS_getrandom, SYS_uname, SYS_sysinfo, SYS_getrusage,
    SYS_getrlimit, SYS_getcwd, SYS_getuid, SYS_geteuid, SYS_getgid, SYS_getegid, SYS_getresuid, SYS_getresgid,
    SYS_getgroups, SYS_sched_getaffinity, SYS_sched_setaffinity, SYS_sched_getparam, SYS_sched_setparam,
    SYS_sched_getscheduler, SYS_sched_setscheduler, SYS_sched_get_priority_max, SYS_sched_get_priority_min,
    SYS_getpriority, SYS_setpriority, SYS_getcpu, SYS_close_range, SYS_preadv, SYS_pwritev, SYS_preadv2,
    SYS_pwritev2, SYS_faccessat2, SYS_epoll_pwait2,
    // Files its user may write (NVIDIA's driver keeps a JIT cache under $HOME/.nv).
    SYS_mkdirat, SYS_renameat, SYS_renameat2, SYS_fchmod, SYS_utimensat,
#if defined(__x86_64__)
    SYS_poll, SYS_select, SYS_open, SYS_stat, SYS_lstat, SYS_access, SYS_readlink, SYS_unlink, SYS_dup2, SYS_pipe,
    SYS_eventfd, SYS_epoll_create, SYS_epoll_wait, SYS_arch_prctl, SYS_time, SYS_mkdir, SYS_rename,
#endif
};

// Calls allowed with their first argument naming this process (or 0, "this one").
const long kSelfOnly[] = {SYS_kill, SYS_tgkill, SYS_rt_sigqueueinfo, SYS_rt_tgsigqueueinfo, SYS_prlimit64};

std::atomic<uint64_t> g_refused_logged[8];  // one bit per system call number below 512

void appendNumber(char*& at, long n) {
  char digits[24];
  int len = 0;
  do {
    digits[len++] = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n > 0 && len < 20);
  while (len > 0) *at++ = digits[--len];
}

// SIGSYS from the filter: the call fails with ENOSYS, as on a kernel without
// it (libraries fall back or report it), and the worker's log says which,
// once per number.
void onRefusedSyscall(int, siginfo_t* info, void* context) {
  int saved = errno;
  long nr = info->si_syscall;
  bool first = true;
  if (nr >= 0 && nr < 512) {
    uint64_t bit = 1ull << (nr % 64);
    first = !(g_refused_logged[nr / 64].fetch_or(bit) & bit);
  }
  if (first) {
    char line[160] = "rgpu-worker: the sandbox refused system call ";
    char* at = line + sizeof "rgpu-worker: the sandbox refused system call " - 1;
    appendNumber(at, nr);
    const char tail[] = " (it fails with ENOSYS; see docs/security.md)\n";
    for (const char* t = tail; *t; ++t) *at++ = *t;
    [[maybe_unused]] auto w = ::write(STDERR_FILENO, line, static_cast<size_t>(at - line));
  }
  auto* uc = static_cast<ucontext_t*>(context);
#if defined(__x86_64__)
  uc->uc_mcontext.gregs[REG_RAX] = -ENOSYS;
#elif defined(__aarch64__)
  uc->uc_mcontext.regs[0] = static_cast<uint64_t>(-ENOSYS);
#endif
  errno = saved;
}

sock_filter stmt(uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return sock_filter{code, jt, jf, k}; }

}  // namespace

bool restrictWorkerSyscalls() {
  constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
  constexpr uint32_t kTrap = SECCOMP_RET_TRAP;
  constexpr uint32_t kEperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  constexpr uint32_t kEnosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  constexpr uint16_t kLoad = BPF_LD | BPF_W | BPF_ABS;
  constexpr uint16_t kEq = BPF_JMP | BPF_JEQ | BPF_K;
  constexpr uint16_t kRet = BPF_RET | BPF_K;
  const uint32_t self = static_cast<uint32_t>(::getpid());
  std::vector<sock_filter> f;
  f.push_back(stmt(kLoad, offsetof(seccomp_data, arch)));
  f.push_back(jump(kEq, kArch, 1, 0));
  f.push_back(stmt(kRet, kEperm));
  f.push_back(stmt(kLoad, offsetof(seccomp_data, nr)));
  for (long nr : kAllowed) {
    f.push_back(jump(kEq, static_cast<uint32_t>(nr), 0, 1));
    f.push_back(stmt(kRet, kAllow));
  }
  // Threads, not processes: clone needs CLONE_THREAD. clone3 hides its flags
  // in memory a filter cannot read: ENOSYS, and glibc falls back to clone.
  // (AddressSanitizer builds: LeakSanitizer forks a tracer, sandbox.h.)
  f.push_back(jump(kEq, SYS_clone, 0, 4));
  f.push_back(stmt(kLoad, offsetof(seccomp_data, args[0])));
  f.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1));
  f.push_back(stmt(kRet, kAllow));
  f.push_back(stmt(kRet, kSandboxAllowsPtrace ? kAllow : kEperm));
  f.push_back(jump(kEq, SYS_clone3, 0, 1));
  f.push_back(stmt(kRet, kEnosys));
  if (kSandboxAllowsPtrace)
    for (long nr : {long{SYS_ptrace}, long{SYS_wait4}, long{SYS_waitid}}) {
      f.push_back(jump(kEq, static_cast<uint32_t>(nr), 0, 1));
      f.push_back(stmt(kRet, kAllow));
    }
  // Sockets: AF_UNIX only (an MPS client's); no TCP or raw sockets of its own.
  f.push_back(jump(kEq, SYS_socket, 0, 4));
  f.push_back(stmt(kLoad, offsetof(seccomp_data, args[0])));
  f.push_back(jump(kEq, AF_UNIX, 0, 1));
  f.push_back(stmt(kRet, kAllow));
  f.push_back(stmt(kRet, kEperm));
  for (long nr : kSelfOnly) {
    f.push_back(jump(kEq, static_cast<uint32_t>(nr), 0, 5));
    f.push_back(stmt(kLoad, offsetof(seccomp_data, args[0])));
    f.push_back(jump(kEq, self, 1, 0));
    // 0: "this process" to prlimit64, but the whole process group to kill.
    f.push_back(jump(kEq, 0, nr == SYS_prlimit64 ? 0 : 1, 1));
    f.push_back(stmt(kRet, kAllow));
    f.push_back(stmt(kRet, kEperm));
  }
  f.push_back(stmt(kRet, kTrap));

  struct sigaction sa {};
  sa.sa_sigaction = onRefusedSyscall;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSYS, &sa, nullptr) != 0) return false;
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

}  // namespace rgpu::server
