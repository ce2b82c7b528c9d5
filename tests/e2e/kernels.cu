// Kernel features through rgpu's PTX interpreter, each compared with a CPU
// reference: templates, __constant__/__device__ variables, printf, warp votes
// and shuffles, f64, bf16/f16 conversions, divergent loops, atomics, dynamic
// shared memory, 3D grids, integer edge cases.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

static int failures = 0;
#define EXPECT(cond, what)                                     \
  do {                                                         \
    bool ok_ = (cond);                                         \
    std::printf("%-58s %s\n", what, ok_ ? "ok" : "FAILED");    \
    if (!ok_) ++failures;                                      \
  } while (0)

__constant__ float cPoly[4];
__device__ int gCalls;
__device__ unsigned gTable[8] = {1, 1, 2, 3, 5, 8, 13, 21};

template <typename T>
__global__ void axpb(T* p, T a, T b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = a * p[i] + b;
}

__global__ void poly(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = cPoly[0] + x[i] * (cPoly[1] + x[i] * (cPoly[2] + x[i] * cPoly[3])) + gTable[i % 8];
    atomicAdd(&gCalls, 1);
  }
}

__global__ void votes(const int* in, unsigned* ballots, int* alls, int* anys) {
  int v = in[threadIdx.x];
  unsigned b = __ballot_sync(0xffffffff, v > 0);
  int all = __all_sync(0xffffffff, v > -100);
  int any = __any_sync(0xffffffff, v > 1000);
  if ((threadIdx.x & 31) == 0) {
    ballots[threadIdx.x / 32] = b;
    alls[threadIdx.x / 32] = all;
    anys[threadIdx.x / 32] = any;
  }
}

__global__ void shuffles(int* out) {
  int lane = threadIdx.x & 31;
  int up = __shfl_up_sync(0xffffffff, lane * 10, 3);
  int xr = __shfl_xor_sync(0xffffffff, lane, 5);
  int idx = __shfl_sync(0xffffffff, lane * lane, 7);
  int width8 = __shfl_down_sync(0xffffffff, lane, 2, 8);
  out[threadIdx.x * 4 + 0] = up;
  out[threadIdx.x * 4 + 1] = xr;
  out[threadIdx.x * 4 + 2] = idx;
  out[threadIdx.x * 4 + 3] = width8;
}

__global__ void doubles(const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = sqrt(x[i]) * 3.0 + x[i] / 7.0 - floor(x[i] * 0.5);
}

__global__ void halves(const float* x, __nv_bfloat16* bf, __half* h, float* back, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    bf[i] = __float2bfloat16(x[i]);
    h[i] = __float2half(x[i]);
    back[2 * i] = __bfloat162float(bf[i]);
    back[2 * i + 1] = __half2float(h[i]);
  }
}

// Each thread loops a data-dependent number of times: lanes of a warp diverge
// and must reconverge for the shuffle after the loop.
__global__ void collatz(const unsigned* start, unsigned* steps, unsigned* lane_sum) {
  unsigned x = start[threadIdx.x], s = 0;
  while (x != 1) {
    x = (x & 1) ? 3 * x + 1 : x / 2;
    ++s;
    if (s > 1000) break;
  }
  steps[threadIdx.x] = s;
  unsigned total = s;
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffff, total, o);
  lane_sum[threadIdx.x] = total;
}

__global__ void atomics(int* counters, float* fsum, unsigned* maxv, unsigned long long* cas) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&counters[0], 1);
  atomicSub(&counters[1], 2);
  atomicMax(&counters[2], t);
  atomicMin(&counters[3], -t);
  atomicOr(&counters[4], 1 << (t % 31));
  atomicXor(&counters[5], t);
  atomicAdd(fsum, 0.5f);
  atomicMax(maxv, static_cast<unsigned>(t * 3));
  unsigned long long old = *cas, assumed;
  do {
    assumed = old;
    old = atomicCAS(cas, assumed, assumed + t);
  } while (old != assumed);
}

__global__ void dynshared(const int* in, int* out, int n) {
  extern __shared__ int buf[];
  int t = threadIdx.x;
  buf[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = buf[blockDim.x - 1 - t];
}

__global__ void grid3d(int* out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y,
      z = blockIdx.z * blockDim.z + threadIdx.z;
  int w = gridDim.x * blockDim.x, h = gridDim.y * blockDim.y;
  out[(z * h + y) * w + x] = x + 100 * y + 10000 * z;
}

__global__ void intedge(int* out, int a, int b, unsigned s) {
  out[0] = a / b;
  out[1] = a % b;
  out[2] = a >> s;
  out[3] = static_cast<int>(static_cast<unsigned>(a) >> s);
  out[4] = __clz(static_cast<unsigned>(b));
  out[5] = __popc(static_cast<unsigned>(a));
  out[6] = __brev(static_cast<unsigned>(b)) >> 28;
  out[7] = __mulhi(a, b);
  out[8] = min(a, b) + max(a, b);
  out[9] = static_cast<int>(__float2int_rn(2.5f)) + 10 * static_cast<int>(__float2int_rn(3.5f));
  out[10] = static_cast<int>(__fdividef(1.0f, 0.0f) > 1e30f) + 2 * static_cast<int>(isnan(sqrtf(-1.0f)));
  out[11] = static_cast<int>(static_cast<float>(0x7fffffff) == 2147483648.0f);
}

__global__ void barrierReductions(const int* in, int* out) {
  int c = __syncthreads_count(in[threadIdx.x] > 0);
  int a = __syncthreads_and(in[threadIdx.x] > -5);
  int o = __syncthreads_or(in[threadIdx.x] > 100);
  if (threadIdx.x == 0) {
    out[0] = c;
    out[1] = a;
    out[2] = o;
  }
}

struct Table {
  int v[64];
};
__global__ void gridConstant(const __grid_constant__ Table t, int* out) {
  const int* p = &t.v[0];  // the address of a kernel parameter
  out[threadIdx.x] = p[63 - threadIdx.x] * 2;
}

// Device functions that are not inlined: calls, arguments, return values, and
// a divergent call (odd lanes only) that must reconverge for the shuffle.
__device__ __noinline__ float scaleBy(float x, int k) { return x * k + 1.0f; }
__device__ __noinline__ void store2(float* p, float a, float b) {
  p[0] = a;
  p[1] = b;
}
__device__ __noinline__ int weight(int n) { return n <= 0 ? 0 : 1 + (n & 1); }
__global__ void calls(float* out, int* warpsum) {
  int i = threadIdx.x;
  float v = (i & 1) ? scaleBy(i, 3) : 0.5f;
  store2(out + 2 * i, v, scaleBy(v, 2));
  int d = weight(i);
  for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffff, d, o);
  if (i == 0) *warpsum = d;
}

__global__ void hello(int base) {
  if (threadIdx.x < 3) printf("hello from thread %d of block %d: %d %.2f %s\n", threadIdx.x, blockIdx.x, base + threadIdx.x, 0.5 * threadIdx.x, "ok");
}

int main() {
  // Templates over three types.
  {
    std::vector<float> f(100, 2.0f);
    std::vector<double> d(100, 3.0);
    std::vector<int> i(100, 4);
    float* df;
    double* dd;
    int* di;
    cudaMalloc(&df, 400);
    cudaMalloc(&dd, 800);
    cudaMalloc(&di, 400);
    cudaMemcpy(df, f.data(), 400, cudaMemcpyHostToDevice);
    cudaMemcpy(dd, d.data(), 800, cudaMemcpyHostToDevice);
    cudaMemcpy(di, i.data(), 400, cudaMemcpyHostToDevice);
    axpb<float><<<1, 128>>>(df, 1.5f, 0.25f, 100);
    axpb<double><<<1, 128>>>(dd, -2.0, 0.5, 100);
    axpb<int><<<1, 128>>>(di, 3, -1, 100);
    cudaMemcpy(f.data(), df, 400, cudaMemcpyDeviceToHost);
    cudaMemcpy(d.data(), dd, 800, cudaMemcpyDeviceToHost);
    cudaMemcpy(i.data(), di, 400, cudaMemcpyDeviceToHost);
    EXPECT(f[99] == 3.25f && d[0] == -5.5 && i[50] == 11, "templated kernels (float, double, int)");
  }
  // __constant__ and __device__ variables, with a __device__ initialiser.
  {
    float coeffs[4] = {1.0f, 2.0f, 0.5f, 0.25f};
    cudaMemcpyToSymbol(cPoly, coeffs, sizeof coeffs);
    int zero = 0;
    cudaMemcpyToSymbol(gCalls, &zero, sizeof zero);
    const int n = 1000;
    std::vector<float> x(n), y(n);
    for (int k = 0; k < n; ++k) x[k] = k * 0.01f - 3.0f;
    float *dx, *dy;
    cudaMalloc(&dx, n * 4);
    cudaMalloc(&dy, n * 4);
    cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
    poly<<<(n + 127) / 128, 128>>>(dx, dy, n);
    cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost);
    int calls = 0;
    cudaMemcpyFromSymbol(&calls, gCalls, sizeof calls);
    const unsigned fib[8] = {1, 1, 2, 3, 5, 8, 13, 21};
    double worst = 0;
    for (int k = 0; k < n; ++k) {
      float ref = coeffs[0] + x[k] * (coeffs[1] + x[k] * (coeffs[2] + x[k] * coeffs[3])) + fib[k % 8];
      worst = std::max(worst, static_cast<double>(std::fabs(ref - y[k])));
    }
    EXPECT(worst < 1e-4 && calls == n, "__constant__ and __device__ variables");
  }
  // Warp votes over 4 warps.
  {
    std::vector<int> in(128);
    for (int k = 0; k < 128; ++k) in[k] = (k % 3 == 0) ? 5 : -5;
    in[64] = 2000;
    int *din, *dalls, *danys;
    unsigned* dballots;
    cudaMalloc(&din, 512);
    cudaMalloc(&dballots, 16);
    cudaMalloc(&dalls, 16);
    cudaMalloc(&danys, 16);
    cudaMemcpy(din, in.data(), 512, cudaMemcpyHostToDevice);
    votes<<<1, 128>>>(din, dballots, dalls, danys);
    unsigned ballots[4];
    int alls[4], anys[4];
    cudaMemcpy(ballots, dballots, 16, cudaMemcpyDeviceToHost);
    cudaMemcpy(alls, dalls, 16, cudaMemcpyDeviceToHost);
    cudaMemcpy(anys, danys, 16, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int w = 0; w < 4; ++w) {
      unsigned ref = 0;
      for (int l = 0; l < 32; ++l) ref |= (in[w * 32 + l] > 0 ? 1u : 0u) << l;
      ok &= ballots[w] == ref && alls[w] == 1 && anys[w] == (w == 2);
    }
    EXPECT(ok, "warp vote: ballot, all, any");
  }
  // Shuffle variants.
  {
    int* dout;
    cudaMalloc(&dout, 64 * 16);
    shuffles<<<1, 64>>>(dout);
    std::vector<int> out(64 * 4);
    cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int t = 0; t < 64; ++t) {
      int lane = t & 31;
      int up = lane >= 3 ? (lane - 3) * 10 : lane * 10;
      int xr = lane ^ 5;
      int idx = 49;
      int seg = lane & ~7, d = lane + 2;
      int width8 = (d - seg) < 8 ? d : lane;
      ok &= out[t * 4] == up && out[t * 4 + 1] == xr && out[t * 4 + 2] == idx && out[t * 4 + 3] == width8;
    }
    EXPECT(ok, "warp shuffles: up, xor, idx, down with width 8");
  }
  // f64.
  {
    const int n = 300;
    std::vector<double> x(n), y(n);
    for (int k = 0; k < n; ++k) x[k] = k * 1.37 + 0.001;
    double *dx, *dy;
    cudaMalloc(&dx, n * 8);
    cudaMalloc(&dy, n * 8);
    cudaMemcpy(dx, x.data(), n * 8, cudaMemcpyHostToDevice);
    doubles<<<3, 128>>>(dx, dy, n);
    cudaMemcpy(y.data(), dy, n * 8, cudaMemcpyDeviceToHost);
    double worst = 0;
    for (int k = 0; k < n; ++k)
      worst = std::max(worst, std::fabs(y[k] - (std::sqrt(x[k]) * 3.0 + x[k] / 7.0 - std::floor(x[k] * 0.5))));
    EXPECT(worst < 1e-12, "f64 arithmetic, sqrt, floor");
  }
  // bf16 and f16 conversions, with round-to-nearest-even.
  {
    const int n = 64;
    std::vector<float> x(n), back(2 * n);
    for (int k = 0; k < n; ++k) x[k] = (k - 32) * 1.0078125f + 1.0f / (k + 1);
    x[0] = 65504.0f;
    x[1] = 1e-8f;
    float *dx, *dback;
    __nv_bfloat16* dbf;
    __half* dh;
    cudaMalloc(&dx, n * 4);
    cudaMalloc(&dback, 2 * n * 4);
    cudaMalloc(&dbf, n * 2);
    cudaMalloc(&dh, n * 2);
    cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
    halves<<<1, n>>>(dx, dbf, dh, dback, n);
    cudaMemcpy(back.data(), dback, 2 * n * 4, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int k = 0; k < n; ++k) {
      float bf = __bfloat162float(__float2bfloat16(x[k]));
      float h = __half2float(__float2half(x[k]));
      ok &= std::memcmp(&back[2 * k], &bf, 4) == 0 && std::memcmp(&back[2 * k + 1], &h, 4) == 0;
    }
    EXPECT(ok, "bf16 and f16 conversions match the host's");
  }
  // Divergent loops reconverge.
  {
    std::vector<unsigned> start(64), steps(64), sums(64);
    for (int k = 0; k < 64; ++k) start[k] = 1 + k * 37;
    unsigned *ds, *dsteps, *dsums;
    cudaMalloc(&ds, 256);
    cudaMalloc(&dsteps, 256);
    cudaMalloc(&dsums, 256);
    cudaMemcpy(ds, start.data(), 256, cudaMemcpyHostToDevice);
    collatz<<<1, 64>>>(ds, dsteps, dsums);
    cudaMemcpy(steps.data(), dsteps, 256, cudaMemcpyDeviceToHost);
    cudaMemcpy(sums.data(), dsums, 256, cudaMemcpyDeviceToHost);
    bool ok = true;
    unsigned warp_sum[2] = {0, 0};
    for (int k = 0; k < 64; ++k) {
      unsigned x = start[k], s = 0;
      while (x != 1 && s <= 1000) {
        x = (x & 1) ? 3 * x + 1 : x / 2;
        ++s;
      }
      ok &= steps[k] == s;
      warp_sum[k / 32] += s;
    }
    for (int k = 0; k < 64; ++k) ok &= sums[k] == warp_sum[k / 32];
    EXPECT(ok, "divergent loops reconverge before a shuffle");
  }
  // Atomics of every kind on global memory, from 8 blocks in parallel.
  {
    int init[6] = {0, 0, -1, 0, 0, 0};
    int* dc;
    float* df;
    unsigned* dm;
    unsigned long long* dcas;
    cudaMalloc(&dc, sizeof init);
    cudaMalloc(&df, 4);
    cudaMalloc(&dm, 4);
    cudaMalloc(&dcas, 8);
    cudaMemcpy(dc, init, sizeof init, cudaMemcpyHostToDevice);
    cudaMemset(df, 0, 4);
    cudaMemset(dm, 0, 4);
    cudaMemset(dcas, 0, 8);
    atomics<<<8, 256>>>(dc, df, dm, dcas);
    int c[6];
    float fs;
    unsigned mx;
    unsigned long long cas;
    cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
    cudaMemcpy(&fs, df, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&mx, dm, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&cas, dcas, 8, cudaMemcpyDeviceToHost);
    int n = 2048, x = 0, orv = 0;
    for (int t = 0; t < n; ++t) {
      x ^= t;
      orv |= 1 << (t % 31);
    }
    EXPECT(c[0] == n && c[1] == -2 * n && c[2] == n - 1 && c[3] == -(n - 1) && c[4] == orv && c[5] == x &&
               fs == n * 0.5f && mx == 3u * (n - 1) && cas == static_cast<unsigned long long>(n) * (n - 1) / 2,
           "atomics: add sub max min or xor, float add, CAS loop");
  }
  // Dynamic shared memory.
  {
    const int n = 4 * 96;
    std::vector<int> in(n), out(n);
    for (int k = 0; k < n; ++k) in[k] = k * k;
    int *din, *dout;
    cudaMalloc(&din, n * 4);
    cudaMalloc(&dout, n * 4);
    cudaMemcpy(din, in.data(), n * 4, cudaMemcpyHostToDevice);
    dynshared<<<4, 96, 96 * sizeof(int)>>>(din, dout, n);
    cudaMemcpy(out.data(), dout, n * 4, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int b = 0; b < 4; ++b)
      for (int t = 0; t < 96; ++t) ok &= out[b * 96 + t] == in[b * 96 + 95 - t];
    EXPECT(ok, "dynamic shared memory with a barrier");
  }
  // 3D grid and block.
  {
    dim3 grid(3, 2, 2), block(4, 3, 2);
    int w = 12, h = 6, d = 4;
    int* dout;
    cudaMalloc(&dout, w * h * d * 4);
    grid3d<<<grid, block>>>(dout);
    std::vector<int> out(w * h * d);
    cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int z = 0; z < d; ++z)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) ok &= out[(z * h + y) * w + x] == x + 100 * y + 10000 * z;
    EXPECT(ok, "3D grids and blocks");
  }
  // Integer and float edge cases.
  {
    int* dout;
    cudaMalloc(&dout, 12 * 4);
    intedge<<<1, 1>>>(dout, -7, 2, 33);
    int o[12];
    cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost);
    unsigned b = 2, rev = 0;
    for (int k = 0; k < 32; ++k) rev |= ((b >> k) & 1u) << (31 - k);
    long long hi = (static_cast<long long>(-7) * 2) >> 32;
    // PTX clamps shift amounts to the register width.
    bool ok = o[0] == -3 && o[1] == -1 && o[2] == -1 && o[3] == 0 &&
              o[4] == 30 && o[5] == __builtin_popcount(static_cast<unsigned>(-7)) && o[6] == static_cast<int>(rev >> 28) &&
              o[7] == static_cast<int>(hi) && o[8] == -5 && o[9] == 2 + 40 && o[10] == 3 && o[11] == 1;
    EXPECT(ok, "integer division, shifts past width, clz, popc, brev, mulhi");
  }
  // __syncthreads_count/and/or (bar.red) and __grid_constant__ parameters.
  {
    std::vector<int> in(128);
    int expect_count = 0;
    for (int k = 0; k < 128; ++k) {
      in[k] = (k % 3 == 0) ? 1 : -1;
      expect_count += in[k] > 0;
    }
    int *din, *dout;
    cudaMalloc(&din, 512);
    cudaMalloc(&dout, 256);
    cudaMemcpy(din, in.data(), 512, cudaMemcpyHostToDevice);
    barrierReductions<<<1, 128>>>(din, dout);
    int r[3];
    cudaMemcpy(r, dout, sizeof r, cudaMemcpyDeviceToHost);
    EXPECT(r[0] == expect_count && r[1] == 1 && r[2] == 0, "__syncthreads_count/and/or (bar.red)");
    Table t;
    for (int k = 0; k < 64; ++k) t.v[k] = k * 3;
    gridConstant<<<1, 64>>>(t, dout);
    int g[64];
    cudaMemcpy(g, dout, sizeof g, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int k = 0; k < 64; ++k) ok &= g[k] == (63 - k) * 6;
    EXPECT(ok, "__grid_constant__ parameter read through its address");
  }
  // Non-inlined device function calls.
  {
    float* dout;
    int* dsum;
    cudaMalloc(&dout, 64 * sizeof(float));
    cudaMalloc(&dsum, sizeof(int));
    calls<<<1, 32>>>(dout, dsum);
    float h[64];
    int sum = 0, ref = 0;
    cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost);
    cudaMemcpy(&sum, dsum, sizeof sum, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0; i < 32; ++i) {
      float v = (i & 1) ? i * 3 + 1.0f : 0.5f;
      ok &= h[2 * i] == v && h[2 * i + 1] == v * 2 + 1.0f;
      ref += i <= 0 ? 0 : 1 + (i & 1);
    }
    EXPECT(ok && sum == ref, "__noinline__ device function calls, divergent and uniform");
  }
  // printf reaches this program's stdout.
  {
    hello<<<2, 32>>>(40);
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaSuccess, "printf kernel completes");
  }
  std::printf("kernels: %s (%d failure(s))\n", failures ? "FAILED" : "all checks passed", failures);
  return failures ? 1 : 0;
}
