// A soak client: CALLS mixed CUDA calls (allocations, copies both ways,
// launches, stream and event synchronisation), every result checked against
// a host model. Prints "soak: N calls, E errors, results ok|WRONG".
//
//   soak_client [CALLS]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void addTo(int* p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}

int main(int argc, char** argv) {
  long target = argc > 1 ? std::atol(argv[1]) : 10000;
  const int n = 256;
  long calls = 0, errors = 0;
  bool ok = true;
  auto check = [&](cudaError_t e) {
    ++calls;
    if (e != cudaSuccess) {
      if (errors++ < 5) std::printf("error at call %ld: %s\n", calls, cudaGetErrorName(e));
    }
  };
  cudaStream_t s;
  check(cudaStreamCreate(&s));
  cudaEvent_t ev;
  check(cudaEventCreate(&ev));
  std::vector<int> model(n, 0), host(n);
  int* buf = nullptr;
  check(cudaMalloc(&buf, n * sizeof(int)));
  check(cudaMemsetAsync(buf, 0, n * sizeof(int), s));
  unsigned seed = 12345;
  while (calls < target) {
    seed = seed * 1103515245u + 12345u;
    int op = (seed >> 16) % 10;
    if (op < 4) {  // launch
      int v = static_cast<int>((seed >> 8) % 7) - 3;
      addTo<<<(n + 63) / 64, 64, 0, s>>>(buf, v, n);
      ++calls;
      for (int& m : model) m += v;
    } else if (op < 6) {  // upload a fresh state
      for (int i = 0; i < n; ++i) model[i] = host[i] = static_cast<int>(seed % 1000) + i;
      check(cudaMemcpyAsync(buf, host.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
      check(cudaStreamSynchronize(s));  // host[] is reused: wait for the copy
    } else if (op < 8) {  // download and compare
      check(cudaMemcpyAsync(host.data(), buf, n * sizeof(int), cudaMemcpyDeviceToHost, s));
      check(cudaStreamSynchronize(s));
      for (int i = 0; i < n; ++i) ok = ok && host[i] == model[i];
    } else if (op < 9) {  // an allocation's life
      void* t = nullptr;
      check(cudaMalloc(&t, 4096 + (seed % 65536)));
      check(cudaMemsetAsync(t, 1, 4096, s));
      check(cudaFree(t));
    } else {  // events
      check(cudaEventRecord(ev, s));
      check(cudaEventSynchronize(ev));
    }
  }
  check(cudaMemcpy(host.data(), buf, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) ok = ok && host[i] == model[i];
  check(cudaFree(buf));
  check(cudaEventDestroy(ev));
  check(cudaStreamDestroy(s));
  std::printf("soak: %ld calls, %ld errors, results %s\n", calls, errors, ok ? "ok" : "WRONG");
  return errors == 0 && ok ? 0 : 1;
}
