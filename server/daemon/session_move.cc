#include "server/daemon/session_move.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/tls.h"
#include "common/log.h"
#include "server/daemon/member_move.h"
#include "server/pool/fd_passing.h"
#include "server/pool/pool_link.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

struct SessionMover::Move {
  uint64_t session = 0;
  pid_t old_pid = -1;
  int old_handoff = -1;  // our own copy of the daemon's end (the worker may be reaped meanwhile)
  std::string member, address;  // a move to another member: its name and host:port
  MoveOffer offer;
  std::string path;      // the checkpoint file
  std::string base_path;  // the pre-copy's base ("": none)
  bool base_placed = false;  // the new worker holds the base: the checkpoint is written against it
  CheckpointFileKey base_key;
  std::string precopy_note;  // what the pre-copy did, for the move's line
  std::chrono::steady_clock::time_point paused_at;  // the checkpoint was asked for: the program waits from here
  CheckpointFileKey key;
  Restorer restorer;
  std::function<void(Result<std::string>)> done;
  std::chrono::steady_clock::time_point started, deadline, checkpointed_at;
  std::string sizes;  // "N MiB of state, M MiB stored"
  std::string drain_ms = "?";  // of the checkpoint's time, waiting for the session's queued work
  std::unique_ptr<asio::posix::stream_descriptor> waiting;  // the socket a step waits on
  std::unique_ptr<asio::steady_timer> timer;
  bool over = false;
  std::mutex link_mu;
  std::unique_ptr<common::TlsConnection> link_conn;  // a move to another member's link, once open
  common::TlsConnection* link = nullptr;  // link_mu: the same, for the destructor's shutdown
  ~Move() {
    if (old_handoff >= 0) ::close(old_handoff);
  }
};

SessionMover::SessionMover(asio::io_context& io, const ServerConfig& cfg, std::unique_ptr<CheckpointKey> key,
                           Hooks hooks)
    : io_(io), cfg_(cfg), key_(std::move(key)), hooks_(std::move(hooks)) {}

SessionMover::~SessionMover() {
  stopping_.store(true);
  for (auto& l : links_) {
    {
      std::lock_guard lock(l.move->link_mu);
      if (l.move->link) l.move->link->shutdown();
    }
    if (l.thread.joinable()) l.thread.join();
  }
}

namespace {


int64_t msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void SessionMover::move(uint64_t session, const std::string& member, std::function<void(Result<std::string>)> done,
                        int tries) {
  const std::string who = "session " + std::to_string(session);
  if (!key_)
    return done(Status(err::kNotSupported, "sessions are not moved: this server has no [checkpoint] dir and key_file"));
  if (moves_.count(session)) return done(Status(err::kNotReady, who + " is being moved already"));
  auto m = std::make_shared<Move>();
  m->session = session;
  if (!member.empty()) {
    if (cfg_.insecure_plaintext)
      return done(Status(err::kNotSupported, "sessions move between members over TLS only (insecure_plaintext is set)"));
    auto address = hooks_.member_address(member);
    if (!address && address.status().code() == err::kInvalidValue && tries > 0) {
      // A member that has not read the pool lately reads it now: ask again shortly.
      auto t = std::make_shared<asio::steady_timer>(io_, kMemberLookupRetry);
      t->async_wait([this, t, session, member, done = std::move(done), tries](const asio::error_code& ec) mutable {
        if (!ec) move(session, member, std::move(done), tries - 1);
      });
      return;
    }
    if (!address) return done(address.status());
    auto offer = hooks_.offer(session);
    if (!offer) return done(offer.status());
    m->member = member;
    m->address = *address;
    m->offer = *offer;
  }
  int handoff = -1;
  if (!hooks_.current(session, &m->old_pid, &handoff))
    return done(Status(err::kInvalidValue, who + " is not running on this server"));
  if (!hooks_.resumable(session))
    return done(Status(err::kNotSupported, who + " cannot move: its client does not resume after a dropped connection "
                                                 "(client resume = false, [session] resume_grace_ms = 0, or a "
                                                 "monitor session)"));
  m->old_handoff = ::fcntl(handoff, F_DUPFD_CLOEXEC, 3);
  if (m->old_handoff < 0) return done(Status(err::kUnknown, std::string("dup: ") + std::strerror(errno)));
  auto key = newFileKey(*key_);
  if (!key) return done(key.status());
  m->key = *key;
  uint8_t rnd[8];
  RAND_bytes(rnd, sizeof rnd);
  char name[96];
  std::snprintf(name, sizeof name, "/session-%llu-%02x%02x%02x%02x%02x%02x%02x%02x.ckpt",
                static_cast<unsigned long long>(session), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6],
                rnd[7]);
  m->path = cfg_.checkpoint_dir + name;
  int fd = ::open(m->path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0)
    return done(Status(err::kUnknown, "cannot make the checkpoint file " + m->path + ": " + std::strerror(errno)));
  ::close(fd);
  m->done = std::move(done);
  m->started = std::chrono::steady_clock::now();
  m->timer = std::make_unique<asio::steady_timer>(io_);
  moves_[session] = m;
  if (m->member.empty()) RGPU_LOG_INFO("{}: moving it to a new worker (checkpoint {})", who, m->path);
  else RGPU_LOG_INFO("{}: moving it to member '{}' at {} (checkpoint {})", who, m->member, m->address, m->path);
  if (!cfg_.checkpoint_precopy) return askCheckpoint(m);
  // Pre-copy first, while the program runs: the base, with a file and key of its own.
  auto base_key = newFileKey(*key_);
  int base = base_key ? ::open((m->path + ".base").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600) : -1;
  if (base < 0) {
    m->precopy_note = "no pre-copy: cannot make its file";
    return askCheckpoint(m);
  }
  m->base_path = m->path + ".base";
  m->base_key = *base_key;
  m->deadline = m->started + kPrecopyTimeout;
  bool sent = sendWithFd(m->old_handoff, joinFields({"precopy", fileKeyHex(m->base_key)}), base);
  ::close(base);
  if (!sent) return fail(m, std::string("cannot ask its worker for a pre-copy: ") + std::strerror(errno));
  expect(m, m->old_handoff, [this, m](Result<std::string> a) { precopied(m, std::move(a)); });
}

void SessionMover::dropBase(const std::shared_ptr<Move>& m, const std::string& why) {
  if (!why.empty()) {
    RGPU_LOG_WARN("session {}: moving it without a pre-copy: {}", m->session, why);
    m->precopy_note = "no pre-copy: " + why;
  }
  if (!m->base_path.empty()) ::unlink(m->base_path.c_str());
  m->base_path.clear();
}

void SessionMover::precopied(const std::shared_ptr<Move>& m, Result<std::string> answer) {
  auto f = answer ? splitFields(*answer, 6) : std::vector<std::string>{};
  if (!answer || f[0] != "precopied" || f.size() < 5) {
    const std::string why = !answer ? answer.status().message() : f.size() > 1 ? f[1] : *answer;
    // A session that cannot be checkpointed now is not moved (as without a
    // pre-copy); one whose backend cannot be read while it runs, or that
    // sent no request to start it, moves without.
    if (why.rfind("cannot be checkpointed", 0) == 0) return fail(m, why);
    dropBase(m, why);
    return askCheckpoint(m);
  }
  const uint64_t bytes = std::strtoull(f[1].c_str(), nullptr, 10);
  m->precopy_note = "pre-copy of " + formatBytes(bytes) + " in " + f[3] + " ms while it ran";
  if (!m->member.empty()) {
    // To the target over the link, placed there by its new worker, while the program runs.
    m->offer.min_cc = static_cast<uint32_t>(std::strtoul(f[4].c_str(), nullptr, 10));
    auto t0 = std::chrono::steady_clock::now();
    return onLink(
        m,
        [this](Move& mv) {
          RGPU_TRY(linkOpen(mv));
          return linkSend(mv, "base", mv.base_path, "prerestored");
        },
        [this, m, t0] {
          m->precopy_note += ", sent and placed by member '" + m->member + "' in " + std::to_string(msSince(t0)) + " ms";
          m->base_placed = true;
          dropBase(m, "");
          askCheckpoint(m);
        });
  }
  // A new worker places the base, also while the program runs.
  auto p = hooks_.placement(m->session);
  if (!p) return fail(m, "it ended during the pre-copy");
  auto r = hooks_.start_restorer(m->session);
  if (!r) return fail(m, "cannot start a worker to restore it: " + r.status().message());
  m->restorer = *r;
  int fd = ::open(m->base_path.c_str(), O_RDONLY | O_CLOEXEC);
  std::vector<std::string> fields = {"prerestore", fileKeyHex(m->base_key), "placed"};
  auto pf = placementFields(*p);
  fields.insert(fields.end(), pf.begin(), pf.end());
  bool sent = fd >= 0 && sendWithFd(m->restorer.handoff, joinFields(fields), fd);
  if (fd >= 0) ::close(fd);
  if (!sent) return fail(m, std::string("cannot hand the pre-copy to the new worker: ") + std::strerror(errno));
  auto t0 = std::chrono::steady_clock::now();
  expect(m, m->restorer.handoff, [this, m, t0](Result<std::string> a) {
    if (!a) return fail(m, "restore: " + a.status().message());
    if (*a != "prerestored") {
      auto f = splitFields(*a, 3);
      return fail(m, "restore: " + (f.size() > 1 ? f[1] : *a));
    }
    m->precopy_note += ", placed by the new worker in " + std::to_string(msSince(t0)) + " ms";
    m->base_placed = true;
    dropBase(m, "");
    askCheckpoint(m);
  });
}

void SessionMover::askCheckpoint(const std::shared_ptr<Move>& m) {
  m->paused_at = std::chrono::steady_clock::now();
  // The client reconnects from here on: it must find the session in the
  // end, so the rest of the move stays well within its grace period.
  m->deadline = m->paused_at + std::chrono::milliseconds(cfg_.resume_grace_ms * 3 / 4);
  int fd = ::open(m->path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return fail(m, "cannot open the checkpoint file: " + std::string(std::strerror(errno)));
  // "base": only what changed since the pre-copy this move's new worker holds;
  // "whole": everything (a base from an earlier move that failed is not held).
  bool sent = sendWithFd(m->old_handoff,
                         joinFields({"checkpoint", fileKeyHex(m->key), m->base_placed ? "base" : "whole"}), fd);
  ::close(fd);
  if (!sent) return fail(m, std::string("cannot ask its worker for a checkpoint: ") + std::strerror(errno));
  expect(m, m->old_handoff, [this, m](Result<std::string> a) { checkpointed(m, std::move(a)); });
}

void SessionMover::expect(const std::shared_ptr<Move>& m, int fd, std::function<void(Result<std::string>)> then) {
  int mine = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (mine < 0) return then(Status(err::kUnknown, std::string("dup: ") + std::strerror(errno)));
  m->waiting = std::make_unique<asio::posix::stream_descriptor>(io_, mine);
  auto step_deadline = std::min(m->deadline, std::chrono::steady_clock::now() + kMoveStepTimeout +
                                                 std::chrono::milliseconds(cfg_.checkpoint_drain_timeout_ms));
  m->timer->expires_at(step_deadline);
  auto fired = std::make_shared<bool>(false);
  m->timer->async_wait([m, fired](const asio::error_code& ec) {
    if (ec || *fired) return;
    *fired = true;
    asio::error_code ignored;
    if (m->waiting) m->waiting->cancel(ignored);
  });
  m->waiting->async_wait(asio::posix::descriptor_base::wait_read,
                         [m, fd, fired, then = std::move(then)](const asio::error_code& ec) {
                           bool timed_out = *fired;
                           *fired = true;
                           m->timer->cancel();
                           if (m->over) return;
                           if (ec || timed_out)
                             return then(Status(err::kNotReady, timed_out ? "no answer in time" : ec.message()));
                           std::string msg(1024, '\0');
                           ssize_t n = ::recv(fd, msg.data(), msg.size(), MSG_DONTWAIT);
                           if (n <= 0) return then(Status(err::kUnknown, "the worker is gone"));
                           msg.resize(static_cast<size_t>(n));
                           then(msg);
                         });
}

void SessionMover::checkpointed(const std::shared_ptr<Move>& m, Result<std::string> answer) {
  if (!answer)
    return fail(m, "checkpoint: " + answer.status().message());
  auto f = splitFields(*answer, 5);
  if (f[0] == "precopied" || f[0] == "precopy-refused")  // a pre-copy's late answer
    return expect(m, m->old_handoff, [this, m](Result<std::string> a) { checkpointed(m, std::move(a)); });
  if (f[0] == "refused") return fail(m, f.size() > 1 ? f[1] : "refused");
  if (f[0] != "checkpointed" || f.size() < 3) return fail(m, "checkpoint: an answer the daemon does not know");
  m->checkpointed_at = std::chrono::steady_clock::now();
  m->sizes = formatBytes(std::strtoull(f[1].c_str(), nullptr, 10)) + " of state, " +
             formatBytes(std::strtoull(f[2].c_str(), nullptr, 10)) + " written";
  if (f.size() > 3) m->drain_ms = f[3];
  if (!m->member.empty()) {
    // (A pre-copy opened the link already.)
    if (!m->link) m->offer.min_cc = f.size() > 4 ? static_cast<uint32_t>(std::strtoul(f[4].c_str(), nullptr, 10)) : 0;
    return onLink(
        m,
        [this](Move& mv) {
          if (!mv.link) RGPU_TRY(linkOpen(mv));
          RGPU_TRY(linkSend(mv, "file", mv.path, "restored"));
          return linkCommit(mv);
        },
        [this, m] { movedAway(m); });
  }
  if (m->restorer.pid <= 0) {  // (a pre-copy started it already)
    auto r = hooks_.start_restorer(m->session);
    if (!r) return fail(m, "cannot start a worker to restore it: " + r.status().message());
    m->restorer = *r;
  }
  int fd = ::open(m->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(m, "cannot reopen the checkpoint: " + std::string(std::strerror(errno)));
  bool sent = sendWithFd(m->restorer.handoff, joinFields({"restore", fileKeyHex(m->key)}), fd);
  ::close(fd);
  if (!sent) return fail(m, std::string("cannot hand the checkpoint to the new worker: ") + std::strerror(errno));
  expect(m, m->restorer.handoff, [this, m](Result<std::string> a) { restored(m, std::move(a)); });
}

void SessionMover::restored(const std::shared_ptr<Move>& m, Result<std::string> answer) {
  if (!answer) return fail(m, "restore: " + answer.status().message());
  auto f = splitFields(*answer, 3);
  if (f[0] != "restored") return fail(m, "restore: " + (f.size() > 1 ? f[1] : *answer));
  const std::string who = "session " + std::to_string(m->session);
  pid_t pid = -1;
  int handoff = -1;
  if (!hooks_.current(m->session, &pid, &handoff) || pid != m->old_pid)
    return fail(m, "its worker ended during the move");
  // Commit: from here on the new worker is the session's.
  m->over = true;
  moves_.erase(m->session);
  const std::string commit = "commit", go = "go";
  if (::send(m->old_handoff, commit.data(), commit.size(), MSG_NOSIGNAL) < 0)
    RGPU_LOG_WARN("{}: the old worker did not take 'commit' ({}); it ends with the daemon's SIGKILL", who,
                  std::strerror(errno));
  hooks_.commit(m->session, m->restorer, m->old_pid);
  (void)::send(m->restorer.handoff, go.data(), go.size(), MSG_NOSIGNAL);
  ::unlink(m->path.c_str());
  hooks_.release(m->session);
  int64_t total = msSince(m->paused_at), restore = msSince(m->checkpointed_at);
  std::string line = who + " moved to a new worker in " + std::to_string(total) + " ms (checkpoint " +
                     std::to_string(total - restore) + " ms of which " + m->drain_ms +
                     " ms waiting for its queued work, restore " + std::to_string(restore) + " ms; " + m->sizes +
                     (m->precopy_note.empty() ? "" : "; " + m->precopy_note) + ")";
  RGPU_LOG_INFO("{}", line);
  m->done(line);
}

void SessionMover::fail(const std::shared_ptr<Move>& m, const std::string& why) {
  m->over = true;
  m->timer->cancel();
  moves_.erase(m->session);
  const std::string who = "session " + std::to_string(m->session);
  RGPU_LOG_WARN("{}: not moved, it carries on in its worker: {}", who, why);
  const std::string abort = "abort";
  (void)::send(m->old_handoff, abort.data(), abort.size(), MSG_NOSIGNAL);
  if (m->restorer.pid > 0) hooks_.discard(m->session, m->restorer);
  {
    // A target waiting on the link calls its part off at once.
    std::lock_guard lock(m->link_mu);
    if (m->link) m->link->shutdown();
  }
  ::unlink(m->path.c_str());
  dropBase(m, "");
  hooks_.release(m->session);
  m->done(Status(err::kUnknown, who + " not moved: " + why));
}

void SessionMover::onLink(const std::shared_ptr<Move>& m, std::function<Status(Move&)> work,
                          std::function<void()> then) {
  // Threads of steps that ended go first.
  std::erase_if(links_, [](Link& l) {
    if (!l.done->load()) return false;
    l.thread.join();
    return true;
  });
  auto done = std::make_shared<std::atomic<bool>>(false);
  links_.push_back({m, done, std::thread([this, m, done, work = std::move(work), then = std::move(then)] {
                      Status s = work(*m);
                      if (!stopping_.load())
                        asio::post(io_, [this, m, s, then] {
                          if (m->over) return;
                          if (!s) return fail(m, s.message());
                          then();
                        });
                      done->store(true);
                    })});
}

Status SessionMover::linkOpen(Move& m) {
  auto hp = common::parseHostPort(m.address);
  if (!hp) return Status(err::kInvalidValue, "member '" + m.member + "' advertises " + m.address + ": " + hp.status().message());
  // No certificate on either side: the link's PSK is the operator's key's.
  auto ctx = common::TlsContext::makeClient(common::TlsOptions());
  if (!ctx) return ctx.status();
  std::string salt(kMoveSaltBytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(salt.data()), static_cast<int>(salt.size()));
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(m.deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return Status(err::kNotReady, "no time left to reach member '" + m.member + "'");
  auto conn = common::TlsConnection::connect(**ctx, hp->first, hp->second, "",
                                             std::min<std::chrono::milliseconds>(left, std::chrono::seconds(10)),
                                             std::string(kMoveMagic, sizeof kMoveMagic) + salt,
                                             moveLinkSecret(*key_, salt));
  if (!conn) return Status(err::kDevicesUnavailable, "cannot reach member '" + m.member + "' at " + m.address + ": " +
                                                         conn.status().message());
  {
    std::lock_guard lock(m.link_mu);
    if (stopping_.load()) return Status(err::kDevicesUnavailable, "rgpu-server is stopping");
    m.link_conn = std::move(*conn);
    m.link = m.link_conn.get();
  }
  LinkDeadline deadline(*m.link);
  deadline.arm(m.deadline);
  RGPU_TRY(sendMoveMessage(*m.link, m.offer.encode()));
  auto ready = readMoveMessage(*m.link);
  if (!ready) return Status(ready.status().code(), "member '" + m.member + "': " + ready.status().message());
  auto f = splitFields(*ready, 3);
  if (f[0] != "ready")
    return Status(err::kUnknown, "member '" + m.member + "' refused it: " + (f.size() > 1 ? f[1] : *ready));
  return Status::ok();
}

Status SessionMover::linkSend(Move& m, const std::string& what, const std::string& path, const std::string& answer) {
  common::TlsConnection& link = *m.link;
  LinkDeadline deadline(link);
  deadline.arm(m.deadline);
  auto late = [&](const Status& s) {
    return deadline.fired() ? Status(err::kNotReady, "member '" + m.member + "' took longer than the move may ("
                                                     "three quarters of [session] resume_grace_ms once the program "
                                                     "waits; kPrecopyTimeout for a pre-copy)")
                            : s;
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) ::close(fd);
    return Status(err::kUnknown, std::string("cannot reopen the checkpoint: ") + std::strerror(errno));
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  Status s = sendMoveMessage(link, joinFields({what, std::to_string(bytes)}));
  std::vector<char> buf(1 << 20);
  for (uint64_t sent = 0; s && sent < bytes;) {
    ssize_t n = ::read(fd, buf.data(), std::min<uint64_t>(buf.size(), bytes - sent));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s = Status(err::kUnknown, "the checkpoint is shorter than it was written");
      break;
    }
    s = link.write(buf.data(), static_cast<size_t>(n));
    sent += static_cast<uint64_t>(n);
  }
  ::close(fd);
  if (!s) return late(Status(s.code(), "sending the checkpoint to member '" + m.member + "': " + s.message()));
  auto got = readMoveMessage(link);
  if (!got) return late(Status(got.status().code(), "member '" + m.member + "' during the restore: " +
                                                        got.status().message()));
  auto f = splitFields(*got, 3);
  if (f[0] != answer) return Status(err::kUnknown, "restore at member '" + m.member + "': " + (f.size() > 1 ? f[1] : *got));
  return Status::ok();
}

Status SessionMover::linkCommit(Move& m) {
  common::TlsConnection& link = *m.link;
  LinkDeadline deadline(link);
  deadline.arm(m.deadline);
  // The session must still be in the worker it was checkpointed from.
  bool still = false;
  runOnIo(io_, stopping_, [&] {
    pid_t pid = -1;
    int handoff = -1;
    still = !m.over && hooks_.current(m.session, &pid, &handoff) && pid == m.old_pid;
  });
  if (!still) {
    (void)sendMoveMessage(link, "abort");
    return Status(err::kUnknown, "its worker ended during the move");
  }
  RGPU_TRY(sendMoveMessage(link, "commit"));
  auto committed = readMoveMessage(link);
  // Without the word, the target may or may not serve it: the client stays
  // here (the target's copy waits for a client that never comes, and ends).
  if (!committed || *committed != "committed")
    return Status(err::kUnknown, "member '" + m.member + "' did not confirm the commit" +
                                     (committed ? std::string() : ": " + committed.status().message()));
  return Status::ok();
}

void SessionMover::movedAway(const std::shared_ptr<Move>& m) {
  const std::string who = "session " + std::to_string(m->session);
  m->over = true;
  m->timer->cancel();
  moves_.erase(m->session);
  // The old worker sends its client there (the connections held meanwhile first), then ends.
  const std::string forward = joinFields({"forward", m->address, m->member});
  if (::send(m->old_handoff, forward.data(), forward.size(), MSG_NOSIGNAL) < 0)
    RGPU_LOG_WARN("{}: the old worker did not take 'forward' ({}); its client cannot find member '{}'", who,
                  std::strerror(errno), m->member);
  hooks_.moved_away(m->session, m->member);
  ::unlink(m->path.c_str());
  hooks_.release(m->session);
  int64_t total = msSince(m->paused_at), restore = msSince(m->checkpointed_at);
  std::string line = who + " moved to member '" + m->member + "' in " + std::to_string(total) + " ms (checkpoint " +
                     std::to_string(total - restore) + " ms of which " + m->drain_ms +
                     " ms waiting for its queued work, transfer and restore " + std::to_string(restore) + " ms; " +
                     m->sizes + (m->precopy_note.empty() ? "" : "; " + m->precopy_note) + ")";
  RGPU_LOG_INFO("{}", line);
  m->done(line);
}

}  // namespace rgpu::server
