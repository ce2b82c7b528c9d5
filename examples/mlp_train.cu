// Trains a small multilayer perceptron with cuBLAS and its own kernels:
// 2 inputs -> 64 hidden units (ReLU) -> 3 classes (softmax), on a synthetic
// three-armed spiral it generates itself (fixed seeds: the same run every
// time). Matrix products are cublasSgemm, bias gradients cublasSgemv against a
// vector of ones, SGD updates cublasSaxpy; the activation, the loss and its
// gradient are kernels. Prints the loss and accuracy of every epoch.
//
//   nvcc -cudart shared -o mlp_train mlp_train.cu -lcublas
//   rgpu-run --local ./mlp_train [epochs]
//
// Matrices are column-major, one sample per column: X is 2 x N, H 64 x N.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CUDA(call)                                                                          \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));   \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define BLAS(call)                                                                          \
  do {                                                                                      \
    cublasStatus_t s_ = (call);                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(s_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

constexpr int kInputs = 2, kHidden = 64, kClasses = 3;
constexpr int kSamples = 1536, kBatch = 256;

// H = max(H + b, 0), b broadcast along the columns.
__global__ void biasRelu(float* H, const float* b, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) H[i] = fmaxf(H[i] + b[i % rows], 0.0f);
}

__global__ void biasAdd(float* Z, const float* b, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) Z[i] += b[i % rows];
}

// Softmax cross-entropy per sample (one thread each): the loss and the number
// of correct predictions are summed; dZ = (softmax - one_hot) / batch.
__global__ void softmaxLoss(const float* Z, const int* labels, float* dZ, float* loss, int* correct, int batch) {
  int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= batch) return;
  const float* z = Z + s * kClasses;
  float m = z[0];
  int best = 0;
  for (int c = 1; c < kClasses; ++c)
    if (z[c] > m) m = z[c], best = c;
  float sum = 0;
  for (int c = 0; c < kClasses; ++c) sum += expf(z[c] - m);
  int y = labels[s];
  atomicAdd(loss, logf(sum) - (z[y] - m));
  if (best == y) atomicAdd(correct, 1);
  for (int c = 0; c < kClasses; ++c) dZ[s * kClasses + c] = (expf(z[c] - m) / sum - (c == y ? 1.0f : 0.0f)) / batch;
}

// dH *= relu'(H): the gradient passes where the unit was active.
__global__ void reluGrad(float* dH, const float* H, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && H[i] <= 0.0f) dH[i] = 0.0f;
}

int blocks(int n) { return (n + 255) / 256; }

int main(int argc, char** argv) {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 40;
  // The data: three spiral arms, samples shuffled.
  std::mt19937 rng(12345);
  std::normal_distribution<float> noise(0.0f, 0.15f);
  std::vector<float> X(kInputs * kSamples);
  std::vector<int> y(kSamples);
  for (int i = 0; i < kSamples; ++i) {
    int c = i % kClasses;
    float r = static_cast<float>(i / kClasses) / (kSamples / kClasses);
    float t = c * 4.0f + r * 4.0f + noise(rng);
    X[i * kInputs] = r * std::sin(t);
    X[i * kInputs + 1] = r * std::cos(t);
    y[i] = c;
  }
  for (int i = kSamples - 1; i > 0; --i) {
    int j = static_cast<int>(rng() % (i + 1));
    std::swap(X[i * kInputs], X[j * kInputs]);
    std::swap(X[i * kInputs + 1], X[j * kInputs + 1]);
    std::swap(y[i], y[j]);
  }
  // The parameters: He initialisation, zero biases.
  std::normal_distribution<float> w1(0.0f, std::sqrt(2.0f / kInputs)), w2(0.0f, std::sqrt(2.0f / kHidden));
  std::vector<float> W1(kHidden * kInputs), W2(kClasses * kHidden);
  for (auto& w : W1) w = w1(rng);
  for (auto& w : W2) w = w2(rng);

  float *dX, *dW1, *db1, *dW2, *db2, *dH, *dZ, *dGZ, *dGH, *dgW1, *dgb1, *dgW2, *dgb2, *dOnes, *dLoss;
  int *dY, *dCorrect;
  CUDA(cudaMalloc(&dX, X.size() * sizeof(float)));
  CUDA(cudaMalloc(&dY, y.size() * sizeof(int)));
  CUDA(cudaMalloc(&dW1, W1.size() * sizeof(float)));
  CUDA(cudaMalloc(&dW2, W2.size() * sizeof(float)));
  CUDA(cudaMalloc(&db1, kHidden * sizeof(float)));
  CUDA(cudaMalloc(&db2, kClasses * sizeof(float)));
  CUDA(cudaMalloc(&dH, kHidden * kBatch * sizeof(float)));
  CUDA(cudaMalloc(&dZ, kClasses * kBatch * sizeof(float)));
  CUDA(cudaMalloc(&dGZ, kClasses * kBatch * sizeof(float)));
  CUDA(cudaMalloc(&dGH, kHidden * kBatch * sizeof(float)));
  CUDA(cudaMalloc(&dgW1, W1.size() * sizeof(float)));
  CUDA(cudaMalloc(&dgW2, W2.size() * sizeof(float)));
  CUDA(cudaMalloc(&dgb1, kHidden * sizeof(float)));
  CUDA(cudaMalloc(&dgb2, kClasses * sizeof(float)));
  CUDA(cudaMalloc(&dOnes, kBatch * sizeof(float)));
  CUDA(cudaMalloc(&dLoss, sizeof(float)));
  CUDA(cudaMalloc(&dCorrect, sizeof(int)));
  std::vector<float> ones(kBatch, 1.0f);
  CUDA(cudaMemcpy(dX, X.data(), X.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dY, y.data(), y.size() * sizeof(int), cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dW1, W1.data(), W1.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dW2, W2.data(), W2.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA(cudaMemcpy(dOnes, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA(cudaMemset(db1, 0, kHidden * sizeof(float)));
  CUDA(cudaMemset(db2, 0, kClasses * sizeof(float)));

  cublasHandle_t h;
  BLAS(cublasCreate(&h));
  const float one = 1.0f, zero = 0.0f, step = -0.5f;  // learning rate 0.5
  float first_loss = 0, last_loss = 0, last_accuracy = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    CUDA(cudaMemset(dLoss, 0, sizeof(float)));
    CUDA(cudaMemset(dCorrect, 0, sizeof(int)));
    for (int start = 0; start < kSamples; start += kBatch) {
      const float* x = dX + start * kInputs;
      // Forward: H = relu(W1 X + b1), Z = W2 H + b2.
      BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, kHidden, kBatch, kInputs, &one, dW1, kHidden, x, kInputs, &zero, dH,
                       kHidden));
      biasRelu<<<blocks(kHidden * kBatch), 256>>>(dH, db1, kHidden, kBatch);
      BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, kClasses, kBatch, kHidden, &one, dW2, kClasses, dH, kHidden, &zero,
                       dZ, kClasses));
      biasAdd<<<blocks(kClasses * kBatch), 256>>>(dZ, db2, kClasses, kBatch);
      softmaxLoss<<<blocks(kBatch), 256>>>(dZ, dY + start, dGZ, dLoss, dCorrect, kBatch);
      // Backward: dW2 = dZ H^T, db2 = dZ 1, dH = W2^T dZ masked by ReLU, dW1 = dH X^T, db1 = dH 1.
      BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, kClasses, kHidden, kBatch, &one, dGZ, kClasses, dH, kHidden, &zero,
                       dgW2, kClasses));
      BLAS(cublasSgemv(h, CUBLAS_OP_N, kClasses, kBatch, &one, dGZ, kClasses, dOnes, 1, &zero, dgb2, 1));
      BLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, kHidden, kBatch, kClasses, &one, dW2, kClasses, dGZ, kClasses,
                       &zero, dGH, kHidden));
      reluGrad<<<blocks(kHidden * kBatch), 256>>>(dGH, dH, kHidden * kBatch);
      BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, kHidden, kInputs, kBatch, &one, dGH, kHidden, x, kInputs, &zero,
                       dgW1, kHidden));
      BLAS(cublasSgemv(h, CUBLAS_OP_N, kHidden, kBatch, &one, dGH, kHidden, dOnes, 1, &zero, dgb1, 1));
      // SGD.
      BLAS(cublasSaxpy(h, kHidden * kInputs, &step, dgW1, 1, dW1, 1));
      BLAS(cublasSaxpy(h, kHidden, &step, dgb1, 1, db1, 1));
      BLAS(cublasSaxpy(h, kClasses * kHidden, &step, dgW2, 1, dW2, 1));
      BLAS(cublasSaxpy(h, kClasses, &step, dgb2, 1, db2, 1));
    }
    float loss = 0;
    int correct = 0;
    CUDA(cudaMemcpy(&loss, dLoss, sizeof loss, cudaMemcpyDeviceToHost));
    CUDA(cudaMemcpy(&correct, dCorrect, sizeof correct, cudaMemcpyDeviceToHost));
    loss /= kSamples;
    last_accuracy = 100.0f * correct / kSamples;
    if (epoch == 1) first_loss = loss;
    last_loss = loss;
    std::printf("epoch %3d  loss %.4f  accuracy %5.1f%%\n", epoch, loss, last_accuracy);
  }
  BLAS(cublasDestroy(h));
  std::printf("mlp_train: loss %.4f -> %.4f over %d epochs, accuracy %.1f%%\n", first_loss, last_loss, epochs,
              last_accuracy);
  return 0;
}
