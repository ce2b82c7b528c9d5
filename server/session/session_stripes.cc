// Stripe connections (common/stripes.h): a client joins them like a resume
// (the daemon routes them by the session's resume id, the resume thread
// checks TLS, the token and the identity), each to the main connection of
// the generation it names. Pieces flow client to server as soon as the
// client has the stripe's Welcome (the stripe is readable here before that
// Welcome is written), and server to client once the client says on the
// main connection that it reads the stripe (Ack.stripeReady).
#include <capnp/serialize.h>

#include "common/log.h"
#include "server/session/session.h"

namespace rgpu::server {

using protocol::FrameType;

uint32_t Session::takeUpConnection(const common::TlsConnection& conn) {
  stripes_.bind(&conn);
  std::lock_guard lock(resume_mu_);
  live_ = true;
  return generation_;
}

void Session::joinStripe(std::unique_ptr<common::TlsConnection> conn, uint32_t generation, uint64_t hello_seq) {
  std::shared_ptr<common::TlsConnection> c(std::move(conn));
  std::string why;
  uint32_t index = 0;
  {
    std::lock_guard lock(resume_mu_);
    if (!resume_) {
      why = "the session cannot be resumed, and only resumable sessions take stripes";
    } else if (!live_ || generation != generation_) {
      why = "it joins connection " + std::to_string(generation) + " of the session, which is gone";
    } else if (stripes_.size() >= cfg_.max_stripes) {
      why = "the session has [session] max_stripes = " + std::to_string(cfg_.max_stripes) + " stripe connection(s)";
    } else {
      // Stripes go only all at once (with their connection): the next index is the count's.
      index = static_cast<uint32_t>(stripes_.size()) + 1;
      stripes_.add(index, c);  // readable from here on: the client names it only after the Welcome below
    }
  }
  capnp::MallocMessageBuilder out;
  auto w = out.initRoot<wire::Welcome>();
  w.setProtocolVersion(wire::PROTOCOL_VERSION);
  w.setSessionId(client_session_id_);
  if (index == 0) {
    common::logLimited("stripe-refused", "session " + std::to_string(session_id_) + ": stripe connection from " +
                                             c->peerAddress() + " refused: " + why);
    w.setError(err::kNotPermitted);
    w.setMessage("stripe refused: " + why);
  } else {
    w.setStripe(index);
    w.setGeneration(generation);
    RGPU_LOG_DEBUG("session {}: stripe connection {} joined from {}", session_id_, index, c->peerAddress());
  }
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kWelcome, 0, hello_seq, out, 0);
  (void)c->write(frame.data(), frame.size());
}

}  // namespace rgpu::server
