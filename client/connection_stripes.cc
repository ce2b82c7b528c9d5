// Stripe connections (common/stripes.h): after the Welcome, and after each
// resume, a joiner thread opens cfg.stripes more connections to the session
// (the resume preamble and PSK, a Hello with `stripe` set and the main
// connection's generation). Each one's Welcome gives it its index; from then
// on the client stripes large request payloads over it, and once the server
// has the Ack saying the client reads it, the server stripes large replies
// over it too. A join that fails is logged and the client carries on with
// the stripes it has: striping is an optimisation, never a requirement. A
// join that fails because the session closed (the program exited) or its
// connection dropped meanwhile is not worth a warning; a join still in its
// TLS handshake then is cut short, so the program's exit does not wait for it.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "client/connection.h"
#include "common/log.h"

namespace rgpu::client {

using protocol::FrameHeader;
using protocol::FrameType;

namespace {
// A stripe's connect and Welcome take at most this long (within the
// configured connect timeout): a slow join must not hold up the program's exit.
constexpr std::chrono::milliseconds kStripeJoinTimeout{3000};
}  // namespace

Status Connection::readFrameWithin(common::TlsConnection& conn, std::chrono::milliseconds limit, FrameHeader& h,
                                   std::vector<uint64_t>& words) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, limit, [&] { return done; })) conn.shutdown();
  });
  kj::ArrayPtr<const capnp::word> msg;
  common::FrameReader reader(conn, 0);
  Status s = reader.next(h, msg);
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  if (s) words.assign(reinterpret_cast<const uint64_t*>(msg.begin()), reinterpret_cast<const uint64_t*>(msg.end()));
  return s;
}

void Connection::dropStripes() {
  {
    std::lock_guard lock(stripe_mu_);
    ++stripe_epoch_;
    if (stripe_joining_) stripe_joining_->shutdown();  // (its joiner sees the join fail, and stops)
  }
  stripes_.bind(nullptr);
}

void Connection::startStripes(uint32_t generation) {
  if (!resume_ || cfg_.stripes <= 0 || welcome_.max_stripes == 0 || closing_.load()) return;
  uint64_t epoch;
  {
    std::lock_guard lock(stripe_mu_);
    epoch = stripe_epoch_;
  }
  const uint32_t count = std::min<uint32_t>(static_cast<uint32_t>(cfg_.stripes), welcome_.max_stripes);
  stripe_joiner_ = std::thread([this, epoch, generation, count, previous = std::move(stripe_joiner_)]() mutable {
    if (previous.joinable()) previous.join();
    joinStripes(epoch, generation, count);
  });
}

void Connection::joinStripes(uint64_t epoch, uint32_t generation, uint32_t count) {
  auto hp = common::parseHostPort(cfg_.server);
  if (!hp) return;
  auto ctx = clientContext(cfg_, hp->first);
  if (!ctx) return;
  const auto limit = std::min(kStripeJoinTimeout, std::chrono::milliseconds(cfg_.connect_timeout_ms));
  auto current = [&] {
    std::lock_guard lock(stripe_mu_);
    return epoch == stripe_epoch_ && !closing_.load();
  };
  uint32_t joined = 0;
  std::string why;
  for (uint32_t i = 0; i < count && why.empty(); ++i) {
    if (!current()) return;
    auto tc = common::TlsConnection::connect(
        **ctx, hp->first, hp->second, cfg_.server_name, limit, resumePreamble(resume_id_), resume_token_, nullptr,
        [this, epoch](common::TlsConnection* c) {
          std::lock_guard lock(stripe_mu_);
          stripe_joining_ = c;
          if (c && (epoch != stripe_epoch_ || closing_.load())) c->shutdown();  // dropped before it began
        });
    if (!tc) {
      why = tc.status().message();
      break;
    }
    common::tuneSocket((*tc)->fd(), cfg_.dead_after_s);
    common::CallMessage msg;
    buildHello(msg, cfg_, true);
    auto hello = msg.getRoot<wire::Hello>();
    hello.setStripe(true);
    hello.setGeneration(generation);
    std::vector<uint8_t> frame;
    common::appendFrame(frame, FrameType::kHello, 0, 0, msg, 0);
    FrameHeader h;
    std::vector<uint64_t> words;
    Status s = (*tc)->write(frame.data(), frame.size());
    if (s) s = readFrameWithin(**tc, limit, h, words);
    if (s && h.type != FrameType::kWelcome) s = Status(err::kDevicesUnavailable, "no Welcome");
    uint32_t index = 0;
    if (s) {
      try {
        capnp::FlatArrayMessageReader r(common::asWords(words), common::readerOptions());
        auto w = r.getRoot<wire::Welcome>();
        if (w.getError() != 0) s = Status(w.getError(), w.getMessage());
        index = w.getStripe();
      } catch (const kj::Exception& e) {
        s = Status(err::kDevicesUnavailable, std::string("malformed Welcome: ") + e.getDescription().cStr());
      }
    }
    if (s && (index == 0 || index > protocol::kMaxStripes))
      s = Status(err::kDevicesUnavailable, "a Welcome without a stripe index");
    if (!s) {
      why = s.message();
      break;
    }
    std::shared_ptr<common::TlsConnection> stripe(std::move(*tc));
    {
      // Readable from here on; the server learns so after everything the
      // current connection carried so far (the Ack follows on it).
      std::lock_guard lock(stripe_mu_);
      if (epoch != stripe_epoch_ || closing_.load()) return;
      if (!stripes_.add(index, stripe, true)) {
        why = "stripe index " + std::to_string(index) + " given twice";
        break;
      }
      std::lock_guard block(batch_mu_);
      acknowledgeLocked(false, index);
    }
    ++joined;
  }
  if (!why.empty() && !current()) {
    // The program ended its session (or the connection was lost) while this
    // join was on its way: the server no longer has the session to join.
    RGPU_LOG_DEBUG("rgpu server {}: stripe joins stopped, the session is closing or resuming ({})", server(), why);
    return;
  }
  if (!why.empty())
    RGPU_LOG_WARN("rgpu server {}: {} of {} stripe connection(s) joined ({}); large copies use those", server(), joined,
                  count, why);
  else
    RGPU_LOG_DEBUG("rgpu server {}: {} stripe connection(s) joined session {}", server(), joined, welcome_.session_id);
}

}  // namespace rgpu::client
