// Moving a session to another member of the pool (rgpu-smi --migrate ID --to
// MEMBER, [pool] drain = "migrate"; docs/migration.md): the link between the
// two daemons. The source's side of the move is SessionMover's
// (session_move.h); this file holds the wire and the target's side.
//
// The link. The source connects to the target's advertised address (the
// port clients use) and writes the move preamble, kMoveMagic and 16 random
// bytes of salt, on the bare socket: the target's daemon routes it as it
// routes a resume preamble. TLS 1.3 follows, authenticated by an external PSK
// both ends derive from the operator's [checkpoint] key and the salt
// (moveLinkSecret): only members holding the same key file move sessions
// between them, and no certificate is involved. Then messages, each a u32
// length and joinFields() text of at most kMaxMoveMessageBytes:
//
//   source  "offer"  the session (MoveOffer)
//   target  "ready"  it admitted the session on its devices, or "refused|why"
//  [source  "base|N" and a pre-copy's base, N raw bytes (the program runs)
//   target  "prerestored" once a new worker placed it, or "failed|why"]
//   source  "file|N" and the checkpoint, N raw bytes (the program waits)
//   target  "restored" once the new worker rebuilt the session, or "failed|why"
//   source  "commit" or "abort"
//   target  "committed" once the new worker serves the session
//
// The checkpoint travels as the source's worker wrote it: sealed chunk by
// chunk (checkpoint_stream.h). Its key is never sent: the target derives it
// from its own copy of the operator's key and the file's salt.
//
// Commitment. The target takes the session up only on "commit", and the
// source sends its client there only on "committed". Any other end — a
// refusal, a failure, a timeout, a link that breaks — calls the move off:
// the source's worker carries on, and the target's copy (if any) is killed,
// or, if the link broke after "committed" was sent, waits for a client that
// never comes and ends after its grace period. The client goes only where the
// source tells it, so a session never runs in two places.
#pragma once

#include <asio.hpp>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/tls.h"
#include "server/checkpoint/checkpoint_stream.h"
#include "server/config/server_config.h"
#include "server/daemon/session_move.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

inline constexpr char kMoveMagic[8] = {'r', 'g', 'p', 'u', '-', 'm', 'v', '1'};
inline constexpr size_t kMoveSaltBytes = 16;  // (a move preamble is as long as a resume preamble)
inline constexpr size_t kMaxMoveMessageBytes = 4096;
// Moves a member takes in at once; a link past it is closed.
inline constexpr size_t kMaxIncomingMoves = 2;
// How long each side waits for the other's next message (a restore of a
// large session takes a while), and a file's bytes must keep coming.
inline constexpr auto kMoveLinkTimeout = std::chrono::seconds(120);

// The TLS PSK secret of a link with `salt`, from the operator's key (hex).
std::string moveLinkSecret(const CheckpointKey& key, const std::string& salt);

// A message on a link (u32 length, then the text), and the next one.
Status sendMoveMessage(common::TlsConnection& conn, const std::string& msg);
Result<std::string> readMoveMessage(common::TlsConnection& conn);

// Runs `fn` on `io`'s thread and waits for it; false (and `fn` never runs)
// once `stopping` is set first.
bool runOnIo(asio::io_context& io, const std::atomic<bool>& stopping, std::function<void()> fn);

// [pool] drain = "migrate": moves `sessions`, one after another, each to the
// member `target` picks for what it holds among those it has not tried for
// that session (none: it stays, logged), by `mover`. A move that fails is
// tried on the next member, kDrainMoveTries members in all; a session that
// does not move stays until the drain deadline.
inline constexpr size_t kDrainMoveTries = 3;
using DrainTarget = std::function<std::optional<std::string>(const DeviceRequest&, const std::set<std::string>& tried)>;
void moveAllAway(std::vector<uint64_t> sessions, const PoolManager& pool, DrainTarget target, SessionMover& mover);

// Shuts `conn` down at `deadline` unless disarmed first: a blocked read or
// write on the link then fails instead of waiting for ever.
class LinkDeadline {
 public:
  explicit LinkDeadline(common::TlsConnection& conn);
  ~LinkDeadline();
  void arm(std::chrono::steady_clock::time_point deadline);
  bool fired() const { return fired_.load(); }

 private:
  common::TlsConnection& conn_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  bool stop_ = false;
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

// The target's side: takes links the daemon's router hands it, each on a
// thread of its own, and does the daemon's part of each on the io thread
// through `hooks`.
class MoveReceiver {
 public:
  struct Hooks {
    // Admits the offered session here: its new local id and placement.
    std::function<Result<std::pair<uint64_t, Placement>>(const MoveOffer& offer)> admit;
    // Starts a worker to restore session `sid`, whose client's resumes name `resume_id`.
    std::function<Result<SessionMover::Restorer>(uint64_t sid, const std::string& resume_id)> start_restorer;
    // Commit: `r` serves `sid` from now on (its resume id routes to it).
    std::function<void(uint64_t sid, const SessionMover::Restorer& r, const MoveOffer& offer)> adopt;
    // Called off: the admission is undone, and `r` (if started) killed.
    std::function<void(uint64_t sid, const SessionMover::Restorer* r)> discard;
  };
  // `key`: the operator's key (null: every link is refused, the server has
  // no [checkpoint]); `tls`: the server's certificate and key (a link is
  // authenticated by its PSK alone, the key is forgotten before it starts).
  MoveReceiver(asio::io_context& io, const ServerConfig& cfg, const CheckpointKey* key, common::TlsOptions tls,
               Hooks hooks);
  ~MoveReceiver();

  // A connection whose preamble (read) named a move with `salt`.
  void take(int fd, const std::string& peer, const std::string& salt);

 private:
  struct Link;
  void receive(const std::shared_ptr<Link>& link);
  Status transfer(Link& l);
  bool onIo(std::function<void()> fn) { return runOnIo(io_, stopping_, std::move(fn)); }

  asio::io_context& io_;
  const ServerConfig& cfg_;
  const CheckpointKey* key_;
  common::TlsOptions tls_;
  Hooks hooks_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Link>> links_;
  std::atomic<bool> stopping_{false};
};

}  // namespace rgpu::server
