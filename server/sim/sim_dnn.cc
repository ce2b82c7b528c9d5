#include "server/sim/sim_dnn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/half.h"

namespace rgpu::server::simdnn {

namespace dn = common::dnn;
using dn::Op;
using dn::Tensor;

namespace {

// Element access to a tensor in its own type.
struct View {
  uint8_t* base;
  int32_t type;
  double get(int64_t off) const {
    const uint8_t* p = base + off * dn::elementBytes(type);
    switch (type) {
      case dn::kDouble: { double v; std::memcpy(&v, p, 8); return v; }
      case dn::kFloat: { float v; std::memcpy(&v, p, 4); return v; }
      default: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return type == dn::kHalf ? common::halfToFloat(h) : common::bf16ToFloat(h);
      }
    }
  }
  void set(int64_t off, double v) const {
    uint8_t* p = base + off * dn::elementBytes(type);
    switch (type) {
      case dn::kDouble: std::memcpy(p, &v, 8); break;
      case dn::kFloat: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      default: {
        const float f = static_cast<float>(v);
        const uint16_t h = type == dn::kHalf ? common::floatToHalf(f) : common::floatToBf16(f);
        std::memcpy(p, &h, 2);
      }
    }
  }
  // dst = alpha * v + beta * dst, dst not read when beta is 0.
  void blend(int64_t off, double v, double alpha, double beta) const {
    set(off, beta == 0 ? alpha * v : alpha * v + beta * get(off));
  }
};
View view(const Tensor& t) { return View{reinterpret_cast<uint8_t*>(t.ptr), t.type}; }

// Every element of `shape` in logical (row-major) order: f(linear index, offsets in each of `ts`), where a
// tensor of dimension 1 where `shape` has more is broadcast.
template <size_t N, typename F>
void forEach(const Tensor& shape, const std::array<const Tensor*, N>& ts, F&& f) {
  const int r = shape.rank;
  std::array<int64_t, dn::kMaxRank> idx{};
  std::array<int64_t, N> off{};
  const int64_t total = shape.elements();
  for (int64_t lin = 0; lin < total; ++lin) {
    f(lin, off);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < shape.dims[d]) {
        for (size_t k = 0; k < N; ++k)
          if (ts[k]->dims[d] != 1) off[k] += ts[k]->strides[d];
        break;
      }
      for (size_t k = 0; k < N; ++k)
        if (ts[k]->dims[d] != 1) off[k] -= (shape.dims[d] - 1) * ts[k]->strides[d];
      idx[d] = 0;
    }
  }
}

// ---- convolution ----

// A tensor seen as N x C x D x H x W (a 2-D convolution's depth is 1).
struct Dims5 {
  int64_t n, c, sp[3];
  int64_t sn, sc, ss[3];
};
Dims5 dims5(const Tensor& t, int spatial) {
  Dims5 d{t.dims[0], t.dims[1], {1, 1, 1}, t.strides[0], t.strides[1], {0, 0, 0}};
  for (int i = 0; i < spatial; ++i) d.sp[3 - spatial + i] = t.dims[2 + i], d.ss[3 - spatial + i] = t.strides[2 + i];
  return d;
}

struct ConvGeo {
  Dims5 x, w, y;  // y: the output (dy for the backward passes)
  int64_t pad[3], stride[3], dil[3];
  int64_t groups;
  bool flip;
};

ConvGeo convGeo(const dn::Conv& c, const Tensor& x, const Tensor& w, const Tensor& y) {
  ConvGeo g{dims5(x, c.spatial), dims5(w, c.spatial), dims5(y, c.spatial), {0, 0, 0}, {1, 1, 1}, {1, 1, 1},
            c.groups, c.mode == 0};
  for (int i = 0; i < c.spatial; ++i) {
    const int j = 3 - c.spatial + i;
    g.pad[j] = c.pad[i], g.stride[j] = c.stride[i], g.dil[j] = c.dilation[i];
  }
  return g;
}

// Every product x * w that makes up an output element: f(x offset, w offset, y offset).
template <typename F>
void taps(const ConvGeo& g, F&& f) {
  const int64_t kg = g.w.n / g.groups, cg = g.w.c;
  for (int64_t n = 0; n < g.y.n; ++n)
    for (int64_t k = 0; k < g.y.c; ++k) {
      const int64_t group = k / kg;
      for (int64_t o0 = 0; o0 < g.y.sp[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.y.sp[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.y.sp[2]; ++o2) {
            const int64_t yo = n * g.y.sn + k * g.y.sc + o0 * g.y.ss[0] + o1 * g.y.ss[1] + o2 * g.y.ss[2];
            for (int64_t c = 0; c < cg; ++c) {
              const int64_t xc = n * g.x.sn + (group * cg + c) * g.x.sc, wc = k * g.w.sn + c * g.w.sc;
              for (int64_t f0 = 0; f0 < g.w.sp[0]; ++f0) {
                const int64_t i0 = o0 * g.stride[0] - g.pad[0] + f0 * g.dil[0];
                if (i0 < 0 || i0 >= g.x.sp[0]) continue;
                const int64_t w0 = g.flip ? g.w.sp[0] - 1 - f0 : f0;
                for (int64_t f1 = 0; f1 < g.w.sp[1]; ++f1) {
                  const int64_t i1 = o1 * g.stride[1] - g.pad[1] + f1 * g.dil[1];
                  if (i1 < 0 || i1 >= g.x.sp[1]) continue;
                  const int64_t w1 = g.flip ? g.w.sp[1] - 1 - f1 : f1;
                  for (int64_t f2 = 0; f2 < g.w.sp[2]; ++f2) {
                    const int64_t i2 = o2 * g.stride[2] - g.pad[2] + f2 * g.dil[2];
                    if (i2 < 0 || i2 >= g.x.sp[2]) continue;
                    const int64_t w2 = g.flip ? g.w.sp[2] - 1 - f2 : f2;
                    f(xc + i0 * g.x.ss[0] + i1 * g.x.ss[1] + i2 * g.x.ss[2],
                      wc + w0 * g.w.ss[0] + w1 * g.w.ss[1] + w2 * g.w.ss[2], yo);
                  }
                }
              }
            }
          }
    }
}

// Sums per destination element, indexed by the destination's offset (a
// destination's offsets are distinct and below its span).
struct Acc {
  std::vector<double> v;
  explicit Acc(const Tensor& t) : v(t.spanBytes() / dn::elementBytes(t.type), 0.0) {}
};

// Writes acc into t: t = alpha acc + beta t, element by element.
void store(const Tensor& t, const Acc& acc, double alpha, double beta) {
  View v = view(t);
  forEach<1>(t, {&t}, [&](int64_t, auto& off) { v.blend(off[0], acc.v[off[0]], alpha, beta); });
}

Status convolution(const dn::Args& a) {
  switch (a.op) {
    case Op::kConvFwd: {
      const Tensor &x = a.t[0], &w = a.t[1], &y = a.t[2];
      View X = view(x), W = view(w);
      Acc acc(y);
      taps(convGeo(a.conv, x, w, y), [&](int64_t xo, int64_t wo, int64_t yo) { acc.v[yo] += X.get(xo) * W.get(wo); });
      store(y, acc, a.alpha, a.beta);
      return Status::ok();
    }
    case Op::kConvBwdData: {
      const Tensor &w = a.t[0], &dy = a.t[1], &dx = a.t[2];
      View W = view(w), DY = view(dy);
      Acc acc(dx);
      taps(convGeo(a.conv, dx, w, dy), [&](int64_t xo, int64_t wo, int64_t yo) { acc.v[xo] += DY.get(yo) * W.get(wo); });
      store(dx, acc, a.alpha, a.beta);
      return Status::ok();
    }
    case Op::kConvBwdFilter: {
      const Tensor &x = a.t[0], &dy = a.t[1], &dw = a.t[2];
      View X = view(x), DY = view(dy);
      Acc acc(dw);
      taps(convGeo(a.conv, x, dw, dy), [&](int64_t xo, int64_t wo, int64_t yo) { acc.v[wo] += X.get(xo) * DY.get(yo); });
      store(dw, acc, a.alpha, a.beta);
      return Status::ok();
    }
    default: {  // backward bias: db[k] = sum over n and space of dy
      const Tensor &dy = a.t[0], &db = a.t[1];
      View DY = view(dy), DB = view(db);
      std::vector<double> sum(static_cast<size_t>(dy.dims[1]), 0.0);
      forEach<1>(dy, {&dy}, [&](int64_t lin, auto& off) {
        int64_t inner = 1;
        for (int d = 2; d < dy.rank; ++d) inner *= dy.dims[d];
        sum[static_cast<size_t>((lin / inner) % dy.dims[1])] += DY.get(off[0]);
      });
      for (int64_t c = 0; c < dy.dims[1]; ++c) DB.blend(c * db.strides[1], sum[static_cast<size_t>(c)], a.alpha, a.beta);
      return Status::ok();
    }
  }
}

// ---- element-wise ----

double activate(const dn::Activation& act, double x) {
  switch (act.mode) {
    case 0: return 1 / (1 + std::exp(-x));
    case 1: return x > 0 ? x : 0;
    case 2: return std::tanh(x);
    case 3: return std::min(std::max(x, 0.0), act.coef);
    case 4: return x > 0 ? x : act.coef * (std::exp(x) - 1);
    case 6: return x / (1 + std::exp(-act.swish_beta * x));
    default: return x;
  }
}

// d activation / dx at x (y = f(x)), as cuDNN's backward computes it.
double activateGrad(const dn::Activation& act, double x, double y) {
  switch (act.mode) {
    case 0: return y * (1 - y);
    case 1: return x > 0 ? 1 : 0;
    case 2: return 1 - y * y;
    case 3: return x > 0 && x < act.coef ? 1 : 0;
    case 4: return x > 0 ? 1 : y + act.coef;
    case 6: {
      const double s = 1 / (1 + std::exp(-act.swish_beta * x));
      return s + act.swish_beta * x * s * (1 - s);
    }
    default: return 1;
  }
}

double tensorOp(int32_t op, double a, double b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a * b;
    case 2: return std::min(a, b);
    case 3: return std::max(a, b);
    case 4: return std::sqrt(a);
    default: return a == 0 ? 1 : 0;  // NOT: 1 - (a != 0)
  }
}

Status elementwise(const dn::Args& a) {
  switch (a.op) {
    case Op::kAddTensor: {
      View A = view(a.t[0]), C = view(a.t[1]);
      forEach<2>(a.t[1], {&a.t[0], &a.t[1]},
                 [&](int64_t, auto& o) { C.blend(o[1], A.get(o[0]), a.alpha, a.beta); });
      return Status::ok();
    }
    case Op::kOpTensor: {
      View A = view(a.t[0]), B = view(a.t[1]), C = view(a.t[2]);
      const bool unary = a.tensor_op >= 4;
      forEach<3>(a.t[2], {&a.t[0], &a.t[1], &a.t[2]}, [&](int64_t, auto& o) {
        const double r = tensorOp(a.tensor_op, a.alpha * A.get(o[0]), unary ? 0 : a.alpha2 * B.get(o[1]));
        C.set(o[2], a.beta == 0 ? r : r + a.beta * C.get(o[2]));
      });
      return Status::ok();
    }
    case Op::kScaleTensor: {
      View Y = view(a.t[0]);
      forEach<1>(a.t[0], {&a.t[0]}, [&](int64_t, auto& o) { Y.set(o[0], a.alpha * Y.get(o[0])); });
      return Status::ok();
    }
    case Op::kSetTensor: {
      View Y = view(a.t[0]);
      forEach<1>(a.t[0], {&a.t[0]}, [&](int64_t, auto& o) { Y.set(o[0], a.alpha); });
      return Status::ok();
    }
    case Op::kTransformTensor: {
      View X = view(a.t[0]), Y = view(a.t[1]);
      // Through a copy: x and y may overlap when only their strides differ.
      std::vector<double> in(static_cast<size_t>(a.t[0].elements()));
      forEach<1>(a.t[0], {&a.t[0]}, [&](int64_t lin, auto& o) { in[static_cast<size_t>(lin)] = X.get(o[0]); });
      forEach<1>(a.t[1], {&a.t[1]}, [&](int64_t lin, auto& o) { Y.blend(o[0], in[static_cast<size_t>(lin)], a.alpha, a.beta); });
      return Status::ok();
    }
    case Op::kActivationFwd: {
      View X = view(a.t[0]), Y = view(a.t[1]);
      forEach<2>(a.t[1], {&a.t[0], &a.t[1]},
                 [&](int64_t, auto& o) { Y.blend(o[1], activate(a.act, X.get(o[0])), a.alpha, a.beta); });
      return Status::ok();
    }
    default: {  // activation backward: y dy x dx
      View Y = view(a.t[0]), DY = view(a.t[1]), X = view(a.t[2]), DX = view(a.t[3]);
      forEach<4>(a.t[3], {&a.t[0], &a.t[1], &a.t[2], &a.t[3]}, [&](int64_t, auto& o) {
        DX.blend(o[3], DY.get(o[1]) * activateGrad(a.act, X.get(o[2]), Y.get(o[0])), a.alpha, a.beta);
      });
      return Status::ok();
    }
  }
}

// ---- softmax ----

// The groups softmax normalises over: per image (instance) or per image and position (channel), as lists of
// logical indices into the tensor's row-major order.
template <typename F>
void softmaxGroups(const Tensor& t, int32_t mode, F&& f) {
  const int64_t n = t.dims[0], c = t.dims[1];
  int64_t inner = 1;
  for (int d = 2; d < t.rank; ++d) inner *= t.dims[d];
  std::vector<int64_t> group;
  if (mode == 0) {
    for (int64_t i = 0; i < n; ++i) {
      group.clear();
      for (int64_t j = 0; j < c * inner; ++j) group.push_back(i * c * inner + j);
      f(group);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < inner; ++s) {
      group.clear();
      for (int64_t j = 0; j < c; ++j) group.push_back((i * c + j) * inner + s);
      f(group);
    }
}

// Offsets of every element of `t` in logical order.
std::vector<int64_t> offsets(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.elements()));
  forEach<1>(t, {&t}, [&](int64_t lin, auto& o) { out[static_cast<size_t>(lin)] = o[0]; });
  return out;
}

Status softmax(const dn::Args& a) {
  if (a.op == Op::kSoftmaxFwd) {
    const Tensor &x = a.t[0], &y = a.t[1];
    View X = view(x), Y = view(y);
    const auto xo = offsets(x), yo = offsets(y);
    std::vector<double> out;
    softmaxGroups(x, a.softmax_mode, [&](const std::vector<int64_t>& g) {
      double mx = a.softmax_algo == 0 ? 0 : -std::numeric_limits<double>::infinity();
      if (a.softmax_algo != 0)
        for (int64_t i : g) mx = std::max(mx, X.get(xo[static_cast<size_t>(i)]));
      double sum = 0;
      out.resize(g.size());
      for (size_t k = 0; k < g.size(); ++k) sum += out[k] = std::exp(X.get(xo[static_cast<size_t>(g[k])]) - mx);
      for (size_t k = 0; k < g.size(); ++k) {
        const double v = a.softmax_algo == 2 ? X.get(xo[static_cast<size_t>(g[k])]) - mx - std::log(sum) : out[k] / sum;
        Y.blend(yo[static_cast<size_t>(g[k])], v, a.alpha, a.beta);
      }
    });
    return Status::ok();
  }
  const Tensor &y = a.t[0], &dy = a.t[1], &dx = a.t[2];
  View Y = view(y), DY = view(dy), DX = view(dx);
  const auto yo = offsets(y), dyo = offsets(dy), dxo = offsets(dx);
  softmaxGroups(y, a.softmax_mode, [&](const std::vector<int64_t>& g) {
    double dot = 0;
    for (int64_t i : g) {
      const auto k = static_cast<size_t>(i);
      dot += a.softmax_algo == 2 ? DY.get(dyo[k]) : DY.get(dyo[k]) * Y.get(yo[k]);
    }
    for (int64_t i : g) {
      const auto k = static_cast<size_t>(i);
      const double v = a.softmax_algo == 2 ? DY.get(dyo[k]) - std::exp(Y.get(yo[k])) * dot
                                           : Y.get(yo[k]) * (DY.get(dyo[k]) - dot);
      DX.blend(dxo[k], v, a.alpha, a.beta);
    }
  });
  return Status::ok();
}

// ---- pooling ----

// Each output element's window: f(output offset in y, the input offsets it covers, how many padded
// positions it includes).
template <typename F>
void windows(const dn::Pooling& p, const Tensor& x, const Tensor& y, F&& f) {
  const Dims5 X = dims5(x, p.spatial), Y = dims5(y, p.spatial);
  int64_t win[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, str[3] = {1, 1, 1};
  for (int i = 0; i < p.spatial; ++i) {
    const int j = 3 - p.spatial + i;
    win[j] = p.window[i], pad[j] = p.pad[i], str[j] = p.stride[i];
  }
  std::vector<int64_t> in;
  for (int64_t n = 0; n < Y.n; ++n)
    for (int64_t c = 0; c < Y.c; ++c)
      for (int64_t o0 = 0; o0 < Y.sp[0]; ++o0)
        for (int64_t o1 = 0; o1 < Y.sp[1]; ++o1)
          for (int64_t o2 = 0; o2 < Y.sp[2]; ++o2) {
            in.clear();
            int64_t padded = 0;
            for (int64_t f0 = 0; f0 < win[0]; ++f0)
              for (int64_t f1 = 0; f1 < win[1]; ++f1)
                for (int64_t f2 = 0; f2 < win[2]; ++f2) {
                  const int64_t i0 = o0 * str[0] - pad[0] + f0, i1 = o1 * str[1] - pad[1] + f1,
                                i2 = o2 * str[2] - pad[2] + f2;
                  if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= X.sp[0] || i1 >= X.sp[1] || i2 >= X.sp[2]) {
                    ++padded;
                    continue;
                  }
                  in.push_back(n * X.sn + c * X.sc + i0 * X.ss[0] + i1 * X.ss[1] + i2 * X.ss[2]);
                }
            f(n * Y.sn + c * Y.sc + o0 * Y.ss[0] + o1 * Y.ss[1] + o2 * Y.ss[2], in, padded);
          }
}

Status pooling(const dn::Args& a) {
  const bool max = a.pool.mode == 0 || a.pool.mode == 3;
  const bool fwd = a.op == Op::kPoolingFwd;
  const Tensor& x = fwd ? a.t[0] : a.t[2];
  const Tensor& y = fwd ? a.t[1] : a.t[0];
  View X = view(x);
  if (fwd) {
    View Y = view(y);
    windows(a.pool, x, y, [&](int64_t yo, const std::vector<int64_t>& in, int64_t padded) {
      double v;
      if (max) {
        v = in.empty() ? 0 : -std::numeric_limits<double>::infinity();
        for (int64_t o : in) v = std::max(v, X.get(o));
      } else {
        double s = 0;
        for (int64_t o : in) s += X.get(o);
        const int64_t count = a.pool.mode == 1 ? static_cast<int64_t>(in.size()) + padded : static_cast<int64_t>(in.size());
        v = count ? s / static_cast<double>(count) : 0;
      }
      Y.blend(yo, v, a.alpha, a.beta);
    });
    return Status::ok();
  }
  const Tensor &dy = a.t[1], &dx = a.t[3];
  View DY = view(dy);
  Acc acc(dx);
  // y and dy share dimensions (and positions); dx and x too: offsets map through the logical index.
  const auto yo = offsets(y), dyo = offsets(dy), xo = offsets(x), dxo = offsets(dx);
  std::vector<int64_t> yIndex(static_cast<size_t>(y.spanBytes() / dn::elementBytes(y.type)), 0);
  for (size_t i = 0; i < yo.size(); ++i) yIndex[static_cast<size_t>(yo[i])] = static_cast<int64_t>(i);
  std::vector<int64_t> xIndex(static_cast<size_t>(x.spanBytes() / dn::elementBytes(x.type)), 0);
  for (size_t i = 0; i < xo.size(); ++i) xIndex[static_cast<size_t>(xo[i])] = static_cast<int64_t>(i);
  windows(a.pool, x, y, [&](int64_t y_off, const std::vector<int64_t>& in, int64_t padded) {
    const double g = DY.get(dyo[static_cast<size_t>(yIndex[static_cast<size_t>(y_off)])]);
    if (in.empty()) return;
    if (max) {  // the first position holding the window's maximum takes the gradient
      size_t best = 0;
      for (size_t k = 1; k < in.size(); ++k)
        if (X.get(in[k]) > X.get(in[best])) best = k;
      acc.v[static_cast<size_t>(dxo[static_cast<size_t>(xIndex[static_cast<size_t>(in[best])])])] += g;
      return;
    }
    const int64_t count = a.pool.mode == 1 ? static_cast<int64_t>(in.size()) + padded : static_cast<int64_t>(in.size());
    for (int64_t o : in)
      acc.v[static_cast<size_t>(dxo[static_cast<size_t>(xIndex[static_cast<size_t>(o)])])] += g / static_cast<double>(count);
  });
  store(dx, acc, a.alpha, a.beta);
  return Status::ok();
}

// ---- batch normalisation ----

// Which parameter (channel, or channel and position) each element of x uses, in logical order.
std::vector<int64_t> bnSlot(const Tensor& x, int32_t mode) {
  int64_t inner = 1;
  for (int d = 2; d < x.rank; ++d) inner *= x.dims[d];
  std::vector<int64_t> slot(static_cast<size_t>(x.elements()));
  for (size_t i = 0; i < slot.size(); ++i) {
    const int64_t c = (static_cast<int64_t>(i) / inner) % x.dims[1];
    slot[i] = mode == 0 ? c * inner + static_cast<int64_t>(i) % inner : c;
  }
  return slot;
}

// The parameter tensor's offsets per slot (1 x C x 1 x 1 or 1 x C x H x W).
std::vector<int64_t> paramOffsets(const Tensor& p) { return offsets(p); }

Status batchNorm(const dn::Args& a) {
  const Tensor& x = a.t[0];
  View X = view(x);
  const auto xo = offsets(x);
  const auto slot = bnSlot(x, a.bn_mode);
  const Tensor& pdesc = a.t[a.op == Op::kBnBwd ? 3 : 2];
  const auto po = paramOffsets(pdesc);
  const size_t slots = po.size();
  const double m = static_cast<double>(xo.size()) / static_cast<double>(slots);  // elements per slot
  auto param = [&](const Tensor& t, size_t s) { return view(t).get(po[s]); };
  std::vector<double> mean(slots, 0), var(slots, 0);
  auto statistics = [&] {
    for (size_t i = 0; i < xo.size(); ++i) mean[static_cast<size_t>(slot[i])] += X.get(xo[i]);
    for (auto& v : mean) v /= m;
    for (size_t i = 0; i < xo.size(); ++i) {
      const double d = X.get(xo[i]) - mean[static_cast<size_t>(slot[i])];
      var[static_cast<size_t>(slot[i])] += d * d;
    }
    for (auto& v : var) v /= m;
  };
  if (a.op == Op::kBnFwdTraining || a.op == Op::kBnFwdInference) {
    const Tensor &y = a.t[1], &scale = a.t[2], &bias = a.t[3];
    View Y = view(y);
    const auto yo = offsets(y);
    std::vector<double> inv(slots);
    if (a.op == Op::kBnFwdTraining) {
      statistics();
      for (size_t s = 0; s < slots; ++s) inv[s] = 1 / std::sqrt(var[s] + a.epsilon);
      if (a.t[4].ptr) {
        View RM = view(a.t[4]), RV = view(a.t[5]);
        const double unbias = m > 1 ? m / (m - 1) : 1;
        for (size_t s = 0; s < slots; ++s) {
          RM.set(po[s], (1 - a.factor) * RM.get(po[s]) + a.factor * mean[s]);
          RV.set(po[s], (1 - a.factor) * RV.get(po[s]) + a.factor * var[s] * unbias);
        }
      }
      if (a.t[6].ptr) {
        View SM = view(a.t[6]), SV = view(a.t[7]);
        for (size_t s = 0; s < slots; ++s) SM.set(po[s], mean[s]), SV.set(po[s], inv[s]);
      }
    } else {
      for (size_t s = 0; s < slots; ++s) {
        mean[s] = param(a.t[4], s);
        inv[s] = 1 / std::sqrt(param(a.t[5], s) + a.epsilon);
      }
    }
    for (size_t i = 0; i < xo.size(); ++i) {
      const auto s = static_cast<size_t>(slot[i]);
      Y.blend(yo[i], param(scale, s) * (X.get(xo[i]) - mean[s]) * inv[s] + param(bias, s), a.alpha, a.beta);
    }
    return Status::ok();
  }
  // backward: x dy dx scale dScale dBias savedMean savedInvVariance
  const Tensor &dy = a.t[1], &dx = a.t[2], &scale = a.t[3];
  View DY = view(dy), DX = view(dx);
  const auto dyo = offsets(dy), dxo = offsets(dx);
  std::vector<double> inv(slots);
  if (a.t[6].ptr) {
    for (size_t s = 0; s < slots; ++s) mean[s] = param(a.t[6], s), inv[s] = param(a.t[7], s);
  } else {
    statistics();
    for (size_t s = 0; s < slots; ++s) inv[s] = 1 / std::sqrt(var[s] + a.epsilon);
  }
  std::vector<double> dbias(slots, 0), dscale(slots, 0);
  for (size_t i = 0; i < xo.size(); ++i) {
    const auto s = static_cast<size_t>(slot[i]);
    const double g = DY.get(dyo[i]);
    dbias[s] += g;
    dscale[s] += g * (X.get(xo[i]) - mean[s]) * inv[s];
  }
  for (size_t i = 0; i < xo.size(); ++i) {
    const auto s = static_cast<size_t>(slot[i]);
    const double xhat = (X.get(xo[i]) - mean[s]) * inv[s];
    const double g = param(scale, s) * inv[s] / m * (m * DY.get(dyo[i]) - dbias[s] - xhat * dscale[s]);
    DX.blend(dxo[i], g, a.alpha, a.beta);
  }
  View DS = view(a.t[4]), DB = view(a.t[5]);
  for (size_t s = 0; s < slots; ++s) {
    DS.blend(po[s], dscale[s], a.alpha2, a.beta2);
    DB.blend(po[s], dbias[s], a.alpha2, a.beta2);
  }
  return Status::ok();
}

// ---- dropout ----

constexpr uint64_t kStateMark = 0x7267707564726f70;  // "rgpudrop"

struct DropoutState {
  uint64_t mark, seed, counter;
};

uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z += 0x9e3779b97f4a7c15;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

Status dropout(const dn::Args& a) {
  if (a.op == Op::kDropoutInit) {
    if (a.states_size < dn::kSimDropoutStateBytes)
      return Status(err::kInvalidValue, "the dropout states are " + std::to_string(a.states_size) +
                                            " bytes, fewer than cudnnDropoutGetStatesSize's " +
                                            std::to_string(dn::kSimDropoutStateBytes));
    const DropoutState st{kStateMark, a.seed, 0};
    std::memcpy(reinterpret_cast<void*>(a.states), &st, sizeof st);
    return Status::ok();
  }
  const Tensor& x = a.t[0];
  const uint64_t need = dn::simDropoutReserveBytes(x);
  if (a.reserve_size < need)
    return Status(err::kInvalidValue, "the reserve space is " + std::to_string(a.reserve_size) +
                                          " bytes, fewer than cudnnDropoutGetReserveSpaceSize's " + std::to_string(need));
  auto* mask = reinterpret_cast<uint8_t*>(a.reserve);
  View X = view(a.t[0]), Y = view(a.t[1]);
  const double keep = 1.0 - a.dropout, scale = keep > 0 ? 1 / keep : 0;
  if (a.op == Op::kDropoutFwd) {
    DropoutState st{};
    if (a.states) std::memcpy(&st, reinterpret_cast<const void*>(a.states), sizeof st);
    if (a.dropout > 0 && st.mark != kStateMark)
      return Status(err::kInvalidValue, "the dropout states were never initialised by cudnnSetDropoutDescriptor");
    forEach<2>(a.t[1], {&a.t[0], &a.t[1]}, [&](int64_t lin, auto& o) {
      const double u = static_cast<double>(mix(st.seed ^ mix(st.counter + static_cast<uint64_t>(lin))) >> 11) * 0x1p-53;
      const bool kept = a.dropout == 0 || u >= a.dropout;
      mask[lin] = kept;
      Y.set(o[1], kept ? X.get(o[0]) * scale : 0);
    });
    if (a.dropout > 0) {
      st.counter += static_cast<uint64_t>(x.elements());
      std::memcpy(reinterpret_cast<void*>(a.states), &st, sizeof st);
    }
    return Status::ok();
  }
  forEach<2>(a.t[1], {&a.t[0], &a.t[1]},
             [&](int64_t lin, auto& o) { Y.set(o[1], mask[lin] ? X.get(o[0]) * scale : 0); });
  return Status::ok();
}

// ---- reductions ----

Status reduce(const dn::Args& a) {
  const Tensor &A = a.t[0], &C = a.t[1];
  View VA = view(A), VC = view(C);
  const size_t slots = static_cast<size_t>(C.spanBytes() / dn::elementBytes(C.type));
  const int op = a.reduce_op;  // ADD MUL MIN MAX AMAX AVG NORM1 NORM2 MUL_NO_ZEROS
  const double start = op == 1 || op == 8 ? 1.0 : op == 2 ? HUGE_VAL : op == 3 ? -HUGE_VAL : 0.0;
  std::vector<double> acc(slots, start);
  std::vector<uint32_t> arg(slots, 0);
  std::vector<uint8_t> seen(slots, 0);
  // An element's index among those reduced into its C element: its coordinates in the reduced dimensions,
  // flattened row-major.
  std::array<int64_t, dn::kMaxRank> reduced_stride{};
  int64_t s = 1;
  for (int d = A.rank - 1; d >= 0; --d)
    if (C.dims[d] == 1 && A.dims[d] > 1) reduced_stride[d] = s, s *= A.dims[d];
  forEach<2>(A, {&A, &C}, [&](int64_t lin, auto& o) {
    const double v = VA.get(o[0]);
    const auto c = static_cast<size_t>(o[1]);
    int64_t rest = lin, index = 0;
    for (int d = A.rank - 1; d >= 0; --d) {
      index += (rest % A.dims[d]) * reduced_stride[d];
      rest /= A.dims[d];
    }
    double& x = acc[c];
    switch (op) {
      case 0: case 5: x += v; break;
      case 1: x *= v; break;
      case 8: if (v != 0) x *= v; break;
      case 6: x += std::fabs(v); break;
      case 7: x += v * v; break;
      default: {  // MIN, MAX, AMAX: the first extreme's index
        const double key = op == 4 ? std::fabs(v) : v;
        const bool better = !seen[c] || (op == 2 ? key < x : key > x);
        if (better) x = key, arg[c] = static_cast<uint32_t>(index);
        seen[c] = 1;
      }
    }
  });
  const double count = static_cast<double>(A.elements()) / static_cast<double>(std::max<int64_t>(C.elements(), 1));
  const bool indexed = a.reduce_indices != 0 && (op == 2 || op == 3 || op == 4);
  auto* indices = reinterpret_cast<uint32_t*>(a.indices);
  forEach<1>(C, {&C}, [&](int64_t lin, auto& o) {
    const auto c = static_cast<size_t>(o[0]);
    const double v = op == 5 ? acc[c] / count : op == 7 ? std::sqrt(acc[c]) : acc[c];
    VC.blend(o[0], v, a.alpha, a.beta);
    if (indexed) indices[lin] = arg[c];
  });
  return Status::ok();
}

// ---- local response normalisation across channels ----

// Each image position's channels in turn: f(the logical indices of its channels).
template <typename F>
void channelColumns(const Tensor& t, F&& f) {
  const int64_t n = t.dims[0], c = t.dims[1];
  int64_t inner = 1;
  for (int d = 2; d < t.rank; ++d) inner *= t.dims[d];
  std::vector<int64_t> column(static_cast<size_t>(c));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < inner; ++s) {
      for (int64_t j = 0; j < c; ++j) column[static_cast<size_t>(j)] = (i * c + j) * inner + s;
      f(column);
    }
}

Status lrn(const dn::Args& a) {
  const int64_t behind = (a.lrn_n - 1) / 2, ahead = a.lrn_n - behind - 1;
  const double per = a.lrn_alpha / a.lrn_n;
  // scale_c = k + alpha/n sum over the channels of c's window of x^2
  auto scales = [&](const std::vector<int64_t>& col, const View& X, const std::vector<int64_t>& xo) {
    const auto c = static_cast<int64_t>(col.size());
    std::vector<double> sq(col.size()), scale(col.size());
    for (size_t j = 0; j < col.size(); ++j) {
      const double v = X.get(xo[static_cast<size_t>(col[j])]);
      sq[j] = v * v;
    }
    for (int64_t j = 0; j < c; ++j) {
      double s = 0;
      for (int64_t q = std::max<int64_t>(0, j - behind); q <= std::min(c - 1, j + ahead); ++q) s += sq[static_cast<size_t>(q)];
      scale[static_cast<size_t>(j)] = a.lrn_k + per * s;
    }
    return scale;
  };
  if (a.op == Op::kLrnFwd) {
    View X = view(a.t[0]), Y = view(a.t[1]);
    const auto xo = offsets(a.t[0]), yo = offsets(a.t[1]);
    channelColumns(a.t[0], [&](const std::vector<int64_t>& col) {
      const auto scale = scales(col, X, xo);
      for (size_t j = 0; j < col.size(); ++j) {
        const auto k = static_cast<size_t>(col[j]);
        Y.blend(yo[k], X.get(xo[k]) * std::pow(scale[j], -a.lrn_beta), a.alpha, a.beta);
      }
    });
    return Status::ok();
  }
  // backward: dx_c = dy_c scale_c^-beta - 2 alpha beta / n x_c sum over the windows holding c of dy_j y_j / scale_j
  View Y = view(a.t[0]), DY = view(a.t[1]), X = view(a.t[2]), DX = view(a.t[3]);
  const auto yo = offsets(a.t[0]), dyo = offsets(a.t[1]), xo = offsets(a.t[2]), dxo = offsets(a.t[3]);
  channelColumns(a.t[2], [&](const std::vector<int64_t>& col) {
    const auto c = static_cast<int64_t>(col.size());
    const auto scale = scales(col, X, xo);
    std::vector<double> ratio(col.size());
    for (size_t j = 0; j < col.size(); ++j) {
      const auto k = static_cast<size_t>(col[j]);
      ratio[j] = DY.get(dyo[k]) * Y.get(yo[k]) / scale[j];
    }
    for (int64_t j = 0; j < c; ++j) {
      double s = 0;  // the windows holding j: those of channels j - ahead .. j + behind
      for (int64_t q = std::max<int64_t>(0, j - ahead); q <= std::min(c - 1, j + behind); ++q) s += ratio[static_cast<size_t>(q)];
      const auto k = static_cast<size_t>(col[static_cast<size_t>(j)]);
      const double g = DY.get(dyo[k]) * std::pow(scale[static_cast<size_t>(j)], -a.lrn_beta) -
                       2 * per * a.lrn_beta * X.get(xo[k]) * s;
      DX.blend(dxo[k], g, a.alpha, a.beta);
    }
  });
  return Status::ok();
}

}  // namespace

Status run(const dn::Args& a) {
  switch (a.op) {
    case Op::kConvFwd:
    case Op::kConvBwdData:
    case Op::kConvBwdFilter:
    case Op::kConvBwdBias: return convolution(a);
    case Op::kSoftmaxFwd:
    case Op::kSoftmaxBwd: return softmax(a);
    case Op::kPoolingFwd:
    case Op::kPoolingBwd: return pooling(a);
    case Op::kBnFwdTraining:
    case Op::kBnFwdInference:
    case Op::kBnBwd: return batchNorm(a);
    case Op::kDropoutInit:
    case Op::kDropoutFwd:
    case Op::kDropoutBwd: return dropout(a);
    case Op::kReduceTensor: return reduce(a);
    case Op::kLrnFwd:
    case Op::kLrnBwd: return lrn(a);
    default: return elementwise(a);
  }
}

}  // namespace rgpu::server::simdnn

// The sim backend's side (sim_backend.h).
#include "server/sim/sim_backend.h"

namespace rgpu::server {

Result<uint64_t> SimBackend::dnnSize(int, common::dnn::Query q, const common::dnn::Args& a) {
  switch (q) {
    case common::dnn::Query::kDropoutStates: return common::dnn::kSimDropoutStateBytes;
    case common::dnn::Query::kDropoutReserve:
      return a.t.empty() ? uint64_t{0} : common::dnn::simDropoutReserveBytes(a.t[0]);
    default: return uint64_t{0};  // every convolution algorithm runs the same loops, without a workspace
  }
}

Status SimBackend::dnn(StreamKey key, const common::dnn::Args& a) {
  std::lock_guard lock(mu_);
  auto s = streamLocked(key);
  if (!s) return s.status();
  if (gate_) gate_->queued(key.device);
  Status queued = enqueueLocked(*s, [this, key, a] {
    Status st;
    runAsKernel(key.device, [&] { st = simdnn::run(a); });
    if (!st) reportAsync(Status(st.code(), std::string(common::dnn::opName(a.op)) + ": " + st.message()));
  });
  if (!queued && gate_) gate_->done(key.device, 0, false);
  return queued;
}

}  // namespace rgpu::server
