// A solve that launches three kernels in a row: y = ((2 x) + 1) * 3, through a scratch buffer.
// kopt's profile of it must show three kernels in the range and their duration-weighted aggregate.
#include <cuda_runtime.h>

__global__ void double_it(const float* __restrict__ x, float* __restrict__ t, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) t[i] = 2.0f * x[i];
}

__global__ void add_one(float* __restrict__ t, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) t[i] += 1.0f;
}

__global__ void triple_into(const float* __restrict__ t, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 3.0f * t[i];
}

extern "C" void solve(const float* x, float* y, int N) {
  static float* scratch = nullptr;  // grows once; never freed (lives as long as the library)
  static int capacity = 0;
  if (N > capacity) {
    if (scratch) cudaFree(scratch);
    cudaMalloc(&scratch, sizeof(float) * N);
    capacity = N;
  }
  int blocks = (N + 255) / 256;
  double_it<<<blocks, 256>>>(x, scratch, N);
  add_one<<<blocks, 256>>>(scratch, N);
  triple_into<<<blocks, 256>>>(scratch, y, N);
}
