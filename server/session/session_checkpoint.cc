// Moving a session to another worker (docs/migration.md): the session's side.
//
// The daemon asks over the handoff socket ("checkpoint", with the file's key
// and the file). The resume thread records the request and shuts the
// client's connection: the dispatch thread, between two requests, goes to
// awaitResume as after any dropped connection, and there writes the
// checkpoint once the session's work has drained. The client reconnects
// meanwhile; the daemon holds its connection until the move is decided. The
// daemon then says "commit" (a new worker restored the session: this one
// ends without a word to the client or the pool, which now belong to the
// other) or "abort" (the session carries on here, and the held connection
// comes back here). So a move that fails at any step leaves the session
// where it was.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/message.h>

#include <cstring>

#include "common/fatbin.h"
#include "common/log.h"
#include "server/checkpoint/device_image.h"
#include "server/session/session.h"

namespace rgpu::server {

using protocol::FrameType;

namespace {

constexpr uint32_t kSessionMagic = 0x53534b43;  // "CKSS"

}  // namespace

std::string Session::notCheckpointable() {
  if (monitor_ || !backend_) return "it is a monitor session";
  {
    std::lock_guard lock(host_mu_);
    if (!host_pending_.empty()) return "a host function waits for the client";
  }
  if (outbox_.lostFrames()) return "replies its client has not acknowledged were dropped";
  return backend_->notCheckpointable();
}

Status Session::drainForCheckpoint() {
  // Shared: a callback that comes after the timeout must find it alive.
  struct Drain {
    std::mutex mu;
    std::condition_variable cv;
    size_t left = 0;
    Status first;
  };
  auto d = std::make_shared<Drain>();
  d->left = placement_.devices.size();
  for (size_t i = 0; i < placement_.devices.size(); ++i) {
    Status s = backend_->whenDeviceDone(static_cast<int>(i), [d](Status st) {
      std::lock_guard lock(d->mu);
      if (!st && d->first) d->first = st;
      if (--d->left == 0) d->cv.notify_all();
    });
    if (!s) return s;
  }
  std::unique_lock lock(d->mu);
  if (!d->cv.wait_for(lock, std::chrono::milliseconds(cfg_.checkpoint_drain_timeout_ms), [&] { return d->left == 0; }))
    return Status(err::kNotReady, "the session's queued work did not finish within [checkpoint] drain_timeout_ms = " +
                                      std::to_string(cfg_.checkpoint_drain_timeout_ms) + " ms");
  return Status::ok();
}

uint32_t Session::modulesNeedComputeCapability() const {
  // A module runs on a device that can run one of its images: the lowest
  // architecture among them (PTX is compiled for any device at least that).
  uint32_t need = 0;
  for (auto& [id, image] : module_images_) {
    auto img = common::parseImage(image.data(), image.size());
    if (!img) continue;
    uint32_t lowest = 0;
    for (auto& e : img->entries)
      if (e.arch && (!lowest || e.arch < lowest)) lowest = e.arch;
    need = std::max(need, lowest);
  }
  return need;
}

DeviceImageLimits Session::imageLimits() const {
  const auto& L = cfg_.limits;
  DeviceImageLimits limits;
  limits.max_allocations = L.max_allocations;
  limits.max_modules = L.max_modules;
  limits.max_functions = L.max_functions;
  limits.max_streams = L.max_streams;
  limits.max_events = L.max_events;
  limits.max_fatbin_bytes = protocol::kMaxFatbinBytes;
  limits.max_conditional_handles = L.max_conditional_handles;
  return limits;
}

DeviceImage Session::deviceImage() const {
  DeviceImage img;
  for (uint64_t base : allocs_.bases()) {
    const AllocationTable::Entry* e = allocs_.find(base);
    if (e && !e->is_symbol) img.allocations.push_back({e->device, base, e->size});
  }
  for (auto& [handle, a] : arrays_.arrays()) img.arrays.push_back({handle, a.spec, 0, 0, 0});
  for (auto& [key, o] : arrays_.objects(ArrayTable::kTexture)) img.textures.push_back({key.first, o.texture});
  for (auto& [key, o] : arrays_.objects(ArrayTable::kSurface))
    img.surfaces.push_back({key.first, o.device, o.array, o.level});
  for (auto& [id, dev] : modules_)
    if (auto it = module_images_.find(id); it != module_images_.end()) img.modules.push_back({id, dev, it->second, {}});
  for (auto& [id, k] : functions_)
    if (k.unusable && module_images_.count(k.module)) img.functions.push_back({id, k.module, k.name, k.attributes});
  for (auto& [id, dev] : streams_) {
    auto o = stream_options_.find(id);
    img.streams.push_back({id, dev, o == stream_options_.end() ? 0u : o->second.first,
                           o == stream_options_.end() ? 0 : o->second.second});
  }
  for (auto& [id, dev] : events_) {
    auto f = event_flags_.find(id);
    img.events.push_back({id, dev, f == event_flags_.end() ? 0u : f->second, {}});
  }
  for (auto& [handle, dev] : cond_handles_) img.cond_handles.push_back({dev, handle});
  return img;
}

Status Session::writeCheckpoint(CheckpointWriter& out) {
  RGPU_TRY(out.putU32(kSessionMagic));
  RGPU_TRY(out.putString(identity_));
  RGPU_TRY(out.putU64(session_id_));
  RGPU_TRY(out.putU64(client_session_id_));
  RGPU_TRY(out.putString(resume_token_));
  RGPU_TRY(out.putString(joinFields(placementFields(placement_))));
  RGPU_TRY(out.putU32(placement_.span_index));
  RGPU_TRY(out.putU64(next_seq_));
  {
    std::lock_guard lock(async_mu_);
    RGPU_TRY(out.putStatus(async_error_));
    RGPU_TRY(out.putStatus(sticky_));
  }
  RGPU_TRY(out.putU64(calls_.load()));
  RGPU_TRY(out.putU64(bytes_in_.load()));
  RGPU_TRY(out.putU64(bytes_out_.load()));
  RGPU_TRY(out.putU64(errors_.load()));
  RGPU_TRY(out.putU64(gpu_ns_base_ + backend_->gpuTimeNs()));
  // The session's tables, as the dispatch thread checks requests against them.
  RGPU_TRY(out.putU64(modules_.size()));
  for (auto& [id, dev] : modules_) {
    RGPU_TRY(out.putU32(id));
    RGPU_TRY(out.putI32(dev));
    auto bad = module_errors_.find(id);
    RGPU_TRY(out.putStatus(bad == module_errors_.end() ? Status::ok() : bad->second));
  }
  RGPU_TRY(out.putU64(functions_.size()));
  for (auto& [id, k] : functions_) {
    RGPU_TRY(out.putU32(id));
    RGPU_TRY(out.putU32(k.module));
    RGPU_TRY(out.putU32(k.param_bytes));
    RGPU_TRY(out.putStatus(k.unusable));
    RGPU_TRY(out.putString(k.name));
  }
  RGPU_TRY(out.putU64(vars_.size()));
  for (auto& [id, v] : vars_) {
    RGPU_TRY(out.putU32(id));
    RGPU_TRY(out.putU32(v.module));
    RGPU_TRY(out.putString(v.name));
    RGPU_TRY(out.putU64(v.size));
    RGPU_TRY(out.putU64(v.addr));
  }
  RGPU_TRY(out.putU64(malloc_heap_charge_.size()));
  for (auto& [dev, charge] : malloc_heap_charge_) {
    RGPU_TRY(out.putI32(dev));
    RGPU_TRY(out.putU64(charge));
  }
  auto entries = allocs_.entries();
  RGPU_TRY(out.putU64(entries.size()));
  for (auto& [base, e] : entries) {
    RGPU_TRY(out.putU64(base));
    RGPU_TRY(out.putU64(e.size));
    RGPU_TRY(out.putI32(e.device));
    RGPU_TRY(out.putU32(e.is_symbol ? 1 : 0));
  }
  // The device state and the bytes, the graphs (whose launches name its
  // streams), then what a resume resends.
  uint64_t unchanged = 0;
  RGPU_TRY(writeDeviceImage(deviceImage(), *backend_, out, precopy_base_.get(), &unchanged));
  if (precopy_base_)
    RGPU_LOG_INFO("session {}: {} bytes of device memory unchanged since the pre-copy, not written again", session_id_,
                  unchanged);
  RGPU_TRY(saveGraphs(out));
  return outbox_.save(out);
}

Status Session::restore(CheckpointReader& in, const Placement* placed) {
  const auto& L = cfg_.limits;
  RGPU_TRY_ASSIGN(magic, in.getU32());
  if (magic != kSessionMagic) return Status(err::kInvalidValue, "checkpoint: no session where one belongs");
  RGPU_TRY_ASSIGN(identity, in.getString(kMaxCheckpointNameBytes));
  RGPU_TRY_ASSIGN(id, in.getU64());
  RGPU_TRY_ASSIGN(client_id, in.getU64());
  // Between workers of one daemon the id is the same; a session from another
  // member has one of this daemon's. Its client knows the id it first had.
  if (!placed && id != session_id_)
    return Status(err::kInvalidValue, "the checkpoint is of session " + std::to_string(id) + ", not " +
                                          std::to_string(session_id_));
  client_session_id_ = client_id;
  identity_ = identity;
  RGPU_TRY_ASSIGN(token, in.getString(64));
  resume_token_ = token;
  RGPU_TRY_ASSIGN(placement, in.getString(kMaxCheckpointNameBytes));
  auto fields = splitFields(placement, 16);
  fields.insert(fields.begin(), "ok");
  RGPU_TRY_ASSIGN(p, placementFromFields(fields));
  RGPU_TRY_ASSIGN(span_index, in.getU32());
  p.span_index = span_index;
  if (placed) {
    // This member's devices, quota and priority; the address window stays
    // the one the program's pointers lie in.
    if (placed->devices.size() != p.devices.size())
      return Status(err::kInvalidValue, "the checkpoint holds " + std::to_string(p.devices.size()) +
                                            " device(s); this member placed it on " +
                                            std::to_string(placed->devices.size()));
    Placement here = *placed;
    here.span_index = span_index;
    p = here;
  }
  if (prerestored_) {
    // The pre-copy's backend was made for the placement the daemon gave:
    // the checkpoint must be of the same shape.
    if (p.devices.size() != placement_.devices.size() || span_index != placement_.span_index)
      return Status(err::kInvalidValue, "the checkpoint does not match the pre-copy restored before it");
  } else {
    placement_ = p;
  }
  RGPU_TRY_ASSIGN(next_seq, in.getU64());
  next_seq_ = next_seq;
  RGPU_TRY(in.getStatus(&async_error_));
  RGPU_TRY(in.getStatus(&sticky_));
  has_sticky_.store(!sticky_.isOk());
  for (auto* counter : {&calls_, &bytes_in_, &bytes_out_, &errors_}) {
    RGPU_TRY_ASSIGN(v, in.getU64());
    counter->store(v);
  }
  RGPU_TRY_ASSIGN(gpu_ns, in.getU64());
  gpu_ns_base_ = gpu_ns;
  if (!prerestored_) {
    auto backend = make_backend_(placement_);
    if (!backend) return backend.status();
    attachBackend(std::move(*backend));
  }

  RGPU_TRY_ASSIGN(n_modules, in.getCount(L.max_modules, "modules"));
  for (uint64_t i = 0; i < n_modules; ++i) {
    RGPU_TRY_ASSIGN(mid, in.getU32());
    RGPU_TRY_ASSIGN(dev, in.getI32());
    Status why;
    RGPU_TRY(in.getStatus(&why));
    RGPU_TRY(checkDevice(dev));
    modules_[mid] = dev;
    if (!why.isOk()) module_errors_[mid] = why;
  }
  RGPU_TRY_ASSIGN(n_functions, in.getCount(L.max_functions, "kernels"));
  for (uint64_t i = 0; i < n_functions; ++i) {
    RGPU_TRY_ASSIGN(fid, in.getU32());
    RGPU_TRY_ASSIGN(module, in.getU32());
    RGPU_TRY_ASSIGN(param_bytes, in.getU32());
    Status unusable;
    RGPU_TRY(in.getStatus(&unusable));
    RGPU_TRY_ASSIGN(name, in.getString(kMaxCheckpointNameBytes));
    functions_[fid] = {module, param_bytes, unusable, name, {}};
  }
  RGPU_TRY_ASSIGN(n_vars, in.getCount(L.max_functions, "variables"));
  for (uint64_t i = 0; i < n_vars; ++i) {
    RGPU_TRY_ASSIGN(vid, in.getU32());
    RGPU_TRY_ASSIGN(module, in.getU32());
    RGPU_TRY_ASSIGN(name, in.getString(kMaxCheckpointNameBytes));
    RGPU_TRY_ASSIGN(size, in.getU64());
    RGPU_TRY_ASSIGN(addr, in.getU64());
    vars_[vid] = {module, name, size, addr};
  }
  // What the session's cudaLimitMallocHeapSize calls charged the pool (whose
  // record of it moved with the session): released by the next such call.
  RGPU_TRY_ASSIGN(n_heaps, in.getCount(placement_.devices.size(), "malloc heap charges"));
  for (uint64_t i = 0; i < n_heaps; ++i) {
    RGPU_TRY_ASSIGN(dev, in.getI32());
    RGPU_TRY_ASSIGN(charge, in.getU64());
    RGPU_TRY(checkDevice(dev));
    malloc_heap_charge_[dev] = charge;
  }
  RGPU_TRY_ASSIGN(n_allocs, in.getCount(L.max_allocations, "allocations"));
  for (uint64_t i = 0; i < n_allocs; ++i) {
    RGPU_TRY_ASSIGN(base, in.getU64());
    RGPU_TRY_ASSIGN(size, in.getU64());
    RGPU_TRY_ASSIGN(dev, in.getI32());
    RGPU_TRY_ASSIGN(symbol, in.getU32());
    RGPU_TRY(checkDevice(dev));
    RGPU_TRY(allocs_.add(base, size, dev, symbol != 0));
  }
  RGPU_TRY_ASSIGN(img, restoreDeviceImage(*backend_, in, imageLimits(), prerestored_ ? &preplaced_ : nullptr));
  // The device image must be the tables' own: every allocation the table
  // names is one the backend placed (a symbol lies in a module's variables).
  if (img.allocations.size() != allocs_.bases().size())
    return Status(err::kInvalidValue, "checkpoint: the allocation table and the device image disagree");
  for (auto& a : img.allocations) {
    const AllocationTable::Entry* e = allocs_.find(a.base);
    if (!e || e->size != a.size || e->device != a.device || e->is_symbol)
      return Status(err::kInvalidValue, "checkpoint: the allocation table and the device image disagree");
  }
  for (auto& a : img.arrays) RGPU_TRY(arrays_.addArray(a.handle, {a.spec, arrayLevels(a.spec), a.bytes}));
  for (auto& t : img.textures) RGPU_TRY(arrays_.addObject(ArrayTable::kTexture, t.handle, {t.spec.device, t.spec, 0, 0}));
  for (auto& s : img.surfaces)
    RGPU_TRY(arrays_.addObject(ArrayTable::kSurface, s.handle, {s.device, {}, s.array, s.level}));
  for (auto& c : img.cond_handles) cond_handles_[c.handle] = c.device;
  for (auto& m : img.modules) module_images_[m.id] = m.fatbin;
  for (auto& f : img.functions) functions_[f.id].attributes = f.attributes;
  for (auto& s : img.streams) {
    streams_[s.id] = s.device;
    stream_options_[s.id] = {s.flags, s.priority};
  }
  for (auto& e : img.events) {
    events_[e.id] = e.device;
    event_flags_[e.id] = e.flags;
  }
  RGPU_TRY(loadGraphs(in));
  RGPU_TRY(outbox_.load(in));
  RGPU_TRY(in.finish());
  // The client comes back by the PSK of the token it holds.
  resume_ = true;
  if (resume_source_.tls) resume_source_.tls->setResumeSecret(resume_token_);
  std::string devs;
  for (int d : placement_.devices) devs += (devs.empty() ? "" : ",") + std::to_string(d);
  RGPU_LOG_INFO("session {}: restored for user '{}' on device(s) {}: {} allocation(s), {} module(s), {} stream(s), "
                "{} event(s), requests up to {} carried out",
                session_id_, identity_, devs, img.allocations.size(), img.modules.size(), img.streams.size(),
                img.events.size(), next_seq_ - 1);
  return Status::ok();
}

void Session::tellDaemon(const std::string& msg) {
  if (resume_source_.fd < 0 || ::send(resume_source_.fd, msg.data(), msg.size(), MSG_NOSIGNAL) < 0)
    RGPU_LOG_WARN("session {}: cannot tell the daemon '{}': {}", session_id_, msg.substr(0, msg.find(kFieldSep)),
                  std::strerror(errno));
}

Session::Verdict Session::awaitVerdict() {
  std::unique_lock lock(resume_mu_);
  // The daemon decides within its own time limits; gone, it decides nothing.
  resume_cv_.wait(lock, [&] { return verdict_ != Verdict::kNone || resume_closed_ || stopped_.load(); });
  Verdict v = verdict_ == Verdict::kNone ? Verdict::kAbort : verdict_;
  verdict_ = Verdict::kNone;
  return v;
}

bool Session::checkpointForMove(MoveRequest req) {
  auto t0 = std::chrono::steady_clock::now();
  auto refuse = [&](const std::string& why) {
    RGPU_LOG_WARN("session {}: not moved, it carries on in this worker: {}", session_id_, why);
    if (req.fd >= 0) ::close(req.fd);
    tellDaemon(joinFields({"refused", why}));
    return false;
  };
  if (std::string why = notCheckpointable(); !why.empty()) return refuse("cannot be checkpointed: " + why);
  auto key = fileKeyFromHex(req.key_hex);
  if (!key) return refuse(key.status().message());
  joinPrecopy();  // its base, if the new worker holds it, is what the checkpoint is written against
  if (!req.against_base) precopy_base_.reset();  // (one an earlier move made, which this one's worker lacks)
  {
    // A pre-copy asked for and not started is not wanted any more.
    std::lock_guard lock(resume_mu_);
    if (precopy_request_ && precopy_request_->fd >= 0) ::close(precopy_request_->fd);
    precopy_request_.reset();
    precopy_wanted_.store(false);
  }
  // Held replies' senders must return before the streams can drain.
  outbox_.copyHeld();
  if (Status s = drainForCheckpoint(); !s) return refuse(s.message());
  auto drained = std::chrono::steady_clock::now();
  const int64_t drain_ms = std::chrono::duration_cast<std::chrono::milliseconds>(drained - t0).count();
  if (std::string why = notCheckpointable(); !why.empty()) return refuse("cannot be checkpointed: " + why);
  auto w = CheckpointWriter::start(*key, fdSink(req.fd));
  if (!w) return refuse(w.status().message());
  Status s = writeCheckpoint(**w);
  if (s) s = (*w)->finish();
  // No fsync: the new worker reads the file back at once, from the page
  // cache; should the host go down meanwhile, the session goes with it anyway.
  if (!s) return refuse("writing the checkpoint: " + s.message());
  ::close(std::exchange(req.fd, -1));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - drained).count();
  RGPU_LOG_INFO("session {}: its queued work drained in {} ms; checkpoint written in {} ms: {} bytes of state, {} "
                "bytes stored",
                session_id_, drain_ms, ms, (*w)->plainBytes(), (*w)->storedBytes());
  tellDaemon(joinFields({"checkpointed", std::to_string((*w)->plainBytes()), std::to_string((*w)->storedBytes()),
                         std::to_string(drain_ms), std::to_string(modulesNeedComputeCapability())}));
  Verdict verdict = awaitVerdict();
  if (verdict != Verdict::kCommit && verdict != Verdict::kForward) {
    RGPU_LOG_WARN("session {}: the move was called off; the session carries on in this worker", session_id_);
    precopy_base_.reset();
    return false;
  }
  moved_ = true;
  if (verdict == Verdict::kForward) {
    std::lock_guard lock(resume_mu_);
    RGPU_LOG_INFO("session {}: moved to member '{}' at {}; this worker sends its client there, then ends", session_id_,
                  forward_.member, forward_.address);
  } else {
    RGPU_LOG_INFO("session {}: moved to a new worker; this one ends", session_id_);
  }
  return true;
}

bool Session::forwardResume(common::TlsConnection& conn, bool stripe, uint64_t hello_seq) {
  Forward to;
  {
    std::lock_guard lock(resume_mu_);
    if (forward_.address.empty()) return false;
    to = forward_;
  }
  capnp::MallocMessageBuilder out;
  auto w = out.initRoot<wire::Welcome>();
  w.setProtocolVersion(wire::PROTOCOL_VERSION);
  w.setServerVersion(RGPU_VERSION);
  w.setSessionId(client_session_id_);
  if (stripe) {
    w.setError(err::kNotPermitted);
    w.setMessage("stripe refused: the session moved to member '" + to.member + "'");
  } else {
    // The client resumes there (the session's token and resume id go with it).
    w.setRedirect(to.address);
    w.setRedirectMember(to.member);
  }
  std::vector<uint8_t> frame;
  common::appendFrame(frame, FrameType::kWelcome, 0, hello_seq, out, 0);
  Status s = conn.write(frame.data(), frame.size());
  if (stripe) return true;
  if (s) {
    RGPU_LOG_INFO("session {}: its client, resuming from {}, was sent to member '{}' at {}", session_id_,
                  conn.peerAddress(), to.member, to.address);
    {
      std::lock_guard lock(resume_mu_);
      forward_.told = true;
    }
    resume_cv_.notify_all();
  }
  return true;
}

void Session::awaitForwarded() {
  std::unique_lock lock(resume_mu_);
  if (forward_.address.empty()) return;
  resume_cv_.wait_for(lock, std::chrono::milliseconds(cfg_.resume_grace_ms),
                      [&] { return forward_.told || resume_closed_ || stopped_.load(); });
  if (!forward_.told)
    RGPU_LOG_WARN("session {}: its client did not come back to be sent to member '{}' at {}", session_id_,
                  forward_.member, forward_.address);
}

Status Session::runRestored() {
  resume_stop_fd_ = eventfd(0, EFD_CLOEXEC);
  resume_thread_ = std::thread([this] { acceptResumes(); });
  // The pool's record of the session is ours now: its launch gate too.
  if (auto p = pool_.rejoin(); p) {
    placement_.gate_slot = p->gate_slot;
    gate_ = pool_.gateFor(placement_);
    if (gate_) backend_->setLaunchGate(gate_.get());
  } else {
    RGPU_LOG_WARN("session {}: no launch gate after the move: {}", session_id_, p.status().message());
  }
  Status s = awaitResume(Status(err::kDevicesUnavailable, "the session moved to this worker"));
  if (s && !moved_ && !stopped_.load()) s = serve();
  return endRun(s);
}

}  // namespace rgpu::server
