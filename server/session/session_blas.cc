// The session's cuBLAS and cuBLASLt calls: decoded from the wire, checked
// against the session's allocations (server/backend/blas.h), handed to the backend.
#include "common/log.h"
#include "server/session/session.h"

namespace rgpu::server {

namespace {

Result<BlasScalar> scalarOf(wire::BlasScalar::Reader s, const char* what) {
  BlasScalar out;
  if (s.isDevice()) {
    out.device = true;
    out.ptr = s.getDevice();
    return out;
  }
  auto bytes = s.getHost();
  if (bytes.size() > sizeof out.bytes) return Status(err::kInvalidValue, std::string(what) + ": more than 16 bytes");
  if (bytes.size()) std::memcpy(out.bytes, bytes.begin(), bytes.size());  // (an absent scalar has no bytes)
  return out;
}

LtMatrix matrixOf(wire::LtMatrix::Reader m) {
  LtMatrix x;
  x.ptr = m.getPtr();
  x.type = m.getType();
  x.rows = m.getRows();
  x.cols = m.getCols();
  x.ld = m.getLd();
  x.order = m.getOrder();
  x.batch = m.getBatchCount();
  x.batch_stride = m.getBatchStride();
  return x;
}

Result<LtArgs> ltOf(wire::LtMatmul::Reader m) {
  LtArgs a;
  a.compute = m.getComputeType();
  a.scale_type = m.getScaleType();
  a.pointer_mode = m.getPointerMode();
  a.trans_a = m.getTransA();
  a.trans_b = m.getTransB();
  a.epilogue = m.getEpilogue();
  a.bias = m.getBias();
  a.bias_type = m.getBiasType();
  a.bias_batch_stride = m.getBiasBatchStride();
  a.aux = m.getAux();
  a.aux_ld = m.getAuxLd();
  a.aux_batch_stride = m.getAuxBatchStride();
  a.aux_type = m.getAuxType();
  auto alpha = scalarOf(m.getAlpha(), "alpha");
  if (!alpha) return alpha.status();
  auto beta = scalarOf(m.getBeta(), "beta");
  if (!beta) return beta.status();
  a.alpha = *alpha;
  a.beta = *beta;
  a.a = matrixOf(m.getA());
  a.b = matrixOf(m.getB());
  a.c = matrixOf(m.getC());
  a.d = matrixOf(m.getD());
  a.workspace = m.getWorkspace();
  a.workspace_size = m.getWorkspaceSize();
  auto algo = m.getAlgo();
  a.algo.assign(reinterpret_cast<const char*>(algo.begin()), algo.size());
  return a;
}

}  // namespace

Status Session::dispatchBlas(const protocol::FrameHeader& h, wire::Request::Reader req) {
  using R = wire::Request;
  const uint64_t seq = h.seq;
  const bool async = h.flags & protocol::kFlagAsync;
  if (h.bulk_len) return Status(err::kInvalidValue, "unexpected bulk payload");
  auto refuse = [&](const Status& s, const char* what) {
    RGPU_LOG_WARN("session {}: {} refused: {}", session_id_, what, s.message());
    finish(h, s);
    return Status::ok();
  };
  // ltMatmul and ltHeuristic carry the same description of a matmul.
  auto decodeLt = [&](wire::LtMatmul::Reader m, StreamKey& key) -> Result<LtArgs> {
    RGPU_TRY(checkStream(m.getStream(), key));
    return ltOf(m);
  };
  auto sameDevice = [](int memory, const StreamKey& key) {
    return memory < 0 || memory == key.device
               ? Status::ok()
               : Status(err::kInvalidValue, "the call's memory is on device " + std::to_string(memory) +
                                                ", its stream on device " + std::to_string(key.device));
  };
  switch (req.which()) {
    case R::BLAS: {
      auto m = req.getBlas();
      StreamKey key;
      Status s = checkStream(m.getStream(), key);
      BlasArgs a;
      a.op = static_cast<BlasOp>(m.getOp());
      a.a_type = m.getAType();
      a.b_type = m.getBType();
      a.c_type = m.getCType();
      a.compute = m.getComputeType();
      a.trans_a = m.getTransA();
      a.trans_b = m.getTransB();
      a.side = m.getSide();
      a.uplo = m.getUplo();
      a.diag = m.getDiag();
      a.m = m.getM();
      a.n = m.getN();
      a.k = m.getK();
      auto alpha = scalarOf(m.getAlpha(), "alpha");
      auto beta = scalarOf(m.getBeta(), "beta");
      if (s && !alpha) s = alpha.status();
      if (s && !beta) s = beta.status();
      if (s) {
        a.alpha = *alpha;
        a.beta = *beta;
      }
      a.a = m.getA();
      a.lda = m.getLda();
      a.stride_a = m.getStrideA();
      a.b = m.getB();
      a.ldb = m.getLdb();
      a.stride_b = m.getStrideB();
      a.c = m.getC();
      a.ldc = m.getLdc();
      a.stride_c = m.getStrideC();
      a.batch = m.getBatchCount();
      a.x = m.getX();
      a.incx = m.getIncx();
      a.y = m.getY();
      a.incy = m.getIncy();
      a.result = m.getResult();
      a.result64 = m.getResult64();
      a.math_mode = m.getMathMode();
      a.workspace = m.getWorkspace();
      a.workspace_size = m.getWorkspaceSize();
      int dev = -1;
      if (s && static_cast<uint16_t>(m.getOp()) > static_cast<uint16_t>(kLastBlasOp))
        s = Status(err::kNotSupported, "unknown cuBLAS operation " + std::to_string(static_cast<int>(m.getOp())));
      if (s) s = checkBlas(a, allocs_, &dev);
      if (s) s = sameDevice(dev, key);
      bool to_host = blasResultBytes(a) && !a.result;
      if (s && to_host && async) s = Status(err::kInvalidValue, "a result for the host needs a synchronous call");
      if (!s) return refuse(s, "cuBLAS call");
      if (to_host) {
        s = backend_->blas(key, a, replyWith(seq));
        if (!s) finish(h, s);
      } else {
        finish(h, backend_->blas(key, a, nullptr));
      }
      return Status::ok();
    }
    case R::LT_MATMUL: {
      StreamKey key;
      auto a = decodeLt(req.getLtMatmul(), key);
      Status s = a.status();
      int dev = -1;
      if (s) s = checkLt(*a, &allocs_, &dev);
      if (s) s = sameDevice(dev, key);
      if (!s) return refuse(s, "cublasLtMatmul");
      finish(h, backend_->ltMatmul(key, *a));
      return Status::ok();
    }
    case R::LT_HEURISTIC: {
      auto m = req.getLtHeuristic();
      StreamKey key;
      auto a = decodeLt(m, key);
      Status s = a.status();
      if (s) s = checkLt(*a, nullptr, nullptr);
      if (!s) return refuse(s, "cublasLtMatmulAlgoGetHeuristic");
      auto algos = backend_->ltHeuristic(key.device, *a, std::min<uint32_t>(m.getRequestedAlgos(), 64),
                                         m.getMaxWorkspace());
      if (!algos) return refuse(algos.status(), "cublasLtMatmulAlgoGetHeuristic");
      std::vector<Backend::LtAlgo> list = std::move(*algos);
      finish(h, Status::ok(), [list](auto& r) {
        auto out = r.initLtAlgos(static_cast<unsigned>(list.size()));
        for (unsigned i = 0; i < list.size(); ++i) {
          out[i].setAlgo(kj::arrayPtr(reinterpret_cast<const kj::byte*>(list[i].algo.data()), list[i].algo.size()));
          out[i].setWorkspaceSize(list[i].workspace);
          out[i].setWavesCount(list[i].waves);
        }
      });
      return Status::ok();
    }
    default: return Status(err::kUnknown, "not a cuBLAS call");
  }
}

}  // namespace rgpu::server
