// rgpu-run's command line: its own options, then the program and the
// program's arguments, passed on exactly as given.
//
// rgpu-run's options come first (--server HOST:PORT or --server=HOST:PORT,
// --local, -n N or --devices N or --devices=N, --help, --version). The first word that is not one of them is the
// program; it and every word after it — whatever they look like: "--", "-",
// "--n=5", empty, with spaces or bytes that are not UTF-8 — are the program's
// argv, in order. A "--" before the program ends rgpu-run's options (and is
// not passed on); an unknown option before the program is an error, not a
// guess.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace rgpu::client {

struct RunArgs {
  std::string server;  // --server; "" when not given
  bool local = false;  // --local
  uint32_t devices = 0;  // -n / --devices (1-64); 0 when not given
  bool help = false;
  bool version = false;
  std::vector<std::string> command;  // the program, then its arguments
};

Result<RunArgs> parseRunArgs(int argc, const char* const* argv);

// What --help prints.
std::string runUsage();

}  // namespace rgpu::client
