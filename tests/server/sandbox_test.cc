#include "server/sandbox.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace rgpu::server {
namespace {

std::atomic<int> g_usr1{0};

// Runs `body` in a confined child; its exit code (0: every check held).
int inConfinedChild(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!confineWorker()) _exit(100);
    _exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

TEST(Sandbox, AConfinedWorkerSignalsOnlyItselfAndReachesIntoNoOtherProcess) {
  // Another process a worker must not touch (as another worker would be).
  pid_t other = ::fork();
  if (other == 0) {
    ::pause();
    _exit(0);
  }
  int rc = inConfinedChild([other]() -> int {
    if (::kill(other, SIGKILL) == 0 || errno != EPERM) return 1;
    if (::kill(other, 0) == 0 || errno != EPERM) return 2;
    if (::kill(0, SIGTERM) == 0 || errno != EPERM) return 3;   // its process group
    if (::kill(-1, SIGTERM) == 0 || errno != EPERM) return 4;  // everyone it may signal
    if (::syscall(SYS_tgkill, other, other, SIGKILL) == 0 || errno != EPERM) return 5;
    if (::syscall(SYS_tkill, other, SIGKILL) == 0 || errno != EPERM) return 6;
    // (AddressSanitizer builds let workers ptrace, for LeakSanitizer: sandbox.h.)
    if (!kSandboxAllowsPtrace && (::ptrace(PTRACE_ATTACH, other, nullptr, nullptr) == 0 || errno != EPERM)) return 7;
    char buf[8];
    iovec local{buf, sizeof buf}, remote{reinterpret_cast<void*>(0x400000), sizeof buf};
    if (::process_vm_readv(other, &local, 1, &remote, 1, 0) >= 0 || errno != EPERM) return 8;
    // Its own process stays signalable: raise(), abort() and threads work.
    ::signal(SIGUSR1, [](int) { g_usr1 = 1; });
    if (::raise(SIGUSR1) != 0 || g_usr1 != 1) return 9;
    if (::kill(::getpid(), 0) != 0) return 10;
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) return 11;
    rlimit core{};
    if (::getrlimit(RLIMIT_CORE, &core) != 0 || core.rlim_max != 0) return 12;
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur > kWorkerMaxFiles) return 13;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "check " << rc << " failed";
  // The other process lived through it.
  EXPECT_EQ(::kill(other, 0), 0);
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
}

TEST(Sandbox, AWorkerThatAbortsStillDiesOfItsOwnSignal) {
  int rc = inConfinedChild([]() -> int { std::abort(); });
  EXPECT_EQ(rc, 200 + SIGABRT);
}

}  // namespace
}  // namespace rgpu::server
