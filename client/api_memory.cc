// Memory: allocation, copies of every kind, memset, symbols, pointer attributes.
#include <cstdlib>
#include <cstring>

#include "client/api_util.h"
#include "client/cross_server.h"
#include "client/graph.h"
#include "client/managed.h"
#include "protocol/frame.h"

using namespace rgpu;
using namespace rgpu::client;

namespace rgpu::client {
namespace {
constexpr unsigned kRegisteredFlag = 0x80000000u;  // pinned range came from cudaHostRegister

// The device side of a copy must be memory this process allocated on the server.
Status needDevice(const void* p, size_t count, const char* what, int* device = nullptr) {
  uint64_t base = 0, size = 0;
  if (rt().classify(p, device, &base, &size) != MemKind::kDevice)
    return Status(err::kInvalidValue, std::string(what) + " is not a device pointer of this process");
  if (count > size - (reinterpret_cast<uint64_t>(p) - base))
    return Status(err::kInvalidValue, std::string(what) + " range runs past the end of its allocation");
  return Status::ok();
}

// A __device__/__constant__ variable: placed by the server when the module
// loaded, so it cannot be asked for again if it lands on this process's memory.
void trackSymbol(uint64_t addr, uint64_t size, int device) {
  if (rt().trackDevice(addr, size, device) == DeviceRanges::Result::kCollides)
    common::logOnce("symbol-collides:" + std::to_string(addr),
                    "a device variable at " + std::to_string(addr) + " (" + std::to_string(size) +
                        " bytes) overlaps this process's own memory: host memory there would be taken for it");
}

// Pitched copies are not relayed between servers (docs/pool.md).
Status sameServerAs(StreamRef s, const void* dst, const void* src, const char* what) {
  for (const void* p : {dst, src}) {
    int d = -1;
    if (rt().classify(p, &d) == MemKind::kDevice && rt().acrossServers(d, s.device)) {
      common::logOnce(std::string("cross-server:") + what,
                      std::string(what) + " between devices of two pool members (or on another member's stream) is "
                      "not supported by rgpu (returns cudaErrorNotSupported); cudaMemcpy and cudaMemcpyPeer are relayed");
      return Status(err::kNotSupported, std::string(what) + " across servers of the pool is not supported");
    }
  }
  return Status::ok();
}

Result<cudaMemcpyKind> resolveKind(void* dst, const void* src, cudaMemcpyKind kind) {
  bool dd = rt().classify(dst) == MemKind::kDevice, sd = rt().classify(src) == MemKind::kDevice;
  if (kind == cudaMemcpyDefault)
    return sd ? (dd ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
              : (dd ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return Status(err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind");
  return effectiveKind(dst, src, kind);  // managed memory on a host side: a device-side copy
}
}  // namespace

Status peerOn(void* dst, int dst_device, const void* src, int src_device, size_t count, StreamRef s, bool serialize) {
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initMemcpyPeer();
  m.setDst(reinterpret_cast<uint64_t>(dst));
  m.setDstDevice(dst_device);
  m.setSrc(reinterpret_cast<uint64_t>(src));
  m.setSrcDevice(src_device);
  m.setSize(count);
  m.setSerialize(serialize);
  setStream(m.initStream(), s);
  return rt().post(msg);
}

namespace {
Status memcpyCore(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream, bool async,
                  bool ptsz);
// cudaMemcpyPeer (`serialize`) is ordered with all work on the current,
// source and destination devices; cudaMemcpyPeerAsync only on its stream.
Status peerImpl(void* dst, int dstDevice, const void* src, int srcDevice, size_t count, cudaStream_t stream, bool ptsz,
                bool serialize) {
  if (count == 0) return Status::ok();
  int dd = -1, sd = -1;
  if (rt().classify(dst, &dd) != MemKind::kDevice || rt().classify(src, &sd) != MemKind::kDevice || dd != dstDevice ||
      sd != srcDevice)
    return Status(err::kInvalidValue, "peer copy pointers are not device memory of the devices named");
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  if (rt().acrossServers(dstDevice, srcDevice) || rt().acrossServers(dstDevice, s->device))
    return relayPeer(dst, dstDevice, src, srcDevice, count, *s);
  return peerOn(dst, dstDevice, src, srcDevice, count, *s, serialize);
}
Status memcpy2DCore(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz);
}  // namespace

// A blocking copy flushes the device's printf buffer on a GPU.
Status memcpyImpl(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream, bool async,
                  bool ptsz) {
  Status s = memcpyCore(dst, src, count, kind, stream, async, ptsz);
  if (!async) rt().flushDeviceOutput();
  return s;
}

Status memcpy2DImpl(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz) {
  Status s = memcpy2DCore(dst, dpitch, src, spitch, width, height, kind, stream, async, ptsz);
  if (!async) rt().flushDeviceOutput();
  return s;
}

namespace {
Status memcpyCore(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream, bool async,
                  bool ptsz) {
  if (count == 0) return Status::ok();
  RGPU_TRY(needPtr(dst, "destination"));
  RGPU_TRY(needPtr(src, "source"));
  // Mapped host memory is copied on the device, through its alias (client/managed.h).
  dst = const_cast<void*>(ManagedMemory::get().deviceSide(dst));
  src = ManagedMemory::get().deviceSide(src);
  auto k = resolveKind(dst, src, kind);
  if (!k) return k.status();
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  if (*k == cudaMemcpyHostToDevice || *k == cudaMemcpyDeviceToHost) {
    // Device memory on another server of the pool than the stream's: the
    // copy runs there once the stream's work is done, and is done on return.
    auto there = streamOfServerHolding(*k == cudaMemcpyHostToDevice ? dst : src, *s);
    if (!there) return there.status();
    if (*there) *s = **there, async = false;
  }
  const uint64_t chunk = protocol::kMaxBulkBytes;
  switch (*k) {
    case cudaMemcpyHostToDevice: {
      RGPU_TRY(needDevice(dst, count, "destination"));
      if (Status c; async && capturesActive() &&
                    captureNodeOn(*s, [&] { return memcpy1DParams(dst, src, count, *k); }, &c, nullptr))
        return c;
      // Sent now (the caller may reuse its buffer on return). cudaMemcpyAsync
      // reports errors at the next synchronising call; cudaMemcpy returns
      // once the copy is done, with any error of earlier work, as NVIDIA's
      // does: its last piece waits for the server's answer. From pinned
      // memory an async copy is sent from the program's buffer as it is, and
      // neither copied nor waited for (Connection::post).
      uint64_t pbase = 0, psize = 0;
      const bool pinned = async && rt().classify(src, nullptr, &pbase, &psize) == MemKind::kPinned &&
                          reinterpret_cast<uint64_t>(src) + count <= pbase + psize;
      for (uint64_t off = 0; off < count; off += chunk) {
        uint64_t n = std::min<uint64_t>(chunk, count - off);
        common::CallMessage msg(64);
        auto m = msg.initRoot<wire::Request>().initMemcpyHtoD();
        m.setDst(reinterpret_cast<uint64_t>(dst) + off);
        m.setSize(n);
        setStream(m.initStream(), *s);
        const char* piece = static_cast<const char*>(src) + off;
        if (async || off + n < count) {
          RGPU_TRY(rt().postOn(-1, msg, piece, n, pinned));
        } else {
          auto r = rt().call(msg, piece, n);
          if (!r) return r.status();
        }
      }
      return Status::ok();
    }
    case cudaMemcpyDeviceToHost: {
      RGPU_TRY(needDevice(src, count, "source"));
      if (Status c; async && capturesActive() &&
                    captureNodeOn(*s, [&] { return memcpy1DParams(dst, src, count, *k); }, &c, nullptr))
        return c;
      // Into pinned memory an async copy really is asynchronous: the receiver
      // thread writes the data when the stream gets there. Pageable memory is
      // synchronous, as in CUDA.
      bool deferred = async && rt().classify(dst) == MemKind::kPinned;
      for (uint64_t off = 0; off < count; off += chunk) {
        uint64_t n = std::min<uint64_t>(chunk, count - off);
        common::CallMessage msg(64);
        auto m = msg.initRoot<wire::Request>().initMemcpyDtoH();
        m.setSrc(reinterpret_cast<uint64_t>(src) + off);
        m.setSize(n);
        setStream(m.initStream(), *s);
        char* into = static_cast<char*>(dst) + off;
        if (deferred) {
          RGPU_TRY(rt().postExpectingData(msg, into, n));
        } else {
          auto r = rt().call(msg, nullptr, 0, into, n);
          if (!r) return r.status();
        }
      }
      return Status::ok();
    }
    case cudaMemcpyDeviceToDevice: {
      int dd = -1, sd = -1;
      RGPU_TRY(needDevice(dst, count, "destination", &dd));
      RGPU_TRY(needDevice(src, count, "source", &sd));
      // Between devices it is a peer copy: cudaMemcpy is then ordered on both
      // devices as cudaMemcpyPeer is; cudaMemcpyAsync on its stream only.
      if (dd != s->device || sd != s->device) return peerImpl(dst, dd, src, sd, count, stream, ptsz, !async);
      common::CallMessage msg(64);
      auto m = msg.initRoot<wire::Request>().initMemcpyDtoD();
      m.setDst(reinterpret_cast<uint64_t>(dst));
      m.setSrc(reinterpret_cast<uint64_t>(src));
      m.setSize(count);
      setStream(m.initStream(), *s);
      RGPU_TRY(rt().post(msg));
      // A copy the program asked for with host memory on both sides (managed
      // or mapped memory made it a device copy) is done when cudaMemcpy returns.
      if (!async && kind == cudaMemcpyHostToHost) RGPU_TRY(streamSyncImpl(stream, ptsz));
      return Status::ok();
    }
    default: {
      if (Status c; async && capturesActive() &&
                    captureNodeOn(*s, [&] { return memcpy1DParams(dst, src, count, *k); }, &c, nullptr))
        return c;  // a copy node: a host function of the graph
      // Host to host, in stream order: earlier device-to-host copies may still
      // be landing in `src`.
      if (async) RGPU_TRY(streamSyncImpl(stream, ptsz));
      std::memmove(dst, src, count);
      return Status::ok();
    }
  }
}

}  // namespace

bool captureAllocation(StreamRef s, size_t size, void** out, Status* st) {
  cudaGraphNode_t node = nullptr;
  cudaMemAllocNodeParams p{};
  p.bytesize = size;
  if (!captureNodeOn(s, [&] { return memAllocParams(p, s.device); }, st, &node)) return false;
  if (*st) *out = node->p.alloc_params.dptr;
  return true;
}

Status memsetImpl(void* dst, int value, size_t count, cudaStream_t stream, bool ptsz) {
  if (count == 0) return Status::ok();
  RGPU_TRY(needDevice(dst, count, "destination"));
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  auto there = streamOfServerHolding(dst, *s);  // memory on another server than the stream's: done there
  if (!there) return there.status();
  if (*there) *s = **there;
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initMemset();
  m.setDst(reinterpret_cast<uint64_t>(dst));
  m.setValue(static_cast<uint8_t>(value));
  m.setSize(count);
  setStream(m.initStream(), *s);
  RGPU_TRY(rt().post(msg));
  return *there ? synchronize(*s) : Status::ok();
}

namespace {
Status memcpy2DCore(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t stream, bool async, bool ptsz) {
  if (width == 0 || height == 0) return Status::ok();
  if (width > dpitch || width > spitch) return Status(err::kInvalidPitchValue, "width exceeds a pitch");
  RGPU_TRY(needPtr(dst, "destination"));
  RGPU_TRY(needPtr(src, "source"));
  dst = const_cast<void*>(ManagedMemory::get().deviceSide(dst));  // mapped host memory: its device alias
  src = ManagedMemory::get().deviceSide(src);
  auto k = resolveKind(dst, src, kind);
  if (!k) return k.status();
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  if (rt().spread()) RGPU_TRY(sameServerAs(*s, dst, src, "cudaMemcpy2D"));
  uint64_t packed = uint64_t{width} * height;
  if (*k == cudaMemcpyHostToHost) {
    if (Status c; async && capturesActive() && captureNodeOn(*s, [&] {
          cudaMemcpy3DParms p{};
          p.srcPtr = cudaPitchedPtr{const_cast<void*>(src), spitch, width, height};
          p.dstPtr = cudaPitchedPtr{dst, dpitch, width, height};
          p.extent = cudaExtent{width, height, 1};
          p.kind = cudaMemcpyHostToHost;
          return memcpyParams(p);
        }, &c, nullptr))
      return c;  // a copy node: a host function of the graph
    if (async) RGPU_TRY(streamSyncImpl(stream, ptsz));
    for (size_t r = 0; r < height; ++r)
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    return Status::ok();
  }
  if ((*k == cudaMemcpyHostToDevice || *k == cudaMemcpyDeviceToHost) && packed > protocol::kMaxBulkBytes) {
    // Split by rows so each piece fits one frame.
    size_t rows = std::max<size_t>(1, protocol::kMaxBulkBytes / width);
    for (size_t r = 0; r < height; r += rows) {
      size_t n = std::min(rows, height - r);
      RGPU_TRY(memcpy2DCore(static_cast<char*>(dst) + r * dpitch, dpitch, static_cast<const char*>(src) + r * spitch,
                            spitch, width, n, *k, stream, async, ptsz));
    }
    return Status::ok();
  }
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initMemcpy2D();
  m.setDst(reinterpret_cast<uint64_t>(dst));
  m.setDpitch(dpitch);
  m.setSrc(reinterpret_cast<uint64_t>(src));
  m.setSpitch(spitch);
  m.setWidth(width);
  m.setHeight(height);
  setStream(m.initStream(), *s);
  if (*k == cudaMemcpyHostToDevice) {
    m.setKind(1);
    std::vector<char> rows;
    const void* bytes = src;
    if (spitch != width) {
      rows.resize(packed);
      for (size_t r = 0; r < height; ++r) std::memcpy(rows.data() + r * width, static_cast<const char*>(src) + r * spitch, width);
      bytes = rows.data();
    }
    if (async) return rt().post(msg, bytes, packed);
    auto r = rt().call(msg, bytes, packed);  // as cudaMemcpy: done, and earlier errors returned
    return r ? Status::ok() : r.status();
  }
  if (*k == cudaMemcpyDeviceToHost) {
    m.setKind(2);
    if (dpitch == width) {
      auto r = rt().call(msg, nullptr, 0, dst, packed);
      return r ? Status::ok() : r.status();
    }
    std::vector<char> rows(packed);
    auto r = rt().call(msg, nullptr, 0, rows.data(), packed);
    if (!r) return r.status();
    for (size_t i = 0; i < height; ++i) std::memcpy(static_cast<char*>(dst) + i * dpitch, rows.data() + i * width, width);
    return Status::ok();
  }
  m.setKind(3);
  RGPU_TRY(rt().post(msg));
  // Host memory on both sides as the program named it (managed or mapped): done when cudaMemcpy2D returns.
  if (!async && kind == cudaMemcpyHostToHost) RGPU_TRY(streamSyncImpl(stream, ptsz));
  return Status::ok();
}

}  // namespace

Status memset2DImpl(void* dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream, bool ptsz) {
  if (width == 0 || height == 0) return Status::ok();
  if (width > pitch) return Status(err::kInvalidPitchValue, "width exceeds pitch");
  RGPU_TRY(needDevice(dst, (height - 1) * pitch + width, "destination"));
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  common::CallMessage msg(64);
  auto m = msg.initRoot<wire::Request>().initMemset2D();
  m.setDst(reinterpret_cast<uint64_t>(dst));
  m.setPitch(pitch);
  m.setValue(static_cast<uint8_t>(value));
  m.setWidth(width);
  m.setHeight(height);
  setStream(m.initStream(), *s);
  return rt().post(msg);
}

Status symbolCopyImpl(const void* symbol, void* host, size_t count, size_t offset, cudaMemcpyKind kind,
                      cudaStream_t stream, bool to_symbol, bool async, bool ptsz) {
  auto s = rt().stream(stream, ptsz);
  if (!s) return s.status();
  auto sym = rt().symbol(symbol, s->device);
  if (!sym) return sym.status();
  auto [addr, size] = *sym;
  if (offset > size || count > size - offset) return Status(err::kInvalidValue, "copy runs past the end of the symbol");
  trackSymbol(addr, size, s->device);
  void* dev = reinterpret_cast<void*>(addr + offset);
  if (kind == cudaMemcpyDefault) kind = rt().classify(host) == MemKind::kDevice ? cudaMemcpyDeviceToDevice
                                                                                  : (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  if (to_symbol) {
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice)
      return Status(err::kInvalidMemcpyDirection, "copies to a symbol go host-to-device or device-to-device");
    return memcpyImpl(dev, host, count, kind, stream, async, ptsz);
  }
  if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
    return Status(err::kInvalidMemcpyDirection, "copies from a symbol go device-to-host or device-to-device");
  return memcpyImpl(host, dev, count, kind, stream, async, ptsz);
}

}  // namespace rgpu::client

// ---- allocation ------------------------------------------------------------------

namespace {
// Gives back device memory the program never saw (asynchronously).
void freeQuietly(uint64_t p, int device) {
  common::CallMessage msg(32);
  msg.initRoot<wire::Request>().initFree().setPtr(p);
  (void)rt().postOn(device, msg);  // (not tracked: its device says where)
}

// Device memory whose range this process can keep its own memory out of:
// one the server placed over the program's own memory is kept aside (so it
// is not handed out again) while another is asked for, then given back.
Result<uint64_t> deviceMemory(int dev, uint64_t size, uint64_t pitch_width = 0, uint64_t pitch_height = 0,
                              uint64_t* pitch = nullptr) {
  constexpr int kAttempts = 8;
  std::vector<uint64_t> collided;
  Result<uint64_t> out = Status(err::kMemoryAllocation, "");
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    common::CallMessage msg(32);
    auto m = msg.initRoot<wire::Request>().initMalloc();
    m.setDevice(dev);
    m.setSize(size);
    m.setPitchWidth(pitch_width);
    m.setPitchHeight(pitch_height);
    auto r = rt().call(msg);
    if (!r) {
      out = r.status();
      break;
    }
    uint64_t p = 0, bytes = size;
    auto reply = r->reader();
    if (pitch_height) {
      p = reply.getPitched().getPtr();
      *pitch = reply.getPitched().getPitch();
      bytes = *pitch * pitch_height;
    } else {
      p = reply.getPtr();
    }
    if (rt().trackDevice(p, bytes, dev) != DeviceRanges::Result::kCollides) {
      out = p;
      break;
    }
    rt().untrackDevice(p, dev);
    collided.push_back(p);
    out = Status(err::kMemoryAllocation, "the server's device memory kept landing on this process's own memory or another pool member's (" +
                                             std::to_string(kAttempts) + " tries)");
  }
  for (uint64_t p : collided) freeQuietly(p, dev);
  return out;
}
}  // namespace

namespace rgpu::client {
Result<uint64_t> allocateDeviceMemory(int device, uint64_t size) { return deviceMemory(device, size); }
}  // namespace rgpu::client

RGPU_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(devPtr, "devPtr"));
    *devPtr = nullptr;
    if (size == 0) return Status::ok();
    auto p = deviceMemory(rt().currentDevice(), size);
    if (!p) return p.status();
    *devPtr = reinterpret_cast<void*>(*p);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  // The pitch is the server's (cuMemAllocPitch on a GPU): the driver's 2D
  // copies may refuse pitches it did not compute.
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(devPtr, "devPtr"));
    RGPU_TRY(needPtr(pitch, "pitch"));
    *devPtr = nullptr;
    if (width == 0 || height == 0) {
      *pitch = 0;
      return Status::ok();
    }
    uint64_t p = 0;
    auto ptr = deviceMemory(rt().currentDevice(), 0, width, height, &p);
    if (!ptr) return ptr.status();
    *devPtr = reinterpret_cast<void*>(*ptr);
    *pitch = p;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent) {
  // cudaMallocPitch of extent.height x extent.depth rows.
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pitchedDevPtr, "pitchedDevPtr"));
    *pitchedDevPtr = cudaPitchedPtr{nullptr, 0, extent.width, extent.height};
    const uint64_t rows = uint64_t{extent.height} * extent.depth;
    if (extent.width == 0 || rows == 0) return Status::ok();
    if (extent.depth && rows / extent.depth != extent.height) return Status(err::kInvalidValue, "extent out of range");
    uint64_t p = 0;
    auto ptr = deviceMemory(rt().currentDevice(), 0, extent.width, rows, &p);
    if (!ptr) return ptr.status();
    pitchedDevPtr->ptr = reinterpret_cast<void*>(*ptr);
    pitchedDevPtr->pitch = p;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaFree(void* devPtr) {
  return guarded([&]() -> Status {
    if (!devPtr) return Status::ok();
    if (rt().classify(devPtr) != MemKind::kDevice) return Status(err::kInvalidValue, "not a device pointer of this process");
    // Managed memory: the allocation the server knows holds it.
    uint64_t target = reinterpret_cast<uint64_t>(devPtr);
    if (uint64_t base = ManagedMemory::get().remove(target)) target = base;
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initFree().setPtr(target);
    auto r = rt().call(msg);
    rt().untrackDevice(target);
    if (r) poolForget(devPtr);
    return r ? Status::ok() : r.status();
  });
}

RGPU_EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  // From the stream's device's current pool (api_mempool.cc). Allocating
  // earlier than stream order is always valid; the pointer is usable by work
  // enqueued after this call.
  return guarded([&]() -> Status {
    auto s = rt().stream(stream);
    if (!s) return s.status();
    RGPU_TRY(needPtr(devPtr, "devPtr"));
    if (Status c; capturesActive() && captureAllocation(*s, size, devPtr, &c)) return c;
    return poolAllocate(devPtr, size, nullptr, s->device);
  });
}
RGPU_EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream) {
  return cudaMallocAsync(devPtr, size, stream);
}

RGPU_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  // The server frees once the device's queued work is done: never early.
  return guarded([&]() -> Status {
    auto s = rt().stream(stream);
    if (!s) return s.status();
    if (Status c; capturesActive() && captureNodeOn(*s, [&] { return memFreeParams(devPtr); }, &c, nullptr)) return c;
    return cudaFree(devPtr) == cudaSuccess ? Status::ok() : Status(rt().lastError(false), "");
  });
}
RGPU_EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream) { return cudaFreeAsync(devPtr, stream); }

RGPU_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pHost, "pHost"));
    if (flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
      return Status(err::kInvalidValue, "unknown cudaHostAlloc flags");
    // "Pinned" memory is ordinary host memory here: the GPU is on another
    // machine. Tracking it lets async device-to-host copies into it stay async.
    if (flags & cudaHostAllocMapped) {
      auto m = allocateMapped(size ? size : 1);
      if (!m) return m.status();
      rt().trackPinned(*m, size ? size : 1, flags);
      *pHost = *m;
      return Status::ok();
    }
    void* p = nullptr;
    if (posix_memalign(&p, 4096, size ? size : 1) != 0) return Status(err::kMemoryAllocation, "host allocation failed");
    rt().trackPinned(p, size ? size : 1, flags);
    *pHost = p;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }

RGPU_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  return guarded([&]() -> Status {
    if (!ptr) return Status::ok();
    unsigned flags = 0;
    uint64_t size = 0;
    if (!rt().pinnedAt(ptr, &size, &flags)) return Status(err::kInvalidValue, "not memory from cudaHostAlloc/cudaMallocHost");
    if (flags & kRegisteredFlag)
      return Status(err::kInvalidValue, "memory from cudaHostRegister is released with cudaHostUnregister");
    // A copy still queued into it would write into whatever malloc hands out next.
    rt().waitForWritesInto(ptr, size);
    rt().untrackPinned(ptr);
    if (flags & cudaHostAllocMapped) return freeMapped(ptr, size, false);
    std::free(ptr);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(ptr, "ptr"));
    if (size == 0) return Status(err::kInvalidValue, "size is 0");
    if (rt().classify(ptr) != MemKind::kHost) return Status(cudaErrorHostMemoryAlreadyRegistered, "already registered");
    if (flags & cudaHostRegisterMapped) RGPU_TRY(registerMapped(ptr, size));
    rt().trackPinned(ptr, size, flags | kRegisteredFlag);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaHostUnregister(void* ptr) {
  return guarded([&]() -> Status {
    unsigned flags = 0;
    uint64_t size = 0;
    if (!rt().pinnedAt(ptr, &size, &flags)) return Status(cudaErrorHostMemoryNotRegistered, "not registered");
    if (!(flags & kRegisteredFlag))
      return Status(cudaErrorHostMemoryNotRegistered, "not registered with cudaHostRegister");
    // The program may free the memory as soon as this returns.
    rt().waitForWritesInto(ptr, size);
    rt().untrackPinned(ptr);
    if (flags & cudaHostRegisterMapped) return freeMapped(ptr, size, true);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(pFlags, "pFlags"));
    unsigned flags = 0;
    if (rt().classify(pHost, nullptr, nullptr, nullptr, &flags) != MemKind::kPinned)
      return Status(err::kInvalidValue, "not pinned memory");
    *pFlags = flags & ~kRegisteredFlag;
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(attributes, "attributes"));
    std::memset(attributes, 0, sizeof *attributes);
    int dev = 0;
    switch (rt().classify(ptr, &dev)) {
      case MemKind::kDevice:
        attributes->type = cudaMemoryTypeDevice;
        attributes->device = dev;
        attributes->devicePointer = const_cast<void*>(ptr);
        if (ManagedMemory::get().contains(ptr)) {
          attributes->type = cudaMemoryTypeManaged;
          attributes->hostPointer = const_cast<void*>(ptr);
        } else if (uint64_t h = ManagedMemory::get().hostSide(ptr)) {  // the device alias of mapped memory
          attributes->type = cudaMemoryTypeHost;
          attributes->hostPointer = reinterpret_cast<void*>(h);
        }
        break;
      case MemKind::kPinned:
        attributes->type = cudaMemoryTypeHost;
        attributes->device = rt().currentDevice();
        attributes->hostPointer = const_cast<void*>(ptr);
        // Mapped: its device alias (cudaHostGetDevicePointer's).
        if (const void* d = ManagedMemory::get().deviceSide(ptr); d != ptr) attributes->devicePointer = const_cast<void*>(d);
        break;
      case MemKind::kHost:
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->hostPointer = const_cast<void*>(ptr);
        break;
    }
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(free, "free"));
    RGPU_TRY(needPtr(total, "total"));
    common::CallMessage msg(32);
    msg.initRoot<wire::Request>().initMemGetInfo().setDevice(rt().currentDevice());
    auto r = rt().call(msg);
    if (!r) return r.status();
    *free = r->reader().getMemInfo().getFree();
    *total = r->reader().getMemInfo().getTotal();
    return Status::ok();
  });
}

// ---- copies and memset -----------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return guarded([&] { return memcpyImpl(dst, src, count, kind, nullptr, false, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return guarded([&] { return memcpyImpl(dst, src, count, kind, nullptr, false, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                        cudaStream_t stream) {
  return guarded([&] { return memcpyImpl(dst, src, count, kind, stream, true, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                             cudaStream_t stream) {
  return guarded([&] { return memcpyImpl(dst, src, count, kind, stream, true, true); });
}
RGPU_EXPORT cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return guarded([&] { return memsetImpl(devPtr, value, count, nullptr, false); });
}
RGPU_EXPORT cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return guarded([&] { return memsetImpl(devPtr, value, count, nullptr, true); });
}
RGPU_EXPORT cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return guarded([&] { return memsetImpl(devPtr, value, count, stream, false); });
}
RGPU_EXPORT cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return guarded([&] { return memsetImpl(devPtr, value, count, stream, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return memcpy2DImpl(dst, dpitch, src, spitch, width, height, kind, nullptr, false, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                          size_t height, enum cudaMemcpyKind kind) {
  return guarded([&] { return memcpy2DImpl(dst, dpitch, src, spitch, width, height, kind, nullptr, false, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                          size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded([&] { return memcpy2DImpl(dst, dpitch, src, spitch, width, height, kind, stream, true, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                               size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded([&] { return memcpy2DImpl(dst, dpitch, src, spitch, width, height, kind, stream, true, true); });
}
RGPU_EXPORT cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return guarded([&] { return memset2DImpl(devPtr, pitch, value, width, height, nullptr, false); });
}
RGPU_EXPORT cudaError_t cudaMemset2D_ptds(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return guarded([&] { return memset2DImpl(devPtr, pitch, value, width, height, nullptr, true); });
}
RGPU_EXPORT cudaError_t cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                                          cudaStream_t stream) {
  return guarded([&] { return memset2DImpl(devPtr, pitch, value, width, height, stream, false); });
}
namespace {
// cudaMemset3D: a 2D memset per slice (one when the slices follow each other).
Status memset3DImpl(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t stream, bool ptsz) {
  if (e.width == 0 || e.height == 0 || e.depth == 0) return Status::ok();
  if (e.depth > 1 && p.ysize < e.height) return Status(err::kInvalidValue, "the extent's height exceeds ysize");
  if (e.depth == 1 || p.ysize == e.height)
    return memset2DImpl(p.ptr, p.pitch, value, e.width, e.height * e.depth, stream, ptsz);
  for (size_t z = 0; z < e.depth; ++z)
    RGPU_TRY(memset2DImpl(static_cast<char*>(p.ptr) + z * p.pitch * p.ysize, p.pitch, value, e.width, e.height, stream, ptsz));
  return Status::ok();
}
}  // namespace
RGPU_EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int value, struct cudaExtent extent) {
  return guarded([&] { return memset3DImpl(p, value, extent, nullptr, false); });
}
RGPU_EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr p, int value, struct cudaExtent extent) {
  return guarded([&] { return memset3DImpl(p, value, extent, nullptr, true); });
}
RGPU_EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr p, int value, struct cudaExtent extent, cudaStream_t stream) {
  return guarded([&] { return memset3DImpl(p, value, extent, stream, false); });
}
RGPU_EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr p, int value, struct cudaExtent extent,
                                               cudaStream_t stream) {
  return guarded([&] { return memset3DImpl(p, value, extent, stream, true); });
}
RGPU_EXPORT cudaError_t cudaMemset2DAsync_ptsz(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                                               cudaStream_t stream) {
  return guarded([&] { return memset2DImpl(devPtr, pitch, value, width, height, stream, true); });
}


RGPU_EXPORT cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  return guarded([&] { return peerImpl(dst, dstDevice, src, srcDevice, count, nullptr, false, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                            cudaStream_t stream) {
  return guarded([&] { return peerImpl(dst, dstDevice, src, srcDevice, count, stream, false, false); });
}

// ---- symbols ---------------------------------------------------------------------------------

RGPU_EXPORT cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind) {
  return guarded([&] { return symbolCopyImpl(symbol, const_cast<void*>(src), count, offset, kind, nullptr, true, false, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                                enum cudaMemcpyKind kind) {
  return guarded([&] { return symbolCopyImpl(symbol, const_cast<void*>(src), count, offset, kind, nullptr, true, false, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                             enum cudaMemcpyKind kind) {
  return guarded([&] { return symbolCopyImpl(symbol, dst, count, offset, kind, nullptr, false, false, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                                  enum cudaMemcpyKind kind) {
  return guarded([&] { return symbolCopyImpl(symbol, dst, count, offset, kind, nullptr, false, false, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                                enum cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded([&] { return symbolCopyImpl(symbol, const_cast<void*>(src), count, offset, kind, stream, true, true, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count, size_t offset,
                                                     enum cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded([&] { return symbolCopyImpl(symbol, const_cast<void*>(src), count, offset, kind, stream, true, true, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                                  enum cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded([&] { return symbolCopyImpl(symbol, dst, count, offset, kind, stream, false, true, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                                       enum cudaMemcpyKind kind, cudaStream_t stream) {
  return guarded([&] { return symbolCopyImpl(symbol, dst, count, offset, kind, stream, false, true, true); });
}

RGPU_EXPORT cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(devPtr, "devPtr"));
    int dev = rt().currentDevice();
    auto sym = rt().symbol(symbol, dev);
    if (!sym) return sym.status();
    trackSymbol(sym->first, sym->second, dev);
    *devPtr = reinterpret_cast<void*>(sym->first);
    return Status::ok();
  });
}

RGPU_EXPORT cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  return guarded([&]() -> Status {
    RGPU_TRY(needPtr(size, "size"));
    auto sym = rt().symbol(symbol, rt().currentDevice());
    if (!sym) return sym.status();
    *size = sym->second;
    return Status::ok();
  });
}
