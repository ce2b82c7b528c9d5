// rgpu-run: runs a program with rgpu's libcudart.so.13 first on its library
// path. --server points it at a server; --local starts a private rgpu-server
// (sim backend, loopback, throwaway certificates) for the program's lifetime.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "client/run_args.h"
#include "common/dev_pki.h"

namespace fs = std::filesystem;

namespace {

fs::path selfDir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

// The directory holding our libcudart.so.13: beside us in a build tree, or the
// installed <prefix>/<libdir>/rgpu.
std::string findLibDir() {
  fs::path self = selfDir();
  for (fs::path p : {self, self / ".." / RGPU_INSTALL_LIBDIR / "rgpu", self / ".." / "lib" / "rgpu"})
    if (fs::exists(p / "libcudart.so.13")) return fs::weakly_canonical(p).string();
  return {};
}

std::string findServer() {
  fs::path self = selfDir();
  for (fs::path p : {self / "rgpu-server", self / ".." / "server" / "rgpu-server"})
    if (fs::exists(p)) return fs::weakly_canonical(p).string();
  return "rgpu-server";  // from PATH
}

int exitCodeOf(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

int main(int argc, char** argv) {
  auto parsed = rgpu::client::parseRunArgs(argc, argv);
  if (!parsed) {
    std::cerr << "rgpu-run: " << parsed.status().message() << "\n" << rgpu::client::runUsage();
    return 2;
  }
  if (parsed->help) {
    std::cout << rgpu::client::runUsage();
    return 0;
  }
  if (parsed->version) {
    std::cout << "rgpu-run " << RGPU_VERSION << "\n";
    return 0;
  }
  const std::string server = parsed->server;
  const bool local = parsed->local;
  std::vector<std::string> command = parsed->command;
  std::string libdir = findLibDir();
  if (libdir.empty()) {
    std::cerr << "rgpu-run: cannot find rgpu's libcudart.so.13 next to " << selfDir() << "\n";
    return 2;
  }

  pid_t server_pid = -1;
  fs::path tmp;
  if (local) {
    char templ[] = "/tmp/rgpu-run-XXXXXX";
    if (!mkdtemp(templ)) {
      std::perror("rgpu-run: mkdtemp");
      return 2;
    }
    tmp = templ;
    rgpu::common::DevPkiOptions pki;
    pki.dir = tmp.string();
    pki.clients = {"local"};
    if (auto s = rgpu::common::makeDevPki(pki); !s) {
      std::cerr << "rgpu-run: " << s.message() << "\n";
      return 2;
    }
    std::ofstream(tmp / "server.toml") << "listen = \"127.0.0.1:0\"\nlog_level = \"warn\"\nbackend = \"sim\"\n"
                                       << "[tls]\ncert = \"server.pem\"\nkey = \"server.key\"\nca = \"ca.pem\"\n"
                                       << "[[users]]\nname = \"local\"\ncert_cn = \"local\"\n"
                                       << "[[sim.devices]]\nname = \"rgpu sim device\"\nmemory = \"8GiB\"\n";
    std::string srv = findServer(), cfg = (tmp / "server.toml").string(), port_file = (tmp / "port").string();
    server_pid = fork();
    if (server_pid == 0) {
      execlp(srv.c_str(), srv.c_str(), "--config", cfg.c_str(), "--port-file", port_file.c_str(), (char*)nullptr);
      std::perror("rgpu-run: cannot start rgpu-server");
      _exit(127);
    }
    std::string port;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (port.empty() && std::chrono::steady_clock::now() < deadline) {
      std::ifstream(port_file) >> port;
      int st;
      if (port.empty() && waitpid(server_pid, &st, WNOHANG) == server_pid) {
        std::cerr << "rgpu-run: the local rgpu-server exited at start\n";
        fs::remove_all(tmp);
        return 2;
      }
      if (port.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (port.empty()) {
      std::cerr << "rgpu-run: the local rgpu-server did not start within 15 s\n";
      kill(server_pid, SIGKILL);
      fs::remove_all(tmp);
      return 2;
    }
    std::ofstream(tmp / "client.toml") << "server = \"127.0.0.1:" << port << "\"\n"
                                       << "[tls]\nca = \"ca.pem\"\ncert = \"local.pem\"\nkey = \"local.key\"\n";
    setenv("RGPU_CONFIG", (tmp / "client.toml").c_str(), 1);
    unsetenv("RGPU_SERVER");
  } else if (!server.empty()) {
    setenv("RGPU_SERVER", server.c_str(), 1);
  }
  // -n N: [request] devices for the program (RGPU_DEVICES, over client.toml's).
  if (parsed->devices) setenv("RGPU_DEVICES", std::to_string(parsed->devices).c_str(), 1);
  std::string ld = libdir;
  if (const char* old = getenv("LD_LIBRARY_PATH"); old && *old) ld += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", ld.c_str(), 1);

  pid_t child = fork();
  if (child == 0) {
    std::vector<char*> args;
    for (auto& a : command) args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::cerr << "rgpu-run: cannot run " << command[0] << ": " << std::strerror(errno) << "\n";
    _exit(127);
  }
  // Let Ctrl-C reach the program (same process group); we wait for it.
  signal(SIGINT, SIG_IGN);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (server_pid > 0) {
    kill(server_pid, SIGTERM);
    int st;
    waitpid(server_pid, &st, 0);
    fs::remove_all(tmp);
  }
  return exitCodeOf(status);
}
