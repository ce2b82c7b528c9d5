// The daemon's side of the workers' control sockets: turns their datagrams
// into PoolManager calls and answers them, including admissions decided later
// (a queued request is answered when it fits or times out; a timer wakes the
// queue at the earliest deadline). Runs on the daemon's io_context thread.
#pragma once

#include <asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <deque>
#include <set>
#include <string>

#include "server/pool/launch_gate.h"
#include "server/pool/pool_link.h"
#include "server/pool/pool_manager.h"

namespace rgpu::server {

// The longest reason a worker may give for its session's end (longer is cut).
inline constexpr size_t kMaxEndReason = 256;

class PoolService {
 public:
  using HealthFn = std::function<std::vector<DeviceHealth>()>;
  // `gates` (may be null) gets a slot per admitted session.
  PoolService(asio::io_context& io, PoolManager& pool, HealthFn health, GateTableOwner* gates);

  // Adopts the daemon's end of a new worker's socket pair.
  void attach(uint64_t session, int fd);
  // The session moved to a new worker (docs/migration.md): its control
  // socket is `fd` from now on (the old worker's is closed: what it says as
  // it ends reaches no one), and everything the pool holds for it stays —
  // record, memory, quota, launch gate slot — for the new worker, which
  // takes it up with "rejoin".
  void replaceWorker(uint64_t session, int fd);
  // Its worker said the session's client resumes after a dropped connection.
  bool resumable(uint64_t session) const { return resumable_.count(session) != 0; }
  // The worker exited (or was killed): everything its session held returns.
  // `exit`: how, as the daemon saw it ("exited with 0", "killed by signal 9").
  void detach(uint64_t session, const std::string& exit = "");
  // Runs once per admitted session that ended, with its record and why it
  // ended: what its worker said, else `exit` (a worker that crashed says nothing).
  using EndedFn = std::function<void(const SessionRecord& record, const std::string& reason)>;
  void onEnded(EndedFn fn) { on_ended_ = std::move(fn); }
  // Queued requests may fit after a policy reload.
  void policyChanged();
  // The daemon is stopping: queued requests are refused, saying so.
  void shutdown();
  // Runs once per session, when its worker proved who its client is: the
  // client has authenticated (the daemon's pre-auth bound).
  void onAuthenticated(std::function<void(uint64_t)> fn) { on_authenticated_ = std::move(fn); }
  // The daemon's own check of a client's credential (bearer token, or a
  // certificate in PEM): the user it finds, or an error. A worker's "auth"
  // binds its session to that user; "admit" and "status" act for the bound
  // user only, whatever user the worker names.
  using Authenticator = std::function<Result<std::string>(const ClientCredential& credential)>;
  void setAuthenticator(Authenticator fn) { authenticate_ = std::move(fn); }
  // A pool of servers (server/cluster/): asked first for each admission that
  // may be redirected. `redirect` set: the client goes to that member;
  // else it is admitted here or queued — queued even when it can never fit
  // here, if `elsewhere` (a member could take it once it has room).
  struct PoolAnswer {
    std::optional<Placement> redirect;
    bool elsewhere = false;
  };
  using Redirector = std::function<PoolAnswer(const ClientInfo& who, const DeviceRequest& req)>;
  void setRedirector(Redirector fn) { redirect_ = std::move(fn); }
  // The pool changed (its view was read again): queued requests another
  // member can take now are sent there.
  void poolChanged();
  // Pool-wide session slots: taken (asynchronously: `done` may run on any
  // thread) before a user with max_sessions is admitted here, given back when
  // the session ends. `checked` false: the pool could not be asked.
  using SlotAcquire = std::function<void(const std::string& user, uint32_t max, uint64_t session,
                                         std::function<void(Status, bool checked)> done)>;
  using SlotRelease = std::function<void(uint64_t session)>;
  void setSlots(SlotAcquire acquire, SlotRelease release) {
    acquire_ = std::move(acquire);
    release_ = std::move(release);
  }
  // Pool-wide memory quota shares (PoolManager::setPoolGrants): `acquire`
  // asks for at least `min`, at most `want` more bytes of `user`'s `quota`
  // (`done` may run on any thread: the bytes granted, or why none; `checked`
  // false: the pool could not be asked); `hold` sets the share this member
  // keeps. An allocation past the share waits for the answer; the user's
  // later allocations wait behind it, in order.
  using GrantAcquire = std::function<void(const std::string& user, uint64_t quota, uint64_t min, uint64_t want,
                                          std::function<void(Status, uint64_t granted, bool checked)> done)>;
  using GrantHold = std::function<void(const std::string& user, uint64_t bytes)>;
  void setGrants(GrantAcquire acquire, GrantHold hold) {
    grant_acquire_ = std::move(acquire);
    grant_hold_ = std::move(hold);
    pool_.setPoolGrants(true);
  }
  // Moves a session to a new worker (rgpu-smi --migrate, admins only;
  // session_move.h): `done` gets what the move took, or why it did not.
  // `member`: this server's [cluster] name, which a move may name as its target.
  // `member`: "" for a new worker here, else the member to move it to.
  using MoveFn = std::function<void(uint64_t session, const std::string& member,
                                    std::function<void(Result<std::string>)> done)>;
  void setMover(MoveFn fn, std::string member) {
    mover_ = std::move(fn);
    member_name_ = std::move(member);
  }
  // ---- sessions moving between members (docs/migration.md) ----
  // A session another member moves here, as session `session`: admitted at
  // once (never queued, never sent on) on devices that fit its memory and
  // its modules' compute capability, with the memory it holds charged to
  // its user here. The pool-wide memory quota is not asked: the bytes leave
  // the other member as the move commits.
  Result<Placement> admitMoved(uint64_t session, const ClientInfo& who, const std::vector<uint64_t>& memory,
                               uint32_t min_cc, uint32_t migrations);
  // The move committed: the worker on `fd` serves the admitted session; it
  // takes up its record (and a launch gate slot) with "rejoin". The user's
  // pool-wide session slot is taken again here (the source gives its own
  // back as it lets the session go; retried for a few seconds meanwhile).
  void adoptMoved(uint64_t session, int fd);
  // The session moved to member `member`: its record here ends (its
  // accounting line says so), and its memory, quota and slot return now,
  // while its old worker sends the client there.
  void movedAway(uint64_t session, const std::string& member);
  // A move here called off before it committed: the admission is undone
  // (no accounting line: the session never ran here).
  void dropMoved(uint64_t session);
  // The pool's members for rgpu-smi --pool (wire::PoolMembers, flat message bytes).
  using MembersFn = std::function<std::string()>;
  void setMembers(MembersFn fn) { members_ = std::move(fn); }

 private:
  struct Worker {
    std::unique_ptr<asio::local::datagram_protocol::socket> sock;
    std::vector<char> buf;
  };
  void receive(uint64_t session);
  void sendElsewhere(uint64_t session, const ClientInfo& who, const Placement& p);
  void replyPlacement(uint64_t session, const Placement& p, int fd = -1);
  void handle(uint64_t session, const std::string& msg);
  void reply(uint64_t session, const std::string& msg, int fd = -1);
  void decideQueued();
  // adoptMoved's slot: asked again every 250 ms, `tries` more times.
  void takeMovedSlot(uint64_t session, const std::string& user, uint32_t max, int tries);
  // Gives an admitted session its launch gate slot and answers its worker.
  void placed(uint64_t session, Placement p);

  asio::io_context& io_;
  PoolManager& pool_;
  HealthFn health_;
  std::map<uint64_t, Worker> workers_;
  GateTableOwner* gates_;
  std::map<uint64_t, int> slots_;  // session -> gate slot
  asio::steady_timer timer_;
  std::function<void(uint64_t)> on_authenticated_;
  EndedFn on_ended_;
  std::map<uint64_t, std::string> end_reasons_;  // what workers said as they ended
  Authenticator authenticate_;
  Redirector redirect_;
  MembersFn members_;
  MoveFn mover_;
  std::string member_name_;
  SlotAcquire acquire_;
  SlotRelease release_;
  // Admissions waiting for a pool-wide session slot (asked again as the pool changes).
  struct SlotWait {
    ClientInfo who;
    DeviceRequest req;
    PoolManager::Clock::time_point since, deadline;
    bool asking = false;
  };
  std::map<uint64_t, SlotWait> slot_waiting_;
  void admitHere(uint64_t session, const ClientInfo& who, const DeviceRequest& req);
  void askSlot(uint64_t session, uint32_t max);
  void slotDecided(uint64_t session, const Status& s, bool checked);
  std::map<uint64_t, std::string> identity_;  // session -> the user the daemon bound it to
  std::set<uint64_t> rejoining_;  // sessions whose new worker may ask "rejoin" (once)
  std::set<uint64_t> resumable_;  // sessions whose worker said "resumable"
  GrantAcquire grant_acquire_;
  GrantHold grant_hold_;
  struct GrantWait {
    uint64_t session;
    int device;
    uint64_t bytes;
  };
  std::map<std::string, std::deque<GrantWait>> grant_waiting_;  // by user, in arrival order
  std::set<std::string> grant_asking_;
  // A checked allocation: at once when it fits this member's share, else after asking for more.
  void reserveChecked(uint64_t session, int device, uint64_t bytes);
  void askGrant(const std::string& user);
  void grantDecided(const std::string& user, const Status& s, uint64_t granted, bool checked);
  // Gives back what shares hold beyond their use and one spare slice.
  void trimGrants();
};

}  // namespace rgpu::server
