// CUDA arrays in graphs: copy nodes with arrays on either side (built with
// cudaGraphAddMemcpyNode and captured from the array copy calls), launched
// more than once with the host's bytes read at each launch, their parameters
// read back and changed in an executable graph, and the nodes rgpu refuses.
// Copies only (no kernel), so it runs on every backend: `--native` skips the
// checks of what rgpu refuses where NVIDIA's runtime is undefined.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

namespace {

constexpr int W = 24, H = 10, D = 3;  // elements of a float array

// Host values of launch `round`: element (x, y, z).
float value(int round, int x, int y, int z) { return float(round * 100000 + z * 1000 + y * 100 + x); }

// An explicit graph: host -> 3D array -> second 3D array -> pitched device
// memory -> host, and the second array straight to a host buffer too.
int explicitGraph(bool native) {
  const cudaChannelFormatDesc f32 = cudaCreateChannelDesc<float>();
  cudaArray_t a, b, c;
  CHECK(cudaMalloc3DArray(&a, &f32, make_cudaExtent(W, H, D)));
  CHECK(cudaMalloc3DArray(&b, &f32, make_cudaExtent(W, H, D)));
  CHECK(cudaMalloc3DArray(&c, &f32, make_cudaExtent(W, H, D)));
  cudaPitchedPtr dev;
  CHECK(cudaMalloc3D(&dev, make_cudaExtent(W * sizeof(float), H, D)));
  // Host input with a pitch wider than a row (2 spare floats per row).
  const int hp = W + 2;
  std::vector<float> in(size_t(hp) * H * D, -1.0f), out_dev(size_t(W) * H * D), out_arr(size_t(W) * H * D);

  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemcpy3DParms up{};
  up.srcPtr = make_cudaPitchedPtr(in.data(), hp * sizeof(float), W, H);
  up.dstArray = a;
  up.extent = make_cudaExtent(W, H, D);  // elements: an array is on a side
  up.kind = cudaMemcpyHostToDevice;
  cudaGraphNode_t n_up, n_ab, n_bd, n_down, n_b_host;
  CHECK(cudaGraphAddMemcpyNode(&n_up, g, nullptr, 0, &up));
  cudaMemcpy3DParms ab{};
  ab.srcArray = a;
  ab.dstArray = b;
  ab.extent = make_cudaExtent(W, H, D);
  ab.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaGraphAddMemcpyNode(&n_ab, g, &n_up, 1, &ab));
  cudaMemcpy3DParms bd{};
  bd.srcArray = b;
  bd.dstPtr = dev;
  bd.extent = make_cudaExtent(W, H, D);
  bd.kind = cudaMemcpyDefault;
  CHECK(cudaGraphAddMemcpyNode(&n_bd, g, &n_ab, 1, &bd));
  cudaMemcpy3DParms down{};
  down.srcPtr = dev;
  down.dstPtr = make_cudaPitchedPtr(out_dev.data(), W * sizeof(float), W, H);
  down.extent = make_cudaExtent(W * sizeof(float), H, D);  // bytes: no array
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaGraphAddMemcpyNode(&n_down, g, &n_bd, 1, &down));
  cudaMemcpy3DParms bh{};
  bh.srcArray = b;
  bh.dstPtr = make_cudaPitchedPtr(out_arr.data(), W * sizeof(float), W, H);
  bh.extent = make_cudaExtent(W, H, D);
  bh.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaGraphAddMemcpyNode(&n_b_host, g, &n_ab, 1, &bh));

  // The node keeps the parameters as given.
  cudaMemcpy3DParms got{};
  CHECK(cudaGraphMemcpyNodeGetParams(n_ab, &got));
  EXPECT(got.srcArray == a && got.dstArray == b && got.extent.width == W && got.extent.depth == D);

  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int round = 1; round <= 3; ++round) {  // the host's bytes are read at each launch
    for (int z = 0; z < D; ++z)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) in[(size_t(z) * H + y) * hp + x] = value(round, x, y, z);
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    for (int z = 0; z < D; ++z)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          EXPECT(out_dev[(size_t(z) * H + y) * W + x] == value(round, x, y, z));
          EXPECT(out_arr[(size_t(z) * H + y) * W + x] == value(round, x, y, z));
        }
  }

  // An executable graph's node now copies a sub-box into a third array.
  cudaMemcpy3DParms sub = ab;
  sub.dstArray = c;
  sub.srcPos = make_cudaPos(4, 2, 1);
  sub.dstPos = make_cudaPos(1, 1, 0);
  sub.extent = make_cudaExtent(8, 5, 2);
  CHECK(cudaGraphExecMemcpyNodeSetParams(e, n_ab, &sub));
  CHECK(cudaGraphLaunch(e, s));
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> box(8 * 5 * 2);
  cudaMemcpy3DParms rb{};
  rb.srcArray = c;
  rb.srcPos = make_cudaPos(1, 1, 0);
  rb.dstPtr = make_cudaPitchedPtr(box.data(), 8 * sizeof(float), 8, 5);
  rb.extent = make_cudaExtent(8, 5, 2);
  rb.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&rb));
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 8; ++x) EXPECT(box[(z * 5 + y) * 8 + x] == value(3, 4 + x, 2 + y, 1 + z));

  // Nodes refused when they are made.
  cudaGraphNode_t bad;
  cudaMemcpy3DParms past = ab;
  past.dstPos = make_cudaPos(1, 0, 0);  // one element past the array's width
  EXPECT_ERR(cudaGraphAddMemcpyNode(&bad, g, nullptr, 0, &past), cudaErrorInvalidValue);
  cudaMemcpy3DParms both = ab;
  both.srcPtr = dev;  // an array and a pointer on one side
  EXPECT_ERR(cudaGraphAddMemcpyNode(&bad, g, nullptr, 0, &both), cudaErrorInvalidValue);
  if (!native) {  // a made-up handle (undefined on NVIDIA's runtime)
    cudaMemcpy3DParms madeup = ab;
    madeup.srcArray = reinterpret_cast<cudaArray_t>(&madeup);
    EXPECT_ERR(cudaGraphAddMemcpyNode(&bad, g, nullptr, 0, &madeup), cudaErrorInvalidResourceHandle);
  }
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
  CHECK(cudaFreeArray(c));
  CHECK(cudaFree(dev.ptr));
  std::printf("array_graphs: explicit copy nodes host -> array -> array -> pitched -> host, 3 launches, updated node\n");
  return 0;
}

// Stream capture of the array copy calls: 2D to and from an array, the
// legacy 1D form, and cudaMemcpy3DAsync between arrays of a layered kind.
int capturedGraph() {
  const cudaChannelFormatDesc u16 = cudaCreateChannelDesc<unsigned short>();
  const int w = 33, h = 7, layers = 4;
  cudaArray_t flat, layered, back;
  CHECK(cudaMallocArray(&flat, &u16, w, h));
  CHECK(cudaMalloc3DArray(&layered, &u16, make_cudaExtent(w, h, layers), cudaArrayLayered));
  CHECK(cudaMallocArray(&back, &u16, w, h));
  std::vector<unsigned short> src(size_t(w) * h), dst(size_t(w) * h, 0), row(w, 0);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpy2DToArrayAsync(flat, 0, 0, src.data(), w * sizeof(unsigned short), w * sizeof(unsigned short), h,
                                 cudaMemcpyHostToDevice, s));
  cudaMemcpy3DParms toLayer{};
  toLayer.srcArray = flat;
  toLayer.dstArray = layered;
  toLayer.dstPos = make_cudaPos(0, 0, 2);  // layer 2
  toLayer.extent = make_cudaExtent(w, h, 1);
  toLayer.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3DAsync(&toLayer, s));
  cudaMemcpy3DParms fromLayer{};
  fromLayer.srcArray = layered;
  fromLayer.srcPos = make_cudaPos(0, 0, 2);
  fromLayer.dstArray = back;
  fromLayer.extent = make_cudaExtent(w, h, 1);
  fromLayer.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3DAsync(&fromLayer, s));
  CHECK(cudaMemcpy2DFromArrayAsync(dst.data(), w * sizeof(unsigned short), back, 0, 0, w * sizeof(unsigned short), h,
                                   cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyFromArrayAsync(row.data(), back, 0, 3, w * sizeof(unsigned short), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamEndCapture(s, &g));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT(nodes == 5);
  cudaGraphExec_t e;
  CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int round = 1; round <= 2; ++round) {
    for (int i = 0; i < w * h; ++i) src[size_t(i)] = static_cast<unsigned short>(round * 1000 + i);
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(std::memcmp(src.data(), dst.data(), src.size() * sizeof(unsigned short)) == 0);
    EXPECT(std::memcmp(src.data() + 3 * w, row.data(), w * sizeof(unsigned short)) == 0);
  }
  CHECK(cudaGraphExecDestroy(e));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeArray(flat));
  CHECK(cudaFreeArray(layered));
  CHECK(cudaFreeArray(back));
  std::printf("array_graphs: captured 2D, 3D and 1D array copies, 2 launches\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool native = argc > 1 && std::strcmp(argv[1], "--native") == 0;
  if (explicitGraph(native)) return 1;
  if (capturedGraph()) return 1;
  std::printf("array_graphs: all checks passed\n");
  return 0;
}
