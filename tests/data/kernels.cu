// Kernels whose parameter layouts the fatbin parser tests check.
struct alignas(16) Vec4 { float x, y, z, w; };
struct Big { char bytes[4000]; };

__global__ void k_vecadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
__global__ void k_small(char c, bool b, short s, float f, double d, long long l, void* p) {
  if (c && b && s && f && d && l) *static_cast<char*>(p) = 1;
}
__global__ void k_vec(Vec4 v, double d, Vec4 w, char c) {
  if (c) *reinterpret_cast<float*>(0) = v.x + w.y + d;
}
__global__ void k_big(int a, Big big, double* out) { out[0] = a + big.bytes[3999]; }
__global__ void k_noparams() {}
template <typename T>
__global__ void k_fill(T* p, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
template __global__ void k_fill<float>(float*, float, int);
template __global__ void k_fill<double>(double*, double, int);
// Module variables and a kernel that calls device malloc through a function
// of its own (common::moduleVariables, common::kernelsCallingMalloc).
__device__ unsigned k_calls;
__constant__ float k_scale[4];
__global__ void k_counted(float* p) {
  atomicAdd(&k_calls, 1u);
  p[0] *= k_scale[0];
}
__device__ __noinline__ void* k_grab(size_t n) { return malloc(n); }
__global__ void k_mallocs(void** out) { *out = k_grab(16); }
