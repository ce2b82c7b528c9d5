#include "server/pool/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rgpu::server {

namespace {
bool sendMessageWithFd(int sock, const char* data, size_t len, int fd, int flags) {
  iovec iov{const_cast<char*>(data), len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return ::sendmsg(sock, &m, MSG_NOSIGNAL | flags) == static_cast<ssize_t>(len);
}
}  // namespace

bool sendFd(int sock, int fd) { return sendMessageWithFd(sock, "F", 1, fd, MSG_DONTWAIT); }

bool sendWithFd(int sock, const std::string& msg, int fd) { return sendMessageWithFd(sock, msg.data(), msg.size(), fd, 0); }

ssize_t receiveWithFd(int sock, std::string& buf, int& fd) {
  fd = -1;
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); n >= 0 && c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = std::min<size_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int), 4);
    int fds[4] = {-1, -1, -1, -1};
    std::memcpy(fds, CMSG_DATA(c), count * sizeof(int));
    for (size_t i = 0; i < count; ++i) {
      if (fd < 0) fd = fds[i];
      else ::close(fds[i]);  // one at most
    }
  }
  return n;
}

int receiveFd(int sock) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n <= 0) {
    if (n == 0) errno = 0;
    return -1;
  }
  // Anything but exactly one descriptor is not from the daemon: drop it.
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int fds[4] = {-1, -1, -1, -1};
    std::memcpy(fds, CMSG_DATA(c), std::min<size_t>(count, 4) * sizeof(int));
    for (size_t i = 0; i < std::min<size_t>(count, 4); ++i) {
      if (fd < 0) fd = fds[i];
      else ::close(fds[i]);
    }
  }
  if (fd < 0) errno = EAGAIN;
  return fd;
}

}  // namespace rgpu::server
