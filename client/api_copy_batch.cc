// Batches of copies (cudaMemcpyBatchAsync, cudaMemcpy3DBatchAsync): every
// operation is checked before any is issued (one bad entry: nothing is
// copied, cudaErrorInvalidValue), then each runs as the single copy it is, in
// the stream's order. CUDA lets a batch's copies run in any order among
// themselves; rgpu runs them in list order, which is one of those orders. A
// host source is read while the call runs, which every source access order
// (stream, during the call, any) allows. The attributes' location hints and
// the prefer-overlap flag are hints: accepted, as NVIDIA's runtime does.
#include "client/api_util.h"
#include "client/arrays.h"

namespace rgpu::client {
namespace {

Status checkOrder(cudaMemcpySrcAccessOrder o) {
  if (o == cudaMemcpySrcAccessOrderStream || o == cudaMemcpySrcAccessOrderDuringApiCall ||
      o == cudaMemcpySrcAccessOrderAny)
    return Status::ok();
  return Status(err::kInvalidValue, "a copy's source access order is not valid");
}

// The batch calls take a stream other than the legacy NULL stream.
Status checkBatchStream(cudaStream_t stream, bool ptsz) {
  if (stream == cudaStreamLegacy || (!stream && !ptsz))
    return Status(err::kInvalidValue, "a batch of copies is not issued to the legacy NULL stream");
  return Status::ok();
}

Status batch1D(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
               cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, cudaStream_t stream, bool ptsz) {
  RGPU_TRY(checkBatchStream(stream, ptsz));
  if (count == 0) return Status(err::kInvalidValue, "an empty batch");
  if (!dsts || !srcs || !sizes || !attrs || !attrsIdxs)
    return Status(err::kInvalidValue, "a batch needs its destinations, sources, sizes and attributes");
  if (numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0)
    return Status(err::kInvalidValue, "the attributes begin at copy 0 and number at most the copies");
  for (size_t k = 0; k < numAttrs; ++k) {
    if (k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1]) return Status(err::kInvalidValue, "attribute indices rise");
    if (attrsIdxs[k] >= count) return Status(err::kInvalidValue, "an attribute index past the last copy");
    RGPU_TRY(checkOrder(attrs[k].srcAccessOrder));
  }
  for (size_t i = 0; i < count; ++i)
    if (sizes[i] && (!dsts[i] || !srcs[i])) return Status(err::kInvalidValue, "copy " + std::to_string(i) + " has a NULL side");
  for (size_t i = 0; i < count; ++i)
    if (sizes[i]) RGPU_TRY(memcpyImpl(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault, stream, true, ptsz));
  return Status::ok();
}

// One operand of a 3D batch as a copy end (`unit`: the element size the copy counts in).
Status operandEnd(const cudaMemcpy3DOperand& o, const cudaExtent& e, size_t unit, CopyEnd* end) {
  *end = CopyEnd{};
  if (o.type == cudaMemcpyOperandTypeArray) {
    auto a = arrayOf(o.op.array.array);
    if (!a) return a.status();
    end->array = *a;
    end->x = o.op.array.offset.x * unit;
    end->y = o.op.array.offset.y;
    end->z = o.op.array.offset.z;
    return Status::ok();
  }
  if (o.type != cudaMemcpyOperandTypePointer) return Status(err::kInvalidValue, "an operand is a pointer or an array");
  if (!o.op.ptr.ptr) return Status(err::kInvalidValue, "a pointer operand is NULL");
  if ((o.op.ptr.rowLength && o.op.ptr.rowLength < e.width) || (o.op.ptr.layerHeight && o.op.ptr.layerHeight < e.height))
    return Status(err::kInvalidValue, "a pointer operand's rows or layers are shorter than the copy");
  end->ptr = o.op.ptr.ptr;
  end->pitch = (o.op.ptr.rowLength ? o.op.ptr.rowLength : e.width) * unit;
  end->rows = o.op.ptr.layerHeight ? o.op.ptr.layerHeight : e.height;
  return Status::ok();
}

Status batch3D(size_t numOps, cudaMemcpy3DBatchOp* ops, unsigned long long flags, cudaStream_t stream, bool ptsz) {
  RGPU_TRY(checkBatchStream(stream, ptsz));
  if (flags) return Status(err::kInvalidValue, "cudaMemcpy3DBatchAsync's flags must be 0");
  if (numOps == 0 || !ops) return Status(err::kInvalidValue, "an empty batch");
  struct Planned {
    CopyEnd src, dst;
    size_t width;
  };
  std::vector<Planned> plan(numOps);
  for (size_t i = 0; i < numOps; ++i) {
    const cudaMemcpy3DBatchOp& op = ops[i];
    if (op.extent.width == 0 || op.extent.height == 0 || op.extent.depth == 0)
      return Status(err::kInvalidValue, "copy " + std::to_string(i) + " has an empty extent");
    RGPU_TRY(checkOrder(op.srcAccessOrder));
    // Elements: an array's, or bytes between pointers; two arrays agree.
    size_t unit = 1;
    for (const cudaMemcpy3DOperand* o : {&op.src, &op.dst})
      if (o->type == cudaMemcpyOperandTypeArray) {
        auto a = arrayOf(o->op.array.array);
        if (!a) return a.status();
        if (unit != 1 && unit != (*a)->elem) return Status(err::kInvalidValue, "arrays of different element sizes");
        unit = (*a)->elem;
      }
    RGPU_TRY(operandEnd(op.src, op.extent, unit, &plan[i].src));
    RGPU_TRY(operandEnd(op.dst, op.extent, unit, &plan[i].dst));
    plan[i].width = op.extent.width * unit;
  }
  for (size_t i = 0; i < numOps; ++i)
    RGPU_TRY(copy3D(plan[i].src, plan[i].dst, plan[i].width, ops[i].extent.height, ops[i].extent.depth,
                    cudaMemcpyDefault, stream, true, ptsz));
  return Status::ok();
}

}  // namespace
}  // namespace rgpu::client

using namespace rgpu::client;

RGPU_EXPORT cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                             struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                             cudaStream_t stream) {
  return guarded([&] { return batch1D(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs, const size_t* sizes,
                                                  size_t count, struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                                  size_t numAttrs, cudaStream_t stream) {
  return guarded([&] { return batch1D(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, true); });
}
RGPU_EXPORT cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, struct cudaMemcpy3DBatchOp* opList,
                                               unsigned long long flags, cudaStream_t stream) {
  return guarded([&] { return batch3D(numOps, opList, flags, stream, false); });
}
RGPU_EXPORT cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, struct cudaMemcpy3DBatchOp* opList,
                                                    unsigned long long flags, cudaStream_t stream) {
  return guarded([&] { return batch3D(numOps, opList, flags, stream, true); });
}
