// cuDNN's legacy operations (common/dnn_args.h): output shapes, what cuDNN
// refuses, the device memory each call reads and writes -- the ranges the
// server checks every call against -- and a call's trip through the wire.
#include "common/dnn_args.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace rgpu::common::dnn {
namespace {

Tensor nchw(int64_t n, int64_t c, int64_t h, int64_t w, uint64_t ptr, int32_t type = kFloat, int32_t format = 0) {
  const int64_t dims[4] = {n, c, h, w};
  Tensor t = packed(type, 4, dims, format);
  t.ptr = ptr;
  return t;
}

Args convForward() {
  Args a;
  a.op = Op::kConvFwd;
  a.conv.spatial = 2;
  a.conv.pad = {1, 1, 0};
  Tensor w = nchw(4, 3, 3, 3, 0x2000);
  w.filter_format = 0;
  a.t = {nchw(2, 3, 9, 8, 0x1000), w, nchw(2, 4, 9, 8, 0x3000)};
  return a;
}

std::map<std::string, uint64_t> bytes(const Args& a) {
  std::map<std::string, uint64_t> out;
  for (const Range& r : ranges(a)) out[r.what] = r.bytes;
  return out;
}

TEST(DnnArgs, OutputShapesAsCudnnComputesThem) {
  Args a = convForward();
  auto y = convOutput(a.conv, a.t[0], a.t[1]);
  ASSERT_TRUE(y);
  EXPECT_EQ(y->dims[2], 9);
  EXPECT_EQ(y->dims[3], 8);
  a.conv.stride = {2, 3, 1};
  a.conv.dilation = {2, 1, 1};  // extent 5 x 3: (9 + 2 - 5) / 2 + 1 = 4, (8 + 2 - 3) / 3 + 1 = 3
  y = convOutput(a.conv, a.t[0], a.t[1]);
  ASSERT_TRUE(y);
  EXPECT_EQ(y->dims[2], 4);
  EXPECT_EQ(y->dims[3], 3);
  Pooling p;
  p.spatial = 2;
  p.window = {3, 3, 1}, p.pad = {1, 1, 0}, p.stride = {2, 2, 1};
  auto py = poolOutput(p, nchw(2, 3, 7, 6, 1));
  ASSERT_TRUE(py);
  EXPECT_EQ(py->dims[2], 4);
  EXPECT_EQ(py->dims[3], 3);
  p.pad = {3, 3, 0};  // padding as large as the window
  EXPECT_FALSE(poolOutput(p, nchw(2, 3, 7, 6, 1)));
}

TEST(DnnArgs, NhwcStridesPutTheChannelInnermost) {
  const Tensor t = nchw(2, 3, 4, 5, 0, kFloat, 1);
  EXPECT_EQ(t.strides[1], 1);
  EXPECT_EQ(t.strides[3], 3);
  EXPECT_EQ(t.strides[2], 15);
  EXPECT_EQ(t.strides[0], 60);
  EXPECT_EQ(t.spanBytes(), 2u * 3 * 4 * 5 * 4);
}

TEST(DnnArgs, RefusesWhatCudnnRefuses) {
  Args a = convForward();
  EXPECT_TRUE(check(a));
  a.t[2].dims[2] = 10;  // y of the wrong height
  Status s = check(a);
  EXPECT_EQ(s.code(), err::kInvalidValue);
  EXPECT_NE(s.message().find("gives 2x4x9x8"), std::string::npos) << s.message();
  a = convForward();
  a.t[1].filter_format = -1;  // a tensor where a filter belongs
  EXPECT_EQ(check(a).code(), err::kInvalidValue);
  a = convForward();
  a.conv.groups = 2;  // 3 channels in 2 groups of a 3-channel filter
  EXPECT_EQ(check(a).code(), err::kInvalidValue);
  a = convForward();
  a.t[0].type = a.t[1].type = a.t[2].type = 3;  // int8
  EXPECT_EQ(check(a).code(), err::kNotSupported);
  a = convForward();
  a.t[2].type = kDouble;  // mixed
  EXPECT_EQ(check(a).code(), err::kNotSupported);
  a = convForward();
  a.t[2].ptr = 0;
  EXPECT_EQ(check(a).code(), err::kInvalidValue);
  a = convForward();
  a.t[0].rank = 9;  // more dimensions than CUDNN_DIM_MAX
  EXPECT_EQ(check(a).code(), err::kInvalidValue);
  a = convForward();
  a.t[0].strides[3] = 0;
  EXPECT_EQ(check(a).code(), err::kInvalidValue);

  Args add;
  add.op = Op::kAddTensor;
  add.t = {nchw(1, 4, 1, 1, 1), nchw(2, 4, 3, 5, 2)};
  EXPECT_TRUE(check(add));
  add.t[0].dims[1] = 3;  // does not broadcast
  EXPECT_EQ(check(add).code(), err::kInvalidValue);

  Args reduce;
  reduce.op = Op::kReduceTensor;
  reduce.reduce_op = 3;  // MAX
  reduce.t = {nchw(2, 3, 4, 5, 1), nchw(2, 1, 4, 5, 2)};
  EXPECT_TRUE(check(reduce));
  reduce.reduce_indices = 1;  // with indices: 40 of them, 4 bytes each
  reduce.indices = 3, reduce.indices_size = 39 * 4;
  EXPECT_EQ(check(reduce).code(), err::kInvalidValue);
  reduce.indices_size = 40 * 4;
  EXPECT_TRUE(check(reduce));
  reduce.t[1].dims[2] = 2;  // neither A's size nor 1
  EXPECT_EQ(check(reduce).code(), err::kInvalidValue);

  Args bn;
  bn.op = Op::kBnFwdTraining;
  const Tensor x = nchw(4, 3, 5, 5, 1);
  Tensor p = nchw(1, 3, 1, 1, 2);
  bn.t = {x, x, p, p, p, p, p, p};
  EXPECT_TRUE(check(bn));
  bn.t[4].ptr = 0;  // running mean without running variance
  EXPECT_EQ(check(bn).code(), err::kInvalidValue);
  bn.t[5].ptr = 0;  // neither: fine
  EXPECT_TRUE(check(bn));
  bn.bn_mode = 0;  // per activation: the parameters are 1xCxHxW
  EXPECT_EQ(check(bn).code(), err::kInvalidValue);

  Args drop;
  drop.op = Op::kDropoutFwd;
  drop.t = {x, x};
  drop.dropout = 0.5f;
  drop.reserve = 3;
  EXPECT_EQ(check(drop).code(), err::kInvalidValue);  // no states
  drop.states = 4;
  EXPECT_TRUE(check(drop));
  drop.dropout = 1.f;
  EXPECT_EQ(check(drop).code(), err::kInvalidValue);
}

TEST(DnnArgs, RangesCoverEveryTensorAsItsStridesSpanIt) {
  Args a = convForward();
  a.workspace = 0x9000, a.workspace_size = 256;
  auto b = bytes(a);
  EXPECT_EQ(b["x"], 2u * 3 * 9 * 8 * 4);
  EXPECT_EQ(b["w"], 4u * 3 * 3 * 3 * 4);
  EXPECT_EQ(b["y"], 2u * 4 * 9 * 8 * 4);
  EXPECT_EQ(b["the workspace"], 256u);
  // A strided tensor spans its last element, not dims times element size: 2x3 with a row stride of 10.
  Args s;
  s.op = Op::kScaleTensor;
  Tensor t = nchw(1, 1, 2, 3, 0x100, kHalf);
  t.strides[2] = 10;
  s.t = {t};
  EXPECT_EQ(bytes(s)["y"], (1u + 10 + 2) * 2);
  // A span that would overflow is capped, and refused by check().
  t.dims[2] = kMaxDim, t.strides[2] = kMaxDim;
  s.t = {t};
  EXPECT_EQ(check(s).code(), err::kInvalidValue);
}

TEST(DnnArgs, ACallCrossesTheWireWhole) {
  Args a = convForward();
  a.conv.stride = {2, 3, 1}, a.conv.groups = 1, a.conv.mode = 0, a.algo = 5;
  a.alpha = 2, a.beta = 0.5, a.workspace = 0x9000, a.workspace_size = 64;
  capnp::MallocMessageBuilder msg;
  auto w = msg.initRoot<wire::Dnn>();
  toWire(a, w);
  const Args b = fromWire(w.asReader());
  EXPECT_EQ(b.t.size(), 3u);
  EXPECT_EQ(b.t[1].filter_format, 0);
  EXPECT_EQ(b.t[2].dims[3], 8);
  EXPECT_EQ(b.t[0].strides[0], 3 * 9 * 8);
  EXPECT_EQ(b.conv.stride[1], 3);
  EXPECT_EQ(b.conv.mode, 0);
  EXPECT_EQ(b.algo, 5);
  EXPECT_EQ(b.alpha, 2);
  EXPECT_EQ(b.workspace_size, 64u);
  // Dimensions and strides of different lengths, or more than 8: refused, not read past.
  auto t = w.getTensors()[0];
  t.initStrides(2);
  EXPECT_EQ(check(fromWire(w.asReader())).code(), err::kInvalidValue);
  t.initDims(9);
  t.initStrides(9);
  EXPECT_EQ(check(fromWire(w.asReader())).code(), err::kInvalidValue);
}

}  // namespace
}  // namespace rgpu::common::dnn
