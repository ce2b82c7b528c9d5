// A throwaway rgpu-server for the benchmarks: sim backend on loopback, fresh
// development certificates in a temporary directory, RGPU_CONFIG pointing at
// it. Installed benchmarks find rgpu-server beside themselves.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace rgpu::bench {

// Starts the server for the rest of the process. Call it before any CUDA
// call: the server is stopped from an atexit handler, which then runs after
// the CUDA runtime's own (registered at its first call) has closed the session,
// so the server's drain has nothing to wait for.
struct BenchServer {
  std::string dir;
  uint16_t port = 0;
  pid_t pid = -1;
};
const BenchServer& startBenchServer(const std::string& tag);

// A server of the caller's, beside the process's: `extra` is appended to its
// server.toml, `top` goes among its top-level keys; its client.toml is dir +
// "/client.toml". Stopped (and its directory removed) by stopServer.
BenchServer launchServer(const std::string& tag, const std::string& extra = "", const std::string& top = "");
void stopServer(const BenchServer& s);

}  // namespace rgpu::bench
