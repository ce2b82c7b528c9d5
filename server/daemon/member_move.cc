#include "server/daemon/member_move.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>

#include "common/log.h"
#include "server/pool/fd_passing.h"
#include "server/pool/pool_link.h"

namespace rgpu::server {

namespace {

constexpr char kLinkLabel[] = "rgpu member move v1";

std::string hex(const uint8_t* p, size_t n) { return toHex(std::string(reinterpret_cast<const char*>(p), n)); }

uint64_t toU64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

// `bytes` from `conn` into a new file at `path` (0600); `progress` after each piece.
Status receiveFile(common::TlsConnection& conn, const std::string& path, uint64_t bytes,
                   const std::function<void()>& progress) {
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return Status(err::kUnknown, "cannot make the checkpoint file: " + std::string(std::strerror(errno)));
  std::vector<char> buf(1 << 20);
  Status got;
  for (uint64_t left = bytes; left > 0 && got;) {
    progress();
    auto n = conn.readSome(buf.data(), std::min<uint64_t>(left, buf.size()));
    if (!n) {
      got = n.status();
      break;
    }
    for (size_t off = 0; off < *n;) {
      ssize_t w = ::write(fd, buf.data() + off, *n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        got = Status(err::kUnknown, std::string("writing the checkpoint: ") + std::strerror(errno));
        break;
      }
      off += static_cast<size_t>(w);
    }
    left -= *n;
  }
  ::close(fd);
  return got;
}

}  // namespace

std::string moveLinkSecret(const CheckpointKey& key, const std::string& salt) {
  std::string msg = std::string(kLinkLabel) + salt;
  uint8_t out[32];
  unsigned len = 0;
  HMAC(EVP_sha256(), key.bytes.data(), static_cast<int>(key.bytes.size()),
       reinterpret_cast<const uint8_t*>(msg.data()), msg.size(), out, &len);
  std::string secret = hex(out, len);
  OPENSSL_cleanse(out, sizeof out);
  return secret;
}

std::string MoveOffer::encode() const {
  std::string mem;
  for (uint64_t m : memory) mem += (mem.empty() ? "" : ",") + std::to_string(m);
  return joinFields({"offer", from, who.user, who.host, who.address, std::to_string(who.pid), std::to_string(session),
                     toHex(resume_id), mem,
                     std::to_string(min_cc), std::to_string(migrations)});
}

Result<MoveOffer> MoveOffer::decode(const std::string& msg) {
  auto f = splitFields(msg, 12);
  if (f.size() != 11 || f[0] != "offer") return Status(err::kInvalidValue, "not a move offer");
  MoveOffer o;
  o.from = f[1];
  o.who = {f[2], f[3], f[4], static_cast<uint32_t>(toU64(f[5]))};
  o.session = toU64(f[6]);
  o.resume_id = fromHex(f[7]);
  if (o.resume_id.size() != kMoveSaltBytes) return Status(err::kInvalidValue, "a move offer without a resume id");
  for (size_t at = 0; at < f[8].size();) {
    size_t comma = f[8].find(',', at);
    o.memory.push_back(toU64(f[8].substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (o.memory.empty() || o.memory.size() > 64) return Status(err::kInvalidValue, "a move offer of no or too many devices");
  o.min_cc = static_cast<uint32_t>(toU64(f[9]));
  o.migrations = static_cast<uint32_t>(toU64(f[10]));
  if (o.who.user.empty()) return Status(err::kInvalidValue, "a move offer without a user");
  return o;
}

Status sendMoveMessage(common::TlsConnection& conn, const std::string& msg) {
  if (msg.size() > kMaxMoveMessageBytes) return Status(err::kInvalidValue, "move message too long");
  uint32_t len = static_cast<uint32_t>(msg.size());
  std::string out(reinterpret_cast<const char*>(&len), sizeof len);
  out += msg;
  return conn.write(out.data(), out.size());
}

Result<std::string> readMoveMessage(common::TlsConnection& conn) {
  uint32_t len = 0;
  RGPU_TRY(conn.readExact(&len, sizeof len));
  if (len > kMaxMoveMessageBytes)
    return Status(err::kInvalidValue, "a move message of " + std::to_string(len) + " bytes, past the limit of " +
                                          std::to_string(kMaxMoveMessageBytes));
  std::string msg(len, '\0');
  RGPU_TRY(conn.readExact(msg.data(), len));
  return msg;
}

void moveAllAway(std::vector<uint64_t> sessions, const PoolManager& pool, DrainTarget target, SessionMover& mover) {
  // Each session with the members it was tried on and why they did not take it.
  struct Pending {
    uint64_t sid = 0;
    std::set<std::string> tried;
    std::string failures;
  };
  auto queue = std::make_shared<std::deque<Pending>>();
  for (uint64_t sid : sessions) queue->push_back({sid, {}, {}});
  auto next = std::make_shared<std::function<void()>>();
  // (`next` lives while a move's callback holds it; a move may also answer at once.)
  *next = [&pool, &mover, queue, target = std::move(target), weak = std::weak_ptr<std::function<void()>>(next)] {
    auto self = weak.lock();
    if (!self) return;
    while (!queue->empty()) {
      Pending p = std::move(queue->front());
      queue->pop_front();
      auto info = pool.moveInfo(p.sid);
      if (!info) continue;  // not admitted (queued), or ended meanwhile
      DeviceRequest req;
      req.count = static_cast<uint32_t>(info->memory.size());
      for (uint64_t m : info->memory) req.min_memory = std::max(req.min_memory, m);
      auto to = p.tried.size() < kDrainMoveTries ? target(req, p.tried) : std::nullopt;
      if (!to) {
        if (p.tried.empty())
          RGPU_LOG_WARN("drain: session {} stays until the drain deadline: no other member has room for it ({} "
                        "device(s), {} each)", p.sid, req.count, formatBytes(req.min_memory));
        else
          RGPU_LOG_WARN("drain: session {} stays until the drain deadline: {} member(s) tried: {}", p.sid,
                        p.tried.size(), p.failures);
        continue;
      }
      p.tried.insert(*to);
      mover.move(p.sid, *to, [p, to = *to, queue, self](Result<std::string> r) mutable {
        if (!r) {
          RGPU_LOG_WARN("drain: session {} not moved to member '{}': {}; trying another", p.sid, to,
                        r.status().message());
          p.failures += (p.failures.empty() ? "" : "; ") + to + ": " + r.status().message();
          queue->push_front(std::move(p));
        }
        (*self)();
      });
      return;
    }
    RGPU_LOG_INFO("drain: every session that could move has moved");
  };
  (*next)();
}

LinkDeadline::LinkDeadline(common::TlsConnection& conn) : conn_(conn) {
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && !stop_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        fired_.store(true);
        conn_.shutdown();
        return;
      }
    }
  });
}

LinkDeadline::~LinkDeadline() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LinkDeadline::arm(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    deadline_ = deadline;
  }
  cv_.notify_all();
}

struct MoveReceiver::Link {
  int fd = -1;
  std::string peer, salt;
  std::mutex mu;
  common::TlsConnection* conn = nullptr;  // mu: while the transfer runs
  std::thread thread;
  std::atomic<bool> done{false};
};

MoveReceiver::MoveReceiver(asio::io_context& io, const ServerConfig& cfg, const CheckpointKey* key,
                           common::TlsOptions tls, Hooks hooks)
    : io_(io), cfg_(cfg), key_(key), tls_(std::move(tls)), hooks_(std::move(hooks)) {}

MoveReceiver::~MoveReceiver() {
  stopping_.store(true);
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard lock(mu_);
    links.swap(links_);
  }
  for (auto& l : links) {
    {
      std::lock_guard lock(l->mu);
      if (l->conn) l->conn->shutdown();
    }
    if (l->thread.joinable()) l->thread.join();
  }
  common::wipeSecret(tls_.key_pem);
}

void MoveReceiver::take(int fd, const std::string& peer, const std::string& salt) {
  std::lock_guard lock(mu_);
  std::erase_if(links_, [](const std::shared_ptr<Link>& l) {
    if (!l->done.load()) return false;
    l->thread.join();
    return true;
  });
  if (links_.size() >= kMaxIncomingMoves) {
    common::logLimited("move-cap", "a session move offered from " + peer + " refused: " +
                                       std::to_string(links_.size()) + " moves are coming in already");
    ::close(fd);
    return;
  }
  auto l = std::make_shared<Link>();
  l->fd = fd;
  l->peer = peer;
  l->salt = salt;
  links_.push_back(l);
  l->thread = std::thread([this, l] { receive(l); });
}

bool runOnIo(asio::io_context& io, const std::atomic<bool>& stopping, std::function<void()> fn) {
  struct Call {
    std::mutex mu;
    std::condition_variable cv;
    bool ran = false, abandoned = false;
  };
  auto call = std::make_shared<Call>();
  asio::post(io, [call, fn = std::move(fn)] {
    std::lock_guard lock(call->mu);
    if (call->abandoned) return;
    fn();
    call->ran = true;
    call->cv.notify_all();
  });
  std::unique_lock lock(call->mu);
  while (!call->ran) {
    if (stopping.load()) {
      call->abandoned = true;
      return false;
    }
    call->cv.wait_for(lock, std::chrono::milliseconds(100));
  }
  return true;
}

void MoveReceiver::receive(const std::shared_ptr<Link>& link) {
  Status s = transfer(*link);
  if (!s) RGPU_LOG_WARN("a session move offered from {} did not come in: {}", link->peer, s.message());
  {
    std::lock_guard lock(link->mu);
    link->conn = nullptr;
  }
  link->done.store(true);
}

Status MoveReceiver::transfer(Link& l) {
  if (!key_) {
    ::close(l.fd);
    return Status(err::kNotSupported, "this server has no [checkpoint] dir and key_file");
  }
  if (cfg_.insecure_plaintext) {
    ::close(l.fd);
    return Status(err::kNotSupported, "sessions move between members over TLS only (insecure_plaintext is set)");
  }
  auto ctx = common::TlsContext::makeServer(tls_);
  if (!ctx) {
    ::close(l.fd);
    return ctx.status();
  }
  // A link is authenticated by the PSK of the operator's key alone.
  (*ctx)->forgetPrivateKey();
  (*ctx)->setResumeSecret(moveLinkSecret(*key_, l.salt));
  auto accepted = common::TlsConnection::accept(**ctx, l.fd, std::chrono::milliseconds(cfg_.handshake_timeout_ms));
  if (!accepted) return Status(err::kNotPermitted, "link handshake (a member with another [checkpoint] key?): " +
                                                       accepted.status().message());
  std::unique_ptr<common::TlsConnection> conn = std::move(*accepted);
  if (!conn->resumedByPsk()) return Status(err::kNotPermitted, "the link was not authenticated by the move key");
  {
    std::lock_guard lock(l.mu);
    if (stopping_.load()) return Status(err::kDevicesUnavailable, "rgpu-server is stopping");
    l.conn = conn.get();
  }
  LinkDeadline deadline(*conn);
  auto rearm = [&] { deadline.arm(std::chrono::steady_clock::now() + kMoveLinkTimeout); };
  rearm();
  auto msg = readMoveMessage(*conn);
  if (!msg) return msg.status();
  auto offer = MoveOffer::decode(*msg);
  if (!offer) return offer.status();
  const std::string who = "session " + std::to_string(offer->session) + " of member '" + offer->from + "'";
  uint64_t sid = 0;
  Placement placed;
  Status admitted = Status(err::kDevicesUnavailable, "rgpu-server is stopping");
  onIo([&] {
    auto r = hooks_.admit(*offer);
    admitted = r ? Status::ok() : r.status();
    if (r) std::tie(sid, placed) = *r;
  });
  if (!admitted) {
    (void)sendMoveMessage(*conn, joinFields({"refused", admitted.message().substr(0, 1024)}));
    return Status(admitted.code(), who + " refused: " + admitted.message());
  }
  SessionMover::Restorer restorer;
  bool started = false;
  std::string path;
  // Whatever happens from here on that is not a commit undoes the admission.
  auto callOff = [&](const Status& why) {
    onIo([&] { hooks_.discard(sid, started ? &restorer : nullptr); });
    if (!path.empty()) ::unlink(path.c_str());
    RGPU_LOG_WARN("{} (here session {}): not taken: {}", who, sid, why.message());
    return Status(why.code(), who + ": " + why.message());
  };
  RGPU_LOG_INFO("{} comes in as session {} on device(s) {}: receiving its checkpoint", who, sid,
                placementFields(placed)[0]);
  if (Status s = sendMoveMessage(*conn, "ready"); !s) return callOff(s);
  // Handed to the new worker (started on the first), with the key of its salt.
  auto handOver = [&](const std::string& verb, const std::string& file) -> Status {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    uint8_t header[kCheckpointHeaderBytes];
    if (fd < 0 || ::pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
      if (fd >= 0) ::close(fd);
      return Status(err::kInvalidValue, "the checkpoint is shorter than its header");
    }
    auto file_key = fileKeyOf(*key_, header, sizeof header);
    if (!file_key) {
      ::close(fd);
      return file_key.status();
    }
    if (!started) {
      Status spawned = Status(err::kDevicesUnavailable, "rgpu-server is stopping");
      onIo([&] {
        auto r = hooks_.start_restorer(sid, offer->resume_id);
        spawned = r ? Status::ok() : r.status();
        if (r) restorer = *r;
      });
      if (!spawned) {
        ::close(fd);
        return Status(spawned.code(), "cannot start a worker to restore it: " + spawned.message());
      }
      started = true;
    }
    std::vector<std::string> fields = {verb, fileKeyHex(*file_key), "placed"};
    auto pf = placementFields(placed);
    fields.insert(fields.end(), pf.begin(), pf.end());
    bool sent = sendWithFd(restorer.handoff, joinFields(fields), fd);
    ::close(fd);
    if (!sent) return Status(err::kUnknown, std::string("cannot hand the checkpoint over: ") + std::strerror(errno));
    return Status::ok();
  };
  // The new worker's answer: `want`, or why not.
  auto answerOf = [&](const std::string& want) -> Status {
    pollfd p{restorer.handoff, POLLIN, 0};
    int rc;
    while ((rc = ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kMoveLinkTimeout).count()))) < 0 &&
           errno == EINTR) {
    }
    std::string answer(1024, '\0');
    ssize_t n = rc == 1 ? ::recv(restorer.handoff, answer.data(), answer.size(), MSG_DONTWAIT) : -1;
    answer.resize(n > 0 ? static_cast<size_t>(n) : 0);
    auto f = splitFields(answer, 3);
    if (!answer.empty() && f[0] == want) return Status::ok();
    return Status(err::kUnknown, answer.empty() ? (rc == 1 ? "the new worker is gone" : "no answer from the new worker in time")
                                                : (f.size() > 1 ? f[1] : answer));
  };
  // A pre-copy's base may come first (placed while the program runs at the
  // source), then the checkpoint proper.
  for (;;) {
    rearm();
    auto what = readMoveMessage(*conn);
    if (!what) return callOff(what.status());
    auto f = splitFields(*what, 3);
    if (f.size() != 2 || (f[0] != "base" && f[0] != "file") || (f[0] == "base" && started))
      return callOff(Status(err::kInvalidValue, "a move message out of place"));
    const bool base = f[0] == "base";
    const uint64_t bytes = toU64(f[1]);
    uint8_t rnd[8];
    RAND_bytes(rnd, sizeof rnd);
    path = cfg_.checkpoint_dir + "/moved-in-" + std::to_string(sid) + "-" + hex(rnd, sizeof rnd) + (base ? ".base" : ".ckpt");
    Status got = receiveFile(*conn, path, bytes, rearm);
    if (got) got = handOver(base ? "prerestore" : "restore", path);
    if (got) got = answerOf(base ? "prerestored" : "restored");
    ::unlink(path.c_str());
    path.clear();
    if (!got) {
      (void)sendMoveMessage(*conn, joinFields({"failed", got.message().substr(0, 1024)}));
      return callOff(Status(got.code(), "restore: " + got.message()));
    }
    if (!base) break;
    RGPU_LOG_INFO("{} (here session {}): its pre-copy of {} is placed", who, sid, formatBytes(bytes));
    if (Status s = sendMoveMessage(*conn, "prerestored"); !s) return callOff(s);
  }
  rearm();
  if (Status s = sendMoveMessage(*conn, "restored"); !s) return callOff(s);
  auto verdict = readMoveMessage(*conn);
  if (!verdict || *verdict != "commit")
    return callOff(verdict ? Status(err::kUnknown, "the source called the move off")
                           : Status(verdict.status().code(), "no verdict from the source: " + verdict.status().message()));
  bool adopted = onIo([&] { hooks_.adopt(sid, restorer, *offer); });
  if (!adopted) return callOff(Status(err::kDevicesUnavailable, "rgpu-server is stopping"));
  const std::string go = "go";
  (void)::send(restorer.handoff, go.data(), go.size(), MSG_NOSIGNAL);
  (void)sendMoveMessage(*conn, "committed");
  RGPU_LOG_INFO("{} moved here: it is session {} now, worker {}", who, sid, restorer.pid);
  return Status::ok();
}

}  // namespace rgpu::server
