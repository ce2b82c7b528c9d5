// Texture objects compared with a host model of the hardware's rules (the
// CUDA programming guide's texture-fetching appendix): every address mode,
// point and linear filtering (9-bit fixed-point weights), normalised and
// unnormalised coordinates, border colour, element and normalised-float reads,
// sRGB, linear and pitch-2D memory, 3D, layered, cubemap and mipmapped
// arrays, gathers; and a small image pipeline (rotate an image through a
// bilinear texture). On rgpu's sim the fetches must match the model bit for
// bit; natively (--native) within the hardware's interpolation precision.
//
//   textures             through rgpu (the sim, or the CUDA backend)
//   textures --native    on NVIDIA's runtime
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

// ---- the host model ---------------------------------------------------------------------

static double weight(double f) { return std::floor(f * 256.0 + 0.5) / 256.0; }
static long address(long i, long n, cudaTextureAddressMode m) {
  switch (m) {
    case cudaAddressModeWrap: return ((i % n) + n) % n;
    case cudaAddressModeMirror: {
      long k = ((i % (2 * n)) + 2 * n) % (2 * n);
      return k < n ? k : 2 * n - 1 - k;
    }
    case cudaAddressModeBorder: return i < 0 || i >= n ? -1 : i;
    default: return i < 0 ? 0 : i >= n ? n - 1 : i;
  }
}
struct Model2D {
  const float* texels;
  long w, h;
  cudaTextureAddressMode mode;
  bool linear, normalized;
  float border;
  double at(long x, long y) const {
    long ax = address(x, w, mode), ay = address(y, h, mode);
    return ax < 0 || ay < 0 ? border : texels[ay * w + ax];
  }
  float sample(float fx, float fy) const {
    double x = fx, y = fy;
    if (normalized) x *= w, y *= h;
    if (!linear) return static_cast<float>(at(static_cast<long>(std::floor(x)), static_cast<long>(std::floor(y))));
    double bx = x - 0.5, by = y - 0.5;
    long i = static_cast<long>(std::floor(bx)), j = static_cast<long>(std::floor(by));
    double a = weight(bx - i), b = weight(by - j);
    double r = 0;
    r += (1 - a) * (1 - b) * at(i, j);
    r += a * (1 - b) * at(i + 1, j);
    r += (1 - a) * b * at(i, j + 1);
    r += a * b * at(i + 1, j + 1);
    return static_cast<float>(r);
  }
};

// ---- kernels -------------------------------------------------------------------------------

__global__ void fetch2D(cudaTextureObject_t t, const float2* at, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex2D<float>(t, at[i].x, at[i].y);
}
__global__ void fetchLinear(cudaTextureObject_t t, int* out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<int>(t, i - 2);
}
__global__ void fetchRgba(cudaTextureObject_t t, float4* out) {
  out[threadIdx.x] = tex2D<float4>(t, threadIdx.x + 0.5f, 0.5f);
}
__global__ void fetchShapes(cudaTextureObject_t t3, cudaTextureObject_t tl, cudaTextureObject_t tc, float* out) {
  out[0] = tex3D<float>(t3, 1.5f, 2.5f, 0.5f);   // texel (1, 2, 0)
  out[1] = tex3D<float>(t3, 1.0f, 2.5f, 1.0f);   // linear: between x 0/1 and z 0/1
  out[2] = tex2DLayered<float>(tl, 2.5f, 1.5f, 2);
  out[3] = tex2DLayered<float>(tl, 2.5f, 1.5f, 9);  // layer clamped to the last
  out[4] = texCubemap<float>(tc, 1.0f, 0.1f, 0.2f);   // +x face
  out[5] = texCubemap<float>(tc, 0.1f, -1.0f, 0.2f);  // -y face
  out[6] = texCubemap<float>(tc, -0.2f, 0.1f, -1.0f); // -z face
}
__global__ void fetchMip(cudaTextureObject_t point, cudaTextureObject_t lin, float* out) {
  out[0] = tex2DLod<float>(point, 0.5f, 0.5f, 0.0f);
  out[1] = tex2DLod<float>(point, 0.5f, 0.5f, 1.4f);  // level 1
  out[2] = tex2DLod<float>(point, 0.5f, 0.5f, 2.6f);  // level 3
  out[3] = tex2DLod<float>(lin, 0.5f, 0.5f, 1.25f);   // 3/4 level 1 + 1/4 level 2
  out[4] = tex2DGrad<float>(point, 0.5f, 0.5f, make_float2(4.0f / 16, 0), make_float2(0, 4.0f / 16));  // rho 4: level 2
  out[5] = tex2DLod<float>(point, 0.5f, 0.5f, 9.0f);  // past the clamp: the last level
}
__global__ void gather(cudaTextureObject_t t, float4* out) {
  out[0] = tex2Dgather<float4>(t, 2.0f, 3.0f, 0);
}
__global__ void rotate(cudaTextureObject_t src, float* dst, int w, int h, float c, float s) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= w) return;
  float u = x - w / 2.0f, v = y - h / 2.0f;
  dst[y * w + x] = tex2D<float>(src, (u * c - v * s + w / 2.0f) / w, (u * s + v * c + h / 2.0f) / h);
}

static bool close(float a, float b, bool exact) { return exact ? std::memcmp(&a, &b, 4) == 0 : std::fabs(a - b) <= 1e-2f * (1 + std::fabs(b)); }

int main(int argc, char** argv) {
  const bool exact = !(argc > 1 && std::strcmp(argv[1], "--native") == 0);
  const int W = 8, H = 6;
  std::vector<float> texels(W * H);
  for (int i = 0; i < W * H; ++i) texels[i] = std::sin(i * 1.7f) * 10 + i;
  cudaChannelFormatDesc f32 = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CHECK(cudaMallocArray(&arr, &f32, W, H));
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, texels.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
  cudaResourceDesc rd{};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr;

  // Refusals and queries first (no kernel needed).
  cudaTextureDesc td{};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModeLinear;
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t t;
  CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  cudaTextureDesc got{};
  CHECK(cudaGetTextureObjectTextureDesc(&got, t));
  EXPECT(got.filterMode == cudaFilterModeLinear && got.addressMode[1] == cudaAddressModeClamp);
  cudaResourceDesc gotr{};
  CHECK(cudaGetTextureObjectResourceDesc(&gotr, t));
  EXPECT(gotr.resType == cudaResourceTypeArray && gotr.res.array.array == arr);
  CHECK(cudaDestroyTextureObject(t));
  EXPECT_ERR(cudaGetTextureObjectTextureDesc(&got, t), cudaErrorInvalidValue);
  int* dints;
  CHECK(cudaMalloc(&dints, 4096));
  cudaResourceDesc lin{};
  lin.resType = cudaResourceTypeLinear;
  lin.res.linear.devPtr = dints;
  lin.res.linear.desc = cudaCreateChannelDesc<int>();
  lin.res.linear.sizeInBytes = 40;
  EXPECT_ERR(cudaCreateTextureObject(&t, &lin, &td, nullptr), cudaErrorInvalidFilterSetting);  // ints, filtered
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeNormalizedFloat;
  EXPECT_ERR(cudaCreateTextureObject(&t, &lin, &td, nullptr), cudaErrorInvalidNormSetting);  // 32-bit, normalised
  td.readMode = cudaReadModeElementType;
  lin.res.linear.devPtr = dints + 1;  // off the texture alignment
  EXPECT_ERR(cudaCreateTextureObject(&t, &lin, &td, nullptr), cudaErrorInvalidValue);
  lin.res.linear.devPtr = dints;
  lin.res.linear.sizeInBytes = 8192;  // past the allocation
  EXPECT_ERR(cudaCreateTextureObject(&t, &lin, &td, nullptr), cudaErrorInvalidValue);
  lin.res.linear.sizeInBytes = 40;

  // Every address mode x filter x coordinate kind on the 2D array.
  std::vector<float2> at;
  for (float y = -2.25f; y < H + 2; y += 0.85f)
    for (float x = -3.1f; x < W + 3; x += 0.7f) at.push_back(make_float2(x, y));
  const int n = static_cast<int>(at.size());
  float2* dat;
  float* dout;
  CHECK(cudaMalloc(&dat, n * sizeof(float2)));
  CHECK(cudaMalloc(&dout, n * sizeof(float)));
  std::vector<float> out(n);
  int combos = 0;
  for (cudaTextureAddressMode mode : {cudaAddressModeWrap, cudaAddressModeClamp, cudaAddressModeMirror, cudaAddressModeBorder})
    for (bool linear : {false, true})
      for (bool normalized : {false, true}) {
        if (!normalized && (mode == cudaAddressModeWrap || mode == cudaAddressModeMirror)) continue;
        cudaTextureDesc d{};
        d.addressMode[0] = d.addressMode[1] = mode;
        d.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
        d.normalizedCoords = normalized;
        d.borderColor[0] = -7.5f;
        std::vector<float2> coords(at);
        if (normalized)
          for (auto& c : coords) c.x /= W, c.y /= H;
        CHECK(cudaMemcpy(dat, coords.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
        CHECK(cudaCreateTextureObject(&t, &rd, &d, nullptr));
        fetch2D<<<(n + 127) / 128, 128>>>(t, dat, dout, n);
        CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(cudaDestroyTextureObject(t));
        Model2D m{texels.data(), W, H, mode, linear, normalized, -7.5f};
        for (int i = 0; i < n; ++i) {
          float want = m.sample(coords[i].x, coords[i].y);
          if (!close(out[i], want, exact)) {
            std::printf("FAILED: mode %d linear %d normalized %d at (%g, %g): %.9g, model %.9g\n", mode, linear, normalized,
                        coords[i].x, coords[i].y, out[i], want);
            return 1;
          }
        }
        ++combos;
      }
  EXPECT(combos == 12);

  // Linear memory: tex1Dfetch, zeros past either end.
  std::vector<int> ints(10);
  for (int i = 0; i < 10; ++i) ints[i] = i * i - 3;
  CHECK(cudaMemcpy(dints, ints.data(), 40, cudaMemcpyHostToDevice));
  cudaTextureDesc pd{};
  CHECK(cudaCreateTextureObject(&t, &lin, &pd, nullptr));
  int* dres;
  CHECK(cudaMalloc(&dres, 14 * 4));
  fetchLinear<<<1, 14>>>(t, dres, 14);
  std::vector<int> res(14);
  CHECK(cudaMemcpy(res.data(), dres, 14 * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 14; ++i) EXPECT(res[i] == (i - 2 >= 0 && i - 2 < 10 ? ints[i - 2] : 0));
  CHECK(cudaDestroyTextureObject(t));

  // Pitch-2D uchar4, read as normalised floats, plain and sRGB.
  unsigned char* px;
  size_t pitch;
  CHECK(cudaMallocPitch(&px, &pitch, 16 * 4, 2));
  std::vector<unsigned char> rgba(16 * 4);
  for (int i = 0; i < 64; ++i) rgba[i] = static_cast<unsigned char>(i * 4 + 1);
  CHECK(cudaMemcpy2D(px, pitch, rgba.data(), 64, 64, 1, cudaMemcpyHostToDevice));
  cudaResourceDesc p2{};
  p2.resType = cudaResourceTypePitch2D;
  p2.res.pitch2D.devPtr = px;
  p2.res.pitch2D.desc = cudaCreateChannelDesc<uchar4>();
  p2.res.pitch2D.width = 16;
  p2.res.pitch2D.height = 2;
  p2.res.pitch2D.pitchInBytes = pitch;
  float4* d4;
  CHECK(cudaMalloc(&d4, 16 * sizeof(float4)));
  std::vector<float4> got4(16);
  for (int srgb : {0, 1}) {
    cudaTextureDesc nd{};
    nd.readMode = cudaReadModeNormalizedFloat;
    nd.sRGB = srgb;
    CHECK(cudaCreateTextureObject(&t, &p2, &nd, nullptr));
    fetchRgba<<<1, 16>>>(t, d4);
    CHECK(cudaMemcpy(got4.data(), d4, 16 * sizeof(float4), cudaMemcpyDeviceToHost));
    CHECK(cudaDestroyTextureObject(t));
    for (int i = 0; i < 16; ++i) {
      const float* g = &got4[i].x;
      for (int c = 0; c < 4; ++c) {
        double v = rgba[i * 4 + c] / 255.0;
        if (srgb && c < 3) v = v <= 0.04045 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4);
        EXPECT(close(g[c], static_cast<float>(v), exact));
      }
    }
  }

  // The same bytes in arrays of normalised formats: floats whatever the read
  // mode (unsigned 8X4 read as element type, filtered), and signed 16X1.
  {
    cudaChannelFormatDesc un8x4 = cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized8X4>();
    cudaArray_t un;
    CHECK(cudaMallocArray(&un, &un8x4, 16, 1));
    CHECK(cudaMemcpy2DToArray(un, 0, 0, rgba.data(), 64, 64, 1, cudaMemcpyHostToDevice));
    cudaResourceDesc ur{};
    ur.resType = cudaResourceTypeArray;
    ur.res.array.array = un;
    cudaTextureDesc ud{};
    ud.readMode = cudaReadModeElementType;
    ud.filterMode = cudaFilterModeLinear;  // allowed: the format is normalised
    CHECK(cudaCreateTextureObject(&t, &ur, &ud, nullptr));
    fetchRgba<<<1, 16>>>(t, d4);  // at texel centres: the texels themselves
    CHECK(cudaMemcpy(got4.data(), d4, 16 * sizeof(float4), cudaMemcpyDeviceToHost));
    CHECK(cudaDestroyTextureObject(t));
    for (int i = 0; i < 16; ++i)
      for (int c = 0; c < 4; ++c) EXPECT(close((&got4[i].x)[c], static_cast<float>(rgba[i * 4 + c] / 255.0), exact));
    CHECK(cudaFreeArray(un));

    cudaChannelFormatDesc sn16 = cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized16X1>();
    cudaArray_t sn;
    CHECK(cudaMallocArray(&sn, &sn16, 4, 2));
    const short raw[8] = {-32768, -32767, -16384, -1, 0, 1, 16384, 32767};
    CHECK(cudaMemcpy2DToArray(sn, 0, 0, raw, 8, 8, 2, cudaMemcpyHostToDevice));
    ur.res.array.array = sn;
    ud.filterMode = cudaFilterModePoint;
    CHECK(cudaCreateTextureObject(&t, &ur, &ud, nullptr));
    std::vector<float2> at(8);
    for (int i = 0; i < 8; ++i) at[i] = make_float2(i % 4 + 0.5f, i / 4 + 0.5f);
    float2* dat;
    float* dv;
    CHECK(cudaMalloc(&dat, 8 * sizeof(float2)));
    CHECK(cudaMalloc(&dv, 8 * sizeof(float)));
    CHECK(cudaMemcpy(dat, at.data(), 8 * sizeof(float2), cudaMemcpyHostToDevice));
    fetch2D<<<1, 8>>>(t, dat, dv, 8);
    float v[8];
    CHECK(cudaMemcpy(v, dv, sizeof v, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 8; ++i) EXPECT(close(v[i], static_cast<float>(std::max(raw[i] / 32767.0, -1.0)), exact));
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFreeArray(sn));
    CHECK(cudaFree(dat));
    CHECK(cudaFree(dv));
    std::printf("textures: normalised formats read as floats\n");
  }

  // 3D (point and linear), layered, cubemap.
  cudaArray_t a3, al, ac;
  CHECK(cudaMalloc3DArray(&a3, &f32, make_cudaExtent(4, 4, 2), 0));
  CHECK(cudaMalloc3DArray(&al, &f32, make_cudaExtent(4, 4, 3), cudaArrayLayered));
  CHECK(cudaMalloc3DArray(&ac, &f32, make_cudaExtent(4, 4, 6), cudaArrayCubemap));
  std::vector<float> vol(4 * 4 * 6);
  for (size_t i = 0; i < vol.size(); ++i) vol[i] = static_cast<float>(i);
  for (cudaArray_t a : {a3, al, ac}) {
    cudaExtent e;
    CHECK(cudaArrayGetInfo(nullptr, &e, nullptr, a));
    cudaMemcpy3DParms cp{};
    cp.srcPtr = make_cudaPitchedPtr(vol.data(), 16, 4, 4);
    cp.dstArray = a;
    cp.extent = make_cudaExtent(4, 4, e.depth);
    cp.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&cp));
  }
  auto texOf = [&](cudaArray_t a, bool linear, bool normalized, cudaTextureObject_t* out) {
    cudaResourceDesc r{};
    r.resType = cudaResourceTypeArray;
    r.res.array.array = a;
    cudaTextureDesc d{};
    d.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
    d.normalizedCoords = normalized;
    return cudaCreateTextureObject(out, &r, &d, nullptr);
  };
  cudaTextureObject_t t3, tl, tc;
  CHECK(texOf(a3, true, false, &t3));
  CHECK(texOf(al, false, false, &tl));
  CHECK(texOf(ac, false, true, &tc));
  float* dshape;
  CHECK(cudaMalloc(&dshape, 8 * sizeof(float)));
  fetchShapes<<<1, 1>>>(t3, tl, tc, dshape);
  float shape[7];
  CHECK(cudaMemcpy(shape, dshape, 7 * sizeof(float), cudaMemcpyDeviceToHost));
  // 3D linear at (1.0, 2.5, 1.0): x between texels 0 and 1 (a = 1/2), y exactly 2, z between 0 and 1.
  EXPECT(close(shape[0], vol[0 * 16 + 2 * 4 + 1], exact));
  EXPECT(close(shape[1], 0.25f * (vol[8] + vol[9] + vol[24] + vol[25]), exact));
  EXPECT(close(shape[2], vol[2 * 16 + 1 * 4 + 2], exact));
  EXPECT(close(shape[3], vol[2 * 16 + 1 * 4 + 2], exact));
  // Cubemap faces (the programming guide's table): +x: s = -z, t = -y; -y: s = x, t = -z; -z: s = -x, t = -y.
  auto face = [&](int f, float s, float tt, float m) {
    int i = static_cast<int>(std::floor((s / m + 1) / 2 * 4)), j = static_cast<int>(std::floor((tt / m + 1) / 2 * 4));
    return vol[f * 16 + j * 4 + i];
  };
  EXPECT(close(shape[4], face(0, -0.2f, -0.1f, 1.0f), exact));
  EXPECT(close(shape[5], face(3, 0.1f, -0.2f, 1.0f), exact));
  EXPECT(close(shape[6], face(5, 0.2f, -0.1f, 1.0f), exact));

  // Mipmaps: each level filled with its number; point and linear mipmap filtering.
  cudaMipmappedArray_t mip;
  CHECK(cudaMallocMipmappedArray(&mip, &f32, make_cudaExtent(16, 16, 0), 5, 0));
  for (unsigned l = 0; l < 5; ++l) {
    cudaArray_t level;
    CHECK(cudaGetMipmappedArrayLevel(&level, mip, l));
    size_t s = 16 >> l;
    std::vector<float> v(s * s, static_cast<float>(l));
    CHECK(cudaMemcpy2DToArray(level, 0, 0, v.data(), s * 4, s * 4, s, cudaMemcpyHostToDevice));
  }
  cudaResourceDesc mr{};
  mr.resType = cudaResourceTypeMipmappedArray;
  mr.res.mipmap.mipmap = mip;
  cudaTextureDesc md{};
  md.normalizedCoords = 1;
  md.maxMipmapLevelClamp = 4;
  md.mipmapFilterMode = cudaFilterModePoint;
  cudaTextureObject_t mp, ml;
  CHECK(cudaCreateTextureObject(&mp, &mr, &md, nullptr));
  md.mipmapFilterMode = cudaFilterModeLinear;
  CHECK(cudaCreateTextureObject(&ml, &mr, &md, nullptr));
  fetchMip<<<1, 1>>>(mp, ml, dshape);
  float mips[6];
  CHECK(cudaMemcpy(mips, dshape, 6 * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(close(mips[0], 0, exact) && close(mips[1], 1, exact) && close(mips[2], 3, exact));
  EXPECT(close(mips[3], 1.25f, exact) && close(mips[4], 2, exact) && close(mips[5], 4, exact));

  // Gather: the 2x2 footprint of (2.0, 3.0) is texels x 1..2, y 2..3, counter-clockwise from (1, 3).
  CHECK(texOf(arr, false, false, &t));
  float4* dg;
  CHECK(cudaMalloc(&dg, sizeof(float4)));
  gather<<<1, 1>>>(t, dg);
  float4 g;
  CHECK(cudaMemcpy(&g, dg, sizeof g, cudaMemcpyDeviceToHost));
  EXPECT(close(g.x, texels[3 * W + 1], exact) && close(g.y, texels[3 * W + 2], exact) &&
         close(g.z, texels[2 * W + 2], exact) && close(g.w, texels[2 * W + 1], exact));
  CHECK(cudaDestroyTextureObject(t));

  // The image pipeline: rotate a 64 x 48 image by 30 degrees through a bilinear, border-black texture.
  const int IW = 64, IH = 48;
  std::vector<float> image(IW * IH), rotated(IW * IH);
  for (int y = 0; y < IH; ++y)
    for (int x = 0; x < IW; ++x) image[y * IW + x] = static_cast<float>(((x / 8 + y / 8) & 1) * 200 + x + y);
  cudaArray_t ia;
  CHECK(cudaMallocArray(&ia, &f32, IW, IH));
  CHECK(cudaMemcpy2DToArray(ia, 0, 0, image.data(), IW * 4, IW * 4, IH, cudaMemcpyHostToDevice));
  cudaResourceDesc ir{};
  ir.resType = cudaResourceTypeArray;
  ir.res.array.array = ia;
  cudaTextureDesc id{};
  id.addressMode[0] = id.addressMode[1] = cudaAddressModeBorder;
  id.filterMode = cudaFilterModeLinear;
  id.normalizedCoords = 1;
  CHECK(cudaCreateTextureObject(&t, &ir, &id, nullptr));
  float* drot;
  CHECK(cudaMalloc(&drot, IW * IH * 4));
  const float c = std::cos(0.5235988f), s = std::sin(0.5235988f);
  rotate<<<dim3(1, IH), IW>>>(t, drot, IW, IH, c, s);
  CHECK(cudaMemcpy(rotated.data(), drot, IW * IH * 4, cudaMemcpyDeviceToHost));
  Model2D im{image.data(), IW, IH, cudaAddressModeBorder, true, true, 0.0f};
  int mismatches = 0;
  for (int y = 0; y < IH; ++y)
    for (int x = 0; x < IW; ++x) {
      float u = x - IW / 2.0f, v = y - IH / 2.0f;
      float want = im.sample((u * c - v * s + IW / 2.0f) / IW, (u * s + v * c + IH / 2.0f) / IH);
      if (!close(rotated[y * IW + x], want, exact)) ++mismatches;
    }
  EXPECT(mismatches == 0);
  std::printf("textures: every address mode and filter, formats, shapes, mipmaps, gathers and a rotated image match the model\n");

  CHECK(cudaDestroyTextureObject(t));
  for (cudaTextureObject_t o : {t3, tl, tc, mp, ml}) CHECK(cudaDestroyTextureObject(o));
  for (void* p : {static_cast<void*>(dints), static_cast<void*>(dat), static_cast<void*>(dout), static_cast<void*>(dres),
                  static_cast<void*>(px), static_cast<void*>(d4), static_cast<void*>(dshape), static_cast<void*>(dg),
                  static_cast<void*>(drot)})
    CHECK(cudaFree(p));
  for (cudaArray_t a : {arr, a3, al, ac, ia}) CHECK(cudaFreeArray(a));
  CHECK(cudaFreeMipmappedArray(mip));
  if (exact) {
    // A texture object the session does not hold (another session's, or made
    // up): the kernel faults with cudaErrorIllegalAddress, sticky as on a GPU,
    // instead of reading memory through it. Last: the context is unusable after it.
    float2* one;
    float* res1;
    CHECK(cudaMalloc(&one, sizeof(float2)));
    CHECK(cudaMalloc(&res1, sizeof(float)));
    fetch2D<<<1, 1>>>(0xdeadbeefull, one, res1, 1);
    EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    std::printf("textures: an unknown texture object faults the kernel\n");
  }
  std::printf("textures: all checks passed\n");
  return 0;
}
