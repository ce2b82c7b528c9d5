// cudnn_check's layers other than convolutions: tensor arithmetic,
// activations, softmax, pooling, batch normalisation and dropout, each
// against a double-precision computation of its own.
#pragma once

#include "cudnn_check.h"

static const float kOne = 1.f, kZero = 0.f;

static int checkTensorOps(cudnnHandle_t h) {
  const Shape cs{2, 4, 3, 5}, bs{1, 4, 1, 1};
  const V c0 = rounded(randomV(cs.size(), 10), CUDNN_DATA_FLOAT), b = rounded(randomV(bs.size(), 11), CUDNN_DATA_FLOAT),
          a = rounded(randomV(cs.size(), 12), CUDNN_DATA_FLOAT);
  auto cd = tensor(cs, false, CUDNN_DATA_FLOAT), bd = tensor(bs, false, CUDNN_DATA_FLOAT);
  void *dc = upload(c0, cs, false, CUDNN_DATA_FLOAT), *db = upload(b, bs, false, CUDNN_DATA_FLOAT),
       *da = upload(a, cs, false, CUDNN_DATA_FLOAT);
  // C = C + bias (broadcast over N, H, W)
  CHECK(cudnnAddTensor(h, &kOne, bd, db, &kOne, cd, dc));
  V want(cs.size());
  for (int i = 0; i < cs.n; ++i)
    for (int j = 0; j < cs.c; ++j)
      for (int y = 0; y < cs.h; ++y)
        for (int x = 0; x < cs.w; ++x) want[cs.at(i, j, y, x)] = c0[cs.at(i, j, y, x)] + b[j];
  report("cudnnAddTensor, a 1x4x1x1 bias over 2x4x3x5", relErr(download(dc, cs, false, CUDNN_DATA_FLOAT), want), 1e-6);
  // C = (0.5 A) * (2 B), then C = max(A, B) + C
  cudnnOpTensorDescriptor_t od;
  CHECK(cudnnCreateOpTensorDescriptor(&od));
  CHECK(cudnnSetOpTensorDescriptor(od, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN));
  const float half = 0.5f, two = 2.f;
  CHECK(cudnnOpTensor(h, od, &half, cd, da, &two, bd, db, &kZero, cd, dc));
  for (int i = 0; i < cs.n; ++i)
    for (int j = 0; j < cs.c; ++j)
      for (int y = 0; y < cs.h; ++y)
        for (int x = 0; x < cs.w; ++x) want[cs.at(i, j, y, x)] = a[cs.at(i, j, y, x)] * b[j];
  report("cudnnOpTensor MUL, B broadcast", relErr(download(dc, cs, false, CUDNN_DATA_FLOAT), want), 1e-6);
  CHECK(cudnnSetOpTensorDescriptor(od, CUDNN_OP_TENSOR_MAX, CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN));
  CHECK(cudnnOpTensor(h, od, &kOne, cd, da, &kOne, bd, db, &kOne, cd, dc));
  for (int i = 0; i < cs.n; ++i)
    for (int j = 0; j < cs.c; ++j)
      for (int y = 0; y < cs.h; ++y)
        for (int x = 0; x < cs.w; ++x) want[cs.at(i, j, y, x)] += std::max(a[cs.at(i, j, y, x)], b[j]);
  report("cudnnOpTensor MAX, beta 1", relErr(download(dc, cs, false, CUDNN_DATA_FLOAT), want), 1e-6);
  // NCHW to NHWC
  auto nhwc = tensor(cs, true, CUDNN_DATA_FLOAT);
  void* dn = nullptr;
  cudaMalloc(&dn, cs.size() * 4);
  CHECK(cudnnTransformTensor(h, &kOne, cd, da, &kZero, nhwc, dn));
  report("cudnnTransformTensor NCHW to NHWC", relErr(download(dn, cs, true, CUDNN_DATA_FLOAT), a), 0);
  // scale, then set
  const float three = 3.f, fill = 1.5f;
  CHECK(cudnnScaleTensor(h, cd, da, &three));
  V scaled = a;
  for (double& v : scaled) v *= 3;
  report("cudnnScaleTensor by 3", relErr(download(da, cs, false, CUDNN_DATA_FLOAT), scaled), 1e-6);
  CHECK(cudnnSetTensor(h, nhwc, dn, &fill));
  report("cudnnSetTensor 1.5 (NHWC)", relErr(download(dn, cs, true, CUDNN_DATA_FLOAT), V(cs.size(), 1.5)), 0);
  cudnnDestroyOpTensorDescriptor(od);
  cudnnDestroyTensorDescriptor(cd), cudnnDestroyTensorDescriptor(bd), cudnnDestroyTensorDescriptor(nhwc);
  cudaFree(dc), cudaFree(db), cudaFree(da), cudaFree(dn);
  return 0;
}

static int checkActivationsAndSoftmax(cudnnHandle_t h) {
  const Shape s{2, 3, 4, 5};
  const V x = rounded(randomV(s.size(), 20), CUDNN_DATA_FLOAT), g = rounded(randomV(s.size(), 21), CUDNN_DATA_FLOAT);
  auto d = tensor(s, false, CUDNN_DATA_FLOAT);
  void *dx = upload(x, s, false, CUDNN_DATA_FLOAT), *dg = upload(g, s, false, CUDNN_DATA_FLOAT), *dy = nullptr,
       *dd = nullptr;
  cudaMalloc(&dy, s.size() * 4);
  cudaMalloc(&dd, s.size() * 4);
  struct Act {
    const char* name;
    cudnnActivationMode_t mode;
    double coef;
    std::function<double(double)> f, df;
  };
  const double beta = 1.5;
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  const Act acts[] = {
      {"relu", CUDNN_ACTIVATION_RELU, 0, [](double v) { return v > 0 ? v : 0; }, [](double v) { return v > 0 ? 1. : 0.; }},
      {"sigmoid", CUDNN_ACTIVATION_SIGMOID, 0, sig, [&](double v) { return sig(v) * (1 - sig(v)); }},
      {"tanh", CUDNN_ACTIVATION_TANH, 0, [](double v) { return std::tanh(v); },
       [](double v) { return 1 - std::tanh(v) * std::tanh(v); }},
      {"clipped relu at 0.5", CUDNN_ACTIVATION_CLIPPED_RELU, 0.5, [](double v) { return std::min(std::max(v, 0.), 0.5); },
       [](double v) { return v > 0 && v < 0.5 ? 1. : 0.; }},
      {"elu", CUDNN_ACTIVATION_ELU, 1.0, [](double v) { return v > 0 ? v : std::exp(v) - 1; },
       [](double v) { return v > 0 ? 1. : std::exp(v); }},
      {"swish (beta 1.5)", CUDNN_ACTIVATION_SWISH, 0, [&](double v) { return v * sig(beta * v); },
       [&](double v) { return sig(beta * v) + beta * v * sig(beta * v) * (1 - sig(beta * v)); }},
  };
  cudnnActivationDescriptor_t ad;
  CHECK(cudnnCreateActivationDescriptor(&ad));
  for (const Act& act : acts) {
    CHECK(cudnnSetActivationDescriptor(ad, act.mode, CUDNN_NOT_PROPAGATE_NAN, act.coef));
    if (act.mode == CUDNN_ACTIVATION_SWISH) CHECK(cudnnSetActivationDescriptorSwishBeta(ad, beta));
    CHECK(cudnnActivationForward(h, ad, &kOne, d, dx, &kZero, d, dy));
    V fy(s.size()), fdx(s.size());
    for (size_t i = 0; i < s.size(); ++i) fy[i] = act.f(x[i]), fdx[i] = g[i] * act.df(x[i]);
    report(std::string("activation ") + act.name + ", forward", relErr(download(dy, s, false, CUDNN_DATA_FLOAT), fy), 1e-6);
    CHECK(cudnnActivationBackward(h, ad, &kOne, d, dy, d, dg, d, dx, &kZero, d, dd));
    report(std::string("activation ") + act.name + ", backward", relErr(download(dd, s, false, CUDNN_DATA_FLOAT), fdx),
           1e-5);
  }
  cudnnDestroyActivationDescriptor(ad);
  // softmax: accurate over each image, and log over channels
  for (int variant = 0; variant < 2; ++variant) {
    const cudnnSoftmaxAlgorithm_t algo = variant ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
    const cudnnSoftmaxMode_t mode = variant ? CUDNN_SOFTMAX_MODE_CHANNEL : CUDNN_SOFTMAX_MODE_INSTANCE;
    CHECK(cudnnSoftmaxForward(h, algo, mode, &kOne, d, dx, &kZero, d, dy));
    V fy(s.size()), fdx(s.size());
    auto group = [&](const std::vector<size_t>& idx) {
      double mx = -1e300, sum = 0, dot = 0;
      for (size_t i : idx) mx = std::max(mx, x[i]);
      for (size_t i : idx) sum += std::exp(x[i] - mx);
      for (size_t i : idx) fy[i] = variant ? x[i] - mx - std::log(sum) : std::exp(x[i] - mx) / sum;
      for (size_t i : idx) dot += variant ? g[i] : g[i] * fy[i];
      for (size_t i : idx) fdx[i] = variant ? g[i] - std::exp(fy[i]) * dot : fy[i] * (g[i] - dot);
    };
    for (int n = 0; n < s.n; ++n) {
      if (!variant) {
        std::vector<size_t> idx;
        for (int c = 0; c < s.c; ++c)
          for (int y = 0; y < s.h; ++y)
            for (int xx = 0; xx < s.w; ++xx) idx.push_back(s.at(n, c, y, xx));
        group(idx);
      } else {
        for (int y = 0; y < s.h; ++y)
          for (int xx = 0; xx < s.w; ++xx) {
            std::vector<size_t> idx;
            for (int c = 0; c < s.c; ++c) idx.push_back(s.at(n, c, y, xx));
            group(idx);
          }
      }
    }
    const std::string name = variant ? "softmax log over channels" : "softmax accurate over each image";
    V yv = download(dy, s, false, CUDNN_DATA_FLOAT);
    report(name + ", forward", relErr(yv, fy), 1e-6);
    CHECK(cudnnSoftmaxBackward(h, algo, mode, &kOne, d, dy, d, dg, &kZero, d, dd));
    // (the reference's backward from the device's y, as cuDNN's is)
    report(name + ", backward", relErr(download(dd, s, false, CUDNN_DATA_FLOAT), fdx), 1e-5);
  }
  cudnnDestroyTensorDescriptor(d);
  cudaFree(dx), cudaFree(dg), cudaFree(dy), cudaFree(dd);
  return 0;
}

static int checkPooling(cudnnHandle_t h) {
  const Shape xs{2, 3, 7, 6};
  const V x = rounded(randomV(xs.size(), 30), CUDNN_DATA_FLOAT);
  struct Case {
    const char* name;
    cudnnPoolingMode_t mode;
    int win, pad, stride;
    bool nhwc;
  };
  const Case cases[] = {{"max 2x2 stride 2", CUDNN_POOLING_MAX, 2, 0, 2, false},
                        {"max 3x3 pad 1 stride 2, NHWC", CUDNN_POOLING_MAX, 3, 1, 2, true},
                        {"average 3x3 pad 1 stride 2, padding counted", CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, 3, 1, 2, false},
                        {"average 3x3 pad 1 stride 2, padding not counted", CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, 3, 1, 2, false}};
  cudnnPoolingDescriptor_t pd;
  CHECK(cudnnCreatePoolingDescriptor(&pd));
  for (const Case& c : cases) {
    CHECK(cudnnSetPooling2dDescriptor(pd, c.mode, CUDNN_NOT_PROPAGATE_NAN, c.win, c.win, c.pad, c.pad, c.stride, c.stride));
    auto xd = tensor(xs, c.nhwc, CUDNN_DATA_FLOAT);
    int n, ch, hh, ww;
    CHECK(cudnnGetPooling2dForwardOutputDim(pd, xd, &n, &ch, &hh, &ww));
    const Shape ys{n, ch, hh, ww};
    auto yd = tensor(ys, c.nhwc, CUDNN_DATA_FLOAT);
    void *dx = upload(x, xs, c.nhwc, CUDNN_DATA_FLOAT), *dy = nullptr, *ddx = nullptr;
    cudaMalloc(&dy, ys.size() * 4);
    cudaMalloc(&ddx, xs.size() * 4);
    const V g = rounded(randomV(ys.size(), 31), CUDNN_DATA_FLOAT);
    void* dg = upload(g, ys, c.nhwc, CUDNN_DATA_FLOAT);
    CHECK(cudnnPoolingForward(h, pd, &kOne, xd, dx, &kZero, yd, dy));
    CHECK(cudnnPoolingBackward(h, pd, &kOne, yd, dy, yd, dg, xd, dx, &kZero, xd, ddx));
    V fy(ys.size()), fdx(xs.size(), 0);
    const bool max = c.mode == CUDNN_POOLING_MAX;
    for (int i = 0; i < ys.n; ++i)
      for (int j = 0; j < ys.c; ++j)
        for (int oy = 0; oy < ys.h; ++oy)
          for (int ox = 0; ox < ys.w; ++ox) {
            double best = -1e300, sum = 0;
            size_t arg = 0;
            int inside = 0;
            for (int r = 0; r < c.win; ++r)
              for (int q = 0; q < c.win; ++q) {
                const int iy = oy * c.stride - c.pad + r, ix = ox * c.stride - c.pad + q;
                if (iy < 0 || ix < 0 || iy >= xs.h || ix >= xs.w) continue;
                const size_t k = xs.at(i, j, iy, ix);
                ++inside, sum += x[k];
                if (x[k] > best) best = x[k], arg = k;
              }
            const int count = c.mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? c.win * c.win : inside;
            const size_t o = ys.at(i, j, oy, ox);
            fy[o] = max ? best : sum / count;
            if (max) {
              fdx[arg] += g[o];
            } else {
              for (int r = 0; r < c.win; ++r)
                for (int q = 0; q < c.win; ++q) {
                  const int iy = oy * c.stride - c.pad + r, ix = ox * c.stride - c.pad + q;
                  if (iy >= 0 && ix >= 0 && iy < xs.h && ix < xs.w) fdx[xs.at(i, j, iy, ix)] += g[o] / count;
                }
            }
          }
    report(std::string("pooling ") + c.name + ", forward", relErr(download(dy, ys, c.nhwc, CUDNN_DATA_FLOAT), fy), 1e-6);
    report(std::string("pooling ") + c.name + ", backward", relErr(download(ddx, xs, c.nhwc, CUDNN_DATA_FLOAT), fdx),
           1e-6);
    cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd);
    cudaFree(dx), cudaFree(dy), cudaFree(ddx), cudaFree(dg);
  }
  cudnnDestroyPoolingDescriptor(pd);
  return 0;
}

static int checkBatchNorm(cudnnHandle_t h) {
  const Shape xs{4, 3, 5, 5};
  const V x = rounded(randomV(xs.size(), 40), CUDNN_DATA_FLOAT), g = rounded(randomV(xs.size(), 41), CUDNN_DATA_FLOAT);
  const V scale = rounded(randomV(3, 42), CUDNN_DATA_FLOAT), bias = rounded(randomV(3, 43), CUDNN_DATA_FLOAT);
  auto xd = tensor(xs, false, CUDNN_DATA_FLOAT);
  cudnnTensorDescriptor_t pd;
  CHECK(cudnnCreateTensorDescriptor(&pd));
  CHECK(cudnnDeriveBNTensorDescriptor(pd, xd, CUDNN_BATCHNORM_SPATIAL));
  const Shape ps{1, 3, 1, 1};
  void *dx = upload(x, xs, false, CUDNN_DATA_FLOAT), *dg = upload(g, xs, false, CUDNN_DATA_FLOAT), *dy, *ddx;
  cudaMalloc(&dy, xs.size() * 4);
  cudaMalloc(&ddx, xs.size() * 4);
  void *dscale = upload(scale, ps, false, CUDNN_DATA_FLOAT), *dbias = upload(bias, ps, false, CUDNN_DATA_FLOAT);
  void *rmean = upload(V(3, 0.0), ps, false, CUDNN_DATA_FLOAT), *rvar = upload(V(3, 1.0), ps, false, CUDNN_DATA_FLOAT);
  void *smean, *sinv, *dsc, *dbi;
  cudaMalloc(&smean, 12), cudaMalloc(&sinv, 12), cudaMalloc(&dsc, 12), cudaMalloc(&dbi, 12);
  const double eps = 1e-5, factor = 0.1;
  CHECK(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, xd, dx, xd, dy, pd, dscale,
                                               dbias, factor, rmean, rvar, eps, smean, sinv));
  const double m = xs.n * xs.h * xs.w;
  V mean(3, 0), var(3, 0), inv(3), fy(xs.size()), frm(3), frv(3);
  for (int i = 0; i < xs.n; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < xs.h; ++y)
        for (int q = 0; q < xs.w; ++q) mean[c] += x[xs.at(i, c, y, q)] / m;
  for (int i = 0; i < xs.n; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < xs.h; ++y)
        for (int q = 0; q < xs.w; ++q) var[c] += std::pow(x[xs.at(i, c, y, q)] - mean[c], 2) / m;
  for (int c = 0; c < 3; ++c) {
    inv[c] = 1 / std::sqrt(var[c] + eps);
    frm[c] = factor * mean[c];
    frv[c] = (1 - factor) + factor * var[c] * m / (m - 1);
  }
  for (int i = 0; i < xs.n; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < xs.h; ++y)
        for (int q = 0; q < xs.w; ++q) {
          const size_t k = xs.at(i, c, y, q);
          fy[k] = scale[c] * (x[k] - mean[c]) * inv[c] + bias[c];
        }
  report("batch norm spatial, training y", relErr(download(dy, xs, false, CUDNN_DATA_FLOAT), fy), 1e-5);
  report("batch norm spatial, running mean", relErr(download(rmean, ps, false, CUDNN_DATA_FLOAT), frm), 1e-5);
  report("batch norm spatial, running variance (unbiased)", relErr(download(rvar, ps, false, CUDNN_DATA_FLOAT), frv), 1e-5);
  report("batch norm spatial, saved mean", relErr(download(smean, ps, false, CUDNN_DATA_FLOAT), mean), 1e-5);
  report("batch norm spatial, saved inverse deviation", relErr(download(sinv, ps, false, CUDNN_DATA_FLOAT), inv), 1e-5);
  const V fy_train = fy;
  // inference with the running values
  CHECK(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, xd, dx, xd, dy, pd, dscale,
                                                dbias, rmean, rvar, eps));
  for (int i = 0; i < xs.n; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < xs.h; ++y)
        for (int q = 0; q < xs.w; ++q) {
          const size_t k = xs.at(i, c, y, q);
          fy[k] = scale[c] * (x[k] - frm[c]) / std::sqrt(frv[c] + eps) + bias[c];
        }
  report("batch norm spatial, inference", relErr(download(dy, xs, false, CUDNN_DATA_FLOAT), fy), 1e-5);
  // backward with the saved statistics
  CHECK(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, &kOne, &kZero, xd, dx, xd, dg, xd,
                                        ddx, pd, dscale, dsc, dbi, eps, smean, sinv));
  V fdb(3, 0), fds(3, 0), fdx(xs.size());
  for (int i = 0; i < xs.n; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < xs.h; ++y)
        for (int q = 0; q < xs.w; ++q) {
          const size_t k = xs.at(i, c, y, q);
          fdb[c] += g[k];
          fds[c] += g[k] * (x[k] - mean[c]) * inv[c];
        }
  for (int i = 0; i < xs.n; ++i)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < xs.h; ++y)
        for (int q = 0; q < xs.w; ++q) {
          const size_t k = xs.at(i, c, y, q);
          const double xhat = (x[k] - mean[c]) * inv[c];
          fdx[k] = scale[c] * inv[c] / m * (m * g[k] - fdb[c] - xhat * fds[c]);
        }
  report("batch norm spatial, backward dx", relErr(download(ddx, xs, false, CUDNN_DATA_FLOAT), fdx), 1e-4);
  report("batch norm spatial, backward dscale", relErr(download(dsc, ps, false, CUDNN_DATA_FLOAT), fds), 1e-5);
  report("batch norm spatial, backward dbias", relErr(download(dbi, ps, false, CUDNN_DATA_FLOAT), fdb), 1e-5);
  // The Ex forms with CUDNN_BATCHNORM_OPS_BN compute the same; the fused activation is refused.
  size_t ex_ws = 1, ex_reserve = 1;
  CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, xd, xd,
                                                          xd, nullptr, xd, pd, nullptr, &ex_ws));
  CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN,
                                                             nullptr, xd, &ex_reserve));
  CHECK(cudnnBatchNormalizationBackwardEx(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &kOne, &kZero, &kOne,
                                          &kZero, xd, dx, nullptr, nullptr, xd, dg, nullptr, nullptr, xd, ddx, pd,
                                          dscale, dbias, dsc, dbi, eps, smean, sinv, nullptr, nullptr, 0, nullptr, 0));
  report("batch norm spatial, backward dx (the Ex form)", relErr(download(ddx, xs, false, CUDNN_DATA_FLOAT), fdx), 1e-4);
  cudnnActivationDescriptor_t relu;
  CHECK(cudnnCreateActivationDescriptor(&relu));
  CHECK(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));
  expectStatus("batch norm Ex with a fused ReLU",
               cudnnBatchNormalizationForwardTrainingEx(h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN_ACTIVATION,
                                                        &kOne, &kZero, xd, dx, nullptr, nullptr, xd, dy, pd, dscale,
                                                        dbias, factor, nullptr, nullptr, eps, nullptr, nullptr, relu,
                                                        nullptr, 0, nullptr, 0),
               CUDNN_STATUS_NOT_SUPPORTED);
  // The cudnnNormalization* calls, per channel: the same computation, scale and bias and the
  // statistics each under their own descriptor; the fused activation and groupCnt 2 are refused.
  cudnnTensorDescriptor_t nsb, nmv;
  CHECK(cudnnCreateTensorDescriptor(&nsb));
  CHECK(cudnnCreateTensorDescriptor(&nmv));
  CHECK(cudnnDeriveNormTensorDescriptor(nsb, nmv, xd, CUDNN_NORM_PER_CHANNEL, 1));
  size_t norm_ws = 1, norm_reserve = 1;
  CHECK(cudnnGetNormalizationForwardTrainingWorkspaceSize(h, CUDNN_NORM_PER_CHANNEL, CUDNN_NORM_OPS_NORM,
                                                          CUDNN_NORM_ALGO_STANDARD, xd, nullptr, xd, nsb, nullptr, nmv,
                                                          &norm_ws, 1));
  CHECK(cudnnGetNormalizationTrainingReserveSpaceSize(h, CUDNN_NORM_PER_CHANNEL, CUDNN_NORM_OPS_NORM,
                                                      CUDNN_NORM_ALGO_STANDARD, nullptr, xd, &norm_reserve, 1));
  std::printf("cudnnNormalization workspace %zu, reserve space %zu bytes\n", norm_ws, norm_reserve);
  const V zeros(3, 0.0), ones(3, 1.0);
  void* rmean2 = upload(zeros, ps, false, CUDNN_DATA_FLOAT);
  void* rvar2 = upload(ones, ps, false, CUDNN_DATA_FLOAT);
  CHECK(cudnnNormalizationForwardTraining(h, CUDNN_NORM_PER_CHANNEL, CUDNN_NORM_OPS_NORM, CUDNN_NORM_ALGO_STANDARD,
                                          &kOne, &kZero, xd, dx, nsb, dscale, dbias, factor, nmv, rmean2, rvar2, eps,
                                          smean, sinv, nullptr, nullptr, nullptr, xd, dy, nullptr, 0, nullptr, 0, 1));
  report("cudnnNormalizationForwardTraining per channel, y", relErr(download(dy, xs, false, CUDNN_DATA_FLOAT), fy_train),
         1e-5);
  report("cudnnNormalizationForwardTraining per channel, running variance",
         relErr(download(rvar2, ps, false, CUDNN_DATA_FLOAT), frv), 1e-5);
  report("cudnnNormalizationForwardTraining per channel, saved inverse deviation",
         relErr(download(sinv, ps, false, CUDNN_DATA_FLOAT), inv), 1e-5);
  CHECK(cudnnNormalizationForwardInference(h, CUDNN_NORM_PER_CHANNEL, CUDNN_NORM_OPS_NORM, CUDNN_NORM_ALGO_STANDARD,
                                           &kOne, &kZero, xd, dx, nsb, dscale, dbias, nmv, rmean2, rvar2, nullptr,
                                           nullptr, nullptr, xd, dy, eps, 1));
  report("cudnnNormalizationForwardInference per channel", relErr(download(dy, xs, false, CUDNN_DATA_FLOAT), fy), 1e-5);
  CHECK(cudnnNormalizationBackward(h, CUDNN_NORM_PER_CHANNEL, CUDNN_NORM_OPS_NORM, CUDNN_NORM_ALGO_STANDARD, &kOne,
                                   &kZero, &kOne, &kZero, xd, dx, nullptr, nullptr, xd, dg, nullptr, nullptr, xd, ddx,
                                   nsb, dscale, dbias, dsc, dbi, eps, nmv, smean, sinv, nullptr, nullptr, 0, nullptr, 0,
                                   1));
  report("cudnnNormalizationBackward per channel, dx", relErr(download(ddx, xs, false, CUDNN_DATA_FLOAT), fdx), 1e-4);
  report("cudnnNormalizationBackward per channel, dscale", relErr(download(dsc, ps, false, CUDNN_DATA_FLOAT), fds), 1e-5);
  expectStatus("cudnnNormalization with a fused ReLU",
               cudnnNormalizationForwardInference(h, CUDNN_NORM_PER_CHANNEL, CUDNN_NORM_OPS_NORM_ACTIVATION,
                                                  CUDNN_NORM_ALGO_STANDARD, &kOne, &kZero, xd, dx, nsb, dscale, dbias,
                                                  nmv, rmean2, rvar2, nullptr, nullptr, relu, xd, dy, eps, 1),
               CUDNN_STATUS_NOT_SUPPORTED);
  expectStatus("cudnnNormalization in 2 groups",
               cudnnDeriveNormTensorDescriptor(nsb, nmv, xd, CUDNN_NORM_PER_CHANNEL, 2), CUDNN_STATUS_NOT_SUPPORTED);
  cudnnDestroyTensorDescriptor(nsb), cudnnDestroyTensorDescriptor(nmv);
  cudaFree(rmean2), cudaFree(rvar2);
  cudnnDestroyActivationDescriptor(relu);
  cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(pd);
  for (void* p : {dx, dg, dy, ddx, dscale, dbias, rmean, rvar, smean, sinv, dsc, dbi}) cudaFree(p);
  return 0;
}

static int checkDropout(cudnnHandle_t h) {
  const Shape s{1, 1, 100, 100};
  V x = randomV(s.size(), 50);
  for (double& v : x) v = v >= 0 ? v + 0.5 : v - 0.5;  // (no zeros: a zero in y is a dropped element)
  x = rounded(x, CUDNN_DATA_FLOAT);
  auto d = tensor(s, false, CUDNN_DATA_FLOAT);
  size_t states_size = 0, reserve_size = 0;
  CHECK(cudnnDropoutGetStatesSize(h, &states_size));
  CHECK(cudnnDropoutGetReserveSpaceSize(d, &reserve_size));
  void *states, *reserve, *reserve2, *dx = upload(x, s, false, CUDNN_DATA_FLOAT), *dy, *ddx;
  cudaMalloc(&states, states_size), cudaMalloc(&reserve, reserve_size), cudaMalloc(&reserve2, reserve_size);
  cudaMalloc(&dy, s.size() * 4), cudaMalloc(&ddx, s.size() * 4);
  cudnnDropoutDescriptor_t dd;
  CHECK(cudnnCreateDropoutDescriptor(&dd));
  const float p = 0.25f;
  CHECK(cudnnSetDropoutDescriptor(dd, h, p, states, states_size, 1234));
  CHECK(cudnnDropoutForward(h, dd, d, dx, d, dy, reserve, reserve_size));
  const V y = download(dy, s, false, CUDNN_DATA_FLOAT);
  size_t dropped = 0;
  double off = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) ++dropped;
    else off = std::max(off, std::fabs(y[i] - x[i] / (1 - p)));
  }
  const double frac = static_cast<double>(dropped) / y.size();
  std::printf("dropout 0.25: %s of 10000 dropped, kept ones scaled by 1/(1-p): error %.1e\n",
              frac > 0.22 && frac < 0.28 ? "about a quarter" : "NOT a quarter", off);
  if (!(frac > 0.22 && frac < 0.28) || off > 1e-5) ++g_failures;
  // backward: the forward call's mask on dy
  CHECK(cudnnDropoutBackward(h, dd, d, dx, d, ddx, reserve, reserve_size));
  const V gx = download(ddx, s, false, CUDNN_DATA_FLOAT);
  size_t mismatched = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if ((y[i] == 0) != (gx[i] == 0) || (y[i] != 0 && std::fabs(gx[i] - y[i]) > 1e-5)) ++mismatched;
  std::printf("dropout backward: the forward mask: %s\n", mismatched ? "FAIL" : "ok");
  if (mismatched) ++g_failures;
  // a second forward call draws another mask (the states advance)
  CHECK(cudnnDropoutForward(h, dd, d, dx, d, dy, reserve2, reserve_size));
  const V y2 = download(dy, s, false, CUDNN_DATA_FLOAT);
  size_t differ = 0;
  for (size_t i = 0; i < y.size(); ++i) differ += (y[i] == 0) != (y2[i] == 0);
  std::printf("dropout again: another mask: %s\n", differ > 1000 ? "ok" : "FAIL");
  if (differ <= 1000) ++g_failures;
  float got_p = 0;
  void* got_states = nullptr;
  unsigned long long got_seed = 0;
  CHECK(cudnnGetDropoutDescriptor(dd, h, &got_p, &got_states, &got_seed));
  std::printf("dropout descriptor: %s\n", got_p == p && got_states == states && got_seed == 1234 ? "as set" : "FAIL");
  cudnnDestroyDropoutDescriptor(dd);
  cudnnDestroyTensorDescriptor(d);
  for (void* q : {states, reserve, reserve2, dx, dy, ddx}) cudaFree(q);
  return 0;
}

// cudnnReduceTensor over some of A's dimensions (C's 1-sized ones): sums, means, maxima with their indices, norms.
static int checkReductions(cudnnHandle_t h) {
  const Shape as{2, 3, 4, 5};
  const V a = rounded(randomV(as.size(), 90), CUDNN_DATA_FLOAT);
  auto ad = tensor(as, false, CUDNN_DATA_FLOAT);
  void* da = upload(a, as, false, CUDNN_DATA_FLOAT);
  cudnnReduceTensorDescriptor_t rd;
  CHECK(cudnnCreateReduceTensorDescriptor(&rd));
  struct Case {
    const char* name;
    cudnnReduceTensorOp_t op;
    Shape c;
    bool indices;
    float beta;
  };
  const Case cases[] = {{"sum over N, H, W (beta 0.5)", CUDNN_REDUCE_TENSOR_ADD, {1, 3, 1, 1}, false, 0.5f},
                        {"mean over H, W", CUDNN_REDUCE_TENSOR_AVG, {2, 3, 1, 1}, false, 0.f},
                        {"max over C, with indices", CUDNN_REDUCE_TENSOR_MAX, {2, 1, 4, 5}, true, 0.f},
                        {"norm2 of everything", CUDNN_REDUCE_TENSOR_NORM2, {1, 1, 1, 1}, false, 0.f}};
  for (const Case& c : cases) {
    CHECK(cudnnSetReduceTensorDescriptor(rd, c.op, CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN,
                                         c.indices ? CUDNN_REDUCE_TENSOR_FLATTENED_INDICES
                                                   : CUDNN_REDUCE_TENSOR_NO_INDICES,
                                         CUDNN_32BIT_INDICES));
    auto cd = tensor(c.c, false, CUDNN_DATA_FLOAT);
    size_t ws_size = 0, idx_size = 0;
    CHECK(cudnnGetReductionWorkspaceSize(h, rd, ad, cd, &ws_size));
    CHECK(cudnnGetReductionIndicesSize(h, rd, ad, cd, &idx_size));
    void *ws = nullptr, *idx = nullptr;
    if (ws_size) cudaMalloc(&ws, ws_size);
    if (idx_size) cudaMalloc(&idx, idx_size);
    const V c0 = rounded(randomV(c.c.size(), 91), CUDNN_DATA_FLOAT);
    void* dc = upload(c0, c.c, false, CUDNN_DATA_FLOAT);
    CHECK(cudnnReduceTensor(h, rd, idx, idx_size, ws, ws_size, &kOne, ad, da, &c.beta, cd, dc));
    V want(c.c.size(), c.op == CUDNN_REDUCE_TENSOR_MAX ? -1e300 : 0.0);
    std::vector<unsigned> want_idx(c.c.size(), 0);
    const double count = static_cast<double>(as.size()) / c.c.size();
    for (int i = 0; i < as.n; ++i)
      for (int j = 0; j < as.c; ++j)
        for (int y = 0; y < as.h; ++y)
          for (int x = 0; x < as.w; ++x) {
            const double v = a[as.at(i, j, y, x)];
            const size_t o = c.c.at(c.c.n == 1 ? 0 : i, c.c.c == 1 ? 0 : j, c.c.h == 1 ? 0 : y, c.c.w == 1 ? 0 : x);
            if (c.op == CUDNN_REDUCE_TENSOR_MAX) {
              if (v > want[o]) want[o] = v, want_idx[o] = static_cast<unsigned>(j);  // (C is the one reduced dimension)
            } else if (c.op == CUDNN_REDUCE_TENSOR_NORM2) {
              want[o] += v * v;
            } else {
              want[o] += c.op == CUDNN_REDUCE_TENSOR_AVG ? v / count : v;
            }
          }
    for (size_t o = 0; o < want.size(); ++o) {
      if (c.op == CUDNN_REDUCE_TENSOR_NORM2) want[o] = std::sqrt(want[o]);
      want[o] += c.beta * c0[o];
    }
    report(std::string("cudnnReduceTensor ") + c.name, relErr(download(dc, c.c, false, CUDNN_DATA_FLOAT), want), 1e-6);
    if (c.indices) {
      std::vector<unsigned> got(c.c.size());
      cudaMemcpy(got.data(), idx, got.size() * 4, cudaMemcpyDeviceToHost);
      std::printf("cudnnReduceTensor max indices: %s\n", got == want_idx ? "those of the maxima" : "FAIL");
      if (got != want_idx) ++g_failures;
    }
    cudnnDestroyTensorDescriptor(cd);
    for (void* p : {ws, idx, dc}) cudaFree(p);
  }
  cudnnDestroyReduceTensorDescriptor(rd);
  cudnnDestroyTensorDescriptor(ad);
  cudaFree(da);
  return 0;
}

// Local response normalisation across channels (window 5, AlexNet's constants), forward and backward.
static int checkLrn(cudnnHandle_t h) {
  const Shape s{2, 7, 3, 4};
  const V x = rounded(randomV(s.size(), 100), CUDNN_DATA_FLOAT), g = rounded(randomV(s.size(), 101), CUDNN_DATA_FLOAT);
  auto d = tensor(s, false, CUDNN_DATA_FLOAT);
  void *dx = upload(x, s, false, CUDNN_DATA_FLOAT), *dg = upload(g, s, false, CUDNN_DATA_FLOAT), *dy, *ddx;
  cudaMalloc(&dy, s.size() * 4), cudaMalloc(&ddx, s.size() * 4);
  cudnnLRNDescriptor_t ld;
  CHECK(cudnnCreateLRNDescriptor(&ld));
  const unsigned n = 5;
  const double alpha = 1e-1, beta = 0.75, k = 2.0;  // (alpha larger than AlexNet's 1e-4, so the window matters)
  CHECK(cudnnSetLRNDescriptor(ld, n, alpha, beta, k));
  CHECK(cudnnLRNCrossChannelForward(h, ld, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, d, dx, &kZero, d, dy));
  CHECK(cudnnLRNCrossChannelBackward(h, ld, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, d, dy, d, dg, d, dx, &kZero, d, ddx));
  // y_c = x_c scale_c^-beta, scale_c = k + alpha/n sum over [c - 2, c + 2] of x^2; dx by finite differences of
  // sum(g y) (central, step 1e-3 in double).
  auto forward = [&](const V& in) {
    V out(s.size());
    for (int i = 0; i < s.n; ++i)
      for (int y = 0; y < s.h; ++y)
        for (int q = 0; q < s.w; ++q)
          for (int c = 0; c < s.c; ++c) {
            double sum = 0;
            for (int j = std::max(0, c - 2); j <= std::min(s.c - 1, c + 2); ++j) sum += in[s.at(i, j, y, q)] * in[s.at(i, j, y, q)];
            out[s.at(i, c, y, q)] = in[s.at(i, c, y, q)] * std::pow(k + alpha / n * sum, -beta);
          }
    return out;
  };
  const V fy = forward(x);
  V fdx(s.size());
  for (size_t e = 0; e < s.size(); ++e) {
    V up = x, down = x;
    up[e] += 1e-3, down[e] -= 1e-3;
    const V yu = forward(up), yd = forward(down);
    double d_sum = 0;
    for (size_t o = 0; o < s.size(); ++o) d_sum += g[o] * (yu[o] - yd[o]);
    fdx[e] = d_sum / 2e-3;
  }
  report("LRN across 5 channels, forward", relErr(download(dy, s, false, CUDNN_DATA_FLOAT), fy), 1e-6);
  report("LRN across 5 channels, backward (against finite differences)",
         relErr(download(ddx, s, false, CUDNN_DATA_FLOAT), fdx), 1e-4);
  expectStatus("an LRN window of 17", cudnnSetLRNDescriptor(ld, 17, alpha, beta, k), CUDNN_STATUS_BAD_PARAM);
  cudnnDestroyLRNDescriptor(ld);
  cudnnDestroyTensorDescriptor(d);
  for (void* p : {dx, dg, dy, ddx}) cudaFree(p);
  return 0;
}
