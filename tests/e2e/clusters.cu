// Thread-block clusters (sm_90) as programs use them through cooperative
// groups: a kernel with __cluster_dims__ exchanging shared memory around its
// cluster (distributed shared memory), a kernel launched with a cluster
// dimension through cudaLaunchKernelEx reducing its blocks' partial sums in
// rank 0's shared memory, the occupancy queries, and the launch errors
// NVIDIA's runtime gives for clusters that do not fit.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "check.h"

namespace cg = cooperative_groups;

constexpr int kThreads = 64;

// Each block writes its values; after cluster.sync() it reads those of the next rank.
__global__ void __cluster_dims__(2, 1, 1) ring(int* out) {
  __shared__ int mine[kThreads];
  cg::cluster_group cluster = cg::this_cluster();
  unsigned rank = cluster.block_rank();
  mine[threadIdx.x] = int(blockIdx.x) * 1000 + int(threadIdx.x);
  cluster.sync();
  const int* next = cluster.map_shared_rank(mine, (rank + 1) % cluster.num_blocks());
  out[blockIdx.x * kThreads + threadIdx.x] = next[threadIdx.x] + int(cluster.dim_blocks().x) * 1000000;
  cluster.sync();  // no block leaves while another still reads its shared memory
}

// Partial sums of each block, added up in the shared memory of the cluster's rank 0.
__global__ void clusterSum(const int* in, int* sums) {
  __shared__ int partial;
  __shared__ int total;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) partial = 0, total = 0;
  __syncthreads();
  atomicAdd(&partial, in[blockIdx.x * blockDim.x + threadIdx.x]);
  cluster.sync();
  if (threadIdx.x == 0) atomicAdd(cluster.map_shared_rank(&total, 0), partial);
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) sums[blockIdx.x / cluster.num_blocks()] = total;
  cluster.sync();
}

// Programmatic dependent launch: the primary lets its dependents start, the
// dependent waits for the primary's memory before it reads it.
__global__ void primary(int* data) {
  data[blockIdx.x * blockDim.x + threadIdx.x] = int(blockIdx.x * blockDim.x + threadIdx.x) * 3;
  cudaTriggerProgrammaticLaunchCompletion();
}
__global__ void dependent(const int* data, int* out) {
  cudaGridDependencySynchronize();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = data[i] + 1;
}

static int programmaticLaunch() {
  constexpr int n = 4 * kThreads;
  int *data, *out;
  CHECK(cudaMalloc(&data, n * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t prog, done;
  CHECK(cudaEventCreateWithFlags(&prog, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(4);
  config.blockDim = dim3(kThreads);
  config.stream = s;
  cudaLaunchAttribute attrs[3];
  attrs[0].id = cudaLaunchAttributeProgrammaticEvent;
  attrs[0].val.programmaticEvent.event = prog;
  attrs[0].val.programmaticEvent.flags = 0;
  attrs[0].val.programmaticEvent.triggerAtBlockStart = 0;
  attrs[1].id = cudaLaunchAttributeMemSyncDomain;
  attrs[1].val.memSyncDomain = cudaLaunchMemSyncDomainRemote;
  config.attrs = attrs;
  config.numAttrs = 2;
  CHECK(cudaLaunchKernelEx(&config, primary, data));
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeLaunchCompletionEvent;
  attrs[1].val.launchCompletionEvent.event = done;
  attrs[1].val.launchCompletionEvent.flags = 0;
  attrs[2].id = cudaLaunchAttributeSynchronizationPolicy;
  attrs[2].val.syncPolicy = cudaSyncPolicyYield;
  config.numAttrs = 3;
  CHECK(cudaLaunchKernelEx(&config, dependent, (const int*)data, out));
  CHECK(cudaEventSynchronize(prog));
  CHECK(cudaEventSynchronize(done));
  std::vector<int> h(n);
  CHECK(cudaMemcpyAsync(h.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == i * 3 + 1);
  // Graph nodes that other devices update from kernels: not offered.
  attrs[0].id = cudaLaunchAttributeDeviceUpdatableKernelNode;
  attrs[0].val.deviceUpdatableKernelNode.deviceUpdatable = 1;
  config.numAttrs = 1;
  EXPECT_ERR(cudaLaunchKernelEx(&config, dependent, (const int*)data, out), cudaErrorNotSupported);
  (void)cudaGetLastError();
  CHECK(cudaStreamDestroy(s));
  return 0;
}

int main() {
  int cluster_attr = 0;
  CHECK(cudaDeviceGetAttribute(&cluster_attr, cudaDevAttrClusterLaunch, 0));
  EXPECT(cluster_attr == 1);

  // __cluster_dims__ with <<<>>>.
  constexpr int kBlocks = 8;
  int* out;
  CHECK(cudaMalloc(&out, kBlocks * kThreads * sizeof(int)));
  ring<<<kBlocks, kThreads>>>(out);
  CHECK(cudaGetLastError());
  std::vector<int> h(kBlocks * kThreads);
  CHECK(cudaMemcpy(h.data(), out, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < kBlocks; ++b)
    for (int t = 0; t < kThreads; ++t) {
      int next = b / 2 * 2 + (b % 2 + 1) % 2;
      EXPECT(h[b * kThreads + t] == next * 1000 + t + 2000000);
    }
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, ring));
  EXPECT(fa.requiredClusterWidth == 2 && fa.requiredClusterHeight == 1 && fa.requiredClusterDepth == 1);
  // Its grid must be a whole number of its clusters; another cluster size is refused.
  EXPECT_ERR((ring<<<3, kThreads>>>(out), cudaGetLastError()), cudaErrorInvalidClusterSize);

  // A cluster dimension given at launch.
  constexpr int kSumBlocks = 12, kCluster = 4;
  std::vector<int> values(kSumBlocks * kThreads);
  for (size_t i = 0; i < values.size(); ++i) values[i] = int(i % 97) - 40;
  int *in, *sums;
  CHECK(cudaMalloc(&in, values.size() * sizeof(int)));
  CHECK(cudaMalloc(&sums, kSumBlocks / kCluster * sizeof(int)));
  CHECK(cudaMemcpy(in, values.data(), values.size() * sizeof(int), cudaMemcpyHostToDevice));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kSumBlocks);
  config.blockDim = dim3(kThreads);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, clusterSum, (const int*)in, sums));
  std::vector<int> got(kSumBlocks / kCluster);
  CHECK(cudaMemcpy(got.data(), sums, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int c = 0; c < kSumBlocks / kCluster; ++c) {
    int want = 0;
    for (int i = c * kCluster * kThreads; i < (c + 1) * kCluster * kThreads; ++i) want += values[i];
    EXPECT(got[c] == want);
  }
  int active = 0, potential = 0;
  CHECK(cudaOccupancyMaxActiveClusters(&active, clusterSum, &config));
  CHECK(cudaOccupancyMaxPotentialClusterSize(&potential, clusterSum, &config));
  EXPECT(active >= 1);
  EXPECT(potential == 8);
  // Clusters that do not fit: a grid that is not a whole number of them, more than 8 blocks.
  config.gridDim = dim3(10);
  EXPECT_ERR(cudaLaunchKernelEx(&config, clusterSum, (const int*)in, sums), cudaErrorInvalidClusterSize);
  config.gridDim = dim3(32);
  attr[0].val.clusterDim.x = 16;
  EXPECT_ERR(cudaLaunchKernelEx(&config, clusterSum, (const int*)in, sums), cudaErrorInvalidClusterSize);
  // Up to 16 where the kernel allows non-portable sizes.
  CHECK(cudaFuncSetAttribute(clusterSum, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int* in32;
  CHECK(cudaMalloc(&in32, 32 * kThreads * sizeof(int)));
  CHECK(cudaMemset(in32, 0, 32 * kThreads * sizeof(int)));
  CHECK(cudaLaunchKernelEx(&config, clusterSum, (const int*)in32, sums));
  CHECK(cudaDeviceSynchronize());
  if (programmaticLaunch()) return 1;
  std::printf("clusters: distributed shared memory, cluster barriers, cluster launches: all checks passed\n");
  return 0;
}
