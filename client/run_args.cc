#include "client/run_args.h"

#include <cstdlib>
#include <cstring>

namespace rgpu::client {

std::string runUsage() {
  return "rgpu-run: run a CUDA program (built with -cudart shared) on an rgpu server\n"
         "Usage: rgpu-run [--server HOST:PORT | --local] [-n N] [--] PROGRAM [ARGS...]\n"
         "  --server HOST:PORT  the rgpu server (default: from client.toml or $RGPU_SERVER)\n"
         "  --local             start a private sim-backend server on loopback for this program\n"
         "  -n, --devices N     ask for N devices ([request] devices; a pool may give them on several members)\n"
         "  --                  ends rgpu-run's options (needed when PROGRAM starts with '-')\n"
         "  -h, --help          this text\n"
         "  --version           rgpu-run's version\n"
         "PROGRAM gets ARGS exactly as given, in order.\n";
}

Result<RunArgs> parseRunArgs(int argc, const char* const* argv) {
  RunArgs out;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;  // the program
    if (a == "--local") {
      out.local = true;
    } else if (a == "-h" || a == "--help") {
      out.help = true;
      return out;
    } else if (a == "--version") {
      out.version = true;
      return out;
    } else if (a == "--server") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') return Status(err::kInvalidValue, "--server needs HOST:PORT");
      out.server = argv[++i];
    } else if (a.rfind("--server=", 0) == 0) {
      out.server = a.substr(std::strlen("--server="));
      if (out.server.empty()) return Status(err::kInvalidValue, "--server needs HOST:PORT");
    } else if (a == "-n" || a == "--devices" || a.rfind("--devices=", 0) == 0) {
      std::string v;
      if (a.rfind("--devices=", 0) == 0) v = a.substr(std::strlen("--devices="));
      else if (i + 1 < argc) v = argv[++i];
      char* end = nullptr;
      const unsigned long n = v.empty() ? 0 : std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end || n == 0 || n > 64 || v[0] == '-')
        return Status(err::kInvalidValue, a + " needs a device count from 1 to 64");
      out.devices = static_cast<uint32_t>(n);
    } else {
      return Status(err::kInvalidValue, "unknown option '" + a + "' (put -- before a program whose name starts with '-')");
    }
  }
  for (; i < argc; ++i) out.command.emplace_back(argv[i]);
  if (out.command.empty()) return Status(err::kInvalidValue, "no program given");
  if (out.local && !out.server.empty()) return Status(err::kInvalidValue, "--server and --local exclude each other");
  return out;
}

}  // namespace rgpu::client
