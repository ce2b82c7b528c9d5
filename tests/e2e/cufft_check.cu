// cuFFT through rgpu (docs/cufft.md): every transform type, rank 1 to 3,
// basic and advanced layouts, in place and out of place, batches, a stream
// of its own, a work area the program gives, the cufftXt plan by data type
// -- each result compared with a direct DFT computed here in double
// precision (error relative to the result's largest magnitude). Then what
// cuFFT refuses, and a transform past the end of its buffer.
//
//   cufft_check [--no-overrun]   prints one line per case and "cufft_check:
//                                done"; exits 1 when a result is off.
//                                --no-overrun leaves out the transform past
//                                its buffer (natively, a GPU fault)
#include <cuda_runtime.h>
#include <cufft.h>
#include <cufftXt.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <string>
#include <vector>

using cd = std::complex<double>;

#define CHECK(call)                                                                  \
  do {                                                                               \
    auto e_ = (call);                                                                \
    if (static_cast<int>(e_) != 0) {                                                 \
      std::printf("cufft_check: %s failed: %d\n", #call, static_cast<int>(e_));      \
      return 2;                                                                      \
    }                                                                                \
  } while (0)

static int g_failures = 0;

static const char* resultName(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "another cufftResult";
  }
}

// The DFT of `x` (row-major, sizes `dims`) along every dimension.
static std::vector<cd> dft(std::vector<cd> x, const std::vector<int>& dims, int sign) {
  size_t total = x.size();
  size_t inner = total;
  for (size_t d = 0; d < dims.size(); ++d) {
    const size_t n = dims[d];
    inner /= n;
    const size_t outer = total / (n * inner);
    std::vector<cd> y(total);
    for (size_t o = 0; o < outer; ++o)
      for (size_t i = 0; i < inner; ++i)
        for (size_t k = 0; k < n; ++k) {
          cd sum = 0;
          for (size_t j = 0; j < n; ++j) {
            double a = sign * 2 * M_PI * static_cast<double>((j * k) % n) / static_cast<double>(n);
            sum += x[(o * n + j) * inner + i] * cd(std::cos(a), std::sin(a));
          }
          y[(o * n + k) * inner + i] = sum;
        }
    x.swap(y);
  }
  return x;
}

// Errors relative to the largest magnitude wanted.
struct Error {
  double worst = 0, scale = 0;
  void add(cd got, cd want) {
    worst = std::max(worst, std::abs(got - want));
    scale = std::max(scale, std::abs(want));
  }
  double relative() const { return scale > 0 ? worst / scale : worst; }
};

static void report(const char* what, const Error& e, double tol) {
  const bool ok = e.relative() <= tol && e.scale > 0;
  std::printf("%s: relative error %.2e %s\n", what, e.relative(), ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

static double value(int i, int salt) { return std::sin(0.37 * i + salt) + 0.25 * std::cos(1.3 * i * salt); }

template <typename T>
static int upload(T** dev, const std::vector<T>& host) {
  CHECK(cudaMalloc(dev, host.size() * sizeof(T)));
  CHECK(cudaMemcpy(*dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return 0;
}
template <typename T>
static std::vector<T> download(const T* dev, size_t n) {
  std::vector<T> host(n);
  if (cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) host.clear();
  return host;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (whole lines between the libraries' log lines on stderr)
  const bool overrun = !(argc > 1 && std::string(argv[1]) == "--no-overrun");
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  {  // C2C 1D, batch 3, out of place forward on a stream, then inverse in place.
    const int n = 1000, batch = 3;
    std::vector<float2> x(n * batch);
    std::vector<cd> xs(n * batch);
    for (int i = 0; i < n * batch; ++i) {
      x[i] = {static_cast<float>(value(i, 1)), static_cast<float>(value(i, 2))};
      xs[i] = cd(x[i].x, x[i].y);
    }
    float2 *in, *out;
    if (upload(&in, x)) return 2;
    CHECK(cudaMalloc(&out, x.size() * sizeof(float2)));
    cufftHandle p;
    CHECK(cufftPlan1d(&p, n, CUFFT_C2C, batch));
    CHECK(cufftSetStream(p, stream));
    CHECK(cufftExecC2C(p, reinterpret_cast<cufftComplex*>(in), reinterpret_cast<cufftComplex*>(out), CUFFT_FORWARD));
    CHECK(cudaStreamSynchronize(stream));
    auto got = download(out, x.size());
    Error e;
    for (int b = 0; b < batch; ++b) {
      auto want = dft(std::vector<cd>(xs.begin() + b * n, xs.begin() + (b + 1) * n), {n}, -1);
      for (int k = 0; k < n; ++k) e.add(cd(got[b * n + k].x, got[b * n + k].y), want[k]);
    }
    report("c2c 1d n=1000 batch 3, forward", e, 1e-5);
    // The same transform captured into a CUDA graph, launched twice.
    float2* graphed;
    CHECK(cudaMalloc(&graphed, x.size() * sizeof(float2)));
    CHECK(cudaMemsetAsync(graphed, 0, x.size() * sizeof(float2), stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CHECK(cufftExecC2C(p, reinterpret_cast<cufftComplex*>(in), reinterpret_cast<cufftComplex*>(graphed), CUFFT_FORWARD));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    auto again = download(graphed, x.size());
    Error g;
    for (size_t i = 0; i < x.size(); ++i) g.add(cd(again[i].x, again[i].y), cd(got[i].x, got[i].y));
    std::printf("c2c captured in a graph: %s\n", g.worst == 0 && !again.empty() ? "the same bits" : "differs");
    if (g.worst != 0 || again.empty()) ++g_failures;
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFree(graphed));
    CHECK(cufftExecC2C(p, reinterpret_cast<cufftComplex*>(out), reinterpret_cast<cufftComplex*>(out), CUFFT_INVERSE));
    got = download(out, x.size());
    Error r;
    for (int i = 0; i < n * batch; ++i) r.add(cd(got[i].x, got[i].y), xs[i] * static_cast<double>(n));
    report("c2c 1d inverse in place gives n x", r, 1e-5);
    CHECK(cufftDestroy(p));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
  }

  {  // R2C 1D out of place, then C2R in place on its output (the padded layout).
    const int n = 998, batch = 2, half = n / 2 + 1;
    std::vector<float> x(n * batch);
    for (int i = 0; i < n * batch; ++i) x[i] = static_cast<float>(value(i, 3));
    float* in;
    float2* spec;
    if (upload(&in, x)) return 2;
    CHECK(cudaMalloc(&spec, half * batch * sizeof(float2)));
    cufftHandle r2c, c2r;
    CHECK(cufftPlan1d(&r2c, n, CUFFT_R2C, batch));
    CHECK(cufftPlan1d(&c2r, n, CUFFT_C2R, batch));
    CHECK(cufftExecR2C(r2c, in, reinterpret_cast<cufftComplex*>(spec)));
    auto got = download(spec, half * batch);
    Error e;
    for (int b = 0; b < batch; ++b) {
      std::vector<cd> xs(n);
      for (int i = 0; i < n; ++i) xs[i] = x[b * n + i];
      auto want = dft(xs, {n}, -1);
      for (int k = 0; k < half; ++k) e.add(cd(got[b * half + k].x, got[b * half + k].y), want[k]);
    }
    report("r2c 1d n=998 batch 2, out of place", e, 1e-5);
    CHECK(cufftExecC2R(c2r, reinterpret_cast<cufftComplex*>(spec), reinterpret_cast<cufftReal*>(spec)));
    auto back = download(reinterpret_cast<float*>(spec), 2 * half * batch);
    Error r;
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < n; ++i) r.add(back[b * 2 * half + i], static_cast<double>(x[b * n + i]) * n);
    report("c2r 1d in place gives n x", r, 1e-5);
    CHECK(cufftDestroy(r2c));
    CHECK(cufftDestroy(c2r));
    CHECK(cudaFree(in));
    CHECK(cudaFree(spec));
  }

  {  // R2C 2D in place (cufftPlan2d): rows padded to 2 (ny/2 + 1) reals.
    const int nx = 24, ny = 20, half = ny / 2 + 1;
    std::vector<float> buf(nx * 2 * half, 0.f);
    std::vector<cd> xs(nx * ny);
    for (int i = 0; i < nx; ++i)
      for (int j = 0; j < ny; ++j) {
        buf[i * 2 * half + j] = static_cast<float>(value(i * ny + j, 4));
        xs[i * ny + j] = buf[i * 2 * half + j];
      }
    float* d;
    if (upload(&d, buf)) return 2;
    cufftHandle p;
    CHECK(cufftPlan2d(&p, nx, ny, CUFFT_R2C));
    CHECK(cufftExecR2C(p, d, reinterpret_cast<cufftComplex*>(d)));
    auto got = download(reinterpret_cast<float2*>(d), nx * half);
    auto want = dft(xs, {nx, ny}, -1);
    Error e;
    for (int i = 0; i < nx; ++i)
      for (int k = 0; k < half; ++k) e.add(cd(got[i * half + k].x, got[i * half + k].y), want[i * ny + k]);
    report("r2c 2d 24x20, in place", e, 1e-5);
    CHECK(cufftDestroy(p));
    CHECK(cudaFree(d));
  }

  {  // C2C 3D out of place.
    const int nx = 8, ny = 6, nz = 5, total = nx * ny * nz;
    std::vector<float2> x(total);
    std::vector<cd> xs(total);
    for (int i = 0; i < total; ++i) {
      x[i] = {static_cast<float>(value(i, 5)), static_cast<float>(value(i, 6))};
      xs[i] = cd(x[i].x, x[i].y);
    }
    float2 *in, *out;
    if (upload(&in, x)) return 2;
    CHECK(cudaMalloc(&out, total * sizeof(float2)));
    cufftHandle p;
    CHECK(cufftPlan3d(&p, nx, ny, nz, CUFFT_C2C));
    CHECK(cufftExecC2C(p, reinterpret_cast<cufftComplex*>(in), reinterpret_cast<cufftComplex*>(out), CUFFT_INVERSE));
    auto got = download(out, total);
    auto want = dft(xs, {nx, ny, nz}, 1);
    Error e;
    for (int i = 0; i < total; ++i) e.add(cd(got[i].x, got[i].y), want[i]);
    report("c2c 3d 8x6x5, inverse", e, 1e-5);
    CHECK(cufftDestroy(p));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
  }

  {  // Double precision: Z2Z 1D batch 2, D2Z 2D (cufftPlanMany, basic layout), Z2D back.
    const int n = 777, batch = 2;
    std::vector<double2> x(n * batch);
    std::vector<cd> xs(n * batch);
    for (int i = 0; i < n * batch; ++i) {
      x[i] = {value(i, 7), value(i, 8)};
      xs[i] = cd(x[i].x, x[i].y);
    }
    double2* d;
    if (upload(&d, x)) return 2;
    cufftHandle p;
    CHECK(cufftPlan1d(&p, n, CUFFT_Z2Z, batch));
    CHECK(cufftExecZ2Z(p, reinterpret_cast<cufftDoubleComplex*>(d), reinterpret_cast<cufftDoubleComplex*>(d),
                       CUFFT_FORWARD));
    auto got = download(d, n * batch);
    Error e;
    for (int b = 0; b < batch; ++b) {
      auto want = dft(std::vector<cd>(xs.begin() + b * n, xs.begin() + (b + 1) * n), {n}, -1);
      for (int k = 0; k < n; ++k) e.add(cd(got[b * n + k].x, got[b * n + k].y), want[k]);
    }
    report("z2z 1d n=777 batch 2, in place", e, 1e-12);
    CHECK(cufftDestroy(p));
    CHECK(cudaFree(d));

    int dims[2] = {16, 15};
    const int total = 16 * 15, half = 15 / 2 + 1;
    std::vector<double> r(total);
    std::vector<cd> rs(total);
    for (int i = 0; i < total; ++i) rs[i] = r[i] = value(i, 9);
    double *rin, *rback;
    double2* spec;
    if (upload(&rin, r)) return 2;
    CHECK(cudaMalloc(&spec, 16 * half * sizeof(double2)));
    CHECK(cudaMalloc(&rback, total * sizeof(double)));
    cufftHandle d2z, z2d;
    CHECK(cufftPlanMany(&d2z, 2, dims, nullptr, 1, 0, nullptr, 1, 0, CUFFT_D2Z, 1));
    CHECK(cufftPlanMany(&z2d, 2, dims, nullptr, 1, 0, nullptr, 1, 0, CUFFT_Z2D, 1));
    CHECK(cufftExecD2Z(d2z, rin, reinterpret_cast<cufftDoubleComplex*>(spec)));
    auto s = download(spec, 16 * half);
    auto want = dft(rs, {16, 15}, -1);
    Error e2;
    for (int i = 0; i < 16; ++i)
      for (int k = 0; k < half; ++k) e2.add(cd(s[i * half + k].x, s[i * half + k].y), want[i * 15 + k]);
    report("d2z 2d 16x15 (cufftPlanMany, basic layout)", e2, 1e-12);
    CHECK(cufftExecZ2D(z2d, reinterpret_cast<cufftDoubleComplex*>(spec), rback));
    auto back = download(rback, total);
    Error e3;
    for (int i = 0; i < total; ++i) e3.add(back[i], r[i] * total);
    report("z2d 2d gives n x", e3, 1e-12);
    CHECK(cufftDestroy(d2z));
    CHECK(cufftDestroy(z2d));
    CHECK(cudaFree(rin));
    CHECK(cudaFree(spec));
    CHECK(cudaFree(rback));
  }

  {  // Advanced layout: 5 interleaved signals of 64 (istride 5, idist 1) into
     // contiguous rows (ostride 1, odist 64); the program's own work area.
    const int n = 64, batch = 5;
    std::vector<float2> x(n * batch);
    for (int i = 0; i < n * batch; ++i) x[i] = {static_cast<float>(value(i, 10)), static_cast<float>(value(i, 11))};
    float2 *in, *out;
    if (upload(&in, x)) return 2;
    CHECK(cudaMalloc(&out, n * batch * sizeof(float2)));
    cufftHandle p;
    CHECK(cufftCreate(&p));
    CHECK(cufftSetAutoAllocation(p, 0));
    int dims[1] = {n}, embed[1] = {n};
    size_t work_size = 0, queried = 1;
    CHECK(cufftMakePlanMany(p, 1, dims, embed, batch, 1, embed, 1, n, CUFFT_C2C, batch, &work_size));
    CHECK(cufftGetSize(p, &queried));
    void* work = nullptr;
    if (work_size) CHECK(cudaMalloc(&work, work_size));
    CHECK(cufftSetWorkArea(p, work));
    std::printf("work area: %zu bytes (cufftGetSize %s)\n", work_size, queried == work_size ? "agrees" : "differs");
    CHECK(cufftExecC2C(p, reinterpret_cast<cufftComplex*>(in), reinterpret_cast<cufftComplex*>(out), CUFFT_FORWARD));
    auto got = download(out, n * batch);
    Error e;
    for (int b = 0; b < batch; ++b) {
      std::vector<cd> xs(n);
      for (int i = 0; i < n; ++i) xs[i] = cd(x[i * batch + b].x, x[i * batch + b].y);
      auto want = dft(xs, {n}, -1);
      for (int k = 0; k < n; ++k) e.add(cd(got[b * n + k].x, got[b * n + k].y), want[k]);
    }
    report("c2c advanced layout, interleaved batches, own work area", e, 1e-5);
    CHECK(cufftDestroy(p));
    if (work) CHECK(cudaFree(work));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
  }

  {  // cufftXt: a plan by data types, and its transform.
    const int n = 128;
    std::vector<float> x(n);
    std::vector<cd> xs(n);
    for (int i = 0; i < n; ++i) xs[i] = x[i] = static_cast<float>(value(i, 12));
    float* in;
    float2* out;
    if (upload(&in, x)) return 2;
    CHECK(cudaMalloc(&out, (n / 2 + 1) * sizeof(float2)));
    cufftHandle p;
    CHECK(cufftCreate(&p));
    long long dims[1] = {n};
    size_t ws = 0;
    CHECK(cufftXtMakePlanMany(p, 1, dims, nullptr, 1, 0, CUDA_R_32F, nullptr, 1, 0, CUDA_C_32F, 1, &ws, CUDA_C_32F));
    CHECK(cufftXtExec(p, in, out, CUFFT_FORWARD));
    auto got = download(out, n / 2 + 1);
    auto want = dft(xs, {n}, -1);
    Error e;
    for (int k = 0; k <= n / 2; ++k) e.add(cd(got[k].x, got[k].y), want[k]);
    report("cufftXtMakePlanMany r2c n=128, cufftXtExec", e, 1e-5);
    cufftHandle h;
    CHECK(cufftCreate(&h));
    std::printf("half precision: %s\n", resultName(cufftXtMakePlanMany(h, 1, dims, nullptr, 1, 0, CUDA_C_16F, nullptr,
                                                                       1, 0, CUDA_C_16F, 1, &ws, CUDA_C_16F)));
    CHECK(cufftDestroy(h));
    CHECK(cufftDestroy(p));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
  }

  {  // What cuFFT refuses.
    cufftHandle p;
    std::printf("size 0: %s\n", resultName(cufftPlan1d(&p, 0, CUFFT_C2C, 1)));
    std::printf("type 7: %s\n", resultName(cufftPlan1d(&p, 8, static_cast<cufftType>(7), 1)));
    CHECK(cufftPlan1d(&p, 8, CUFFT_R2C, 1));
    float2* d;
    CHECK(cudaMalloc(&d, 16 * sizeof(float2)));
    std::printf("c2c on an r2c plan: %s\n",
                resultName(cufftExecC2C(p, reinterpret_cast<cufftComplex*>(d), reinterpret_cast<cufftComplex*>(d),
                                        CUFFT_FORWARD)));
    CHECK(cufftDestroy(p));
    std::printf("destroyed plan: %s\n", resultName(cufftExecR2C(p, reinterpret_cast<cufftReal*>(d),
                                                                reinterpret_cast<cufftComplex*>(d))));
    int version = 0;
    CHECK(cufftGetVersion(&version));
    std::printf("version: %d\n", version);
    // A transform whose output runs past the end of its buffer: refused by
    // the server, reported at the next synchronising call.
    CHECK(cudaFree(d));
    if (overrun) {
      float2 *big, *small;
      CHECK(cudaMalloc(&big, 1024 * sizeof(float2)));
      CHECK(cudaMalloc(&small, 512 * sizeof(float2)));
      CHECK(cufftPlan1d(&p, 1024, CUFFT_C2C, 1));
      cufftResult queued = cufftExecC2C(p, reinterpret_cast<cufftComplex*>(big),
                                        reinterpret_cast<cufftComplex*>(small), CUFFT_FORWARD);
      cudaError_t sync = cudaDeviceSynchronize();
      std::printf("past the end of an allocation: %s, then %s\n", resultName(queued), cudaGetErrorName(sync));
      CHECK(cufftDestroy(p));
      CHECK(cudaFree(big));
      CHECK(cudaFree(small));
    }
  }

  CHECK(cudaStreamDestroy(stream));
  std::printf("cufft_check: done, %d failed\n", g_failures);
  return g_failures ? 1 : 0;
}
