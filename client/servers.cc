#include "client/servers.h"

#include "common/log.h"

namespace rgpu::client {

Status ServerSet::checkSpan(const std::vector<SpanPart>& span, const std::string& from) {
  uint64_t total = 0;
  if (span.size() > static_cast<size_t>(kMaxProgramDevices))
    return Status(err::kDevicesUnavailable, "the pool (asked at " + from + ") spread this program over " +
                                                std::to_string(span.size()) + " members: more than " +
                                                std::to_string(kMaxProgramDevices) + " devices");
  for (const auto& p : span) {
    if (p.count == 0 || p.address.empty())
      return Status(err::kDevicesUnavailable, "the pool (asked at " + from + ") sent a malformed span part for member '" +
                                                  p.member + "'");
    total += p.count;
  }
  if (total > static_cast<uint64_t>(kMaxProgramDevices))
    return Status(err::kDevicesUnavailable, "the pool (asked at " + from + ") spread this program over " +
                                                std::to_string(total) + " devices: more than " +
                                                std::to_string(kMaxProgramDevices));
  return Status::ok();
}

namespace {

// Rewrites device fields to one server's numbering and finds which server
// the request goes to (see ServerSet::localize).
class Localizer {
 public:
  Localizer(const std::vector<uint8_t>& part_of, const std::vector<int>& base) : part_of_(part_of), base_(base) {}

  // A program device named by a field: its server's number for it. Devices
  // outside the program are left as they are (the server refuses them).
  int32_t device(int32_t d) {
    if (d < 0 || static_cast<size_t>(d) >= part_of_.size()) return d;
    choose(part_of_[static_cast<size_t>(d)]);
    return d - base_[part_of_[static_cast<size_t>(d)]];
  }
  void stream(wire::StreamRef::Builder s) { s.setDevice(device(s.getDevice())); }
  // Module, kernel and variable ids carry their program device in 6 bits.
  void id(uint32_t id) {
    const uint32_t d = id & 63;
    if (d < part_of_.size()) choose(part_of_[d]);
  }

  void request(wire::Request::Builder r);

  int part = -1;
  bool mixed = false;

 private:
  void choose(int p) {
    if (part < 0) part = p;
    else if (part != p) mixed = true;
  }
  const std::vector<uint8_t>& part_of_;
  const std::vector<int>& base_;
};

void Localizer::request(wire::Request::Builder r) {
  using R = wire::Request;
  switch (r.which()) {
    case R::MALLOC: { auto m = r.getMalloc(); m.setDevice(device(m.getDevice())); break; }
    case R::MEMCPY_HTO_D: stream(r.getMemcpyHtoD().getStream()); break;
    case R::MEMCPY_DTO_H: stream(r.getMemcpyDtoH().getStream()); break;
    case R::MEMCPY_DTO_D: stream(r.getMemcpyDtoD().getStream()); break;
    case R::MEMSET: stream(r.getMemset().getStream()); break;
    case R::MEMCPY2_D: stream(r.getMemcpy2D().getStream()); break;
    case R::MEMSET2_D: stream(r.getMemset2D().getStream()); break;
    case R::STREAM_CREATE: stream(r.getStreamCreate().getStream()); break;
    case R::STREAM_DESTROY: stream(r.getStreamDestroy()); break;
    case R::STREAM_SYNCHRONIZE: stream(r.getStreamSynchronize()); break;
    case R::STREAM_QUERY: stream(r.getStreamQuery()); break;
    case R::STREAM_WAIT_EVENT: stream(r.getStreamWaitEvent().getStream()); break;
    case R::EVENT_CREATE: { auto m = r.getEventCreate(); m.setDevice(device(m.getDevice())); break; }
    case R::EVENT_RECORD: stream(r.getEventRecord().getStream()); break;
    case R::DEVICE_SYNCHRONIZE: { auto m = r.getDeviceSynchronize(); m.setDevice(device(m.getDevice())); break; }
    case R::DEVICE_RESET: { auto m = r.getDeviceReset(); m.setDevice(device(m.getDevice())); break; }
    case R::MEM_GET_INFO: { auto m = r.getMemGetInfo(); m.setDevice(device(m.getDevice())); break; }
    case R::CONDITIONAL_HANDLE_CREATE: {
      auto m = r.getConditionalHandleCreate();
      m.setDevice(device(m.getDevice()));
      break;
    }
    case R::MODULE_LOAD: { auto m = r.getModuleLoad(); m.setDevice(device(m.getDevice())); break; }
    case R::MODULE_UNLOAD: id(r.getModuleUnload().getId()); break;
    case R::FUNCTION_REGISTER: id(r.getFunctionRegister().getModule()); break;
    case R::VAR_REGISTER: id(r.getVarRegister().getModule()); break;
    case R::LAUNCH_KERNEL: {
      auto m = r.getLaunchKernel();
      id(m.getFunction());
      stream(m.getStream());
      break;
    }
    case R::FUNC_GET_ATTRIBUTES: id(r.getFuncGetAttributes().getId()); break;
    case R::FUNC_SET_ATTRIBUTE: id(r.getFuncSetAttribute().getId()); break;
    case R::OCCUPANCY: id(r.getOccupancy().getId()); break;
    case R::SYMBOL_ADDRESS: id(r.getSymbolAddress().getId()); break;
    case R::HOST_FUNC_ENQUEUE: stream(r.getHostFuncEnqueue().getStream()); break;
    case R::MEMCPY_PEER: {
      auto m = r.getMemcpyPeer();
      m.setDstDevice(device(m.getDstDevice()));
      m.setSrcDevice(device(m.getSrcDevice()));
      stream(m.getStream());
      break;
    }
    case R::BLAS: stream(r.getBlas().getStream()); break;
    case R::LT_MATMUL: stream(r.getLtMatmul().getStream()); break;
    case R::RAND_FILL: stream(r.getRandFill().getStream()); break;
    case R::FFT_PLAN: { auto m = r.getFftPlan(); m.setDevice(device(m.getDevice())); break; }
    case R::FFT_EXEC: stream(r.getFftExec().getStream()); break;
    case R::FFT_RELEASE: { auto m = r.getFftRelease(); m.setDevice(device(m.getDevice())); break; }
    case R::SOLVER: stream(r.getSolver().getStream()); break;
    case R::SOLVER_BUFFER_SIZE: stream(r.getSolverBufferSize().getStream()); break;
    case R::SPARSE: stream(r.getSparse().getStream()); break;
    case R::SPARSE_BUFFER_SIZE: stream(r.getSparseBufferSize().getStream()); break;
    case R::DNN: stream(r.getDnn().getStream()); break;
    case R::DNN_SIZE: stream(r.getDnnSize().getStream()); break;
    case R::LT_HEURISTIC: stream(r.getLtHeuristic().getStream()); break;
    case R::SET_LIMIT: { auto m = r.getSetLimit(); m.setDevice(device(m.getDevice())); break; }
    case R::GRAPH_CREATE: {
      auto m = r.getGraphCreate();
      m.setDevice(device(m.getDevice()));
      // A graph's nodes run on its device: what they name is on its server.
      for (auto node : m.getNodes())
        if (node.isRequest()) request(node.getRequest());
      break;
    }
    case R::GRAPH_LAUNCH: stream(r.getGraphLaunch().getStream()); break;
    case R::ARRAY_CREATE: { auto m = r.getArrayCreate(); m.setDevice(device(m.getDevice())); break; }
    case R::COPY3_D: stream(r.getCopy3D().getStream()); break;
    case R::TEXTURE_CREATE: { auto m = r.getTextureCreate(); m.setDevice(device(m.getDevice())); break; }
    case R::TEXTURE_DESTROY: { auto m = r.getTextureDestroy(); m.setDevice(device(m.getDevice())); break; }
    case R::SURFACE_DESTROY: { auto m = r.getSurfaceDestroy(); m.setDevice(device(m.getDevice())); break; }
    // Name no device: the caller's hint says where (a pointer's, an
    // event's, an object's device), or they concern the program as a whole.
    case R::NOOP: case R::PING: case R::FREE: case R::EVENT_SYNCHRONIZE: case R::EVENT_QUERY:
    case R::EVENT_ELAPSED_TIME: case R::EVENT_DESTROY: case R::HOST_FUNC_DONE: case R::POINTER_ATTRIBUTES:
    case R::POOL_STATUS: case R::GRAPH_DESTROY: case R::ARRAY_DESTROY:
    case R::SURFACE_CREATE: case R::POOL_MEMBERS: case R::SESSION_MOVE:
      break;
  }
}

}  // namespace

Result<std::unique_ptr<ServerSet>> ServerSet::open(const ClientConfig& cfg, const HandlerFor& handler) {
  std::unique_ptr<ServerSet> set(new ServerSet());
  std::vector<SpanPart> span;
  std::string from;
  auto first = Connection::open(cfg, handler(0), &span, &from);
  if (!first) return first.status();
  if (*first) {
    RGPU_TRY(set->add(std::move(*first), ""));
    return set;
  }
  RGPU_TRY(checkSpan(span, from));
  for (size_t i = 0; i < span.size(); ++i) {
    ClientConfig there = cfg;
    there.server = span[i].address;
    there.server_name.clear();  // verified as its own address says
    there.request_devices = span[i].count;
    auto c = Connection::openPart(there, handler(i), static_cast<uint32_t>(i));
    Status st = c ? Status::ok() : c.status();
    if (st && (*c)->welcome().devices.size() != span[i].count)
      st = Status(err::kDevicesUnavailable, "it gave " + std::to_string((*c)->welcome().devices.size()) +
                                                " device(s), not " + std::to_string(span[i].count));
    if (st) st = set->add(std::move(*c), span[i].member);
    if (!st) {
      set->close();
      return Status(err::kDevicesUnavailable, "the pool (asked at " + from + ") spread this program over " +
                                                  std::to_string(span.size()) + " members, but part " +
                                                  std::to_string(i) + " (member '" + span[i].member + "' at " +
                                                  span[i].address + ", " + std::to_string(span[i].count) +
                                                  " device(s)) failed: " + st.message());
    }
  }
  RGPU_LOG_INFO("the pool (asked at {}) spread this program over {} members: {}", from, span.size(), set->describe());
  return set;
}

ServerSet::~ServerSet() { close(); }

Status ServerSet::add(std::unique_ptr<Connection> conn, const std::string& member) {
  const int base = static_cast<int>(devices_.size());
  const int count = static_cast<int>(conn->welcome().devices.size());
  if (base + count > kMaxProgramDevices)
    return Status(err::kDevicesUnavailable, "more than " + std::to_string(kMaxProgramDevices) + " devices");
  const auto part = static_cast<uint8_t>(parts_.size());
  for (const auto& d : conn->welcome().devices) {
    Welcome::Device g = d;
    // Peer access stays within a server; in program ordinals.
    g.peer_access = 0;
    for (int i = 0; i < count; ++i)
      if (d.peer_access >> i & 1) g.peer_access |= uint64_t{1} << (base + i);
    devices_.push_back(std::move(g));
    part_of_.push_back(part);
  }
  base_.push_back(base);
  parts_.push_back({std::move(conn), member});
  return Status::ok();
}

size_t ServerSet::partOf(int device) const {
  if (device < 0 || static_cast<size_t>(device) >= part_of_.size()) return 0;
  return part_of_[static_cast<size_t>(device)];
}

Status ServerSet::localize(wire::Request::Builder req, int hint, size_t* part) const {
  *part = 0;
  if (single()) return Status::ok();
  Localizer l(part_of_, base_);
  l.request(req);
  if (l.mixed)
    return Status(err::kInvalidValue, "the call names devices of two servers of the pool (" + describe() +
                                          "): rgpu cannot run it as one");
  if (l.part >= 0) *part = static_cast<size_t>(l.part);
  else *part = partOf(hint);
  return Status::ok();
}

std::string ServerSet::takeDeviceOutput() {
  std::string out;
  for (auto& p : parts_) out += p.conn->takeDeviceOutput();
  return out;
}

void ServerSet::close() {
  for (auto& p : parts_) p.conn->close();
}

std::string ServerSet::describe() const {
  std::string s;
  for (const auto& p : parts_) {
    if (!s.empty()) s += ", ";
    const size_t n = p.conn->welcome().devices.size();
    s += (p.member.empty() ? std::string() : "'" + p.member + "' at ") + p.conn->server() + " (" +
         std::to_string(n) + (n == 1 ? " device)" : " devices)");
  }
  return s;
}

}  // namespace rgpu::client
