// The Debian packages (cmake/packaging.cmake, scripts/package.sh), built from
// this build and installed into a clean directory: what they contain and
// depend on, that dpkg would install them here, that their maintainer
// scripts make the user and directories the unit needs, that the shipped
// server.toml passes --check-config, and that an example runs through the
// installed client against a server started from the installed files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

namespace fs = std::filesystem;

// uid and gid of `user` in `root`'s /etc/passwd, or {-1, -1}.
std::pair<int, int> idsIn(const std::string& root, const std::string& user) {
  std::ifstream in(root + "/etc/passwd");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(user + ":", 0) == 0) {
      std::smatch m;
      if (std::regex_search(line, m, std::regex("^[^:]*:[^:]*:(\\d+):(\\d+):"))) return {std::stoi(m[1]), std::stoi(m[2])};
    }
  return {-1, -1};
}

TEST(Packages, InstallIntoACleanRootAndServeAnExampleFromTheInstalledFiles) {
  TempDir dir;
  const std::string out = dir.file("packages"), root = dir.file("root");
  // Built from this build tree, as scripts/package.sh does.
  fs::create_directories(out);
  RunResult cpack = run("cd " + out + " && cpack -G DEB --config " + std::string(RGPU_CPACK_CONFIG) + " -B " + out + " 2>&1");
  ASSERT_EQ(cpack.code, 0) << cpack.output;
  const std::string client = out + "/packages/rgpu-client_" + RGPU_VERSION + "_amd64.deb";
  const std::string server = out + "/packages/rgpu-server_" + RGPU_VERSION + "_amd64.deb";
  ASSERT_TRUE(fs::exists(client) && fs::exists(server)) << cpack.output;

  // Contents.
  std::string client_files = run("dpkg-deb -c " + client).output, server_files = run("dpkg-deb -c " + server).output;
  for (const char* f : {"./usr/lib/rgpu/libcudart.so.13", "./usr/lib/rgpu/libcublas.so.13", "./usr/lib/rgpu/libcublasLt.so.13",
                        "./usr/lib/rgpu/libcurand.so.10", "./usr/lib/rgpu/libcufft.so.12", "./usr/lib/rgpu/libcusolver.so.12",
                        "./usr/lib/rgpu/libcusparse.so.12", "./usr/lib/rgpu/libcudnn.so.9",
                        "./usr/bin/rgpu-run", "./usr/bin/rgpu-smi", "./etc/rgpu/client.toml"})
    EXPECT_NE(client_files.find(f), std::string::npos) << "rgpu-client lacks " << f << "\n" << client_files;
  for (const char* f : {"./usr/bin/rgpu-server", "./usr/lib/rgpu/librgpu_ptx_jit.so", "./etc/rgpu/server.toml",
                        "./usr/lib/systemd/system/rgpu-server.service", "./usr/lib/sysusers.d/rgpu.conf",
                        "./usr/lib/tmpfiles.d/rgpu.conf"})
    EXPECT_NE(server_files.find(f), std::string::npos) << "rgpu-server lacks " << f << "\n" << server_files;
  EXPECT_EQ(server_files.find("libcudart"), std::string::npos);
  EXPECT_EQ(client_files.find("rgpu-server"), std::string::npos);
  // Dependencies: the runtime packages the binaries link, never -dev ones.
  std::string client_deps = run("dpkg-deb -f " + client + " Depends").output;
  std::string server_deps = run("dpkg-deb -f " + server + " Depends").output;
  for (const std::string* deps : {&client_deps, &server_deps}) {
    EXPECT_EQ(deps->find("-dev"), std::string::npos) << *deps;
    for (const char* lib : {"libc6", "libssl3", "libcapnp-", "liblz4-1", "libzstd1"})
      EXPECT_NE(deps->find(lib), std::string::npos) << "no " << lib << " in " << *deps;
  }
  EXPECT_NE(server_deps.find("libsystemd0"), std::string::npos) << server_deps;
  EXPECT_NE(server_deps.find("systemd"), std::string::npos) << server_deps;
  EXPECT_EQ(client_deps.find("systemd"), std::string::npos) << "the client needs no systemd: " << client_deps;
  EXPECT_EQ(client_deps.find("libllvm"), std::string::npos) << client_deps;
  EXPECT_NE(run("dpkg-deb -f " + server + " Description").output.find("rgpu server"), std::string::npos);
  // dpkg would install both here (dependencies present, nothing conflicting).
  RunResult dry = run("dpkg --dry-run -i " + client + " " + server + " 2>&1");
  EXPECT_EQ(dry.code, 0) << dry.output;
  // The samples are conffiles: an upgrade keeps an operator's edits.
  EXPECT_EQ(run("dpkg-deb -I " + server + " conffiles").output, "/etc/rgpu/server.toml\n");
  EXPECT_EQ(run("dpkg-deb -I " + client + " conffiles").output, "/etc/rgpu/client.toml\n");

  // A clean root with both unpacked, and what the server's postinst does there.
  ASSERT_EQ(run("dpkg -x " + client + " " + root + " && dpkg -x " + server + " " + root).code, 0);
  ASSERT_EQ(run("dpkg-deb -e " + server + " " + dir.file("control")).code, 0);
  const std::string postinst = readFile(dir.file("control/postinst"));
  EXPECT_NE(postinst.find("systemd-sysusers rgpu.conf"), std::string::npos) << postinst;
  EXPECT_NE(postinst.find("systemd-tmpfiles --create rgpu.conf"), std::string::npos) << postinst;
  for (const char* script : {"postinst", "prerm", "postrm"}) {
    struct stat st {};
    ASSERT_EQ(::stat(dir.file(std::string("control/") + script).c_str(), &st), 0) << script;
    EXPECT_TRUE(st.st_mode & S_IXUSR) << script;
    EXPECT_EQ(run(std::string("sh -n ") + dir.file(std::string("control/") + script)).code, 0) << script;
  }
  RunResult users = run("systemd-sysusers --root=" + root + " " + root + "/usr/lib/sysusers.d/rgpu.conf 2>&1 && "
                        "systemd-tmpfiles --root=" + root + " --create " + root + "/usr/lib/tmpfiles.d/rgpu.conf 2>&1");
  ASSERT_EQ(users.code, 0) << users.output;
  auto [uid, gid] = idsIn(root, "rgpu");
  ASSERT_GT(uid, 0) << readFile(root + "/etc/passwd");
  EXPECT_NE(readFile(root + "/etc/passwd").find(":/var/lib/rgpu:/usr/sbin/nologin"), std::string::npos);
  struct Want {
    const char* path;
    int uid, gid;
  };
  for (const Want& w : {Want{"/var/lib/rgpu", uid, gid}, Want{"/var/log/rgpu", 0, gid}, Want{"/var/cache/rgpu", uid, gid}}) {
    struct stat st {};
    ASSERT_EQ(::stat((root + w.path).c_str(), &st), 0) << w.path;
    EXPECT_EQ(static_cast<int>(st.st_uid), w.uid) << w.path;
    EXPECT_EQ(static_cast<int>(st.st_gid), w.gid) << w.path;
    EXPECT_EQ(st.st_mode & 0777, 0750u) << w.path;
  }

  // The shipped server.toml, with TLS files where it says (next to it), passes the check.
  const std::string etc = root + "/etc/rgpu";
  makeCerts(etc);
  RunResult check = run(root + "/usr/bin/rgpu-server --check-config " + etc + "/server.toml 2>&1");
  EXPECT_EQ(check.code, 0) << check.output;
  EXPECT_NE(check.output.find("0 error(s)"), std::string::npos) << check.output;

  // A server from the installed files, with the shipped configuration (on loopback).
  const std::string port_file = dir.file("port");
  pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::freopen(dir.file("server.log").c_str(), "w", stderr);
    (void)f;
    execl((root + "/usr/bin/rgpu-server").c_str(), "rgpu-server", "--config", (etc + "/server.toml").c_str(),
          "--listen", "127.0.0.1:0", "--port-file", port_file.c_str(), (char*)nullptr);
    _exit(127);
  }
  int port = waitForPortFile(port_file, pid);
  ASSERT_GT(port, 0) << readFile(dir.file("server.log"));
  // The installed client: rgpu-run puts the installed libraries first, the shipped client.toml says how to connect.
  const std::string env = "RGPU_CONFIG=" + etc + "/client.toml RGPU_SERVER=127.0.0.1:" + std::to_string(port) +
                          " LD_LIBRARY_PATH=";
  RunResult path = run(root + "/usr/bin/rgpu-run sh -c 'echo $LD_LIBRARY_PATH'", env);
  EXPECT_EQ(path.output.substr(0, path.output.find(':')), fs::canonical(root + "/usr/lib/rgpu").string() + "\n")
      << path.output;
  RunResult example = run(root + "/usr/bin/rgpu-run " + RGPU_EXAMPLES_DIR + "/vector_add", env);
  EXPECT_EQ(example.code, 0) << example.output << readFile(dir.file("server.log"));
  EXPECT_NE(example.output.find("vector_add: all checks passed"), std::string::npos) << example.output;
  RunResult smi = run(root + "/usr/bin/rgpu-smi", env);
  EXPECT_EQ(smi.code, 0) << smi.output;
  EXPECT_NE(smi.output.find("rgpu sim"), std::string::npos) << smi.output;
  ::kill(pid, SIGTERM);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << readFile(dir.file("server.log"));
}

}  // namespace
}  // namespace rgpu::test
