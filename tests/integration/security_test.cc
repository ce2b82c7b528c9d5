// The attacks of the security review, each shown failing against a real
// rgpu-server process (docs/security.md): what a peer sends is never
// trusted beyond what it proves.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/integration/raw_client.h"

namespace rgpu::test {
namespace {

std::unique_ptr<common::TlsConnection> connectAs(const std::string& dir, uint16_t port, const std::string& cert = "alice") {
  auto ctx = common::TlsContext::makeClient(
      cert.empty() ? common::TlsOptions::files(dir + "/ca.pem", "", "", false)
                   : common::TlsOptions::files(dir + "/ca.pem", dir + "/" + cert + ".pem", dir + "/" + cert + ".key", false));
  auto c = common::TlsConnection::connect(**ctx, "127.0.0.1", port, "", std::chrono::milliseconds(5000));
  EXPECT_TRUE(c) << c.status().message();
  return std::move(*c);
}

// Lines of `log` that start with `prefix`.
int linesStartingWith(const std::string& log, const std::string& prefix) {
  std::istringstream in(log);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(Security, ClientTextCannotForgeALogLine) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path()));
  const std::string forged = "[1999-01-01 00:00:00.000] [rgpu-server 1] [info] forged";
  {
    // No certificate and a wrong token: refused, and the refusal names the client's hostname.
    RawClient c(connectAs(dir.path(), server.port(), ""));
    RawWelcome w = c.helloWith([&](wire::Hello::Builder& h) {
      h.setToken("not-a-token");
      h.setHostname("box\n" + forged + "\x1b[2J");
    });
    EXPECT_EQ(w.error, err::kNotPermitted) << w.message;
  }
  for (int i = 0; i < 200 && server.log().find("box\\n") == std::string::npos; ++i) usleep(10000);
  std::string log = server.log();
  EXPECT_NE(log.find("box\\n[1999-01-01"), std::string::npos) << log;
  EXPECT_NE(log.find("\\x1b[2J"), std::string::npos) << log;
  EXPECT_EQ(linesStartingWith(log, "[1999-01-01"), 0) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << "an escape sequence reached the log";
}

// A TCP connection to 127.0.0.1:port from the loopback address `from`
// (127.0.0.x: Linux answers for all of 127/8), that writes `first` and stays.
int connectFrom(const std::string& from, uint16_t port, const std::string& first) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from.c_str(), &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    ::close(fd);
    return -1;
  }
  if (!first.empty()) (void)!::write(fd, first.data(), first.size());
  return fd;
}

// The daemon's worker processes now.
int childrenOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  int n = 0;
  for (pid_t c; in >> c;) ++n;
  return n;
}

TEST(Security, UnauthenticatedConnectionsAreCappedWhileARealClientKeepsWorking) {
  rlimit nofile{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  nofile.rlim_cur = nofile.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &nofile), 0);
  ASSERT_GE(nofile.rlim_cur, 2200u) << "the test needs 2,000 sockets";
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path(), "[limits]\nmax_unauthenticated = 64\n"
                                                          "max_unauthenticated_per_address = 8\n"));
  RawClient before(connectAs(dir.path(), server.port()));
  ASSERT_EQ(before.hello().first, 0);  // a session from before the flood goes on through it
  // 2,000 connections from 20 addresses: three in four silent, one in four a
  // TLS record header that promises a ClientHello and never sends it (each
  // of those makes the daemon start a worker that waits in its handshake).
  std::vector<int> flood;
  int peak_children = 0;
  const std::string stalled_hello("\x16\x03\x01\x02\x00", 5);
  for (int i = 0; i < 2000; ++i) {
    int fd = connectFrom("127.0.0." + std::to_string(2 + i % 20), server.port(), i % 4 == 0 ? stalled_hello : "");
    if (fd >= 0) flood.push_back(fd);
    if (i % 100 == 0) peak_children = std::max(peak_children, childrenOf(server.pid()));
  }
  EXPECT_GE(flood.size(), 1900u);
  // Meanwhile a real client connects, authenticates and works, over and over.
  std::vector<double> ms;
  for (int round = 0; round < 10; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    RawClient c(connectAs(dir.path(), server.port()));
    ASSERT_EQ(c.hello().first, 0) << "round " << round;
    uint64_t p = c.malloc(4096);
    c.write(p, std::vector<uint8_t>(4096, 9));
    RawReply r = c.readBack(p, 4096);
    ASSERT_EQ(r.error, 0) << "round " << round;
    EXPECT_EQ(r.bulk, std::vector<uint8_t>(4096, 9));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    peak_children = std::max(peak_children, childrenOf(server.pid()));
    EXPECT_EQ(before.ping().error, 0);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("real client under a flood of %zu connections: connect+hello+malloc+copy+read median %.1f ms, max %.1f ms; "
              "peak worker processes %d; server log %zu bytes\n",
              flood.size(), ms[ms.size() / 2], ms.back(), peak_children, server.log().size());
  EXPECT_LT(ms.back(), 5000.0) << "the real client waited behind the flood";
  // 64 pre-auth workers at most, plus the sessions that authenticated.
  EXPECT_LE(peak_children, 64 + 2);
  EXPECT_LT(server.log().size(), 256u << 10) << "the flood flooded the log";
  EXPECT_NE(server.log().find("max_unauthenticated"), std::string::npos);
  for (int fd : flood) ::close(fd);
}

}  // namespace
}  // namespace rgpu::test
