// CUDA arrays: 1D, 2D, 3D, layered, cubemap and mipmapped arrays of every
// channel format round-trip through every copy form (2D to/from arrays, the
// legacy 1D forms, array to array, cudaMemcpy3D between arrays, pitched
// device memory and host memory in every direction); cudaArrayGetInfo says
// what was made; surfaces write and read them from kernels; bad handles,
// extents and flags are refused with NVIDIA's errors.
//
//   arrays               through rgpu (the sim, or the CUDA backend)
//   arrays --native      on NVIDIA's runtime
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

__global__ void surfaceIncrement(cudaSurfaceObject_t s, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= w || y >= h) return;
  int v;
  surf2Dread(&v, s, x * 4, y);
  surf2Dwrite(v + 1000, s, x * 4, y);
}
__global__ void surfaceBoundaries(cudaSurfaceObject_t s, int* out) {
  // Clamp: past the right edge reads the last element; zero: reads 0 and drops the write.
  out[0] = surf2Dread<int>(s, 4 * 1000, 0, cudaBoundaryModeClamp);
  out[1] = surf2Dread<int>(s, -4, 1, cudaBoundaryModeZero);
  surf2Dwrite(12345, s, 4 * 1000, 0, cudaBoundaryModeZero);
}
__global__ void surface3D(cudaSurfaceObject_t s, int w, int h, int d) {
  int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
  if (x < w && y < h && z < d) surf3Dwrite(static_cast<float>(x + 10 * y + 100 * z), s, x * 4, y, z);
}
__global__ void surfaceLayered(cudaSurfaceObject_t s, int layer, unsigned char v) {
  surf2DLayeredwrite(static_cast<unsigned char>(v + threadIdx.x), s, threadIdx.x, blockIdx.x, layer);
}

static bool same(const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; }

// A round trip of a w x h x d array of `desc` through every copy form.
static int roundTrip(cudaChannelFormatDesc desc, cudaExtent e, unsigned flags) {
  const size_t elem = (desc.x + desc.y + desc.z + desc.w) / 8;
  const size_t w = e.width, h = e.height ? e.height : 1, d = e.depth ? e.depth : 1;
  const size_t row = w * elem, bytes = row * h * d;
  std::vector<unsigned char> in(bytes), out(bytes, 0xee);
  for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 7 + 3);
  cudaArray_t a, b;
  CHECK(cudaMalloc3DArray(&a, &desc, e, flags));
  CHECK(cudaMalloc3DArray(&b, &desc, e, flags));
  cudaChannelFormatDesc got{};
  cudaExtent ge{};
  unsigned gf = 99;
  CHECK(cudaArrayGetInfo(&got, &ge, &gf, a));
  EXPECT(got.x == desc.x && got.y == desc.y && got.f == desc.f && gf == flags);
  EXPECT(ge.width == e.width && ge.height == e.height && ge.depth == e.depth);
  // Host -> array -> array -> pitched device -> host, all through cudaMemcpy3D.
  cudaMemcpy3DParms p{};
  p.srcPtr = make_cudaPitchedPtr(in.data(), row, w, h);
  p.dstArray = a;
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&p));
  p = {};
  p.srcArray = a;
  p.dstArray = b;
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&p));
  cudaPitchedPtr dev;
  CHECK(cudaMalloc3D(&dev, make_cudaExtent(row, h, d)));
  p = {};
  p.srcArray = b;
  p.dstPtr = dev;
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&p));
  p = {};
  p.srcPtr = dev;
  p.dstPtr = make_cudaPitchedPtr(out.data(), row, w, h);
  p.extent = make_cudaExtent(row, h, d);  // no array: bytes
  p.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&p));
  EXPECT(same(in.data(), out.data(), bytes));
  // Back from the array straight to the host, asynchronously.
  std::fill(out.begin(), out.end(), 0);
  p = {};
  p.srcArray = a;
  p.dstPtr = make_cudaPitchedPtr(out.data(), row, w, h);
  p.extent = make_cudaExtent(w, h, d);
  p.kind = cudaMemcpyDefault;
  CHECK(cudaMemcpy3DAsync(&p, 0));
  CHECK(cudaStreamSynchronize(0));
  EXPECT(same(in.data(), out.data(), bytes));
  // A sub-box: one element in from each side.
  if (w > 2 && h > 2 && d > 2) {
    std::vector<unsigned char> box((w - 2) * elem * (h - 2) * (d - 2));
    p = {};
    p.srcArray = a;
    p.srcPos = make_cudaPos(1, 1, 1);
    p.dstPtr = make_cudaPitchedPtr(box.data(), (w - 2) * elem, w - 2, h - 2);
    p.extent = make_cudaExtent(w - 2, h - 2, d - 2);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    for (size_t z = 0; z < d - 2; ++z)
      for (size_t y = 0; y < h - 2; ++y)
        EXPECT(same(&box[((z * (h - 2)) + y) * (w - 2) * elem], &in[((z + 1) * h + y + 1) * row + elem], (w - 2) * elem));
  }
  CHECK(cudaFree(dev.ptr));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
  return 0;
}

// cudaMemcpyBatchAsync and cudaMemcpy3DBatchAsync: pointer and array operands,
// checked as a whole before anything is copied.
static int batches() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // 1D: host -> device, device -> device, device -> host, one set of attributes.
  std::vector<int> h(256), back(256, 0);
  for (int i = 0; i < 256; ++i) h[i] = i * 3 + 1;
  int *d1, *d2;
  CHECK(cudaMalloc(&d1, 1024));
  CHECK(cudaMalloc(&d2, 1024));
  void* dsts[3] = {d1, d2, back.data()};
  const void* srcs[3] = {h.data(), d1, d2};
  size_t sizes[3] = {1024, 1024, 1024};
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx = 0;
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h == back);
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
  EXPECT_ERR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, s), cudaErrorInvalidValue);
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
  EXPECT_ERR(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, cudaStreamLegacy), cudaErrorInvalidValue);

  // 3D: a host box (rows of 12 floats, 10 used) -> a 10x4x3 array -> a second
  // array at an offset -> tightly packed host memory.
  const cudaChannelFormatDesc f32 = cudaCreateChannelDesc<float>();
  cudaArray_t a, b;
  CHECK(cudaMalloc3DArray(&a, &f32, make_cudaExtent(10, 4, 3)));
  CHECK(cudaMalloc3DArray(&b, &f32, make_cudaExtent(12, 5, 3)));
  std::vector<float> in(12 * 4 * 3), out(10 * 4 * 3, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 0.25f;
  cudaMemcpy3DBatchOp ops[2] = {};
  ops[0].src.type = cudaMemcpyOperandTypePointer;
  ops[0].src.op.ptr.ptr = in.data();
  ops[0].src.op.ptr.rowLength = 12;
  ops[0].dst.type = cudaMemcpyOperandTypeArray;
  ops[0].dst.op.array.array = a;
  ops[0].extent = make_cudaExtent(10, 4, 3);
  ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  ops[1].src.type = cudaMemcpyOperandTypeArray;
  ops[1].src.op.array.array = a;
  ops[1].dst.type = cudaMemcpyOperandTypeArray;
  ops[1].dst.op.array.array = b;
  ops[1].dst.op.array.offset = {2, 1, 0};
  ops[1].extent = make_cudaExtent(10, 4, 3);
  ops[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  CHECK(cudaMemcpy3DBatchAsync(2, ops, 0, s));
  cudaMemcpy3DBatchOp down{};
  down.src.type = cudaMemcpyOperandTypeArray;
  down.src.op.array.array = b;
  down.src.op.array.offset = {2, 1, 0};
  down.dst.type = cudaMemcpyOperandTypePointer;
  down.dst.op.ptr.ptr = out.data();
  down.extent = make_cudaExtent(10, 4, 3);
  down.srcAccessOrder = cudaMemcpySrcAccessOrderAny;
  CHECK(cudaMemcpy3DBatchAsync(1, &down, 0, s));
  CHECK(cudaStreamSynchronize(s));
  for (int z = 0; z < 3; ++z)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 10; ++x) EXPECT(out[(z * 4 + y) * 10 + x] == in[(z * 4 + y) * 12 + x]);
  // One bad operation (a row shorter than the copy): nothing of the batch is copied.
  std::fill(out.begin(), out.end(), -1.0f);
  cudaMemcpy3DBatchOp two[2] = {down, down};
  two[1].dst.op.ptr.rowLength = 9;
  EXPECT_ERR(cudaMemcpy3DBatchAsync(2, two, 0, s), cudaErrorInvalidValue);
  CHECK(cudaStreamSynchronize(s));
  EXPECT(out[0] == -1.0f);
  EXPECT_ERR(cudaMemcpy3DBatchAsync(1, &down, 1, s), cudaErrorInvalidValue);  // flags are for the future
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
  CHECK(cudaFree(d1));
  CHECK(cudaFree(d2));
  CHECK(cudaStreamDestroy(s));
  std::printf("arrays: batches of 1D and 3D copies\n");
  return 0;
}

int main(int argc, char** argv) {
  const bool native = argc > 1 && std::strcmp(argv[1], "--native") == 0;

  // Every channel format of 1, 2 and 4 channels, in 1D, 2D and 3D.
  const cudaChannelFormatKind kinds[] = {cudaChannelFormatKindSigned, cudaChannelFormatKindUnsigned,
                                         cudaChannelFormatKindFloat};
  for (cudaChannelFormatKind k : kinds)
    for (int bits : {8, 16, 32})
      for (int ch : {1, 2, 4}) {
        if (k == cudaChannelFormatKindFloat && bits == 8) continue;
        cudaChannelFormatDesc desc = cudaCreateChannelDesc(bits, ch > 1 ? bits : 0, ch > 2 ? bits : 0, ch > 3 ? bits : 0, k);
        if (roundTrip(desc, make_cudaExtent(37, 0, 0), 0)) return 1;
        if (roundTrip(desc, make_cudaExtent(19, 11, 0), 0)) return 1;
        if (roundTrip(desc, make_cudaExtent(9, 7, 5), 0)) return 1;
      }
  // The normalised kinds: 8- and 16-bit, 1, 2 and 4 channels, unsigned and signed.
  const cudaChannelFormatDesc normalised[] = {
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized8X1>(),
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized8X2>(),
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized8X4>(),
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized16X1>(),
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized16X2>(),
      cudaCreateChannelDesc<cudaChannelFormatKindUnsignedNormalized16X4>(),
      cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized8X1>(),
      cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized8X2>(),
      cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized8X4>(),
      cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized16X1>(),
      cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized16X2>(),
      cudaCreateChannelDesc<cudaChannelFormatKindSignedNormalized16X4>()};
  for (const cudaChannelFormatDesc& desc : normalised) {
    if (roundTrip(desc, make_cudaExtent(19, 11, 0), 0)) return 1;
    if (roundTrip(desc, make_cudaExtent(9, 7, 5), 0)) return 1;
  }
  if (batches()) return 1;
  cudaChannelFormatDesc f32 = cudaCreateChannelDesc<float>(), u8 = cudaCreateChannelDesc<unsigned char>();
  if (roundTrip(f32, make_cudaExtent(33, 0, 4), cudaArrayLayered)) return 1;        // 1D layered
  if (roundTrip(u8, make_cudaExtent(17, 9, 3), cudaArrayLayered)) return 1;         // 2D layered
  if (roundTrip(f32, make_cudaExtent(8, 8, 6), cudaArrayCubemap)) return 1;         // cubemap
  if (roundTrip(f32, make_cudaExtent(4, 4, 12), cudaArrayCubemap | cudaArrayLayered)) return 1;
  if (roundTrip(cudaCreateChannelDesc<float4>(), make_cudaExtent(64, 64, 0), cudaArraySurfaceLoadStore)) return 1;

  // The 2D forms and the legacy 1D forms on a 2D array of ints.
  const int W = 50, H = 20;
  std::vector<int> img(W * H), back(W * H);
  for (int i = 0; i < W * H; ++i) img[i] = i * 3 + 1;
  cudaChannelFormatDesc i32 = cudaCreateChannelDesc<int>();
  cudaArray_t arr, arr2;
  CHECK(cudaMallocArray(&arr, &i32, W, H, cudaArraySurfaceLoadStore));
  CHECK(cudaMallocArray(&arr2, &i32, W, H));
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, img.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DArrayToArray(arr2, 0, 0, arr, 0, 0, W * 4, H));
  CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, arr2, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
  EXPECT(back == img);
  // A window: rows 3..7, columns 10..29 (offsets and widths in bytes).
  std::vector<int> win(20 * 5);
  CHECK(cudaMemcpy2DFromArrayAsync(win.data(), 20 * 4, arr, 10 * 4, 3, 20 * 4, 5, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaStreamSynchronize(0));
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 20; ++x) EXPECT(win[y * 20 + x] == img[(y + 3) * W + x + 10]);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  // Legacy: 75 ints from (5, 2) on run into the next rows.
  std::vector<int> lin(75, -1), lout(75);
  for (int i = 0; i < 75; ++i) lin[i] = -i;
  CHECK(cudaMemcpyToArray(arr2, 5 * 4, 2, lin.data(), 75 * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyFromArray(lout.data(), arr2, 5 * 4, 2, 75 * 4, cudaMemcpyDeviceToHost));
  EXPECT(lout == lin);
  CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, arr2, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
  EXPECT(back[2 * W + 5] == 0 && back[2 * W + 4] == img[2 * W + 4] && back[3 * W] == -45 && back[3 * W + 29] == -74 &&
         back[3 * W + 30] == img[3 * W + 30]);
  CHECK(cudaMemcpyArrayToArray(arr2, 0, 0, arr, 0, 0, W * 4));  // the first row back
  CHECK(cudaMemcpyFromArrayAsync(lout.data(), arr2, 0, 0, W * 4, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaStreamSynchronize(0));
  EXPECT(same(lout.data(), img.data(), W * 4));
#pragma GCC diagnostic pop
  // From pitched device memory (cudaMallocPitch) into an array and back.
  int* dp;
  size_t pitch;
  CHECK(cudaMallocPitch(&dp, &pitch, W * 4, H));
  CHECK(cudaMemcpy2D(dp, pitch, img.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DToArray(arr2, 0, 0, dp, pitch, W * 4, H, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, arr2, 0, 0, W * 4, H, cudaMemcpyDefault));
  EXPECT(back == img);

  // Mipmapped: each level its own size, round-tripped.
  cudaMipmappedArray_t mip;
  CHECK(cudaMallocMipmappedArray(&mip, &f32, make_cudaExtent(64, 32, 0), 7, 0));
  for (unsigned l = 0; l < 7; ++l) {
    cudaArray_t level;
    CHECK(cudaGetMipmappedArrayLevel(&level, mip, l));
    cudaExtent le{};
    CHECK(cudaArrayGetInfo(nullptr, &le, nullptr, level));
    const size_t lw = 64 >> l ? 64 >> l : 1, lh = 32 >> l ? 32 >> l : 1;
    EXPECT(le.width == lw && le.height == lh);
    std::vector<float> v(lw * lh), r(lw * lh);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(l * 1000 + i);
    CHECK(cudaMemcpy2DToArray(level, 0, 0, v.data(), lw * 4, lw * 4, lh, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DFromArray(r.data(), lw * 4, level, 0, 0, lw * 4, lh, cudaMemcpyDeviceToHost));
    EXPECT(r == v);
  }
  EXPECT_ERR(cudaGetMipmappedArrayLevel(&arr2, mip, 7), cudaErrorInvalidValue);

  // Refused: copies past the array, made-up handles, bad formats and shapes.
  EXPECT_ERR(cudaMemcpy2DToArray(arr, 4, 0, img.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy2DFromArray(back.data(), W * 4, arr, 0, 1, W * 4, H, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy2DToArray(arr, 2, 0, img.data(), 8, 8, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // half an element
  int fake = 0;
  EXPECT_ERR(cudaMemcpy2DToArray(reinterpret_cast<cudaArray_t>(&fake), 0, 0, img.data(), 4, 4, 1, cudaMemcpyHostToDevice),
             cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaFreeArray(reinterpret_cast<cudaArray_t>(&fake)), cudaErrorInvalidResourceHandle);
  cudaChannelFormatDesc three = cudaCreateChannelDesc(8, 8, 8, 0, cudaChannelFormatKindUnsigned);
  cudaArray_t bad;
  EXPECT_ERR(cudaMallocArray(&bad, &three, 4, 4), cudaErrorInvalidChannelDescriptor);
  if (!native) {  // rgpu does not offer the block-compressed kinds (NVIDIA's runtime does)
    cudaChannelFormatDesc bc1 = cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed1>();
    EXPECT_ERR(cudaMallocArray(&bad, &bc1, 4, 4), cudaErrorNotSupported);
  }
  // A normalised kind with another descriptor than cudaCreateChannelDesc<kind>()'s.
  cudaChannelFormatDesc odd = cudaCreateChannelDesc(16, 0, 0, 0, cudaChannelFormatKindUnsignedNormalized8X1);
  EXPECT_ERR(cudaMallocArray(&bad, &odd, 4, 4), cudaErrorInvalidChannelDescriptor);
  EXPECT_ERR(cudaMalloc3DArray(&bad, &f32, make_cudaExtent(8, 4, 6), cudaArrayCubemap), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMallocArray(&bad, &f32, 1u << 20, 1u << 20), cudaErrorInvalidValue);
  EXPECT_ERR(cudaMallocArray(&bad, &f32, 0, 4), cudaErrorInvalidValue);
  cudaSurfaceObject_t nosurf;
  cudaResourceDesc rd{};
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = arr2;  // made without cudaArraySurfaceLoadStore
  EXPECT_ERR(cudaCreateSurfaceObject(&nosurf, &rd), cudaErrorInvalidValue);

  {
    // Surfaces: read-modify-write of every element, then the boundary modes.
    cudaSurfaceObject_t surf;
    rd.res.array.array = arr;
    CHECK(cudaCreateSurfaceObject(&surf, &rd));
    cudaResourceDesc got{};
    CHECK(cudaGetSurfaceObjectResourceDesc(&got, surf));
    EXPECT(got.resType == cudaResourceTypeArray && got.res.array.array == arr);
    surfaceIncrement<<<dim3(2, H), 32>>>(surf, W, H);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, arr, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; ++i) EXPECT(back[i] == img[i] + 1000);
    int* dout;
    CHECK(cudaMalloc(&dout, 8));
    surfaceBoundaries<<<1, 1>>>(surf, dout);
    int bounds[2];
    CHECK(cudaMemcpy(bounds, dout, 8, cudaMemcpyDeviceToHost));
    EXPECT(bounds[0] == img[W - 1] + 1000 && bounds[1] == 0);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, arr, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; ++i) EXPECT(back[i] == img[i] + 1000);
    CHECK(cudaDestroySurfaceObject(surf));

    // 3D and layered surfaces.
    cudaArray_t a3, al;
    CHECK(cudaMalloc3DArray(&a3, &f32, make_cudaExtent(16, 8, 4), cudaArraySurfaceLoadStore));
    CHECK(cudaMalloc3DArray(&al, &u8, make_cudaExtent(32, 4, 3), cudaArrayLayered | cudaArraySurfaceLoadStore));
    cudaSurfaceObject_t s3, sl;
    rd.res.array.array = a3;
    CHECK(cudaCreateSurfaceObject(&s3, &rd));
    rd.res.array.array = al;
    CHECK(cudaCreateSurfaceObject(&sl, &rd));
    surface3D<<<dim3(8, 4), 16>>>(s3, 16, 8, 4);
    for (int layer = 0; layer < 3; ++layer) surfaceLayered<<<4, 32>>>(sl, layer, static_cast<unsigned char>(layer * 50));
    std::vector<float> v3(16 * 8 * 4);
    cudaMemcpy3DParms p{};
    p.srcArray = a3;
    p.dstPtr = make_cudaPitchedPtr(v3.data(), 16 * 4, 16, 8);
    p.extent = make_cudaExtent(16, 8, 4);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    for (int z = 0; z < 4; ++z)
      for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 16; ++x) EXPECT(v3[(z * 8 + y) * 16 + x] == static_cast<float>(x + 10 * y + 100 * z));
    std::vector<unsigned char> vl(32 * 4 * 3);
    p = {};
    p.srcArray = al;
    p.dstPtr = make_cudaPitchedPtr(vl.data(), 32, 32, 4);
    p.extent = make_cudaExtent(32, 4, 3);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    for (int l = 0; l < 3; ++l)
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 32; ++x) EXPECT(vl[(l * 4 + y) * 32 + x] == static_cast<unsigned char>(l * 50 + x));
    CHECK(cudaDestroySurfaceObject(s3));
    CHECK(cudaDestroySurfaceObject(sl));
    CHECK(cudaFreeArray(a3));
    CHECK(cudaFreeArray(al));
    CHECK(cudaFree(dout));
    std::printf("arrays: surfaces read, written, clamped and zeroed in 2D, 3D and layered arrays\n");
  }
  CHECK(cudaFree(dp));
  CHECK(cudaFreeMipmappedArray(mip));
  CHECK(cudaFreeArray(arr));
  CHECK(cudaFreeArray(arr2));

  // cudaDeviceReset takes the device's arrays and objects with it: their memory is free again.
  size_t before = 0, during = 0, after = 0, total = 0;
  CHECK(cudaMemGetInfo(&before, &total));
  cudaArray_t big;
  CHECK(cudaMallocArray(&big, &f32, 4096, 4096, cudaArraySurfaceLoadStore));  // 64 MiB
  cudaSurfaceObject_t bigsurf;
  rd.res.array.array = big;
  CHECK(cudaCreateSurfaceObject(&bigsurf, &rd));
  CHECK(cudaMemGetInfo(&during, &total));
  EXPECT(before - during >= (64u << 20));
  CHECK(cudaDeviceReset());
  CHECK(cudaMemGetInfo(&after, &total));
  EXPECT(after == before);
  if (!native) {  // rgpu refuses the stale handles (on NVIDIA's runtime using them is undefined)
    EXPECT_ERR(cudaArrayGetInfo(nullptr, nullptr, nullptr, big), cudaErrorInvalidResourceHandle);
    EXPECT_ERR(cudaDestroySurfaceObject(bigsurf), cudaErrorInvalidValue);
  }
  std::printf("arrays: every format and shape round-tripped through every copy form, all checks passed\n");
  return 0;
}
