// Kernels compiled at run time (NVRTC, the way JIT code generators and
// kernel-fusion libraries make them) and loaded with the library management
// API: cudaLibraryLoadData with PTX from NVRTC, cudaLibraryLoadFromFile with
// the same PTX from a file, kernels found by name and enumerated, launched
// through cudaLaunchKernel with the cudaKernel_t, a __device__ variable found
// by name and written, cudaFuncGetAttributes on a library kernel, and what
// NVIDIA's runtime refuses (unknown names, a handle after unload).
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

static const char* kSource = R"(
__device__ float factor = 1.0f;
extern "C" __global__ void scale(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= factor;
}
extern "C" __global__ void offset(float* p, int n, float by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += by;
}
)";

// PTX for compute_80, or (cubin) SASS for sm_80 only.
static std::string compile(bool cubin = false) {
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, kSource, "jit.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return "";
  const char* opts[] = {cubin ? "--gpu-architecture=sm_80" : "--gpu-architecture=compute_80"};
  if (nvrtcCompileProgram(prog, 1, opts) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    std::printf("nvrtc: %s\n", log.c_str());
    return "";
  }
  size_t n = 0;
  std::string out;
  if (cubin) {
    nvrtcGetCUBINSize(prog, &n);
    out.resize(n);
    nvrtcGetCUBIN(prog, out.data());
  } else {
    nvrtcGetPTXSize(prog, &n);
    out.resize(n);
    nvrtcGetPTX(prog, out.data());
  }
  nvrtcDestroyProgram(&prog);
  return out;
}

static int run(cudaLibrary_t lib, float f, float by, int n) {
  unsigned count = 0;
  CHECK(cudaLibraryGetKernelCount(&count, lib));
  EXPECT(count == 2);
  cudaKernel_t all[2] = {};
  CHECK(cudaLibraryEnumerateKernels(all, 2, lib));
  cudaKernel_t sc, off;
  CHECK(cudaLibraryGetKernel(&sc, lib, "scale"));
  CHECK(cudaLibraryGetKernel(&off, lib, "offset"));
  EXPECT((all[0] == sc && all[1] == off) || (all[0] == off && all[1] == sc));
  void* factor = nullptr;
  size_t bytes = 0;
  CHECK(cudaLibraryGetGlobal(&factor, &bytes, lib, "factor"));
  EXPECT(factor != nullptr && bytes == sizeof(float));
  CHECK(cudaMemcpy(factor, &f, sizeof f, cudaMemcpyHostToDevice));
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(sc)));
  EXPECT(attr.maxThreadsPerBlock >= 256);

  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = float(i);
  float* d;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  void* a1[] = {&d, &n};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(sc), dim3((n + 255) / 256), dim3(256), a1, 0, 0));
  void* a2[] = {&d, &n, &by};
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((n + 127) / 128);
  cfg.blockDim = dim3(128);
  CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(off), a2));
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == float(i) * f + by);
  CHECK(cudaFree(d));

  cudaKernel_t none;
  EXPECT_ERR(cudaLibraryGetKernel(&none, lib, "missing"), cudaErrorSymbolNotFound);
  EXPECT_ERR(cudaLibraryGetGlobal(&factor, &bytes, lib, "missing"), cudaErrorSymbolNotFound);
  CHECK(cudaLibraryUnload(lib));
  EXPECT_ERR(cudaLaunchKernel(reinterpret_cast<const void*>(sc), dim3(1), dim3(1), a1, 0, 0),
             cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaLibraryGetKernel(&none, lib, "scale"), cudaErrorInvalidResourceHandle);
  return 0;
}

int main() {
  std::string ptx = compile();
  if (ptx.empty()) {
    std::printf("FAILED: NVRTC could not compile the kernels\n");
    return 1;
  }
  cudaLibrary_t lib;
  CHECK(cudaLibraryLoadData(&lib, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  if (run(lib, 3.0f, 0.5f, 1000)) return 1;

  // The same PTX from a file (no NUL of its own).
  char path[] = "/tmp/rgpu-library-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, ptx.data(), std::strlen(ptx.c_str())) < 0) return 1;
  close(fd);
  CHECK(cudaLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0));
  unlink(path);
  if (run(lib, -2.0f, 4.0f, 300)) return 1;

  // SASS for sm_80 only: its kernels are listed, but no device of compute
  // capability 9.0 (nor the sim, which runs PTX) can run them.
  std::string cubin = compile(true);
  EXPECT(cubin.size() > 4 && cubin.compare(0, 4, "\x7f" "ELF") == 0);
  cudaError_t e = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e == cudaSuccess) {
    unsigned count = 0;
    CHECK(cudaLibraryGetKernelCount(&count, lib));
    EXPECT(count == 2);
    cudaKernel_t sc;
    CHECK(cudaLibraryGetKernel(&sc, lib, "scale"));
    float* d = nullptr;
    int n = 1;
    void* args[] = {&d, &n};
    e = cudaLaunchKernel(reinterpret_cast<const void*>(sc), dim3(1), dim3(1), args, 0, 0);
    CHECK(cudaLibraryUnload(lib));
  }
  EXPECT(e == cudaErrorNoKernelImageForDevice);
  (void)cudaGetLastError();

  // Not an image at all; a file that is not there.
  const char junk[] = "this is not a module";
  EXPECT_ERR(cudaLibraryLoadData(&lib, junk, nullptr, nullptr, 0, nullptr, nullptr, 0), cudaErrorInvalidKernelImage);
  EXPECT_ERR(cudaLibraryLoadFromFile(&lib, "/nonexistent/rgpu.ptx", nullptr, nullptr, 0, nullptr, nullptr, 0),
             cudaErrorFileNotFound);
  std::printf("library: NVRTC kernels loaded, launched and unloaded, all checks passed\n");
  return 0;
}
