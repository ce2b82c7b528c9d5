// A TCP proxy on loopback between clients and a server, which a test can cut:
// every connection it carries is reset at once (both ends see a dropped
// connection, not an orderly close) on request, or when the bytes it forwarded
// in one direction pass a mark — so a cut lands in the middle of a frame. It
// can also refuse new connections for a while (accepted, then reset), or
// hold back what clients send on new connections for a while.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rgpu::test {

class CutProxy {
 public:
  explicit CutProxy(uint16_t target_port);
  ~CutProxy();
  uint16_t port() const { return port_; }

  void cutNow();
  // Resets only the connection accepted last that is still open (a client's
  // stripe connection, which joins after its main one); counts as a cut.
  void cutNewest();
  // Connections carried now.
  int open() const { return open_.load(); }
  // Cuts every connection when the bytes from clients (up) or from the server
  // (down), counted over all connections, reach `mark`.
  void cutAtUpstream(uint64_t mark);
  void cutAtDownstream(uint64_t mark);
  void refuse(bool on) { refuse_.store(on); }
  // The next cut also refuses new connections for `ms` milliseconds.
  void refuseAfterNextCut(int ms) { refuse_after_cut_ms_.store(ms); }
  // Connections accepted from now on, after the first `after` of all, pass
  // nothing their client sends to the server for `ms` milliseconds (a slow
  // network for joins: a client's stripe connections reach the server late).
  void delayJoins(int after, int ms) {
    delay_after_.store(after);
    delay_ms_.store(ms);
  }

  uint64_t upstream() const { return up_.load(); }
  uint64_t downstream() const { return down_.load(); }
  int cuts() const { return cuts_.load(); }
  int accepted() const { return accepted_.load(); }
  int refused() const { return refused_.load(); }

 private:
  struct Pair {
    int fd[2];              // 0: client side, 1: server side
    std::string pending[2]; // bytes waiting to be written to fd[i]
    std::chrono::steady_clock::time_point hold_until{};  // the client's bytes wait until then (delayJoins)
  };
  void loop();
  void cutAllLocked();
  void wake();

  uint16_t target_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false}, refuse_{false}, cut_now_{false}, cut_newest_{false};
  std::atomic<int> open_{0};
  std::atomic<uint64_t> up_{0}, down_{0};
  std::atomic<uint64_t> up_mark_{UINT64_MAX}, down_mark_{UINT64_MAX};
  std::atomic<int> cuts_{0}, accepted_{0}, refused_{0};
  std::atomic<int> refuse_after_cut_ms_{0};
  std::atomic<int> delay_after_{0}, delay_ms_{0};
  std::chrono::steady_clock::time_point refuse_until_{};  // the proxy thread's
  std::vector<Pair> pairs_;  // the proxy thread's
  std::thread thread_;
};

}  // namespace rgpu::test
