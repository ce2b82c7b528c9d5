// Fuzz target: what a worker does with the bytes of one incoming frame before
// dispatch — header decoding with its limits, the segment-table check, and a
// full traversal of the Cap'n Proto request with the server's reader options.
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <vector>

#include "common/frame_io.h"
#include "protocol/frame.h"
#include "protocol/rgpu.capnp.h"

namespace {
void visit(rgpu::wire::Request::Reader r) {
  using R = rgpu::wire::Request;
  volatile uint64_t sink = 0;
  switch (r.which()) {
    case R::MEMCPY_HTO_D: sink = r.getMemcpyHtoD().getDst() + r.getMemcpyHtoD().getStream().getId(); break;
    case R::LAUNCH_KERNEL: {
      auto l = r.getLaunchKernel();
      sink = l.getParams().size() + l.getGrid().getX() + l.getBlock().getZ() + l.getStream().getDevice();
      break;
    }
    case R::FUNCTION_REGISTER: sink = r.getFunctionRegister().getName().size(); break;
    case R::VAR_REGISTER: sink = r.getVarRegister().getName().size(); break;
    case R::MEMCPY2_D: sink = r.getMemcpy2D().getHeight() * r.getMemcpy2D().getWidth(); break;
    default: sink = static_cast<uint64_t>(r.which()); break;
  }
  (void)sink;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < rgpu::protocol::kFrameHeaderBytes) return 0;
  rgpu::protocol::FrameHeader h;
  std::string why;
  if (!rgpu::protocol::decodeHeader(data, h, why)) return 0;
  size_t avail = size - rgpu::protocol::kFrameHeaderBytes;
  size_t len = std::min<size_t>(avail, h.message_len) / 8 * 8;
  if (len == 0) return 0;
  std::vector<uint64_t> words(len / 8);
  std::memcpy(words.data(), data + rgpu::protocol::kFrameHeaderBytes, len);
  auto table_ok = rgpu::common::validateSegmentTable(rgpu::common::asWords(words));
  if (!table_ok) return 0;
  try {
    capnp::FlatArrayMessageReader reader(rgpu::common::asWords(words), rgpu::common::readerOptions());
    visit(reader.getRoot<rgpu::wire::Request>());
  } catch (const kj::Exception&) {
    // Malformed messages are refused by the session with an error reply.
  }
  return 0;
}
