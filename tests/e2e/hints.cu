// Hints and queries a program may issue unconditionally (profiler markers,
// cache and shared-memory preferences, limits, device flags, stream
// attributes, L2 persistence): each is accepted as NVIDIA's runtime accepts
// it, and a query reports what was set. Then a kernel still runs right.
#include <cuda_occupancy.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "check.h"

__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main() {
  CHECK(cudaProfilerStart());
  CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  unsigned flags = 0;
  CHECK(cudaGetDeviceFlags(&flags));
  EXPECT(flags & cudaDeviceScheduleBlockingSync);
  CHECK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
  CHECK(cudaFuncSetCacheConfig(scale, cudaFuncCachePreferL1));
  CHECK(cudaFuncSetAttribute(scale, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
  CHECK(cudaFuncSetAttribute(scale, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  // Limits: each set is read back.
  const cudaLimit limits[] = {cudaLimitStackSize, cudaLimitMallocHeapSize, cudaLimitDevRuntimePendingLaunchCount,
                              cudaLimitMaxL2FetchGranularity};
  const size_t values[] = {4096, 64 << 20, 4096, 128};
  for (int i = 0; i < 4; ++i) {
    CHECK(cudaDeviceSetLimit(limits[i], values[i]));
    size_t got = 0;
    CHECK(cudaDeviceGetLimit(&got, limits[i]));
    EXPECT(got == values[i]);
  }
  // L2 persistence, as NVIDIA's programming guide sets it up.
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  EXPECT(prop.accessPolicyMaxWindowSize > 0 && prop.persistingL2CacheMaxSize > 0);
  CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, prop.persistingL2CacheMaxSize));
  const int n = 1 << 16;
  float* d = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  cudaStream_t s, t;
  CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, 0));
  CHECK(cudaStreamCreate(&t));
  cudaStreamAttrValue window = {};
  window.accessPolicyWindow.base_ptr = d;
  window.accessPolicyWindow.num_bytes = n * sizeof(float);
  window.accessPolicyWindow.hitRatio = 0.6f;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &window));
  cudaStreamAttrValue back = {};
  CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &back));
  EXPECT(back.accessPolicyWindow.base_ptr == d && back.accessPolicyWindow.hitRatio == 0.6f &&
         back.accessPolicyWindow.num_bytes == n * sizeof(float));
  cudaStreamAttrValue sync = {};
  sync.syncPolicy = cudaSyncPolicySpin;
  CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &sync));
  cudaStreamAttrValue prio = {};
  prio.priority = -3;
  CHECK(cudaStreamSetAttribute(s, cudaLaunchAttributePriority, &prio));
  int p = 0;
  CHECK(cudaStreamGetPriority(s, &p));
  EXPECT(p == -3);
  CHECK(cudaStreamCopyAttributes(t, s));
  CHECK(cudaStreamGetAttribute(t, cudaStreamAttributeSynchronizationPolicy, &back));
  EXPECT(back.syncPolicy == cudaSyncPolicySpin);
  // What NVIDIA's runtime refuses, so does rgpu: a window past the device's maximum, a bad ratio.
  window.accessPolicyWindow.num_bytes = static_cast<size_t>(prop.accessPolicyMaxWindowSize) + 1;
  EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &window) == cudaErrorInvalidValue);
  window.accessPolicyWindow.num_bytes = 4096;
  window.accessPolicyWindow.hitRatio = 1.5f;
  EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &window) == cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);  // as on a GPU, the refusal is the thread's last error
  EXPECT(cudaGetLastError() == cudaSuccess);
  unsigned long long id_s = 0, id_t = 0, id_0 = 1;
  CHECK(cudaStreamGetId(s, &id_s));
  CHECK(cudaStreamGetId(t, &id_t));
  CHECK(cudaStreamGetId(0, &id_0));
  EXPECT(id_s != id_t && id_s != id_0 && id_t != id_0);
  // Occupancy queries, as NVIDIA's calculator answers them.
  size_t avail = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, scale, 2, 256));
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, scale));
  cudaOccDeviceProp occ_prop(prop);
  cudaOccFuncAttributes occ_attr(fa);
  cudaOccDeviceState occ_state;
  size_t want = 0;
  EXPECT(cudaOccAvailableDynamicSMemPerBlock(&want, &occ_prop, &occ_attr, &occ_state, 2, 256) == CUDA_OCC_SUCCESS);
  EXPECT(avail == want && avail > 0 && avail <= prop.sharedMemPerBlockOptin);
  // The work itself.
  float h[n];
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i);
  CHECK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, s));
  scale<<<n / 256, 256, 0, s>>>(d, 2.0f, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 2.0f * i);
  // The kernel's handles (library management) stand for it wherever a function is taken.
  cudaKernel_t kernel = nullptr;
  CHECK(cudaGetKernel(&kernel, scale));
  cudaFunction_t function = nullptr;
  CHECK(cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(scale)));
  EXPECT(kernel != nullptr && function != nullptr);
  CHECK(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024, 0));
  cudaFuncAttributes ka;
  CHECK(cudaFuncGetAttributes(&ka, reinterpret_cast<const void*>(kernel)));
  EXPECT(ka.maxDynamicSharedSizeBytes == 64 * 1024);
  float two = 0.5f;
  int count = n;
  void* args[] = {&d, &two, &count};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(n / 256), dim3(256), args, 64 * 1024, s));
  CHECK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == static_cast<float>(i));
  window.accessPolicyWindow.num_bytes = 0;  // reset the window, then the persisting lines
  window.accessPolicyWindow.hitRatio = 0.0f;
  CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &window));
  CHECK(cudaCtxResetPersistingL2Cache());
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(t));
  CHECK(cudaFree(d));
  CHECK(cudaProfilerStop());
  std::printf("hints: all checks passed\n");
  return 0;
}
