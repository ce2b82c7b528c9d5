// A small training loop for the migration tests (docs/migration.md): the
// test moves its session to other workers while it runs, and every line it
// prints must be exactly what an unmoved run prints.
//
// A one-layer network: weights W (N x N) and a bias in a module variable,
// trained on fixed inputs X with cuBLAS (H = W X), a kernel that turns H into
// an update of W and of the bias, on a stream of its own with an event per
// step; each step also adds W's diagonal into managed memory the host reads,
// through a buffer from the stream-ordered pool (cudaMallocAsync). Each step
// prints a checksum of W's, the bias's and the managed buffer's bits.
//
//   migrate_client STEPS PAUSE_MS [BIG_MIB] [array]
//     BIG_MIB: also holds that many MiB of pseudo-random device memory
//              (checked at the end: a moved session keeps every byte)
//     array:   also holds, on every device, a CUDA array with a texture and
//              a surface object on it (checked through both at the end),
//              made after one more texture object, which it destroys: a hole
//              below their handles. Drivers may give two devices' objects the
//              same values.
//     graph:   also launches a captured CUDA graph every step (counting its
//              launches in a module variable)
//     heap:    also sets cudaLimitMallocHeapSize and, every step, keeps 32
//              blocks from device malloc, freeing the previous step's (checked
//              at the end: each kept block holds what its step wrote)
//     cond:    also launches a graph with a conditional (if) node every step,
//              whose handle keeps its value between launches
//     hostfn:  also runs a host function of one second every step (a session
//              whose stream waits for one cannot be checkpointed then)
//     libs:    also, every step, on the same stream, with a plan, handles,
//              descriptors and a generator made before the first step: a
//              cuFFT transform of W's first 128 complex values, a cuSPARSE
//              SpMV of a tridiagonal matrix with W's first column, a cuSOLVER
//              Cholesky solve with W's diagonal as its right-hand side, and 64
//              cuRAND values, and cuDNN's 3x3 convolution of W followed by
//              dropout (its states seeded before the first step, advanced by
//              each); their checksum is printed as "step N libs ..."
#include <cublas_v2.h>
#include <cudnn.h>
#include <cufft.h>
#include <curand.h>
#include <cusolverDn.h>
#include <cusparse.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                                        \
  do {                                                                                                     \
    cudaError_t e_ = (call);                                                                               \
    if (e_ != cudaSuccess) {                                                                               \
      std::printf("migrate_client: %s failed: %s (%s)\n", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
      std::exit(2);                                                                                        \
    }                                                                                                      \
  } while (0)
#define CHECK_BLAS(call)                                                   \
  do {                                                                     \
    cublasStatus_t s_ = (call);                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                     \
      std::printf("migrate_client: %s failed: %d\n", #call, int(s_));      \
      std::exit(2);                                                        \
    }                                                                      \
  } while (0)

constexpr int N = 64, B = 32;
__device__ float bias[N];
__device__ unsigned long long steps_done;

__global__ void init(float* w, float* x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N * N) w[i] = ((i * 37) % 101 - 50) * 0.001f;
  if (i < N * B) x[i] = ((i * 53) % 97 - 48) * 0.01f;
  if (i < N) bias[i] = 0.01f * (i % 7);
}

// heap: step `step`'s 32 blocks of device malloc, each filled with its own
// pattern; the previous step's odd-numbered blocks are freed (so the heap
// holds a mix of live blocks and holes across a move).
constexpr int kHeapBlocks = 32, kHeapWords = 256;
__device__ unsigned* heap_slots[64 * kHeapBlocks];
__global__ void heapStep(int step) {
  int t = threadIdx.x;
  unsigned* p = static_cast<unsigned*>(malloc(kHeapWords * sizeof(unsigned)));
  heap_slots[step * kHeapBlocks + t] = p;
  if (p)
    for (int i = 0; i < kHeapWords; ++i) p[i] = step * 100003u + t * 7919u + i;
  if (step > 0 && (t & 1)) {
    free(heap_slots[(step - 1) * kHeapBlocks + t]);
    heap_slots[(step - 1) * kHeapBlocks + t] = nullptr;
  }
}
// Counts the kept blocks (wrong[1]) and the words of them that differ from
// what their step wrote (wrong[0]).
__global__ void heapCheck(int steps, unsigned long long* wrong) {
  for (int s = 0; s < steps; ++s) {
    unsigned* p = heap_slots[s * kHeapBlocks + threadIdx.x];
    if (!p) continue;
    atomicAdd(&wrong[1], 1ull);
    for (int i = 0; i < kHeapWords; ++i)
      if (p[i] != s * 100003u + threadIdx.x * 7919u + i) atomicAdd(wrong, 1ull);
  }
}

// cond: a graph whose conditional (if) node runs its body on odd launches.
__device__ int cond_step, cond_taken;
__global__ void condBump(int* step) { ++*step; }
__global__ void condSetOdd(cudaGraphConditionalHandle h, const int* step) { cudaGraphSetConditional(h, *step & 1); }
__global__ void condCount() { ++cond_taken; }
// hostfn: a host function that holds its stream for a second.
static void CUDART_CB slowHostFunction(void* step) {
  std::printf("hostfn %d running\n", static_cast<int>(reinterpret_cast<intptr_t>(step)));
  usleep(1000 * 1000);
}

// One step: W -= lr * tanh(H + bias) x^T-ish (a cheap, deterministic update).
__global__ void update(float* w, const float* h, const float* x, float lr) {
  int r = blockIdx.x, c = threadIdx.x;  // row r of W, column c
  float g = 0.f;
  for (int b = 0; b < B; ++b) g += tanhf(h[r + b * N] + bias[r]) * x[c + b * N];
  w[r + c * N] -= lr * g / B;
  __syncthreads();
  if (c == 0) bias[r] -= lr * 0.01f * g;
  if (r == 0 && c == 0) ++steps_done;
}

// Managed memory the host reads every step, and a stream-ordered allocation
// from the default pool made and freed every step.
__global__ void accumulate(float* managed, float* scratch, const float* w) {
  int i = threadIdx.x;
  scratch[i] = w[i * N + i];
  managed[i] += scratch[i];
}

__global__ void readTexture(cudaTextureObject_t tex, float* out) {
  int x = threadIdx.x, y = blockIdx.x;
  out[y * 64 + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f);
}

__global__ void writeSurface(cudaSurfaceObject_t surf, float v) { surf2Dwrite(v, surf, 1 * sizeof(float), 1); }

__device__ unsigned long long graph_launches;
__global__ void countGraphLaunch() { ++graph_launches; }

__global__ void fillRandom(uint32_t* p, size_t n, uint32_t seed) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t v = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    v ^= v >> 13;
    v *= 0x5bd1e995u;
    p[i] = v ^ (v >> 15);
  }
}

static uint64_t checksum(const std::vector<float>& v) {
  uint64_t s = 1469598103934665603ull;
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    s = (s ^ b) * 1099511628211ull;
  }
  return s;
}

#define CHECK_LIB(call)                                                  \
  do {                                                                   \
    int s_ = static_cast<int>(call);                                     \
    if (s_ != 0) {                                                       \
      std::printf("migrate_client: %s failed: %d\n", #call, s_);        \
      std::exit(2);                                                      \
    }                                                                    \
  } while (0)

// The math libraries' state the client keeps (a cuFFT plan and its work
// area, cuSPARSE and cuSOLVER handles and descriptors, a cuRAND generator
// and where it is), made once and used every step: after a move the server
// side of each must be there again.
struct Libraries {
  static constexpr int kFft = 128, kSpd = 16, kRand = 64;
  cufftHandle fft = 0;
  cusparseHandle_t sparse = nullptr;
  cusparseSpMatDescr_t tri = nullptr;
  cusparseDnVecDescr_t x = nullptr, y = nullptr;
  cusolverDnHandle_t solver = nullptr;
  curandGenerator_t rand = nullptr;
  float *spectrum = nullptr, *yv = nullptr, *spd = nullptr, *factor = nullptr, *rhs = nullptr, *work = nullptr;
  float *values = nullptr, *random = nullptr;
  int *offsets = nullptr, *columns = nullptr, *info = nullptr;
  void* buffer = nullptr;
  int lwork = 0;
  cudnnHandle_t dnn = nullptr;
  cudnnTensorDescriptor_t image = nullptr;
  cudnnFilterDescriptor_t kernel = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnDropoutDescriptor_t drop = nullptr;
  float *filter = nullptr, *convolved = nullptr, *dropped = nullptr;
  void *states = nullptr, *reserve = nullptr, *dnn_work = nullptr;
  size_t reserve_size = 0, dnn_work_size = 0;

  void make(cudaStream_t stream, float* w) {
    CHECK_LIB(cufftPlan1d(&fft, kFft, CUFFT_C2C, 1));
    CHECK_LIB(cufftSetStream(fft, stream));
    CHECK(cudaMalloc(&spectrum, 2 * kFft * sizeof(float)));
    // A tridiagonal N x N matrix (2 on the diagonal, -1 beside it) in CSR.
    std::vector<int> off{0}, col;
    std::vector<float> val;
    for (int r = 0; r < N; ++r) {
      for (int c = r - 1; c <= r + 1; ++c)
        if (c >= 0 && c < N) {
          col.push_back(c);
          val.push_back(c == r ? 2.f : -1.f);
        }
      off.push_back(static_cast<int>(col.size()));
    }
    CHECK(cudaMalloc(&offsets, off.size() * sizeof(int)));
    CHECK(cudaMalloc(&columns, col.size() * sizeof(int)));
    CHECK(cudaMalloc(&values, val.size() * sizeof(float)));
    CHECK(cudaMemcpy(offsets, off.data(), off.size() * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(columns, col.data(), col.size() * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(values, val.data(), val.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&yv, N * sizeof(float)));
    CHECK_LIB(cusparseCreate(&sparse));
    CHECK_LIB(cusparseSetStream(sparse, stream));
    CHECK_LIB(cusparseCreateCsr(&tri, N, N, static_cast<int64_t>(val.size()), offsets, columns, values,
                                CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    CHECK_LIB(cusparseCreateDnVec(&x, N, w, CUDA_R_32F));  // W's first column
    CHECK_LIB(cusparseCreateDnVec(&y, N, yv, CUDA_R_32F));
    const float one = 1.f, zero = 0.f;
    size_t size = 0;
    CHECK_LIB(cusparseSpMV_bufferSize(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, tri, x, &zero, y, CUDA_R_32F,
                                      CUSPARSE_SPMV_ALG_DEFAULT, &size));
    if (size) CHECK(cudaMalloc(&buffer, size));
    // A symmetric positive definite kSpd x kSpd matrix, factored again every step.
    std::vector<float> a(kSpd * kSpd);
    for (int i = 0; i < kSpd; ++i)
      for (int j = 0; j < kSpd; ++j) a[i + j * kSpd] = i == j ? kSpd + 1.f : 1.f / (1 + i + j);
    CHECK(cudaMalloc(&spd, a.size() * sizeof(float)));
    CHECK(cudaMalloc(&factor, a.size() * sizeof(float)));
    CHECK(cudaMemcpy(spd, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&rhs, kSpd * sizeof(float)));
    CHECK(cudaMalloc(&info, sizeof(int)));
    CHECK_LIB(cusolverDnCreate(&solver));
    CHECK_LIB(cusolverDnSetStream(solver, stream));
    CHECK_LIB(cusolverDnSpotrf_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, kSpd, factor, kSpd, &lwork));
    CHECK(cudaMalloc(&work, (lwork > 0 ? lwork : 1) * sizeof(float)));
    CHECK_LIB(curandCreateGenerator(&rand, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CHECK_LIB(curandSetPseudoRandomGeneratorSeed(rand, 2024));
    CHECK_LIB(curandSetStream(rand, stream));
    CHECK(cudaMalloc(&random, kRand * sizeof(float)));
    // cuDNN: W as a 1x1xNxN image, a 3x3 filter (pad 1), dropout 0.3 of the result.
    CHECK_LIB(cudnnCreate(&dnn));
    CHECK_LIB(cudnnSetStream(dnn, stream));
    CHECK_LIB(cudnnCreateTensorDescriptor(&image));
    CHECK_LIB(cudnnSetTensor4dDescriptor(image, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, N, N));
    CHECK_LIB(cudnnCreateFilterDescriptor(&kernel));
    CHECK_LIB(cudnnSetFilter4dDescriptor(kernel, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, 1, 3, 3));
    CHECK_LIB(cudnnCreateConvolutionDescriptor(&conv));
    CHECK_LIB(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    const float taps[9] = {0.1f, 0.2f, 0.1f, 0.2f, 0.4f, 0.2f, 0.1f, 0.2f, 0.1f};
    CHECK(cudaMalloc(&filter, sizeof taps));
    CHECK(cudaMemcpy(filter, taps, sizeof taps, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&convolved, N * N * sizeof(float)));
    CHECK(cudaMalloc(&dropped, N * N * sizeof(float)));
    CHECK_LIB(cudnnGetConvolutionForwardWorkspaceSize(dnn, image, kernel, conv, image,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &dnn_work_size));
    if (dnn_work_size) CHECK(cudaMalloc(&dnn_work, dnn_work_size));
    size_t states_size = 0;
    CHECK_LIB(cudnnDropoutGetStatesSize(dnn, &states_size));
    CHECK_LIB(cudnnDropoutGetReserveSpaceSize(image, &reserve_size));
    CHECK(cudaMalloc(&states, states_size));
    CHECK(cudaMalloc(&reserve, reserve_size));
    CHECK_LIB(cudnnCreateDropoutDescriptor(&drop));
    CHECK_LIB(cudnnSetDropoutDescriptor(drop, dnn, 0.3f, states, states_size, 77));
  }

  // One step's calls; the checksum of everything they wrote.
  uint64_t step(cudaStream_t stream, float* w) {
    CHECK_LIB(cufftExecC2C(fft, reinterpret_cast<cufftComplex*>(w), reinterpret_cast<cufftComplex*>(spectrum),
                           CUFFT_FORWARD));
    const float one = 1.f, zero = 0.f;
    CHECK_LIB(cusparseSpMV(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, tri, x, &zero, y, CUDA_R_32F,
                           CUSPARSE_SPMV_ALG_DEFAULT, buffer));
    CHECK(cudaMemcpyAsync(factor, spd, kSpd * kSpd * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaMemcpy2DAsync(rhs, sizeof(float), w, (N + 1) * sizeof(float), sizeof(float), kSpd,
                            cudaMemcpyDeviceToDevice, stream));  // W's diagonal
    CHECK_LIB(cusolverDnSpotrf(solver, CUBLAS_FILL_MODE_LOWER, kSpd, factor, kSpd, work, lwork, info));
    CHECK_LIB(cusolverDnSpotrs(solver, CUBLAS_FILL_MODE_LOWER, kSpd, 1, factor, kSpd, rhs, kSpd, info));
    CHECK_LIB(curandGenerateUniform(rand, random, kRand));
    CHECK_LIB(cudnnConvolutionForward(dnn, &one, image, w, kernel, filter, conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                      dnn_work, dnn_work_size, &zero, image, convolved));
    CHECK_LIB(cudnnDropoutForward(dnn, drop, image, convolved, image, dropped, reserve, reserve_size));
    std::vector<float> out(2 * kFft + N + kSpd + kRand + N * N);
    float* at = out.data();
    CHECK(cudaMemcpyAsync(at, spectrum, 2 * kFft * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaMemcpyAsync(at + 2 * kFft, yv, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaMemcpyAsync(at + 2 * kFft + N, rhs, kSpd * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaMemcpyAsync(at + 2 * kFft + N + kSpd, random, kRand * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaMemcpyAsync(at + 2 * kFft + N + kSpd + kRand, dropped, N * N * sizeof(float), cudaMemcpyDeviceToHost,
                          stream));
    int devinfo = -1;
    CHECK(cudaMemcpyAsync(&devinfo, info, sizeof devinfo, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    if (devinfo != 0) std::printf("migrate_client: cuSOLVER devInfo %d\n", devinfo);
    return checksum(out);
  }
};

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  int pause_ms = argc > 2 ? std::atoi(argv[2]) : 100;
  size_t big_mib = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 0;
  bool with_array = argc > 4 && std::strcmp(argv[4], "array") == 0;
  bool with_graph = argc > 4 && std::strcmp(argv[4], "graph") == 0;
  bool with_heap = argc > 4 && std::strcmp(argv[4], "heap") == 0;
  bool with_hostfn = argc > 4 && std::strcmp(argv[4], "hostfn") == 0;
  bool with_libs = argc > 4 && std::strcmp(argv[4], "libs") == 0;
  cudaGraphExec_t cond_exec = nullptr;
  if (argc > 4 && std::strcmp(argv[4], "cond") == 0) {
    // if (handle) { count } -> bump -> setOdd(handle): each launch's branch
    // reads the value the launch before it left in the handle (0 at first),
    // so it runs on even launches, and only if that value outlived a move.
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle handle;
    CHECK(cudaGraphConditionalHandleCreate(&handle, g, 0, 0));
    int* step_ptr = nullptr;
    CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&step_ptr), cond_step));
    cudaKernelNodeParams k = {};
    k.gridDim = dim3(1);
    k.blockDim = dim3(1);
    void* bump_args[] = {&step_ptr};
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = handle;
    p.conditional.type = cudaGraphCondTypeIf;
    p.conditional.size = 1;
    cudaGraphNode_t cond;
    CHECK(cudaGraphAddNode(&cond, g, nullptr, nullptr, 0, &p));
    k.func = reinterpret_cast<void*>(condCount);
    cudaGraphNode_t count;
    CHECK(cudaGraphAddKernelNode(&count, p.conditional.phGraph_out[0], nullptr, 0, &k));
    cudaGraphNode_t bump, set;
    k.func = reinterpret_cast<void*>(condBump);
    k.kernelParams = bump_args;
    CHECK(cudaGraphAddKernelNode(&bump, g, &cond, 1, &k));
    void* set_args[] = {&handle, &step_ptr};
    k.func = reinterpret_cast<void*>(condSetOdd);
    k.kernelParams = set_args;
    CHECK(cudaGraphAddKernelNode(&set, g, &bump, 1, &k));
    CHECK(cudaGraphInstantiate(&cond_exec, g, 0));
    CHECK(cudaGraphDestroy(g));
  }
  if (with_heap) CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 16 << 20));
  if (with_heap && steps > 64) steps = 64;

  float *w, *x, *h;
  CHECK(cudaMalloc(&w, N * N * sizeof(float)));
  CHECK(cudaMalloc(&x, N * B * sizeof(float)));
  CHECK(cudaMalloc(&h, N * B * sizeof(float)));
  uint32_t* big = nullptr;
  size_t big_n = big_mib << 18;
  if (big_n) {
    CHECK(cudaMalloc(&big, big_n * 4));
    fillRandom<<<256, 256>>>(big, big_n, 12345u);
    CHECK(cudaGetLastError());
  }
  int devices = 1;
  CHECK(cudaGetDeviceCount(&devices));
  std::vector<cudaArray_t> array;
  std::vector<cudaTextureObject_t> tex;
  std::vector<cudaSurfaceObject_t> surf;
  // Device d's array holds pattern + 1000 d.
  std::vector<float> pattern(64 * 64);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<float>(i) * 0.25f;
  for (int dev = 0; with_array && dev < devices; ++dev) {
    CHECK(cudaSetDevice(dev));
    std::vector<float> mine(pattern);
    for (float& v : mine) v += 1000.0f * dev;
    cudaChannelFormatDesc d = cudaCreateChannelDesc<float>();
    array.push_back(nullptr);
    CHECK(cudaMallocArray(&array.back(), &d, 64, 64, cudaArraySurfaceLoadStore));
    CHECK(cudaMemcpy2DToArray(array.back(), 0, 0, mine.data(), 64 * sizeof(float), 64 * sizeof(float), 64,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc res{};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = array.back();
    cudaTextureDesc td{};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    // One made and destroyed first: the objects kept have a free handle below them.
    cudaTextureObject_t first = 0;
    CHECK(cudaCreateTextureObject(&first, &res, &td, nullptr));
    tex.push_back(0);
    surf.push_back(0);
    CHECK(cudaCreateTextureObject(&tex.back(), &res, &td, nullptr));
    CHECK(cudaCreateSurfaceObject(&surf.back(), &res));
    CHECK(cudaDestroyTextureObject(first));
    // The driver's values (a fresh context's first being 1 is what a restore expects).
    std::printf("objects of device %d: texture %llu (after %llu, destroyed), surface %llu\n", dev, tex.back(), first,
                surf.back());
  }
  CHECK(cudaSetDevice(0));
  int lo = 0, hi = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, hi));
  cudaEvent_t done, t0, t1;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  cublasHandle_t blas;
  CHECK_BLAS(cublasCreate(&blas));
  CHECK_BLAS(cublasSetStream(blas, stream));
  init<<<(N * N + 255) / 256, 256, 0, stream>>>(w, x);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(t0, stream));
  cudaGraphExec_t graph_exec = nullptr;
  if (with_graph) {
    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    countGraphLaunch<<<1, 1, 0, stream>>>();
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
    CHECK(cudaGraphDestroy(graph));
  }
  Libraries libs;
  if (with_libs) libs.make(stream, w);
  std::printf("ready\n");

  float* managed = nullptr;
  CHECK(cudaMallocManaged(&managed, N * sizeof(float)));
  for (int i = 0; i < N; ++i) managed[i] = static_cast<float>(i);
  std::vector<float> wh(N * N), bh(N);
  const float one = 1.f, zero = 0.f;
  for (int s = 1; s <= steps; ++s) {
    CHECK_BLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, B, N, &one, w, N, x, N, &zero, h, N));
    update<<<N, N, 0, stream>>>(w, h, x, 0.05f);
    CHECK(cudaGetLastError());
    if (graph_exec) CHECK(cudaGraphLaunch(graph_exec, stream));
    if (with_heap) heapStep<<<1, kHeapBlocks, 0, stream>>>(s - 1);
    if (cond_exec) {
      CHECK(cudaGraphLaunch(cond_exec, stream));
      // Fresh memory, all ones, made and freed every step: it must never be
      // the handle's word (a restored session's allocator must know it is taken).
      void* probe = nullptr;
      CHECK(cudaMalloc(&probe, 256));
      CHECK(cudaMemsetAsync(probe, 0xff, 256, stream));
      CHECK(cudaStreamSynchronize(stream));
      CHECK(cudaFree(probe));
    }
    if (with_hostfn) CHECK(cudaLaunchHostFunc(stream, slowHostFunction, reinterpret_cast<void*>(static_cast<intptr_t>(s))));
    float* scratch = nullptr;
    CHECK(cudaMallocAsync(&scratch, N * sizeof(float), stream));
    accumulate<<<1, N, 0, stream>>>(managed, scratch, w);
    CHECK(cudaFreeAsync(scratch, stream));
    CHECK(cudaEventRecord(done, stream));
    CHECK(cudaEventSynchronize(done));
    CHECK(cudaMemcpyAsync(wh.data(), w, wh.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaMemcpyFromSymbolAsync(bh.data(), bias, bh.size() * sizeof(float), 0, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<float> mh(managed, managed + N);  // read by the host, through managed memory
    std::printf("step %d checksum %016llx %016llx %016llx\n", s, static_cast<unsigned long long>(checksum(wh)),
                static_cast<unsigned long long>(checksum(bh)), static_cast<unsigned long long>(checksum(mh)));
    if (with_libs) std::printf("step %d libs %016llx\n", s, static_cast<unsigned long long>(libs.step(stream, w)));
    if (pause_ms) usleep(pause_ms * 1000);
  }
  // Timed across the whole run, moves included.
  CHECK(cudaEventRecord(t1, stream));
  CHECK(cudaEventSynchronize(t1));
  float ms = -1.f;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  std::printf("timing: %s\n", ms > 0.f ? "ok" : "not positive");
  std::printf("elapsed: %.0f ms\n", ms);  // spans the moves (an event recorded before them)
  unsigned long long counted = 0;
  CHECK(cudaMemcpyFromSymbol(&counted, steps_done, sizeof counted));
  std::printf("steps counted on the device: %llu\n", counted);
  if (big_n) {
    std::vector<uint32_t> back(big_n);
    CHECK(cudaMemcpy(back.data(), big, big_n * 4, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < big_n; ++i) {
      uint32_t v = static_cast<uint32_t>(i) * 2654435761u ^ 12345u;
      v ^= v >> 13;
      v *= 0x5bd1e995u;
      if (back[i] != (v ^ (v >> 15))) ++wrong;
    }
    std::printf("big: %zu MiB, %zu words wrong\n", big_mib, wrong);
  }
  if (!array.empty()) {
    // Each array's bytes through its device's texture, and a write through its surface.
    size_t wrong = 0;
    bool landed = true;
    for (int dev = 0; dev < devices; ++dev) {
      CHECK(cudaSetDevice(dev));
      float* seen = nullptr;
      CHECK(cudaMalloc(&seen, pattern.size() * sizeof(float)));
      readTexture<<<64, 64>>>(tex[dev], seen);
      writeSurface<<<1, 1>>>(surf[dev], -1.f);
      CHECK(cudaDeviceSynchronize());
      std::vector<float> back(pattern.size()), after(pattern.size());
      CHECK(cudaMemcpy(back.data(), seen, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy2DFromArray(after.data(), 64 * sizeof(float), array[dev], 0, 0, 64 * sizeof(float), 64,
                                  cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < back.size(); ++i) wrong += back[i] != pattern[i] + 1000.0f * dev;
      landed = landed && after[65] == -1.f && after[64] == pattern[64] + 1000.0f * dev;
      CHECK(cudaFree(seen));
      CHECK(cudaDestroyTextureObject(tex[dev]));
      CHECK(cudaDestroySurfaceObject(surf[dev]));
      CHECK(cudaFreeArray(array[dev]));
    }
    CHECK(cudaSetDevice(0));
    std::printf("array: %zu wrong through the texture, surface write %s (%d devices)\n", wrong,
                landed ? "landed" : "lost", devices);
  }
  if (with_heap) {
    unsigned long long* wrong = nullptr;
    CHECK(cudaMallocManaged(&wrong, 2 * sizeof *wrong));
    wrong[0] = wrong[1] = 0;
    heapCheck<<<1, kHeapBlocks>>>(steps, wrong);
    CHECK(cudaDeviceSynchronize());
    size_t limit = 0;
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitMallocHeapSize));
    std::printf("heap: %llu words wrong in the %llu kept blocks, limit %zu MiB\n", wrong[0], wrong[1], limit >> 20);
    CHECK(cudaFree(wrong));
  }
  if (graph_exec) {
    unsigned long long launched = 0;
    CHECK(cudaMemcpyFromSymbol(&launched, graph_launches, sizeof launched));
    std::printf("graph: launched %llu times\n", launched);
    CHECK(cudaGraphExecDestroy(graph_exec));
  }
  if (cond_exec) {
    int taken = 0;
    CHECK(cudaMemcpyFromSymbol(&taken, cond_taken, sizeof taken));
    std::printf("cond: the branch ran on %d of %d launches\n", taken, steps);
    CHECK(cudaGraphExecDestroy(cond_exec));
  }
  CHECK(cudaFree(managed));
  CHECK_BLAS(cublasDestroy(blas));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaEventDestroy(t0));
  CHECK(cudaEventDestroy(t1));
  CHECK(cudaFree(w));
  CHECK(cudaFree(x));
  CHECK(cudaFree(h));
  if (big) CHECK(cudaFree(big));
  std::printf("done\n");
  return 0;
}
