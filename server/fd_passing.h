// Handing a socket from the daemon to a worker (SCM_RIGHTS over an AF_UNIX
// socket): how a resumed client's new connection reaches the worker that holds
// its session.
#pragma once

namespace rgpu::server {

// Sends `fd` over `sock`; false with errno set on failure. The caller still
// owns (and closes) its copy of `fd`.
bool sendFd(int sock, int fd);
// Receives one descriptor (close-on-exec); -1 with errno set when none came
// (errno 0: the peer closed `sock`).
int receiveFd(int sock);

}  // namespace rgpu::server
