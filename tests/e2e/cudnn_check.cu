// cuDNN's legacy API through rgpu (docs/cudnn.md): convolutions forward,
// backward data, backward filter and bias (padding, strides, dilation,
// groups, both modes, 2-D and 3-D, NCHW and NHWC, float, double, half and
// bfloat16) with their algorithm queries; tensor add/op/scale/set/transform,
// activations, softmax, pooling, batch normalisation and dropout, forward and
// backward -- each result compared with the same computation done here in
// double precision, relative to its largest magnitude. Then what cuDNN
// refuses, a name rgpu does not forward and a tensor past its allocation.
//
//   cudnn_check [--no-overrun]
//       one line per case and "cudnn_check: done, N failed"; exits 1 when a
//       result is off. --no-overrun leaves out the tensor past its
//       allocation (natively, the GPU faults)
#include "cudnn_check_layers.h"

// ---- the convolution reference ----
struct ConvCase {
  Shape x, w;
  int pad[2], stride[2], dil[2], groups;
  bool flip;  // CUDNN_CONVOLUTION rather than cross-correlation
  Shape y() const {
    Shape o{x.n, w.n, 0, 0};
    o.h = 1 + (x.h + 2 * pad[0] - ((w.h - 1) * dil[0] + 1)) / stride[0];
    o.w = 1 + (x.w + 2 * pad[1] - ((w.w - 1) * dil[1] + 1)) / stride[1];
    return o;
  }
  // f(x index, w index, y index) for every product.
  void taps(const std::function<void(size_t, size_t, size_t)>& f) const {
    const Shape o = y();
    const int kg = w.n / groups;
    for (int i = 0; i < o.n; ++i)
      for (int k = 0; k < o.c; ++k)
        for (int oy = 0; oy < o.h; ++oy)
          for (int ox = 0; ox < o.w; ++ox)
            for (int c = 0; c < w.c; ++c)
              for (int r = 0; r < w.h; ++r)
                for (int s = 0; s < w.w; ++s) {
                  const int iy = oy * stride[0] - pad[0] + r * dil[0], ix = ox * stride[1] - pad[1] + s * dil[1];
                  if (iy < 0 || ix < 0 || iy >= x.h || ix >= x.w) continue;
                  const int wr = flip ? w.h - 1 - r : r, ws = flip ? w.w - 1 - s : s;
                  f(x.at(i, (k / kg) * w.c + c, iy, ix), w.at(k, c, wr, ws), o.at(i, k, oy, ox));
                }
  }
};

static cudnnConvolutionDescriptor_t convDesc(const ConvCase& c, cudnnDataType_t compute) {
  cudnnConvolutionDescriptor_t d;
  cudnnCreateConvolutionDescriptor(&d);
  cudnnSetConvolution2dDescriptor(d, c.pad[0], c.pad[1], c.stride[0], c.stride[1], c.dil[0], c.dil[1],
                                  c.flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION, compute);
  cudnnSetConvolutionGroupCount(d, c.groups);
  return d;
}

// Forward, backward data and backward filter of one case, alpha and beta applied, checked.
static int checkConv(cudnnHandle_t h, const std::string& name, const ConvCase& cc, bool nhwc, cudnnDataType_t t,
                     double alpha, double beta, double tol) {
  const cudnnDataType_t compute = t == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const Shape ys = cc.y();
  const V x = rounded(randomV(cc.x.size(), 1), t), w = rounded(randomV(cc.w.size(), 2), t),
          y0 = rounded(randomV(ys.size(), 3), t);
  void *dx = upload(x, cc.x, nhwc, t), *dw = upload(w, cc.w, nhwc, t), *dy = upload(y0, ys, nhwc, t);
  auto xd = tensor(cc.x, nhwc, t), yd = tensor(ys, nhwc, t);
  auto wd = filter(cc.w, nhwc, t);
  auto cd = convDesc(cc, compute);
  int n, c, hh, ww;
  CHECK(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &c, &hh, &ww));
  if (n != ys.n || c != ys.c || hh != ys.h || ww != ys.w) {
    std::printf("%s: output dims %dx%dx%dx%d FAIL\n", name.c_str(), n, c, hh, ww);
    ++g_failures;
  }
  unsigned char a8[8], b8[8];
  auto scalars = [&](double a, double b) {
    if (t == CUDNN_DATA_DOUBLE) std::memcpy(a8, &a, 8), std::memcpy(b8, &b, 8);
    else {
      float fa = static_cast<float>(a), fb = static_cast<float>(b);
      std::memcpy(a8, &fa, 4), std::memcpy(b8, &fb, 4);
    }
  };
  scalars(alpha, beta);
  // forward
  size_t ws_size = 0;
  CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &ws_size));
  void* ws = nullptr;
  if (ws_size) cudaMalloc(&ws, ws_size);
  CHECK(cudnnConvolutionForward(h, a8, xd, dx, wd, dw, cd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ws, ws_size, b8,
                                yd, dy));
  V want(ys.size(), 0);
  cc.taps([&](size_t xi, size_t wi, size_t yi) { want[yi] += x[xi] * w[wi]; });
  for (size_t i = 0; i < want.size(); ++i) want[i] = alpha * want[i] + beta * y0[i];
  report(name + ", forward", relErr(download(dy, ys, nhwc, t), want), tol);
  if (ws) cudaFree(ws);
  // backward data: dx = conv^T(dy, w), beta 0
  const V g = rounded(randomV(ys.size(), 4), t);
  void* dg = upload(g, ys, nhwc, t);
  scalars(1, 0);
  CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &ws_size));
  ws = nullptr;
  if (ws_size) cudaMalloc(&ws, ws_size);
  CHECK(cudnnConvolutionBackwardData(h, a8, wd, dw, yd, dg, cd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws, ws_size, b8, xd,
                                     dx));
  V wantx(cc.x.size(), 0);
  cc.taps([&](size_t xi, size_t wi, size_t yi) { wantx[xi] += g[yi] * w[wi]; });
  report(name + ", backward data", relErr(download(dx, cc.x, nhwc, t), wantx), tol);
  if (ws) cudaFree(ws);
  // backward filter: dw = corr(x, dy); x restored first
  cudaFree(dx);
  dx = upload(x, cc.x, nhwc, t);
  CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                       &ws_size));
  ws = nullptr;
  if (ws_size) cudaMalloc(&ws, ws_size);
  CHECK(cudnnConvolutionBackwardFilter(h, a8, xd, dx, yd, dg, cd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws, ws_size, b8,
                                       wd, dw));
  V wantw(cc.w.size(), 0);
  cc.taps([&](size_t xi, size_t wi, size_t yi) { wantw[wi] += x[xi] * g[yi]; });
  report(name + ", backward filter", relErr(download(dw, cc.w, nhwc, t), wantw), tol);
  if (ws) cudaFree(ws);
  cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dg);
  cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return 0;
}

// A 3-D convolution (5-D tensors, Nd descriptors) forward, and the bias gradient.
static int checkConv3dAndBias(cudnnHandle_t h) {
  const int xdim[5] = {1, 2, 5, 6, 4}, wdim[5] = {3, 2, 3, 3, 2}, pad[3] = {1, 0, 1}, str[3] = {1, 2, 1},
            dil[3] = {1, 1, 1};
  int xs[5], ws[5];
  xs[4] = 1, ws[4] = 1;
  for (int i = 3; i >= 0; --i) xs[i] = xs[i + 1] * xdim[i + 1], ws[i] = ws[i + 1] * wdim[i + 1];
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CHECK(cudnnCreateTensorDescriptor(&xd));
  CHECK(cudnnCreateTensorDescriptor(&yd));
  CHECK(cudnnCreateFilterDescriptor(&wd));
  CHECK(cudnnCreateConvolutionDescriptor(&cd));
  CHECK(cudnnSetTensorNdDescriptor(xd, CUDNN_DATA_FLOAT, 5, xdim, xs));
  CHECK(cudnnSetFilterNdDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, wdim));
  CHECK(cudnnSetConvolutionNdDescriptor(cd, 3, pad, str, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  int ydim[5], ys[5];
  CHECK(cudnnGetConvolutionNdForwardOutputDim(cd, xd, wd, 5, ydim));
  ys[4] = 1;
  for (int i = 3; i >= 0; --i) ys[i] = ys[i + 1] * ydim[i + 1];
  CHECK(cudnnSetTensorNdDescriptor(yd, CUDNN_DATA_FLOAT, 5, ydim, ys));
  const size_t nx = static_cast<size_t>(xs[0]) * xdim[0], nw = static_cast<size_t>(ws[0]) * wdim[0],
               ny = static_cast<size_t>(ys[0]) * ydim[0];
  const V x = rounded(randomV(nx, 60), CUDNN_DATA_FLOAT), w = rounded(randomV(nw, 61), CUDNN_DATA_FLOAT);
  const Shape flat_x{1, 1, 1, static_cast<int>(nx)}, flat_w{1, 1, 1, static_cast<int>(nw)},
      flat_y{1, 1, 1, static_cast<int>(ny)};
  void *dx = upload(x, flat_x, false, CUDNN_DATA_FLOAT), *dw = upload(w, flat_w, false, CUDNN_DATA_FLOAT), *dy;
  cudaMalloc(&dy, ny * 4);
  size_t work_size = 0;
  CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                &work_size));
  void* work = nullptr;
  if (work_size) cudaMalloc(&work, work_size);
  CHECK(cudnnConvolutionForward(h, &kOne, xd, dx, wd, dw, cd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, work,
                                work_size, &kZero, yd, dy));
  V want(ny, 0);
  for (int k = 0; k < ydim[1]; ++k)
    for (int a = 0; a < ydim[2]; ++a)
      for (int b = 0; b < ydim[3]; ++b)
        for (int c = 0; c < ydim[4]; ++c)
          for (int ch = 0; ch < wdim[1]; ++ch)
            for (int p = 0; p < wdim[2]; ++p)
              for (int q = 0; q < wdim[3]; ++q)
                for (int r = 0; r < wdim[4]; ++r) {
                  const int i0 = a * str[0] - pad[0] + p, i1 = b * str[1] - pad[1] + q, i2 = c * str[2] - pad[2] + r;
                  if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= xdim[2] || i1 >= xdim[3] || i2 >= xdim[4]) continue;
                  want[k * ys[1] + a * ys[2] + b * ys[3] + c] +=
                      x[ch * xs[1] + i0 * xs[2] + i1 * xs[3] + i2] * w[k * ws[0] + ch * ws[1] + p * ws[2] + q * ws[3] + r];
                }
  std::printf("3-D output %dx%dx%dx%dx%d\n", ydim[0], ydim[1], ydim[2], ydim[3], ydim[4]);
  report("conv 3-D f32 1x2x5x6x4 by 3x2x3x3x2, forward", relErr(download(dy, flat_y, false, CUDNN_DATA_FLOAT), want),
         1e-6);
  // the bias gradient of a 4-D dy: sum over N, H, W per channel
  const Shape gs{3, 5, 4, 6}, bs{1, 5, 1, 1};
  const V g = rounded(randomV(gs.size(), 62), CUDNN_DATA_FLOAT);
  auto gd = tensor(gs, false, CUDNN_DATA_FLOAT), bd = tensor(bs, false, CUDNN_DATA_FLOAT);
  void *dg = upload(g, gs, false, CUDNN_DATA_FLOAT), *db;
  cudaMalloc(&db, 5 * 4);
  CHECK(cudnnConvolutionBackwardBias(h, &kOne, gd, dg, &kZero, bd, db));
  V wantb(5, 0);
  for (int i = 0; i < gs.n; ++i)
    for (int c = 0; c < gs.c; ++c)
      for (int y = 0; y < gs.h; ++y)
        for (int q = 0; q < gs.w; ++q) wantb[c] += g[gs.at(i, c, y, q)];
  report("conv backward bias 3x5x4x6", relErr(download(db, bs, false, CUDNN_DATA_FLOAT), wantb), 1e-6);
  cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd), cudnnDestroyTensorDescriptor(gd);
  cudnnDestroyTensorDescriptor(bd), cudnnDestroyFilterDescriptor(wd), cudnnDestroyConvolutionDescriptor(cd);
  for (void* p : {dx, dw, dy, dg, db, work}) cudaFree(p);
  return 0;
}

// The algorithm queries: how many, the heuristic's first, and Find's timed runs (FindEx writes y).
static int checkAlgorithms(cudnnHandle_t h, const ConvCase& cc) {
  int fwd = 0, bwd_data = 0, bwd_filter = 0;
  CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &fwd));
  CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &bwd_data));
  CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &bwd_filter));
  std::printf("algorithm counts: forward %d, backward data %d, backward filter %d\n", fwd, bwd_data, bwd_filter);
  const Shape ys = cc.y();
  auto xd = tensor(cc.x, false, CUDNN_DATA_FLOAT), yd = tensor(ys, false, CUDNN_DATA_FLOAT);
  auto wd = filter(cc.w, false, CUDNN_DATA_FLOAT);
  auto cd = convDesc(cc, CUDNN_DATA_FLOAT);
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int n = 0;
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &n, perf));
  int usable = 0;
  for (int i = 0; i < n; ++i) usable += perf[i].status == CUDNN_STATUS_SUCCESS;
  std::printf("forward heuristics: %d results, first %s\n", n,
              n > 0 && perf[0].status == CUDNN_STATUS_SUCCESS ? "usable" : "NOT usable");
  if (n < 1 || perf[0].status != CUDNN_STATUS_SUCCESS || usable < 1) ++g_failures;
  // FindEx on the program's buffers: y holds the convolution afterwards
  const V x = rounded(randomV(cc.x.size(), 70), CUDNN_DATA_FLOAT), w = rounded(randomV(cc.w.size(), 71), CUDNN_DATA_FLOAT);
  void *dx = upload(x, cc.x, false, CUDNN_DATA_FLOAT), *dw = upload(w, cc.w, false, CUDNN_DATA_FLOAT), *dy, *ws;
  cudaMalloc(&dy, ys.size() * 4);
  const size_t ws_size = 64 << 20;
  cudaMalloc(&ws, ws_size);
  CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, xd, dx, wd, dw, cd, yd, dy, 8, &n, perf, ws, ws_size));
  bool sorted = true;
  for (int i = 1; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].time < perf[i - 1].time) sorted = false;
  std::printf("forward FindEx: first %s, %s by time\n",
              n > 0 && perf[0].status == CUDNN_STATUS_SUCCESS && perf[0].time >= 0 ? "timed and usable" : "NOT usable",
              sorted ? "sorted" : "NOT sorted");
  if (n < 1 || perf[0].status != CUDNN_STATUS_SUCCESS || !sorted) ++g_failures;
  V want(ys.size(), 0);
  cc.taps([&](size_t xi, size_t wi, size_t yi) { want[yi] += x[xi] * w[wi]; });
  report("forward FindEx leaves y", relErr(download(dy, ys, false, CUDNN_DATA_FLOAT), want), 1e-6);
  cudnnConvolutionBwdFilterAlgoPerf_t fperf[7];
  CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, xd, yd, cd, wd, 7, &n, fperf));
  std::printf("backward filter Find: first %s\n",
              n > 0 && fperf[0].status == CUDNN_STATUS_SUCCESS ? "usable" : "NOT usable");
  if (n < 1 || fperf[0].status != CUDNN_STATUS_SUCCESS) ++g_failures;
  cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd), cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  for (void* p : {dx, dw, dy, ws}) cudaFree(p);
  return 0;
}

// cudnnConvolutionBiasActivationForward: y = relu(alpha1 conv(x, w) + alpha2 z + bias), z apart from y and z = y.
static int checkBiasActivation(cudnnHandle_t h, const ConvCase& cc) {
  const Shape ys = cc.y(), bs{1, ys.c, 1, 1};
  const V x = rounded(randomV(cc.x.size(), 80), CUDNN_DATA_FLOAT), w = rounded(randomV(cc.w.size(), 81), CUDNN_DATA_FLOAT),
          z = rounded(randomV(ys.size(), 82), CUDNN_DATA_FLOAT), b = rounded(randomV(bs.size(), 83), CUDNN_DATA_FLOAT);
  auto xd = tensor(cc.x, false, CUDNN_DATA_FLOAT), yd = tensor(ys, false, CUDNN_DATA_FLOAT),
       bd = tensor(bs, false, CUDNN_DATA_FLOAT);
  auto wd = filter(cc.w, false, CUDNN_DATA_FLOAT);
  auto cd = convDesc(cc, CUDNN_DATA_FLOAT);
  cudnnActivationDescriptor_t ad;
  CHECK(cudnnCreateActivationDescriptor(&ad));
  void *dx = upload(x, cc.x, false, CUDNN_DATA_FLOAT), *dw = upload(w, cc.w, false, CUDNN_DATA_FLOAT),
       *dz = upload(z, ys, false, CUDNN_DATA_FLOAT), *db = upload(b, bs, false, CUDNN_DATA_FLOAT), *dy, *work = nullptr;
  cudaMalloc(&dy, ys.size() * 4);
  size_t work_size = 0;
  CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                &work_size));
  if (work_size) cudaMalloc(&work, work_size);
  const float alpha1 = 1.5f, alpha2 = 0.5f;
  for (int in_place = 0; in_place < 2; ++in_place) {
    const cudnnActivationMode_t mode = in_place ? CUDNN_ACTIVATION_IDENTITY : CUDNN_ACTIVATION_RELU;
    CHECK(cudnnSetActivationDescriptor(ad, mode, CUDNN_NOT_PROPAGATE_NAN, 0));
    if (in_place) cudaMemcpy(dy, dz, ys.size() * 4, cudaMemcpyDeviceToDevice);
    CHECK(cudnnConvolutionBiasActivationForward(h, &alpha1, xd, dx, wd, dw, cd,
                                                CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, work, work_size,
                                                &alpha2, yd, in_place ? dy : dz, bd, db, ad, yd, dy));
    V want(ys.size(), 0);
    cc.taps([&](size_t xi, size_t wi, size_t yi) { want[yi] += x[xi] * w[wi]; });
    for (int i = 0; i < ys.n; ++i)
      for (int k = 0; k < ys.c; ++k)
        for (int r = 0; r < ys.h; ++r)
          for (int q = 0; q < ys.w; ++q) {
            const size_t o = ys.at(i, k, r, q);
            const double v = alpha1 * want[o] + alpha2 * z[o] + b[k];
            want[o] = in_place ? v : std::max(v, 0.0);
          }
    report(in_place ? "conv + z (z = y) + bias, identity" : "conv + z + bias, relu (cudnnConvolutionBiasActivationForward)",
           relErr(download(dy, ys, false, CUDNN_DATA_FLOAT), want), 1e-6);
  }
  CHECK(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_TANH, CUDNN_NOT_PROPAGATE_NAN, 0));
  expectStatus("a fused tanh", cudnnConvolutionBiasActivationForward(h, &alpha1, xd, dx, wd, dw, cd,
                                                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                                                     work, work_size, &alpha2, yd, dz, bd, db, ad, yd,
                                                                     dy),
               CUDNN_STATUS_NOT_SUPPORTED);
  cudnnDestroyActivationDescriptor(ad);
  cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd), cudnnDestroyTensorDescriptor(bd);
  cudnnDestroyFilterDescriptor(wd), cudnnDestroyConvolutionDescriptor(cd);
  for (void* p : {dx, dw, dz, db, dy, work}) cudaFree(p);
  return 0;
}

// What cuDNN refuses, a name rgpu does not forward, and a tensor past its allocation.
static int checkRefusals(cudnnHandle_t h, const ConvCase& cc, bool overrun) {
  Shape wrong = cc.y();
  wrong.h += 1;
  auto xd = tensor(cc.x, false, CUDNN_DATA_FLOAT), yd = tensor(wrong, false, CUDNN_DATA_FLOAT);
  auto wd = filter(cc.w, false, CUDNN_DATA_FLOAT);
  auto cd = convDesc(cc, CUDNN_DATA_FLOAT);
  void *dx, *dw, *dy;
  cudaMalloc(&dx, cc.x.size() * 4), cudaMalloc(&dw, cc.w.size() * 4), cudaMalloc(&dy, wrong.size() * 4);
  expectStatus("y of the wrong height", cudnnConvolutionForward(h, &kOne, xd, dx, wd, dw, cd,
                                                                CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                                                                &kZero, yd, dy),
               CUDNN_STATUS_BAD_PARAM);
  cudnnTensorDescriptor_t id;
  CHECK(cudnnCreateTensorDescriptor(&id));
  CHECK(cudnnSetTensor4dDescriptor(id, CUDNN_TENSOR_NCHW, CUDNN_DATA_INT32, 1, 1, 4, 4));
  cudnnActivationDescriptor_t ad;
  CHECK(cudnnCreateActivationDescriptor(&ad));
  CHECK(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));
  expectStatus("relu on int32 tensors", cudnnActivationForward(h, ad, &kOne, id, dx, &kZero, id, dy),
               CUDNN_STATUS_NOT_SUPPORTED);
  cudnnCTCLossDescriptor_t ctc = nullptr;
  expectStatus("cudnnCreateCTCLossDescriptor", cudnnCreateCTCLossDescriptor(&ctc), CUDNN_STATUS_NOT_SUPPORTED);
  if (overrun) {
    // y's descriptor says 2x4x9x8 floats; its allocation holds half of them
    auto yd_ok = tensor(cc.y(), false, CUDNN_DATA_FLOAT);
    void* small;
    cudaMalloc(&small, cc.y().size() * 2);
    cudaDeviceSynchronize();
    const cudnnStatus_t st = cudnnConvolutionForward(h, &kOne, xd, dx, wd, dw, cd,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &kZero,
                                                     yd_ok, small);
    const cudaError_t e = cudaDeviceSynchronize();
    std::printf("y past the end of its allocation: %s, then %s\n", cudnnGetErrorString(st), cudaGetErrorName(e));
    if (st != CUDNN_STATUS_SUCCESS || e != cudaErrorInvalidValue) ++g_failures;
    std::printf("after it: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
    cudaFree(small);
    cudnnDestroyTensorDescriptor(yd_ok);
  }
  cudnnDestroyActivationDescriptor(ad);
  cudnnDestroyTensorDescriptor(id), cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd), cudnnDestroyConvolutionDescriptor(cd);
  for (void* p : {dx, dw, dy}) cudaFree(p);
  return 0;
}

// The backend (graph) API: descriptors made and read back; a graph's finalize answers whether it runs.
static int checkBackendGraph() {
  cudnnBackendDescriptor_t a, b, c, mm, mm_op, pw, pw_op, graph;
  for (auto [d, type] : {std::pair{&a, CUDNN_BACKEND_TENSOR_DESCRIPTOR}, {&b, CUDNN_BACKEND_TENSOR_DESCRIPTOR},
                         {&c, CUDNN_BACKEND_TENSOR_DESCRIPTOR}, {&mm, CUDNN_BACKEND_MATMUL_DESCRIPTOR},
                         {&mm_op, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR}, {&pw, CUDNN_BACKEND_POINTWISE_DESCRIPTOR},
                         {&pw_op, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR},
                         {&graph, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR}})
    CHECK(cudnnBackendCreateDescriptor(type, d));
  const int64_t dims[3] = {1, 64, 64}, strides[3] = {4096, 64, 1}, align = 16;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int64_t uid = 1;
  for (cudnnBackendDescriptor_t t : {a, b, c}) {
    CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
    CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dims));
    CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides));
    CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    CHECK(cudnnBackendFinalize(t));
    ++uid;
  }
  int64_t got[3] = {}, n = 0;
  CHECK(cudnnBackendGetAttribute(b, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, &n, got));
  std::printf("backend tensor dimensions read back: %s\n", n == 3 && got[1] == 64 && got[2] == 64 ? "as set" : "FAIL");
  if (n != 3 || got[1] != 64) ++g_failures;
  CHECK(cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  CHECK(cudnnBackendFinalize(mm));
  CHECK(cudnnBackendSetAttribute(mm_op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
  CHECK(cudnnBackendSetAttribute(mm_op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  CHECK(cudnnBackendSetAttribute(mm_op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
  CHECK(cudnnBackendSetAttribute(mm_op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm));
  CHECK(cudnnBackendFinalize(mm_op));
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_MUL;
  CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &type));
  CHECK(cudnnBackendFinalize(pw));
  CHECK(cudnnBackendSetAttribute(pw_op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &pw));
  CHECK(cudnnBackendSetAttribute(pw_op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
  CHECK(cudnnBackendSetAttribute(pw_op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
  CHECK(cudnnBackendSetAttribute(pw_op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  CHECK(cudnnBackendFinalize(pw_op));
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));
  cudnnBackendDescriptor_t ops[2] = {mm_op, pw_op};
  CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, ops));
  std::printf("backend graph of matmul, pointwise mul: finalize %s\n", cudnnGetErrorString(cudnnBackendFinalize(graph)));
  for (cudnnBackendDescriptor_t d : {a, b, c, mm, mm_op, pw, pw_op, graph}) CHECK(cudnnBackendDestroyDescriptor(d));
  CHECK(cudnnDestroy(h));
  return 0;
}

int main(int argc, char** argv) {
  const bool overrun = !(argc > 1 && std::strcmp(argv[1], "--no-overrun") == 0);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (whole lines between the libraries' log lines on stderr)
  std::printf("version: %zu\n", cudnnGetVersion());
  cudnnHandle_t h;
  CHECK(cudnnCreate(&h));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudnnSetStream(h, s));

  const ConvCase basic{{2, 3, 9, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false};
  const ConvCase strided{{2, 4, 11, 10}, {6, 4, 3, 2}, {2, 1}, {2, 3}, {2, 1}, 1, false};
  const ConvCase grouped{{1, 4, 7, 7}, {6, 2, 3, 3}, {0, 1}, {1, 2}, {1, 1}, 2, true};
  if (checkConv(h, "conv f32 NCHW 2x3x9x8 by 4x3x3x3, pad 1", basic, false, CUDNN_DATA_FLOAT, 1, 0, 1e-6)) return 2;
  if (checkConv(h, "conv f32 NHWC, stride 2x3, dilation 2x1, alpha 2 beta 0.5", strided, true, CUDNN_DATA_FLOAT, 2,
                0.5, 1e-6))
    return 2;
  if (checkConv(h, "conv f64 NCHW, 2 groups, CUDNN_CONVOLUTION (flipped)", grouped, false, CUDNN_DATA_DOUBLE, 1, 0,
                1e-13))
    return 2;
  if (checkConv(h, "conv f16 NHWC", basic, true, CUDNN_DATA_HALF, 1, 0, 1e-2)) return 2;
  if (checkConv(h, "conv bf16 NCHW", basic, false, CUDNN_DATA_BFLOAT16, 1, 0, 2e-2)) return 2;
  if (checkConv3dAndBias(h) || checkAlgorithms(h, basic) || checkBiasActivation(h, basic) || checkTensorOps(h) || checkActivationsAndSoftmax(h) ||
      checkPooling(h) || checkBatchNorm(h) || checkDropout(h) || checkReductions(h) || checkLrn(h) || checkRefusals(h, basic, overrun) || checkBackendGraph())
    return 2;
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudnnDestroy(h));
  std::printf("cudnn_check: done, %d failed\n", g_failures);
  return g_failures ? 1 : 0;
}
