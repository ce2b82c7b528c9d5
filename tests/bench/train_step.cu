// A training step of a 29 M-parameter MLP language model, timed: the
// workload rgpu-train-bench runs through rgpu to show whether the device can
// be trained on. Next-token prediction over 64 tokens (batch 1 x 64): an
// embedding (8192 x 512), 10 residual blocks of layernorm -> linear 512->2048
// -> GELU -> linear 2048->512, a final layernorm and an output head
// (512 -> 8192) with a softmax cross-entropy loss; forward, backward and an
// AdamW update of every parameter, in fp32. Linear layers are cuBLASLt
// matmuls; layernorm, GELU, the bias and residual adds, the loss, the
// embedding's gather and scatter and AdamW are this file's kernels.
//
//   train_step [steps]   (default 4; the first step is a warm-up)
//
// Prints the loss and time of every step, then `step_ms: <median of steps
// after the first>`; exits non-zero when the loss did not fall (the update
// must work, or the figure means nothing).
//
// Layout: column-major, one token per column: activations are d x T, a
// linear layer's weight out x in, so Y = W X, dX = W^T dY, dW = dY X^T.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA(call)                                                                         \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
#define LT(call)                                                                           \
  do {                                                                                     \
    cublasStatus_t s_ = (call);                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      std::printf("%s:%d: %s: status %d\n", __FILE__, __LINE__, #call, static_cast<int>(s_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

constexpr int kVocab = 8192, kDim = 512, kHidden = 2048, kBlocks = 10, kTokens = 64;
constexpr float kEps = 1e-5f;

// ---- kernels --------------------------------------------------------------------------

__global__ void gather(const float* emb, const int* tok, float* x) {  // x[:, t] = emb[:, tok[t]]
  int t = blockIdx.x;
  for (int i = threadIdx.x; i < kDim; i += blockDim.x) x[t * kDim + i] = emb[tok[t] * kDim + i];
}

// (The text's tokens are distinct: each row gets one contribution, whatever the order.)
__global__ void scatterAdd(const float* dx, const int* tok, float* demb) {
  int t = blockIdx.x;
  for (int i = threadIdx.x; i < kDim; i += blockDim.x) atomicAdd(&demb[tok[t] * kDim + i], dx[t * kDim + i]);
}

// The sums of a and of b over the block's (at most 256, a power of two)
// threads, in a fixed order, given to every thread.
__device__ void blockSum2(float& a, float& b) {
  __shared__ float s1[256], s2[256];
  s1[threadIdx.x] = a;
  s2[threadIdx.x] = b;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) s1[threadIdx.x] += s1[threadIdx.x + k], s2[threadIdx.x] += s2[threadIdx.x + k];
    __syncthreads();
  }
  a = s1[0];
  b = s2[0];
  __syncthreads();  // (the next call may overwrite s1, s2)
}

// One block per token (column): mean and variance over d, y = xhat * gamma + beta.
__global__ void layernorm(const float* x, const float* gamma, const float* beta, float* xhat, float* rstd, float* y) {
  int t = blockIdx.x;
  const float* xc = x + t * kDim;
  float a = 0, b = 0;
  for (int i = threadIdx.x; i < kDim; i += blockDim.x) a += xc[i], b += xc[i] * xc[i];
  blockSum2(a, b);
  float mean = a / kDim, var = b / kDim - mean * mean;
  float r = rsqrtf(var + kEps);
  if (threadIdx.x == 0) rstd[t] = r;
  for (int i = threadIdx.x; i < kDim; i += blockDim.x) {
    float h = (xc[i] - mean) * r;
    xhat[t * kDim + i] = h;
    y[t * kDim + i] = h * gamma[i] + beta[i];
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma; each token's share of dgamma
// and dbeta goes to pg and pb (d x T), summed over tokens by rowSums: no float atomics, so the
// step is deterministic (the same bits on every run, whatever order the blocks run in).
__global__ void layernormBack(const float* dy, const float* xhat, const float* rstd, const float* gamma, float* dx,
                              float* pg, float* pb) {
  int t = blockIdx.x;
  float a = 0, b = 0;
  for (int i = threadIdx.x; i < kDim; i += blockDim.x) {
    float g = dy[t * kDim + i] * gamma[i];
    a += g;
    b += g * xhat[t * kDim + i];
    pg[t * kDim + i] = dy[t * kDim + i] * xhat[t * kDim + i];
    pb[t * kDim + i] = dy[t * kDim + i];
  }
  blockSum2(a, b);
  float mg = a / kDim, mgx = b / kDim;
  for (int i = threadIdx.x; i < kDim; i += blockDim.x) {
    float g = dy[t * kDim + i] * gamma[i];
    dx[t * kDim + i] += rstd[t] * (g - mg - xhat[t * kDim + i] * mgx);
  }
}

__device__ float gelu(float a) {  // the tanh approximation
  return 0.5f * a * (1.0f + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)));
}
__device__ float geluGrad(float a) {
  float u = 0.7978845608f * (a + 0.044715f * a * a * a), th = tanhf(u);
  return 0.5f * (1.0f + th) + 0.5f * a * (1.0f - th * th) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * a * a);
}

// a = z + b (per row), g = GELU(a); rows x T.
__global__ void biasGelu(float* a, const float* bias, float* g, int rows) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * kTokens) return;
  float v = a[i] + bias[i % rows];
  a[i] = v;
  g[i] = gelu(v);
}
__global__ void geluBack(const float* a, float* dg, int n) {  // dg becomes da
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dg[i] *= geluGrad(a[i]);
}
// x_next = x + y + b (per row).
__global__ void residual(const float* x, const float* y, const float* bias, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kDim * kTokens) out[i] = x[i] + y[i] + bias[i % kDim];
}
// Bias gradient: the sum over tokens of each row of d (rows x T).
__global__ void rowSums(const float* d, float* out, int rows) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0;
  for (int t = 0; t < kTokens; ++t) s += d[t * rows + r];
  out[r] += s;
}

// Softmax cross-entropy per token (one block each): its loss in loss[t]; dlogits = (softmax - onehot) / T.
__global__ void crossEntropy(float* logits, const int* target, float* loss) {
  __shared__ float s[256];
  int t = blockIdx.x;
  float* z = logits + static_cast<size_t>(t) * kVocab;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < kVocab; i += blockDim.x) m = fmaxf(m, z[i]);
  s[threadIdx.x] = m;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + k]);
    __syncthreads();
  }
  m = s[0];
  __syncthreads();
  float sum = 0;
  for (int i = threadIdx.x; i < kVocab; i += blockDim.x) sum += expf(z[i] - m);
  s[threadIdx.x] = sum;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  float lse = m + logf(s[0]);
  if (threadIdx.x == 0) loss[t] = (lse - z[target[t]]) / kTokens;
  __syncthreads();
  for (int i = threadIdx.x; i < kVocab; i += blockDim.x)
    z[i] = (expf(z[i] - lse) - (i == target[t] ? 1.0f : 0.0f)) / kTokens;
}

__global__ void sumTokens(const float* loss, float* total) {  // in token order
  float s = 0;
  for (int t = 0; t < kTokens; ++t) s += loss[t];
  *total = s;
}

__global__ void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float c1, float c2) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float gi = g[i];
    float mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
  }
}

// ---- the model --------------------------------------------------------------------------

struct Layer {  // offsets into the parameter buffer
  size_t gamma, beta, w1, b1, w2, b2;
};

struct Model {
  size_t emb, head, lnf_gamma, lnf_beta, count = 0;
  Layer layers[kBlocks];
  Model() {
    auto take = [&](size_t n) {
      size_t at = count;
      count += (n + 63) / 64 * 64;  // 256-byte aligned
      return at;
    };
    emb = take(size_t{kVocab} * kDim);
    for (Layer& l : layers) {
      l.gamma = take(kDim);
      l.beta = take(kDim);
      l.w1 = take(size_t{kHidden} * kDim);
      l.b1 = take(kHidden);
      l.w2 = take(size_t{kDim} * kHidden);
      l.b2 = take(kDim);
    }
    lnf_gamma = take(kDim);
    lnf_beta = take(kDim);
    head = take(size_t{kVocab} * kDim);
  }
};

cublasLtHandle_t g_lt;

// C (m x n) = op(A) op(B) + beta C, all column-major fp32: op(A) m x k, op(B) k x n.
void gemm(bool ta, bool tb, int m, int n, int k, const float* A, const float* B, float beta, float* C) {
  cublasLtMatmulDesc_t desc;
  LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
  cublasLtMatrixLayout_t la, lb, lc;
  LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? k : m, ta ? m : k, ta ? k : m));
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, tb ? n : k, tb ? k : n, tb ? n : k));
  LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
  const float one = 1.0f;
  LT(cublasLtMatmul(g_lt, desc, &one, A, la, B, lb, &beta, C, lc, C, lc, nullptr, nullptr, 0, 0));
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
}

int blocksFor(size_t n) { return static_cast<int>((n + 255) / 256); }

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(2, std::atoi(argv[1])) : 4;
  const Model M;
  const size_t D = kDim, H = kHidden, T = kTokens, V = kVocab;
  std::printf("train_step: %zu parameters (%d blocks, d %d, hidden %d, vocab %d), %d tokens, %d steps\n", M.count,
              kBlocks, kDim, kHidden, kVocab, kTokens, steps);
  LT(cublasLtCreate(&g_lt));

  // Parameters: a fixed pseudo-random initialisation (LCG), gammas 1.
  std::vector<float> host(M.count, 0.0f);
  uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
  };
  for (size_t i = 0; i < M.count; ++i) host[i] = 0.04f * rnd();
  for (const Layer& l : M.layers)
    for (size_t i = 0; i < D; ++i) host[l.gamma + i] = 1.0f, host[l.beta + i] = 0.0f;
  for (size_t i = 0; i < D; ++i) host[M.lnf_gamma + i] = 1.0f, host[M.lnf_beta + i] = 0.0f;
  std::vector<int> tokens(T + 1);
  for (size_t t = 0; t <= T; ++t) tokens[t] = static_cast<int>((t * 97 + 13) % V);  // the text: next token is known

  float *p, *g, *m, *v;
  CUDA(cudaMalloc(&p, M.count * 4));
  CUDA(cudaMalloc(&g, M.count * 4));
  CUDA(cudaMalloc(&m, M.count * 4));
  CUDA(cudaMalloc(&v, M.count * 4));
  CUDA(cudaMemcpy(p, host.data(), M.count * 4, cudaMemcpyHostToDevice));
  CUDA(cudaMemset(m, 0, M.count * 4));
  CUDA(cudaMemset(v, 0, M.count * 4));
  int* tok;
  CUDA(cudaMalloc(&tok, (T + 1) * sizeof(int)));
  CUDA(cudaMemcpy(tok, tokens.data(), (T + 1) * sizeof(int), cudaMemcpyHostToDevice));
  const int* input = tok;
  const int* target = tok + 1;

  // Activations saved for the backward pass.
  auto alloc = [](size_t n) {
    float* a;
    CUDA(cudaMalloc(&a, n * 4));
    return a;
  };
  float* x[kBlocks + 1];  // block inputs (and the last block's output)
  float *xhat[kBlocks], *rstd[kBlocks], *ln[kBlocks], *pre[kBlocks], *act[kBlocks];
  for (int b = 0; b <= kBlocks; ++b) x[b] = alloc(D * T);
  for (int b = 0; b < kBlocks; ++b) {
    xhat[b] = alloc(D * T), rstd[b] = alloc(T), ln[b] = alloc(D * T), pre[b] = alloc(H * T), act[b] = alloc(H * T);
  }
  float *fxhat = alloc(D * T), *frstd = alloc(T), *fln = alloc(D * T), *logits = alloc(V * T), *y = alloc(D * T);
  float *dx = alloc(D * T), *dh = alloc(H * T), *dln = alloc(D * T), *losses = alloc(T), *loss = alloc(1);
  float *pg = alloc(D * T), *pb = alloc(D * T);
  // A layernorm's backward pass, its parameters' gradients summed over tokens.
  auto lnBack = [&](const float* dy, const float* xh, const float* rs, size_t gamma, size_t beta) {
    layernormBack<<<T, 256>>>(dy, xh, rs, p + gamma, dx, pg, pb);
    rowSums<<<blocksFor(D), 256>>>(pg, g + gamma, D);
    rowSums<<<blocksFor(D), 256>>>(pb, g + beta, D);
  };

  std::vector<double> times;
  float first_loss = 0, last_loss = 0;
  for (int step = 1; step <= steps; ++step) {
    CUDA(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    CUDA(cudaMemsetAsync(g, 0, M.count * 4));
    // Forward.
    gather<<<T, 128>>>(p + M.emb, input, x[0]);
    for (int b = 0; b < kBlocks; ++b) {
      const Layer& L = M.layers[b];
      layernorm<<<T, 256>>>(x[b], p + L.gamma, p + L.beta, xhat[b], rstd[b], ln[b]);
      gemm(false, false, H, T, D, p + L.w1, ln[b], 0.0f, pre[b]);
      biasGelu<<<blocksFor(H * T), 256>>>(pre[b], p + L.b1, act[b], H);
      gemm(false, false, D, T, H, p + L.w2, act[b], 0.0f, y);
      residual<<<blocksFor(D * T), 256>>>(x[b], y, p + L.b2, x[b + 1]);
    }
    layernorm<<<T, 256>>>(x[kBlocks], p + M.lnf_gamma, p + M.lnf_beta, fxhat, frstd, fln);
    gemm(false, false, V, T, D, p + M.head, fln, 0.0f, logits);
    crossEntropy<<<T, 256>>>(logits, target, losses);  // logits become dlogits
    sumTokens<<<1, 1>>>(losses, loss);
    // Backward.
    gemm(false, true, V, D, T, logits, fln, 1.0f, g + M.head);  // dW_head = dlogits fln^T
    gemm(true, false, D, T, V, p + M.head, logits, 0.0f, dln);  // dfln = W_head^T dlogits
    CUDA(cudaMemsetAsync(dx, 0, D * T * 4));
    lnBack(dln, fxhat, frstd, M.lnf_gamma, M.lnf_beta);
    for (int b = kBlocks - 1; b >= 0; --b) {
      const Layer& L = M.layers[b];
      // dx flows on through the residual; the block's branch gets it too.
      rowSums<<<blocksFor(D), 256>>>(dx, g + L.b2, D);
      gemm(false, true, D, H, T, dx, act[b], 1.0f, g + L.w2);  // dW2 = dy act^T
      gemm(true, false, H, T, D, p + L.w2, dx, 0.0f, dh);       // dact = W2^T dy
      geluBack<<<blocksFor(H * T), 256>>>(pre[b], dh, H * T);
      rowSums<<<blocksFor(H), 256>>>(dh, g + L.b1, H);
      gemm(false, true, H, D, T, dh, ln[b], 1.0f, g + L.w1);    // dW1 = dpre ln^T
      gemm(true, false, D, T, H, p + L.w1, dh, 0.0f, dln);      // dln = W1^T dpre
      lnBack(dln, xhat[b], rstd[b], L.gamma, L.beta);
    }
    scatterAdd<<<T, 128>>>(dx, input, g + M.emb);
    // AdamW on every parameter at once.
    const float lr = 1e-3f;
    adamw<<<1024, 256>>>(p, g, m, v, M.count, lr, 1.0f - std::pow(0.9f, step), 1.0f - std::pow(0.999f, step));
    CUDA(cudaGetLastError());
    float h_loss = 0;
    CUDA(cudaMemcpy(&h_loss, loss, 4, cudaMemcpyDeviceToHost));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("step %d: loss %.9g, %.1f ms\n", step, h_loss, ms);
    if (step == 1) first_loss = h_loss;
    else times.push_back(ms);
    last_loss = h_loss;
  }
  std::sort(times.begin(), times.end());
  std::printf("step_ms: %.1f\n", times[times.size() / 2]);
  cublasLtDestroy(g_lt);
  if (!(last_loss < first_loss) || !std::isfinite(last_loss)) {
    std::printf("FAIL: the loss did not fall (%.4f -> %.4f)\n", first_loss, last_loss);
    return 1;
  }
  return 0;
}
