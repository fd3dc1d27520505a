// Test kernel: correct on the GPU, but every call of solve allocates 16 GiB of device memory and never
// frees it, so after a few calls the device is out of memory (plain cudaMalloc: the allocation simply
// fails). When that happens solve writes nothing. kopt must report the candidate as failed and name the
// CUDA error in words (out of memory), not only by number.
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.5f * x[i];
}

extern "C" void solve(const float* x, float* y, int N) {
    void* leaked = nullptr;
    if (cudaMalloc(&leaked, 16ULL << 30) != cudaSuccess) return;  // out of memory: y stays unwritten
    if (N <= 0) return;
    scale_kernel<<<static_cast<unsigned int>((N + 255LL) / 256), 256>>>(x, y, N);
}
