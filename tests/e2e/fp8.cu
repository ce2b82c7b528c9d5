// 8-bit floats as cuda_fp8.h uses them on sm_89 and later (the device code
// becomes cvt.*.e4m3x2/e5m2x2): every conversion of a sweep of floats —
// ties, subnormals, values past the largest finite one, NaN — must give the
// bytes NVIDIA's own host implementation gives, and every one of the 256
// codes of each format must decode to the same half as on the host.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

__global__ void encode(const float* in, unsigned char* e4, unsigned char* e5, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_fp8_e4m3 a(in[i]);
  __nv_fp8_e5m2 b(in[i]);
  e4[i] = a.__x;
  e5[i] = b.__x;
}

__global__ void decode(unsigned short* h4, unsigned short* h5) {
  int i = threadIdx.x;
  __nv_fp8_e4m3 a;
  a.__x = static_cast<__nv_fp8_storage_t>(i);
  __nv_fp8_e5m2 b;
  b.__x = static_cast<__nv_fp8_storage_t>(i);
  __half ha = static_cast<__half>(a), hb = static_cast<__half>(b);
  h4[i] = __half_as_ushort(ha);
  h5[i] = __half_as_ushort(hb);
}

static unsigned short halfBits(__half h) {
  unsigned short u;
  std::memcpy(&u, &h, 2);
  return u;
}

int main() {
  std::vector<float> in;
  for (int e = -14; e <= 17; ++e)
    for (int m = 0; m < 64; ++m) {
      float v = std::ldexp(1.0f + m / 64.0f, e);
      in.push_back(v);
      in.push_back(-v);
    }
  for (float v : {0.0f, -0.0f, 448.0f, 464.0f, 465.0f, 57344.0f, 61440.0f, 1e9f, -1e9f, INFINITY, -INFINITY, NAN,
                  0.00048828125f, 0.0009765625f, 0.00146484375f})
    in.push_back(v);
  const int n = static_cast<int>(in.size());
  float* d_in;
  unsigned char *d4, *d5;
  CHECK(cudaMalloc(&d_in, n * sizeof(float)));
  CHECK(cudaMalloc(&d4, n));
  CHECK(cudaMalloc(&d5, n));
  CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  encode<<<(n + 255) / 256, 256>>>(d_in, d4, d5, n);
  CHECK(cudaGetLastError());
  std::vector<unsigned char> e4(n), e5(n);
  CHECK(cudaMemcpy(e4.data(), d4, n, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(e5.data(), d5, n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    __nv_fp8_e4m3 a(in[i]);
    __nv_fp8_e5m2 b(in[i]);
    if (e4[i] != a.__x || e5[i] != b.__x) {
      if (bad++ < 10)
        std::printf("FAILED: %g -> e4m3 %02x (host %02x), e5m2 %02x (host %02x)\n", in[i], e4[i], a.__x, e5[i], b.__x);
    }
  }
  unsigned short *dh4, *dh5;
  CHECK(cudaMalloc(&dh4, 512));
  CHECK(cudaMalloc(&dh5, 512));
  decode<<<1, 256>>>(dh4, dh5);
  std::vector<unsigned short> h4(256), h5(256);
  CHECK(cudaMemcpy(h4.data(), dh4, 512, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(h5.data(), dh5, 512, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 256; ++i) {
    __nv_fp8_e4m3 a;
    a.__x = static_cast<__nv_fp8_storage_t>(i);
    __nv_fp8_e5m2 b;
    b.__x = static_cast<__nv_fp8_storage_t>(i);
    unsigned short ha = halfBits(static_cast<__half>(a)), hb = halfBits(static_cast<__half>(b));
    bool nan4 = (ha & 0x7c00) == 0x7c00 && (ha & 0x3ff), nan4d = (h4[i] & 0x7c00) == 0x7c00 && (h4[i] & 0x3ff);
    bool nan5 = (hb & 0x7c00) == 0x7c00 && (hb & 0x3ff), nan5d = (h5[i] & 0x7c00) == 0x7c00 && (h5[i] & 0x3ff);
    if ((nan4 ? !nan4d : h4[i] != ha) || (nan5 ? !nan5d : h5[i] != hb)) {
      if (bad++ < 20) std::printf("FAILED: code %02x -> %04x/%04x (host %04x/%04x)\n", i, h4[i], h5[i], ha, hb);
    }
  }
  if (bad) {
    std::printf("fp8: %d mismatches\n", bad);
    return 1;
  }
  std::printf("fp8: %d conversions and 512 decodings match the host's: all checks passed\n", n);
  return 0;
}
