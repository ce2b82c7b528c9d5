// The servers a program's devices are on, and which of them a request goes to.
//
// A program normally has one session on one server. When a pool of servers
// spreads its devices over several members (a span, docs/pool.md "One
// program, several members"), the program holds one session per member: its
// device ordinals 0..N-1 are the parts' devices in the pool's order, while
// each member numbers its own devices from 0. Every request then goes to the
// member of the device it names, with its device fields rewritten to that
// member's numbering — localize() holds the one table of which fields of
// which request name devices. A request that names no device goes to the
// device the caller gives (`hint`), or to the first member when it concerns
// none (ping, pool status). With one server nothing is looked at: requests
// go out exactly as they were built.
//
// Device pointers, stream, event, module and kernel ids are the program's on
// every member: ids are chosen by the client (unique over the program) and
// pointers are each member's own addresses, which the client keeps apart
// (client/device_ranges.h; sim members place each part's memory in its own
// address window).
//
// Fixed once open() returns: any thread may read it without a lock.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/client_config.h"
#include "client/connection.h"

namespace rgpu::client {

// The most devices one program addresses (module, kernel and variable ids
// carry the device in 6 bits).
inline constexpr int kMaxProgramDevices = 64;

class ServerSet {
 public:
  // The handler for host functions part `i`'s server asks the client to run.
  using HandlerFor = std::function<Connection::HostFuncHandler(size_t part)>;

  // Connects as Connection::open does; when the pool spreads the program,
  // opens a session at each part's member (all of them, or none: a part
  // that fails closes the others and the error names it).
  static Result<std::unique_ptr<ServerSet>> open(const ClientConfig& cfg, const HandlerFor& handler);
  // A span the pool sent (untrusted), checked before anything is opened:
  // at most kMaxProgramDevices devices, each part with devices and an address.
  static Status checkSpan(const std::vector<SpanPart>& span, const std::string& from);
  ~ServerSet();
  ServerSet(const ServerSet&) = delete;
  ServerSet& operator=(const ServerSet&) = delete;

  size_t size() const { return parts_.size(); }
  bool single() const { return parts_.size() == 1; }
  Connection& primary() const { return *parts_[0].conn; }
  Connection& part(size_t i) const { return *parts_[i].conn; }
  // The program's devices: peer bits in program ordinals (none across members).
  const std::vector<Welcome::Device>& devices() const { return devices_; }
  // The part serving program device `device` (0 for one outside the program).
  size_t partOf(int device) const;
  // Whether two program devices are on the same server.
  bool sameServer(int a, int b) const { return partOf(a) == partOf(b); }

  // Rewrites the device fields of `req` to the numbering of the server of
  // the device they name, and says which part that is. `hint`: the device
  // of a request whose fields name none (a pointer's, an event's), or -1.
  // Fails (kInvalidValue) when the request names devices of two servers.
  Status localize(wire::Request::Builder req, int hint, size_t* part) const;

  // Device printf output of every part, in part order.
  std::string takeDeviceOutput();
  // Closes every part (see Connection::close).
  void close();
  // "a:1 (1 device), b:2 (2 devices)": for messages.
  std::string describe() const;

 private:
  struct Part {
    std::unique_ptr<Connection> conn;  // its devices: the program's [base_[i], + welcome().devices.size())
    std::string member;                // the pool's name for it ("" alone)
  };
  ServerSet() = default;
  // Adds a connected part and its devices.
  Status add(std::unique_ptr<Connection> conn, const std::string& member);

  std::vector<Part> parts_;
  std::vector<Welcome::Device> devices_;
  std::vector<uint8_t> part_of_;  // by program device
  std::vector<int> base_;         // by part: its first program device
};

}  // namespace rgpu::client
