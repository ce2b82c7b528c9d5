#include "tests/support/cut_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include "tests/support/test_env.h"

namespace rgpu::test {
namespace {

void resetClose(int fd) {
  linger l{1, 0};  // close with RST: the peer sees the connection drop
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

int connectTarget(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

constexpr size_t kChunk = 64 * 1024;
constexpr size_t kMaxPending = 1 << 20;

}  // namespace

CutProxy::CutProxy(uint16_t target_port) : target_(target_port) {
  listen_fd_ = listenLoopback(&port_);
  fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { loop(); });
}

CutProxy::~CutProxy() {
  stop_.store(true);
  wake();
  thread_.join();
  for (auto& p : pairs_) {
    ::close(p.fd[0]);
    ::close(p.fd[1]);
  }
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void CutProxy::wake() {
  uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(wake_fd_, &one, sizeof one);
}

void CutProxy::cutNow() {
  cut_now_.store(true);
  wake();
}
void CutProxy::cutNewest() {
  cut_newest_.store(true);
  wake();
}
void CutProxy::cutAtUpstream(uint64_t mark) {
  up_mark_.store(mark);
  wake();
}
void CutProxy::cutAtDownstream(uint64_t mark) {
  down_mark_.store(mark);
  wake();
}

void CutProxy::cutAllLocked() {
  for (auto& p : pairs_) {
    resetClose(p.fd[0]);
    resetClose(p.fd[1]);
  }
  pairs_.clear();
  if (int ms = refuse_after_cut_ms_.exchange(0))
    refuse_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  cuts_.fetch_add(1);
}

void CutProxy::loop() {
  while (!stop_.load()) {
    if (cut_now_.exchange(false)) cutAllLocked();
    if (cut_newest_.exchange(false) && !pairs_.empty()) {
      resetClose(pairs_.back().fd[0]);
      resetClose(pairs_.back().fd[1]);
      pairs_.pop_back();
      cuts_.fetch_add(1);
    }
    open_.store(static_cast<int>(pairs_.size()));
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const auto now = std::chrono::steady_clock::now();
    int timeout_ms = 200;
    for (auto& p : pairs_)
      for (int i = 0; i < 2; ++i) {
        short ev = 0;
        const bool held = i == 0 && now < p.hold_until;
        if (held)
          timeout_ms = std::min<int>(timeout_ms, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
                                                                       p.hold_until - now).count()));
        if (!held && p.pending[1 - i].size() < kMaxPending) ev |= POLLIN;  // read from i, to be written to the other
        if (!p.pending[i].empty()) ev |= POLLOUT;
        fds.push_back({held ? -1 : p.fd[i], ev, 0});  // (poll skips a negative fd: not even a hang-up is seen)
      }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
    if (fds[1].revents) {
      uint64_t v;
      [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
    }
    if (fds[0].revents & POLLIN) {
      int c;
      while ((c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
        accepted_.fetch_add(1);
        bool refusing = refuse_.load() || std::chrono::steady_clock::now() < refuse_until_;
        int s = refusing ? -1 : connectTarget(target_);
        if (s < 0) {
          refused_.fetch_add(1);
          resetClose(c);
          continue;
        }
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pairs_.push_back({{c, s}, {}});
        if (int ms = delay_ms_.load(); ms > 0 && accepted_.load() > delay_after_.load())
          pairs_.back().hold_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
      }
    }
    bool cut = false;
    std::vector<size_t> dead;
    for (size_t k = 0; k < pairs_.size() && !cut; ++k) {
      Pair& p = pairs_[k];
      for (int i = 0; i < 2 && !cut; ++i) {
        // fds index: 2 + 2k + i (pairs_ may have grown by accepts: those are not polled yet)
        size_t at = 2 + 2 * k + static_cast<size_t>(i);
        if (at >= fds.size()) break;
        short re = fds[at].revents;
        if (re & POLLOUT && !p.pending[i].empty()) {
          ssize_t n = ::send(p.fd[i], p.pending[i].data(), p.pending[i].size(), MSG_NOSIGNAL);
          if (n > 0) p.pending[i].erase(0, static_cast<size_t>(n));
          else if (n < 0 && errno != EAGAIN) dead.push_back(k);
        }
        if (re & (POLLIN | POLLHUP | POLLERR)) {
          char buf[kChunk];
          ssize_t n = ::recv(p.fd[i], buf, sizeof buf, 0);
          if (n == 0 || (n < 0 && errno != EAGAIN)) {
            dead.push_back(k);
            continue;
          }
          if (n < 0) continue;
          // Up: client (0) to server; down: server (1) to client.
          auto& total = i == 0 ? up_ : down_;
          uint64_t mark = (i == 0 ? up_mark_ : down_mark_).load();
          uint64_t before = total.load(), take = static_cast<uint64_t>(n);
          if (before + take >= mark) {
            take = mark > before ? mark - before : 0;
            cut = true;
            (i == 0 ? up_mark_ : down_mark_).store(UINT64_MAX);
          }
          total.fetch_add(take);
          p.pending[1 - i].append(buf, static_cast<size_t>(take));
          if (cut) {
            // The part before the mark still reaches the other side, then the reset.
            ::send(p.fd[1 - i], p.pending[1 - i].data(), p.pending[1 - i].size(), MSG_NOSIGNAL);
            p.pending[1 - i].clear();
          }
        }
      }
    }
    if (cut) {
      cutAllLocked();
      continue;
    }
    std::sort(dead.begin(), dead.end());
    dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
    for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
      // One side went away: so does the other, the same way (a reset).
      resetClose(pairs_[*it].fd[0]);
      resetClose(pairs_[*it].fd[1]);
      pairs_.erase(pairs_.begin() + static_cast<long>(*it));
    }
  }
}

}  // namespace rgpu::test
