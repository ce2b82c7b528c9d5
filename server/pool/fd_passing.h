// Handing a socket from the daemon to a worker (SCM_RIGHTS over an AF_UNIX
// socket): how a resumed client's new connection reaches the worker that holds
// its session.
#pragma once

#include <sys/types.h>

#include <string>

namespace rgpu::server {

// Sends `fd` over `sock`; false with errno set on failure. The caller still
// owns (and closes) its copy of `fd`.
bool sendFd(int sock, int fd);
// Receives one descriptor (close-on-exec); -1 with errno set when none came
// (errno 0: the peer closed `sock`).
int receiveFd(int sock);

// A message with at most one descriptor beside it (the control socket's
// replies: a launch gate page comes with some). sendWithFd: false with errno
// set. receiveWithFd: the message's length as recv() returns it, the
// descriptor (close-on-exec) in `fd` or -1; `buf` is filled up to its size.
bool sendWithFd(int sock, const std::string& msg, int fd);
ssize_t receiveWithFd(int sock, std::string& buf, int& fd);

}  // namespace rgpu::server
