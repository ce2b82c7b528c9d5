// Moving a running session to a fresh worker of this daemon: the daemon's
// side (docs/migration.md; the worker's is server/session/session_checkpoint.cc).
//
// One move, step by step, on the daemon's io thread:
//   1. the checkpoint file is made in [checkpoint] dir (0600, a name of its
//      own) with a key of its own derived from the operator's key; the
//      session's client connections are held from now on (hold());
//   2. the session's worker is asked for a checkpoint into it ("checkpoint",
//      the file and its key on the handoff socket) and answers
//      "checkpointed" or "refused";
//   3. a new worker is started to restore it ("restore", the file reopened
//      read-only, the key) and answers "restored" or "failed";
//   4. commit: the old worker is told "commit" and ends without a word to
//      the client or the pool; the pool's record, memory and quota go to the
//      new worker (PoolService::replaceWorker), which is told "go"; the file
//      is deleted; held connections go to the new worker.
//   Any failure — a refusal, a timeout, a worker that dies, a file that
//   cannot be written — ends in "abort" to the old worker (which carries on),
//   the new one killed, the file deleted and held connections given back to
//   the old worker. The session is never in two places or none.
//
// Every step is bounded by kMoveStepTimeout past the drain timeout, and the
// whole move by three quarters of [session] resume_grace_ms: the client is
// reconnecting meanwhile and gives up after the grace period.
#pragma once

#include <sys/types.h>

#include <asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <atomic>

#include "common/status.h"
#include "server/checkpoint/checkpoint_stream.h"
#include "server/config/server_config.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

// What the source tells the target of a session it moves there.
struct MoveOffer {
  std::string from;              // the source member's name
  ClientInfo who;                // its user and client, as the source admitted it
  uint64_t session = 0;          // the session id its client knows
  std::string resume_id;         // the random id its client's resumes name (kResumeIdBytes)
  std::vector<uint64_t> memory;  // bytes it holds on each of its devices, in its order
  uint32_t min_cc = 0;           // the compute capability its modules need (major * 10 + minor)
  uint32_t migrations = 0;       // moves before this one
  std::string encode() const;
  static Result<MoveOffer> decode(const std::string& msg);
};

inline constexpr auto kMoveStepTimeout = std::chrono::seconds(60);
inline constexpr auto kMemberLookupRetry = std::chrono::milliseconds(250);
inline constexpr int kMemberLookupTries = 12;
// How long a pre-copy may take before the move goes on without it (the
// program runs meanwhile; one that sends no request does not start it).
inline constexpr auto kPrecopyTimeout = std::chrono::seconds(30);

class SessionMover {
 public:
  // A worker the daemon started to restore a session: its pid and the
  // daemon's ends of its handoff and control sockets.
  struct Restorer {
    pid_t pid = -1;
    int handoff = -1, control = -1;
  };
  struct Hooks {
    // The session's worker: its pid and the daemon's end of its handoff
    // socket; false when the session has none (it ended, or is a monitor).
    std::function<bool(uint64_t session, pid_t* pid, int* handoff)> current;
    // Whether the session's client resumes after a dropped connection (a
    // move is one, to the client).
    std::function<bool(uint64_t session)> resumable;
    // Starts a worker with --restore for `session` (its resume id sent first).
    std::function<Result<Restorer>(uint64_t session)> start_restorer;
    // The move took: `r` serves the session from now on; `old_pid` exits on its own.
    std::function<void(uint64_t session, const Restorer& r, pid_t old_pid)> commit;
    // The move failed after `r` was started: it must go (killed, its sockets closed).
    std::function<void(uint64_t session, const Restorer& r)> discard;
    // Client connections held during the move go to the session's worker now.
    std::function<void(uint64_t session)> release;
    // The session's placement here (a pre-copy's new worker is made for it).
    std::function<std::optional<Placement>(uint64_t session)> placement;
    // ---- moves to another member of the pool (member_move.h) ----
    // Where member `name` takes moves (its advertised host:port), or why it cannot.
    std::function<Result<std::string>(const std::string& name)> member_address;
    // What the target must know of the session (min_cc is the mover's).
    std::function<Result<MoveOffer>(uint64_t session)> offer;
    // The move to `member` took: the pool's record of the session here ends
    // (its memory and quota return), its worker sends the client there and ends.
    std::function<void(uint64_t session, const std::string& member)> moved_away;
  };
  // `key`: the operator's key, or null when [checkpoint] is not configured
  // (every move is refused, saying so).
  SessionMover(asio::io_context& io, const ServerConfig& cfg, std::unique_ptr<CheckpointKey> key, Hooks hooks);
  // The operator's key (null without [checkpoint]): a MoveReceiver needs it too.
  const CheckpointKey* key() const { return key_.get(); }
  ~SessionMover();

  // Whether `session` is being moved: its clients' connections are held.
  bool holding(uint64_t session) const { return moves_.count(session) != 0; }
  // Moves `session` to a new worker here (`member` "") or to member
  // `member` of the pool; `done` gets what it took (a line for rgpu-smi), or why not.
  // A member not in this server's view of the pool is looked for again,
  // `tries` times kMemberLookupRetry apart (the view may not have been read lately).
  void move(uint64_t session, const std::string& member, std::function<void(Result<std::string>)> done,
            int tries = kMemberLookupTries);

 private:
  struct Move;
  // Waits (on the io thread) for the next message on `fd`, within `deadline`.
  void expect(const std::shared_ptr<Move>& m, int fd,
              std::function<void(Result<std::string>)> then);
  void checkpointed(const std::shared_ptr<Move>& m, Result<std::string> answer);
  void restored(const std::shared_ptr<Move>& m, Result<std::string> answer);
  void fail(const std::shared_ptr<Move>& m, const std::string& why);
  // Pre-copy ([checkpoint] precopy): the base is copied and placed while the
  // program runs; then the checkpoint proper.
  void precopied(const std::shared_ptr<Move>& m, Result<std::string> answer);
  void dropBase(const std::shared_ptr<Move>& m, const std::string& why);
  void askCheckpoint(const std::shared_ptr<Move>& m);
  // A move to another member: `work` on a thread of its own (the link is
  // blocking), then `then` on the io thread (or the move fails).
  void onLink(const std::shared_ptr<Move>& m, std::function<Status(Move&)> work, std::function<void()> then);
  // The link's steps: connect and offer; a file and the target's answer to
  // it; the commit.
  Status linkOpen(Move& m);
  Status linkSend(Move& m, const std::string& what, const std::string& path, const std::string& answer);
  Status linkCommit(Move& m);
  void movedAway(const std::shared_ptr<Move>& m);

  asio::io_context& io_;
  const ServerConfig& cfg_;
  std::unique_ptr<CheckpointKey> key_;
  Hooks hooks_;
  std::map<uint64_t, std::shared_ptr<Move>> moves_;
  std::atomic<bool> stopping_{false};
  struct Link {  // a step of a move to another member, on its thread
    std::shared_ptr<Move> move;
    std::shared_ptr<std::atomic<bool>> done;
    std::thread thread;
  };
  std::vector<Link> links_;
};

}  // namespace rgpu::server
