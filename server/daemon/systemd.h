// rgpu-server under systemd: readiness and state for a Type=notify unit
// (packaging/systemd/rgpu-server.service), and log lines to the journal with
// fields of their own.
//
// Notify: sd_notify(3) through Debian's libsystemd; without $NOTIFY_SOCKET
// (not started by systemd) each call does nothing. The daemon says READY=1
// once it listens (and has written its port file), RELOADING=1 / READY=1
// around a SIGHUP reload, STOPPING=1 when it starts draining, with a STATUS=
// line systemctl status shows. The unit's NotifyAccess=main makes systemd
// ignore what any other process (a worker) sends there.
//
// Journal: when the process's stderr is the journal (systemd sets
// $JOURNAL_STREAM to its device and inode, which is what is compared), log
// lines go to the journal natively instead: MESSAGE (control characters
// escaped, as on stderr), PRIORITY from the level, SYSLOG_IDENTIFIER
// rgpu-server, RGPU_COMPONENT (rgpu-server or rgpu-worker) and, in a worker,
// RGPU_SESSION — so `journalctl -u rgpu-server RGPU_SESSION=42` is one
// session's story. Elsewhere nothing changes (stderr, as before).
#pragma once

#include <cstdint>
#include <string>

namespace rgpu::server {

// Whether stderr is the journal ($JOURNAL_STREAM names it).
bool stderrIsJournal();
// Sends this process's log lines to the journal with the fields above;
// `session` 0: the daemon (no RGPU_SESSION). Call once, before other threads log.
void logToJournal(const std::string& component, uint64_t session);
// sd_notify(0, state): "READY=1\nSTATUS=...". No-op outside systemd.
void notifySystemd(const std::string& state);

}  // namespace rgpu::server
