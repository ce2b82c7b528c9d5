#include "server/daemon/sandbox.h"

#include "server/config/server_config.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <thread>

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

TEST(Sandbox, AfterItsSetUpAWorkerMakesOnlyTheSystemCallsOnItsList) {
  int rc = inConfinedChild([]() -> int {
    if (!restrictWorkerSyscalls()) return 1;
    // What a worker does keeps working: threads, memory, files, its own sockets.
    std::atomic<int> ran{0};
    std::thread t([&] { ran = 1; });
    t.join();
    if (ran != 1) return 2;
    void* m = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || ::munmap(m, 1 << 20) != 0) return 3;
    int f = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (f < 0) return 4;
    ::close(f);
    int u = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (u < 0) return 5;
    ::close(u);
    // What it never needs fails.
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    if (::execve("/bin/true", argv, environ) == 0 || errno != ENOSYS) return 6;
    // A new process (AddressSanitizer builds allow one, for LeakSanitizer's tracer: sandbox.h).
    if (!kSandboxAllowsPtrace && ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0) >= 0) return 7;
    if (!kSandboxAllowsPtrace && ::fork() >= 0) return 8;
    if (::socket(AF_INET, SOCK_STREAM, 0) >= 0 || errno != EPERM) return 9;
    if (::unshare(CLONE_NEWUSER) == 0 || errno != ENOSYS) return 10;
    if (::syscall(SYS_setresuid, 0, 0, 0) == 0 || errno != ENOSYS) return 11;
    if (::syscall(SYS_bpf, 0, nullptr, 0) >= 0 || errno != ENOSYS) return 12;
    if (::syscall(SYS_io_uring_setup, 1, nullptr) >= 0 || errno != ENOSYS) return 13;
    if (::syscall(SYS_userfaultfd, 0) >= 0 || errno != ENOSYS) return 14;
    if (::kill(0, SIGTERM) == 0 || errno != EPERM) return 15;  // its process group
    if (::kill(::getpid(), 0) != 0) return 16;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "check " << rc << " failed";
}

TEST(Sandbox, SecretsTheWorkerUserCouldReadAreNamed) {
  char dir[] = "/tmp/rgpu-sandbox-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string open_key = std::string(dir) + "/open.key", closed_key = std::string(dir) + "/closed.key";
  for (const auto& p : {open_key, closed_key}) ::close(::open(p.c_str(), O_CREAT | O_WRONLY, 0600));
  ASSERT_EQ(::chmod(open_key.c_str(), 0644), 0);
  WorkerIdentity nobody{true, 65534, 65534, "nobody"};
  EXPECT_EQ(secretsReadableBy(nobody, {open_key, closed_key, std::string(dir) + "/missing", ""}),
            std::vector<std::string>{open_key});
  EXPECT_TRUE(secretsReadableBy(WorkerIdentity{}, {open_key}).empty());  // workers keep the daemon's user
  for (const auto& p : {open_key, closed_key}) ::unlink(p.c_str());
  ::rmdir(dir);
}

TEST(Sandbox, AWorkerThatAbortsStillDiesOfItsOwnSignal) {
  int rc = inConfinedChild([]() -> int { std::abort(); });
  EXPECT_EQ(rc, 200 + SIGABRT);
}

TEST(Sandbox, TheDefaultWorkerUserAppliesWhereItExistsAndANamedOneMust) {
  ServerConfig defaults;
  EXPECT_EQ(defaults.worker_user, "rgpu");
  EXPECT_FALSE(defaults.worker_user_set);
  // The built-in default on a host without that user: workers keep the daemon's user.
  auto missing_default = resolveWorkerUser("rgpu-no-such-user", /*named=*/false);
  ASSERT_TRUE(missing_default) << missing_default.status().message();
  EXPECT_FALSE(missing_default->change);
  // Named in server.toml, it must exist.
  auto missing_named = resolveWorkerUser("rgpu-no-such-user", /*named=*/true);
  ASSERT_FALSE(missing_named);
  EXPECT_NE(missing_named.status().message().find("does not exist"), std::string::npos);
  auto parsed = parseServerConfig("[security]\nworker_user = \"nobody\"\n", "server.toml");
  ASSERT_TRUE(parsed) << parsed.status().message();
  EXPECT_EQ(parsed->worker_user, "nobody");
  EXPECT_TRUE(parsed->worker_user_set);
  if (::geteuid() == 0) {  // root drops to an existing default
    auto nobody = resolveWorkerUser("nobody", /*named=*/false);
    ASSERT_TRUE(nobody);
    EXPECT_TRUE(nobody->change);
    EXPECT_EQ(nobody->uid, 65534u);
  }
}

}  // namespace
}  // namespace rgpu::server
