// rgpu-server under systemd (server/daemon/systemd.h): the shipped unit
// passes `systemd-analyze verify`, the daemon tells a Type=notify manager
// when it is ready, reloading and draining, and under a journal its lines
// arrive as journal entries carrying the session id. No systemd runs here:
// the notify socket is the test's own, and the journal's socket is one the
// test binds in a mount namespace of its own (as root, which CI is).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <poll.h>

#include <fstream>
#include <regex>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

std::string unitText() { return readFile(std::string(RGPU_SOURCE_DIR) + "/packaging/systemd/rgpu-server.service"); }

// A datagram socket bound at `path`, as systemd's notify and journal sockets are.
int bindDatagram(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  ::chmod(path.c_str(), 0666);  // workers run as another user
  return fd;
}

// The next datagram within `ms`, or "".
std::string receive(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return "";
  std::string buf(65536, '\0');
  ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
  return n > 0 ? buf.substr(0, static_cast<size_t>(n)) : "";
}

TEST(Systemd, TheShippedUnitPassesSystemdAnalyzeVerifyAndHasTheHardeningItPromises) {
  TempDir dir;
  std::string unit = unitText();
  ASSERT_FALSE(unit.empty());
  // Verify checks that the binaries exist: this build's stands in for /usr/bin's.
  std::string here = std::regex_replace(unit, std::regex("/usr/bin/rgpu-server"), RGPU_SERVER_BIN);
  writeFile(dir.file("rgpu-server.service"), here);
  RunResult r = run("systemd-analyze verify " + dir.file("rgpu-server.service") + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("rgpu-server.service"), std::string::npos) << "systemd-analyze warns:\n" << r.output;
  for (const char* line : {"Type=notify", "NotifyAccess=main", "ExecReload=/bin/kill -HUP $MAINPID",
                           "KillSignal=SIGTERM", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
                           "ProtectHome=yes", "DevicePolicy=closed", "DeviceAllow=/dev/nvidiactl rw",
                           "DeviceAllow=char-nvidia-frontend rw", "ReadWritePaths=-/var/lib/rgpu -/var/log/rgpu"})
    EXPECT_NE(unit.find(std::string("\n") + line), std::string::npos) << "the unit lacks " << line;
  // Stop must outlast the drain ([pool] drain_timeout_ms, 30 s by default).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(unit, m, std::regex("\nTimeoutStopSec=(\\d+)")));
  EXPECT_GT(std::stoi(m[1].str()) * 1000, static_cast<int>(server::PoolConfig{}.drain_timeout_ms));
  // Nothing else of the host's devices.
  EXPECT_EQ(std::regex_search(unit, std::regex("\nDeviceAllow=(?!/dev/nvidia|char-nvidia)")), false);
}

TEST(Systemd, TheDaemonTellsSystemdWhenItIsReadyReloadingAndDraining) {
  TempDir dir;
  makeCerts(dir.path());
  int notify = bindDatagram(dir.file("notify"));
  ASSERT_GE(notify, 0) << std::strerror(errno);
  ::setenv("NOTIFY_SOCKET", dir.file("notify").c_str(), 1);
  auto server = std::make_unique<ServerProcess>(dir.path(), serverToml(dir.path()));
  ::unsetenv("NOTIFY_SOCKET");
  // READY=1 comes once it listens: ServerProcess has seen the port file, written before it.
  std::string ready = receive(notify, 5000);
  EXPECT_NE(ready.find("READY=1"), std::string::npos) << ready;
  EXPECT_NE(ready.find("STATUS=listening on 127.0.0.1:" + std::to_string(server->port())), std::string::npos) << ready;
  ::kill(server->pid(), SIGHUP);
  std::string reloading = receive(notify, 5000);
  EXPECT_NE(reloading.find("RELOADING=1"), std::string::npos) << reloading;
  std::string again = receive(notify, 5000);
  EXPECT_NE(again.find("READY=1"), std::string::npos) << again;
  EXPECT_NE(server->log().find("SIGHUP: configuration reloaded"), std::string::npos) << server->log();
  ::kill(server->pid(), SIGTERM);
  std::string stopping = receive(notify, 5000);
  EXPECT_NE(stopping.find("STOPPING=1"), std::string::npos) << stopping;
  EXPECT_NE(stopping.find("STATUS=draining 0 session(s)"), std::string::npos) << stopping;
  EXPECT_EQ(WEXITSTATUS(server->wait()), 0);
  ::close(notify);
}

TEST(Systemd, UnderTheJournalEveryLineIsAnEntryAndAWorkersCarryItsSession) {
  TempDir dir;
  makeCerts(dir.path());
  writeFile(dir.file("server.toml"), serverToml(dir.path()));
  const std::string entries = dir.file("journal.entries"), port_file = dir.file("port"), err = dir.file("stderr");
  pid_t journal = ::fork();
  if (journal == 0) {
    // A private /run with a journal socket at systemd's path, for the server only.
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") != 0) {
      std::fprintf(stderr, "mount namespace: %s\n", std::strerror(errno));
      _exit(2);
    }
    ::mkdir("/run/systemd", 0755);
    ::mkdir("/run/systemd/journal", 0755);
    int sock = bindDatagram("/run/systemd/journal/socket");
    if (sock < 0) _exit(3);
    pid_t server = ::fork();
    if (server == 0) {
      int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      struct stat st {};
      ::fstat(2, &st);
      // What systemd tells a service whose stderr is the journal.
      ::setenv("JOURNAL_STREAM", (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).c_str(), 1);
      execl(RGPU_SERVER_BIN, "rgpu-server", "--config", dir.file("server.toml").c_str(), "--port-file",
            port_file.c_str(), (char*)nullptr);
      _exit(127);
    }
    std::ofstream(dir.file("server.pid")) << server << "\n";
    std::ofstream out(entries);
    for (;;) {
      std::string d = receive(sock, 200);
      if (!d.empty()) out << d << "\n--\n" << std::flush;
      int st;
      if (d.empty() && ::waitpid(server, &st, WNOHANG) == server) _exit(0);
    }
  }
  ASSERT_GT(journal, 0);
  uint16_t port = waitForPortFile(port_file);
  ASSERT_NE(port, 0) << readFile(err);
  writeFile(dir.file("client.toml"), clientToml(dir.path(), port));
  RunResult r = run(std::string(RGPU_EXAMPLES_DIR) + "/vector_add",
                    "RGPU_CONFIG=" + dir.file("client.toml") + " LD_LIBRARY_PATH=" + RGPU_CLIENT_LIBDIR);
  EXPECT_EQ(r.code, 0) << r.output;
  // The daemon and its worker, as one journal sees them; then stop.
  std::string j;
  for (int i = 0; i < 400 && j.find("RGPU_SESSION=1") == std::string::npos; ++i, usleep(10000)) j = readFile(entries);
  ASSERT_EQ(::kill(std::stoi(readFile(dir.file("server.pid"))), SIGTERM), 0);
  int st = 0;
  ASSERT_EQ(::waitpid(journal, &st, 0), journal);
  EXPECT_EQ(WEXITSTATUS(st), 0);
  j = readFile(entries);
  EXPECT_EQ(readFile(err), "") << "lines went to stderr instead of the journal";
  std::smatch m;
  EXPECT_TRUE(std::regex_search(j, m, std::regex("MESSAGE=rgpu-server [^\n]* listening on 127.0.0.1:" +
                                                 std::to_string(port) + "[^\n]*\nPRIORITY=6\n"
                                                 "SYSLOG_IDENTIFIER=rgpu-server\nRGPU_COMPONENT=rgpu-server\n")))
      << j;
  EXPECT_TRUE(std::regex_search(j, m, std::regex("MESSAGE=session 1 started[^\n]*\nPRIORITY=6\n"
                                                 "SYSLOG_IDENTIFIER=rgpu-server\nRGPU_COMPONENT=rgpu-worker\n"
                                                 "RGPU_SESSION=1\n")))
      << j;
  // Daemon lines carry no session field.
  EXPECT_FALSE(std::regex_search(j, std::regex("RGPU_COMPONENT=rgpu-server\nRGPU_SESSION=")));
}

}  // namespace
}  // namespace rgpu::test
