// The attacks of the security review, each shown failing against a real
// rgpu-server process (docs/security.md): what a peer sends is never
// trusted beyond what it proves.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>

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

}  // namespace
}  // namespace rgpu::test
