// Trains a small convolutional network with cuDNN, cuRAND and cuBLAS on a
// generated image dataset: 12x12 grey images of three classes -- a
// horizontal bar, a vertical bar, a diagonal -- at random places, with noise
// (fixed seeds: the same run every time).
//
//   conv 8 x 3x3, pad 1 (cudnnConvolutionForward) + bias (cudnnAddTensor)
//   -> ReLU (cudnnActivationForward) -> max pool 2x2 (cudnnPoolingForward)
//   -> dropout 0.2 (cudnnDropoutForward) -> fully connected 288 -> 3
//   (cublasSgemm + bias) -> softmax (cudnnSoftmaxForward)
//
// Weights start from cuRAND normals (He initialisation, curandGenerateNormal).
// The cross-entropy's gradient is a kernel of its own; the rest of the
// backward pass is cuBLAS's (cublasSgemm, cublasSgemv for the classifier)
// and cuDNN's (cudnnDropoutBackward, cudnnPoolingBackward,
// cudnnActivationBackward, cudnnConvolutionBackwardBias and
// cudnnConvolutionBackwardFilter); updates are cublasSaxpy. Prints each
// epoch's loss and accuracy, then the test accuracy (dropout off).
//
//   nvcc -cudart shared -o cnn_train cnn_train.cu -lcudnn -lcublas -lcurand
//   rgpu-run --local ./cnn_train [epochs]
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <curand.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#define CHECK(call)                                                                     \
  do {                                                                                  \
    long long e_ = static_cast<long long>(call);                                        \
    if (e_ != 0) {                                                                      \
      std::printf("%s:%d: %s failed: %lld\n", __FILE__, __LINE__, #call, e_);           \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

constexpr int kSide = 12, kFilters = 8, kPooled = kSide / 2, kClasses = 3;
constexpr int kFeatures = kFilters * kPooled * kPooled;  // 288
constexpr int kTrain = 768, kTest = 192, kBatch = 64;
constexpr float kDropout = 0.2f, kRate = 0.05f;

// dZ = (p - one_hot) / batch, the loss and the correct predictions summed (one thread per sample).
__global__ void lossGradient(const float* p, const int* labels, float* dz, float* loss, int* correct, int batch) {
  int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= batch) return;
  const float* q = p + s * kClasses;
  int best = 0;
  for (int c = 1; c < kClasses; ++c)
    if (q[c] > q[best]) best = c;
  atomicAdd(loss, -logf(fmaxf(q[labels[s]], 1e-12f)));
  if (best == labels[s]) atomicAdd(correct, 1);
  for (int c = 0; c < kClasses; ++c) dz[s * kClasses + c] = (q[c] - (c == labels[s] ? 1.f : 0.f)) / batch;
}

// z += b per class (z is batch x 3, one sample per row).
__global__ void addBias(float* z, const float* b, int batch) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < batch * kClasses) z[i] += b[i % kClasses];
}

// One image of class `label`: a bar or a diagonal at a random place, with noise.
static void draw(float* img, int label, std::mt19937& gen) {
  std::normal_distribution<float> noise(0.f, 0.25f);
  std::uniform_int_distribution<int> at(1, kSide - 2);
  for (int i = 0; i < kSide * kSide; ++i) img[i] = noise(gen);
  const int k = at(gen);
  for (int i = 0; i < kSide; ++i) {
    if (label == 0) img[k * kSide + i] += 1.f;                                  // horizontal
    else if (label == 1) img[i * kSide + k] += 1.f;                             // vertical
    else img[i * kSide + (i + k) % kSide] += 1.f;                               // diagonal (wrapped)
  }
}

struct Tensors {
  cudnnTensorDescriptor_t x, conv, bias, pooled, logits;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t cd;
  cudnnActivationDescriptor_t relu;
  cudnnPoolingDescriptor_t pool;
  cudnnDropoutDescriptor_t drop;
};

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 8;
  // ---- data ----
  std::mt19937 gen(7);
  std::vector<float> images((kTrain + kTest) * kSide * kSide);
  std::vector<int> labels(kTrain + kTest);
  for (int i = 0; i < kTrain + kTest; ++i) {
    labels[i] = i % kClasses;
    draw(&images[static_cast<size_t>(i) * kSide * kSide], labels[i], gen);
  }
  float* d_images;
  int* d_labels;
  CHECK(cudaMalloc(&d_images, images.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_labels, labels.size() * sizeof(int)));
  CHECK(cudaMemcpy(d_images, images.data(), images.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_labels, labels.data(), labels.size() * sizeof(int), cudaMemcpyHostToDevice));

  // ---- libraries and descriptors ----
  cudnnHandle_t dnn;
  cublasHandle_t blas;
  curandGenerator_t rng;
  CHECK(cudnnCreate(&dnn));
  CHECK(cublasCreate(&blas));
  CHECK(curandCreateGenerator(&rng, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CHECK(curandSetPseudoRandomGeneratorSeed(rng, 2024));
  Tensors t;
  for (auto* d : {&t.x, &t.conv, &t.bias, &t.pooled, &t.logits}) CHECK(cudnnCreateTensorDescriptor(d));
  CHECK(cudnnSetTensor4dDescriptor(t.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kBatch, 1, kSide, kSide));
  CHECK(cudnnSetTensor4dDescriptor(t.conv, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kBatch, kFilters, kSide, kSide));
  CHECK(cudnnSetTensor4dDescriptor(t.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, kFilters, 1, 1));
  CHECK(cudnnSetTensor4dDescriptor(t.pooled, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kBatch, kFilters, kPooled, kPooled));
  CHECK(cudnnSetTensor4dDescriptor(t.logits, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, kBatch, kClasses, 1, 1));
  CHECK(cudnnCreateFilterDescriptor(&t.w));
  CHECK(cudnnSetFilter4dDescriptor(t.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kFilters, 1, 3, 3));
  CHECK(cudnnCreateConvolutionDescriptor(&t.cd));
  CHECK(cudnnSetConvolution2dDescriptor(t.cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CHECK(cudnnCreateActivationDescriptor(&t.relu));
  CHECK(cudnnSetActivationDescriptor(t.relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));
  CHECK(cudnnCreatePoolingDescriptor(&t.pool));
  CHECK(cudnnSetPooling2dDescriptor(t.pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
  size_t states_size = 0, reserve_size = 0;
  CHECK(cudnnDropoutGetStatesSize(dnn, &states_size));
  CHECK(cudnnDropoutGetReserveSpaceSize(t.pooled, &reserve_size));
  void *states, *reserve;
  CHECK(cudaMalloc(&states, states_size));
  CHECK(cudaMalloc(&reserve, reserve_size));
  CHECK(cudnnCreateDropoutDescriptor(&t.drop));
  CHECK(cudnnSetDropoutDescriptor(t.drop, dnn, kDropout, states, states_size, 99));
  cudnnConvolutionFwdAlgoPerf_t fwd_perf;
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_perf;
  int found = 0;
  CHECK(cudnnGetConvolutionForwardAlgorithm_v7(dnn, t.x, t.w, t.cd, t.conv, 1, &found, &fwd_perf));
  CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, t.x, t.conv, t.cd, t.w, 1, &found, &bwd_perf));
  size_t fwd_ws = 0, bwd_ws = 0;
  CHECK(cudnnGetConvolutionForwardWorkspaceSize(dnn, t.x, t.w, t.cd, t.conv, fwd_perf.algo, &fwd_ws));
  CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, t.x, t.conv, t.cd, t.w, bwd_perf.algo, &bwd_ws));
  void* ws = nullptr;
  if (fwd_ws || bwd_ws) CHECK(cudaMalloc(&ws, std::max(fwd_ws, bwd_ws)));

  // ---- parameters (cuRAND: He-initialised normals; biases zero) and activations ----
  float *w, *b, *fc, *fcb, *dw, *db, *dfc, *dfcb;
  CHECK(cudaMalloc(&w, kFilters * 9 * sizeof(float)));
  CHECK(cudaMalloc(&fc, kClasses * kFeatures * sizeof(float)));
  CHECK(curandGenerateNormal(rng, w, kFilters * 9, 0.f, std::sqrt(2.f / 9)));
  CHECK(curandGenerateNormal(rng, fc, kClasses * kFeatures, 0.f, std::sqrt(2.f / kFeatures)));
  for (auto [p, n] : {std::pair{&b, kFilters}, {&fcb, kClasses}, {&dw, kFilters * 9}, {&db, kFilters},
                      {&dfc, kClasses * kFeatures}, {&dfcb, kClasses}}) {
    CHECK(cudaMalloc(p, n * sizeof(float)));
    CHECK(cudaMemset(*p, 0, n * sizeof(float)));
  }
  const size_t conv_n = static_cast<size_t>(kBatch) * kFilters * kSide * kSide, feat_n = kBatch * kFeatures;
  float *conv, *act, *pooled, *dropped, *logits, *probs, *dz, *dfeat, *dpooled, *dact, *dconv, *ones, *loss;
  int* correct;
  for (auto [p, n] : {std::pair{&conv, conv_n}, {&act, conv_n}, {&pooled, feat_n}, {&dropped, feat_n},
                      {&logits, size_t{kBatch * kClasses}}, {&probs, size_t{kBatch * kClasses}},
                      {&dz, size_t{kBatch * kClasses}}, {&dfeat, feat_n}, {&dpooled, feat_n}, {&dact, conv_n}, {&dconv, conv_n},
                      {&ones, size_t{kBatch}}, {&loss, size_t{1}}})
    CHECK(cudaMalloc(p, n * sizeof(float)));
  CHECK(cudaMalloc(&correct, sizeof(int)));
  std::vector<float> host_ones(kBatch, 1.f);
  CHECK(cudaMemcpy(ones, host_ones.data(), kBatch * sizeof(float), cudaMemcpyHostToDevice));
  const float one = 1.f, zero = 0.f, minus_rate = -kRate;

  // One batch forward (and, when training, backward and update); returns the batch's loss sum.
  auto step = [&](int first, bool train) {
    const float* x = d_images + static_cast<size_t>(first) * kSide * kSide;
    CHECK(cudnnConvolutionForward(dnn, &one, t.x, x, t.w, w, t.cd, fwd_perf.algo, ws, fwd_ws, &zero, t.conv, conv));
    CHECK(cudnnAddTensor(dnn, &one, t.bias, b, &one, t.conv, conv));
    CHECK(cudnnActivationForward(dnn, t.relu, &one, t.conv, conv, &zero, t.conv, act));
    CHECK(cudnnPoolingForward(dnn, t.pool, &one, t.conv, act, &zero, t.pooled, pooled));
    const float* features = pooled;
    if (train) {
      CHECK(cudnnDropoutForward(dnn, t.drop, t.pooled, pooled, t.pooled, dropped, reserve, reserve_size));
      features = dropped;
    }
    // logits (3 x batch, column-major) = fc (3 x 288) * features (288 x batch) + fcb
    CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kClasses, kBatch, kFeatures, &one, fc, kClasses, features,
                      kFeatures, &zero, logits, kClasses));
    addBias<<<(kBatch * kClasses + 127) / 128, 128>>>(logits, fcb, kBatch);
    CHECK(cudnnSoftmaxForward(dnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, t.logits, logits, &zero,
                              t.logits, probs));
    lossGradient<<<(kBatch + 63) / 64, 64>>>(probs, d_labels + first, dz, loss, correct, kBatch);
    if (!train) return;
    // classifier: dfc = dz features^T, dfcb = dz 1, dfeatures = fc^T dz
    CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, kClasses, kFeatures, kBatch, &one, dz, kClasses, features,
                      kFeatures, &zero, dfc, kClasses));
    CHECK(cublasSgemv(blas, CUBLAS_OP_N, kClasses, kBatch, &one, dz, kClasses, ones, 1, &zero, dfcb, 1));
    CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, kFeatures, kBatch, kClasses, &one, fc, kClasses, dz, kClasses,
                      &zero, dfeat, kFeatures));
    // features: dropout, pooling, ReLU, then the convolution's bias and filter
    CHECK(cudnnDropoutBackward(dnn, t.drop, t.pooled, dfeat, t.pooled, dpooled, reserve, reserve_size));
    CHECK(cudnnPoolingBackward(dnn, t.pool, &one, t.pooled, pooled, t.pooled, dpooled, t.conv, act, &zero, t.conv,
                               dact));
    CHECK(cudnnActivationBackward(dnn, t.relu, &one, t.conv, act, t.conv, dact, t.conv, conv, &zero, t.conv, dconv));
    CHECK(cudnnConvolutionBackwardBias(dnn, &one, t.conv, dconv, &zero, t.bias, db));
    CHECK(cudnnConvolutionBackwardFilter(dnn, &one, t.x, x, t.conv, dconv, t.cd, bwd_perf.algo, ws, bwd_ws, &zero, t.w,
                                         dw));
    // SGD
    for (auto [p, g, n] : {std::tuple{w, dw, kFilters * 9}, {b, db, kFilters}, {fc, dfc, kClasses * kFeatures},
                           {fcb, dfcb, kClasses}})
      CHECK(cublasSaxpy(blas, n, &minus_rate, g, 1, p, 1));
  };

  auto epoch = [&](int first, int count, bool train, float* mean_loss, float* accuracy) {
    CHECK(cudaMemset(loss, 0, sizeof(float)));
    CHECK(cudaMemset(correct, 0, sizeof(int)));
    for (int s = first; s < first + count; s += kBatch) step(s, train);
    float l = 0;
    int c = 0;
    CHECK(cudaMemcpy(&l, loss, sizeof l, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&c, correct, sizeof c, cudaMemcpyDeviceToHost));
    *mean_loss = l / count;
    *accuracy = 100.f * c / count;
  };
  float first_loss = 0, last_loss = 0, acc = 0;
  for (int e = 1; e <= epochs; ++e) {
    epoch(0, kTrain, true, &last_loss, &acc);
    if (e == 1) first_loss = last_loss;
    std::printf("epoch %d: loss %.4f, accuracy %.1f%%\n", e, last_loss, acc);
  }
  float test_loss = 0, test_acc = 0;
  epoch(kTrain, kTest, false, &test_loss, &test_acc);
  std::printf("cnn_train: loss %.4f -> %.4f over %d epochs, test accuracy %.1f%% (loss %.4f)\n", first_loss, last_loss,
              epochs, test_acc, test_loss);
  CHECK(cudaDeviceSynchronize());
  cudnnDestroy(dnn);
  cublasDestroy(blas);
  curandDestroyGenerator(rng);
  return 0;
}
