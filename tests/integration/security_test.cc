// The attacks of the security review, each shown failing against a real
// rgpu-server process (docs/security.md): what a peer sends is never
// trusted beyond what it proves.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "server/daemon/sandbox.h"
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

// A line of /proc/PID/status ("Uid:", "Seccomp:", ...), after its name.
std::string statusField(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name, 0) == 0) {
      std::string v = line.substr(name.size());
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

// The flags of descriptor `fd` of process `pid` (from /proc/PID/fdinfo).
int fdFlags(pid_t pid, int fd) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/fdinfo/" + std::to_string(fd));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags:", 0) == 0) return std::stoi(line.substr(6), nullptr, 8);
  return -1;
}

TEST(Security, WorkersRunConfinedAsTheirOwnUserWithTheGatePolicyReadOnly) {
  TempDir dir;
  makeCerts(dir.path());
  if (::geteuid() != 0) {
    // Only root can start workers as another user: the server says so and does not start.
    writeFile(dir.file("server.toml"), serverToml(dir.path(), "[security]\nworker_user = \"nobody\"\n"));
    RunResult r = run(std::string(RGPU_SERVER_BIN) + " --config " + dir.file("server.toml"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.output.find("needs rgpu-server to start as root"), std::string::npos) << r.output;
    return;
  }
  ASSERT_EQ(::chmod(dir.file("server.key").c_str(), 0644), 0);
  ServerProcess server(dir.path(), serverToml(dir.path(), "[security]\nworker_user = \"nobody\"\n"));
  // The daemon names the secrets the worker user could read (mode 0644 here).
  EXPECT_NE(server.log().find("the worker user 'nobody' can read " + dir.file("server.key")), std::string::npos)
      << server.log();
  ASSERT_EQ(::chmod(dir.file("server.toml").c_str(), 0600), 0);
  RawClient a(connectAs(dir.path(), server.port()));
  ASSERT_EQ(a.hello().first, 0);
  uint64_t p = a.malloc(64);
  a.write(p, std::vector<uint8_t>(64, 5));
  ASSERT_EQ(a.readBack(p, 64).bulk, std::vector<uint8_t>(64, 5));  // it works as nobody
  std::ifstream children("/proc/" + std::to_string(server.pid()) + "/task/" + std::to_string(server.pid()) + "/children");
  pid_t worker = 0;
  children >> worker;
  ASSERT_GT(worker, 0);
  EXPECT_EQ(statusField(worker, "Uid:"), "65534\t65534\t65534\t65534");
  EXPECT_EQ(statusField(worker, "Gid:"), "65534\t65534\t65534\t65534");
  EXPECT_EQ(statusField(worker, "Groups:"), "");
  EXPECT_EQ(statusField(worker, "NoNewPrivs:"), "1");
  EXPECT_EQ(statusField(worker, "Seccomp:"), "2");  // a filter
  // Its user cannot read server.toml (0600, the daemon's)...
  pid_t probe = ::fork();
  if (probe == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(2);
    _exit(::open(dir.file("server.toml").c_str(), O_RDONLY) < 0 && errno == EACCES ? 0 : 1);
  }
  int status = 0;
  ::waitpid(probe, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "uid 65534 could read server.toml";
  // ...holds the launch gate's policy (priorities, weights) read-only...
  EXPECT_EQ(fdFlags(worker, 7) & O_ACCMODE, O_RDONLY);
  // ...and of the sessions' gate pages, only its own writable (mapped, sealed,
  // its descriptor closed).
  std::ifstream maps("/proc/" + std::to_string(worker) + "/maps");
  int writable = 0;
  for (std::string line; std::getline(maps, line);)
    writable += line.find("rgpu-launch-activity") != std::string::npos && line.find(" rw-s ") != std::string::npos;
  EXPECT_EQ(writable, 1);
  for (int fd = 0; fd < 64; ++fd) {
    char target[256] = {};
    std::string link = "/proc/" + std::to_string(worker) + "/fd/" + std::to_string(fd);
    if (::readlink(link.c_str(), target, sizeof target - 1) > 0) {
      EXPECT_EQ(std::string(target).find("rgpu-launch-activity"), std::string::npos) << link << " -> " << target;
    }
  }
}

TEST(Security, ACertificateCountsOnlyWithProofOfItsKeyOnThisConnection) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path()));
  auto refused = [](const RawWelcome& w) {
    return w.error == err::kNotPermitted && w.message.find("did not prove it holds the key of certificate 'alice'") !=
                                                std::string::npos;
  };
  {
    // alice's certificate (certificates are not secret) without a proof.
    RawClient c(connectAs(dir.path(), server.port()));
    RawWelcome w = c.helloWith([](wire::Hello::Builder& h) { h.disownCertProof(); });
    EXPECT_TRUE(refused(w)) << w.error << " " << w.message;
  }
  {
    // A proof alice made on another connection does not carry over.
    RawClient first(connectAs(dir.path(), server.port()));
    auto elsewhere = common::proveClientKey(first.conn());
    ASSERT_TRUE(elsewhere) << elsewhere.status().message();
    RawClient c(connectAs(dir.path(), server.port()));
    RawWelcome w = c.helloWith([&](wire::Hello::Builder& h) {
      h.setCertProof(kj::arrayPtr(reinterpret_cast<const kj::byte*>(elsewhere->data()), elsewhere->size()));
    });
    EXPECT_TRUE(refused(w)) << w.error << " " << w.message;
  }
  RawClient c(connectAs(dir.path(), server.port()));
  RawWelcome w = c.helloWith([](wire::Hello::Builder&) {});  // the proof the client library sends
  EXPECT_EQ(w.error, 0) << w.message;
  EXPECT_NE(server.log().find("its worker's claim to serve user 'alice' refused: the client did not prove"),
            std::string::npos)
      << server.log();
}

TEST(Security, TheShippedSysusersFileCreatesTheWorkerUser) {
  // What an install runs (systemd-sysusers), into a scratch root.
  TempDir root;
  ASSERT_EQ(::mkdir(root.file("etc").c_str(), 0755), 0);
  RunResult r = run("systemd-sysusers --root=" + root.path() + " " + RGPU_SOURCE_DIR + "/packaging/sysusers.d/rgpu.conf");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string passwd = readFile(root.file("etc/passwd"));
  auto at = passwd.find("\nrgpu:x:");
  if (passwd.rfind("rgpu:x:", 0) == 0) at = 0;
  ASSERT_NE(at, std::string::npos) << passwd;
  std::string line = passwd.substr(at == 0 ? 0 : at + 1);
  line = line.substr(0, line.find('\n'));
  EXPECT_NE(line.find(":/var/lib/rgpu:/usr/sbin/nologin"), std::string::npos) << line;
  EXPECT_EQ(line.find("rgpu:x:0:"), std::string::npos) << "a system user, not root: " << line;
  EXPECT_NE(readFile(root.file("etc/group")).find("rgpu:x:"), std::string::npos);
}

// What would give the server's private key away: its scalar (big- and
// little-endian, as PEM/DER and OpenSSL's BIGNUM words hold it) and a line
// of its PEM text.
std::vector<std::string> keySecrets(const std::string& key_file) {
  std::vector<std::string> out;
  FILE* f = std::fopen(key_file.c_str(), "r");
  EVP_PKEY* key = f ? PEM_read_PrivateKey(f, nullptr, nullptr, nullptr) : nullptr;
  if (f) std::fclose(f);
  BIGNUM* priv = nullptr;
  if (key && EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_PRIV_KEY, &priv) == 1) {
    std::string be(static_cast<size_t>(BN_num_bytes(priv)), '\0');
    BN_bn2bin(priv, reinterpret_cast<unsigned char*>(be.data()));
    out.push_back(be);
    out.emplace_back(be.rbegin(), be.rend());
  }
  BN_clear_free(priv);
  EVP_PKEY_free(key);
  std::istringstream pem(readFile(key_file));
  std::string line;
  std::getline(pem, line);  // -----BEGIN PRIVATE KEY-----
  if (std::getline(pem, line) && line.size() >= 48) out.push_back(line.substr(0, 48));
  return out;
}

// Whether any of `needles` is in the readable memory of `pid` ("": could
// not read it); `where` names the mapping. Needs the right to read it (root).
std::string memoryHolding(pid_t pid, const std::vector<std::string>& needles, bool* readable) {
  *readable = false;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int mem = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (mem < 0) return "";
  std::string line, found;
  while (found.empty() && std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    // Writable memory only: what a process builds at run time lives there.
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3 || perms[0] != 'r' || perms[1] != 'w') continue;
    if (line.find("[vvar]") != std::string::npos || line.find("[vsyscall]") != std::string::npos) continue;
    // The sim device's arena (1 GiB, untouched but by this test's 64 bytes)
    // and sanitizer shadow memory hold no key material.
    if (hi - lo >= (256ul << 20)) continue;
    std::string bytes(hi - lo, '\0');
    ssize_t n = ::pread(mem, bytes.data(), bytes.size(), static_cast<off_t>(lo));
    if (n <= 0) continue;
    *readable = true;
    bytes.resize(static_cast<size_t>(n));
    for (size_t k = 0; k < needles.size(); ++k)
      if (bytes.find(needles[k]) != std::string::npos) found = "secret " + std::to_string(k) + " in " + line;
  }
  ::close(mem);
  return found;
}

TEST(Security, AWorkerHoldsNoCopyOfTheServerKeyOnceItsClientIsConnected) {
  TempDir dir;
  makeCerts(dir.path());
  ServerProcess server(dir.path(), serverToml(dir.path(), "[session]\nresume_grace_ms = 10000\n"));
  RawClient a(connectAs(dir.path(), server.port()));
  RawWelcome w = a.helloWith([](wire::Hello::Builder& h) { h.setResume(true); });
  ASSERT_EQ(w.error, 0) << w.message;
  uint64_t p = a.malloc(64);
  a.write(p, std::vector<uint8_t>(64, 9));
  ASSERT_EQ(a.readBack(p, 64).bulk, std::vector<uint8_t>(64, 9));
  std::ifstream children("/proc/" + std::to_string(server.pid()) + "/task/" + std::to_string(server.pid()) + "/children");
  pid_t worker = 0;
  children >> worker;
  ASSERT_GT(worker, 0);
  // Its address space is bounded by what a sim worker can need (the devices' arena, the
  // interpreter and staging budgets, slack); unlimited only in sanitizer builds.
  uint64_t as = server::workerAddressLimit("sim", {1ull << 30}, 1ull << 30, 512ull << 20);
  std::ifstream limits("/proc/" + std::to_string(worker) + "/limits");
  std::string row;
  for (std::string line; std::getline(limits, line);)
    if (line.rfind("Max address space", 0) == 0) row = line;
  std::istringstream fields(row.substr(std::string("Max address space").size()));
  std::string soft;
  fields >> soft;
  EXPECT_EQ(soft, as ? std::to_string(as) : std::string("unlimited")) << row;
  std::vector<std::string> secrets = keySecrets(dir.file("server.key"));
  ASSERT_EQ(secrets.size(), 3u);
  bool readable = false;
  if (::geteuid() != 0) {
    // Not root: the worker is not dumpable, so its memory is closed to us as to any process of its user.
    memoryHolding(worker, secrets, &readable);
    EXPECT_FALSE(readable);
    return;
  }
  // The scan finds the key where it is (the daemon keeps it for new workers)...
  EXPECT_NE(memoryHolding(server.pid(), secrets, &readable), "");
  // ...and not in the worker, whose client is connected and served.
  std::string where = memoryHolding(worker, secrets, &readable);
  EXPECT_TRUE(readable);
  EXPECT_EQ(where, "") << "the worker holds the server key in " << where;
}

}  // namespace
}  // namespace rgpu::test
