// One program on every device it is given, as multi-GPU programs are written
// (tests/e2e/cluster_e2e_test.cc runs it on devices of several pool members).
// Each step prints one line; "FAIL" on any line is a failure, and the last
// line is "multi_device: ok" when everything checked out.
//
//  - a vector split over all devices: each adds its slice, a kernel reduces
//    it, the host sums the partial sums;
//  - halves exchanged between neighbours with cudaMemcpyPeer,
//    cudaMemcpy(cudaMemcpyDefault) and cudaMemcpyPeerAsync, checked on the host;
//  - cudaStreamWaitEvent on the next device's event, behind a slow kernel:
//    the waiting stream's copy must see the slow kernel's result;
//  - cudaDeviceCanAccessPeer for every pair;
//  - a cuBLAS SAXPY per device, with a handle made on each;
//  - cudaMemset and H2D of another device's memory on this device's stream;
//  - a texture and a surface object on every device (drivers may give two
//    devices' objects the same value: each kernel takes its own device's),
//    one device's destroyed while the others' go on being used.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static int g_fail = 0;
#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("FAIL %s: %s (line %d)\n", #x, cudaGetErrorName(e_), __LINE__);             \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

static void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) ++g_fail;
}

__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void reduce(const float* x, int n, double* out) {
  __shared__ double part[256];
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = part[0];
}

// Slow on purpose: a consumer that did not wait would see the old value.
__global__ void slowFill(float* x, int n, float v, int spin) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0;
  for (int k = 0; k < spin; ++k) acc += 1e-30f * k;
  if (i < n) x[i] = v + acc * 0;
}

// Element x of the texture to out[x], and twice it through the surface.
__global__ void sampleInto(cudaTextureObject_t t, cudaSurfaceObject_t s, float* out, int w) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x < w) {
    float v = tex1D<float>(t, x + 0.5f);
    out[x] = v;
    surf1Dwrite(2.0f * v, s, x * static_cast<int>(sizeof(float)));
  }
}

// Texture and surface objects on every device; returns whether each kernel
// read and wrote its own device's, before and after device 0's are destroyed
// (with device 0 current, its server last busy with another device's work).
static bool objectsOnEveryDevice(int n, const std::vector<float*>& out, const std::vector<cudaStream_t>& st) {
  const int w = 64;
  std::vector<cudaArray_t> a(n), b(n);
  std::vector<cudaTextureObject_t> tex(n);
  std::vector<cudaSurfaceObject_t> surf(n);
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMallocArray(&a[d], &f, w, 0));
    CHECK(cudaMallocArray(&b[d], &f, w, 0, cudaArraySurfaceLoadStore));
    std::vector<float> v(w);
    for (int x = 0; x < w; ++x) v[x] = 100.0f * d + x;
    CHECK(cudaMemcpy2DToArray(a[d], 0, 0, v.data(), w * sizeof(float), w * sizeof(float), 1, cudaMemcpyHostToDevice));
    cudaResourceDesc r{};
    r.resType = cudaResourceTypeArray;
    r.res.array.array = a[d];
    cudaTextureDesc td{};
    td.addressMode[0] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    CHECK(cudaCreateTextureObject(&tex[d], &r, &td, nullptr));
    r.res.array.array = b[d];
    CHECK(cudaCreateSurfaceObject(&surf[d], &r));
    std::printf("objects of device %d: texture %llu, surface %llu\n", d, tex[d], surf[d]);
  }
  // Each device's kernel reads its texture and writes its surface.
  auto check = [&](int d) {
    CHECK(cudaSetDevice(d));
    sampleInto<<<1, w, 0, st[d]>>>(tex[d], surf[d], out[d], w);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(st[d]));
    std::vector<float> got(w), twice(w);
    CHECK(cudaMemcpy(got.data(), out[d], w * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy2DFromArray(twice.data(), w * sizeof(float), b[d], 0, 0, w * sizeof(float), 1,
                                cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int x = 0; x < w && ok; ++x) ok = got[x] == 100.0f * d + x && twice[x] == 2.0f * (100.0f * d + x);
    cudaResourceDesc back{};
    ok = ok && cudaGetTextureObjectResourceDesc(&back, tex[d]) == cudaSuccess && back.res.array.array == a[d];
    ok = ok && cudaGetSurfaceObjectResourceDesc(&back, surf[d]) == cudaSuccess && back.res.array.array == b[d];
    return ok;
  };
  bool ok = true;
  for (int d = 0; d < n; ++d) ok = check(d) && ok;
  // Device 0's go; the others' are still theirs.
  CHECK(cudaSetDevice(0));
  CHECK(cudaDestroyTextureObject(tex[0]));
  CHECK(cudaDestroySurfaceObject(surf[0]));
  for (int d = 1; d < n; ++d) ok = check(d) && ok;
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    if (d != 0) {
      CHECK(cudaDestroyTextureObject(tex[d]));
      CHECK(cudaDestroySurfaceObject(surf[d]));
    }
    CHECK(cudaFreeArray(a[d]));
    CHECK(cudaFreeArray(b[d]));
  }
  return ok;
}

int main() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  std::printf("devices: %d\n", n);
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, d));
    std::printf("device %d: %s, %zu MiB\n", d, p.name, p.totalGlobalMem >> 20);
  }

  // ---- peer access matrix ---------------------------------------------------
  for (int a = 0; a < n; ++a) {
    std::printf("peer %d:", a);
    for (int b = 0; b < n; ++b) {
      int can = -1;
      if (a != b) CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      std::printf(" %d", a == b ? 1 : can);
    }
    std::printf("\n");
  }

  // ---- a vector split over every device ----------------------------------------
  const int total = 1 << 14, slice = total / n;
  std::vector<float> ha(total), hb(total);
  for (int i = 0; i < total; ++i) ha[i] = 0.5f * (i % 97), hb[i] = 0.25f * (i % 89);
  double want = 0;
  for (int i = 0; i < slice * n; ++i) want += double(ha[i]) + hb[i];
  std::vector<float*> da(n), db(n), dc(n);
  std::vector<double*> dsum(n);
  std::vector<cudaStream_t> st(n);
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));  // no implicit order with the legacy stream
    CHECK(cudaMalloc(&da[d], slice * sizeof(float)));
    CHECK(cudaMalloc(&db[d], slice * sizeof(float)));
    CHECK(cudaMalloc(&dc[d], slice * sizeof(float)));
    CHECK(cudaMalloc(&dsum[d], sizeof(double)));
    CHECK(cudaMemcpyAsync(da[d], ha.data() + d * slice, slice * sizeof(float), cudaMemcpyHostToDevice, st[d]));
    CHECK(cudaMemcpyAsync(db[d], hb.data() + d * slice, slice * sizeof(float), cudaMemcpyHostToDevice, st[d]));
    add<<<(slice + 255) / 256, 256, 0, st[d]>>>(da[d], db[d], dc[d], slice);
    CHECK(cudaGetLastError());
    reduce<<<1, 256, 0, st[d]>>>(dc[d], slice, dsum[d]);
    CHECK(cudaGetLastError());
  }
  double got = 0;
  for (int d = 0; d < n; ++d) {
    double s = 0;
    CHECK(cudaSetDevice(d));
    CHECK(cudaMemcpyAsync(&s, dsum[d], sizeof s, cudaMemcpyDeviceToHost, st[d]));
    CHECK(cudaStreamSynchronize(st[d]));
    got += s;
  }
  std::printf("sum: %.1f (expected %.1f)\n", got, want);
  expect(got == want, "split sum");

  // ---- neighbours exchange halves -------------------------------------------------
  if (n > 1) {
    const int half = slice / 2;
    for (int d = 0; d < n; ++d) {
      const int next = (d + 1) % n;
      float* dst = dc[next] + half;  // the next device's upper half
      CHECK(cudaSetDevice(d));
      if (d % 3 == 0) CHECK(cudaMemcpyPeer(dst, next, dc[d], d, half * sizeof(float)));
      else if (d % 3 == 1) CHECK(cudaMemcpy(dst, dc[d], half * sizeof(float), cudaMemcpyDefault));
      else CHECK(cudaMemcpyPeerAsync(dst, next, dc[d], d, half * sizeof(float), st[d]));
    }
    for (int d = 0; d < n; ++d) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaDeviceSynchronize());
    }
    bool ok = true;
    std::vector<float> h(slice);
    for (int d = 0; d < n && ok; ++d) {
      const int prev = (d + n - 1) % n;
      CHECK(cudaMemcpy(h.data(), dc[d], slice * sizeof(float), cudaMemcpyDefault));
      for (int i = 0; i < half && ok; ++i) ok = h[i] == ha[d * slice + i] + hb[d * slice + i];
      for (int i = 0; i < half && ok; ++i) ok = h[half + i] == ha[prev * slice + i] + hb[prev * slice + i];
    }
    expect(ok, "peer exchange (cudaMemcpyPeer, cudaMemcpyDefault, cudaMemcpyPeerAsync)");

    // ---- a stream waits for another device's event ------------------------------------
    // Device d's stream waits for a slow fill of `next`'s memory with `v` on next's stream.
    auto waitForFill = [&](int d, int next, float v) {
      cudaEvent_t done;
      CHECK(cudaSetDevice(next));
      CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      slowFill<<<(slice + 255) / 256, 256, 0, st[next]>>>(dc[next], slice, v, 3000);
      CHECK(cudaEventRecord(done, st[next]));
      CHECK(cudaSetDevice(d));
      CHECK(cudaStreamWaitEvent(st[d], done, 0));
      return done;
    };
    ok = true;
    for (int d = 0; d < n; ++d) {
      const int next = (d + 1) % n;
      cudaEvent_t done = waitForFill(d, next, 7.0f + d);
      // In the waiting stream's order: the next device's fresh values come here.
      CHECK(cudaMemcpyPeerAsync(dc[d], d, dc[next], next, slice * sizeof(float), st[d]));
      CHECK(cudaMemcpyAsync(h.data(), dc[d], slice * sizeof(float), cudaMemcpyDeviceToHost, st[d]));
      CHECK(cudaStreamSynchronize(st[d]));
      for (int i = 0; i < slice && ok; ++i) ok = h[i] == 7.0f + d;
      CHECK(cudaEventDestroy(done));
    }
    expect(ok, "cudaStreamWaitEvent on another device's event");

    // The same wait, then a read of the other device's memory on the waiting stream.
    ok = true;
    for (int d = 0; d < n; ++d) {
      const int next = (d + 1) % n;
      cudaEvent_t done = waitForFill(d, next, 40.0f + d);
      float mark = -1;
      CHECK(cudaMemcpyAsync(&mark, dc[next] + slice - 1, sizeof mark, cudaMemcpyDefault, st[d]));
      CHECK(cudaStreamSynchronize(st[d]));
      ok = ok && mark == 40.0f + d;
      CHECK(cudaEventDestroy(done));
    }
    expect(ok, "stream order across devices (wait, then read the other's memory)");

    // ---- memset and H2D of the next device's memory on this device's stream ---------------
    ok = true;
    for (int d = 0; d < n; ++d) {
      const int next = (d + 1) % n;
      CHECK(cudaSetDevice(d));
      CHECK(cudaMemsetAsync(dc[next], 0, slice * sizeof(float), st[d]));
      CHECK(cudaMemcpyAsync(dc[next], ha.data(), 16 * sizeof(float), cudaMemcpyHostToDevice, st[d]));
      CHECK(cudaStreamSynchronize(st[d]));
      CHECK(cudaMemcpy(h.data(), dc[next], slice * sizeof(float), cudaMemcpyDeviceToHost));
      for (int i = 0; i < slice && ok; ++i) ok = h[i] == (i < 16 ? ha[i] : 0.0f);
    }
    expect(ok, "memset and host-to-device copy of another device's memory");
  }

  // ---- cuBLAS on each device -------------------------------------------------------
  bool ok = true;
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
      ok = false;
      break;
    }
    cublasSetStream(h, st[d]);
    const float alpha = 2.0f;
    std::vector<float> x(slice, 1.0f + d), y(slice, 3.0f);
    CHECK(cudaMemcpy(da[d], x.data(), slice * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db[d], y.data(), slice * sizeof(float), cudaMemcpyHostToDevice));
    ok = ok && cublasSaxpy(h, slice, &alpha, da[d], 1, db[d], 1) == CUBLAS_STATUS_SUCCESS;
    CHECK(cudaMemcpyAsync(y.data(), db[d], slice * sizeof(float), cudaMemcpyDeviceToHost, st[d]));
    CHECK(cudaStreamSynchronize(st[d]));
    for (int i = 0; i < slice && ok; ++i) ok = y[i] == 3.0f + 2.0f * (1.0f + d);
    cublasDestroy(h);
  }
  expect(ok, "cuBLAS SAXPY on every device");

  // ---- texture and surface objects on every device ----------------------------------
  expect(objectsOnEveryDevice(n, dc, st), "texture and surface objects on every device (each kernel its own)");

  // ---- what cannot cross -------------------------------------------------------------
  if (n > 1) {
    cudaEvent_t a, b;
    CHECK(cudaSetDevice(0));
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventRecord(a, st[0]));
    CHECK(cudaSetDevice(n - 1));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(b, st[n - 1]));
    CHECK(cudaEventSynchronize(a));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, a, b);
    std::printf("elapsed between devices 0 and %d: %s\n", n - 1, cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaEventRecord(a, st[n - 1]);
    std::printf("record device 0's event on device %d's stream: %s\n", n - 1, cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
  }

  // ---- figures: a peer copy within a server and across two ----------------------------
  // (printed, never asserted: the machine is shared)
  {
    int near = -1, far = -1;
    for (int b = 1; b < n; ++b) {
      int can = 0;
      CHECK(cudaDeviceCanAccessPeer(&can, 0, b));
      if (can && near < 0) near = b;
      if (!can && far < 0) far = b;
    }
    const size_t bytes = 32u << 20;
    auto time = [&](int to) {
      void *src = nullptr, *dst = nullptr;
      CHECK(cudaSetDevice(0));
      CHECK(cudaMalloc(&src, bytes));
      CHECK(cudaMemset(src, 1, bytes));
      CHECK(cudaSetDevice(to));
      CHECK(cudaMalloc(&dst, bytes));
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpyPeer(dst, to, src, 0, bytes));  // warm
      CHECK(cudaDeviceSynchronize());
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 3; ++i) CHECK(cudaMemcpyPeer(dst, to, src, 0, bytes));
      CHECK(cudaDeviceSynchronize());  // (cudaMemcpyPeer is asynchronous to the host)
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 3;
      CHECK(cudaFree(dst));
      CHECK(cudaSetDevice(0));
      CHECK(cudaFree(src));
      return bytes / s / 1e6;
    };
    if (near > 0 && far > 0) {
      double a = time(near), b = time(far);
      std::printf("figures: cudaMemcpyPeer 32 MiB within a server %.0f MB/s, across servers (relayed) %.0f MB/s, "
                  "ratio %.2f\n", a, b, b / a);
    }
  }

  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaFree(da[d]));
    CHECK(cudaFree(db[d]));
    CHECK(cudaFree(dc[d]));
    CHECK(cudaFree(dsum[d]));
    CHECK(cudaStreamDestroy(st[d]));
  }
  std::printf("multi_device: %s\n", g_fail ? "FAILED" : "ok");
  return g_fail ? 1 : 0;
}
